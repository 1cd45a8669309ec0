//! Server messages into the log: each is filed on the stream it belongs to (a response on its
//! request's, under the client's id again), numbered for a protocol-level session, coalesced,
//! mirrored to the store; an upstream that fails fails the requests it held.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::time::Instant;
use tracing::debug;

use super::data_layer::{self, LayerKind};
use super::error_answer::ErrorAnswer;
use super::exposure::ResourceList;
use super::inflight::{Inflight, MAX_ASKED};
use super::log::{Logged, StreamKey};
use super::routing::{self, Destination};
use super::state::State;
use super::{protocol, Session};
use crate::store::{Backlog, Op};
use crate::upstream::{Sink, UpstreamError, UpstreamEvent};
use crate::wire::jsonrpc::{id_key, Kind, Message};
use crate::wire::methods;

impl Session {
    /// Files a message from the upstream in the log.
    pub(in crate::session) fn on_upstream(&self, event: UpstreamEvent) {
        let mut state = self.lock();
        match event {
            UpstreamEvent::Message(message) => self.file(&mut state, *message, Rides::Found),
            UpstreamEvent::Within { message, request } => {
                self.file(&mut state, *message, Rides::Given(request))
            }
            UpstreamEvent::Oversized { id, max } => {
                let request = id
                    .and_then(|id| id.as_u64())
                    .and_then(|id| state.finish(id));
                if let Some(request) = request {
                    self.fail(&mut state, request, &UpstreamError::Oversized(max));
                }
            }
            UpstreamEvent::Failed { id, cause } => {
                if let Some(request) = id.as_u64().and_then(|id| state.finish(id)) {
                    self.fail(&mut state, request, &cause);
                }
            }
            UpstreamEvent::AnswersLost(cause) => {
                let lost: Vec<Inflight> = state.calls.inflight.drain().map(|(_, r)| r).collect();
                state.calls.progress.clear();
                for request in lost {
                    self.fail(&mut state, request, &cause);
                }
            }
            UpstreamEvent::SessionLost => {
                state.mirror_upstream_session(|| self.upstream_session_record());
                super::handshake::reestablish(self);
            }
            UpstreamEvent::Exited(cause) => {
                self.metrics.upstream_exits_total.inc();
                let failed: Vec<Inflight> = state.calls.inflight.drain().map(|(_, r)| r).collect();
                state.calls.progress.clear();
                for request in failed {
                    self.fail(&mut state, request, &cause);
                }
                state.upstream_failure = Some(super::revival::Exited::new(cause));
            }
        }
    }

    /// Answers a request taken out of flight with an internal error, ending its stream.
    pub(in crate::session) fn fail(
        &self,
        state: &mut State,
        mut request: Inflight,
        cause: &UpstreamError,
    ) {
        if let Some(span) = &mut request.span {
            span.fail(cause.to_string());
        }
        self.note_failure(cause);
        if request.internal.is_some() {
            return;
        }
        let error = ErrorAnswer::Upstream(cause.clone()).to_response(&request.client_id);
        let stream = state.stream_of(request.stream);
        self.append(state, stream, error, true, None);
    }

    /// Counts and logs what an operator must act on in a server's failure: its TLS.
    pub(in crate::session) fn note_failure(&self, cause: &UpstreamError) {
        if let UpstreamError::Tls { failure, .. } = cause {
            self.metrics.upstream_tls_failures_total.inc();
            let reason = failure.reason();
            self.span()
                .in_scope(|| tracing::warn!(reason, error = %cause, "TLS with the server failed"));
        }
    }

    fn file(&self, state: &mut State, mut message: Message, rides: Rides) {
        let filing = routing::file(&message, self.settings.coalesce_progress);
        let (stream, terminal) = match filing.route {
            Destination::Response(id) => match self.file_response(state, &mut message, id) {
                Some(stream) => (stream, true),
                None => return,
            },
            Destination::Progress(token) => match rides {
                Rides::Found => (self.progress_stream(state, token), false),
                Rides::Given(request) => (self.given_stream(state, &message, request), false),
            },
            Destination::Related => match rides {
                Rides::Found => (self.related_stream(state, &message), false),
                Rides::Given(request) => (self.given_stream(state, &message, request), false),
            },
            Destination::SessionWide => {
                if self.hides(&message) {
                    return;
                }
                self.invalidate_caches(&message);
                (StreamKey::Standalone, false)
            }
        };
        self.append(state, stream, message.to_bytes(), terminal, filing.coalesce);
    }

