//! Message shapes: a log message with its variable parts masked.
//!
//! One left-to-right pass over the bytes, no regular expressions:
//!
//! 1. ASCII whitespace and control characters (`0x00..=0x20`, `0x7f`) separate
//!    tokens; every run of them becomes one space, and leading and trailing
//!    runs are dropped. The shape is therefore one line with no character that
//!    JSON must escape as `\uXXXX`.
//! 2. The delimiters `, ; ( ) [ ] { } " ' < > = |` and the backtick are kept
//!    and also end a token.
//! 3. A token without an ASCII digit is kept as it is. Otherwise trailing
//!    `. : ! ?` are set aside (sentence punctuation) and the rest is masked:
//!    - a UUID (`8-4-4-4-12` hex digits) becomes `<uuid>`;
//!    - an IPv6 address (hex digits, `:` and `.`, with `::` or seven `:`)
//!      becomes `<ip>`;
//!    - otherwise the token is split at `:` `/` `@` `#`, and each part is
//!      masked on its own: a UUID becomes `<uuid>`; an IPv4 address
//!      (`a.b.c.d`, 1 to 3 digits each) becomes `<ip>`; `0x` followed by hex digits becomes `<hex>`; a number
//!      (`12`, `12.5`) becomes `<num>`, and keeps a unit that follows it
//!      (`512MiB` -> `<num>MiB`, `4.2%` -> `<num>%`) unless the unit is a
//!      duration (`ns us µs ms s sec secs m min mins h hr hrs d`), which makes
//!      the whole of it `<duration>` (`30000ms`, `1.5s`);
//!    - any other part with a digit is split at `-` `_` `.`, and each segment
//!      with a digit becomes `<num>`/`<duration>` (a number, as above),
//!      `<hex>` (six or more hex digits: commit ids, pointers, pod hashes) or
//!      `<id>` (anything else, such as `v1` or `x2k4q`).
//!
//! So `HikariPool-1 - Connection is not available, request timed out after
//! 30000ms.` becomes `HikariPool-<num> - Connection is not available, request
//! timed out after <duration>.`, and `pod order-service-7d9f8b-x2k4q on
//! 10.0.3.17:5432` becomes `pod order-service-<hex>-<id> on <ip>:<num>`.

/// Placeholder of a UUID.
pub const UUID: &str = "<uuid>";
/// Placeholder of an IPv4 or IPv6 address.
pub const IP: &str = "<ip>";
/// Placeholder of a hex number or a hex id.
pub const HEX: &str = "<hex>";
/// Placeholder of a number.
pub const NUM: &str = "<num>";
/// Placeholder of a number with a duration unit.
pub const DURATION: &str = "<duration>";
/// Placeholder of any other identifier that holds digits.
pub const ID: &str = "<id>";

const fn is_delimiter(b: u8) -> bool {
    matches!(
        b,
        b',' | b';'
            | b'('
            | b')'
            | b'['
            | b']'
            | b'{'
            | b'}'
            | b'"'
            | b'\''
            | b'<'
            | b'>'
            | b'='
            | b'|'
            | b'`'
    )
}

const SPACE: u8 = 1;
const DELIMITER: u8 = 2;
const DIGIT: u8 = 4;

/// Byte classes: whitespace or control, delimiter, ASCII digit, or 0 for
/// any other token byte (including every byte of a multi-byte character).
static CLASS: [u8; 256] = {
    let mut table = [0_u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        table[i] = if b <= b' ' || b == 0x7f {
            SPACE
        } else if is_delimiter(b) {
            DELIMITER
        } else if b.is_ascii_digit() {
            DIGIT
        } else {
            0
        };
        i += 1;
    }
    table
};

fn has_digit(text: &str) -> bool {
    text.bytes().any(|b| b.is_ascii_digit())
}

