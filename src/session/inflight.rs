//! A client request the server has not answered yet: where its answer goes, what it waits for
//! and until when.

use serde_json::Value;
use tokio::time::Instant;

use super::list_cache::Ticket;
use crate::spans::Span;
use crate::upstream::UpstreamError;

/// A client request the upstream has not answered yet, keyed by the upstream id.
#[derive(Debug)]
pub(super) struct Inflight {
    pub(super) client_id: Value,
    pub(super) stream: u64,
    pub(super) method: String,
    pub(super) progress_token: Option<String>,
    /// Where a cacheable list answer goes.
    pub(super) ticket: Option<Ticket>,
    /// A request of the proxy's own (re-initializing a new upstream): its answer is not
    /// logged, only reported here.
    pub(super) internal: Option<tokio::sync::oneshot::Sender<Result<(), UpstreamError>>>,
    /// When it fails for want of an answer; `None` while the client owes the server an answer
    /// to a request of the server's that this one caused.
    pub(super) deadline: Option<Instant>,
    /// Held for a 2026-07-28 client's input: its client may not come back before a stop.
    pub(super) held_for_input: bool,
    /// When it went to the server (`mcp_proxy_upstream_duration_seconds`).
    pub(super) sent: Instant,
    /// The span of the exchange with the server (tracing on): ends with the answer.
    pub(super) span: Option<Span>,
}
