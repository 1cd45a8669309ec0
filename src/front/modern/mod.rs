//! The 2026-07-28 face of a served server, beside the legacy one on the same URL: requests
//! that carry their protocol version, capabilities and client in `_meta`, no session, POST
//! only. `checks` (what a request must carry), `exchange` (the request through the session
//! `session::correlate` finds for it), `envelope` (results as modern clients read them).

mod call;
pub mod envelope;
mod exchange;
mod input;
pub mod named;
mod retry;
mod server_requests;
pub mod state;
mod subscriptions_listen;

use http::{HeaderMap, Response, StatusCode};
use serde_json::Value;

use super::rejection::Rejection;
use super::request::{accepted, json};
use super::App;
use crate::base::caller::Caller;
use crate::base::ids::Principal;
use crate::front::data_layer::{self, cookie};
use crate::session::correlate::held::HeldCalls;
use crate::session::correlate::pool::{self, AnonymousPool};
use crate::session::correlate::{Anonymous, ClientDeclared, Correlated, PrincipalSessions};
use crate::wire::era::params::Params;
use crate::wire::era::request::{self, RequestMeta};
use crate::wire::http_body::Body;
use crate::wire::jsonrpc::{self, Kind, Message};
use crate::wire::methods::{route, Route, TOOLS_CALL, TOOLS_LIST};

pub use crate::wire::era::request::is_modern;

/// A modern POST (already parsed, Origin checked).
pub async fn post(
    app: &App,
    headers: &HeaderMap,
    message: Message,
    caller: &Caller,
) -> Result<Response<Body>, Rejection> {
    if message.kind() != Kind::Request {
        // 2026-07-28 defines no client notification over HTTP; a cancellation is the client
        // closing its response stream. Taken and dropped.
        return Ok(accepted());
    }
    let params = Params::read(&message);
    let meta = request::check(headers, &message, &params, app.registry.tool_marks())
        .map_err(|unfit| Rejection::from(unfit).with_id(message.id()))?;
    let id = message.id().cloned().unwrap_or(Value::Null);
    let method = message.method().unwrap_or_default();
    let max_state = app.data_layer.settings.max_state_bytes;
    let cookie = cookie::read(params.meta.as_ref(), max_state).map_err(|r| r.with_id(Some(&id)))?;
    match route(method) {
        Route::Named(verb) => named::verb(app, verb, cookie, &message, &meta, caller).await,
        _ if cookie.is_none()
            && data_layer::requires_session(&app.data_layer.settings, &message) =>
        {
            Err(Rejection::data_session_required(method).with_id(Some(&id)))
        }
        Route::Discover => discover(app, caller, &meta, &id).await,
        Route::Listen => {
            let correlated = match &cookie {
                Some(cookie) => named::correlated(data_layer::resolve(app, caller, cookie).await?),
                // A listen lasts and subscribes its session: never a lent one.
                None => correlate(app, caller, &meta, Lend::Never).await?,
            };
            subscriptions_listen::open(app, correlated, &message).await
        }
        _ if params.has("requestState") => {
            let call = call::Call::new(&message, &params, meta, caller.clone());
            retry::resume(app, &message, call).await
        }
        Route::Server | Route::Initialize | Route::ProtocolSession => {
            let call = call::Call::new(&message, &params, meta, caller.clone());
            serve(app, &message, &params, call, cookie.as_ref()).await
        }
    }
}

/// A request for the server (none of the proxy's own methods): within the data-layer session
/// or handle it names, from the response cache, or through the session serving its caller.
async fn serve(
    app: &App,
    message: &Message,
    params: &Params<'_>,
    mut call: call::Call,
    cookie: Option<&cookie::Cookie>,
) -> Result<Response<Body>, Rejection> {
    let legacy = || legacy_request(params, message);
    let method = message.method().unwrap_or_default();
    if let Some(cookie) = cookie {
        let forwarded = legacy()?;
        return named::within_session(app, message, forwarded, call, cookie).await;
    }
    let handles = app.data_layer.settings.handles;
    if handles && method == TOOLS_CALL {
        let forwarded = legacy()?;
        call = match named::handle_call(app, &forwarded, call).await {
            named::Handled::Answered(answered) => return answered,
            named::Handled::Plain(plain) => *plain,
        };
    }
    let caller = call.caller.clone();
    if handles && method == TOOLS_LIST {
        let forwarded = legacy()?;
        let correlated = correlate(app, &caller, &call.meta, Lend::OneRequest).await?;
        return named::tools_list(app, correlated, &forwarded, &call).await;
    }
    if let Some(key) = &call.cache_key {
        let cache = app.registry.response_cache();
        call.cache_generation = cache.generation();
        if let Some(result) = cache.lookup(&call.method, key, caller.principal()) {
            app.metrics.response_cache_hits_total.inc();
            return Ok(json(StatusCode::OK, cached(&call.client_id, &result)));
        }
        app.metrics.response_cache_misses_total.inc();
    }
    let forwarded = legacy()?;
    let correlated = correlate(app, &caller, &call.meta, Lend::OneRequest).await?;
    exchange::exchange(app, correlated, forwarded, call).await
}

