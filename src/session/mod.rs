//! Sessions: what a session is, independent of how a request names it. A session owns its
//! upstream binding, its event log and the streams attached to it. This file is the handle,
//! made of its `Parts`: it locks, delegates to the parts of its `state` (each owning its
//! bookkeeping) and does the I/O. Its other methods are in three files, one per direction:
//! `calls` (client messages in, requests in flight under upstream ids), `filing` (server
//! messages into the log), `readers` (streams read, replayed, resumed). Beside them `handshake`
//! and `revival` (an upstream brought to where the session was), `replica` (what one session
//! holds of the shared store) and `registry/` (creating, finding, expiring and taking over
//! sessions).

mod calls;
pub mod correlate;
pub mod data_layer;
mod error;
mod error_answer;
pub mod exposure;
mod filing;
mod handshake;
mod inflight;
pub mod list_cache;
pub mod log;
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

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Span;

use crate::base::caller::Caller;
use crate::base::ids::Principal;
use crate::store::{Backlog, Fence, Mirror, Op, Record};
use crate::telemetry::metrics::ServerMetrics;
use crate::upstream::credential::Credential;
use crate::upstream::Upstream;
use data_layer::Layer;
use list_cache::ListCache;
pub use reach::Reach;
use response_cache::ResponseCache;
use state::State;

pub use error::{OwnerUnavailable, ReadError, SessionError, SubscriptionRefused};
pub use readers::{Delivery, Reader, ResumeError, Resumed};
pub use registry::{EndReason, Registry};
pub use replica::cluster;
pub use settings::{SessionSettings, MAX_SUBSCRIPTION_BYTES};

/// The longest new work waits for the shared store to catch up.
const STORE_PATIENCE: Duration = Duration::from_secs(5);

/// How a session's server messages are laid out for its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Streamable HTTP: a stream per request, and the standalone stream.
    Streams,
    /// Legacy HTTP+SSE (2024-11-05): everything, responses included, on the one stream.
    SingleStream,
}

impl Shape {
    /// As a record in the shared store names it.
    fn name(self) -> &'static str {
        match self {
            Shape::Streams => "streams",
            Shape::SingleStream => "single",
        }
    }

    /// The shape a record names (`name`'s inverse; anything else is `Streams`).
    fn named(name: &str) -> Shape {
        match name {
            "single" => Shape::SingleStream,
            _ => Shape::Streams,
        }
    }
}

pub struct Session {
    /// Itself, for work it starts on its own (re-establishing its upstream).
    this: Weak<Session>,
    id: Arc<str>,
    /// When the sweeps look at it (shared by the registry's sessions).
    sweeps: Arc<registry::Sweeps>,
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

/// What a session is made of: its own parts, and what it shares with the registry's other
/// sessions.
pub(in crate::session) struct Parts {
    pub(in crate::session) id: Arc<str>,
    pub(in crate::session) principal: Principal,
    pub(in crate::session) shape: Shape,
    /// Where its messages go: its upstream here, or the replica that owns it.
    pub(in crate::session) upstream: Reach,
    /// The client's credential for the server, as the request that made it brought it.
    pub(in crate::session) credential: Credential,
    /// Where it records itself for other replicas (a shared store only, not for a view).
    pub(in crate::session) mirror: Option<Mirror>,
    pub(in crate::session) shared: Shared,
}

/// What a session shares with the registry's other sessions.
pub(in crate::session) struct Shared {
    pub(in crate::session) settings: Arc<SessionSettings>,
    pub(in crate::session) metrics: Arc<ServerMetrics>,
    pub(in crate::session) list_cache: Option<Arc<ListCache>>,
    pub(in crate::session) response_cache: Arc<ResponseCache>,
    pub(in crate::session) sweeps: Arc<registry::Sweeps>,
}

impl Session {
    fn new(parts: Parts) -> Arc<Session> {
        let Parts {
            id,
            principal,
            shape,
            upstream,
            credential,
            mirror,
            shared:
                Shared {
                    settings,
                    metrics,
                    list_cache,
                    response_cache,
                    sweeps,
                },
        } = parts;
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
        state.unused().then_some(state.last_active)
    }

    /// When this session may next be over (`State::next_expiry`).
    pub(in crate::session) fn next_expiry(
        &self,
        now: Instant,
        idle_ttl: Duration,
        in_use: Duration,
    ) -> Option<Instant> {
        self.lock().next_expiry(now, idle_ttl, in_use)
    }

    /// Makes this a session named in messages (set once, right after it is created). Its own
    /// idle TTL and lifetime may end it before the server's idle TTL would: the idle sweep
    /// looks at it by then.
    pub(in crate::session) fn set_layer(&self, layer: Layer) {
        let first_look = crate::base::clock::from_now(layer.idle_ttl).min(layer.deadline);
        self.sweeps.schedule(self.shared_id().clone(), first_look);
        let mut state = self.lock();
        let field = layer.to_record();
        state.layer = Some(Box::new(layer));
        state.mirror(|| Op::Field {
            name: "layer",
            value: field,
        });
    }

    /// The client's `initialize` params, when this replica saw them.
    pub fn init_params(&self) -> Option<String> {
        self.lock().init.clone()
    }

    /// Whether messages name this session (not a header or a connection).
    pub fn is_named(&self) -> bool {
        self.lock().layer.is_some()
    }

    /// What names this session, when messages do.
    pub fn layer(&self) -> Option<Layer> {
        self.lock().layer.as_deref().cloned()
    }

    /// Whether the session is over at `now`: idle for `idle_ttl` (a session named in messages:
    /// its own idle TTL), or past its lifetime.
    pub(in crate::session) fn expired(&self, now: Instant, idle_ttl: Duration) -> bool {
        // A session in use is not over before its lifetime: any later look will do.
        self.next_expiry(now, idle_ttl, Duration::MAX).is_none()
    }

