//! Which upstream session serves a request that names none (a 2026-07-28 request): by default
//! one per (principal, declared client capabilities), opened on first use with an `initialize`
//! built from the request's `clientInfo` and capabilities, idle-expired like any session and
//! opened again when it is gone. A request with no principal gets a session of its own that
//! ends with it (before a stdio server with a child per session, one prepared ahead in
//! `pool`), unless anonymous requests are configured to share one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dashmap::DashMap;

use super::{
    canonical, open_with, usable, ClientDeclared, Correlated, EndOnDrop, Initialized, Newest,
};
use crate::base::caller::Caller;
use crate::base::ids::Principal;
use crate::session::EndReason;
use crate::session::{Registry, Session, SessionError};

/// What anonymous requests (no credential, no trusted principal header) share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Anonymous {
    /// Each gets an upstream session of its own, ended with it.
    #[default]
    PerRequest,
    /// They share one, like any principal's requests.
    Shared,
}

/// The upstream sessions modern requests are served by.
#[derive(Default)]
pub struct PrincipalSessions {
    by_key: DashMap<Key, Entry>,
    /// One `initialize` at a time per key, so concurrent first requests share one session.
    opening: DashMap<Key, Arc<tokio::sync::Mutex<()>>>,
    /// The newest `initialize` result of this server (what `server/discover` describes).
    newest: Newest,
    /// How many entries `by_key` kept at its last sweep.
    swept_at: AtomicUsize,
}

/// Below this many entries `by_key` is never swept.
const SWEEP_FLOOR: usize = 256;

type Key = (Principal, String);

#[derive(Clone)]
struct Entry {
    session_id: String,
    initialized: Arc<Initialized>,
}

impl PrincipalSessions {
    /// The session that serves a request of `caller` declaring `declared` capabilities.
    pub async fn session(
        &self,
        registry: &Arc<Registry>,
        caller: &Caller,
        declared: ClientDeclared<'_>,
        anonymous: Anonymous,
    ) -> Result<Correlated, SessionError> {
        let principal = caller.principal();
        if *principal == Principal::anonymous() && anonymous == Anonymous::PerRequest {
            let (session, initialized) = self.open(registry, caller, declared).await?;
            let ending = Some(EndOnDrop::armed(registry.clone(), session.id().to_owned()));
            return Ok(Correlated {
                session,
                initialized,
                ending,
            });
        }
        let key = (principal.clone(), canonical(declared.capabilities));
        if let Some(found) = self.live(registry, caller, &key).await? {
            return Ok(found);
        }
        let gate = self.opening.entry(key.clone()).or_default().clone();
        // Waiters hold the gate and find the entry; so do later requests. The gate goes from
        // the table however this request ends, its client gone before the answer included.
        let _gone_after = Ungate {
            opening: &self.opening,
            key: &key,
        };
        let _one_at_a_time = gate.lock().await;
        let opened = self.live_or_open(registry, caller, &key, declared).await;
        if let Ok((session, initialized)) = &opened {
            self.remember(registry, key.clone(), session, initialized);
        }
        let (session, initialized) = opened?;
        Ok(Correlated {
            session,
            initialized,
            ending: None,
        })
    }

    /// Under the key's gate: the session another request opened meanwhile, the one the shared
    /// store names, or a new one.
    async fn live_or_open(
        &self,
        registry: &Arc<Registry>,
        caller: &Caller,
        key: &Key,
        declared: ClientDeclared<'_>,
    ) -> Result<(Arc<Session>, Arc<Initialized>), SessionError> {
        if let Some(found) = self.live(registry, caller, key).await? {
            return Ok((found.session, found.initialized));
        }
        let shared = shared_key(key);
        let recorded = registry.correlated(&shared, caller).await?;
        if let Some((session, initialized)) = recorded.filter(|(session, _)| usable(session)) {
            return Ok((session, Initialized::recorded(&initialized)));
        }
        let (session, initialized) = self.open(registry, caller, declared).await?;
        registry
            .correlate(&shared, &session, &initialized.result.to_string())
            .await;
        Ok((session, initialized))
    }

    /// Records which session serves `key` here. Entries whose session this replica no longer
    /// holds are dropped whenever the table has doubled since it was last swept (a lookup
    /// that misses here asks the shared store), so idle principals cost nothing here.
    fn remember(
        &self,
        registry: &Registry,
        key: Key,
        session: &Session,
        initialized: &Arc<Initialized>,
    ) {
        let entry = Entry {
            session_id: session.id().to_owned(),
            initialized: initialized.clone(),
        };
        self.by_key.insert(key, entry);
        self.sweep(|id| registry.holds(id));
    }

