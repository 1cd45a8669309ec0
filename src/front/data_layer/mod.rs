//! How a client names a session in its messages: data-layer sessions (seed `002`:
//! `sessions/create`, a cookie in `_meta`, `sessions/delete`, `messages/listen`) and state
//! handles (SEP-2567: a tool opens a handle, tools take it as an argument). `cookie` (how a
//! request names one), `methods` (the `sessions/*` answers), `messages_listen`
//! (`messages/listen`), `handle_tools` (the handle tools answered), `legacy` (legacy requests
//! naming one). What a named session is, their table and how a call names a handle are the
//! session layer's `session::data_layer`; this is the wire.

pub mod cookie;
pub mod handle_tools;
pub mod legacy;
pub mod messages_listen;
pub mod methods;

use super::rejection::Rejection;
use super::App;
use crate::base::caller::Caller;
use crate::session::data_layer::handles::{self, HandleCall};
use crate::session::data_layer::{DataLayerSettings, LayerKind, NamedSession};
use crate::wire::jsonrpc::Message;
use crate::wire::methods::{is_session_bound, TOOLS_CALL};

/// Whether `request` (naming no data-layer session) is refused for want of one: a call of a
/// handle tool, or within a handle, is within a session of its own.
pub fn requires_session(settings: &DataLayerSettings, request: &Message) -> bool {
    let method = request.method().unwrap_or_default();
    settings.require_session
        && is_session_bound(method)
        && !(settings.handles
            && method == TOOLS_CALL
            && !matches!(handles::classify(request), HandleCall::Plain))
}

/// The named session `cookie` names for `caller` (found with its credential, which its
/// server gets from now on).
pub async fn resolve(
    app: &App,
    caller: &Caller,
    cookie: &cookie::Cookie,
) -> Result<NamedSession, Rejection> {
    app.data_layer
        .resolve_cookie(
            &app.registry,
            caller,
            cookie.named(),
            &app.modern.correlation,
        )
        .await
        .map_err(|e| Rejection::session(&e))
}

/// The named session `id` of `caller`, of `kind` (named without a `state`).
pub async fn resolve_id(
    app: &App,
    caller: &Caller,
    id: &str,
    kind: LayerKind,
) -> Result<NamedSession, Rejection> {
    app.data_layer
        .resolve(
            &app.registry,
            caller,
            id,
            None,
            kind,
            &app.modern.correlation,
        )
        .await
        .map_err(|e| Rejection::session(&e))
}

/// Opens a named session of `kind` for `caller`, its server initialized with `init`.
pub async fn open(
    app: &App,
    caller: &Caller,
    kind: LayerKind,
    init: serde_json::Value,
) -> Result<NamedSession, Rejection> {
    app.data_layer
        .open(&app.registry, caller, kind, init)
        .await
        .map_err(|e| Rejection::session(&e))
}
