//! The SQL gate table: what gets through and what is refused, and why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use projectors_mysql::gate::{AllowedSchemas, check_query as check_with};
use projectors_mysql::{Error, Rejection};

/// The gate for a source whose default database is `shop`, which may also
/// read `information_schema`.
fn check_query(sql: &str, params: usize) -> projectors_mysql::Result<usize> {
    check_with(
        sql,
        params,
        &AllowedSchemas::new(["shop", "information_schema"]),
    )
}

#[test]
fn read_only_queries_are_accepted() {
    for (sql, params) in [
        ("SELECT 1", 0),
        ("select 1;", 0),
        ("  SELECT id, status FROM orders WHERE id = ?  ", 1),
        (
            "SELECT * FROM orders WHERE a = ? AND b IN (?, ?) LIMIT ?",
            4,
        ),
        ("SELECT 'a ? in a literal', ? FROM dual", 1),
        ("SELECT `select`, \"x\" FROM `t` -- trailing comment\n", 0),
        ("SELECT 1 # hash comment", 0),
        ("SELECT /* plain comment */ 1", 0),
        ("SELECT a FROM t1 UNION SELECT b FROM t2", 0),
        (
            "SELECT a FROM t1 UNION ALL SELECT b FROM t2 ORDER BY 1 LIMIT 10",
            0,
        ),
        ("(SELECT 1) UNION (SELECT 2)", 0),
        (
            "WITH recent AS (SELECT * FROM orders WHERE created_at > ?) SELECT count(*) FROM recent",
            1,
        ),
        (
            "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 10) SELECT n FROM seq",
            0,
        ),
        (
            "SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.state = ?",
            1,
        ),
        (
            "SELECT state, COUNT(*) AS n FROM orders GROUP BY state HAVING n > ? ORDER BY n DESC",
            1,
        ),
        (
            "SELECT * FROM t WHERE id IN (SELECT id FROM u WHERE flag = 1)",
            0,
        ),
        ("SELECT JSON_EXTRACT(doc, '$.a') FROM t", 0),
        ("SELECT 'sleep(5)' AS note", 0),
        (
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = DATABASE()",
            0,
        ),
        ("SELECT @@version", 0),
        ("SELECT 'it''s', 'a\\'b' FROM dual", 0),
        ("SELECT updated_at, lock_version, into_count FROM t", 0),
        (
            "SELECT a, ROW_NUMBER() OVER (PARTITION BY b ORDER BY c) FROM t",
            0,
        ),
        (
            "SELECT * FROM t WHERE created > NOW() - INTERVAL ? MINUTE LIMIT 10, 20",
            1,
        ),
        (
            "SELECT doc->>'$.a', GROUP_CONCAT(x SEPARATOR ',') FROM t WHERE b REGEXP '^x' GROUP BY 1",
            0,
        ),
        ("SELECT a FROM t INTERSECT SELECT a FROM u", 0),
        ("SELECT _utf8mb4'x', X'41', N'y', CAST(a AS CHAR) FROM t", 0),
    ] {
        assert_eq!(check_query(sql, params).unwrap(), params, "{sql}");
    }
}

