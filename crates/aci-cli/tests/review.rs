//! The review page of a run in a real browser: `aci serve --http` on a
//! spawned Redis, a run of a dozen calls made over MCP, the page opened in
//! headless Chromium over WebDriver; and `aci report`'s file opened from
//! `file://` with the network off.
//!
//! What the page must show is read from the store through the server's own
//! JSON routes (`/runs/<run_id>/calls`, as `aci inspect --json`), never
//! written into the test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};

use aci_contracts::ErrorCode;
use projectors_mysql::testing::TestDatabase;
use serde_json::{Value, json};
use support::browser::Browser;
use support::command::{aci_async, stderr};
use support::contract::{call, ids};
use support::files::{config_file, temp_dir, temp_file, unique, write_in};
use support::http::keys::{SigningKey, claims, jwks};
use support::http::replica::Replica;
use support::http::{http_client, sha256_hex};

/// The run's owner, another principal, and a reviewer (`review = true`).
const OWNER: &str = "token-of-oncall-bot-5e1d";
const OTHER: &str = "token-of-other-bot-0b7a";
const REVIEWER: &str = "token-of-reviewer-c4f2";

/// A query whose raw matches are many more than the result's bound.
const SLOW_SQL: &str =
    "SELECT COUNT(*) AS c FROM t a, t b, t c, t d WHERE a.n + b.n + c.n + d.n > ?";

/// Where the tests leave what a person may look at.
fn artifacts() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("review")
}

/// The knowledge base: one runbook, with a credential the model must not see.
const RUNBOOK: &str = "# Connection pool exhausted\n\n\
    When HikariPool reports that a connection is not available, the connection pool is \
    exhausted: requests wait for a connection until they time out.\n\n\
    ## Check the pool\n\n\
    Compare the pool size with the active connections. The reporting job connects with \
    password=Xq7vLm2RtZ9wKp4s and holds its connection for minutes.\n";

const ISSUER: &str = "https://login.example.test/";
const AUDIENCE: &str = "aci";

/// Three static principals, JWTs of `key` (reviewers by the `aci_review`
/// claim), a key prefix of its own, MariaDB's `shop` with a short statement
/// timeout.
fn config(db: &TestDatabase, key: &SigningKey) -> PathBuf {
    let prefix = store_redis::testing::unique_prefix();
    let knowledge = temp_dir("runbooks");
    write_in(&knowledge, "pool.md", RUNBOOK);
    let jwks_file = temp_file("jwks.json", &jwks(&[key]));
    let toml = format!(
        r#"[redis]
key_prefix = "{prefix}"
[knowledge]
dir = "{knowledge}"
persistent = false
[run]
budget = 40
[mysql.data_sources.shop]
url = "{url}"
timeout_ms = 300
[auth.tokens.oncall-bot]
sha256 = "{owner}"
[auth.tokens.other-bot]
sha256 = "{other}"
[auth.tokens.reviewer]
sha256 = "{reviewer}"
review = true
[auth.jwt]
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
jwks_file = "{jwks}"
review_claim = "aci_review"
"#,
        jwks = jwks_file.display(),
        knowledge = knowledge.display(),
        url = db.reader_url(),
        owner = sha256_hex(OWNER),
        other = sha256_hex(OTHER),
        reviewer = sha256_hex(REVIEWER),
    );
    config_file("review", &toml)
}

async fn shop() -> TestDatabase {
    let values: Vec<String> = (1..=120).map(|n| format!("({n})")).collect();
    let insert = format!("INSERT INTO t VALUES {}", values.join(","));
    TestDatabase::create(&["CREATE TABLE t (n INT)", &insert]).await
}

