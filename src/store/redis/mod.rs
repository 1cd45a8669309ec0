//! The Redis store. Keys, under the configured namespace `ns` and the served server's name
//! (`default` for `/mcp`):
//!
//! - `ns:node:<node>`: a replica's internal base URL, expiring `owner_timeout` after its last
//!   heartbeat;
//! - `ns:<server>:session:<id>`: hash, the session record (owner, principal, shape, numbered,
//!   version, init, next_stream, evicted, upstream), expiring after the idle TTL;
//! - `ns:<server>:subs:<id>`: set, the URIs the session is subscribed to, each added and
//!   removed as it changes (never the whole set again);
//! - `ns:<server>:log:<id>`: stream, the event log (entry id `<seq>-0`, fields `k` stream key,
//!   `t` terminal, `p` payload, `c` coalesce key when it has one), trimmed to the window;
//! - `ns:<server>:inflight:<id>`: hash, request stream → the client's request id, for requests
//!   the owner has not answered yet (a replica taking over answers them with an error);
//! - `ns:<server>:correlated:<digest>`: hash (`session`, `initialized`), the session serving a
//!   2026-07-28 principal's requests (digest of the principal and its capabilities), so every
//!   replica serves them from the same one; expiring after the idle TTL.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisResult, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

mod follower;
mod timed;
mod writer;

pub use follower::LogFollower;

use super::{Backlog, Mirror, Queued, Record, StoreError, StoreResult};
use crate::event::{EventId, Logged};
use crate::keys::Key;
use crate::metrics::StoreMetrics;

/// The longest leaving waits for Redis (for the writes, then for the key to be deleted).
const LEAVE_PATIENCE: Duration = Duration::from_secs(2);

/// What a replica needs to share sessions through Redis.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// `redis://host:port/db`.
    pub url: String,
    /// This replica's name (part of the session ids it mints).
    pub node_id: String,
    /// The base URL the other replicas reach this one at.
    pub advertise: String,
    /// Signs and checks the replicas' internal requests to each other.
    pub hop_key: Key,
    /// Prefix of every Redis key.
    pub namespace: String,
    pub heartbeat: Duration,
    /// A replica silent for this long is dead: its sessions are taken over.
    pub owner_timeout: Duration,
    /// How long an idle session lives.
    pub idle_ttl: Duration,
    /// How long the writer waits for more ops before a round trip.
    pub write_delay: Duration,
    /// Ops queued for the writer at most before new work, and the servers' messages, wait.
    pub max_write_queue: usize,
}

pub struct RedisStore {
    client: redis::Client,
    connection: ConnectionManager,
    pub node_id: String,
    /// The base URL the other replicas reach this one at.
    pub advertise: String,
    pub hop_key: Key,
    namespace: String,
    pub heartbeat: Duration,
    pub owner_timeout: Duration,
    /// How long a session's keys live without activity.
    ttl: Duration,
    /// How long the writer waits for more ops before a round trip.
    write_delay: Duration,
    healthy: AtomicBool,
    /// Bumped each time Redis answers again after an outage: owners then write their sessions
    /// again (a restarted Redis may have lost them).
    recovered: tokio::sync::watch::Sender<u64>,
    ops: mpsc::UnboundedSender<Queued>,
    backlog: Arc<Backlog>,
    metrics: Arc<StoreMetrics>,
    /// Cancelled by `leave`: the heartbeat stops and deletes this replica's key.
    leaving: CancellationToken,
    /// Cancelled once that key is deleted.
    left: CancellationToken,
}

