//! Following one session's log as it grows (a view's copy of its owner's log).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Value};

use super::reads::parse_entries;
use super::RedisStore;
use crate::base::event::Logged;
use crate::store::StoreResult;

impl RedisStore {
    /// A follower of session `id`'s log, waiting up to `block` per read.
    pub fn follow(self: &Arc<Self>, server: &str, id: &str, block: Duration) -> LogFollower {
        LogFollower {
            store: self.clone(),
            key: self.log_key(server, id),
            block,
            connection: None,
        }
    }
}

/// Follows one session's log on a connection of its own (a blocking read must not hold up the
/// shared one), opened again after a failure (a restarted Redis, a cut, a slot moved to another
/// node of a cluster) and after the store moved to a new master (an old master still answering,
/// in a planned failover, no longer gets what is logged).
pub struct LogFollower {
    store: Arc<RedisStore>,
    key: String,
    block: Duration,
    /// The connection, and the link's generation it was made in.
    connection: Option<(MultiplexedConnection, u64)>,
}

impl LogFollower {
    /// The messages logged after `after`, waiting up to the follower's block for some (none:
    /// empty). A failure is counted and logged; after one to connect, it first waits a block.
    pub async fn next(&mut self, after: u64) -> StoreResult<Vec<Logged>> {
        let generation = self.store.link.generation();
        if self
            .connection
            .as_ref()
            .is_some_and(|(_, made)| *made != generation)
        {
            self.connection = None;
        }
        let connection = match &mut self.connection {
            Some((connection, _)) => connection,
            None => match self.connect().await {
                Ok(opened) => &mut self.connection.insert((opened, generation)).0,
                Err(error) => {
                    self.store
                        .note_error("connection to follow a session's log", &error);
                    tokio::time::sleep(self.block).await;
                    return Err(error.into());
                }
            },
        };
        let reply: RedisResult<Value> = redis::cmd("XREAD")
            .arg("BLOCK")
            .arg(self.block.as_millis() as u64)
            .arg("STREAMS")
            .arg(&self.key)
            .arg(format!("{after}-0"))
            .query_async(connection)
            .await;
        let reply = match reply {
            Ok(reply) => reply,
            Err(error) => {
                self.store
                    .note_error("read of a followed session's log", &error);
                self.connection = None;
                return Err(error.into());
            }
        };
        // [[key, [entries…]]] or nil
        let entries = match &reply {
            Value::Array(streams) => streams
                .first()
                .and_then(|s| match s {
                    Value::Array(pair) => pair.get(1),
                    _ => None,
                })
                .map(parse_entries)
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        Ok(entries)
    }

    /// A connection whose answers may take a block, to the master holding the log (on a
    /// cluster, the node serving its slot now).
    async fn connect(&self) -> RedisResult<MultiplexedConnection> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(self.block + Duration::from_secs(2)));
        self.store
            .link
            .client_for(&self.key)
            .await?
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }
}
