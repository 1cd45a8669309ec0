//! What a span says of the MCP message it serves: its name and attributes (OpenTelemetry's
//! MCP conventions where they name one).

use serde::Deserialize;

use super::Span;
use crate::jsonrpc::Message;
use crate::methods;

/// `{method} {target}`: the tool or prompt a request names, if any.
pub fn name_of(message: &Message) -> String {
    let method = message.method().unwrap_or_default();
    match (method, target(message)) {
        (
            methods::TOOLS_CALL | methods::PROMPTS_GET,
            Some(Target {
                name: Some(name), ..
            }),
        ) => {
            format!("{method} {name}")
        }
        _ => method.to_owned(),
    }
}

#[derive(Deserialize)]
struct Target {
    name: Option<String>,
    uri: Option<String>,
}

fn target(message: &Message) -> Option<Target> {
    methods::target(message.method()?)?;
    message.params_as::<Target>()
}

/// The attributes of a request.
pub fn describe(span: &mut Span, message: &Message) {
    let method = message.method().unwrap_or_default().to_owned();
    if let Some(target) = target(message) {
        match (method.as_str(), target) {
            (
                methods::TOOLS_CALL,
                Target {
                    name: Some(name), ..
                },
            ) => span.set("gen_ai.tool.name", name),
            (
                methods::PROMPTS_GET,
                Target {
                    name: Some(name), ..
                },
            ) => span.set("gen_ai.prompt.name", name),
            (_, Target { uri: Some(uri), .. }) => span.set("mcp.resource.uri", uri),
            _ => {}
        }
    }
    if let Some(id) = message.id() {
        span.set("jsonrpc.request.id", id.to_string());
    }
    span.set("mcp.method.name", method);
}
