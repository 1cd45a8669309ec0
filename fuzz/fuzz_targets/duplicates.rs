//! The duplicate-name differential of `jsonrpc::Message::parse` (and `parse_without_version`).
//!
//! The same bytes are read by an oracle of this target's own: a JSON parser that follows the
//! RFC 8259 grammar with no depth limit, keeps numbers as text and strings as UTF-16 code units
//! (as JavaScript and Python read them), and reads every object both first-wins and last-wins.
//! For every message the proxy accepts: the oracle reads it too, finds no duplicated member
//! name at any depth, its first-wins and last-wins readings are the same value, and the proxy's
//! own readings (method, id, params, and the target `named::named` reads) equal the oracle's.
//! So a server of either kind reads what the proxy checked. A message with a duplicated name
//! anywhere is refused; a refusal that names a duplicate names the first one in the text.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use mcp_session_proxy::wire::jsonrpc::{Message, ParseError};
use mcp_session_proxy::wire::named::{self, Named};
use serde_json::{Map, Number, Value};

fuzz_target!(|data: &[u8]| {
    let oracle = Oracle::read(data);
    for (which, parsed) in [
        ("parse", Message::parse(Bytes::copy_from_slice(data))),
        (
            "parse_without_version",
            Message::parse_without_version(Bytes::copy_from_slice(data)),
        ),
    ] {
        match parsed {
            Ok(message) => accepted(which, data, &oracle, &message),
            Err(ParseError::Duplicate { member, .. }) => {
                assert_eq!(
                    oracle.first_duplicate.as_deref(),
                    Some(member.as_str()),
                    "{which} named a duplicate the text does not have first"
                );
            }
            Err(_) => {}
        }
    }
});

/// What the proxy accepted, the oracle reads alike, and so would a server of either kind.
fn accepted(which: &str, data: &[u8], oracle: &Oracle, message: &Message) {
    let text = String::from_utf8_lossy(data);
    assert!(
        oracle.first_duplicate.is_none(),
        "{which} accepted a duplicated member {:?}: {text}",
        oracle.first_duplicate
    );
    let document = oracle
        .document
        .as_ref()
        .unwrap_or_else(|| panic!("{which} accepted what is not JSON: {text}"));
    let (first, last) = (document.first_wins(), document.last_wins());
    assert_eq!(first, last, "first-wins and last-wins differ: {text}");
    let last = last.unwrap_or_else(|| panic!("{which} accepted what JSON cannot hold: {text}"));
    let Value::Object(top) = &last else {
        panic!("{which} accepted a message that is not an object: {text}");
    };
    assert_eq!(
        message.method(),
        top.get("method").and_then(Value::as_str),
        "method: {text}"
    );
    assert_eq!(message.id(), top.get("id"), "id: {text}");
    let params = message
        .params()
        .map(|raw| serde_json::from_str::<Value>(raw.get()).expect("params the proxy holds"));
    assert_eq!(params.as_ref(), top.get("params"), "params: {text}");
    let target = match named::named(message) {
        Ok(Some(named)) => Target::Named(named),
        Ok(None) => Target::None,
        Err(_) => Target::Unreadable,
    };
    let method = top
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert_eq!(
        target,
        target_of(method, top.get("params")),
        "the target: {text}"
    );
}

/// What a request names, as the oracle reads it.
#[derive(Debug, PartialEq)]
enum Target {
    None,
    Named(Named),
    Unreadable,
}

/// The target of `method`, read from `params` as the MCP schema places it.
fn target_of(method: &str, params: Option<&Value>) -> Target {
    let empty = Value::Object(Map::new());
    let params = params.unwrap_or(&empty);
    let member = |name: &str| -> Option<String> { params.get(name)?.as_str().map(str::to_owned) };
    let read = |named: Option<Named>| named.map_or(Target::Unreadable, Target::Named);
    let needs_object = |target: Target| match params.is_object() {
        true => target,
        false => Target::Unreadable,
    };
    match method {
        "tools/call" => needs_object(read(member("name").map(Named::Tool))),
        "prompts/get" => needs_object(read(member("name").map(Named::Prompt))),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            needs_object(read(member("uri").map(Named::Resource)))
        }
        "completion/complete" => {
            let reference = params.get("ref").filter(|r| r.is_object());
            let field = |name: &str| reference?.get(name)?.as_str().map(str::to_owned);
            let named = match reference.and_then(|r| r.get("type")?.as_str()) {
                Some("ref/prompt") => field("name").map(Named::PromptReference),
                Some("ref/resource") => field("uri").map(Named::ResourceReference),
                _ => None,
            };
            needs_object(read(named))
        }
        _ => Target::None,
    }
}

/// A JSON value as the oracle keeps it.
#[derive(Debug)]
enum Json {
    Null,
    Bool(bool),
    /// The number's text, as written.
    Number(String),
    /// UTF-16 code units: lone surrogates kept, as JavaScript and Python keep them.
    String(Vec<u16>),
    Array(Vec<Json>),
    /// Members in the order written, duplicates included.
    Object(Vec<(Vec<u16>, Json)>),
}

impl Json {
    /// The value a first-wins parser reads; `None` when serde_json cannot hold it (a lone
    /// surrogate, a number out of range).
    fn first_wins(&self) -> Option<Value> {
        self.to_value(false)
    }

    fn last_wins(&self) -> Option<Value> {
        self.to_value(true)
    }

