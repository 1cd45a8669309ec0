//! The registry of live sessions: creates them (binding an upstream), finds them for the
//! principal that owns them, ends them on request, on idle expiry or at shutdown.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use dashmap::DashMap;
use http::HeaderValue;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use super::list_cache::ListCache;
use super::log::StreamKey;
use super::{Session, SessionError, SessionSettings, Shape};
use crate::ids::{self, Principal};
use crate::jsonrpc::Message;
use crate::metrics::Metrics;
use crate::store::{Record, RedisStore, Store};
use crate::upstream::http_client::{self, HttpClient};
use crate::upstream::legacy_sse::SseUpstream;
use crate::upstream::owner::{HopError, Owner, OwnerLink};
use crate::upstream::shared::SharedStdio;
use crate::upstream::stdio::{StdioSpec, StdioUpstream};
use crate::upstream::streamable_http::HttpUpstream;
use crate::upstream::{EventSink, Sink, Upstream, UpstreamError, UpstreamEvent, UpstreamSpec};

pub struct Registry {
    sessions: DashMap<String, Arc<Session>>,
    /// Sessions other replicas own, seen from here: logs copied from the shared store.
    views: DashMap<String, Arc<Session>>,
    /// Takeovers happen one at a time.
    takeovers: tokio::sync::Mutex<()>,
    /// Sessions counted against the limit, including ones being created.
    reserved: AtomicUsize,
    /// Open sessions per principal, when principals have a limit of their own.
    per_principal: DashMap<Principal, usize>,
    upstream: UpstreamSpec,
    /// One connection pool for every HTTP upstream session.
    http_client: HttpClient,
    /// The one child of `shared` isolation.
    shared: Option<Arc<SharedStdio>>,
    settings: Arc<SessionSettings>,
    metrics: Arc<Metrics>,
    /// The upstream actors, so shutdown can wait until every child is released.
    upstream_tasks: TaskTracker,
    /// Children started ahead of sessions (`warm`), with their event channels.
    warm: Mutex<WarmPool>,
    list_cache: Option<Arc<ListCache>>,
    /// Where sessions are shared with other replicas (memory: nowhere).
    store: Store,
    /// The served server's name in the store's keys (`default` for `/mcp`).
    server: String,
}

type WarmPool = VecDeque<(StdioUpstream, Arc<Binding>)>;

impl Registry {
    pub fn new(
        upstream: UpstreamSpec,
        settings: SessionSettings,
        metrics: Arc<Metrics>,
    ) -> Registry {
        Registry::with_store(upstream, settings, metrics, Store::Memory, "default")
    }

    /// A registry whose sessions are shared through `store` under the name `server`.
    pub fn with_store(
        upstream: UpstreamSpec,
        settings: SessionSettings,
        metrics: Arc<Metrics>,
        store: Store,
        server: &str,
    ) -> Registry {
        let upstream_tasks = TaskTracker::new();
        let settings_cache = settings.cache_lists.then(Arc::default);
        let shared = match &upstream {
            UpstreamSpec::SharedStdio(spec) => Some(SharedStdio::new(
                spec.clone(),
                upstream_tasks.clone(),
                metrics.clone(),
            )),
            _ => None,
        };
        Registry {
            sessions: DashMap::new(),
            views: DashMap::new(),
            takeovers: tokio::sync::Mutex::new(()),
            reserved: AtomicUsize::new(0),
            per_principal: DashMap::new(),
            upstream,
            http_client: http_client::client(),
            shared,
            settings: Arc::new(settings),
            metrics,
            upstream_tasks,
            warm: Mutex::new(VecDeque::new()),
            list_cache: settings_cache,
            store,
            server: server.to_owned(),
        }
    }

    /// Fills the warm pool (a no-op without one); call once the runtime is up.
    pub fn prewarm(&self) {
        if let UpstreamSpec::Stdio(spec) = &self.upstream {
            self.refill(
                spec,
                &mut self.warm.lock().unwrap_or_else(|e| e.into_inner()),
            );
        }
    }

