//! The access log: one line per HTTP request, under the log target `access` at level INFO
//! (`RUST_LOG=info,access=off` leaves it out): who asked what of which server, the answer's
//! status, how long until the answer's head, the session, and the trace the request belongs to.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, Request, Response};
use tracing::{info, Level};

use super::request;
use crate::trace_context;

/// The log target of access lines.
pub const TARGET: &str = "access";

/// Whether access lines are written at all (nothing is gathered for them otherwise).
pub fn enabled() -> bool {
    tracing::enabled!(target: TARGET, Level::INFO)
}

/// The served server a response came from, as a response extension (never sent).
#[derive(Clone)]
pub struct Server(pub Arc<str>);

/// The JSON-RPC method of the request (its metrics label), as a response extension.
#[derive(Clone, Copy)]
pub struct Rpc(pub &'static str);

/// The trace of the request's span (tracing on), as a response extension: the line names it
/// whether or not the client sent a `traceparent`.
#[derive(Clone)]
pub struct Trace(pub String);

/// Notes `rpc` on `response` for its access line.
pub fn note_rpc<B>(response: &mut Response<B>, rpc: &'static str) {
    if enabled() {
        response.extensions_mut().insert(Rpc(rpc));
    }
}

/// What an access line takes from the request, before the request is handed on.
pub struct Asked {
    peer: SocketAddr,
    method: Method,
    path: String,
    session: Option<String>,
    trace_id: Option<String>,
}

impl Asked {
    pub fn of<B>(request: &Request<B>, peer: SocketAddr) -> Asked {
        let headers = request.headers();
        Asked {
            peer,
            method: request.method().clone(),
            path: request.uri().path().to_owned(),
            session: header(headers, "mcp-session-id")
                .or_else(|| request::query_session(request.uri().query()?))
                .map(str::to_owned),
            trace_id: header(headers, trace_context::TRACEPARENT)
                .and_then(trace_context::trace_id)
                .map(str::to_owned),
        }
    }

    /// Writes the line for `response`, given `elapsed` until its head.
    pub fn answered<B>(self, response: &Response<B>, elapsed: Duration) {
        let server = response.extensions().get::<Server>().map(|s| s.0.clone());
        let rpc = response.extensions().get::<Rpc>().map(|r| r.0);
        let trace_id = match response.extensions().get::<Trace>() {
            Some(trace) => Some(trace.0.clone()),
            None => self.trace_id,
        };
        // Never the id itself (a bearer token): its digest.
        let session = self
            .session
            .or_else(|| header(response.headers(), "mcp-session-id").map(str::to_owned))
            .map(|id| crate::redact::session(&id).to_string());
        info!(
            target: TARGET,
            peer = %self.peer,
            method = %self.method,
            path = %self.path,
            server = server.as_deref().unwrap_or("-"),
            rpc = rpc.unwrap_or("-"),
            status = response.status().as_u16(),
            duration_us = elapsed.as_micros() as u64,
            session = session.as_deref().unwrap_or("-"),
            trace_id = trace_id.as_deref().unwrap_or("-"),
            "request"
        );
    }
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}
