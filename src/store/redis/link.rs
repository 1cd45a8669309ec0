//! The store's connection, following its master: a Redis named by its address, or the master a
//! set of Sentinels names, moved to as soon as one of them announces a new one, and asked for
//! again when the connection in use fails or finds itself on a replica (a master demoted by a
//! failover whose announcement was missed), a new connection made to a new master; or a
//! Redis Cluster, whose masters the connection follows itself (`MOVED`, `ASK`, a failover), and
//! whose nodes are read again at every heartbeat and after a failure, to tell a change of master.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{info, warn};

use super::announcements;
use super::cluster::{self, View};
use super::connect::{Announced, Source};

/// Sentinels are asked at most this often, however many requests fail meanwhile; and their
/// announcements acted on at most this often, however many arrive.
const ASK_AT_MOST_EVERY: Duration = Duration::from_millis(100);
/// The longest the Sentinels, or a master they name, may take to answer a question.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// A connection to the store: to its master, or to a cluster (commands routed by key).
#[derive(Clone)]
pub(super) enum Connection {
    Single {
        client: Arc<redis::Client>,
        manager: ConnectionManager,
    },
    Cluster(ClusterConnection),
}

/// The connection in use, and the master it goes to.
#[derive(Clone)]
pub(super) struct Current {
    pub connection: Connection,
    /// One more at every change of master.
    pub generation: u64,
    /// When this master was taken on after another (`None`: the first).
    pub adopted: Option<Instant>,
}

pub(super) struct Link {
    source: Source,
    config: ConnectionManagerConfig,
    current: RwLock<Current>,
    /// Whether the Sentinels are being asked (one question at a time: failures meanwhile
    /// join it rather than queue another).
    asking: AtomicBool,
    /// When they were last asked.
    asked: std::sync::Mutex<Option<Instant>>,
    /// Masters changed since the start.
    switches: AtomicU64,
    /// Whether the Sentinels' failing to name a master was logged since the master last
    /// answered: once per failover, not at every question.
    told: AtomicBool,
    /// A cluster's nodes, as last read (empty for one Redis).
    view: RwLock<View>,
    /// Held while the link moves to another master: one move at a time, each deciding on
    /// what the one before did.
    moving: tokio::sync::Mutex<()>,
    /// Stops hearing the Sentinels when the link is dropped.
    _hearing: DropGuard,
}

impl Link {
    /// Connects to the master (a clear error when none can be reached); with Sentinels, hears
    /// their announcements of a new master until `stop` or the link is dropped.
    pub async fn open(
        source: Source,
        config: ConnectionManagerConfig,
        stop: CancellationToken,
    ) -> RedisResult<Arc<Link>> {
        let connection = match &source {
            Source::Cluster { client, .. } => {
                Connection::Cluster(client.get_async_connection().await?)
            }
            _ => {
                let client = source.master().await?;
                let manager = client
                    .get_connection_manager_with_config(config.clone())
                    .await?;
                Connection::Single {
                    client: Arc::new(client),
                    manager,
                }
            }
        };
        let view = match &connection {
            Connection::Cluster(cluster) => read_view(cluster.clone()).await?,
            Connection::Single { .. } => View::default(),
        };
        let link = Arc::new(Link {
            source,
            config,
            current: RwLock::new(Current {
                connection,
                generation: 0,
                adopted: None,
            }),
            asking: AtomicBool::new(false),
            asked: std::sync::Mutex::new(None),
            switches: AtomicU64::new(0),
            told: AtomicBool::new(false),
            view: RwLock::new(view),
            moving: tokio::sync::Mutex::new(()),
            _hearing: stop.clone().drop_guard(),
        });
        if let Source::Sentinels(sentinels) = &link.source {
            let (hearing, announced) =
                announcements::hear(sentinels.each(), sentinels.service(), stop);
            let following = follow_announced(Arc::downgrade(&link), announced);
            tokio::spawn(async move { tokio::join!(hearing, following) });
        }
        Ok(link)
    }