    /// A response, readied for the log: under the client's id again, it goes on its request's
    /// stream. `None`: it goes no further (no request in flight has its id, or the proxy sent
    /// the request itself).
    fn file_response(
        &self,
        state: &mut State,
        message: &mut Message,
        id: String,
    ) -> Option<StreamKey> {
        let request = id.parse::<u64>().ok().and_then(|id| state.finish(id));
        let Some(mut request) = request else {
            self.span()
                .in_scope(|| debug!(%id, "response to no request in flight; dropped"));
            return None;
        };
        self.metrics
            .upstream_duration
            .observe(request.sent.elapsed().as_secs_f64());
        if let Some(mut span) = request.span.take() {
            if let Some(code) = message.error_code() {
                span.fail_with_code(code);
            }
        } // the exchange is over: its span ends here
        if let Some(done) = request.internal {
            if request.method == methods::INITIALIZE {
                record_initialize(state, message);
            }
            let answer = match message.error() {
                None => Ok(()),
                Some(error) => Err(UpstreamError::RefusedOwn {
                    method: request.method,
                    error: error.get().to_owned(),
                }),
            };
            let _ = done.send(answer);
            return None;
        }
        if request.method == methods::INITIALIZE {
            self.file_initialize(state, message);
        }
        if let Some(listed) = message
            .result()
            .and_then(|r| self.as_exposed(&request.method, r))
        {
            message.set_result(listed);
        }
        if let (Some(cache), Some(ticket), Some(result)) =
            (&self.list_cache, request.ticket, message.result())
        {
            let evicted = cache.store(ticket, result);
            self.metrics
                .list_cache_evictions_total
                .inc_by(evicted as u64);
        }
        message.set_id(request.client_id);
        if let Some(layer) = state
            .layer
            .as_ref()
            .filter(|l| l.kind == LayerKind::Session)
        {
            data_layer::stamp(message, &self.id, layer);
        }
        Some(state.stream_of(request.stream))
    }

    /// The server's answer to the client's `initialize`: what it negotiated is recorded (and
    /// mirrored), and the result advertises what the proxy adds for a protocol-level session.
    fn file_initialize(&self, state: &mut State, message: &mut Message) {
        record_initialize(state, message);
        state.mirror_upstream_session(|| self.upstream_session_record());
        if let Some(version) = state.protocol_version.clone() {
            state.mirror(|| Op::Field {
                name: "version",
                value: version,
            });
        }
        if let Some(result) = message
            .result()
            .and_then(|r| protocol::advertise(r, &self.settings.window))
        {
            message.set_result(result);
        }
    }

    /// Progress goes on the stream of the request that carried its token, which is thereby
    /// heard of; with no such request, on the standalone stream.
    fn progress_stream(&self, state: &mut State, token: String) -> StreamKey {
        match state.calls.progress.get(&token).copied() {
            Some(stream) => {
                state.heard_of(stream, self.settings.request_timeout, false);
                state.stream_of(stream)
            }
            None => StreamKey::Standalone,
        }
    }

    /// A server request, log message or cancellation goes on the stream of the request that
    /// caused it (a server request is remembered there, for the client's answer); with none in
    /// flight, on the standalone stream.
    fn related_stream(&self, state: &mut State, message: &Message) -> StreamKey {
        let related = state.related_request();
        self.riding(state, message, related)
    }

    /// A message a virtual server's member sent about its own request `request` (an upstream
    /// id): on that request's stream while it is in flight, else on the standalone stream.
    fn given_stream(
        &self,
        state: &mut State,
        message: &Message,
        request: Option<u64>,
    ) -> StreamKey {
        let stream = request
            .and_then(|id| state.calls.inflight.get(&id))
            .filter(|request| request.internal.is_none())
            .map(|request| request.stream);
        self.riding(state, message, stream)
    }

