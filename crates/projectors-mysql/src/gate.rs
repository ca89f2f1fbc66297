//! The SQL gate: only one read-only query gets through.
//!
//! The gate is the first of several defenses (see the crate docs and
//! `docs/mysql.md`): the server-side read-only transaction, the least-privilege
//! account and the statement time limit still hold if a statement slips
//! through a difference between this parser and the server's.
//!
//! Rules, checked in this order:
//! 1. Not empty.
//! 2. No executable comment (`/*!...*/`, `/*M!...*/`) and no optimizer hint
//!    (`/*+...*/`) anywhere, even inside a literal: MySQL runs the first,
//!    and a hint such as `MAX_EXECUTION_TIME` could lift the server-side limit.
//! 3. Tokenizes as MySQL, and every token is one the server reads the same
//!    way ([`Rejection::AmbiguousLexing`] otherwise): no NUL byte; no unquoted
//!    word that starts with a digit or `.` (sqlparser reads `1.5FROM` as one
//!    word, the server as `1.5 FROM`) or holds characters the server ends a
//!    word at (sqlparser reads ``@@`version` AS v, ...`` up to a later
//!    backtick as one word, and `INTO@x` as one word); no user variable or
//!    name followed by a dot and whitespace (`@a. FROM t` is `@a.` then
//!    `FROM` to the server, one name to sqlparser); no word starting with
//!    `$`; no number glued to a word (`0x1FOR`, `1e5L`);
//!    `--` comments only with an ASCII space or control character after the
//!    dashes (the server reads `--` + U+00A0 as two minus signs); no
//!    double-quoted byte strings (`b"..."`, lexed without backslash escapes),
//!    bit strings of `0`/`1` only and hex strings of hex digits only; only
//!    the operators and literals of MySQL's own grammar (no `$$` strings,
//!    raw strings, `{...}` escapes, `::` and the like).
//! 4. No unquoted `INTO`, `OUTFILE`, `DUMPFILE` (`SELECT ... INTO`), no
//!    unquoted `LOCK` or `FOR UPDATE` / `FOR SHARE` (locking reads), no
//!    `PROCEDURE` clause, no `NEXT VALUE FOR` / `PREVIOUS VALUE FOR` (sequence
//!    writes), no `:=` (variable assignment), no placeholder other than `?`,
//!    no call of a function on [`DENIED_FUNCTIONS`] or with a prefix on
//!    [`DENIED_FUNCTION_PREFIXES`] (quoted or not), and no name of more than
//!    two parts (MariaDB 10.11 crashes on an unresolvable `db.t.col` in a
//!    `NATURAL JOIN` or `USING` query). No system variable (`@@name`) other
//!    than those on [`ALLOWED_SYSTEM_VARIABLES`] ([`Rejection::SystemVariable`]),
//!    and no unquoted `CURRENT_USER` or `CURRENT_ROLE`: the model must not
//!    learn the host, paths, ports or account the server runs with.
//! 5. Parses as exactly one statement with nothing but `;` after it (one
//!    statement is parsed and the tokens must end there: sqlparser's
//!    statement list stops silently at an unquoted `END`, an alias to the
//!    server), which is a query (`SELECT`,
//!    `WITH ... SELECT`, set operations such as `UNION`, parenthesized
//!    queries); every CTE, every branch and every nested query (subqueries
//!    in expressions, derived tables) is itself such a query. `SHOW`,
//!    `EXPLAIN`, `DESCRIBE`, `VALUES` and `TABLE` are refused: the tool
//!    promises one SELECT, `SHOW` can reveal other sessions and settings, and
//!    `EXPLAIN ANALYZE` executes; schema questions can be asked through
//!    `information_schema`, which the server filters by privilege.
//! 6. Every table is a plain named table, a derived table (subquery), a join
//!    or `JSON_TABLE`; a schema-qualified table (`schema.table`) names one of
//!    the [`AllowedSchemas`]; no function is schema-qualified (`schema.f()`
//!    is a stored function, which may do anything its definer may); no
//!    `IN`/`ANY`/`ALL` subquery and no `GROUP BY` in a query that reads no
//!    table, no `LIMIT` in an `EXISTS` subquery, no grouped subquery inside
//!    an aggregate, no `<=>` with a `JSON_*` call, no grouped
//!    `IN`/`ANY`/`ALL`/`EXISTS` subquery that selects a subquery
//!    ([`Rejection::KnownServerCrash`]: MariaDB 10.11 crashes on each in
//!    prepared statements); no
//!    `information_schema` table on [`DENIED_INFORMATION_SCHEMA_TABLES`]
//!    ([`Rejection::ServerInformation`]: variables, status, sessions, grants).
//!    Unqualified tables resolve to the connection's default database, which
//!    the executor requires to be one of the allowed schemas.
//! 7. The number of `?` placeholders equals the number of params; otherwise
//!    [`Error::ParamCountMismatch`], which the boundary reports as
//!    `INVALID_INPUT` (the statement is acceptable, the arguments disagree).
//!
//! Everything else is [`Error::QueryRejected`] (`QUERY_REJECTED`).
//!
//! The gate errs on the side of refusing: `/*!` inside a string literal, a
//! column named `lock` (unquoted) or a function named like a denied one in
//! another schema are refused too. Pass such strings as params, and quote
//! such identifiers with backticks.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, InTarget, ObjectName, Query, Select, SetExpr, Statement,
    TableFactor, Visit, Visitor,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

