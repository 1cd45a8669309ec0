//! What a span says of the MCP message it serves: its name and attributes (OpenTelemetry's
//! MCP conventions where they name one).

use super::Span;
use crate::wire::jsonrpc::Message;
use crate::wire::named::{self, Named};

/// `{method} {target}`: the tool or prompt a request names, if any.
pub fn name_of(message: &Message) -> String {
    let method = message.method().unwrap_or_default();
    match named::named(message) {
        Ok(Some(Named::Tool(name) | Named::Prompt(name))) => format!("{method} {name}"),
        _ => method.to_owned(),
    }
}

/// The attributes of a request.
pub fn describe(span: &mut Span, message: &Message) {
    match named::named(message) {
        Ok(Some(Named::Tool(name))) => span.set("gen_ai.tool.name", name),
        Ok(Some(Named::Prompt(name))) => span.set("gen_ai.prompt.name", name),
        Ok(Some(Named::Resource(uri))) => span.set("mcp.resource.uri", uri),
        _ => {}
    }
    if let Some(id) = message.id() {
        span.set("jsonrpc.request.id", id.to_string());
    }
    span.set(
        "mcp.method.name",
        message.method().unwrap_or_default().to_owned(),
    );
}
