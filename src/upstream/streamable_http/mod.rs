//! The Streamable HTTP upstream (MCP 2025-03-26 … 2025-11-25, transports §Streamable HTTP, as a
//! client). One upstream session per proxy session; its `Mcp-Session-Id` never leaves this
//! module. Each client message is POSTed on its own task, which drives the connection it is
//! sent on (`driven`: no connection task in between); answers (JSON or SSE) and the held GET
//! stream become `UpstreamEvent`s. An upstream 404 means the server forgot the session: the
//! session is told (`SessionLost`) and re-initializes it; other traffic waits, and the message
//! is sent again under the new upstream session.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};

use super::body::{self, BodyError};
use super::driven::{Connections, DrivenBody};
use super::era_switch;
use super::handover::ModernHttpBuilder;
use super::http_client::{self, is_event_stream, EventStream, HttpClient, HttpSpec};
use super::{EventSink, Upstream, UpstreamError, UpstreamEvent};
use crate::era::Era;
use crate::jsonrpc::{Kind, Message};
use crate::trace_context::TraceContext;

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
/// Reconnection delay for the GET stream when the server names none.
const DEFAULT_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(5);
/// Resumptions of one POST stream that broke before its response.
const POST_RESUMPTIONS: usize = 3;
/// Bytes of a refusal's body read for its text.
const ERROR_TEXT_BYTES: usize = 800;

/// Handle to one upstream session. Cloning shares it.
#[derive(Debug, Clone)]
pub struct HttpUpstream {
    inner: Arc<Inner>,
}

struct Inner {
    spec: HttpSpec,
    /// For the GET stream and DELETE.
    client: HttpClient,
    /// For POSTs: driven by the task that sends each.
    connections: Arc<Connections>,
    events: EventSink,
    authorization: Option<HeaderValue>,
    released: CancellationToken,
    link: Mutex<Link>,
    /// Whether the upstream session is there; `Lost` from the server's 404 until a new one is.
    standing: tokio::sync::watch::Sender<Standing>,
    /// False while the GET stream is being opened: a server may send what a request causes on
    /// that stream, and drop it when no stream is open, so requests wait for it (bounded).
    stream_settled: tokio::sync::watch::Sender<bool>,
    /// What takes over when the server refuses `initialize` naming 2026-07-28.
    modern: Option<ModernHttpBuilder>,
    /// The 2026-07-28 upstream that took over: everything goes there.
    successor: OnceLock<Upstream>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpUpstream")
            .field("url", &self.spec.url)
            .finish()
    }
}

/// What the proxy knows of its upstream session.
#[derive(Debug, Default)]
struct Link {
    session: Option<HeaderValue>,
    /// The version the client asked for in `initialize`, sent on every later request.
    protocol_version: Option<HeaderValue>,
    /// Bumped by each (re-)initialization; a GET stream of an older one stops.
    generation: u64,
}

/// Whether the upstream session can be used.
#[derive(Debug, Clone)]
enum Standing {
    Ready,
    /// The server forgot it; the session is re-initializing it.
    Lost,
    /// Re-initializing it failed (the cause); the next message tries again.
    Failed(UpstreamError),
}

/// A POST's outcome that needs more than forwarding.
enum Outcome {
    Done,
    SessionLost,
    /// The server refused `initialize` naming 2026-07-28: it speaks that now.
    SpeaksModern,
}

impl HttpUpstream {
    /// `authorization` is sent on every request when the spec forwards credentials.
    pub fn start(
        spec: &HttpSpec,
        client: HttpClient,
        connections: Arc<Connections>,
        events: EventSink,
        authorization: Option<HeaderValue>,
        modern: Option<ModernHttpBuilder>,
    ) -> Self {
        HttpUpstream {
            inner: Arc::new(Inner {
                spec: spec.clone(),
                client,
                connections,
                events,
                authorization: authorization.filter(|_| spec.forward_authorization),
                released: CancellationToken::new(),
                link: Mutex::new(Link::default()),
                standing: tokio::sync::watch::channel(Standing::Ready).0,
                stream_settled: tokio::sync::watch::channel(true).0,
                modern,
                successor: OnceLock::new(),
            }),
        }
    }

    /// Queues one message; its answer arrives as events.
    pub async fn send(&self, message: Message) -> Result<(), UpstreamError> {
        if self.inner.released.is_cancelled() {
            return Err(UpstreamError::Gone);
        }
        if let Some(successor) = self.inner.successor.get() {
            return successor.send_boxed(message).await;
        }
        let wire = message.to_bytes();
        if message.method() == Some("initialize") {
            self.inner.remember_version(&message);
        }
        if message.method() == Some("notifications/initialized") {
            // The GET stream opens once this is delivered; what is sent after waits for it.
            self.inner.stream_settled.send_replace(false);
        }
        let inner = self.inner.clone();
        let released = self.inner.released.clone();
        tokio::spawn(
            async move {
                // Released: nothing of the session's is read any more.
                tokio::select! {
                    () = inner.deliver(message, wire) => {}
                    () = released.cancelled() => {}
                }
            }
            .in_current_span(),
        );
        Ok(())
    }

