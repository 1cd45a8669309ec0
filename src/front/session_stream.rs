//! A session stream's frames for the SSE writer: the reader's deliveries with their event ids,
//! synthesized invalidations after a gap, a notice when another attachment replaced it.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::Response;
use tokio::time::Instant;

use super::event_stream::{self, Ended, Next, Options, Source};
use super::App;
use crate::session::log::{EventId, StreamKey};
use crate::session::{Delivery, Reader};
use crate::wire::http_body::Body;
use crate::wire::sse;

/// How a session stream is framed for its client.
#[derive(Debug, Clone, Copy)]
pub struct Framing {
    /// Send a priming event (2025-11-25 and later clients) with the reconnection delay.
    pub primed: bool,
    /// Close the stream once it has been open this long (see [`Options::close_after`]).
    pub close_after: Option<Duration>,
    /// Give events `id:` fields. Off for a protocol-level session's stream: its client resumes
    /// with `session/resume` and `sessionEventId`, never with `Last-Event-ID`.
    pub event_ids: bool,
}

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

/// Answers with the stream `reader` reads; `first` is a delivery already taken from it,
/// `start` the position it had before. At shutdown the stream gets a `retry:` and closes (a
/// request's stream once its answer is sent, or when the session ends here).
pub fn open(
    app: &App,
    reader: Reader,
    start: EventId,
    first: Option<Delivery>,
    framing: Framing,
    extras: Extras,
) -> Response<Body> {
    let mut options = Options::new(&app.http.now(), app.shutdown.clone());
    options.prelude = extras.prelude;
    if framing.primed {
        let retry = event_stream::retry_ms(&app.http.now());
        options.priming = Some(sse::priming(&start.to_string(), Some(retry)));
    }
    options.close_after = framing.close_after;
    // A request's stream stays open through a shutdown until its answer (the drain waits for
    // it); a stream of the session's own messages closes at once.
    options.stops_at_shutdown = reader.stream() == StreamKey::Standalone;
    options.span = tracing::debug_span!("stream", stream = %reader.stream());
    let source = Deliveries {
        reader,
        first,
        event_ids: framing.event_ids,
        on_replaced: extras.on_replaced,
        on_close: extras.on_close,
    };
    event_stream::open(source, options)
}

/// A reader's deliveries as SSE frames.
struct Deliveries {
    reader: Reader,
    first: Option<Delivery>,
    event_ids: bool,
    on_replaced: Option<Bytes>,
    on_close: Option<Box<dyn FnOnce() + Send>>,
}

impl Source for Deliveries {
    async fn next(&mut self, until: Option<Instant>) -> Next {
        let delivery = match self.first.take() {
            Some(delivery) => delivery,
            None => match event_stream::before(until, self.reader.next()).await {
                None => return Next::Idle,
                Some(Some(delivery)) => delivery,
                Some(None) if self.reader.replaced() => {
                    let notice = self.on_replaced.take();
                    return Next::End(notice.map(|notice| sse::event(None, &notice)));
                }
                Some(None) => return Next::Over,
            },
        };
        // One chunk per delivery: a replay of a thousand events is one write, not a thousand.
        let stream = self.event_ids.then_some(self.reader.stream());
        Next::Frames(vec![frames(stream, &delivery)])
    }

    async fn finish(self, _ended: Ended) {
        if let Some(on_close) = self.on_close {
            on_close();
        }
    }
}

/// The SSE frames of one delivery, as one chunk: logged events with ids (given their stream),
/// invalidations without (they are synthesized again if the client loses them too).
pub fn frames(stream: Option<StreamKey>, delivery: &Delivery) -> Bytes {
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