    /// A message on request stream `stream` (a server request is remembered there, for the
    /// client's answer; that request's wait starts again, or pauses while the client owes an
    /// answer); with none, on the standalone stream. Past [`MAX_ASKED`] requests of the
    /// server awaiting answers, another is delivered but not remembered (its request's wait
    /// goes on, and the client's answer is passed on all the same).
    fn riding(&self, state: &mut State, message: &Message, stream: Option<u64>) -> StreamKey {
        match stream {
            Some(n) => {
                let mut asks = message.kind() == Kind::Request;
                if let (true, Some(id)) = (asks, message.id()) {
                    let key = id_key(id);
                    asks =
                        state.calls.asked.len() < MAX_ASKED || state.calls.asked.contains_key(&key);
                    if asks {
                        state.calls.asked.insert(key, n);
                    } else {
                        self.metrics.server_requests_unremembered_total.inc();
                    }
                }
                state.heard_of(n, self.settings.request_timeout, asks);
                state.stream_of(n)
            }
            None => StreamKey::Standalone,
        }
    }

    /// A list result as clients see it (`[tools]`, `[prompts]`, `[resources]`); `None` when
    /// they see it as the server sent it.
    fn as_exposed(&self, method: &str, result: &RawValue) -> Option<Box<RawValue>> {
        let (tools, prompts, resources) = (
            &self.settings.tools,
            &self.settings.prompts,
            &self.settings.resources,
        );
        match method {
            methods::TOOLS_LIST if !tools.is_identity() => tools.list(result, "tools"),
            methods::PROMPTS_LIST if !prompts.is_identity() => prompts.list(result, "prompts"),
            methods::RESOURCES_LIST if !resources.is_identity() => {
                resources.list(result, ResourceList::Resources)
            }
            methods::RESOURCES_TEMPLATES_LIST if !resources.is_identity() => {
                resources.list(result, ResourceList::Templates)
            }
            _ => None,
        }
    }

    /// Whether clients are kept from a session-wide notification: a `resources/updated` of a
    /// resource they do not see (`[resources]`), or whose resource cannot be read.
    fn hides(&self, message: &Message) -> bool {
        let exposure = &self.settings.resources;
        message.method() == Some(methods::RESOURCES_UPDATED)
            && !exposure.is_identity()
            && routing::resource_uri(message).is_none_or(|uri| !exposure.shows(&uri))
    }

    /// A session-wide notification: what it says changed is no longer answered from the caches.
    fn invalidate_caches(&self, message: &Message) {
        if let Some(method) = message.method() {
            if let Some(cache) = &self.list_cache {
                cache.invalidate(method);
            }
            self.response_cache.invalidate(method, message.params());
        }
    }

    /// What a client of a taken-over session is told (the gap rule): each request the old
    /// owner had in flight gets an error (it may or may not have been carried out), and every
    /// subscription and changeable list an invalidation, since whatever the old server said
    /// after the last logged message is unknown.
    pub(in crate::session) fn close_gap(&self, inflight: HashMap<u64, String>) {
        let mut state = self.lock();
        for (stream, client_id) in inflight {
            let client_id: Value = serde_json::from_str(&client_id).unwrap_or(Value::Null);
            let error = ErrorAnswer::OwnerLeft.to_response(&client_id);
            let stream = state.stream_of(stream);
            self.append(&mut state, stream, error, true, None);
        }
        for message in state.subscriptions.invalidations() {
            self.append(&mut state, StreamKey::Standalone, message, false, None);
        }
    }

    /// Files in a view's log what was read from the shared log, which is then followed from
    /// the newest of it on.
    pub(in crate::session) fn absorb_followed(&self, logged: Vec<Logged>) {
        self.lock().followed(&logged);
        self.absorb(logged);
    }

    /// Files in a view's log what the owner logged.
    pub(in crate::session) fn absorb(&self, logged: Vec<Logged>) {
        let coalesce_progress = self.settings.coalesce_progress;
        if self.lock().absorb(logged, coalesce_progress) {
            self.changes.notify_waiters();
        }
    }