use crate::{Error, Rejection, Result};

/// Functions a statement may not call: they sleep, burn CPU, read server
/// files, take or wait for locks, wait for replication, change sequences or
/// session state, are well-known plugin and command-execution UDFs, or
/// reveal the account, the connection or the host (`USER()`,
/// `CURRENT_USER()`, `SESSION_USER()`, `SYSTEM_USER()`, `CURRENT_ROLE()`,
/// `CONNECTION_ID()`, and `UUID()`/`UUID_SHORT()`/`SYS_GUID()`, whose values
/// carry the host's MAC address or the server id). `CURRENT_USER` and
/// `CURRENT_ROLE` are refused without parentheses too (MySQL accepts both
/// spellings).
pub const DENIED_FUNCTIONS: &[&str] = &[
    "AUDIT_API_MESSAGE_EMIT_UDF",
    "BBIN_FILE",
    "BENCHMARK",
    "BSON_FILE",
    "CONNECTION_ID",
    "CURRENT_ROLE",
    "CURRENT_USER",
    "DO_SYSTEM",
    "ENVAR",
    "FLUSH_REWRITE_RULES",
    "GET_LOCK",
    "HTTP_GET",
    "HTTP_POST",
    "IS_FREE_LOCK",
    "IS_USED_LOCK",
    "JBIN_FILE",
    "JSON_FILE",
    "LASTVAL",
    "LAST_INSERT_ID",
    "LOAD_FILE",
    "LOAD_REWRITE_RULES",
    "MASTER_GTID_WAIT",
    "MASTER_POS_WAIT",
    "MLE_SESSION_RESET",
    "MROONGA_COMMAND",
    "NEXTVAL",
    "RELEASE_ALL_LOCKS",
    "RELEASE_LOCK",
    "SERVICE_GET_READ_LOCKS",
    "SERVICE_GET_WRITE_LOCKS",
    "SERVICE_RELEASE_LOCKS",
    "SESSION_USER",
    "SETVAL",
    "SET_FIREWALL_GROUP_MODE",
    "SET_FIREWALL_MODE",
    "SLEEP",
    "SOURCE_POS_WAIT",
    "SYS_EVAL",
    "SYS_EXEC",
    "SYS_GET",
    "SYS_GUID",
    "SYS_SET",
    "SYSTEM_USER",
    "USER",
    "UUID",
    "UUID_SHORT",
    "WAIT_FOR_EXECUTED_GTID_SET",
    "WAIT_UNTIL_SQL_THREAD_AFTER_GTIDS",
    "WSREP_SYNC_WAIT_UPTO_GTID",
];

