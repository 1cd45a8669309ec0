//! Sessions a client names in its messages, each its own upstream session (its own child under
//! per-session isolation): data-layer sessions (seed `002`: `sessions/create`, a cookie in
//! `_meta`, `sessions/delete`, `messages/listen`) and state handles (SEP-2567: a tool opens a
//! handle, tools take it as an argument). `cookie` (how a request names one),
//! `methods` (the `sessions/*` answers), `listen` (`messages/listen`), `handles` (the tools).
//! What a named session is lives in `session::layer`; this is how requests find it.

pub mod cookie;
pub mod handles;
pub mod legacy;
pub mod listen;
pub mod methods;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use http::HeaderValue;
use serde_json::Value;
use tokio::time::Instant;

use super::modern::correlation::{initialize_with, EndOnDrop, Initialized};
use super::rejection::Rejection;
use super::App;
use crate::base::ids::Principal;
use crate::base::keys::Key;
use crate::session::layer::{Layer, LayerKind};
use crate::session::{Session, Shape};
use crate::wire::jsonrpc::Message;
use crate::wire::methods::{is_session_bound, TOOLS_CALL};

pub use crate::session::settings::DataLayerSettings;

/// The named sessions of a served server, as this replica knows them.
#[derive(Default)]
pub struct DataLayer {
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

/// A named session found for a request, with what its server said at `initialize`.
pub struct Named {
    pub session: Arc<Session>,
    pub initialized: Arc<Initialized>,
}

impl DataLayer {
    pub fn new(settings: DataLayerSettings, key: Key) -> DataLayer {
        DataLayer {
            settings,
            key,
            ..DataLayer::default()
        }
    }

    /// Whether `request` (naming no data-layer session) is refused for want of one here: a call
    /// of a handle tool, or within a handle, is within a session of its own.
    pub fn requires_session(&self, request: &Message) -> bool {
        let method = request.method().unwrap_or_default();
        self.settings.require_session
            && is_session_bound(method)
            && !(self.settings.handles
                && method == TOOLS_CALL
                && !matches!(handles::classify(request), handles::HandleCall::Plain))
    }

    /// Opens a named session for `principal`: a new upstream session, initialized with
    /// `init` (the client's `initialize` params, or ones standing for a modern client).
    pub async fn open(
        &self,
        app: &App,
        principal: Principal,
        kind: LayerKind,
        init: Value,
        credential: Option<HeaderValue>,
    ) -> Result<Named, Rejection> {
        self.reserve(app, &principal)?;
        let session = app
            .registry
            .create(principal.clone(), Shape::Streams, credential)
            .await
            .map_err(|e| Rejection::session(&e))?;
        // Ended unless its server is initialized: a refusal, or the client gone meanwhile.
        let unopened = EndOnDrop::armed(app.registry.clone(), session.id().to_owned());
        let initialized = Arc::new(Initialized::new(
            initialize_with(&app.registry, &session, init).await?,
        ));
        unopened.disarm();
        let state = self.key.tag(&state_parts(session.id(), &principal));
        session.set_layer(Layer {
            kind,
            state,
            idle_ttl: self.settings.idle_ttl,
            deadline: crate::base::clock::from_now(self.settings.lifetime),
        });
        app.registry
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
        Ok(Named {
            session,
            initialized,
        })
    }

    /// Counts a new named session against its principal's bound, forgetting the ended ones.
    fn reserve(&self, app: &App, principal: &Principal) -> Result<(), Rejection> {
        self.sweep(app);
        let mut opened = self.opened.entry(principal.clone()).or_default();
        opened.retain(|id| {
            let held = app.registry.holds(id);
            if !held {
                self.initialized.remove(id);
            }
            held
        });
        if opened.len() >= self.settings.max_per_principal {
            return Err(Rejection::too_many_data_sessions(
                self.settings.max_per_principal,
            ));
        }
        Ok(())
    }

    /// Forgets the principals none of whose sessions is held here any more, whenever the table
    /// has doubled since it was last swept: principals that are gone cost nothing.
    fn sweep(&self, app: &App) {
        let swept_at = self.swept_at.load(Ordering::Relaxed);
        if self.opened.len() < (2 * swept_at).max(SWEEP_FLOOR) {
            return;
        }
        self.opened.retain(|_, ids| {
            ids.retain(|id| app.registry.holds(id));
            !ids.is_empty()
        });
        self.initialized.retain(|id, _| app.registry.holds(id));
        self.swept_at.store(self.opened.len(), Ordering::Relaxed);
    }

    /// The named session `id` of `principal`, of `kind`, if it still serves: one that is
    /// unknown, another principal's, of the other kind, expired, or whose server died is not
    /// found (and a dead one is ended). A `state` the proxy did not issue for it is refused
    /// before anything is looked up (compared in constant time).
    pub async fn resolve(
        &self,
        app: &App,
        principal: &Principal,
        id: &str,
        state: Option<&str>,
        kind: LayerKind,
    ) -> Result<Named, Rejection> {
        let not_found = || Rejection::data_session_not_found(id);
        if state.is_some_and(|state| !self.key.verify_tag(&state_parts(id, principal), state)) {
            return Err(not_found());
        }
        let session = app
            .registry
            .find(id, principal, None)
            .await
            .map_err(|e| Rejection::session(&e))?
            .ok_or_else(not_found)?;
        let Some(layer) = session.layer().filter(|layer| layer.kind == kind) else {
            return Err(not_found());
        };
        // Past its lifetime or its own idle TTL (the argument is for sessions without a layer).
        let over = session.expired(Instant::now(), layer.idle_ttl);
        if over || session.ended.is_cancelled() || session.upstream_failed() {
            app.registry.end(id);
            return Err(not_found());
        }
        let initialized = self.initialized_of(app, &session, principal).await;
        Ok(Named {
            session,
            initialized,
        })
    }

    /// The data-layer session a cookie names: its `state` is required (the earlier drafts'
    /// cookie has none, and its session is bound to its principal alone).
    pub async fn resolve_cookie(
        &self,
        app: &App,
        principal: &Principal,
        cookie: &cookie::Cookie,
    ) -> Result<Named, Rejection> {
        let (id, state) = (&cookie.session_id, cookie.state.as_deref());
        if state.is_none() && !cookie.draft {
            return Err(Rejection::data_session_not_found(id));
        }
        self.resolve(app, principal, id, state, LayerKind::Session)
            .await
    }

    /// Ends a named session (found with `resolve`).
    pub fn close(&self, app: &App, named: Named) {
        let id = named.session.id();
        app.registry.end(id);
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
        app: &App,
        session: &Session,
        principal: &Principal,
    ) -> Arc<Initialized> {
        if let Some(found) = self.initialized.get(session.id()) {
            return found.clone();
        }
        if let Ok(Some((_, recorded))) = app
            .registry
            .correlated(&record_key(session.id()), principal, None)
            .await
        {
            if let Ok(result) = serde_json::from_str(&recorded) {
                let initialized = Arc::new(Initialized::new(result));
                self.initialized
                    .insert(session.id().to_owned(), initialized.clone());
                return initialized;
            }
        }
        app.modern.correlation.newest().unwrap_or_default()
    }

    /// The sessions `principal` opened here that still wait for the client's answer to the
    /// server's request `id` (a legacy client answers in its transport session).
    pub async fn awaiting_answer(
        &self,
        app: &App,
        principal: &Principal,
        id: &Value,
    ) -> Option<Arc<Session>> {
        let opened = self.opened.get(principal)?.clone();
        for session_id in opened {
            if let Ok(Some(session)) = app.registry.find(&session_id, principal, None).await {
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
