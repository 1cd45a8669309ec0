//! What a 2026-07-28 request must carry, checked in the order the spec's conformance suite
//! settles: the required `_meta` fields (-32602), the standard headers and the tool parameters
//! (`Mcp-Param-*`) mirroring the body (-32020), the protocol version (-32022), then the method
//! (-32601, 404).

use http::HeaderMap;
use serde_json::{Map, Value};

use http::StatusCode;

use super::params::Params;
use super::{
    CAPABILITIES_KEY, CLIENT_INFO_KEY, LOG_LEVEL_KEY, MODERN_VERSION, SESSION_META_KEY, VERSION_KEY,
};
use crate::wire::jsonrpc::{
    Message, HEADER_MISMATCH, INVALID_PARAMS, METHOD_NOT_FOUND, UNSUPPORTED_VERSION,
};
use crate::wire::methods;
use crate::wire::mirrored::ToolMarks;

const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";

/// The per-request fields of a modern request's `_meta`.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    pub version: String,
    pub capabilities: Map<String, Value>,
    pub client_info: Option<Value>,
    pub log_level: Option<String>,
}

/// Why a 2026-07-28 request is refused before anything serves it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unfit {
    /// A required `_meta` field is missing or not of its type (-32602).
    #[error("Invalid params: _meta[\"{0}\"] is required on every request")]
    MissingMeta(&'static str),
    #[error("Invalid params: invalid log level {0}")]
    LogLevel(String),
    /// A header that mirrors the body is missing, repeated or says otherwise (-32020).
    #[error("Header mismatch: {0}")]
    HeaderMismatch(String),
    /// Another protocol version (-32022, with the supported ones in `data`).
    #[error("Unsupported protocol version {0:?}; this server speaks {MODERN_VERSION}")]
    UnsupportedVersion(String),
    /// A method the revision removed (-32601, 404).
    #[error("Method not found: {0} (not part of protocol version {MODERN_VERSION})")]
    MethodRemoved(String),
}

impl Unfit {
    /// The HTTP status it is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            Unfit::MethodRemoved(_) => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// Its JSON-RPC error code.
    pub fn code(&self) -> i64 {
        match self {
            Unfit::MissingMeta(_) | Unfit::LogLevel(_) => INVALID_PARAMS,
            Unfit::HeaderMismatch(_) => HEADER_MISMATCH,
            Unfit::UnsupportedVersion(_) => UNSUPPORTED_VERSION,
            Unfit::MethodRemoved(_) => METHOD_NOT_FOUND,
        }
    }

    /// The error's `data`: the versions spoken, for another version.
    pub fn data(&self) -> Option<Value> {
        match self {
            Unfit::UnsupportedVersion(requested) => Some(serde_json::json!({
                "supported": [MODERN_VERSION],
                "requested": requested,
            })),
            _ => None,
        }
    }
}

/// Whether a request without a session header is of the 2026-07-28 era: its `_meta` names a
/// protocol version, or its `MCP-Protocol-Version` header names one no legacy revision has.
pub fn is_modern(headers: &HeaderMap, message: &Message, legacy_versions: &[&str]) -> bool {
    let header = header_value(headers, PROTOCOL_VERSION_HEADER);
    let modern_header = header.is_some_and(|v| !legacy_versions.contains(&v.as_str()));
    // Parsed only when the key is there at all: legacy requests pay a substring search.
    modern_header
        || message.params().is_some_and(|raw| {
            raw.get().contains(VERSION_KEY)
                && serde_json::from_str::<Value>(raw.get())
                    .ok()
                    .is_some_and(|params| {
                        meta(&params).is_some_and(|m| m.contains_key(VERSION_KEY))
                    })
        })
}