/// Name prefixes of function families a statement may not call (plugin
/// UDFs that write the keyring, version tokens, the audit log, replication
/// state, or files of the CONNECT engine).
pub const DENIED_FUNCTION_PREFIXES: &[&str] = &[
    "ASYNCHRONOUS_CONNECTION_FAILOVER_",
    "AUDIT_LOG_",
    "BFILE_",
    "FIREWALL_",
    "GEN_DICTIONARY_",
    "GROUP_REPLICATION_",
    "JFILE_",
    "KEYRING_",
    "MASKING_",
    "MYSQL_FIREWALL_",
    "SPIDER_",
    "VERSION_TOKENS_",
];

/// Words refused even without parentheses: MySQL reads them as calls.
const DENIED_BARE_WORDS: &[&str] = &["CURRENT_ROLE", "CURRENT_USER"];

/// The only system variables a statement may read (`@@name`, also as
/// `@@session.name`, `@@local.name` or `@@global.name`): the server's
/// version, which an agent needs to pick SQL syntax, and the session's SQL
/// mode and time zone, which say how values are read and shown. Every other
/// one is refused: `@@hostname`, `@@datadir`, `@@port`, `@@socket`,
/// `@@pid_file`, `@@basedir`, `@@tmpdir`, `@@server_id`, `@@report_host`,
/// ... describe the infrastructure, which never reaches the model.
pub const ALLOWED_SYSTEM_VARIABLES: &[&str] =
    &["SQL_MODE", "TIME_ZONE", "VERSION", "VERSION_COMMENT"];

/// `information_schema` tables a statement may not read, even when
/// `information_schema` is an allowed schema: they hold the values of every
/// system variable (the host name and paths among them), server status, the
/// sessions with their client hosts, and grants naming `'user'@'host'`.
pub const DENIED_INFORMATION_SCHEMA_TABLES: &[&str] = &[
    "APPLICABLE_ROLES",
    "CLIENT_STATISTICS",
    "COLUMN_PRIVILEGES",
    "ENABLED_ROLES",
    "GLOBAL_STATUS",
    "GLOBAL_VARIABLES",
    "PROCESSLIST",
    "SCHEMA_PRIVILEGES",
    "SESSION_STATUS",
    "SESSION_VARIABLES",
    "SYSTEM_VARIABLES",
    "TABLE_PRIVILEGES",
    "USER_PRIVILEGES",
    "USER_STATISTICS",
    "USER_VARIABLES",
];

fn is_denied_function(name: &str) -> bool {
    DENIED_FUNCTIONS.contains(&name)
        || DENIED_FUNCTION_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix))
}

/// The schemas a data source's statements may name.
///
/// Schema names compare exactly (byte for byte, after backtick unquoting):
/// on a server with case-insensitive names a differently cased spelling is
/// refused, never let through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedSchemas {
    names: BTreeSet<String>,
}

impl AllowedSchemas {
    /// Exactly these schemas.
    pub fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            names: names.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether `schema` is one of them.
    #[must_use]
    pub fn contains(&self, schema: &str) -> bool {
        self.names.contains(schema)
    }

