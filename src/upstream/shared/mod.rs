//! `shared` isolation for stdio servers that keep no per-client state: one child serves many
//! sessions. Request ids and progress tokens are multiplexed (two sessions may both use id 1 or
//! token 1); `resources/subscribe` is reference-counted per URI; `resources/updated` reaches only
//! the sessions subscribed to its URI, other notifications reach every session; progress and
//! server requests reach the session whose request caused them. The first `initialize` goes to
//! the child; later sessions are answered from its result.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use bytes::Bytes;
use serde_json::value::{to_raw_value, RawValue};
use serde_json::{json, Value};
use tokio_util::task::TaskTracker;
use tracing::debug;

use super::stdio::{StdioSpec, StdioUpstream};
use super::{EventSink, Sink, UpstreamError, UpstreamEvent};
use crate::backlog::Backlog;
use crate::era::SUBSCRIPTION_ID_KEY;
use crate::jsonrpc::{id_key, Kind, Message};
use crate::metrics::ServerMetrics;

/// The one child of a server in `shared` isolation, and the sessions it serves.
pub struct SharedStdio {
    spec: StdioSpec,
    tasks: TaskTracker,
    metrics: Arc<ServerMetrics>,
    state: Mutex<Mux>,
}

#[derive(Default)]
struct Mux {
    child: Option<StdioUpstream>,
    sessions: HashMap<u64, EventSink>,
    next_session: u64,
    next_id: u64,
    /// Requests in flight at the child, by the child-facing id.
    pending: HashMap<u64, Pending>,
    /// Child-facing progress token → (session, the session's token).
    tokens: HashMap<String, (u64, Value)>,
    subscribers: HashMap<String, BTreeSet<u64>>,
    initialize_result: Option<Box<RawValue>>,
    initialized: bool,
}

struct Pending {
    session: u64,
    id: Value,
    method: String,
    token: Option<String>,
}

/// The child's events, routed to the sessions they belong to (after the mux's lock is let go).
struct Dispatch {
    mux: Weak<SharedStdio>,
    /// The write-behind queue of its sessions, once one of them named it.
    backlog: OnceLock<Arc<Backlog>>,
}

impl Sink for Dispatch {
    fn deliver(&self, event: UpstreamEvent) {
        if let Some(mux) = self.mux.upgrade() {
            for (session, event) in mux.route(event) {
                session.deliver(event);
            }
        }
    }

    /// Any session's: they all write behind through their process's one queue.
    fn backlog(&self) -> Option<Arc<Backlog>> {
        if let Some(backlog) = self.backlog.get() {
            return Some(backlog.clone());
        }
        let mux = self.mux.upgrade()?;
        let session = mux.lock().sessions.values().next().cloned()?;
        // Asked out of the lock: letting go of the session may end it.
        let found = session.backlog()?;
        Some(self.backlog.get_or_init(|| found).clone())
    }
}

/// One session's view of the shared child.
#[derive(Clone)]
pub struct SharedHandle {
    mux: Arc<SharedStdio>,
    session: u64,
}

impl std::fmt::Debug for SharedHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedHandle")
            .field("session", &self.session)
            .finish()
    }
}

