//! The registry of a served server's sessions: creates them (with an upstream from the
//! upstream factory), finds them for the principal that owns them, ends them on request, on
//! idle expiry or at shutdown, and fails requests past their deadline. Sessions that live on
//! other replicas are found, followed and taken over in `replica`; what serves it: `door`
//! (the way in), `per_principal` (limits), `expiry` (the sweeps), `leaving` (shutdown), `listens`
//! (the resource subscriptions 2026-07-28 listens make, counted in each session's book).

mod door;
mod expiry;
mod leaving;
mod listens;
mod per_principal;
pub(in crate::session) mod replica;

pub(in crate::session) use expiry::Sweeps;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use dashmap::DashMap;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::base::caller::Caller;
use crate::base::ids::{self, Principal};
use crate::base::swap::Swappable;
use crate::session::list_cache::ListCache;
use crate::session::response_cache::ResponseCache;
use crate::session::{Parts, Reach, Session, SessionError, SessionSettings, Shape, Shared};
use crate::store::{Store, FIRST_EPOCH};
use crate::telemetry::metrics::{Refusal, ServerMetrics};
use crate::upstream::credential::Credential;
use crate::upstream::deferred::DeferredUpstream;
use crate::upstream::factory::{Binding, UpstreamFactory};
use crate::upstream::{Sink, Upstream, UpstreamError, UpstreamSpec};
use crate::wire::jsonrpc::Message;

pub struct Registry {
    pub(in crate::session) sessions: DashMap<Arc<str>, Arc<Session>>,
    /// When the sweeps look at each session.
    pub(in crate::session) sweeps: Arc<Sweeps>,
    /// Sessions other replicas own, seen from here: logs copied from the shared store.
    pub(in crate::session) views: DashMap<String, Arc<Session>>,
    /// Takeovers happen one at a time.
    pub(in crate::session) takeovers: tokio::sync::Mutex<()>,
    /// Sessions counted against the limit, including ones being created.
    pub(in crate::session) reserved: AtomicUsize,
    /// Open sessions per principal here (the anonymous one included), against their limits.
    pub(in crate::session) per_principal: DashMap<Principal, usize>,
    /// Set while the count of sessions per principal shared by the replicas cannot be read
    /// (this replica's own counts meanwhile): said once per outage.
    pub(in crate::session) shared_count_failing: AtomicBool,
    /// Builds the sessions' upstreams.
    pub(in crate::session) upstreams: Arc<UpstreamFactory>,
    /// The client of the hop to other replicas (https:// as `cluster.ca_file` says).
    pub(in crate::session) hop_client: crate::upstream::http_client::HttpClient,
    /// The sessions' settings, one handle a reload may replace: a session keeps those current
    /// when it was made (what was built from them at start, the rate limiter and the list cache,
    /// stays).
    settings: Swappable<SessionSettings>,
    pub(in crate::session) metrics: Arc<ServerMetrics>,
    pub(in crate::session) list_cache: Option<Arc<ListCache>>,
    pub(in crate::session) response_cache: Arc<ResponseCache>,
    /// Where sessions are shared with other replicas (memory: nowhere).
    pub(in crate::session) store: Store,
    /// The served server's name in the store's keys (`default` for `/mcp`).
    pub(in crate::session) server: String,
    /// Set when this proxy begins to shut down: no new sessions or requests, no takeovers.
    pub(in crate::session) leaving: AtomicBool,
    /// One-use tokens spent here (with the memory store).
    pub(in crate::session) spent: replica::spent::Spent,
    /// The principals' request rates.
    pub(in crate::session) limiter: crate::session::rate::Limiter,
}

/// Why a session ended, as its last log line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// Unused for its idle TTL, past its lifetime, or its client's answer overdue.
    Idle,
    /// Its client deleted it (`DELETE`, `session/end`, `sessions/delete`, a handle closed).
    Deleted,
    /// The proxy stopped.
    Shutdown,
    /// Handed to another replica as this one stopped.
    HandedOver,
    /// Another replica owns it now: this one lost its claim.
    Deposed,
    /// Made room for another under a bound (the anonymous pool's).
    Limit,
    /// Its server is gone and the next request opens another.
    ServerGone,
    /// Its server refused or failed the `initialize`.
    NotInitialized,
    /// Its client closed the stream or connection that is the session (2024-11-05 SSE, a
    /// WebSocket).
    StreamClosed,
}

impl std::fmt::Display for EndReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EndReason::Idle => "idle",
            EndReason::Deleted => "deleted",
            EndReason::Shutdown => "shutdown",
            EndReason::HandedOver => "handed_over",
            EndReason::Deposed => "deposed",
            EndReason::Limit => "limit",
            EndReason::ServerGone => "server_gone",
            EndReason::NotInitialized => "not_initialized",
            EndReason::StreamClosed => "stream_closed",
        })
    }
}

