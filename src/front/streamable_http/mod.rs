//! The Streamable HTTP front (MCP 2025-03-26 … 2025-11-25, basic/transports §Streamable HTTP):
//! POST carries one client message, GET opens (or, with `Last-Event-ID`, resumes) a stream,
//! DELETE ends the session. Names sessions by the `Mcp-Session-Id` header (transport mode), or,
//! for protocol-level sessions (seed `000`), by `Mcp-Protocol-Session-Id`: their requests are
//! answered 202 and everything comes back, numbered, on the one stream `session/resume` opens.
//! Knows nothing of upstreams. `post` is what a POST does, `protocol_session` what it does for
//! a protocol-level session, `get` what a GET does; DELETE is here.

mod get;
mod post;
mod protocol_session;

use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Method, Request, Response};
use hyper::body::Incoming;

use super::guard;
use super::rejection::Rejection;
use super::request::{check_origin, header_str};
use super::session_stream::{self, Extras, Framing};
use super::telemetry::{self, Telemetry};
use super::App;
use crate::base::caller::Caller;
use crate::session::log::EventId;
use crate::session::protocol;
use crate::session::{Delivery, Reader, Session};
use crate::wire::http_body::Body;
use get::get;
use post::post;

pub const SESSION_HEADER: &str = "mcp-session-id";
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
const LAST_EVENT_ID: &str = "last-event-id";

/// Protocol versions whose Streamable HTTP rules this front implements.
pub use crate::wire::era::LEGACY_VERSIONS as SUPPORTED_VERSIONS;
/// The first version whose clients expect priming events.
const PRIMING_SINCE: &str = "2025-11-25";

pub async fn handle(app: &App, request: Request<Incoming>) -> Response<Body> {
    let mut telemetry = Telemetry::request(app, telemetry::label_of(request.method()));
    let admitted = check_origin(app, request.headers())
        .and_then(|()| Ok(guard::admitted_caller(request.extensions())?));
    let outcome = match admitted {
        Err(rejection) => Err(rejection),
        Ok(caller) => match *request.method() {
            Method::GET | Method::DELETE if is_modern_without_session(request.headers()) => {
                Err(Rejection::modern_method_not_allowed())
            }
            Method::POST => post(app, request, &caller, &mut telemetry).await,
            Method::GET => get(app, request.headers(), &caller).await,
            Method::DELETE => delete(app, request.headers(), &caller).await,
            _ => Err(Rejection::method_not_allowed()),
        },
    };
    telemetry.end(outcome)
}

/// A GET or DELETE that names no session and a protocol version no legacy revision has.
fn is_modern_without_session(headers: &HeaderMap) -> bool {
    header_str(headers, SESSION_HEADER).is_none()
        && header_str(headers, protocol::HTTP_HEADER).is_none()
        && header_str(headers, PROTOCOL_VERSION_HEADER)
            .is_some_and(|version| !SUPPORTED_VERSIONS.contains(&version))
}

/// A session named by `Mcp-Session-Id`: one opened with initialize.
async fn transport_session(
    app: &App,
    session_id: &str,
    caller: &Caller,
    _headers: &HeaderMap,
) -> Result<Arc<Session>, Rejection> {
    let session = app
        .registry
        .find(session_id, caller)
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

async fn delete(
    app: &App,
    headers: &HeaderMap,
    caller: &Caller,
) -> Result<Response<Body>, Rejection> {
    refuse_protocol_header(headers)?;
    let session = find_session(app, headers, caller).await?;
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
        primed: primes,
        close_after: Some(app.http.now().sse_close_after).filter(|d| resumable && !d.is_zero()),
        event_ids: resumable,
    };
    session_stream::open(app, reader, start, first, framing, Extras::default())
}

async fn find_session(
    app: &App,
    headers: &HeaderMap,
    caller: &Caller,
) -> Result<Arc<Session>, Rejection> {
    let id = header_str(headers, SESSION_HEADER)
        .ok_or_else(|| Rejection::bad_request("Bad Request: Mcp-Session-Id header is required"))?;
    transport_session(app, id, caller, headers).await
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
