//! `mirrored::{encode, decode, check, headers_for, marks}`: the 2026-07-28 headers that mirror a
//! request's body (`Mcp-Name`, `Mcp-Param-*`, values as `=?base64?…?=` when they must be).
//!
//! Input `[selector, bytes…]`. Any header bytes decode or are refused without a panic; what
//! decodes encodes to a header value that decodes back to it. Any text encodes to a valid
//! header value that decodes back to it. Any JSON value put in a marked parameter gets the
//! headers `headers_for` writes, which `check` takes, as string or integer mark; a header that
//! says another value is refused. Any JSON as a tool's `inputSchema` gives its marks or why
//! not, without a panic.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::wire::mirrored::{self, Mirrored};
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    // Header bytes as a client sends them.
    if let Ok(read) = mirrored::decode(rest) {
        round_trip(&read);
    }
    // Text as a body holds it.
    let text = String::from_utf8_lossy(rest);
    round_trip(&text);

    let Ok(value) = serde_json::from_slice::<Value>(rest) else {
        return;
    };
    let _ = mirrored::marks(&value);
    if mirrored::text_of(&value).is_none() && !value.is_null() {
        // Not something a header mirrors (a marked parameter is a string, integer or boolean):
        // refused as a missing header, as the schema would refuse it.
        return;
    }
    let mark = Mirrored {
        path: vec!["outer".into(), "param".into()],
        name: "Param".into(),
        integer: selector % 2 == 1,
    };
    let arguments = json!({ "outer": { "param": value } });
    let marks = [mark];
    let mut headers = HeaderMap::new();
    for (name, value) in mirrored::headers_for(&marks, &arguments) {
        let name = HeaderName::from_bytes(name.as_bytes()).expect("a header name");
        let value = HeaderValue::from_str(&value).expect("a header value");
        headers.append(name, value);
    }
    assert_eq!(
        mirrored::check(&marks, &arguments, &headers),
        Ok(()),
        "{arguments} with {headers:?}"
    );
    // A header that says something else is refused.
    if let Some(sent) = headers.get("mcp-param-param").cloned() {
        let said = mirrored::decode(sent.as_bytes()).unwrap();
        let other = mirrored::encode(&format!("{said}0"));
        let mut lying = HeaderMap::new();
        lying.insert("mcp-param-param", HeaderValue::from_str(&other).unwrap());
        let differs = mirrored::check(&marks, &arguments, &lying).is_err();
        // An integer mark compares numbers: "10" says 10, "1.50" says 1.5 (a number) still.
        let same_number = marks[0].integer
            && value.as_f64().is_some()
            && format!("{said}0").parse::<f64>().ok() == value.as_f64();
        assert!(differs || same_number, "{other} taken for {value}");
        lying.append("mcp-param-param", sent);
        assert!(
            mirrored::check(&marks, &arguments, &lying).is_err(),
            "sent twice"
        );
    }
});

/// `text` encodes to a valid header value that decodes to it; encoding is stable.
fn round_trip(text: &str) {
    let encoded = mirrored::encode(text);
    assert!(
        HeaderValue::from_str(&encoded).is_ok(),
        "{encoded:?} is no header value"
    );
    assert_eq!(
        mirrored::decode(encoded.as_bytes()).as_deref(),
        Ok(text),
        "{text:?} as {encoded:?}"
    );
}
