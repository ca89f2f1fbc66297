//! The OpenAI-compatible `/v1/embeddings` adapter of the [`Embedder`] port
//! (feature `http-embeddings`): the API that OpenAI, Azure OpenAI, DashScope,
//! Ollama, vLLM and text-embeddings-inference (TEI) serve.
//!
//! # What is sent
//!
//! One `POST` to the configured endpoint URL per batch of at most
//! [`HttpEmbedderConfig::batch_size`] texts (a longer call is split into
//! several requests, one after the other):
//!
//! ```json
//! {"model": "<model>", "input": ["<prefix><text>", ...], "encoding_format": "float"}
//! ```
//!
//! with `"dimensions": n` added when [`HttpEmbedderConfig::dimensions`] is
//! set. Each text is prefixed by its role's prefix
//! ([`query_prefix`](HttpEmbedderConfig::query_prefix) or
//! [`passage_prefix`](HttpEmbedderConfig::passage_prefix), empty by default;
//! e5 models served by TEI want `"query: "` and `"passage: "`). The key, when
//! [`api_key_env`](HttpEmbedderConfig::api_key_env) names a variable, goes in
//! `Authorization: Bearer <key>`; it is read once, when the embedder is
//! built. Credentials in the URL's userinfo are sent as basic authentication
//! (reqwest's behavior) and may not be combined with a key.
//!
//! The answer must be `{"data": [{"index": i, "embedding": [floats]}, ...]}`:
//! items are put in `index` order (array order when no item has an index),
//! and there must be exactly one vector per input, every vector of the whole
//! call of one dimension (the configured `dimensions` when set), all
//! components finite. Other fields (`object`, `model`, `usage`) are ignored.
//!
//! # Retries
//!
//! A `429`, a `5xx` or a failed connection is retried, at most
//! [`max_retries`](HttpEmbedderConfig::max_retries) times per request, after
//! an exponential backoff with jitter (the `n`-th retry waits between half
//! and all of `retry_base_delay * 2^(n-1)`, at most 10 s) or after the
//! answer's `Retry-After` seconds when it has them (also at most 10 s). A
//! timeout is not retried: [`timeout`](HttpEmbedderConfig::timeout) is what a
//! caller waits for each request, and the knowledge base would rather answer
//! with BM25 alone than wait several times as long. Redirects are not
//! followed (the key stays with the configured host).
//!
//! # Errors
//!
//! - [`EmbedError::Unavailable`] at construction only: invalid URL or
//!   configuration, or the key variable unset or empty (the message names the
//!   variable, never its value).
//! - [`EmbedError::Timeout`]: a request, its answer included, took longer than
//!   the timeout.
//! - [`EmbedError::Failed`]: a `4xx` other than `429` (`401`/`403` say that
//!   authentication failed), a redirect, or retries exhausted.
//! - [`EmbedError::Malformed`]: the answer is not JSON of the shape above, or
//!   not one finite vector per input of one dimension.
//!
//! Messages name the endpoint by scheme, host and port only (no userinfo, no
//! path or query), never hold the key or the `Authorization` header, and
//! quote at most 200 bytes of an error answer's body (with the key, should
//! the server echo it, cut out). `Debug` of the embedder and of its
//! configuration shows neither the key nor URL credentials.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::Once;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{Response, StatusCode, Url};
use serde::{Deserialize, Serialize};

use super::{EmbedError, EmbedRole, Embedder};

