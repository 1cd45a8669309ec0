//! Client messages to the server: requests go in flight under upstream ids of the session's
//! own (cancellations are readdressed to them), answers are matched back, and a request whose
//! server stays silent past the request timeout fails and is cancelled.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::time::Instant;
use tracing::{debug, Instrument};

use super::error_answer::ErrorAnswer;
use super::inflight::{Counted, Inflight};
use super::list_cache::{Lookup, Ticket};
use super::log::StreamKey;
use super::state::State;
use super::{protocol, routing, Session, SessionError, SubscriptionRefused, STORE_PATIENCE};
use crate::store::Op;
use crate::telemetry::spans::{self, Span, SpanContext};
use crate::telemetry::trace_context::TraceContext;
use crate::upstream::owner::HopError;
use crate::upstream::UpstreamError;
use crate::wire::jsonrpc::{self, id_key, Kind, Message};
use crate::wire::methods;
use crate::wire::named::{self, Named};

impl Session {
    /// Sends a client request upstream under a fresh upstream id and opens the stream its
    /// answer will be logged on. With a shared store far behind, it first waits (bounded) for
    /// the store to catch up.
    pub async fn call(&self, mut request: Message) -> Result<StreamKey, SessionError> {
        if let Some(backlog) = &self.backlog {
            backlog
                .room(STORE_PATIENCE)
                .await
                .map_err(SessionError::StoreBehind)?;
        }
        if let Some(owner) = self.upstream.owner() {
            self.lock().last_active = Instant::now();
            let mut hop = self.span_for(&mut request, "replica hop");
            let forwarded = owner.forward(&request).await;
            if let (Some(span), Err(error)) = (&mut hop, &forwarded) {
                span.fail(error.to_string());
            }
            drop(hop); // the hop is over: its span ends here
            let (stream, answer) = forwarded.map_err(|e| SessionError::Upstream(e.into()))?;
            self.absorb(answer);
            return stream.ok_or(SessionError::Upstream(HopError::NoStream.into()));
        }
        super::revival::revive(self).await?;
        let (stream, upstream_id, outgoing) = match self.open_call(request)? {
            Opened::AnsweredHere(stream) => return Ok(stream),
            Opened::InFlight(n, upstream_id, outgoing) => (n, upstream_id, outgoing),
        };
        if let Err(error) = self.upstream.send(outgoing).await {
            self.lock().finish(upstream_id);
            self.note_failure(&error);
            return Err(error.into());
        }
        Ok(self.lock().stream_of(stream))
    }

    /// Opens the request's stream and either answers it here (a session method, a cached list)
    /// or puts it in flight, readdressed to its upstream id.
    fn open_call(&self, mut request: Message) -> Result<Opened, SessionError> {
        // What it names, read once for every check below; unreadable, it is refused.
        let named = named::named(&request);
        let mut state = self.lock();
        if let Some(exited) = &state.upstream_failure {
            return Err(exited.cause.clone().into());
        }
        state.last_active = Instant::now();
        let n = state.next_stream;
        state.next_stream += 1;
        let method = request.method().unwrap_or_default().to_owned();
        let client_id = request.id().cloned().unwrap_or(Value::Null);
        if let Some(answer) = self.answer_without_upstream(&method, &client_id) {
            return Ok(self.answer_here(&mut state, n, answer));
        }
        let exposed = named.map_err(ErrorAnswer::Unreadable).and_then(|named| {
            self.settings.to_server_name(&mut request, named.as_ref())?;
            self.settings.check_resource_shown(named.as_ref())?;
            Ok(named)
        });
        let named = match exposed {
            Ok(named) => named,
            Err(unknown) => {
                return Ok(self.answer_here(&mut state, n, unknown.to_response(&client_id)))
            }
        };
        let ticket = match self.cached_list(&request, &method) {
            Ok(ticket) => ticket,
            Err(result) => {
                let answer = jsonrpc::result_response(&client_id, json!(result));
                return Ok(self.answer_here(&mut state, n, answer));
            }
        };
        let limit = self.settings.max_inflight;
        if state.calls.inflight.len() >= limit {
            self.metrics.requests_inflight_refused_total.inc();
            return Err(SessionError::TooManyInFlight(limit));
        }
        if let Err(refusal) =
            self.follow_subscription(&mut state, named.as_ref(), &method, &client_id)
        {
            return Ok(self.answer_here(&mut state, n, refusal));
        }
        let progress_token = routing::progress_token(&request);
        if let Some(token) = &progress_token {
            state.calls.progress.insert(token.clone(), n);
        }
        if method == methods::INITIALIZE {
            // Kept to bring a new or forgetful upstream to where this one was.
            state.init = request.params().map(|p| p.get().to_owned());
        }
        mirror_call(&mut state, &request, n);
        let span = self.span_for(&mut request, "upstream exchange");
        let upstream_id = state.take_upstream_id();
        state.calls.inflight.insert(
            upstream_id,
            Inflight {
                client_id,
                stream: n,
                method,
                progress_token,
                ticket,
                internal: None,
                deadline: Some(crate::base::clock::from_now(self.settings.request_timeout)),
                held_for_input: false,
                sent: Instant::now(),
                span,
                _counted: Counted::new(&self.metrics.requests_inflight),
            },
        );
        // The deadline sweep looks at this session until it finds it with none in flight. A
        // view's requests are its owner's to time out.
        if !state.calls.listed && !state.replica.view {
            state.calls.listed = true;
            self.sweeps.list_busy([self.this.clone()]);
        }
        request.set_id(Value::from(upstream_id));
        Ok(Opened::InFlight(n, upstream_id, request))
    }