impl Registry {
    pub fn new(
        upstream: UpstreamSpec,
        settings: SessionSettings,
        metrics: Arc<ServerMetrics>,
    ) -> Registry {
        Registry::with_store(upstream, settings, metrics, Store::Memory, "default")
    }

    /// A registry whose sessions are shared through `store` under the name `server`.
    pub fn with_store(
        upstream: UpstreamSpec,
        settings: SessionSettings,
        metrics: Arc<ServerMetrics>,
        store: Store,
        server: &str,
    ) -> Registry {
        let settings_cache = settings.cache_lists.then(Arc::default);
        let limiter = crate::session::rate::Limiter::new(
            settings.limits.clone(),
            metrics.rate_buckets.clone(),
        );
        Registry {
            sessions: DashMap::new(),
            sweeps: Arc::default(),
            views: DashMap::new(),
            takeovers: tokio::sync::Mutex::new(()),
            reserved: AtomicUsize::new(0),
            per_principal: DashMap::new(),
            shared_count_failing: AtomicBool::new(false),
            upstreams: Arc::new(UpstreamFactory::new(upstream, metrics.clone())),
            hop_client: match store.redis() {
                Some(redis) => crate::upstream::http_client::client_or_none(&redis.hop_tls),
                None => crate::upstream::http_client::plain_client(),
            },
            leaving: AtomicBool::new(false),
            settings: Swappable::new(settings),
            metrics,
            list_cache: settings_cache,
            response_cache: Arc::default(),
            store,
            server: server.to_owned(),
            spent: Default::default(),
            limiter,
        }
    }

    /// What builds the upstreams of this server's sessions (a virtual server's members use it
    /// too).
    pub fn upstream_factory(&self) -> Arc<UpstreamFactory> {
        self.upstreams.clone()
    }

    /// Fills the warm pool (a no-op without one); call once the runtime is up.
    pub fn prewarm(&self) {
        self.upstreams.prewarm();
    }

    /// Whether each session gets a legacy server process of its own (stdio, per-session
    /// isolation).
    pub fn spawns_legacy_children(&self) -> bool {
        self.upstreams.spawns_legacy_children()
    }

    /// The parameters the server's tools mirror into `Mcp-Param-*` headers.
    pub fn tool_marks(&self) -> &Arc<crate::wire::mirrored::ToolMarks> {
        self.upstreams.tool_marks()
    }

    /// Results 2026-07-28 clients may reuse while their `ttlMs` lasts.
    pub fn response_cache(&self) -> &ResponseCache {
        &self.response_cache
    }

    /// The settings current now: those a session made now gets.
    pub fn settings(&self) -> Arc<SessionSettings> {
        self.settings.current()
    }