/// Default per-request timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default retries after the first attempt of a request.
const DEFAULT_MAX_RETRIES: u32 = 3;
/// Default texts per request.
const DEFAULT_BATCH_SIZE: usize = 32;
/// Default backoff before the first retry (doubled for each further one).
const DEFAULT_RETRY_BASE_DELAY: Duration = Duration::from_millis(200);
/// The longest wait between two attempts, backoff and `Retry-After` alike.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(10);
/// Most bytes of an error answer's body quoted in a message.
const EXCERPT_BYTES: usize = 200;
/// Most bytes of a successful answer read (32 vectors of 4096 dimensions as
/// JSON are about 3 MiB).
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// The configuration of an [`HttpEmbedder`].
///
/// Start from [`HttpEmbedderConfig::new`] (the defaults) and set fields:
///
/// ```
/// use projectors_rag::embeddings::HttpEmbedderConfig;
///
/// let mut config = HttpEmbedderConfig::new(
///     "http://127.0.0.1:8080/v1/embeddings",
///     "intfloat/multilingual-e5-small",
/// );
/// config.query_prefix = "query: ".into();
/// config.passage_prefix = "passage: ".into();
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpEmbedderConfig {
    /// The full endpoint URL, e.g. `https://api.openai.com/v1/embeddings`
    /// (`http` or `https`).
    pub url: String,
    /// The `model` sent with every request.
    pub model: String,
    /// The name of the environment variable that holds the API key (read
    /// when the embedder is built, surrounding whitespace trimmed); `None`
    /// sends no `Authorization` header.
    pub api_key_env: Option<String>,
    /// How long one request may take, its answer included (default 10 s).
    pub timeout: Duration,
    /// How many times a request is retried after a `429`, a `5xx` or a failed
    /// connection (default 3).
    pub max_retries: u32,
    /// The backoff before the first retry, doubled for each further one,
    /// jittered, at most 10 s (default 200 ms).
    pub retry_base_delay: Duration,
    /// Most texts per request, and the embedder's
    /// [`max_batch`](Embedder::max_batch) (default 32).
    pub batch_size: usize,
    /// Prepended to every [`EmbedRole::Query`] text (default empty).
    pub query_prefix: String,
    /// Prepended to every [`EmbedRole::Passage`] text (default empty).
    pub passage_prefix: String,
    /// Sent as `dimensions` when set (models with shortenable vectors), and
    /// then required of every answer.
    pub dimensions: Option<usize>,
}

impl HttpEmbedderConfig {
    /// A configuration for `model` at the endpoint `url`, with no key and
    /// the defaults: 10 s timeout, 3 retries from 200 ms, batches of 32, no
    /// prefixes, the model's own dimension.
    #[must_use]
    pub fn new(url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            model: model.into(),
            api_key_env: None,
            timeout: DEFAULT_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            retry_base_delay: DEFAULT_RETRY_BASE_DELAY,
            batch_size: DEFAULT_BATCH_SIZE,
            query_prefix: String::new(),
            passage_prefix: String::new(),
            dimensions: None,
        }
    }
}

impl fmt::Debug for HttpEmbedderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url =
            Url::parse(&self.url).map_or_else(|_| "<invalid URL>".to_owned(), |url| redacted(&url));
        f.debug_struct("HttpEmbedderConfig")
            .field("url", &url)
            .field("model", &self.model)
            .field("api_key_env", &self.api_key_env)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_base_delay", &self.retry_base_delay)
            .field("batch_size", &self.batch_size)
            .field("query_prefix", &self.query_prefix)
            .field("passage_prefix", &self.passage_prefix)
            .field("dimensions", &self.dimensions)
            .finish()
    }
}