    /// A view of a session another replica owns, as its record describes it, subscribed to
    /// `subscriptions`; its log is filled with `absorb`.
    pub(in crate::session) fn view(
        id: String,
        principal: Principal,
        record: &Record,
        subscriptions: BTreeSet<String>,
        owner: crate::upstream::owner::OwnerLink,
        settings: Arc<SessionSettings>,
        metrics: Arc<ServerMetrics>,
    ) -> Arc<Session> {
        let shape = Shape::named(&record.shape);
        let session = Session::new(Parts {
            id: id.into(),
            principal,
            shape,
            upstream: Reach::Owner(owner),
            credential: Credential::default(),
            mirror: None,
            shared: Shared {
                settings,
                metrics,
                list_cache: None,
                response_cache: Arc::default(),
                sweeps: Arc::default(),
            },
        });
        session.lock().become_view(record, subscriptions);
        session
    }

    /// The link to the owner, for a view.
    pub(crate) fn owner(&self) -> Option<&crate::upstream::owner::OwnerLink> {
        self.upstream.owner()
    }

    /// Its principal, with the credential of the newest request that reached it.
    pub(crate) fn caller(&self) -> Caller {
        Caller::new(self.principal.clone(), self.credential.current())
    }

    /// Where a view follows the shared log from: after what it read there, not after what
    /// came with hops (a request's answer may come that way before the messages logged ahead
    /// of it come through the shared log).
    pub(in crate::session) fn followed_through(&self) -> u64 {
        self.lock().replica.followed_through
    }

    /// True the first time it is asked: the caller starts the task following a view's log.
    pub(in crate::session) fn claim_following(&self) -> bool {
        !self
            .following
            .swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    /// This replica took the session over: the view ends, and its readers read on in
    /// `successor` from where they were (the log positions are the shared log's).
    /// The URIs its 2026-07-28 listens hold are counted in the successor from then on: the
    /// counts move and the successor is named under the view's lock, where `listen_book`
    /// looks.
    pub(in crate::session) fn succeeded_by(&self, successor: &Arc<Session>) {
        {
            let mut state = self.lock();
            let listening = state.subscriptions.take_listening();
            successor.lock().subscriptions.absorb_listening(listening);
            let _ = self.successor.set(successor.clone());
        }
        self.end();
    }

    /// Does `count` to the book of subscriptions the listens of this session count in now: its
    /// own, or that of the session that took it over (a view's successor, followed to the
    /// last). Returns that session, and what `count` said.
    pub(in crate::session) fn listen_book<T>(
        self: &Arc<Self>,
        count: impl Fn(&mut subscriptions::Subscriptions) -> T,
    ) -> (Arc<Session>, T) {
        let mut session = self.clone();
        loop {
            let successor = {
                let mut state = session.lock();
                match session.successor() {
                    Some(successor) => successor,
                    None => {
                        let counted = count(&mut state.subscriptions);
                        drop(state);
                        return (session, counted);
                    }
                }
            };
            session = successor;
        }
    }

    /// The session its server keeps for it, as the record holds it; `None` without one.
    pub(in crate::session) fn upstream_session_record(&self) -> Option<String> {
        self.upstream().and_then(Upstream::upstream_session_record)
    }

    /// This owner's hold on the session in the shared store (`State::fence`).
    pub(in crate::session) fn fence(&self) -> Option<Arc<Fence>> {
        self.lock().fence()
    }

    /// The key of the set of its principal's sessions it counts in (`State::counted_in`).
    pub(in crate::session) fn counted_in(&self) -> Option<Arc<str>> {
        self.lock().counted_in()
    }

    /// The session as its record in the shared store describes it.
    pub(crate) fn record(&self) -> Record {
        let upstream_session = self.upstream_session_record();
        self.lock().record(&self.principal, upstream_session)
    }

    /// Writes the whole session to the shared store again (`State::rewrite_to_store`).
    pub(in crate::session) fn rewrite_to_store(&self) {
        let record = self.record();
        self.lock().rewrite_to_store(record);
    }

    /// Records a new session in the shared store, bound to `upstream` (for operators).
    pub(in crate::session) fn record_created(&self, upstream: String) {
        self.lock().record_created(&self.principal, upstream);
    }

    /// Tells the shared store the session is alive (its keys' TTLs start again).
    pub(in crate::session) fn touch_store(&self) {
        self.lock().mirror(|| Op::Touch);
    }

    /// Waits (bounded) until the shared store holds everything this session wrote so far: a
    /// client told of the session (its id, the answer to initialize) may ask any replica next.
    pub async fn store_synced(&self) {
        let mirror = self.lock().replica.mirror.as_deref().cloned();
        if let Some(mirror) = mirror {
            if !mirror.synced(STORE_PATIENCE).await {
                self.span().in_scope(|| {
                    tracing::warn!("the session could not be written to the shared store in time; other replicas find it through its id")
                });
            }
        }
    }

    /// Its server ended (and has not been started again since).
    pub fn upstream_exited(&self) -> bool {
        self.lock().upstream_failure.is_some()
    }

    /// Its server ended and cannot be started again: nothing more will be served in it.
    pub(in crate::session) fn upstream_failed(&self) -> bool {
        let restartable = || self.upstream.upstream().is_some_and(|u| u.restartable());
        self.upstream_exited() && !restartable()
    }

    /// Requests in flight to its server (`Calls::awaiting_server`).
    pub(in crate::session) fn in_flight(&self) -> usize {
        self.lock().calls.awaiting_server()
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
