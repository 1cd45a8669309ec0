//! The legacy HTTP+SSE front (MCP 2024-11-05, transports §HTTP with SSE): `GET …/sse` opens a
//! session and its one stream, whose first event (`endpoint`) names where to POST messages;
//! every answer comes back on that stream. The session lives as long as the stream, and has the
//! same replay window and coalescing as any other. Its server starts at the client's
//! `initialize` (POSTed to the endpoint), not when the stream opens.

use std::sync::Arc;

use http::{Method, Request, Response};
use hyper::body::Incoming;

use super::guard;
use super::rejection::Rejection;
use super::request::{accepted, check_origin, media_type_is, query_session, read_body};
use super::session_stream::{self, Extras, Framing};
use super::telemetry::Telemetry;
use super::App;
use crate::session::log::StreamKey;
use crate::session::EndReason;
use crate::session::{Session, Shape};
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::Message;
use crate::wire::sse;

/// `GET …/sse`: a new session and its stream.
pub async fn open(app: &App, request: Request<Incoming>) -> Response<Body> {
    let telemetry = Telemetry::opening(app);
    let outcome = match *request.method() {
        Method::GET => stream(app, &request).await,
        _ => Err(Rejection::method_not_allowed()),
    };
    telemetry.end(outcome)
}

async fn stream(app: &App, request: &Request<Incoming>) -> Result<Response<Body>, Rejection> {
    check_origin(app, request.headers())?;
    let caller = guard::admitted_caller(request.extensions())?;
    // The server starts at the client's initialize: a stream that never initializes costs
    // no process or connection upstream.
    let session = app
        .registry
        .create_awaiting_initialize(&caller, Shape::SingleStream)
        .await
        .map_err(|e| Rejection::session(&e))?;
    // Its id goes out in the first event; any replica may get the next message.
    session.store_synced().await;
    let reader = session.attach(StreamKey::Standalone, None);
    let start = reader.position();
    let messages = match request.uri().path().strip_suffix("sse") {
        Some(base) => format!("{base}messages"),
        None => "/messages".to_owned(),
    };
    let endpoint = format!("{messages}?sessionId={}", session.id());
    let registry = app.registry.clone();
    let id = session.id().to_owned();
    let framing = Framing {
        primed: false,
        close_after: None,
        event_ids: true,
    };
    let extras = Extras {
        prelude: Some(sse::endpoint(&endpoint)),
        on_replaced: None,
        // In this transport the stream is the session.
        on_close: Some(Box::new(move || {
            registry.end(&id, EndReason::StreamClosed);
        })),
    };
    Ok(session_stream::open(
        app, reader, start, None, framing, extras,
    ))
}

/// `POST …/messages?sessionId=…`: one client message; its answer comes on the stream.
pub async fn message(app: &App, request: Request<Incoming>) -> Response<Body> {
    let mut telemetry = Telemetry::request(app, "unparsed");
    let outcome = match *request.method() {
        Method::POST => post(app, request, &mut telemetry).await,
        _ => Err(Rejection::method_not_allowed()),
    };
    telemetry.end(outcome)
}

async fn post(
    app: &App,
    request: Request<Incoming>,
    telemetry: &mut Telemetry<'_>,
) -> Result<Response<Body>, Rejection> {
    let (parts, body) = request.into_parts();
    check_origin(app, &parts.headers)?;
    if !media_type_is(&parts.headers, "application/json") {
        return Err(Rejection::unsupported_media_type());
    }
    let session = find_session(app, &parts).await?;
    let body = read_body(
        &parts.headers,
        body,
        app.http.now().max_body_bytes,
        app.http.now().body_timeout,
    )
    .await?;
    let mut message = Message::parse(body)?;
    telemetry.read(&parts.headers, &mut message);
    let caller = guard::admitted_caller(&parts.extensions)?;
    app.registry
        .admit(caller.principal(), &message)
        .await
        .map_err(|e| Rejection::session(&e).with_id(message.id()))?;
    telemetry.set("mcp_proxy.era", "legacy");
    telemetry.set("mcp.protocol.version", "2024-11-05");
    telemetry.set_with("mcp.session.id", || {
        crate::telemetry::redact::session(session.id()).to_string()
    });
    match app.registry.deliver(&session, message).await {
        Ok(_) => Ok(accepted()),
        Err(error) => Err(Rejection::session(&error)),
    }
}

async fn find_session(app: &App, parts: &http::request::Parts) -> Result<Arc<Session>, Rejection> {
    let id = query_session(parts.uri.query().unwrap_or_default()).ok_or_else(|| {
        Rejection::bad_request("Bad Request: the sessionId query parameter is required")
    })?;
    app.registry
        .find(id, &guard::admitted_caller(&parts.extensions)?)
        .await
        .map_err(|e| Rejection::session(&e))?
        .ok_or_else(Rejection::session_not_found)
}
