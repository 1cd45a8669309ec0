//! One 2026-07-28 request through a legacy session: sent with the request's own `_meta` fields
//! left out, answered as JSON when the answer is ready within `json_wait`, else on an SSE
//! stream (no event ids: nothing is resumable) carrying only what concerns it: its progress,
//! its log messages at or above the level it asked for, then its result. A client that closes
//! the stream cancels the request. Requests of the server's (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`) are held and the client gets `input_required`
//! (`input`); one for a capability the request did not declare is refused upstream and
//! answered -32021.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::checks::{self, RequestMeta, MISSING_CAPABILITY, SERVER_INFO_KEY};
use super::correlation::{Correlated, Ending, Initialized};
use super::envelope::{self, CacheHints};
use super::held::HeldCalls;
use super::input;
use super::params::Params;
use super::state::{self, HeldRequest};
use crate::front::body::Body;
use crate::front::event_stream::{self, Ended, KeepAlive, Options, Source};
use crate::front::rejection::{failed_request, Rejection};
use crate::front::request::json;
use crate::front::{traced, App};
use crate::ids::Principal;
use crate::jsonrpc::{Message, INTERNAL_ERROR};
use crate::session::log::{Event, StreamKey};
use crate::session::{Reader, Registry, Session};
use crate::spans::{self, Span, SpanContext, Spans};
use crate::sse;

/// Chunks buffered towards a slow client before the writer waits.
const CHUNKS: usize = 64;
/// How long after a server request others sent with it are gathered into the same answer.
const GATHER: Duration = Duration::from_millis(25);

/// One modern call as the client made it: what its answer is translated for.
pub struct Call {
    pub client_id: Value,
    /// The id the request in flight has in its session: the first call's (a retry has its
    /// own id, but continues that request).
    pub in_flight_id: Value,
    pub method: String,
    /// The params as sent (read again only on the rare paths that need more than `name`).
    params: Option<Box<RawValue>>,
    /// What the call names: the tool or prompt, or the resource.
    pub name: String,
    pub meta: RequestMeta,
    pub principal: Principal,
    /// A cacheable request's params as its result is cached under.
    pub cache_key: Option<String>,
    /// The cache's invalidations when it was asked (see `ResponseCache::generation`).
    pub cache_generation: u64,
    /// The trace context of the request (its span's, with tracing on).
    pub trace: Option<SpanContext>,
}

impl Call {
    pub fn new(
        request: &Message,
        params: &Params,
        meta: RequestMeta,
        principal: Principal,
    ) -> Call {
        let client_id = request.id().cloned().unwrap_or(Value::Null);
        Call {
            in_flight_id: client_id.clone(),
            client_id,
            method: request.method().unwrap_or_default().to_owned(),
            params: request.params().map(ToOwned::to_owned),
            name: params.name(),
            // A retry continues a call: its answer is no one's to reuse.
            cache_key: (crate::era::is_cacheable(request.method().unwrap_or_default())
                && !params.has("requestState")
                && !params.has("inputResponses"))
            .then(|| params.cache_key()),
            cache_generation: 0,
            trace: traced::context_of(request),
            meta,
            principal,
        }
    }

    /// The params, parsed (`Null` when absent).
    pub fn params(&self) -> Value {
        self.params
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .unwrap_or(Value::Null)
    }

    /// The call's own answer for input key `key` (`inputResponses` on a first call: a retry's
    /// answers are for the requests its `requestState` names, not for later rounds).
    fn given_answer(&self, key: &str) -> Option<Value> {
        let params = self.params();
        if params.get("requestState").is_some() {
            return None;
        }
        params["inputResponses"]
            .get(key)
            .filter(|answer| answer.is_object())
            .cloned()
    }
}

/// Sends a call and answers it.
pub async fn exchange(
    app: &App,
    correlated: Correlated,
    forwarded: Message,
    call: Call,
) -> Result<http::Response<Body>, Rejection> {
    let session = correlated.session.clone();
    let stream = match app.registry.deliver(&session, forwarded).await {
        Ok(Some(stream)) => stream,
        Ok(None) => unreachable!("a request opens a stream"),
        Err(error) if error.not_taken() => {
            return Err(Rejection::session(&error).with_id(Some(&call.client_id)))
        }
        Err(error) => {
            return Ok(json(
                StatusCode::OK,
                failed_request(&call.client_id, &error),
            ))
        }
    };
    let reader = session.attach(stream, None);
    Ok(respond(app, correlated, call, stream, reader).await)
}

