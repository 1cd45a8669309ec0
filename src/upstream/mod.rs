//! Upstream adapters: how the proxy talks to the MCP server behind a session. Each kind turns
//! the server's transport into two things: `send` (client→server messages, already addressed
//! with upstream ids) and `UpstreamEvent`s delivered to a `Sink` (server→client messages, then
//! the end), which the session layer implements.

pub mod body;
pub mod child_env;
pub mod child_user;
pub mod credential;
pub mod deferred;
pub mod driven;
pub mod era_switch;
mod error;
pub mod factory;
pub mod http_client;
#[cfg(test)]
#[cfg(test)]
pub mod in_process;
pub mod legacy_sse;
pub mod lines;
pub mod modern;
pub mod modern_http_builder;
pub mod owner;
pub mod probe;
pub mod sandbox;
pub mod shared;
pub mod stdio;
pub mod streamable_http;
pub mod tls_stream;
pub mod virtual_server;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::base::backlog::Backlog;
use crate::wire::jsonrpc::Message;

pub use error::UpstreamError;
pub use streamable_http::UpstreamSession;

/// Where an upstream delivers what its server sends. The session layer implements it; an
/// upstream calls it in the order the server spoke, and never while holding a lock of its own.
pub trait Sink: Send + Sync {
    fn deliver(&self, event: UpstreamEvent);

    /// The queue what this sink takes is written behind through (the shared store's), if any:
    /// an upstream waits for room in it before reading its server's next message
    /// (`room_to_read`).
    fn backlog(&self) -> Option<Arc<Backlog>> {
        None
    }
}

/// Waits until `sink` has room for another message: an upstream reader awaits it before reading
/// its server's next one. While the write-behind queue is over its bound the server is not
/// read (its messages wait in its pipe or socket, and the server with them): nothing is dropped,
/// and nothing grows here.
pub async fn room_to_read(sink: &dyn Sink) {
    if let Some(backlog) = sink.backlog() {
        backlog.wait_for_room().await;
    }
}

/// [`room_to_read`], given up when `stop` fires: `false` then (the reader stops).
pub async fn room_to_read_unless(sink: &dyn Sink, stop: &CancellationToken) -> bool {
    tokio::select! {
        () = room_to_read(sink) => !stop.is_cancelled(),
        () = stop.cancelled() => false,
    }
}

/// A shared handle to a sink.
pub type EventSink = std::sync::Arc<dyn Sink>;

/// What an upstream reports to its session.
#[derive(Debug)]
pub enum UpstreamEvent {
    /// A message from the server.
    Message(Box<Message>),
    /// A message of a virtual server's member that speaks of a request (progress, a server
    /// request, a log message, a cancellation), held to that member's own requests: it goes on
    /// the stream of `request` (the upstream id of the session's request to that member that it
    /// rides) while that request is in flight, else on the standalone stream; no other
    /// request's wait is restarted or paused by it.
    Within {
        message: Box<Message>,
        request: Option<u64>,
    },
    /// The server wrote a message over the line limit; it was dropped. `id` is its top-level
    /// id when that could be read from its first bytes.
    Oversized {
        id: Option<Box<serde_json::Value>>,
        max: usize,
    },
    /// A request (by its upstream id) could not be carried to the server, or its answer was
    /// lost; the cause says why. The session answers its client with an error.
    Failed {
        id: Box<serde_json::Value>,
        cause: UpstreamError,
    },
    /// Every request in flight lost its answer (a legacy SSE stream was cut); the upstream
    /// carries on.
    AnswersLost(UpstreamError),
    /// The server forgot the upstream session (an HTTP 404, a new legacy stream): the session
    /// brings it back (`initialize` with the client's params, whose outcome it reports with
    /// `Upstream::reestablished`, then `notifications/initialized` and its subscriptions).
    /// Other traffic waits.
    SessionLost,
    /// The server went away on its own; the cause says why (exit status, last stderr lines).
    Exited(UpstreamError),
}