    /// With tracing on, the span of `request`'s next step (`name`: the exchange with the server,
    /// the hop to the replica owning the session), under the context in its `_meta` (a client
    /// request's span; the proxy's own requests, which carry none, are not traced); the context
    /// passed on names it.
    fn span_for(&self, request: &mut Message, name: &'static str) -> Option<Span> {
        let spans = &self.settings.spans;
        if !spans.on() {
            return None;
        }
        let client = request.params().and_then(TraceContext::from_params)?;
        let parent = SpanContext::parse(&client.traceparent)?;
        let mut span = spans.start(name, spans::SpanKind::Client, Some(&parent))?;
        spans::describe(&mut span, request);
        span.set(
            "mcp.session.id",
            crate::telemetry::redact::session(&self.id).to_string(),
        );
        span.set("mcp_proxy.server", self.metrics.server().to_owned());
        TraceContext {
            traceparent: span.context().traceparent(),
            tracestate: client.tracestate,
        }
        .replace_in(request);
        Some(span)
    }

    /// The answer to a request no upstream sees: a session method (answered by the proxy where a
    /// front offers them, never by the upstream), or one that comes before the server has
    /// started at `initialize` (`ping` answered, the rest refused).
    fn answer_without_upstream(&self, method: &str, client_id: &Value) -> Option<Bytes> {
        if protocol::is_session_method(method) {
            // Answered by the proxy where a front offers them; never the upstream's.
            return Some(ErrorAnswer::NotOffered(method.to_owned()).to_response(client_id));
        }
        if method != methods::INITIALIZE && self.upstream.awaits_initialize() {
            // The server starts at initialize; nothing before it reaches one.
            let answer = match method {
                methods::PING => jsonrpc::result_response(client_id, json!({})),
                _ => ErrorAnswer::NotStarted.to_response(client_id),
            };
            return Some(answer);
        }
        None
    }

    /// Keeps the session's subscriptions as a `resources/subscribe` or `unsubscribe` changes
    /// them. `Err`: the error a subscription past the limit is answered with.
    fn follow_subscription(
        &self,
        state: &mut State,
        named: Option<&Named>,
        method: &str,
        client_id: &Value,
    ) -> Result<(), Bytes> {
        if let (
            methods::RESOURCES_SUBSCRIBE | methods::RESOURCES_UNSUBSCRIBE,
            Some(Named::Resource(uri)),
        ) = (method, named)
        {
            if method == methods::RESOURCES_UNSUBSCRIBE {
                state.unsubscribe(uri);
            } else if let Err(refused) = state.subscribe(uri, self.settings.max_subscriptions) {
                self.metrics.subscriptions_refused_total.inc();
                return Err(ErrorAnswer::from(refused).to_response(client_id));
            }
        }
        Ok(())
    }

    /// Logs the proxy's own answer to the session's n-th request, ending its stream.
    fn answer_here(&self, state: &mut State, n: u64, answer: Bytes) -> Opened {
        let stream = state.stream_of(n);
        self.append(state, stream, answer, true, None);
        Opened::AnsweredHere(stream)
    }

