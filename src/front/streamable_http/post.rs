//! What a POST does: reads one client message and hands it to the 2026-07-28 face, a
//! protocol-level session, or the transport session `Mcp-Session-Id` names (a new one for
//! `initialize`); a request is answered as JSON, or as an SSE stream when anything else comes
//! first or the answer is slow.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;

use super::protocol_session::{check_protocol_mode, protocol_post};
use super::{
    check_protocol_version, open_stream, set_session_header, transport_session,
    PROTOCOL_VERSION_HEADER, SESSION_HEADER, SUPPORTED_VERSIONS,
};
use crate::base::caller::Caller;
use crate::base::carry::Carrying;
use crate::front::data_layer::legacy::{self, Routed};
use crate::front::modern;
use crate::front::rejection::{failed_request, Rejection};
use crate::front::request::{accepted, header_str, json, media_type_is, read_body, require_accept};
use crate::front::session_methods;
use crate::front::settings::PostResponse;
use crate::front::telemetry::Telemetry;
use crate::front::App;
use crate::session::protocol;
use crate::session::EndReason;
use crate::session::{Delivery, Session, Shape};
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::{Kind, Message};
use crate::wire::methods::{route, Route};

pub(super) async fn post(
    app: &App,
    request: Request<Incoming>,
    caller: &Caller,
    telemetry: &mut Telemetry<'_>,
) -> Result<Response<Body>, Rejection> {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    if !media_type_is(&headers, "application/json") {
        return Err(Rejection::unsupported_media_type());
    }
    require_accept(&headers, &["application/json", "text/event-stream"])?;
    let body = read_body(
        &headers,
        body,
        app.http.now().max_body_bytes,
        app.http.now().body_timeout,
    )
    .await?;
    let mut message = session_methods::parse(body)?;
    telemetry.read(&headers, &mut message);
    dispatch(app, &headers, message, caller, telemetry).await
}

/// A parsed client message, to the 2026-07-28 face, a protocol-level session or the
/// transport session its header names.
async fn dispatch(
    app: &App,
    headers: &HeaderMap,
    message: Message,
    caller: &Caller,
    telemetry: &mut Telemetry<'_>,
) -> Result<Response<Body>, Rejection> {
    let principal = caller.principal();
    telemetry.set_with("mcp_proxy.principal", || principal.as_str().to_owned());
    // Under the principal's rates before anything is started or lent for the request.
    app.registry
        .admit(principal, &message)
        .await
        .map_err(|e| Rejection::session(&e).with_id(message.id()))?;
    let session_id = header_str(headers, SESSION_HEADER);
    let protocol_session = header_str(headers, protocol::HTTP_HEADER);
    if session_id.is_none()
        && protocol_session.is_none()
        && modern::is_modern(headers, &message, &SUPPORTED_VERSIONS)
    {
        telemetry.set("mcp_proxy.era", crate::wire::era::MODERN_VERSION);
        telemetry.set("mcp.protocol.version", crate::wire::era::MODERN_VERSION);
        // Boxed: its future is twice a legacy request's, and every request's would be as large
        // (hyper moves each request's future into place).
        return Box::pin(modern::post(app, headers, message, caller)).await;
    }
    telemetry.set("mcp_proxy.era", "legacy");
    if let Some(version) = header_str(headers, PROTOCOL_VERSION_HEADER) {
        telemetry.set_with("mcp.protocol.version", || version.to_owned());
    }
    if let Some(id) = session_id.or(protocol_session) {
        telemetry.set_with("mcp.session.id", || {
            crate::telemetry::redact::session(id).to_string()
        });
    }
    let route = match message.kind() {
        Kind::Request => route(message.method().unwrap_or_default()),
        _ => Route::Server,
    };
    match (route, protocol_session) {
        (Route::ProtocolSession, _) | (_, Some(_)) => {
            check_protocol_mode(headers, &message, session_id, protocol_session)?;
            protocol_post(app, headers, message, caller, protocol_session).await
        }
        (Route::Initialize, None) => initialize(app, message, caller, session_id).await,
        _ => in_transport_session(app, headers, message, caller, session_id).await,
    }
}

/// A message for the transport session `Mcp-Session-Id` names.
async fn in_transport_session(
    app: &App,
    headers: &HeaderMap,
    message: Message,
    caller: &Caller,
    session_id: Option<&str>,
) -> Result<Response<Body>, Rejection> {
    let Some(session_id) = session_id else {
        return Err(Rejection::bad_request(
            "Bad Request: Mcp-Session-Id header is required (or Mcp-Protocol-Session-Id for a \
             session opened with session/start)",
        )
        .with_id(message.id()));
    };
    let session = transport_session(app, session_id, caller, headers)
        .await
        .map_err(|rejection| rejection.with_id(message.id()))?;
    check_protocol_version(headers)?;
    to_transport_session(app, session, message, caller).await
}

/// `initialize` without a session: a new session, and the server's answer.
async fn initialize(
    app: &App,
    message: Message,
    caller: &Caller,
    session_id: Option<&str>,
) -> Result<Response<Body>, Rejection> {
    if session_id.is_some() {
        return Err(Rejection::bad_request(
            "Bad Request: initialize must not carry Mcp-Session-Id; this session is already initialized",
        )
        .with_id(message.id()));
    }
    let session = app
        .registry
        .create(caller, Shape::Streams)
        .await
        .map_err(|e| Rejection::session(&e).with_id(message.id()))?;
    exchange(app, session, message, true).await
}

