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
        let (session, first) = session.listen_book(|book| book.hold_for_listen(uri));
        if first {
            if let Err(refused) = self.change_subscription(&session, uri, true).await {
                session.listen_book(|book| book.release_for_listen(uri));
                return Err(refused);
            }
        }
        Ok(())
    }

    /// One listen of `session` no longer wants `uri`; the last one unsubscribes its server
    /// (an ended session's is not asked).
    pub async fn release_for_listen(&self, session: &Arc<Session>, uri: &str) {
        let (session, last) = session.listen_book(|book| book.release_for_listen(uri));
        if last && !session.ended.is_cancelled() {
            let _ = self.change_subscription(&session, uri, false).await;
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

#[cfg(test)]
mod tests {
    use crate::session::testing::{initialized, principal, registry};
    use crate::session::SessionSettings;

    /// A listen opened through a view reads on in the session that took the view over: its
    /// URIs count there, so another listen of the same URI there neither subscribes again nor,
    /// closing, unsubscribes what the first still holds; the first one's release is the last.
    #[tokio::test]
    async fn a_views_listens_count_on_in_the_session_that_took_it_over() {
        let registry = registry(SessionSettings::default());
        let view = initialized(&registry, principal("alice")).await;
        let successor = initialized(&registry, principal("alice")).await;
        let uri = "demo://counter";
        let (_, first) = view.listen_book(|book| book.hold_for_listen(uri));
        assert!(first);
        view.succeeded_by(&successor);

        let (counted_in, first) = successor.listen_book(|book| book.hold_for_listen(uri));
        assert!(std::sync::Arc::ptr_eq(&counted_in, &successor));
        assert!(!first, "the view's listen holds the URI in the successor");
        let (_, last) = successor.listen_book(|book| book.release_for_listen(uri));
        assert!(!last, "the view's listen still holds it");
        let (counted_in, last) = view.listen_book(|book| book.release_for_listen(uri));
        assert!(std::sync::Arc::ptr_eq(&counted_in, &successor));
        assert!(
            last,
            "released through the view, the last listen lets the successor's go"
        );
    }
}
