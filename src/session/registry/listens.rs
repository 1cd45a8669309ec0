//! The resource subscriptions 2026-07-28 listens make of a session's server, counted per
//! session and URI across the listens on this replica: the server is subscribed when the first
//! listen asks for a URI and unsubscribed when the last one lets it go.

use std::sync::Arc;

use dashmap::DashMap;
use serde_json::json;

use super::Registry;
use crate::session::{Session, SessionError};
use crate::wire::jsonrpc::Message;
use crate::wire::methods::{RESOURCES_SUBSCRIBE, RESOURCES_UNSUBSCRIBE};

/// How many listens of each session want each URI.
#[derive(Debug, Default)]
pub(in crate::session) struct ListenSubscriptions {
    counts: DashMap<(String, String), usize>,
}

impl Registry {
    /// Subscribes `session`'s server to `uri` for a listen, unless a listen of the session
    /// already has; refused, the count goes back, so that the next listen tries again.
    pub async fn subscribe_for_listen(
        &self,
        session: &Arc<Session>,
        uri: &str,
    ) -> Result<(), SessionError> {
        let counts = &self.listens.counts;
        let key = (session.id().to_owned(), uri.to_owned());
        let first = {
            let mut count = counts.entry(key.clone()).or_default();
            *count += 1;
            *count == 1
        };
        if first {
            if let Err(refused) = self.change_subscription(session, uri, true).await {
                counts.remove_if_mut(&key, |_, count| {
                    *count -= 1;
                    *count == 0
                });
                return Err(refused);
            }
        }
        Ok(())
    }

    /// One listen of `session` no longer wants `uri`; the last one unsubscribes its server
    /// (an ended session's is not asked).
    pub async fn release_for_listen(&self, session: &Arc<Session>, uri: &str) {
        let key = (session.id().to_owned(), uri.to_owned());
        // Counted down and removed under one lock: a listen subscribing meanwhile is not lost.
        let last = self
            .listens
            .counts
            .remove_if_mut(&key, |_, count| {
                *count -= 1;
                *count == 0
            })
            .is_some();
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