/// Answers a call whose request is (again) in flight on `stream`, read by `reader`.
pub async fn respond(
    app: &App,
    correlated: Correlated,
    call: Call,
    stream: StreamKey,
    reader: Reader,
) -> http::Response<Body> {
    let mut relay = Relay {
        translation: Translation {
            registry: app.registry.clone(),
            session: correlated.session.clone(),
            initialized: correlated.initialized.clone(),
            hints: app.modern.hints,
            own_session: correlated.ending.is_some(),
            state_key: app.modern.state_key.clone(),
            input_ttl: app.modern.input_ttl,
            held_calls: app.modern.held_calls.clone(),
            call,
            stream,
        },
        reader,
        buffered: VecDeque::new(),
        inputs: BTreeMap::new(),
        gather_until: None,
        read_through: 0,
        spans: app.spans.clone(),
        keep_alive: app.http.sse_keep_alive,
        round: None,
    };
    let mut pending = Vec::new();
    let until = crate::clock::from_now(app.http.json_wait);
    loop {
        match relay.next(Some(until)).await {
            Next::Frame(frame) => pending.push(frame),
            Next::Done(answer, status, held) => {
                let going_on = held.is_some();
                let ending = settle(correlated.ending, held, &relay.translation);
                if pending.is_empty() {
                    if !going_on {
                        // Over, and answered as JSON: nothing of it is read again.
                        relay.translation.session.forget(stream);
                    }
                    drop(ending);
                    return json(status, answer);
                }
                pending.push(answer);
                return stream_response(pending, None, ending);
            }
            Next::Idle => break,
        }
    }
    let ending = correlated.ending;
    stream_response(pending, Some(relay), ending)
}

/// After the answer: a request held for input keeps its session (and is released if the
/// client never comes back); one that is over ends a session of its own, or gives back one
/// lent to it.
fn settle(
    ending: Option<Box<dyn Ending>>,
    held: Option<HeldRequest>,
    translation: &Translation,
) -> Option<Box<dyn Ending>> {
    let Some(held) = held else {
        return ending;
    };
    if let Some(ending) = ending {
        ending.disarm();
    }
    translation.session.hold_for_input(held.stream);
    input::release_later(
        translation.registry.clone(),
        translation.session.clone(),
        held,
        translation.input_ttl,
        translation.held_calls.clone(),
    );
    None
}

/// An SSE response: what was already translated, then the rest of the request's stream.
fn stream_response(
    pending: Vec<Bytes>,
    relay: Option<Relay>,
    ending: Option<Box<dyn Ending>>,
) -> http::Response<Body> {
    let keep_alive = match &relay {
        Some(relay) => KeepAlive::AfterSilence(relay.keep_alive),
        None => KeepAlive::Off,
    };
    let source = CallStream {
        pending: pending.into(),
        relay,
        ending,
        held: None,
    };
    event_stream::open(source, Options::until_its_source_ends(keep_alive, CHUNKS))
}

/// A call's SSE stream: what was already translated, then the relay's frames until the answer.
struct CallStream {
    pending: VecDeque<Bytes>,
    relay: Option<Relay>,
    ending: Option<Box<dyn Ending>>,
    /// The request held for input, once the answer says so.
    held: Option<HeldRequest>,
}

impl Source for CallStream {
    async fn next(&mut self, until: Option<Instant>) -> event_stream::Next {
        if let Some(frame) = self.pending.pop_front() {
            return event_stream::Next::Frames(vec![sse::event(None, &frame)]);
        }
        let Some(relay) = &mut self.relay else {
            return event_stream::Next::End(None);
        };
        match relay.next(until).await {
            Next::Frame(frame) => event_stream::Next::Frames(vec![sse::event(None, &frame)]),
            Next::Done(answer, _, held) => {
                self.held = held;
                event_stream::Next::End(Some(sse::event(None, &answer)))
            }
            Next::Idle => event_stream::Next::Idle,
        }
    }