    /// The names, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// Whether no schema is allowed (then only unqualified tables pass).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Checks `sql` with `params` values against the gate's rules, with tables
/// limited to `schemas`.
///
/// Returns the number of `?` placeholders.
///
/// # Errors
/// [`Error::QueryRejected`] naming the first broken rule, or
/// [`Error::ParamCountMismatch`].
pub fn check_query(sql: &str, params: usize, schemas: &AllowedSchemas) -> Result<usize> {
    let placeholders = check(sql, schemas).map_err(Error::rejected)?;
    if placeholders != params {
        return Err(Error::ParamCountMismatch {
            placeholders,
            params,
        });
    }
    Ok(placeholders)
}

fn check(sql: &str, schemas: &AllowedSchemas) -> Result<usize, Rejection> {
    if sql.trim().is_empty() {
        return Err(Rejection::Empty);
    }
    if has_executable_comment(sql) {
        return Err(Rejection::ExecutableComment);
    }
    if sql.contains('\0') {
        return Err(Rejection::AmbiguousLexing);
    }
    let dialect = MySqlDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize()
        .map_err(|_| Rejection::Unparsable)?;
    check_lexing(&tokens)?;
    let significant: Vec<&Token> = tokens
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    if significant.iter().all(|t| matches!(t, Token::SemiColon)) {
        return Err(Rejection::Empty);
    }
    let placeholders = check_tokens(&significant)?;

    // Parse exactly one statement from the checked tokens and require that
    // nothing but `;` follows. `Parser::parse_sql` stops silently at an
    // unquoted `END` after a statement (`SELECT s END FROM other.secret`:
    // END is an alias to the server, the end of the statement list to
    // sqlparser), so its result cannot be trusted to cover the whole text.
    let mut parser = Parser::new(&dialect).with_tokens(tokens.clone());
    let statement = &parser
        .parse_statement()
        .map_err(|_| Rejection::Unparsable)?;
    while parser.consume_token(&Token::SemiColon) {}
    if parser.peek_token_ref().token != Token::EOF {
        return Err(Rejection::MultipleStatements);
    }
    match statement {
        Statement::Query(query) => check_query_tree(query)?,
        _ => return Err(Rejection::NotAQuery),
    }
    check_infrastructure_words(&significant)?;
    if let ControlFlow::Break(rejection) = statement.visit(&mut Relations { schemas }) {
        return Err(rejection);
    }
    Ok(placeholders)
}

/// Walks every table and function call of a statement (rule 6).
struct Relations<'a> {
    schemas: &'a AllowedSchemas,
}