impl SharedStdio {
    pub fn new(
        spec: StdioSpec,
        tasks: TaskTracker,
        metrics: Arc<ServerMetrics>,
    ) -> Arc<SharedStdio> {
        Arc::new(SharedStdio {
            spec,
            tasks,
            metrics,
            state: Mutex::new(Mux::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Mux> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Joins a new session, starting the child if none is running.
    pub fn attach(self: &Arc<Self>, events: EventSink) -> Result<SharedHandle, UpstreamError> {
        let mut mux = self.lock();
        if mux.child.is_none() {
            let sink: EventSink = Arc::new(Dispatch {
                mux: Arc::downgrade(self),
                backlog: OnceLock::new(),
            });
            mux.child = Some(StdioUpstream::spawn(&self.spec, sink, &self.tasks)?);
            self.metrics.upstream_spawns_total.inc();
        }
        mux.next_session += 1;
        let session = mux.next_session;
        mux.sessions.insert(session, events);
        Ok(SharedHandle {
            mux: self.clone(),
            session,
        })
    }

    /// Where each child event goes.
    fn route(&self, event: UpstreamEvent) -> Vec<(EventSink, UpstreamEvent)> {
        let mut mux = self.lock();
        let message = match event {
            UpstreamEvent::Message(message) => *message,
            UpstreamEvent::Oversized { id, max } => {
                let pending = id.and_then(|id| id.as_u64()).and_then(|g| mux.finish(g));
                return match pending {
                    Some(p) => mux.to(
                        p.session,
                        UpstreamEvent::Oversized {
                            id: Some(Box::new(p.id)),
                            max,
                        },
                    ),
                    None => Vec::new(),
                };
            }
            // Reported by HTTP upstreams; a child on stdio never does.
            UpstreamEvent::Failed { .. }
            | UpstreamEvent::AnswersLost(_)
            | UpstreamEvent::SessionLost => return Vec::new(),
            UpstreamEvent::Exited(cause) => {
                let everyone: Vec<_> = mux.sessions.values().cloned().collect();
                *mux = Mux {
                    sessions: std::mem::take(&mut mux.sessions),
                    next_session: mux.next_session,
                    ..Mux::default()
                };
                return everyone
                    .into_iter()
                    .map(|s| (s, UpstreamEvent::Exited(cause.clone())))
                    .collect();
            }
        };
        match message.kind() {
            Kind::Notification => mux.route_notification(message),
            _ => mux.route_exchange(message),
        }
    }

    fn leave(&self, session: u64) {
        let (child, unsubscribe) = {
            let mut mux = self.lock();
            mux.sessions.remove(&session);
            // A table sized for a crowd that has left would hold its memory.
            if mux.sessions.len() < mux.sessions.capacity() / 4 {
                mux.sessions.shrink_to_fit();
            }
            // Its 2026-07-28 listens would stay open at the child for ever: cancelled.
            let listens: Vec<u64> = mux
                .pending
                .iter()
                .filter(|(_, p)| p.session == session && p.method == "subscriptions/listen")
                .map(|(global, _)| *global)
                .collect();
            mux.pending.retain(|_, p| p.session != session);
            mux.tokens.retain(|_, (s, _)| *s != session);
            let mut emptied = Vec::new();
            mux.subscribers.retain(|uri, sessions| {
                let was_subscribed = sessions.remove(&session);
                if was_subscribed && sessions.is_empty() {
                    emptied.push(uri.clone());
                }
                !sessions.is_empty()
            });
            let mut messages: Vec<Bytes> = emptied
                .into_iter()
                .map(|uri| {
                    mux.next_id += 1;
                    let id = format!("proxy-unsubscribe-{}", mux.next_id);
                    Bytes::from(json!({ "jsonrpc": "2.0", "id": id, "method": "resources/unsubscribe", "params": { "uri": uri } }).to_string())
                })
                .collect();
            messages.extend(listens.into_iter().map(|global| {
                let params = json!({ "requestId": global, "reason": "the session ended" });
                crate::jsonrpc::notification("notifications/cancelled", params)
            }));
            (mux.child.clone(), messages)
        };
        if let Some(child) = child {
            tokio::spawn(async move {
                for message in unsubscribe {
                    let _ = child.send(message).await;
                }
            });
        }
    }

    /// Ends the child (registry shutdown).
    pub fn release_all(&self) {
        if let Some(child) = self.lock().child.take() {
            child.release();
        }
    }
}

impl Mux {
    fn finish(&mut self, id: u64) -> Option<Pending> {
        let pending = self.pending.remove(&id)?;
        if let Some(token) = &pending.token {
            self.tokens.remove(token);
        }
        Some(pending)
    }

    /// The session of the most recent request in flight (SEP-2260's "the request that caused it").
    fn causing_session(&self) -> Option<u64> {
        // A listen lasts as long as its session: it causes nothing.
        self.pending
            .iter()
            .filter(|(_, p)| p.method != "subscriptions/listen")
            .max_by_key(|(id, _)| **id)
            .map(|(_, p)| p.session)
    }

    fn to(&self, session: u64, event: UpstreamEvent) -> Vec<(EventSink, UpstreamEvent)> {
        self.sessions
            .get(&session)
            .map(|s| vec![(s.clone(), event)])
            .unwrap_or_default()
    }

    fn to_all(&self, message: &Message) -> Vec<(EventSink, UpstreamEvent)> {
        self.sessions
            .values()
            .map(|s| (s.clone(), UpstreamEvent::Message(Box::new(message.clone()))))
            .collect()
    }

    /// A server request nobody caused still needs exactly one answer: the oldest session gets it.
    fn to_any(&self, message: Message) -> Vec<(EventSink, UpstreamEvent)> {
        let oldest = self.sessions.keys().min().copied();
        oldest
            .map(|s| self.to(s, UpstreamEvent::Message(Box::new(message))))
            .unwrap_or_default()
    }
}

/// What to do with one message of a session.
enum Plan {
    /// Send these bytes to the child.
    Forward(Bytes),
    /// Answer the session here.
    Answer(Message),
    Drop,
}

impl SharedHandle {
    pub async fn send(&self, mut message: Message) -> Result<(), UpstreamError> {
        let wire = message.to_bytes();
        let (plan, child, session_events) = {
            let mut mux = self.mux.lock();
            let plan = self.plan(&mut mux, &mut message, wire);
            (
                plan,
                mux.child.clone(),
                mux.sessions.get(&self.session).cloned(),
            )
        };
        match plan {
            Plan::Forward(bytes) => child.ok_or(UpstreamError::Gone)?.send(bytes).await,
            Plan::Answer(answer) => {
                if let Some(events) = session_events {
                    events.deliver(UpstreamEvent::Message(Box::new(answer)));
                }
                Ok(())
            }
            Plan::Drop => Ok(()),
        }
    }

    fn plan(&self, mux: &mut Mux, message: &mut Message, wire: Bytes) -> Plan {
        let session = self.session;
        let uri = || {
            message
                .params_as::<Value>()
                .and_then(|p| p["uri"].as_str().map(str::to_owned))
        };
        match (message.kind(), message.method().unwrap_or_default()) {
            (Kind::Request, "initialize") if mux.initialize_result.is_some() => {
                Plan::Answer(answer(message, mux.initialize_result.clone()))
            }
            (Kind::Request, "resources/subscribe") => {
                let Some(uri) = uri() else {
                    return self.forward(mux, message);
                };
                let subscribers = mux.subscribers.entry(uri).or_default();
                let first = subscribers.is_empty();
                subscribers.insert(session);
                if first {
                    self.forward(mux, message)
                } else {
                    Plan::Answer(answer(message, to_raw_value(&json!({})).ok()))
                }
            }
            (Kind::Request, "resources/unsubscribe") => {
                let Some(uri) = uri() else {
                    return self.forward(mux, message);
                };
                let last = match mux.subscribers.get_mut(&uri) {
                    Some(subscribers) => subscribers.remove(&session) && subscribers.is_empty(),
                    None => false,
                };
                if last {
                    mux.subscribers.remove(&uri);
                    self.forward(mux, message)
                } else {
                    Plan::Answer(answer(message, to_raw_value(&json!({})).ok()))
                }
            }
            (Kind::Request, _) => self.forward(mux, message),
            (Kind::Notification, "notifications/initialized") => {
                if std::mem::replace(&mut mux.initialized, true) {
                    Plan::Drop
                } else {
                    Plan::Forward(wire)
                }
            }
            (Kind::Notification, "notifications/cancelled") => {
                let Some(mut params) = message.params_as::<Value>() else {
                    return Plan::Drop;
                };
                let wanted = params["requestId"].clone();
                let found = mux
                    .pending
                    .iter()
                    .find(|(_, p)| p.session == session && p.id == wanted)
                    .map(|(g, _)| *g);
                let Some(global) = found else {
                    return Plan::Drop;
                };
                mux.finish(global);
                params["requestId"] = Value::from(global);
                match to_raw_value(&params) {
                    Ok(raw) => {
                        message.set_params(raw);
                        Plan::Forward(message.to_bytes())
                    }
                    Err(_) => Plan::Drop,
                }
            }
            _ => Plan::Forward(wire),
        }
    }

    /// Readdresses a request to a child-wide id (and progress token) and records it.
    fn forward(&self, mux: &mut Mux, message: &mut Message) -> Plan {
        mux.next_id += 1;
        let global = mux.next_id;
        let mut token = None;
        if let Some(mut params) = message.params_as::<Value>() {
            let original = params["_meta"]["progressToken"].clone();
            if !original.is_null() {
                let shared = format!("s{}-{}", self.session, id_key(&original));
                params["_meta"]["progressToken"] = Value::from(shared.clone());
                if let Ok(raw) = to_raw_value(&params) {
                    message.set_params(raw);
                }
                let key = id_key(&Value::from(shared));
                mux.tokens.insert(key.clone(), (self.session, original));
                token = Some(key);
            }
        }
        mux.pending.insert(
            global,
            Pending {
                session: self.session,
                id: message.id().cloned().unwrap_or(Value::Null),
                method: message.method().unwrap_or_default().to_owned(),
                token,
            },
        );
        message.set_id(Value::from(global));
        debug!(
            session = self.session,
            global, "forwarded to the shared child"
        );
        Plan::Forward(message.to_bytes())
    }

    pub fn release(&self) {
        self.mux.leave(self.session);
    }
}

impl Mux {
    /// A response (back to the session whose request it answers, under that session's id) or
    /// a server request (to the session whose request caused it).
    fn route_exchange(&mut self, mut message: Message) -> Vec<(EventSink, UpstreamEvent)> {
        match message.kind() {
            Kind::Response => {
                let Some(pending) = message
                    .id()
                    .and_then(Value::as_u64)
                    .and_then(|g| self.finish(g))
                else {
                    return Vec::new(); // the answer to one of the mux's own requests
                };
                if pending.method == "initialize" && !message.is_error() {
                    self.initialize_result = message.result().map(|r| r.to_owned());
                }
                message.set_id(pending.id);
                self.to(pending.session, UpstreamEvent::Message(Box::new(message)))
            }
            Kind::Request => match self.causing_session() {
                Some(session) => self.to(session, UpstreamEvent::Message(Box::new(message))),
                None => self.to_any(message),
            },
            Kind::Notification => Vec::new(),
        }
    }

    /// The child-facing id of the listen in flight a notification names, if it names one.
    fn listen_of(&self, message: &Message) -> Option<u64> {
        let params = message.params()?;
        if !params.get().contains(SUBSCRIPTION_ID_KEY) {
            return None;
        }
        let params: Value = serde_json::from_str(params.get()).ok()?;
        let listen = params["_meta"][SUBSCRIPTION_ID_KEY].as_u64()?;
        self.pending.contains_key(&listen).then_some(listen)
    }

    /// A notification: progress to its token's session, a resource update to its subscribers,
    /// a log message or cancellation to the session that caused it, the rest to everyone.
    fn route_notification(&mut self, mut message: Message) -> Vec<(EventSink, UpstreamEvent)> {
        if let Some(listen) = self.listen_of(&message) {
            // A 2026-07-28 listen's notification: to the session whose listen it is, under the
            // id that session gave it.
            let pending = &self.pending[&listen];
            let (session, id) = (pending.session, pending.id.clone());
            if let Some(mut params) = message.params_as::<Value>() {
                params["_meta"][SUBSCRIPTION_ID_KEY] = id;
                if let Ok(raw) = to_raw_value(&params) {
                    message.set_params(raw);
                }
            }
            return self.to(session, UpstreamEvent::Message(Box::new(message)));
        }
        match message.method().unwrap_or_default() {
            "notifications/progress" => {
                let token = message
                    .params_as::<Value>()
                    .map(|p| id_key(&p["progressToken"]));
                let Some((session, original)) = token.and_then(|t| self.tokens.get(&t).cloned())
                else {
                    return Vec::new();
                };
                if let Some(mut params) = message.params_as::<Value>() {
                    params["progressToken"] = original;
                    if let Ok(raw) = to_raw_value(&params) {
                        message.set_params(raw);
                    }
                }
                self.to(session, UpstreamEvent::Message(Box::new(message)))
            }
            "notifications/resources/updated" => {
                let uri = message
                    .params_as::<Value>()
                    .and_then(|p| p["uri"].as_str().map(str::to_owned));
                let subscribed: Vec<u64> = uri
                    .and_then(|uri| self.subscribers.get(&uri))
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default();
                subscribed
                    .into_iter()
                    .flat_map(|s| self.to(s, UpstreamEvent::Message(Box::new(message.clone()))))
                    .collect()
            }
            "notifications/message" | "notifications/cancelled" => match self.causing_session() {
                Some(session) => self.to(session, UpstreamEvent::Message(Box::new(message))),
                None => self.to_all(&message),
            },
            _ => self.to_all(&message),
        }
    }
}

/// A response to `request` with `result`, answered by the proxy.
fn answer(request: &Message, result: Option<Box<RawValue>>) -> Message {
    let id = request.id().cloned().unwrap_or(Value::Null);
    let result: Value = result
        .and_then(|r| serde_json::from_str(r.get()).ok())
        .unwrap_or_else(|| json!({}));
    Message::response(&id, result)
}
