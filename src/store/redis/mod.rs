//! The Redis store. Keys, under the configured namespace `ns` and the served server's name
//! (`default` for `/mcp`):
//!
//! On a Redis Cluster, every key of one session carries its id as a hash tag (`…:session:{<id>}`,
//! so its record, log, requests and subscriptions share a slot and one script writes them),
//! the replicas' keys the namespace (`{ns}:node:<node>`, `{ns}:nodes`), and a principal's rate
//! buckets the principal; no command or script names keys of two slots.
//!
//! - `ns:node:<node>`: a replica's internal base URL, expiring `owner_timeout` after its last
//!   heartbeat;
//! - `ns:nodes`: set, the names of the replicas taking sessions (a leaving one hands its
//!   sessions to them), each checked against its `ns:node:<node>`;
//! - `ns:<server>:session:<id>`: hash, the session record (owner, epoch, confirmed, principal,
//!   shape, numbered, version, init, next_stream, evicted, upstream), expiring after the idle
//!   TTL. `epoch` is one more at every claim, in the script that changes `owner`, and every
//!   write an owner makes to the session's keys is a script that first checks it (`fenced`);
//! - `ns:<server>:subs:<id>`: set, the URIs the session is subscribed to, each added and
//!   removed as it changes (never the whole set again);
//! - `ns:<server>:log:<id>`: stream, the event log (entry id `<seq>-0`, fields `k` stream key,
//!   `t` terminal, `p` payload, `c` coalesce key when it has one), trimmed to the window;
//! - `ns:<server>:inflight:<id>`: hash, request stream → the client's request id, for requests
//!   the owner has not answered yet (a replica taking over answers them with an error);
//! - `ns:<server>:correlated:<digest>`: hash (`session`, `initialized`), the session serving a
//!   2026-07-28 principal's requests (digest of the principal and its capabilities), so every
//!   replica serves them from the same one; expiring after the idle TTL;
//! - `ns:<server>:principal:<principal>`: sorted set, the ids of a principal's sessions (the
//!   principal a digest), each scored with when its record expires, for
//!   `session.max_sessions_per_principal` across the replicas; living as long as the records of
//!   its sessions;
//! - `ns:<server>:spent:<tag>`: string, a 2026-07-28 `requestState` (by its signature) already
//!   used, expiring with it;
//! - `ns:<server>:rate:<bucket>`: string, when a rate-limit bucket is full again.
//!
//! Here: connecting, health and the key names. `writer` writes the owners' ops (through the
//! script of `fenced`), `replicas` keeps this replica's heartbeat and a session's owner,
//! `lease` says when an owner must confirm it still owns a session, `reads` reads a session back,
//! `follower` tails its log, `correlation` shares what 2026-07-28 requests need, `principals`
//! counts each principal's sessions, `rate` takes from the shared rate buckets.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use redis::aio::ConnectionManagerConfig;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

mod announcements;
mod cluster;
mod connect;
mod correlation;
mod fenced;
mod follower;
mod lease;
mod link;
mod principals;
mod rate;
mod reads;
mod replicas;
mod timed;
mod writer;

pub use connect::{StoreConnectError, StoreConnection};
pub use follower::LogFollower;
use link::Link;

use super::{Backlog, Deposed, Fence, Mirror, Queued, StoreError, StoreResult};
use crate::base::backlog::BacklogFigures;
use crate::base::keys::Key;
use crate::telemetry::metrics::StoreMetrics;

/// What a replica needs to share sessions through Redis.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// Where the store is (`redis://` or `rediss://`), the user and password, TLS.
    pub connection: StoreConnection,
    /// This replica's name (part of the session ids it mints).
    pub node_id: String,
    /// The base URL the other replicas reach this one at.
    pub advertise: String,
    /// How the other replicas are verified over https://, and what this one shows them.
    pub hop_tls: crate::tls::ClientTls,
    /// Signs and checks the replicas' internal requests to each other.
    pub hop_key: Key,
    /// Prefix of every Redis key.
    pub namespace: String,
    pub heartbeat: Duration,
    /// A replica silent for this long is dead: its sessions are taken over.
    pub owner_timeout: Duration,
    /// How long a request is held for a session whose owner cannot be reached.
    pub takeover_wait: Duration,
    /// How long an idle session lives.
    pub idle_ttl: Duration,
    /// How long the writer waits for more ops before a round trip.
    pub write_delay: Duration,
    /// Ops queued for the writer at most before new work, and the servers' messages, wait.
    pub max_write_queue: usize,
    /// The most bytes an answer to a hop may take (`crate::hop::max_answer_bytes`).
    pub max_hop_answer_bytes: usize,
}