#[test]
fn everything_else_is_rejected_with_its_reason() {
    use Rejection::*;
    let mut wrong = Vec::new();
    for (sql, reason) in [
        ("", Empty),
        ("   ", Empty),
        (";", Empty),
        ("-- only a comment", Empty),
        // Writes and DDL.
        ("INSERT INTO t VALUES (1)", Into),
        ("INSERT t VALUES (1)", NotAQuery),
        ("REPLACE INTO t VALUES (1)", Into),
        ("UPDATE t SET a = 1", NotAQuery),
        ("DELETE FROM t", NotAQuery),
        ("TRUNCATE TABLE t", NotAQuery),
        ("CREATE TABLE x (a INT)", NotAQuery),
        ("CREATE TABLE x AS SELECT * FROM t", NotAQuery),
        ("DROP TABLE t", NotAQuery),
        ("ALTER TABLE t ADD COLUMN b INT", NotAQuery),
        ("RENAME TABLE a TO b", NotAQuery),
        ("GRANT ALL ON *.* TO 'x'@'%'", AmbiguousLexing),
        ("GRANT SELECT ON shop.* TO CURRENT_USER", NotAQuery),
        ("CALL p()", NotAQuery),
        ("DO SLEEP(1)", ForbiddenFunction),
        ("SET @a = 1", NotAQuery),
        ("SET GLOBAL max_connections = 1", NotAQuery),
        ("LOCK TABLES t READ", LockingClause),
        ("UNLOCK TABLES", NotAQuery),
        ("START TRANSACTION", NotAQuery),
        ("COMMIT", NotAQuery),
        ("USE mysql", NotAQuery),
        ("PREPARE s FROM 'DELETE FROM t'", Unparsable),
        ("HANDLER t OPEN", Unparsable),
        ("KILL 1", NotAQuery),
        ("LOAD DATA INFILE '/etc/passwd' INTO TABLE t", Into),
        // Metadata statements.
        ("SHOW TABLES", NotAQuery),
        ("SHOW GRANTS", NotAQuery),
        ("EXPLAIN SELECT 1", NotAQuery),
        ("DESCRIBE t", NotAQuery),
        ("VALUES (1, 2)", NotASelect),
        // Several statements, however hidden.
        ("SELECT 1; SELECT 2", MultipleStatements),
        ("SELECT 1; DROP TABLE t", MultipleStatements),
        ("SELECT 1 -- x\n; DELETE FROM t", MultipleStatements),
        ("SELECT 1 /* ; */ ; UPDATE t SET a = 1", MultipleStatements),
        // Comment tricks.
        ("SELECT 1 /*! , SLEEP(10) */", ExecutableComment),
        (
            "SELECT 1 /*!50000 UNION SELECT user FROM mysql.user */",
            ExecutableComment,
        ),
        ("SELECT 1 /*M! , SLEEP(10) */", ExecutableComment),
        (
            "SELECT /*+ MAX_EXECUTION_TIME(100000) */ 1",
            ExecutableComment,
        ),
        ("SELECT 1 --1, SLEEP(5)", ForbiddenFunction),
        // Exfiltration and side effects inside SELECT.
        ("SELECT * FROM t INTO OUTFILE '/tmp/x'", Into),
        ("SELECT * FROM t INTO DUMPFILE '/tmp/x'", Into),
        ("SELECT a INTO @v FROM t", Into),
        ("SELECT @a := 1", Assignment),
        ("SELECT * FROM t FOR UPDATE", LockingClause),
        ("SELECT * FROM t FOR SHARE", LockingClause),
        ("SELECT * FROM t LOCK IN SHARE MODE", LockingClause),
        (
            "SELECT * FROM t WHERE id IN (SELECT id FROM u FOR UPDATE)",
            LockingClause,
        ),
        ("SELECT SLEEP(10)", ForbiddenFunction),
        ("SELECT sleep (10)", ForbiddenFunction),
        ("SELECT `SLEEP`(10)", ForbiddenFunction),
        (
            "SELECT * FROM t WHERE a = 1 AND BENCHMARK(100000000, MD5('x'))",
            ForbiddenFunction,
        ),
        ("SELECT LOAD_FILE('/etc/passwd')", ForbiddenFunction),
        ("SELECT GET_LOCK('l', 10)", ForbiddenFunction),
        ("SELECT RELEASE_LOCK('l')", ForbiddenFunction),
        ("SELECT MASTER_POS_WAIT('log', 4)", ForbiddenFunction),
        ("SELECT NEXTVAL(s)", ForbiddenFunction),
        ("SELECT NEXT VALUE FOR s", ForbiddenFunction),
        (
            "WITH x AS (SELECT SLEEP(1)) SELECT * FROM x",
            ForbiddenFunction,
        ),
        ("SELECT * FROM t PROCEDURE ANALYSE()", UnsupportedClause),
        ("SELECT * FROM t WHERE id = ?1", UnsupportedPlaceholder),
        // Not MySQL at all.
        ("SELEC 1", Unparsable),
        ("SELECT 'unterminated", Unparsable),
    ] {
        match check_query(sql, 0) {
            Err(Error::QueryRejected { reason: got }) if got == reason => {}
            other => wrong.push(format!("{sql}: expected {reason:?}, got {other:?}")),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn placeholder_count_must_match_params() {
    for (sql, params, placeholders) in [
        ("SELECT ?", 0, 1),
        ("SELECT 1", 1, 0),
        ("SELECT * FROM t WHERE a = ? AND b = ?", 1, 2),
    ] {
        match check_query(sql, params) {
            Err(error @ Error::ParamCountMismatch { .. }) => {
                assert!(matches!(
                    error,
                    Error::ParamCountMismatch { placeholders: p, params: q } if p == placeholders && q == params
                ));
                assert_eq!(
                    error.execution_kind(),
                    invocation_core::ExecutionErrorKind::InvalidInput
                );
            }
            other => panic!("{sql}: {other:?}"),
        }
    }
}

#[test]
fn rejections_never_echo_the_statement() {
    let sql = "SELECT secret_column FROM t INTO OUTFILE '/tmp/leak'";
    let error = check_query(sql, 0).unwrap_err();
    for text in [error.to_string(), format!("{error:?}")] {
        assert!(
            !text.contains("secret_column") && !text.contains("/tmp/leak"),
            "{text}"
        );
    }
    assert_eq!(error.code(), "QUERY_REJECTED");
}

#[test]
fn tables_must_be_in_the_allowed_schemas() {
    use Rejection::{SchemaNotAllowed, StoredFunction, UnsupportedTable};
    for sql in [
        "SELECT * FROM orders",
        "SELECT * FROM shop.orders",
        "SELECT * FROM `shop`.`orders` o JOIN customers c ON c.id = o.customer_id",
        "SELECT * FROM information_schema.columns",
        "SELECT * FROM orders WHERE id IN (SELECT id FROM shop.returns)",
        "WITH r AS (SELECT * FROM shop.returns) SELECT * FROM r",
        "SELECT * FROM (SELECT id FROM shop.orders) AS d",
        "SELECT jt.a FROM JSON_TABLE('[1, 2]', '$[*]' COLUMNS (a INT PATH '$')) AS jt",
        "SELECT COUNT(*) FROM orders a, orders b",
    ] {
        assert!(
            check_query(sql, 0).is_ok(),
            "{sql}: {:?}",
            check_query(sql, 0)
        );
    }
    let mut wrong = Vec::new();
    for (sql, reason) in [
        ("SELECT * FROM mysql.user", SchemaNotAllowed),
        ("SELECT * FROM `mysql`.`user`", SchemaNotAllowed),
        (
            "SELECT * FROM orders JOIN mysql.user u ON 1 = 1",
            SchemaNotAllowed,
        ),
        (
            "SELECT (SELECT authentication_string FROM mysql.user LIMIT 1)",
            SchemaNotAllowed,
        ),
        (
            "SELECT * FROM orders WHERE EXISTS (SELECT 1 FROM sys.x)",
            SchemaNotAllowed,
        ),
        (
            "WITH x AS (SELECT * FROM performance_schema.threads) SELECT * FROM x",
            SchemaNotAllowed,
        ),
        (
            "SELECT a FROM shop.t UNION SELECT b FROM other.t",
            SchemaNotAllowed,
        ),
        (
            "SELECT * FROM (SELECT * FROM other.t) AS d",
            SchemaNotAllowed,
        ),
        // Exact comparison: another spelling is another schema on most servers.
        ("SELECT * FROM SHOP.orders", SchemaNotAllowed),
        ("SELECT * FROM `shop `.orders", SchemaNotAllowed),
        ("SELECT * FROM `ѕhop`.orders", SchemaNotAllowed),
        ("SELECT * FROM a.b.c", UnsupportedTable),
        ("SELECT shop.refund_all()", StoredFunction),
        ("SELECT * FROM orders WHERE id = mysql.f(1)", StoredFunction),
    ] {
        match check_query(sql, 0) {
            Err(Error::QueryRejected { reason: got }) if got == reason => {}
            other => wrong.push(format!("{sql}: expected {reason:?}, got {other:?}")),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // With no schema allowed, only unqualified tables pass.
    let none = AllowedSchemas::default();
    assert!(check_with("SELECT * FROM orders", 0, &none).is_ok());
    assert!(check_with("SELECT * FROM shop.orders", 0, &none).is_err());
}

#[test]
fn nested_queries_follow_the_same_rules() {
    let mut wrong = Vec::new();
    for sql in [
        "SELECT EXISTS (TABLE mysql.user)",
        "SELECT * FROM orders WHERE id IN (TABLE mysql.user)",
        "SELECT * FROM orders WHERE id IN (VALUES ROW(1))",
        "SELECT (SELECT 1 INTO @x)",
        "SELECT * FROM orders WHERE id = (SELECT id FROM orders LIMIT 1 FOR UPDATE)",
        "SELECT * FROM (TABLE mysql.user) AS d",
        "SELECT * FROM orders WHERE EXISTS (SELECT * FROM (TABLE mysql.user) AS d)",
    ] {
        if check_query(sql, 0).is_ok() {
            wrong.push(sql);
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Statements the server lexes differently from sqlparser: each would have
/// hidden code from the gate (found by review, confirmed on MariaDB 10.11).
#[test]
fn tokens_the_server_reads_differently_are_refused() {
    let mut wrong = Vec::new();
    for sql in [
        // sqlparser: a byte string without escapes; the server: `b`, then a string with them.
        "SELECT b\"\\\" AS x, \" , s FROM other.secret, (SELECT 1 AS b) d -- \"",
        "SELECT b\"x\"",
        // sqlparser: one word `1.5FROM`; the server: 1.5 FROM.
        "SELECT s, 1.5FROM(other.secret)",
        "SELECT s, .5FROM(other.secret)",
        "SELECT s, 1.FROM(other.secret)",
        "SELECT 1.5INTO @a",
        "SELECT 1FROM t",
        // sqlparser: hex 0x1F then OR; the server: one identifier.
        "SELECT 0x1FOR",
        // sqlparser: a comment; the server: two minus signs, then code.
        "SELECT `\u{a0}` FROM (SELECT 1 AS `\u{a0}`) d WHERE 1 --\u{a0} UNION SELECT s FROM other.secret",
        "SELECT 1 --\u{3000} UNION SELECT s FROM other.secret",
        "SELECT 1 --\u{2028} UNION SELECT s FROM other.secret",
        "SELECT 1 --",
        // NUL, which the server takes as the end of the statement.
        "SELECT 1 # x \0 , SLEEP(1)",
        // Outside MySQL's grammar.
        "SELECT {d '2020-01-01'}",
        "SELECT a::int FROM t",
        "SELECT b'012'",
    ] {
        match check_query(sql, 0) {
            Err(Error::QueryRejected { .. }) => {}
            other => wrong.push(format!("{sql:?}: {other:?}")),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // What MySQL itself writes this way still passes.
    for sql in [
        "SELECT 1 -- comment",
        "SELECT 1 --\tcomment",
        "SELECT 1.5 FROM t",
        "SELECT 1e5, .5, 1., 0x1F, X'0A', b'0101', N'x', _utf8mb4'a\\'b'",
        "SELECT \"a \\\" b\", 'it''s', `a``b`",
        "SELECT a->'$.b', a->>'$.c', a <=> b, ~a, a << 1, a & b, a ^ b, a | b",
        "SELECT @@version, @@session.sql_mode, @x",
        "SELECT `1st_column` FROM t",
    ] {
        assert!(
            check_query(sql, 0).is_ok(),
            "{sql:?}: {:?}",
            check_query(sql, 0)
        );
    }
}

#[test]
fn plugin_and_session_functions_are_denied() {
    for sql in [
        "SELECT LAST_INSERT_ID(777)",
        "SELECT WSREP_SYNC_WAIT_UPTO_GTID('x')",
        "SELECT SERVICE_GET_WRITE_LOCKS('ns', 'l', 10)",
        "SELECT KEYRING_KEY_STORE('k', 'AES', 'x')",
        "SELECT version_tokens_set('a=1')",
        "SELECT SPIDER_DIRECT_SQL('DROP TABLE t', 'srv', '')",
        "SELECT jfile_make('x', 'f.json')",
        "SELECT audit_log_filter_set_filter('f', '{}')",
        "SELECT group_replication_set_as_primary('u')",
    ] {
        assert!(
            matches!(
                check_query(sql, 0),
                Err(Error::QueryRejected {
                    reason: Rejection::ForbiddenFunction
                })
            ),
            "{sql}: {:?}",
            check_query(sql, 0)
        );
    }
}

/// Second review: words sqlparser extends past where the server ends them
/// (confirmed on MariaDB 10.11: the first read another schema's table).
#[test]
fn words_the_server_splits_are_refused() {
    let mut wrong = Vec::new();
    for sql in [
        "SELECT @@`version` AS v, (SELECT s FROM other.secret) AS x -- `",
        "SELECT @@`version` AS v, SLEEP(2) -- `",
        "SELECT @@`version` AS v, @a := 5 -- `",
        "SELECT @@`version` AS v FROM t LIMIT 1 INTO @v -- `",
        "SELECT @`x` AS v, (SELECT s FROM other.secret) AS x -- `",
        "SELECT @'x', (SELECT s FROM other.secret) -- '",
        "SELECT id INTO@x FROM t LIMIT 1",
        "SELECT @/x",
        "SELECT @aé",
        "SELECT 1e5L",
        "SELECT 0x.f(1)",
        "SELECT 0x",
    ] {
        if check_query(sql, 0).is_ok() {
            wrong.push(sql);
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    for sql in [
        "SELECT @@version, @@global.version_comment, @@session.sql_mode",
        "SELECT @x, @user_1, @v$",
        "SELECT café, `naïve` FROM t",
    ] {
        assert!(
            check_query(sql, 0).is_ok(),
            "{sql:?}: {:?}",
            check_query(sql, 0)
        );
    }
}

/// Third review: a user variable ending in a dot hid a FROM clause
/// (confirmed on MariaDB 10.11: read another schema's table).
#[test]
fn a_dot_never_glues_a_keyword_into_a_name() {
    let mut wrong = Vec::new();
    for sql in [
        "SELECT *, @a. FROM t, other.secret",
        "SELECT secret.s, @a. FROM t, other.secret",
        "WITH d AS (SELECT 1 AS x) SELECT *, @a. FROM d, other.secret",
        "SELECT * FROM t WHERE EXISTS (SELECT *, @a. FROM t, other.secret WHERE s LIKE 'TOP%')",
        "SELECT *, @a.\nFROM t, other.secret",
        "SELECT *, @a./**/FROM t, other.secret",
        "SELECT *, @a. # x\nFROM t, other.secret",
        "SELECT *, @a.b. FROM t, other.secret",
        "SELECT t. FROM t",
        "SELECT $$x$$",
        "SELECT $x",
        "SELECT SPIDER_PING_TABLE('x')",
        "SELECT ENVAR('HOME')",
        "SELECT keyring_aws_rotate_cmk()",
    ] {
        if check_query(sql, 0).is_ok() {
            wrong.push(sql);
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    for sql in [
        "SELECT t.a, o.b FROM shop.t JOIN shop.o ON o.id = t.id",
        "SELECT x$ FROM t",
    ] {
        assert!(
            check_query(sql, 0).is_ok(),
            "{sql:?}: {:?}",
            check_query(sql, 0)
        );
    }
}

/// Fourth review: sqlparser's statement list stopped silently at an unquoted
/// `END` (an alias to the server), and three-part names crash MariaDB 10.11
/// in NATURAL JOIN / USING queries (both confirmed on MariaDB 10.11.19).
#[test]
fn the_whole_text_is_one_statement_and_names_have_two_parts_at_most() {
    let mut wrong = Vec::new();
    for sql in [
        "SELECT s END FROM other.secret",
        "SELECT a FROM t END UNION SELECT s FROM other.secret",
        "SELECT a END, (SELECT s FROM other.secret LIMIT 1) AS leaked FROM t",
        "SELECT 1 END, other.f()",
        "SELECT 1 END; DROP TABLE t",
        "SELECT 1 END UNION TABLE mysql.user",
        "SELECT x.y.z FROM t NATURAL JOIN u",
        "SELECT 1 FROM t LEFT JOIN u USING (a) WHERE x.y.z = 1",
        "SELECT 1 FROM t NATURAL JOIN u WHERE MATCH (x.y.z) AGAINST ('a')",
        "SELECT shop.t.* FROM shop.t",
        "SELECT MROONGA_COMMAND('status')",
        "SELECT do_system('id')",
    ] {
        if check_query(sql, 0).is_ok() {
            wrong.push(sql);
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    for sql in [
        "SELECT `end` FROM t",
        "SELECT a AS `end` FROM t;",
        "SELECT CASE WHEN a > 1 THEN 'x' ELSE 'y' END AS c FROM t",
        "SELECT 1;;",
    ] {
        assert!(
            check_query(sql, 0).is_ok(),
            "{sql:?}: {:?}",
            check_query(sql, 0)
        );
    }
}

/// The model must not learn the infrastructure: host names, paths, ports,
/// the account. Only a short allow-list of system variables is readable.
#[test]
fn system_variables_and_identity_functions_are_refused() {
    let system_variable = [
        "SELECT @@hostname",
        "SELECT @@datadir",
        "SELECT @@port",
        "SELECT @@socket",
        "SELECT @@pid_file",
        "SELECT @@basedir",
        "SELECT @@tmpdir",
        "SELECT @@server_id",
        "SELECT @@report_host",
        "SELECT @@global.hostname",
        "SELECT @@GLOBAL.datadir",
        "SELECT @@session.port",
        "SELECT @@local.socket",
        "SELECT @@global.max_connections",
        "SELECT @@HOSTNAME AS h FROM t",
        "SELECT id FROM t WHERE note = @@hostname",
        "SELECT (SELECT @@datadir) AS d",
        "SELECT @@version, @@hostname",
        "SELECT @@version.x",
        "SELECT @@session",
        "SELECT @@global.`hostname`",
    ];
    let forbidden_function = [
        "SELECT USER()",
        "SELECT user()",
        "SELECT CURRENT_USER()",
        "SELECT CURRENT_USER",
        "SELECT current_user AS u",
        "SELECT SESSION_USER()",
        "SELECT SYSTEM_USER()",
        "SELECT CURRENT_ROLE()",
        "SELECT CURRENT_ROLE",
        "SELECT CONNECTION_ID()",
        "SELECT UUID()",
        "SELECT UUID_SHORT()",
        "SELECT SYS_GUID()",
        "SELECT `USER`()",
        "SELECT id FROM t WHERE note = USER()",
    ];
    let server_information = [
        "SELECT * FROM information_schema.GLOBAL_VARIABLES",
        "SELECT VARIABLE_VALUE FROM information_schema.global_variables WHERE VARIABLE_NAME = 'HOSTNAME'",
        "SELECT * FROM INFORMATION_SCHEMA.SESSION_VARIABLES",
        "SELECT * FROM information_schema.SYSTEM_VARIABLES",
        "SELECT HOST FROM information_schema.PROCESSLIST",
        "SELECT GRANTEE FROM information_schema.USER_PRIVILEGES",
        "SELECT * FROM information_schema.GLOBAL_STATUS",
    ];
    let schemas = AllowedSchemas::new(["shop", "information_schema"]);
    let mut wrong = Vec::new();
    for (sqls, expected) in [
        (&system_variable[..], Rejection::SystemVariable),
        (&forbidden_function[..], Rejection::ForbiddenFunction),
        (&server_information[..], Rejection::ServerInformation),
    ] {
        for sql in sqls {
            match check_with(sql, 0, &schemas) {
                Err(Error::QueryRejected { reason }) if reason == expected => {}
                other => wrong.push(format!("{sql:?}: {other:?}, expected {expected:?}")),
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    for sql in [
        "SELECT @@version, @@version_comment, @@sql_mode, @@time_zone",
        "SELECT @@session.time_zone, @@global.version, @@LOCAL.sql_mode",
        "SELECT `user`, `current_user` FROM t",
        "SELECT user FROM t",
        "SELECT DATABASE()",
        "SELECT TABLE_NAME FROM information_schema.TABLES",
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_NAME = ?",
    ] {
        let params = sql.matches('?').count();
        assert!(
            check_with(sql, params, &schemas).is_ok(),
            "{sql:?}: {:?}",
            check_with(sql, params, &schemas)
        );
    }
}

/// Found by the differential gate test (`gate_differential.rs`): MariaDB
/// 10.11.19 aborts (`pure virtual method called` in
/// `Item_func::check_argument_types_like_args0`) on a prepared grouped query
/// whose `IN`, `ANY` or `ALL` subquery reads no table and selects a column
/// of the outer query. The gate refuses every quantified subquery without a
/// table (it is a plain comparison written another way); the same
/// subqueries with a table, `EXISTS` and scalar subqueries stay allowed.
/// Its longer run then crashed it (SIGSEGV in `Item::split_sum_func2`) with a
/// table-less subquery grouped by an outer column inside an aggregate of a
/// subquery: a query without a table may not have `GROUP BY` (it has one
/// row). And then (SIGSEGV in `Item_func_ne::add_key_fields`) with a grouped
/// `EXISTS` subquery limited to no row (`LIMIT 0`, or `LIMIT ?` bound to 0):
/// an `EXISTS` subquery may not have a limit. And (`Item::split_sum_func2`
/// again) with a subquery grouped by a column two levels out inside an
/// aggregate: no grouped subquery inside an aggregate (the gate cannot tell
/// outer columns). And (`Item_func_json_extract::read_json`, even as a
/// plain query) with `s <=> JSON_EXTRACT(1, '$[0]')` in a WHERE: no `<=>`
/// with a `JSON_*` call. And (SIGSEGV in `Item_func_ne::add_key_fields`
/// again, prepared only) with a grouped `IN`/`ANY`/`ALL`/`EXISTS` subquery
/// that finds no row (`WHERE 0`, `WHERE ?` bound to 0, `WHERE DEFAULT(a)`,
/// `JOIN ... ON 0`, `LIMIT 0`) and selects a subquery whose `WHERE` tests
/// one of its columns (`SELECT 1 IN (SELECT (SELECT 1 FROM t1 WHERE t2.a)
/// FROM t2 WHERE 0 GROUP BY a)`): a grouped quantified or `EXISTS` subquery
/// may not select a subquery (the gate can tell neither an empty result
/// nor an outer column).
#[test]
fn constructs_that_crashed_mariadb_are_refused() {
    for sql in [
        "SELECT s, EXISTS (SELECT SUM(EXISTS (SELECT 0x41 WHERE 1.5e3 GROUP BY s))) FROM t1 IGNORE INDEX (PRIMARY) ORDER BY 1",
        "SELECT (SELECT SUM((SELECT 1 GROUP BY s))) FROM t",
        "SELECT (SELECT COUNT((SELECT 1 FROM DUAL GROUP BY s))) FROM t",
        "SELECT 1 GROUP BY 1",
        "WITH c AS (SELECT ROW_COUNT() FROM t2 AS x LIMIT 1) SELECT SQL_NO_CACHE a IN (SELECT a FROM DUAL) FROM t1 x GROUP BY id HAVING id",
        "SELECT a IN (SELECT a) FROM t GROUP BY id",
        "SELECT a NOT IN (SELECT a) FROM t GROUP BY id",
        "SELECT a = ANY (SELECT a) FROM t GROUP BY id",
        "SELECT a = SOME (SELECT a FROM dual) FROM t GROUP BY id",
        "SELECT a > ALL (SELECT s) FROM t GROUP BY id",
        "SELECT MAX(a) IN ((SELECT a)) FROM t GROUP BY id",
        "SELECT id FROM t WHERE a IN (SELECT a) GROUP BY id",
        "SELECT a IN (SELECT 1) FROM t",
        "SELECT (SELECT id IN (SELECT EXISTS (SELECT a FROM t1 x WHERE amount GROUP BY a HAVING s) FROM t2 AS x WHERE DEFAULT(a) GROUP BY s ORDER BY RAND()) FROM t1 LIMIT 0) FROM t1 x",
        "SELECT id IN (SELECT EXISTS (SELECT a FROM t1 x WHERE amount) FROM t2 AS x WHERE DEFAULT(a) GROUP BY s) FROM t1",
        "SELECT 1 IN (SELECT (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE 0 GROUP BY a)",
        "SELECT id FROM t1 WHERE id IN (SELECT (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE 0 GROUP BY a)",
        "SELECT 1 NOT IN (SELECT (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE 0 GROUP BY a)",
        "SELECT 1 IN ((SELECT (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE 0 GROUP BY a))",
        "SELECT 1 = ANY (SELECT (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE 0 GROUP BY a)",
        "SELECT 1 <> ALL ((SELECT (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE 0 GROUP BY a))",
        "SELECT EXISTS (SELECT (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE 0 GROUP BY a)",
        "SELECT NOT EXISTS (SELECT (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE 0 GROUP BY a)",
        "SELECT 1 IN (SELECT (SELECT 1 FROM t1 WHERE t2.a) + 1 FROM t2 JOIN t1 ON 0 GROUP BY t2.a)",
        "SELECT 1 IN (SELECT t2.a IN (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE DEFAULT(s) GROUP BY a ORDER BY 1)",
        "SELECT 1 IN (SELECT a FROM t2 UNION (SELECT (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE 0 GROUP BY a))",
    ] {
        assert!(
            matches!(
                check_query(sql, 0),
                Err(Error::QueryRejected {
                    reason: Rejection::KnownServerCrash
                })
            ),
            "{sql}: {:?}",
            check_query(sql, 0)
        );
    }
    for sql in [
        "SELECT a IN (SELECT a FROM u) FROM t GROUP BY id",
        "SELECT a IN (SELECT b FROM u UNION SELECT 1) FROM t",
        "SELECT a = ANY (SELECT b FROM u) FROM t GROUP BY id",
        "SELECT EXISTS (SELECT a) FROM t GROUP BY id",
        "SELECT a = (SELECT a) FROM t GROUP BY id",
        "SELECT a IN (1, 2) FROM t GROUP BY id",
        "SELECT (SELECT 1 HAVING 1) FROM t",
        "SELECT (SELECT a FROM u LIMIT 1) FROM t",
        "SELECT 1 FROM (SELECT a FROM u LIMIT 0) d",
        "SELECT a FROM t GROUP BY a LIMIT 0",
        "SELECT MAX((SELECT b FROM u WHERE u.id = t.id)) FROM t",
        "SELECT (SELECT MAX(b) FROM u GROUP BY c LIMIT 1) FROM t",
        "SELECT s FROM t WHERE s = JSON_EXTRACT(j, '$.k') OR s <=> NULL",
        "SELECT a FROM t1 WHERE a IN (SELECT t2.a FROM t2 WHERE t2.s = t1.s GROUP BY t2.a)",
        "SELECT a FROM t1 WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.a = t1.a GROUP BY t2.a HAVING COUNT(*) > 1)",
        "SELECT 1 IN (SELECT (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE 0)",
        "SELECT 1 IN (SELECT a FROM t2 WHERE 0 GROUP BY a HAVING (SELECT 1 FROM t1 WHERE t2.a))",
        "SELECT 1 = (SELECT (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE 0 GROUP BY a)",
        "SELECT 1 IN (SELECT x FROM (SELECT (SELECT 1 FROM t1 WHERE t2.a) x FROM t2 WHERE 0 GROUP BY a) d)",
        "SELECT (SELECT 1 FROM t1 WHERE t2.a) FROM t2 WHERE 0 GROUP BY a",
    ] {
        assert!(
            check_query(sql, 0).is_ok(),
            "{sql:?}: {:?}",
            check_query(sql, 0)
        );
    }
}
