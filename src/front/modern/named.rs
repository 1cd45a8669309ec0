//! 2026-07-28 requests and sessions named in messages: `sessions/create`, `sessions/delete` and
//! `messages/listen`; a request with a data-layer cookie served by that session; the state
//! handle tools and a call within a handle; the tool list with the handle tools in it.

use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::call::Call;
use super::envelope::{self, CacheHints};
use super::exchange;
use crate::base::caller::Caller;
use crate::front::data_layer::cookie::Cookie;
use crate::front::data_layer::handle_tools::{self, Dispatched};
use crate::front::data_layer::methods::{self, Verb};
use crate::front::data_layer::{self, messages_listen};
use crate::front::rejection::Rejection;
use crate::front::request::ask;
use crate::front::request::json;
use crate::front::settings::CacheScope;
use crate::front::App;
use crate::session::correlate::ClientDeclared;
use crate::session::correlate::Correlated;
use crate::session::data_layer::handles;
use crate::session::data_layer::NamedSession;
use crate::wire::era::request::RequestMeta;
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::{self, Message};

/// Answers a `sessions/*` or `messages/listen` request.
pub async fn verb(
    app: &App,
    verb: Verb,
    cookie: Option<Cookie>,
    message: &Message,
    meta: &RequestMeta,
    caller: &Caller,
) -> Result<Response<Body>, Rejection> {
    let id = message.id().cloned().unwrap_or(Value::Null);
    let method = message.method().unwrap_or_default();
    let result = match verb {
        Verb::Create { draft } => {
            if cookie.is_some() {
                return Err(Rejection::cookie_on_create(method).with_id(Some(&id)));
            }
            let init = ClientDeclared::from(meta).initialize_params();
            methods::create(app, caller, draft, init).await
        }
        Verb::Delete => {
            let params = params_of(message);
            methods::delete(app, caller, cookie, &params).await
        }
        Verb::Listen => {
            return match cookie {
                Some(cookie) => {
                    let named = data_layer::resolve(app, caller, &cookie).await;
                    let named = named.map_err(|r| r.with_id(Some(&id)))?;
                    let scope = Some(cookie.session_id);
                    Ok(messages_listen::open(app, named.session, id, scope, ()))
                }
                None => {
                    let lend = super::Lend::Never;
                    let correlated = super::correlate(app, caller, meta, lend).await;
                    let correlated = correlated.map_err(|r| r.with_id(Some(&id)))?;
                    let session = correlated.session.clone();
                    Ok(messages_listen::open(app, session, id, None, correlated))
                }
            };
        }
    };
    let mut result = result.map_err(|r| r.with_id(Some(&id)))?;
    result["resultType"] = json!("complete");
    Ok(json(StatusCode::OK, jsonrpc::result_response(&id, result)))
}

/// A named session as the exchange takes it.
pub fn correlated(named: NamedSession) -> Correlated {
    Correlated {
        session: named.session,
        initialized: named.initialized,
        ending: None,
    }
}

/// What became of a `tools/call` on a server offering state handles.
pub enum Handled {
    /// Answered: a handle tool, or a call within a handle.
    Answered(Result<Response<Body>, Rejection>),
    /// A call of the server's that names no handle, given back.
    Plain(Box<Call>),
}

/// A `tools/call` on a server offering state handles: the handle tools answered here, a call
/// within a handle sent to the handle's session, any other given back to the caller.
pub async fn handle_call(app: &App, forwarded: &Message, call: Call) -> Handled {
    let init = || ClientDeclared::from(&call.meta).initialize_params();
    let dispatched = handle_tools::dispatch(app, &call.caller, forwarded, init).await;
    match dispatched {
        Ok(Dispatched::Plain) => Handled::Plain(Box::new(call)),
        Ok(Dispatched::Answered(mut result)) => {
            result["resultType"] = json!("complete");
            let answer = jsonrpc::result_response(&call.client_id, result);
            Handled::Answered(Ok(json(StatusCode::OK, answer)))
        }
        Ok(Dispatched::Within(named, within)) => {
            Handled::Answered(exchange::exchange(app, correlated(named), within, call).await)
        }
        Err(rejection) => Handled::Answered(Err(rejection.with_id(Some(&call.client_id)))),
    }
}

/// A call within the data-layer session `cookie` names: never cached (a session's answers
/// are its own).
pub async fn within_session(
    app: &App,
    message: &Message,
    forwarded: Message,
    mut call: Call,
    cookie: &Cookie,
) -> Result<Response<Body>, Rejection> {
    call.cache_key = None;
    let named = data_layer::resolve(app, &call.caller, cookie)
        .await
        .map_err(|r| r.with_id(message.id()))?;
    exchange::exchange(app, correlated(named), forwarded, call).await
}

/// `tools/list` on a server offering state handles: asked of the session, the handle tools
/// added, and public (the same list for everyone).
pub async fn tools_list(
    app: &App,
    correlated: Correlated,
    forwarded: &Message,
    call: &Call,
) -> Result<Response<Body>, Rejection> {
    let answer = ask(&app.registry, &correlated.session, forwarded.clone()).await?;
    let mut answer = answer;
    if let Some(result) = answer.get_mut("result") {
        handles::rewrite_tools_list(result);
    }
    let server_info = correlated.initialized.result.get("serverInfo");
    let hints = CacheHints {
        scope: CacheScope::Public,
        ..app.modern.hints
    };
    let (answer, status) = envelope::response(
        answer,
        &call.client_id,
        &call.method,
        &call.params(),
        server_info,
        hints,
    );
    Ok(json(status, answer.to_string().into()))
}

fn params_of(message: &Message) -> Value {
    message
        .params()
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or(Value::Null)
}
