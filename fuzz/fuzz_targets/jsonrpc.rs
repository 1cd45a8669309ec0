//! `jsonrpc::Message::parse` / `parse_without_version` / `top_level_id` on arbitrary bytes.
//!
//! For every message that parses: `kind()` agrees with the presence of method and id, the
//! unchanged message forwards its exact bytes, a re-encoded message (`set_id`, `set_params`)
//! parses back to the same kind, method, id and payload, and `top_level_id` of the message or
//! of any head of it never names another id. Nothing may panic.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::wire::jsonrpc::{self, Kind, Message};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let strict = Message::parse(Bytes::copy_from_slice(data));
    let lax = Message::parse_without_version(Bytes::copy_from_slice(data));
    if let Err(e) = &strict {
        let _ = e.code();
        let _ = e.to_string();
    }
    if let Ok(m) = &strict {
        // What the strict parser takes, the lax one takes the same way.
        let l = lax
            .as_ref()
            .expect("parse accepted what parse_without_version refused");
        assert_eq!(m.kind(), l.kind());
        assert_eq!(m.id(), l.id());
        assert_eq!(m.method(), l.method());
    }
    for parsed in [strict, lax] {
        if let Ok(message) = parsed {
            check_message(data, &message);
        }
    }
    // Heads of arbitrary bytes: no panic, and only string or number ids.
    for head in heads(data) {
        if let Some(id) = jsonrpc::top_level_id(head) {
            assert!(id.is_string() || id.is_number(), "top_level_id gave {id}");
        }
    }
});

/// The whole input and up to 16 prefixes of it (every length for short inputs).
fn heads(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let step = (data.len() / 16).max(1);
    (0..data.len())
        .step_by(step)
        .chain(std::iter::once(data.len()))
        .map(move |n| &data[..n])
}

fn check_message(data: &[u8], m: &Message) {
    // The shape decides the kind.
    match m.kind() {
        Kind::Request => {
            assert!(m.method().is_some());
            let id = m.id().expect("request without id");
            assert!(id.is_string() || id.is_number(), "request id {id}");
            assert!(m.result().is_none() && !m.is_error());
        }
        Kind::Notification => {
            assert!(m.method().is_some() && m.id().is_none());
            assert!(m.result().is_none() && !m.is_error());
        }
        Kind::Response => {
            assert!(m.method().is_none());
            let id = m.id().expect("response without id");
            assert!(
                id.is_string() || id.is_number() || id.is_null(),
                "response id {id}"
            );
            assert!(m.result().is_some() != m.is_error(), "result and error");
        }
    }
    // Forwarded unchanged: the very bytes that came in.
    assert_eq!(&m.to_bytes()[..], data);
    let _ = m.params_as::<Value>();

    // The id, as the proxy finds it in the head of an oversized line, is never another one.
    for head in heads(data) {
        if let Some(found) = jsonrpc::top_level_id(head) {
            assert_eq!(
                Some(&found),
                m.id(),
                "top_level_id of {:?}",
                String::from_utf8_lossy(head)
            );
        }
    }
    // Without escapes a literal "id" key is found in the whole message.
    if !data.contains(&b'\\') {
        if let Some(id) = m.id().filter(|id| id.is_string() || id.is_number()) {
            assert_eq!(jsonrpc::top_level_id(data).as_ref(), Some(id));
        }
    }

    // Re-encoded with nothing changed in substance.
    // (A notification without params has nothing that can be set to itself.)
    let mut same = m.clone();
    match (m.id(), m.params()) {
        (Some(id), _) => same.set_id(id.clone()),
        (None, Some(params)) => same.set_params(params.to_owned()),
        (None, None) => {}
    }
    if m.id().is_some() || m.params().is_some() {
        check_reencoded(m, &same, m.kind(), m.id());
    }

    // Re-encoded with a new id (the proxy's own numbering).
    let new_ids = [
        Value::from(0),
        Value::from(-1),
        Value::from(u64::MAX),
        Value::from(i64::MIN),
        Value::from(0.5),
        Value::from("s.7"),
        Value::from("\"\\\u{0}é\n"),
    ];
    for id in new_ids {
        let mut renumbered = m.clone();
        renumbered.set_id(id.clone());
        let kind = if m.method().is_some() {
            Kind::Request
        } else {
            Kind::Response
        };
        check_reencoded(m, &renumbered, kind, Some(&id));
    }

    // Answers built by the proxy itself parse as responses.
    let id = m.id().cloned().unwrap_or(Value::Null);
    let text = m.method().unwrap_or("");
    let error =
        jsonrpc::error_response(&id, jsonrpc::INTERNAL_ERROR, text, Some(Value::from(text)));
    let error = Message::parse(error).expect("error_response does not parse");
    assert!(error.kind() == Kind::Response && error.is_error());
    assert_eq!(error.id(), Some(&id));
    if let Some(method) = m.method() {
        let n = jsonrpc::notification(method, Value::Null);
        let n = Message::parse(n).expect("notification does not parse");
        assert_eq!(n.kind(), Kind::Notification);
        assert_eq!(n.method(), Some(method));
    }
    if !id.is_null() {
        let r = Message::parse(jsonrpc::result_response(
            &id,
            Value::Object(Default::default()),
        ))
        .expect("result_response does not parse");
        assert_eq!(r.kind(), Kind::Response);
        assert_eq!(r.id(), Some(&id));
    }
}

fn check_reencoded(original: &Message, changed: &Message, kind: Kind, id: Option<&Value>) {
    let bytes = changed.to_bytes();
    let again = Message::parse(bytes.clone()).unwrap_or_else(|e| {
        panic!(
            "re-encoded message does not parse ({e}): {:?}",
            String::from_utf8_lossy(&bytes)
        )
    });
    assert_eq!(again.kind(), kind);
    // (Also a number id: 0.1 or 180446744077709551615 must come back as the same number.)
    assert_eq!(again.id(), id);
    assert_eq!(again.method(), original.method());
    assert_eq!(
        again.params().map(|p| p.get()),
        original.params().map(|p| p.get())
    );
    assert_eq!(
        again.result().map(|p| p.get()),
        original.result().map(|p| p.get())
    );
    assert_eq!(again.is_error(), original.is_error());
    // And it is stable: encoding it again gives the same bytes.
    let mut twice = again.clone();
    if let Some(id) = id {
        twice.set_id(id.clone());
        assert_eq!(twice.to_bytes(), bytes);
    }
}