/// A run of a dozen calls as its owner: found, NO_EVIDENCE, a bounded long
/// log result, errors of several codes, a refused duplicate id, invalid input.
/// Returns the run id.
async fn a_run_of_a_dozen_calls(replica: &Replica) -> String {
    let client = replica.client("/mcp", Some(OWNER)).await;
    let run = unique("run");
    let calls: [(&str, &str, Value); 12] = [
        (
            "call_found",
            "lookup_knowledge",
            json!({"query": "connection pool exhausted"}),
        ),
        (
            "call_none",
            "lookup_knowledge",
            json!({"query": "quarterly marketing budget zebra"}),
        ),
        (
            "call_logs_long",
            "query_logs",
            json!({"topic": "APPLICATION", "query": "order", "lookback_minutes": 1440}),
        ),
        (
            "call_logs_none",
            "query_logs",
            json!({"topic": "SYSTEM_EVENTS", "query": "zebra"}),
        ),
        (
            "call_rows",
            "query_mysql",
            json!({"data_source": "shop", "sql": "SELECT n FROM t WHERE n > ?", "params": [0]}),
        ),
        (
            "call_unknown_source",
            "query_mysql",
            json!({"data_source": "orders", "sql": "SELECT 1"}),
        ),
        (
            "call_rejected",
            "query_mysql",
            json!({"data_source": "shop", "sql": "DELETE FROM t"}),
        ),
        (
            "call_timeout",
            "query_mysql",
            json!({"data_source": "shop", "sql": SLOW_SQL, "params": [0]}),
        ),
        (
            "call_found",
            "lookup_knowledge",
            json!({"query": "a duplicate id"}),
        ),
        (
            "call_logs",
            "query_logs",
            json!({"topic": "APPLICATION", "query": "timeout"}),
        ),
        (
            "call_found_again",
            "lookup_knowledge",
            json!({"query": "connection pool exhausted"}),
        ),
        (
            "call_invalid",
            "lookup_knowledge",
            json!({"qery": "misspelt"}),
        ),
    ];
    for (id, tool, arguments) in calls {
        call(&client, tool, arguments, ids(&run, id)).await;
    }
    client.cancel().await.unwrap();
    run
}

/// The run's records as the server's `/calls` route gives them (JSON lines,
/// as `aci inspect --json`), in time order.
async fn records(replica: &Replica, run: &str) -> Vec<Value> {
    let response = http_client()
        .get(replica.url(&format!("/runs/{run}/calls")))
        .bearer_auth(OWNER)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut lines: Vec<Value> = response
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines.sort_by_key(|r| r["created_at"].as_str().unwrap().to_owned());
    lines
}

fn id_of(record: &Value) -> &str {
    record["tool_call_id"].as_str().unwrap()
}

fn by_id<'a>(records: &'a [Value], id: &str) -> &'a Value {
    records
        .iter()
        .find(|r| id_of(r) == id)
        .unwrap_or_else(|| panic!("no record {id}"))
}

/// The outcome class the page gives a record.
fn outcome_class(record: &Value) -> &'static str {
    match (
        record["status"].as_str(),
        record["evidence_status"].as_str(),
    ) {
        (Some("ERROR"), _) => "error",
        (_, Some("NO_EVIDENCE")) => "no-evidence",
        (Some("READY"), _) => "evidence",
        _ => "projecting",
    }
}

/// The timeline's bars: one per record, in time order, coloured by outcome.
async fn assert_timeline(browser: &Browser, records: &[Value]) {
    let bars = browser.all("ol.timeline a.bar:not(.refused)").await;
    let mut shown = Vec::new();
    for bar in &bars {
        let id = bar.attr("data-tool-call-id").await.unwrap().unwrap();
        let class = bar.attr("class").await.unwrap().unwrap();
        let start: i64 = bar
            .attr("data-start-ms")
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();
        shown.push((id, class, start));
    }
    let expected: Vec<&str> = records.iter().map(id_of).collect();
    let ids: Vec<&str> = shown.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids, expected, "one bar per call, in time order");
    assert!(shown.windows(2).all(|w| w[0].2 <= w[1].2), "{shown:?}");
    for ((id, class, _), record) in shown.iter().zip(records) {
        assert!(
            class.split(' ').any(|c| c == outcome_class(record)),
            "bar of {id}: {class}"
        );
    }
    // The calls refused before they had a record are marks, each with its
    // code, and listed under the calls: the duplicate id (the first call's
    // record stays) and the invalid input.
    let mut refused = Vec::new();
    for mark in browser.all("ol.timeline a.bar.refused.mark").await {
        refused.push((
            mark.attr("data-tool-call-id")
                .await
                .unwrap()
                .unwrap_or_default(),
            mark.attr("data-code").await.unwrap().unwrap(),
        ));
    }
    refused.sort();
    assert_eq!(
        refused,
        [
            ("call_found".to_owned(), "DUPLICATE_TOOL_CALL".to_owned()),
            ("call_invalid".to_owned(), "INVALID_INPUT".to_owned()),
        ],
        "one mark per refused call"
    );
    let listed = browser.wait_for("ol.refusals").await.text().await.unwrap();
    assert!(
        listed.contains("call_invalid") && listed.contains("DUPLICATE_TOOL_CALL"),
        "{listed}"
    );
    assert!(
        !listed.contains("misspelt"),
        "no arguments of a refused call: {listed}"
    );
}

