//! JSON-RPC framing on stdio: one message per line, and a reply to every
//! request, even one that rmcp could not read.
//!
//! rmcp's own stdio transport drops what it cannot parse without a word, so a
//! client that sent such a request waits forever. This transport reads the
//! lines itself, answers what is wrong with them as JSON-RPC 2.0 says, and
//! hands rmcp only messages it can serve:
//!
//! | the line | the answer |
//! |---|---|
//! | not JSON (bad syntax, invalid UTF-8, a lone surrogate, nesting over 128 levels) | `-32700` Parse error |
//! | over [`MAX_LINE_BYTES`] | `-32600` Invalid Request (the line is skipped, never held whole) |
//! | JSON, but not a request, notification or response (a batch array, a bad envelope) | `-32600` Invalid Request |
//! | a request whose params do not fit its method | `-32602` Invalid params |
//! | a request whose id is the id of a request still in flight | `-32600` Invalid Request |
//! | a request while the server stops | `-32000` the server is stopping |
//!
//! Every error reply carries the request's id when it can be read: from the
//! parsed message, or (for a line that does not parse or is too long) from the
//! line's first [`ID_SCAN_BYTES`] bytes when its top-level `"id"` member comes
//! before anything unreadable; otherwise `null`, as JSON-RPC requires. Replies
//! never echo any other part of the line. Notifications never get a reply; a
//! notification or response that does not parse is dropped.
//!
//! `tools/call` with `arguments` that are not an object (a string, an array,
//! `null`) is not a protocol error: the arguments' JSON text travels to the
//! handler beside the request ([`NonObjectArguments`]), and the boundary
//! answers it with an `INVALID_INPUT` error result.
//!
//! Outgoing messages go to one writer task, in order, so that a reply written
//! here never interleaves with one written for rmcp.

use std::collections::HashSet;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, GetExtensions as _, JsonRpcMessage};
use rmcp::service::TxJsonRpcMessage;
use rmcp::transport::Transport;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::{mpsc, oneshot, watch};

use super::scan::{is_id, scan_id};
use crate::server::{CallGate, CallTicket, Phase};

/// Longest line read (rmcp's own cap): a longer one is answered `-32600`
/// and skipped without being held in memory.
pub(crate) const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// How much of an unreadable or oversized line is searched for its id.
pub(crate) const ID_SCAN_BYTES: usize = 64 * 1024;

/// JSON-RPC: the text is not JSON.
const PARSE_ERROR: i64 = -32_700;
/// JSON-RPC: the JSON is not a valid request.
const INVALID_REQUEST: i64 = -32_600;
/// JSON-RPC: the params do not fit the method.
const INVALID_PARAMS: i64 = -32_602;
/// Implementation-defined server error: the server is stopping.
const STOPPING: i64 = -32_000;

/// The JSON text of a `tools/call`'s `arguments` that were not an object,
/// exactly as sent (compact JSON). Rides in the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NonObjectArguments(pub(crate) String);

/// A `tools/call` admitted by the transport when it read the request, before
/// the end of input it may read right after: the service takes this ticket
/// instead of asking the gate again, so a call the client sent before it
/// closed its input is run, never refused.
#[derive(Debug, Clone)]
pub(crate) struct AdmittedCall(Arc<Mutex<Option<CallTicket>>>);

impl AdmittedCall {
    /// The ticket, once.
    pub(crate) fn take(&self) -> Option<CallTicket> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// Lines to the client, written in order by one task.
#[derive(Debug, Clone)]
pub(crate) struct LineWriter {
    lines: mpsc::Sender<Outgoing>,
}

#[derive(Debug)]
struct Outgoing {
    line: Vec<u8>,
    written: Option<oneshot::Sender<io::Result<()>>>,
}

impl LineWriter {
    /// Lines queued at most before senders wait.
    const QUEUE: usize = 64;

