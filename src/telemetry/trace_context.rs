//! W3C trace context (`traceparent`, `tracestate`) on both sides of the proxy: taken from a
//! client's HTTP headers into the request's `params._meta` (the spec's trace-context
//! convention, which a server behind the proxy reads whatever its transport, stdio included),
//! and from `_meta` into the headers of a request to an HTTP server.

use http::{HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::wire::jsonrpc::{Kind, Message};

pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";
/// The longest `tracestate` passed on (W3C: 32 members of at most 256 characters, and a
/// receiver may drop it past 512).
const MAX_TRACESTATE: usize = 512;

/// A caller's place in a trace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TraceContext {
    pub traceparent: String,
    #[serde(default)]
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The context of a client's HTTP headers; `None` without a valid `traceparent`.
    pub fn from_headers(headers: &HeaderMap) -> Option<TraceContext> {
        let text = |name| {
            headers
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        let traceparent = text(TRACEPARENT)?.trim();
        trace_id(traceparent)?;
        Some(TraceContext {
            traceparent: traceparent.to_owned(),
            tracestate: text(TRACESTATE)
                .map(str::trim)
                .filter(|state| !state.is_empty() && state.len() <= MAX_TRACESTATE)
                .map(str::to_owned),
        })
    }

    /// Carries the context of a client's HTTP `headers`, if any, into `request`'s `_meta`
    /// (`carry_into`): what every front does with a client message.
    pub fn carry_from_headers(headers: &HeaderMap, request: &mut Message) {
        if let Some(context) = TraceContext::from_headers(headers) {
            context.carry_into(request);
        }
    }

    /// The context in a request's `params._meta`; `None` without a valid `traceparent`.
    pub fn from_params(params: &RawValue) -> Option<TraceContext> {
        // Most requests carry none: no parse for them.
        if !params.get().contains(TRACEPARENT) {
            return None;
        }
        #[derive(Deserialize)]
        struct Params {
            #[serde(rename = "_meta")]
            meta: Option<TraceContext>,
        }
        let context = serde_json::from_str::<Params>(params.get()).ok()?.meta?;
        trace_id(&context.traceparent)?;
        Some(context)
    }

    /// The trace this context belongs to.
    pub fn trace_id(&self) -> &str {
        trace_id(&self.traceparent).unwrap_or_default()
    }

    /// Puts this context into `request`'s `params._meta`, unless it has one of its own there
    /// (which then wins) or its params are not an object. Only requests carry one.
    pub fn carry_into(&self, request: &mut Message) {
        self.put(request, false);
    }

    /// Puts this context into `request`'s `params._meta` over the one there: the proxy's own
    /// span is the parent of what the request causes next.
    pub fn replace_in(&self, request: &mut Message) {
        self.put(request, true);
    }

    fn put(&self, request: &mut Message, over: bool) {
        if request.kind() != Kind::Request {
            return;
        }
        let mut params = match request.params() {
            None => Map::new(),
            Some(raw) => match serde_json::from_str::<Value>(raw.get()) {
                Ok(Value::Object(params)) => params,
                _ => return,
            },
        };
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(meta) = meta else {
            return;
        };
        if meta.contains_key(TRACEPARENT) && !over {
            return;
        }
        meta.insert(TRACEPARENT.into(), self.traceparent.clone().into());
        match &self.tracestate {
            Some(state) => meta.insert(TRACESTATE.into(), state.clone().into()),
            None => meta.remove(TRACESTATE),
        };
        if let Ok(params) = serde_json::value::to_raw_value(&params) {
            request.set_params(params);
        }
    }

    /// Sets this context as the headers of a request to an HTTP server.
    pub fn set_headers(&self, headers: &mut HeaderMap) {
        if let Ok(value) = HeaderValue::from_str(&self.traceparent) {
            headers.insert(TRACEPARENT, value);
        }
        if let Some(Ok(value)) = self.tracestate.as_deref().map(HeaderValue::from_str) {
            headers.insert(TRACESTATE, value);
        }
    }
}

/// The trace id of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`); `None` if it is not
/// one, or names the invalid all-zero trace or parent.
pub fn trace_id(traceparent: &str) -> Option<&str> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let valid = hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && hex(parent, 16)
        && hex(flags, 2)
        && trace.bytes().any(|b| b != b'0')
        && parent.bytes().any(|b| b != b'0')
        && (version != "00" || parts.next().is_none());
    valid.then_some(trace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    fn parent() -> String {
        format!("00-{TRACE}-00f067aa0ba902b7-01")
    }

    #[test]
    fn a_traceparent_gives_its_trace_id_and_a_malformed_one_none() {
        assert_eq!(trace_id(&parent()), Some(TRACE));
        // A later version may carry more fields.
        assert_eq!(
            trace_id(&format!("01-{TRACE}-00f067aa0ba902b7-01-extra")),
            Some(TRACE)
        );
        for bad in [
            "",
            "00",
            &format!("00-{TRACE}-00f067aa0ba902b7-01-extra"),
            &format!("ff-{TRACE}-00f067aa0ba902b7-01"),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            &format!("00-{TRACE}-0000000000000000-01"),
            &format!("00-{}-00f067aa0ba902b7-01", TRACE.to_uppercase()),
            &format!("00-{TRACE}-00f067aa0ba902b-01"),
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(trace_id(bad), None, "{bad}");
        }
    }

    fn request(params: &str) -> Message {
        Message::parse(Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call"{params}}}"#
        )))
        .unwrap()
    }

    fn meta_of(message: &Message) -> Value {
        let params: Value = serde_json::from_str(message.params().unwrap().get()).unwrap();
        params["_meta"].clone()
    }

    #[test]
    fn the_context_goes_into_meta_beside_what_is_there_and_never_over_a_clients_own() {
        let context = TraceContext {
            traceparent: parent(),
            tracestate: Some("vendor=1".into()),
        };
        let mut bare = request("");
        context.carry_into(&mut bare);
        assert_eq!(meta_of(&bare)[TRACEPARENT], parent());
        assert_eq!(meta_of(&bare)[TRACESTATE], "vendor=1");

        let mut with_meta = request(r#","params":{"name":"echo","_meta":{"progressToken":7}}"#);
        context.carry_into(&mut with_meta);
        assert_eq!(meta_of(&with_meta)["progressToken"], 7);
        assert_eq!(meta_of(&with_meta)[TRACEPARENT], parent());
        assert_eq!(
            TraceContext::from_params(with_meta.params().unwrap()),
            Some(context.clone())
        );

        let own = format!("00-{}-00f067aa0ba902b7-01", "1".repeat(32));
        let mut its_own = request(&format!(
            r#","params":{{"_meta":{{"traceparent":"{own}"}}}}"#
        ));
        context.carry_into(&mut its_own);
        assert_eq!(meta_of(&its_own)[TRACEPARENT], own.as_str());
        assert_eq!(meta_of(&its_own).get(TRACESTATE), None);

        let mut odd = request(r#","params":[1,2]"#);
        context.carry_into(&mut odd);
        assert_eq!(
            odd.params().unwrap().get(),
            "[1,2]",
            "not an object: left alone"
        );
    }

    #[test]
    fn headers_give_a_context_only_with_a_valid_traceparent() {
        let mut headers = HeaderMap::new();
        assert_eq!(TraceContext::from_headers(&headers), None);
        headers.insert(TRACEPARENT, HeaderValue::from_static("garbage"));
        headers.insert(TRACESTATE, HeaderValue::from_static("a=1"));
        assert_eq!(TraceContext::from_headers(&headers), None);
        headers.insert(TRACEPARENT, parent().parse().unwrap());
        let context = TraceContext::from_headers(&headers).unwrap();
        assert_eq!(context.trace_id(), TRACE);
        assert_eq!(context.tracestate.as_deref(), Some("a=1"));
        let mut out = HeaderMap::new();
        context.set_headers(&mut out);
        assert_eq!(out[TRACEPARENT], parent().as_str());
        assert_eq!(out[TRACESTATE], "a=1");
    }
}