/// Following the timeline bar of `id` (a link, reached by keyboard too)
/// opens its call.
async fn open_by_its_bar(browser: &Browser, id: &str) {
    browser
        .wait_for(&format!("ol.timeline a.bar[data-tool-call-id=\"{id}\"]"))
        .await
        .click()
        .await
        .unwrap();
    browser
        .wait_for(&format!("details.call[data-tool-call-id=\"{id}\"][open]"))
        .await;
}

/// Expands the call `id` by a click on its summary and returns
/// its `details` element's selector.
async fn expand(browser: &Browser, id: &str) -> String {
    let selector = format!("details.call[data-tool-call-id=\"{id}\"]");
    browser
        .wait_for(&format!("{selector} > summary"))
        .await
        .click()
        .await
        .unwrap();
    browser.wait_for(&format!("{selector}[open] .views")).await;
    selector
}

/// Expanding calls shows both views; the bounded call marks what was cut;
/// an ERROR shows its code and the code's meaning.
/// A screenshot of the page's top with the bounded call open goes to `shot`.
async fn assert_calls(browser: &Browser, records: &[Value], shot: &Path) {
    let details = browser.all("details.call").await;
    assert_eq!(details.len(), records.len());

    let bounded = records
        .iter()
        .find(|r| id_of(r) == "call_logs_long")
        .unwrap();
    assert_eq!(bounded["agent_result"]["truncated"], true, "{bounded}");
    // No layout shift when expanding: the clicked summary and everything
    // above it (the timeline) stay where they were.
    let place = "var s=document.querySelector('details.call[data-tool-call-id=\"call_logs_long\"] > summary').getBoundingClientRect();\
        var t=document.querySelector('ol.timeline').getBoundingClientRect();\
        return [s.top+window.scrollY, s.left, s.width, t.top+window.scrollY, t.height];";
    let before = browser.eval(place).await;
    let call = expand(browser, "call_logs_long").await;
    assert_eq!(
        browser.eval(place).await,
        before,
        "expanding moved what is above"
    );
    let model = browser.wait_for(&format!("{call} pre.observation")).await;
    let raw = browser.wait_for(&format!("{call} pre.raw")).await;
    assert!(model.is_displayed().await.unwrap() && raw.is_displayed().await.unwrap());
    assert!(model.text().await.unwrap().contains("\"truncated\": true"));
    let cut = browser.all(&format!("{call} pre.raw .cut")).await;
    let not_returned = bounded["agent_result"]["match_count"].as_u64().unwrap()
        - bounded["agent_result"]["returned_count"].as_u64().unwrap();
    assert!(not_returned > 0, "{bounded}");
    assert!(!cut.is_empty(), "the cut part is marked");
    assert!(cut[0].is_displayed().await.unwrap());
    let notes = browser.wait_for(&format!("{call} ul.bounded")).await;
    assert!(
        notes
            .text()
            .await
            .unwrap()
            .contains(&format!("{not_returned} of ")),
        "{}",
        notes.text().await.unwrap()
    );
    // The phases the boundary timed: it ran and projected this one.
    let phases = browser.all(&format!("{call} dd.durations .phase")).await;
    let mut named = Vec::new();
    for phase in &phases {
        named.push(phase.attr("data-phase").await.unwrap().unwrap());
    }
    assert_eq!(named, ["preflight", "execution", "projection"]);
    assert!(bounded["timings_us"]["execution"].is_u64(), "{bounded}");
    // Redactions: counted in the notes, the marker in the model's view, the
    // secret only in the raw response.
    let found = expand(browser, "call_found").await;
    let notes = browser
        .wait_for(&format!("{found} ul.bounded"))
        .await
        .text()
        .await
        .unwrap();
    assert!(notes.contains("redacted by rule"), "{notes}");
    let model_text = browser
        .wait_for(&format!("{found} pre.observation"))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        model_text.contains("<redacted:") && !model_text.contains("Xq7vLm2RtZ9wKp4s"),
        "{model_text}"
    );
    let raw_text = browser
        .wait_for(&format!("{found} pre.raw"))
        .await
        .text()
        .await
        .unwrap();
    assert!(raw_text.contains("Xq7vLm2RtZ9wKp4s"), "{raw_text}");
    // Side by side at 1280 px.
    let (mx, my, _, _) = model.rectangle().await.unwrap();
    let (rx, ry, _, _) = raw.rectangle().await.unwrap();
    assert!(rx > mx && (ry - my).abs() < 1.0, "views side by side");
    browser.client.set_window_size(1280, 1500).await.unwrap();
    browser.eval("window.scrollTo(0, 0); return null;").await;
    browser.screenshot(shot).await;
    browser.client.set_window_size(1280, 900).await.unwrap();

    for record in records.iter().filter(|r| r["status"] == "ERROR") {
        let code = ErrorCode::parse(record["error_code"].as_str().unwrap()).unwrap();
        let call = expand(browser, id_of(record)).await;
        let text = browser
            .wait_for(&format!("{call} dd.error-code"))
            .await
            .text()
            .await
            .unwrap();
        assert!(
            text.contains(code.as_str()) && text.contains(code.message()),
            "{text}"
        );
        let observation = browser
            .wait_for(&format!("{call} pre.observation"))
            .await
            .text()
            .await
            .unwrap();
        assert!(observation.contains(code.as_str()), "{observation}");
    }
}

