//! The `session/*` methods as the fronts answer them (seed `000`): start, resume and end a
//! protocol-level session for a principal. Shared by the WebSocket and Streamable HTTP fronts,
//! which bind what `resume` attaches to a connection or to a response stream.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};

use super::rejection::Rejection;
use super::traced;
use super::App;
use crate::base::caller::Caller;
use crate::session::log::StreamKey;
use crate::session::protocol::{self, EndParams, ResumeParams};
use crate::session::{Resumed, Session, Shape};
use crate::telemetry::spans::SpanContext;
use crate::wire::jsonrpc::{self, Message};

/// Parses a client message; a `session/*` request may leave out `"jsonrpc"`, as the seed's
/// examples do (the proxy answers it; it never reaches a server).
pub fn parse(bytes: Bytes) -> Result<Message, crate::wire::jsonrpc::ParseError> {
    Message::parse(bytes.clone()).or_else(|error| match Message::parse_without_version(bytes) {
        Ok(message)
            if message.kind() == crate::wire::jsonrpc::Kind::Request
                && message.method().is_some_and(protocol::is_session_method) =>
        {
            Ok(message)
        }
        _ => Err(error),
    })
}

/// `session/start`: a new protocol-level session, its upstream bound, nothing attached yet,
/// recorded where any replica finds it before its id is handed out.
pub async fn start(app: &App, caller: &Caller) -> Result<Arc<Session>, Rejection> {
    let session = app
        .registry
        .create(caller, Shape::SingleStream)
        .await
        .map_err(|e| Rejection::session(&e))?;
    session.number_events();
    session.store_synced().await;
    Ok(session)
}

pub fn started(id: &Value, session: &Session) -> Bytes {
    jsonrpc::result_response(id, json!({ "sessionId": session.id() }))
}

/// A protocol-level session of this caller's principal. Another principal's is reported
/// exactly like an unknown one.
pub async fn find(app: &App, caller: &Caller, session_id: &str) -> Result<Arc<Session>, Rejection> {
    let found = app
        .registry
        .find(session_id, caller)
        .await
        .map_err(|e| Rejection::session(&e))?;
    match found {
        Some(session) if session.numbers_events() => Ok(session),
        Some(_) => Err(Rejection::conflict(format!(
            "session {session_id} was opened with initialize and is named by Mcp-Session-Id \
             (transport mode); session/* and Mcp-Protocol-Session-Id apply to sessions opened \
             with session/start"
        ))),
        None => Err(Rejection::protocol_session_not_found(session_id)),
    }
}

/// `session/resume` params: the session, and the last event the client processed.
pub fn resume_params(message: &Message) -> Result<(String, Option<u64>), Rejection> {
    let params: ResumeParams = message.params_as().ok_or_else(|| {
        Rejection::invalid_params("session/resume needs params.sessionId, a string")
    })?;
    let last = match &params.last_session_event_id {
        None | Some(Value::Null) => None,
        Some(value) => Some(protocol::parse_event_id(value).ok_or_else(|| {
            Rejection::invalid_params(format!(
                "lastSessionEventId {value} is not an event id of this proxy (\"se_<n>\")"
            ))
        })?),
    };
    Ok((params.session_id, last))
}

/// `session/resume`: attaches the session's one reader (the previous one, on whatever
/// connection, is detached); with tracing on, its replay is a span under `parent`.
pub async fn resume(
    app: &App,
    caller: &Caller,
    session_id: &str,
    last: Option<u64>,
    parent: Option<SpanContext>,
) -> Result<(Arc<Session>, Resumed), Rejection> {
    let session = find(app, caller, session_id).await?;
    // On a view, the owner learns the channel is read here, and says how far it is.
    session
        .ready_reader(StreamKey::Standalone, None)
        .await
        .map_err(|e| Rejection::invalid_params(e.to_string()))?;
    let mut resumed = session
        .resume(last)
        .map_err(|e| Rejection::invalid_params(e.to_string()))?;
    if last.is_some() {
        // Outside the window, synthesized invalidations stand for what was lost: a gap.
        let span = traced::replay_span(app, parent.as_ref(), session.id());
        resumed.reader.trace_replay(span, !resumed.catchup);
    }
    Ok((session, resumed))
}

pub fn resumed(id: &Value, catchup: bool) -> Bytes {
    jsonrpc::result_response(id, json!({ "resumed": true, "catchup": catchup }))
}

pub fn end_params(message: &Message) -> Result<String, Rejection> {
    message
        .params_as::<EndParams>()
        .map(|p| p.session_id)
        .ok_or_else(|| Rejection::invalid_params("session/end needs params.sessionId, a string"))
}

/// `session/end`: the upstream is released and the log dropped; nothing more is delivered.
pub async fn end(app: &App, caller: &Caller, session_id: &str) -> Result<(), Rejection> {
    find(app, caller, session_id).await?;
    app.registry.end_everywhere(session_id).await;
    Ok(())
}

pub fn ended(id: &Value) -> Bytes {
    jsonrpc::result_response(id, json!({}))
}

/// What a connection is told when its session is resumed on another one.
pub fn detached(session_id: &str) -> Bytes {
    jsonrpc::notification(
        protocol::DETACHED,
        json!({
            "sessionId": session_id,
            "reason": "the session was resumed on another connection",
        }),
    )
}