    pub(in crate::session) fn append(
        &self,
        state: &mut State,
        stream: StreamKey,
        payload: Bytes,
        terminal: bool,
        coalesce: Option<String>,
    ) {
        let payload = match state.numbered && !payload.is_empty() {
            true => protocol::stamp(&payload, state.log.head() + 1),
            false => payload,
        };
        let now = Instant::now();
        let mirrored = state
            .replica
            .mirror
            .is_some()
            .then(|| (payload.clone(), coalesce.clone()));
        let live = state.reading.read_live(stream, now);
        let appended = state
            .log
            .append(stream, payload, terminal, coalesce, live, now);
        if let Some((payload, coalesce)) = mirrored {
            state.mirror(|| {
                Op::Append(Logged {
                    seq: appended.seq,
                    stream,
                    terminal,
                    coalesce,
                    payload,
                })
            });
            if let Some(seq) = appended.replaced {
                state.mirror(|| Op::Remove { seq });
            }
            if appended.evicted > 0 {
                let through = state.log.evicted_floor();
                state.mirror(|| Op::Evicted { through });
            }
        }
        self.metrics.events_logged_total.inc();
        self.metrics
            .events_coalesced_total
            .inc_by(appended.coalesced);
        self.metrics.events_evicted_total.inc_by(appended.evicted);
        self.changes.notify_waiters();
    }
}

/// Which request a server message that speaks of one rides.
#[derive(Debug, Clone, Copy)]
enum Rides {
    /// The one the message names (its progress token's), or the newest client request in
    /// flight (SEP-2260).
    Found,
    /// This one (a virtual server's member's own request, by upstream id), or none: the
    /// standalone stream.
    Given(Option<u64>),
}

fn record_initialize(state: &mut State, response: &Message) {
    #[derive(Deserialize)]
    struct InitializeResult {
        #[serde(rename = "protocolVersion")]
        protocol_version: Option<String>,
        #[serde(default)]
        capabilities: Value,
    }
    let Some(result) = response
        .result()
        .and_then(|r| serde_json::from_str::<InitializeResult>(r.get()).ok())
    else {
        return;
    };
    state.protocol_version = result.protocol_version;
    state.subscriptions.changeable_lists = methods::announced_lists()
        .filter(|(capability, _)| result.capabilities[capability]["listChanged"] == true)
        .map(|(_, method)| method)
        .collect();
    state.mirror_lists();
}

/// Where the session's upstream delivers what its server sends.
impl Sink for Session {
    fn deliver(&self, event: UpstreamEvent) {
        self.on_upstream(event);
    }

    /// With a shared store: its write-behind queue, which every message delivered adds to.
    fn backlog(&self) -> Option<Arc<Backlog>> {
        self.backlog.clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::session::log::StreamKey;
    use crate::session::testing::{call, initialized, principal, read_all, read_from, registry};
    use crate::session::SessionSettings;

    #[tokio::test(start_paused = true)]
    async fn session_wide_news_goes_to_the_standalone_stream_once_however_often_it_is_said() {
        let registry = registry(SessionSettings::default());
        let session = initialized(&registry, principal("alice")).await;
        let stream = session.call(call(json!(1), "announce")).await.unwrap();
        let answer = read_all(&session, stream).await;
        assert_eq!(answer.len(), 1, "only the answer on the request's stream");
        assert_eq!(answer[0]["id"], 1);
        let standalone = read_from(&session, StreamKey::Standalone, None, 1).await;
        assert_eq!(
            standalone[0].1["method"],
            "notifications/tools/list_changed"
        );
        let more = read_from(&session, StreamKey::Standalone, Some(standalone[0].0), 1);
        // The clock is paused: the wait ends at once when nothing more is logged.
        let more = tokio::time::timeout(std::time::Duration::from_secs(1), more).await;
        assert!(
            more.is_err(),
            "the second said the same: coalesced into the first"
        );
    }

    #[tokio::test]
    async fn what_the_server_said_at_initialize_is_recorded_for_the_session() {
        let registry = registry(SessionSettings::default());
        let session = initialized(&registry, principal("alice")).await;
        assert_eq!(session.protocol_version().as_deref(), Some("2025-11-25"));
        assert!(!session.upstream_failed());
    }
}
