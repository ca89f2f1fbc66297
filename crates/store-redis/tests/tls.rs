//! `rediss://` against real TLS-only `redis-server`s (`--port 0
//! --tls-port`), with a throwaway CA made in-process: round trips through a
//! `ToolBoundary` on a single node and a 3-node TLS cluster, mutual TLS, a
//! restart, and the failures (untrusted CA, no or foreign client
//! certificate, plain text against TLS and back) that must surface as
//! `STORE_UNAVAILABLE` with nothing sensitive in any error or outcome.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::error::Error as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, RunId};
use invocation_core::testing::fake::{self, FakeExecutor, SENTINEL, fake_tool};
use invocation_core::{
    BoundaryOutcome, InvocationStore, Limits, RecordFields, RunContext, StoreError, ToolBoundary,
    ToolEnvelope,
};
use serde_json::json;
use store_redis::testing::{
    Admin, RedisCluster, RedisServer, TestPki, record_key, shared_tls_server, shared_tls_store,
    shared_url, unique_id,
};
use store_redis::{ConfigProblem, Failure, RedisConfig, RedisStore, RedisStoreError};

const TOOL: &str = "fake_lookup";
const PASSWORD: &str = "tls-s3cr3t";

/// Well above the operation timeouts used here: catches a hang, not a slow run.
const HANG: Duration = Duration::from_secs(3);

fn run_id() -> RunId {
    RunId::new(unique_id("run")).unwrap()
}

fn boundary(store: RedisStore, executor: FakeExecutor) -> ToolBoundary {
    ToolBoundary::builder(Arc::new(store))
        .limits(Limits::default())
        .tool(fake_tool(TOOL, executor))
        .build()
        .unwrap()
}

fn envelope(run: &RunId, id: &str, query: &str) -> ToolEnvelope {
    ToolEnvelope::new(id, run.as_str(), TOOL, fake::words(query))
}

fn short_timeouts(config: RedisConfig) -> RedisConfig {
    config
        .connect_timeout(Duration::from_millis(500))
        .operation_timeout(Duration::from_millis(800))
}

