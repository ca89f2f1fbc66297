//! URL redaction, in two strengths named for what they are for.
//!
//! - [`connection_url`]: the URL of a store or database (`mysql://`,
//!   `redis://`, `rediss://`, ...). Its credentials, host and port describe
//!   the infrastructure, so none of them is ever shown: only the scheme and
//!   the path (database name, index) remain, for an operator's `Debug` line
//!   or a test's panic message. Nothing agent-facing carries even that.
//! - [`link`]: the address of a document that is itself evidence (a runbook's
//!   URL a citation points to). The model is meant to see where the evidence
//!   came from, so the host and path stay; what may carry credentials goes:
//!   the userinfo (`user:password@`) and the query string (tokens, signatures
//!   of presigned links).

use std::borrow::Cow;

/// What [`connection_url`] shows in place of the authority.
pub const REDACTED: &str = "***";

/// What [`connection_url`] returns for text that is not `scheme://...`.
pub const UNPARSABLE: &str = "<unparsable url>";

/// Splits `scheme://rest` when `scheme` is a URL scheme (RFC 3986: a letter,
/// then letters, digits, `+ - .`).
fn split_scheme(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let is_scheme = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    is_scheme.then_some((scheme, rest))
}

/// A connection URL with its authority (user, password, host, port), query
/// string and fragment replaced or removed: `scheme://***/path`.
/// [`UNPARSABLE`] when `url` is not `scheme://...`.
#[must_use]
pub fn connection_url(url: &str) -> String {
    let Some((scheme, rest)) = split_scheme(url) else {
        return UNPARSABLE.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let after = &rest[authority_end..];
    let path_end = after.find(['?', '#']).unwrap_or(after.len());
    format!("{scheme}://{REDACTED}{}", &after[..path_end])
}

/// A document link without the parts that may carry credentials: userinfo
/// and the query string. Scheme, host, port, path and fragment stay. Anything
/// that is not `scheme://...` (a relative path) is returned unchanged.
#[must_use]
pub fn link(source: &str) -> Cow<'_, str> {
    let Some((scheme, rest)) = split_scheme(source) else {
        return Cow::Borrowed(source);
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host = authority
        .rfind('@')
        .map_or(authority, |at| &authority[at + 1..]);
    let after = &rest[authority_end..];
    let (path, fragment) = after
        .find('#')
        .map_or((after, ""), |hash| after.split_at(hash));
    let path = path.find('?').map_or(path, |question| &path[..question]);
    if host.len() == authority.len() && path.len() + fragment.len() == after.len() {
        return Cow::Borrowed(source);
    }
    Cow::Owned(format!("{scheme}://{host}{path}{fragment}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_urls_show_neither_credentials_nor_host() {
        let cases = [
            (
                "mysql://reader:s3cr3t-pw@db.example:3307/shop?require_ssl=true",
                "mysql://***/shop",
            ),
            ("mysql://h/db", "mysql://***/db"),
            ("redis://:pw@10.0.0.7:6379/0", "redis://***/0"),
            ("rediss://user:pw@cache.internal", "rediss://***"),
            (
                "redis+cluster://a:1,b:2/?password=x",
                "redis+cluster://***/",
            ),
            ("mysql://u:p@h/db#frag", "mysql://***/db"),
            ("not a url at all", UNPARSABLE),
            ("://x@y", UNPARSABLE),
        ];
        for (url, shown) in cases {
            let redacted = connection_url(url);
            assert_eq!(redacted, shown, "{url}");
            for secret in ["s3cr3t", "pw", "db.example", "3307", "10.0.0.7", "cache"] {
                assert!(!redacted.contains(secret), "{url} -> {redacted}");
            }
        }
    }

    #[test]
    fn links_lose_userinfo_and_query() {
        assert_eq!(link("runbooks/db.md"), "runbooks/db.md");
        assert_eq!(
            link("https://wiki.example.com/runbooks/db#pool"),
            "https://wiki.example.com/runbooks/db#pool"
        );
        assert_eq!(
            link("https://bob:s3cret@wiki.example.com/db?token=abc#pool"),
            "https://wiki.example.com/db#pool"
        );
        assert_eq!(
            link("s3://bucket/kb/db.md?X-Amz-Signature=deadbeef"),
            "s3://bucket/kb/db.md"
        );
        assert_eq!(link("https://u@host?x=1"), "https://host");
        assert_eq!(link("not a url: ://x@y"), "not a url: ://x@y");
        assert!(matches!(link("https://host/a#b"), Cow::Borrowed(_)));
    }
}
