//! Going on in an upstream session another proxy opened: what a replica that takes a session
//! over needs of it (its `Mcp-Session-Id` and the protocol version its requests name), an
//! upstream linked to it from the start, and letting it go without ending it (a replica that
//! leaves its sessions to the others).

use std::sync::Arc;

use http::HeaderValue;
use tracing::Instrument;

use super::{HttpUpstream, Link};
use crate::upstream::credential::Credential;
use crate::upstream::driven::ConnectionPool;
use crate::upstream::http_client::{HttpClient, HttpSpec};
use crate::upstream::modern_http_builder::ModernHttpBuilder;
use crate::upstream::EventSink;

/// The session a Streamable HTTP server keeps for one proxy session: enough for another
/// replica to go on in it (the server's state with it) instead of initializing a new one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UpstreamSession {
    /// The server's `Mcp-Session-Id`.
    pub id: String,
    /// The `MCP-Protocol-Version` its requests carry.
    pub version: Option<String>,
}

impl UpstreamSession {
    /// As the shared store holds it (JSON).
    pub fn to_record(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// From the shared store; `None` for none (an empty field) or one that cannot be read.
    pub fn from_record(text: &str) -> Option<UpstreamSession> {
        serde_json::from_str(text).ok()
    }
}

impl HttpUpstream {
    /// An upstream linked to `session`, which the server opened for another proxy: nothing is
    /// initialized, and requests wait for the GET stream, opened by [`HttpUpstream::listen`]
    /// once its events reach the session. `None` when `session` cannot be sent as headers.
    pub fn resume(
        spec: &HttpSpec,
        client: HttpClient,
        connections: Arc<ConnectionPool>,
        events: EventSink,
        credential: Credential,
        modern: Option<ModernHttpBuilder>,
        session: &UpstreamSession,
    ) -> Option<Self> {
        let id = HeaderValue::from_str(&session.id).ok()?;
        let version = match &session.version {
            Some(version) => Some(HeaderValue::from_str(version).ok()?),
            None => None,
        };
        let upstream = HttpUpstream::start(spec, client, connections, events, credential, modern);
        *upstream.inner.lock() = Link {
            session: Some(id),
            protocol_version: version,
            generation: 1,
            listening: 0,
        };
        upstream.inner.stream_settled.send_replace(false);
        Some(upstream)
    }

    /// Opens the GET stream of a resumed upstream session (see [`HttpUpstream::resume`]).
    pub fn listen(&self) {
        let generation = self.inner.lock().generation;
        tokio::spawn(self.inner.clone().listen(generation).in_current_span());
    }

    /// The upstream session, while there is one (none while the server has forgotten it, nor
    /// once a 2026-07-28 successor took over).
    pub fn upstream_session(&self) -> Option<UpstreamSession> {
        if self.inner.successor.get().is_some() || self.inner.released.is_cancelled() {
            return None;
        }
        let link = self.inner.lock();
        let id = link.session.as_ref()?.to_str().ok()?.to_owned();
        let version = link
            .protocol_version
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Some(UpstreamSession { id, version })
    }

    /// Lets the upstream session go without ending it (no DELETE): another replica goes on in
    /// it. Its GET stream stops. Idempotent.
    pub fn detach(&self) {
        self.let_go();
    }
}
