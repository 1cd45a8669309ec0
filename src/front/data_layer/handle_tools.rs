//! The state handle tools answered (SEP-2567), on servers configured `correlation = "handle"`:
//! the open tool opens an isolated upstream session of its own, the close tool ends one; a call
//! that passes a handle runs in that handle's session, the argument taken out first; one
//! without runs where the client's calls run by default. How a call names a handle is
//! `session::data_layer::handles`.

use serde_json::{json, Value};

use crate::base::caller::Caller;
use crate::front::rejection::Rejection;
use crate::front::App;
use crate::session::data_layer::handles::{classify, HandleCall, ARGUMENT, CLOSE_TOOL, OPEN_TOOL};
use crate::session::data_layer::{LayerKind, NamedSession};
use crate::wire::jsonrpc::Message;

/// What a `tools/call` comes to on a server offering state handles.
pub enum Dispatched {
    /// A handle tool's result, or the tool error for a handle that is gone.
    Answered(Value),
    /// A call within a handle: the handle's session, and the request without the handle.
    Within(NamedSession, Message),
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
