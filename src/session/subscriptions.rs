//! What a session is subscribed to, and which lists its server may change: the session's one
//! book of its subscriptions, bounded in count and bytes, with the URIs its 2026-07-28 listens on
//! this replica hold (the server subscribed when the first listen asks for a URI, unsubscribed
//! when the last one lets it go).

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;

use super::{SubscriptionRefused, MAX_SUBSCRIPTION_BYTES};
use crate::{wire::jsonrpc, wire::methods};

#[derive(Debug, Default)]
pub(super) struct Subscriptions {
    pub(super) uris: BTreeSet<String>,
    /// The `list_changed` notifications the server announced it may send.
    pub(super) changeable_lists: Vec<&'static str>,
    /// How many listens on this replica want each URI.
    listening: HashMap<String, usize>,
}

impl Subscriptions {
    /// Adds `uri` unless `limit` others or `MAX_SUBSCRIPTION_BYTES` of URIs are held already;
    /// whether it is new.
    pub(super) fn add(&mut self, uri: &str, limit: usize) -> Result<bool, SubscriptionRefused> {
        if self.uris.contains(uri) {
            return Ok(false);
        }
        if self.uris.len() >= limit {
            return Err(SubscriptionRefused::TooMany(limit));
        }
        let bytes: usize = self.uris.iter().map(String::len).sum();
        if bytes + uri.len() > MAX_SUBSCRIPTION_BYTES {
            return Err(SubscriptionRefused::TooLarge(MAX_SUBSCRIPTION_BYTES));
        }
        Ok(self.uris.insert(uri.to_owned()))
    }

    /// One more listen wants `uri`; whether it is the first (which subscribes the server).
    pub(super) fn hold_for_listen(&mut self, uri: &str) -> bool {
        let count = self.listening.entry(uri.to_owned()).or_default();
        *count += 1;
        *count == 1
    }

    /// One listen no longer wants `uri` (or its subscription was refused); whether it was the
    /// last (which unsubscribes the server). Counted down and forgotten under the session's
    /// lock: a listen holding the URI meanwhile is not lost.
    pub(super) fn release_for_listen(&mut self, uri: &str) -> bool {
        let Some(count) = self.listening.get_mut(uri) else {
            return false;
        };
        *count -= 1;
        if *count > 0 {
            return false;
        }
        self.listening.remove(uri);
        true
    }

    /// The listens' counts, taken out (a view's, for the session that took it over).
    pub(super) fn take_listening(&mut self) -> HashMap<String, usize> {
        std::mem::take(&mut self.listening)
    }

    /// Another book's listens counted here too.
    pub(super) fn absorb_listening(&mut self, listening: HashMap<String, usize>) {
        for (uri, count) in listening {
            *self.listening.entry(uri).or_default() += count;
        }
    }

    /// What a client that lost messages must re-read: one `resources/updated` per subscribed
    /// URI and one `list_changed` per list the server can change.
    pub(super) fn invalidations(&self) -> Vec<Bytes> {
        let updates = self.uris.iter().map(|uri| {
            jsonrpc::notification(
                methods::RESOURCES_UPDATED,
                serde_json::json!({ "uri": uri }),
            )
        });
        let lists = self
            .changeable_lists
            .iter()
            .map(|method| jsonrpc::notification(method, serde_json::json!({})));
        updates.chain(lists).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_listen_of_a_uri_subscribes_and_the_last_unsubscribes() {
        let mut book = Subscriptions::default();
        assert!(book.hold_for_listen("file:///a"));
        assert!(!book.hold_for_listen("file:///a"));
        assert!(book.hold_for_listen("file:///b"));
        assert!(!book.release_for_listen("file:///a"));
        assert!(book.release_for_listen("file:///a"));
        assert!(
            !book.release_for_listen("file:///a"),
            "an unheld URI is no one's last"
        );
        assert!(
            book.hold_for_listen("file:///a"),
            "released, the next listen subscribes again"
        );
    }
}
