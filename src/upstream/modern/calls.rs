//! The session's requests through the bridge: sent on with the session's `_meta`, cancelled
//! for whatever round is at the server, and answered: the common answer as the server wrote
//! it, an `input_required` one as requests to the client whose answers go back in a retry
//! (round after round), a `tools/call` refused for its headers sent once more after the tools
//! are listed anew.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tracing::warn;

use super::{Bridge, Call, OWN};
use crate::upstream::{UpstreamError, UpstreamEvent};
use crate::wire::era::{
    capability_object, declares, required_capability, HEADER_MISMATCH, INPUT_KEY,
    MISSING_CAPABILITY,
};
use crate::wire::jsonrpc::{error_response, id_key, Kind, Message};
use crate::wire::methods::{self, CANCELLED, TOOLS_CALL, TOOLS_LIST};
use crate::wire::mirrored::ANNOTATION;

impl Bridge {
    /// A request of the session's, sent on with the session's `_meta`.
    pub(super) async fn forward(&self, request: &Message) -> Result<(), UpstreamError> {
        let id = request.id().cloned().unwrap_or(Value::Null);
        let method = request.method().unwrap_or_default().to_owned();
        let params: Value = request
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let params = self.with_meta(params);
        let request = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        // Only these may be answered with input_required: the others are not remembered.
        if methods::may_ask_for_input(&method) {
            self.lock().calls.insert(
                id_key(&id),
                Call {
                    id: id.clone(),
                    method: method.clone(),
                    params: request["params"].clone(),
                    state: None,
                    answers: Map::new(),
                    unanswered: BTreeSet::new(),
                    relisted: false,
                },
            );
        }
        if method == TOOLS_LIST {
            self.lock().listings.insert(id_key(&id));
        }
        self.to_server(request).await
    }

    /// The client's cancellation, for whatever round of the call is at the server.
    pub(super) async fn cancel(&self, notification: &Message) -> Result<(), UpstreamError> {
        let mut params: Value = notification
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let key = id_key(&params["requestId"]);
        let current = {
            let mut state = self.lock();
            let retry = state
                .retries
                .iter()
                .find(|(_, original)| id_key(original) == key)
                .map(|(retry, _)| retry.clone());
            if let Some(retry) = &retry {
                state.retries.remove(retry);
            }
            let call = state.calls.remove(&key);
            state.questions.retain(|_, (call, _)| *call != key);
            match (retry, call) {
                (Some(retry), _) => Some(json!(retry)),
                // Waiting for the client's answers: nothing is at the server.
                (None, Some(call)) if !call.unanswered.is_empty() => None,
                (None, _) => Some(params["requestId"].clone()),
            }
        };
        let Some(current) = current else {
            return Ok(());
        };
        params["requestId"] = current;
        self.notify_server(CANCELLED, params).await
    }

    /// The client's answer to a question of the server's; the call is retried once every
    /// question of its round is answered.
    pub(super) async fn client_answered(&self, response: &Message) -> Result<(), UpstreamError> {
        let answered: Value = serde_json::from_slice(&response.to_bytes()).unwrap_or_default();
        let question = response.id().map(id_key).unwrap_or_default();
        let retry = {
            let mut state = self.lock();
            let Some((call_key, input)) = state.questions.remove(&question) else {
                return Ok(());
            };
            let Some(call) = state.calls.get_mut(&call_key) else {
                return Ok(());
            };
            if let Some(error) = answered.get("error") {
                let id = call.id.clone();
                state.calls.remove(&call_key);
                state.questions.retain(|_, (c, _)| *c != call_key);
                drop(state);
                self.fail(
                    &id,
                    format!("the client could not answer the server's question: {error}"),
                );
                return Ok(());
            }
            call.answers
                .insert(input.clone(), answered["result"].clone());
            call.unanswered.remove(&input);
            match call.unanswered.is_empty() {
                true => Some(call_key),
                false => None,
            }
        };
        match retry {
            Some(call_key) => self.retry(&call_key).await,
            None => Ok(()),
        }
    }

