//! The transport to a 2026-07-28 server over HTTP, under the bridge (`modern`): one POST per
//! request with the headers mirroring its body (`MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name`, and `Mcp-Param-*` for the tool parameters marked `x-mcp-header`), the answer read as JSON or as SSE and handed on message by message. No session,
//! no GET stream: a cancellation closes the request's connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::Full;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::error::ModernHttpError;
use crate::telemetry::trace_context::TraceContext;
use crate::upstream::body::{self, BodyError};
use crate::upstream::credential::Credential;
use crate::upstream::era_switch::{self, EraSwitch};
use crate::upstream::http_client::{self, EventStream, HttpClient, HttpSpec};
use crate::upstream::{EventSink, UpstreamError, UpstreamEvent};
use crate::wire::era::{Era, MODERN_VERSION};
use crate::wire::jsonrpc::{id_key, Kind, Message};
use crate::wire::methods::{self, CANCELLED, TOOLS_CALL};
use crate::wire::mirrored::{self, ToolMarks};

/// A 2026-07-28 HTTP server, as the bridge sends to it.
#[derive(Debug, Clone)]
pub struct ModernHttp {
    link: Arc<Link>,
}

struct Link {
    spec: HttpSpec,
    client: HttpClient,
    /// The bridge; let go at release (the bridge holds this transport: no cycle outlives it).
    events: std::sync::RwLock<Option<EventSink>>,
    credential: Credential,
    /// The parameters each tool mirrors into `Mcp-Param-*` headers.
    tool_marks: Arc<ToolMarks>,
    /// Requests whose answers are being read, by id: cancelling one closes its connection.
    in_flight: Mutex<HashMap<String, CancellationToken>>,
    released: CancellationToken,
    /// Told when the server refuses 2026-07-28 naming older revisions: new sessions speak those.
    era: Option<Arc<EraSwitch>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ModernHttp({})", self.spec.url)
    }
}

impl ModernHttp {
    pub fn start(
        spec: &HttpSpec,
        client: HttpClient,
        events: EventSink,
        credential: Credential,
        tool_marks: Arc<ToolMarks>,
        era: Option<Arc<EraSwitch>>,
    ) -> ModernHttp {
        ModernHttp {
            link: Arc::new(Link {
                spec: spec.clone(),
                client,
                events: std::sync::RwLock::new(Some(events)),
                credential,
                tool_marks,
                in_flight: Mutex::default(),
                released: CancellationToken::new(),
                era,
            }),
        }
    }

    pub async fn send(&self, message: Message) -> Result<(), UpstreamError> {
        if self.link.released.is_cancelled() {
            return Err(UpstreamError::Gone);
        }
        match (message.kind(), message.method()) {
            (Kind::Request, _) => {
                let id = message.id().map(id_key).unwrap_or_default();
                let stop = self.link.released.child_token();
                self.link.lock().insert(id.clone(), stop.clone());
                let link = self.link.clone();
                tokio::spawn(async move {
                    // Cancelled or released: nothing of the request's is read any more.
                    tokio::select! {
                        () = link.exchange(&message, &stop) => {}
                        () = stop.cancelled() => {}
                    }
                    link.lock().remove(&id);
                });
            }
            (Kind::Notification, Some(CANCELLED)) => {
                let params: Value = message
                    .params()
                    .and_then(|p| serde_json::from_str(p.get()).ok())
                    .unwrap_or_default();
                if let Some(stop) = self.link.lock().remove(&id_key(&params["requestId"])) {
                    stop.cancel();
                }
            }
            // Nothing else goes to a 2026-07-28 server over HTTP.
            _ => {}
        }
        Ok(())
    }

    pub fn release(&self) {
        self.link.released.cancel();
        self.link
            .events
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }
}

impl Link {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn to_bridge(&self, event: UpstreamEvent) {
        // Taken out of the lock first: a delivery may end the session, and release this.
        let events = self
            .events
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(events) = events {
            events.deliver(event);
        }
    }

