//! An OpenAI-compatible `/v1/embeddings` server in the test process, for
//! `[knowledge.embeddings] provider = "http"`: it answers with the local
//! model's vectors (the role read from the `query: `/`passage: ` prefix the
//! client was configured to send), or always with one error status. It
//! counts the requests it got.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use projectors_rag::embeddings::{EmbedRole, Embedder as _, LocalEmbedder};
use serde_json::{Value, json};

/// The path the server answers on.
pub(crate) const PATH: &str = "/v1/embeddings";

/// The prefix `query_prefix` must be set to.
pub(crate) const QUERY_PREFIX: &str = "query: ";

/// The prefix `passage_prefix` must be set to.
pub(crate) const PASSAGE_PREFIX: &str = "passage: ";

/// How the server answers.
#[derive(Clone)]
pub(crate) enum Answer {
    /// The vectors of the local model; an input without one of the two
    /// prefixes is a `400`.
    LocalModel(Arc<LocalEmbedder>),
    /// Toy vectors: a hash of each input spread over 8 components (cheap,
    /// deterministic, meaningless), whatever the prefix.
    Toy,
    /// This status, for every request.
    Status(u16),
}

#[derive(Clone)]
struct Backend {
    answer: Answer,
    requests: Arc<AtomicUsize>,
}

/// A running server; it stops when dropped.
pub(crate) struct EmbeddingsServer {
    /// `http://127.0.0.1:PORT/v1/embeddings`.
    pub(crate) url: String,
    requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl EmbeddingsServer {
    /// Serves `answer` on a loopback port of the system's choosing.
    pub(crate) async fn start(answer: Answer) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let app = Router::new()
            .route(PATH, post(embeddings))
            .with_state(Backend {
                answer,
                requests: Arc::clone(&requests),
            });
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url: format!("http://{addr}{PATH}"),
            requests,
            task,
        }
    }

    /// How many requests it got so far.
    pub(crate) fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for EmbeddingsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn embeddings(State(backend): State<Backend>, body: Bytes) -> Response {
    backend.requests.fetch_add(1, Ordering::SeqCst);
    let model = match &backend.answer {
        Answer::Status(status) => {
            return (
                StatusCode::from_u16(*status).unwrap(),
                "{\"error\":\"scripted\"}",
            )
                .into_response();
        }
        Answer::LocalModel(model) => Some(model),
        Answer::Toy => None,
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(inputs) = body["input"].as_array() else {
        return (StatusCode::BAD_REQUEST, "no input").into_response();
    };
    let Some(model) = model else {
        let vectors: Vec<Vec<f32>> = inputs
            .iter()
            .map(|input| toy_vector(input.as_str().unwrap_or_default()))
            .collect();
        return answer(&body, vectors);
    };
    // One call to the model per role, the answer in input order.
    let mut by_role: [(EmbedRole, Vec<usize>, Vec<String>); 2] = [
        (EmbedRole::Query, Vec::new(), Vec::new()),
        (EmbedRole::Passage, Vec::new(), Vec::new()),
    ];
    for (index, input) in inputs.iter().enumerate() {
        let text = input.as_str().unwrap_or_default();
        let (slot, text) = if let Some(text) = text.strip_prefix(QUERY_PREFIX) {
            (0, text)
        } else if let Some(text) = text.strip_prefix(PASSAGE_PREFIX) {
            (1, text)
        } else {
            return (StatusCode::BAD_REQUEST, "an input without a role prefix").into_response();
        };
        by_role[slot].1.push(index);
        by_role[slot].2.push(text.to_owned());
    }
    let mut vectors = vec![Vec::new(); inputs.len()];
    for (role, indexes, texts) in by_role {
        if texts.is_empty() {
            continue;
        }
        let embedded = model.embed(&texts, role).await.unwrap();
        for (index, vector) in indexes.into_iter().zip(embedded) {
            vectors[index] = vector;
        }
    }
    answer(&body, vectors)
}

/// The `200` answer of `request` with `vectors`, in input order.
fn answer(request: &Value, vectors: Vec<Vec<f32>>) -> Response {
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(index, vector)| json!({"object": "embedding", "index": index, "embedding": vector}))
        .collect();
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({"object": "list", "data": data, "model": request["model"]}).to_string(),
    )
        .into_response()
}

/// FNV-1a of `text` per component, in [-1, 1] (never all zero).
fn toy_vector(text: &str) -> Vec<f32> {
    (0_u64..8)
        .map(|i| {
            let mut hash = 0xcbf2_9ce4_8422_2325_u64 ^ i;
            for byte in text.bytes() {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
            #[allow(clippy::cast_precision_loss, reason = "a value below 20 001")]
            let unit = (hash % 20_001) as f32 / 10_000.0 - 1.0;
            if unit == 0.0 { 0.5 } else { unit }
        })
        .collect()
}
