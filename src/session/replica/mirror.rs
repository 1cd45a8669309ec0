//! An owned session's record and log, mirrored to the shared store for the other replicas.

use tracing::warn;

use std::sync::Arc;

use super::server_side;
use crate::session::{Session, STORE_PATIENCE};
use crate::store::{Fence, Op, Record};

impl Session {
    /// This owner's hold on the session in the shared store (none with the memory store, or
    /// for a view).
    pub(in crate::session) fn fence(&self) -> Option<Arc<Fence>> {
        let state = self.lock();
        state
            .replica
            .mirror
            .as_deref()
            .map(|mirror| mirror.fence().clone())
    }

    /// The key of the set of its principal's sessions this owned session counts in, if any.
    pub(in crate::session) fn counted_in(&self) -> Option<Arc<str>> {
        let state = self.lock();
        state
            .replica
            .mirror
            .as_deref()
            .and_then(|mirror| mirror.counted_in().cloned())
    }

    /// Waits (bounded) until the shared store holds everything this session wrote so far: a
    /// client told of the session (its id, the answer to initialize) may ask any replica next.
    pub async fn store_synced(&self) {
        let mirror = self.lock().replica.mirror.as_deref().cloned();
        if let Some(mirror) = mirror {
            if !mirror.synced(STORE_PATIENCE).await {
                self.span().in_scope(|| {
                    warn!("the session could not be written to the shared store in time; other replicas find it through its id")
                });
            }
        }
    }

    /// The session as its record in the shared store describes it.
    pub(crate) fn record(&self) -> Record {
        let upstream_session = self.upstream_session_record();
        let state = self.lock();
        Record {
            principal: self.principal.as_str().to_owned(),
            shape: state.shape.name().into(),
            numbered: state.numbered,
            version: state.protocol_version.clone(),
            init: state.init.clone(),
            subs: serde_json::to_string(&state.subscriptions.uris).ok(),
            next_stream: state.next_stream,
            evicted: state.log.evicted_floor(),
            upstream_ids: state.calls.reserved_ids,
            layer: state.layer.as_ref().map(|layer| layer.to_record()),
            upstream_session,
            lists: Some(server_side::lists_to_record(
                &state.subscriptions.changeable_lists,
            )),
            ..Record::default()
        }
    }

    /// Writes the whole session to the shared store again (after a Redis outage, which a
    /// restarted Redis may have forgotten it in, or a failover, whose new master may lack what
    /// the old one took): record, retained log (in place of what the store holds of it: a
    /// new master may hold later entries without earlier ones), requests in flight.
    pub(in crate::session) fn rewrite_to_store(&self) {
        let record = self.record();
        let state = self.lock();
        if !state.replica.shared() {
            return;
        }
        state.mirror(|| Op::Create(Box::new(record)));
        state.mirror(|| Op::ClearLog);
        for logged in state.log.entries() {
            state.mirror(|| Op::Append(logged));
        }
        for request in state
            .calls
            .inflight
            .values()
            .filter(|r| r.internal.is_none())
        {
            state.mirror(|| Op::Inflight {
                stream: request.stream,
                client_id: request.client_id.to_string(),
            });
        }
    }

    /// Records a new session in the shared store, bound to `upstream` (for operators).
    pub(in crate::session) fn record_created(&self, upstream: String) {
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

    /// Tells the shared store the session is alive (its keys' TTLs start again).
    pub(in crate::session) fn touch_store(&self) {
        self.lock().mirror(|| Op::Touch);
    }
}
