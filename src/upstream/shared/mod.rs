//! `shared` isolation for stdio servers that keep no per-client state: one child serves many
//! sessions. Request ids and progress tokens are multiplexed (two sessions may both use id 1 or
//! token 1); `resources/subscribe` is reference-counted per URI; `resources/updated` reaches only
//! the sessions subscribed to its URI, other notifications reach every session; progress and
//! server requests reach the session whose request caused them. The first `initialize` goes to
//! the child; later sessions are answered from its result.
//!
//! Here the child and its lifecycle (started when a session joins and none runs, left by each
//! session, ended with the registry) and what it keeps for its sessions; `plan` decides what
//! becomes of a session's message on its way to the child, `route` which sessions get what the
//! child sends.

mod plan;
mod route;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio_util::task::TaskTracker;

use super::stdio::{StdioSpec, StdioUpstream};
use super::{EventSink, Sink, UpstreamError, UpstreamEvent};
use crate::base::backlog::Backlog;
use crate::telemetry::metrics::ServerMetrics;
use crate::wire::jsonrpc::Message;
use crate::wire::methods;
use plan::Plan;

/// The one child of a server in `shared` isolation, and the sessions it serves.
pub struct SharedStdio {
    spec: Arc<StdioSpec>,
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
        spec: Arc<StdioSpec>,
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
        if self.start_child(&mut mux)? {
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

    /// Starts the child when none runs; whether it did.
    fn start_child(self: &Arc<Self>, mux: &mut Mux) -> Result<bool, UpstreamError> {
        if mux.child.is_some() {
            return Ok(false);
        }
        let sink: EventSink = Arc::new(Dispatch {
            mux: Arc::downgrade(self),
            backlog: OnceLock::new(),
        });
        mux.child = Some(StdioUpstream::spawn(&self.spec, sink, &self.tasks)?);
        Ok(true)
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
                .filter(|(_, p)| p.session == session && p.method == methods::SUBSCRIPTIONS_LISTEN)
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
                    Bytes::from(json!({ "jsonrpc": "2.0", "id": id, "method": methods::RESOURCES_UNSUBSCRIBE, "params": { "uri": uri } }).to_string())
                })
                .collect();
            messages.extend(listens.into_iter().map(|global| {
                let params = json!({ "requestId": global, "reason": "the session ended" });
                crate::wire::jsonrpc::notification(methods::CANCELLED, params)
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

    /// The child started again after it exited, unless another session did so first (then
    /// `false`).
    pub fn restart(&self) -> Result<bool, UpstreamError> {
        let mut mux = self.mux.lock();
        if !mux.sessions.contains_key(&self.session) {
            return Err(UpstreamError::Gone);
        }
        self.mux.start_child(&mut mux)
    }

    pub fn release(&self) {
        self.mux.leave(self.session);
    }
}