/// A message for the transport session `session` (already found): a request is routed (it may
/// name a data-layer session or a handle), anything else delivered.
async fn to_transport_session(
    app: &App,
    session: Arc<Session>,
    message: Message,
    caller: &Caller,
) -> Result<Response<Body>, Rejection> {
    match message.kind() {
        Kind::Request if !legacy::may_name_session(app, &message) => {
            exchange(app, session, message, false).await
        }
        Kind::Request => match legacy::route(app, caller, &session, message).await? {
            Routed::Answered(answer) => Ok(json(StatusCode::OK, answer)),
            Routed::Listen { session, scope, id } => Ok(
                crate::front::data_layer::messages_listen::open(app, session, id, scope, ()),
            ),
            Routed::To(named, message) => exchange(app, named, message, false).await,
            Routed::Transport(message) => exchange(app, session, message, false).await,
            Routed::ToolsList(message) => {
                let answer = legacy::tools_list(app, &session, &message).await?;
                Ok(json(StatusCode::OK, answer))
            }
        },
        Kind::Response if !message.id().is_some_and(|id| session.awaits_answer(id)) => {
            // An answer to a server request of one of the client's named sessions.
            let id = message.id().cloned().unwrap_or(Value::Null);
            let named = app
                .data_layer
                .awaiting_answer(&app.registry, caller, &id)
                .await;
            app.registry
                .send(named.as_ref().unwrap_or(&session), message)
                .await
                .map_err(|e| Rejection::session(&e))?;
            Ok(accepted())
        }
        Kind::Notification | Kind::Response => {
            app.registry
                .send(&session, message)
                .await
                .map_err(|e| Rejection::session(&e))?;
            Ok(accepted())
        }
    }
}

/// Sends a request upstream and answers with its response as JSON, or as an SSE stream when
/// anything else comes first or the response is slow.
async fn exchange(
    app: &App,
    session: Arc<Session>,
    request: Message,
    initializing: bool,
) -> Result<Response<Body>, Rejection> {
    let request_id = request.id().cloned().unwrap_or(Value::Null);
    // The session's server work for this message (an HTTP server's POST) is carried by this
    // task until the first answer is here: no hand-off to a task of its own and back.
    Carrying::new(answer(app, session, request, request_id, initializing)).await
}

async fn answer(
    app: &App,
    session: Arc<Session>,
    request: Message,
    request_id: Value,
    initializing: bool,
) -> Result<Response<Body>, Rejection> {
    let stream = match app.registry.call(&session, request).await {
        Ok(stream) => stream,
        Err(error) if initializing => {
            app.registry.end(session.id(), EndReason::NotInitialized);
            return Err(Rejection::session(&error).with_id(Some(&request_id)));
        }
        // The session could not take the message (its owning replica or the store cannot
        // serve it now: 503, retry; it is gone: 404): not an answer from the server.
        Err(error) if error.not_taken() => {
            return Err(Rejection::session(&error).with_id(Some(&request_id)));
        }
        Err(error) => return Ok(json(StatusCode::OK, failed_request(&request_id, &error))),
    };
    let mut reader = session.attach(stream, None);
    let start = reader.position();
    let (post_response, json_wait) = {
        let http = app.http.now();
        (http.post_response, http.json_wait)
    };
    let first = match post_response {
        PostResponse::Sse => None,
        PostResponse::Json => reader.next().await,
        PostResponse::Auto => tokio::time::timeout(json_wait, reader.next())
            .await
            .ok()
            .flatten(),
    };
    if let Some(response) = first.as_ref().and_then(lone_response) {
        // A JSON body carries no event id: nothing of this stream can ever be resumed.
        session.forget(stream);
        if initializing && is_error(&response) {
            app.registry.end(session.id(), EndReason::NotInitialized);
            // Ended before it answered: the server could not be started (its command cannot be
            // run, it dies at once), which is the gateway's failure, not the server's answer.
            if session.upstream_exited() {
                let message = error_message(&response);
                return Err(Rejection::bad_gateway(message).with_id(Some(&request_id)));
            }
            return Ok(json(StatusCode::OK, response));
        }
        let mut reply = json(StatusCode::OK, response);
        if initializing {
            session.store_synced().await;
            set_session_header(&mut reply, &session);
        }
        return Ok(reply);
    }
    let mut reply = open_stream(app, &session, reader, start, first);
    if initializing {
        session.store_synced().await;
        set_session_header(&mut reply, &session);
    }
    Ok(reply)
}

/// The payload of a delivery that is nothing but the stream's response.
fn lone_response(delivery: &Delivery) -> Option<Bytes> {
    match (&delivery.events[..], delivery.invalidations.is_empty()) {
        ([only], true) if only.terminal && !only.payload.is_empty() => Some(only.payload.clone()),
        _ => None,
    }
}

/// The message of an error answer.
fn error_message(payload: &Bytes) -> String {
    let answer: Value = serde_json::from_slice(payload).unwrap_or_default();
    answer["error"]["message"]
        .as_str()
        .unwrap_or("the server ended before it answered")
        .to_owned()
}

fn is_error(payload: &Bytes) -> bool {
    Message::parse_from_server(payload.clone()).is_ok_and(|m| m.is_error())
}
