//! What a client's request names — a tool, a prompt, a resource, or what a completion refers
//! to — read from its params once, the same way for every check that looks at it (exposure,
//! rate limits, subscriptions, spans). A request of such a method whose target cannot be read
//! (absent, not a string, params not an object, an unknown kind of reference) is refused,
//! never sent on unread: a check that cannot read its target fails closed.

use serde::Deserialize;
use serde_json::Value;

use crate::wire::jsonrpc::Message;
use crate::wire::methods;

/// The one thing a request acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// `tools/call`: `params.name`.
    Tool(String),
    /// `prompts/get`: `params.name`.
    Prompt(String),
    /// `resources/read`, `resources/subscribe`, `resources/unsubscribe`: `params.uri`.
    Resource(String),
    /// `completion/complete` of a prompt's argument: `params.ref.name` (`ref/prompt`).
    PromptReference(String),
    /// `completion/complete` of a resource template's variable: `params.ref.uri`
    /// (`ref/resource`), a URI or a URI template.
    ResourceReference(String),
}

impl Named {
    /// The name or URI itself.
    pub fn text(&self) -> &str {
        match self {
            Named::Tool(text)
            | Named::Prompt(text)
            | Named::Resource(text)
            | Named::PromptReference(text)
            | Named::ResourceReference(text) => text,
        }
    }
}

/// Why a request's target cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    #[error("params must be an object")]
    NotAnObject,
    #[error("params.{0} must be a string")]
    NotAString(&'static str),
    #[error("params.ref must be an object")]
    ReferenceNotAnObject,
    #[error("params.ref.type must be \"ref/prompt\" or \"ref/resource\"")]
    UnknownReference,
}

/// The members a target may be read from; anything else in params is skipped unread.
#[derive(Deserialize)]
struct Members {
    name: Option<Value>,
    uri: Option<Value>,
    #[serde(rename = "ref")]
    reference: Option<Value>,
}

/// What `request` names, when its method names something (`None` for every other method).
pub fn named(request: &Message) -> Result<Option<Named>, Unreadable> {
    let named = match request.method().unwrap_or_default() {
        methods::TOOLS_CALL => Named::Tool(string(members(request)?.name, "name")?),
        methods::PROMPTS_GET => Named::Prompt(string(members(request)?.name, "name")?),
        methods::RESOURCES_READ | methods::RESOURCES_SUBSCRIBE | methods::RESOURCES_UNSUBSCRIBE => {
            Named::Resource(string(members(request)?.uri, "uri")?)
        }
        methods::COMPLETION_COMPLETE => reference(members(request)?.reference)?,
        _ => return Ok(None),
    };
    Ok(Some(named))
}

/// The params as an object (absent params read as `{}`; an array is not an object, although
/// a derived struct would take one by position).
fn members(request: &Message) -> Result<Members, Unreadable> {
    let raw = request.params().map_or("{}", |raw| raw.get());
    if !raw.trim_start().starts_with('{') {
        return Err(Unreadable::NotAnObject);
    }
    serde_json::from_str(raw).map_err(|_| Unreadable::NotAnObject)
}

fn string(value: Option<Value>, member: &'static str) -> Result<String, Unreadable> {
    match value {
        Some(Value::String(text)) => Ok(text),
        _ => Err(Unreadable::NotAString(member)),
    }
}

/// `{type: "ref/prompt", name}` or `{type: "ref/resource", uri}`.
fn reference(value: Option<Value>) -> Result<Named, Unreadable> {
    let Some(Value::Object(mut reference)) = value else {
        return Err(Unreadable::ReferenceNotAnObject);
    };
    match reference.get("type").and_then(Value::as_str) {
        Some("ref/prompt") => Ok(Named::PromptReference(string(
            reference.remove("name"),
            "ref.name",
        )?)),
        Some("ref/resource") => Ok(Named::ResourceReference(string(
            reference.remove("uri"),
            "ref.uri",
        )?)),
        _ => Err(Unreadable::UnknownReference),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn request(method: &str, params: &str) -> Message {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#);
        Message::parse(Bytes::from(text)).unwrap()
    }

    #[test]
    fn reads_the_target_of_each_method_that_names_one() {
        let cases = [
            (
                "tools/call",
                r#"{"name":"add","arguments":{"name":"x"}}"#,
                Named::Tool("add".into()),
            ),
            (
                "prompts/get",
                r#"{"name":"greet"}"#,
                Named::Prompt("greet".into()),
            ),
            (
                "resources/read",
                r#"{"uri":"demo://a"}"#,
                Named::Resource("demo://a".into()),
            ),
            (
                "resources/subscribe",
                r#"{"uri":"demo://a"}"#,
                Named::Resource("demo://a".into()),
            ),
            (
                "completion/complete",
                r#"{"ref":{"type":"ref/prompt","name":"greet"},"argument":{"name":"n","value":""}}"#,
                Named::PromptReference("greet".into()),
            ),
            (
                "completion/complete",
                r#"{"ref":{"type":"ref/resource","uri":"demo://{id}"}}"#,
                Named::ResourceReference("demo://{id}".into()),
            ),
        ];
        for (method, params, expected) in cases {
            assert_eq!(
                named(&request(method, params)),
                Ok(Some(expected)),
                "{params}"
            );
        }
        assert_eq!(named(&request("tools/list", "{}")), Ok(None));
    }

    #[test]
    fn a_target_that_cannot_be_read_is_an_error_not_nothing() {
        let cases = [
            ("tools/call", "{}", Unreadable::NotAString("name")),
            (
                "tools/call",
                r#"{"name":7}"#,
                Unreadable::NotAString("name"),
            ),
            (
                "resources/read",
                r#"["demo://counter"]"#,
                Unreadable::NotAnObject,
            ),
            (
                "resources/read",
                r#"{"uri":["demo://counter"]}"#,
                Unreadable::NotAString("uri"),
            ),
            (
                "completion/complete",
                "{}",
                Unreadable::ReferenceNotAnObject,
            ),
            (
                "completion/complete",
                r#"{"ref":{"type":"ref/other","name":"x"}}"#,
                Unreadable::UnknownReference,
            ),
            (
                "completion/complete",
                r#"{"ref":{"type":"ref/prompt","uri":"x"}}"#,
                Unreadable::NotAString("ref.name"),
            ),
        ];
        for (method, params, expected) in cases {
            assert_eq!(named(&request(method, params)), Err(expected), "{params}");
        }
        let without = Message::parse(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":1,"method":"resources/read"}"#,
        ))
        .unwrap();
        assert_eq!(named(&without), Err(Unreadable::NotAString("uri")));
    }
}
