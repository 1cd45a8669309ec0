//! What the fronts know of the replicas sharing sessions: whether the shared store answers, and
//! this replica's name, hop key and lease for the internal hop. The store itself stays below.

use std::time::Duration;

use crate::keys::Key;
use crate::store::Store;

/// The replicas this proxy belongs to (none with the memory store).
#[derive(Clone, Default)]
pub struct Cluster {
    store: Store,
}

/// This replica, as the internal hop names and authenticates it.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    pub node_id: &'a str,
    /// Signs and checks hops.
    pub hop_key: &'a Key,
    /// How long streams read through another replica stay live here without its word.
    pub lease: Duration,
}

impl Cluster {
    pub fn new(store: Store) -> Cluster {
        Cluster { store }
    }

    /// Whether new sessions can be created now (the shared store, if any, is reachable).
    pub fn healthy(&self) -> bool {
        self.store.healthy()
    }

    /// This replica; `None` with the memory store (no hop is served).
    pub fn member(&self) -> Option<Member<'_>> {
        self.store.redis().map(|redis| Member {
            node_id: &redis.node_id,
            hop_key: &redis.hop_key,
            lease: redis.owner_timeout,
        })
    }
}
