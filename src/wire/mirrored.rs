//! The 2026-07-28 HTTP headers that mirror a request's body: how a value is written into a
//! header and read back (`=?base64?…?=`), and the tool parameters a server marks with
//! `x-mcp-header` for `Mcp-Param-{Name}` (which marks are valid, and whether a request's
//! headers say what its arguments say).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use base64::Engine;
use http::HeaderMap;
use serde_json::Value;

/// The schema keyword that marks a tool parameter as mirrored.
pub const ANNOTATION: &str = "x-mcp-header";
/// What every parameter header's name starts with (lowercase, as `http` keeps names).
pub const PARAM_PREFIX: &str = "mcp-param-";

/// The largest integer a mirrored parameter may hold (JavaScript's safe range).
const SAFE_INTEGER: i64 = (1 << 53) - 1;

/// A value as a header carries it: as is when it is visible ASCII (or inner spaces) with no
/// space at either end and not shaped like the encoding, else `=?base64?…?=` of its UTF-8.
pub fn encode(value: &str) -> String {
    let looks_encoded = value.starts_with("=?base64?") && value.ends_with("?=");
    let plain = value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !looks_encoded;
    match plain {
        true => value.to_owned(),
        false => format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        ),
    }
}

/// Why a header's value cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnreadableHeader {
    #[error("has characters a header value may not carry")]
    Characters,
    #[error("is not valid base64 of UTF-8 text")]
    Encoding,
}

/// A header value as sent (surrounding spaces and tabs dropped): `=?base64?…?=` is the UTF-8
/// of standard, padded base64; anything else is literal.
pub fn decode(raw: &[u8]) -> Result<String, UnreadableHeader> {
    let text = std::str::from_utf8(raw)
        .ok()
        .filter(|text| {
            text.bytes()
                .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
        })
        .ok_or(UnreadableHeader::Characters)?
        .trim_matches(|c| c == ' ' || c == '\t');
    let Some(encoded) = text
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    else {
        return Ok(text.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| UnreadableHeader::Encoding)?;
    String::from_utf8(bytes).map_err(|_| UnreadableHeader::Encoding)
}

/// One mirrored parameter: where it is in the arguments and the header it travels in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirrored {
    /// The chain of `properties` keys from the arguments to the value.
    pub path: Vec<String>,
    /// `{Name}` of `Mcp-Param-{Name}`, as the schema writes it.
    pub name: String,
    /// An integer parameter (compared as a number).
    pub integer: bool,
}

impl Mirrored {
    /// The header's name, lowercase.
    pub fn header(&self) -> String {
        format!("{PARAM_PREFIX}{}", self.name.to_ascii_lowercase())
    }

    /// The value at this parameter's path, unless absent or null.
    pub fn value<'a>(&self, arguments: &'a Value) -> Option<&'a Value> {
        let mut at = arguments;
        for key in &self.path {
            at = at.get(key)?;
        }
        (!at.is_null()).then_some(at)
    }
}

/// Why a tool's `x-mcp-header` marks make it unusable over 2026-07-28 HTTP.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidMark {
    #[error("x-mcp-header at {0} is not a header name token")]
    NotAToken(String),
    #[error("x-mcp-header {0:?} is used twice (names are compared case-insensitively)")]
    Duplicate(String),
    #[error("x-mcp-header at {0} marks a parameter that is not a string, integer or boolean")]
    NotPrimitive(String),
    #[error("x-mcp-header at {0} is not reachable through properties alone")]
    Unreachable(String),
}

/// The parameters `schema` (a tool's `inputSchema`) mirrors into headers, or why its marks
/// are invalid.
pub fn marks(schema: &Value) -> Result<Vec<Mirrored>, InvalidMark> {
    let mut found = Vec::new();
    walk(schema, &mut Vec::new(), true, &mut found)?;
    let mut seen = std::collections::HashSet::new();
    for mirrored in &found {
        if !seen.insert(mirrored.name.to_ascii_lowercase()) {
            return Err(InvalidMark::Duplicate(mirrored.name.clone()));
        }
    }
    Ok(found)
}