impl Visitor for Relations<'_> {
    type Break = Rejection;

    /// Every query, also one nested in an expression (`IN (...)`,
    /// `EXISTS (...)`, a scalar subquery) or a derived table, follows the
    /// rules of rule 5: `TABLE t` or `VALUES` there would otherwise slip by.
    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<Rejection> {
        if let Err(rejection) = check_query_tree(query) {
            return ControlFlow::Break(rejection);
        }
        // MariaDB 10.11 crashes on a table-less subquery grouped by an
        // outer column inside an aggregate of a subquery; a query without a
        // table has one row, so its GROUP BY means nothing.
        if reads_no_table(query) && is_grouped(query) {
            return ControlFlow::Break(Rejection::KnownServerCrash);
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, table: &TableFactor) -> ControlFlow<Rejection> {
        match table {
            TableFactor::Table {
                name,
                args: None,
                with_ordinality: false,
                json_path: None,
                sample: None,
                ..
            } => check_table_name(name, self.schemas),
            TableFactor::Derived { .. }
            | TableFactor::NestedJoin { .. }
            | TableFactor::JsonTable { .. } => ControlFlow::Continue(()),
            _ => ControlFlow::Break(Rejection::UnsupportedTable),
        }
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<Rejection> {
        match expr {
            Expr::Function(function) if function.name.0.len() > 1 => {
                ControlFlow::Break(Rejection::StoredFunction)
            }
            // MySQL has no field access on expressions; sqlparser builds one
            // from `0x.f(1)`, which the server calls as the routine `0x`.f.
            Expr::CompoundFieldAccess { .. } => ControlFlow::Break(Rejection::AmbiguousLexing),
            // MariaDB 10.11 aborts on a grouped prepared query with such a
            // subquery (`a IN (SELECT a)`, also parenthesized).
            Expr::In {
                target: InTarget::Subquery(query),
                ..
            } if reads_no_table(query) => ControlFlow::Break(Rejection::KnownServerCrash),
            Expr::In {
                target: InTarget::List(items),
                ..
            } if items.iter().any(is_tableless_subquery) => {
                ControlFlow::Break(Rejection::KnownServerCrash)
            }
            Expr::AnyOp { right, .. } | Expr::AllOp { right, .. }
                if is_tableless_subquery(right) =>
            {
                ControlFlow::Break(Rejection::KnownServerCrash)
            }
            // MariaDB 10.11 crashes on a subquery grouped by a column of an
            // outer query inside an aggregate of a subquery; the gate cannot
            // tell outer columns, so no grouped subquery inside an aggregate.
            Expr::Function(function) if is_aggregate(function) && holds_grouped_query(function) => {
                ControlFlow::Break(Rejection::KnownServerCrash)
            }
            // MariaDB 10.11 crashes (even unprepared) on `s <=>
            // JSON_EXTRACT(1, '$[0]')` in a WHERE: no NULL-safe comparison
            // with a JSON function (`=` and `IS NULL` say the same).
            Expr::BinaryOp {
                left,
                op: BinaryOperator::Spaceship,
                right,
            } if is_json_call(left) || is_json_call(right) => {
                ControlFlow::Break(Rejection::KnownServerCrash)
            }
            // MariaDB 10.11 crashes on a grouped EXISTS subquery limited to
            // no row (`LIMIT 0`, also `LIMIT ?` bound to 0); a limit there
            // means nothing else.
            Expr::Exists { subquery, .. } if is_limited(subquery) => {
                ControlFlow::Break(Rejection::KnownServerCrash)
            }
            // MariaDB 10.11.19 crashes (SIGSEGV in
            // `Item_func_ne::add_key_fields`) on a grouped
            // `IN`/`ANY`/`ALL`/`EXISTS` subquery that finds no row and
            // selects a subquery testing one of its columns (see
            // `selects_subquery_grouped`). The gate can tell neither an
            // empty result nor an outer column, so such a subquery (also
            // parenthesized) may not select a subquery.
            Expr::In {
                target: InTarget::Subquery(query),
                ..
            }
            | Expr::Exists {
                subquery: query, ..
            } if selects_subquery_grouped(query) => ControlFlow::Break(Rejection::KnownServerCrash),
            Expr::In {
                target: InTarget::List(items),
                ..
            } if items
                .iter()
                .any(|item| subquery(item).is_some_and(selects_subquery_grouped)) =>
            {
                ControlFlow::Break(Rejection::KnownServerCrash)
            }
            Expr::AnyOp { right, .. } | Expr::AllOp { right, .. }
                if subquery(right).is_some_and(selects_subquery_grouped) =>
            {
                ControlFlow::Break(Rejection::KnownServerCrash)
            }
            _ => ControlFlow::Continue(()),
        }
    }
}

/// A subquery (in any parentheses) that [reads no table](reads_no_table).
fn is_tableless_subquery(expr: &Expr) -> bool {
    match expr {
        Expr::Nested(inner) => is_tableless_subquery(inner),
        Expr::Subquery(query) => reads_no_table(query),
        _ => false,
    }
}

/// The query of a subquery expression (in any parentheses).
fn subquery(expr: &Expr) -> Option<&Query> {
    match expr {
        Expr::Nested(inner) => subquery(inner),
        Expr::Subquery(query) => Some(query),
        _ => None,
    }
}

/// Whether a `SELECT` of the query (any set-operation branch, in any
/// parentheses) has a `GROUP BY` and a query anywhere in its select list.
///
/// Such a query as an `IN`/`ANY`/`ALL`/`EXISTS` subquery crashes MariaDB
/// 10.11.19 (SIGSEGV in `Item_func_ne::add_key_fields`, under
/// `JOIN::optimize` of the subqueries; prepared statements only) when it
/// finds no row (`WHERE 0`, `WHERE ?` bound to 0, `WHERE DEFAULT(a)` of a
/// column whose default is NULL, `JOIN ... ON 0`, `LIMIT 0`) and the selected
/// subquery's `WHERE` tests one of its columns: `SELECT 1 IN (SELECT
/// (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE 0 GROUP BY a)`. Scalar and
/// derived-table subqueries of the same shape, and the shape without
/// `GROUP BY` (aggregates, `DISTINCT`), do not crash it.
fn selects_subquery_grouped(query: &Query) -> bool {
    fn branch(body: &SetExpr) -> bool {
        match body {
            SetExpr::Select(select) => has_group_by(select) && holds_query(&select.projection),
            SetExpr::Query(inner) => selects_subquery_grouped(inner),
            SetExpr::SetOperation { left, right, .. } => branch(left) || branch(right),
            _ => false,
        }
    }
    branch(&query.body)
}

/// Whether a query (a subquery, `EXISTS`, `IN (SELECT ...)`) is anywhere in
/// `node`.
fn holds_query<V: Visit>(node: &V) -> bool {
    struct AnyQuery;
    impl Visitor for AnyQuery {
        type Break = ();
        fn pre_visit_query(&mut self, _query: &Query) -> ControlFlow<()> {
            ControlFlow::Break(())
        }
    }
    node.visit(&mut AnyQuery).is_break()
}

/// A call of a `JSON_*` function (in any parentheses).
fn is_json_call(expr: &Expr) -> bool {
    match expr {
        Expr::Nested(inner) => is_json_call(inner),
        Expr::Function(function) => {
            function.name.0.len() == 1
                && function.name.0[0].as_ident().is_some_and(|name| {
                    name.value
                        .get(..5)
                        .is_some_and(|prefix| prefix.eq_ignore_ascii_case("JSON_"))
                })
        }
        _ => false,
    }
}

/// MySQL's and MariaDB's aggregate functions.
const AGGREGATE_FUNCTIONS: &[&str] = &[
    "AVG",
    "BIT_AND",
    "BIT_OR",
    "BIT_XOR",
    "COUNT",
    "GROUP_CONCAT",
    "JSON_ARRAYAGG",
    "JSON_OBJECTAGG",
    "MAX",
    "MIN",
    "STD",
    "STDDEV",
    "STDDEV_POP",
    "STDDEV_SAMP",
    "SUM",
    "VARIANCE",
    "VAR_POP",
    "VAR_SAMP",
];

fn is_aggregate(function: &sqlparser::ast::Function) -> bool {
    function.name.0.len() == 1
        && function.name.0[0].as_ident().is_some_and(|name| {
            AGGREGATE_FUNCTIONS
                .iter()
                .any(|aggregate| name.value.eq_ignore_ascii_case(aggregate))
        })
}

/// Whether a query with a `GROUP BY` is anywhere inside `function`.
fn holds_grouped_query(function: &sqlparser::ast::Function) -> bool {
    struct Grouped;
    impl Visitor for Grouped {
        type Break = ();
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
            if is_grouped(query) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }
    }
    function.visit(&mut Grouped).is_break()
}

