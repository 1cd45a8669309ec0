//! Client requests the server has not answered yet: where each answer goes, what it waits for
//! and until when, and the session's part of its state that keeps them.

use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;
use tokio::time::Instant;

use super::lazy_map::LazyMap;
use super::list_cache::Ticket;
use crate::telemetry::spans::Span;
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
    /// Counted in `mcp_proxy_requests_inflight` while it is kept.
    pub(super) _counted: Counted,
}

/// One request counted in a gauge for as long as it lives, however it ends (answered, timed
/// out, failed with its server, dropped with its session).
#[derive(Debug)]
pub(super) struct Counted(Gauge);

impl Counted {
    pub(super) fn new(gauge: &Gauge) -> Counted {
        gauge.inc();
        Counted(gauge.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The requests in flight: the session's state of its calls.
#[derive(Debug)]
pub(super) struct Calls {
    pub(super) next_upstream_id: u64,
    /// With a shared store: the ids below this one are reserved there (`State::take_upstream_id`).
    pub(super) reserved_ids: u64,
    pub(super) inflight: LazyMap<u64, Inflight>,
    /// Client requests given up before their server answered (cancelled, or past the request
    /// timeout): the server may still be working on them.
    pub(super) abandoned: u64,
    /// Progress tokens (key form) → the request stream of the request that named them.
    pub(super) progress: LazyMap<String, u64>,
    /// Requests of the server awaiting the client's answer: their id (key form) → the request
    /// stream of the client request that caused them.
    pub(super) asked: LazyMap<String, u64>,
    /// On the deadline sweep's list of busy sessions (`expiry`).
    pub(super) listed: bool,
}

impl Default for Calls {
    fn default() -> Calls {
        Calls {
            next_upstream_id: 1,
            reserved_ids: 0,
            inflight: LazyMap::new(),
            abandoned: 0,
            progress: LazyMap::new(),
            asked: LazyMap::new(),
            listed: false,
        }
    }
}
