//! The store's connection, following its master: a Redis named by its address, or the master a
//! set of Sentinels names, asked for again when the connection in use fails or finds itself on
//! a replica (a master demoted by a failover), and a new connection made to a new master.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::SentinelClient;
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind};
use tracing::{info, warn};

/// Sentinels are asked at most this often, however many requests fail meanwhile.
const ASK_AT_MOST_EVERY: Duration = Duration::from_millis(100);

/// Where the master is found.
pub(super) enum Source {
    /// One Redis, at its address.
    Direct(redis::Client),
    /// The master of a service, as its Sentinels name it.
    Sentinels(tokio::sync::Mutex<SentinelClient>),
}

impl Source {
    /// A client of the master as it stands.
    async fn master(&self) -> RedisResult<redis::Client> {
        match self {
            Source::Direct(client) => Ok(client.clone()),
            Source::Sentinels(sentinels) => sentinels.lock().await.async_get_client().await,
        }
    }
}

/// The connection in use, and the master it goes to.
#[derive(Clone)]
pub(super) struct Current {
    pub client: redis::Client,
    pub manager: ConnectionManager,
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
}

impl Link {
    /// Connects to the master (a clear error when none can be reached).
    pub async fn open(source: Source, config: ConnectionManagerConfig) -> RedisResult<Link> {
        let client = source.master().await?;
        let manager = client
            .get_connection_manager_with_config(config.clone())
            .await?;
        Ok(Link {
            source,
            config,
            current: RwLock::new(Current {
                client,
                manager,
                generation: 0,
                adopted: None,
            }),
            asking: AtomicBool::new(false),
            asked: std::sync::Mutex::new(None),
            switches: AtomicU64::new(0),
            told: AtomicBool::new(false),
        })
    }

    pub fn current(&self) -> Current {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The master in use, as `host:port`.
    pub fn address(&self) -> String {
        address(&self.current().client)
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
    /// changed. One question at a time (failures meanwhile join it), at most every 100 ms.
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
        if self.current().generation != seen {
            return;
        }
        let last = *self.asked.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = last {
            tokio::time::sleep_until((at + ASK_AT_MOST_EVERY).into()).await;
        }
        *self.asked.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let client = match self.source.master().await {
            Ok(client) => client,
            Err(error) => {
                self.tell(|| warn!(%error, "no Sentinel names a master for the store yet"));
                return;
            }
        };
        let (old, new) = (address(&self.current().client), address(&client));
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
            current.client = client;
            current.manager = manager;
            current.generation += 1;
            current.adopted = Some(Instant::now());
            current.generation
        };
        self.switches.fetch_add(1, Ordering::AcqRel);
        self.told.store(false, Ordering::Release);
        info!(from = %old, to = %new, generation, "the store's master changed: following it");
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
