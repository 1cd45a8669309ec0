//! OTLP's `ExportTraceServiceRequest` in protobuf (opentelemetry-proto, `trace/v1`), written
//! by hand: a few message types do not need a code generator.

use super::{Finished, Value};

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

/// The request body for a batch of spans of one service.
pub fn encode_request(service: &str, instance: &str, spans: &[Finished]) -> Vec<u8> {
    let mut resource = Vec::new();
    key_value(
        &mut resource,
        1,
        "service.name",
        &Value::from(service.to_owned()),
    );
    key_value(
        &mut resource,
        1,
        "service.instance.id",
        &Value::from(instance.to_owned()),
    );
    key_value(
        &mut resource,
        1,
        "service.version",
        &Value::from(env!("CARGO_PKG_VERSION")),
    );

    let mut scope = Vec::new();
    string(&mut scope, 1, env!("CARGO_PKG_NAME"));
    string(&mut scope, 2, env!("CARGO_PKG_VERSION"));

    let mut scope_spans = Vec::new();
    message(&mut scope_spans, 1, &scope);
    let mut encoded = Vec::with_capacity(256);
    for span in spans {
        encoded.clear();
        encode_span(&mut encoded, span);
        message(&mut scope_spans, 2, &encoded);
    }

    let mut resource_spans = Vec::new();
    message(&mut resource_spans, 1, &resource);
    message(&mut resource_spans, 2, &scope_spans);

    let mut request = Vec::with_capacity(resource_spans.len() + 8);
    message(&mut request, 1, &resource_spans);
    request
}

fn encode_span(out: &mut Vec<u8>, span: &Finished) {
    bytes(out, 1, &span.context.trace_id);
    bytes(out, 2, &span.context.span_id);
    if let Some(parent) = &span.parent {
        bytes(out, 4, parent);
    }
    string(out, 5, &span.name);
    tag(out, 6, VARINT);
    varint(out, span.kind as u64);
    tag(out, 7, FIXED64);
    out.extend_from_slice(&span.start_nanos.to_le_bytes());
    tag(out, 8, FIXED64);
    out.extend_from_slice(&span.end_nanos.to_le_bytes());
    for (key, value) in &span.attributes {
        key_value(out, 9, key, value);
    }
    // Status: message = 2, code = 3 (1 ok, 2 error); unset for a span that did not fail.
    if let Some(error) = &span.error {
        let mut status = Vec::new();
        string(&mut status, 2, error);
        tag(&mut status, 3, VARINT);
        varint(&mut status, 2);
        message(out, 15, &status);
    }
}

/// A `KeyValue` (key = 1, value = 2: an `AnyValue`) as field `field`.
fn key_value(out: &mut Vec<u8>, field: u32, key: &str, value: &Value) {
    let mut any = Vec::new();
    match value {
        Value::Str(text) => string(&mut any, 1, text),
        Value::Bool(b) => {
            tag(&mut any, 2, VARINT);
            varint(&mut any, u64::from(*b));
        }
        Value::Int(n) => {
            tag(&mut any, 3, VARINT);
            varint(&mut any, *n as u64);
        }
    }
    let mut pair = Vec::with_capacity(key.len() + any.len() + 4);
    string(&mut pair, 1, key);
    message(&mut pair, 2, &any);
    message(out, field, &pair);
}

fn tag(out: &mut Vec<u8>, field: u32, wire_type: u8) {
    varint(out, u64::from(field << 3 | u32::from(wire_type)));
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn bytes(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    tag(out, field, LEN);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

fn string(out: &mut Vec<u8>, field: u32, text: &str) {
    bytes(out, field, text.as_bytes());
}

fn message(out: &mut Vec<u8>, field: u32, encoded: &[u8]) {
    bytes(out, field, encoded);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_tags_are_protobufs() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        out.clear();
        tag(&mut out, 15, LEN);
        assert_eq!(out, [0x7a]);
        out.clear();
        varint(&mut out, -1i64 as u64);
        assert_eq!(out.len(), 10, "a negative int64 takes ten bytes");
    }
}
