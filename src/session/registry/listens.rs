//! The resource subscriptions 2026-07-28 listens make of a session's server, counted in the
//! session's book of subscriptions: made by the session itself where it lives here, through its
//! owner for a view.

use std::sync::Arc;

use serde_json::json;

use super::Registry;
use crate::session::{Session, SessionError};
use crate::wire::jsonrpc::Message;
use crate::wire::methods::{RESOURCES_SUBSCRIBE, RESOURCES_UNSUBSCRIBE};

impl Registry {
    /// Subscribes `session`'s server to `uri` for a listen, unless a listen of the session
    /// already has; refused, the count goes back, so that the next listen tries again.
    pub async fn subscribe_for_listen(
        &self,
        session: &Arc<Session>,
        uri: &str,
    ) -> Result<(), SessionError> {
        let first = session.lock().subscriptions.hold_for_listen(uri);
        if first {
            if let Err(refused) = self.change_subscription(session, uri, true).await {
                session.lock().subscriptions.release_for_listen(uri);
                return Err(refused);
            }
        }
        Ok(())
    }

    /// One listen of `session` no longer wants `uri`; the last one unsubscribes its server
    /// (an ended session's is not asked).
    pub async fn release_for_listen(&self, session: &Arc<Session>, uri: &str) {
        let last = session.lock().subscriptions.release_for_listen(uri);
        if last && !session.ended.is_cancelled() {
            let _ = self.change_subscription(session, uri, false).await;
        }
    }

    /// Subscribes or unsubscribes the session's server: on the proxy's own behalf where the
    /// session lives here (nothing the server sends meanwhile is taken as caused by it);
    /// through its owner for a view.
    async fn change_subscription(
        &self,
        session: &Arc<Session>,
        uri: &str,
        subscribe: bool,
    ) -> Result<(), SessionError> {
        if session.owner().is_none() {
            return session.subscribe_upstream(uri, subscribe).await;
        }
        let method = match subscribe {
            true => RESOURCES_SUBSCRIBE,
            false => RESOURCES_UNSUBSCRIBE,
        };
        let params = serde_json::value::to_raw_value(&json!({ "uri": uri })).ok();
        let id = json!("mcp-session-proxy/subscription");
        let request = Message::request(Some(id), method, params);
        self.ask(session, request).await.map(|_| ())
    }
}
