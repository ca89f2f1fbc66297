//! The `http` embedder against a real local HTTP server speaking the
//! OpenAI-compatible `/v1/embeddings` API: order, batching, retries,
//! timeouts, authentication, malformed answers, prefixes, configuration.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use projectors_rag::embeddings::{
    EmbedError, EmbedRole, Embedder, HttpEmbedder, HttpEmbedderConfig,
};
use serde_json::{Value, json};

/// The path the server answers on.
const PATH: &str = "/v1/embeddings";

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    /// The `Authorization` header, if any.
    authorization: Option<String>,
    /// The JSON body (`Null` if it was not JSON).
    body: Value,
}

impl Seen {
    fn inputs(&self) -> Vec<String> {
        self.body["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    }
}

/// How the server answers one request.
#[derive(Debug, Clone)]
enum Reply {
    /// The documented answer: one vector per input, `data` in reverse order
    /// (clients must sort by `index`).
    Vectors,
    /// An error status, with `Retry-After` when given, and a body.
    Status {
        status: u16,
        retry_after: Option<&'static str>,
        body: String,
    },
    /// This JSON body with status 200.
    Json(Value),
    /// No answer ever (the request waits on a future that never resolves).
    Hang,
}

/// Computes the vectors of a batch of inputs.
type VectorFn = dyn Fn(&[String]) -> Vec<Vec<f32>> + Send + Sync;

/// The server's state: replies scripted request by request, then a default;
/// every request it saw.
#[derive(Clone)]
struct Backend {
    inner: Arc<Inner>,
}

struct Inner {
    script: Mutex<VecDeque<Reply>>,
    default: Reply,
    seen: Mutex<Vec<Seen>>,
    vectors: Box<VectorFn>,
}

impl Backend {
    /// Answers with `script` in order, then with `default` forever; vectors
    /// are [`toy_vectors`].
    fn new(script: impl IntoIterator<Item = Reply>, default: Reply) -> Self {
        Self::with_vectors(script, default, |inputs| {
            inputs.iter().map(|text| toy_vector(text)).collect()
        })
    }

    /// Like [`new`](Self::new), with vectors computed by `vectors` (a real
    /// model, say).
    fn with_vectors(
        script: impl IntoIterator<Item = Reply>,
        default: Reply,
        vectors: impl Fn(&[String]) -> Vec<Vec<f32>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                script: Mutex::new(script.into_iter().collect()),
                default,
                seen: Mutex::new(Vec::new()),
                vectors: Box::new(vectors),
            }),
        }
    }

    /// Every request so far, oldest first.
    fn seen(&self) -> Vec<Seen> {
        self.inner.seen.lock().unwrap().clone()
    }
}

/// Serves `backend` on `127.0.0.1`, on a port of the system's choosing,
/// until the test's runtime ends. Returns the address and the endpoint URL.
async fn serve(backend: Backend) -> (SocketAddr, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route(PATH, post(embeddings))
        .with_state(backend);
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, format!("http://{addr}{PATH}"))
}

async fn embeddings(State(backend): State<Backend>, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let authorization = headers
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap().to_owned());
    backend.inner.seen.lock().unwrap().push(Seen {
        authorization,
        body: body.clone(),
    });
    let reply = backend
        .inner
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or_else(|| backend.inner.default.clone());
    match reply {
        Reply::Vectors => {
            let inputs: Vec<String> = body["input"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let vectors = (backend.inner.vectors)(&inputs);
            let mut data: Vec<Value> = vectors
                .into_iter()
                .enumerate()
                .map(|(index, embedding)| {
                    json!({"object": "embedding", "index": index, "embedding": embedding})
                })
                .collect();
            data.reverse();
            json_response(&json!({
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": inputs.len(), "total_tokens": inputs.len()},
            }))
        }
        Reply::Status {
            status,
            retry_after,
            body,
        } => {
            let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, seconds.parse().unwrap());
            }
            response
        }
        Reply::Json(value) => json_response(&value),
        Reply::Hang => std::future::pending().await,
    }
}