/// A READY and an ERROR invocation through a boundary on `store`, read back
/// as the journal would.
async fn round_trip(store: RedisStore) {
    let executor = FakeExecutor::new();
    let boundary = boundary(store.clone(), executor.clone());
    let run = run_id();
    let ctx = RunContext::new(
        run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    let found = boundary
        .invoke(&ctx, envelope(&run, "found", "timeout"))
        .await;
    let failed = boundary
        .invoke(&ctx, envelope(&run, "failed", "fail now"))
        .await;
    let again = boundary
        .invoke(&ctx, envelope(&run, "found", "timeout"))
        .await;
    assert_eq!(
        found.control.status,
        InvocationStatus::Ready,
        "{:?}",
        found.control.error_code
    );
    assert_eq!(found.control.evidence_status, EvidenceStatus::EvidenceFound);
    assert_eq!(failed.control.error_code, Some(ErrorCode::ExecutionFailed));
    assert_eq!(again.control.error_code, Some(ErrorCode::DuplicateToolCall));
    assert_eq!(executor.calls(), 2, "a repeated id never executes again");
    let records = store.list(&run, RecordFields::All).await.unwrap();
    let ids: Vec<&str> = records
        .iter()
        .map(|r| r.key.tool_call_id.as_str())
        .collect();
    assert_eq!(ids, ["found", "failed"]);
    assert!(
        records[0].raw_json.as_deref().unwrap().contains(SENTINEL),
        "raw is kept for the harness"
    );
    assert_eq!(records[1].error_code, Some(ErrorCode::ExecutionFailed));
    let ttl = store
        .remaining_ttl(&records[0].key)
        .await
        .unwrap()
        .expect("a live record has a TTL");
    assert!(ttl > Duration::ZERO);
}

/// Everything printable about an error, its sources included.
fn error_texts(error: &dyn std::error::Error) -> Vec<String> {
    let mut texts = vec![format!("{error}"), format!("{error:?}")];
    let mut source = error.source();
    while let Some(s) = source {
        texts.push(format!("{s}"));
        texts.push(format!("{s:?}"));
        source = s.source();
    }
    texts
}

/// Fragments of PEM material that must never be printed: the markers and a
/// base64 line from the middle of each PEM.
fn pem_needles(pki: &TestPki) -> Vec<String> {
    let mut needles = vec!["BEGIN".to_owned(), "PRIVATE KEY".to_owned()];
    for pem in [
        pki.ca_cert_pem(),
        pki.client_cert_pem(),
        pki.client_key_pem(),
        pki.server_key_pem(),
    ] {
        if let Some(line) = pem.lines().nth(1) {
            needles.push(line[..line.len().min(24)].to_owned());
        }
    }
    needles
}

fn assert_clean_texts(texts: &[String], needles: &[String]) {
    for text in texts {
        for needle in needles {
            assert!(!text.contains(needle.as_str()), "{needle} leaked: {text}");
        }
    }
}

/// The sanitized adapter error under a store error.
fn adapter_error(error: &StoreError) -> &RedisStoreError {
    error
        .source()
        .and_then(|s| s.downcast_ref::<RedisStoreError>())
        .expect("a sanitized adapter error")
}

// ---------------------------------------------------------------------------
// Working TLS.

#[tokio::test(flavor = "multi_thread")]
async fn a_rediss_store_trusting_the_test_ca_round_trips_through_the_boundary() {
    let store = shared_tls_store();
    store.ping().await.unwrap();
    round_trip(store.clone()).await;

    // The admin side connection speaks TLS too, and sees the record the
    // store wrote with its TTL.
    let run = run_id();
    let boundary = boundary(store.clone(), FakeExecutor::new());
    let outcome = boundary
        .invoke(
            &RunContext::new(
                run.clone(),
                invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
            ),
            envelope(&run, "seen", "x"),
        )
        .await;
    assert_eq!(outcome.control.status, InvocationStatus::Ready);
    let mut admin = Admin::connect(&shared_tls_server().url()).await.unwrap();
    let pttl = admin
        .pttl(&record_key(store.key_prefix(), run.as_str(), "seen"))
        .await
        .unwrap();
    assert!(pttl > 0, "the record exists with a TTL: {pttl}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_password_protected_tls_server_works_and_survives_a_restart() {
    let mut server = RedisServer::builder()
        .password(PASSWORD)
        .tls()
        .spawn()
        .unwrap();
    let store = RedisStore::new(short_timeouts(server.config())).unwrap();
    round_trip(store.clone()).await;

    server.stop();
    let error = store.ping().await.expect_err("the server is down");
    assert_eq!(error.code(), "STORE_UNAVAILABLE");
    server.restart().unwrap();
    // The same store reconnects over TLS.
    let deadline = Instant::now() + HANG;
    while store.ping().await.is_err() {
        assert!(Instant::now() < deadline, "no reconnect after the restart");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    round_trip(store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_works_with_the_client_certificate_and_only_with_it() {
    let server = RedisServer::builder().tls_mutual().spawn().unwrap();
    let shared = TestPki::shared().unwrap();

    // With the test CA's client certificate.
    let store = RedisStore::new(short_timeouts(server.config())).unwrap();
    round_trip(store).await;

    // Without a client certificate, or with one from another CA.
    let foreign = TestPki::generate().unwrap();
    let url = server.url();
    let without = RedisConfig::single(url.clone()).tls_root_ca_pem(shared.ca_cert_pem());
    let with_foreign = RedisConfig::single(url)
        .tls_root_ca_pem(shared.ca_cert_pem())
        .tls_client_cert_pem(foreign.client_cert_pem(), foreign.client_key_pem());
    let mut needles = pem_needles(shared);
    needles.extend(pem_needles(&foreign));
    needles.extend(["127.0.0.1".to_owned(), server.port().to_string()]);
    for config in [without, with_foreign] {
        let config = short_timeouts(config);
        let config_debug = format!("{config:?}");
        let store = RedisStore::new(config).unwrap();
        let started = Instant::now();
        let error = store
            .ping()
            .await
            .expect_err("the server refuses the client");
        assert!(started.elapsed() < HANG, "took {:?}", started.elapsed());
        assert_eq!(error.code(), "STORE_UNAVAILABLE");
        assert_eq!(
            error.failure(),
            Some(Failure::Tls),
            "the server's certificate_required / bad certificate alert"
        );
        let mut texts = error_texts(&error);
        texts.push(config_debug);
        texts.push(format!("{store:?}"));
        assert_clean_texts(&texts, &needles);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_three_node_tls_cluster_round_trips_through_the_boundary() {
    let cluster = RedisCluster::spawn_tls(3).unwrap();
    assert!(cluster.urls().iter().all(|u| u.starts_with("rediss://")));
    let store = RedisStore::new(cluster.config()).unwrap();
    assert!(store.is_cluster());
    store.ping().await.unwrap();
    // Several runs, so several slots and nodes.
    for _ in 0..4 {
        round_trip(store.clone()).await;
    }
    let mut admin = Admin::connect_cluster(&cluster.urls()).await.unwrap();
    admin.script_flush().await.unwrap();
    round_trip(store).await;
}

// ---------------------------------------------------------------------------
// Failing TLS: unavailable, and nothing sensitive printed.

#[tokio::test(flavor = "multi_thread")]
async fn a_store_that_does_not_trust_the_ca_is_unavailable_and_leaks_nothing() {
    let server = RedisServer::builder()
        .password(PASSWORD)
        .tls()
        .spawn()
        .unwrap();
    let port = server.port();
    let url = server.url();
    assert!(url.contains(PASSWORD), "the URL carries the password");
    let foreign = TestPki::generate().unwrap();
    let mut needles = pem_needles(TestPki::shared().unwrap());
    needles.extend(pem_needles(&foreign));
    needles.extend(
        [PASSWORD, "127.0.0.1", "localhost", ":inv:", SENTINEL]
            .map(str::to_owned)
            .into_iter()
            .chain([port.to_string()]),
    );

    // The web PKI roots (the default), and another CA.
    for config in [
        RedisConfig::single(url.clone()),
        RedisConfig::single(url.clone()).tls_root_ca_pem(foreign.ca_cert_pem()),
        RedisConfig::single(url.clone())
            .tls_root_ca_pem(foreign.ca_cert_pem())
            .tls_client_cert_pem(foreign.client_cert_pem(), foreign.client_key_pem()),
    ] {
        let config = short_timeouts(config).key_prefix("leakprefix");
        let mut texts = vec![format!("{config:?}")];
        let store = RedisStore::new(config).unwrap();
        texts.push(format!("{store:?}"));

        let started = Instant::now();
        let error = store
            .ping()
            .await
            .expect_err("the certificate is not trusted");
        assert!(started.elapsed() < HANG, "took {:?}", started.elapsed());
        assert_eq!(error.code(), "STORE_UNAVAILABLE");
        assert_eq!(
            error.failure(),
            Some(Failure::Tls),
            "an untrusted certificate is a TLS failure"
        );
        texts.extend(error_texts(&error));

        // Through a boundary: STORE_UNAVAILABLE, nothing executes.
        let executor = FakeExecutor::new();
        let boundary = boundary(store.clone(), executor.clone());
        let run = run_id();
        let outcome: BoundaryOutcome = boundary
            .invoke(
                &RunContext::new(
                    run.clone(),
                    invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
                ),
                envelope(&run, "leak", "x"),
            )
            .await;
        assert_eq!(
            outcome.control.error_code,
            Some(ErrorCode::StoreUnavailable)
        );
        assert!(outcome.observation.is_error());
        assert_eq!(executor.calls(), 0, "nothing executes without a record");
        let outcome_text = serde_json::to_string(&outcome).unwrap();
        let lower = outcome_text.to_lowercase();
        assert!(
            !lower.contains("tls") && !lower.contains("certificate") && !lower.contains("redis"),
            "the agent learns nothing about the store: {outcome_text}"
        );
        texts.push(outcome_text);
        texts.push(format!("{outcome:?}"));

        let store_error = store
            .create(new_invocation(&run))
            .await
            .expect_err("unavailable");
        assert_eq!(store_error.code(), "STORE_UNAVAILABLE");
        assert_eq!(adapter_error(&store_error).failure(), Some(Failure::Tls));
        texts.extend(error_texts(&store_error));

        assert!(texts.len() >= 10);
        assert_clean_texts(&texts, &needles);
    }
}

fn new_invocation(run: &RunId) -> invocation_core::NewInvocation {
    use invocation_core::{Budgets, InvocationKey, ScopeFingerprint, SystemClock};
    let scope = json!({ "query": "leak" });
    invocation_core::NewInvocation {
        key: InvocationKey::new(
            run.clone(),
            aci_contracts::ToolCallId::new("leak-direct").unwrap(),
        ),
        tool_name: TOOL.to_owned(),
        request_json: scope.to_string(),
        scope_json: invocation_core::fingerprint::canonical_json(&scope),
        scope_fingerprint: ScopeFingerprint::of(TOOL, &scope),
        created_at: invocation_core::Clock::now(&SystemClock),
        ttl: Duration::from_secs(60),
        budgets: Budgets::default(),
        claim_scope: false,
        run: invocation_core::RunTerms::default(),
        attempt: 1,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_text_against_tls_and_tls_against_plain_text_are_unavailable() {
    let pki = TestPki::shared().unwrap();
    // redis:// to a TLS-only port: the server drops the plain-text client.
    let tls_port = shared_tls_server().port();
    let plain_to_tls = RedisConfig::single(format!("redis://127.0.0.1:{tls_port}"));
    // rediss:// to a plain server: it waits for the end of an inline
    // command that never comes, or answers an error line; either way the
    // handshake does not complete.
    let plain_url = shared_url();
    let tls_to_plain = RedisConfig::single(plain_url.replacen("redis://", "rediss://", 1))
        .tls_root_ca_pem(pki.ca_cert_pem());
    for config in [plain_to_tls, tls_to_plain] {
        let store = RedisStore::new(short_timeouts(config)).unwrap();
        let started = Instant::now();
        let error = store.ping().await.expect_err("the protocols do not match");
        assert!(started.elapsed() < HANG, "took {:?}", started.elapsed());
        assert_eq!(error.code(), "STORE_UNAVAILABLE");
        assert_clean_texts(
            &error_texts(&error),
            &["127.0.0.1".to_owned(), tls_port.to_string()],
        );
    }
}

// ---------------------------------------------------------------------------
// Configuration.

#[test]
fn tls_configurations_are_checked_without_echoing_them() {
    let pki = TestPki::shared().unwrap();
    let other = TestPki::generate().unwrap();
    let url = format!("rediss://:{PASSWORD}@127.0.0.1:6380");
    let garbage = "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n";
    let cases = [
        (
            RedisConfig::single(format!("redis://:{PASSWORD}@127.0.0.1:6379"))
                .tls_root_ca_pem(pki.ca_cert_pem()),
            ConfigProblem::TlsWithoutRediss,
        ),
        (
            RedisConfig::cluster(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"])
                .tls_client_cert_pem(pki.client_cert_pem(), pki.client_key_pem()),
            ConfigProblem::TlsWithoutRediss,
        ),
        (
            RedisConfig::single(format!("{url}/#insecure")),
            ConfigProblem::InsecureTls,
        ),
        (
            RedisConfig::cluster(["rediss://127.0.0.1:7000", "redis://127.0.0.1:7001"]),
            ConfigProblem::MixedSchemes,
        ),
        (
            RedisConfig::single(url.clone()).tls_root_ca_pem(""),
            ConfigProblem::InvalidTlsRootCa,
        ),
        (
            RedisConfig::single(url.clone()).tls_root_ca_pem(garbage),
            ConfigProblem::InvalidTlsRootCa,
        ),
        (
            // A key is not a certificate.
            RedisConfig::single(url.clone()).tls_root_ca_pem(pki.client_key_pem()),
            ConfigProblem::InvalidTlsRootCa,
        ),
        (
            RedisConfig::single(url.clone()).tls_client_cert_pem(garbage, pki.client_key_pem()),
            ConfigProblem::InvalidTlsClientCert,
        ),
        (
            RedisConfig::single(url.clone())
                .tls_client_cert_pem(pki.client_cert_pem(), "no key here"),
            ConfigProblem::InvalidTlsClientKey,
        ),
        (
            // The key of another certificate.
            RedisConfig::single(url.clone())
                .tls_client_cert_pem(pki.client_cert_pem(), other.client_key_pem()),
            ConfigProblem::InvalidTlsClientKey,
        ),
    ];
    let mut needles = pem_needles(pki);
    needles.extend(pem_needles(&other));
    needles.extend([PASSWORD.to_owned(), "127.0.0.1".to_owned()]);
    for (config, problem) in cases {
        let config_debug = format!("{config:?}");
        let error = RedisStore::new(config).expect_err("refused");
        assert_eq!(error, RedisStoreError::Config(problem));
        assert_eq!(error.code(), "REDIS_CONFIG_INVALID");
        assert!(!error.is_transient());
        assert_clean_texts(
            &[config_debug, format!("{error}"), format!("{error:?}")],
            &needles,
        );
    }

    // Valid: a CA bundle (two CAs), mutual TLS, and a cluster.
    let bundle = format!("{}{}", pki.ca_cert_pem(), other.ca_cert_pem());
    let config = RedisConfig::single(url.clone())
        .tls_root_ca_pem(bundle)
        .tls_client_cert_pem(pki.client_cert_pem(), pki.client_key_pem());
    assert!(config.uses_tls());
    let debug = format!("{config:?}");
    assert!(debug.contains("tls: true"), "{debug}");
    assert_clean_texts(&[debug], &needles);
    RedisStore::new(config).unwrap();
    RedisStore::new(
        RedisConfig::cluster(["rediss://127.0.0.1:7000", "rediss://127.0.0.1:7001"])
            .tls_root_ca_pem(pki.ca_cert_pem()),
    )
    .unwrap();
    // rediss:// alone uses the web PKI roots.
    RedisStore::new(RedisConfig::single(url)).unwrap();
    assert!(!RedisConfig::single("redis://127.0.0.1").uses_tls());
}
