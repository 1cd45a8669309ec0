//! Sessions named in messages for legacy clients, inside their transport session (several
//! data-layer sessions on one `Mcp-Session-Id` or WebSocket connection, none leaking into
//! another): a request is answered here (`sessions/*`, the handle tools, the tool list with
//! them), becomes a listen, is sent to the session it names (the cookie or the handle taken
//! out first), or is left to the transport session. Each front writes the outcome its way.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::cookie::{self, Cookie};
use super::handle_tools::{self, Dispatched};
use super::methods::{self, Verb};
use crate::base::caller::Caller;
use crate::front::rejection::failed_request;
use crate::front::rejection::Rejection;
use crate::front::request::ask;
use crate::front::App;
use crate::session::data_layer::handles;
use crate::session::Session;
use crate::wire::jsonrpc::{self, Message};
use crate::wire::methods::{route as route_of, Route, TOOLS_CALL, TOOLS_LIST};

/// Where a legacy request goes.
pub enum Routed {
    /// Answered here: the response message.
    Answered(Bytes),
    /// `messages/listen` on this session, scoped to the data-layer session named (none:
    /// global).
    Listen {
        session: Arc<Session>,
        scope: Option<String>,
        /// The listen request's id (its result's, at the end).
        id: Value,
    },
    /// To this named session, as this message.
    To(Arc<Session>, Message),
    /// To the transport session, as it came.
    Transport(Message),
    /// `tools/list` on a server offering state handles: to the transport session, its answer
    /// with the handle tools added (`handles::rewrite_tools_list_response`).
    ToolsList(Message),
}

/// Whether a request made in a transport session may name a session in its message, or be
/// answered here: a `sessions/*` or `messages/listen` request, one whose params may hold a
/// cookie, one refused for want of a session, or with state handles on, `tools/call` and
/// `tools/list`. Any other goes to the transport session without entering `route`.
pub fn may_name_session(app: &App, message: &Message) -> bool {
    let method = message.method().unwrap_or_default();
    let settings = &app.data_layer.settings;
    matches!(route_of(method), Route::Named(_))
        || message.params().is_some_and(|p| cookie::may_hold(p.get()))
        || super::requires_session(settings, message)
        || (settings.handles && matches!(method, TOOLS_CALL | TOOLS_LIST))
}

/// Routes a request made in transport session `transport` (one that `may_name_session`).
pub async fn route(
    app: &App,
    caller: &Caller,
    transport: &Arc<Session>,
    message: Message,
) -> Result<Routed, Rejection> {
    let id = message.id().cloned().unwrap_or(Value::Null);
    let method = message.method().unwrap_or_default().to_owned();
    let named = message.params().is_some_and(|p| cookie::may_hold(p.get()));
    let (cookie, stripped) = match named {
        true => read_cookie(app, &message).map_err(|r| r.with_id(Some(&id)))?,
        false => (None, None),
    };
    let answered = |result: Value| Ok(Routed::Answered(jsonrpc::result_response(&id, result)));
    if let Route::Named(verb) = route_of(&method) {
        return match verb {
            Verb::Create { draft } => {
                if cookie.is_some() {
                    return Err(Rejection::cookie_on_create(&method).with_id(Some(&id)));
                }
                let init = init_params(transport);
                let created = methods::create(app, caller, draft, init).await;
                answered(created.map_err(|r| r.with_id(Some(&id)))?)
            }
            Verb::Delete => {
                let params = params_of(&message);
                let deleted = methods::delete(app, caller, cookie, &params).await;
                answered(deleted.map_err(|r| r.with_id(Some(&id)))?)
            }
            Verb::Listen => {
                let (session, scope) = match &cookie {
                    Some(cookie) => {
                        let named = super::resolve(app, caller, cookie).await;
                        let named = named.map_err(|r| r.with_id(Some(&id)))?;
                        (named.session, Some(cookie.session_id.clone()))
                    }
                    None => (transport.clone(), None),
                };
                let id = id.clone();
                Ok(Routed::Listen { session, scope, id })
            }
        };
    }
    if let Some(cookie) = &cookie {
        let named = super::resolve(app, caller, cookie).await;
        let named = named.map_err(|r| r.with_id(Some(&id)))?;
        return Ok(Routed::To(named.session, stripped.unwrap_or(message)));
    }
    if super::requires_session(&app.data_layer.settings, &message) {
        return Err(Rejection::data_session_required(&method).with_id(Some(&id)));
    }
    if !app.data_layer.settings.handles {
        return Ok(Routed::Transport(message));
    }
    match method.as_str() {
        TOOLS_CALL => {
            let init = || init_params(transport);
            let dispatched = handle_tools::dispatch(app, caller, &message, init).await;
            match dispatched.map_err(|r| r.with_id(Some(&id)))? {
                Dispatched::Plain => Ok(Routed::Transport(message)),
                Dispatched::Answered(result) => answered(result),
                Dispatched::Within(named, within) => Ok(Routed::To(named.session, within)),
            }
        }
        TOOLS_LIST => Ok(Routed::ToolsList(message)),
        _ => Ok(Routed::Transport(message)),
    }
}