/// Which server a session gets, from configuration.
#[derive(Debug, Clone)]
pub enum UpstreamSpec {
    /// A child per session (the spec shared by every child, each of which keeps it to be
    /// started again).
    Stdio(Arc<stdio::StdioSpec>),
    /// One child for every session (`shared` isolation).
    SharedStdio(Arc<stdio::StdioSpec>),
    Http(http_client::HttpSpec),
    /// A legacy HTTP+SSE server: the URL of its SSE endpoint.
    Sse(http_client::HttpSpec),
    /// A server in this process (tests of the session layer).
    #[cfg(test)]
    InProcess(in_process::InProcessSpec),
    /// A virtual server: its members behind one endpoint.
    Virtual(Arc<dyn virtual_server::VirtualServer>),
}

impl UpstreamSpec {
    /// The revision the server speaks (HTTP and SSE servers: legacy, so far).
    pub fn era(&self) -> crate::wire::era::Era {
        match self {
            UpstreamSpec::Stdio(spec) | UpstreamSpec::SharedStdio(spec) => spec.protocol,
            UpstreamSpec::Http(spec) => spec.protocol,
            UpstreamSpec::Sse(_) | UpstreamSpec::Virtual(_) => crate::wire::era::Era::Legacy,
            #[cfg(test)]
            UpstreamSpec::InProcess(_) => crate::wire::era::Era::Legacy,
        }
    }

    pub fn display(&self) -> String {
        match self {
            UpstreamSpec::Stdio(spec) => spec.display(),
            UpstreamSpec::SharedStdio(spec) => format!("{} (shared)", spec.display()),
            UpstreamSpec::Http(spec) | UpstreamSpec::Sse(spec) => {
                crate::telemetry::redact::url(&spec.url.to_string()).into_owned()
            }
            #[cfg(test)]
            UpstreamSpec::InProcess(_) => "in-process".to_owned(),
            UpstreamSpec::Virtual(server) => server.display(),
        }
    }
}

/// The upstream bound to one session.
#[derive(Debug, Clone)]
pub enum Upstream {
    Stdio(stdio::StdioUpstream),
    /// A session's share of a child serving many (`shared` isolation).
    Shared(shared::SharedHandle),
    Http(streamable_http::HttpUpstream),
    Sse(legacy_sse::SseUpstream),
    /// A 2026-07-28 server, bridged for the legacy session.
    Modern(modern::ModernUpstream),
    /// A 2026-07-28 HTTP server: the transport under a bridge.
    ModernHttp(modern::http::ModernHttp),
    /// Any of these, started at the session's `initialize`.
    Deferred(deferred::DeferredUpstream),
    /// A server in this process (tests of the session layer).
    #[cfg(test)]
    InProcess(in_process::InProcessUpstream),
    /// One session of a virtual server: its members.
    Virtual(Arc<dyn virtual_server::VirtualSession>),
}

impl Upstream {
    /// Sends one message; the bytes are a complete JSON-RPC message.
    pub async fn send(&self, message: Message) -> Result<(), UpstreamError> {
        match self {
            Upstream::Stdio(stdio) => stdio.send(message.to_bytes()).await,
            Upstream::Shared(shared) => shared.send(message).await,
            Upstream::Http(http) => http.send(message).await,
            Upstream::Sse(sse) => sse.send(message).await,
            Upstream::Modern(modern) => Box::pin(modern.send(message)).await,
            Upstream::ModernHttp(http) => http.send(message).await,
            Upstream::Deferred(deferred) => deferred.send(message).await,
            #[cfg(test)]
            Upstream::InProcess(server) => server.send(message).await,
            Upstream::Virtual(members) => members.send(message).await,
        }
    }

    /// [`Upstream::send`] as a boxed future known to be `Send`: for an upstream that forwards
    /// to another (the compiler cannot see through the cycle otherwise).
    pub fn send_boxed(
        &self,
        message: Message,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), UpstreamError>> + Send + '_>>
    {
        Box::pin(self.send(message))
    }