impl RedisStore {
    /// Connects (a clear error if Redis cannot be reached), registers this replica and starts
    /// the heartbeat (until `leave`) and the writer.
    pub async fn connect(
        settings: RedisSettings,
        metrics: Arc<StoreMetrics>,
    ) -> anyhow::Result<Arc<RedisStore>> {
        let url = settings.url.as_str();
        let shown = crate::redact::url(url);
        let client = redis::Client::open(url).with_context(|| format!("store: {shown:?}"))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let mut connection = tokio::time::timeout(
            Duration::from_secs(5),
            client.get_connection_manager_with_config(config),
        )
        .await
        .map_err(|_| anyhow::anyhow!("no answer within 5 s"))
        .and_then(|c| c.map_err(anyhow::Error::from))
        .with_context(|| format!("cannot reach the Redis store at {shown}"))?;
        let _: String = redis::cmd("PING")
            .query_async(&mut connection)
            .await
            .with_context(|| format!("cannot reach the Redis store at {shown}"))?;
        let (ops, queue) = mpsc::unbounded_channel();
        let store = Arc::new(RedisStore {
            client,
            connection,
            node_id: settings.node_id.clone(),
            advertise: settings.advertise.trim_end_matches('/').to_owned(),
            hop_key: settings.hop_key.clone(),
            namespace: settings.namespace.clone(),
            heartbeat: settings.heartbeat,
            owner_timeout: settings.owner_timeout,
            ttl: settings.idle_ttl + settings.owner_timeout,
            write_delay: settings.write_delay,
            healthy: AtomicBool::new(true),
            recovered: tokio::sync::watch::channel(0).0,
            ops,
            backlog: Arc::new(Backlog::new(
                settings.max_write_queue,
                Some(metrics.clone()),
            )),
            metrics,
            leaving: CancellationToken::new(),
            left: CancellationToken::new(),
        });
        store
            .beat()
            .await
            .context("cannot register this replica in Redis")?;
        store.metrics.up.set(1);
        info!(node = %store.node_id, advertise = %store.advertise, "joined the replicas sharing {shown}");
        tokio::spawn(store.clone().run_heartbeat());
        tokio::spawn(store.clone().run_writer(queue));
        Ok(store)
    }

    /// The shared connection, its round trips counted.
    fn timed(&self) -> timed::Timed {
        timed::Timed {
            connection: self.connection.clone(),
            metrics: self.metrics.clone(),
        }
    }

    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    fn set_health(&self, up: bool) {
        if self.healthy.swap(up, Ordering::AcqRel) != up {
            match up {
                true => {
                    info!("the Redis store is reachable again: writing this replica's sessions");
                    self.recovered.send_modify(|n| *n += 1);
                }
                false => warn!("the Redis store is unreachable: new sessions are refused"),
            }
        }
        self.metrics.up.set(i64::from(up));
    }

    /// A read that failed without saying anything of Redis's health (a blocking read, say).
    pub(super) fn note_error(&self, what: &str, error: &redis::RedisError) {
        self.metrics.errors.inc();
        warn!(%error, "Redis {what} failed");
    }

    pub(super) fn failed(&self, what: &str, error: &redis::RedisError) {
        self.metrics.errors.inc();
        warn!(%error, "Redis {what} failed");
        self.set_health(false);
    }

    /// Changes each time Redis is back after an outage.
    pub fn recoveries(&self) -> tokio::sync::watch::Receiver<u64> {
        self.recovered.subscribe()
    }

    pub fn mirror(&self, server: &str, session_id: &str) -> Mirror {
        Mirror::new(server, session_id, self.ops.clone(), self.backlog.clone())
    }

    /// What the owners queued and the writer has not written yet.
    pub fn backlog(&self) -> &Arc<Backlog> {
        &self.backlog
    }

    pub(super) fn session_key(&self, server: &str, id: &str) -> String {
        format!("{}:{server}:session:{id}", self.namespace)
    }

    pub(super) fn log_key(&self, server: &str, id: &str) -> String {
        format!("{}:{server}:log:{id}", self.namespace)
    }

    pub(super) fn inflight_key(&self, server: &str, id: &str) -> String {
        format!("{}:{server}:inflight:{id}", self.namespace)
    }

    pub(super) fn subs_key(&self, server: &str, id: &str) -> String {
        format!("{}:{server}:subs:{id}", self.namespace)
    }

    pub(super) fn node_key(&self, node: &str) -> String {
        format!("{}:node:{node}", self.namespace)
    }

    async fn beat(&self) -> RedisResult<()> {
        let mut connection = self.timed();
        redis::cmd("SET")
            .arg(self.node_key(&self.node_id))
            .arg(&self.advertise)
            .arg("PX")
            .arg(self.owner_timeout.as_millis() as u64)
            .query_async(&mut connection)
            .await
    }

