//! Where session state lives beyond the process that owns the session. `Memory` (the default)
//! keeps nothing outside the process; `Redis` lets replicas behind a plain load balancer share
//! sessions: session records, event logs as Redis Streams, replica heartbeats. The session
//! layer only sees `Mirror` (what an owner writes) and the record and log readers.

mod fence;
pub mod redis;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

pub use crate::base::backlog::Backlog;
use crate::base::event::Logged;
pub use fence::{Deposed, Fence, FIRST_EPOCH};
pub use redis::{LogFollower, RedisStore};

/// The shared store could not answer.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(#[from] ::redis::RedisError);

pub type StoreResult<T> = Result<T, StoreError>;

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

    /// Ops waiting to be written when more than the store's limit do (new sessions wait).
    pub fn behind(&self) -> Option<usize> {
        let backlog = self.redis()?.backlog();
        backlog.over_limit().then(|| backlog.queued())
    }

    /// The writer an owned session mirrors itself through, the session counted among
    /// `counted_for`'s (a principal) for every replica, every write conditional on owner epoch
    /// `epoch` (`FIRST_EPOCH` for a new session, the claim's for one taken over); `None` with
    /// the memory store.
    pub fn mirror(
        &self,
        server: &str,
        session_id: &str,
        counted_for: Option<&str>,
        epoch: u64,
    ) -> Option<Mirror> {
        self.redis()
            .map(|redis| redis.mirror(server, session_id, counted_for, epoch))
    }
}

/// What an owner records about its session for the other replicas.
#[derive(Debug)]
pub enum Op {
    /// The session record, written when the session is created or taken over.
    Create(Box<Record>),
    /// What the store holds of the log is dropped: the owner writes its whole window again
    /// next (after a failover the new master may hold later entries but not earlier ones,
    /// which could not be appended before them).
    ClearLog,
    /// A message appended to the log.
    Append(Logged),
    /// A message coalesced away.
    Remove { seq: u64 },
    /// Everything up to `through` was evicted from the window.
    Evicted { through: u64 },
    /// A record field changed (`init`, `version`, `numbered`, `next_stream`, `layer`,
    /// `upstream_session`, `lists`, `upstream_ids`).
    Field { name: &'static str, value: String },
    /// The session subscribed to a resource.
    Subscribed { uri: String },
    /// The session unsubscribed from it.
    Unsubscribed { uri: String },
    /// A client request is in flight on request stream `stream` (its id, as JSON).
    Inflight { stream: u64, client_id: String },
    /// That request was answered.
    Answered { stream: u64 },
    /// Activity: the TTLs start again.
    Touch,
    /// The session ended: its keys are deleted.
    End,
    /// Answers (true: written) once every op queued before it has been written.
    Flush(oneshot::Sender<bool>),
}

/// A session record as Redis holds it (and the internal hop describes a session).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Record {
    pub owner: String,
    /// The replica that handed the session to its owner as it left, until the next change of
    /// owner: whom an owner that finds it handed over took it from.
    pub handed_by: Option<String>,
    /// Hex digest of the principal.
    pub principal: String,
    /// `streams` or `single`.
    pub shape: String,
    pub numbered: bool,
    pub version: Option<String>,
    /// The client's `initialize` params (JSON), for re-initializing a new upstream.
    pub init: Option<String>,
    /// Subscribed URIs (JSON array), in a session's description over the hop and in a
    /// `Create` op (which writes them all again). Redis keeps them in a set of their own, which
    /// `RedisStore::record` does not read: `RedisStore::subscriptions` does.
    pub subs: Option<String>,
    pub next_stream: u64,
    pub evicted: u64,
    /// The upstream request ids its owners may have used are all below this one: a new owner
    /// that goes on in the server's session starts here.
    pub upstream_ids: u64,
    /// The server the session is bound to (a command line or URL), for operators.
    pub upstream: Option<String>,
    /// A session named in messages: its kind, state and lifetime (JSON).
    pub layer: Option<String>,
    /// The session the server keeps for this one (a Streamable HTTP server's `Mcp-Session-Id`
    /// and protocol version, JSON): a replica taking the session over goes on in it. `None`
    /// when there is none (written as an empty field, which clears an earlier one).
    pub upstream_session: Option<String>,
    /// The `list_changed` notifications the server announced in its `initialize` result (a
    /// JSON array): a replica that goes on in the server's session, without initializing it
    /// again, still knows which lists to invalidate.
    pub lists: Option<String>,
    /// The owner epoch: one more at every claim (in the script that changes the owner), and
    /// every write an owner makes is conditional on the one it holds.
    pub epoch: u64,
    /// One more each time the owner confirms it still owns the session after its heartbeat may
    /// have lapsed: a claim made on an earlier reading of the record fails.
    pub confirmed: u64,
}

/// An op waiting for the writer.
#[derive(Debug)]
pub struct Queued {
    pub server: Arc<str>,
    pub session: Arc<str>,
    /// The key of the principal's sessions the session counts in, if any.
    pub counted_in: Option<Arc<str>>,
    /// The owner's hold on the session: the op is written only while it is current.
    pub fence: Arc<Fence>,
    pub op: Op,
    pub at: Instant,
}

/// An owned session's way to the store: ops go, in order, to one writer task per store.
#[derive(Clone)]
pub struct Mirror {
    session: Arc<str>,
    server: Arc<str>,
    counted_in: Option<Arc<str>>,
    fence: Arc<Fence>,
    ops: mpsc::UnboundedSender<Queued>,
    backlog: Arc<Backlog>,
}

impl Mirror {
    /// The way to the store of `server`'s session `session`, counted in the set `counted_in`
    /// (the key of its principal's sessions) if any, written while `fence` is current.
    pub fn new(
        server: &str,
        session: &str,
        counted_in: Option<String>,
        fence: Arc<Fence>,
        ops: mpsc::UnboundedSender<Queued>,
        backlog: Arc<Backlog>,
    ) -> Mirror {
        Mirror {
            session: session.into(),
            server: server.into(),
            counted_in: counted_in.map(Into::into),
            fence,
            ops,
            backlog,
        }
    }

    /// The owner's hold on the session, which its writes are conditional on.
    pub fn fence(&self) -> &Arc<Fence> {
        &self.fence
    }

    /// The key of the set of its principal's sessions it counts in, if any.
    pub fn counted_in(&self) -> Option<&Arc<str>> {
        self.counted_in.as_ref()
    }

    pub fn send(&self, op: Op) {
        self.backlog.added(1);
        let queued = Queued {
            server: self.server.clone(),
            session: self.session.clone(),
            counted_in: self.counted_in.clone(),
            fence: self.fence.clone(),
            op,
            at: Instant::now(),
        };
        if self.ops.send(queued).is_err() {
            self.backlog.written(1); // the writer is gone (shutdown)
        }
    }

    /// Waits, at most `within`, until everything this session queued so far is written:
    /// false if it was not (Redis failed or is that far behind).
    pub async fn synced(&self, within: Duration) -> bool {
        let (done, written) = oneshot::channel();
        self.send(Op::Flush(done));
        matches!(tokio::time::timeout(within, written).await, Ok(Ok(true)))
    }

    pub fn backlog(&self) -> &Arc<Backlog> {
        &self.backlog
    }
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("session", &self.session)
            .finish()
    }
}