    fn to_value(&self, last_wins: bool) -> Option<Value> {
        Some(match self {
            Json::Null => Value::Null,
            Json::Bool(flag) => Value::Bool(*flag),
            Json::Number(text) => Value::Number(serde_json::from_str::<Number>(text).ok()?),
            Json::String(units) => Value::String(String::from_utf16(units).ok()?),
            Json::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|item| item.to_value(last_wins))
                    .collect::<Option<_>>()?,
            ),
            Json::Object(members) => {
                let mut map = Map::new();
                for (name, value) in members {
                    let name = String::from_utf16(name).ok()?;
                    if last_wins || !map.contains_key(&name) {
                        map.insert(name, value.to_value(last_wins)?);
                    }
                }
                Value::Object(map)
            }
        })
    }
}

/// The oracle's reading of some bytes.
struct Oracle {
    /// The document, when the bytes are one JSON text.
    document: Option<Json>,
    /// The first duplicated member name in the text (as far as it is JSON), rendered as the
    /// proxy names it: `params.arguments.x`, `a[2].b`, `a["x.y"]`.
    first_duplicate: Option<String>,
}

impl Oracle {
    fn read(data: &[u8]) -> Oracle {
        let mut parser = Parser {
            bytes: data,
            at: 0,
            path: Vec::new(),
            first_duplicate: None,
        };
        let document = parser.document();
        Oracle {
            document,
            first_duplicate: parser.first_duplicate,
        }
    }
}

enum Step {
    Member(Vec<u16>),
    Index(usize),
}

/// A recursive-descent parser of RFC 8259 JSON, without a depth limit.
struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
    path: Vec<Step>,
    first_duplicate: Option<String>,
}

impl Parser<'_> {
    fn document(&mut self) -> Option<Json> {
        self.whitespace();
        let value = self.value()?;
        self.whitespace();
        (self.at == self.bytes.len()).then_some(value)
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn literal(&mut self, word: &[u8], value: Json) -> Option<Json> {
        self.bytes[self.at..].starts_with(word).then(|| {
            self.at += word.len();
            value
        })
    }

    fn value(&mut self) -> Option<Json> {
        match self.peek()? {
            b'n' => self.literal(b"null", Json::Null),
            b't' => self.literal(b"true", Json::Bool(true)),
            b'f' => self.literal(b"false", Json::Bool(false)),
            b'"' => self.string().map(Json::String),
            b'[' => self.array(),
            b'{' => self.object(),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn digits(&mut self) -> usize {
        let from = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - from
    }

    fn number(&mut self) -> Option<Json> {
        let from = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            (self.digits() > 0).then_some(())?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            (self.digits() > 0).then_some(())?;
        }
        let text = std::str::from_utf8(&self.bytes[from..self.at]).ok()?;
        Some(Json::Number(text.to_owned()))
    }

    fn hex4(&mut self) -> Option<u16> {
        let hex = self.bytes.get(self.at..self.at + 4)?;
        let hex = std::str::from_utf8(hex).ok()?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.at += 4;
        u16::from_str_radix(hex, 16).ok()
    }

    fn string(&mut self) -> Option<Vec<u16>> {
        self.at += 1; // the opening quote
        let mut units = Vec::new();
        loop {
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(units);
                }
                b'\\' => {
                    self.at += 1;
                    let escaped = self.peek()?;
                    self.at += 1;
                    let unit = match escaped {
                        b'"' => 0x22,
                        b'\\' => 0x5c,
                        b'/' => 0x2f,
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => 0x0a,
                        b'r' => 0x0d,
                        b't' => 0x09,
                        b'u' => self.hex4()?,
                        _ => return None,
                    };
                    units.push(unit);
                }
                0x00..=0x1f => return None,
                _ => {
                    // One UTF-8 character, which must be valid.
                    let rest = &self.bytes[self.at..];
                    let len = match rest[0] {
                        0x00..=0x7f => 1,
                        0xc0..=0xdf => 2,
                        0xe0..=0xef => 3,
                        _ => 4,
                    };
                    let one = std::str::from_utf8(rest.get(..len)?).ok()?;
                    units.extend(one.encode_utf16());
                    self.at += len;
                }
            }
        }
    }

    fn array(&mut self) -> Option<Json> {
        self.at += 1;
        let mut items = Vec::new();
        self.whitespace();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(Json::Array(items));
        }
        loop {
            self.whitespace();
            self.path.push(Step::Index(items.len()));
            let item = self.value();
            self.path.pop();
            items.push(item?);
            self.whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(Json::Array(items));
                }
                _ => return None,
            }
        }
    }

    fn object(&mut self) -> Option<Json> {
        self.at += 1;
        let mut members: Vec<(Vec<u16>, Json)> = Vec::new();
        self.whitespace();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(Json::Object(members));
        }
        loop {
            self.whitespace();
            if self.peek()? != b'"' {
                return None;
            }
            let name = self.string()?;
            if self.first_duplicate.is_none() && members.iter().any(|(seen, _)| *seen == name) {
                self.path.push(Step::Member(name.clone()));
                self.first_duplicate = Some(render(&self.path));
                self.path.pop();
            }
            self.whitespace();
            if self.peek()? != b':' {
                return None;
            }
            self.at += 1;
            self.whitespace();
            self.path.push(Step::Member(name.clone()));
            let value = self.value();
            self.path.pop();
            members.push((name, value?));
            self.whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(Json::Object(members));
                }
                _ => return None,
            }
        }
    }
}

/// A path as the proxy names it: `a.b[2].c`, a name that is not a plain word quoted as a JSON
/// string in brackets (`a["x.y"]`).
fn render(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Index(index) => out.push_str(&format!("[{index}]")),
            Step::Member(units) => {
                let name = String::from_utf16_lossy(units);
                let word = !name.is_empty()
                    && name.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'/' | b'$')
                    });
                if word {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(&name);
                } else {
                    out.push('[');
                    out.push_str(&Value::from(name).to_string());
                    out.push(']');
                }
            }
        }
    }
    out
}