    /// Starts the writer task on `out`. The task ends once every clone of the
    /// writer is dropped and everything queued is written.
    pub(crate) fn spawn<W>(out: W) -> (Self, tokio::task::JoinHandle<()>)
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (lines, mut queue) = mpsc::channel::<Outgoing>(Self::QUEUE);
        let task = tokio::spawn(async move {
            let mut out = out;
            let mut broken = false;
            while let Some(outgoing) = queue.recv().await {
                let result = if broken {
                    Err(io::Error::from(io::ErrorKind::BrokenPipe))
                } else {
                    let written = match out.write_all(&outgoing.line).await {
                        Ok(()) => out.flush().await,
                        Err(e) => Err(e),
                    };
                    broken = written.is_err();
                    written
                };
                if let Some(done) = outgoing.written {
                    let _ = done.send(result);
                }
            }
        });
        (Self { lines }, task)
    }

    /// Writes one message and waits until it is written.
    async fn write(&self, line: Vec<u8>) -> io::Result<()> {
        let (written, done) = oneshot::channel();
        self.lines
            .send(Outgoing {
                line,
                written: Some(written),
            })
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        done.await
            .unwrap_or_else(|_| Err(io::Error::from(io::ErrorKind::BrokenPipe)))
    }
}

/// The server's stdio transport: lines in through [`LineReader`], messages
/// out through a [`LineWriter`].
#[derive(Debug)]
pub(crate) struct LineTransport<R> {
    reader: LineReader<R>,
    writer: LineWriter,
    /// A reply owed to the client, not yet queued (kept here so that a
    /// cancelled `receive` loses nothing).
    owed: Option<Vec<u8>>,
    /// Ids (as JSON text) of requests handed to rmcp and not answered yet.
    in_flight: Arc<Mutex<HashSet<String>>>,
    gate: CallGate,
    input_done: bool,
    /// Set at the end of input.
    input_closed: watch::Sender<bool>,
}

impl<R: AsyncRead + Unpin + Send> LineTransport<R> {
    /// A transport reading `input`, writing through `writer`, admitting calls
    /// through `gate`: at end of input it says so ([`Self::input_closed`]) and
    /// waits until the gate is [`Phase::Finished`] before it ends the
    /// session, so that running calls can still answer.
    pub(crate) fn new(input: R, writer: LineWriter, gate: CallGate) -> Self {
        Self {
            reader: LineReader::new(input, MAX_LINE_BYTES),
            writer,
            owed: None,
            in_flight: Arc::new(Mutex::new(HashSet::new())),
            gate,
            input_done: false,
            input_closed: watch::Sender::new(false),
        }
    }

