//! The state as the shared store holds it: an owned session's record, mirrored for the other
//! replicas and written again after an outage; a view's copy of a session another replica
//! owns, filled from the shared log and from what hops hand back; a session adopted from a
//! replica that died, its record and log taken as the new owner's.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::time::Instant;

use super::State;
use crate::base::ids::Principal;
use crate::session::data_layer::Layer;
use crate::session::log::Logged;
use crate::session::replica::server_side;
use crate::session::routing;
use crate::store::{Fence, Op, Record};
use crate::wire::jsonrpc::Message;

/// An owned session's record.
impl State {
    /// This owner's hold on the session in the shared store (none with the memory store, or
    /// for a view).
    pub(in crate::session) fn fence(&self) -> Option<Arc<Fence>> {
        let mirror = self.replica.mirror.as_deref();
        mirror.map(|mirror| mirror.fence().clone())
    }

    /// The key of the set of its principal's sessions this owned session counts in, if any.
    pub(in crate::session) fn counted_in(&self) -> Option<Arc<str>> {
        let mirror = self.replica.mirror.as_deref();
        mirror.and_then(|mirror| mirror.counted_in().cloned())
    }

    /// The session of `principal` as its record in the shared store describes it, its server
    /// keeping `upstream_session` for it.
    pub(in crate::session) fn record(
        &self,
        principal: &Principal,
        upstream_session: Option<String>,
    ) -> Record {
        Record {
            principal: principal.as_str().to_owned(),
            shape: self.shape.name().into(),
            numbered: self.numbered,
            version: self.protocol_version.clone(),
            init: self.init.clone(),
            subs: serde_json::to_string(&self.subscriptions.uris).ok(),
            next_stream: self.next_stream,
            evicted: self.log.evicted_floor(),
            upstream_ids: self.calls.reserved_ids,
            layer: self.layer.as_ref().map(|layer| layer.to_record()),
            upstream_session,
            lists: Some(server_side::lists_to_record(
                &self.subscriptions.changeable_lists,
            )),
            ..Record::default()
        }
    }

    /// Writes the whole session to the shared store again (after a Redis outage, which a
    /// restarted Redis may have forgotten it in, or a failover, whose new master may lack what
    /// the old one took): `record`, retained log (in place of what the store holds of it: a
    /// new master may hold later entries without earlier ones), requests in flight.
    pub(in crate::session) fn rewrite_to_store(&self, record: Record) {
        if !self.replica.shared() {
            return;
        }
        self.mirror(|| Op::Create(Box::new(record)));
        self.mirror(|| Op::ClearLog);
        for logged in self.log.entries() {
            self.mirror(|| Op::Append(logged));
        }
        let clients = self
            .calls
            .inflight
            .values()
            .filter(|r| r.internal.is_none());
        for request in clients {
            self.mirror(|| Op::Inflight {
                stream: request.stream,
                client_id: request.client_id.to_string(),
            });
        }
    }

    /// Records a new session of `principal` in the shared store, bound to `upstream` (for
    /// operators).
    pub(in crate::session) fn record_created(&self, principal: &Principal, upstream: String) {
        self.mirror(|| {
            Op::Create(Box::new(Record {
                principal: principal.as_str().to_owned(),
                shape: self.shape.name().into(),
                next_stream: 1,
                upstream: Some(upstream),
                ..Record::default()
            }))
        });
    }
}

/// A view.
impl State {
    /// Makes this new session's state a view of the session `record` describes, subscribed to
    /// `subscriptions`; its log is filled with `absorb`.
    pub(in crate::session) fn become_view(
        &mut self,
        record: &Record,
        subscriptions: BTreeSet<String>,
    ) {
        self.replica.view = true;
        self.numbered = record.numbered;
        self.protocol_version = record.version.clone();
        self.next_stream = record.next_stream.max(1);
        self.layer = record
            .layer
            .as_deref()
            .and_then(Layer::from_record)
            .map(Box::new);
        // What the client said at `initialize`: a session it names in messages here is
        // initialized with the same.
        self.init = record.init.clone();
        self.log.assume_evicted_through(record.evicted);
        self.subscriptions.uris = subscriptions;
    }

    /// Files in a view's log what the owner logged (progress coalesced as `coalesce_progress`
    /// says, where the entry does not say); whether anything was new.
    pub(in crate::session) fn absorb(
        &mut self,
        logged: Vec<Logged>,
        coalesce_progress: bool,
    ) -> bool {
        let now = Instant::now();
        let mut new = false;
        for entry in logged {
            let coalesce = entry.coalesce.or_else(|| {
                let message = Message::parse_from_server(entry.payload.clone()).ok()?;
                routing::file(&message, coalesce_progress).coalesce
            });
            new |= self.log.insert_logged(
                entry.seq,
                entry.stream,
                entry.payload,
                entry.terminal,
                coalesce,
                now,
            );
        }
        new
    }

    /// Notes that the shared log was read through `logged`: a view follows it from the newest
    /// of it on.
    pub(in crate::session) fn followed(&mut self, logged: &[Logged]) {
        if let Some(last) = logged.iter().map(|entry| entry.seq).max() {
            self.replica.followed_through = self.replica.followed_through.max(last);
        }
    }
}

/// A session adopted from a replica that died.
impl State {
    /// Takes over a session another replica owned, from what the shared store holds: its
    /// record, its subscriptions and its log; its server keeps `upstream_session` for it now
    /// (the same, or none: a new one to come). The caller then re-initializes the new upstream
    /// (`reinitialize`) unless it goes on in the server's session, and closes the gap
    /// (`close_gap`).
    pub(in crate::session) fn adopt(
        &mut self,
        record: &Record,
        subscriptions: BTreeSet<String>,
        logged: Vec<Logged>,
        upstream_session: Option<String>,
    ) {
        self.numbered = record.numbered;
        self.protocol_version = record.version.clone();
        self.subscriptions.changeable_lists =
            server_side::lists_from_record(record.lists.as_deref());
        self.next_stream = record.next_stream.max(1);
        // Past every id the old owners may have sent; the first request reserves more.
        self.calls.next_upstream_id = record.upstream_ids.max(1);
        self.calls.reserved_ids = self.calls.next_upstream_id;
        self.init = record.init.clone();
        self.layer = record
            .layer
            .as_deref()
            .and_then(Layer::from_record)
            .map(Box::new);
        self.subscriptions.uris = subscriptions;
        self.log.assume_evicted_through(record.evicted);
        let now = Instant::now();
        for entry in logged {
            self.log.insert_logged(
                entry.seq,
                entry.stream,
                entry.payload,
                entry.terminal,
                entry.coalesce,
                now,
            );
        }
        self.log.start_new_epoch();
        let mut record = record.clone();
        record.owner = String::new(); // the store writes this replica's name
        record.upstream_session = upstream_session; // the same, or none: a new one to come
        record.subs = serde_json::to_string(&self.subscriptions.uris).ok();
        self.mirror(|| Op::Create(Box::new(record)));
    }
}