/// Whether the query (or its body in any parentheses) has a `LIMIT`,
/// `OFFSET` or `FETCH`.
fn is_limited(query: &Query) -> bool {
    query.limit_clause.is_some()
        || query.fetch.is_some()
        || matches!(&*query.body, SetExpr::Query(inner) if is_limited(inner))
}

/// Whether the query's `SELECT` (in any parentheses) has a `GROUP BY`.
fn is_grouped(query: &Query) -> bool {
    match &*query.body {
        SetExpr::Select(select) => has_group_by(select),
        SetExpr::Query(inner) => is_grouped(inner),
        _ => false,
    }
}

/// Whether the `SELECT` has a `GROUP BY`.
fn has_group_by(select: &Select) -> bool {
    match &select.group_by {
        GroupByExpr::All(_) => true,
        GroupByExpr::Expressions(expressions, _) => !expressions.is_empty(),
    }
}

/// A query that is one `SELECT` without `FROM`, or `FROM DUAL` (in any
/// parentheses).
fn reads_no_table(query: &Query) -> bool {
    match &*query.body {
        SetExpr::Select(select) => select.from.iter().all(|from| {
            from.joins.is_empty()
                && matches!(&from.relation, TableFactor::Table { name, .. }
                    if name.0.len() == 1
                        && name.0[0].as_ident().is_some_and(|part| part.quote_style.is_none() && part.value.eq_ignore_ascii_case("dual")))
        }),
        SetExpr::Query(inner) => reads_no_table(inner),
        _ => false,
    }
}