    /// Becomes `true` once the client closed its input (end of file).
    pub(crate) fn input_closed(&self) -> watch::Receiver<bool> {
        self.input_closed.subscribe()
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// What to do with one whole line.
    fn handle(&self, line: &[u8]) -> Handled {
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Handled::Skip;
        }
        let value: Value = match serde_json::from_slice(line) {
            Ok(value) => value,
            Err(e) => {
                tracing::debug!(category = ?e.classify(), "unparsable line");
                return Handled::Reply(error_line(
                    scan_id(line).as_ref(),
                    PARSE_ERROR,
                    "Parse error",
                ));
            }
        };
        let Value::Object(mut object) = value else {
            tracing::debug!("a line that is not a JSON object");
            return Handled::Reply(error_line(None, INVALID_REQUEST, "Invalid Request"));
        };
        let id = object.get("id").cloned();
        let is_method = object.get("method").is_some();
        match (is_method, id) {
            (true, None) => self.notification(object),
            (true, Some(id)) => self.request(&mut object, &id),
            (false, Some(_)) if object.contains_key("result") || object.contains_key("error") => {
                match serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(object)) {
                    Ok(message) => Handled::Deliver(Box::new(message)),
                    Err(_) => {
                        tracing::debug!("dropped an unreadable response");
                        Handled::Skip
                    }
                }
            }
            (false, id) => Handled::Reply(error_line(
                id.as_ref().filter(|id| is_id(id)),
                INVALID_REQUEST,
                "Invalid Request",
            )),
        }
    }

    fn notification(&self, object: Map<String, Value>) -> Handled {
        let cancelled = (object.get("method").and_then(Value::as_str)
            == Some("notifications/cancelled"))
        .then(|| object.get("params")?.get("requestId").cloned())
        .flatten();
        match serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(object)) {
            Ok(message) => {
                // rmcp answers nothing to a cancelled request: its id is free.
                if let Some(id) = cancelled {
                    self.in_flight().remove(&id.to_string());
                }
                Handled::Deliver(Box::new(message))
            }
            Err(_) => {
                tracing::debug!("dropped an unreadable notification");
                Handled::Skip
            }
        }
    }

    fn request(&self, object: &mut Map<String, Value>, id: &Value) -> Handled {
        if !is_id(id) {
            return Handled::Reply(error_line(None, INVALID_REQUEST, "Invalid Request"));
        }
        if !self.gate.accepting() {
            return Handled::Reply(error_line(Some(id), STOPPING, "the server is stopping"));
        }
        let envelope_ok = object.get("jsonrpc") == Some(&json!("2.0"))
            && object.get("method").is_some_and(Value::is_string)
            && object
                .get("params")
                .is_none_or(|p| p.is_object() || p.is_array());
        let non_object_arguments = if object.get("method") == Some(&json!("tools/call")) {
            take_non_object_arguments(object)
        } else {
            None
        };
        let mut message = match serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(
            std::mem::take(object),
        )) {
            // rmcp reads a known method with params that do not fit it as
            // a custom request (and would answer "method not found").
            Ok(JsonRpcMessage::Request(request))
                if matches!(&request.request, ClientRequest::CustomRequest(custom)
                        if TYPED_METHODS.contains(&custom.method.as_str())) =>
            {
                return Handled::Reply(error_line(Some(id), INVALID_PARAMS, "Invalid params"));
            }
            Ok(message) => message,
            Err(_) if envelope_ok => {
                return Handled::Reply(error_line(Some(id), INVALID_PARAMS, "Invalid params"));
            }
            Err(_) => {
                return Handled::Reply(error_line(Some(id), INVALID_REQUEST, "Invalid Request"));
            }
        };
        if !self.in_flight().insert(id.to_string()) {
            return Handled::Reply(error_line(
                Some(id),
                INVALID_REQUEST,
                "Invalid Request: a request with this id is still in flight",
            ));
        }
        if let JsonRpcMessage::Request(request) = &mut message
            && matches!(request.request, ClientRequest::CallToolRequest(_))
        {
            let Ok(ticket) = self.gate.admit_while_accepting(None) else {
                self.in_flight().remove(&id.to_string());
                return Handled::Reply(error_line(Some(id), STOPPING, "the server is stopping"));
            };
            let admitted = AdmittedCall(Arc::new(Mutex::new(Some(ticket))));
            request.request.extensions_mut().insert(admitted);
        }
        if let (Some(arguments), JsonRpcMessage::Request(request)) =
            (non_object_arguments, &mut message)
        {
            request.request.extensions_mut().insert(arguments);
        }
        Handled::Deliver(Box::new(message))
    }
}

/// The client requests rmcp reads into typed params: one of these read as a
/// custom request had params that do not fit.
const TYPED_METHODS: [&str; 14] = [
    "initialize",
    "ping",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "tools/call",
    "tools/list",
];

/// Removes a `tools/call`'s `arguments` when they are present and not an
/// object, and returns their JSON text.
fn take_non_object_arguments(object: &mut Map<String, Value>) -> Option<NonObjectArguments> {
    let params = object.get_mut("params")?.as_object_mut()?;
    if params.get("arguments").is_none_or(Value::is_object) {
        return None;
    }
    let arguments = params.remove("arguments")?;
    Some(NonObjectArguments(arguments.to_string()))
}

/// One error response line. Only constant text and the id: nothing else of
/// the request.
fn error_line(id: Option<&Value>, code: i64, message: &str) -> Vec<u8> {
    let reply = json!({
        "jsonrpc": "2.0",
        "id": id.cloned().unwrap_or(Value::Null),
        "error": {"code": code, "message": message},
    });
    let mut line = reply.to_string().into_bytes();
    line.push(b'\n');
    line
}