/// Replaces the content of `out` with the shape of `message`. Stops early
/// once `out` holds more than `stop_after` bytes (the caller cuts to its
/// bound anyway).
pub fn mask_into(message: &str, out: &mut String, stop_after: usize) {
    out.clear();
    let bytes = message.as_bytes();
    let n = bytes.len();
    // `message[kept..i]` is pending text that the shape keeps verbatim; it is
    // copied in one piece when something has to change.
    let mut kept = 0;
    let mut i = 0;
    while i < n {
        if out.len() + (i - kept) > stop_after {
            break;
        }
        let class = CLASS[usize::from(bytes[i])];
        if class == SPACE {
            let start = i;
            while i < n && CLASS[usize::from(bytes[i])] == SPACE {
                i += 1;
            }
            // One plain space between text stays as it is; any other run is
            // rewritten (collapsed, or dropped at the start and the end).
            if i - start == 1 && bytes[start] == b' ' && start > 0 && i < n {
                continue;
            }
            out.push_str(&message[kept..start]);
            if !out.is_empty() && i < n {
                out.push(' ');
            }
            kept = i;
        } else if class == DELIMITER {
            i += 1;
        } else {
            let start = i;
            let mut digits = false;
            while i < n {
                let class = CLASS[usize::from(bytes[i])];
                if class & (SPACE | DELIMITER) != 0 {
                    break;
                }
                digits |= class == DIGIT;
                i += 1;
            }
            if digits {
                // Token ends are ASCII bytes (or the end), so char boundaries.
                out.push_str(&message[kept..start]);
                mask_token(&message[start..i], out);
                kept = i;
            }
        }
    }
    out.push_str(&message[kept..i]);
}

/// The shape of `message` as a new string (no early stop).
#[must_use]
pub fn mask(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    mask_into(message, &mut out, usize::MAX);
    out
}

fn mask_token(token: &str, out: &mut String) {
    let core = token.trim_end_matches(['.', ':', '!', '?']);
    let tail = &token[core.len()..];
    if is_uuid(core) {
        out.push_str(UUID);
    } else if is_ipv6(core) {
        out.push_str(IP);
    } else {
        split_keeping(
            core,
            |b| matches!(b, b'/' | b':' | b'@' | b'#'),
            out,
            mask_part,
        );
    }
    out.push_str(tail);
}

fn mask_part(part: &str, out: &mut String) {
    if !has_digit(part) {
        out.push_str(part);
    } else if is_uuid(part) {
        out.push_str(UUID);
    } else if is_ipv4(part) {
        out.push_str(IP);
    } else if is_0x_hex(part) {
        out.push_str(HEX);
    } else if !mask_number(part, out) {
        split_keeping(part, |b| matches!(b, b'-' | b'_' | b'.'), out, mask_segment);
    }
}

fn mask_segment(segment: &str, out: &mut String) {
    if !has_digit(segment) {
        out.push_str(segment);
    } else if !mask_number(segment, out) {
        let hex = segment.len() >= 6 && segment.bytes().all(|b| b.is_ascii_hexdigit());
        out.push_str(if hex { HEX } else { ID });
    }
}

/// Calls `piece` for each piece of `text` between ASCII separators, and keeps
/// the separators themselves.
fn split_keeping(
    text: &str,
    is_separator: impl Fn(u8) -> bool,
    out: &mut String,
    piece: fn(&str, &mut String),
) {
    let mut start = 0;
    for (i, b) in text.bytes().enumerate() {
        if is_separator(b) {
            // ASCII separators sit on char boundaries.
            piece(&text[start..i], out);
            out.push(char::from(b));
            start = i + 1;
        }
    }
    piece(&text[start..], out);
}

/// `digits[.digits][unit]`: writes `<duration>` or `<num>` + unit and returns
/// true; returns false (writing nothing) for anything else.
fn mask_number(text: &str, out: &mut String) -> bool {
    let b = text.as_bytes();
    let mut i = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if i == 0 {
        return false;
    }
    if i < b.len() && b[i] == b'.' {
        let fraction = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if fraction == 0 {
            return false;
        }
        i += 1 + fraction;
    }
    let unit = &text[i..];
    if is_duration_unit(unit) {
        out.push_str(DURATION);
        true
    } else if unit.bytes().all(|c| c.is_ascii_alphabetic() || c == b'%') {
        out.push_str(NUM);
        out.push_str(unit);
        true
    } else {
        false
    }
}

