//! An OTLP/HTTP trace receiver inside the test: `POST /v1/traces` with a
//! protobuf `ExportTraceServiceRequest`, decoded with `opentelemetry-proto`,
//! its spans kept for the test to wait on. It can also answer 503, or take
//! requests and never answer (a hanging collector).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::HANG_GUARD;

/// How the receiver answers an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behaviour {
    /// 200, spans kept.
    Accept,
    /// 503 Service Unavailable, spans not kept.
    Unavailable,
    /// Never answers.
    Hang,
}

/// One received span, its ids as lowercase hex.
#[derive(Debug, Clone)]
pub(crate) struct ReceivedSpan {
    pub(crate) name: String,
    /// `SPAN_KIND_*` as the proto's number: 1 INTERNAL, 2 SERVER.
    pub(crate) kind: i32,
    pub(crate) trace_id: String,
    pub(crate) span_id: String,
    /// Empty for a root span.
    pub(crate) parent_span_id: String,
    pub(crate) trace_state: String,
    pub(crate) attributes: BTreeMap<String, Value>,
    /// 0 unset, 1 OK, 2 ERROR.
    pub(crate) status_code: i32,
    pub(crate) status_message: String,
    pub(crate) start_unix_nano: u64,
    pub(crate) end_unix_nano: u64,
    /// The resource's `service.name`.
    pub(crate) service_name: Option<String>,
}

impl ReceivedSpan {
    /// The attribute names, sorted.
    pub(crate) fn keys(&self) -> Vec<&str> {
        self.attributes.keys().map(String::as_str).collect()
    }

    /// The attribute `key`.
    pub(crate) fn attr(&self, key: &str) -> &Value {
        self.attributes.get(key).unwrap_or(&Value::Null)
    }
}

#[derive(Default)]
struct Shared {
    spans: Mutex<Vec<ReceivedSpan>>,
    requests: Mutex<usize>,
    arrived: Notify,
}

/// A running receiver on a free loopback port.
pub(crate) struct Receiver {
    /// `http://127.0.0.1:PORT`: the OTLP base URL (spans go to `/v1/traces`).
    pub(crate) endpoint: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts a receiver answering `behaviour`.
    pub(crate) async fn start(behaviour: Behaviour) -> Self {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/traces", post(export))
            .with_state((Arc::clone(&shared), behaviour));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            endpoint,
            shared,
            task,
        }
    }

    /// The spans received so far.
    pub(crate) fn spans(&self) -> Vec<ReceivedSpan> {
        self.shared.spans.lock().unwrap().clone()
    }

    /// Export requests received so far (whatever the answer).
    pub(crate) fn requests(&self) -> usize {
        *self.shared.requests.lock().unwrap()
    }

    /// Waits until `done` holds of the spans received (or the hang guard
    /// fails the test), and returns them.
    pub(crate) async fn wait_for(
        &self,
        what: &str,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let wait = async {
            loop {
                let arrived = self.shared.arrived.notified();
                let spans = self.spans();
                if done(&spans) {
                    return spans;
                }
                arrived.await;
            }
        };
        match tokio::time::timeout(HANG_GUARD, wait).await {
            Ok(spans) => spans,
            Err(_) => panic!("the receiver never got {what}: {:#?}", self.spans()),
        }
    }

    /// Waits until an export request arrived (whatever the answer).
    pub(crate) async fn wait_for_request(&self) {
        let wait = async {
            loop {
                let arrived = self.shared.arrived.notified();
                if self.requests() > 0 {
                    return;
                }
                arrived.await;
            }
        };
        tokio::time::timeout(HANG_GUARD, wait)
            .await
            .expect("an export request arrives");
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The spans named `name`.
pub(crate) fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// The span whose `key` attribute is `value` and whose name starts with
/// `prefix`.
pub(crate) fn find<'a>(
    spans: &'a [ReceivedSpan],
    prefix: &str,
    key: &str,
    value: &str,
) -> Option<&'a ReceivedSpan> {
    spans
        .iter()
        .find(|s| s.name.starts_with(prefix) && s.attr(key) == &json!(value))
}

async fn export(
    State((shared, behaviour)): State<(Arc<Shared>, Behaviour)>,
    body: Bytes,
) -> StatusCode {
    *shared.requests.lock().unwrap() += 1;
    shared.arrived.notify_waiters();
    match behaviour {
        Behaviour::Accept => {}
        Behaviour::Unavailable => return StatusCode::SERVICE_UNAVAILABLE,
        Behaviour::Hang => std::future::pending::<()>().await,
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut received = Vec::new();
    for resource_spans in request.resource_spans {
        let service_name = resource_spans.resource.as_ref().and_then(|r| {
            r.attributes
                .iter()
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| value_of(kv).as_str().map(str::to_owned))
        });
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                let status = span.status.unwrap_or_default();
                received.push(ReceivedSpan {
                    name: span.name,
                    kind: span.kind,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    trace_state: span.trace_state,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), value_of(kv)))
                        .collect(),
                    status_code: status.code,
                    status_message: status.message,
                    start_unix_nano: span.start_time_unix_nano,
                    end_unix_nano: span.end_time_unix_nano,
                    service_name: service_name.clone(),
                });
            }
        }
    }
    shared.spans.lock().unwrap().extend(received);
    shared.arrived.notify_waiters();
    StatusCode::OK
}

/// An attribute's value as JSON: strings, booleans, integers, doubles.
fn value_of(kv: &KeyValue) -> Value {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => json!(s),
        Some(AnyValue::BoolValue(b)) => json!(b),
        Some(AnyValue::IntValue(i)) => json!(i),
        Some(AnyValue::DoubleValue(d)) => json!(d),
        other => json!(format!("{other:?}")),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