    /// The session re-initialized the upstream session after `SessionLost` (or could not).
    pub fn reestablished(&self, outcome: Result<(), UpstreamError>) {
        match outcome {
            // Other traffic still waits for the new session's GET stream, opened once
            // `notifications/initialized` is delivered.
            Ok(()) => self.inner.standing.send_replace(Standing::Ready),
            Err(cause) => {
                self.inner.stream_settled.send_replace(true);
                self.inner.standing.send_replace(Standing::Failed(cause))
            }
        };
    }

    /// Ends the upstream session (DELETE, best effort) and stops its GET stream.
    pub fn release(&self) {
        if self.inner.released.is_cancelled() {
            return;
        }
        self.inner.released.cancel();
        if let Some(successor) = self.inner.successor.get() {
            successor.release();
        }
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let Some(session) = inner.lock().session.clone() else {
                return;
            };
            let request = inner.request(Method::DELETE, Some(session), None, Bytes::new());
            let _ = http_client::send(&inner.client, &inner.spec, request).await;
        });
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Link> {
        self.link.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The version the client asks for, sent on every later request.
    fn remember_version(&self, message: &Message) {
        #[derive(serde::Deserialize)]
        struct Initialize {
            #[serde(rename = "protocolVersion")]
            protocol_version: Option<String>,
        }
        let version = message
            .params_as::<Initialize>()
            .and_then(|p| p.protocol_version)
            .and_then(|v| HeaderValue::from_str(&v).ok());
        let mut link = self.lock();
        if link.protocol_version.is_none() {
            link.protocol_version = version;
        }
    }

    /// The server forgot the session `forgotten`: the session is told once, and traffic waits
    /// for it to re-initialize the upstream (unless that already happened).
    fn lost(&self, forgotten: Option<&HeaderValue>) {
        if forgotten.is_some() && self.lock().session.as_ref() != forgotten {
            return; // a new upstream session is there already
        }
        let told = self.standing.send_if_modified(|standing| {
            let first = !matches!(standing, Standing::Lost);
            *standing = Standing::Lost;
            first
        });
        if told {
            self.lock().session = None;
            self.stream_settled.send_replace(false);
            warn!(url = %crate::redact::url(&self.spec.url.to_string()), "upstream session lost; the session re-initializes it");
            self.events.deliver(UpstreamEvent::SessionLost);
        }
    }

    async fn deliver(self: Arc<Self>, message: Message, wire: Bytes) {
        let initializing = message.method() == Some("initialize");
        let starting = initializing || message.method() == Some("notifications/initialized");
        if !starting {
            self.stream_settles().await;
        }
        for attempt in 0..2 {
            let session = match initializing {
                true => None,
                false => match self.current_session().await {
                    Ok(session) => session,
                    Err(cause) => {
                        self.fail(&message, cause).await;
                        break;
                    }
                },
            };
            if attempt > 0 && !starting {
                // After notifications/initialized: the new session's GET stream is being opened.
                self.stream_settles().await;
            }
            match self.post(&message, wire.clone(), session.clone()).await {
                Ok(Outcome::Done) => break,
                Ok(Outcome::SessionLost) if attempt == 0 => self.lost(session.as_ref()),
                Ok(Outcome::SessionLost) => {
                    self.fail(&message, UpstreamError::LostAgain).await;
                    break;
                }
                Ok(Outcome::SpeaksModern) => {
                    self.hand_over(message.clone()).await;
                    break;
                }
                Err(cause) => {
                    self.fail(&message, cause).await;
                    break;
                }
            }
        }
        if message.method() == Some("notifications/initialized") {
            let generation = self.lock().generation;
            tokio::spawn(self.clone().listen(generation).in_current_span());
        }
    }

    /// The upstream session id; while the session re-initializes it, the new one once it is
    /// there (at most the request timeout). After a failed re-initialization, a new one is tried.
    /// An error says why the session could not be brought back.
    async fn current_session(&self) -> Result<Option<HeaderValue>, UpstreamError> {
        if matches!(*self.standing.borrow(), Standing::Failed(_)) {
            self.lost(None);
        }
        let mut standing = self.standing.subscribe();
        let settled = tokio::time::timeout(
            self.spec.request_timeout,
            standing.wait_for(|s| !matches!(s, Standing::Lost)),
        )
        .await;
        let standing = match settled {
            Ok(Ok(standing)) => standing.clone(),
            _ => return Err(UpstreamError::LostNotBackWithin(self.spec.request_timeout)),
        };
        match standing {
            Standing::Failed(cause) => Err(UpstreamError::LostNotBack(Box::new(cause))),
            _ => Ok(self.lock().session.clone()),
        }
    }

    /// Waits until no GET stream is being opened, at most the request timeout.
    async fn stream_settles(&self) {
        let mut settled = self.stream_settled.subscribe();
        let _ = tokio::time::timeout(self.spec.request_timeout, settled.wait_for(|s| *s)).await;
    }

    /// POSTs one message and forwards what comes back.
    async fn post(
        &self,
        message: &Message,
        wire: Bytes,
        session: Option<HeaderValue>,
    ) -> Result<Outcome, UpstreamError> {
        let had_session = session.is_some();
        let request = self.request(Method::POST, session, Some(message), wire);
        let response = self.connections.send(&self.spec, request).await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND && had_session {
            return Ok(Outcome::SessionLost);
        }
        if !status.is_success() {
            let head = body::head(
                response.into_body(),
                ERROR_TEXT_BYTES,
                self.spec.request_timeout,
            )
            .await;
            let refused_initialize = message.method() == Some("initialize")
                && status == StatusCode::BAD_REQUEST
                && self.modern.is_some();
            if refused_initialize && era_switch::named_instead(&head) == Some(Era::Modern) {
                return Ok(Outcome::SpeaksModern);
            }
            let text: String = String::from_utf8_lossy(&head).chars().take(200).collect();
            return Err(UpstreamError::Refused { status, text });
        }
        if message.method() == Some("initialize") {
            self.adopt_session(&response);
        }
        if is_event_stream(&response) {
            self.forward_post_stream(message, response).await;
        } else if status != StatusCode::ACCEPTED {
            let body = body::read(
                response.into_body(),
                self.spec.max_event_bytes,
                self.spec.request_timeout,
            )
            .await?;
            if !body.is_empty() {
                self.forward(body).await;
            }
        }
        Ok(Outcome::Done)
    }

    /// Forwards a POST's SSE stream; if it breaks before the response, resumes it with GET +
    /// Last-Event-ID (the upstream's own id, never the client's).
    async fn forward_post_stream(&self, message: &Message, response: Response<DrivenBody>) {
        let wanted = message.id().cloned();
        let mut answered = false;
        let mut last_id = None;
        let mut retry = None;
        let mut body = response.into_body().boxed_unsync();
        for resumption in 0..=POST_RESUMPTIONS {
            let unreadable = self
                .read_stream(body, &mut last_id, &mut retry, |m| {
                    if m.kind() == Kind::Response && m.id() == wanted.as_ref() {
                        answered = true;
                    }
                })
                .await;
            if let (Some(error), false) = (unreadable, answered) {
                // An event over the bound: resuming would meet it again.
                self.fail(message, BodyError::from(error).into()).await;
                return;
            }
            if answered || wanted.is_none() || resumption == POST_RESUMPTIONS {
                break;
            }
            let Some(from) = last_id.clone() else { break };
            tokio::time::sleep(retry.unwrap_or(DEFAULT_RETRY).min(MAX_RETRY)).await;
            let session = self.lock().session.clone();
            match self.get_stream(session, Some(&from)).await {
                Ok(Some(resumed)) => body = resumed.into_body().boxed_unsync(),
                _ => break,
            }
        }
        if !answered && wanted.is_some() && !self.released.is_cancelled() {
            self.fail(message, UpstreamError::StreamEnded).await;
        }
    }

    /// Reads SSE events from `body` until it ends, forwarding each message; why it stopped
    /// early when an event could not be decoded (one over the bound, say).
    async fn read_stream(
        &self,
        body: impl http_body::Body<Data = Bytes> + Unpin,
        last_id: &mut Option<String>,
        retry: &mut Option<Duration>,
        mut seen: impl FnMut(&Message),
    ) -> Option<crate::sse::DecodeError> {
        let mut events = EventStream::new(body, self.spec.max_event_bytes);
        while super::room_to_read_unless(self.events.as_ref(), &self.released).await {
            let Some(event) = events.next(&self.released).await else {
                break;
            };
            if let Some(id) = event.id {
                *last_id = Some(id);
            }
            if let Some(ms) = event.retry {
                *retry = Some(Duration::from_millis(ms));
            }
            if event.data.is_empty() {
                continue;
            }
            if let Ok(message) = Message::parse(Bytes::from(event.data)) {
                seen(&message);
                self.events
                    .deliver(UpstreamEvent::Message(Box::new(message)));
            }
        }
        events.take_unreadable()
    }

    /// Holds the session's GET stream, resuming it after cuts, until released or superseded.
    /// While it is being (re)opened, requests wait (`stream_settles`); a stream that ended is
    /// reopened at once (or after the server's `retry:`), so little can be sent meanwhile.
    async fn listen(self: Arc<Self>, generation: u64) {
        let mut last_id: Option<String> = None;
        let mut retry = None;
        let mut failures = 0u32;
        while !self.released.is_cancelled() && self.lock().generation == generation {
            self.stream_settled.send_replace(false);
            let session = self.lock().session.clone();
            let opened = self.get_stream(session.clone(), last_id.as_deref()).await;
            self.stream_settled.send_replace(true);
            match opened {
                Ok(Some(response)) => {
                    failures = 0;
                    // An unreadable event ends the stream: it is opened again.
                    self.read_stream(response.into_body(), &mut last_id, &mut retry, |_| {})
                        .await;
                }
                Ok(None) => return, // no GET stream offered (405)
                Err(StatusCode::NOT_FOUND) => {
                    self.lost(session.as_ref());
                    return; // the new generation listens
                }
                Err(status) => {
                    failures += 1;
                    debug!(%status, failures, "upstream GET stream refused");
                }
            }
            let pause = match (failures, retry) {
                (0, None) => Duration::ZERO,
                (0, Some(retry)) => retry.min(MAX_RETRY),
                (n, retry) => retry.unwrap_or(DEFAULT_RETRY).min(MAX_RETRY) * n.min(5),
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = self.released.cancelled() => return,
            }
        }
    }

    /// Opens (or resumes) the GET stream: `Ok(None)` when the server offers none.
    async fn get_stream(
        &self,
        session: Option<HeaderValue>,
        last_event_id: Option<&str>,
    ) -> Result<Option<Response<Incoming>>, StatusCode> {
        let mut request = self.request(Method::GET, session, None, Bytes::new());
        if let Some(id) = last_event_id.and_then(|id| HeaderValue::from_str(id).ok()) {
            request.headers_mut().insert("last-event-id", id);
        }
        let response = http_client::send(&self.client, &self.spec, request)
            .await
            .map_err(|_| StatusCode::BAD_GATEWAY)?;
        match response.status() {
            StatusCode::METHOD_NOT_ALLOWED => Ok(None),
            status if status.is_success() && is_event_stream(&response) => Ok(Some(response)),
            status => Err(status),
        }
    }

    /// The upstream session `initialize` opened; a GET stream of an older one stops.
    fn adopt_session<B>(&self, response: &Response<B>) {
        let mut link = self.lock();
        link.session = response.headers().get(SESSION_HEADER).cloned();
        link.generation += 1;
    }

    fn request(
        &self,
        method: Method,
        session: Option<HeaderValue>,
        message: Option<&Message>,
        body: Bytes,
    ) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method.clone();
        *request.uri_mut() = self.spec.url.clone();
        let headers = request.headers_mut();
        let accept = if method == Method::POST {
            "application/json, text/event-stream"
        } else {
            "text/event-stream"
        };
        headers.insert(header::ACCEPT, HeaderValue::from_static(accept));
        if message.is_some() {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        if let Some(session) = session {
            headers.insert(SESSION_HEADER, session);
        }
        if let Some(credential) = &self.authorization {
            headers.insert(header::AUTHORIZATION, credential.clone());
        }
        if let Some(context) = message
            .filter(|_| self.spec.trace_headers)
            .and_then(Message::params)
            .and_then(TraceContext::from_params)
        {
            context.set_headers(headers);
        }
        if message.is_none_or(|m| m.method() != Some("initialize")) {
            if let Some(version) = self.lock().protocol_version.clone() {
                headers.insert(VERSION_HEADER, version);
            }
        }
        request
    }

    async fn forward(&self, body: Bytes) {
        match Message::parse(body) {
            Ok(message) => {
                self.events
                    .deliver(UpstreamEvent::Message(Box::new(message)));
            }
            Err(error) => {
                warn!(%error, "the upstream server answered with something that is not JSON-RPC")
            }
        }
    }

    /// The server refused `initialize` naming 2026-07-28: new sessions speak that, and this
    /// one goes on through a bridge to it, `initialize` first.
    async fn hand_over(&self, initialize: Message) {
        let Some(modern) = &self.modern else {
            return;
        };
        modern.era().switch_to(Era::Modern);
        let successor = self
            .successor
            .get_or_init(|| modern.build(self.events.clone()));
        if let Err(error) = successor.send_boxed(initialize.clone()).await {
            self.fail(&initialize, error).await;
        }
    }

    /// Reports a request that could not be delivered, with the cause, to its session.
    async fn fail(&self, message: &Message, cause: UpstreamError) {
        warn!(%cause, method = message.method().unwrap_or("response"), "upstream delivery failed");
        if let (Kind::Request, Some(id)) = (message.kind(), message.id()) {
            self.events.deliver(UpstreamEvent::Failed {
                id: Box::new(id.clone()),
                cause,
            });
        }
    }
}
