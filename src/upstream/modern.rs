//! A 2026-07-28 server behind a legacy session: the session speaks the legacy protocol as
//! always, and this bridge speaks the modern one to the server. `initialize` is answered from
//! the server's `server/discover`; every request carries the session's protocol version, client
//! info, capabilities and log level in `_meta`; `ping` and `logging/setLevel` are answered here;
//! `resources/subscribe` and the list notifications become one `subscriptions/listen`, issued
//! again when its filter changes; an `input_required` result becomes the legacy requests to the
//! client, whose answers go back in a retry (several rounds if the server asks again).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;
use tracing::warn;

use super::{EventSink, Sink, Upstream, UpstreamError, UpstreamEvent};
use crate::backlog::Backlog;
use crate::era::{
    capability_object, declares, required_capability, CAPABILITIES_KEY, CLIENT_INFO_KEY,
    HEADER_MISMATCH, INPUT_KEY, LOG_LEVEL_KEY, MISSING_CAPABILITY, MODERN_VERSION, SERVER_INFO_KEY,
    SUBSCRIPTION_ID_KEY, VERSION_KEY,
};
use crate::jsonrpc::{error_response, id_key, result_response, Kind, Message, INTERNAL_ERROR};
use crate::mirrored::{ToolMarks, ANNOTATION};

