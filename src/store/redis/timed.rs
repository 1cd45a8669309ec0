//! A Redis connection that counts its round trips and their time (`mcp_proxy_store_round_trips`).

use std::sync::Arc;
use std::time::Instant;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::link::Link;

use crate::telemetry::metrics::StoreMetrics;

/// The shared connection, timed: a command or a pipeline is one round trip. One that fails as
/// if the master were gone makes the link look for the master again.
pub(super) struct Timed {
    pub(super) connection: ConnectionManager,
    /// The link's generation `connection` belongs to.
    pub(super) generation: u64,
    pub(super) link: Arc<Link>,
    pub(super) metrics: Arc<StoreMetrics>,
}

impl Timed {
    fn seen<T>(&self, answer: &RedisResult<T>) {
        if let Err(error) = answer {
            if Link::lost_master(error) {
                self.link.lost(self.generation);
            }
        }
    }
}

impl ConnectionLike for Timed {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let started = Instant::now();
            let answer = self.connection.req_packed_command(cmd).await;
            self.metrics.round_trip(started.elapsed());
            self.seen(&answer);
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
            let started = Instant::now();
            let answer = self
                .connection
                .req_packed_commands(pipeline, offset, count)
                .await;
            self.metrics.round_trip(started.elapsed());
            self.seen(&answer);
            answer
        })
    }

    fn get_db(&self) -> i64 {
        self.connection.get_db()
    }
}
