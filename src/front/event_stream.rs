//! The one SSE writer every stream of the proxy goes through: a session's streams, the
//! 2026-07-28 call streams, `subscriptions/listen` and `messages/listen`. It writes a prelude
//! event, the priming event, keep-alive comments at `http.sse_keep_alive`, closes after a while
//! (2025-11-25 polling) and says `retry:` (or a listen's result) at shutdown; each stream only
//! supplies its frames, through a [`Source`].

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::request;
use super::settings::HttpSettings;
use crate::wire::http_body::Body;
use crate::wire::sse;

/// What a stream's source has next.
pub enum Next {
    /// Chunks to write, each as it is, none interrupted by the end of the stream.
    Frames(Vec<Bytes>),
    /// Nothing came before the keep-alive was due.
    Idle,
    /// The source ran dry (at shutdown, the stream then gets its closing words).
    Over,
    /// The source ends the stream with its own last chunk, if any.
    End(Option<Bytes>),
}

/// How a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Its source ran dry.
    Over,
    /// Its source ended it with its last word.
    ByItsSource,
    /// The client went away (or never read the opening).
    ClientLeft,
    /// It was open for `close_after`.
    ClosedAfter,
    /// The proxy started shutting down.
    ShutDown,
}

/// The frames of one stream.
pub trait Source: Send + Sized + 'static {
    /// The next frames, or [`Next::Idle`] once `until` has passed with none (never, without a
    /// deadline).
    fn next(&mut self, until: Option<Instant>) -> impl Future<Output = Next> + Send;

    /// Runs once the stream is over, however it ended.
    fn finish(self, ended: Ended) -> impl Future<Output = ()> + Send {
        let _ = ended;
        async {}
    }
}

/// When a stream carries keep-alive comments.
#[derive(Debug, Clone, Copy)]
pub enum KeepAlive {
    /// One every period, whatever else the stream carries.
    Every(Duration),
    /// One once nothing was written for the period.
    AfterSilence(Duration),
    /// None (frames that are not SSE: a listen relayed on a WebSocket).
    Off,
}

/// How a stream is written, besides its frames.
pub struct Options {
    /// Sent first (the legacy transport's `endpoint` event, a listen's acknowledgment, …).
    pub prelude: Option<Bytes>,
    /// The priming event (2025-11-25 and later clients), sent after the prelude.
    pub priming: Option<Bytes>,
    pub keep_alive: KeepAlive,
    /// Close the stream once it has been open this long (2025-11-25 polling, SEP-1699): the
    /// client resumes from its last event id. Only with priming, so it always has one.
    pub close_after: Option<Duration>,
    /// Cancelled when the proxy starts shutting down (none: the stream takes no notice).
    pub shutdown: Option<CancellationToken>,
    /// Whether the stream stops at shutdown; one that does not (a request's stream) goes on
    /// until its source ends, and the drain waits for it.
    pub stops_at_shutdown: bool,
    /// Sent when the stream ends during shutdown, unless its source ended it with its own last
    /// word: `retry:` for a session's stream, the result of a listen.
    pub at_shutdown: Option<Bytes>,
    /// Chunks buffered towards a slow client before the writer waits.
    pub buffered: usize,
    /// The span the writer runs in.
    pub span: tracing::Span,
}

impl Options {
    /// A stream with keep-alives at `http.sse_keep_alive` that stops at `shutdown` with a
    /// `retry:` of `http.sse_retry`.
    pub fn new(http: &HttpSettings, shutdown: CancellationToken) -> Options {
        Options {
            prelude: None,
            priming: None,
            keep_alive: KeepAlive::Every(http.sse_keep_alive),
            close_after: None,
            shutdown: Some(shutdown),
            stops_at_shutdown: true,
            at_shutdown: Some(sse::retry(retry_ms(http))),
            buffered: 32,
            span: tracing::Span::none(),
        }
    }

    /// A stream that takes no notice of shutdown: it lasts as long as its source.
    pub fn until_its_source_ends(keep_alive: KeepAlive, buffered: usize) -> Options {
        Options {
            prelude: None,
            priming: None,
            keep_alive,
            close_after: None,
            shutdown: None,
            stops_at_shutdown: false,
            at_shutdown: None,
            buffered,
            span: tracing::Span::none(),
        }
    }
}

