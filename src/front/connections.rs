//! The client connections open, bounded by `http.max_connections`: each accepted connection
//! holds a slot for as long as it lives (an upgraded WebSocket connection keeps its own), and
//! one more than the bound is answered 503 with `Retry-After` and closed, never served.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::rejection::Rejection;
use crate::telemetry::metrics::HttpMetrics;

/// Refusals being written at once; past this a connection over the bound is given what of its
/// answer fits without waiting and closed (a flood of connections must not take a file
/// descriptor each for long).
const MAX_REFUSING: usize = 256;
/// How long a refusal may take to be written and its connection to close.
const REFUSAL_TIME: Duration = Duration::from_secs(1);
/// What is read (and dropped) of a refused client's request, so that closing the connection
/// does not reset it before the client read the answer.
const REFUSAL_DRAIN: usize = 64 << 10;

/// The bound and the count of connections open.
#[derive(Debug)]
pub struct Connections {
    open: AtomicUsize,
    refusing: AtomicUsize,
    limit: usize,
    metrics: HttpMetrics,
}

/// A connection's place among those open: given back when its last holder drops it.
#[derive(Debug, Clone)]
pub struct Slot {
    _held: Arc<Held>,
}

#[derive(Debug)]
struct Held(Arc<Connections>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.connections_open.dec();
    }
}

impl Connections {
    pub fn new(limit: usize, metrics: HttpMetrics) -> Arc<Connections> {
        Arc::new(Connections {
            open: AtomicUsize::new(0),
            refusing: AtomicUsize::new(0),
            limit,
            metrics,
        })
    }

    /// A slot for a connection just accepted, or `None` when `limit` are open.
    pub fn take(self: &Arc<Self>) -> Option<Slot> {
        if self.open.fetch_add(1, Ordering::AcqRel) >= self.limit {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        self.metrics.connections_open.inc();
        Some(Slot {
            _held: Arc::new(Held(self.clone())),
        })
    }

    /// Answers a connection over the bound 503 and closes it (counted), in the background and
    /// within `REFUSAL_TIME`.
    pub fn refuse(self: &Arc<Self>, mut socket: TcpStream) {
        self.metrics.connections_refused.inc();
        let answer = refusal(self.limit);
        if self.refusing.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSING {
            self.refusing.fetch_sub(1, Ordering::AcqRel);
            // The answer as far as it goes without waiting, then closed.
            let _ = socket.try_write(&answer);
            return;
        }
        let connections = self.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REFUSAL_TIME, async {
                socket.write_all(&answer).await?;
                socket.shutdown().await?;
                let mut sink = [0u8; 4096];
                let mut drained = 0;
                while drained < REFUSAL_DRAIN {
                    match socket.read(&mut sink).await? {
                        0 => break,
                        n => drained += n,
                    }
                }
                Ok::<_, std::io::Error>(())
            })
            .await;
            connections.refusing.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// The whole HTTP/1.1 answer to a connection over the bound.
fn refusal(limit: usize) -> Vec<u8> {
    let body = Rejection::too_many_connections(limit).error_body();
    let mut answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_and_given_back_by_their_last_holder() {
        let metrics = crate::telemetry::metrics::Metrics::default().http;
        let connections = Connections::new(2, metrics.clone());
        let first = connections.take().unwrap();
        let kept = first.clone();
        let second = connections.take().unwrap();
        assert!(connections.take().is_none(), "the bound");
        drop(first);
        assert!(connections.take().is_none(), "a clone still holds it");
        drop(kept);
        assert_eq!(metrics.connections_open.get(), 1);
        let third = connections.take().unwrap();
        drop((second, third));
        assert_eq!(metrics.connections_open.get(), 0);
    }
}
