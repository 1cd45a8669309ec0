//! State handles (SEP-2567) for clients that know no sessions, on servers configured
//! `correlation = "handle"`: the proxy adds a tool that opens a handle (an isolated upstream
//! session of its own) and one that closes it, and an optional handle argument to every tool of
//! the server. A call that passes a handle runs in that handle's session, the argument taken
//! out first; one without runs where the client's calls run by default. The tool list is the
//! same for everyone: cacheable, `cacheScope: public`.

use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::base::caller::Caller;
use crate::front::rejection::Rejection;
use crate::front::App;
use crate::session::correlate::named::Named;
use crate::session::layer::LayerKind;
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

/// What a `tools/call` comes to on a server offering state handles.
pub enum Dispatched {
    /// A handle tool's result, or the tool error for a handle that is gone.
    Answered(Value),
    /// A call within a handle: the handle's session, and the request without the handle.
    Within(Named, Message),
    /// A call of the server's that names no handle.
    Plain,
}

/// Sorts a `tools/call` (the request as the server would take it) on a server offering state
/// handles, answering the handle tools. `init` gives the `initialize` params a new handle's
/// server gets.
pub async fn dispatch(
    app: &App,
    caller: &Caller,
    request: &Message,
    init: impl FnOnce() -> Value,
) -> Result<Dispatched, Rejection> {
    Ok(match classify(request) {
        HandleCall::Plain => Dispatched::Plain,
        HandleCall::Open => Dispatched::Answered(open(app, caller, init()).await?),
        HandleCall::Close(handle) => Dispatched::Answered(close(app, caller, handle).await),
        HandleCall::Within(handle, within) => {
            let named = super::resolve_id(app, caller, &handle, LayerKind::Handle).await;
            match named {
                Ok(named) => Dispatched::Within(named, within),
                Err(_) => Dispatched::Answered(unknown(&handle)),
            }
        }
    })
}

/// Opens a handle: the result of the open tool.
async fn open(app: &App, caller: &Caller, init: Value) -> Result<Value, Rejection> {
    let named = super::open(app, caller, LayerKind::Handle, init).await?;
    let handle = named.session.id();
    Ok(json!({
        "content": [{ "type": "text", "text": format!(
            "Opened session handle {handle}. Pass it as {ARGUMENT} to act within this session.") }],
        "structuredContent": { "handle": handle },
        "isError": false,
    }))
}

/// Closes a handle: the result of the close tool.
async fn close(app: &App, caller: &Caller, handle: Option<String>) -> Value {
    let Some(handle) = handle else {
        return tool_error(format!(
            "{CLOSE_TOOL} needs the handle to close, as {ARGUMENT}"
        ));
    };
    let found = super::resolve_id(app, caller, &handle, LayerKind::Handle).await;
    match found.map(|named| app.data_layer.close(&app.registry, named)) {
        Ok(()) => json!({
            "content": [{ "type": "text", "text": format!("Closed session handle {handle}.") }],
            "isError": false,
        }),
        Err(_) => unknown(&handle),
    }
}

/// The tool result for a handle that is unknown, expired or closed: a tool error the model can
/// read and act on.
fn unknown(handle: &str) -> Value {
    tool_error(format!(
        "Unknown session handle {handle}: it was never opened, has expired or was closed. Open a \
         new one with {OPEN_TOOL} (the state of the old one is gone)."
    ))
}

fn tool_error(text: String) -> Value {
    json!({ "content": [{ "type": "text", "text": text }], "isError": true })
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
