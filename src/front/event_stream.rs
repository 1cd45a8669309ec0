//! Serves one session stream as SSE: priming event, the reader's deliveries with their event
//! ids, synthesized invalidations after a gap, keep-alive comments while idle.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;
use tokio::time::interval_at;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::body::Body;
use crate::session::log::{EventId, StreamKey};
use crate::session::{Delivery, Reader};
use crate::sse;

/// How a stream is framed for its client.
#[derive(Debug, Clone, Copy)]
pub struct Framing {
    /// Send a priming event (2025-11-25 and later clients) with this reconnection delay.
    pub priming: Option<Option<u64>>,
    pub keep_alive: Duration,
    /// Close the stream once it has been open this long (2025-11-25 polling, SEP-1699): the
    /// client resumes from its last event id. Only with priming, so it always has one.
    pub close_after: Option<Duration>,
    /// Sent as `retry:` before the stream is closed at shutdown.
    pub retry_ms: u64,
    /// Give events `id:` fields. Off for a protocol-level session's stream: its client resumes
    /// with `session/resume` and `sessionEventId`, never with `Last-Event-ID`.
    pub event_ids: bool,
}

/// Chunks buffered between the writer task and hyper.
const CHUNKS: usize = 32;

/// What a stream carries besides the reader's deliveries.
#[derive(Default)]
pub struct Extras {
    /// Sent first (the legacy transport's `endpoint` event).
    pub prelude: Option<Bytes>,
    /// Sent last when the reader was replaced by another attachment (a resume elsewhere).
    pub on_replaced: Option<Bytes>,
    /// Run once the stream is over, however it ended.
    pub on_close: Option<Box<dyn FnOnce() + Send>>,
}

/// Starts the writer task; `first` is a delivery already taken from `reader`, `start` the
/// position the reader had before it. At `shutdown` the stream gets a `retry:` and closes (a
/// request's stream once its answer is sent, or when the session ends here).
pub fn open(
    reader: Reader,
    start: EventId,
    first: Option<Delivery>,
    framing: Framing,
    shutdown: CancellationToken,
    extras: Extras,
) -> Body {
    let (chunks, body) = mpsc::channel(CHUNKS);
    let span = tracing::debug_span!("stream", stream = %reader.stream());
    let retry_ms = framing.retry_ms;
    // A request's stream stays open through a shutdown until its answer (the drain waits for
    // it); a stream of the session's own messages closes at once.
    let closes_at_shutdown = reader.stream() == StreamKey::Standalone;
    tokio::spawn(
        async move {
            let prelude_sent = match extras.prelude {
                Some(prelude) => chunks.send(prelude).await.is_ok(),
                None => true,
            };
            if prelude_sent {
                let ended = tokio::select! {
                    replaced = write(reader, start, first, framing, &chunks) => match replaced {
                        true => Ended::Replaced,
                        false if shutdown.is_cancelled() => Ended::ShutDown,
                        false => Ended::Over,
                    },
                    () = shutdown.cancelled(), if closes_at_shutdown => Ended::ShutDown,
                };
                match (ended, extras.on_replaced) {
                    (Ended::ShutDown, _) => {
                        let _ = chunks.send(sse::retry(retry_ms)).await;
                    }
                    (Ended::Replaced, Some(notice)) => {
                        let _ = chunks.send(sse::event(None, &notice)).await;
                    }
                    _ => {}
                }
            }
            if let Some(on_close) = extras.on_close {
                on_close();
            }
        }
        .instrument(span),
    );
    Body::Stream(body)
}

enum Ended {
    Over,
    Replaced,
    ShutDown,
}

/// Writes until the stream is over; true when it ended because the reader was replaced.
async fn write(
    mut reader: Reader,
    start: EventId,
    mut pending: Option<Delivery>,
    framing: Framing,
    chunks: &mpsc::Sender<Bytes>,
) -> bool {
    if let Some(retry) = framing.priming {
        if chunks
            .send(sse::priming(&start.to_string(), retry))
            .await
            .is_err()
        {
            return false;
        }
    }
    let mut keep_alive = interval_at(
        crate::clock::from_now(framing.keep_alive),
        framing.keep_alive,
    );
    let close_at = framing
        .close_after
        .filter(|_| framing.priming.is_some())
        .map(crate::clock::from_now);
    let closing = async {
        match close_at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(closing);
    loop {
        let delivery = match pending.take() {
            Some(delivery) => delivery,
            None => tokio::select! {
                delivery = reader.next() => match delivery {
                    Some(delivery) => delivery,
                    None => return reader.replaced(),
                },
                _ = keep_alive.tick() => {
                    if chunks.send(sse::keep_alive()).await.is_err() {
                        return false;
                    }
                    continue;
                }
                () = chunks.closed() => return false,
                () = &mut closing => return false,
            },
        };
        // One chunk per delivery: a replay of a thousand events is one write, not a thousand.
        let stream = framing.event_ids.then_some(reader.stream());
        if chunks.send(frames(stream, &delivery)).await.is_err() {
            return false;
        }
    }
}

/// The SSE frames of one delivery, as one chunk: logged events with ids (given their stream),
/// invalidations without (they are synthesized again if the client loses them too).
pub fn frames(stream: Option<crate::session::log::StreamKey>, delivery: &Delivery) -> Bytes {
    let logged = delivery
        .events
        .iter()
        .filter(|event| !event.payload.is_empty())
        .map(|event| {
            let id = stream.map(|stream| {
                EventId {
                    stream,
                    seq: event.seq,
                }
                .to_string()
            });
            sse::event(id.as_deref(), &event.payload)
        });
    let synthesized = delivery
        .invalidations
        .iter()
        .map(|message| sse::event(None, message));
    let mut chunk = BytesMut::new();
    for frame in logged.chain(synthesized) {
        chunk.extend_from_slice(&frame);
    }
    chunk.freeze()
}
