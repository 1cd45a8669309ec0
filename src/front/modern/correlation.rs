//! Which upstream session serves a 2026-07-28 request (no client names one): by default one per
//! (principal, declared client capabilities), opened on first use with an `initialize` built
//! from the request's `clientInfo` and capabilities, idle-expired like any session and opened
//! again when it is gone. A request with no principal gets a session of its own that ends with
//! it (before a stdio server with a child per session, one prepared ahead in `pool`), unless
//! anonymous requests are configured to share one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use dashmap::DashMap;
use http::HeaderValue;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::checks::RequestMeta;
use crate::base::ids::Principal;
use crate::front::rejection::Rejection;
use crate::session::{Registry, Session, Shape};
use crate::wire::jsonrpc::Message;

/// The legacy revision the proxy speaks to its servers for modern clients.
const UPSTREAM_VERSION: &str = "2025-11-25";

pub use crate::session::settings::Anonymous;

/// The upstream sessions modern requests are served by.
#[derive(Default)]
pub struct Correlation {
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

/// The newest `initialize` result of a server, shared with what opens sessions for it.
pub type Newest = Arc<Mutex<Option<Arc<Initialized>>>>;

#[derive(Clone)]
struct Entry {
    session_id: String,
    initialized: Arc<Initialized>,
}

/// What a server said at `initialize`, with its identity ready to be written into results.
#[derive(Default)]
pub struct Initialized {
    pub result: Value,
    /// `serverInfo`, as text.
    pub server_info: Option<Box<RawValue>>,
}

impl Initialized {
    pub fn new(result: Value) -> Initialized {
        let server_info = result
            .get("serverInfo")
            .and_then(|info| serde_json::value::to_raw_value(info).ok());
        Initialized {
            result,
            server_info,
        }
    }
}

/// A session serving a modern request, with the server's `initialize` result.
pub struct Correlated {
    pub session: Arc<Session>,
    pub initialized: Arc<Initialized>,
    /// What becomes of a session serving this request alone once it is over (when dropped).
    pub ending: Option<Box<dyn Ending>>,
}

/// What becomes of a session serving one request alone: done when dropped, once the request is
/// over (it ends, or goes back to the pool it was lent from).
pub trait Ending: Send + Sync {
    /// The request goes on past this response (it waits for the client's input): the session
    /// is ended by whatever finishes it.
    fn disarm(self: Box<Self>);
}

/// Ends a per-request session once its request is over.
pub struct EndOnDrop {
    registry: Arc<Registry>,
    session_id: String,
    armed: bool,
}

impl EndOnDrop {
    /// Ends session `session_id` when dropped, unless disarmed.
    pub fn armed(registry: Arc<Registry>, session_id: String) -> Box<dyn Ending> {
        Box::new(EndOnDrop {
            registry,
            session_id,
            armed: true,
        })
    }
}

impl Ending for EndOnDrop {
    fn disarm(mut self: Box<Self>) {
        self.armed = false;
    }
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.registry.end(&self.session_id);
        }
    }
}

