//! What the server asks of a 2026-07-28 client during a call: `ping` is answered here; the
//! requests the client can answer (`elicitation/create`, `sampling/createMessage`,
//! `roots/list`) are gathered with the others sent with them into one `input_required` answer
//! whose `requestState` names the request held for the client's retry; one for a capability the
//! call did not declare is refused upstream and answered -32021; any other is refused upstream.

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::call::{Call, Outcome, Translation};
use super::exchange::{Next, Relay};
use super::input;
use super::state::{self, HeldRequest};
use crate::front::rejection::Rejection;
use crate::session::log::StreamKey;
use crate::telemetry::spans::{self, Span};
use crate::wire::era::SERVER_INFO_KEY;
use crate::wire::jsonrpc::{self, Message, METHOD_NOT_FOUND};
use crate::wire::methods::{self, PING};

/// How long after a server request others sent with it are gathered into the same answer.
const GATHER: Duration = Duration::from_millis(25);

impl Relay {
    /// A request of the server's the client is to answer: answered at once when the call
    /// carries its answer already, else gathered into the round's `input_required` answer.
    pub(super) async fn gather(&mut self, key: String, id: Value, request: Value) {
        match self.translation.call.given_answer(&key) {
            // Answered already by the call itself: no round trip.
            Some(answer) => self.translation.answer_input(&id, answer).await,
            None => {
                if self.round.is_none() {
                    self.round = self.spans.start(
                        "input_required round",
                        spans::SpanKind::Internal,
                        self.translation.call.trace.as_ref(),
                    );
                }
                self.inputs.insert(key, (id, request));
                self.gather_until.get_or_insert(Instant::now() + GATHER);
            }
        }
    }

    /// The gathered requests go to the client as `input_required`, the call held for its
    /// retry; refused instead when the principal has too many calls held already.
    pub(super) async fn hand_over(&mut self) -> Next {
        let (answer, held) = self.input_required();
        let taken = self
            .translation
            .held_calls
            .hold(&held.principal, held.round());
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
        Next::Done(refused.error_body(), refused.status, None)
    }

    /// The `input_required` answer for the gathered server requests, and the held request
    /// its `requestState` names.
    fn input_required(&mut self) -> (Bytes, HeldRequest) {
        let t = &self.translation;
        let inputs = std::mem::take(&mut self.inputs);
        self.gather_until = None;
        let held = HeldRequest {
            session: t.session.id().to_owned(),
            principal: t.call.caller.principal().as_str().to_owned(),
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
        (jsonrpc::result_response(&t.call.client_id, result), held)
    }
}

/// What an `input_required` round's span says: the call, how many requests it hands the
/// client and under which input keys.
fn describe_round(round: &mut Span, held: &HeldRequest, call: &Call) {
    round.set("mcp.method.name", call.method.clone());
    round.set(
        "mcp.session.id",
        crate::telemetry::redact::session(&held.session).to_string(),
    );
    round.set(
        "mcp_proxy.input_required.requests",
        held.waiting.len() as u64,
    );
    let keys: Vec<&str> = held.waiting.keys().map(String::as_str).collect();
    round.set("mcp_proxy.input_required.keys", keys.join(","));
}

impl Translation {
    /// The principal has too many calls waiting for input: this one's questions are refused
    /// at the server, the call cancelled, and the client told why.
    async fn too_many_held(&self, held: &HeldRequest) -> Rejection {
        for id in held.waiting.values() {
            self.refuse_upstream("a request for input", id).await;
        }
        self.cancel_for("too many of the principal's calls wait for its input")
            .await;
        Rejection::too_many_held(self.held_calls.limit()).with_id(Some(&self.call.client_id))
    }

    /// A request of the server's, which a 2026-07-28 client is never sent as such: one the
    /// client can answer is held for `input_required` (only `tools/call`, `prompts/get` and
    /// `resources/read` may ask); any other is refused upstream, and one for a capability the
    /// request did not declare ends it with -32021.
    pub(super) async fn server_request(
        &self,
        method: &str,
        id: &Value,
        message: &Value,
    ) -> Outcome {
        if method == PING {
            self.answer_upstream(Message::response(id, json!({}))).await;
            return Outcome::Skip;
        }
        let needed = input::required_capability(method, &message["params"]);
        let may_ask = methods::may_ask_for_input(&self.call.method);
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
                let refused =
                    Rejection::missing_capability(&capability).with_id(Some(&self.call.client_id));
                self.cancel_for("the client cannot answer what the server asked")
                    .await;
                return Outcome::Final(refused.error_body(), refused.status);
            }
            _ => {}
        }
        self.refuse_upstream(method, id).await;
        Outcome::Skip
    }

    async fn refuse_upstream(&self, method: &str, id: &Value) {
        let refusal = format!("the client cannot answer {method} here");
        self.answer_upstream(Message::error_response(
            id,
            METHOD_NOT_FOUND,
            &refusal,
            None,
        ))
        .await;
    }

    async fn answer_input(&self, id: &Value, answer: Value) {
        self.answer_upstream(Message::response(id, answer)).await;
    }

    async fn answer_upstream(&self, answer: Message) {
        input::answer_upstream(&self.registry, &self.session, answer).await;
    }
}
