//! JSON-RPC 2.0 message model: classify a message, rewrite its id, build errors — while the
//! payload (`params`, `result`, `error`) is carried as raw JSON and never re-serialised. A
//! message with a duplicated member name, at any depth, is refused (`unique`).

mod unique;

use bytes::Bytes;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

// Every JSON-RPC error code the proxy answers with or reads, in one table.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// An unknown, expired or foreign session named by `Mcp-Session-Id` (with HTTP 404).
pub const TRANSPORT_SESSION_NOT_FOUND: i64 = -32001;
/// A resource a legacy server does not have (its revisions' convention; -32602 in 2026-07-28).
pub const LEGACY_RESOURCE_NOT_FOUND: i64 = -32002;
/// 2026-07-28: the HTTP headers do not match the body, or a required one is missing or
/// malformed.
pub const HEADER_MISMATCH: i64 = -32020;
/// 2026-07-28: the request needs a client capability it did not declare.
pub const MISSING_CAPABILITY: i64 = -32021;
/// 2026-07-28: the revision asked for is not served (`data: {supported, requested}`).
pub const UNSUPPORTED_VERSION: i64 = -32022;
/// An unknown, expired or foreign session named in a message: a `session/*` call's, a
/// data-layer session's or a state handle's (the seed's code, `data: {sessionId}`).
pub const SESSION_NOT_FOUND: i64 = -32043;
/// The server serves this only within a data-layer session (the seed's code).
pub const SESSION_REQUIRED: i64 = -32044;
/// The principal is over a rate limit (this proxy's: JSON-RPC leaves -32000 … -32099 to
/// implementations); with HTTP 429, `Retry-After` and `data.retryAfterMs`.
pub const RATE_LIMITED: i64 = -32029;

/// What a message is, by the shape JSON-RPC gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    Response,
}

/// Why bytes are not a JSON-RPC message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("malformed JSON: {0}")]
    Json(String),
    #[error("not a JSON-RPC 2.0 message: {0}")]
    NotJsonRpc(String),
    /// A member name that appears twice in one object: the proxy and the server behind it
    /// could read different values, so the message is refused, never forwarded.
    #[error("the member {member:?} appears more than once; member names must be unique")]
    Duplicate {
        /// Where: `params.uri`, `params.arguments.x`, `id`.
        member: String,
        /// The message's id, when that much could be read, to answer with.
        id: Option<Value>,
    },
}

impl ParseError {
    pub fn code(&self) -> i64 {
        match self {
            ParseError::Json(_) => PARSE_ERROR,
            ParseError::NotJsonRpc(_) | ParseError::Duplicate { .. } => INVALID_REQUEST,
        }
    }
}

/// One JSON-RPC message. `raw` holds the bytes it was parsed from until something is changed,
/// so a message that is only forwarded goes out exactly as it came in.
#[derive(Debug, Clone)]
pub struct Message {
    id: Option<Value>,
    method: Option<String>,
    params: Option<Box<RawValue>>,
    result: Option<Box<RawValue>>,
    error: Option<Box<RawValue>>,
    raw: Option<Bytes>,
}

#[derive(Deserialize)]
struct Wire {
    jsonrpc: Option<String>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    method: Option<String>,
    params: Option<Box<RawValue>>,
    result: Option<Box<RawValue>>,
    error: Option<Box<RawValue>>,
}

/// The id of a message refused whole, when it has one readable id.
#[derive(Deserialize)]
struct IdOnly {
    id: Option<Value>,
}