enum Handled {
    Deliver(Box<ClientJsonRpcMessage>),
    Reply(Vec<u8>),
    Skip,
}

impl<R: AsyncRead + Unpin + Send + 'static> Transport<RoleServer> for LineTransport<R> {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let answered = match &item {
            JsonRpcMessage::Response(response) => serde_json::to_string(&response.id).ok(),
            JsonRpcMessage::Error(error) => error
                .id
                .as_ref()
                .and_then(|id| serde_json::to_string(id).ok()),
            _ => None,
        };
        if let Some(id) = answered {
            self.in_flight().remove(&id);
        }
        let line = serde_json::to_vec(&item).map(|mut line| {
            line.push(b'\n');
            line
        });
        let writer = self.writer.clone();
        async move { writer.write(line.map_err(io::Error::from)?).await }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            if self.owed.is_some() {
                // Reserve first: cancelled here, the reply stays owed.
                let permit = self.writer.lines.reserve().await.ok()?;
                if let Some(line) = self.owed.take() {
                    permit.send(Outgoing {
                        line,
                        written: None,
                    });
                }
            }
            let gate = self.gate.clone();
            if self.input_done {
                gate.reached(Phase::Finished).await;
                return None;
            }
            let read = tokio::select! {
                biased;
                () = gate.reached(Phase::Finished) => return None,
                read = self.reader.next() => read,
            };
            match read {
                LineRead::Line(line) => match self.handle(&line) {
                    Handled::Deliver(message) => return Some(*message),
                    Handled::Reply(reply) => self.owed = Some(reply),
                    Handled::Skip => {}
                },
                LineRead::Oversized { head } => {
                    tracing::warn!(max_bytes = MAX_LINE_BYTES, "skipped an oversized message");
                    self.owed = Some(error_line(
                        scan_id(&head).as_ref(),
                        INVALID_REQUEST,
                        "Invalid Request: message too large",
                    ));
                }
                LineRead::End => {
                    tracing::info!("input closed");
                    self.input_done = true;
                    self.input_closed.send_replace(true);
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// What one bounded line read found.
#[derive(Debug, PartialEq, Eq)]
enum LineRead {
    /// A whole line, without its `\n` (and `\r`).
    Line(Vec<u8>),
    /// A line over the cap, skipped; its first [`ID_SCAN_BYTES`] bytes.
    Oversized { head: Vec<u8> },
    /// End of input, or a read error (the same for the client: no more input).
    End,
}

/// Reads `\n`-terminated lines of at most `max` bytes, cancel-safely: all
/// state lives here, and bytes are consumed only after they are copied.
#[derive(Debug)]
struct LineReader<R> {
    input: BufReader<R>,
    max: usize,
    line: Vec<u8>,
    /// Set while skipping the rest of an oversized line.
    skipping: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    fn new(input: R, max: usize) -> Self {
        Self {
            input: BufReader::new(input),
            max,
            line: Vec::new(),
            skipping: false,
        }
    }

    async fn next(&mut self) -> LineRead {
        loop {
            let available = match self.input.fill_buf().await {
                Ok([]) => return self.end(),
                Ok(available) => available,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(kind = ?e.kind(), "reading stdin failed");
                    return self.end();
                }
            };
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            let chunk = &available[..newline.unwrap_or(take)];
            let mut found = None;
            if self.skipping {
                if newline.is_some() {
                    self.skipping = false;
                }
            } else if self.line.len() + chunk.len() > self.max {
                let room = ID_SCAN_BYTES.saturating_sub(self.line.len().min(ID_SCAN_BYTES));
                let mut head = std::mem::take(&mut self.line);
                head.truncate(ID_SCAN_BYTES);
                head.extend_from_slice(&chunk[..chunk.len().min(room)]);
                self.skipping = newline.is_none();
                found = Some(LineRead::Oversized { head });
            } else {
                self.line.extend_from_slice(chunk);
                if newline.is_some() {
                    let mut line = std::mem::take(&mut self.line);
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    found = Some(LineRead::Line(line));
                }
            }
            self.input.consume(take);
            if let Some(found) = found {
                return found;
            }
        }
    }

    /// End of input: a last line without `\n` still counts.
    fn end(&mut self) -> LineRead {
        if self.skipping || self.line.is_empty() {
            self.skipping = false;
            self.line.clear();
            return LineRead::End;
        }
        LineRead::Line(std::mem::take(&mut self.line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::GateLimits;

    #[tokio::test]
    async fn a_call_read_before_the_stop_is_admitted_when_read() {
        let gate = CallGate::new(GateLimits::UNBOUNDED);
        let (writer, _task) = LineWriter::spawn(tokio::io::sink());
        let transport = LineTransport::new(&b""[..], writer, gate.clone());
        let line = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"query_logs","arguments":{}}}"#;
        let Handled::Deliver(message) = transport.handle(line) else {
            panic!("the call was not delivered");
        };
        // The end of input right after it: the server stops taking calls
        // before its handler ran.
        gate.advance(Phase::Draining);
        let late = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"query_logs","arguments":{}}}"#;
        let Handled::Reply(reply) = transport.handle(late) else {
            panic!("a call read after the stop was delivered");
        };
        let reply: Value = serde_json::from_slice(&reply).unwrap();
        assert_eq!(reply["error"]["code"], STOPPING, "a new call is refused");
        assert_eq!(reply["id"], 2);
        assert_eq!(gate.in_flight(), 1, "the call read before is counted");
        let JsonRpcMessage::Request(request) = *message else {
            panic!("not a request");
        };
        let admitted = request.request.extensions().get::<AdmittedCall>().cloned();
        let ticket = admitted.as_ref().and_then(AdmittedCall::take);
        assert!(ticket.is_some(), "the handler gets the ticket");
        assert!(admitted.and_then(|a| a.take()).is_none(), "only once");
        drop((request, ticket));
        assert_eq!(gate.in_flight(), 0);
    }

    async fn read_all(input: &[u8], max: usize) -> Vec<LineRead> {
        let mut reader = LineReader::new(input, max);
        let mut out = Vec::new();
        loop {
            let read = reader.next().await;
            let end = read == LineRead::End;
            out.push(read);
            if end {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn lines_are_bounded_and_the_rest_is_skipped() {
        let reads = read_all(b"ab\r\n0123456789abc\nxyz\nlast", 8).await;
        assert_eq!(
            reads,
            vec![
                LineRead::Line(b"ab".to_vec()),
                LineRead::Oversized {
                    head: b"0123456789abc".to_vec()
                },
                LineRead::Line(b"xyz".to_vec()),
                LineRead::Line(b"last".to_vec()),
                LineRead::End,
            ]
        );
        // An oversized last line without a newline is skipped too.
        let reads = read_all(b"0123456789", 4).await;
        assert_eq!(reads.len(), 2);
        assert!(matches!(reads[0], LineRead::Oversized { .. }));
    }

    #[tokio::test]
    async fn the_head_of_an_oversized_line_is_bounded() {
        let mut line = br#"{"jsonrpc":"2.0","id":"big","params":""#.to_vec();
        line.extend(std::iter::repeat_n(b'a', 3 * ID_SCAN_BYTES));
        line.extend_from_slice(b"\"}\n");
        // A small read buffer, so the line arrives in many chunks.
        let mut reader = LineReader {
            input: BufReader::with_capacity(1000, line.as_slice()),
            max: ID_SCAN_BYTES,
            line: Vec::new(),
            skipping: false,
        };
        let LineRead::Oversized { head } = reader.next().await else {
            panic!("expected an oversized line");
        };
        assert!(head.len() <= ID_SCAN_BYTES);
        assert_eq!(scan_id(&head), Some(json!("big")));
        assert_eq!(reader.next().await, LineRead::End);
    }
}
