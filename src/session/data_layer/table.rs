//! The table of sessions a client names in its messages, each its own upstream session (its own
//! child under per-session isolation): data-layer sessions (`sessions/create`, a cookie in
//! `_meta`) and state handles (a tool opens a handle, tools take it as an argument). Opened,
//! found (bound to their principal by a signed `state`), counted per principal and closed here.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use serde_json::Value;
use tokio::time::Instant;

use super::{Layer, LayerKind};
use crate::base::caller::Caller;
use crate::base::ids::Principal;
use crate::base::keys::Key;
use crate::session::correlate::{open_initialized, Initialized, PrincipalSessions};
use crate::session::EndReason;
use crate::session::{Registry, Session, SessionError};

/// A served server's settings for sessions named in messages (configuration).
#[derive(Debug, Clone)]
pub struct DataLayerSettings {
    /// Requests that reach the server's state must name a data-layer session (-32044).
    pub require_session: bool,
    /// Offer state handles: the handle tools, and a handle argument on every tool.
    pub handles: bool,
    /// A named session ends after this long unused.
    pub idle_ttl: Duration,
    /// And at the latest this long after it was opened.
    pub lifetime: Duration,
    /// Named sessions one principal may hold on one replica.
    pub max_per_principal: usize,
    /// The longest `state` a cookie may carry.
    pub max_state_bytes: usize,
}

impl Default for DataLayerSettings {
    fn default() -> DataLayerSettings {
        DataLayerSettings {
            require_session: false,
            handles: false,
            idle_ttl: Duration::from_secs(1800),
            lifetime: Duration::from_secs(24 * 3600),
            max_per_principal: 32,
            max_state_bytes: 4096,
        }
    }
}

/// The named sessions of a served server, as this replica knows them.
#[derive(Default)]
pub struct NamedSessions {
    pub settings: DataLayerSettings,
    /// Signs each named session's `state`.
    key: Key,
    /// The server's `initialize` result for each session opened here.
    initialized: DashMap<String, Arc<Initialized>>,
    /// The sessions each principal opened here (the per-principal bound).
    opened: DashMap<Principal, Vec<String>>,
    /// How many principals `opened` kept at its last sweep.
    swept_at: AtomicUsize,
}

/// Below this many principals `opened` is never swept.
const SWEEP_FLOOR: usize = 256;

/// How a message names a data-layer session: its id, the `state` the proxy issued with it,
/// and whether it is of the earlier drafts (whose cookie has no `state`).
#[derive(Debug, Clone, Copy)]
pub struct NamedBy<'a> {
    pub session_id: &'a str,
    pub state: Option<&'a str>,
    pub draft: bool,
}

/// A named session found for a request, with what its server said at `initialize`.
pub struct NamedSession {
    pub session: Arc<Session>,
    pub initialized: Arc<Initialized>,
}

impl NamedSessions {
    pub fn new(settings: DataLayerSettings, key: Key) -> NamedSessions {
        NamedSessions {
            settings,
            key,
            ..NamedSessions::default()
        }
    }

    /// Opens a named session for `caller`: a new upstream session, initialized with `init`
    /// (the client's `initialize` params, or ones standing for a modern client).
    pub async fn open(
        &self,
        registry: &Arc<Registry>,
        caller: &Caller,
        kind: LayerKind,
        init: Value,
    ) -> Result<NamedSession, SessionError> {
        let principal = caller.principal().clone();
        self.reserve(registry, &principal)?;
        let (session, initialized) = open_initialized(registry, caller, init).await?;
        let state = self.key.tag(&state_parts(session.id(), &principal));
        session.set_layer(Layer {
            kind,
            state,
            idle_ttl: self.settings.idle_ttl,
            deadline: crate::base::clock::from_now(self.settings.lifetime),
        });
        registry
            .correlate(
                &record_key(session.id()),
                &session,
                &initialized.result.to_string(),
            )
            .await;
        session.store_synced().await;
        self.initialized
            .insert(session.id().to_owned(), initialized.clone());
        self.opened
            .entry(principal)
            .or_default()
            .push(session.id().to_owned());
        Ok(NamedSession {
            session,
            initialized,
        })
    }

    /// Counts a new named session against its principal's bound, forgetting the ended ones.
    fn reserve(&self, registry: &Arc<Registry>, principal: &Principal) -> Result<(), SessionError> {
        self.sweep(registry);
        let mut opened = self.opened.entry(principal.clone()).or_default();
        opened.retain(|id| {
            let held = registry.holds(id);
            if !held {
                self.initialized.remove(id);
            }
            held
        });
        if opened.len() >= self.settings.max_per_principal {
            return Err(SessionError::TooManyNamed(self.settings.max_per_principal));
        }
        Ok(())
    }

