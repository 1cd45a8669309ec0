//! Sessions: what a session is, independent of how a request names it. A session owns its
//! upstream binding, its event log and the streams attached to it. This file is the handle;
//! each job has its own file: `calls` (client messages in, requests in flight under upstream
//! ids), `filing` (server messages into the log), `readers` (streams read, replayed, resumed),
//! `state` (what the one lock guards), `revival` (a new server for a session whose server
//! exited), `replica` (mirroring, views, takeover), `registry` (creating, finding and expiring
//! sessions).

mod calls;
pub mod correlate;
mod door;
mod error_answer;
mod expiry;
pub mod exposure;
mod filing;
mod handshake;
mod inflight;
pub mod layer;
mod lazy_map;
mod leaving;
pub mod list_cache;
pub mod log;
mod per_principal;
pub mod protocol;
pub mod rate;
mod reach;
mod readers;
mod reading;
pub mod registry;
pub mod replica;
pub mod response_cache;
mod revival;
pub mod routing;
pub mod settings;
mod state;
mod subscriptions;
#[cfg(test)]
mod testing;
pub mod virtual_server;

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Span;

use crate::base::ids::Principal;
use crate::store::{Backlog, Mirror, Op};
use crate::telemetry::metrics::ServerMetrics;
use crate::upstream::credential::Credential;
use crate::upstream::owner::HopError;
use crate::upstream::{Upstream, UpstreamError};
use list_cache::ListCache;
use log::Window;
pub use reach::Reach;
use response_cache::ResponseCache;
use state::State;

pub use readers::{Delivery, Reader, ResumeError, Resumed};
pub use registry::Registry;
pub use replica::cluster;

/// The longest new work waits for the shared store to catch up.
const STORE_PATIENCE: Duration = Duration::from_secs(5);

/// Per-session behaviour, from configuration.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    pub window: Window,
    pub idle_ttl: Duration,
    pub max_sessions: usize,
    /// Most sessions one principal with a credential (or a trusted principal header) may hold.
    pub max_sessions_per_principal: usize,
    /// Most sessions clients without one may hold together (they are all one principal, the
    /// anonymous one: this is their limit instead of `max_sessions_per_principal`).
    pub max_anonymous_sessions: usize,
    /// Let a newer progress notification replace an undelivered older one of its token.
    pub coalesce_progress: bool,
    /// Answer list requests from a cache shared by the server's sessions.
    pub cache_lists: bool,
    /// The longest a request waits for its server without hearing of it (its response, or a
    /// progress notification, message or server request on its stream); then it fails and the
    /// server is told to cancel it. Not counted while the client owes the server an answer.
    pub request_timeout: Duration,
    /// Resources one session may be subscribed to at once (and `MAX_SUBSCRIPTION_BYTES` of
    /// their URIs); a `resources/subscribe` to one more is refused (-32602) without reaching the
    /// server.
    pub max_subscriptions: usize,
    /// Requests one session may have in flight to its server at once; one more is refused
    /// (`SessionError::TooManyInFlight`) without reaching the server.
    pub max_inflight: usize,
    /// Where the server's spans go (nowhere unless tracing is on).
    pub spans: crate::telemetry::spans::Spans,
    /// Which of the server's tools clients see, and under which names.
    pub tools: Arc<exposure::Exposure>,
    /// Which of the server's prompts clients see, and under which names.
    pub prompts: Arc<exposure::Exposure>,
    /// Which of the server's resources clients see, by URI.
    pub resources: Arc<exposure::ResourceExposure>,
    /// Requests per second per principal, and per principal and tool.
    pub limits: rate::RateLimits,
}