/// An [`Embedder`] that calls an OpenAI-compatible `/v1/embeddings`
/// endpoint (see [`HttpEmbedderConfig`]).
///
/// # Behavior
/// - Each batch of at most `batch_size` texts, prefixed by role, is one
///   `POST` of `{"model", "input", "encoding_format": "float"}` (and
///   `dimensions` when configured), with `Authorization: Bearer <key>` when
///   a key variable is configured.
/// - The answer's `data` items are put in `index` order; exactly one finite
///   vector per input, one dimension for the whole call.
/// - `429`, `5xx` and connection failures are retried up to `max_retries`
///   times with jittered exponential backoff, or after `Retry-After`
///   seconds; both waits are capped at 10 s. Timeouts and other answers are
///   not retried; redirects are not followed.
/// - [`model_id`](Embedder::model_id) is `http:<model>`, followed by
///   `;dimensions=<n>`, `;query_prefix="…"` and `;passage_prefix="…"` for
///   whichever of them is set: vectors made with other settings never mix.
///   The endpoint is not part of it (the same model elsewhere makes the
///   same vectors).
///
/// # Errors
/// - [`EmbedError::Unavailable`]: construction only (invalid configuration,
///   key variable unset or empty).
/// - [`EmbedError::Timeout`]: a request took longer than `timeout`.
/// - [`EmbedError::Failed`]: `4xx` other than `429` (authentication failed
///   on `401`/`403`), redirect, or retries exhausted.
/// - [`EmbedError::Malformed`]: the answer is not one finite vector per text
///   of one dimension.
///
/// Messages name only the endpoint's scheme, host and port; `Debug` shows
/// neither the key nor URL credentials.
pub struct HttpEmbedder {
    client: reqwest::Client,
    url: Url,
    /// `scheme://host[:port]`, for messages.
    endpoint: String,
    model: String,
    model_id: String,
    api_key_env: Option<String>,
    key: Option<ApiKey>,
    timeout: Duration,
    max_retries: u32,
    retry_base_delay: Duration,
    batch_size: usize,
    query_prefix: String,
    passage_prefix: String,
    dimensions: Option<usize>,
}

/// The key and its `Authorization` header value (marked sensitive).
struct ApiKey {
    key: String,
    header: HeaderValue,
}

impl fmt::Debug for HttpEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpEmbedder")
            .field("url", &redacted(&self.url))
            .field("model_id", &self.model_id)
            .field("api_key_env", &self.api_key_env)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

impl HttpEmbedder {
    /// Builds the embedder, reading the key (when
    /// [`api_key_env`](HttpEmbedderConfig::api_key_env) names a variable)
    /// from the process environment.
    ///
    /// # Errors
    /// [`EmbedError::Unavailable`] when the URL is not an `http` or `https`
    /// URL with a host, the model is empty, `batch_size`, `timeout` or
    /// `dimensions` is zero, the named variable is unset, empty or not
    /// UTF-8, the key is not a valid header value, or the URL holds
    /// credentials while a key is configured.
    pub fn new(config: HttpEmbedderConfig) -> Result<Self, EmbedError> {
        Self::with_key_lookup(config, |name| std::env::var(name).ok())
    }

