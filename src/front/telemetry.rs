//! The telemetry of one client request, begun as it arrives and ended with its answer: counted
//! in metrics under its method label with its status and latency, its span (tracing on, see
//! `traced`) opened once its message is read, and what its access line names (the JSON-RPC
//! method, the trace, the served server).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Response};

use super::access;
use super::rejection::Rejection;
use super::traced::RequestSpan;
use super::App;
use crate::telemetry::metrics;
use crate::telemetry::spans;
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::Message;

/// One request's telemetry, from its arrival to its answer.
#[must_use = "a request's telemetry is ended with its answer"]
pub struct Telemetry<'a> {
    app: &'a App,
    started: Instant,
    /// The metrics label; none for a WebSocket message (its connection was counted).
    label: Option<&'static str>,
    /// Whether the access line names the label as the request's JSON-RPC method.
    names_rpc: bool,
    span: RequestSpan,
}

impl<'a> Telemetry<'a> {
    /// A request to an MCP endpoint, labelled `label` until its message is read.
    pub fn request(app: &'a App, label: &'static str) -> Telemetry<'a> {
        Telemetry {
            app,
            started: Instant::now(),
            label: Some(label),
            names_rpc: true,
            span: RequestSpan::none(),
        }
    }

    /// A GET that opens a connection (a legacy SSE stream, a WebSocket): counted as `GET`,
    /// its access line names no JSON-RPC method.
    pub fn opening(app: &'a App) -> Telemetry<'a> {
        Telemetry {
            names_rpc: false,
            ..Telemetry::request(app, "GET")
        }
    }

    /// A message on a WebSocket: its span only.
    pub fn message(app: &'a App, message: &mut Message) -> Telemetry<'a> {
        Telemetry {
            app,
            started: Instant::now(),
            label: None,
            names_rpc: false,
            span: RequestSpan::start(app, None, message),
        }
    }

    /// The request's message is read: it is labelled by its method, and its span starts (the
    /// trace context it carries on goes into its `_meta`).
    pub fn read(&mut self, headers: &http::HeaderMap, message: &mut Message) {
        self.span = RequestSpan::start(self.app, Some(headers), message);
        self.label = Some(message.method().map_or("response", metrics::method_label));
    }

    /// Describes the request's span.
    pub fn set(&mut self, key: &'static str, value: impl Into<spans::Value>) {
        self.span.set(key, value);
    }

    /// Describes the request's span with a value worked out only when the span is recorded
    /// (tracing off: no digest made, nothing allocated).
    pub fn set_with<V: Into<spans::Value>>(
        &mut self,
        key: &'static str,
        value: impl FnOnce() -> V,
    ) {
        self.span.set_with(key, value);
    }

    /// Ends it with what the client gets.
    pub fn end(self, mut outcome: Result<Response<Body>, Rejection>) -> Response<Body> {
        self.span.finish(&mut outcome);
        let mut response = outcome.unwrap_or_else(Rejection::into_response);
        if let Some(label) = self.label {
            let status = response.status().as_u16();
            let metrics = &self.app.metrics;
            metrics.record_request(label, status, self.started.elapsed());
            if self.names_rpc {
                access::note_rpc(&mut response, label);
            }
        }
        response
    }

    /// Ends a WebSocket message's with the answer the client got at once, if any.
    pub fn end_message(self, outcome: &Result<Vec<Bytes>, Rejection>) {
        self.span.finish_message(outcome);
    }
}

/// The metrics label of a request to an MCP endpoint before its message is read.
pub fn label_of(method: &Method) -> &'static str {
    match *method {
        Method::POST => "unparsed",
        Method::GET => "GET",
        Method::DELETE => "DELETE",
        _ => "other",
    }
}

/// A request refused before it reached a front (its `Host`): counted at once, with no latency.
pub fn refused(app: &App, method: &Method, response: &Response<Body>) {
    let status = response.status().as_u16();
    app.metrics
        .record_request(label_of(method), status, Duration::ZERO);
}

/// Notes the served server on a response for its access line.
pub fn served_by(app: &App, response: &mut Response<Body>) {
    if access::enabled() {
        let server = access::Server(app.server.clone());
        response.extensions_mut().insert(server);
    }
}