/// Schema keywords whose contents are data, not schemas.
const DATA_KEYWORDS: [&str; 4] = ["default", "examples", "const", "enum"];

fn walk(
    schema: &Value,
    path: &mut Vec<String>,
    reachable: bool,
    found: &mut Vec<Mirrored>,
) -> Result<(), InvalidMark> {
    match schema {
        Value::Array(items) => {
            for item in items {
                walk(item, path, false, found)?;
            }
            Ok(())
        }
        Value::Object(schema) => {
            if let Some(mark) = schema.get(ANNOTATION) {
                let at = format!("/{}", path.join("/"));
                if !reachable || path.is_empty() {
                    return Err(InvalidMark::Unreachable(at));
                }
                let name = mark
                    .as_str()
                    .filter(|name| is_token(name))
                    .ok_or_else(|| InvalidMark::NotAToken(at.clone()))?;
                let integer = match primitive(schema.get("type")) {
                    Some(kind) => kind == "integer",
                    None => return Err(InvalidMark::NotPrimitive(at)),
                };
                found.push(Mirrored {
                    path: path.clone(),
                    name: name.to_owned(),
                    integer,
                });
            }
            for (keyword, inner) in schema {
                match keyword.as_str() {
                    "properties" => {
                        let Value::Object(properties) = inner else {
                            continue;
                        };
                        for (property, inner) in properties {
                            path.push(property.clone());
                            let walked = walk(inner, path, reachable, found);
                            path.pop();
                            walked?;
                        }
                    }
                    keyword if keyword == ANNOTATION || DATA_KEYWORDS.contains(&keyword) => {}
                    _ => walk(inner, path, false, found)?,
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The primitive type a schema's `type` names (alone, or beside `"null"`).
fn primitive(kind: Option<&Value>) -> Option<&str> {
    let allowed = |kind: &str| matches!(kind, "string" | "integer" | "boolean");
    match kind? {
        Value::String(kind) => Some(kind.as_str()).filter(|k| allowed(k)),
        Value::Array(kinds) => {
            let named: Vec<&str> = kinds
                .iter()
                .filter_map(Value::as_str)
                .filter(|k| *k != "null")
                .collect();
            match named.as_slice() {
                [kind] if allowed(kind) && named.len() + 1 >= kinds.len() => Some(kind),
                _ => None,
            }
        }
        _ => None,
    }
}

/// RFC 9110 `token`: one or more tchar.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A mirrored value as text, before encoding: strings as they are, integers in decimal,
/// booleans in lowercase; `None` for what a header cannot mirror.
pub fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Number(number) => Some(match number.as_f64() {
            Some(float) if float.fract() == 0.0 && float.abs() <= SAFE_INTEGER as f64 => {
                format!("{}", float as i64)
            }
            _ => number.to_string(),
        }),
        _ => None,
    }
}

/// The `Mcp-Param-*` headers a call with `arguments` carries: name (lowercase) and value.
pub fn headers_for(mirrored: &[Mirrored], arguments: &Value) -> Vec<(String, String)> {
    mirrored
        .iter()
        .filter_map(|m| {
            let text = text_of(m.value(arguments)?)?;
            Some((m.header(), encode(&text)))
        })
        .collect()
}

/// Why a call's parameter headers do not say what its arguments say.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParamMismatch {
    #[error("the Mcp-Param-{0} header is missing though the arguments carry its value")]
    Missing(String),
    #[error("the Mcp-Param-{0} header is present though the arguments carry no value for it")]
    Unexpected(String),
    #[error("the Mcp-Param-{0} header is sent more than once")]
    Repeated(String),
    #[error("the Mcp-Param-{0} header {1}")]
    UnreadableHeader(String, UnreadableHeader),
    #[error("the Mcp-Param-{0} header value {1:?} does not match the body value {2}")]
    Differs(String, String, Value),
}

/// Checks the parameter headers of a call with `arguments` against the tool's marks.
pub fn check(
    mirrored: &[Mirrored],
    arguments: &Value,
    headers: &HeaderMap,
) -> Result<(), ParamMismatch> {
    for m in mirrored {
        let mut sent = headers.get_all(m.header()).iter();
        let (first, again) = (sent.next(), sent.next());
        if again.is_some() {
            return Err(ParamMismatch::Repeated(m.name.clone()));
        }
        let (value, raw) = match (m.value(arguments), first) {
            (None, None) => continue,
            (Some(_), None) => return Err(ParamMismatch::Missing(m.name.clone())),
            (None, Some(_)) => return Err(ParamMismatch::Unexpected(m.name.clone())),
            (Some(value), Some(raw)) => (value, raw),
        };
        let said = decode(raw.as_bytes())
            .map_err(|e| ParamMismatch::UnreadableHeader(m.name.clone(), e))?;
        let same = match (m.integer, value.as_f64()) {
            (true, Some(number)) => said.parse::<f64>().is_ok_and(|h| h == number),
            _ => text_of(value).is_some_and(|text| text == said),
        };
        if !same {
            return Err(ParamMismatch::Differs(m.name.clone(), said, value.clone()));
        }
    }
    Ok(())
}

/// What a server's `tools/list` said about each tool's mirrored parameters: the marks of
/// every tool listed (latest listing wins), so calls can be checked and headers written.
#[derive(Debug, Default)]
pub struct ToolMarks {
    by_tool: RwLock<HashMap<String, Vec<Mirrored>>>,
    /// Some listed tool mirrors a parameter (kept by `record`, read on every call).
    any: AtomicBool,
}

impl ToolMarks {
    /// Records the tools of a `tools/list` result; returns the names of tools whose marks are
    /// invalid, with why (a client over 2026-07-28 HTTP leaves those out).
    pub fn record(&self, result: &Value) -> Vec<(String, InvalidMark)> {
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            return Vec::new();
        };
        let mut invalid = Vec::new();
        let mut by_tool = self.by_tool.write().unwrap_or_else(|e| e.into_inner());
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            match tool.get("inputSchema").map(marks).unwrap_or(Ok(Vec::new())) {
                Ok(mirrored) => {
                    by_tool.insert(name.to_owned(), mirrored);
                }
                Err(why) => {
                    by_tool.remove(name);
                    invalid.push((name.to_owned(), why));
                }
            }
        }
        let any = by_tool.values().any(|marks| !marks.is_empty());
        self.any.store(any, Ordering::Release);
        invalid
    }

    /// The marks of `tool`, if it was listed (an empty list: listed, nothing mirrored).
    pub fn of(&self, tool: &str) -> Option<Vec<Mirrored>> {
        let by_tool = self.by_tool.read().unwrap_or_else(|e| e.into_inner());
        by_tool.get(tool).cloned()
    }

    /// Whether any listed tool mirrors a parameter (a cheap test before reading arguments).
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_encoded_as_the_spec_tabulates() {
        assert_eq!(encode("us-west1"), "us-west1");
        assert_eq!(encode("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=");
        assert_eq!(encode(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(encode("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(
            encode("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
        for value in ["us-west1", "Hello, 世界", " padded ", "=?base64?literal?="] {
            assert_eq!(decode(encode(value).as_bytes()).unwrap(), value);
        }
        assert_eq!(decode(b"  x  ").unwrap(), "x");
        assert_eq!(
            decode(b"=?base64?SGVsbG8?=").unwrap_err(),
            UnreadableHeader::Encoding
        );
        assert_eq!(
            decode(b"=?base64?SGVs!!!bG8=?=").unwrap_err(),
            UnreadableHeader::Encoding
        );
        assert_eq!(decode(b"=?base64?SGVsbG8=").unwrap(), "=?base64?SGVsbG8=");
        assert_eq!(
            decode("é".as_bytes()).unwrap_err(),
            UnreadableHeader::Characters
        );
    }

    #[test]
    fn marks_are_found_through_properties_and_refused_elsewhere() {
        let schema = json!({ "type": "object", "properties": {
            "region": { "type": "string", "x-mcp-header": "Region" },
            "options": { "type": "object", "properties": {
                "limit": { "type": ["integer", "null"], "x-mcp-header": "Limit" } } },
            "query": { "type": "string", "default": { "x-mcp-header": "data, not a mark" } } } });
        let found = marks(&schema).unwrap();
        assert_eq!(found.len(), 2);
        let limit = found.iter().find(|m| m.name == "Limit").unwrap();
        assert_eq!(limit.path, ["options", "limit"]);
        assert!(limit.integer);
        let bad = |property: Value| {
            marks(&json!({ "type": "object", "properties": { "p": property } })).unwrap_err()
        };
        assert!(matches!(
            bad(json!({ "type": "number", "x-mcp-header": "P" })),
            InvalidMark::NotPrimitive(_)
        ));
        assert!(matches!(
            bad(json!({ "type": "string", "x-mcp-header": "" })),
            InvalidMark::NotAToken(_)
        ));
        assert!(matches!(
            bad(json!({ "type": "string", "x-mcp-header": "A B" })),
            InvalidMark::NotAToken(_)
        ));
        assert!(matches!(
            bad(json!({ "type": "array", "items": { "type": "string", "x-mcp-header": "I" } })),
            InvalidMark::Unreachable(_)
        ));
        assert!(matches!(
            bad(json!({ "anyOf": [{ "type": "string", "x-mcp-header": "I" }] })),
            InvalidMark::Unreachable(_)
        ));
        let twice = json!({ "type": "object", "properties": {
            "a": { "type": "string", "x-mcp-header": "Same" },
            "b": { "type": "string", "x-mcp-header": "same" } } });
        assert!(matches!(marks(&twice), Err(InvalidMark::Duplicate(_))));
    }

    #[test]
    fn headers_are_written_and_checked_against_the_arguments() {
        let schema = json!({ "type": "object", "properties": {
            "region": { "type": "string", "x-mcp-header": "Region" },
            "limit": { "type": "integer", "x-mcp-header": "Limit" },
            "on": { "type": "boolean", "x-mcp-header": "On" } } });
        let mirrored = marks(&schema).unwrap();
        let arguments = json!({ "region": "Hello, 世界", "limit": 42, "on": false });
        let written = headers_for(&mirrored, &arguments);
        let mut headers = HeaderMap::new();
        for (name, value) in &written {
            headers.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        assert_eq!(written.len(), 3);
        assert_eq!(check(&mirrored, &arguments, &headers), Ok(()));
        headers.insert("mcp-param-limit", "42.0".parse().unwrap());
        assert_eq!(
            check(&mirrored, &arguments, &headers),
            Ok(()),
            "numerically"
        );
        headers.insert("mcp-param-limit", "7".parse().unwrap());
        assert!(matches!(
            check(&mirrored, &arguments, &headers),
            Err(ParamMismatch::Differs(..))
        ));
        let without_limit = json!({ "region": "Hello, 世界", "limit": null, "on": false });
        assert!(matches!(
            check(&mirrored, &without_limit, &headers),
            Err(ParamMismatch::Unexpected(_))
        ));
        headers.remove("mcp-param-limit");
        assert_eq!(check(&mirrored, &without_limit, &headers), Ok(()));
        headers.remove("mcp-param-on");
        assert!(matches!(
            check(&mirrored, &without_limit, &headers),
            Err(ParamMismatch::Missing(_))
        ));
    }

    #[test]
    fn a_listing_records_valid_tools_and_names_invalid_ones() {
        let marks = ToolMarks::default();
        let invalid = marks.record(&json!({ "tools": [
            { "name": "plain", "inputSchema": { "type": "object" } },
            { "name": "marked", "inputSchema": { "type": "object", "properties": {
                "r": { "type": "string", "x-mcp-header": "R" } } } },
            { "name": "broken", "inputSchema": { "type": "object", "properties": {
                "n": { "type": "number", "x-mcp-header": "N" } } } } ] }));
        assert_eq!(invalid.len(), 1);
        assert_eq!(invalid[0].0, "broken");
        assert_eq!(marks.of("plain"), Some(Vec::new()));
        assert_eq!(marks.of("marked").unwrap()[0].name, "R");
        assert_eq!(marks.of("broken"), None);
        assert!(marks.any());
    }
}