    /// Like [`new`](Self::new), with the key variable's value from `lookup`
    /// (called with its name, at most once) instead of the process
    /// environment: for a secret store, or for tests.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_key_lookup(
        config: HttpEmbedderConfig,
        lookup: impl FnOnce(&str) -> Option<String>,
    ) -> Result<Self, EmbedError> {
        let url = Url::parse(&config.url)
            .map_err(|e| unavailable(format!("the embeddings URL is not a URL ({e})")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(unavailable(
                "the embeddings URL must be an http or https URL with a host",
            ));
        }
        let endpoint = origin(&url);
        if config.model.trim().is_empty() {
            return Err(unavailable(format!(
                "no embedding model configured for {endpoint}"
            )));
        }
        if config.batch_size == 0 {
            return Err(unavailable("the embeddings batch size must be at least 1"));
        }
        if config.timeout.is_zero() {
            return Err(unavailable(
                "the embeddings timeout must be longer than zero",
            ));
        }
        if config.dimensions == Some(0) {
            return Err(unavailable("the embeddings dimensions must be at least 1"));
        }
        let key = match &config.api_key_env {
            None => None,
            Some(name) => Some(read_key(name, lookup)?),
        };
        if key.is_some() && (!url.username().is_empty() || url.password().is_some()) {
            return Err(unavailable(format!(
                "the URL of {endpoint} holds credentials and an API key is configured: use one"
            )));
        }

        ensure_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| {
                unavailable(format!(
                    "cannot build the HTTP client for {endpoint}: {}",
                    describe(&e)
                ))
            })?;

        let model_id = model_id(&config);
        Ok(Self {
            client,
            url,
            endpoint,
            model: config.model,
            model_id,
            api_key_env: config.api_key_env,
            key,
            timeout: config.timeout,
            max_retries: config.max_retries,
            retry_base_delay: config.retry_base_delay,
            batch_size: config.batch_size,
            query_prefix: config.query_prefix,
            passage_prefix: config.passage_prefix,
            dimensions: config.dimensions,
        })
    }

    /// One request for `input` (at most a batch), with its retries.
    async fn embed_batch(&self, input: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = serde_json::to_vec(&EmbeddingsRequest {
            model: &self.model,
            input,
            encoding_format: "float",
            dimensions: self.dimensions,
        })
        .map_err(|e| self.failed(format!("cannot encode the request: {e}")))?;

        let mut last = String::new();
        // The wait an answer asked for (`Retry-After`), instead of a backoff.
        let mut asked: Option<Duration> = None;
        for attempt in 0..=self.max_retries {
            if attempt > 0 {
                let wait = asked.take().unwrap_or_else(|| self.backoff(attempt));
                tokio::time::sleep(wait).await;
            }
            let mut request = self
                .client
                .post(self.url.clone())
                .header(CONTENT_TYPE, "application/json")
                .header(ACCEPT, "application/json")
                .body(body.clone());
            if let Some(key) = &self.key {
                request = request.header(AUTHORIZATION, key.header.clone());
            }
            let response = match request.send().await {
                Ok(response) => response,
                Err(e) if e.is_timeout() => return Err(self.timed_out()),
                Err(e) => {
                    last = describe(&e);
                    continue;
                }
            };
            let status = response.status();
            if status.is_success() {
                let bytes = match read_capped(response, MAX_ANSWER_BYTES).await {
                    Ok(Some(bytes)) => bytes,
                    Ok(None) => {
                        return Err(self.malformed(format!(
                            "the answer is larger than {} MiB",
                            MAX_ANSWER_BYTES >> 20
                        )));
                    }
                    Err(e) if e.is_timeout() => return Err(self.timed_out()),
                    Err(e) => {
                        last = format!("reading the answer failed: {}", describe(&e));
                        continue;
                    }
                };
                return parse_answer(&bytes, input.len()).map_err(|m| self.malformed(m));
            }
            if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
                asked = retry_after(response.headers());
                last = format!("HTTP {status}{}", self.excerpt(response).await);
                continue;
            }
            return Err(self.refused(status, response).await);
        }
        Err(self.failed(format!(
            "{last} (gave up after {} attempts)",
            self.max_retries.saturating_add(1)
        )))
    }

    /// The error for a final answer that is neither success nor retryable.
    async fn refused(&self, status: StatusCode, response: Response) -> EmbedError {
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            let hint = match &self.api_key_env {
                Some(name) => format!("check the key in ${name}"),
                None => "no API key is configured (api_key_env)".to_owned(),
            };
            return self.failed(format!("authentication failed (HTTP {status}): {hint}"));
        }
        if status.is_redirection() {
            return self.failed(format!(
                "HTTP {status}: redirects are not followed, configure the final endpoint URL"
            ));
        }
        let excerpt = self.excerpt(response).await;
        self.failed(format!("HTTP {status}{excerpt}"))
    }

    /// `": <at most 200 bytes of the body>"`, the key cut out, or `""`.
    async fn excerpt(&self, response: Response) -> String {
        let key_len = self.key.as_ref().map_or(0, |k| k.key.len());
        let bytes = read_prefix(response, EXCERPT_BYTES + key_len).await;
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some(key) = &self.key {
            text = text.replace(&key.key, "<redacted>");
        }
        let text = clip(&text, EXCERPT_BYTES);
        if text.is_empty() {
            String::new()
        } else {
            format!(": {text}")
        }
    }

    /// The wait before retry number `retry` (1-based): half to all of
    /// `retry_base_delay * 2^(retry-1)`, at most [`MAX_RETRY_DELAY`].
    fn backoff(&self, retry: u32) -> Duration {
        let full = self
            .retry_base_delay
            .saturating_mul(1_u32 << retry.saturating_sub(1).min(20))
            .min(MAX_RETRY_DELAY);
        let random = std::collections::hash_map::RandomState::new().hash_one(retry);
        // A fraction in [0.5, 1.0].
        let fraction = 0.5 + f64::from(u32::try_from(random % 1001).unwrap_or(0)) / 2000.0;
        full.mul_f64(fraction)
    }

    fn timed_out(&self) -> EmbedError {
        EmbedError::Timeout {
            millis: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }

    fn failed(&self, message: String) -> EmbedError {
        EmbedError::Failed {
            message: format!("{}: {message}", self.endpoint),
        }
    }

    fn malformed(&self, message: String) -> EmbedError {
        let message = match &self.key {
            Some(key) => message.replace(&key.key, "<redacted>"),
            None => message,
        };
        EmbedError::Malformed {
            message: format!("{}: {}", self.endpoint, clip(&message, EXCERPT_BYTES)),
        }
    }
}

