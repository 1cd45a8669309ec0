//! One 2026-07-28 call: what the client asked, and what each message of its request's stream
//! becomes for it (its progress, its log messages at or above the level it asked for, then its
//! result in the modern envelope, kept in the response cache when it may be). A call the client
//! gives up is cancelled at the server.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use serde_json::value::RawValue;
use serde_json::Value;

use super::envelope::{self, CacheHints};
use super::input;
use super::state;
use crate::base::caller::Caller;
use crate::front::traced;
use crate::session::correlate::held::HeldCalls;
use crate::session::correlate::Initialized;
use crate::session::log::StreamKey;
use crate::session::{Registry, Session};
use crate::telemetry::spans::SpanContext;
use crate::wire::era::params::Params;
use crate::wire::era::request::{self as checks, RequestMeta};
use crate::wire::jsonrpc::{self, Message, INTERNAL_ERROR};
use crate::wire::methods::{MESSAGE, PROGRESS, TOOLS_LIST};

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
    /// Who it acts for.
    pub caller: Caller,
    /// A cacheable request's params as its result is cached under.
    pub cache_key: Option<String>,
    /// The cache's invalidations when it was asked (see `ResponseCache::generation`).
    pub cache_generation: u64,
    /// The trace context of the request (its span's, with tracing on).
    pub trace: Option<SpanContext>,
}

impl Call {
    pub fn new(request: &Message, params: &Params, meta: RequestMeta, caller: Caller) -> Call {
        let client_id = request.id().cloned().unwrap_or(Value::Null);
        Call {
            in_flight_id: client_id.clone(),
            client_id,
            method: request.method().unwrap_or_default().to_owned(),
            params: request.params().map(ToOwned::to_owned),
            name: params.name(),
            // A retry continues a call: its answer is no one's to reuse.
            cache_key: (crate::wire::era::is_cacheable(request.method().unwrap_or_default())
                && !params.has("requestState")
                && !params.has("inputResponses"))
            .then(|| params.cache_key()),
            cache_generation: 0,
            trace: traced::context_of(request),
            meta,
            caller,
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
    pub(super) fn given_answer(&self, key: &str) -> Option<Value> {
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
pub(super) enum Outcome {
    /// Sent on the stream.
    Send(Bytes),
    /// The answer: the request is over (with the status a JSON answer gets).
    Final(Bytes, StatusCode),
    /// A server request the client is to answer: its input key, id and `{method, params}`.
    Input(String, Value, Value),
    Skip,
}

/// What the front needs to turn the server's messages into the client's.
pub(super) struct Translation {
    pub(super) registry: Arc<Registry>,
    pub(super) session: Arc<Session>,
    pub(super) call: Call,
    pub(super) stream: StreamKey,
    /// The server's `initialize` result (who answers).
    pub(super) initialized: Arc<Initialized>,
    pub(super) hints: CacheHints,
    pub(super) own_session: bool,
    pub(super) state_key: state::StateKey,
    pub(super) input_ttl: Duration,
    pub(super) held_calls: Arc<HeldCalls>,
}

impl Translation {
    pub(super) async fn translate(&self, payload: &Bytes) -> Outcome {
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
            (Some(PROGRESS), None) => Outcome::Send(payload.clone()),
            (Some(MESSAGE), None) => match self.wants_log(payload) {
                true => Outcome::Send(payload.clone()),
                false => Outcome::Skip,
            },
            (Some(_), None) => Outcome::Skip,
            (None, _) => {
                let c = &self.call;
                if c.method == TOOLS_LIST {
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
                self.call.caller.principal(),
                answer.result,
                asked,
            );
        }
    }

    /// The answer when the session ended before the request's.
    pub(super) fn lost(&self) -> Bytes {
        jsonrpc::error_response(
            &self.call.client_id,
            INTERNAL_ERROR,
            "the session serving this request ended before its answer",
            None,
        )
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

    /// The client no longer wants the answer: the server is told to stop.
    pub(super) async fn cancel(&self) {
        self.cancel_for("the client closed its response stream")
            .await;
    }

    pub(super) async fn cancel_for(&self, reason: &str) {
        input::cancel(
            &self.registry,
            &self.session,
            &self.call.in_flight_id,
            reason,
        )
        .await;
    }
}