    /// A list the cache can answer: `Err(result)` on a hit, `Ok(ticket)` to fill it on a miss.
    fn cached_list(
        &self,
        request: &Message,
        method: &str,
    ) -> Result<Option<Ticket>, Box<RawValue>> {
        let Some(cache) = &self.list_cache else {
            return Ok(None);
        };
        match cache.lookup(&self.principal, method, request.params()) {
            Lookup::Hit(result) => {
                self.metrics.list_cache_hits_total.inc();
                Err(result)
            }
            Lookup::Miss(ticket) => {
                self.metrics.list_cache_misses_total.inc();
                Ok(Some(ticket))
            }
            Lookup::Uncached => Ok(None),
        }
    }

    /// Hands the session a client notification, or a client's answer to a server request. A
    /// request sent this way is a call whose answer nobody reads.
    pub async fn send(&self, message: Message) -> Result<(), SessionError> {
        match message.kind() {
            Kind::Notification => self.notify(message).await,
            Kind::Response => self.answer(message).await,
            Kind::Request => self.call(message).await.map(drop),
        }
    }

    /// Forwards a client notification. `notifications/cancelled` is readdressed to the upstream
    /// id, and the cancelled request's stream is closed.
    pub async fn notify(&self, mut notification: Message) -> Result<(), SessionError> {
        if notification.method() == Some(methods::CANCELLED) {
            #[derive(Deserialize)]
            struct Cancelled {
                #[serde(rename = "requestId")]
                request_id: Value,
            }
            let Some(cancelled) = notification.params_as::<Cancelled>() else {
                return Ok(());
            };
            let wanted = id_key(&cancelled.request_id);
            let upstream_id = {
                let mut state = self.lock();
                let found = state
                    .calls
                    .inflight
                    .iter()
                    .find(|(_, r)| id_key(&r.client_id) == wanted)
                    .map(|(id, _)| *id);
                let Some(upstream_id) = found else {
                    self.span().in_scope(|| {
                        debug!(request = %wanted, "cancellation of a request that is not in flight")
                    });
                    return Ok(());
                };
                if let Some(request) = state.finish(upstream_id) {
                    let stream = state.stream_of(request.stream);
                    self.append(&mut state, stream, Bytes::new(), true, None);
                    state.calls.abandoned += 1;
                }
                upstream_id
            };
            let mut params: Value = notification
                .params()
                .and_then(|p| serde_json::from_str(p.get()).ok())
                .unwrap_or_default();
            params["requestId"] = Value::from(upstream_id);
            if let Ok(raw) = serde_json::value::to_raw_value(&params) {
                notification.set_params(raw);
            }
        }
        self.forward(notification).await
    }

    /// The request on request stream `stream` waits for a 2026-07-28 client's retry: a stop
    /// does not wait for it (until the server speaks of it again).
    pub fn hold_for_input(&self, stream: u64) {
        let mut state = self.lock();
        let held = state
            .calls
            .inflight
            .values_mut()
            .find(|r| r.stream == stream);
        if let Some(request) = held {
            request.held_for_input = true;
        }
    }

    /// Nothing of a client's is under way: no request in flight, no request of the server's
    /// waiting for the client's answer.
    pub(in crate::session) fn quiet(&self) -> bool {
        let state = self.lock();
        state.calls.inflight.is_empty() && state.calls.asked.is_empty()
    }

    /// How many client requests were given up before their server answered (cancelled, or
    /// past the request timeout) since the session began.
    pub(in crate::session) fn abandoned_requests(&self) -> u64 {
        self.lock().calls.abandoned
    }

    /// Whether the server's request `id` still waits for the client's answer.
    pub fn awaits_answer(&self, id: &Value) -> bool {
        self.lock().calls.asked.contains_key(&id_key(id))
    }

    /// Forwards the client's response to a server request; the request that caused it waits
    /// for its server again.
    pub async fn answer(&self, response: Message) -> Result<(), SessionError> {
        if let Some(id) = response.id() {
            let mut state = self.lock();
            if let Some(stream) = state.calls.asked.remove(&id_key(id)) {
                state.heard_of(stream, self.settings.request_timeout, false);
            }
        }
        self.forward(response).await
    }

    async fn forward(&self, message: Message) -> Result<(), SessionError> {
        {
            let mut state = self.lock();
            if let Some(exited) = &state.upstream_failure {
                return Err(exited.cause.clone().into());
            }
            state.last_active = Instant::now();
        }
        Ok(self.upstream.send(message).await?)
    }