fn check_table_name(name: &ObjectName, schemas: &AllowedSchemas) -> ControlFlow<Rejection> {
    let parts: Option<Vec<&str>> = name
        .0
        .iter()
        .map(|part| part.as_ident().map(|ident| ident.value.as_str()))
        .collect();
    if let Some([schema, table]) = parts.as_deref()
        && schema.eq_ignore_ascii_case("information_schema")
        && DENIED_INFORMATION_SCHEMA_TABLES.contains(&table.to_ascii_uppercase().as_str())
    {
        return ControlFlow::Break(Rejection::ServerInformation);
    }
    match parts.as_deref() {
        // The connection's default database.
        Some([_table]) => ControlFlow::Continue(()),
        Some([schema, _table]) if schemas.contains(schema) => ControlFlow::Continue(()),
        Some([_, _]) => ControlFlow::Break(Rejection::SchemaNotAllowed),
        _ => ControlFlow::Break(Rejection::UnsupportedTable),
    }
}

/// System variables and bare identity words (rule 4, checked once the text
/// is known to be a query, so that `GRANT ... TO CURRENT_USER` is refused as
/// what it is).
fn check_infrastructure_words(tokens: &[&Token]) -> Result<(), Rejection> {
    for (index, token) in tokens.iter().enumerate() {
        let Some((value, true)) = word(token) else {
            continue;
        };
        if let Some(name) = value.strip_prefix("@@") {
            check_system_variable(name, tokens.get(index + 1..))?;
        }
        if DENIED_BARE_WORDS.contains(&value.as_str()) {
            return Err(Rejection::ForbiddenFunction);
        }
    }
    Ok(())
}

/// `@@name` or `@@scope.name` (`name` already uppercased, `rest` the tokens
/// after it): only [`ALLOWED_SYSTEM_VARIABLES`] pass.
fn check_system_variable(name: &str, rest: Option<&[&Token]>) -> Result<(), Rejection> {
    let rest = rest.unwrap_or_default();
    let name = match name {
        "SESSION" | "LOCAL" | "GLOBAL" => match rest {
            [Token::Period, Token::Word(w), ..] if w.quote_style.is_none() => {
                w.value.to_ascii_uppercase()
            }
            _ => return Err(Rejection::SystemVariable),
        },
        // `@@version.x` is no system variable the tool needs.
        _ if matches!(rest.first(), Some(Token::Period)) => {
            return Err(Rejection::SystemVariable);
        }
        other => other.to_owned(),
    };
    if ALLOWED_SYSTEM_VARIABLES.contains(&name.as_str()) {
        Ok(())
    } else {
        Err(Rejection::SystemVariable)
    }
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
                if matches!(next, Some(Token::LParen)) && is_denied_function(&value) {
                    return Err(Rejection::ForbiddenFunction);
                }
            }
            // `db.table.column` (also in `MATCH (...)`, `db.t.*`): MariaDB 10.11
            // crashes (SIGSEGV in find_field_in_tables) on an unresolvable one
            // in a query with NATURAL JOIN or JOIN ... USING. No name of more
            // than two parts is needed: qualify columns by table or alias.
            Token::Period
                if matches!(next, Some(Token::Word(_)))
                    && matches!(tokens.get(index + 2), Some(Token::Period)) =>
            {
                return Err(Rejection::UnsupportedTable);
            }
            Token::Placeholder(p) if p == "?" => placeholders += 1,
            Token::Placeholder(_) => return Err(Rejection::UnsupportedPlaceholder),
            Token::Assignment => return Err(Rejection::Assignment),
            _ => {}
        }
    }
    Ok(placeholders)
}

