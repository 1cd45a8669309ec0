//! What the fronts know of the replicas sharing sessions: whether the shared store answers, and
//! this replica's name, hop key, lease, answer bound and the nonces of the hops it took, for the
//! internal hop. The store itself stays below.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::base::keys::Key;
use crate::hop::{self, NonceRefused, Nonces, Stamp};
use crate::store::Store;

/// The replicas this proxy belongs to (none with the memory store).
#[derive(Clone, Default)]
pub struct Cluster {
    store: Store,
    /// The nonces of the hops this replica took (`cluster.max_hop_nonces` at most).
    nonces: Arc<Mutex<Nonces>>,
}

/// This replica, as the internal hop names and authenticates it.
#[derive(Debug, Clone, Copy)]
pub struct ThisReplica<'a> {
    pub node_id: &'a str,
    /// Signs and checks hops.
    pub hop_key: &'a Key,
    /// How long streams read through another replica stay live here without its word.
    pub lease: Duration,
    /// The most bytes a hop answer may take ([`hop::max_answer_bytes`]).
    pub max_answer_bytes: usize,
    nonces: &'a Mutex<Nonces>,
}

impl ThisReplica<'_> {
    /// Takes the nonce of a hop whose signature checked, once (see [`Nonces::take`]): how many
    /// nonces are kept then, or why the hop is refused.
    pub fn take_nonce(&self, stamp: &Stamp<'_>, now: SystemTime) -> Result<usize, NonceRefused> {
        let mut nonces = self.nonces.lock().unwrap_or_else(|e| e.into_inner());
        nonces.take(stamp.time, stamp.nonce, hop::unix_seconds(now))?;
        Ok(nonces.len())
    }
}

impl Cluster {
    /// `max_hop_nonces`: how many hop nonces this replica keeps at most. It takes no hop
    /// signed before now.
    pub fn new(store: Store, max_hop_nonces: usize) -> Cluster {
        let started = hop::unix_seconds(SystemTime::now());
        Cluster {
            store,
            nonces: Arc::new(Mutex::new(Nonces::new(max_hop_nonces, started))),
        }
    }

    /// Whether new sessions can be created now (the shared store, if any, is reachable).
    pub fn healthy(&self) -> bool {
        self.store.healthy()
    }

    /// This replica; `None` with the memory store (no hop is served).
    pub fn member(&self) -> Option<ThisReplica<'_>> {
        self.store.redis().map(|redis| ThisReplica {
            node_id: &redis.node_id,
            hop_key: &redis.hop_key,
            lease: redis.owner_timeout,
            max_answer_bytes: redis.max_hop_answer_bytes,
            nonces: &self.nonces,
        })
    }
}