pub struct RedisStore {
    /// The connection to the master, following it through a failover.
    link: Arc<Link>,
    /// Whether the store is a Redis Cluster (its keys hash-tagged).
    cluster: bool,
    pub node_id: String,
    /// The base URL the other replicas reach this one at.
    pub advertise: String,
    /// How the other replicas are verified over https://, and what this one shows them.
    pub hop_tls: crate::tls::ClientTls,
    pub hop_key: Key,
    /// The most bytes an answer to a hop may take, given or read.
    pub max_hop_answer_bytes: usize,
    namespace: String,
    pub heartbeat: Duration,
    pub owner_timeout: Duration,
    /// How long a request is held for a session whose owner cannot be reached.
    pub takeover_wait: Duration,
    /// How long a session's keys live without activity.
    ttl: Duration,
    /// How long the writer waits for more ops before a round trip.
    write_delay: Duration,
    healthy: AtomicBool,
    /// When Redis last answered again after an outage.
    back_at: std::sync::Mutex<Option<std::time::Instant>>,
    /// Bumped each time Redis answers again after an outage: owners then write their sessions
    /// again (a restarted Redis may have lost them).
    recovered: tokio::sync::watch::Sender<u64>,
    ops: mpsc::UnboundedSender<Queued>,
    backlog: Arc<Backlog>,
    metrics: Arc<StoreMetrics>,
    /// Cancelled by `leave`: the heartbeat stops and deletes this replica's key, and the
    /// Sentinels are no longer heard.
    leaving: CancellationToken,
    /// Cancelled once that key is deleted.
    left: CancellationToken,
    /// Set once this replica hands its sessions over: it is no longer among those taking them.
    handing_over: AtomicBool,
    /// When this replica must confirm it still owns a session before acting on it.
    lease: lease::Lease,
    /// Where sessions refused a write for a stale epoch are told of, per served server.
    deposals: std::sync::Mutex<HashMap<String, mpsc::UnboundedSender<Deposed>>>,
    /// The SHA-1 of the fenced write script, which every write round trip loads first.
    fenced_sha: String,
    /// The SHA-1 of the script scoring a session in its principal's set.
    count_sha: String,
}