/// Distinguishes `"id": null` (Some(Null)) from an absent id (None).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl Message {
    /// Parses one message. A JSON array (a 2025-03-26 batch) is refused as not JSON-RPC, and
    /// so is a message with a duplicated member name at any depth (`ParseError::Duplicate`).
    /// One whose names cannot all be checked (nesting deeper than 128, a number beyond a
    /// double, a lone surrogate escape, bytes that are not UTF-8, in a part the proxy would
    /// otherwise skip unread) is refused as malformed (`ParseError::Json`).
    pub fn parse(bytes: Bytes) -> Result<Message, ParseError> {
        Message::parse_checking(bytes, true, true)
    }

    /// Like `parse`, but a missing `"jsonrpc"` member is accepted (a wrong one is not): for
    /// messages the proxy answers itself, whose published examples leave it out.
    pub fn parse_without_version(bytes: Bytes) -> Result<Message, ParseError> {
        Message::parse_checking(bytes, false, true)
    }

    /// Like `parse`, for what a server sends: its member names are not searched for a
    /// duplicate (a second pass over answers that may be large). What the proxy forwards of a
    /// server goes out as the server wrote it, for the client's parser to read as the client
    /// would read it from the server itself; what the proxy reads of it to decide something
    /// fails closed when it cannot be read.
    pub fn parse_from_server(bytes: Bytes) -> Result<Message, ParseError> {
        Message::parse_checking(bytes, true, false)
    }

    fn parse_checking(
        bytes: Bytes,
        version_required: bool,
        unique_members: bool,
    ) -> Result<Message, ParseError> {
        let unread = match unique_members.then(|| unique::first_duplicate(&bytes)) {
            Some(Ok(Some(member))) => {
                let id = serde_json::from_slice::<IdOnly>(&bytes)
                    .ok()
                    .and_then(|read| read.id)
                    .filter(|id| id.is_string() || id.is_number());
                return Err(ParseError::Duplicate { member, id });
            }
            Some(Err(unread)) => Some(unread),
            Some(Ok(None)) | None => None,
        };
        let wire: Wire = serde_json::from_slice(&bytes).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => ParseError::NotJsonRpc(
                if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
                    "JSON-RPC batches are not supported".into()
                } else {
                    "expected a JSON object with \"jsonrpc\": \"2.0\"".into()
                },
            ),
            _ => ParseError::Json(e.to_string()),
        })?;
        if let Some(unread) = unread {
            // The message parses only because what it does not read is skipped unread: a
            // duplicated name there (or after) went unchecked, and a server may read it.
            return Err(ParseError::Json(unread.to_string()));
        }
        if wire.jsonrpc.as_deref() != Some("2.0") && (version_required || wire.jsonrpc.is_some()) {
            return Err(ParseError::NotJsonRpc("\"jsonrpc\" must be \"2.0\"".into()));
        }
        match &wire.id {
            None | Some(Value::String(_)) | Some(Value::Number(_)) => {}
            Some(Value::Null) if wire.method.is_none() => {}
            Some(_) => {
                return Err(ParseError::NotJsonRpc(
                    "\"id\" must be a string or a number".into(),
                ))
            }
        }
        let message = Message {
            id: wire.id,
            method: wire.method,
            params: wire.params,
            result: wire.result,
            error: wire.error,
            raw: Some(bytes),
        };
        match (&message.method, &message.id) {
            (Some(_), _) if message.result.is_some() || message.error.is_some() => Err(
                ParseError::NotJsonRpc("a message has either \"method\" or a result".into()),
            ),
            (Some(_), _) => Ok(message),
            (None, Some(_)) if message.result.is_some() != message.error.is_some() => Ok(message),
            (None, Some(_)) => Err(ParseError::NotJsonRpc(
                "a response carries exactly one of \"result\" and \"error\"".into(),
            )),
            (None, None) => Err(ParseError::NotJsonRpc(
                "a message needs \"method\" or \"id\"".into(),
            )),
        }
    }

    /// Builds a request or notification (`id: None`) from parts.
    pub fn request(id: Option<Value>, method: &str, params: Option<Box<RawValue>>) -> Message {
        Message {
            id,
            method: Some(method.to_owned()),
            params,
            result: None,
            error: None,
            raw: None,
        }
    }

    /// A successful response the proxy answers with itself, from parts.
    pub fn response(id: &Value, result: Value) -> Message {
        Message {
            id: Some(id.clone()),
            method: None,
            params: None,
            result: Some(serde_json::value::to_raw_value(&result).unwrap_or_default()),
            error: None,
            raw: None,
        }
    }

    /// An error response the proxy answers with itself, from parts.
    pub fn error_response(id: &Value, code: i64, message: &str, data: Option<Value>) -> Message {
        let mut error = serde_json::json!({ "code": code, "message": message });
        if let Some(data) = data {
            error["data"] = data;
        }
        Message {
            id: Some(id.clone()),
            method: None,
            params: None,
            result: None,
            error: Some(serde_json::value::to_raw_value(&error).unwrap_or_default()),
            raw: None,
        }
    }

    pub fn kind(&self) -> Kind {
        match (&self.method, &self.id) {
            (Some(_), Some(_)) => Kind::Request,
            (Some(_), None) => Kind::Notification,
            (None, _) => Kind::Response,
        }
    }

    pub fn id(&self) -> Option<&Value> {
        self.id.as_ref()
    }

    pub fn method(&self) -> Option<&str> {
        self.method.as_deref()
    }

    pub fn params(&self) -> Option<&RawValue> {
        self.params.as_deref()
    }

    pub fn result(&self) -> Option<&RawValue> {
        self.result.as_deref()
    }

    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }

    /// The code of an error response.
    pub fn error_code(&self) -> Option<i64> {
        serde_json::from_str::<ErrorCode>(self.error()?.get())
            .ok()
            .map(|e| e.code)
    }

    /// The `error` member of an error response, as sent.
    pub fn error(&self) -> Option<&RawValue> {
        self.error.as_deref()
    }

    /// Replaces the id; the message is re-encoded on the next `to_bytes`.
    pub fn set_id(&mut self, id: Value) {
        self.id = Some(id);
        self.raw = None;
    }

    /// Replaces the params; the message is re-encoded on the next `to_bytes`.
    pub fn set_params(&mut self, params: Box<RawValue>) {
        self.params = Some(params);
        self.raw = None;
    }

    /// Replaces the result; the message is re-encoded on the next `to_bytes`.
    pub fn set_result(&mut self, result: Box<RawValue>) {
        self.result = Some(result);
        self.raw = None;
    }

    /// Deserialises the params into `T` (absent params read as `{}`).
    pub fn params_as<'a, T: Deserialize<'a>>(&'a self) -> Option<T> {
        let raw = self.params.as_deref().map(RawValue::get).unwrap_or("{}");
        serde_json::from_str(raw).ok()
    }

    /// The wire form: the original bytes when nothing changed, else a compact encoding in
    /// which the raw payload parts are copied verbatim.
    pub fn to_bytes(&self) -> Bytes {
        if let Some(raw) = &self.raw {
            return raw.clone();
        }
        let mut out = Vec::with_capacity(64 + self.payload_len());
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\"");
        // Writing a string or a number into a Vec cannot fail.
        if let Some(id) = &self.id {
            out.extend_from_slice(b",\"id\":");
            let _ = serde_json::to_writer(&mut out, id);
        }
        if let Some(method) = &self.method {
            out.extend_from_slice(b",\"method\":");
            let _ = serde_json::to_writer(&mut out, method);
        }
        for (name, part) in [
            ("params", &self.params),
            ("result", &self.result),
            ("error", &self.error),
        ] {
            if let Some(part) = part {
                out.extend_from_slice(b",\"");
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b"\":");
                out.extend_from_slice(part.get().as_bytes());
            }
        }
        out.push(b'}');
        Bytes::from(out)
    }

    fn payload_len(&self) -> usize {
        [&self.params, &self.result, &self.error]
            .iter()
            .filter_map(|p| p.as_deref().map(|r| r.get().len()))
            .sum()
    }
}