/// `SessionSettings::max_sessions_per_principal` unless configured.
pub const DEFAULT_MAX_SESSIONS_PER_PRINCIPAL: usize = 100;
/// `SessionSettings::max_anonymous_sessions` unless configured.
pub const DEFAULT_MAX_ANONYMOUS_SESSIONS: usize = 256;
/// `SessionSettings::max_subscriptions` unless configured.
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 1000;
/// `SessionSettings::max_inflight` unless configured.
pub const DEFAULT_MAX_INFLIGHT: usize = 256;
/// The bytes of URIs one session may be subscribed to at once (like the replay window's).
pub const MAX_SUBSCRIPTION_BYTES: usize = 1 << 20;

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            window: Window::default(),
            idle_ttl: Duration::from_secs(600),
            max_sessions: 10_000,
            max_sessions_per_principal: DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
            max_anonymous_sessions: DEFAULT_MAX_ANONYMOUS_SESSIONS,
            coalesce_progress: false,
            cache_lists: false,
            request_timeout: Duration::from_secs(60),
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            max_inflight: DEFAULT_MAX_INFLIGHT,
            spans: crate::telemetry::spans::Spans::default(),
            tools: Arc::default(),
            prompts: Arc::default(),
            resources: Arc::default(),
            limits: rate::RateLimits::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error("the limit of {0} open sessions is reached")]
    TooManySessions(usize),
    #[error("this principal already holds its limit of {0} open sessions (session.max_sessions_per_principal)")]
    TooManyForPrincipal(usize),
    #[error("clients without credentials already hold their limit of {0} open sessions (session.max_anonymous_sessions)")]
    TooManyAnonymous(usize),
    /// The session has as many requests in flight to its server as it may.
    #[error("this session already has its limit of {0} requests in flight (session.max_inflight); retry once one is answered")]
    TooManyInFlight(usize),
    #[error(transparent)]
    SubscriptionRefused(#[from] SubscriptionRefused),
    #[error("the session store (Redis) is unreachable; new sessions are refused until it is back")]
    StoreUnavailable,
    #[error("the session store (Redis) is {0} writes behind; new work waits until it catches up")]
    StoreBehind(usize),
    /// Another replica owns the session and cannot serve it right now (dead and not yet taken
    /// over, restarted, or moving it).
    #[error("the replica owning this session cannot serve it right now: {0}")]
    OwnerUnavailable(OwnerUnavailable),
    /// The session was found, then turned out to be gone (ended on its owner).
    #[error("the session is gone")]
    Gone,
    /// This proxy is shutting down: it takes no new sessions or requests (another replica, or
    /// this one restarted, will).
    #[error("this proxy is shutting down; retry shortly")]
    ShuttingDown,
    /// The principal is over a rate limit: the request reached no session.
    #[error("Too Many Requests: {}", rate_limited(.0))]
    RateLimited(rate::Exceeded),
    /// No session prepared for requests without credentials was ready in time.
    #[error(
        "none of the {size} server sessions for requests without credentials \
         (session.anonymous_pool) was ready within {waited:?}"
    )]
    AnonymousPoolBusy { size: usize, waited: Duration },
    /// The principal holds as many sessions named in messages as it may.
    #[error("this principal holds its limit of {0} named sessions")]
    TooManyNamed(usize),
    /// The session a message names is unknown, another principal's, expired or ended.
    #[error("session {0} is unknown, expired or deleted")]
    NamedNotFound(String),
}

/// Why the replica owning a session cannot serve it right now.
#[derive(Debug, thiserror::Error)]
pub enum OwnerUnavailable {
    /// Its record changed under every attempt to claim it.
    #[error("the session is changing hands")]
    ChangingHands,
    /// The replica that created it could not say whether it has it.
    #[error(transparent)]
    Hop(HopError),
    #[error("its owner described it in a form this replica does not read")]
    Unreadable,
}

/// A `resources/subscribe` to one resource more than a session may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubscriptionRefused {
    #[error(
        "Invalid params: this session is already subscribed to its limit of {0} resources \
         (session.max_subscriptions); unsubscribe from one first"
    )]
    TooMany(usize),
    #[error(
        "Invalid params: this session's subscribed URIs would take more than {0} bytes; \
         unsubscribe from one first"
    )]
    TooLarge(usize),
    /// A resource the server's clients do not see (`[resources]`): never subscribed to.
    #[error("Invalid params: Resource not found")]
    NotShown,
}

impl SessionError {
    /// Its owning replica cannot serve the session right now (unreachable, restarted, moving
    /// it), and the message was not carried out: a retry shortly may be served.
    pub fn owner_unavailable(&self) -> bool {
        matches!(
            self,
            SessionError::OwnerUnavailable(_)
                | SessionError::Upstream(UpstreamError::Hop(
                    HopError::Unreachable(_) | HopError::Gone | HopError::Moved { .. },
                ))
        )
    }

    /// The session did not take the message (its owner or its store cannot serve it now, or it
    /// is gone): an answer about the session, not one from its server.
    pub fn not_taken(&self) -> bool {
        self.owner_unavailable()
            || matches!(
                self,
                SessionError::Gone
                    | SessionError::StoreUnavailable
                    | SessionError::StoreBehind(_)
                    | SessionError::ShuttingDown
                    | SessionError::RateLimited(_)
                    | SessionError::TooManyInFlight(_)
            )
    }
}

/// Why a stream cannot be read from a position.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the position {after} is ahead of this session's newest event ({head})")]
    Ahead { after: u64, head: u64 },
}

/// How a session's server messages are laid out for its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Streamable HTTP: a stream per request, and the standalone stream.
    Streams,
    /// Legacy HTTP+SSE (2024-11-05): everything, responses included, on the one stream.
    SingleStream,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Streams => "streams",
            Shape::SingleStream => "single",
        }
    }
}