impl RedisStore {
    /// Connects (a clear error if Redis cannot be reached), registers this replica and starts
    /// the heartbeat (until `leave`) and the writer.
    pub async fn connect(
        settings: RedisSettings,
        metrics: Arc<StoreMetrics>,
    ) -> anyhow::Result<Arc<RedisStore>> {
        let shown = settings.connection.shown().into_owned();
        let source = settings.connection.source()?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let leaving = CancellationToken::new();
        let opened = Link::open(source, config, leaving.child_token());
        let link = tokio::time::timeout(Duration::from_secs(5), opened)
            .await
            .map_err(|_| anyhow::anyhow!("no answer within 5 s"))
            .and_then(|c| c.map_err(anyhow::Error::from))
            .with_context(|| format!("cannot reach the Redis store at {shown}"))?;
        let mut first = timed::Timed {
            connection: link.current().connection,
            generation: 0,
            link: link.clone(),
            metrics: metrics.clone(),
        };
        let _: String = redis::cmd("PING")
            .query_async(&mut first)
            .await
            .with_context(|| format!("cannot reach the Redis store at {shown}"))?;
        let (ops, queue) = mpsc::unbounded_channel();
        let store = Arc::new(RedisStore {
            cluster: link.is_cluster(),
            link,
            node_id: settings.node_id.clone(),
            advertise: settings.advertise.trim_end_matches('/').to_owned(),
            hop_tls: settings.hop_tls.clone(),
            hop_key: settings.hop_key.clone(),
            max_hop_answer_bytes: settings.max_hop_answer_bytes,
            namespace: settings.namespace.clone(),
            heartbeat: settings.heartbeat,
            owner_timeout: settings.owner_timeout,
            takeover_wait: settings.takeover_wait,
            ttl: settings.idle_ttl + settings.owner_timeout,
            write_delay: settings.write_delay,
            healthy: AtomicBool::new(true),
            back_at: std::sync::Mutex::new(None),
            recovered: tokio::sync::watch::channel(0).0,
            ops,
            backlog: Arc::new(Backlog::new(
                settings.max_write_queue,
                Some(BacklogFigures {
                    queued: metrics.write_queue.clone(),
                    limit: metrics.write_queue_limit.clone(),
                    reads_paused: metrics.upstream_reads_paused.clone(),
                }),
            )),
            metrics,
            leaving,
            left: CancellationToken::new(),
            handing_over: AtomicBool::new(false),
            lease: lease::Lease::new(lease_span(settings.heartbeat, settings.owner_timeout)),
            deposals: Default::default(),
            fenced_sha: fenced::sha(),
            count_sha: fenced::sha1(principals::COUNT),
        });
        store
            .beat()
            .await
            .context("cannot register this replica in Redis")?;
        store.metrics.up.set(1);
        store.metrics.masters_are(store.link.masters());
        store.tell_nodes(true);
        info!(node = %store.node_id, advertise = %store.advertise, "joined the replicas sharing {shown}");
        tokio::spawn(store.clone().run_heartbeat());
        tokio::spawn(store.clone().run_writer(queue));
        Ok(store)
    }

