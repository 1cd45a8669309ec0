//! The session's subscriptions and the list changes as one `subscriptions/listen`: issued
//! again when what the session subscribes to changes (the old one cancelled once the new one
//! is acknowledged), and opened again after a pause when it drops.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::oneshot;
use tracing::warn;

use super::{Bridge, BridgeState, OWN};
use crate::wire::era::SUBSCRIPTION_ID_KEY;
use crate::wire::jsonrpc::{Message, METHOD_NOT_FOUND};
use crate::wire::methods::{CANCELLED, SUBSCRIPTIONS_ACKNOWLEDGED, SUBSCRIPTIONS_LISTEN};

/// The pause before a dropped listen is opened again, doubled per failure up to the longest.
const FIRST_RELISTEN_PAUSE: Duration = Duration::from_millis(250);
const LONGEST_RELISTEN_PAUSE: Duration = Duration::from_secs(30);
/// The longest a subscribe waits for the server to acknowledge its listen.
const LISTEN_ACK_TIMEOUT: Duration = Duration::from_secs(10);

impl BridgeState {
    /// No listen is in force, or the one in force misses what the session now subscribes to.
    fn stale_listen(&self) -> bool {
        self.listen.is_none() || self.listen_covers != self.subscriptions
    }
}

impl Bridge {
    /// The session's `resources/subscribe` (or unsubscribe, `subscribe` false) of the URI it
    /// names: answered once the server listens for it, so an update right after is not lost.
    pub(super) async fn subscribe(&self, request: &Message, subscribe: bool) {
        let uri = request
            .params()
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| p["uri"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let changed = {
            let mut state = self.lock();
            match subscribe {
                true => state.subscriptions.insert(uri),
                false => state.subscriptions.remove(&uri),
            }
        };
        if changed {
            self.listen().await;
        }
        self.answer(request.id(), json!({}));
    }

    /// The listen in force ended or failed (the server went away, or ended it): another is
    /// opened after a pause that doubles while they keep failing, until the session ends.
    pub(super) fn listen_dropped(&self, listen: &str) {
        {
            let mut state = self.lock();
            if state.listen.as_deref() != Some(listen) {
                return;
            }
            state.listen = None;
        }
        self.relisten_later();
    }

    /// Opens the listen again after a pause that doubles while listens keep failing.
    fn relisten_later(&self) {
        let pause = {
            let mut state = self.lock();
            let pause = state.relisten_pause.max(FIRST_RELISTEN_PAUSE);
            state.relisten_pause = (pause * 2).min(LONGEST_RELISTEN_PAUSE);
            pause
        };
        let this = self.this.clone();
        tokio::spawn(async move {
            tokio::time::sleep(pause).await;
            let Some(bridge) = this.upgrade() else {
                return;
            };
            let gone = bridge.released.load(std::sync::atomic::Ordering::Acquire);
            if !gone && bridge.lock().stale_listen() {
                bridge.listen().await;
            }
        });
    }

    /// (Re)issues the listen for the list changes and the subscribed resources.
    /// Returns once the server acknowledged the new listen (or failed to, within a bound), so
    /// a subscribe is answered when its updates can flow; the listen it replaces is cancelled
    /// only then, and its late notifications dropped: no gap, no update twice.
    pub(super) async fn listen(&self) {
        let _one_at_a_time = self.listening.lock().await;
        let (acknowledged, acknowledgement) = oneshot::channel();
        let (id, uris) = {
            let mut state = self.lock();
            let id = state.own_id("listen");
            state.waiting.insert(id.clone(), acknowledged);
            state.pending_listen = Some((id.clone(), state.subscriptions.clone()));
            (id, state.subscriptions.iter().cloned().collect::<Vec<_>>())
        };
        let notifications = json!({ "toolsListChanged": true, "promptsListChanged": true,
            "resourcesListChanged": true, "resourceSubscriptions": uris });
        let listen = json!({ "jsonrpc": "2.0", "id": id, "method": SUBSCRIPTIONS_LISTEN,
            "params": self.with_meta(json!({ "notifications": notifications })) });
        let sent = self.to_server(listen).await.is_ok();
        let answer = match sent {
            true => tokio::time::timeout(LISTEN_ACK_TIMEOUT, acknowledgement)
                .await
                .map(|answer| answer.map_err(|_| ())),
            false => Ok(Err(())),
        };
        let held = matches!(&answer, Ok(Ok(ack))
            if ack["method"] == SUBSCRIPTIONS_ACKNOWLEDGED);
        // A server that has no listens at all is not asked again.
        let unknown = matches!(&answer, Ok(Ok(refusal))
            if refusal["error"]["code"] == METHOD_NOT_FOUND);
        let (previous, retry) = {
            let mut state = self.lock();
            state.waiting.remove(&id);
            state.pending_listen = None;
            match held {
                // The acknowledgement put it in force (at once, so nothing it sends after is
                // dropped); the one it replaced is cancelled here.
                true => (state.replaced_listen.take(), false),
                false => {
                    if answer.is_err() {
                        warn!("the server did not acknowledge a listen in time");
                    }
                    (None, state.stale_listen())
                }
            }
        };
        if !held {
            // The new listen is not in force: cancelled at the server, tried again later
            // unless the one in force already covers what the session wants.
            self.cancel_listen(&id, "it was not acknowledged").await;
            if retry && !unknown {
                self.relisten_later();
            }
            return;
        }
        if let Some(previous) = previous {
            self.cancel_listen(&previous, "the subscriptions changed")
                .await;
        }
    }

    async fn cancel_listen(&self, id: &str, reason: &str) {
        let params = json!({ "requestId": id, "reason": reason });
        let _ = self.notify_server(CANCELLED, params).await;
    }

    /// A notification of the server's: a listen's acknowledgement puts it in force; what a
    /// replaced listen still sends is dropped; the rest goes to the session without the
    /// listen's id.
    pub(super) fn notification(&self, mut notification: Value) {
        let listen = notification["params"]["_meta"][SUBSCRIPTION_ID_KEY].clone();
        if notification["method"] == SUBSCRIPTIONS_ACKNOWLEDGED {
            // A listen that holds: the next drop is retried soon again.
            let mut state = self.lock();
            state.relisten_pause = Duration::ZERO;
            let pending = state.pending_listen.take();
            let acknowledged = listen.as_str().map(str::to_owned);
            match pending {
                Some((id, covers)) if acknowledged.as_ref().is_none_or(|a| *a == id) => {
                    // In force from here: its next notification is already the session's.
                    let previous = state.listen.replace(id.clone());
                    state.replaced_listen = previous;
                    state.listen_covers = covers;
                    if let Some(waiting) = state.waiting.remove(&id) {
                        let _ = waiting.send(notification);
                    }
                }
                other => state.pending_listen = other,
            }
            return;
        }
        if let Some(listen) = listen.as_str().filter(|id| id.starts_with(OWN)) {
            if self.lock().listen.as_deref() != Some(listen) {
                // A replaced listen's last words: the one in force says the same.
                return;
            }
        }
        if let Some(Value::Object(meta)) = notification["params"].get_mut("_meta") {
            meta.remove(SUBSCRIPTION_ID_KEY);
            if meta.is_empty() {
                notification["params"]
                    .as_object_mut()
                    .map(|p| p.remove("_meta"));
            }
        }
        self.to_session(notification);
    }
}
