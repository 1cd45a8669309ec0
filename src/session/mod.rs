//! Sessions: what a session is, independent of how a request names it. A session owns its
//! upstream binding, its event log and the streams attached to it; client messages go in through
//! `call`/`notify`/`answer`, server messages come out through a `Reader` per stream.

pub mod cluster;
pub mod list_cache;
pub mod log;
pub mod protocol;
pub mod registry;
pub mod routing;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument, Span};

use crate::ids::Principal;
use crate::jsonrpc::{self, id_key, Kind, Message};
use crate::metrics::Metrics;
use crate::store::{Backlog, Mirror, Op, Record};
use crate::upstream::owner::HopError;
use crate::upstream::{Upstream, UpstreamError, UpstreamEvent};
use list_cache::{ListCache, Lookup, Ticket};
use log::{Event, EventId, EventLog, Logged, StreamKey, Window};
use routing::Route;

pub use registry::Registry;

/// The longest new work waits for the shared store to catch up.
const STORE_PATIENCE: Duration = Duration::from_secs(5);

/// Per-session behaviour, from configuration.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    pub window: Window,
    pub idle_ttl: Duration,
    pub max_sessions: usize,
    /// Most sessions one principal may hold (none: no limit of its own).
    pub max_sessions_per_principal: Option<usize>,
    /// Let a newer progress notification replace an undelivered older one of its token.
    pub coalesce_progress: bool,
    /// Answer list requests from a cache shared by the server's sessions.
    pub cache_lists: bool,
    /// The longest a request waits for its server without hearing of it (its response, or a
    /// progress notification, message or server request on its stream); then it fails and the
    /// server is told to cancel it. Not counted while the client owes the server an answer.
    pub request_timeout: Duration,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            window: Window::default(),
            idle_ttl: Duration::from_secs(600),
            max_sessions: 10_000,
            max_sessions_per_principal: None,
            coalesce_progress: false,
            cache_lists: false,
            request_timeout: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("{0}")]
    UpstreamFailed(String),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error("the limit of {0} open sessions is reached")]
    TooManySessions(usize),
    #[error("this principal already holds its limit of {0} open sessions")]
    TooManyForPrincipal(usize),
    #[error("the session store (Redis) is unreachable; new sessions are refused until it is back")]
    StoreUnavailable,
    #[error("the session store (Redis) is {0} writes behind; new work waits until it catches up")]
    StoreBehind(usize),
    /// Another replica owns the session and cannot serve it right now (dead and not yet taken
    /// over, restarted, or moving it).
    #[error("the replica owning this session cannot serve it right now: {0}")]
    OwnerUnavailable(String),
    /// The session was found, then turned out to be gone (ended on its owner).
    #[error("the session is gone")]
    Gone,
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
                SessionError::Gone | SessionError::StoreUnavailable | SessionError::StoreBehind(_)
            )
    }
}

/// Why a stream cannot be read from a position.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the position {after} is ahead of this session's newest event ({head})")]
    Ahead { after: u64, head: u64 },
}

/// A client request the upstream has not answered yet, keyed by the upstream id.
#[derive(Debug)]
struct Inflight {
    client_id: Value,
    stream: u64,
    method: String,
    progress_token: Option<String>,
    /// Where a cacheable list answer goes.
    ticket: Option<Ticket>,
    /// A request of the proxy's own (re-initializing a new upstream): its answer is not
    /// logged, only reported here.
    internal: Option<tokio::sync::oneshot::Sender<()>>,
    /// When it fails for want of an answer; `None` while the client owes the server an answer
    /// to a request of the server's that this one caused.
    deadline: Option<Instant>,
}

#[derive(Debug)]
struct Attachment {
    generation: u64,
    detached: CancellationToken,
}

/// How a session's server messages are laid out for its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Streamable HTTP: a stream per request, and the standalone stream.
    Streams,
    /// Legacy HTTP+SSE (2024-11-05): everything, responses included, on the one stream.
    SingleStream,
}

#[derive(Debug)]
struct State {
    shape: Shape,
    log: EventLog,
    next_stream: u64,
    next_upstream_id: u64,
    inflight: HashMap<u64, Inflight>,
    progress: HashMap<String, u64>,
    /// Requests of the server awaiting the client's answer: their id (key form) → the request
    /// stream of the client request that caused them.
    asked: HashMap<String, u64>,
    attachments: HashMap<StreamKey, Attachment>,
    /// Streams clients read through other replicas' views, until when (renewed while read):
    /// like an attached reader, they get every message as it comes.
    remote_readers: HashMap<StreamKey, Instant>,
    next_generation: u64,
    subscriptions: BTreeSet<String>,
    /// The `list_changed` notifications the server announced it may send.
    changeable_lists: Vec<&'static str>,
    protocol_version: Option<String>,
    /// A protocol-level session (`session/start`): its notifications carry `sessionEventId`.
    numbered: bool,
    upstream_failure: Option<String>,
    last_active: Instant,
    /// Where the session records itself for other replicas (a shared store only).
    mirror: Option<Mirror>,
    /// Another replica owns the session; this log is a copy of the shared one.
    view: bool,
    /// A view: the newest position its owner reported (this copy may not have it yet).
    owner_head: u64,
    /// A view: how far the shared log has been read (what came with hops may be further).
    followed_through: u64,
    /// The client's `initialize` params, kept for the shared store (a shared store only).
    init: Option<String>,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Streams => "streams",
            Shape::SingleStream => "single",
        }
    }
}