/// `value` as a 200 answer (axum's `json` feature is not built here).
fn json_response(value: &Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// A deterministic toy embedding: FNV-1a of the text, spread over 8
/// components in [-1, 1].
fn toy_vector(text: &str) -> Vec<f32> {
    (0_u64..8)
        .map(|i| {
            let mut hash = 0xcbf2_9ce4_8422_2325_u64 ^ i;
            for byte in text.bytes() {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
            #[allow(clippy::cast_precision_loss)]
            let unit = (hash % 20_001) as f32 / 10_000.0 - 1.0;
            unit
        })
        .collect()
}

fn texts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("text number {i}")).collect()
}

/// A config for `url` with fast retries.
fn config(url: &str) -> HttpEmbedderConfig {
    let mut config = HttpEmbedderConfig::new(url, "toy-model");
    config.retry_base_delay = Duration::from_millis(1);
    config
}

fn status(status: u16, retry_after: Option<&'static str>) -> Reply {
    Reply::Status {
        status,
        retry_after,
        body: format!("{{\"error\":\"status {status}\"}}"),
    }
}

/// A key lookup that knows only `name`.
fn only(name: &'static str, key: &'static str) -> impl FnOnce(&str) -> Option<String> {
    move |asked| (asked == name).then(|| key.to_owned())
}

#[tokio::test]
async fn happy_path_restores_the_order_of_the_inputs() {
    let backend = Backend::new([], Reply::Vectors);
    let (_, url) = serve(backend.clone()).await;
    let embedder = HttpEmbedder::new(config(&url)).unwrap();
    assert_eq!(embedder.model_id(), "http:toy-model");
    assert_eq!(embedder.max_batch(), 32);

    let inputs = texts(5);
    let vectors = embedder.embed(&inputs, EmbedRole::Passage).await.unwrap();
    let expected: Vec<Vec<f32>> = inputs.iter().map(|t| toy_vector(t)).collect();
    assert_eq!(vectors, expected);

    let seen = backend.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].body,
        json!({"model": "toy-model", "input": inputs, "encoding_format": "float"})
    );
    assert_eq!(seen[0].authorization, None);
}

#[tokio::test]
async fn no_texts_make_no_request() {
    let backend = Backend::new([], Reply::Vectors);
    let (_, url) = serve(backend.clone()).await;
    let embedder = HttpEmbedder::new(config(&url)).unwrap();
    assert!(
        embedder
            .embed(&[], EmbedRole::Query)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(backend.seen().is_empty());
}

#[tokio::test]
async fn a_long_call_is_split_into_batches() {
    let backend = Backend::new([], Reply::Vectors);
    let (_, url) = serve(backend.clone()).await;
    let embedder = HttpEmbedder::new(config(&url)).unwrap();

    let inputs = texts(70);
    let vectors = embedder.embed(&inputs, EmbedRole::Passage).await.unwrap();
    let expected: Vec<Vec<f32>> = inputs.iter().map(|t| toy_vector(t)).collect();
    assert_eq!(vectors, expected);

    let seen = backend.seen();
    let sizes: Vec<usize> = seen.iter().map(|s| s.inputs().len()).collect();
    assert_eq!(sizes, [32, 32, 6]);
    let sent: Vec<String> = seen.iter().flat_map(Seen::inputs).collect();
    assert_eq!(sent, inputs);
}

#[tokio::test]
async fn the_batch_size_is_configurable() {
    let backend = Backend::new([], Reply::Vectors);
    let (_, url) = serve(backend.clone()).await;
    let mut config = config(&url);
    config.batch_size = 4;
    let embedder = HttpEmbedder::new(config).unwrap();
    assert_eq!(embedder.max_batch(), 4);
    embedder.embed(&texts(9), EmbedRole::Query).await.unwrap();
    let sizes: Vec<usize> = backend.seen().iter().map(|s| s.inputs().len()).collect();
    assert_eq!(sizes, [4, 4, 1]);
}

#[tokio::test]
async fn a_429_with_retry_after_is_retried_after_the_asked_wait() {
    let backend = Backend::new([status(429, Some("0"))], Reply::Vectors);
    let (_, url) = serve(backend.clone()).await;
    let mut config = config(&url);
    // Were the backoff used instead of Retry-After, the call would take a
    // minute and the bound below would fail it.
    config.retry_base_delay = Duration::from_secs(60);
    let embedder = HttpEmbedder::new(config).unwrap();

    let inputs = texts(3);
    let vectors = tokio::time::timeout(
        Duration::from_secs(20),
        embedder.embed(&inputs, EmbedRole::Query),
    )
    .await
    .expect("Retry-After: 0 was not respected")
    .unwrap();
    assert_eq!(vectors.len(), 3);
    assert_eq!(backend.seen().len(), 2);
}

#[tokio::test]
async fn a_503_twice_then_success_succeeds() {
    let backend = Backend::new([status(503, None), status(503, None)], Reply::Vectors);
    let (_, url) = serve(backend.clone()).await;
    let embedder = HttpEmbedder::new(config(&url)).unwrap();

    let inputs = texts(2);
    let vectors = embedder.embed(&inputs, EmbedRole::Query).await.unwrap();
    assert_eq!(vectors[1], toy_vector(&inputs[1]));
    let seen = backend.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|s| s.inputs() == inputs));
}

