//! Reading and checking requests, and the plain responses, shared by the client fronts.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::guard;
use super::rejection::Rejection;
use super::App;
use crate::session::{Registry, Session};
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::Message;
use std::sync::Arc;

pub fn json(status: StatusCode, body: Bytes) -> Response<Body> {
    let mut response = Response::new(Body::full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// An SSE response: not cached, not buffered by proxies in between.
pub fn event_stream(body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

pub fn accepted() -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}

/// Reads a request body of at most `limit` bytes within `timeout` (408 after it). Memory
/// follows the bytes received, not the declared length: chunks are copied into a buffer that
/// grows as they arrive, so a slow sender cannot pin a transport buffer per byte.
pub async fn read_body(
    headers: &HeaderMap,
    body: Incoming,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, Rejection> {
    let declared =
        header_str(headers, header::CONTENT_LENGTH.as_str()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(Rejection::too_large(limit));
    }
    match tokio::time::timeout(timeout, collect(body, declared, limit)).await {
        Ok(read) => read,
        Err(_) => Err(Rejection::body_timeout(timeout)),
    }
}

/// What a buffer starts with before any byte arrived.
const INITIAL_BODY_CAPACITY: usize = 16 << 10;

async fn collect(
    mut body: Incoming,
    declared: Option<u64>,
    limit: usize,
) -> Result<Bytes, Rejection> {
    let mut buffer = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| {
            Rejection::bad_request(format!("Bad Request: the body could not be read: {error}"))
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        // The whole body in one chunk (the usual case) is taken as it is.
        if buffer.is_empty() && declared == Some(data.len() as u64) {
            return Ok(data);
        }
        if buffer.len() + data.len() > limit {
            return Err(Rejection::too_large(limit));
        }
        if buffer.capacity() == 0 {
            let expected = declared.map_or(0, |len| len as usize);
            buffer.reserve(expected.clamp(data.len(), INITIAL_BODY_CAPACITY.max(data.len())));
        }
        buffer.extend_from_slice(&data);
    }
    Ok(buffer.freeze())
}

/// The `Origin` check against DNS rebinding and cross-site use (the router has checked `Host`).
pub fn check_origin(app: &App, headers: &HeaderMap) -> Result<(), Rejection> {
    guard::check_origin(&app.http.now(), headers).map_err(Rejection::from)
}

pub fn require_accept(headers: &HeaderMap, required: &[&str]) -> Result<(), Rejection> {
    let accepted = || {
        headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|part| part.split(';').next().unwrap_or("").trim())
    };
    let satisfied = |wanted: &str| {
        let family = wanted.split('/').next().unwrap_or_default();
        accepted().any(|a| {
            a.eq_ignore_ascii_case(wanted)
                || a == "*/*"
                || a.strip_suffix("/*")
                    .is_some_and(|range| range.eq_ignore_ascii_case(family))
        })
    };
    match required.iter().find(|wanted| !satisfied(wanted)) {
        Some(_) => Err(Rejection::not_acceptable(&required.join(" and "))),
        None => Ok(()),
    }
}

pub fn media_type_is(headers: &HeaderMap, wanted: &str) -> bool {
    header_str(headers, header::CONTENT_TYPE.as_str())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case(wanted))
}

pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The session a `POST …/messages?sessionId=…` names (`session_id` as some clients spell it).
pub fn query_session(query: &str) -> Option<&str> {
    query.split('&').find_map(|pair| {
        pair.strip_prefix("sessionId=")
            .or_else(|| pair.strip_prefix("session_id="))
    })
}

/// Sends a request of the proxy's own through `session` and waits for its answer.
pub async fn ask(
    registry: &Registry,
    session: &Arc<Session>,
    message: Message,
) -> Result<serde_json::Value, Rejection> {
    registry
        .ask(session, message)
        .await
        .map_err(|e| Rejection::session(&e))
}