/// The cookie of a request, and the request without it (the server never sees it).
fn read_cookie(
    app: &App,
    message: &Message,
) -> Result<(Option<Cookie>, Option<Message>), Rejection> {
    let Some(Ok(mut params)) = message
        .params()
        .map(|raw| serde_json::from_str::<Map<String, Value>>(raw.get()))
    else {
        return Ok((None, None));
    };
    let Some(Value::Object(meta)) = params.get_mut("_meta") else {
        return Ok((None, None));
    };
    let max_state = app.data_layer.settings.max_state_bytes;
    let cookie = cookie::read(Some(meta), max_state)?;
    cookie::strip(meta);
    if meta.is_empty() {
        params.remove("_meta");
    }
    let mut stripped = message.clone();
    let raw = serde_json::value::to_raw_value(&params)
        .map_err(|e| Rejection::bad_request(e.to_string()))?;
    stripped.set_params(raw);
    Ok((cookie, Some(stripped)))
}

/// The `initialize` params a named session's server gets: the transport session's client's.
fn init_params(transport: &Session) -> Value {
    transport
        .init_params()
        .and_then(|init| serde_json::from_str(&init).ok())
        .unwrap_or_else(|| {
            json!({
                "protocolVersion": transport.protocol_version().unwrap_or_else(|| "2025-11-25".into()),
                "capabilities": {},
                "clientInfo": { "name": "mcp-session-proxy", "version": env!("CARGO_PKG_VERSION") },
            })
        })
}

fn params_of(message: &Message) -> Value {
    message
        .params()
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or(Value::Null)
}

/// `tools/list` asked of a transport session whose every request has a stream of its own,
/// answered with the handle tools added.
pub async fn tools_list(
    app: &App,
    transport: &Arc<Session>,
    message: &Message,
) -> Result<Bytes, Rejection> {
    let id = message.id().cloned().unwrap_or(Value::Null);
    let answer = ask(&app.registry, transport, message.clone()).await;
    let answer = answer.map_err(|r| r.with_id(Some(&id)))?;
    Ok(handles::rewrite_tools_list_response(Bytes::from(
        answer.to_string(),
    )))
}

/// Sends a request to a named session and relays what its stream carries (progress, the
/// server's questions, then the response) to `out`, one message each (a WebSocket's frames).
pub async fn relay_call(
    app: &App,
    session: Arc<Session>,
    message: Message,
    out: mpsc::Sender<Bytes>,
) {
    let id = message.id().cloned().unwrap_or(Value::Null);
    let stream = match app.registry.deliver(&session, message).await {
        Ok(Some(stream)) => stream,
        Ok(None) => return,
        Err(error) if error.not_taken() => {
            let refused = Rejection::session(&error).with_id(Some(&id));
            let _ = out.send(refused.error_body()).await;
            return;
        }
        Err(error) => {
            let _ = out.send(failed_request(&id, &error)).await;
            return;
        }
    };
    let mut reader = session.attach(stream, None);
    while let Some(delivery) = reader.next().await {
        let over = delivery.events.iter().any(|event| event.terminal);
        let payloads = delivery.events.iter().map(|event| event.payload.clone());
        for payload in payloads.filter(|payload| !payload.is_empty()) {
            if out.send(payload).await.is_err() {
                return;
            }
        }
        if over {
            session.forget(stream);
            return;
        }
    }
}