/// The wire form of an error response.
/// The code of an error answer, read from its bytes; `None` for anything else.
pub fn error_code(answer: &[u8]) -> Option<i64> {
    #[derive(Deserialize)]
    struct Answer {
        error: Option<ErrorCode>,
    }
    serde_json::from_slice::<Answer>(answer)
        .ok()?
        .error
        .map(|e| e.code)
}

#[derive(Deserialize)]
struct ErrorCode {
    code: i64,
}

pub fn error_response(id: &Value, code: i64, message: &str, data: Option<Value>) -> Bytes {
    Bytes::from(error_value(id, code, message, data).to_string())
}

/// An error response built by the proxy itself, as a JSON value (to send on as one).
pub fn error_value(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = serde_json::json!({ "code": code, "message": message });
    if let Some(data) = data {
        error["data"] = data;
    }
    serde_json::json!({ "jsonrpc": "2.0", "id": id, "error": error })
}

/// The wire form of a successful response built by the proxy itself.
pub fn result_response(id: &Value, result: Value) -> Bytes {
    Bytes::from(result_value(id, result).to_string())
}

/// A successful response built by the proxy itself, as a JSON value (to send on as one).
pub fn result_value(id: &Value, result: Value) -> Value {
    serde_json::json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// The wire form of a notification built by the proxy itself.
pub fn notification(method: &str, params: Value) -> Bytes {
    Bytes::from(
        serde_json::json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string(),
    )
}

/// A stable text key for an id, for maps (`1` and `"1"` stay distinct).
pub fn id_key(id: &Value) -> String {
    id.to_string()
}

/// The top-level `"id"` of a message of which only the first bytes are known (an oversized
/// line), if it appears there whole: lets the proxy answer the request it belonged to.
pub fn top_level_id(head: &[u8]) -> Option<Value> {
    let mut depth = 0usize;
    let mut at = 0;
    while at < head.len() {
        match head[at] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.checked_sub(1)?,
            b'"' => {
                let end = string_end(head, at)?;
                let is_id_key = depth == 1 && &head[at..end] == b"\"id\"";
                at = end;
                let rest = &head[at..];
                let colon = rest.iter().position(|b| !b.is_ascii_whitespace())?;
                if is_id_key && rest[colon] == b':' {
                    let after_colon = &rest[colon + 1..];
                    let mut values =
                        serde_json::Deserializer::from_slice(after_colon).into_iter::<Value>();
                    let value = values.next()?.ok()?;
                    // A value that runs to the end of the head may have been cut short.
                    let whole = values.byte_offset() < after_colon.len();
                    return (whole && (value.is_string() || value.is_number())).then_some(value);
                }
                continue;
            }
            _ => {}
        }
        at += 1;
    }
    None
}

/// The index just past the string that opens at `start`.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests;