    /// Sends a call again with the answers of its round and the server's `requestState`.
    async fn retry(&self, call_key: &str) -> Result<(), UpstreamError> {
        let request = {
            let mut state = self.lock();
            let retry_id = state.own_id("retry");
            let Some(call) = state.calls.get_mut(call_key) else {
                return Ok(());
            };
            let mut params = call.params.clone();
            params["inputResponses"] = Value::Object(std::mem::take(&mut call.answers));
            if let Some(request_state) = call.state.take() {
                params["requestState"] = request_state;
            }
            let request = json!({ "jsonrpc": "2.0", "id": retry_id, "method": call.method,
                                  "params": params });
            let original = call.id.clone();
            state.retries.retain(|_, o| *o != original);
            state.retries.insert(retry_id, original);
            request
        };
        self.to_server(request).await
    }

    /// A message of the server's, as the session takes it.
    pub(super) fn server_said(&self, mut message: Box<Message>) {
        let own = message
            .id()
            .and_then(Value::as_str)
            .is_some_and(|id| id.starts_with(OWN));
        let asks = message
            .result()
            .is_some_and(|result| result.get().contains("\"input_required\""));
        if message.kind() == Kind::Response && !own && !asks {
            // The common answer: sent on as the server wrote it, without `resultType`.
            if let Some(key) = message.id().map(id_key) {
                let (listing, call) = {
                    let mut state = self.lock();
                    (state.listings.remove(&key), state.calls.remove(&key))
                };
                if listing {
                    if let Some(usable) = message.result().and_then(|r| self.read_tools(r)) {
                        message.set_result(usable);
                    }
                }
                if let Some(call) = call.filter(|call| refused_headers(call, &message)) {
                    return self.relist_and_retry(call, message);
                }
            }
            if let Some(result) = message
                .result()
                .filter(|r| r.get().contains("\"resultType\""))
            {
                let fields = serde_json::from_str::<BTreeMap<String, &RawValue>>(result.get());
                if let Ok(mut fields) = fields {
                    fields.remove("resultType");
                    if let Ok(result) = serde_json::value::to_raw_value(&fields) {
                        message.set_result(result);
                    }
                }
            }
            return self.session.deliver(UpstreamEvent::Message(message));
        }
        let value: Value = match serde_json::from_slice(&message.to_bytes()) {
            Ok(value) => value,
            Err(_) => return self.session.deliver(UpstreamEvent::Message(message)),
        };
        match message.kind() {
            Kind::Response => self.response(value),
            Kind::Notification => self.notification(value),
            // A modern server sends no requests; the session answers what it can.
            Kind::Request => self.session.deliver(UpstreamEvent::Message(message)),
        }
    }

    fn response(&self, mut response: Value) {
        let key = id_key(&response["id"]);
        if key.starts_with(&format!("\"{OWN}")) {
            let own = response["id"].as_str().unwrap_or_default().to_owned();
            let mut state = self.lock();
            if let Some(retried) = state.retries.remove(&own) {
                drop(state);
                response["id"] = retried;
                return self.call_answered(response);
            }
            if let Some(waiting) = state.waiting.remove(&own) {
                let _ = waiting.send(response);
            }
            let listen_ended = state.listen.as_deref() == Some(own.as_str());
            drop(state);
            if listen_ended {
                self.listen_dropped(&own);
            }
            return;
        }
        self.call_answered(response);
    }