pub struct Session {
    /// Itself, for work it starts on its own (re-establishing its upstream).
    this: Weak<Session>,
    id: Arc<str>,
    /// When the sweeps look at it (shared by the registry's sessions).
    sweeps: Arc<expiry::Sweeps>,
    principal: Principal,
    settings: Arc<SessionSettings>,
    metrics: Arc<ServerMetrics>,
    /// Where its messages go: its upstream here, or the replica that owns it.
    upstream: Reach,
    /// The server's list cache, when its lists do not depend on the session.
    list_cache: Option<Arc<ListCache>>,
    /// Results 2026-07-28 clients may reuse, dropped when a notification makes them stale.
    response_cache: Arc<ResponseCache>,
    state: Mutex<State>,
    /// Woken when its log grows (readers wait on it).
    changes: tokio::sync::Notify,
    /// Woken when a reader attaches (a view follows the shared log only while read).
    readers: Arc<tokio::sync::Notify>,
    /// A view: whether a task follows the shared log for it.
    following: std::sync::atomic::AtomicBool,
    /// With a shared store: its write-behind queue, which new requests wait on when it is full.
    backlog: Option<Arc<Backlog>>,
    pub(crate) ended: CancellationToken,
    /// A view's successor: this replica's own session after it took the session over. Readers
    /// of the view read on there, from where they were.
    successor: std::sync::OnceLock<Arc<Session>>,
    /// The client's credential for the server, as the newest request brought it: what its
    /// upstream sends (when configured to), or for a view, what the upstream this replica
    /// builds if it takes the session over gets (never written to the store).
    credential: Credential,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.id).finish()
    }
}

impl Session {
    #[allow(clippy::too_many_arguments)]
    fn new(
        id: Arc<str>,
        principal: Principal,
        shape: Shape,
        upstream: Reach,
        list_cache: Option<Arc<ListCache>>,
        response_cache: Arc<ResponseCache>,
        settings: Arc<SessionSettings>,
        metrics: Arc<ServerMetrics>,
        mirror: Option<Mirror>,
        credential: Credential,
        sweeps: Arc<expiry::Sweeps>,
    ) -> Arc<Session> {
        let backlog = mirror.as_ref().map(|mirror| mirror.backlog().clone());
        Arc::new_cyclic(|this| Session {
            this: this.clone(),
            backlog,
            state: Mutex::new(State::new(shape, settings.window, mirror)),
            id,
            sweeps,
            principal,
            settings,
            metrics,
            upstream,
            list_cache,
            response_cache,
            changes: tokio::sync::Notify::new(),
            readers: Arc::default(),
            following: Default::default(),
            ended: CancellationToken::new(),
            successor: std::sync::OnceLock::new(),
            credential,
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its id, shared (the registry's key).
    pub(in crate::session) fn shared_id(&self) -> &Arc<str> {
        &self.id
    }

    /// Takes the credential of a request that reached the session (the newest one stays).
    pub(in crate::session) fn remember_credential(&self, credential: Option<&http::HeaderValue>) {
        self.credential.renew(credential);
    }

    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The span its log lines are written in, carrying its id. Made when a line is logged, not
    /// kept: a span held per session would pin its formatted fields for as long (scattered small
    /// allocations that keep freed memory from going back to the system).
    pub(in crate::session) fn span(&self) -> Span {
        tracing::info_span!("session", id = %crate::telemetry::redact::session(&self.id))
    }

    /// The protocol version the server agreed to in `initialize`, once it has answered.
    pub fn protocol_version(&self) -> Option<String> {
        self.lock().protocol_version.clone()
    }

    /// Its own upstream, when this replica serves it (a view has none).
    pub fn upstream(&self) -> Option<&Upstream> {
        self.upstream.upstream()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes this a protocol-level session: from now on its notifications and server requests
    /// carry `sessionEventId`. Its messages must all go to one stream (`Shape::SingleStream`).
    pub fn number_events(&self) {
        let mut state = self.lock();
        debug_assert_eq!(state.shape, Shape::SingleStream);
        state.numbered = true;
        state.mirror(|| Op::Field {
            name: "numbered",
            value: "1".into(),
        });
    }

    /// Whether this is a protocol-level session.
    pub fn numbers_events(&self) -> bool {
        self.lock().numbered
    }

    /// Since when the session has been idle: no stream attached, nothing in flight.
    pub(in crate::session) fn idle_since(&self) -> Option<Instant> {
        let state = self.lock();
        let unused = state.reading.unread() && state.calls.inflight.is_empty();
        unused.then_some(state.last_active)
    }

    /// Ends the session: readers stop, the upstream is released (its server's session ended).
    pub(crate) fn end(&self) {
        self.lock().mirror(|| Op::End);
        self.ended.cancel();
        self.upstream.release();
    }

    /// Ends the session on this replica only: readers stop, the upstream is let go without
    /// ending the server's session (`Upstream::detach`), and what the shared store holds stays
    /// for another replica to take over, and go on in that server's session.
    pub(in crate::session) fn end_here(&self) {
        self.ended.cancel();
        self.upstream.detach();
    }
}

/// What a refusal over a rate limit says.
fn rate_limited(exceeded: &rate::Exceeded) -> String {
    let wait = exceeded.retry_after().as_millis();
    match exceeded {
        rate::Exceeded::Requests { .. } => {
            format!("this principal is over limits.requests_per_second; retry in {wait} ms")
        }
        rate::Exceeded::Tool { tool, .. } => {
            format!("this principal is over limits.tools.{tool}; retry in {wait} ms")
        }
    }
}