/// Checks a modern request (`params` its params, read); returns its `_meta` fields.
pub fn check(
    headers: &HeaderMap,
    message: &Message,
    params: &Params,
    tool_marks: &ToolMarks,
) -> Result<RequestMeta, Unfit> {
    let fields = required_meta(params.meta.as_ref())?;
    check_headers(headers, message, params, &fields.version)?;
    check_params(headers, message, params, tool_marks)?;
    if fields.version != MODERN_VERSION {
        return Err(Unfit::UnsupportedVersion(fields.version));
    }
    let method = message.method().unwrap_or_default();
    // Seed `002` subscribes to a resource within a data-layer session: kept for those.
    let within_session = method.starts_with("resources/")
        && params
            .meta
            .as_ref()
            .is_some_and(|meta| meta.get(SESSION_META_KEY).is_some_and(|c| !c.is_null()));
    if methods::removed_in_modern(method) && !within_session {
        return Err(Unfit::MethodRemoved(method.to_owned()));
    }
    Ok(fields)
}

fn meta(params: &Value) -> Option<&Map<String, Value>> {
    match params.get("_meta")? {
        Value::Object(meta) => Some(meta),
        _ => None,
    }
}

fn required_meta(meta: Option<&Map<String, Value>>) -> Result<RequestMeta, Unfit> {
    let missing = Unfit::MissingMeta;
    let meta = meta.ok_or(missing(VERSION_KEY))?;
    let version = match meta.get(VERSION_KEY) {
        Some(Value::String(version)) => version.clone(),
        _ => return Err(missing(VERSION_KEY)),
    };
    let capabilities = match meta.get(CAPABILITIES_KEY) {
        Some(Value::Object(capabilities)) => capabilities.clone(),
        _ => return Err(missing(CAPABILITIES_KEY)),
    };
    let log_level = match meta.get(LOG_LEVEL_KEY) {
        None => None,
        Some(Value::String(level)) if level_rank(level).is_some() => Some(level.clone()),
        Some(other) => return Err(Unfit::LogLevel(other.to_string())),
    };
    Ok(RequestMeta {
        version,
        capabilities,
        client_info: meta.get(CLIENT_INFO_KEY).cloned(),
        log_level,
    })
}

/// Syslog order of the MCP log levels.
pub fn level_rank(level: &str) -> Option<usize> {
    const LEVELS: [&str; 8] = [
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    ];
    LEVELS.iter().position(|l| *l == level)
}

/// `MCP-Protocol-Version`, `Mcp-Method` and (for the calls that name something) `Mcp-Name`
/// must be there and equal the body's values.
fn check_headers(
    headers: &HeaderMap,
    message: &Message,
    params: &Params,
    version: &str,
) -> Result<(), Unfit> {
    let method = message.method().unwrap_or_default();
    mirror(
        headers,
        PROTOCOL_VERSION_HEADER,
        "MCP-Protocol-Version",
        version,
        false,
    )?;
    mirror(headers, METHOD_HEADER, "Mcp-Method", method, false)?;
    if let Some(target) = methods::mirrored_target(method) {
        if let Some(value) = params.str(target.field()) {
            mirror(headers, NAME_HEADER, "Mcp-Name", &value, true)?;
        }
    }
    Ok(())
}

/// A `tools/call`'s `Mcp-Param-*` headers must say what its arguments say, for the parameters
/// the tool's listed schema marks (a tool not listed here yet is the server's to check).
fn check_params(
    headers: &HeaderMap,
    message: &Message,
    params: &Params,
    tool_marks: &ToolMarks,
) -> Result<(), Unfit> {
    if message.method() != Some(methods::TOOLS_CALL) || !tool_marks.any() {
        return Ok(());
    }
    let Some(marked) = params.str("name").and_then(|tool| tool_marks.of(&tool)) else {
        return Ok(());
    };
    if marked.is_empty() {
        return Ok(());
    }
    let arguments = params.value("arguments").unwrap_or_default();
    crate::wire::mirrored::check(&marked, &arguments, headers)
        .map_err(|mismatch| Unfit::HeaderMismatch(mismatch.to_string()))
}