fn is_duration_unit(unit: &str) -> bool {
    // Byte patterns by length: string equality would call `memcmp` for every
    // number token.
    match *unit.as_bytes() {
        [b's' | b'm' | b'h' | b'd'] => true,
        [b'n' | b'u' | b'm', b's'] | [b'h', b'r'] => true,
        [0xc2, 0xb5, b's'] => true, // µs
        [b's', b'e', b'c'] | [b'm', b'i', b'n'] | [b'h', b'r', b's'] => true,
        [b's', b'e', b'c', b's'] | [b'm', b'i', b'n', b's'] => true,
        _ => false,
    }
}

fn is_uuid(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

fn is_ipv4(text: &str) -> bool {
    let mut groups = 0;
    for group in text.split('.') {
        groups += 1;
        if group.is_empty() || group.len() > 3 || !group.bytes().all(|c| c.is_ascii_digit()) {
            return false;
        }
    }
    groups == 4
}

fn is_ipv6(text: &str) -> bool {
    let colons = text.bytes().filter(|c| *c == b':').count();
    (text.contains("::") || colons == 7)
        && colons >= 2
        && text
            .bytes()
            .all(|c| c.is_ascii_hexdigit() || c == b':' || c == b'.')
        && text.bytes().any(|c| c.is_ascii_hexdigit())
}

fn is_0x_hex(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() > 2
        && b[0] == b'0'
        && (b[1] == b'x' || b[1] == b'X')
        && b[2..].iter().all(u8::is_ascii_hexdigit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_variable_parts() {
        let cases = [
            (
                "HikariPool-1 - Connection is not available, request timed out after 30000ms.",
                "HikariPool-<num> - Connection is not available, request timed out after <duration>.",
            ),
            (
                "pod order-service-7d9f8b-x2k4q on 10.0.3.17:5432",
                "pod order-service-<hex>-<id> on <ip>:<num>",
            ),
            (
                "request_id=8f14e45f-ceea-467f-a0e6-1b2c3d4e5f60 took 1.5s",
                "request_id=<uuid> took <duration>",
            ),
            (
                "user:8F14E45F-CEEA-467F-A0E6-1B2C3D4E5F60/session",
                "user:<uuid>/session",
            ),
            (
                "Killed process 23144 (java) total-vm:8123456kB, UID:1000 oom_score_adj:937",
                "Killed process <num> (java) total-vm:<num>kB, UID:<num> oom_score_adj:<num>",
            ),
            (
                "nodefs available 4.2% (threshold 10%)",
                "nodefs available <num>% (threshold <num>%)",
            ),
            (
                "GET http://order-service:8080/api/v1/orders/88123 (attempt 2/3)",
                "GET http://order-service:<num>/api/<id>/orders/<num> (attempt <num>/<num>)",
            ),
            (
                "ConnectionImpl@5b1f3c2a at 0x7ffd5e8c peer fe80::1ff:fe23:4567:890a",
                "ConnectionImpl@<hex> at <hex> peer <ip>",
            ),
            (
                "  many \t\n spaces\u{1}and\u{7f}controls  ",
                "many spaces and controls",
            ),
            (
                "Query_time: 12.482 Rows_examined: 1834220",
                "Query_time: <num> Rows_examined: <num>",
            ),
            ("no digits at all: fine.", "no digits at all: fine."),
            ("é 中文 42 😀", "é 中文 <num> 😀"),
            ("at 12:30:01 and -5", "at <num>:<num>:<num> and -<num>"),
            ("", ""),
        ];
        for (message, shape) in cases {
            assert_eq!(mask(message), shape, "{message:?}");
        }
    }

    #[test]
    fn equal_shapes_for_differing_values() {
        assert_eq!(
            mask("Failed to create order 88123 after 30000ms on http-nio-8080-exec-7"),
            mask("Failed to create order 90211 after 15000ms on http-nio-8080-exec-12")
        );
    }

    #[test]
    fn stops_early() {
        let long = "word ".repeat(1000);
        let mut out = String::new();
        mask_into(&long, &mut out, 10);
        assert!(out.len() > 10 && out.len() < 20, "{}", out.len());
    }
}