/// The answer of the citation check: each kind of citation once.
fn answer() -> String {
    format!(
        "The pool ran out [call_found], nothing in the knowledge base about budgets \
         (call_none). The shop query failed [call_timeout]. See also [call_made_up] \
         and [{other}/call_found].",
        other = unique("run")
    )
}

/// The marks of the check, by citation.
async fn assert_citations(browser: &Browser, records: &[Value]) {
    browser.wait_for("#cited li").await;
    let mut marks = Vec::new();
    for li in browser.all("#cited li").await {
        let text = li.text().await.unwrap();
        let mark = li.attr("data-mark").await.unwrap().unwrap();
        marks.push((text.split(' ').next().unwrap().to_owned(), mark));
    }
    let kinds: Vec<&str> = marks.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(
        kinds,
        ["stands", "not-citable", "unknown", "other-run", "negative"],
        "{marks:?}"
    );
    assert_eq!(marks[0].0, "call_found");
    assert_eq!(marks[4].0, "call_none");
    let mut uncited = Vec::new();
    for li in browser.all("#uncited li").await {
        uncited.push(li.text().await.unwrap());
    }
    let expected: Vec<&str> = records
        .iter()
        .map(id_of)
        .filter(|id| !["call_found", "call_none", "call_timeout"].contains(id))
        .collect();
    assert_eq!(uncited, expected);
}

async fn check_citations(browser: &Browser) {
    let textarea = browser.wait_for("#answer").await;
    textarea.send_keys(&answer()).await.unwrap();
    browser
        .wait_for("#citation-form button[type=submit]")
        .await
        .click()
        .await
        .unwrap();
}