    /// Waits for room in the bridge's write-behind queue before the next message is read;
    /// `false` once `stop` fires.
    async fn room_to_read(&self, stop: &CancellationToken) -> bool {
        let events = self
            .events
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match events {
            Some(events) => crate::upstream::room_to_read_unless(events.as_ref(), stop).await,
            None => !stop.is_cancelled(),
        }
    }

    fn fail(&self, message: &Message, cause: impl Into<UpstreamError>) {
        if let Some(id) = message.id() {
            self.to_bridge(UpstreamEvent::Failed {
                id: Box::new(id.clone()),
                cause: cause.into(),
            });
        }
    }

    fn deliver(&self, bytes: Bytes) -> bool {
        match Message::parse_from_server(bytes) {
            Ok(message) => {
                self.to_bridge(UpstreamEvent::Message(Box::new(message)));
                true
            }
            Err(_) => false,
        }
    }

    /// POSTs one request and hands on what comes back, until its answer.
    async fn exchange(&self, message: &Message, stop: &CancellationToken) {
        let request = match self.request(message) {
            Ok(request) => request,
            Err(cause) => return self.fail(message, cause),
        };
        let response = tokio::select! {
            response = http_client::send(&self.client, &self.spec, request) => response,
            () = stop.cancelled() => return,
        };
        let response = match response {
            Ok(response) => response,
            Err(cause) => return self.fail(message, cause),
        };
        let status = response.status();
        if http_client::is_event_stream(&response) {
            let mut events = EventStream::new(response.into_body(), self.spec.max_event_bytes);
            let own_id = message.id().map(id_key);
            while self.room_to_read(stop).await {
                let Some(event) = events.next(stop).await else {
                    break;
                };
                if event.data.is_empty() {
                    continue;
                }
                let data = Bytes::from(event.data);
                let answered = Message::parse_from_server(data.clone())
                    .is_ok_and(|m| m.kind() == Kind::Response && m.id().map(id_key) == own_id);
                self.deliver(data);
                if answered {
                    return;
                }
            }
            if let Some(error) = events.take_unreadable() {
                return self.fail(message, BodyError::from(error));
            }
            if !stop.is_cancelled() {
                self.fail(message, ModernHttpError::StreamEnded);
            }
            return;
        }
        let read = body::read(
            response.into_body(),
            self.spec.max_event_bytes,
            self.spec.request_timeout,
        );
        let body = match read.await {
            Ok(body) => body,
            Err(error) => return self.fail(message, error),
        };
        if let (Some(era), Some(Era::Legacy)) = (&self.era, era_switch::named_instead(&body)) {
            // Rolled back to an older revision: this request fails, new sessions speak that.
            era.switch_to(Era::Legacy);
        }
        // A 2026-07-28 server answers refusals with 4xx and a JSON-RPC error: handed on.
        if !self.deliver(body) {
            self.fail(message, ModernHttpError::NotJsonRpc(status));
        }
    }

    fn request(&self, message: &Message) -> Result<Request<Full<Bytes>>, ModernHttpError> {
        let method = message.method().unwrap_or_default();
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.spec.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", MODERN_VERSION)
            .header("mcp-method", method);
        if let Some(target) = methods::mirrored_target(method) {
            let params: Value = message
                .params()
                .and_then(|p| serde_json::from_str(p.get()).ok())
                .unwrap_or_default();
            if let Some(name) = params[target.field()].as_str() {
                request = request.header("mcp-name", mirrored::encode(name));
            }
            let marked = match (method, params["name"].as_str()) {
                (TOOLS_CALL, Some(tool)) => self.tool_marks.of(tool).unwrap_or_default(),
                _ => Vec::new(),
            };
            for (name, value) in mirrored::headers_for(&marked, &params["arguments"]) {
                request = request.header(name, value);
            }
        }
        if let Some(headers) = request.headers_mut() {
            self.spec.put_credentials(headers, &self.credential);
        }
        let context = message
            .params()
            .filter(|_| self.spec.trace_headers)
            .and_then(TraceContext::from_params);
        if let (Some(context), Some(headers)) = (context, request.headers_mut()) {
            context.set_headers(headers);
        }
        request
            .body(Full::new(message.to_bytes()))
            .map_err(|e| ModernHttpError::Unbuildable(Arc::new(e)))
    }
}