/// The legacy revisions a client may be answered in; others get the newest.
const LEGACY_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// Ids of the bridge's own messages start with this.
const OWN: &str = "mcp-session-proxy/";
/// The pause before a dropped listen is opened again, doubled per failure up to the longest.
const FIRST_RELISTEN_PAUSE: Duration = Duration::from_millis(250);
const LONGEST_RELISTEN_PAUSE: Duration = Duration::from_secs(30);
/// The longest a subscribe waits for the server to acknowledge its listen.
const LISTEN_ACK_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest the bridge waits for the server's `server/discover`.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// No listen is in force, or the one in force misses what the session now subscribes to.
    fn stale_listen(&self) -> bool {
        self.listen.is_none() || self.listen_covers != self.subscriptions
    }

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
        if let Ok(message) = Message::parse(bytes) {
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
        let server = self.server.get().ok_or(UpstreamError::Gone)?;
        let message =
            Message::parse(Bytes::from(message.to_string())).map_err(|_| UpstreamError::Gone)?;
        Box::pin(server.send(message)).await
    }

    /// The `_meta` every modern request carries for this session.
    fn request_meta(&self) -> Map<String, Value> {
        let state = self.lock();
        let mut meta = Map::new();
        meta.insert(VERSION_KEY.into(), json!(MODERN_VERSION));
        meta.insert(CAPABILITIES_KEY.into(), state.capabilities.clone());
        meta.insert(CLIENT_INFO_KEY.into(), state.client_info.clone());
        if let Some(level) = &state.log_level {
            meta.insert(LOG_LEVEL_KEY.into(), json!(level));
        }
        meta
    }

    fn with_meta(&self, mut params: Value) -> Value {
        if !params.is_object() {
            params = json!({});
        }
        let meta = params["_meta"].as_object().cloned().unwrap_or_default();
        let mut merged = self.request_meta();
        merged.extend(meta);
        params["_meta"] = Value::Object(merged);
        params
    }

    /// A request of the bridge's own, and its answer.
    async fn ask_server(&self, what: &str, method: &str, params: Value) -> Result<Value, String> {
        let (answer, answered) = oneshot::channel();
        let id = {
            let mut state = self.lock();
            let id = state.own_id(what);
            state.waiting.insert(id.clone(), answer);
            id
        };
        let request = json!({ "jsonrpc": "2.0", "id": id, "method": method,
                               "params": self.with_meta(params) });
        self.to_server(request)
            .await
            .map_err(|e| format!("the server could not be reached: {e}"))?;
        match tokio::time::timeout(DISCOVER_TIMEOUT, answered).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(format!("the server could not answer {method}")),
            Err(_) => {
                self.lock().waiting.remove(&id);
                Err(format!(
                    "the server did not answer {method} within {DISCOVER_TIMEOUT:?}"
                ))
            }
        }
    }

    /// `initialize`, answered from `server/discover` in the version the client can take.
    async fn initialize(&self, request: &Message) {
        let id = request.id().cloned().unwrap_or(Value::Null);
        let params: Value = request
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        {
            let mut state = self.lock();
            state.client_info = params["clientInfo"].clone();
            state.capabilities = match &params["capabilities"] {
                Value::Object(c) => Value::Object(c.clone()),
                _ => json!({}),
            };
        }
        let discovered = match self
            .ask_server("discover", "server/discover", json!({}))
            .await
        {
            Ok(answer) => answer,
            Err(why) => return self.fail(&id, format!("initialize: {why}")),
        };
        let Some(result) = discovered.get("result") else {
            let error = discovered["error"].clone();
            return self.fail(&id, format!("the server refused server/discover: {error}"));
        };
        let asked = params["protocolVersion"].as_str().unwrap_or_default();
        let version = match LEGACY_VERSIONS.contains(&asked) {
            true => asked,
            false => LEGACY_VERSIONS[LEGACY_VERSIONS.len() - 1],
        };
        let server_info = result["_meta"][SERVER_INFO_KEY].clone();
        let mut initialized = json!({
            "protocolVersion": version,
            "capabilities": result["capabilities"],
            "serverInfo": match server_info {
                Value::Null => json!({ "name": "unknown", "version": "0" }),
                info => info,
            },
        });
        if let Some(instructions) = result.get("instructions") {
            initialized["instructions"] = instructions.clone();
        }
        self.answer(Some(&id), initialized);
        self.listen().await;
    }

    /// The listen in force ended or failed (the server went away, or ended it): another is
    /// opened after a pause that doubles while they keep failing, until the session ends.
    fn listen_dropped(&self, listen: &str) {
        {
            let mut state = self.lock();
            if state.listen.as_deref() != Some(listen) {
                return;
            }
            state.listen = None;
        }
        self.relisten_later();
    }

    /// Opens the listen again after a pause that doubles while listens keep failing.
    fn relisten_later(&self) {
        let pause = {
            let mut state = self.lock();
            let pause = state.relisten_pause.max(FIRST_RELISTEN_PAUSE);
            state.relisten_pause = (pause * 2).min(LONGEST_RELISTEN_PAUSE);
            pause
        };
        let this = self.this.clone();
        tokio::spawn(async move {
            tokio::time::sleep(pause).await;
            let Some(bridge) = this.upgrade() else {
                return;
            };
            let gone = bridge.released.load(std::sync::atomic::Ordering::Acquire);
            if !gone && bridge.lock().stale_listen() {
                bridge.listen().await;
            }
        });
    }

    /// (Re)issues the listen for the list changes and the subscribed resources.
    /// Returns once the server acknowledged the new listen (or failed to, within a bound), so
    /// a subscribe is answered when its updates can flow; the listen it replaces is cancelled
    /// only then, and its late notifications dropped: no gap, no update twice.
    async fn listen(&self) {
        let _one_at_a_time = self.listening.lock().await;
        let (acknowledged, acknowledgement) = oneshot::channel();
        let (id, uris) = {
            let mut state = self.lock();
            let id = state.own_id("listen");
            state.waiting.insert(id.clone(), acknowledged);
            state.pending_listen = Some((id.clone(), state.subscriptions.clone()));
            (id, state.subscriptions.iter().cloned().collect::<Vec<_>>())
        };
        let notifications = json!({ "toolsListChanged": true, "promptsListChanged": true,
            "resourcesListChanged": true, "resourceSubscriptions": uris });
        let listen = json!({ "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
            "params": self.with_meta(json!({ "notifications": notifications })) });
        let sent = self.to_server(listen).await.is_ok();
        let answer = match sent {
            true => tokio::time::timeout(LISTEN_ACK_TIMEOUT, acknowledgement)
                .await
                .map(|answer| answer.map_err(|_| ())),
            false => Ok(Err(())),
        };
        let held = matches!(&answer, Ok(Ok(ack))
            if ack["method"] == "notifications/subscriptions/acknowledged");
        // A server that has no listens at all is not asked again.
        let unknown = matches!(&answer, Ok(Ok(refusal))
            if refusal["error"]["code"] == crate::jsonrpc::METHOD_NOT_FOUND);
        let (previous, retry) = {
            let mut state = self.lock();
            state.waiting.remove(&id);
            state.pending_listen = None;
            match held {
                // The acknowledgement put it in force (at once, so nothing it sends after is
                // dropped); the one it replaced is cancelled here.
                true => (state.replaced_listen.take(), false),
                false => {
                    if answer.is_err() {
                        warn!("the server did not acknowledge a listen in time");
                    }
                    (None, state.stale_listen())
                }
            }
        };
        if !held {
            // The new listen is not in force: cancelled at the server, tried again later
            // unless the one in force already covers what the session wants.
            self.cancel_listen(&id, "it was not acknowledged").await;
            if retry && !unknown {
                self.relisten_later();
            }
            return;
        }
        if let Some(previous) = previous {
            self.cancel_listen(&previous, "the subscriptions changed")
                .await;
        }
    }

    async fn cancel_listen(&self, id: &str, reason: &str) {
        let cancel = json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": { "requestId": id, "reason": reason } });
        let _ = self.to_server(cancel).await;
    }

    /// A request of the session's, sent on with the session's `_meta`.
    async fn forward(&self, request: &Message) -> Result<(), UpstreamError> {
        let id = request.id().cloned().unwrap_or(Value::Null);
        let method = request.method().unwrap_or_default().to_owned();
        let params: Value = request
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let params = self.with_meta(params);
        let request = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        // Only these may be answered with input_required: the others are not remembered.
        if matches!(
            method.as_str(),
            "tools/call" | "prompts/get" | "resources/read"
        ) {
            self.lock().calls.insert(
                id_key(&id),
                Call {
                    id: id.clone(),
                    method: method.clone(),
                    params: request["params"].clone(),
                    state: None,
                    answers: Map::new(),
                    unanswered: BTreeSet::new(),
                    relisted: false,
                },
            );
        }
        if method == "tools/list" {
            self.lock().listings.insert(id_key(&id));
        }
        self.to_server(request).await
    }

    /// The client's cancellation, for whatever round of the call is at the server.
    async fn cancel(&self, notification: &Message) -> Result<(), UpstreamError> {
        let mut params: Value = notification
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let key = id_key(&params["requestId"]);
        let current = {
            let mut state = self.lock();
            let retry = state
                .retries
                .iter()
                .find(|(_, original)| id_key(original) == key)
                .map(|(retry, _)| retry.clone());
            if let Some(retry) = &retry {
                state.retries.remove(retry);
            }
            let call = state.calls.remove(&key);
            state.questions.retain(|_, (call, _)| *call != key);
            match (retry, call) {
                (Some(retry), _) => Some(json!(retry)),
                // Waiting for the client's answers: nothing is at the server.
                (None, Some(call)) if !call.unanswered.is_empty() => None,
                (None, _) => Some(params["requestId"].clone()),
            }
        };
        let Some(current) = current else {
            return Ok(());
        };
        params["requestId"] = current;
        self.to_server(
            json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": params }),
        )
        .await
    }

    /// The client's answer to a question of the server's; the call is retried once every
    /// question of its round is answered.
    async fn client_answered(&self, response: &Message) -> Result<(), UpstreamError> {
        let answered: Value = serde_json::from_slice(&response.to_bytes()).unwrap_or_default();
        let question = response.id().map(id_key).unwrap_or_default();
        let retry = {
            let mut state = self.lock();
            let Some((call_key, input)) = state.questions.remove(&question) else {
                return Ok(());
            };
            let Some(call) = state.calls.get_mut(&call_key) else {
                return Ok(());
            };
            if let Some(error) = answered.get("error") {
                let id = call.id.clone();
                state.calls.remove(&call_key);
                state.questions.retain(|_, (c, _)| *c != call_key);
                drop(state);
                self.fail(
                    &id,
                    format!("the client could not answer the server's question: {error}"),
                );
                return Ok(());
            }
            call.answers
                .insert(input.clone(), answered["result"].clone());
            call.unanswered.remove(&input);
            match call.unanswered.is_empty() {
                true => Some(call_key),
                false => None,
            }
        };
        match retry {
            Some(call_key) => self.retry(&call_key).await,
            None => Ok(()),
        }
    }

    /// Sends a call again with the answers of its round and the server's `requestState`.
    async fn retry(&self, call_key: &str) -> Result<(), UpstreamError> {
        let request = {
            let mut state = self.lock();
            let retry_id = state.own_id("retry");
            let Some(call) = state.calls.get_mut(call_key) else {
                return Ok(());
            };
            let mut params = call.params.clone();
            params["inputResponses"] = Value::Object(std::mem::take(&mut call.answers));
            if let Some(request_state) = call.state.take() {
                params["requestState"] = request_state;
            }
            let request = json!({ "jsonrpc": "2.0", "id": retry_id, "method": call.method,
                                  "params": params });
            let original = call.id.clone();
            state.retries.retain(|_, o| *o != original);
            state.retries.insert(retry_id, original);
            request
        };
        self.to_server(request).await
    }

    /// A message of the server's, as the session takes it.
    fn server_said(&self, mut message: Box<Message>) {
        let own = message
            .id()
            .and_then(Value::as_str)
            .is_some_and(|id| id.starts_with(OWN));
        let asks = message
            .result()
            .is_some_and(|result| result.get().contains("\"input_required\""));
        if message.kind() == Kind::Response && !own && !asks {
            // The common answer: sent on as the server wrote it, without `resultType`.
            if let Some(key) = message.id().map(id_key) {
                let (listing, call) = {
                    let mut state = self.lock();
                    (state.listings.remove(&key), state.calls.remove(&key))
                };
                if listing {
                    if let Some(usable) = message.result().and_then(|r| self.read_tools(r)) {
                        message.set_result(usable);
                    }
                }
                if let Some(call) = call.filter(|call| refused_headers(call, &message)) {
                    return self.relist_and_retry(call, message);
                }
            }
            if let Some(result) = message
                .result()
                .filter(|r| r.get().contains("\"resultType\""))
            {
                let fields = serde_json::from_str::<BTreeMap<String, &RawValue>>(result.get());
                if let Ok(mut fields) = fields {
                    fields.remove("resultType");
                    if let Ok(result) = serde_json::value::to_raw_value(&fields) {
                        message.set_result(result);
                    }
                }
            }
            return self.session.deliver(UpstreamEvent::Message(message));
        }
        let value: Value = match serde_json::from_slice(&message.to_bytes()) {
            Ok(value) => value,
            Err(_) => return self.session.deliver(UpstreamEvent::Message(message)),
        };
        match message.kind() {
            Kind::Response => self.response(value),
            Kind::Notification => self.notification(value),
            // A modern server sends no requests; the session answers what it can.
            Kind::Request => self.session.deliver(UpstreamEvent::Message(message)),
        }
    }

    fn response(&self, mut response: Value) {
        let key = id_key(&response["id"]);
        if key.starts_with(&format!("\"{OWN}")) {
            let own = response["id"].as_str().unwrap_or_default().to_owned();
            let mut state = self.lock();
            if let Some(retried) = state.retries.remove(&own) {
                drop(state);
                response["id"] = retried;
                return self.call_answered(response);
            }
            if let Some(waiting) = state.waiting.remove(&own) {
                let _ = waiting.send(response);
            }
            let listen_ended = state.listen.as_deref() == Some(own.as_str());
            drop(state);
            if listen_ended {
                self.listen_dropped(&own);
            }
            return;
        }
        self.call_answered(response);
    }

    /// The answer to a call: the end of it, or the server's questions for the client.
    fn call_answered(&self, mut response: Value) {
        let key = id_key(&response["id"]);
        if response["result"]["resultType"] != "input_required" {
            self.lock().calls.remove(&key);
            if let Some(result) = response["result"].as_object_mut() {
                result.remove("resultType");
            }
            return self.to_session(response);
        }
        let result = &response["result"];
        let requests: BTreeMap<String, Value> = result["inputRequests"]
            .as_object()
            .map(|r| r.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let mut questions = Vec::new();
        let retry_now = {
            let mut state = self.lock();
            let undeclared = requests.values().find_map(|request| {
                let method = request["method"].as_str().unwrap_or_default();
                let capability = required_capability(method, &request["params"])?;
                let declared = state
                    .capabilities
                    .as_object()
                    .is_some_and(|c| declares(c, &capability));
                (!declared).then_some(capability)
            });
            if let Some(capability) = undeclared {
                state.calls.remove(&key);
                drop(state);
                let message = format!(
                    "the server needs the client capability {capability}, which this client did not declare"
                );
                let data = json!({ "requiredCapabilities": capability_object(&capability) });
                return self.deliver_bytes(error_response(
                    &response["id"],
                    MISSING_CAPABILITY,
                    &message,
                    Some(data),
                ));
            }
            let mut asked = Vec::new();
            for input in requests.keys() {
                let question = state.own_id("input");
                asked.push((question.clone(), input.clone()));
            }
            let Some(call) = state.calls.get_mut(&key) else {
                return;
            };
            call.state = result.get("requestState").cloned();
            call.unanswered = requests.keys().cloned().collect();
            for (question, input) in asked {
                // The server's key goes with the question (a 2026-07-28 client of this proxy
                // gets it back as the same key).
                let mut params = requests[&input]["params"].clone();
                if params.is_object() {
                    params["_meta"][INPUT_KEY] = json!(input);
                }
                questions.push(json!({ "jsonrpc": "2.0", "id": question,
                    "method": requests[&input]["method"], "params": params }));
                state
                    .questions
                    .insert(id_key(&json!(question)), (key.clone(), input));
            }
            requests.is_empty()
        };
        if retry_now {
            if let Some(this) = self.this.upgrade() {
                tokio::spawn(async move {
                    let _ = this.retry(&key).await;
                });
            }
            return;
        }
        for question in questions {
            self.to_session(question);
        }
    }

    /// Records the marks of a `tools/list` result; the result without the tools whose marks
    /// are invalid (a client over 2026-07-28 HTTP leaves them out), if there were any.
    fn read_tools(&self, result: &RawValue) -> Option<Box<RawValue>> {
        if !result.get().contains(ANNOTATION) {
            // Nothing mirrored: every tool is usable as it is.
            let listed: Value = serde_json::from_str(result.get()).ok()?;
            self.tool_marks.record(&listed);
            return None;
        }
        let mut listed: Value = serde_json::from_str(result.get()).ok()?;
        let invalid = self.tool_marks.record(&listed);
        if invalid.is_empty() {
            return None;
        }
        for (tool, why) in &invalid {
            warn!(tool, %why, "a tool of the server is left out of tools/list: its x-mcp-header marks are invalid");
        }
        if let Some(tools) = listed["tools"].as_array_mut() {
            tools.retain(|tool| !invalid.iter().any(|(name, _)| tool["name"] == **name));
        }
        serde_json::value::to_raw_value(&listed).ok()
    }

    /// The server refused a call's headers: its tools are listed again (their marks may have
    /// changed) and the call sent once more; if listing fails, the refusal goes to the client.
    fn relist_and_retry(&self, mut call: Call, refusal: Box<Message>) {
        let Some(this) = self.this.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            let listed = this.ask_server("tools", "tools/list", json!({})).await;
            let Ok(listed) = listed else {
                return this.session.deliver(UpstreamEvent::Message(refusal));
            };
            this.tool_marks.record(&listed["result"]);
            call.relisted = true;
            let request = json!({ "jsonrpc": "2.0", "id": call.id, "method": call.method,
                                   "params": call.params });
            this.lock().calls.insert(id_key(&call.id), call);
            if this.to_server(request).await.is_err() {
                this.session.deliver(UpstreamEvent::Message(refusal));
            }
        });
    }

    fn notification(&self, mut notification: Value) {
        let listen = notification["params"]["_meta"][SUBSCRIPTION_ID_KEY].clone();
        if notification["method"] == "notifications/subscriptions/acknowledged" {
            // A listen that holds: the next drop is retried soon again.
            let mut state = self.lock();
            state.relisten_pause = Duration::ZERO;
            let pending = state.pending_listen.take();
            let acknowledged = listen.as_str().map(str::to_owned);
            match pending {
                Some((id, covers)) if acknowledged.as_ref().is_none_or(|a| *a == id) => {
                    // In force from here: its next notification is already the session's.
                    let previous = state.listen.replace(id.clone());
                    state.replaced_listen = previous;
                    state.listen_covers = covers;
                    if let Some(waiting) = state.waiting.remove(&id) {
                        let _ = waiting.send(notification);
                    }
                }
                other => state.pending_listen = other,
            }
            return;
        }
        if let Some(listen) = listen.as_str().filter(|id| id.starts_with(OWN)) {
            if self.lock().listen.as_deref() != Some(listen) {
                // A replaced listen's last words: the one in force says the same.
                return;
            }
        }
        if let Some(Value::Object(meta)) = notification["params"].get_mut("_meta") {
            meta.remove(SUBSCRIPTION_ID_KEY);
            if meta.is_empty() {
                notification["params"]
                    .as_object_mut()
                    .map(|p| p.remove("_meta"));
            }
        }
        self.to_session(notification);
    }
}

