//! The Streamable HTTP front (MCP 2025-03-26 … 2025-11-25, basic/transports §Streamable HTTP):
//! POST carries one client message, GET opens (or, with `Last-Event-ID`, resumes) a stream,
//! DELETE ends the session. Names sessions by the `Mcp-Session-Id` header (transport mode), or,
//! for protocol-level sessions (seed `000`), by `Mcp-Protocol-Session-Id`: their requests are
//! answered 202 and everything comes back, numbered, on the one stream `session/resume` opens.
//! Knows nothing of upstreams.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;

use super::access;
use super::body::Body;
use super::data_layer::legacy::{self, Routed};
use super::event_stream::{self, Extras, Framing};
use super::guard;
use super::modern;
use super::rejection::{failed_request, Rejection};
use super::request::{
    accepted, check_origin, event_stream, header_str, json, media_type_is, read_body,
    require_accept,
};
use super::session_methods;
use super::traced::{self, RequestSpan};
use super::{App, PostResponse};
use crate::jsonrpc::{Kind, Message};
use crate::metrics;
use crate::session::log::{EventId, StreamKey};
use crate::session::protocol::{self, is_session_method};
use crate::session::{Delivery, ReadError, Reader, Session, SessionError, Shape};

pub const SESSION_HEADER: &str = "mcp-session-id";
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
const LAST_EVENT_ID: &str = "last-event-id";

/// Protocol versions whose Streamable HTTP rules this front implements.
pub const SUPPORTED_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// The first version whose clients expect priming events.
const PRIMING_SINCE: &str = "2025-11-25";

pub async fn handle(app: &App, request: Request<Incoming>) -> Response<Body> {
    let started = std::time::Instant::now();
    let mut method = match *request.method() {
        Method::POST => "unparsed",
        Method::GET => "GET",
        Method::DELETE => "DELETE",
        _ => "other",
    };
    let outcome = match check_origin(app, request.headers()) {
        Err(rejection) => Err(rejection),
        Ok(()) => match *request.method() {
            Method::GET | Method::DELETE if is_modern_without_session(request.headers()) => {
                Err(Rejection::modern_method_not_allowed())
            }
            Method::POST => post(app, request, &mut method).await,
            Method::GET => get(app, request.headers()).await,
            Method::DELETE => delete(app, request.headers()).await,
            _ => Err(Rejection::method_not_allowed()),
        },
    };
    let mut response = outcome.unwrap_or_else(Rejection::into_response);
    app.metrics
        .record_request(method, response.status().as_u16(), started.elapsed());
    access::note_rpc(&mut response, method);
    response
}

/// A GET or DELETE that names no session and a protocol version no legacy revision has.
fn is_modern_without_session(headers: &HeaderMap) -> bool {
    header_str(headers, SESSION_HEADER).is_none()
        && header_str(headers, protocol::HTTP_HEADER).is_none()
        && header_str(headers, PROTOCOL_VERSION_HEADER)
            .is_some_and(|version| !SUPPORTED_VERSIONS.contains(&version))
}

/// `method` is set to the metrics label of the message once it is parsed.
async fn post(
    app: &App,
    request: Request<Incoming>,
    method: &mut &'static str,
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
        app.http.max_body_bytes,
        app.http.body_timeout,
    )
    .await?;
    let mut message = session_methods::parse(body)?;
    let mut span = RequestSpan::start(app, Some(&headers), &mut message);
    *method = match message.method() {
        Some(name) => metrics::method_label(name),
        None => "response",
    };
    let mut outcome = dispatch(app, &headers, message, &mut span).await;
    span.finish(&mut outcome);
    outcome
}