/// The reconnection delay clients are given, in milliseconds.
pub fn retry_ms(http: &HttpSettings) -> u64 {
    http.sse_retry.as_millis() as u64
}

/// Answers with an SSE stream whose frames come from `source`, written by a task of its own.
pub fn open<S: Source>(source: S, options: Options) -> Response<Body> {
    let (chunks, body) = mpsc::channel(options.buffered);
    spawn(source, options, chunks);
    request::event_stream(Body::Stream(body))
}

/// Writes `source` to `chunks` in a task of its own (frames a WebSocket relays, say).
pub fn spawn<S: Source>(mut source: S, options: Options, chunks: mpsc::Sender<Bytes>) {
    let span = options.span.clone();
    tokio::spawn(
        async move {
            let ended = write(&mut source, &options, &chunks).await;
            source.finish(ended).await;
        }
        .instrument(span),
    );
}

/// Writes until the stream is over.
async fn write<S: Source>(
    source: &mut S,
    options: &Options,
    chunks: &mpsc::Sender<Bytes>,
) -> Ended {
    let ended = write_frames(source, options, chunks).await;
    let shutting_down = options
        .shutdown
        .as_ref()
        .is_some_and(CancellationToken::is_cancelled);
    if ended != Ended::ByItsSource && shutting_down {
        if let Some(last) = &options.at_shutdown {
            let _ = chunks.send(last.clone()).await;
        }
    }
    ended
}

async fn write_frames<S: Source>(
    source: &mut S,
    options: &Options,
    chunks: &mpsc::Sender<Bytes>,
) -> Ended {
    for opening in [&options.prelude, &options.priming].into_iter().flatten() {
        if chunks.send(opening.clone()).await.is_err() {
            return Ended::ClientLeft;
        }
    }
    let mut keep_alive = Schedule::start(options.keep_alive);
    let close_at = options
        .close_after
        .filter(|_| options.priming.is_some())
        .map(crate::base::clock::from_now);
    let closing = async {
        match close_at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    let stopping = async {
        match (&options.shutdown, options.stops_at_shutdown) {
            (Some(shutdown), true) => shutdown.cancelled().await,
            _ => std::future::pending().await,
        }
    };
    tokio::pin!(closing, stopping);
    loop {
        let next = tokio::select! {
            next = source.next(keep_alive.due()) => next,
            () = chunks.closed() => return Ended::ClientLeft,
            () = &mut closing => return Ended::ClosedAfter,
            () = &mut stopping => return Ended::ShutDown,
        };
        let frames = match next {
            Next::Frames(frames) => frames,
            Next::Idle => {
                keep_alive.ticked();
                vec![sse::keep_alive()]
            }
            Next::Over => return Ended::Over,
            Next::End(last) => {
                if let Some(last) = last {
                    let _ = chunks.send(last).await;
                }
                return Ended::ByItsSource;
            }
        };
        for frame in frames {
            if chunks.send(frame).await.is_err() {
                return Ended::ClientLeft;
            }
        }
    }
}

/// When the next keep-alive is due.
struct Schedule {
    keep_alive: KeepAlive,
    /// The next tick of [`KeepAlive::Every`].
    next: Instant,
}

impl Schedule {
    fn start(keep_alive: KeepAlive) -> Schedule {
        let next = match keep_alive {
            KeepAlive::Every(period) => crate::base::clock::from_now(period),
            _ => Instant::now(),
        };
        Schedule { keep_alive, next }
    }

    fn due(&self) -> Option<Instant> {
        match self.keep_alive {
            KeepAlive::Every(_) => Some(self.next),
            KeepAlive::AfterSilence(period) => Some(crate::base::clock::from_now(period)),
            KeepAlive::Off => None,
        }
    }

    /// A keep-alive went out: the next is a period after the one due (missed ones are sent at
    /// once, as an interval's ticks are).
    fn ticked(&mut self) {
        if let KeepAlive::Every(period) = self.keep_alive {
            self.next = crate::base::clock::deadline(self.next, period);
        }
    }
}

/// `next` unless `until` passes first (`None`: idle).
pub async fn before<F: Future>(until: Option<Instant>, next: F) -> Option<F::Output> {
    match until {
        Some(until) => tokio::time::timeout_at(until, next).await.ok(),
        None => Some(next.await),
    }
}
