//! How a request names a state handle (SEP-2567): the tools the proxy adds to a server offering
//! handles (one opens a handle, one closes it), the optional handle argument on every tool, and
//! what a `tools/call` asks of handles. The same tool list for everyone: cacheable,
//! `cacheScope: public`.

use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::wire::jsonrpc::Message;

pub const OPEN_TOOL: &str = "open_session_handle";
pub const CLOSE_TOOL: &str = "close_session_handle";
/// The argument that names a handle, on every tool.
pub const ARGUMENT: &str = "session_handle";

/// What a `tools/call` asks of handles.
#[derive(Debug)]
pub enum HandleCall {
    /// The open tool.
    Open,
    /// The close tool, with the handle it names.
    Close(Option<String>),
    /// A server tool within a handle: the handle, and the request without it.
    Within(String, Message),
    /// A server tool without a handle.
    Plain,
}

/// Reads a `tools/call` for its handle.
pub fn classify(request: &Message) -> HandleCall {
    let Some(raw) = request.params() else {
        return HandleCall::Plain;
    };
    // Cheap test first: most calls name no handle (nor a handle tool, whose names contain it).
    if !raw.get().contains(ARGUMENT) {
        return HandleCall::Plain;
    }
    let Ok(mut params) = serde_json::from_str::<Map<String, Value>>(raw.get()) else {
        return HandleCall::Plain;
    };
    let handle_of = |params: &Map<String, Value>| {
        params
            .get("arguments")
            .and_then(|a| a.get(ARGUMENT))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    match params.get("name").and_then(Value::as_str) {
        Some(OPEN_TOOL) => return HandleCall::Open,
        Some(CLOSE_TOOL) => return HandleCall::Close(handle_of(&params)),
        _ => {}
    }
    let Some(Value::Object(arguments)) = params.get_mut("arguments") else {
        return HandleCall::Plain;
    };
    match arguments.remove(ARGUMENT) {
        Some(Value::String(handle)) => {
            let mut within = request.clone();
            match serde_json::value::to_raw_value(&params) {
                Ok(raw) => within.set_params(raw),
                Err(_) => return HandleCall::Plain,
            }
            HandleCall::Within(handle, within)
        }
        _ => HandleCall::Plain,
    }
}

/// A `tools/list` result with the handle tools added and the handle argument on every tool.
pub fn rewrite_tools_list(result: &mut Value) {
    let last_page = result.get("nextCursor").is_none_or(Value::is_null);
    let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
        return;
    };
    for tool in tools.iter_mut() {
        let Some(schema) = tool.get_mut("inputSchema").and_then(Value::as_object_mut) else {
            continue;
        };
        let properties = schema
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(properties) = properties {
            properties.insert(
                ARGUMENT.into(),
                json!({
                    "type": "string",
                    "description": format!(
                        "Optional. A handle from {OPEN_TOOL}: the call runs in that handle's \
                         own isolated session, with the state earlier calls left there. Leave \
                         it out to use your default session."
                    ),
                }),
            );
        }
    }
    // The last page carries the handle tools: once, however the list is paged.
    if last_page {
        tools.push(json!({
            "name": OPEN_TOOL,
            "title": "Open a session handle",
            "description": format!(
                "Opens a new isolated session of this server and returns its handle. Pass the \
                 handle as `{ARGUMENT}` to any other tool to act within that session: each \
                 handle keeps its own state, apart from every other handle and from calls made \
                 without one. Use one handle per task or conversation; close it with \
                 {CLOSE_TOOL} when done. A handle expires when unused for a while."
            ),
            "inputSchema": { "type": "object", "properties": {} },
            "outputSchema": { "type": "object", "properties": {
                "handle": { "type": "string" } }, "required": ["handle"] },
            "annotations": { "readOnlyHint": false, "destructiveHint": false,
                             "idempotentHint": false, "openWorldHint": false },
        }));
        tools.push(json!({
            "name": CLOSE_TOOL,
            "title": "Close a session handle",
            "description": format!(
                "Closes a handle from {OPEN_TOOL}, ending its session and discarding its state."
            ),
            "inputSchema": { "type": "object", "properties": {
                ARGUMENT: { "type": "string", "description": "The handle to close." } },
                "required": [ARGUMENT] },
            "annotations": { "readOnlyHint": false, "destructiveHint": true,
                             "idempotentHint": true, "openWorldHint": false },
        }));
    }
}

/// The text of a `tools/list` response with its result rewritten (others as they are).
pub fn rewrite_tools_list_response(response: Bytes) -> Bytes {
    let Ok(mut message) = serde_json::from_slice::<Value>(&response) else {
        return response;
    };
    match message.get_mut("result") {
        Some(result) => rewrite_tools_list(result),
        None => return response,
    }
    Bytes::from(message.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(params: Value) -> Message {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params });
        Message::parse(Bytes::from(body.to_string())).unwrap()
    }

    #[test]
    fn a_call_within_a_handle_loses_the_argument() {
        let request = call(json!({ "name": "counter", "arguments": { ARGUMENT: "h1", "n": 2 } }));
        let HandleCall::Within(handle, within) = classify(&request) else {
            panic!("not within a handle");
        };
        assert_eq!(handle, "h1");
        let params: Value = serde_json::from_str(within.params().unwrap().get()).unwrap();
        assert_eq!(
            params,
            json!({ "name": "counter", "arguments": { "n": 2 } })
        );
        assert!(matches!(
            classify(&call(json!({ "name": "counter" }))),
            HandleCall::Plain
        ));
        assert!(matches!(
            classify(&call(json!({ "name": OPEN_TOOL }))),
            HandleCall::Open
        ));
    }

    #[test]
    fn every_tool_gets_the_argument_and_the_list_gets_the_tools() {
        let mut result = json!({ "tools": [
            { "name": "echo", "inputSchema": { "type": "object",
              "properties": { "text": { "type": "string" } }, "required": ["text"] } },
            { "name": "bare", "inputSchema": { "type": "object" } } ] });
        rewrite_tools_list(&mut result);
        let tools = result["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 4);
        assert_eq!(tools[0]["inputSchema"]["required"], json!(["text"]));
        assert_eq!(
            tools[0]["inputSchema"]["properties"][ARGUMENT]["type"],
            "string"
        );
        assert_eq!(
            tools[1]["inputSchema"]["properties"][ARGUMENT]["type"],
            "string"
        );
        assert_eq!(tools[2]["name"], OPEN_TOOL);
        assert_eq!(tools[3]["name"], CLOSE_TOOL);
    }
}