    /// How the session's `initialize` went after `UpstreamEvent::SessionLost` (or on a new
    /// upstream): traffic held back goes on, or fails with the cause.
    pub fn reestablished(&self, outcome: Result<(), UpstreamError>) {
        match self {
            Upstream::Http(http) => http.reestablished(outcome),
            Upstream::Sse(sse) => sse.reestablished(outcome),
            Upstream::Deferred(deferred) => deferred.reestablished(outcome),
            Upstream::Stdio(_)
            | Upstream::Shared(_)
            | Upstream::Modern(_)
            | Upstream::ModernHttp(_)
            | Upstream::Virtual(_) => {}
            #[cfg(test)]
            Upstream::InProcess(_) => {}
        }
    }

    /// Starts the server again for a session whose server exited: `Ok(true)` when a process
    /// was started, `Ok(false)` when one was running already (a shared child another session
    /// started again); `None` for a server that is not started by the proxy.
    pub fn restart(&self) -> Option<Result<bool, UpstreamError>> {
        match self {
            Upstream::Stdio(stdio) => Some(stdio.restart().map(|()| true)),
            Upstream::Shared(shared) => Some(shared.restart()),
            Upstream::Deferred(deferred) => deferred.restart(),
            _ => None,
        }
    }

    /// Whether [`Self::restart`] can start it again.
    pub fn restartable(&self) -> bool {
        match self {
            Upstream::Stdio(_) | Upstream::Shared(_) => true,
            Upstream::Deferred(deferred) => deferred.restartable(),
            _ => false,
        }
    }

    /// Whether the server waits to be started by the session's `initialize`.
    pub fn awaits_initialize(&self) -> bool {
        matches!(self, Upstream::Deferred(deferred) if deferred.waiting())
    }

    /// The session the server keeps for this one, which another replica can go on in: a
    /// Streamable HTTP server's (also once started at `initialize`); none for other servers.
    pub fn upstream_session(&self) -> Option<UpstreamSession> {
        match self {
            Upstream::Http(http) => http.upstream_session(),
            Upstream::Deferred(deferred) => deferred.upstream_session(),
            _ => None,
        }
    }

    /// What the shared store holds of the session its server keeps (or, for a virtual server,
    /// each member's), for a replica taking it over; `None` when no server keeps one.
    pub fn upstream_session_record(&self) -> Option<String> {
        match self {
            Upstream::Virtual(members) => members.record(),
            _ => self.upstream_session().map(|session| session.to_record()),
        }
    }

    /// Opens the server-to-client stream of an upstream built linked to an upstream session
    /// (`UpstreamFactory::resume`), once its events reach the session; others open theirs
    /// themselves.
    pub fn listen(&self) {
        if let Upstream::Http(http) = self {
            http.listen();
        }
    }

    /// Lets the server go as [`Upstream::release`] does, except that a Streamable HTTP server's
    /// session is not ended (no DELETE): another replica goes on in it. A child still goes: it
    /// cannot outlive this process for another. Idempotent.
    pub fn detach(&self) {
        match self {
            Upstream::Http(http) => http.detach(),
            Upstream::Deferred(deferred) => deferred.detach(),
            Upstream::Virtual(members) => members.detach(),
            _ => self.release(),
        }
    }

    /// Lets the server go (stdio: close stdin, then SIGTERM, then SIGKILL; HTTP: DELETE the
    /// upstream session; SSE: close the stream). Idempotent.
    pub fn release(&self) {
        match self {
            Upstream::Stdio(stdio) => stdio.release(),
            Upstream::Shared(shared) => shared.release(),
            Upstream::Http(http) => http.release(),
            Upstream::Sse(sse) => sse.release(),
            Upstream::Modern(modern) => modern.release(),
            Upstream::ModernHttp(http) => http.release(),
            Upstream::Deferred(deferred) => deferred.release(),
            #[cfg(test)]
            Upstream::InProcess(server) => server.release(),
            Upstream::Virtual(members) => members.release(),
        }
    }
}