/// A parsed client message, to the 2026-07-28 face, a protocol-level session or the
/// transport session its header names.
async fn dispatch(
    app: &App,
    headers: &HeaderMap,
    message: Message,
    span: &mut RequestSpan,
) -> Result<Response<Body>, Rejection> {
    let principal = guard::principal(&app.http, headers);
    span.set("mcp_proxy.principal", principal.as_str().to_owned());
    let session_id = header_str(headers, SESSION_HEADER);
    let protocol_session = header_str(headers, protocol::HTTP_HEADER);
    if session_id.is_none()
        && protocol_session.is_none()
        && modern::is_modern(headers, &message, &SUPPORTED_VERSIONS)
    {
        span.set("mcp_proxy.era", crate::era::MODERN_VERSION);
        span.set("mcp.protocol.version", crate::era::MODERN_VERSION);
        return modern::post(app, headers, message, principal).await;
    }
    span.set("mcp_proxy.era", "legacy");
    if let Some(version) = header_str(headers, PROTOCOL_VERSION_HEADER) {
        span.set("mcp.protocol.version", version.to_owned());
    }
    if let Some(id) = session_id.or(protocol_session) {
        span.set("mcp.session.id", crate::redact::session(id).to_string());
    }
    let session_method =
        message.kind() == Kind::Request && message.method().is_some_and(is_session_method);

    if session_method || protocol_session.is_some() {
        check_protocol_mode(headers, &message, session_id, protocol_session)?;
        return protocol_post(app, headers, message, principal, protocol_session).await;
    }

    if message.kind() == Kind::Request && message.method() == Some("initialize") {
        if session_id.is_some() {
            return Err(Rejection::bad_request(
                "Bad Request: initialize must not carry Mcp-Session-Id; this session is already initialized",
            )
            .with_id(message.id()));
        }
        let session = app
            .registry
            .create(
                principal,
                Shape::Streams,
                headers.get(header::AUTHORIZATION).cloned(),
            )
            .map_err(|e| Rejection::session(&e).with_id(message.id()))?;
        return exchange(app, session, message, true).await;
    }

    let Some(session_id) = session_id else {
        return Err(Rejection::bad_request(
            "Bad Request: Mcp-Session-Id header is required (or Mcp-Protocol-Session-Id for a \
             session opened with session/start)",
        )
        .with_id(message.id()));
    };
    let session = transport_session(app, session_id, &principal, headers)
        .await
        .map_err(|rejection| rejection.with_id(message.id()))?;
    check_protocol_version(headers)?;
    match message.kind() {
        Kind::Request => {
            match legacy::route(app, credential(headers), &session, message, &principal).await? {
                Routed::Answered(answer) => Ok(json(StatusCode::OK, answer)),
                Routed::Listen { session, scope, id } => {
                    Ok(super::data_layer::listen::open(app, session, id, scope, ()))
                }
                Routed::To(named, message) => exchange(app, named, message, false).await,
                Routed::Transport(message) => exchange(app, session, message, false).await,
                Routed::ToolsList(message) => {
                    let answer = legacy::tools_list(app, &session, &message).await?;
                    Ok(json(StatusCode::OK, answer))
                }
            }
        }
        Kind::Response if !message.id().is_some_and(|id| session.awaits_answer(id)) => {
            // An answer to a server request of one of the client's named sessions.
            let id = message.id().cloned().unwrap_or(Value::Null);
            let named = app.data_layer.awaiting_answer(app, &principal, &id).await;
            app.registry
                .deliver(named.as_ref().unwrap_or(&session), message)
                .await
                .map_err(|e| Rejection::session(&e))?;
            Ok(accepted())
        }
        Kind::Notification | Kind::Response => {
            app.registry
                .deliver(&session, message)
                .await
                .map_err(|e| Rejection::session(&e))?;
            Ok(accepted())
        }
    }
}