    /// Whether the store is a cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.source, Source::Cluster { .. })
    }

    /// A cluster's nodes as last read.
    pub fn view(&self) -> View {
        self.view.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The node a command on a key in `slot` goes to (`None`: one that names no key), as
    /// `host:port`.
    pub fn node_of(&self, slot: Option<u16>) -> String {
        match (&self.current().connection, slot) {
            (Connection::Single { client, .. }, _) => address(client),
            (Connection::Cluster(_), Some(slot)) => {
                let view = self.view.read().unwrap_or_else(|e| e.into_inner());
                view.master_of(slot).unwrap_or("unknown").to_owned()
            }
            (Connection::Cluster(_), None) => "any".to_owned(),
        }
    }

    /// A client of the master holding `key`, for a connection of its own: a cluster's nodes
    /// are read first (the key's slot may have moved).
    pub async fn client_for(&self, key: &str) -> RedisResult<redis::Client> {
        let connection = match (&self.source, self.current().connection) {
            (_, Connection::Single { client, .. }) => return Ok((*client).clone()),
            (Source::Cluster { connection, .. }, Connection::Cluster(_)) => connection,
            _ => return Err(RedisError::from((ErrorKind::Client, "no cluster"))),
        };
        self.refresh().await?;
        let view = self.view();
        let node = view
            .master_of(cluster::slot(key.as_bytes()))
            .ok_or_else(|| {
                RedisError::from((
                    ErrorKind::Client,
                    "no master of the cluster serves this key",
                ))
            })?;
        connection
            .node_client(node)
            .map_err(|e| RedisError::from((ErrorKind::Client, "node", e.to_string())))
    }

    /// Reads a cluster's nodes again (nothing for one Redis): a change of the masters or of
    /// what they serve is a change of master (a failover), as with Sentinels.
    pub async fn refresh(&self) -> RedisResult<()> {
        let Connection::Cluster(cluster) = self.current().connection else {
            return Ok(());
        };
        let view = read_view(cluster).await?;
        let before = std::mem::replace(
            &mut *self.view.write().unwrap_or_else(|e| e.into_inner()),
            view.clone(),
        );
        if before.masters != view.masters {
            let generation = {
                let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
                current.generation += 1;
                current.adopted = Some(Instant::now());
                current.generation
            };
            self.switches.fetch_add(1, Ordering::AcqRel);
            info!(from = %before.shown(), to = %view.shown(), generation,
                "the cluster's masters changed: following them");
        }
        Ok(())
    }

    /// The generation of the master in use (one more at every change), without the connection.
    pub fn generation(&self) -> u64 {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .generation
    }

    pub fn current(&self) -> Current {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The masters in use, as `host:port`.
    pub fn masters(&self) -> Vec<String> {
        match &self.current().connection {
            Connection::Single { client, .. } => vec![address(client)],
            Connection::Cluster(_) => self.view().masters.into_iter().map(|(a, _)| a).collect(),
        }
    }

    /// How many times the master changed.
    pub fn switches(&self) -> u64 {
        self.switches.load(Ordering::Acquire)
    }

    /// Whether `error` says the connection may no longer reach the master: it is gone, or the
    /// server it reaches is not the master any more.
    pub fn lost_master(error: &RedisError) -> bool {
        error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.is_timeout()
            || matches!(
                error.kind(),
                ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
            )
    }

    /// The connection of generation `seen` failed as if the master were gone: with Sentinels,
    /// they are asked for the master in the background, and the link moves to it if it
    /// changed; a cluster's nodes are read again. One question at a time (failures meanwhile
    /// join it), at most every 100 ms.
    pub fn lost(self: &Arc<Self>, seen: u64) {
        if matches!(self.source, Source::Direct(_)) || self.asking.swap(true, Ordering::AcqRel) {
            return;
        }
        let link = self.clone();
        tokio::spawn(async move {
            link.ask(seen).await;
            link.asking.store(false, Ordering::Release);
        });
    }

    /// Asks the Sentinels for the master, unless the link moved on from generation `seen`
    /// already, and moves to the one they name if it is another.
    async fn ask(&self, seen: u64) {
        if self.generation() != seen {
            return;
        }
        let last = *self.asked.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = last {
            tokio::time::sleep_until((at + ASK_AT_MOST_EVERY).into()).await;
        }
        *self.asked.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        if self.is_cluster() {
            if let Err(error) = self.refresh().await {
                self.tell(|| warn!(%error, "cannot read the cluster's nodes"));
            }
            return;
        }
        let asked = tokio::time::timeout(ANSWER_WITHIN * 2, self.source.master()).await;
        let client = match asked {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                self.tell(|| warn!(%error, "no Sentinel names a master for the store yet"));
                return;
            }
            Err(_) => {
                self.tell(|| warn!("the Sentinels did not name a master within 4 s"));
                return;
            }
        };
        self.move_to(client, Some(seen)).await;
    }

    /// A Sentinel announced `master`: the link moves to it at once, unless it is the one in use
    /// already (every Sentinel announces it).
    async fn announced(&self, master: &Announced) {
        let Source::Sentinels(sentinels) = &self.source else {
            return;
        };
        let client = match sentinels.master_at(master) {
            Ok(client) => client,
            Err(error) => {
                return self.tell(
                    || warn!(%error, "cannot be a client of the master the Sentinels announce"),
                )
            }
        };
        if self.masters() == [address(&client)] {
            return;
        }
        // Taken on only once it says it is a master, as a master the Sentinels name when asked
        // is: an announcement that arrives late (a failover since undone) moves nothing.
        if !says_master(&client).await {
            info!(master = %address(&client),
                "a Sentinel announced a master that does not say it is one: not followed");
            return;
        }
        self.move_to(client, None).await
    }

    /// Moves to the master `client` reaches, unless it is the one in use or, with `seen`, the
    /// link moved on from that generation while the Sentinels were asked (their answer is
    /// older news than that move).
    async fn move_to(&self, client: redis::Client, seen: Option<u64>) {
        let _moving = self.moving.lock().await;
        if seen.is_some_and(|seen| seen != self.generation()) {
            return;
        }
        let old = self.masters().join(",");
        let new = address(&client);
        if old == new {
            return;
        }
        let manager = match client
            .get_connection_manager_with_config(self.config.clone())
            .await
        {
            Ok(manager) => manager,
            Err(error) => {
                self.tell(
                    || warn!(%error, master = %new, "cannot reach the master the Sentinels name"),
                );
                return;
            }
        };
        let generation = {
            let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
            current.connection = Connection::Single {
                client: Arc::new(client),
                manager,
            };
            current.generation += 1;
            current.adopted = Some(Instant::now());
            current.generation
        };
        self.switches.fetch_add(1, Ordering::AcqRel);
        self.told.store(false, Ordering::Release);
        let announced = seen.is_none();
        info!(from = %old, to = %new, generation, announced,
            "the store's master changed: following it");
    }

    /// The master answers again (after an outage with no change of master): the next failure
    /// to find one is logged again.
    pub fn answered(&self) {
        self.told.store(false, Ordering::Release);
    }

    /// Logs, with `log`, why no master could be taken on: the first time since the last change
    /// of master only (a failover's questions go on every 100 ms).
    fn tell(&self, log: impl FnOnce()) {
        if !self.told.swap(true, Ordering::AcqRel) {
            log();
        }
    }
}

