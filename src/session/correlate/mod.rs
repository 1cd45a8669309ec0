//! The server-wide tables of sessions, for requests that name no session of the proxy's: which
//! session serves a principal and the capabilities its client declares (`by_principal`),
//! sessions prepared ahead for requests without a principal (`pool`), and the calls each
//! principal has waiting for its input (`held`). The front asks for a session and gets one,
//! initialized as its client would (the sessions a client names in its messages are
//! `session::data_layer`'s, opened the same way).

pub mod by_principal;
pub mod held;
pub mod pool;

use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::{Registry, Session, SessionError, Shape};
use crate::base::caller::Caller;
use crate::session::EndReason;
use crate::wire::era::request::RequestMeta;

pub use by_principal::{Anonymous, PrincipalSessions};

/// The legacy revision the proxy speaks to its servers for modern clients.
const UPSTREAM_VERSION: &str = "2025-11-25";

/// What a request that names no session declares of its client: the capabilities, and its
/// `clientInfo` if it gave one.
#[derive(Debug, Clone, Copy)]
pub struct ClientDeclared<'a> {
    pub capabilities: &'a Map<String, Value>,
    pub client_info: Option<&'a Value>,
}

impl<'a> From<&'a RequestMeta> for ClientDeclared<'a> {
    fn from(meta: &'a RequestMeta) -> ClientDeclared<'a> {
        ClientDeclared {
            capabilities: &meta.capabilities,
            client_info: meta.client_info.as_ref(),
        }
    }
}

impl ClientDeclared<'_> {
    /// The `initialize` params that stand for this client.
    pub fn initialize_params(&self) -> Value {
        client_params(self.capabilities, self.client_info)
    }
}

/// The newest `initialize` result of a server, shared with what opens sessions for it.
pub type Newest = Arc<Mutex<Option<Arc<Initialized>>>>;

/// What a server said at `initialize`, with its identity ready to be written into results.
#[derive(Default)]
pub struct Initialized {
    pub result: Value,
    /// `serverInfo`, as text.
    pub server_info: Option<Box<RawValue>>,
}

impl Initialized {
    pub fn new(result: Value) -> Initialized {
        let server_info = result
            .get("serverInfo")
            .and_then(|info| serde_json::value::to_raw_value(info).ok());
        Initialized {
            result,
            server_info,
        }
    }

    /// An `initialize` result as the shared store recorded it (text); empty if unreadable.
    fn recorded(text: &str) -> Arc<Initialized> {
        Arc::new(Initialized::new(
            serde_json::from_str(text).unwrap_or_default(),
        ))
    }
}

/// A session serving a request, with the server's `initialize` result.
pub struct Correlated {
    pub session: Arc<Session>,
    pub initialized: Arc<Initialized>,
    /// What becomes of a session serving this request alone once it is over (when dropped).
    pub ending: Option<Box<dyn Ending>>,
}

/// What becomes of a session serving one request alone: done when dropped, once the request is
/// over (it ends, or goes back to the pool it was lent from).
pub trait Ending: Send + Sync {
    /// The request goes on past this response (it waits for the client's input): the session
    /// is ended by whatever finishes it.
    fn disarm(self: Box<Self>);
}

/// Ends a per-request session once its request is over.
pub struct EndOnDrop {
    registry: Arc<Registry>,
    session_id: String,
    armed: bool,
}

impl EndOnDrop {
    /// Ends session `session_id` when dropped, unless disarmed.
    pub fn armed(registry: Arc<Registry>, session_id: String) -> Box<dyn Ending> {
        Box::new(EndOnDrop {
            registry,
            session_id,
            armed: true,
        })
    }
}

impl Ending for EndOnDrop {
    fn disarm(mut self: Box<Self>) {
        self.armed = false;
    }
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.registry
                .end(&self.session_id, EndReason::NotInitialized);
        }
    }
}