impl State {
    /// Takes a request out of flight, with its progress token.
    fn finish(&mut self, upstream_id: u64) -> Option<Inflight> {
        let request = self.inflight.remove(&upstream_id)?;
        if let Some(token) = &request.progress_token {
            self.progress.remove(token);
        }
        if !self.asked.is_empty() {
            self.asked.retain(|_, stream| *stream != request.stream);
        }
        self.mirror(|| Op::Answered {
            stream: request.stream,
        });
        Some(request)
    }

    /// Records an op in the shared store, if there is one (built only then).
    fn mirror(&self, op: impl FnOnce() -> Op) {
        if let Some(mirror) = &self.mirror {
            mirror.send(op());
        }
    }

    fn mirror_subscriptions(&self) {
        self.mirror(|| Op::Field {
            name: "subs",
            value: serde_json::to_string(&self.subscriptions).unwrap_or_default(),
        });
    }

    /// Where the messages of the session's n-th request go.
    fn stream_of(&self, n: u64) -> StreamKey {
        match self.shape {
            Shape::Streams => StreamKey::Request(n),
            Shape::SingleStream => StreamKey::Standalone,
        }
    }

    fn is_open(&self, stream: u64) -> bool {
        match self.view {
            true => !self.log.holds_end_of(StreamKey::Request(stream)),
            false => self.inflight.values().any(|r| r.stream == stream),
        }
    }

    /// Whether a reader, here or through another replica, takes `stream` as it comes.
    fn read_live(&self, stream: StreamKey, now: Instant) -> bool {
        self.attachments.contains_key(&stream)
            || self
                .remote_readers
                .get(&stream)
                .is_some_and(|until| *until > now)
    }

    /// The server spoke of the request on request stream `stream`: its wait starts again, or
    /// pauses while the client owes the server an answer.
    fn heard_of(&mut self, stream: u64, timeout: Duration, awaiting_client: bool) {
        if let Some(request) = self.inflight.values_mut().find(|r| r.stream == stream) {
            request.deadline = (!awaiting_client).then(|| Instant::now() + timeout);
        }
    }

    /// The most recent client request still in flight (SEP-2260: the request that caused a
    /// server request or log message): its messages go on its stream, else on the standalone.
    fn related_request(&self) -> Option<u64> {
        self.inflight
            .values()
            .filter(|r| r.internal.is_none())
            .map(|r| r.stream)
            .max()
    }

    /// What a client that lost messages must re-read: one `resources/updated` per subscribed
    /// URI and one `list_changed` per list the server can change.
    fn invalidations(&self) -> Vec<Bytes> {
        let updates = self.subscriptions.iter().map(|uri| {
            jsonrpc::notification(
                "notifications/resources/updated",
                serde_json::json!({ "uri": uri }),
            )
        });
        let lists = self
            .changeable_lists
            .iter()
            .map(|method| jsonrpc::notification(method, serde_json::json!({})));
        updates.chain(lists).collect()
    }
}

pub struct Session {
    id: String,
    principal: Principal,
    settings: Arc<SessionSettings>,
    metrics: Arc<Metrics>,
    upstream: Upstream,
    /// The server's list cache, when its lists do not depend on the session.
    list_cache: Option<Arc<ListCache>>,
    state: Mutex<State>,
    changes: watch::Sender<u64>,
    /// Woken when a reader attaches (a view follows the shared log only while read).
    readers: Arc<tokio::sync::Notify>,
    /// A view: whether a task follows the shared log for it.
    following: std::sync::atomic::AtomicBool,
    /// With a shared store: its write-behind queue, which new requests wait on when it is full.
    backlog: Option<Arc<Backlog>>,
    pub(crate) ended: CancellationToken,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.id).finish()
    }
}

/// What a reader takes out of its stream in one go.
#[derive(Debug)]
pub struct Delivery {
    pub events: Vec<Event>,
    /// Synthesized invalidations, present when messages were lost (evicted unread).
    pub invalidations: Vec<Bytes>,
}