/// Moves `link` to each master the Sentinels announce, until they are no longer heard or the
/// link is dropped.
/// One announcement is acted on every `ASK_AT_MOST_EVERY` at most (the latest one, when more
/// came meanwhile): a Sentinel, or a network, that floods them moves the link no more often.
async fn follow_announced(link: Weak<Link>, mut announced: watch::Receiver<Option<Announced>>) {
    let mut acted: Option<Instant> = None;
    while announced.changed().await.is_ok() {
        if let Some(at) = acted {
            tokio::time::sleep_until((at + ASK_AT_MOST_EVERY).into()).await;
        }
        let Some(master) = announced.borrow_and_update().clone() else {
            continue;
        };
        let Some(link) = link.upgrade() else {
            return;
        };
        link.announced(&master).await;
        acted = Some(Instant::now());
    }
}

/// Whether the server `client` reaches says it is a master (`ROLE`), within `ANSWER_WITHIN`.
async fn says_master(client: &redis::Client) -> bool {
    let asking = async {
        let mut connection = client.get_multiplexed_async_connection().await?;
        redis::cmd("ROLE")
            .query_async::<redis::Value>(&mut connection)
            .await
    };
    let role = match tokio::time::timeout(ANSWER_WITHIN, asking).await {
        Ok(Ok(redis::Value::Array(role))) => role,
        _ => return false,
    };
    match role.first() {
        Some(redis::Value::BulkString(word)) => word == b"master",
        Some(redis::Value::SimpleString(word)) => word == "master",
        _ => false,
    }
}

/// A cluster's nodes, as one of them tells.
async fn read_view(mut cluster: ClusterConnection) -> RedisResult<View> {
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut cluster)
        .await?;
    Ok(View::parse(&text))
}

/// A client's server, as logs show it.
fn address(client: &redis::Client) -> String {
    match client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        other => format!("{other:?}"),
    }
}
