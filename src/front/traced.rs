//! The span of a client's request (tracing on): started under the client's W3C trace context
//! (its `traceparent` header, else its `params._meta`), named and described from the message,
//! ended with the response's status and JSON-RPC error code. The context the request carries
//! on in `_meta` names this span; with tracing off it is the client's own.

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};

use super::access;
use super::rejection::Rejection;
use super::App;
use crate::telemetry::spans::{self, Span, SpanContext};
use crate::telemetry::trace_context::TraceContext;
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::{self, Kind, Message};

/// A request's span, if it is recorded.
#[derive(Debug)]
pub struct RequestSpan(Option<Span>);

impl RequestSpan {
    /// No span (yet): the request's message is not read.
    pub fn none() -> RequestSpan {
        RequestSpan(None)
    }

    /// Starts the span of `message` and carries the trace context on in its `_meta`.
    pub fn start(app: &App, headers: Option<&HeaderMap>, message: &mut Message) -> RequestSpan {
        let spans = &app.spans;
        if !spans.on() || message.kind() != Kind::Request {
            if let Some(headers) = headers {
                TraceContext::carry_from_headers(headers, message);
            }
            return RequestSpan(None);
        }
        let client = headers
            .and_then(TraceContext::from_headers)
            .or_else(|| message.params().and_then(TraceContext::from_params));
        let parent = client
            .as_ref()
            .and_then(|c| SpanContext::parse(&c.traceparent));
        let Some(mut span) = spans.start(
            spans::name_of(message),
            spans::SpanKind::Server,
            parent.as_ref(),
        ) else {
            // A trace the client does not record goes on as it came.
            if let Some(client) = client {
                client.carry_into(message);
            }
            return RequestSpan(None);
        };
        spans::describe(&mut span, message);
        span.set("mcp_proxy.server", app.server.to_string());
        TraceContext {
            traceparent: span.context().traceparent(),
            tracestate: client.and_then(|c| c.tracestate),
        }
        .replace_in(message);
        RequestSpan(Some(span))
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<spans::Value>) {
        if let Some(span) = &mut self.0 {
            span.set(key, value);
        }
    }

    /// `set`, with a value worked out only when the span is recorded.
    pub fn set_with<V: Into<spans::Value>>(
        &mut self,
        key: &'static str,
        value: impl FnOnce() -> V,
    ) {
        if let Some(span) = &mut self.0 {
            span.set(key, value());
        }
    }

    /// Ends the span with what the client got (and names its trace for the access line).
    pub fn finish(self, outcome: &mut Result<Response<Body>, Rejection>) {
        match outcome {
            Ok(response) => {
                if let (Some(span), true) = (&self.0, access::enabled()) {
                    let trace = access::Trace(span.context().trace_id);
                    response.extensions_mut().insert(trace);
                }
                // A stream's answers are the server exchange's span's to report.
                let code = match response.body() {
                    Body::Full(Some(bytes)) => jsonrpc::error_code(bytes),
                    _ => None,
                };
                self.end(Some(response.status()), code);
            }
            Err(rejection) => self.end(Some(rejection.status), Some(rejection.code)),
        }
    }

    /// Ends the span of a message that was not an HTTP request (WebSocket), with the answer
    /// the client got at once, if any.
    pub fn finish_message(self, outcome: &Result<Vec<Bytes>, Rejection>) {
        match outcome {
            Ok(replies) => self.end(None, replies.first().and_then(|r| jsonrpc::error_code(r))),
            Err(rejection) => self.end(None, Some(rejection.code)),
        }
    }

    fn end(self, status: Option<StatusCode>, code: Option<i64>) {
        let Some(mut span) = self.0 else {
            return;
        };
        if let Some(status) = status {
            span.set("http.response.status_code", i64::from(status.as_u16()));
        }
        if let Some(code) = code {
            span.fail_with_code(code);
        } else if status.is_some_and(|s| s.is_client_error() || s.is_server_error()) {
            span.fail(format!("HTTP {}", status.unwrap_or_default()));
        }
    }
}

/// With tracing on, the span of a resume's replay, under `parent`: the resuming request's span
/// (or, for a GET with `Last-Event-ID`, the client's context).
pub fn replay_span(app: &App, parent: Option<&SpanContext>, session: &str) -> Option<Span> {
    let mut span = app
        .spans
        .start("replay", spans::SpanKind::Internal, parent)?;
    span.set(
        "mcp.session.id",
        crate::telemetry::redact::session(session).to_string(),
    );
    span.set("mcp_proxy.server", app.server.to_string());
    Some(span)
}

/// The trace context a message carries in `_meta`: its request span's, once that started.
pub fn context_of(message: &Message) -> Option<SpanContext> {
    let context = message.params().and_then(TraceContext::from_params)?;
    SpanContext::parse(&context.traceparent)
}

/// The trace context of a client's HTTP headers.
pub fn context_from_headers(headers: &HeaderMap) -> Option<SpanContext> {
    SpanContext::parse(&TraceContext::from_headers(headers)?.traceparent)
}
