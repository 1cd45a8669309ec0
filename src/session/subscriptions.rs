//! What a session is subscribed to, and which lists its server may change: the session's state
//! of its subscriptions, bounded in count and bytes.

use std::collections::BTreeSet;

use bytes::Bytes;

use super::{SubscriptionRefused, MAX_SUBSCRIPTION_BYTES};
use crate::{wire::jsonrpc, wire::methods};

#[derive(Debug, Default)]
pub(super) struct Subscriptions {
    pub(super) uris: BTreeSet<String>,
    /// The `list_changed` notifications the server announced it may send.
    pub(super) changeable_lists: Vec<&'static str>,
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