    /// The answer to a call: the end of it, or the server's questions for the client.
    fn call_answered(&self, mut response: Value) {
        let key = id_key(&response["id"]);
        if response["result"]["resultType"] != "input_required" {
            self.lock().calls.remove(&key);
            if let Some(result) = response["result"].as_object_mut() {
                result.remove("resultType");
            }
            return self.to_session(response);
        }
        let result = &response["result"];
        let requests: BTreeMap<String, Value> = result["inputRequests"]
            .as_object()
            .map(|r| r.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let mut questions = Vec::new();
        let retry_now = {
            let mut state = self.lock();
            let undeclared = requests.values().find_map(|request| {
                let method = request["method"].as_str().unwrap_or_default();
                let capability = required_capability(method, &request["params"])?;
                let declared = state
                    .capabilities
                    .as_object()
                    .is_some_and(|c| declares(c, &capability));
                (!declared).then_some(capability)
            });
            if let Some(capability) = undeclared {
                state.calls.remove(&key);
                drop(state);
                let message = format!(
                    "the server needs the client capability {capability}, which this client did not declare"
                );
                let data = json!({ "requiredCapabilities": capability_object(&capability) });
                return self.deliver_bytes(error_response(
                    &response["id"],
                    MISSING_CAPABILITY,
                    &message,
                    Some(data),
                ));
            }
            let mut asked = Vec::new();
            for input in requests.keys() {
                let question = state.own_id("input");
                asked.push((question.clone(), input.clone()));
            }
            let Some(call) = state.calls.get_mut(&key) else {
                return;
            };
            call.state = result.get("requestState").cloned();
            call.unanswered = requests.keys().cloned().collect();
            for (question, input) in asked {
                // The server's key goes with the question (a 2026-07-28 client of this proxy
                // gets it back as the same key).
                let mut params = requests[&input]["params"].clone();
                if params.is_object() {
                    params["_meta"][INPUT_KEY] = json!(input);
                }
                questions.push(json!({ "jsonrpc": "2.0", "id": question,
                    "method": requests[&input]["method"], "params": params }));
                state
                    .questions
                    .insert(id_key(&json!(question)), (key.clone(), input));
            }
            requests.is_empty()
        };
        if retry_now {
            if let Some(this) = self.this.upgrade() {
                tokio::spawn(async move {
                    let _ = this.retry(&key).await;
                });
            }
            return;
        }
        for question in questions {
            self.to_session(question);
        }
    }

    /// Records the marks of a `tools/list` result; the result without the tools whose marks
    /// are invalid (a client over 2026-07-28 HTTP leaves them out), if there were any.
    fn read_tools(&self, result: &RawValue) -> Option<Box<RawValue>> {
        if !result.get().contains(ANNOTATION) {
            // Nothing mirrored: every tool is usable as it is.
            let listed: Value = serde_json::from_str(result.get()).ok()?;
            self.tool_marks.record(&listed);
            return None;
        }
        let mut listed: Value = serde_json::from_str(result.get()).ok()?;
        let invalid = self.tool_marks.record(&listed);
        if invalid.is_empty() {
            return None;
        }
        for (tool, why) in &invalid {
            warn!(tool, %why, "a tool of the server is left out of tools/list: its x-mcp-header marks are invalid");
        }
        if let Some(tools) = listed["tools"].as_array_mut() {
            tools.retain(|tool| !invalid.iter().any(|(name, _)| tool["name"] == **name));
        }
        serde_json::value::to_raw_value(&listed).ok()
    }

    /// The server refused a call's headers: its tools are listed again (their marks may have
    /// changed) and the call sent once more; if listing fails, the refusal goes to the client.
    fn relist_and_retry(&self, mut call: Call, refusal: Box<Message>) {
        let Some(this) = self.this.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            let listed = this.ask_server("tools", TOOLS_LIST, json!({})).await;
            let Ok(listed) = listed else {
                return this.session.deliver(UpstreamEvent::Message(refusal));
            };
            this.tool_marks.record(&listed["result"]);
            call.relisted = true;
            let request = json!({ "jsonrpc": "2.0", "id": call.id, "method": call.method,
                                   "params": call.params });
            this.lock().calls.insert(id_key(&call.id), call);
            if this.to_server(request).await.is_err() {
                this.session.deliver(UpstreamEvent::Message(refusal));
            }
        });
    }
}

/// A `tools/call` the server refused for its headers (-32020), not yet sent again.
fn refused_headers(call: &Call, answer: &Message) -> bool {
    call.method == TOOLS_CALL
        && !call.relisted
        && answer
            .error()
            .and_then(|e| serde_json::from_str::<Value>(e.get()).ok())
            .is_some_and(|e| e["code"] == HEADER_MISMATCH)
}
