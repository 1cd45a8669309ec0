//! The mutable state of a session, under its one lock: the log, the requests in flight, the
//! attached readers, what the server announced and what the session mirrors to the store.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::inflight::Inflight;
use super::log::{EventLog, StreamKey};
use super::{Shape, SubscriptionRefused, MAX_SUBSCRIPTION_BYTES};
use crate::jsonrpc;
use crate::store::{Mirror, Op};
use crate::upstream::UpstreamError;

#[derive(Debug)]
pub(super) struct Attachment {
    pub(super) generation: u64,
    pub(super) detached: CancellationToken,
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) shape: Shape,
    pub(super) log: EventLog,
    pub(super) next_stream: u64,
    pub(super) next_upstream_id: u64,
    pub(super) inflight: HashMap<u64, Inflight>,
    /// Client requests given up before their server answered (cancelled, or past the request
    /// timeout): the server may still be working on them.
    pub(super) abandoned: u64,
    pub(super) progress: HashMap<String, u64>,
    /// Requests of the server awaiting the client's answer: their id (key form) → the request
    /// stream of the client request that caused them.
    pub(super) asked: HashMap<String, u64>,
    pub(super) attachments: HashMap<StreamKey, Attachment>,
    /// Streams clients read through other replicas' views, until when (renewed while read):
    /// like an attached reader, they get every message as it comes.
    pub(super) remote_readers: HashMap<StreamKey, Instant>,
    /// Readers of the session's own messages beside the attached one (`Session::tap`).
    pub(super) taps: usize,
    pub(super) next_generation: u64,
    pub(super) subscriptions: BTreeSet<String>,
    /// The `list_changed` notifications the server announced it may send.
    pub(super) changeable_lists: Vec<&'static str>,
    pub(super) protocol_version: Option<String>,
    /// A protocol-level session (`session/start`): its notifications carry `sessionEventId`.
    pub(super) numbered: bool,
    pub(super) upstream_failure: Option<UpstreamError>,
    pub(super) last_active: Instant,
    /// Where the session records itself for other replicas (a shared store only).
    pub(super) mirror: Option<Mirror>,
    /// Another replica owns the session; this log is a copy of the shared one.
    pub(super) view: bool,
    /// A view: the newest position its owner reported (this copy may not have it yet).
    pub(super) owner_head: u64,
    /// A view: how far the shared log has been read (what came with hops may be further).
    pub(super) followed_through: u64,
    /// The client's `initialize` params: a new or forgetful upstream is initialized with them.
    pub(super) init: Option<String>,
    /// A session named in messages (a data-layer session or a state handle).
    pub(super) layer: Option<super::layer::Layer>,
}

impl State {
    /// Takes a request out of flight, with its progress token.
    pub(super) fn finish(&mut self, upstream_id: u64) -> Option<Inflight> {
        let request = self.inflight.remove(&upstream_id)?;
        if let Some(token) = &request.progress_token {
            self.progress.remove(token);
        }
        if !self.asked.is_empty() {
            self.asked.retain(|_, stream| *stream != request.stream);
        }
        self.mirror(|| Op::Answered {
            stream: request.stream,
        });
        Some(request)
    }

    /// Records an op in the shared store, if there is one (built only then).
    pub(super) fn mirror(&self, op: impl FnOnce() -> Op) {
        if let Some(mirror) = &self.mirror {
            mirror.send(op());
        }
    }

    /// Records a subscription to `uri` and writes it to the store, unless the session already
    /// holds `limit` others or `MAX_SUBSCRIPTION_BYTES` of URIs (one it holds is no new one).
    pub(super) fn subscribe(&mut self, uri: &str, limit: usize) -> Result<(), SubscriptionRefused> {
        if self.subscriptions.contains(uri) {
            return Ok(());
        }
        if self.subscriptions.len() >= limit {
            return Err(SubscriptionRefused::TooMany(limit));
        }
        let bytes: usize = self.subscriptions.iter().map(String::len).sum();
        if bytes + uri.len() > MAX_SUBSCRIPTION_BYTES {
            return Err(SubscriptionRefused::TooLarge(MAX_SUBSCRIPTION_BYTES));
        }
        self.subscriptions.insert(uri.to_owned());
        self.mirror(|| Op::Subscribed {
            uri: uri.to_owned(),
        });
        Ok(())
    }

    /// Forgets a subscription to `uri`, in the store too.
    pub(super) fn unsubscribe(&mut self, uri: &str) {
        if self.subscriptions.remove(uri) {
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
        match self.view {
            true => !self.log.holds_end_of(StreamKey::Request(stream)),
            false => self.inflight.values().any(|r| r.stream == stream),
        }
    }

    /// Whether a reader, here or through another replica, takes `stream` as it comes.
    pub(super) fn read_live(&self, stream: StreamKey, now: Instant) -> bool {
        self.attachments.contains_key(&stream)
            || (stream == StreamKey::Standalone && self.taps > 0)
            || self
                .remote_readers
                .get(&stream)
                .is_some_and(|until| *until > now)
    }

    /// The server spoke of the request on request stream `stream`: its wait starts again, or
    /// pauses while the client owes the server an answer.
    pub(super) fn heard_of(&mut self, stream: u64, timeout: Duration, awaiting_client: bool) {
        if let Some(request) = self.inflight.values_mut().find(|r| r.stream == stream) {
            request.deadline = (!awaiting_client).then(|| crate::clock::from_now(timeout));
            request.held_for_input &= awaiting_client;
        }
    }

    /// The most recent client request still in flight (SEP-2260: the request that caused a
    /// server request or log message): its messages go on its stream, else on the standalone.
    pub(super) fn related_request(&self) -> Option<u64> {
        self.inflight
            .values()
            .filter(|r| r.internal.is_none())
            .map(|r| r.stream)
            .max()
    }

    /// What a client that lost messages must re-read: one `resources/updated` per subscribed
    /// URI and one `list_changed` per list the server can change.
    pub(super) fn invalidations(&self) -> Vec<Bytes> {
        let updates = self.subscriptions.iter().map(|uri| {
            jsonrpc::notification(
                "notifications/resources/updated",
                serde_json::json!({ "uri": uri }),
            )
        });
        let lists = self
            .changeable_lists
            .iter()
            .map(|method| jsonrpc::notification(method, serde_json::json!({})));
        updates.chain(lists).collect()
    }
}
