//! A 2026-07-28 server behind a legacy session: the session speaks the legacy protocol as
//! always, and this bridge speaks the modern one to the server. `initialize` is answered from
//! the server's `server/discover`; every request carries the session's protocol version, client
//! info, capabilities and log level in `_meta`; `ping` and `logging/setLevel` are answered here;
//! `resources/subscribe` and the list notifications become one `subscriptions/listen`, issued
//! again when its filter changes; an `input_required` result becomes the legacy requests to the
//! client, whose answers go back in a retry (several rounds if the server asks again).
//!
//! Here the bridge and what it keeps; `handshake` (`initialize` from `server/discover`, the
//! `_meta` of each request), `standing_listen` (subscriptions and the listen that carries them),
//! `calls` (the session's requests and their answers, `input_required` rounds), `http`
//! (the transport to a 2026-07-28 HTTP server), and `error` (why they fail).

mod calls;
pub mod error;
mod handshake;
pub mod http;
mod standing_listen;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::{EventSink, Sink, Upstream, UpstreamError, UpstreamEvent};
use crate::base::backlog::Backlog;
use crate::wire::jsonrpc::{
    error_response, id_key, notification, result_response, Kind, Message, INTERNAL_ERROR,
};
use crate::wire::methods::{
    CANCELLED, INITIALIZE, LOGGING_SET_LEVEL, PING, RESOURCES_SUBSCRIBE, RESOURCES_UNSUBSCRIBE,
};
use crate::wire::mirrored::ToolMarks;

/// Ids of the bridge's own messages start with this.
const OWN: &str = "mcp-session-proxy/";

/// A session's upstream when its server speaks 2026-07-28: the transport under it carries the
/// modern messages the bridge makes.
#[derive(Debug, Clone)]
pub struct ModernUpstream {
    bridge: Arc<Bridge>,
}

/// Between the session (legacy) and the server (modern).
pub struct Bridge {
    this: std::sync::Weak<Bridge>,
    /// The session's way in.
    session: EventSink,
    /// The transport to the server, set once it is built.
    server: OnceLock<Box<Upstream>>,
    /// The parameters the server's tools mirror into headers (shared by the server's sessions).
    tool_marks: Arc<ToolMarks>,
    /// The session let its upstream go: no listen is opened again.
    released: std::sync::atomic::AtomicBool,
    /// One listen replaces another at a time.
    listening: tokio::sync::Mutex<()>,
    state: Mutex<BridgeState>,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bridge")
    }
}

#[derive(Default)]
struct BridgeState {
    client_info: Value,
    capabilities: Value,
    log_level: Option<String>,
    subscriptions: BTreeSet<String>,
    /// The listen in force, by its id.
    listen: Option<String>,
    /// Requests in flight by the id the session gave them.
    calls: HashMap<String, Call>,
    /// A retry's id → the id the session gave the call.
    retries: HashMap<String, Value>,
    /// A question put to the client (its id) → the call and the input key it answers.
    questions: HashMap<String, (String, String)>,
    /// The bridge's own requests waiting for their answers.
    waiting: HashMap<String, oneshot::Sender<Value>>,
    /// The session's `tools/list` requests in flight (their answers are read for marks).
    listings: HashSet<String>,
    /// How long to wait before the listen is opened again after its next drop.
    relisten_pause: Duration,
    /// A listen sent and not acknowledged yet, and the subscriptions it covers.
    pending_listen: Option<(String, BTreeSet<String>)>,
    /// The subscriptions the listen in force covers.
    listen_covers: BTreeSet<String>,
    /// The listen the one in force replaced, to be cancelled.
    replaced_listen: Option<String>,
    next: u64,
}

/// A request in flight for the session.
struct Call {
    id: Value,
    method: String,
    params: Value,
    /// The server's `requestState` of the round in progress, and the answers gathered for it.
    state: Option<Value>,
    answers: Map<String, Value>,
    unanswered: BTreeSet<String>,
    /// Sent again once after the server refused its headers and the tools were listed anew.
    relisted: bool,
}

impl BridgeState {
    fn own_id(&mut self, what: &str) -> String {
        self.next += 1;
        format!("{OWN}{what}-{}", self.next)
    }
}

impl Bridge {
    pub fn new(session: EventSink, tool_marks: Arc<ToolMarks>) -> Arc<Bridge> {
        Arc::new_cyclic(|this| Bridge {
            this: this.clone(),
            session,
            tool_marks,
            released: Default::default(),
            listening: Default::default(),
            server: OnceLock::new(),
            state: Mutex::default(),
        })
    }

