//! The mutable state of a session, under its one lock: the log and its streams, and one part
//! for each job, owned by the file that does it (calls in flight, readers, subscriptions, the
//! replica's copy); what moves a request between them is here.

use std::time::Duration;

use tokio::time::Instant;

use super::inflight::{Calls, Inflight};
use super::log::{EventLog, StreamKey, Window};
use super::reading::Reading;
use super::replica::{server_side, Replicated};
use super::subscriptions::Subscriptions;
use super::{Shape, SubscriptionRefused};
use crate::store::{Mirror, Op};

mod record;

/// Upstream request ids reserved in the shared store at a time: it is written once per so many
/// requests to the server.
const UPSTREAM_ID_BLOCK: u64 = 1024;

/// What the one lock of a session guards, in parts owned by the files that do each job.
#[derive(Debug)]
pub(super) struct State {
    pub(super) shape: Shape,
    pub(super) log: EventLog,
    pub(super) next_stream: u64,
    /// Requests in flight (`inflight`).
    pub(super) calls: Calls,
    /// Who reads which stream (`readers`).
    pub(super) reading: Reading,
    /// Subscriptions and the lists the server may change (`subscriptions`).
    pub(super) subscriptions: Subscriptions,
    /// Its record and log in the shared store, or its owner's (`replica`).
    pub(super) replica: Replicated,
    pub(super) protocol_version: Option<String>,
    /// A protocol-level session (`session/start`): its notifications carry `sessionEventId`.
    pub(super) numbered: bool,
    /// Its server exited: why, until it is started again (`revival`).
    pub(super) upstream_failure: Option<Box<super::revival::Exited>>,
    pub(super) last_active: Instant,
    /// The client's `initialize` params: a new or forgetful upstream is initialized with them.
    pub(super) init: Option<String>,
    /// A session named in messages (a data-layer session or a state handle, `layer`).
    pub(super) layer: Option<Box<super::data_layer::Layer>>,
}

impl State {
    pub(super) fn new(shape: Shape, window: Window, mirror: Option<Mirror>) -> State {
        State {
            shape,
            log: EventLog::new(window),
            next_stream: 1,
            calls: Calls::default(),
            reading: Reading::default(),
            subscriptions: Subscriptions::default(),
            replica: Replicated {
                mirror: mirror.map(Box::new),
                ..Replicated::default()
            },
            protocol_version: None,
            numbered: false,
            upstream_failure: None,
            last_active: Instant::now(),
            init: None,
            layer: None,
        }
    }

    /// When the session may next be over, seen at `now`: `None` if it is over now (idle for
    /// `idle_ttl`, or for a session named in messages its own TTL, or past its lifetime). A
    /// session in use (a stream attached, a request in flight) is looked at again after
    /// `in_use`.
    pub(super) fn next_expiry(
        &self,
        now: Instant,
        idle_ttl: Duration,
        in_use: Duration,
    ) -> Option<Instant> {
        let (idle_ttl, lifetime) = match &self.layer {
            None => (idle_ttl, None),
            Some(layer) => (layer.idle_ttl, Some(layer.deadline)),
        };
        let idle_until = match self.unused() {
            true => crate::base::clock::deadline(self.last_active, idle_ttl),
            false => crate::base::clock::deadline(now, in_use),
        };
        let next = lifetime.map_or(idle_until, |end| end.min(idle_until));
        (next > now).then_some(next)
    }

    /// No stream attached, nothing in flight.
    pub(super) fn unused(&self) -> bool {
        self.reading.unread() && self.calls.inflight.is_empty()
    }

    /// Takes a request out of flight, with its progress token.
    pub(super) fn finish(&mut self, upstream_id: u64) -> Option<Inflight> {
        let request = self.calls.finish(upstream_id)?;
        self.mirror(|| Op::Answered {
            stream: request.stream,
        });
        Some(request)
    }

    /// The upstream id of the next request to the server. With a shared store the ids are
    /// reserved there ahead, a block at a time (the record's `upstream_ids`): a replica that
    /// takes the session over and goes on in the server's session sends none the server has
    /// seen in it (MCP: an id is never used twice in a session).
    pub(super) fn take_upstream_id(&mut self) -> u64 {
        let shared = self.replica.shared();
        let (id, reserved) = self.calls.take_upstream_id(shared, UPSTREAM_ID_BLOCK);
        if let Some(reserved) = reserved {
            self.mirror(|| Op::Field {
                name: "upstream_ids",
                value: reserved.to_string(),
            });
        }
        id
    }

    /// Records an op in the shared store, if there is one (built only then).
    pub(super) fn mirror(&self, op: impl FnOnce() -> Op) {
        self.replica.record(op);
    }

    /// Writes to the shared store which session the server keeps for this one now (`record`,
    /// read only when there is a store; none clears it): after `initialize`, and when the
    /// server forgot it.
    pub(super) fn mirror_upstream_session(&self, record: impl FnOnce() -> Option<String>) {
        self.mirror(|| Op::Field {
            name: "upstream_session",
            value: record().unwrap_or_default(),
        });
    }