    /// A client that left cancels the request; one that got the answer settles it.
    async fn finish(self, ended: Ended) {
        let mut ending = self.ending;
        if let Some(relay) = self.relay {
            match ended {
                Ended::ClientLeft => relay.translation.cancel().await,
                _ => ending = settle(ending, self.held, &relay.translation),
            }
        }
        drop(ending);
    }
}

/// What the relay reads of each message of the request's stream before it knows more.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
}

/// What one message of the request's stream becomes for the client.
enum Outcome {
    /// Sent on the stream.
    Send(Bytes),
    /// The answer: the request is over (with the status a JSON answer gets).
    Final(Bytes, StatusCode),
    /// A server request the client is to answer: its input key, id and `{method, params}`.
    Input(String, Value, Value),
    Skip,
}

/// What the relay has next for the client.
enum Next {
    Frame(Bytes),
    /// The answer, its status, and the request held for input if it is `input_required`.
    Done(Bytes, StatusCode, Option<HeldRequest>),
    /// Nothing before the deadline.
    Idle,
}

/// Reads the request's stream and translates it, gathering server requests into one
/// `input_required` answer.
struct Relay {
    translation: Translation,
    reader: Reader,
    buffered: VecDeque<Event>,
    inputs: BTreeMap<String, (Value, Value)>,
    gather_until: Option<Instant>,
    /// The position of the last message translated (where a retry reads on).
    read_through: u64,
    spans: Spans,
    /// How often an idle response stream gets a comment, so proxies in between keep it open
    /// (`http.sse_keep_alive`).
    keep_alive: Duration,
    /// The span of the `input_required` round being gathered (tracing on): from the server's
    /// first request to the answer that hands them to the client.
    round: Option<Span>,
}

impl Relay {
    async fn next(&mut self, deadline: Option<Instant>) -> Next {
        loop {
            if let Some(event) = self.buffered.pop_front() {
                self.read_through = event.seq;
                match self.translation.translate(&event.payload).await {
                    Outcome::Send(frame) => return Next::Frame(frame),
                    Outcome::Final(answer, status) => return Next::Done(answer, status, None),
                    Outcome::Input(key, id, request) => {
                        match self.translation.call.given_answer(&key) {
                            // Answered already by the call itself: no round trip.
                            Some(answer) => self.translation.answer_input(&id, answer).await,
                            None => {
                                if self.round.is_none() {
                                    self.round = self.spans.start(
                                        "input_required round",
                                        spans::Kind::Internal,
                                        self.translation.call.trace.as_ref(),
                                    );
                                }
                                self.inputs.insert(key, (id, request));
                                self.gather_until.get_or_insert(Instant::now() + GATHER);
                            }
                        }
                    }
                    Outcome::Skip => {}
                }
                continue;
            }
            let wait = match (deadline, self.gather_until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let delivery = match wait {
                Some(until) => match tokio::time::timeout_at(until, self.reader.next()).await {
                    Ok(delivery) => delivery,
                    Err(_) if self.gather_until.is_some_and(|g| g <= Instant::now()) => {
                        let (answer, held) = self.input_required();
                        let taken = self.translation.held_calls.hold(&held);
                        if let Some(mut round) = self.round.take() {
                            describe_round(&mut round, &held, &self.translation.call);
                            if !taken {
                                round.fail("too many of the principal's calls wait for its input");
                            }
                        }
                        if taken {
                            return Next::Done(answer, StatusCode::OK, Some(held));
                        }
                        let refused = self.translation.too_many_held(&held).await;
                        return Next::Done(refused, StatusCode::TOO_MANY_REQUESTS, None);
                    }
                    Err(_) => return Next::Idle,
                },
                None => self.reader.next().await,
            };
            match delivery {
                Some(delivery) => self.buffered.extend(delivery.events),
                None => return Next::Done(self.translation.lost(), StatusCode::OK, None),
            }
        }
    }

    /// The `input_required` answer for the gathered server requests, and the held request
    /// its `requestState` names.
    fn input_required(&mut self) -> (Bytes, HeldRequest) {
        let t = &self.translation;
        let inputs = std::mem::take(&mut self.inputs);
        self.gather_until = None;
        let held = HeldRequest {
            session: t.session.id().to_owned(),
            principal: t.call.principal.as_str().to_owned(),
            own_session: t.own_session,
            method: t.call.method.clone(),
            name: t.call.name.clone(),
            stream: match t.stream {
                StreamKey::Request(n) => n,
                StreamKey::Standalone => 0,
            },
            after: self.read_through,
            request_id: t.call.in_flight_id.clone(),
            waiting: inputs
                .iter()
                .map(|(k, (id, _))| (k.clone(), id.clone()))
                .collect(),
            expires_ms: state::expiry(t.input_ttl),
        };
        let requests: serde_json::Map<String, Value> = inputs
            .into_iter()
            .map(|(k, (_, request))| (k, request))
            .collect();
        let mut result = json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": held.sign(&t.state_key),
        });
        if let Some(info) = t.initialized.result.get("serverInfo") {
            result["_meta"] = json!({ SERVER_INFO_KEY: info });
        }
        let answer = json!({ "jsonrpc": "2.0", "id": t.call.client_id, "result": result });
        (Bytes::from(answer.to_string()), held)
    }
}

