//! The scope normalizer of `query_mysql`: what counts as the same query.
//!
//! Two requests have the same scope when they have
//! - the same `data_source`, exactly (names are matched exactly when the
//!   executor looks them up, so no trimming or case folding here);
//! - the same SQL after [`normalize_sql`]: runs of whitespace outside string
//!   literals, quoted identifiers and comments collapsed to one space, leading
//!   and trailing whitespace and trailing semicolons removed. Literals
//!   (`'...'`, `"..."`, `` `...` ``) and comments are kept byte for byte, and
//!   the line break that ends a `--` or `#` comment is kept, so the scope never
//!   merges statements that differ in meaning. Keyword case is not folded
//!   (identifiers may be case-sensitive);
//! - the same `params`, in order, as given (`1` and `1.0` differ).

use aci_contracts::QueryMysqlRequest;
use serde_json::{Value, json};

/// The normalized scope of a request, for duplicate detection and replay.
#[must_use]
pub fn query_mysql_scope(request: &QueryMysqlRequest) -> Value {
    json!({
        "data_source": request.data_source,
        "sql": normalize_sql(&request.sql),
        "params": request.params,
    })
}

/// MySQL's whitespace characters.
const fn is_sql_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\u{0B}' | '\u{0C}')
}

/// Collapses whitespace outside literals and comments; see the module docs.
#[must_use]
pub fn normalize_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    let mut pending_space = false;
    // Right after the newline that ends a line comment, whitespace is dropped:
    // the newline already separates.
    let mut after_line_comment = false;
    while let Some(c) = chars.next() {
        if is_sql_whitespace(c) {
            pending_space = !out.is_empty() && !after_line_comment;
            continue;
        }
        if pending_space {
            out.push(' ');
            pending_space = false;
        }
        after_line_comment = false;
        match c {
            '\'' | '"' | '`' => {
                out.push(c);
                while let Some(inner) = chars.next() {
                    out.push(inner);
                    if inner == '\\' && c != '`' {
                        if let Some(escaped) = chars.next() {
                            out.push(escaped);
                        }
                    } else if inner == c {
                        if chars.peek() == Some(&c) {
                            // A doubled quote stays inside the literal.
                            if let Some(doubled) = chars.next() {
                                out.push(doubled);
                            }
                        } else {
                            break;
                        }
                    }
                }
            }
            '#' => after_line_comment = copy_line_comment(&mut out, c, &mut chars),
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                if let Some(dash) = chars.next() {
                    // MySQL needs whitespace or a control character after `--`.
                    if chars
                        .peek()
                        .is_none_or(|next| next.is_control() || *next == ' ')
                    {
                        after_line_comment = copy_line_comment(&mut out, dash, &mut chars);
                    } else {
                        out.push(dash);
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                out.push(c);
                if let Some(star) = chars.next() {
                    out.push(star);
                }
                let mut previous = None;
                for inner in chars.by_ref() {
                    out.push(inner);
                    if previous == Some('*') && inner == '/' {
                        break;
                    }
                    previous = Some(inner);
                }
            }
            _ => out.push(c),
        }
    }
    while out.ends_with(';') || out.ends_with(is_sql_whitespace) {
        out.pop();
    }
    out
}

/// Copies a line comment starting with `first`, up to and including its line
/// break. Returns whether it ended with a line break.
fn copy_line_comment(
    out: &mut String,
    first: char,
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
) -> bool {
    out.push(first);
    for c in chars.by_ref() {
        out.push(c);
        if c == '\n' {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use aci_contracts::SqlValue;

    #[test]
    fn whitespace_collapses_outside_literals_and_comments() {
        for (input, expected) in [
            ("  SELECT   a,\n\tb  FROM t ;  ", "SELECT a, b FROM t"),
            ("SELECT 'a   b' ,  \"c  d\"", "SELECT 'a   b' , \"c  d\""),
            ("SELECT `my   col` FROM t", "SELECT `my   col` FROM t"),
            ("SELECT 'it''s   ok'   x", "SELECT 'it''s   ok' x"),
            ("SELECT 'a\\'   b'   x", "SELECT 'a\\'   b' x"),
            ("SELECT 1 -- a   note\n   , 2", "SELECT 1 -- a   note\n, 2"),
            ("SELECT 1 # note\n  ,2", "SELECT 1 # note\n,2"),
            ("SELECT 1 /* a   b */   + 2", "SELECT 1 /* a   b */ + 2"),
            ("SELECT 1--1", "SELECT 1--1"),
            ("SELECT 1;;", "SELECT 1"),
            ("SELECT /*/  x  */ 1", "SELECT /*/  x  */ 1"),
        ] {
            assert_eq!(normalize_sql(input), expected, "{input:?}");
        }
    }

    #[test]
    fn statements_that_differ_in_meaning_keep_different_scopes() {
        let a = normalize_sql("SELECT 1 -- x\n, 2");
        let b = normalize_sql("SELECT 1 -- x , 2");
        assert_ne!(a, b);
        assert_ne!(
            normalize_sql("SELECT 'a  b'"),
            normalize_sql("SELECT 'a b'")
        );
    }

    #[test]
    fn scope_has_data_source_sql_and_params() {
        let request = QueryMysqlRequest {
            data_source: "orders".into(),
            sql: " SELECT  * FROM o WHERE id = ? ".into(),
            params: vec![SqlValue::Int(7)],
        };
        assert_eq!(
            query_mysql_scope(&request),
            json!({"data_source": "orders", "sql": "SELECT * FROM o WHERE id = ?", "params": [7]})
        );
    }
}
