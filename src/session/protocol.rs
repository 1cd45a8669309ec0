//! Protocol-level sessions (seed `000`, "MCP Session Elevation"): the `session/*` methods'
//! params, `sessionEventId` (the event log's own sequence number, so one resume mechanism serves
//! header and protocol resumes), the error codes, and the capability that announces them.
//! Transport-independent: which connection a session is bound to is the fronts' business.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::log::Window;
use crate::wire::jsonrpc::{Kind, Message};
use crate::wire::methods;

pub use crate::wire::methods::{
    SESSION_END as END, SESSION_RESUME as RESUME, SESSION_START as START,
};

/// The notification a connection gets when its session is resumed on another one.
pub use crate::wire::methods::SESSION_DETACHED as DETACHED;

/// The key under `capabilities.experimental` of the `initialize` result.
pub const CAPABILITY: &str = "sessions";

/// The HTTP header that names a protocol-level session on Streamable HTTP requests.
pub const HTTP_HEADER: &str = "mcp-protocol-session-id";

/// Whether `method` is in seed `000`'s `session/*` space (`session/create` and
/// `session/delete`, seed `002`'s earlier names for its own methods, are not).
pub fn is_session_method(method: &str) -> bool {
    crate::wire::methods::route(method) == crate::wire::methods::Route::ProtocolSession
}

#[derive(Debug, Deserialize)]
pub struct ResumeParams {
    #[serde(rename = "sessionId")]
    pub session_id: String,
    #[serde(rename = "lastSessionEventId")]
    pub last_session_event_id: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct EndParams {
    #[serde(rename = "sessionId")]
    pub session_id: String,
}

/// The wire form of a position: `"se_<seq>"`, the shape of the seed's examples.
pub fn event_id(seq: u64) -> String {
    format!("se_{seq}")
}

/// Reads a `lastSessionEventId`: `"se_<n>"`, `"<n>"` or the number `n`.
pub fn parse_event_id(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.strip_prefix("se_").unwrap_or(s).parse().ok(),
        _ => None,
    }
}

/// Adds `params.sessionEventId` to a notification or server request; other messages (and
/// by-position params) are returned as they are.
pub fn stamp(payload: &Bytes, seq: u64) -> Bytes {
    let Ok(mut message) = Message::parse_from_server(payload.clone()) else {
        return payload.clone();
    };
    if !matches!(message.kind(), Kind::Notification | Kind::Request) {
        return payload.clone();
    }
    let mut params: Map<String, Value> = match message.params() {
        None => Map::new(),
        Some(raw) => match serde_json::from_str(raw.get()) {
            Ok(params) => params,
            Err(_) => return payload.clone(),
        },
    };
    params.insert("sessionEventId".into(), Value::String(event_id(seq)));
    match serde_json::value::to_raw_value(&params) {
        Ok(raw) => {
            message.set_params(raw);
            message.to_bytes()
        }
        Err(_) => payload.clone(),
    }
}

/// The `initialize` result with `capabilities.experimental.sessions` added; the rest of the
/// server's capabilities are left as they are.
pub fn advertise(result: &RawValue, window: &Window) -> Option<Box<RawValue>> {
    let mut result: Map<String, Value> = serde_json::from_str(result.get()).ok()?;
    let capabilities = result
        .entry("capabilities")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()?;
    let experimental = capabilities
        .entry("experimental")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()?;
    experimental.insert(
        CAPABILITY.into(),
        json!({
            "methods": [START, RESUME, END],
            "resume": true,
            "catchup": true,
            "coalescing": [methods::RESOURCES_UPDATED, "notifications/*/list_changed"],
            "window": {
                "maxEvents": window.max_events,
                "maxBytes": window.max_bytes,
                "maxAgeMs": window.max_age.as_millis() as u64,
            },
            "transports": ["streamable-http", "websocket"],
            "httpHeader": "Mcp-Protocol-Session-Id",
        }),
    );
    super::data_layer::advertise(capabilities);
    serde_json::value::to_raw_value(&result).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_read_back_in_every_accepted_form() {
        assert_eq!(event_id(305), "se_305");
        assert_eq!(parse_event_id(&json!("se_305")), Some(305));
        assert_eq!(parse_event_id(&json!("305")), Some(305));
        assert_eq!(parse_event_id(&json!(305)), Some(305));
        assert_eq!(parse_event_id(&json!("se_x")), None);
        assert_eq!(parse_event_id(&json!(-1)), None);
        assert_eq!(parse_event_id(&json!(null)), None);
    }

    #[test]
    fn notifications_and_requests_are_stamped_responses_are_not() {
        let stamped = stamp(
            &Bytes::from(
                r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"doc:/foo"}}"#,
            ),
            310,
        );
        let value: Value = serde_json::from_slice(&stamped).unwrap();
        assert_eq!(value["params"]["sessionEventId"], "se_310");
        assert_eq!(value["params"]["uri"], "doc:/foo");

        let stamped = stamp(
            &Bytes::from(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#),
            2,
        );
        let value: Value = serde_json::from_slice(&stamped).unwrap();
        assert_eq!(value["params"]["sessionEventId"], "se_2");

        let request = stamp(
            &Bytes::from(r#"{"jsonrpc":"2.0","id":1,"method":"roots/list","params":{}}"#),
            3,
        );
        let value: Value = serde_json::from_slice(&request).unwrap();
        assert_eq!(value["params"]["sessionEventId"], "se_3");

        let response = Bytes::from(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        assert_eq!(stamp(&response, 4), response);
    }

    #[test]
    fn the_capability_is_added_beside_the_servers_own() {
        let result = RawValue::from_string(
            r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},"experimental":{"other":{}}},"serverInfo":{"name":"s","version":"1"}}"#.into(),
        )
        .unwrap();
        let advertised = advertise(&result, &Window::default()).unwrap();
        let value: Value = serde_json::from_str(advertised.get()).unwrap();
        assert_eq!(value["capabilities"]["tools"], json!({"listChanged": true}));
        assert_eq!(value["capabilities"]["experimental"]["other"], json!({}));
        let sessions = &value["capabilities"]["experimental"]["sessions"];
        assert_eq!(sessions["resume"], true);
        assert_eq!(sessions["window"]["maxEvents"], 1024);
        assert_eq!(value["serverInfo"]["name"], "s");
    }
}