/// What an `input_required` round's span says: the call, how many requests it hands the
/// client and under which input keys.
fn describe_round(round: &mut Span, held: &HeldRequest, call: &Call) {
    round.set("mcp.method.name", call.method.clone());
    round.set(
        "mcp.session.id",
        crate::redact::session(&held.session).to_string(),
    );
    round.set(
        "mcp_proxy.input_required.requests",
        held.waiting.len() as u64,
    );
    let keys: Vec<&str> = held.waiting.keys().map(String::as_str).collect();
    round.set("mcp_proxy.input_required.keys", keys.join(","));
}

/// What the front needs to turn the server's messages into the client's.
struct Translation {
    registry: Arc<Registry>,
    session: Arc<Session>,
    call: Call,
    stream: StreamKey,
    /// The server's `initialize` result (who answers).
    initialized: Arc<Initialized>,
    hints: CacheHints,
    own_session: bool,
    state_key: state::StateKey,
    input_ttl: Duration,
    held_calls: Arc<HeldCalls>,
}

impl Translation {
    /// The principal has too many calls waiting for input: this one's questions are refused
    /// at the server, the call cancelled, and the client told why.
    async fn too_many_held(&self, held: &HeldRequest) -> Bytes {
        for id in held.waiting.values() {
            self.refuse_upstream("a request for input", id).await;
        }
        self.cancel_for("too many of the principal's calls wait for its input")
            .await;
        let error = json!({ "jsonrpc": "2.0", "id": self.call.client_id, "error": {
            "code": INTERNAL_ERROR,
            "message": format!(
                "this principal already has {} calls waiting for its input; answer or abandon \
                 them first", self.held_calls.limit()) } });
        Bytes::from(error.to_string())
    }

    async fn translate(&self, payload: &Bytes) -> Outcome {
        let Ok(head) = serde_json::from_slice::<Head>(payload) else {
            return Outcome::Skip;
        };
        match (head.method.as_deref(), head.id) {
            (Some(method), Some(id)) => {
                let (Ok(message), Ok(id)) = (
                    serde_json::from_slice::<Value>(payload),
                    serde_json::from_str::<Value>(id.get()),
                ) else {
                    return Outcome::Skip;
                };
                self.server_request(method, &id, &message).await
            }
            (Some("notifications/progress"), None) => Outcome::Send(payload.clone()),
            (Some("notifications/message"), None) => match self.wants_log(payload) {
                true => Outcome::Send(payload.clone()),
                false => Outcome::Skip,
            },
            (Some(_), None) => Outcome::Skip,
            (None, _) => {
                let c = &self.call;
                if c.method == "tools/list" {
                    // What the server's tools mirror into headers, for the calls to come.
                    if let Some(Ok(listed)) = head.result.map(|r| serde_json::from_str(r.get())) {
                        self.registry.tool_marks().record(&listed);
                    }
                }
                let raw_info = self.initialized.server_info.as_deref();
                if let Some(answer) = head.result.and_then(|result| {
                    envelope::complete(result, &c.client_id, &c.method, raw_info, self.hints)
                }) {
                    self.remember(&answer);
                    return Outcome::Final(answer, StatusCode::OK);
                }
                let Ok(message) = serde_json::from_slice::<Value>(payload) else {
                    return Outcome::Skip;
                };
                let info = self.initialized.result.get("serverInfo");
                let (answer, status) = envelope::response(
                    message,
                    &c.client_id,
                    &c.method,
                    &c.params(),
                    info,
                    self.hints,
                );
                Outcome::Final(Bytes::from(answer.to_string()), status)
            }
        }
    }

