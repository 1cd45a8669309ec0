//! The Streamable HTTP front (MCP 2025-03-26 … 2025-11-25, basic/transports §Streamable HTTP):
//! POST carries one client message, GET opens (or, with `Last-Event-ID`, resumes) a stream,
//! DELETE ends the session. Names sessions by the `Mcp-Session-Id` header; knows nothing of
//! upstreams.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;

use super::body::Body;
use super::event_stream::{self, Extras, Framing};
use super::guard;
use super::rejection::Rejection;
use super::request::{
    accepted, check_origin, header_str, json, media_type_is, read_body, require_accept,
};
use super::{App, PostResponse};
use crate::jsonrpc::{self, Kind, Message, METHOD_NOT_FOUND};
use crate::metrics;
use crate::session::log::{EventId, StreamKey};
use crate::session::{Delivery, Reader, Session, Shape};

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
            Method::POST => post(app, request, &mut method).await,
            Method::GET => get(app, request.headers()),
            Method::DELETE => delete(app, request.headers()),
            _ => Err(Rejection::method_not_allowed()),
        },
    };
    let response = outcome.unwrap_or_else(Rejection::into_response);
    app.metrics
        .requests
        .record(method, response.status().as_u16(), started.elapsed());
    response
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
    let body = read_body(&headers, body, app.http.max_body_bytes).await?;
    let message = Message::parse(body)?;
    *method = match message.method() {
        Some(name) => metrics::method_label(name),
        None => "response",
    };
    let principal = guard::principal(&app.http, &headers);
    let session_id = header_str(&headers, SESSION_HEADER);

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
        return Err(
            Rejection::bad_request("Bad Request: Mcp-Session-Id header is required")
                .with_id(message.id()),
        );
    };
    let session = app
        .registry
        .get(session_id, &principal)
        .ok_or_else(|| Rejection::session_not_found().with_id(message.id()))?;
    check_protocol_version(&headers)?;
    match message.kind() {
        Kind::Request if message.method().is_some_and(|m| m.starts_with("session/")) => {
            let error = jsonrpc::error_response(
                message.id().unwrap_or(&Value::Null),
                METHOD_NOT_FOUND,
                &format!(
                    "Method not found: {} (the session/ methods are not offered on this endpoint)",
                    message.method().unwrap_or_default()
                ),
                None,
            );
            Ok(json(StatusCode::OK, error))
        }
        Kind::Request => exchange(app, session, message, false).await,
        Kind::Notification => {
            session
                .notify(message)
                .await
                .map_err(|e| Rejection::session(&e))?;
            Ok(accepted())
        }
        Kind::Response => {
            session
                .answer(message)
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
    let stream = match session.call(request).await {
        Ok(stream) => stream,
        Err(error) if initializing => {
            app.registry.end(session.id());
            return Err(Rejection::session(&error).with_id(Some(&request_id)));
        }
        Err(error) => {
            let body = jsonrpc::error_response(
                &request_id,
                jsonrpc::INTERNAL_ERROR,
                &error.to_string(),
                None,
            );
            return Ok(json(StatusCode::OK, body));
        }
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
            set_session_header(&mut reply, &session);
        }
        return Ok(reply);
    }
    let mut reply = open_stream(app, &session, reader, start, first);
    if initializing {
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

fn get(app: &App, headers: &HeaderMap) -> Result<Response<Body>, Rejection> {
    require_accept(headers, &["text/event-stream"])?;
    let session = find_session(app, headers)?;
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
    let reader = session.attach(stream, after);
    let start = reader.position();
    Ok(open_stream(app, &session, reader, start, None))
}

fn delete(app: &App, headers: &HeaderMap) -> Result<Response<Body>, Rejection> {
    let session = find_session(app, headers)?;
    app.registry.end(session.id());
    Ok(Response::new(Body::empty()))
}

fn open_stream(
    app: &App,
    session: &Session,
    reader: Reader,
    start: EventId,
    first: Option<Delivery>,
) -> Response<Body> {
    let primes = session
        .protocol_version()
        .is_some_and(|v| v.as_str() >= PRIMING_SINCE);
    let framing = Framing {
        priming: primes.then_some(Some(app.http.sse_retry.as_millis() as u64)),
        keep_alive: app.http.sse_keep_alive,
        close_after: Some(app.http.sse_close_after).filter(|d| !d.is_zero()),
        retry_ms: app.http.sse_retry.as_millis() as u64,
    };
    let body = event_stream::open(
        reader,
        start,
        first,
        framing,
        app.shutdown.clone(),
        Extras::default(),
    );
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn find_session(app: &App, headers: &HeaderMap) -> Result<Arc<Session>, Rejection> {
    let id = header_str(headers, SESSION_HEADER)
        .ok_or_else(|| Rejection::bad_request("Bad Request: Mcp-Session-Id header is required"))?;
    app.registry
        .get(id, &guard::principal(&app.http, headers))
        .ok_or_else(Rejection::session_not_found)
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
