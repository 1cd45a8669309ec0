//! One 2026-07-28 request through a legacy session: sent with the request's own `_meta` fields
//! left out, answered as JSON when the answer is ready at once, else on an SSE stream (no event
//! ids: nothing is resumable) carrying only what concerns it: its progress, its log messages
//! at or above the level it asked for, then its result. A client that closes the stream
//! cancels the request. A server request the client did not declare the capability for is
//! refused upstream and the client is told -32021.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::checks::{self, RequestMeta, MISSING_CAPABILITY};
use super::correlation::Correlated;
use super::envelope::{self, CacheHints};
use crate::front::body::Body;
use crate::front::rejection::{failed_request, Rejection};
use crate::front::request::json;
use crate::front::App;
use crate::jsonrpc::{Message, INTERNAL_ERROR};
use crate::session::{Reader, Registry, Session};
use crate::sse;

/// Chunks buffered towards a slow client before the writer waits.
const CHUNKS: usize = 64;
/// How often an idle response stream gets a comment, so proxies in between keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// What the front needs to turn the server's messages into the client's.
struct Translation {
    registry: Arc<Registry>,
    session: Arc<Session>,
    client_id: Value,
    method: String,
    params: Value,
    meta: RequestMeta,
    server_info: Option<Value>,
    hints: CacheHints,
}

/// What one message of the request's stream becomes for the client.
enum Outcome {
    /// Sent on the stream.
    Send(Bytes),
    /// The answer: the request is over (with the status a JSON answer gets).
    Final(Bytes, StatusCode),
    Skip,
}

pub async fn exchange(
    app: &App,
    correlated: Correlated,
    request: Message,
    meta: RequestMeta,
    hints: CacheHints,
) -> Result<http::Response<Body>, Rejection> {
    let client_id = request.id().cloned().unwrap_or(Value::Null);
    let method = request.method().unwrap_or_default().to_owned();
    let params: Value = request
        .params()
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_else(|| json!({}));
    let forwarded = legacy_request(&request, &params)?;
    let session = correlated.session.clone();
    let stream = match app.registry.deliver(&session, forwarded).await {
        Ok(Some(stream)) => stream,
        Ok(None) => unreachable!("a request opens a stream"),
        Err(error) if error.not_taken() => {
            return Err(Rejection::session(&error).with_id(Some(&client_id)))
        }
        Err(error) => return Ok(json(StatusCode::OK, failed_request(&client_id, &error))),
    };
    let translation = Translation {
        registry: app.registry.clone(),
        session: session.clone(),
        client_id,
        method,
        params,
        meta,
        server_info: correlated.initialized.get("serverInfo").cloned(),
        hints,
    };
    let mut reader = session.attach(stream, None);
    let mut pending = Vec::new();
    let first = tokio::time::timeout(app.http.json_wait, reader.next()).await;
    if let Ok(Some(delivery)) = first {
        for event in delivery.events {
            match translation.translate(&event.payload).await {
                Outcome::Final(answer, status) if pending.is_empty() => {
                    session.forget(stream);
                    return Ok(json(status, answer));
                }
                Outcome::Final(answer, _) => {
                    pending.push(answer);
                    return Ok(stream_response(pending, None, translation, correlated));
                }
                Outcome::Send(frame) => pending.push(frame),
                Outcome::Skip => {}
            }
        }
    }
    Ok(stream_response(
        pending,
        Some(reader),
        translation,
        correlated,
    ))
}

/// The request as the legacy server takes it: the per-request fields of `_meta` left out (the
/// upstream session was initialized with them), the rest as sent.
fn legacy_request(request: &Message, params: &Value) -> Result<Message, Rejection> {
    let mut params = params.clone();
    if let Some(Value::Object(meta)) = params.get_mut("_meta") {
        meta.retain(|key, _| !key.starts_with("io.modelcontextprotocol/"));
        if meta.is_empty() {
            params.as_object_mut().map(|p| p.remove("_meta"));
        }
    }
    let body = json!({ "jsonrpc": "2.0", "id": request.id(), "method": request.method(),
                       "params": params });
    Message::parse(Bytes::from(body.to_string()))
        .map_err(|e| Rejection::bad_request(e.to_string()).with_id(request.id()))
}

/// An SSE response: what was already translated, then the rest of the request's stream.
fn stream_response(
    pending: Vec<Bytes>,
    reader: Option<Reader>,
    translation: Translation,
    correlated: Correlated,
) -> http::Response<Body> {
    let (chunks, body) = mpsc::channel(CHUNKS);
    tokio::spawn(async move {
        let _ending = correlated.ending; // a request's own session ends with it
        for frame in pending {
            if chunks.send(sse::event(None, &frame)).await.is_err() {
                return translation.cancel().await;
            }
        }
        if let Some(reader) = reader {
            if !translation.relay(reader, &chunks).await {
                translation.cancel().await;
            }
        }
    });
    let mut response = http::Response::new(Body::Stream(body));
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    headers.insert("x-accel-buffering", http::HeaderValue::from_static("no"));
    response
}

