//! A 2026-07-28 retry (a new id, `inputResponses`, and the `requestState` it was given): the
//! state is checked and spent once, the held server requests are answered, and the call reads on
//! where its first answer stopped.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::call::Call;
use super::exchange::respond;
use super::input;
use super::state::{self, HeldRequest};
use crate::front::rejection::Rejection;
use crate::front::App;
use crate::session::correlate::{ClientDeclared, Correlated, EndOnDrop};
use crate::session::log::StreamKey;
use crate::session::Session;
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::Message;

/// A retry: the call's `requestState` and `inputResponses` continue the held request.
pub async fn resume(
    app: &App,
    request: &Message,
    mut call: Call,
) -> Result<http::Response<Body>, Rejection> {
    let principal = call.caller.principal().clone();
    let id = request.id().cloned().unwrap_or(Value::Null);
    let refused = |message: String| Rejection::invalid_params(message).with_id(Some(&id));
    let params = call.params();
    let Some(request_state) = params["requestState"].as_str() else {
        return Err(refused("requestState must be a string".into()));
    };
    let held = HeldRequest::verify(request_state, &app.modern.state_key, &principal)
        .map_err(|r| r.with_id(Some(&id)))?;
    if held.method != call.method || held.name != call.name {
        return Err(refused(format!(
            "this requestState continues {} {:?}, not this request",
            held.method, held.name
        )));
    }
    let answers = answers(&params, &held).map_err(|e| refused(e.to_string()))?;
    // Good for one retry, on whichever replica it comes to first.
    let ttl = Duration::from_millis(held.expires_ms.saturating_sub(state::now_ms()));
    let first = app
        .registry
        .spend_once(state::token(request_state), ttl)
        .await
        .map_err(|e| Rejection::session(&e).with_id(Some(&id)))?;
    if !first {
        return Err(refused(
            "this requestState was already used; call again without it".into(),
        ));
    }
    // Wherever the session lives now: a retry may come to any replica.
    let found = app
        .registry
        .find(&held.session, &call.caller)
        .await
        .map_err(|e| Rejection::session(&e).with_id(Some(&id)))?;
    let Some(session) = found else {
        app.modern
            .held_calls
            .release(&held.principal, &held.round());
        return Err(refused(
            "the request this requestState continues is over; call again without it".into(),
        ));
    };
    // A view's owner knows what it still waits for; here, an owned session does.
    let owned = session.owner().is_none();
    for (waiting, answer) in answers {
        if owned && !session.awaits_answer(&waiting) {
            return Err(refused(
                "this requestState was already used; call again without it".into(),
            ));
        }
        input::answer_upstream(&app.registry, &session, Message::response(&waiting, answer)).await;
    }
    // Its answers are in: it no longer waits (a new round is counted anew).
    app.modern
        .held_calls
        .release(&held.principal, &held.round());
    call.in_flight_id = held.request_id.clone();
    let stream = StreamKey::Request(held.stream);
    let reader = session.attach(stream, Some(held.after));
    let correlated = continued(app, session, &held, &call).await;
    Ok(respond(app, correlated, call, stream, reader).await)
}

/// The held request's session as the retry's exchange takes it: with what its server said at
/// `initialize`, and ended with the request when the request had it to itself.
async fn continued(
    app: &App,
    session: Arc<Session>,
    held: &HeldRequest,
    call: &Call,
) -> Correlated {
    let initialized = app
        .modern
        .correlation
        .initialized_of(
            &app.registry,
            &session,
            &call.caller,
            ClientDeclared::from(&call.meta),
        )
        .await;
    Correlated {
        initialized,
        ending: held
            .own_session
            .then(|| EndOnDrop::armed(app.registry.clone(), session.id().to_owned())),
        session,
    }
}

/// Why a retry's `inputResponses` do not answer its held requests.
#[derive(Debug, thiserror::Error)]
enum AnswersRefused {
    #[error("inputResponses must be an object")]
    NotAnObject,
    #[error("inputResponses[{0:?}] must be the result object of its request")]
    NotAResult(String),
    #[error("inputResponses lacks {}; answer every input request", .0.join(", "))]
    Missing(Vec<String>),
}

/// The client's answer for each held request: every input key answered with an object.
fn answers(params: &Value, held: &HeldRequest) -> Result<Vec<(Value, Value)>, AnswersRefused> {
    let given = match params.get("inputResponses") {
        Some(Value::Object(given)) => given.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err(AnswersRefused::NotAnObject),
    };
    let mut answers = Vec::new();
    let mut missing = Vec::new();
    for (key, id) in &held.waiting {
        match given.get(key) {
            Some(answer @ Value::Object(_)) => answers.push((id.clone(), answer.clone())),
            Some(_) => return Err(AnswersRefused::NotAResult(key.clone())),
            None => missing.push(key.clone()),
        }
    }
    match missing.is_empty() {
        true => Ok(answers),
        false => Err(AnswersRefused::Missing(missing)),
    }
}
