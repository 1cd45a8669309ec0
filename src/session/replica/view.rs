//! A view: this replica's copy of a session another replica owns. Client messages go to the
//! owner over the hop; its log is filled from the shared log and from what hops hand back.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::base::ids::Principal;
use crate::session::layer::Layer;
use crate::session::log::{Logged, StreamKey};
use crate::session::Reach;
use crate::session::{routing, Session, SessionSettings, Shape};
use crate::store::Record;
use crate::telemetry::metrics::ServerMetrics;
use crate::upstream::credential::Credential;
use crate::wire::jsonrpc::Message;

impl Session {
    /// A view of a session another replica owns, as its record describes it, subscribed to
    /// `subscriptions`; its log is filled with `absorb`.
    pub(in crate::session) fn view(
        id: String,
        principal: Principal,
        record: &Record,
        subscriptions: BTreeSet<String>,
        owner: crate::upstream::owner::OwnerLink,
        settings: Arc<SessionSettings>,
        metrics: Arc<ServerMetrics>,
    ) -> Arc<Session> {
        let shape = match record.shape.as_str() {
            "single" => Shape::SingleStream,
            _ => Shape::Streams,
        };
        let session = Session::new(
            id.into(),
            principal,
            shape,
            Reach::Owner(owner),
            None,
            Arc::default(),
            settings,
            metrics,
            None,
            Credential::default(),
            Arc::default(),
        );
        {
            let mut state = session.lock();
            state.replica.view = true;
            state.numbered = record.numbered;
            state.protocol_version = record.version.clone();
            state.next_stream = record.next_stream.max(1);
            state.layer = record
                .layer
                .as_deref()
                .and_then(Layer::from_record)
                .map(Box::new);
            // What the client said at `initialize`: a session it names in messages here is
            // initialized with the same.
            state.init = record.init.clone();
            state.log.assume_evicted_through(record.evicted);
            state.subscriptions.uris = subscriptions;
        }
        session
    }

    /// Files in a view's log what was read from the shared log, which is then followed from
    /// the newest of it on.
    pub(in crate::session) fn absorb_followed(&self, logged: Vec<Logged>) {
        if let Some(last) = logged.iter().map(|entry| entry.seq).max() {
            let mut state = self.lock();
            state.replica.followed_through = state.replica.followed_through.max(last);
        }
        self.absorb(logged);
    }

    /// Where a view follows the shared log from: after what it read there, not after what
    /// came with hops (a request's answer may come that way before the messages logged ahead
    /// of it come through the shared log).
    pub(in crate::session) fn followed_through(&self) -> u64 {
        self.lock().replica.followed_through
    }

    /// Files in a view's log what the owner logged.
    pub(in crate::session) fn absorb(&self, logged: Vec<Logged>) {
        let mut state = self.lock();
        let now = Instant::now();
        let mut newest = None;
        for entry in logged {
            let seq = entry.seq;
            let coalesce = entry.coalesce.or_else(|| {
                let message = Message::parse_from_server(entry.payload.clone()).ok()?;
                routing::file(&message, self.settings.coalesce_progress).coalesce
            });
            if state.log.insert_logged(
                seq,
                entry.stream,
                entry.payload,
                entry.terminal,
                coalesce,
                now,
            ) {
                newest = Some(seq);
            }
        }
        if newest.is_some() {
            self.changes.notify_waiters();
        }
    }

    pub(in crate::session) fn readers_signal(&self) -> Arc<tokio::sync::Notify> {
        self.readers.clone()
    }

    /// The position of the newest message in this session's log.
    pub(crate) fn head(&self) -> u64 {
        self.lock().log.head()
    }

    /// The link to the owner, for a view.
    pub(crate) fn owner(&self) -> Option<&crate::upstream::owner::OwnerLink> {
        self.upstream.owner()
    }

    /// Clients read `streams` through another replica's view for `lease` from now (renewed while
    /// they do): the session is in use, and those streams get every message as it comes, as if
    /// read here. Returns the newest position.
    pub(crate) fn read_elsewhere(&self, streams: &[StreamKey], lease: Duration) -> u64 {
        let mut state = self.lock();
        let now = Instant::now();
        state.last_active = now;
        state.reading.read_elsewhere(streams, now, lease);
        state.log.head()
    }

    /// True the first time it is asked: the caller starts the task following a view's log.
    pub(in crate::session) fn claim_following(&self) -> bool {
        !self
            .following
            .swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    /// This replica took the session over: the view ends, and its readers read on in
    /// `successor` from where they were (the log positions are the shared log's).
    pub(in crate::session) fn succeeded_by(&self, successor: &Arc<Session>) {
        let _ = self.successor.set(successor.clone());
        self.end();
    }

    /// The credential of the newest request that reached this view.
    pub(crate) fn credential(&self) -> Option<http::HeaderValue> {
        self.credential.current()
    }

    /// The session this view's readers read on in, once it ended.
    pub(in crate::session) fn successor(&self) -> Option<Arc<Session>> {
        self.successor.get().cloned()
    }
}