/// A `tools/call` the server refused for its headers (-32020), not yet sent again.
fn refused_headers(call: &Call, answer: &Message) -> bool {
    call.method == "tools/call"
        && !call.relisted
        && answer
            .error()
            .and_then(|e| serde_json::from_str::<Value>(e.get()).ok())
            .is_some_and(|e| e["code"] == HEADER_MISMATCH)
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
            (Kind::Request, Some("initialize")) => {
                bridge.initialize(&message).await;
                Ok(())
            }
            (Kind::Request, Some("ping")) => {
                bridge.answer(message.id(), json!({}));
                Ok(())
            }
            (Kind::Request, Some("logging/setLevel")) => {
                let level = message
                    .params()
                    .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                    .and_then(|p| p["level"].as_str().map(str::to_owned));
                bridge.lock().log_level = level;
                bridge.answer(message.id(), json!({}));
                Ok(())
            }
            (Kind::Request, Some(method @ ("resources/subscribe" | "resources/unsubscribe"))) => {
                let uri = message
                    .params()
                    .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                    .and_then(|p| p["uri"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                let changed = {
                    let mut state = bridge.lock();
                    match method {
                        "resources/subscribe" => state.subscriptions.insert(uri),
                        _ => state.subscriptions.remove(&uri),
                    }
                };
                // Answered once the server listens for it: an update right after is not lost.
                if changed {
                    bridge.listen().await;
                }
                bridge.answer(message.id(), json!({}));
                Ok(())
            }
            (Kind::Request, _) => bridge.forward(&message).await,
            (Kind::Notification, Some("notifications/cancelled")) => bridge.cancel(&message).await,
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