    /// The shared connection, its round trips counted.
    fn timed(&self) -> timed::Timed {
        let current = self.link.current();
        timed::Timed {
            connection: current.connection,
            generation: current.generation,
            link: self.link.clone(),
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
                    self.link.answered();
                    *self.back_at.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(std::time::Instant::now());
                    self.recovered.send_modify(|n| *n += 1);
                }
                false => warn!("the Redis store is unreachable: new sessions are refused"),
            }
        }
        self.metrics.up.set(i64::from(up));
    }

    /// After a heartbeat the master took: when the master changed since `seen` switches (a
    /// failover), the owners write their sessions back, as after an outage (the new master
    /// may lack what the old one took and had not passed on). The switches seen now.
    fn after_failover(&self, seen: u64) -> u64 {
        let now = self.link.switches();
        if now != seen {
            info!("a new master for the store: writing this replica's sessions to it");
            self.metrics.failovers.inc_by(now - seen);
            self.metrics.masters_are(self.link.masters());
            self.recovered.send_modify(|n| *n += 1);
        }
        now
    }

    /// Tells the metrics which nodes are up: a cluster's as it says; the one master, `up` or
    /// not.
    fn tell_nodes(&self, up: bool) {
        let nodes = match self.cluster {
            true => self.link.view().nodes,
            false => self.link.masters().into_iter().map(|m| (m, up)).collect(),
        };
        self.metrics.nodes_are(nodes);
    }

    /// Whether the replicas may not have written their heartbeats to the master yet: while
    /// this replica's own heartbeat fails, and within `owner_timeout` of a new master (a
    /// failover) or of Redis answering again after an outage. A heartbeat missing then says
    /// nothing of its replica.
    pub(super) fn settling(&self) -> bool {
        // Until a heartbeat of this replica's reached the store again, the master answering
        // may be one that came back without the others' heartbeats (a failover back to the
        // address in use, a restart): nothing it lacks says a replica is dead.
        if !self.healthy() {
            return true;
        }
        let adopted = self.link.current().adopted;
        let back = *self.back_at.lock().unwrap_or_else(|e| e.into_inner());
        [adopted, back]
            .into_iter()
            .flatten()
            .any(|at| at.elapsed() < self.owner_timeout)
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

    /// The way an owned session's ops go to the writer; `counted_for`: the principal whose
    /// sessions it counts in (`principals`); `epoch`: the owner epoch every write is
    /// conditional on.
    pub fn mirror(
        &self,
        server: &str,
        session_id: &str,
        counted_for: Option<&str>,
        epoch: u64,
    ) -> Mirror {
        let counted_in = counted_for.map(|principal| self.principal_key(server, principal));
        Mirror::new(
            server,
            session_id,
            counted_in,
            Fence::new(epoch, self.lease.term()),
            self.ops.clone(),
            self.backlog.clone(),
        )
    }

    /// Sessions of `server` whose writes were refused for a stale epoch (another replica took
    /// each over), as the writer finds them. One receiver per server: a second call replaces
    /// the first.
    pub fn deposals(&self, server: &str) -> mpsc::UnboundedReceiver<Deposed> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.deposals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(server.to_owned(), sender);
        receiver
    }

    /// Tells `server`'s registry of a deposed session.
    fn deposed(&self, server: &str, deposed: Deposed) {
        let deposals = self.deposals.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = deposals.get(server) {
            let _ = sender.send(deposed);
        }
    }

    /// Whether this replica may act on a session it owns, held by `fence`, without confirming
    /// first (`confirm`): its lease has held since the hold was last confirmed.
    pub fn holds(&self, fence: &Fence) -> bool {
        self.lease.holds(fence.confirmed_in())
    }

    /// What the owners queued and the writer has not written yet.
    pub fn backlog(&self) -> &Arc<Backlog> {
        &self.backlog
    }

    /// A session's id in its keys: on a cluster, as their hash tag.
    fn tagged<'a>(&self, id: &'a str) -> std::borrow::Cow<'a, str> {
        match self.cluster {
            true => format!("{{{id}}}").into(),
            false => id.into(),
        }
    }

    pub(super) fn session_key(&self, server: &str, id: &str) -> String {
        format!("{}:{server}:session:{}", self.namespace, self.tagged(id))
    }

    pub(super) fn log_key(&self, server: &str, id: &str) -> String {
        format!("{}:{server}:log:{}", self.namespace, self.tagged(id))
    }

    pub(super) fn inflight_key(&self, server: &str, id: &str) -> String {
        format!("{}:{server}:inflight:{}", self.namespace, self.tagged(id))
    }

    pub(super) fn subs_key(&self, server: &str, id: &str) -> String {
        format!("{}:{server}:subs:{}", self.namespace, self.tagged(id))
    }

    /// The prefix of the replicas' keys: on a cluster, the namespace as their hash tag.
    fn replicas_prefix(&self) -> std::borrow::Cow<'_, str> {
        match self.cluster {
            true => format!("{{{}}}", self.namespace).into(),
            false => self.namespace.as_str().into(),
        }
    }

    pub(super) fn node_key(&self, node: &str) -> String {
        format!("{}:node:{node}", self.replicas_prefix())
    }

    pub(super) fn nodes_key(&self) -> String {
        format!("{}:nodes", self.replicas_prefix())
    }

    /// Deletes session `id`'s keys now (its owner ended it), if `fence` is still current, and
    /// then takes it out of the set of its principal's sessions `counted_in`: false when
    /// another replica owns the session now (nothing is deleted).
    pub async fn forget(
        &self,
        server: &str,
        id: &str,
        fence: &Fence,
        counted_in: Option<&str>,
    ) -> StoreResult<bool> {
        let mut connection = self.timed();
        let mut writes = fenced::Commands::default();
        for key in fenced::SessionKey::ALL {
            writes.push("DEL", key, []);
        }
        let answers: Vec<i64> = self
            .fenced_write(server, id, fence.epoch(), false, &writes)
            .query_async(&mut connection)
            .await
            .map_err(StoreError::from)?;
        if answers.first() == Some(&fenced::REFUSED) {
            return Ok(false);
        }
        if let Some(sessions) = counted_in {
            redis::cmd("ZREM")
                .arg(sessions)
                .arg(id)
                .query_async::<()>(&mut connection)
                .await
                .map_err(StoreError::from)?;
        }
        Ok(true)
    }
}

/// How long after a heartbeat was sent no other replica may take this one's sessions over: its
/// key lives `owner_timeout`, but a replica that refuses connections is dead once it missed one
/// and a half heartbeats.
fn lease_span(heartbeat: Duration, owner_timeout: Duration) -> Duration {
    (heartbeat + heartbeat / 2).min(owner_timeout)
}
