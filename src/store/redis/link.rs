//! The store's connection, following its master: a Redis named by its address, or the master a
//! set of Sentinels names, asked for again when the connection in use fails or finds itself on
//! a replica (a master demoted by a failover), and a new connection made to a new master.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
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
    /// One question to the Sentinels at a time, and when the last was asked.
    asking: tokio::sync::Mutex<Option<Instant>>,
    /// Masters changed since the start.
    switches: AtomicU64,
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
            asking: tokio::sync::Mutex::new(None),
            switches: AtomicU64::new(0),
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

    /// The connection of generation `seen` failed: with Sentinels, asks them for the master
    /// (once for however many failures, at most every 100 ms) and moves to it if it changed.
    /// True when the master in use is another than `seen`'s.
    pub async fn failed(&self, seen: u64) -> bool {
        if matches!(self.source, Source::Direct(_)) {
            return false;
        }
        let mut asked = self.asking.lock().await;
        if self.current().generation != seen {
            return true;
        }
        if let Some(at) = *asked {
            tokio::time::sleep_until((at + ASK_AT_MOST_EVERY).into()).await;
        }
        *asked = Some(Instant::now());
        let client = match self.source.master().await {
            Ok(client) => client,
            Err(error) => {
                warn!(%error, "no Sentinel named a master for the store");
                return false;
            }
        };
        let (old, new) = (address(&self.current().client), address(&client));
        if old == new {
            return false;
        }
        let manager = match client
            .get_connection_manager_with_config(self.config.clone())
            .await
        {
            Ok(manager) => manager,
            Err(error) => {
                warn!(%error, master = %new, "cannot reach the master the Sentinels name");
                return false;
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
        info!(from = %old, to = %new, generation, "the store's master changed: following it");
        true
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