    /// Fails each request whose server stayed silent past its deadline, ending its stream with
    /// an error, and tells the server to cancel it. Returns how many, and whether requests are
    /// still in flight (the sweep looks again).
    pub(in crate::session) fn expire_requests(&self, now: Instant) -> (usize, bool) {
        let timeout = self.settings.request_timeout;
        let (overdue, busy): (Vec<u64>, bool) = {
            let mut state = self.lock();
            let overdue: Vec<u64> = state
                .calls
                .inflight
                .iter()
                .filter(|(_, r)| r.internal.is_none() && r.deadline.is_some_and(|d| d <= now))
                .map(|(id, _)| *id)
                .collect();
            for upstream_id in &overdue {
                if let Some(request) = state.finish(*upstream_id) {
                    state.calls.abandoned += 1;
                    let cause = UpstreamError::Unanswered {
                        method: request.method.clone(),
                        timeout,
                    };
                    self.fail(&mut state, request, &cause);
                }
            }
            (overdue, state.calls.still_busy())
        };
        for upstream_id in &overdue {
            let reason = format!("no answer within {timeout:?}");
            let params = serde_json::value::to_raw_value(
                &json!({ "requestId": upstream_id, "reason": reason }),
            )
            .ok();
            let cancel = Message::request(None, methods::CANCELLED, params);
            let upstream = self.upstream.clone();
            tokio::spawn(async move { upstream.send(cancel).await }.instrument(self.span()));
        }
        (overdue.len(), busy)
    }

    /// Subscribes (or unsubscribes) the session's server to `uri` on the proxy's own behalf:
    /// not a client request, so nothing the server sends meanwhile is taken as caused by it;
    /// remembered for a server that has to be brought back. A subscription past the session's
    /// limits is refused (`SessionError::SubscriptionRefused`) and never sent.
    pub async fn subscribe_upstream(&self, uri: &str, subscribe: bool) -> Result<(), SessionError> {
        let method = match subscribe {
            true => methods::RESOURCES_SUBSCRIBE,
            false => methods::RESOURCES_UNSUBSCRIBE,
        };
        if subscribe && !self.settings.resources.shows(uri) {
            return Err(SubscriptionRefused::NotShown.into());
        }
        super::revival::revive(self).await?;
        {
            let mut state = self.lock();
            match subscribe {
                true => {
                    if let Err(refused) = state.subscribe(uri, self.settings.max_subscriptions) {
                        self.metrics.subscriptions_refused_total.inc();
                        return Err(refused.into());
                    }
                }
                false => state.unsubscribe(uri),
            }
        }
        let params = serde_json::value::to_raw_value(&json!({ "uri": uri })).ok();
        Ok(self.internal_request(method, params).await?)
    }

    pub(in crate::session) async fn internal_request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<(), UpstreamError> {
        let (done, answered) = tokio::sync::oneshot::channel();
        let upstream_id = {
            let mut state = self.lock();
            let id = state.take_upstream_id();
            state.calls.inflight.insert(
                id,
                Inflight {
                    client_id: Value::Null,
                    stream: 0,
                    method: method.to_owned(),
                    progress_token: None,
                    ticket: None,
                    internal: Some(done),
                    deadline: None,
                    held_for_input: false,
                    sent: Instant::now(),
                    span: None,
                    _counted: Counted::new(&self.metrics.requests_inflight),
                },
            );
            id
        };
        self.upstream
            .send(Message::request(
                Some(Value::from(upstream_id)),
                method,
                params,
            ))
            .await?;
        match tokio::time::timeout(self.settings.request_timeout, answered).await {
            Ok(Ok(answer)) => answer,
            _ => Err(UpstreamError::OwnUnanswered {
                method: method.to_owned(),
            }),
        }
    }
}

/// A request taken in: answered already, or in flight (its number, upstream id and the message
/// readdressed to it).
enum Opened {
    AnsweredHere(StreamKey),
    InFlight(u64, u64, Message),
}