#[async_trait]
impl Embedder for HttpEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn max_batch(&self) -> usize {
        self.batch_size
    }

    async fn embed(&self, texts: &[String], role: EmbedRole) -> Result<Vec<Vec<f32>>, EmbedError> {
        let prefix = match role {
            EmbedRole::Query => &self.query_prefix,
            EmbedRole::Passage => &self.passage_prefix,
        };
        let mut vectors = Vec::with_capacity(texts.len());
        let mut dimension = self.dimensions;
        for batch in texts.chunks(self.batch_size) {
            let input: Vec<String> = batch.iter().map(|text| format!("{prefix}{text}")).collect();
            for vector in self.embed_batch(&input).await? {
                match dimension {
                    Some(d) if d != vector.len() => {
                        return Err(self
                            .malformed(format!("vectors of {} and {d} dimensions", vector.len())));
                    }
                    _ => dimension = Some(vector.len()),
                }
                vectors.push(vector);
            }
        }
        Ok(vectors)
    }
}

/// The request body.
#[derive(Serialize)]
struct EmbeddingsRequest<'a> {
    model: &'a str,
    input: &'a [String],
    encoding_format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
}

/// The parts of the answer that are read.
#[derive(Deserialize)]
struct EmbeddingsAnswer {
    data: Vec<EmbeddingItem>,
}

/// One vector of the answer.
#[derive(Deserialize)]
struct EmbeddingItem {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

/// The vectors of an answer to `expected` inputs, in input order; the
/// message says what is wrong otherwise.
fn parse_answer(bytes: &[u8], expected: usize) -> Result<Vec<Vec<f32>>, String> {
    let answer: EmbeddingsAnswer =
        serde_json::from_slice(bytes).map_err(|e| format!("not an embeddings answer ({e})"))?;
    if answer.data.len() != expected {
        return Err(format!(
            "{} vectors for {expected} inputs",
            answer.data.len()
        ));
    }
    let indexed = answer
        .data
        .iter()
        .filter(|item| item.index.is_some())
        .count();
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; expected];
    if indexed == 0 {
        for (slot, item) in slots.iter_mut().zip(answer.data) {
            *slot = Some(item.embedding);
        }
    } else if indexed < expected {
        return Err(format!(
            "{} of {expected} items have no index",
            expected - indexed
        ));
    } else {
        for item in answer.data {
            let index = item.index.unwrap_or(usize::MAX);
            let slot = slots
                .get_mut(index)
                .ok_or_else(|| format!("index {index} out of range for {expected} inputs"))?;
            if slot.replace(item.embedding).is_some() {
                return Err(format!("index {index} appears twice"));
            }
        }
    }
    let vectors: Vec<Vec<f32>> = slots.into_iter().flatten().collect();
    let dimension = vectors.first().map_or(0, Vec::len);
    for (i, vector) in vectors.iter().enumerate() {
        if vector.is_empty() {
            return Err(format!("vector {i} is empty"));
        }
        if vector.len() != dimension {
            return Err(format!(
                "vectors of {dimension} and {} dimensions",
                vector.len()
            ));
        }
        if vector.iter().any(|x| !x.is_finite()) {
            return Err(format!(
                "vector {i} has a component that is not a finite f32"
            ));
        }
    }
    Ok(vectors)
}

