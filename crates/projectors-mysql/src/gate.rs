//! The SQL gate: only one read-only query gets through.
//!
//! The gate is the first of several defenses (see the crate docs and
//! `DOCS.md`): the server-side read-only transaction, the least-privilege
//! account and the statement time limit still hold if a statement slips
//! through a difference between this parser and the server's.
//!
//! Rules, checked in this order:
//! 1. Not empty.
//! 2. No executable comment (`/*!...*/`, `/*M!...*/`) and no optimizer hint
//!    (`/*+...*/`) anywhere, even inside a literal: MySQL runs the first,
//!    and a hint such as `MAX_EXECUTION_TIME` could lift the server-side limit.
//! 3. Tokenizes as MySQL.
//! 4. No unquoted `INTO`, `OUTFILE`, `DUMPFILE` (`SELECT ... INTO`), no
//!    unquoted `LOCK` or `FOR UPDATE` / `FOR SHARE` (locking reads), no
//!    `PROCEDURE` clause, no `NEXT VALUE FOR` / `PREVIOUS VALUE FOR` (sequence
//!    writes), no `:=` (variable assignment), no placeholder other than `?`,
//!    and no call of a function on [`DENIED_FUNCTIONS`] (quoted or not).
//! 5. Parses as exactly one statement, which is a query (`SELECT`,
//!    `WITH ... SELECT`, set operations such as `UNION`, parenthesized
//!    queries); every CTE and every branch is itself such a query. `SHOW`,
//!    `EXPLAIN`, `DESCRIBE`, `VALUES` and `TABLE` are refused: the tool
//!    promises one SELECT, `SHOW` can reveal other sessions and settings, and
//!    `EXPLAIN ANALYZE` executes; schema questions can be asked through
//!    `information_schema`, which the server filters by privilege.
//! 6. The number of `?` placeholders equals the number of params; otherwise
//!    [`Error::ParamCountMismatch`], which the boundary reports as
//!    `INVALID_INPUT` (the statement is acceptable, the arguments disagree).
//!
//! Everything else is [`Error::QueryRejected`] (`QUERY_REJECTED`).

use sqlparser::ast::{Query, SetExpr, Statement};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::{Error, Rejection, Result};

/// Functions a statement may not call: they sleep, burn CPU, read server
/// files, take or wait for locks, wait for replication, change sequences, or
/// are well-known command-execution UDFs.
pub const DENIED_FUNCTIONS: &[&str] = &[
    "BENCHMARK",
    "GET_LOCK",
    "IS_FREE_LOCK",
    "IS_USED_LOCK",
    "LASTVAL",
    "LOAD_FILE",
    "MASTER_GTID_WAIT",
    "MASTER_POS_WAIT",
    "NEXTVAL",
    "RELEASE_ALL_LOCKS",
    "RELEASE_LOCK",
    "SETVAL",
    "SLEEP",
    "SOURCE_POS_WAIT",
    "SYS_EVAL",
    "SYS_EXEC",
    "SYS_GET",
    "SYS_SET",
    "WAIT_FOR_EXECUTED_GTID_SET",
    "WAIT_UNTIL_SQL_THREAD_AFTER_GTIDS",
];

/// Checks `sql` with `params` values against the gate's rules.
///
/// Returns the number of `?` placeholders.
///
/// # Errors
/// [`Error::QueryRejected`] naming the first broken rule, or
/// [`Error::ParamCountMismatch`].
pub fn check_query(sql: &str, params: usize) -> Result<usize> {
    let placeholders = check(sql).map_err(Error::rejected)?;
    if placeholders != params {
        return Err(Error::ParamCountMismatch {
            placeholders,
            params,
        });
    }
    Ok(placeholders)
}