/// A message for a protocol-level session (or a `session/*` method) must not also name a
/// transport session, nor resume with `Last-Event-ID`.
fn check_protocol_mode(
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

/// Sends a request upstream and answers with its response as JSON, or as an SSE stream when
/// anything else comes first or the response is slow.
async fn exchange(
    app: &App,
    session: Arc<Session>,
    request: Message,
    initializing: bool,
) -> Result<Response<Body>, Rejection> {
    let request_id = request.id().cloned().unwrap_or(Value::Null);
    let stream = match app.registry.deliver(&session, request).await {
        Ok(Some(stream)) => stream,
        Ok(None) => unreachable!("a request opens a stream"),
        Err(error) if initializing => {
            app.registry.end(session.id());
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
    let first = match app.http.post_response {
        PostResponse::Sse => None,
        PostResponse::Json => reader.next().await,
        PostResponse::Auto => tokio::time::timeout(app.http.json_wait, reader.next())
            .await
            .ok()
            .flatten(),
    };
    if let Some(response) = first.as_ref().and_then(lone_response) {
        // A JSON body carries no event id: nothing of this stream can ever be resumed.
        session.forget(stream);
        if initializing && is_error(&response) {
            app.registry.end(session.id());
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

fn is_error(payload: &Bytes) -> bool {
    Message::parse(payload.clone()).is_ok_and(|m| m.is_error())
}

/// A message for a protocol-level session, or a `session/*` call.
async fn protocol_post(
    app: &App,
    headers: &HeaderMap,
    message: Message,
    principal: crate::ids::Principal,
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
        Some(protocol::START) => {
            if named.is_some() {
                return Err(Rejection::conflict(
                    "this request already names a session; session/start opens a new one",
                )
                .with_id(Some(&id)));
            }
            let credential = headers.get(header::AUTHORIZATION).cloned();
            let session = session_methods::start(app, principal, credential)
                .await
                .map_err(|r| r.with_id(Some(&id)))?;
            Ok(json(
                StatusCode::OK,
                session_methods::started(&id, &session),
            ))
        }
        Some(protocol::RESUME) => {
            let (session_id, last) =
                session_methods::resume_params(&message).map_err(|r| r.with_id(Some(&id)))?;
            same_as_named(&session_id)?;
            let parent = traced::context_of(&message);
            let (session, resumed) = session_methods::resume(
                app,
                &principal,
                headers.get(header::AUTHORIZATION),
                &session_id,
                last,
                parent,
            )
            .await
            .map_err(|r| r.with_id(Some(&id)))?;
            Ok(open_channel(app, &session, resumed, &id))
        }
        Some(protocol::END) => {
            let session_id =
                session_methods::end_params(&message).map_err(|r| r.with_id(Some(&id)))?;
            same_as_named(&session_id)?;
            session_methods::end(app, &principal, &session_id)
                .await
                .map_err(|r| r.with_id(Some(&id)))?;
            Ok(json(StatusCode::OK, session_methods::ended(&id)))
        }
        Some(method) if is_session_method(method) => {
            Err(Rejection::unknown_session_method(&message))
        }
        _ => {
            let session_id = named.ok_or_else(|| {
                Rejection::bad_request("Bad Request: Mcp-Protocol-Session-Id header is required")
            })?;
            let credential = headers.get(header::AUTHORIZATION);
            let session = session_methods::find(app, &principal, credential, session_id)
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
    }
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
        priming: None,
        keep_alive: app.http.sse_keep_alive,
        close_after: None,
        retry_ms: app.http.sse_retry.as_millis() as u64,
        event_ids: false,
    };
    let extras = Extras {
        prelude: Some(crate::sse::event(
            None,
            &session_methods::resumed(id, resumed.catchup),
        )),
        on_replaced: Some(session_methods::detached(session.id())),
        on_close: None,
    };
    let start = resumed.reader.position();
    let body = event_stream::open(
        resumed.reader,
        start,
        resumed.first,
        framing,
        app.shutdown.clone(),
        extras,
    );
    event_stream(body)
}

/// A session named by `Mcp-Session-Id`: one opened with initialize.
async fn transport_session(
    app: &App,
    session_id: &str,
    principal: &crate::ids::Principal,
    headers: &HeaderMap,
) -> Result<Arc<Session>, Rejection> {
    let session = app
        .registry
        .find(session_id, principal, headers.get(header::AUTHORIZATION))
        .await
        .map_err(|e| Rejection::session(&e))?
        .ok_or_else(Rejection::session_not_found)?;
    if session.is_named() {
        // A data-layer session or handle is named in messages, never by the header.
        return Err(Rejection::session_not_found());
    }
    if session.numbers_events() {
        return Err(Rejection::conflict(format!(
            "session {session_id} was opened with session/start (protocol mode); name it with \
             Mcp-Protocol-Session-Id, resume it with session/resume"
        )));
    }
    Ok(session)
}

fn credential(headers: &HeaderMap) -> Option<HeaderValue> {
    headers.get(header::AUTHORIZATION).cloned()
}

/// GET and DELETE have no meaning for a protocol-level session.
fn refuse_protocol_header(headers: &HeaderMap) -> Result<(), Rejection> {
    match header_str(headers, protocol::HTTP_HEADER) {
        Some(_) => Err(Rejection::conflict(
            "a protocol-level session is read with session/resume and ended with session/end, \
             not with GET or DELETE",
        )),
        None => Ok(()),
    }
}

async fn get(app: &App, headers: &HeaderMap) -> Result<Response<Body>, Rejection> {
    refuse_protocol_header(headers)?;
    require_accept(headers, &["text/event-stream"])?;
    let session = find_session(app, headers).await?;
    check_protocol_version(headers)?;
    let (stream, after) = match header_str(headers, LAST_EVENT_ID) {
        None => (StreamKey::Standalone, None),
        Some(text) => {
            let id: EventId = text.parse().map_err(|()| {
                Rejection::bad_request(format!(
                    "Bad Request: Last-Event-ID {text:?} is not an event id of this proxy"
                ))
            })?;
            (id.stream, Some(id.seq))
        }
    };
    if !session.has_stream(stream) {
        return Err(Rejection::bad_request(
            "Bad Request: Last-Event-ID names no stream of this session",
        ));
    }
    session
        .ready_reader(stream, after)
        .await
        .map_err(|ReadError::Ahead { after, head }| {
            Rejection::bad_request(format!(
                "Bad Request: Last-Event-ID {} is ahead of this session's newest event ({}); \
                 resume from an id this proxy sent",
                EventId { stream, seq: after },
                EventId { stream, seq: head },
            ))
        })?;
    let mut reader = session.attach(stream, after);
    if after.is_some() {
        let parent = traced::context_from_headers(headers);
        reader.trace_replay(
            traced::replay_span(app, parent.as_ref(), session.id()),
            false,
        );
    }
    let start = reader.position();
    Ok(open_stream(app, &session, reader, start, None))
}

async fn delete(app: &App, headers: &HeaderMap) -> Result<Response<Body>, Rejection> {
    refuse_protocol_header(headers)?;
    let session = find_session(app, headers).await?;
    app.registry.end_everywhere(session.id()).await;
    Ok(Response::new(Body::empty()))
}

fn open_stream(
    app: &App,
    session: &Session,
    reader: Reader,
    start: EventId,
    first: Option<Delivery>,
) -> Response<Body> {
    // A session named in messages is not the one a GET with `Last-Event-ID` would name: its
    // streams carry no event ids, are not primed and are never closed early.
    let resumable = !session.is_named();
    let primes = resumable
        && session
            .protocol_version()
            .is_some_and(|v| v.as_str() >= PRIMING_SINCE);
    let framing = Framing {
        priming: primes.then_some(Some(app.http.sse_retry.as_millis() as u64)),
        keep_alive: app.http.sse_keep_alive,
        close_after: Some(app.http.sse_close_after).filter(|d| resumable && !d.is_zero()),
        retry_ms: app.http.sse_retry.as_millis() as u64,
        event_ids: resumable,
    };
    let body = event_stream::open(
        reader,
        start,
        first,
        framing,
        app.shutdown.clone(),
        Extras::default(),
    );
    event_stream(body)
}

async fn find_session(app: &App, headers: &HeaderMap) -> Result<Arc<Session>, Rejection> {
    let id = header_str(headers, SESSION_HEADER)
        .ok_or_else(|| Rejection::bad_request("Bad Request: Mcp-Session-Id header is required"))?;
    transport_session(app, id, &guard::principal(&app.http, headers), headers).await
}

fn set_session_header(response: &mut Response<Body>, session: &Session) {
    if let Ok(value) = HeaderValue::from_str(session.id()) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
}

/// 2025-06-18: `MCP-Protocol-Version` on every request after initialization; absent means
/// 2025-03-26, unsupported is a 400.
fn check_protocol_version(headers: &HeaderMap) -> Result<(), Rejection> {
    match header_str(headers, PROTOCOL_VERSION_HEADER) {
        Some(version) if !SUPPORTED_VERSIONS.contains(&version) => {
            Err(Rejection::bad_request(format!(
                "Bad Request: unsupported MCP-Protocol-Version {version:?} (supported: {})",
                SUPPORTED_VERSIONS.join(", ")
            )))
        }
        _ => Ok(()),
    }
}