    /// The transport to the server (built with this bridge as its sink).
    pub fn attach(self: &Arc<Self>, server: Upstream) -> ModernUpstream {
        let _ = self.server.set(Box::new(server));
        ModernUpstream {
            bridge: self.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BridgeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn to_session(&self, message: Value) {
        self.deliver_bytes(Bytes::from(message.to_string()));
    }

    fn deliver_bytes(&self, bytes: Bytes) {
        if let Ok(message) = Message::parse_from_server(bytes) {
            self.session
                .deliver(UpstreamEvent::Message(Box::new(message)));
        }
    }

    fn answer(&self, id: Option<&Value>, result: Value) {
        self.deliver_bytes(result_response(id.unwrap_or(&Value::Null), result));
    }

    fn fail(&self, id: &Value, message: String) {
        self.deliver_bytes(error_response(id, INTERNAL_ERROR, &message, None));
    }

    async fn to_server(&self, message: Value) -> Result<(), UpstreamError> {
        self.bytes_to_server(Bytes::from(message.to_string())).await
    }

    /// A notification of the bridge's own to the server.
    async fn notify_server(&self, method: &str, params: Value) -> Result<(), UpstreamError> {
        self.bytes_to_server(notification(method, params)).await
    }

    async fn bytes_to_server(&self, bytes: Bytes) -> Result<(), UpstreamError> {
        let server = self.server.get().ok_or(UpstreamError::Gone)?;
        let message = Message::parse_from_server(bytes).map_err(|_| UpstreamError::Gone)?;
        Box::pin(server.send(message)).await
    }
}

impl Sink for Bridge {
    fn deliver(&self, event: UpstreamEvent) {
        match event {
            UpstreamEvent::Message(message) => self.server_said(message),
            UpstreamEvent::Failed { id, cause } => {
                let own = id
                    .as_str()
                    .filter(|id| id.starts_with(OWN))
                    .map(str::to_owned);
                let id = match own {
                    None => id,
                    Some(own) => {
                        let mut state = self.lock();
                        match state.retries.remove(&own) {
                            Some(original) => Box::new(original),
                            None => {
                                // The bridge's own request: its waiter hears of it; a listen
                                // that failed is opened again.
                                state.waiting.remove(&own);
                                let listen_failed = state.listen.as_deref() == Some(own.as_str());
                                drop(state);
                                if listen_failed {
                                    self.listen_dropped(&own);
                                }
                                return;
                            }
                        }
                    }
                };
                {
                    let mut state = self.lock();
                    state.calls.remove(&id_key(&id));
                    state.listings.remove(&id_key(&id));
                }
                self.session.deliver(UpstreamEvent::Failed { id, cause });
            }
            other => self.session.deliver(other),
        }
    }

    fn backlog(&self) -> Option<Arc<Backlog>> {
        self.session.backlog()
    }
}

impl ModernUpstream {
    /// One message of the session's.
    pub async fn send(&self, message: Message) -> Result<(), UpstreamError> {
        let bridge = &self.bridge;
        match (message.kind(), message.method()) {
            (Kind::Request, Some(INITIALIZE)) => {
                bridge.initialize(&message).await;
                Ok(())
            }
            (Kind::Request, Some(PING)) => {
                bridge.answer(message.id(), json!({}));
                Ok(())
            }
            (Kind::Request, Some(LOGGING_SET_LEVEL)) => {
                let level = message
                    .params()
                    .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                    .and_then(|p| p["level"].as_str().map(str::to_owned));
                bridge.lock().log_level = level;
                bridge.answer(message.id(), json!({}));
                Ok(())
            }
            (Kind::Request, Some(method @ (RESOURCES_SUBSCRIBE | RESOURCES_UNSUBSCRIBE))) => {
                bridge
                    .subscribe(&message, method == RESOURCES_SUBSCRIBE)
                    .await;
                Ok(())
            }
            (Kind::Request, _) => bridge.forward(&message).await,
            (Kind::Notification, Some(CANCELLED)) => bridge.cancel(&message).await,
            // `initialized`, `roots/list_changed`: nothing of the kind in 2026-07-28.
            (Kind::Notification, _) => Ok(()),
            (Kind::Response, _) => bridge.client_answered(&message).await,
        }
    }

    pub fn release(&self) {
        self.bridge
            .released
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(server) = self.bridge.server.get() {
            server.release();
        }
    }
}