    /// Replaces the settings for the sessions made from now on.
    pub fn replace_settings(&self, settings: SessionSettings) {
        self.settings.replace(settings);
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Creates a session for `caller`'s principal with a fresh upstream. Its credential
    /// reaches an HTTP upstream only when configured to.
    pub async fn create(
        &self,
        caller: &Caller,
        shape: Shape,
    ) -> Result<Arc<Session>, SessionError> {
        self.create_with(caller, shape, |credential| self.upstreams.build(credential))
            .await
    }

    /// Creates a session whose server starts at its client's `initialize`: until then it costs
    /// no process or connection, and requests other than `ping` are answered that it must
    /// initialize first. It counts against the limits from now.
    pub async fn create_awaiting_initialize(
        &self,
        caller: &Caller,
        shape: Shape,
    ) -> Result<Arc<Session>, SessionError> {
        self.create_with(caller, shape, |credential| {
            Ok(DeferredUpstream::build(self.upstreams.clone(), credential))
        })
        .await
    }

    /// Creates a session for `caller` whose upstream `build` makes with the session's
    /// credential.
    async fn create_with(
        &self,
        caller: &Caller,
        shape: Shape,
        build: impl FnOnce(Credential) -> Result<(Upstream, Arc<Binding>), UpstreamError>,
    ) -> Result<Arc<Session>, SessionError> {
        let principal = caller.principal().clone();
        let credential = Credential::new(caller.credential().cloned());
        if self.is_leaving() {
            return Err(SessionError::ShuttingDown);
        }
        if !self.store.healthy() {
            self.metrics.session_refused(Refusal::Store);
            return Err(SessionError::StoreUnavailable);
        }
        if let Some(queued) = self.store.behind() {
            self.metrics.session_refused(Refusal::Store);
            return Err(SessionError::StoreBehind(queued));
        }
        let limit = self.settings().max_sessions;
        if self.reserved.fetch_add(1, Ordering::AcqRel) >= limit {
            self.reserved.fetch_sub(1, Ordering::AcqRel);
            self.metrics.session_refused(Refusal::MaxSessions);
            return Err(SessionError::TooManySessions(limit));
        }
        let id = match self.store.redis() {
            Some(redis) => ids::mint_at(&redis.node_id),
            None => ids::mint(),
        };
        if let Err(error) = self.reserve_for(&principal, &id).await {
            self.reserved.fetch_sub(1, Ordering::AcqRel);
            return Err(error);
        }
        let (upstream, binding) = match build(credential.clone()) {
            Ok(bound) => bound,
            Err(error) => {
                self.reserved.fetch_sub(1, Ordering::AcqRel);
                self.unreserve_for(&principal, &id).await;
                return Err(error.into());
            }
        };
        let mirror =
            self.store
                .mirror(&self.server, &id, self.counted_for(&principal), FIRST_EPOCH);
        let session = Session::new(Parts {
            id: id.into(),
            principal,
            shape,
            upstream: Reach::Here(upstream),
            credential,
            mirror,
            shared: self.shared_with_sessions(),
        });
        binding.bind(Arc::downgrade(&session) as Weak<dyn Sink>);
        if self.store.redis().is_some() {
            session.record_created(self.upstreams.display());
        }
        self.take_in(&session);
        self.metrics.sessions_created_total.inc();
        self.metrics.sessions_open.inc();
        session.span().in_scope(|| info!("session created"));
        Ok(session)
    }

    /// What each session shares with the others.
    pub(in crate::session) fn shared_with_sessions(&self) -> Shared {
        Shared {
            settings: self.settings(),
            metrics: self.metrics.clone(),
            list_cache: self.list_cache.clone(),
            response_cache: self.response_cache.clone(),
            sweeps: self.sweeps.clone(),
        }
    }

    /// The session `id` if `principal` owns it. Another principal's session is not found.
    pub fn get(&self, id: &str, principal: &Principal) -> Option<Arc<Session>> {
        if !ids::is_well_formed(id) {
            return None;
        }
        let session = self.sessions.get(id)?.value().clone();
        (session.principal() == principal).then_some(session)
    }

    /// Whether this replica holds session `id` (owns it, or follows it as a view).
    pub fn holds(&self, id: &str) -> bool {
        self.sessions.contains_key(id) || self.views.contains_key(id)
    }

    /// A session this replica owns, whoever asks (the internal hop, already authenticated).
    pub(in crate::session) fn owned(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions.get(id).map(|s| s.value().clone())
    }

    /// Ends session `id` for `why`; false if it was not open. A view's end is the owner's to
    /// carry out.
    pub fn end(&self, id: &str, why: EndReason) -> bool {
        if let Some((_, view)) = self.views.remove(id) {
            if let Some(owner) = view.owner().cloned() {
                tokio::spawn(async move {
                    if let Err(error) = owner.end().await {
                        warn!(%error, "the owner could not be told to end a session");
                    }
                });
            }
            view.end();
            return true;
        }
        self.close(id, true, why)
    }

    /// Closes an owned session here; with `forget`, also in the shared store (else it stays
    /// there for another replica to take over).
    pub(in crate::session) fn close(&self, id: &str, forget: bool, why: EndReason) -> bool {
        let Some((_, session)) = self.sessions.remove(id) else {
            return false;
        };
        self.closed(&session, forget, why);
        true
    }

    /// Whether the registry holds `session` itself under its id (not a newer one).
    pub(in crate::session) fn owned_exactly(&self, session: &Arc<Session>) -> bool {
        (self.sessions.get(session.id())).is_some_and(|held| Arc::ptr_eq(held.value(), session))
    }

    /// Closes `session` here (as `close`) if it is the one the registry holds under its id
    /// (not a newer one, taken over anew); whether it was.
    pub(in crate::session) fn close_exactly(
        &self,
        session: &Arc<Session>,
        forget: bool,
        why: EndReason,
    ) -> bool {
        let removed = self
            .sessions
            .remove_if(session.id(), |_, held| Arc::ptr_eq(held, session));
        if removed.is_some() {
            self.closed(session, forget, why);
        }
        removed.is_some()
    }

    fn closed(&self, session: &Arc<Session>, forget: bool, why: EndReason) {
        self.reserved.fetch_sub(1, Ordering::AcqRel);
        self.release_for(session.principal());
        self.metrics.sessions_open.dec();
        match forget {
            true => session.end(),
            false => session.end_here(),
        }
        session
            .span()
            .in_scope(|| info!(reason = %why, "session ended"));
    }

    /// Takes an owned session into the registry; the idle sweep looks at it once it could have
    /// been idle for its TTL (or reached its lifetime).
    pub(in crate::session) fn take_in(&self, session: &Arc<Session>) {
        let id = session.shared_id().clone();
        let now = Instant::now();
        let ttl = self.settings().idle_ttl;
        let first_look = session.next_expiry(now, ttl, self.in_use_period());
        self.sweeps.schedule(id.clone(), first_look.unwrap_or(now));
        self.sessions.insert(id, session.clone());
    }

    /// Sends a request of the proxy's own through `session` as a client's and waits for its
    /// answer, read back from the stream the request opened (then forgotten).
    pub async fn ask(
        &self,
        session: &Arc<Session>,
        request: Message,
    ) -> Result<serde_json::Value, SessionError> {
        let stream = self.call(session, request).await?;
        let mut reader = session.attach(stream, None);
        while let Some(delivery) = reader.next().await {
            for event in delivery.events {
                let Ok(message) = serde_json::from_slice::<serde_json::Value>(&event.payload)
                else {
                    continue;
                };
                if message.get("method").is_none() {
                    session.forget(stream);
                    return Ok(message);
                }
            }
        }
        Err(SessionError::Gone)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::session::testing::{caller, initialized, principal, registry};
    use crate::session::{EndReason, SessionError, SessionSettings, Shape};

    #[tokio::test]
    async fn a_session_is_found_for_its_principal_alone() {
        let registry = registry(SessionSettings::default());
        let session = initialized(&registry, principal("alice")).await;
        let id = session.id();
        let found = registry.find(id, &caller("alice")).await.unwrap();
        assert!(found.is_some_and(|found| found.id() == id));
        let other = registry.find(id, &caller("mallory")).await.unwrap();
        assert!(
            other.is_none(),
            "another principal's is not found, nor told apart"
        );
        assert!(registry.holds(id) && registry.len() == 1);
    }

    #[tokio::test]
    async fn an_ended_session_is_gone_and_ends_once() {
        let registry = registry(SessionSettings::default());
        let session = initialized(&registry, principal("alice")).await;
        assert!(registry.end(session.id(), EndReason::Deleted));
        assert!(!registry.end(session.id(), EndReason::Deleted), "once");
        assert!(session.ended.is_cancelled());
        let found = registry.find(session.id(), &caller("alice")).await;
        assert!(found.unwrap().is_none());
        assert!(registry.is_empty());
    }

    #[tokio::test]
    async fn the_limits_refuse_one_session_more_and_count_each_principal_apart() {
        let settings = SessionSettings {
            max_sessions: 3,
            max_sessions_per_principal: 2,
            ..SessionSettings::default()
        };
        let registry = registry(settings);
        let create = |name: &'static str| {
            let registry = registry.clone();
            async move { registry.create(&caller(name), Shape::Streams).await }
        };
        create("alice").await.unwrap();
        let second = create("alice").await.unwrap();
        let third = create("alice").await.map(|_| ()).unwrap_err();
        assert!(
            matches!(third, SessionError::TooManyForPrincipal(2)),
            "{third}"
        );
        create("bob").await.unwrap();
        let over = create("carol").await.map(|_| ()).unwrap_err();
        assert!(matches!(over, SessionError::TooManySessions(3)), "{over}");
        registry.end(second.id(), EndReason::Deleted);
        create("alice").await.expect("a place freed is a place");
    }

    #[tokio::test]
    async fn replaced_settings_reach_the_sessions_made_after_and_the_limits_at_the_door() {
        let settings = SessionSettings {
            max_sessions: 1,
            idle_ttl: Duration::from_secs(600),
            ..SessionSettings::default()
        };
        let registry = registry(settings);
        let before = registry
            .create(&caller("alice"), Shape::Streams)
            .await
            .unwrap();
        let refused = registry.create(&caller("bob"), Shape::Streams).await;
        assert!(matches!(
            refused.map(|_| ()),
            Err(SessionError::TooManySessions(1))
        ));
        registry.replace_settings(SessionSettings {
            max_sessions: 2,
            idle_ttl: Duration::from_secs(60),
            ..SessionSettings::default()
        });
        let after = registry
            .create(&caller("bob"), Shape::Streams)
            .await
            .unwrap();
        assert_eq!(after.settings.idle_ttl, Duration::from_secs(60));
        assert_eq!(
            before.settings.idle_ttl,
            Duration::from_secs(600),
            "a session keeps the settings it was made with"
        );
    }
}