    async fn run_heartbeat(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(self.heartbeat);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => match self.beat().await {
                    Ok(()) => self.set_health(true),
                    Err(error) => self.failed("heartbeat", &error),
                },
                () = self.leaving.cancelled() => break,
            }
        }
        let mut connection = self.timed();
        let _: RedisResult<()> = redis::cmd("DEL")
            .arg(self.node_key(&self.node_id))
            .query_async(&mut connection)
            .await;
        self.left.cancel();
    }

    /// Leaves the replicas: what the owners queued is written, then this replica's key is
    /// deleted, so the others take its sessions over at once, from a complete log. Bounded:
    /// with Redis away, the others take them over when the key expires.
    pub async fn leave(&self) {
        if !self.mirror("", "").synced(LEAVE_PATIENCE).await {
            warn!("leaving with writes Redis has not taken");
        }
        self.leaving.cancel();
        let _ = tokio::time::timeout(LEAVE_PATIENCE, self.left.cancelled()).await;
    }

    /// Deletes session `id`'s keys now (its owner ended it).
    pub async fn forget(&self, server: &str, id: &str) -> StoreResult<()> {
        let mut connection = self.timed();
        redis::cmd("DEL")
            .arg(self.session_key(server, id))
            .arg(self.log_key(server, id))
            .arg(self.inflight_key(server, id))
            .arg(self.subs_key(server, id))
            .query_async(&mut connection)
            .await
            .map_err(StoreError::from)
    }

    /// The record of session `id`, if any replica holds it; without its subscriptions
    /// (`subscriptions` reads those).
    pub async fn record(&self, server: &str, id: &str) -> StoreResult<Option<Record>> {
        let mut connection = self.timed();
        let fields: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.session_key(server, id))
            .query_async(&mut connection)
            .await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let number = |name: &str| fields.get(name).and_then(|v| v.parse().ok()).unwrap_or(0);
        Ok(Some(Record {
            owner: fields.get("owner").cloned().unwrap_or_default(),
            principal: fields.get("principal").cloned().unwrap_or_default(),
            shape: fields.get("shape").cloned().unwrap_or_default(),
            numbered: fields.get("numbered").is_some_and(|v| v == "1"),
            version: fields.get("version").cloned(),
            init: fields.get("init").cloned(),
            subs: None,
            next_stream: number("next_stream"),
            evicted: number("evicted"),
            upstream: fields.get("upstream").cloned(),
            layer: fields.get("layer").cloned(),
        }))
    }

    /// The resources session `id` is subscribed to (a record written by an earlier version of
    /// the proxy holds them in its `subs` field, read too).
    pub async fn subscriptions(&self, server: &str, id: &str) -> StoreResult<BTreeSet<String>> {
        let mut connection = self.timed();
        let (mut uris, earlier): (BTreeSet<String>, Option<String>) = redis::pipe()
            .cmd("SMEMBERS")
            .arg(self.subs_key(server, id))
            .cmd("HGET")
            .arg(self.session_key(server, id))
            .arg("subs")
            .query_async(&mut connection)
            .await?;
        if let Some(earlier) = earlier {
            uris.extend(serde_json::from_str::<Vec<String>>(&earlier).unwrap_or_default());
        }
        Ok(uris)
    }

    /// The session serving 2026-07-28 requests under correlation `key`, and its server's
    /// `initialize` result.
    pub async fn correlated(
        &self,
        server: &str,
        key: &str,
    ) -> StoreResult<Option<(String, String)>> {
        let mut connection = self.timed();
        let fields: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.correlation_key(server, key))
            .query_async(&mut connection)
            .await?;
        Ok(match (fields.get("session"), fields.get("initialized")) {
            (Some(session), Some(initialized)) => Some((session.clone(), initialized.clone())),
            _ => None,
        })
    }

    /// Records that `session` now serves correlation `key`.
    pub async fn correlate(
        &self,
        server: &str,
        key: &str,
        session: &str,
        initialized: &str,
    ) -> StoreResult<()> {
        let mut connection = self.timed();
        let name = self.correlation_key(server, key);
        redis::pipe()
            .cmd("HSET")
            .arg(&name)
            .arg("session")
            .arg(session)
            .arg("initialized")
            .arg(initialized)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&name)
            .arg(self.ttl.as_millis() as u64)
            .ignore()
            .query_async::<()>(&mut connection)
            .await
            .map_err(StoreError::from)
    }

    /// Spends one-use `token` for `ttl`: true for the first replica to spend it (`SET NX`, so
    /// of several trying at once, one wins).
    pub async fn spend(&self, server: &str, token: &str, ttl: Duration) -> StoreResult<bool> {
        let mut connection = self.timed();
        let set: Option<String> = redis::cmd("SET")
            .arg(format!("{}:{server}:spent:{token}", self.namespace))
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis().clamp(1, u64::MAX as u128) as u64)
            .query_async(&mut connection)
            .await?;
        Ok(set.is_some())
    }

    fn correlation_key(&self, server: &str, key: &str) -> String {
        format!("{}:{server}:correlated:{key}", self.namespace)
    }

    /// The internal URL of a live replica; `None` once its heartbeat has lapsed.
    pub async fn node_url(&self, node: &str) -> StoreResult<Option<String>> {
        let mut connection = self.timed();
        redis::cmd("GET")
            .arg(self.node_key(node))
            .query_async(&mut connection)
            .await
            .map_err(StoreError::from)
    }

    /// Makes this replica the owner of session `id` if `previous` still is (atomically: of
    /// several replicas trying, one wins).
    pub async fn claim(&self, server: &str, id: &str, previous: &str) -> StoreResult<bool> {
        self.hand_over(server, id, previous, &self.node_id).await
    }

    /// Gives session `id` back to `previous` if this replica still owns it: a claim it could
    /// not honour, so that another replica may take the session over.
    pub async fn unclaim(&self, server: &str, id: &str, previous: &str) -> StoreResult<bool> {
        self.hand_over(server, id, &self.node_id, previous).await
    }

    /// Makes `to` the owner of session `id` if `from` still is; whether it did.
    async fn hand_over(&self, server: &str, id: &str, from: &str, to: &str) -> StoreResult<bool> {
        let mut connection = self.timed();
        let done: i64 = redis::cmd("EVAL")
            .arg(
                "if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then \
                   redis.call('HSET', KEYS[1], 'owner', ARGV[2]) return 1 \
                 else return 0 end",
            )
            .arg(1)
            .arg(self.session_key(server, id))
            .arg(from)
            .arg(to)
            .query_async(&mut connection)
            .await?;
        Ok(done == 1)
    }

    /// The logged messages of session `id` after `after`, oldest first.
    pub async fn read_log(&self, server: &str, id: &str, after: u64) -> StoreResult<Vec<Logged>> {
        let mut connection = self.timed();
        let reply: Value = redis::cmd("XRANGE")
            .arg(self.log_key(server, id))
            .arg(format!("{}-0", after + 1))
            .arg("+")
            .query_async(&mut connection)
            .await?;
        Ok(parse_entries(&reply))
    }

    /// Requests in flight at the owner: request stream → the client's request id (JSON).
    pub async fn inflight(&self, server: &str, id: &str) -> StoreResult<HashMap<u64, String>> {
        let mut connection = self.timed();
        let fields: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.inflight_key(server, id))
            .query_async(&mut connection)
            .await?;
        Ok(fields
            .into_iter()
            .filter_map(|(k, v)| Some((k.parse().ok()?, v)))
            .collect())
    }
}

/// XRANGE / XREAD entries: `[[id, [field, value, …]], …]`.
pub(super) fn parse_entries(reply: &Value) -> Vec<Logged> {
    let Value::Array(entries) = reply else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            let Value::Array(parts) = entry else {
                return None;
            };
            let id = text(parts.first()?)?;
            let seq = id.split('-').next()?.parse().ok()?;
            let Value::Array(fields) = parts.get(1)? else {
                return None;
            };
            let mut stream = None;
            let mut terminal = false;
            let mut coalesce = None;
            let mut payload = Bytes::new();
            for pair in fields.chunks(2) {
                let [name, value] = pair else { continue };
                match text(name)?.as_str() {
                    "k" => {
                        stream = format!("{}.0", text(value)?)
                            .parse::<EventId>()
                            .ok()
                            .map(|id| id.stream)
                    }
                    "t" => terminal = text(value)? == "1",
                    "c" => coalesce = text(value),
                    "p" => {
                        if let Value::BulkString(bytes) = value {
                            payload = Bytes::copy_from_slice(bytes);
                        }
                    }
                    _ => {}
                }
            }
            Some(Logged {
                seq,
                stream: stream?,
                terminal,
                coalesce,
                payload,
            })
        })
        .collect()
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}
