//! What a POST does for a protocol-level session (seed `000`), named by
//! `Mcp-Protocol-Session-Id`, or a `session/*` call: `session/start`, `session/resume` (its
//! answer the stream everything comes back on, numbered) and `session/end`; any other message
//! is answered 202.

use http::{HeaderMap, Response, StatusCode};
use serde_json::Value;

use super::{check_protocol_version, LAST_EVENT_ID};
use crate::base::caller::Caller;
use crate::front::rejection::Rejection;
use crate::front::request::{accepted, header_str, json};
use crate::front::session_methods;
use crate::front::session_stream::{self, Extras, Framing};
use crate::front::traced;
use crate::front::App;
use crate::session::protocol::{self, is_session_method};
use crate::session::{Session, SessionError};
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::{Kind, Message};

/// A message for a protocol-level session (or a `session/*` method) must not also name a
/// transport session, nor resume with `Last-Event-ID`.
pub(super) fn check_protocol_mode(
    headers: &http::HeaderMap,
    message: &Message,
    session_id: Option<&str>,
    protocol_session: Option<&str>,
) -> Result<(), Rejection> {
    if session_id.is_some() {
        return Err(Rejection::conflict(match protocol_session {
            Some(_) => "a request names its session by Mcp-Session-Id or by Mcp-Protocol-Session-Id, not both",
            None => "session/* methods cannot be used on a session named by Mcp-Session-Id (transport mode)",
        })
        .with_id(message.id()));
    }
    if header_str(headers, LAST_EVENT_ID).is_some() {
        let both = message.method() == Some(protocol::RESUME)
            && message
                .params_as::<protocol::ResumeParams>()
                .is_some_and(|p| p.last_session_event_id.is_some());
        return Err(Rejection::conflict(match both {
            true => "both Last-Event-ID and lastSessionEventId were given; send only lastSessionEventId",
            false => "Last-Event-ID does not apply to protocol-level sessions; session/resume takes lastSessionEventId",
        })
        .with_id(message.id()));
    }
    Ok(())
}

/// A message for a protocol-level session, or a `session/*` call.
pub(super) async fn protocol_post(
    app: &App,
    headers: &HeaderMap,
    message: Message,
    caller: &Caller,
    named: Option<&str>,
) -> Result<Response<Body>, Rejection> {
    let id = message.id().cloned().unwrap_or(Value::Null);
    let same_as_named = |session_id: &str| match named {
        Some(named) if named != session_id => Err(Rejection::conflict(
            "Mcp-Protocol-Session-Id and params.sessionId name different sessions",
        )
        .with_id(Some(&id))),
        _ => Ok(()),
    };
    match message.method().filter(|_| message.kind() == Kind::Request) {
        Some(protocol::START) => start(app, caller, named, &id).await,
        Some(protocol::RESUME) => {
            let (session_id, last) =
                session_methods::resume_params(&message).map_err(|r| r.with_id(Some(&id)))?;
            same_as_named(&session_id)?;
            let parent = traced::context_of(&message);
            let (session, resumed) =
                session_methods::resume(app, caller, &session_id, last, parent)
                    .await
                    .map_err(|r| r.with_id(Some(&id)))?;
            Ok(open_channel(app, &session, resumed, &id))
        }
        Some(protocol::END) => {
            let session_id =
                session_methods::end_params(&message).map_err(|r| r.with_id(Some(&id)))?;
            same_as_named(&session_id)?;
            session_methods::end(app, caller, &session_id)
                .await
                .map_err(|r| r.with_id(Some(&id)))?;
            Ok(json(StatusCode::OK, session_methods::ended(&id)))
        }
        Some(method) if is_session_method(method) => {
            Err(Rejection::unknown_session_method(&message))
        }
        _ => to_protocol_session(app, headers, message, caller, named).await,
    }
}

/// `session/start`: a new protocol-level session.
async fn start(
    app: &App,
    caller: &Caller,
    named: Option<&str>,
    id: &Value,
) -> Result<Response<Body>, Rejection> {
    if named.is_some() {
        return Err(Rejection::conflict(
            "this request already names a session; session/start opens a new one",
        )
        .with_id(Some(id)));
    }
    let session = session_methods::start(app, caller)
        .await
        .map_err(|r| r.with_id(Some(id)))?;
    Ok(json(StatusCode::OK, session_methods::started(id, &session)))
}

/// Any other message for a protocol-level session: delivered; its answer comes on the stream
/// `session/resume` opened.
async fn to_protocol_session(
    app: &App,
    headers: &HeaderMap,
    message: Message,
    caller: &Caller,
    named: Option<&str>,
) -> Result<Response<Body>, Rejection> {
    let id = message.id().cloned().unwrap_or(Value::Null);
    let session_id = named.ok_or_else(|| {
        Rejection::bad_request("Bad Request: Mcp-Protocol-Session-Id header is required")
    })?;
    let session = session_methods::find(app, caller, session_id)
        .await
        .map_err(|r| r.with_id(message.id()))?;
    check_protocol_version(headers)?;
    match app.registry.deliver(&session, message).await {
        Ok(_) => {}
        Err(SessionError::Gone) => {
            return Err(Rejection::protocol_session_not_found(session_id).with_id(Some(&id)))
        }
        Err(error) => return Err(Rejection::session(&error).with_id(Some(&id))),
    }
    // The answer comes, numbered, on the stream session/resume opened.
    Ok(accepted())
}

/// The response to `session/resume`: an SSE stream whose first event is the result, then what
/// the client missed, then every message of the session as it comes, until the session is
/// resumed elsewhere (the client is told), ended, or the client goes away.
fn open_channel(
    app: &App,
    session: &Session,
    resumed: crate::session::Resumed,
    id: &Value,
) -> Response<Body> {
    let framing = Framing {
        primed: false,
        close_after: None,
        event_ids: false,
    };
    let extras = Extras {
        prelude: Some(crate::wire::sse::event(
            None,
            &session_methods::resumed(id, resumed.catchup),
        )),
        on_replaced: Some(session_methods::detached(session.id())),
        on_close: None,
    };
    let start = resumed.reader.position();
    session_stream::open(app, resumed.reader, start, resumed.first, framing, extras)
}