#[tokio::test]
async fn a_500_forever_fails_after_max_retries_plus_one_attempts() {
    let backend = Backend::new([], status(500, None));
    let (addr, _) = serve(backend.clone()).await;
    // Credentials in the URL never reach a message.
    let url = format!("http://operator:hunter2@{addr}{PATH}?tenant=secret-tenant");
    let embedder = HttpEmbedder::new(config(&url)).unwrap();

    let error = embedder
        .embed(&texts(1), EmbedRole::Query)
        .await
        .unwrap_err();
    assert!(matches!(error, EmbedError::Failed { .. }), "{error:?}");
    assert_eq!(error.code(), "EMBEDDER_FAILED");
    // Default max_retries: 3.
    assert_eq!(backend.seen().len(), 4);
    let text = format!("{error} {error:?} {embedder:?}");
    assert!(text.contains("500"), "{text}");
    assert!(text.contains("4 attempts"), "{text}");
    assert!(text.contains(&format!("http://{addr}")), "{text}");
    for secret in ["hunter2", "operator", "secret-tenant"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    // reqwest sends the URL's userinfo as basic authentication.
    assert!(
        backend.seen()[0]
            .authorization
            .as_deref()
            .unwrap()
            .starts_with("Basic ")
    );

    let backend = Backend::new([], status(502, None));
    let (_, url) = serve(backend.clone()).await;
    let mut config = config(&url);
    config.max_retries = 0;
    let embedder = HttpEmbedder::new(config).unwrap();
    let error = embedder
        .embed(&texts(1), EmbedRole::Query)
        .await
        .unwrap_err();
    assert!(matches!(error, EmbedError::Failed { .. }), "{error:?}");
    assert_eq!(backend.seen().len(), 1);
}

#[tokio::test]
async fn a_refused_connection_is_retried_then_fails() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let mut config = config(&format!("http://{addr}{PATH}"));
    config.max_retries = 1;
    let embedder = HttpEmbedder::new(config).unwrap();
    let error = embedder
        .embed(&texts(1), EmbedRole::Query)
        .await
        .unwrap_err();
    assert!(matches!(error, EmbedError::Failed { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("cannot connect"), "{text}");
    assert!(text.contains("2 attempts"), "{text}");
}

#[tokio::test]
async fn a_server_slower_than_the_timeout_times_out_without_retries() {
    let backend = Backend::new([], Reply::Hang);
    let (_, url) = serve(backend.clone()).await;
    let mut config = config(&url);
    config.timeout = Duration::from_millis(200);
    let embedder = HttpEmbedder::new(config).unwrap();

    let error = embedder
        .embed(&texts(2), EmbedRole::Query)
        .await
        .unwrap_err();
    assert!(
        matches!(error, EmbedError::Timeout { millis: 200 }),
        "{error:?}"
    );
    assert_eq!(error.code(), "EMBEDDER_TIMEOUT");
    assert_eq!(backend.seen().len(), 1);
}

#[tokio::test]
async fn the_key_is_sent_as_a_bearer_token() {
    let backend = Backend::new([], Reply::Vectors);
    let (_, url) = serve(backend.clone()).await;
    let mut config = config(&url);
    config.api_key_env = Some("ACI_TEST_EMBEDDINGS_KEY_BEARER".into());
    let embedder = HttpEmbedder::with_key_lookup(
        config,
        only("ACI_TEST_EMBEDDINGS_KEY_BEARER", " sk-bearer-0123456789\n"),
    )
    .unwrap();
    embedder.embed(&texts(1), EmbedRole::Query).await.unwrap();
    embedder.embed(&texts(40), EmbedRole::Query).await.unwrap();
    let seen = backend.seen();
    assert_eq!(seen.len(), 3);
    for request in seen {
        assert_eq!(
            request.authorization.as_deref(),
            Some("Bearer sk-bearer-0123456789")
        );
    }
    assert!(!format!("{embedder:?}").contains("sk-bearer"));
}

#[tokio::test]
async fn a_401_fails_without_the_key_anywhere() {
    const KEY: &str = "sk-live-9f8e7d6c5b4a";
    let backend = Backend::new(
        [],
        Reply::Status {
            status: 401,
            retry_after: None,
            body: format!(
                "{{\"error\":{{\"message\":\"Incorrect API key provided: {KEY}\",\"code\":\"invalid_api_key\"}}}}"
            ),
        },
    );
    let (addr, url) = serve(backend.clone()).await;
    let mut config = config(&url);
    config.api_key_env = Some("ACI_TEST_EMBEDDINGS_KEY_401".into());
    let embedder =
        HttpEmbedder::with_key_lookup(config, only("ACI_TEST_EMBEDDINGS_KEY_401", KEY)).unwrap();

    let error = embedder
        .embed(&texts(1), EmbedRole::Query)
        .await
        .unwrap_err();
    assert!(matches!(error, EmbedError::Failed { .. }), "{error:?}");
    let text = format!("{error} {error:?} {embedder:?}");
    assert!(text.contains("authentication failed"), "{text}");
    assert!(text.contains("ACI_TEST_EMBEDDINGS_KEY_401"), "{text}");
    assert!(text.contains(&addr.to_string()), "{text}");
    assert!(!text.contains(KEY), "{text}");
    assert!(!text.contains("9f8e7d6c5b4a"), "{text}");
    // Not retried.
    assert_eq!(backend.seen().len(), 1);
    assert_eq!(
        backend.seen()[0].authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );

    let backend = Backend::new([status(403, None)], Reply::Vectors);
    let (_, url) = serve(backend.clone()).await;
    let error = HttpEmbedder::new(HttpEmbedderConfig::new(&url, "toy-model"))
        .unwrap()
        .embed(&texts(1), EmbedRole::Query)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("authentication failed"),
        "{error}"
    );
    assert_eq!(backend.seen().len(), 1);
}

#[tokio::test]
async fn other_4xx_fail_at_once_with_a_short_excerpt_without_the_key() {
    const KEY: &str = "sk-echoed-abcdef123456";
    let body = format!(
        "{{\"error\":\"bad input for key {KEY}\",\"detail\":\"{}\"}}",
        "x".repeat(1000)
    );
    let backend = Backend::new(
        [],
        Reply::Status {
            status: 400,
            retry_after: None,
            body,
        },
    );
    let (_, url) = serve(backend.clone()).await;
    let mut config = config(&url);
    config.api_key_env = Some("ACI_TEST_EMBEDDINGS_KEY_400".into());
    let embedder =
        HttpEmbedder::with_key_lookup(config, only("ACI_TEST_EMBEDDINGS_KEY_400", KEY)).unwrap();

    let error = embedder
        .embed(&texts(1), EmbedRole::Query)
        .await
        .unwrap_err();
    let EmbedError::Failed { message } = &error else {
        panic!("{error:?}")
    };
    assert!(message.contains("400"), "{message}");
    assert!(
        message.contains("bad input for key <redacted>"),
        "{message}"
    );
    assert!(!message.contains(KEY), "{message}");
    assert!(message.matches('x').count() < 200, "{message}");
    assert!(message.len() < 400, "{message}");
    assert_eq!(backend.seen().len(), 1);
}

#[tokio::test]
async fn malformed_answers_are_malformed() {
    let item = |index: usize, embedding: Value| json!({"index": index, "embedding": embedding});
    let cases: Vec<(&str, Value)> = vec![
        ("wrong count", json!({"data": [item(0, json!([0.1, 0.2]))]})),
        (
            "mixed dimensions",
            json!({"data": [item(0, json!([0.1, 0.2])), item(1, json!([0.1, 0.2, 0.3]))]}),
        ),
        (
            "string element",
            json!({"data": [item(0, json!([0.1, "0.2"])), item(1, json!([0.1, 0.2]))]}),
        ),
        (
            "missing data",
            json!({"object": "list", "model": "toy-model"}),
        ),
        ("data not a list", json!({"data": {"0": [0.1]}})),
        (
            "index out of range",
            json!({"data": [item(0, json!([0.1])), item(2, json!([0.1]))]}),
        ),
        (
            "duplicate index",
            json!({"data": [item(1, json!([0.1])), item(1, json!([0.2]))]}),
        ),
        (
            "some items without index",
            json!({"data": [item(0, json!([0.1])), {"embedding": [0.2]}]}),
        ),
        (
            "empty vectors",
            json!({"data": [item(0, json!([])), item(1, json!([]))]}),
        ),
        (
            "not finite as f32",
            json!({"data": [item(0, json!([1e39])), item(1, json!([0.5]))]}),
        ),
        (
            "null element",
            json!({"data": [item(0, json!([null])), item(1, json!([0.5]))]}),
        ),
        ("not an object", json!([[0.1], [0.2]])),
    ];
    let backend = Backend::new(
        cases.iter().map(|(_, answer)| Reply::Json(answer.clone())),
        Reply::Vectors,
    );
    let (_, url) = serve(backend.clone()).await;
    let embedder = HttpEmbedder::new(config(&url)).unwrap();
    for (case, _) in &cases {
        let error = embedder
            .embed(&texts(2), EmbedRole::Query)
            .await
            .unwrap_err();
        assert!(
            matches!(error, EmbedError::Malformed { .. }),
            "{case}: {error:?}"
        );
        assert_eq!(error.code(), "EMBEDDER_MALFORMED");
    }
    // One request per case: malformed answers are not retried.
    assert_eq!(backend.seen().len(), cases.len());

    // Not JSON at all.
    let backend = Backend::new(
        [Reply::Status {
            status: 200,
            retry_after: None,
            body: "<html>hello</html>".into(),
        }],
        Reply::Vectors,
    );
    let (_, url) = serve(backend).await;
    let embedder = HttpEmbedder::new(config(&url)).unwrap();
    let error = embedder
        .embed(&texts(1), EmbedRole::Query)
        .await
        .unwrap_err();
    assert!(matches!(error, EmbedError::Malformed { .. }), "{error:?}");

    // Two batches of different dimensions.
    let backend = Backend::new(
        [
            Reply::Vectors,
            Reply::Json(json!({"data": [item(0, json!([0.1, 0.2])), item(1, json!([0.3, 0.4]))]})),
        ],
        Reply::Vectors,
    );
    let (_, url) = serve(backend).await;
    let mut config = config(&url);
    config.batch_size = 2;
    let embedder = HttpEmbedder::new(config).unwrap();
    let error = embedder
        .embed(&texts(4), EmbedRole::Query)
        .await
        .unwrap_err();
    assert!(matches!(error, EmbedError::Malformed { .. }), "{error:?}");
}

#[tokio::test]
async fn answers_without_indexes_keep_array_order() {
    let backend = Backend::new(
        [Reply::Json(
            json!({"data": [{"embedding": [1.0, 0.0]}, {"embedding": [0.0, 1.0]}]}),
        )],
        Reply::Vectors,
    );
    let (_, url) = serve(backend).await;
    let embedder = HttpEmbedder::new(config(&url)).unwrap();
    let vectors = embedder.embed(&texts(2), EmbedRole::Query).await.unwrap();
    assert_eq!(vectors, [vec![1.0, 0.0], vec![0.0, 1.0]]);
}

#[tokio::test]
async fn prefixes_are_applied_by_role() {
    let backend = Backend::new([], Reply::Vectors);
    let (_, url) = serve(backend.clone()).await;
    let mut config = config(&url);
    config.model = "intfloat/multilingual-e5-small".into();
    config.query_prefix = "query: ".into();
    config.passage_prefix = "passage: ".into();
    let embedder = HttpEmbedder::new(config).unwrap();
    assert_eq!(
        embedder.model_id(),
        r#"http:intfloat/multilingual-e5-small;query_prefix="query: ";passage_prefix="passage: ""#
    );

    let inputs = vec!["连接池超时".to_owned(), "disk full".to_owned()];
    let queries = embedder.embed(&inputs, EmbedRole::Query).await.unwrap();
    let passages = embedder.embed(&inputs, EmbedRole::Passage).await.unwrap();
    assert_eq!(queries[0], toy_vector("query: 连接池超时"));
    assert_eq!(passages[1], toy_vector("passage: disk full"));
    let seen = backend.seen();
    assert_eq!(seen[0].inputs(), ["query: 连接池超时", "query: disk full"]);
    assert_eq!(
        seen[1].inputs(),
        ["passage: 连接池超时", "passage: disk full"]
    );
}

#[tokio::test]
async fn dimensions_are_sent_and_required() {
    let backend = Backend::new([], Reply::Vectors);
    let (_, url) = serve(backend.clone()).await;
    let mut config = config(&url);
    config.dimensions = Some(8);
    let embedder = HttpEmbedder::new(config.clone()).unwrap();
    assert_eq!(embedder.model_id(), "http:toy-model;dimensions=8");
    let vectors = embedder.embed(&texts(2), EmbedRole::Query).await.unwrap();
    assert_eq!(vectors[0].len(), 8);
    assert_eq!(backend.seen()[0].body["dimensions"], 8);

    // The server ignores `dimensions`: its vectors are of another space.
    config.dimensions = Some(4);
    let embedder = HttpEmbedder::new(config).unwrap();
    let error = embedder
        .embed(&texts(2), EmbedRole::Query)
        .await
        .unwrap_err();
    assert!(matches!(error, EmbedError::Malformed { .. }), "{error:?}");
}

#[tokio::test]
async fn a_missing_or_empty_key_variable_is_unavailable() {
    let name = format!("ACI_TEST_EMBEDDINGS_KEY_UNSET_{}", std::process::id());
    let mut config = HttpEmbedderConfig::new("https://api.example.com/v1/embeddings", "m");
    config.api_key_env = Some(name.clone());
    let error = HttpEmbedder::new(config.clone()).unwrap_err();
    assert!(matches!(error, EmbedError::Unavailable { .. }), "{error:?}");
    assert_eq!(error.code(), "EMBEDDER_UNAVAILABLE");
    assert!(error.to_string().contains(&name), "{error}");

    let error = HttpEmbedder::with_key_lookup(config.clone(), |_| Some("  \n".into())).unwrap_err();
    assert!(matches!(error, EmbedError::Unavailable { .. }), "{error:?}");
    assert!(error.to_string().contains("empty"), "{error}");

    let error =
        HttpEmbedder::with_key_lookup(config, |_| Some("sk-bad\u{7f}key".into())).unwrap_err();
    assert!(matches!(error, EmbedError::Unavailable { .. }), "{error:?}");
    assert!(!error.to_string().contains("sk-bad"), "{error}");
}

#[tokio::test]
async fn invalid_configurations_are_unavailable() {
    let valid = HttpEmbedderConfig::new("https://api.example.com/v1/embeddings", "m");
    HttpEmbedder::new(valid.clone()).unwrap();

    let mut cases = Vec::new();
    for url in [
        "not a url",
        "ftp://example.com/v1/embeddings",
        "unix:/tmp/socket",
    ] {
        let mut config = valid.clone();
        config.url = url.into();
        cases.push(config);
    }
    let mut config = valid.clone();
    config.model = " ".into();
    cases.push(config);
    let mut config = valid.clone();
    config.batch_size = 0;
    cases.push(config);
    let mut config = valid.clone();
    config.timeout = Duration::ZERO;
    cases.push(config);
    let mut config = valid.clone();
    config.dimensions = Some(0);
    cases.push(config);
    for config in cases {
        let error = HttpEmbedder::new(config.clone()).unwrap_err();
        assert!(
            matches!(error, EmbedError::Unavailable { .. }),
            "{config:?}: {error:?}"
        );
    }

    // URL credentials and a key: two Authorization headers, refused.
    let mut config = valid;
    config.url = "https://user:pw-secret@api.example.com/v1/embeddings".into();
    config.api_key_env = Some("K".into());
    let error = HttpEmbedder::with_key_lookup(config, |_| Some("sk".into())).unwrap_err();
    assert!(matches!(error, EmbedError::Unavailable { .. }), "{error:?}");
    assert!(!error.to_string().contains("pw-secret"), "{error}");
}

#[test]
fn debug_shows_no_credentials() {
    let mut config = HttpEmbedderConfig::new(
        "https://user:pw-secret@api.example.com/v1/embeddings?api-key=q-secret",
        "m",
    );
    let text = format!("{config:?}");
    assert!(text.contains("api.example.com/v1/embeddings"), "{text}");
    assert!(!text.contains("pw-secret"), "{text}");
    assert!(!text.contains("q-secret"), "{text}");

    config.url = "https://api.example.com/v1/embeddings".into();
    config.api_key_env = Some("ACI_TEST_EMBEDDINGS_KEY_DEBUG".into());
    let embedder = HttpEmbedder::with_key_lookup(
        config,
        only("ACI_TEST_EMBEDDINGS_KEY_DEBUG", "sk-debug-secret"),
    )
    .unwrap();
    let text = format!("{embedder:?}");
    assert!(text.contains("ACI_TEST_EMBEDDINGS_KEY_DEBUG"), "{text}");
    assert!(!text.contains("sk-debug-secret"), "{text}");
}

/// `Backend::with_vectors` serves any vectors: here constant ones.
#[tokio::test]
async fn the_backend_serves_vectors_of_a_given_function() {
    let backend = Backend::with_vectors([], Reply::Vectors, |inputs| {
        inputs.iter().map(|_| vec![0.5; 3]).collect()
    });
    let (_, url) = serve(backend).await;
    let embedder = HttpEmbedder::new(config(&url)).unwrap();
    let vectors = embedder.embed(&texts(2), EmbedRole::Query).await.unwrap();
    assert_eq!(vectors, [vec![0.5; 3], vec![0.5; 3]]);
}

/// The e5 role of an input by the prefix the client was configured with.
#[cfg(feature = "local-embeddings")]
fn e5_role(input: &str) -> (EmbedRole, &str) {
    if let Some(text) = input.strip_prefix("query: ") {
        (EmbedRole::Query, text)
    } else if let Some(text) = input.strip_prefix("passage: ") {
        (EmbedRole::Passage, text)
    } else {
        panic!("an input without a role prefix: {input:?}")
    }
}

#[cfg(feature = "local-embeddings")]
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// A `/v1/embeddings` server in front of the local e5 model (what TEI
/// serving multilingual-e5-small is), the role read from the prefix the
/// client adds: `HttpEmbedder` configured with e5's prefixes returns the
/// vectors `LocalEmbedder` computes directly, for queries and passages, and
/// a text's query and passage vectors differ (the prefix picked the role).
#[cfg(feature = "local-embeddings")]
#[tokio::test(flavor = "multi_thread")]
async fn an_http_embedder_in_front_of_the_local_model_returns_its_vectors() {
    use projectors_rag::embeddings::LocalEmbedder;

    let Some(files) = testkit::embedder_files() else {
        return;
    };
    let local = Arc::new(LocalEmbedder::load(&files.library, &files.model).unwrap());
    let model = Arc::clone(&local);
    let backend = Backend::with_vectors([], Reply::Vectors, move |inputs| {
        // The backend's function is synchronous; the model is not.
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                let mut vectors = Vec::with_capacity(inputs.len());
                for input in inputs {
                    let (role, text) = e5_role(input);
                    let mut one = model.embed(&[text.to_owned()], role).await.unwrap();
                    vectors.push(one.remove(0));
                }
                vectors
            })
        })
    });
    let (_, url) = serve(backend.clone()).await;
    let mut config = HttpEmbedderConfig::new(url, "intfloat/multilingual-e5-small");
    config.query_prefix = "query: ".into();
    config.passage_prefix = "passage: ".into();
    config.batch_size = 3;
    let http = HttpEmbedder::new(config).unwrap();

    let queries: Vec<String> = [
        "disk full on the node",
        "ディスクがいっぱい",
        "连接池耗尽",
        "디스크 용량이 꽉 찼어요",
    ]
    .map(str::to_owned)
    .to_vec();
    let passages: Vec<String> = [
        "Writes fail with `No space left on device` (`ENOSPC`).",
        "HikariCP 连接池耗尽，获取连接超时。",
        "The kubelet evicts pods with the message `The node was low on resource: ephemeral-storage`.",
        "Restart the process that holds deleted files open: `lsof +L1` lists them.",
        "磁盘使用率超过 95%。",
    ]
    .map(str::to_owned)
    .to_vec();
    for (texts, role) in [
        (&queries, EmbedRole::Query),
        (&passages, EmbedRole::Passage),
    ] {
        let over_http = http.embed(texts, role).await.unwrap();
        let direct = local.embed(texts, role).await.unwrap();
        assert_eq!(over_http.len(), texts.len());
        for ((text, a), b) in texts.iter().zip(&over_http).zip(&direct) {
            let similarity = cosine(a, b);
            assert!(
                similarity > 0.9999,
                "{role:?} {text:?}: cosine {similarity}"
            );
        }
    }
    // The prefix chose the role: a query's vector is not its passage's.
    let as_passages = local.embed(&queries, EmbedRole::Passage).await.unwrap();
    let as_queries = http.embed(&queries, EmbedRole::Query).await.unwrap();
    for ((text, a), b) in queries.iter().zip(&as_queries).zip(&as_passages) {
        let similarity = cosine(a, b);
        assert!(similarity < 0.9999, "{text:?}: cosine {similarity}");
    }
    // Every input went out with its role's prefix, in batches of 3.
    let seen = backend.seen();
    assert!(seen.iter().all(|request| request.inputs().len() <= 3));
    let inputs: Vec<String> = seen.iter().flat_map(Seen::inputs).collect();
    assert_eq!(inputs.len(), 2 * queries.len() + passages.len());
    assert!(
        inputs[..queries.len()]
            .iter()
            .all(|i| i.starts_with("query: "))
    );
}

/// Without the `local-embeddings` feature the comparison above cannot be
/// built: say so, and fail where the local model is required.
#[cfg(not(feature = "local-embeddings"))]
#[test]
fn the_local_model_comparison_needs_the_local_embeddings_feature() {
    let message = "the HTTP-versus-local comparison needs `--features local-embeddings`";
    assert!(
        std::env::var("ACI_E5_REQUIRED").as_deref() != Ok("1"),
        "{message} (ACI_E5_REQUIRED=1)"
    );
    eprintln!("skipped: {message}");
}