    /// Writes the lists the server said it may change to the shared store.
    pub(super) fn mirror_lists(&self) {
        self.mirror(|| Op::Field {
            name: "lists",
            value: server_side::lists_to_record(&self.subscriptions.changeable_lists),
        });
    }

    /// Records a subscription to `uri` and writes it to the store, unless the session already
    /// holds `limit` others or `MAX_SUBSCRIPTION_BYTES` of URIs (one it holds is no new one).
    pub(super) fn subscribe(&mut self, uri: &str, limit: usize) -> Result<(), SubscriptionRefused> {
        if self.subscriptions.add(uri, limit)? {
            self.mirror(|| Op::Subscribed {
                uri: uri.to_owned(),
            });
        }
        Ok(())
    }

    /// Forgets a subscription to `uri`, in the store too.
    pub(super) fn unsubscribe(&mut self, uri: &str) {
        if self.subscriptions.uris.remove(uri) {
            self.mirror(|| Op::Unsubscribed {
                uri: uri.to_owned(),
            });
        }
    }

    /// Where the messages of the session's n-th request go.
    pub(super) fn stream_of(&self, n: u64) -> StreamKey {
        match self.shape {
            Shape::Streams => StreamKey::Request(n),
            Shape::SingleStream => StreamKey::Standalone,
        }
    }

    pub(super) fn is_open(&self, stream: u64) -> bool {
        match self.replica.view {
            true => !self.log.holds_end_of(StreamKey::Request(stream)),
            false => self.calls.serves(stream),
        }
    }

    /// The server spoke of the request on request stream `stream`: its wait starts again, or
    /// pauses while the client owes the server an answer.
    pub(super) fn heard_of(&mut self, stream: u64, timeout: Duration, awaiting_client: bool) {
        let deadline = (!awaiting_client).then(|| crate::base::clock::from_now(timeout));
        self.calls.heard_of(stream, deadline);
    }

    /// The most recent client request still in flight (SEP-2260: the request that caused a
    /// server request or log message): its messages go on its stream, else on the standalone.
    pub(super) fn related_request(&self) -> Option<u64> {
        self.calls.newest_clients()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::Backlog;

    /// The `upstream_ids` values written, in order.
    fn reserved(
        written: &mut tokio::sync::mpsc::UnboundedReceiver<crate::store::Queued>,
    ) -> Vec<String> {
        let mut values = Vec::new();
        while let Ok(queued) = written.try_recv() {
            if let Op::Field {
                name: "upstream_ids",
                value,
            } = queued.op
            {
                values.push(value);
            }
        }
        values
    }

    #[test]
    fn upstream_ids_are_reserved_in_the_store_a_block_at_a_time() {
        let (ops, mut written) = tokio::sync::mpsc::unbounded_channel();
        let fence = crate::store::Fence::new(crate::store::FIRST_EPOCH, 0);
        let backlog = Arc::new(Backlog::new(10, None));
        let mirror = Mirror::new("default", "s", None, fence, ops, backlog);
        let mut state = State::new(Shape::Streams, Window::default(), Some(mirror));
        let ids: Vec<u64> = (0..UPSTREAM_ID_BLOCK + 1)
            .map(|_| state.take_upstream_id())
            .collect();
        assert_eq!(ids.first(), Some(&1));
        assert_eq!(ids.last(), Some(&(UPSTREAM_ID_BLOCK + 1)));
        assert_eq!(
            reserved(&mut written),
            [1 + UPSTREAM_ID_BLOCK, 1 + 2 * UPSTREAM_ID_BLOCK].map(|n| n.to_string()),
            "written when the first id is taken and when the block runs out"
        );

        // A new owner starts past the ids reserved (`adopt`), and reserves more at once.
        let (ops, mut written) = tokio::sync::mpsc::unbounded_channel();
        let fence = crate::store::Fence::new(crate::store::FIRST_EPOCH, 0);
        let backlog = Arc::new(Backlog::new(10, None));
        let mirror = Mirror::new("default", "s", None, fence, ops, backlog);
        let mut taken = State::new(Shape::Streams, Window::default(), Some(mirror));
        taken.calls.next_upstream_id = 1 + 2 * UPSTREAM_ID_BLOCK;
        taken.calls.reserved_ids = taken.calls.next_upstream_id;
        assert_eq!(taken.take_upstream_id(), 1 + 2 * UPSTREAM_ID_BLOCK);
        assert_eq!(
            reserved(&mut written),
            [(1 + 3 * UPSTREAM_ID_BLOCK).to_string()]
        );

        let mut alone = State::new(Shape::Streams, Window::default(), None);
        assert_eq!(alone.take_upstream_id(), 1);
        assert_eq!(
            alone.calls.reserved_ids, 0,
            "nothing to reserve without a store"
        );
    }
}
