//! A Redis connection that counts its round trips and their time (`mcp_proxy_store_round_trips`).

use std::sync::Arc;
use std::time::Instant;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::telemetry::metrics::StoreMetrics;

/// The shared connection, timed: a command or a pipeline is one round trip.
pub(super) struct Timed {
    pub(super) connection: ConnectionManager,
    pub(super) metrics: Arc<StoreMetrics>,
}

impl ConnectionLike for Timed {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let started = Instant::now();
            let answer = self.connection.req_packed_command(cmd).await;
            self.metrics.round_trip(started.elapsed());
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
            answer
        })
    }

    fn get_db(&self) -> i64 {
        self.connection.get_db()
    }
}