    /// A cacheable result, kept for as long as it says it stays fresh.
    fn remember(&self, answer: &[u8]) {
        #[derive(serde::Deserialize)]
        struct Answer<'a> {
            #[serde(borrow)]
            result: &'a RawValue,
        }
        let Some(key) = &self.call.cache_key else {
            return;
        };
        if let Ok(answer) = serde_json::from_slice::<Answer>(answer) {
            let cache = self.registry.response_cache();
            let asked = self.call.cache_generation;
            cache.store(
                &self.call.method,
                key,
                &self.call.principal,
                answer.result,
                asked,
            );
        }
    }

    /// The answer when the session ended before the request's.
    fn lost(&self) -> Bytes {
        let lost = json!({ "jsonrpc": "2.0", "id": self.call.client_id,
            "error": { "code": INTERNAL_ERROR,
                       "message": "the session serving this request ended before its answer" } });
        Bytes::from(lost.to_string())
    }

    /// A log message goes to a client that asked for this level or a lower one.
    fn wants_log(&self, payload: &[u8]) -> bool {
        let Some(wanted) = self
            .call
            .meta
            .log_level
            .as_deref()
            .and_then(checks::level_rank)
        else {
            return false;
        };
        serde_json::from_slice::<Value>(payload).is_ok_and(|message| {
            message["params"]["level"]
                .as_str()
                .and_then(checks::level_rank)
                .is_some_and(|level| level >= wanted)
        })
    }

    /// A request of the server's, which a 2026-07-28 client is never sent as such: one the
    /// client can answer is held for `input_required` (only `tools/call`, `prompts/get` and
    /// `resources/read` may ask); any other is refused upstream, and one for a capability the
    /// request did not declare ends it with -32021.
    async fn server_request(&self, method: &str, id: &Value, message: &Value) -> Outcome {
        if method == "ping" {
            self.answer_upstream(json!({ "jsonrpc": "2.0", "id": id, "result": {} }))
                .await;
            return Outcome::Skip;
        }
        let needed = input::required_capability(method, &message["params"]);
        let may_ask = matches!(
            self.call.method.as_str(),
            "tools/call" | "prompts/get" | "resources/read"
        );
        let declared = needed
            .as_deref()
            .map(|capability| input::declares(&self.call.meta.capabilities, capability));
        match (needed, declared) {
            (Some(_), Some(true)) if may_ask => {
                let (key, request) = input::input_request(method, id, &message["params"]);
                return Outcome::Input(key, id.clone(), request);
            }
            (Some(capability), Some(false)) => {
                self.refuse_upstream(method, id).await;
                let error = json!({ "jsonrpc": "2.0", "id": self.call.client_id, "error": {
                    "code": MISSING_CAPABILITY,
                    "message": format!("this request needs the client capability {capability}, which it did not declare"),
                    "data": { "requiredCapabilities": input::capability_object(&capability) } } });
                self.cancel_for("the client cannot answer what the server asked")
                    .await;
                return Outcome::Final(Bytes::from(error.to_string()), StatusCode::BAD_REQUEST);
            }
            _ => {}
        }
        self.refuse_upstream(method, id).await;
        Outcome::Skip
    }

    async fn refuse_upstream(&self, method: &str, id: &Value) {
        let refusal = format!("the client cannot answer {method} here");
        self.answer_upstream(json!({ "jsonrpc": "2.0", "id": id,
            "error": { "code": -32601, "message": refusal } }))
            .await;
    }

    async fn answer_input(&self, id: &Value, answer: Value) {
        self.answer_upstream(json!({ "jsonrpc": "2.0", "id": id, "result": answer }))
            .await;
    }

    async fn answer_upstream(&self, answer: Value) {
        input::answer_upstream(&self.registry, &self.session, answer).await;
    }

    /// The client no longer wants the answer: the server is told to stop.
    async fn cancel(&self) {
        self.cancel_for("the client closed its response stream")
            .await;
    }

    async fn cancel_for(&self, reason: &str) {
        input::cancel(
            &self.registry,
            &self.session,
            &self.call.in_flight_id,
            reason,
        )
        .await;
    }
}