async fn status_of(replica: &Replica, path: &str, token: Option<&str>) -> (u16, String, String) {
    let mut request = http_client().get(replica.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let cache = response
        .headers()
        .get("cache-control")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (
        response.status().as_u16(),
        cache,
        response.text().await.unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_review_page_shows_a_run_in_a_real_browser() {
    let db = shop().await;
    let redis = store_redis::testing::RedisServer::spawn().unwrap();
    let key = SigningKey::es256("review-ec");
    let config = config(&db, &key);
    let replica = Replica::start(&config, &redis.url(), &[]).await;
    let run = a_run_of_a_dozen_calls(&replica).await;
    let records = records(&replica, &run).await;

    // What the run holds: the kinds the page must show.
    let codes: Vec<&str> = records
        .iter()
        .filter_map(|r| r["error_code"].as_str())
        .collect();
    assert!(
        codes.len() >= 2 && codes.contains(&"EXECUTION_TIMEOUT"),
        "{codes:?}"
    );
    assert_eq!(
        by_id(&records, "call_none")["evidence_status"],
        "NO_EVIDENCE"
    );
    let redacted = by_id(&records, "call_found");
    assert!(
        redacted["redactions"]
            .as_object()
            .is_some_and(|r| !r.is_empty()),
        "{redacted}"
    );
    assert_eq!(
        records.iter().filter(|r| id_of(r) == "call_found").count(),
        1,
        "the refused duplicate left the first call's record alone"
    );

    // Who may see it: the owner and the reviewer; not another principal,
    // whether the run exists or not; nobody without a token.
    let page = format!("/runs/{run}");
    let (status, cache, _) = status_of(&replica, &page, Some(OWNER)).await;
    assert_eq!((status, cache.as_str()), (200, "no-store"));
    assert_eq!(status_of(&replica, &page, Some(REVIEWER)).await.0, 200);
    assert_eq!(status_of(&replica, &page, None).await.0, 401);
    let forbidden = status_of(&replica, &page, Some(OTHER)).await;
    let unknown = status_of(&replica, &format!("/runs/{}", unique("run")), Some(OTHER)).await;
    assert_eq!(forbidden.0, 403);
    assert_eq!(forbidden, unknown, "no hint whether the run exists");
    let one = format!("/runs/{run}/calls/call_rows");
    assert_eq!(status_of(&replica, &one, Some(OTHER)).await.0, 403);
    let (status, cache, body) = status_of(&replica, &one, Some(REVIEWER)).await;
    assert_eq!((status, cache.as_str()), (200, "no-store"));
    let with_raw: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(with_raw["tool_call_id"], "call_rows");
    assert!(with_raw["raw"].is_object(), "{with_raw}");
    assert_eq!(with_raw["run"]["owner"], "oncall-bot");

    let browser = Browser::start().await;
    browser.send_bearer(OWNER).await;
    browser.open(&replica.url(&page)).await;
    browser.wait_for("ol.timeline").await;
    assert_timeline(&browser, &records).await;
    open_by_its_bar(&browser, "call_rows").await;
    assert_calls(&browser, &records, &artifacts().join("served-run.png")).await;
    check_citations(&browser).await;
    assert_citations(&browser, &records).await;
    // A phone's width: nothing wider than the screen.
    browser.client.set_window_size(390, 844).await.unwrap();
    let overflow = browser
        .eval("return document.documentElement.scrollWidth - document.documentElement.clientWidth;")
        .await;
    assert!(overflow.as_i64().unwrap() <= 0, "{overflow}");

    // Another principal's browser gets 403.
    browser.send_bearer(OTHER).await;
    browser.open(&replica.url(&page)).await;
    let body = browser.wait_for("body").await.text().await.unwrap();
    assert!(body.contains("forbidden") && !body.contains(&run), "{body}");
    browser.close().await;

    sign_in_in_a_browser(&replica, &page).await;

    // `aci report`: the same page as a file, opened with the network off.
    let out = artifacts().join(format!("{run}.html"));
    std::fs::create_dir_all(artifacts()).unwrap();
    let output = aci_async(&[
        "report",
        "--run",
        &run,
        "--store",
        &redis.url(),
        "--config",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert_offline_report(&out, &records).await;
    let (status, stderr) = replica.stop().await;
    assert!(status.success(), "{stderr}");
}

/// A person's browser, with no header set: the page sends it to the
/// sign-in form, a wrong token is refused there, the owner's token signs it
/// in (an `HttpOnly` cookie: no script sees it) and lands on the page;
/// signing out ends it.
async fn sign_in_in_a_browser(replica: &Replica, page: &str) {
    let browser = Browser::start().await;
    browser.open(&replica.url(page)).await;
    browser.wait_for("form[action=\"/login\"]").await;
    let url = browser.client.current_url().await.unwrap();
    assert_eq!(url.path(), "/login", "{url}");
    assert!(!url.as_str().contains("token"), "{url}");
    let submit = |token: &'static str| {
        let browser = &browser;
        async move {
            let field = browser.wait_for("#token").await;
            field.send_keys(token).await.unwrap();
            browser
                .wait_for("form[action=\"/login\"] button[type=submit]")
                .await
                .click()
                .await
                .unwrap();
        }
    };
    submit("not-a-token").await;
    let problem = browser.wait_for("p.problem").await.text().await.unwrap();
    assert!(problem.contains("not accepted"), "{problem}");
    submit(OWNER).await;
    browser.wait_for("ol.timeline").await;
    let url = browser.client.current_url().await.unwrap();
    assert_eq!(url.path(), page, "back on the page asked for");
    assert!(
        !url.as_str().contains(OWNER),
        "never a token in a URL: {url}"
    );
    let cookies = browser.eval("return document.cookie;").await;
    assert_eq!(cookies, json!(""), "the cookie is HttpOnly");
    // Signed out: the page asks for the token again.
    browser
        .wait_for("form.sign-out button")
        .await
        .click()
        .await
        .unwrap();
    browser.wait_for("form[action=\"/login\"]").await;
    browser.open(&replica.url(page)).await;
    browser.wait_for("form[action=\"/login\"]").await;
    browser.close().await;
}

async fn assert_offline_report(out: &Path, records: &[Value]) {
    let browser = Browser::start().await;
    browser.go_offline().await;
    browser.open(&Browser::file_url(out)).await;
    browser.wait_for("ol.timeline").await;
    let external = browser
        .eval("return performance.getEntriesByType('resource').length;")
        .await;
    assert_eq!(external, 0, "the report loads nothing");
    assert_timeline(&browser, records).await;
    open_by_its_bar(&browser, "call_rows").await;
    assert_calls(&browser, records, &artifacts().join("report-run.png")).await;
    check_citations(&browser).await;
    assert_citations(&browser, records).await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn programs_read_calls_and_check_citations_over_http() {
    let db = shop().await;
    let redis = store_redis::testing::RedisServer::spawn().unwrap();
    let key = SigningKey::es256("review-ec");
    let config = config(&db, &key);
    let replica = Replica::start(&config, &redis.url(), &[]).await;
    let run = a_run_of_a_dozen_calls(&replica).await;
    let records = records(&replica, &run).await;
    assert!(
        records.iter().all(|r| r.get("raw").is_none()),
        "no raw in /calls"
    );

    // `/calls` answers what `aci inspect --json` prints.
    let inspected = support::command::inspect(&run, &redis.url(), Some(&config)).await;
    let mut by_inspect: Vec<&str> = inspected.iter().map(id_of).collect();
    let mut by_route: Vec<&str> = records.iter().map(id_of).collect();
    by_inspect.sort_unstable();
    by_route.sort_unstable();
    assert_eq!(by_inspect, by_route);
    assert_eq!(inspected[0]["run"], records[0]["run"]);

    let response = http_client()
        .post(replica.url(&format!("/runs/{run}/citations")))
        .bearer_auth(OWNER)
        .header("content-type", "text/plain")
        .body(answer())
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["cache-control"], "no-store");
    let report: Value = response.json().await.unwrap();
    let marks: Vec<&str> = report["cited"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["mark"].as_str().unwrap())
        .collect();
    assert_eq!(
        marks,
        ["stands", "not-citable", "unknown", "other-run", "negative"]
    );
    assert_eq!(
        report["cited"][1]["verdict"]["error_code"],
        "EXECUTION_TIMEOUT"
    );
    // The same verdicts as `aci verify`.
    let output = aci_async(&[
        "verify",
        "--run",
        &run,
        "--store",
        &redis.url(),
        "--config",
        config.to_str().unwrap(),
        "call_found",
        "call_timeout",
    ])
    .await;
    let verified: Vec<Value> = support::command::json_lines(&output);
    assert_eq!(verified[0]["verdict"], report["cited"][0]["verdict"]);
    assert_eq!(verified[1]["verdict"], report["cited"][1]["verdict"]);

    // A JWT principal reviews every run only with the configured claim.
    let mut auditor = claims(ISSUER, AUDIENCE, "auditor");
    let plain = key.sign(&auditor);
    auditor["aci_review"] = json!(true);
    let reviewer = key.sign(&auditor);
    let page = format!("/runs/{run}");
    assert_eq!(status_of(&replica, &page, Some(&reviewer)).await.0, 200);
    assert_eq!(status_of(&replica, &page, Some(&plain)).await.0, 403);

    let denied = http_client()
        .post(replica.url(&format!("/runs/{run}/citations")))
        .bearer_auth(OTHER)
        .body("call_found")
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 403);
    replica.stop().await;
}