/// Rule 3: every token, whitespace included, is one the server lexes the
/// same way.
fn check_lexing(tokens: &[Token]) -> Result<(), Rejection> {
    for (index, token) in tokens.iter().enumerate() {
        let next = tokens.get(index + 1);
        let glued_word = matches!(next, Some(Token::Word(w)) if w.quote_style.is_none());
        let ok = match token {
            // `@a.b` is one user variable to the server; `@a.` + space + FROM
            // ends the variable at the dot, where sqlparser joins `@a . FROM`
            // into one identifier and never sees the FROM clause.
            Token::Word(w) if w.quote_style.is_none() => {
                plain_word(&w.value)
                    && !(w.value.starts_with('@')
                        && !w.value.starts_with("@@")
                        && matches!(next, Some(Token::Period)))
            }
            // `x. KEYWORD`: sqlparser takes the keyword for a name part, the
            // server lexes a keyword after a dot and whitespace.
            Token::Period if matches!(next, Some(Token::Whitespace(_))) => false,
            Token::Word(w) => matches!(w.quote_style, Some('`' | '"')),
            Token::Number(..) | Token::HexStringLiteral(_) if glued_word => false,
            // `0x` alone: sqlparser reads an empty literal, the server a word.
            Token::HexStringLiteral(hex) => {
                !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit())
            }
            // `1e5L`: sqlparser drops the `L`, the server reads an alias.
            Token::Number(_, true) => false,
            Token::SingleQuotedByteStringLiteral(bits) => bits.chars().all(|c| matches!(c, '0' | '1')),
            Token::Whitespace(Whitespace::SingleLineComment { comment, prefix }) if prefix == "--" => {
                comment.starts_with(|c: char| c.is_ascii_whitespace() || c.is_ascii_control())
            }
            Token::Whitespace(
                Whitespace::Space
                | Whitespace::Tab
                | Whitespace::Newline
                | Whitespace::SingleLineComment { .. }
                | Whitespace::MultiLineComment(_),
            )
            | Token::Number(..)
            | Token::SingleQuotedString(_)
            | Token::DoubleQuotedString(_)
            | Token::NationalStringLiteral(_)
            | Token::Comma
            | Token::Eq
            | Token::Neq
            | Token::Lt
            | Token::Gt
            | Token::LtEq
            | Token::GtEq
            | Token::Spaceship
            | Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::Mod
            | Token::StringConcat
            | Token::LParen
            | Token::RParen
            | Token::Period
            | Token::SemiColon
            | Token::Ampersand
            | Token::Pipe
            | Token::Caret
            | Token::Tilde
            | Token::ShiftLeft
            | Token::ShiftRight
            | Token::ExclamationMark
            | Token::Arrow
            | Token::LongArrow
            | Token::EOF
            // Refused later with their own reasons.
            | Token::Placeholder(_)
            | Token::Assignment => true,
            _ => false,
        };
        if !ok {
            return Err(Rejection::AmbiguousLexing);
        }
    }
    Ok(())
}

/// An unquoted word as the server lexes it: an identifier or keyword (ASCII
/// letters, digits, `_`, `$` or any non-ASCII character, not starting with a
/// digit), a user variable `@name` (ASCII letters, digits, `_`, `$`) or a
/// system variable `@@name`. sqlparser folds into a word whatever follows
/// `@` or `@@` (``@@`version` AS v, ... -- ` `` would hide the rest of the
/// statement in one identifier) and keeps `@` inside words (`INTO@x`), where
/// the server splits them.
fn plain_word(value: &str) -> bool {
    let identifier = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$' || !c.is_ascii();
    let user_variable = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
    let (body, allowed): (&str, &dyn Fn(char) -> bool) =
        if let Some(rest) = value.strip_prefix("@@") {
            (rest, &identifier)
        } else if let Some(rest) = value.strip_prefix('@') {
            (rest, &user_variable)
        } else {
            (value, &identifier)
        };
    // `$`: MySQL 9 reads `$$...$$` and `$tag$...$tag$` as strings.
    !body.is_empty()
        && !body.starts_with(|c: char| c.is_ascii_digit() || c == '$')
        && body.chars().all(allowed)
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