/// Tells the shared store (if any) of a request in flight on the session's n-th stream, and
/// keeps the params of `initialize` for a replica that takes the session over.
fn mirror_call(state: &mut State, request: &Message, n: u64) {
    if !state.replica.shared() {
        return;
    }
    let client_id = request.id().cloned().unwrap_or(Value::Null).to_string();
    state.mirror(|| Op::Field {
        name: "next_stream",
        value: (n + 1).to_string(),
    });
    state.mirror(|| Op::Inflight {
        stream: n,
        client_id,
    });
    if let (Some(methods::INITIALIZE), Some(init)) = (request.method(), &state.init) {
        let init = init.clone();
        state.mirror(|| Op::Field {
            name: "init",
            value: init,
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::session::testing::{call, initialized, principal, read_all, read_from, registry};
    use crate::session::{SessionError, SessionSettings};
    use crate::wire::jsonrpc::Message;

    #[tokio::test]
    async fn each_answer_comes_back_on_its_own_stream_under_its_clients_id() {
        let registry = registry(SessionSettings::default());
        let session = initialized(&registry, principal("alice")).await;
        let first = session.call(call(json!(1), "echo")).await.unwrap();
        let again = session.call(call(json!(1), "chatty")).await.unwrap();
        assert_ne!(first, again, "a stream per request");
        let answered = read_all(&session, first).await;
        assert_eq!(answered.len(), 1);
        assert_eq!(answered[0]["id"], 1);
        assert_eq!(answered[0]["result"]["content"][0]["text"], "hello");
        let chatty = read_all(&session, again).await;
        assert_eq!(
            chatty[0]["method"], "notifications/message",
            "the log line first"
        );
        assert_eq!((&chatty[1]["id"], chatty.len()), (&json!(1), 2));
        assert!(session.quiet(), "nothing left in flight");
    }

    #[tokio::test]
    async fn one_request_beyond_the_inflight_limit_is_refused_without_reaching_the_server() {
        let settings = SessionSettings {
            max_inflight: 1,
            ..SessionSettings::default()
        };
        let registry = registry(settings);
        let session = initialized(&registry, principal("alice")).await;
        session.call(call(json!("a"), "never")).await.unwrap();
        let refused = session.call(call(json!("b"), "echo")).await.unwrap_err();
        assert!(
            matches!(refused, SessionError::TooManyInFlight(1)),
            "{refused}"
        );
        assert!(!session.quiet(), "the first is still in flight");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_its_server_never_answers_fails_at_its_deadline() {
        let settings = SessionSettings {
            request_timeout: std::time::Duration::from_secs(2),
            ..SessionSettings::default()
        };
        let registry = registry(settings);
        let session = initialized(&registry, principal("alice")).await;
        let stream = session.call(call(json!(7), "never")).await.unwrap();
        let early = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
        assert_eq!(session.expire_requests(early), (0, true), "not yet due");
        let late = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
        assert_eq!(session.expire_requests(late), (1, false));
        let failed = read_all(&session, stream).await;
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0]["id"], 7);
        assert!(failed[0]["error"]["message"].is_string(), "{}", failed[0]);
        assert_eq!(session.abandoned_requests(), 1);
    }

    #[tokio::test]
    async fn the_servers_question_reaches_the_calls_stream_and_the_answer_goes_back() {
        let registry = registry(SessionSettings::default());
        let session = initialized(&registry, principal("alice")).await;
        let stream = session.call(call(json!(3), "ask")).await.unwrap();
        let asked = read_from(&session, stream, None, 1).await;
        let (position, question) = &asked[0];
        assert_eq!(question["method"], "roots/list");
        assert!(session.awaits_answer(&question["id"]));
        let answer = json!({ "jsonrpc": "2.0", "id": question["id"], "result": { "roots": [] } });
        let answer = Message::parse(answer.to_string().into()).unwrap();
        session.answer(answer).await.unwrap();
        let rest = read_from(&session, stream, Some(*position), usize::MAX).await;
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].1["id"], 3);
        assert_eq!(rest[0].1["result"]["content"][0]["text"], "roots received");
        assert!(session.quiet());
    }

    #[tokio::test]
    async fn a_server_that_asks_and_asks_is_remembered_to_a_bound() {
        let registry = registry(SessionSettings::default());
        let session = initialized(&registry, principal("alice")).await;
        let stream = session.call(call(json!(3), "ask_many")).await.unwrap();
        let asked = read_from(&session, stream, None, 300).await;
        assert_eq!(asked.len(), 300, "every question delivered");
        assert!(session.awaits_answer(&asked[0].1["id"]));
        assert!(
            !session.awaits_answer(&asked[299].1["id"]),
            "past the bound"
        );
        let unremembered = session.metrics.server_requests_unremembered_total.get();
        assert_eq!(unremembered, 300 - super::super::inflight::MAX_ASKED as u64);
    }
}