fn check(sql: &str) -> Result<usize, Rejection> {
    if sql.trim().is_empty() {
        return Err(Rejection::Empty);
    }
    if has_executable_comment(sql) {
        return Err(Rejection::ExecutableComment);
    }
    let dialect = MySqlDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize()
        .map_err(|_| Rejection::Unparsable)?;
    let significant: Vec<&Token> = tokens
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    if significant.iter().all(|t| matches!(t, Token::SemiColon)) {
        return Err(Rejection::Empty);
    }
    let placeholders = check_tokens(&significant)?;

    let statements = Parser::parse_sql(&dialect, sql).map_err(|_| Rejection::Unparsable)?;
    let statement = match statements.as_slice() {
        [] => return Err(Rejection::Empty),
        [one] => one,
        _ => return Err(Rejection::MultipleStatements),
    };
    match statement {
        Statement::Query(query) => check_query_tree(query)?,
        _ => return Err(Rejection::NotAQuery),
    }
    Ok(placeholders)
}

/// `/*!`, `/*M!` (any case) or `/*+` anywhere in the text.
fn has_executable_comment(sql: &str) -> bool {
    sql.match_indices("/*").any(|(at, _)| {
        let rest = &sql.as_bytes()[at + 2..];
        matches!(rest, [b'!' | b'+', ..] | [b'M' | b'm', b'!', ..])
    })
}

fn word(token: &Token) -> Option<(String, bool)> {
    match token {
        Token::Word(w) => Some((w.value.to_ascii_uppercase(), w.quote_style.is_none())),
        _ => None,
    }
}

fn is_unquoted(token: Option<&&Token>, keyword: &str) -> bool {
    token
        .and_then(|t| word(t))
        .is_some_and(|(value, unquoted)| unquoted && value == keyword)
}

/// Token rules; returns the number of `?` placeholders.
fn check_tokens(tokens: &[&Token]) -> Result<usize, Rejection> {
    let mut placeholders = 0;
    for (index, token) in tokens.iter().enumerate() {
        let next = tokens.get(index + 1);
        match token {
            Token::Word(_) => {
                let Some((value, unquoted)) = word(token) else {
                    continue;
                };
                if unquoted {
                    match value.as_str() {
                        "INTO" | "OUTFILE" | "DUMPFILE" => return Err(Rejection::Into),
                        "LOCK" => return Err(Rejection::LockingClause),
                        "FOR" if is_unquoted(next, "UPDATE") || is_unquoted(next, "SHARE") => {
                            return Err(Rejection::LockingClause);
                        }
                        "PROCEDURE" => return Err(Rejection::UnsupportedClause),
                        "NEXT" | "PREVIOUS" if is_unquoted(next, "VALUE") => {
                            return Err(Rejection::ForbiddenFunction);
                        }
                        _ => {}
                    }
                }
                if matches!(next, Some(Token::LParen)) && DENIED_FUNCTIONS.contains(&value.as_str())
                {
                    return Err(Rejection::ForbiddenFunction);
                }
            }
            Token::Placeholder(p) if p == "?" => placeholders += 1,
            Token::Placeholder(_) => return Err(Rejection::UnsupportedPlaceholder),
            Token::Assignment => return Err(Rejection::Assignment),
            _ => {}
        }
    }
    Ok(placeholders)
}

fn check_query_tree(query: &Query) -> Result<(), Rejection> {
    if let Some(with) = &query.with {
        for cte in &with.cte_tables {
            check_query_tree(&cte.query)?;
        }
    }
    if !query.locks.is_empty() {
        return Err(Rejection::LockingClause);
    }
    if query.for_clause.is_some()
        || query.settings.is_some()
        || query.format_clause.is_some()
        || !query.pipe_operators.is_empty()
    {
        return Err(Rejection::UnsupportedClause);
    }
    check_body(&query.body)
}

fn check_body(body: &SetExpr) -> Result<(), Rejection> {
    match body {
        SetExpr::Select(select) if select.into.is_some() => Err(Rejection::Into),
        SetExpr::Select(_) => Ok(()),
        SetExpr::Query(query) => check_query_tree(query),
        SetExpr::SetOperation { left, right, .. } => {
            check_body(left)?;
            check_body(right)
        }
        _ => Err(Rejection::NotASelect),
    }
}