impl Session {
    #[allow(clippy::too_many_arguments)]
    fn new(
        id: String,
        principal: Principal,
        shape: Shape,
        upstream: Upstream,
        list_cache: Option<Arc<ListCache>>,
        settings: Arc<SessionSettings>,
        metrics: Arc<Metrics>,
        mirror: Option<Mirror>,
    ) -> Session {
        let backlog = mirror.as_ref().map(|mirror| mirror.backlog().clone());
        Session {
            backlog,
            state: Mutex::new(State {
                shape,
                log: EventLog::new(settings.window),
                next_stream: 1,
                next_upstream_id: 1,
                inflight: HashMap::new(),
                progress: HashMap::new(),
                asked: HashMap::new(),
                attachments: HashMap::new(),
                remote_readers: HashMap::new(),
                next_generation: 1,
                subscriptions: BTreeSet::new(),
                changeable_lists: Vec::new(),
                protocol_version: None,
                numbered: false,
                upstream_failure: None,
                last_active: Instant::now(),
                mirror,
                view: false,
                owner_head: 0,
                followed_through: 0,
                init: None,
            }),
            id,
            principal,
            settings,
            metrics,
            upstream,
            list_cache,
            changes: watch::channel(0).0,
            readers: Arc::default(),
            following: Default::default(),
            ended: CancellationToken::new(),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The span its log lines are written in, carrying its id. Made when a line is logged, not
    /// kept: a span held per session would pin its formatted fields for as long (scattered small
    /// allocations that keep freed memory from going back to the system).
    pub fn span(&self) -> Span {
        tracing::info_span!("session", id = %self.id)
    }

    /// The protocol version the server agreed to in `initialize`, once it has answered.
    pub fn protocol_version(&self) -> Option<String> {
        self.lock().protocol_version.clone()
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends a client request upstream under a fresh upstream id and opens the stream its
    /// answer will be logged on. With a shared store far behind, it first waits (bounded) for
    /// the store to catch up.
    pub async fn call(&self, mut request: Message) -> Result<StreamKey, SessionError> {
        if let Some(backlog) = &self.backlog {
            backlog
                .room(STORE_PATIENCE)
                .await
                .map_err(SessionError::StoreBehind)?;
        }
        if let Upstream::Owner(owner) = &self.upstream {
            self.lock().last_active = Instant::now();
            let (stream, answer) = owner
                .forward(&request)
                .await
                .map_err(|e| SessionError::Upstream(e.into()))?;
            self.absorb(answer);
            return stream
                .ok_or_else(|| SessionError::UpstreamFailed("the owner opened no stream".into()));
        }
        let (stream, upstream_id, outgoing) = {
            let mut state = self.lock();
            if let Some(cause) = &state.upstream_failure {
                return Err(SessionError::UpstreamFailed(cause.clone()));
            }
            state.last_active = Instant::now();
            let stream = state.next_stream;
            state.next_stream += 1;
            let method = request.method().unwrap_or_default().to_owned();
            if protocol::is_session_method(&method) {
                // Answered by the proxy where a front offers them; never the upstream's.
                let client_id = request.id().cloned().unwrap_or(Value::Null);
                let message = format!(
                    "Method not found: {method} is offered on WebSocket connections and on Streamable \
                     HTTP requests without Mcp-Session-Id, not on this one"
                );
                let error =
                    jsonrpc::error_response(&client_id, jsonrpc::METHOD_NOT_FOUND, &message, None);
                let stream = state.stream_of(stream);
                self.append(&mut state, stream, error, true, None);
                return Ok(stream);
            }
            let ticket = match self.cached_list(&request, &method) {
                Ok(ticket) => ticket,
                Err(result) => {
                    let client_id = request.id().cloned().unwrap_or(Value::Null);
                    let answer = json!({ "jsonrpc": "2.0", "id": client_id, "result": result });
                    let stream = state.stream_of(stream);
                    self.append(
                        &mut state,
                        stream,
                        Bytes::from(answer.to_string()),
                        true,
                        None,
                    );
                    return Ok(stream);
                }
            };
            let upstream_id = state.next_upstream_id;
            state.next_upstream_id += 1;
            match method.as_str() {
                "resources/subscribe" | "resources/unsubscribe" => {
                    if let Some(uri) = routing::subscription_uri(&request) {
                        if method == "resources/subscribe" {
                            state.subscriptions.insert(uri);
                        } else {
                            state.subscriptions.remove(&uri);
                        }
                        state.mirror_subscriptions();
                    }
                }
                _ => {}
            }
            let progress_token = routing::progress_token(&request);
            if let Some(token) = &progress_token {
                state.progress.insert(token.clone(), stream);
            }
            let client_id = request.id().cloned().unwrap_or(Value::Null);
            state.inflight.insert(
                upstream_id,
                Inflight {
                    client_id,
                    stream,
                    method,
                    progress_token,
                    ticket,
                    internal: None,
                    deadline: Some(Instant::now() + self.settings.request_timeout),
                },
            );
            if state.mirror.is_some() {
                let client_id = request.id().cloned().unwrap_or(Value::Null).to_string();
                let init = (request.method() == Some("initialize"))
                    .then(|| request.params().map(|p| p.get().to_owned()))
                    .flatten();
                state.mirror(|| Op::Field {
                    name: "next_stream",
                    value: (stream + 1).to_string(),
                });
                state.mirror(|| Op::Inflight { stream, client_id });
                if let Some(init) = init {
                    state.init = Some(init.clone());
                    state.mirror(|| Op::Field {
                        name: "init",
                        value: init,
                    });
                }
            }
            request.set_id(Value::from(upstream_id));
            (stream, upstream_id, request)
        };
        if let Err(error) = self.upstream.send(outgoing).await {
            self.lock().finish(upstream_id);
            return Err(error.into());
        }
        Ok(self.lock().stream_of(stream))
    }

    /// A list the cache can answer: `Err(result)` on a hit, `Ok(ticket)` to fill it on a miss.
    fn cached_list(
        &self,
        request: &Message,
        method: &str,
    ) -> Result<Option<Ticket>, Box<RawValue>> {
        let Some(cache) = &self.list_cache else {
            return Ok(None);
        };
        match cache.lookup(&self.principal, method, request.params()) {
            Lookup::Hit(result) => {
                Metrics::inc(&self.metrics.list_cache_hits_total);
                Err(result)
            }
            Lookup::Miss(ticket) => {
                Metrics::inc(&self.metrics.list_cache_misses_total);
                Ok(Some(ticket))
            }
            Lookup::Uncached => Ok(None),
        }
    }

    /// Waits (bounded) until the shared store holds everything this session wrote so far: a
    /// client told of the session (its id, the answer to initialize) may ask any replica next.
    pub async fn store_synced(&self) {
        let mirror = self.lock().mirror.clone();
        if let Some(mirror) = mirror {
            if !mirror.synced(STORE_PATIENCE).await {
                self.span().in_scope(|| {
                    warn!("the session could not be written to the shared store in time; other replicas find it through its id")
                });
            }
        }
    }

    /// Hands a client message to the session by its kind: for a request, the stream its answer
    /// will be logged on.
    pub async fn deliver(&self, message: Message) -> Result<Option<StreamKey>, SessionError> {
        match message.kind() {
            Kind::Request => self.call(message).await.map(Some),
            Kind::Notification => self.notify(message).await.map(|()| None),
            Kind::Response => self.answer(message).await.map(|()| None),
        }
    }

    /// Forwards a client notification. `notifications/cancelled` is readdressed to the upstream
    /// id, and the cancelled request's stream is closed.
    pub async fn notify(&self, mut notification: Message) -> Result<(), SessionError> {
        if notification.method() == Some("notifications/cancelled") {
            #[derive(Deserialize)]
            struct Cancelled {
                #[serde(rename = "requestId")]
                request_id: Value,
            }
            let Some(cancelled) = notification.params_as::<Cancelled>() else {
                return Ok(());
            };
            let wanted = id_key(&cancelled.request_id);
            let upstream_id = {
                let mut state = self.lock();
                let found = state
                    .inflight
                    .iter()
                    .find(|(_, r)| id_key(&r.client_id) == wanted)
                    .map(|(id, _)| *id);
                let Some(upstream_id) = found else {
                    self.span().in_scope(|| {
                        debug!(request = %wanted, "cancellation of a request that is not in flight")
                    });
                    return Ok(());
                };
                if let Some(request) = state.finish(upstream_id) {
                    let stream = state.stream_of(request.stream);
                    self.append(&mut state, stream, Bytes::new(), true, None);
                }
                upstream_id
            };
            let mut params: Value = notification
                .params()
                .and_then(|p| serde_json::from_str(p.get()).ok())
                .unwrap_or_default();
            params["requestId"] = Value::from(upstream_id);
            if let Ok(raw) = serde_json::value::to_raw_value(&params) {
                notification.set_params(raw);
            }
        }
        self.forward(notification).await
    }

    /// Forwards the client's response to a server request; the request that caused it waits
    /// for its server again.
    pub async fn answer(&self, response: Message) -> Result<(), SessionError> {
        if let Some(id) = response.id() {
            let mut state = self.lock();
            if let Some(stream) = state.asked.remove(&id_key(id)) {
                state.heard_of(stream, self.settings.request_timeout, false);
            }
        }
        self.forward(response).await
    }

    async fn forward(&self, message: Message) -> Result<(), SessionError> {
        {
            let mut state = self.lock();
            if let Some(cause) = &state.upstream_failure {
                return Err(SessionError::UpstreamFailed(cause.clone()));
            }
            state.last_active = Instant::now();
        }
        Ok(self.upstream.send(message).await?)
    }

    /// Forgets a stream whose messages were handed over in a form no client can resume.
    pub fn forget(&self, stream: StreamKey) {
        self.lock().log.forget_stream(stream);
    }

    /// Whether `stream` is one this session has opened (a view: one its owner may have).
    pub fn has_stream(&self, stream: StreamKey) -> bool {
        let state = self.lock();
        match stream {
            StreamKey::Standalone => true,
            StreamKey::Request(n) => n >= 1 && (state.view || n < state.next_stream),
        }
    }

    /// A view of a session another replica owns, as its record describes it; its log is filled
    /// with `absorb`.
    pub(crate) fn view(
        id: String,
        principal: Principal,
        record: &Record,
        owner: crate::upstream::owner::OwnerLink,
        settings: Arc<SessionSettings>,
        metrics: Arc<Metrics>,
    ) -> Session {
        let shape = match record.shape.as_str() {
            "single" => Shape::SingleStream,
            _ => Shape::Streams,
        };
        let session = Session::new(
            id,
            principal,
            shape,
            Upstream::Owner(owner),
            None,
            settings,
            metrics,
            None,
        );
        {
            let mut state = session.lock();
            state.view = true;
            state.numbered = record.numbered;
            state.protocol_version = record.version.clone();
            state.next_stream = record.next_stream.max(1);
            state.log.assume_evicted_through(record.evicted);
            if let Some(subs) = record.subs.as_deref() {
                state.subscriptions = serde_json::from_str(subs).unwrap_or_default();
            }
        }
        session
    }

    /// Files in a view's log what was read from the shared log, which is then followed from
    /// the newest of it on.
    pub(crate) fn absorb_followed(&self, logged: Vec<Logged>) {
        if let Some(last) = logged.iter().map(|entry| entry.seq).max() {
            let mut state = self.lock();
            state.followed_through = state.followed_through.max(last);
        }
        self.absorb(logged);
    }

    /// Where a view follows the shared log from: after what it read there, not after what
    /// came with hops (a request's answer may come that way before the messages logged ahead
    /// of it come through the shared log).
    pub(crate) fn followed_through(&self) -> u64 {
        self.lock().followed_through
    }

    /// Files in a view's log what the owner logged.
    pub(crate) fn absorb(&self, logged: Vec<Logged>) {
        let mut state = self.lock();
        let now = Instant::now();
        let mut newest = None;
        for entry in logged {
            let seq = entry.seq;
            let coalesce = entry.coalesce.or_else(|| {
                let message = Message::parse(entry.payload.clone()).ok()?;
                routing::file(&message, self.settings.coalesce_progress).coalesce
            });
            if state.log.insert_logged(
                seq,
                entry.stream,
                entry.payload,
                entry.terminal,
                coalesce,
                now,
            ) {
                newest = Some(seq);
            }
        }
        if let Some(seq) = newest {
            self.changes.send_replace(seq);
        }
    }

    /// Whether a reader here waits for more than this log holds: one on the standalone stream,
    /// or on a request stream whose answer has not arrived.
    pub(crate) fn has_readers(&self) -> bool {
        let state = self.lock();
        state.attachments.keys().any(|stream| match stream {
            StreamKey::Standalone => true,
            StreamKey::Request(_) => !state.log.holds_end_of(*stream),
        })
    }

    pub(crate) fn readers_signal(&self) -> Arc<tokio::sync::Notify> {
        self.readers.clone()
    }

    /// The position of the newest message in this session's log.
    pub(crate) fn head(&self) -> u64 {
        self.lock().log.head()
    }

    /// The link to the owner, for a view.
    pub(crate) fn owner(&self) -> Option<&crate::upstream::owner::OwnerLink> {
        match &self.upstream {
            Upstream::Owner(owner) => Some(owner),
            _ => None,
        }
    }

    /// Clients read `streams` through another replica's view for `lease` from now (renewed while
    /// they do): the session is in use, and those streams get every message as it comes, as if
    /// read here. Returns the newest position.
    pub(crate) fn read_elsewhere(&self, streams: &[StreamKey], lease: Duration) -> u64 {
        let mut state = self.lock();
        let now = Instant::now();
        state.last_active = now;
        state.remote_readers.retain(|_, until| *until > now);
        for stream in streams {
            state.remote_readers.insert(*stream, now + lease);
        }
        state.log.head()
    }

    /// Readies a reader of `stream` from `after`: a position ahead of the session's newest is
    /// refused. On a view, the owner is told first that a client reads `stream` here (so it
    /// coalesces nothing away from it), and its newest position counts; an owner that cannot
    /// be reached (dead, not yet taken over) leaves the logged messages to read, unchecked.
    pub async fn ready_reader(
        &self,
        stream: StreamKey,
        after: Option<u64>,
    ) -> Result<(), ReadError> {
        let head = match &self.upstream {
            Upstream::Owner(owner) => match owner.read(&[stream]).await {
                Ok(reading) => {
                    let mut state = self.lock();
                    state.owner_head = state.owner_head.max(reading.head);
                    Some(state.owner_head.max(state.log.head()))
                }
                Err(error) => {
                    self.span()
                        .in_scope(|| debug!(%error, "the owner could not be told of a reader"));
                    None
                }
            },
            _ => Some(self.head()),
        };
        match (after, head) {
            (Some(after), Some(head)) if after > head => Err(ReadError::Ahead { after, head }),
            _ => Ok(()),
        }
    }

    /// True the first time it is asked: the caller starts the task following a view's log.
    pub(crate) fn claim_following(&self) -> bool {
        !self
            .following
            .swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    /// The session as its record in the shared store describes it.
    pub(crate) fn record(&self) -> Record {
        let state = self.lock();
        Record {
            principal: self.principal.as_str().to_owned(),
            shape: state.shape.name().into(),
            numbered: state.numbered,
            version: state.protocol_version.clone(),
            init: state.init.clone(),
            subs: serde_json::to_string(&state.subscriptions).ok(),
            next_stream: state.next_stream,
            evicted: state.log.evicted_floor(),
            ..Record::default()
        }
    }

    /// The streams clients read here (a view renews them with its owner).
    pub(crate) fn attached_streams(&self) -> Vec<StreamKey> {
        self.lock().attachments.keys().copied().collect()
    }

    /// Attaches a reader to `stream`, reading after `after` (or after what was already handed
    /// out). It becomes the stream's only reader: an earlier one is detached.
    pub fn attach(self: &Arc<Self>, stream: StreamKey, after: Option<u64>) -> Reader {
        let mut state = self.lock();
        if after.is_some() {
            Metrics::inc(&self.metrics.replays_total);
        }
        let cursor = after.unwrap_or_else(|| state.log.delivered_through(stream));
        self.attach_at(&mut state, stream, cursor)
    }

    fn attach_at(self: &Arc<Self>, state: &mut State, stream: StreamKey, cursor: u64) -> Reader {
        let generation = state.next_generation;
        state.next_generation += 1;
        let detached = CancellationToken::new();
        let previous = state.attachments.insert(
            stream,
            Attachment {
                generation,
                detached: detached.clone(),
            },
        );
        if let Some(previous) = previous {
            previous.detached.cancel();
        }
        self.readers.notify_waiters();
        Reader {
            session: self.clone(),
            stream,
            cursor,
            catch_up_through: state.log.head(),
            generation,
            detached,
            changes: self.changes.subscribe(),
        }
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

    /// `session/resume`: attaches the one reader of a protocol-level session. With the last
    /// event the client processed and that position still in the window, it reads on from there
    /// (catch-up); outside the window it gets the synthesized invalidations and then live
    /// messages; without one, what was never handed out and then live messages.
    pub fn resume(self: &Arc<Self>, last: Option<u64>) -> Result<Resumed, ResumeError> {
        let mut state = self.lock();
        let head = state.log.head();
        let known = head.max(state.owner_head);
        let stream = StreamKey::Standalone;
        let (cursor, catchup, first) = match last {
            Some(last) if last > known => return Err(ResumeError::Ahead { head: known }),
            Some(last) if state.log.retains_after(stream, last, Instant::now()) => {
                Metrics::inc(&self.metrics.replays_total);
                (last, true, None)
            }
            Some(_) => {
                Metrics::inc(&self.metrics.replay_gaps_total);
                let invalidations = state.invalidations();
                let first = (!invalidations.is_empty()).then_some(Delivery {
                    events: Vec::new(),
                    invalidations,
                });
                (head, false, first)
            }
            None => (state.log.delivered_through(stream), false, None),
        };
        state.last_active = Instant::now();
        let reader = self.attach_at(&mut state, stream, cursor);
        Ok(Resumed {
            reader,
            catchup,
            first,
        })
    }

    /// Takes what `stream` holds after `cursor`, in one critical section with the check for
    /// its end, so a response logged in between is never mistaken for the end.
    fn take(&self, stream: StreamKey, cursor: &mut u64, catch_up_through: u64) -> Take {
        let mut state = self.lock();
        let read = state
            .log
            .read(stream, *cursor, catch_up_through, Instant::now());
        Metrics::add(&self.metrics.events_coalesced_total, read.coalesced);
        let invalidations = if read.gap {
            Metrics::inc(&self.metrics.replay_gaps_total);
            state.invalidations()
        } else {
            Vec::new()
        };
        *cursor = read.through;
        state.log.mark_delivered(stream, read.through);
        if !read.events.is_empty() || !invalidations.is_empty() {
            return Take::Delivery(Delivery {
                events: read.events,
                invalidations,
            });
        }
        match stream {
            StreamKey::Request(n) if !state.is_open(n) => Take::Finished,
            _ => Take::Nothing,
        }
    }

    fn detach(&self, stream: StreamKey, generation: u64) {
        let mut state = self.lock();
        if state.attachments.get(&stream).map(|a| a.generation) == Some(generation) {
            state.attachments.remove(&stream);
        }
        state.last_active = Instant::now();
    }

    /// Files a message from the upstream in the log.
    pub(crate) fn on_upstream(&self, event: UpstreamEvent) {
        let mut state = self.lock();
        match event {
            UpstreamEvent::Message(message) => self.file(&mut state, *message),
            UpstreamEvent::Oversized { id, max } => {
                let request = id
                    .and_then(|id| id.as_u64())
                    .and_then(|id| state.finish(id));
                if let Some(request) = request {
                    let message = format!(
                        "the upstream server's answer exceeded the {max}-byte line limit \
                         (upstream.max_line_bytes) and was dropped"
                    );
                    self.fail(&mut state, request, &message);
                }
            }
            UpstreamEvent::Exited(cause) => {
                Metrics::inc(&self.metrics.upstream_exits_total);
                let failed: Vec<Inflight> = state.inflight.drain().map(|(_, r)| r).collect();
                state.progress.clear();
                for request in failed {
                    self.fail(&mut state, request, &cause);
                }
                state.upstream_failure = Some(cause.into());
            }
        }
    }

    /// Answers a request taken out of flight with an internal error, ending its stream.
    fn fail(&self, state: &mut State, request: Inflight, message: &str) {
        if request.internal.is_some() {
            return;
        }
        let error =
            jsonrpc::error_response(&request.client_id, jsonrpc::INTERNAL_ERROR, message, None);
        let stream = state.stream_of(request.stream);
        self.append(state, stream, error, true, None);
    }

    fn file(&self, state: &mut State, mut message: Message) {
        let filing = routing::file(&message, self.settings.coalesce_progress);
        let (stream, terminal) = match filing.route {
            Route::Response(id) => {
                let request = id.parse::<u64>().ok().and_then(|id| state.finish(id));
                let Some(request) = request else {
                    self.span()
                        .in_scope(|| debug!(%id, "response to no request in flight; dropped"));
                    return;
                };
                if let Some(done) = request.internal {
                    if request.method == "initialize" {
                        record_initialize(state, &message);
                    }
                    let _ = done.send(());
                    return;
                }
                if request.method == "initialize" {
                    record_initialize(state, &message);
                    if let Some(version) = state.protocol_version.clone() {
                        state.mirror(|| Op::Field {
                            name: "version",
                            value: version,
                        });
                    }
                    if let Some(result) = message
                        .result()
                        .and_then(|r| protocol::advertise(r, &self.settings.window))
                    {
                        message.set_result(result);
                    }
                }
                if let (Some(cache), Some(ticket), Some(result)) =
                    (&self.list_cache, request.ticket, message.result())
                {
                    cache.store(ticket, result);
                }
                message.set_id(request.client_id);
                (state.stream_of(request.stream), true)
            }
            Route::Progress(token) => match state.progress.get(&token).copied() {
                Some(stream) => {
                    state.heard_of(stream, self.settings.request_timeout, false);
                    (state.stream_of(stream), false)
                }
                None => (StreamKey::Standalone, false),
            },
            Route::Related => match state.related_request() {
                Some(n) => {
                    let asks = message.kind() == Kind::Request;
                    if let (true, Some(id)) = (asks, message.id()) {
                        state.asked.insert(id_key(id), n);
                    }
                    state.heard_of(n, self.settings.request_timeout, asks);
                    (state.stream_of(n), false)
                }
                None => (StreamKey::Standalone, false),
            },
            Route::SessionWide => {
                if let (Some(cache), Some(method)) = (&self.list_cache, message.method()) {
                    cache.invalidate(method);
                }
                (StreamKey::Standalone, false)
            }
        };
        self.append(state, stream, message.to_bytes(), terminal, filing.coalesce);
    }

    fn append(
        &self,
        state: &mut State,
        stream: StreamKey,
        payload: Bytes,
        terminal: bool,
        coalesce: Option<String>,
    ) {
        let payload = match state.numbered && !payload.is_empty() {
            true => protocol::stamp(&payload, state.log.head() + 1),
            false => payload,
        };
        let now = Instant::now();
        let mirrored = state
            .mirror
            .is_some()
            .then(|| (payload.clone(), coalesce.clone()));
        let live = state.read_live(stream, now);
        let appended = state
            .log
            .append(stream, payload, terminal, coalesce, live, now);
        if let Some((payload, coalesce)) = mirrored {
            state.mirror(|| {
                Op::Append(Logged {
                    seq: appended.seq,
                    stream,
                    terminal,
                    coalesce,
                    payload,
                })
            });
            if let Some(seq) = appended.replaced {
                state.mirror(|| Op::Remove { seq });
            }
            if appended.evicted > 0 {
                let through = state.log.evicted_floor();
                state.mirror(|| Op::Evicted { through });
            }
        }
        Metrics::inc(&self.metrics.events_logged_total);
        Metrics::add(&self.metrics.events_coalesced_total, appended.coalesced);
        Metrics::add(&self.metrics.events_evicted_total, appended.evicted);
        self.changes.send_replace(appended.seq);
    }

    /// Fails each request whose server stayed silent past its deadline, ending its stream with
    /// an error, and tells the server to cancel it. Returns how many.
    pub(crate) fn expire_requests(&self, now: Instant) -> usize {
        let timeout = self.settings.request_timeout;
        let overdue: Vec<u64> = {
            let mut state = self.lock();
            let overdue: Vec<u64> = state
                .inflight
                .iter()
                .filter(|(_, r)| r.internal.is_none() && r.deadline.is_some_and(|d| d <= now))
                .map(|(id, _)| *id)
                .collect();
            for upstream_id in &overdue {
                if let Some(request) = state.finish(*upstream_id) {
                    let message = format!(
                        "the upstream server did not answer {} within {timeout:?} \
                         (upstream.request_timeout); the request was cancelled",
                        request.method
                    );
                    self.fail(&mut state, request, &message);
                }
            }
            overdue
        };
        for upstream_id in &overdue {
            let reason = format!("no answer within {timeout:?}");
            let params = serde_json::value::to_raw_value(
                &json!({ "requestId": upstream_id, "reason": reason }),
            )
            .ok();
            let cancel = Message::request(None, "notifications/cancelled", params);
            let upstream = self.upstream.clone();
            tokio::spawn(async move { upstream.send(cancel).await }.instrument(self.span()));
        }
        overdue.len()
    }

    /// Since when the session has been idle: no stream attached, nothing in flight.
    pub(crate) fn idle_since(&self) -> Option<Instant> {
        let state = self.lock();
        (state.attachments.is_empty() && state.inflight.is_empty()).then_some(state.last_active)
    }

    /// Writes the whole session to the shared store again (after a Redis outage, which a
    /// restarted Redis may have forgotten it in): record, retained log, requests in flight.
    pub(crate) fn rewrite_to_store(&self) {
        let record = self.record();
        let state = self.lock();
        if state.mirror.is_none() {
            return;
        }
        state.mirror(|| Op::Create(Box::new(record)));
        for logged in state.log.entries() {
            state.mirror(|| Op::Append(logged));
        }
        for request in state.inflight.values().filter(|r| r.internal.is_none()) {
            state.mirror(|| Op::Inflight {
                stream: request.stream,
                client_id: request.client_id.to_string(),
            });
        }
    }

    /// Records a new session in the shared store, bound to `upstream` (for operators).
    pub(crate) fn record_created(&self, upstream: String) {
        let state = self.lock();
        state.mirror(|| {
            Op::Create(Box::new(Record {
                principal: self.principal.as_str().to_owned(),
                shape: state.shape.name().into(),
                next_stream: 1,
                upstream: Some(upstream),
                ..Record::default()
            }))
        });
    }

    /// Takes over a session another replica owned, from what the shared store holds: its
    /// record and its log. The caller then re-initializes the new upstream (`reinitialize`)
    /// and closes the gap (`close_gap`).
    pub(crate) fn adopt(&self, record: &Record, logged: Vec<Logged>) {
        let mut state = self.lock();
        state.numbered = record.numbered;
        state.protocol_version = record.version.clone();
        state.next_stream = record.next_stream.max(1);
        state.init = record.init.clone();
        if let Some(subs) = record.subs.as_deref() {
            state.subscriptions = serde_json::from_str(subs).unwrap_or_default();
        }
        state.log.assume_evicted_through(record.evicted);
        let now = Instant::now();
        for entry in logged {
            state.log.insert_logged(
                entry.seq,
                entry.stream,
                entry.payload,
                entry.terminal,
                entry.coalesce,
                now,
            );
        }
        state.log.start_new_epoch();
        let mut record = record.clone();
        record.owner = String::new(); // the store writes this replica's name
        state.mirror(|| Op::Create(Box::new(record)));
    }

    /// Brings a new upstream to where the session's old one was: `initialize` with the
    /// client's params (its answer is not the client's), `notifications/initialized`, and a
    /// `resources/subscribe` per subscription.
    pub(crate) async fn reinitialize(&self, init: Option<&str>) -> Result<(), SessionError> {
        let Some(init) = init else {
            return Ok(()); // never initialized: the client will
        };
        let params = RawValue::from_string(init.to_owned()).ok();
        self.internal_request("initialize", params).await?;
        self.upstream
            .send(Message::request(None, "notifications/initialized", None))
            .await?;
        let subscriptions: Vec<String> = self.lock().subscriptions.iter().cloned().collect();
        for uri in subscriptions {
            let params = serde_json::value::to_raw_value(&json!({ "uri": uri })).ok();
            self.internal_request("resources/subscribe", params).await?;
        }
        Ok(())
    }

    async fn internal_request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<(), SessionError> {
        let (done, answered) = tokio::sync::oneshot::channel();
        let upstream_id = {
            let mut state = self.lock();
            let id = state.next_upstream_id;
            state.next_upstream_id += 1;
            state.inflight.insert(
                id,
                Inflight {
                    client_id: Value::Null,
                    stream: 0,
                    method: method.to_owned(),
                    progress_token: None,
                    ticket: None,
                    internal: Some(done),
                    deadline: None,
                },
            );
            id
        };
        self.upstream
            .send(Message::request(
                Some(Value::from(upstream_id)),
                method,
                params,
            ))
            .await?;
        match tokio::time::timeout(self.settings.request_timeout, answered).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(SessionError::UpstreamFailed(format!(
                "the new upstream did not answer {method}"
            ))),
        }
    }

    /// What a client of a taken-over session is told (the gap rule): each request the old
    /// owner had in flight gets an error (it may or may not have been carried out), and every
    /// subscription and changeable list an invalidation, since whatever the old server said
    /// after the last logged message is unknown.
    pub(crate) fn close_gap(&self, inflight: std::collections::HashMap<u64, String>) {
        let mut state = self.lock();
        for (stream, client_id) in inflight {
            let client_id: Value = serde_json::from_str(&client_id).unwrap_or(Value::Null);
            let error = jsonrpc::error_response(
                &client_id,
                jsonrpc::INTERNAL_ERROR,
                "the replica that owned this session went away while this request was in \
                 flight; it may or may not have been carried out",
                None,
            );
            let stream = state.stream_of(stream);
            self.append(&mut state, stream, error, true, None);
        }
        for message in state.invalidations() {
            self.append(&mut state, StreamKey::Standalone, message, false, None);
        }
    }

    /// Tells the shared store the session is alive (its keys' TTLs start again).
    pub(crate) fn touch_store(&self) {
        self.lock().mirror(|| Op::Touch);
    }

    /// Ends the session: readers stop, the upstream is released.
    pub(crate) fn end(&self) {
        self.lock().mirror(|| Op::End);
        self.end_here();
    }

    /// Ends the session on this replica only: readers stop, the upstream is released, and what
    /// the shared store holds stays for another replica to take over.
    pub(crate) fn end_here(&self) {
        self.ended.cancel();
        self.upstream.release();
    }
}

fn record_initialize(state: &mut State, response: &Message) {
    #[derive(Deserialize)]
    struct InitializeResult {
        #[serde(rename = "protocolVersion")]
        protocol_version: Option<String>,
        #[serde(default)]
        capabilities: Value,
    }
    let Some(result) = response
        .result()
        .and_then(|r| serde_json::from_str::<InitializeResult>(r.get()).ok())
    else {
        return;
    };
    state.protocol_version = result.protocol_version;
    state.changeable_lists = [
        ("tools", "notifications/tools/list_changed"),
        ("resources", "notifications/resources/list_changed"),
        ("prompts", "notifications/prompts/list_changed"),
    ]
    .into_iter()
    .filter(|(capability, _)| result.capabilities[capability]["listChanged"] == true)
    .map(|(_, method)| method)
    .collect();
}

/// What `session/resume` attached.
pub struct Resumed {
    pub reader: Reader,
    /// The client's position was still in the window: it gets exactly what followed it.
    pub catchup: bool,
    /// Synthesized invalidations to send first (the position was outside the window).
    pub first: Option<Delivery>,
}

#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("lastSessionEventId is ahead of this session's newest event ({})", protocol::event_id(*head))]
    Ahead { head: u64 },
}

enum Take {
    Delivery(Delivery),
    Nothing,
    Finished,
}

/// The one reader of a stream. Replay and live delivery are the same loop: read the log after
/// the cursor, then wait for it to grow.
pub struct Reader {
    session: Arc<Session>,
    stream: StreamKey,
    cursor: u64,
    /// The newest position when the reader attached: what it finds up to there, it catches up
    /// on (coalesced); what comes after, it is sent as it comes.
    catch_up_through: u64,
    generation: u64,
    detached: CancellationToken,
    changes: watch::Receiver<u64>,
}

impl Reader {
    pub fn stream(&self) -> StreamKey {
        self.stream
    }

    /// The position this reader has reached, as an SSE event id.
    pub fn position(&self) -> EventId {
        EventId {
            stream: self.stream,
            seq: self.cursor,
        }
    }

    /// Whether this reader ended because another one was attached to its stream (a resume on
    /// another connection), rather than because the session ended.
    pub fn replaced(&self) -> bool {
        self.detached.is_cancelled() && !self.session.ended.is_cancelled()
    }

    /// The next delivery; `None` once the stream is over: a request stream after its response,
    /// or any stream whose reader was replaced or whose session ended.
    pub async fn next(&mut self) -> Option<Delivery> {
        loop {
            if self.detached.is_cancelled() || self.session.ended.is_cancelled() {
                return None;
            }
            self.changes.borrow_and_update();
            match self
                .session
                .take(self.stream, &mut self.cursor, self.catch_up_through)
            {
                Take::Delivery(delivery) => return Some(delivery),
                Take::Finished => return None,
                Take::Nothing => {}
            }
            tokio::select! {
                changed = self.changes.changed() => if changed.is_err() { return None },
                () = self.detached.cancelled() => return None,
                () = self.session.ended.cancelled() => return None,
            }
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.session.detach(self.stream, self.generation);
    }
}