    /// Drops the entries of sessions no longer held here once the table has doubled.
    fn sweep(&self, held: impl Fn(&str) -> bool) {
        let swept_at = self.swept_at.load(Ordering::Relaxed);
        if self.by_key.len() >= (2 * swept_at).max(SWEEP_FLOOR) {
            self.by_key.retain(|_, entry| held(&entry.session_id));
            self.by_key.shrink_to_fit();
            self.swept_at.store(self.by_key.len(), Ordering::Relaxed);
        }
    }

    /// The newest `initialize` result, if a modern request opened a session yet.
    pub fn newest(&self) -> Option<Arc<Initialized>> {
        self.newest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Where sessions opened elsewhere (the anonymous pool's) record their `initialize` result.
    pub fn newest_handle(&self) -> Newest {
        self.newest.clone()
    }

    /// What the server of `session` said at its `initialize`, for a retry that continues a
    /// request on it: this replica's entry, else the shared store's record for the retry's
    /// principal and capabilities, else the newest known.
    pub async fn initialized_of(
        &self,
        registry: &Registry,
        session: &Session,
        caller: &Caller,
        declared: ClientDeclared<'_>,
    ) -> Arc<Initialized> {
        let principal = caller.principal();
        let here = self
            .by_key
            .iter()
            .find(|entry| entry.session_id == session.id())
            .map(|entry| entry.initialized.clone());
        if let Some(initialized) = here {
            return initialized;
        }
        let shared = shared_key(&(principal.clone(), canonical(declared.capabilities)));
        if let Ok(Some((recorded, initialized))) = registry.correlated(&shared, caller).await {
            if recorded.id() == session.id() {
                return Initialized::recorded(&initialized);
            }
        }
        self.newest().unwrap_or_default()
    }

    /// The session this replica correlated `key` (of `caller`) with, wherever it lives now, if
    /// it serves.
    async fn live(
        &self,
        registry: &Registry,
        caller: &Caller,
        key: &Key,
    ) -> Result<Option<Correlated>, SessionError> {
        let Some(entry) = self.by_key.get(key).map(|e| e.clone()) else {
            return Ok(None);
        };
        let found = registry.find(&entry.session_id, caller).await?;
        match found {
            Some(session) if usable(&session) => Ok(Some(Correlated {
                session,
                initialized: entry.initialized,
                ending: None,
            })),
            found => {
                // Gone, or its server died: the next request opens another, transparently.
                if found.is_some() {
                    registry.end(&entry.session_id, EndReason::ServerGone);
                }
                self.by_key.remove(key);
                Ok(None)
            }
        }
    }

    /// Creates a session and initializes its server as a legacy client would.
    async fn open(
        &self,
        registry: &Arc<Registry>,
        caller: &Caller,
        declared: ClientDeclared<'_>,
    ) -> Result<(Arc<Session>, Arc<Initialized>), SessionError> {
        let params = declared.initialize_params();
        open_with(registry, &self.newest, caller, params).await
    }
}

/// Takes a key's opening gate from the table when dropped.
struct Ungate<'a> {
    opening: &'a DashMap<Key, Arc<tokio::sync::Mutex<()>>>,
    key: &'a Key,
}

impl Drop for Ungate<'_> {
    fn drop(&mut self) {
        self.opening.remove(self.key);
    }
}

/// The correlation key as the shared store names it: a digest, so it holds no credential.
fn shared_key(key: &Key) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(key.0.as_str().as_bytes())
        .chain_update([0])
        .chain_update(key.1.as_bytes())
        .finalize();
    crate::base::ids::hex(&digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_of_sessions_gone_are_dropped_once_the_table_doubles() {
        let correlation = PrincipalSessions::default();
        let bind = |n: usize| {
            let key = (
                Principal::from_credential(n.to_string().as_bytes()),
                "{}".into(),
            );
            let entry = Entry {
                session_id: format!("s{n}"),
                initialized: Arc::default(),
            };
            correlation.by_key.insert(key, entry);
            // Only every tenth session is still held here.
            correlation.sweep(|id| id[1..].parse::<usize>().unwrap() % 10 == 0);
        };
        (0..SWEEP_FLOOR - 1).for_each(bind);
        assert_eq!(correlation.by_key.len(), SWEEP_FLOOR - 1, "below the floor");
        bind(SWEEP_FLOOR - 1);
        assert_eq!(correlation.by_key.len(), SWEEP_FLOOR / 10 + 1);
        for n in SWEEP_FLOOR..10 * SWEEP_FLOOR {
            bind(n);
            let held = n / 10 + 1;
            let len = correlation.by_key.len();
            assert!(
                len <= (2 * held).max(SWEEP_FLOOR),
                "{len} entries for {held} held"
            );
        }
    }
}
