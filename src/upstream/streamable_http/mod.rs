//! The Streamable HTTP upstream (MCP 2025-03-26 … 2025-11-25, transports §Streamable HTTP, as a
//! client). One upstream session per proxy session; its `Mcp-Session-Id` leaves this module only
//! for the shared store, so that a replica taking the session over goes on in it (`resume`).
//! Each client message is POSTed on its own task, which drives the connection it is
//! sent on (`driven`: no connection task in between); answers (JSON or SSE) and the held GET
//! stream become `UpstreamEvent`s. An upstream 404 means the server forgot the session: the
//! session is told (`SessionLost`) and re-initializes it; other traffic waits, and the message
//! is sent again under the new upstream session.
//!
//! Here the upstream session and its standing (lost, re-established) and the requests sent
//! under it; `post` delivers each message, `streams` holds the GET stream and reads SSE streams,
//! `resume` links a new upstream to an upstream session another replica opened.

mod post;
mod resume;
mod streams;

pub use resume::UpstreamSession;

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response};
use http_body_util::Full;
use tokio_util::sync::CancellationToken;
use tracing::{warn, Instrument};

use super::driven::ConnectionPool;
use super::http_client::{self, HttpClient, HttpSpec};
use super::modern_http_builder::ModernHttpBuilder;
use super::{EventSink, Upstream, UpstreamError, UpstreamEvent};
use crate::base::carry;
use crate::telemetry::trace_context::TraceContext;
use crate::upstream::credential::Credential;
use crate::wire::jsonrpc::Message;
use crate::wire::methods;

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

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
    connections: Arc<ConnectionPool>,
    events: EventSink,
    credential: Credential,
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
    /// The generation a GET stream is held for: one at a time (a resumed upstream session
    /// holds one before the client's `notifications/initialized` may come).
    listening: u64,
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

impl HttpUpstream {
    /// `credential` is sent on every request when the spec forwards credentials.
    pub fn start(
        spec: &HttpSpec,
        client: HttpClient,
        connections: Arc<ConnectionPool>,
        events: EventSink,
        credential: Credential,
        modern: Option<ModernHttpBuilder>,
    ) -> Self {
        HttpUpstream {
            inner: Arc::new(Inner {
                spec: spec.clone(),
                client,
                connections,
                events,
                credential,
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
        if message.method() == Some(methods::INITIALIZE) {
            self.inner.remember_version(&message);
        }
        if message.method() == Some(methods::INITIALIZED) {
            // The GET stream opens once this is delivered; what is sent after waits for it.
            self.inner.stream_settled.send_replace(false);
        }
        let inner = self.inner.clone();
        let released = self.inner.released.clone();
        // Carried by the task that asked, when it carries work (a POST waiting for its
        // answer): no task hand-off each way.
        carry::hand_over(
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
        let Some(session) = self.let_go() else {
            return;
        };
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let request = inner.request(Method::DELETE, Some(session), None, Bytes::new());
            let _ = http_client::send(&inner.client, &inner.spec, request).await;
        });
    }

    /// Stops everything of the upstream session's here (its GET stream, a successor); the
    /// session, if this was the first time and there is one.
    fn let_go(&self) -> Option<HeaderValue> {
        if self.inner.released.is_cancelled() {
            return None;
        }
        self.inner.released.cancel();
        if let Some(successor) = self.inner.successor.get() {
            successor.release();
        }
        self.inner.lock().session.clone()
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
            warn!(url = %crate::telemetry::redact::url(&self.spec.url.to_string()), "upstream session lost; the session re-initializes it");
            self.events.deliver(UpstreamEvent::SessionLost);
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
        self.spec.put_credentials(headers, &self.credential);
        if let Some(context) = message
            .filter(|_| self.spec.trace_headers)
            .and_then(Message::params)
            .and_then(TraceContext::from_params)
        {
            context.set_headers(headers);
        }
        if message.is_none_or(|m| m.method() != Some(methods::INITIALIZE)) {
            if let Some(version) = self.lock().protocol_version.clone() {
                headers.insert(VERSION_HEADER, version);
            }
        }
        request
    }
}