    pub fn settings(&self) -> &SessionSettings {
        &self.settings
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Creates a session for `principal` with a fresh upstream. `credential` (the client's
    /// `Authorization`) reaches an HTTP upstream only when configured to.
    pub fn create(
        &self,
        principal: Principal,
        shape: Shape,
        credential: Option<HeaderValue>,
    ) -> Result<Arc<Session>, SessionError> {
        if !self.store.healthy() {
            Metrics::inc(&self.metrics.sessions_rejected_total);
            return Err(SessionError::StoreUnavailable);
        }
        if let Some(queued) = self.store.behind() {
            Metrics::inc(&self.metrics.sessions_rejected_total);
            return Err(SessionError::StoreBehind(queued));
        }
        let limit = self.settings.max_sessions;
        if self.reserved.fetch_add(1, Ordering::AcqRel) >= limit {
            self.reserved.fetch_sub(1, Ordering::AcqRel);
            Metrics::inc(&self.metrics.sessions_rejected_total);
            return Err(SessionError::TooManySessions(limit));
        }
        if let Err(error) = self.reserve_for(&principal) {
            self.reserved.fetch_sub(1, Ordering::AcqRel);
            Metrics::inc(&self.metrics.sessions_rejected_total);
            return Err(error);
        }
        let (upstream, binding) = match self.bind_upstream(credential) {
            Ok(bound) => bound,
            Err(error) => {
                self.reserved.fetch_sub(1, Ordering::AcqRel);
                self.release_for(&principal);
                return Err(error.into());
            }
        };
        let id = match self.store.redis() {
            Some(redis) => ids::mint_at(&redis.node_id),
            None => ids::mint(),
        };
        let mirror = self.store.mirror(&self.server, &id);
        let session = Arc::new(Session::new(
            id,
            principal,
            shape,
            upstream,
            self.list_cache.clone(),
            self.settings.clone(),
            self.metrics.clone(),
            mirror,
        ));
        binding.bind(&session);
        if self.store.redis().is_some() {
            session.record_created(self.upstream.display());
        }
        self.sessions
            .insert(session.id().to_owned(), session.clone());
        Metrics::inc(&self.metrics.sessions_created_total);
        Metrics::inc(&self.metrics.sessions_open);
        session.span().in_scope(|| info!("session created"));
        Ok(session)
    }

    /// An upstream for a new session, and the binding its events will reach the session by.
    fn bind_upstream(
        &self,
        credential: Option<HeaderValue>,
    ) -> Result<(Upstream, Arc<Binding>), UpstreamError> {
        if let Some((stdio, binding)) = self.take_warm() {
            return Ok((Upstream::Stdio(stdio), binding));
        }
        let binding = Arc::new(Binding::default());
        let events: EventSink = binding.clone();
        let upstream = match (&self.upstream, &self.shared) {
            (_, Some(shared)) => Upstream::Shared(shared.attach(events)?),
            (UpstreamSpec::Stdio(spec) | UpstreamSpec::SharedStdio(spec), None) => {
                Metrics::inc(&self.metrics.upstream_spawns_total);
                Upstream::Stdio(StdioUpstream::spawn(spec, events, &self.upstream_tasks)?)
            }
            (UpstreamSpec::Http(spec), None) => Upstream::Http(HttpUpstream::start(
                spec,
                self.http_client.clone(),
                events,
                credential,
            )),
            (UpstreamSpec::Sse(spec), None) => Upstream::Sse(SseUpstream::start(
                spec,
                self.http_client.clone(),
                events,
                credential,
            )),
        };
        Ok((upstream, binding))
    }

    /// A child started ahead of time (`warm`), replaced at once; `None` without a pool.
    fn take_warm(&self) -> Option<(StdioUpstream, Arc<Binding>)> {
        let UpstreamSpec::Stdio(spec) = &self.upstream else {
            return None;
        };
        if spec.warm == 0 {
            return None;
        }
        let mut pool = self.warm.lock().unwrap_or_else(|e| e.into_inner());
        let taken = loop {
            match pool.pop_front() {
                // A waiting child says nothing before initialize; one that did has died.
                Some((stdio, binding)) if binding.spoke_unbound() => stdio.release(),
                Some(warm) => break Some(warm),
                None => break None,
            }
        };
        self.refill(spec, &mut pool);
        taken
    }

    fn refill(&self, spec: &StdioSpec, pool: &mut WarmPool) {
        while pool.len() < spec.warm {
            let binding = Arc::new(Binding::default());
            match StdioUpstream::spawn(spec, binding.clone(), &self.upstream_tasks) {
                Ok(stdio) => {
                    Metrics::inc(&self.metrics.upstream_spawns_total);
                    pool.push_back((stdio, binding));
                }
                Err(error) => {
                    warn!(%error, "could not start a warm upstream");
                    return;
                }
            }
        }
    }

    /// Counts a new session against its principal's own limit, if there is one.
    fn reserve_for(&self, principal: &Principal) -> Result<(), SessionError> {
        let Some(limit) = self.settings.max_sessions_per_principal else {
            return Ok(());
        };
        let mut held = self.per_principal.entry(principal.clone()).or_insert(0);
        if *held >= limit {
            return Err(SessionError::TooManyForPrincipal(limit));
        }
        *held += 1;
        Ok(())
    }

    fn release_for(&self, principal: &Principal) {
        if self.settings.max_sessions_per_principal.is_none() {
            return;
        }
        self.per_principal.remove_if_mut(principal, |_, held| {
            *held = held.saturating_sub(1);
            *held == 0
        });
    }

    /// The session `id` if `principal` owns it. Another principal's session is not found.
    pub fn get(&self, id: &str, principal: &Principal) -> Option<Arc<Session>> {
        if !ids::is_well_formed(id) {
            return None;
        }
        let session = self.sessions.get(id)?.value().clone();
        (session.principal() == principal).then_some(session)
    }

    /// A session this replica owns, whoever asks (the internal hop, already authenticated).
    pub fn owned(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions.get(id).map(|s| s.value().clone())
    }

    /// A session this replica owns, for the internal hop; one the shared store says it owns but
    /// it does not hold (this replica was restarted under the same name) is taken over now.
    pub async fn owned_or_reclaimed(&self, id: &str) -> Result<Option<Arc<Session>>, SessionError> {
        if let Some(session) = self.owned(id) {
            return Ok(Some(session));
        }
        let Some(redis) = self.store.redis() else {
            return Ok(None);
        };
        match redis.record(&self.server, id).await {
            Ok(Some(record)) if record.owner == redis.node_id => {
                let principal = Principal::from_stored(&record.principal);
                self.take_over(record, id, &principal).await
            }
            Ok(_) => Ok(None),
            Err(error) => Err(unavailable(&error)),
        }
    }

    /// The session `id` if `principal` owns it, here or on another replica (then a view of it,
    /// fed from the shared log, whose client messages go to the owner). A session that may
    /// exist is never reported missing: while the shared store or its owner cannot tell, that
    /// is an error (503, retry), not `None` (404).
    pub async fn find(
        &self,
        id: &str,
        principal: &Principal,
    ) -> Result<Option<Arc<Session>>, SessionError> {
        if let Some(session) = self.get(id, principal) {
            return Ok(Some(session));
        }
        let Some(redis) = self.store.redis() else {
            return Ok(None);
        };
        if !ids::is_well_formed(id) {
            return Ok(None);
        }
        if let Some(view) = self.views.get(id).map(|v| v.value().clone()) {
            if view.principal() != principal {
                return Ok(None);
            }
            let trusted = !view.ended.is_cancelled() && !view.owner().is_some_and(|o| o.suspect());
            if trusted {
                return Ok(Some(view));
            }
        }
        if !self.store.healthy() {
            return Err(SessionError::StoreUnavailable);
        }
        self.resolve(redis, id, principal).await
    }

    /// Where session `id` lives, from the shared store: a view of it (its owner alive), or this
    /// replica's own after taking it over (its owner dead). Without a record, the replica its id
    /// names (which may not have written it yet) is asked.
    async fn resolve(
        &self,
        redis: &Arc<RedisStore>,
        id: &str,
        principal: &Principal,
    ) -> Result<Option<Arc<Session>>, SessionError> {
        // A claim lost to another replica means the record changed: read it once more.
        for _ in 0..2 {
            let record = redis
                .record(&self.server, id)
                .await
                .map_err(|e| unavailable(&e))?;
            let Some(record) = record else {
                return self.ask_creator(redis, id, principal).await;
            };
            if record.principal != principal.as_str() {
                return Ok(None);
            }
            let url = match record.owner == redis.node_id {
                // This replica, restarted under the same name: its session is gone with it.
                true => None,
                false => redis
                    .node_url(&record.owner)
                    .await
                    .map_err(|e| unavailable(&e))?,
            };
            match url {
                Some(url) => {
                    let owner = Owner {
                        node: record.owner.clone(),
                        url,
                    };
                    return Ok(Some(
                        self.view_of(redis, id, principal, &record, owner).await,
                    ));
                }
                None => {
                    if let Some(session) = self.take_over(record, id, principal).await? {
                        return Ok(Some(session));
                    }
                }
            }
        }
        Err(SessionError::OwnerUnavailable(
            "the session is changing hands".into(),
        ))
    }

    /// A session the shared store has no record of: the replica its id names may have created
    /// it and not written it yet. Alive, it says; gone (or never named), the session is too.
    async fn ask_creator(
        &self,
        redis: &Arc<RedisStore>,
        id: &str,
        principal: &Principal,
    ) -> Result<Option<Arc<Session>>, SessionError> {
        let Some(node) = ids::node_of(id).filter(|node| *node != redis.node_id) else {
            return Ok(None);
        };
        let Some(url) = redis.node_url(node).await.map_err(|e| unavailable(&e))? else {
            return Ok(None);
        };
        let owner = Owner {
            node: node.to_owned(),
            url,
        };
        let link = self.link(redis, id, owner.clone());
        let facts = match link.read(&[]).await {
            Ok(reading) => reading.record,
            Err(HopError::Gone) => return Ok(None),
            Err(error) => return Err(SessionError::OwnerUnavailable(error.to_string())),
        };
        let Ok(record) = serde_json::from_value::<Record>(facts) else {
            return Err(SessionError::OwnerUnavailable(
                "its owner described it in a form this replica does not read".into(),
            ));
        };
        if record.principal != principal.as_str() {
            return Ok(None);
        }
        Ok(Some(
            self.view_of(redis, id, principal, &record, owner).await,
        ))
    }

    fn link(&self, redis: &RedisStore, id: &str, owner: Owner) -> OwnerLink {
        OwnerLink::new(
            self.http_client.clone(),
            redis.secret.clone(),
            &self.server,
            id,
            owner,
        )
    }

    /// The view of session `id` on `owner`: the one this replica has (pointed at `owner`, so
    /// readers attached to it carry on), or a new one whose log is copied from the store and
    /// then followed.
    async fn view_of(
        &self,
        redis: &Arc<RedisStore>,
        id: &str,
        principal: &Principal,
        record: &Record,
        owner: Owner,
    ) -> Arc<Session> {
        if let Some(view) = self.views.get(id).map(|v| v.value().clone()) {
            if !view.ended.is_cancelled() {
                if let Some(link) = view.owner() {
                    link.retarget(owner);
                    renew(&view, link); // the owner may be new: tell it what is read here
                }
                return view;
            }
        }
        let view = Arc::new(Session::view(
            id.to_owned(),
            principal.clone(),
            record,
            self.link(redis, id, owner),
            self.settings.clone(),
            self.metrics.clone(),
        ));
        match redis.read_log(&self.server, id, 0).await {
            Ok(logged) => view.absorb_followed(logged),
            Err(error) => warn!(%error, "could not read a session's log from Redis"),
        }
        let view = {
            let mut entry = self
                .views
                .entry(id.to_owned())
                .or_insert_with(|| view.clone());
            if entry.value().ended.is_cancelled() {
                *entry.value_mut() = view;
            }
            entry.value().clone()
        };
        if view.claim_following() {
            tokio::spawn(tail(
                redis.clone(),
                self.server.clone(),
                Arc::downgrade(&view),
            ));
        }
        view
    }

    /// Hands a client message to a session found here: for a request, the stream its answer
    /// will be logged on. When a view's owner no longer has the session, or another replica
    /// answers at its address, the session is looked up once more and the message goes where
    /// it lives now; if it is gone everywhere, that is `SessionError::Gone` (404).
    pub async fn deliver(
        &self,
        session: &Arc<Session>,
        message: Message,
    ) -> Result<Option<StreamKey>, SessionError> {
        let retry = session.owner().is_some().then(|| message.clone());
        let outcome = session.deliver(message).await;
        let (Some(message), Err(SessionError::Upstream(UpstreamError::Hop(hop)))) =
            (retry, &outcome)
        else {
            return outcome;
        };
        if !matches!(hop, HopError::Gone | HopError::Moved { .. }) {
            return outcome;
        }
        match self.find(session.id(), session.principal()).await? {
            Some(found) => found.deliver(message).await,
            None => Err(SessionError::Gone),
        }
    }

    /// Becomes the owner of a session whose owner is gone: claims it (of several replicas, one
    /// wins: `None` here when another did), binds a new upstream, rebuilds the log from the
    /// shared one, re-initializes and re-subscribes the upstream, and tells the client what may
    /// be lost (`close_gap`).
    async fn take_over(
        &self,
        record: Record,
        id: &str,
        principal: &Principal,
    ) -> Result<Option<Arc<Session>>, SessionError> {
        let Some(redis) = self.store.redis() else {
            return Ok(None);
        };
        let _one_at_a_time = self.takeovers.lock().await;
        if let Some(session) = self.get(id, principal) {
            return Ok(Some(session)); // taken over meanwhile, here
        }
        if !redis
            .claim(&self.server, id, &record.owner)
            .await
            .map_err(|e| unavailable(&e))?
        {
            return Ok(None);
        }
        let limit = self.settings.max_sessions;
        if self.reserved.fetch_add(1, Ordering::AcqRel) >= limit {
            self.reserved.fetch_sub(1, Ordering::AcqRel);
            warn!(
                session = id,
                "a session to take over is over the session limit"
            );
            return Err(SessionError::TooManySessions(limit));
        }
        if let Err(error) = self.reserve_for(principal) {
            self.reserved.fetch_sub(1, Ordering::AcqRel);
            return Err(error);
        }
        let (upstream, binding) = match self.bind_upstream(None) {
            Ok(bound) => bound,
            Err(error) => {
                self.reserved.fetch_sub(1, Ordering::AcqRel);
                self.release_for(principal);
                warn!(%error, "no upstream for a session to take over");
                return Err(error.into());
            }
        };
        let shape = match record.shape.as_str() {
            "single" => Shape::SingleStream,
            _ => Shape::Streams,
        };
        let session = Arc::new(Session::new(
            id.to_owned(),
            principal.clone(),
            shape,
            upstream,
            self.list_cache.clone(),
            self.settings.clone(),
            self.metrics.clone(),
            self.store.mirror(&self.server, id),
        ));
        binding.bind(&session);
        let logged = redis
            .read_log(&self.server, id, 0)
            .await
            .unwrap_or_default();
        let inflight = redis.inflight(&self.server, id).await.unwrap_or_default();
        session.adopt(&record, logged);
        // Clients may read it through views on other replicas, which tell this new owner so
        // within a heartbeat or two: until then, its GET stream is read as if they had.
        session.read_elsewhere(&[StreamKey::Standalone], redis.owner_timeout);
        if let Err(error) = session.reinitialize(record.init.as_deref()).await {
            warn!(%error, "the new upstream of a taken-over session could not be re-initialized");
        }
        session.close_gap(inflight);
        if let Some((_, view)) = self.views.remove(id) {
            view.end();
        }
        self.sessions.insert(id.to_owned(), session.clone());
        Metrics::inc(&self.metrics.sessions_open);
        Metrics::inc(&self.metrics.sessions_taken_over_total);
        session
            .span()
            .in_scope(|| info!(from = %record.owner, "session taken over"));
        Ok(Some(session))
    }

    /// Ends session `id` wherever it lives, and returns once no replica will find it: a view's
    /// owner is asked and answers when done; an owned session's keys are deleted from the
    /// shared store before this returns.
    pub async fn end_everywhere(&self, id: &str) -> bool {
        if let Some((_, view)) = self.views.remove(id) {
            view.end();
            return match view.owner() {
                Some(owner) => owner.end().await.is_ok(),
                None => false,
            };
        }
        let ended = self.end(id);
        if let (true, Some(redis)) = (ended, self.store.redis()) {
            if let Err(error) = redis.forget(&self.server, id).await {
                warn!(%error, "could not delete an ended session from Redis");
            }
        }
        ended
    }

    /// Ends session `id`; false if it was not open. A view's end is the owner's to carry out.
    pub fn end(&self, id: &str) -> bool {
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
        self.close(id, true)
    }

    /// Closes an owned session here; with `forget`, also in the shared store (else it stays
    /// there for another replica to take over).
    fn close(&self, id: &str, forget: bool) -> bool {
        let Some((_, session)) = self.sessions.remove(id) else {
            return false;
        };
        self.reserved.fetch_sub(1, Ordering::AcqRel);
        self.release_for(session.principal());
        Metrics::dec(&self.metrics.sessions_open);
        match forget {
            true => session.end(),
            false => session.end_here(),
        }
        session.span().in_scope(|| info!("session ended"));
        true
    }

    /// Ends every session idle for the idle TTL or longer; returns how many.
    pub fn expire_idle(&self, now: Instant) -> usize {
        let ttl = self.settings.idle_ttl;
        let expired: Vec<String> = self
            .sessions
            .iter()
            .filter(|entry| {
                entry
                    .value()
                    .idle_since()
                    .is_some_and(|since| now.saturating_duration_since(since) >= ttl)
            })
            .map(|entry| entry.key().clone())
            .collect();
        if self.store.redis().is_some() {
            for entry in self.sessions.iter() {
                entry.value().touch_store();
            }
            // Views read here keep their owner's session from expiring; views nobody reads
            // are dropped (the owner's session lives on).
            for view in self.views.iter() {
                if let Some(link) = view.value().owner() {
                    renew(view.value(), link);
                }
            }
            self.views.retain(|_, view| {
                let idle = view
                    .idle_since()
                    .is_some_and(|since| now.saturating_duration_since(since) >= ttl);
                if idle {
                    view.end();
                }
                !idle
            });
        }
        let mut count = 0;
        for id in expired {
            if self.end(&id) {
                Metrics::inc(&self.metrics.sessions_expired_total);
                count += 1;
            }
        }
        // Many sessions gone (or the last of them): their memory goes back to the system.
        if count >= crate::memory::RELEASE_AFTER || (count > 0 && self.sessions.is_empty()) {
            self.sessions.shrink_to_fit();
            self.views.shrink_to_fit();
            crate::memory::release();
        }
        count
    }

    /// Fails the requests of every session here whose server stayed silent too long.
    pub fn expire_requests(&self, now: Instant) {
        let mut timed_out = 0;
        for session in self.sessions.iter() {
            timed_out += session.value().expire_requests(now);
        }
        Metrics::add(&self.metrics.requests_timed_out_total, timed_out as u64);
    }

    /// Expires idle sessions until `shutdown`, checking a few times per TTL.
    pub async fn run_expiry(self: Arc<Self>, shutdown: CancellationToken) {
        let period =
            (self.settings.idle_ttl / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // With replicas: how often views check that their owner is alive.
        let beat = self
            .store
            .redis()
            .map_or(Duration::from_secs(3600), |redis| redis.heartbeat);
        let mut beats = tokio::time::interval(beat);
        beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Requests whose server stayed silent too long fail a little after their deadline.
        let sweep = (self.settings.request_timeout / 8)
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut deadlines = tokio::time::interval(sweep);
        deadlines.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut recoveries = match self.store.redis() {
            Some(redis) => redis.recoveries(),
            None => tokio::sync::watch::channel(0).1,
        };
        loop {
            tokio::select! {
                _ = ticks.tick() => { self.expire_idle(Instant::now()); }
                _ = deadlines.tick() => self.expire_requests(Instant::now()),
                _ = beats.tick(), if self.store.redis().is_some() => self.check_views().await,
                Ok(()) = recoveries.changed() => self.after_outage().await,
                () = shutdown.cancelled() => return,
            }
        }
    }

    /// Redis answers again after an outage: sessions another replica took over meanwhile (this
    /// one's heartbeat lapsed) are not this replica's any more and end here; the others are
    /// written again, since a restarted Redis may have lost them.
    async fn after_outage(&self) {
        let Some(redis) = self.store.redis() else {
            return;
        };
        let sessions: Vec<Arc<Session>> = self.sessions.iter().map(|s| s.value().clone()).collect();
        for session in sessions {
            match redis.record(&self.server, session.id()).await {
                // (A record without an owner is a fragment: writes of this replica's that were
                // in flight across the outage, landing in an emptied Redis.)
                Ok(Some(record)) if !record.owner.is_empty() && record.owner != redis.node_id => {
                    session.span().in_scope(|| {
                        warn!(owner = %record.owner, "taken over while Redis was unreachable; ending it here")
                    });
                    self.close(session.id(), false);
                }
                Ok(_) => session.rewrite_to_store(),
                Err(error) => warn!(%error, "could not check a session's owner after an outage"),
            }
        }
    }

    /// Every heartbeat, for each view here: renews with its owner the streams clients read
    /// (so it keeps the session and sends those streams everything); follows the session to a
    /// new owner after a takeover elsewhere; takes it over when its owner's heartbeat lapsed, so
    /// readers here are not left waiting for a dead replica.
    async fn check_views(&self) {
        let Some(redis) = self.store.redis() else {
            return;
        };
        let views: Vec<Arc<Session>> = self.views.iter().map(|v| v.value().clone()).collect();
        for view in views {
            if view.ended.is_cancelled() {
                continue;
            }
            let Some(link) = view.owner().cloned() else {
                continue;
            };
            let Ok(Some(record)) = redis.record(&self.server, view.id()).await else {
                renew(&view, &link);
                continue;
            };
            let alive = match record.owner == redis.node_id {
                true => Ok(None),
                false => redis.node_url(&record.owner).await,
            };
            match alive {
                Ok(Some(url)) => {
                    if record.owner != link.owner().node {
                        link.retarget(Owner {
                            node: record.owner.clone(),
                            url,
                        });
                    }
                    renew(&view, &link);
                }
                Ok(None) => {
                    let principal = view.principal().clone();
                    if let Err(error) = self.take_over(record, view.id(), &principal).await {
                        warn!(%error, "could not take over a session whose owner is gone");
                    }
                }
                Err(_) => {}
            }
        }
    }

    /// Ends every session (shutdown) and waits until their upstreams are released. With a
    /// shared store the sessions stay there: this replica leaves, another takes them over.
    pub async fn end_all(&self) {
        let ids: Vec<String> = self.sessions.iter().map(|e| e.key().clone()).collect();
        let forget = self.store.redis().is_none();
        for id in ids {
            self.close(&id, forget);
        }
        for view in self.views.iter() {
            view.value().end_here();
        }
        self.views.clear();
        if let Some(shared) = &self.shared {
            shared.release_all();
        }
        let warm: Vec<_> = self
            .warm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for (stdio, _) in warm {
            stdio.release();
        }
        self.upstream_tasks.close();
        self.upstream_tasks.wait().await;
    }
}

/// Copies what the owner logs into a view's log until the view is dropped or ended.
async fn tail(redis: Arc<RedisStore>, server: String, view: Weak<Session>) {
    let Some(id) = view.upgrade().map(|v| v.id().to_owned()) else {
        return;
    };
    // Its own connection (a blocking read must not hold up the shared one), opened again after
    // a failure (a restarted Redis, a cut).
    let mut connection = None;
    loop {
        let Some(followed) = view.upgrade() else {
            return;
        };
        let ended = followed.ended.clone();
        // Followed only while someone reads it here: a request forwarded to the owner gets its
        // answer back with the hop, and Redis is spared a reader nobody listens to.
        if !followed.has_readers() {
            let signal = followed.readers_signal();
            let attached = signal.notified();
            tokio::pin!(attached);
            attached.as_mut().enable();
            let idle = !followed.has_readers();
            drop(followed);
            if idle {
                tokio::select! {
                    () = attached => {}
                    () = ended.cancelled() => return,
                }
            }
            continue;
        }
        let after = followed.followed_through();
        drop(followed);
        let blocking = match connection.as_mut() {
            Some(blocking) => blocking,
            None => match redis.blocking_connection(TAIL_BLOCK).await {
                Ok(opened) => connection.insert(opened),
                Err(error) => {
                    redis.note_error("connection to follow a session's log", &error);
                    tokio::select! {
                        () = tokio::time::sleep(TAIL_BLOCK) => continue,
                        () = ended.cancelled() => return,
                    }
                }
            },
        };
        let read = redis.wait_log(blocking, &server, &id, after, TAIL_BLOCK);
        let logged = tokio::select! {
            read = read => read,
            () = ended.cancelled() => return,
        };
        match (logged, view.upgrade()) {
            // Nothing new for a while: is the session still there at all?
            (Ok(logged), Some(view)) if logged.is_empty() => {
                if let Ok(None) = redis.record(&server, &id).await {
                    view.end();
                    return;
                }
            }
            (Ok(logged), Some(view)) => view.absorb_followed(logged),
            (Err(error), Some(_)) => {
                redis.note_error("read of a followed session's log", &error);
                connection = None;
            }
            (_, None) => return,
        }
    }
}

/// Tells a view's owner which streams clients read here (also keeping its session alive); a
/// failure marks the link suspect, so the next lookup checks where the session lives.
fn renew(view: &Session, link: &OwnerLink) {
    let streams = view.attached_streams();
    if streams.is_empty() {
        return;
    }
    let link = link.clone();
    tokio::spawn(async move {
        if let Err(error) = link.read(&streams).await {
            debug!(%error, "could not renew the streams read through a view");
        }
    });
}

/// The shared store could not answer: a session it might know of is not "not found".
fn unavailable(error: &dyn std::fmt::Display) -> SessionError {
    warn!(%error, "a Redis lookup failed");
    SessionError::StoreUnavailable
}

/// How long one blocking read of a followed log waits.
const TAIL_BLOCK: Duration = Duration::from_secs(2);

/// An upstream's way into its session, bound once the session exists (a warm child is started
/// before its session is). Weak, so a session and its upstream do not keep each other alive.
#[derive(Default)]
pub struct Binding {
    session: OnceLock<Weak<Session>>,
    /// The upstream spoke before it was bound (a warm child that died while waiting).
    spoke_unbound: AtomicBool,
}

impl Binding {
    fn bind(&self, session: &Arc<Session>) {
        let _ = self.session.set(Arc::downgrade(session));
    }

    fn spoke_unbound(&self) -> bool {
        self.spoke_unbound.load(Ordering::Acquire)
    }
}

impl Sink for Binding {
    fn deliver(&self, event: UpstreamEvent) {
        match self.session.get().and_then(Weak::upgrade) {
            Some(session) => session.on_upstream(event),
            None => self.spoke_unbound.store(true, Ordering::Release),
        }
    }
}