    /// Forgets the principals none of whose sessions is held here any more, whenever the table
    /// has doubled since it was last swept: principals that are gone cost nothing.
    fn sweep(&self, registry: &Registry) {
        let swept_at = self.swept_at.load(Ordering::Relaxed);
        if self.opened.len() < (2 * swept_at).max(SWEEP_FLOOR) {
            return;
        }
        self.opened.retain(|_, ids| {
            ids.retain(|id| registry.holds(id));
            !ids.is_empty()
        });
        self.initialized.retain(|id, _| registry.holds(id));
        self.swept_at.store(self.opened.len(), Ordering::Relaxed);
    }

    /// The named session `id` of `principal`, of `kind`, if it still serves: one that is
    /// unknown, another principal's, of the other kind, expired, or whose server died is not
    /// found (and a dead one is ended). A `state` the proxy did not issue for it is refused
    /// before anything is looked up (compared in constant time).
    pub async fn resolve(
        &self,
        registry: &Arc<Registry>,
        caller: &Caller,
        id: &str,
        state: Option<&str>,
        kind: LayerKind,
        correlation: &PrincipalSessions,
    ) -> Result<NamedSession, SessionError> {
        let principal = caller.principal();
        let not_found = || SessionError::NamedNotFound(id.to_owned());
        if state.is_some_and(|state| !self.key.verify_tag(&state_parts(id, principal), state)) {
            return Err(not_found());
        }
        let session = registry.find(id, caller).await?.ok_or_else(not_found)?;
        let Some(layer) = session.layer().filter(|layer| layer.kind == kind) else {
            return Err(not_found());
        };
        // Past its lifetime or its own idle TTL (the argument is for sessions without a layer).
        let over = session.expired(Instant::now(), layer.idle_ttl);
        if over || session.ended.is_cancelled() || session.upstream_failed() {
            let why = match over {
                true => EndReason::Idle,
                false => EndReason::ServerGone,
            };
            registry.end(id, why);
            return Err(not_found());
        }
        let initialized = self
            .initialized_of(registry, correlation, &session, caller)
            .await;
        Ok(NamedSession {
            session,
            initialized,
        })
    }

    /// The data-layer session a cookie names: its `state` is required (the earlier drafts'
    /// cookie has none, and its session is bound to its principal alone).
    pub async fn resolve_cookie(
        &self,
        registry: &Arc<Registry>,
        caller: &Caller,
        cookie: NamedBy<'_>,
        correlation: &PrincipalSessions,
    ) -> Result<NamedSession, SessionError> {
        let (id, state) = (cookie.session_id, cookie.state);
        if state.is_none() && !cookie.draft {
            return Err(SessionError::NamedNotFound(id.to_owned()));
        }
        self.resolve(registry, caller, id, state, LayerKind::Session, correlation)
            .await
    }

    /// Ends a named session (found with `resolve`).
    pub fn close(&self, registry: &Registry, named: NamedSession) {
        let id = named.session.id();
        registry.end(id, EndReason::Deleted);
        self.initialized.remove(id);
        self.opened
            .remove_if_mut(named.session.principal(), |_, ids| {
                ids.retain(|opened| opened != id);
                ids.is_empty()
            });
    }

    /// What the server of a named session said at `initialize`: as opened here, else as the
    /// shared store recorded it, else the newest this server said.
    async fn initialized_of(
        &self,
        registry: &Registry,
        correlation: &PrincipalSessions,
        session: &Session,
        caller: &Caller,
    ) -> Arc<Initialized> {
        if let Some(found) = self.initialized.get(session.id()) {
            return found.clone();
        }
        if let Ok(Some((_, recorded))) =
            registry.correlated(&record_key(session.id()), caller).await
        {
            if let Ok(result) = serde_json::from_str(&recorded) {
                let initialized = Arc::new(Initialized::new(result));
                self.initialized
                    .insert(session.id().to_owned(), initialized.clone());
                return initialized;
            }
        }
        correlation.newest().unwrap_or_default()
    }

    /// The sessions `caller`'s principal opened here that still wait for the client's answer to
    /// the server's request `id` (a legacy client answers in its transport session).
    pub async fn awaiting_answer(
        &self,
        registry: &Arc<Registry>,
        caller: &Caller,
        id: &Value,
    ) -> Option<Arc<Session>> {
        let opened = self.opened.get(caller.principal())?.clone();
        for session_id in opened {
            if let Ok(Some(session)) = registry.find(&session_id, caller).await {
                if session.awaits_answer(id) {
                    return Some(session);
                }
            }
        }
        None
    }
}

/// What the `state` of named session `id` signs: a tag only this proxy (or a replica sharing
/// its secret) can make, binding the id to its principal.
fn state_parts<'a>(id: &'a str, principal: &'a Principal) -> [&'a str; 2] {
    [id, principal.as_str()]
}

/// Where the shared store keeps a named session's `initialize` result.
fn record_key(id: &str) -> String {
    format!("layer:{id}")
}
