//! A Redis connection that counts its round trips and their time (`mcp_proxy_store_round_trips`,
//! and per node). On a cluster, a pipeline whose commands are in several hash slots goes as one
//! pipeline per slot, all at once, its answers put back in order.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::try_join_all;
use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, ServerErrorKind, Value};

use super::cluster;
use super::link::{Connection, Link};

use crate::telemetry::metrics::StoreMetrics;

/// The shared connection, timed: a command or a pipeline is one round trip (on a cluster, one
/// per slot). One that fails as if the master were gone makes the link look for it again.
pub(super) struct Timed {
    pub(super) connection: Connection,
    /// The link's generation `connection` belongs to.
    pub(super) generation: u64,
    pub(super) link: Arc<Link>,
    pub(super) metrics: Arc<StoreMetrics>,
}

impl Timed {
    /// Counts a round trip to the node serving `slot` that started at `started`.
    fn seen<T>(&self, slot: Option<u16>, started: Instant, answer: &RedisResult<T>) {
        let node = self.link.node_of(slot);
        self.metrics.round_trip(&node, started.elapsed());
        if let Err(error) = answer {
            self.metrics.node_error(&node);
            if Link::lost_master(error) {
                self.link.lost(self.generation);
            }
        }
    }

    /// Each slot's pipeline on a cluster, at once; the answers in the whole pipeline's order.
    async fn per_slot(
        &self,
        cluster: &redis::cluster_async::ClusterConnection,
        pipeline: &Pipeline,
    ) -> RedisResult<Vec<Value>> {
        let parts = cluster::split(pipeline);
        let sent = parts.iter().map(|(slot, part, _)| {
            let mut cluster = cluster.clone();
            async move {
                let started = Instant::now();
                let answer = cluster.req_packed_commands(part, 0, part.len()).await;
                self.seen(*slot, started, &answer);
                answer
            }
        });
        let answers = try_join_all(sent).await?;
        let mut whole = vec![Value::Nil; pipeline.len()];
        for ((_, _, places), answers) in parts.iter().zip(answers) {
            for (place, answer) in places.iter().zip(answers) {
                if let Some(at) = place {
                    whole[*at] = answer;
                }
            }
        }
        Ok(whole)
    }
}

impl ConnectionLike for Timed {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let started = Instant::now();
            let (answer, slot) = match &mut self.connection {
                Connection::Single { manager, .. } => (manager.req_packed_command(cmd).await, None),
                Connection::Cluster(cluster) => {
                    let slot = cluster::key_of(cmd).map(|key| cluster::slot(&key));
                    (cluster.req_packed_command(cmd).await, slot)
                }
            };
            self.seen(slot, started, &answer);
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            match &self.connection {
                Connection::Single { manager, .. } => {
                    let started = Instant::now();
                    let answer = manager
                        .clone()
                        .req_packed_commands(pipeline, offset, count)
                        .await;
                    self.seen(None, started, &answer);
                    // A pipeline's commands fail each in its answer: one refused by a master
                    // demoted to replica says the master moved as a failed command does.
                    if answer.as_ref().is_ok_and(|values| demoted(values)) {
                        self.link.lost(self.generation);
                    }
                    answer
                }
                // The store sends no transactions: the whole pipeline is answered.
                Connection::Cluster(cluster) => self.per_slot(cluster, pipeline).await,
            }
        })
    }

    fn get_db(&self) -> i64 {
        match &self.connection {
            Connection::Single { manager, .. } => manager.get_db(),
            Connection::Cluster(_) => 0,
        }
    }
}

/// Whether an answer of a pipeline holds an error a master demoted to replica gives (`READONLY`,
/// `MASTERDOWN`).
fn demoted(values: &[Value]) -> bool {
    values.iter().any(|value| {
        matches!(value, Value::ServerError(error)
            if matches!(error.kind(), Some(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipeline_refused_by_a_demoted_master_says_so_and_another_error_does_not() {
        let value = |wire: &[u8]| redis::parse_redis_value(wire).unwrap();
        let readonly = value(b"-READONLY You can't write against a read only replica.\r\n");
        let other = value(b"-ERR wrong number of arguments\r\n");
        assert!(demoted(&[Value::Okay, readonly]));
        assert!(!demoted(&[Value::Okay, other, Value::Nil]));
    }
}