impl Translation {
    /// Sends the request's stream until its answer; false if the client went away first.
    async fn relay(&self, mut reader: Reader, chunks: &mpsc::Sender<Bytes>) -> bool {
        let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
        keep_alive.tick().await;
        loop {
            let delivery = tokio::select! {
                delivery = reader.next() => delivery,
                _ = keep_alive.tick() => {
                    if chunks.send(sse::keep_alive()).await.is_err() {
                        return false;
                    }
                    continue;
                }
                () = chunks.closed() => return false,
            };
            let Some(delivery) = delivery else {
                let lost = json!({ "jsonrpc": "2.0", "id": self.client_id,
                    "error": { "code": INTERNAL_ERROR,
                               "message": "the session serving this request ended before its answer" } });
                let _ = chunks
                    .send(sse::event(None, lost.to_string().as_bytes()))
                    .await;
                return true;
            };
            for event in delivery.events {
                let frame = match self.translate(&event.payload).await {
                    Outcome::Send(frame) => frame,
                    Outcome::Final(answer, _) => {
                        let _ = chunks.send(sse::event(None, &answer)).await;
                        return true;
                    }
                    Outcome::Skip => continue,
                };
                if chunks.send(sse::event(None, &frame)).await.is_err() {
                    return false;
                }
            }
        }
    }

    async fn translate(&self, payload: &Bytes) -> Outcome {
        let Ok(message) = serde_json::from_slice::<Value>(payload) else {
            return Outcome::Skip;
        };
        match (
            message.get("method").and_then(Value::as_str),
            message.get("id"),
        ) {
            (Some(method), Some(id)) => self.server_request(method, id, &message).await,
            (Some("notifications/progress"), None) => Outcome::Send(payload.clone()),
            (Some("notifications/message"), None) => match self.wants_log(&message) {
                true => Outcome::Send(payload.clone()),
                false => Outcome::Skip,
            },
            (Some(_), None) => Outcome::Skip,
            (None, _) => {
                let (answer, status) = envelope::response(
                    message,
                    &self.client_id,
                    &self.method,
                    &self.params,
                    self.server_info.as_ref(),
                    self.hints,
                );
                Outcome::Final(Bytes::from(answer.to_string()), status)
            }
        }
    }

    /// A log message goes to a client that asked for this level or a lower one.
    fn wants_log(&self, message: &Value) -> bool {
        let Some(wanted) = self.meta.log_level.as_deref().and_then(checks::level_rank) else {
            return false;
        };
        message["params"]["level"]
            .as_str()
            .and_then(checks::level_rank)
            .is_some_and(|level| level >= wanted)
    }

    /// A request of the server's, which a 2026-07-28 client is never sent: refused upstream;
    /// one for a capability the request did not declare ends it with -32021.
    async fn server_request(&self, method: &str, id: &Value, message: &Value) -> Outcome {
        if method == "ping" {
            self.answer_upstream(json!({ "jsonrpc": "2.0", "id": id, "result": {} }))
                .await;
            return Outcome::Skip;
        }
        let needed = required_capability(method, &message["params"]);
        let refusal = format!("the client cannot answer {method} on this connection");
        self.answer_upstream(json!({ "jsonrpc": "2.0", "id": id,
            "error": { "code": -32601, "message": refusal } }))
            .await;
        match needed {
            Some(capability) if !self.declares(&capability) => {
                let error = json!({ "jsonrpc": "2.0", "id": self.client_id, "error": {
                    "code": MISSING_CAPABILITY,
                    "message": format!("this request needs the client capability {capability}, which it did not declare"),
                    "data": { "requiredCapabilities": { capability: {} } } } });
                self.cancel().await;
                Outcome::Final(Bytes::from(error.to_string()), StatusCode::BAD_REQUEST)
            }
            _ => Outcome::Skip,
        }
    }

    fn declares(&self, capability: &str) -> bool {
        self.meta.capabilities.contains_key(capability)
    }

    async fn answer_upstream(&self, answer: Value) {
        if let Ok(message) = Message::parse(Bytes::from(answer.to_string())) {
            let _ = self.registry.deliver(&self.session, message).await;
        }
    }

    /// The client no longer wants the answer: the server is told to stop.
    async fn cancel(&self) {
        let cancel = json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": { "requestId": self.client_id, "reason": "the client closed its response stream" } });
        if let Ok(message) = Message::parse(Bytes::from(cancel.to_string())) {
            let _ = self.registry.deliver(&self.session, message).await;
        }
    }
}

/// The client capability a server request needs.
fn required_capability(method: &str, _params: &Value) -> Option<String> {
    match method {
        "elicitation/create" => Some("elicitation".into()),
        "sampling/createMessage" => Some("sampling".into()),
        "roots/list" => Some("roots".into()),
        _ => None,
    }
}
