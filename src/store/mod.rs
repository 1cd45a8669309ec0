//! Where session state lives beyond the process that owns the session. `Memory` (the default)
//! keeps nothing outside the process; `Redis` lets replicas behind a plain load balancer share
//! sessions: session records, event logs as Redis Streams, replica heartbeats. The session
//! layer only sees `Mirror` (what an owner writes) and the record and log readers.

pub mod redis;

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::session::log::Logged;
pub use redis::RedisStore;

/// The store a proxy runs with.
#[derive(Clone, Default)]
pub enum Store {
    /// Sessions live and die with this process.
    #[default]
    Memory,
    /// Sessions are shared by every replica using the same Redis and namespace.
    Redis(Arc<RedisStore>),
}

impl Store {
    pub fn redis(&self) -> Option<&Arc<RedisStore>> {
        match self {
            Store::Memory => None,
            Store::Redis(redis) => Some(redis),
        }
    }

    /// Whether new sessions can be created now (the store is reachable).
    pub fn healthy(&self) -> bool {
        self.redis().is_none_or(|redis| redis.healthy())
    }

    /// The writer an owned session mirrors itself through; `None` with the memory store.
    pub fn mirror(&self, server: &str, session_id: &str) -> Option<Mirror> {
        self.redis().map(|redis| redis.mirror(server, session_id))
    }
}

/// What an owner records about its session for the other replicas.
#[derive(Debug, Clone)]
pub enum Op {
    /// The session record, written when the session is created or taken over.
    Create(Box<Record>),
    /// A message appended to the log.
    Append(Logged),
    /// A message coalesced away.
    Remove { seq: u64 },
    /// Everything up to `through` was evicted from the window.
    Evicted { through: u64 },
    /// A record field changed (`init`, `subs`, `version`, `numbered`, `next_stream`).
    Field { name: &'static str, value: String },
    /// A client request is in flight on request stream `stream` (its id, as JSON).
    Inflight { stream: u64, client_id: String },
    /// That request was answered.
    Answered { stream: u64 },
    /// Activity: the TTLs start again.
    Touch,
    /// The session ended: its keys are deleted.
    End,
}

/// A session record as Redis holds it.
#[derive(Debug, Clone, Default)]
pub struct Record {
    pub owner: String,
    /// Hex digest of the principal.
    pub principal: String,
    /// `streams` or `single`.
    pub shape: String,
    pub numbered: bool,
    pub version: Option<String>,
    /// The client's `initialize` params (JSON), for re-initializing a new upstream.
    pub init: Option<String>,
    /// Subscribed URIs (JSON array).
    pub subs: Option<String>,
    pub next_stream: u64,
    pub evicted: u64,
    /// The server the session is bound to (a command line or URL), for operators.
    pub upstream: Option<String>,
}

/// An owned session's way to the store: ops go, in order, to one writer task per store.
#[derive(Clone)]
pub struct Mirror {
    session: Arc<str>,
    server: Arc<str>,
    ops: mpsc::UnboundedSender<(Arc<str>, Arc<str>, Op)>,
}

impl Mirror {
    pub fn send(&self, op: Op) {
        let _ = self
            .ops
            .send((self.server.clone(), self.session.clone(), op));
    }
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("session", &self.session)
            .finish()
    }
}
