//! Client requests the server has not answered yet: where each answer goes, what it waits for
//! and until when, and the session's part of its state that keeps them.

use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;
use tokio::time::Instant;

use super::list_cache::Ticket;
use crate::base::lazy_map::LazyMap;
use crate::telemetry::spans::Span;
use crate::upstream::UpstreamError;

/// The requests of the server a session remembers awaiting the client's answer: a server that
/// asks more while none is answered cannot grow a session without bound.
pub(super) const MAX_ASKED: usize = 256;

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

impl Calls {
    /// Takes the request answered under `upstream_id` out of flight, with its progress token
    /// and the server's requests it caused.
    pub(super) fn finish(&mut self, upstream_id: u64) -> Option<Inflight> {
        let request = self.inflight.remove(&upstream_id)?;
        if let Some(token) = &request.progress_token {
            self.progress.remove(token);
        }
        if !self.asked.is_empty() {
            self.asked.retain(|_, stream| *stream != request.stream);
        }
        Some(request)
    }

    /// The upstream id of the next request, and with a `shared` store the new end of the ids
    /// reserved there when the last block is used up (then reserved `block` ahead).
    pub(super) fn take_upstream_id(&mut self, shared: bool, block: u64) -> (u64, Option<u64>) {
        let id = self.next_upstream_id;
        self.next_upstream_id += 1;
        if id >= self.reserved_ids && shared {
            self.reserved_ids = id + block;
            return (id, Some(self.reserved_ids));
        }
        (id, None)
    }

    /// Whether a request on request stream `stream` is in flight.
    pub(super) fn serves(&self, stream: u64) -> bool {
        self.inflight.values().any(|r| r.stream == stream)
    }

    /// The server spoke of the request on request stream `stream`: it fails at `deadline`, or
    /// (`None`) waits while the client owes the server an answer (then it is no longer held
    /// for a 2026-07-28 client's input).
    pub(super) fn heard_of(&mut self, stream: u64, deadline: Option<Instant>) {
        if let Some(request) = self.inflight.values_mut().find(|r| r.stream == stream) {
            request.held_for_input &= deadline.is_none();
            request.deadline = deadline;
        }
    }

    /// How many requests are in flight, not counting calls held for a 2026-07-28 client's
    /// input: that client may not come back before the stop.
    pub(super) fn awaiting_server(&self) -> usize {
        let held = |request: &&Inflight| request.held_for_input;
        self.inflight.values().filter(|r| !held(r)).count()
    }

    /// Whether the deadline sweep should look at this session again (it has requests in
    /// flight); if not, it is off the list until its next request.
    pub(super) fn still_busy(&mut self) -> bool {
        self.listed = !self.inflight.is_empty();
        self.listed
    }

    /// The request stream of the newest client request in flight (not the proxy's own).
    pub(super) fn newest_clients(&self) -> Option<u64> {
        self.inflight
            .values()
            .filter(|r| r.internal.is_none())
            .map(|r| r.stream)
            .max()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(calls: &mut Calls, upstream_id: u64, stream: u64, gauge: &Gauge) {
        let request = Inflight {
            client_id: Value::from(stream),
            stream,
            method: "tools/call".into(),
            progress_token: Some(format!("token-{stream}")),
            ticket: None,
            internal: None,
            deadline: None,
            held_for_input: true,
            sent: Instant::now(),
            span: None,
            _counted: Counted::new(gauge),
        };
        calls.progress.insert(format!("token-{stream}"), stream);
        calls.inflight.insert(upstream_id, request);
    }

    #[test]
    fn a_finished_request_takes_its_progress_token_and_the_questions_it_caused_along() {
        let gauge = Gauge::default();
        let mut calls = Calls::default();
        request(&mut calls, 10, 1, &gauge);
        request(&mut calls, 11, 2, &gauge);
        calls.asked.insert("q1".into(), 1);
        calls.asked.insert("q2".into(), 2);
        assert_eq!(gauge.get(), 2);
        let finished = calls.finish(10).expect("in flight");
        assert_eq!(finished.stream, 1);
        drop(finished);
        assert_eq!(gauge.get(), 1, "counted while it lives");
        assert!(calls.finish(10).is_none(), "once");
        assert!(!calls.serves(1) && calls.serves(2));
        assert_eq!(calls.progress.keys().collect::<Vec<_>>(), ["token-2"]);
        assert_eq!(calls.asked.keys().collect::<Vec<_>>(), ["q2"]);
    }

    #[test]
    fn upstream_ids_are_reserved_a_block_ahead_only_with_a_shared_store() {
        let mut alone = Calls::default();
        assert_eq!(alone.take_upstream_id(false, 4), (1, None));
        let mut shared = Calls::default();
        let taken: Vec<_> = (0..6).map(|_| shared.take_upstream_id(true, 4)).collect();
        assert_eq!(
            taken,
            [
                (1, Some(5)),
                (2, None),
                (3, None),
                (4, None),
                (5, Some(9)),
                (6, None)
            ]
        );
    }

    #[test]
    fn the_newest_clients_request_is_the_one_news_of_the_server_belongs_to() {
        let gauge = Gauge::default();
        let mut calls = Calls::default();
        assert_eq!(calls.newest_clients(), None);
        request(&mut calls, 1, 3, &gauge);
        request(&mut calls, 2, 5, &gauge);
        let (sender, _receiver) = tokio::sync::oneshot::channel();
        calls.inflight.get_mut(&2).unwrap().internal = Some(sender);
        assert_eq!(calls.newest_clients(), Some(3), "not the proxy's own");
    }

    #[test]
    fn news_of_a_request_sets_its_deadline_and_a_question_pauses_it() {
        let gauge = Gauge::default();
        let mut calls = Calls::default();
        request(&mut calls, 1, 1, &gauge);
        let at = Instant::now();
        calls.heard_of(1, Some(at));
        let request = &calls.inflight.get(&1).unwrap();
        assert_eq!(request.deadline, Some(at));
        assert!(!request.held_for_input, "spoken of again: no longer held");
        calls.heard_of(1, None);
        assert_eq!(calls.inflight.get(&1).unwrap().deadline, None);
    }
}