impl Correlation {
    /// The session that serves a request of `principal` declaring `meta`'s capabilities.
    pub async fn session(
        &self,
        registry: &Arc<Registry>,
        principal: Principal,
        meta: &RequestMeta,
        credential: Option<HeaderValue>,
        anonymous: Anonymous,
    ) -> Result<Correlated, Rejection> {
        if principal == Principal::anonymous() && anonymous == Anonymous::PerRequest {
            let (session, initialized) = self.open(registry, principal, meta, credential).await?;
            let ending = Some(EndOnDrop::armed(registry.clone(), session.id().to_owned()));
            return Ok(Correlated {
                session,
                initialized,
                ending,
            });
        }
        let key = (principal.clone(), canonical(&meta.capabilities));
        if let Some(found) = self.live(registry, &key, credential.as_ref()).await? {
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
        let opened = self.live_or_open(registry, &key, meta, credential).await;
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
        key: &Key,
        meta: &RequestMeta,
        credential: Option<HeaderValue>,
    ) -> Result<(Arc<Session>, Arc<Initialized>), Rejection> {
        if let Some(found) = self.live(registry, key, credential.as_ref()).await? {
            return Ok((found.session, found.initialized));
        }
        let principal = &key.0;
        let shared = shared_key(key);
        let recorded = registry
            .correlated(&shared, principal, credential.as_ref())
            .await
            .map_err(|e| Rejection::session(&e))?;
        if let Some((session, initialized)) = recorded.filter(|(session, _)| usable(session)) {
            let initialized = serde_json::from_str(&initialized).unwrap_or_default();
            return Ok((session, Arc::new(Initialized::new(initialized))));
        }
        let (session, initialized) = self
            .open(registry, principal.clone(), meta, credential)
            .await?;
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
        principal: &Principal,
        meta: &RequestMeta,
    ) -> Arc<Initialized> {
        let here = self
            .by_key
            .iter()
            .find(|entry| entry.session_id == session.id())
            .map(|entry| entry.initialized.clone());
        if let Some(initialized) = here {
            return initialized;
        }
        let shared = shared_key(&(principal.clone(), canonical(&meta.capabilities)));
        if let Ok(Some((recorded, initialized))) =
            registry.correlated(&shared, principal, None).await
        {
            if recorded.id() == session.id() {
                let initialized = serde_json::from_str(&initialized).unwrap_or_default();
                return Arc::new(Initialized::new(initialized));
            }
        }
        self.newest().unwrap_or_default()
    }

    /// The session this replica correlated `key` with, wherever it lives now, if it serves.
    async fn live(
        &self,
        registry: &Registry,
        key: &Key,
        credential: Option<&HeaderValue>,
    ) -> Result<Option<Correlated>, Rejection> {
        let Some(entry) = self.by_key.get(key).map(|e| e.clone()) else {
            return Ok(None);
        };
        let found = registry
            .find(&entry.session_id, &key.0, credential)
            .await
            .map_err(|e| Rejection::session(&e))?;
        match found {
            Some(session) if usable(&session) => Ok(Some(Correlated {
                session,
                initialized: entry.initialized,
                ending: None,
            })),
            found => {
                // Gone, or its server died: the next request opens another, transparently.
                if found.is_some() {
                    registry.end(&entry.session_id);
                }
                self.by_key.remove(key);
                Ok(None)
            }
        }
    }

    /// Creates a session and initializes its server as a legacy client would.
    pub(super) async fn open(
        &self,
        registry: &Arc<Registry>,
        principal: Principal,
        meta: &RequestMeta,
        credential: Option<HeaderValue>,
    ) -> Result<(Arc<Session>, Arc<Initialized>), Rejection> {
        let params = initialize_params(meta);
        open_with(registry, &self.newest, principal, params, credential).await
    }
}

/// Creates a session, initializes its server with `params` as a legacy client would, then
/// records the result as the server's newest. The session is ended unless its server is
/// initialized: a refusal, or the client gone meanwhile.
pub(super) async fn open_with(
    registry: &Arc<Registry>,
    newest: &Newest,
    principal: Principal,
    params: Value,
    credential: Option<HeaderValue>,
) -> Result<(Arc<Session>, Arc<Initialized>), Rejection> {
    let session = registry
        .create(principal, Shape::Streams, credential)
        .await
        .map_err(|e| Rejection::session(&e))?;
    let unopened = EndOnDrop::armed(registry.clone(), session.id().to_owned());
    let initialized = Arc::new(Initialized::new(
        initialize_with(registry, &session, params).await?,
    ));
    unopened.disarm();
    *newest.lock().unwrap_or_else(|e| e.into_inner()) = Some(initialized.clone());
    Ok((session, initialized))
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

/// Whether a found session can serve: not ended, its server alive.
pub(super) fn usable(session: &Session) -> bool {
    !session.ended.is_cancelled() && !session.upstream_failed()
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

/// The `initialize` params that stand for a modern request's client and capabilities.
pub fn initialize_params(meta: &RequestMeta) -> Value {
    client_params(&meta.capabilities, meta.client_info.as_ref())
}

/// The `initialize` params of a client declaring `capabilities`: `client_info`, else the
/// proxy's own.
pub fn client_params(capabilities: &Map<String, Value>, client_info: Option<&Value>) -> Value {
    let client_info = client_info.cloned().unwrap_or_else(
        || json!({ "name": "mcp-session-proxy", "version": env!("CARGO_PKG_VERSION") }),
    );
    json!({
        "protocolVersion": UPSTREAM_VERSION,
        "capabilities": capabilities,
        "clientInfo": client_info,
    })
}

/// `initialize` with `params`, then `initialized`: the session's handshake, made as its
/// client would; the result.
pub async fn initialize_with(
    registry: &Registry,
    session: &Arc<Session>,
    params: Value,
) -> Result<Value, Rejection> {
    let params = serde_json::value::to_raw_value(&params).ok();
    session
        .initialize_as_client(registry, params)
        .await
        .map_err(|e| Rejection::session(&e))
}

/// Sends a request of the proxy's own through the session and waits for its answer.
pub async fn ask(
    registry: &Registry,
    session: &Arc<Session>,
    request: Value,
) -> Result<Value, Rejection> {
    let message = Message::parse(Bytes::from(request.to_string()))
        .map_err(|e| Rejection::bad_request(e.to_string()))?;
    registry
        .ask(session, message)
        .await
        .map_err(|e| Rejection::session(&e))
}

/// Capabilities as one string, the same however the client ordered them (a JSON object's keys
/// come out sorted).
pub(super) fn canonical(capabilities: &Map<String, Value>) -> String {
    serde_json::to_string(capabilities).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_in_any_order_are_one_key() {
        let a: Map<String, Value> =
            serde_json::from_str(r#"{"sampling":{},"elicitation":{"form":{},"url":{}}}"#).unwrap();
        let b: Map<String, Value> =
            serde_json::from_str(r#"{"elicitation":{"url":{},"form":{}},"sampling":{}}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
    }

    #[test]
    fn bindings_of_sessions_gone_are_dropped_once_the_table_doubles() {
        let correlation = Correlation::default();
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