/// The request as the legacy server takes it (`Params::legacy_request`).
fn legacy_request(params: &Params, message: &Message) -> Result<Message, Rejection> {
    params
        .legacy_request(message)
        .map_err(|e| Rejection::bad_request(e.to_string()).with_id(message.id()))
}

/// A response around a cached result.
fn cached(id: &Value, result: &[u8]) -> bytes::Bytes {
    let mut out = Vec::with_capacity(result.len() + 40);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    let _ = serde_json::to_writer(&mut out, id);
    out.extend_from_slice(br#","result":"#);
    out.extend_from_slice(result);
    out.push(b'}');
    out.into()
}

/// Whether a request without a principal may be served by a session lent from the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lend {
    /// It is over with its answer.
    OneRequest,
    /// It outlasts its answer or changes its session (`subscriptions/listen`).
    Never,
}

async fn correlate(
    app: &App,
    caller: &Caller,
    meta: &RequestMeta,
    lend: Lend,
) -> Result<Correlated, Rejection> {
    let modern = &app.modern;
    if lend == Lend::OneRequest
        && modern.pool.lends()
        && modern.anonymous == Anonymous::PerRequest
        && *caller.principal() == Principal::anonymous()
    {
        return modern
            .pool
            .borrow(
                &modern.correlation,
                &app.registry,
                &app.metrics,
                ClientDeclared::from(meta),
            )
            .await
            .map_err(|e| Rejection::session(&e));
    }
    app.modern
        .correlation
        .session(
            &app.registry,
            caller,
            ClientDeclared::from(meta),
            app.modern.anonymous,
        )
        .await
        .map_err(|e| Rejection::session(&e))
}

/// `server/discover`: what the server said at its newest `initialize`, in the modern form (a
/// server not initialized yet is, once, for this request).
async fn discover(
    app: &App,
    caller: &Caller,
    meta: &RequestMeta,
    id: &Value,
) -> Result<Response<Body>, Rejection> {
    let initialized = match app.modern.correlation.newest() {
        Some(initialized) => initialized,
        None => {
            correlate(app, caller, meta, Lend::OneRequest)
                .await
                .map_err(|r| r.with_id(Some(id)))?
                .initialized
        }
    };
    let mut result = envelope::discover(&initialized.result, app.modern.hints, true);
    if let Some(serde_json::Value::Object(capabilities)) = result.get_mut("capabilities") {
        crate::session::data_layer::advertise(capabilities);
    }
    Ok(json(StatusCode::OK, jsonrpc::result_response(id, result)))
}

/// A served server's modern settings and its upstream sessions for modern clients.
pub struct Modern {
    pub correlation: PrincipalSessions,
    pub hints: envelope::CacheHints,
    pub anonymous: Anonymous,
    /// Signs `requestState`.
    pub state_key: state::StateKey,
    /// How long a request held for the client's input waits for its retry.
    pub input_ttl: std::time::Duration,
    /// The calls each principal has waiting for its input, bounded.
    pub held_calls: std::sync::Arc<HeldCalls>,
    /// Sessions prepared for anonymous requests (`session.anonymous_pool`; none unless each
    /// session starts a legacy child of its own).
    pub pool: AnonymousPool,
}

impl Default for Modern {
    fn default() -> Modern {
        Modern {
            correlation: PrincipalSessions::default(),
            hints: envelope::CacheHints::default(),
            anonymous: Anonymous::default(),
            state_key: state::StateKey::minted(),
            input_ttl: std::time::Duration::from_secs(300),
            held_calls: Default::default(),
            pool: AnonymousPool::new(0, pool::DEFAULT_WAIT, false, Default::default()),
        }
    }
}
