//! `input_required` (multi round-trip requests) for servers that still ask the client: a
//! server request a 2026-07-28 client can answer is held, and the client gets it under an input
//! key; its retry (`retry`: a new id, `inputResponses`, the `requestState` it was given)
//! answers the held requests and reads on where the first answer stopped, round after round. A legacy server may
//! name an input key itself (`_meta["mcp-session-proxy/inputKey"]` on its request); otherwise it
//! is `input-<id>`. A held request whose client never comes back is refused upstream after
//! `input_ttl`, and the call cancelled.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::state::HeldRequest;
use crate::session::correlate::held::HeldCalls;
use crate::session::EndReason;
use crate::session::{Registry, Session};
use crate::wire::era::INPUT_KEY;
pub use crate::wire::era::{declares, required_capability};
use crate::wire::jsonrpc::{Message, INTERNAL_ERROR};
use crate::wire::methods::CANCELLED;

/// A server request as an input request: its key, and `{method, params}`.
pub fn input_request(method: &str, id: &Value, params: &Value) -> (String, Value) {
    let mut params = params.clone();
    let named = params["_meta"][INPUT_KEY].as_str().map(str::to_owned);
    if let Some(Value::Object(meta)) = params.get_mut("_meta") {
        meta.remove(INPUT_KEY);
        if meta.is_empty() {
            params.as_object_mut().map(|p| p.remove("_meta"));
        }
    }
    let key = named.unwrap_or_else(|| match id {
        Value::String(id) => format!("input-{id}"),
        other => format!("input-{other}"),
    });
    let request = match params.is_null() {
        true => json!({ "method": method }),
        false => json!({ "method": method, "params": params }),
    };
    (key, request)
}

pub async fn answer_upstream(registry: &Registry, session: &Arc<Session>, answer: Message) {
    let _ = registry.send(session, answer).await;
}

/// Tells the server to stop the request in flight as `request_id`.
pub async fn cancel(registry: &Registry, session: &Arc<Session>, request_id: &Value, reason: &str) {
    let params = json!({ "requestId": request_id, "reason": reason });
    let params = serde_json::value::to_raw_value(&params).ok();
    let _ = registry
        .send(session, Message::request(None, CANCELLED, params))
        .await;
}

/// After `ttl`, the held requests still waiting are refused upstream and the call cancelled
/// (a session of its own ended): a client that never retries holds nothing for long.
pub fn release_later(
    registry: Arc<Registry>,
    session: Arc<Session>,
    held: HeldRequest,
    ttl: Duration,
    held_calls: Arc<HeldCalls>,
) {
    // The session is not kept for the wait: one that ends meanwhile has nothing to release.
    let session = Arc::downgrade(&session);
    tokio::spawn(async move {
        tokio::time::sleep(ttl).await;
        held_calls.release(&held.principal, &held.round());
        let Some(session) = session.upgrade() else {
            return;
        };
        let waiting: Vec<&Value> = held
            .waiting
            .values()
            .filter(|id| session.awaits_answer(id))
            .collect();
        if waiting.is_empty() {
            return;
        }
        for id in waiting {
            let refusal = Message::error_response(
                id,
                INTERNAL_ERROR,
                "the client did not answer in time",
                None,
            );
            answer_upstream(&registry, &session, refusal).await;
        }
        let reason = "the client did not answer the server's questions in time";
        cancel(&registry, &session, &held.request_id, reason).await;
        if held.own_session {
            registry.end(session.id(), EndReason::Idle);
        }
    });
}