fn mirror(
    headers: &HeaderMap,
    name: &str,
    display: &str,
    body: &str,
    may_be_encoded: bool,
) -> Result<(), Unfit> {
    let mut values = headers.get_all(name).iter();
    let (Some(raw), None) = (values.next(), values.next()) else {
        return Err(Unfit::HeaderMismatch(format!(
            "exactly one {display} header is required"
        )));
    };
    let value = match may_be_encoded {
        true => crate::wire::mirrored::decode(raw.as_bytes())
            .map_err(|why| Unfit::HeaderMismatch(format!("the {display} header {why}")))?,
        false => raw
            .to_str()
            .map_err(|_| {
                Unfit::HeaderMismatch(format!("the {display} header has invalid characters"))
            })?
            .trim_matches(|c| c == ' ' || c == '\t')
            .to_owned(),
    };
    match value == body {
        true => Ok(()),
        false => Err(Unfit::HeaderMismatch(format!(
            "the {display} header value {value:?} does not match the body value {body:?}"
        ))),
    }
}

fn header_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use serde_json::json;

    fn message(body: Value) -> Message {
        Message::parse(Bytes::from(body.to_string())).unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    fn checked(headers: &HeaderMap, message: &Message) -> Result<RequestMeta, Unfit> {
        check(
            headers,
            message,
            &Params::read(message),
            &ToolMarks::default(),
        )
    }

    fn call(name: &str) -> Message {
        message(
            json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": name,
            "_meta": { VERSION_KEY: MODERN_VERSION, CAPABILITIES_KEY: {} } } }),
        )
    }

    #[test]
    fn names_are_compared_after_decoding_and_trimming() {
        let standard = [
            ("mcp-protocol-version", MODERN_VERSION),
            ("mcp-method", "tools/call"),
        ];
        let with_name = |name: &'static str| {
            let mut all = standard.to_vec();
            all.push(("mcp-name", name));
            headers(&all)
        };
        assert!(checked(&with_name("  hi  "), &call("hi")).is_ok());
        let encoded = with_name("=?base64?SGVsbG8sIOS4lueVjA==?=");
        assert!(checked(&encoded, &call("Hello, 世界")).is_ok());
        for bad in ["=?base64?SGVsbG8?=", "=?base64?SGVs!!!bG8=?=", "other"] {
            let refused = checked(&with_name(bad), &call("Hello")).unwrap_err();
            assert_eq!(refused.code(), HEADER_MISMATCH, "{bad}");
            assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        }
        let missing = checked(&headers(&standard), &call("hi")).unwrap_err();
        assert_eq!(missing.code(), HEADER_MISMATCH);
    }

    #[test]
    fn missing_meta_comes_before_headers_and_a_mismatch_before_the_version() {
        let discover = |meta: Value| {
            message(
                json!({ "jsonrpc": "2.0", "id": 9, "method": "server/discover",
                            "params": { "_meta": meta } }),
            )
        };
        let modern = headers(&[
            ("mcp-protocol-version", MODERN_VERSION),
            ("mcp-method", "server/discover"),
        ]);
        let refused = checked(&modern, &discover(json!({ CAPABILITIES_KEY: {} }))).unwrap_err();
        assert_eq!(refused, Unfit::MissingMeta(VERSION_KEY));
        assert_eq!(refused.code(), INVALID_PARAMS);
        let odd = json!({ VERSION_KEY: "v999.0.0", CAPABILITIES_KEY: {} });
        assert_eq!(
            checked(&modern, &discover(odd.clone())).unwrap_err().code(),
            HEADER_MISMATCH
        );
        let both_odd = headers(&[
            ("mcp-protocol-version", "v999.0.0"),
            ("mcp-method", "server/discover"),
        ]);
        let refused = checked(&both_odd, &discover(odd)).unwrap_err();
        assert_eq!(refused.code(), UNSUPPORTED_VERSION);
        assert_eq!(refused.data().unwrap()["requested"], "v999.0.0");
    }
}
