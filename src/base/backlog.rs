//! Work queued and not yet done, with a bound: the owners' write-behind queue to the shared
//! store. Past the bound, whoever adds to it waits: a new session or request for a while
//! (`room`, then it is refused), an upstream reader until there is room (`wait_for_room`: its
//! server is read no faster than the queue is written, and nothing is dropped).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

/// Ops queued and not yet written, bounded by `limit`, shown in its `BacklogFigures` if given.
#[derive(Debug)]
pub struct Backlog {
    queued: AtomicUsize,
    limit: usize,
    drained: Notify,
    metrics: Option<BacklogFigures>,
}

/// Where a backlog shows itself (the store's `store_write_queue`, `store_write_queue_limit`,
/// `store_upstream_reads_paused`).
#[derive(Debug, Clone)]
pub struct BacklogFigures {
    pub queued: Gauge,
    pub limit: Gauge,
    pub reads_paused: Counter,
}

impl Backlog {
    /// A backlog of at most `limit` ops (a limit of 0 is taken as 1), its figures kept in
    /// `metrics` when given.
    pub fn new(limit: usize, metrics: Option<BacklogFigures>) -> Backlog {
        let limit = limit.max(1);
        if let Some(metrics) = &metrics {
            metrics.limit.set(limit as i64);
        }
        Backlog {
            queued: AtomicUsize::new(0),
            limit,
            drained: Notify::new(),
            metrics,
        }
    }

    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Whether more ops wait than the limit allows: new work waits.
    pub fn over_limit(&self) -> bool {
        self.queued() > self.limit
    }

    /// `count` more ops were queued. Never refused: what must not be lost is queued whatever
    /// the backlog; those who can wait do so before producing more.
    pub fn added(&self, count: usize) {
        let queued = self.queued.fetch_add(count, Ordering::AcqRel) + count;
        self.show(queued);
    }

    /// The writer wrote (or gave up on) `count` ops.
    pub fn written(&self, count: usize) {
        let queued = self
            .queued
            .fetch_sub(count, Ordering::AcqRel)
            .saturating_sub(count);
        self.show(queued);
        self.drained.notify_waiters();
    }

    fn show(&self, queued: usize) {
        if let Some(metrics) = &self.metrics {
            metrics.queued.set(queued as i64);
        }
    }

    /// Waits, at most `within`, while more than `limit` ops wait; `Err(queued)` if they still
    /// do then.
    pub async fn room(&self, within: Duration) -> Result<(), usize> {
        match tokio::time::timeout(within, self.drain()).await {
            Ok(()) => Ok(()),
            Err(_) if !self.over_limit() => Ok(()),
            Err(_) => Err(self.queued()),
        }
    }

    /// Waits, however long it takes, while more than `limit` ops wait: an upstream reader calls
    /// it before reading its server's next message. Each wait is counted
    /// (`store_upstream_reads_paused`). The writer drains the queue even while the store is
    /// down (a failed write is given up on), so the wait ends.
    pub async fn wait_for_room(&self) {
        if !self.over_limit() {
            return;
        }
        if let Some(metrics) = &self.metrics {
            metrics.reads_paused.inc();
        }
        self.drain().await;
    }

    /// Returns once no more than `limit` ops wait.
    async fn drain(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if !self.over_limit() {
                return;
            }
            drained.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn new_work_waits_while_the_backlog_is_over_its_limit() {
        let backlog = Arc::new(Backlog::new(2, None));
        assert_eq!(backlog.room(Duration::from_secs(1)).await, Ok(()));
        backlog.added(5);
        let waiting = tokio::spawn({
            let backlog = backlog.clone();
            async move { backlog.room(Duration::from_secs(5)).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "five queued, two allowed: it waits");
        backlog.written(4);
        assert_eq!(waiting.await.unwrap(), Ok(()), "one left: room again");
        backlog.added(10);
        assert_eq!(
            backlog.room(Duration::from_secs(1)).await,
            Err(11),
            "still behind after the wait: refused"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_waits_for_room_as_long_as_it_takes() {
        let backlog = Arc::new(Backlog::new(3, None));
        backlog.wait_for_room().await;
        backlog.added(10);
        let reader = tokio::spawn({
            let backlog = backlog.clone();
            async move { backlog.wait_for_room().await }
        });
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!reader.is_finished(), "ten queued, three allowed: it waits");
        backlog.written(6);
        tokio::task::yield_now().await;
        assert!(!reader.is_finished(), "four still over three");
        backlog.written(1);
        reader.await.unwrap();
    }
}