/// Reads the body; `Ok(None)` when it is longer than `cap` bytes.
async fn read_capped(
    mut response: Response,
    cap: usize,
) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if bytes.len() + chunk.len() > cap {
            return Ok(None);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Some(bytes))
}

/// At most `cap` bytes of the body; whatever arrived if reading fails.
async fn read_prefix(mut response: Response, cap: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    while bytes.len() < cap {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    bytes.truncate(cap);
    bytes
}

/// `Retry-After` in seconds (not the HTTP-date form), at most
/// [`MAX_RETRY_DELAY`].
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_DELAY))
}

/// Reads and checks the key variable.
fn read_key(name: &str, lookup: impl FnOnce(&str) -> Option<String>) -> Result<ApiKey, EmbedError> {
    let value = lookup(name).ok_or_else(|| {
        unavailable(format!(
            "the API key variable ${name} is not set (or not UTF-8)"
        ))
    })?;
    let key = value.trim();
    if key.is_empty() {
        return Err(unavailable(format!(
            "the API key variable ${name} is empty"
        )));
    }
    let mut header = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
        unavailable(format!(
            "the API key in ${name} is not a valid HTTP header value (visible ASCII only)"
        ))
    })?;
    header.set_sensitive(true);
    Ok(ApiKey {
        key: key.to_owned(),
        header,
    })
}

/// `http:<model>`, then whatever else changes the vectors.
fn model_id(config: &HttpEmbedderConfig) -> String {
    let mut id = format!("http:{}", config.model);
    if let Some(dimensions) = config.dimensions {
        id.push_str(&format!(";dimensions={dimensions}"));
    }
    if !config.query_prefix.is_empty() {
        id.push_str(&format!(";query_prefix={:?}", config.query_prefix));
    }
    if !config.passage_prefix.is_empty() {
        id.push_str(&format!(";passage_prefix={:?}", config.passage_prefix));
    }
    id
}

/// `scheme://host[:port]`: no userinfo, path or query.
fn origin(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

/// The URL without userinfo and query, for `Debug`.
fn redacted(url: &Url) -> String {
    let query = if url.query().is_some() {
        "?<redacted>"
    } else {
        ""
    };
    format!("{}{}{query}", origin(url), url.path())
}

/// What went wrong with a request: its kind and its innermost cause, without
/// the URL.
fn describe(error: &reqwest::Error) -> String {
    let kind = if error.is_connect() {
        "cannot connect"
    } else if error.is_builder() {
        "invalid request"
    } else if error.is_body() || error.is_decode() {
        "broken answer"
    } else {
        "request failed"
    };
    let mut cause: &dyn std::error::Error = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if std::ptr::addr_eq(cause, error) {
        kind.to_owned()
    } else {
        format!("{kind} ({})", clip(&cause.to_string(), EXCERPT_BYTES))
    }
}

/// `text` with control characters as spaces, at most `cap` bytes (cut at a
/// character boundary), trimmed.
fn clip(text: &str, cap: usize) -> String {
    let mut out = String::with_capacity(text.len().min(cap));
    for c in text.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > cap {
            break;
        }
        out.push(c);
    }
    out.trim().to_owned()
}

fn unavailable(message: impl Into<String>) -> EmbedError {
    EmbedError::Unavailable {
        message: message.into(),
    }
}

/// Makes rustls's ring provider (the one this workspace builds) the process
/// default unless one is installed: reqwest is built without a provider of
/// its own and would otherwise panic building its client.
fn ensure_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Losing a race to another installer is fine: a default exists.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}
