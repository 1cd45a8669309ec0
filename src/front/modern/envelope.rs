//! How a legacy server's answer looks to a 2026-07-28 client: every result says `resultType`
//! and who served it (`_meta` serverInfo); cacheable ones carry `ttlMs` and `cacheScope`; a
//! method the server does not know is a 404; a missing resource is -32602 naming its URI.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::StatusCode;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::session::protocol::CAPABILITY as SESSIONS_EXTENSION;
use crate::wire::era::is_cacheable;
use crate::wire::era::{MODERN_VERSION, SERVER_INFO_KEY};
use crate::wire::jsonrpc::{INVALID_PARAMS, METHOD_NOT_FOUND};
use crate::wire::methods::{RESOURCES_READ, SERVER_DISCOVER};

use crate::front::settings::CacheScope;

impl CacheScope {
    fn name(self) -> &'static str {
        match self {
            CacheScope::Public => "public",
            CacheScope::Private => "private",
        }
    }
}

/// The caching hints a served server's results carry (configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheHints {
    pub ttl_ms: u64,
    pub scope: CacheScope,
}

/// What the server answered, as a modern client gets it: the response (its id the client's)
/// and the HTTP status it goes with when answered as JSON.
pub fn response(
    mut answer: Value,
    client_id: &Value,
    method: &str,
    params: &Value,
    server_info: Option<&Value>,
    hints: CacheHints,
) -> (Value, StatusCode) {
    answer["id"] = client_id.clone();
    if let Some(Value::Object(result)) = answer.get_mut("result") {
        decorate(result, method, server_info, hints);
        return (answer, StatusCode::OK);
    }
    let code = answer["error"]["code"].as_i64().unwrap_or_default();
    if code == METHOD_NOT_FOUND {
        return (answer, StatusCode::NOT_FOUND);
    }
    if code == crate::wire::jsonrpc::MISSING_CAPABILITY {
        return (answer, StatusCode::BAD_REQUEST);
    }
    if method == RESOURCES_READ && code == crate::wire::jsonrpc::LEGACY_RESOURCE_NOT_FOUND {
        answer["error"]["code"] = json!(INVALID_PARAMS);
    }
    if method == RESOURCES_READ && answer["error"]["code"] == json!(INVALID_PARAMS) {
        let error = &mut answer["error"];
        if error.get("data").is_none_or(|d| !d.is_object()) {
            error["data"] = json!({});
        }
        error["data"]["uri"] = params["uri"].clone();
    }
    (answer, StatusCode::OK)
}

