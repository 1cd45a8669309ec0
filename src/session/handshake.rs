//! The handshake with a session's server, one sequence whoever makes it: `initialize` with the
//! client's params, `notifications/initialized`, and a `resources/subscribe` per subscription
//! the session holds. It is made two ways: as a new session's client would
//! (`initialize_as_client`: the proxy initializes the server for a 2026-07-28 client or a
//! data-layer session), or on the proxy's own behalf to bring an upstream to where the session
//! was (`reinitialize`: a new one after a takeover, or one whose server forgot the session; its
//! answer is not the client's, and the upstream, holding other traffic meanwhile, is told how
//! it went).

use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tracing::{warn, Instrument};

use super::{Registry, Session, SessionError};
use crate::upstream::UpstreamError;
use crate::wire::jsonrpc::Message;
use crate::wire::methods;

/// The id of the proxy's `initialize` made as a client's.
const INITIALIZE_ID: &str = "mcp-session-proxy/initialize";

/// How the handshake's messages reach the server.
#[derive(Clone, Copy)]
enum Way<'a> {
    /// Through the registry, as a client's messages: `initialize` is answered on a stream of
    /// its own (read back here), and its params are kept to bring the server back later.
    AsClient(&'a Registry),
    /// As the proxy's own: nothing logged; the upstream is told how `initialize` went.
    Own,
}

impl Way<'_> {
    /// `initialize` with `params`: its result when read (as a client's).
    async fn initialize(
        self,
        session: &Arc<Session>,
        params: Option<Box<RawValue>>,
    ) -> Result<Option<Value>, SessionError> {
        match self {
            Way::AsClient(registry) => {
                let request =
                    Message::request(Some(json!(INITIALIZE_ID)), methods::INITIALIZE, params);
                // Boxed: a delivery may take a session over, which re-initializes it.
                let answer = Box::pin(registry.ask(session, request)).await?;
                match (answer.get("result"), answer.get("error")) {
                    (Some(result), _) => Ok(Some(result.clone())),
                    (_, error) => Err(SessionError::Upstream(UpstreamError::InitializeRefused(
                        error.cloned().unwrap_or_default().to_string(),
                    ))),
                }
            }
            Way::Own => {
                let initialized = session.internal_request(methods::INITIALIZE, params).await;
                session.upstream.reestablished(initialized.clone());
                if initialized.is_ok() {
                    let record = || session.upstream_session_record();
                    session.lock().mirror_upstream_session(record);
                }
                Ok(initialized.map(|()| None)?)
            }
        }
    }

    /// `notifications/initialized`.
    async fn initialized(self, session: &Arc<Session>) -> Result<(), SessionError> {
        let notification = Message::request(None, methods::INITIALIZED, None);
        match self {
            Way::AsClient(registry) => Box::pin(registry.send(session, notification)).await,
            Way::Own => Ok(session.upstream.send(notification).await?),
        }
    }
}

impl Way<'_> {
    /// The handshake, made this way; the `initialize` result when it is read.
    async fn handshake(
        self,
        session: &Arc<Session>,
        params: Option<Box<RawValue>>,
    ) -> Result<Option<Value>, SessionError> {
        let result = self.initialize(session, params).await?;
        self.initialized(session).await?;
        let subscriptions: Vec<String> =
            session.lock().subscriptions.uris.iter().cloned().collect();
        for uri in subscriptions {
            let params = serde_json::value::to_raw_value(&json!({ "uri": uri })).ok();
            session
                .internal_request(methods::RESOURCES_SUBSCRIBE, params)
                .await?;
        }
        Ok(result)
    }
}

/// Initializes a new session's server with `params` as its client would (the shared store, if
/// any, has the session once this returns); the server's `initialize` result.
pub(in crate::session) async fn initialize_as_client(
    session: &Arc<Session>,
    registry: &Registry,
    params: Option<Box<RawValue>>,
) -> Result<Value, SessionError> {
    let result = Way::AsClient(registry).handshake(session, params).await?;
    session.store_synced().await;
    Ok(result.unwrap_or_default())
}

/// Re-initializes the session's upstream (a no-op for a session never initialized: the client
/// will).
pub(in crate::session) async fn reinitialize(
    session: &Arc<Session>,
    init: Option<&str>,
) -> Result<(), SessionError> {
    let Some(init) = init else {
        return Ok(());
    };
    let params = RawValue::from_string(init.to_owned()).ok();
    Way::Own.handshake(session, params).await.map(|_| ())
}

/// The upstream's server forgot `session`: re-initializes it in the background.
pub(in crate::session) fn reestablish(session: &Session) {
    let Some(this) = session.this.upgrade() else {
        return;
    };
    tokio::spawn(
        async move {
            warn!("the upstream server lost the session; re-initializing it");
            let init = this.lock().init.clone();
            let Some(init) = init else {
                let cause = UpstreamError::NoInitializeParams;
                warn!(%cause, "re-initializing the upstream failed");
                this.upstream.reestablished(Err(cause));
                return;
            };
            if let Err(error) = reinitialize(&this, Some(&init)).await {
                warn!(%error, "re-initializing the upstream failed");
            }
        }
        .instrument(session.span()),
    );
}