/// Creates a session of `caller` and initializes its server with `params` as a legacy client
/// would. The session is ended unless its server is initialized: a refusal, or the client gone
/// meanwhile.
pub(in crate::session) async fn open_initialized(
    registry: &Arc<Registry>,
    caller: &Caller,
    params: Value,
) -> Result<(Arc<Session>, Arc<Initialized>), SessionError> {
    let session = registry.create(caller, Shape::Streams).await?;
    let unopened = EndOnDrop::armed(registry.clone(), session.id().to_owned());
    let initialized = Arc::new(Initialized::new(
        initialize_with(registry, &session, params).await?,
    ));
    unopened.disarm();
    Ok((session, initialized))
}

/// `open_initialized`, then records the result as the server's newest.
async fn open_with(
    registry: &Arc<Registry>,
    newest: &Newest,
    caller: &Caller,
    params: Value,
) -> Result<(Arc<Session>, Arc<Initialized>), SessionError> {
    let opened = open_initialized(registry, caller, params).await?;
    *newest.lock().unwrap_or_else(|e| e.into_inner()) = Some(opened.1.clone());
    Ok(opened)
}

/// Whether a found session can serve: not ended, its server alive.
pub fn usable(session: &Session) -> bool {
    !session.ended.is_cancelled() && !session.upstream_failed()
}

/// The `initialize` params of a client declaring `capabilities`: `client_info`, else the
/// proxy's own.
pub fn client_params(capabilities: &Map<String, Value>, client_info: Option<&Value>) -> Value {
    let client_info = client_info.cloned().unwrap_or_else(
        || json!({ "name": "mcp-session-proxy", "version": env!("CARGO_PKG_VERSION") }),
    );
    json!({
        "protocolVersion": UPSTREAM_VERSION,
        "capabilities": capabilities,
        "clientInfo": client_info,
    })
}

/// `initialize` with `params`, then `initialized`: the session's handshake, made as its
/// client would; the result.
pub async fn initialize_with(
    registry: &Registry,
    session: &Arc<Session>,
    params: Value,
) -> Result<Value, SessionError> {
    let params = serde_json::value::to_raw_value(&params).ok();
    crate::session::handshake::initialize_as_client(session, registry, params).await
}

/// Capabilities as one string, the same however the client ordered them (a JSON object's keys
/// come out sorted).
fn canonical(capabilities: &Map<String, Value>) -> String {
    serde_json::to_string(capabilities).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_in_any_order_are_one_key() {
        let a: Map<String, Value> =
            serde_json::from_str(r#"{"sampling":{},"elicitation":{"form":{},"url":{}}}"#).unwrap();
        let b: Map<String, Value> =
            serde_json::from_str(r#"{"elicitation":{"url":{},"form":{}},"sampling":{}}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
    }

    #[test]
    fn a_client_that_names_itself_is_named_upstream_else_the_proxy_is() {
        let capabilities: Map<String, Value> = serde_json::from_str(r#"{"sampling":{}}"#).unwrap();
        let named = json!({ "name": "agent", "version": "1" });
        let declared = ClientDeclared {
            capabilities: &capabilities,
            client_info: Some(&named),
        };
        let params = declared.initialize_params();
        assert_eq!(params["clientInfo"], named);
        assert_eq!(params["capabilities"], json!({ "sampling": {} }));
        assert_eq!(params["protocolVersion"], UPSTREAM_VERSION);
        let anonymous = client_params(&capabilities, None);
        assert_eq!(anonymous["clientInfo"]["name"], "mcp-session-proxy");
    }

    #[test]
    fn a_recorded_result_keeps_the_server_identity_and_an_unreadable_one_is_empty() {
        let recorded = Initialized::recorded(r#"{"serverInfo":{"name":"demo"}}"#);
        assert_eq!(
            recorded.server_info.as_ref().map(|info| info.get()),
            Some(r#"{"name":"demo"}"#)
        );
        let unreadable = Initialized::recorded("{not json");
        assert!(unreadable.server_info.is_none());
        assert_eq!(unreadable.result, Value::Null);
    }
}