/// A result object answered to a modern client, written around the server's text (no tree
/// of it is built): the same as `response` + `decorate` would make of it.
pub fn complete(
    result: &RawValue,
    client_id: &Value,
    method: &str,
    server_info: Option<&RawValue>,
    hints: CacheHints,
) -> Option<Bytes> {
    let fields: BTreeMap<String, &RawValue> = serde_json::from_str(result.get()).ok()?;
    let complete = match fields.get("resultType") {
        None => true,
        Some(given) => given.get() == "\"complete\"",
    };
    let hinted = is_cacheable(method) && complete;
    let mut out = Vec::with_capacity(result.get().len() + 160);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    serde_json::to_writer(&mut out, client_id).ok()?;
    out.extend_from_slice(br#","result":{"#);
    let mut first = true;
    let mut field = |out: &mut Vec<u8>, name: &str, value: &[u8]| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        let _ = serde_json::to_writer(&mut *out, name);
        out.push(b':');
        out.extend_from_slice(value);
    };
    for (name, value) in &fields {
        match name.as_str() {
            "_meta" if server_info.is_some() => {
                let meta = with_server_info(value, server_info?)?;
                field(&mut out, name, &meta);
            }
            _ => field(&mut out, name, value.get().as_bytes()),
        }
    }
    if !fields.contains_key("resultType") {
        field(&mut out, "resultType", br#""complete""#);
    }
    if let Some(info) = server_info.filter(|_| !fields.contains_key("_meta")) {
        let meta = [
            b"{\"",
            SERVER_INFO_KEY.as_bytes(),
            b"\":",
            info.get().as_bytes(),
            b"}",
        ];
        field(&mut out, "_meta", &meta.concat());
    }
    // The server's own hints stand; the configured ones fill in for a server that gives none.
    if hinted && !fields.contains_key("ttlMs") {
        field(&mut out, "ttlMs", hints.ttl_ms.to_string().as_bytes());
    }
    if hinted && !fields.contains_key("cacheScope") {
        let scope = format!("\"{}\"", hints.scope.name());
        field(&mut out, "cacheScope", scope.as_bytes());
    }
    out.extend_from_slice(b"}}");
    Some(Bytes::from(out))
}

/// A result's `_meta` with the server's identity added (as given when it has one already, or
/// is not an object).
fn with_server_info(meta: &RawValue, info: &RawValue) -> Option<Vec<u8>> {
    let Ok(mut fields) = serde_json::from_str::<BTreeMap<String, &RawValue>>(meta.get()) else {
        return Some(meta.get().as_bytes().to_vec());
    };
    if fields.contains_key(SERVER_INFO_KEY) {
        return Some(meta.get().as_bytes().to_vec());
    }
    fields.insert(SERVER_INFO_KEY.to_owned(), info);
    serde_json::to_vec(&fields).ok()
}

/// Adds what every modern result carries.
pub fn decorate(
    result: &mut Map<String, Value>,
    method: &str,
    server_info: Option<&Value>,
    hints: CacheHints,
) {
    result
        .entry("resultType")
        .or_insert_with(|| json!("complete"));
    if let Some(info) = server_info {
        let meta = result.entry("_meta").or_insert_with(|| json!({}));
        if let Value::Object(meta) = meta {
            meta.entry(SERVER_INFO_KEY).or_insert_with(|| info.clone());
        }
    }
    if is_cacheable(method) && result.get("resultType") == Some(&json!("complete")) {
        result.entry("ttlMs").or_insert_with(|| json!(hints.ttl_ms));
        result
            .entry("cacheScope")
            .or_insert_with(|| json!(hints.scope.name()));
    }
}

/// `server/discover`, from the server's `initialize` result: its capabilities in the modern
/// form (what this front cannot deliver left out), instructions and identity.
pub fn discover(initialized: &Value, hints: CacheHints, listens: bool) -> Value {
    let mut capabilities = initialized["capabilities"].clone();
    if let Value::Object(capabilities) = &mut capabilities {
        capabilities.remove("tasks");
        // The proxy's own extension for legacy clients (protocol-level sessions).
        if let Some(Value::Object(experimental)) = capabilities.get_mut("experimental") {
            experimental.remove(SESSIONS_EXTENSION);
            if experimental.is_empty() {
                capabilities.remove("experimental");
            }
        }
        if !listens {
            for list in ["tools", "prompts", "resources"] {
                if let Some(Value::Object(capability)) = capabilities.get_mut(list) {
                    capability.remove("listChanged");
                    capability.remove("subscribe");
                }
            }
        }
    }
    let mut result = Map::new();
    result.insert("supportedVersions".into(), json!([MODERN_VERSION]));
    result.insert("capabilities".into(), capabilities);
    if let Some(instructions) = initialized.get("instructions") {
        result.insert("instructions".into(), instructions.clone());
    }
    let server_info = initialized.get("serverInfo");
    decorate(&mut result, SERVER_DISCOVER, server_info, hints);
    Value::Object(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HINTS: CacheHints = CacheHints {
        ttl_ms: 0,
        scope: CacheScope::Private,
    };

    #[test]
    fn results_say_their_type_and_server_and_lists_their_caching() {
        let info = json!({ "name": "s", "version": "1" });
        let (listed, status) = response(
            json!({ "jsonrpc": "2.0", "id": 7, "result": { "tools": [] } }),
            &json!("client-1"),
            "tools/list",
            &json!({}),
            Some(&info),
            HINTS,
        );
        assert_eq!(status, StatusCode::OK);
        assert_eq!(listed["id"], "client-1");
        assert_eq!(listed["result"]["resultType"], "complete");
        assert_eq!(listed["result"]["_meta"][SERVER_INFO_KEY], info);
        assert_eq!(listed["result"]["ttlMs"], 0);
        assert_eq!(listed["result"]["cacheScope"], "private");
        let (called, _) = response(
            json!({ "jsonrpc": "2.0", "id": 8, "result": { "content": [] } }),
            &json!(2),
            "tools/call",
            &json!({}),
            None,
            HINTS,
        );
        assert!(called["result"].get("ttlMs").is_none());
    }

    #[test]
    fn a_result_written_around_the_server_text_is_the_one_decorate_makes() {
        let info = json!({ "name": "s", "version": "1" });
        let results = [
            json!({ "tools": [{ "name": "echo" }], "nextCursor": "c" }),
            json!({ "content": [], "_meta": { "x": 1 } }),
            json!({ "content": [], "_meta": { SERVER_INFO_KEY: { "name": "other" } } }),
            json!({ "content": [], "_meta": null, "resultType": "complete" }),
            json!({ "contents": [], "ttlMs": 5, "cacheScope": "public", "resultType": "x" }),
            json!({ "contents": [], "ttlMs": 5, "cacheScope": "public" }),
            json!({ "we\"ird": "\u{2028}", "n": 1.5e300 }),
        ];
        let hints = CacheHints {
            ttl_ms: 3000,
            scope: CacheScope::Public,
        };
        for result in results {
            for method in ["tools/list", "tools/call", "resources/read"] {
                for info in [Some(&info), None] {
                    let raw = serde_json::value::to_raw_value(&result).unwrap();
                    let raw_info = info.map(|i| serde_json::value::to_raw_value(i).unwrap());
                    let written =
                        complete(&raw, &json!("c-1"), method, raw_info.as_deref(), hints).unwrap();
                    let answer = json!({ "jsonrpc": "2.0", "id": 1, "result": result });
                    let (decorated, _) =
                        response(answer, &json!("c-1"), method, &json!({}), info, hints);
                    let written: Value = serde_json::from_slice(&written).unwrap();
                    assert_eq!(written, decorated, "{method} {result}");
                }
            }
        }
    }

    #[test]
    fn unknown_methods_are_404_and_missing_resources_name_their_uri() {
        let (_, status) = response(
            json!({ "jsonrpc": "2.0", "id": 1, "error": { "code": -32601, "message": "no" } }),
            &json!(1),
            "x/y",
            &json!({}),
            None,
            HINTS,
        );
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (missing, _) = response(
            json!({ "jsonrpc": "2.0", "id": 1, "error": { "code": -32002, "message": "no" } }),
            &json!(1),
            "resources/read",
            &json!({ "uri": "test://none" }),
            None,
            HINTS,
        );
        assert_eq!(missing["error"]["code"], -32602);
        assert_eq!(missing["error"]["data"]["uri"], "test://none");
    }

    #[test]
    fn discover_offers_what_the_server_initialized_with_in_the_modern_form() {
        let initialized = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": { "tools": { "listChanged": true }, "tasks": {} },
            "serverInfo": { "name": "s", "version": "1" },
            "instructions": "hi" });
        let found = discover(&initialized, HINTS, false);
        assert_eq!(found["supportedVersions"], json!([MODERN_VERSION]));
        assert_eq!(found["capabilities"], json!({ "tools": {} }));
        assert_eq!(found["instructions"], "hi");
        assert_eq!(found["_meta"][SERVER_INFO_KEY]["name"], "s");
        assert_eq!(found["cacheScope"], "private");
        assert!(found.get("serverInfo").is_none());
    }
}
