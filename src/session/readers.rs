//! Readers of a session's streams: one per stream, attached at a position (a resume) or where
//! delivery stopped; replay and live delivery are the same loop; `session/resume` attaches the
//! one reader of a protocol-level session.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::log::{EventId, LogEvent, StreamKey};
use super::reading::Attached;
use super::state::State;
use super::{protocol, ReadError, Session};
use crate::store::Op;
use crate::telemetry::spans::Span;

/// What a reader takes out of its stream in one go.
#[derive(Debug)]
pub struct Delivery {
    pub events: Vec<LogEvent>,
    /// Synthesized invalidations, present when messages were lost (evicted unread).
    pub invalidations: Vec<Bytes>,
    /// Messages left out because a later one with the same coalesce key stands for them
    /// (coalesced at append, or as this read caught up).
    pub coalesced: u64,
}

impl Session {
    /// Forgets a stream whose messages were handed over in a form no client can resume, here
    /// and in the shared store (an idle session keeps nothing there but its record).
    pub fn forget(&self, stream: StreamKey) {
        let mut state = self.lock();
        for seq in state.log.forget_stream(stream) {
            state.mirror(|| Op::Remove { seq });
        }
    }

    /// Whether `stream` is one this session has opened (a view: one its owner may have).
    pub fn has_stream(&self, stream: StreamKey) -> bool {
        let state = self.lock();
        match stream {
            StreamKey::Standalone => true,
            StreamKey::Request(n) => n >= 1 && (state.replica.view || n < state.next_stream),
        }
    }

    /// Attaches a reader to `stream`, reading after `after` (or after what was already handed
    /// out). It becomes the stream's only reader: an earlier one is detached.
    pub fn attach(self: &Arc<Self>, stream: StreamKey, after: Option<u64>) -> Reader {
        let mut state = self.lock();
        if after.is_some() {
            self.metrics.replays_total.inc();
        }
        let cursor = after.unwrap_or_else(|| state.log.delivered_through(stream));
        self.attach_at(&mut state, stream, cursor)
    }

    fn attach_at(self: &Arc<Self>, state: &mut State, stream: StreamKey, cursor: u64) -> Reader {
        let Attached {
            generation,
            detached,
        } = state.reading.attach(stream);
        self.readers.notify_waiters();
        Reader {
            session: self.clone(),
            stream,
            cursor,
            catch_up_through: state.log.head(),
            generation,
            detached,
            replay: None,
        }
    }

    /// A reader of the session's own messages (its standalone stream) from now on, beside the
    /// attached one and any other tap: for `subscriptions/listen`, several at once. The session
    /// is in use while one reads.
    pub fn tap(self: &Arc<Self>) -> Reader {
        self.tap_after(None)
    }

    /// A tap reading after `after` (what it finds up to the newest position, it catches up on,
    /// coalesced), or from now on: the owner's look at the answer to a hop's request on the
    /// standalone stream, beside the reader attached to it.
    pub fn tap_after(self: &Arc<Self>, after: Option<u64>) -> Reader {
        let mut state = self.lock();
        state.reading.tap();
        self.readers.notify_waiters(); // a view follows its log while read
        let head = state.log.head();
        Reader {
            session: self.clone(),
            stream: StreamKey::Standalone,
            cursor: after.map_or(head, |after| after.min(head)),
            catch_up_through: head,
            generation: TAP,
            detached: CancellationToken::new(),
            replay: None,
        }
    }

    /// `session/resume`: attaches the one reader of a protocol-level session. With the last
    /// event the client processed and that position still in the window, it reads on from there
    /// (catch-up); outside the window it gets the synthesized invalidations and then live
    /// messages; without one, what was never handed out and then live messages.
    pub fn resume(self: &Arc<Self>, last: Option<u64>) -> Result<Resumed, ResumeError> {
        let mut state = self.lock();
        let head = state.log.head();
        let known = head.max(state.replica.owner_head);
        let stream = StreamKey::Standalone;
        let (cursor, catchup, first) = match last {
            Some(last) if last > known => return Err(ResumeError::Ahead { head: known }),
            Some(last) if state.log.retains_after(stream, last, Instant::now()) => {
                self.metrics.replays_total.inc();
                (last, true, None)
            }
            Some(_) => {
                self.metrics.replay_gaps_total.inc();
                let invalidations = state.subscriptions.invalidations();
                let first = (!invalidations.is_empty()).then_some(Delivery {
                    events: Vec::new(),
                    invalidations,
                    coalesced: 0,
                });
                (head, false, first)
            }
            None => (state.log.delivered_through(stream), false, None),
        };
        state.last_active = Instant::now();
        let reader = self.attach_at(&mut state, stream, cursor);
        Ok(Resumed {
            reader,
            catchup,
            first,
        })
    }

    /// Takes what `stream` holds after `cursor`, in one critical section with the check for
    /// its end, so a response logged in between is never mistaken for the end.
    fn take(&self, stream: StreamKey, cursor: &mut u64, catch_up_through: u64) -> Take {
        let mut state = self.lock();
        let read = state
            .log
            .read(stream, *cursor, catch_up_through, Instant::now());
        self.metrics.events_coalesced_total.inc_by(read.coalesced);
        let invalidations = if read.gap {
            self.metrics.replay_gaps_total.inc();
            state.subscriptions.invalidations()
        } else {
            Vec::new()
        };
        *cursor = read.through;
        state.log.mark_delivered(stream, read.through);
        if !read.events.is_empty() || !invalidations.is_empty() {
            return Take::Delivery(Delivery {
                events: read.events,
                invalidations,
                coalesced: read.coalesced + read.superseded,
            });
        }
        match stream {
            StreamKey::Request(n) if !state.is_open(n) => Take::Finished,
            _ => Take::Nothing,
        }
    }

    fn detach(&self, stream: StreamKey, generation: u64) {
        let mut state = self.lock();
        state.reading.detach(stream, generation);
        state.last_active = Instant::now();
    }

    /// Readies a reader of `stream` from `after`: a position ahead of the session's newest is
    /// refused. On a view, the owner is told first that a client reads `stream` here (so it
    /// coalesces nothing away from it), and its newest position counts; an owner that cannot
    /// be reached (dead, not yet taken over) leaves the logged messages to read, unchecked.
    pub async fn ready_reader(
        &self,
        stream: StreamKey,
        after: Option<u64>,
    ) -> Result<(), ReadError> {
        let head = match self.upstream.owner() {
            Some(owner) => match owner.read(&[stream]).await {
                Ok(reading) => {
                    let mut state = self.lock();
                    state.replica.owner_head = state.replica.owner_head.max(reading.head);
                    Some(state.replica.owner_head.max(state.log.head()))
                }
                Err(error) => {
                    self.span()
                        .in_scope(|| debug!(%error, "the owner could not be told of a reader"));
                    None
                }
            },
            None => Some(self.head()),
        };
        match (after, head) {
            (Some(after), Some(head)) if after > head => Err(ReadError::Ahead { after, head }),
            _ => Ok(()),
        }
    }

    /// Whether a tap reads the session's own messages here.
    pub(in crate::session) fn readers_signal(&self) -> Arc<tokio::sync::Notify> {
        self.readers.clone()
    }

    /// How far `stream` was handed out (read by any reader or tap here).
    pub(crate) fn delivered_through(&self, stream: StreamKey) -> u64 {
        self.lock().log.delivered_through(stream)
    }

    /// The position of the newest message in this session's log.
    pub(crate) fn head(&self) -> u64 {
        self.lock().log.head()
    }

    /// Clients read `streams` through another replica's view for `lease` from now (renewed while
    /// they do): the session is in use, and those streams get every message as it comes, as if
    /// read here. Returns the newest position.
    pub(crate) fn read_elsewhere(&self, streams: &[StreamKey], lease: Duration) -> u64 {
        let mut state = self.lock();
        let now = Instant::now();
        state.last_active = now;
        state.reading.read_elsewhere(streams, now, lease);
        state.log.head()
    }

    /// The session this view's readers read on in, once it ended.
    pub(in crate::session) fn successor(&self) -> Option<Arc<Session>> {
        self.successor.get().cloned()
    }

    pub(in crate::session) fn tapped(&self) -> bool {
        self.lock().reading.tapped()
    }

    /// The streams clients read here (a view renews them with its owner).
    pub(in crate::session) fn attached_streams(&self) -> Vec<StreamKey> {
        self.lock().reading.attached().collect()
    }

    /// Whether a reader here waits for more than this log holds: a tap or one on the
    /// standalone stream, or one on a request stream whose answer has not arrived.
    pub(in crate::session) fn has_readers(&self) -> bool {
        let state = self.lock();
        state.reading.tapped()
            || state.reading.attached().any(|stream| match stream {
                StreamKey::Standalone => true,
                StreamKey::Request(_) => !state.log.holds_end_of(stream),
            })
    }
}

/// What `session/resume` attached.
pub struct Resumed {
    pub reader: Reader,
    /// The client's position was still in the window: it gets exactly what followed it.
    pub catchup: bool,
    /// Synthesized invalidations to send first (the position was outside the window).
    pub first: Option<Delivery>,
}

#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("lastSessionEventId is ahead of this session's newest event ({})", protocol::event_id(*head))]
    Ahead { head: u64 },
}

enum Take {
    Delivery(Delivery),
    Nothing,
    Finished,
}

/// The one reader of a stream. Replay and live delivery are the same loop: read the log after
/// the cursor, then wait for it to grow.
pub struct Reader {
    session: Arc<Session>,
    stream: StreamKey,
    cursor: u64,
    /// The newest position when the reader attached: what it finds up to there, it catches up
    /// on (coalesced); what comes after, it is sent as it comes.
    catch_up_through: u64,
    generation: u64,
    detached: CancellationToken,
    /// The span of the replay it started with, until it has caught up (tracing on).
    replay: Option<Span>,
}

impl Reader {
    pub fn stream(&self) -> StreamKey {
        self.stream
    }

    /// The position this reader has reached, as an SSE event id.
    pub fn position(&self) -> EventId {
        EventId {
            stream: self.stream,
            seq: self.cursor,
        }
    }

    /// Whether this reader ended because another one was attached to its stream (a resume on
    /// another connection), rather than because the session ended.
    pub fn replaced(&self) -> bool {
        self.detached.is_cancelled() && !self.session.ended.is_cancelled()
    }

    /// The next delivery; `None` once the stream is over: a request stream after its response,
    /// any stream whose reader was replaced, or whose session ended (after what it logged).
    pub async fn next(&mut self) -> Option<Delivery> {
        loop {
            if self.detached.is_cancelled() {
                return None;
            }
            // Listening before the log is read: what is logged after the read wakes it.
            let session = self.session.clone();
            let changed = session.changes.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self
                .session
                .take(self.stream, &mut self.cursor, self.catch_up_through)
            {
                Take::Delivery(delivery) => {
                    self.note_replayed(&delivery);
                    return Some(delivery);
                }
                Take::Finished => return None,
                Take::Nothing => self.replay = None, // caught up
            }
            // What was logged before the session ended is read first.
            if self.session.ended.is_cancelled() {
                let successor = self.session.successor()?;
                self.move_to(&successor);
                continue;
            }
            tokio::select! {
                () = changed => {}
                () = self.detached.cancelled() => return None,
                () = self.session.ended.cancelled() => {}
            }
        }
    }
}

impl Reader {
    /// Records the replay this reader starts with (a resume) in `span`, which ends once the
    /// reader has caught up: the events replayed, those coalesced away, and whether some were
    /// lost (a gap; `gap` says one was found already).
    pub fn trace_replay(&mut self, span: Option<Span>, gap: bool) {
        self.replay = span.map(|mut span| {
            span.set("mcp_proxy.replay.from", self.position().to_string());
            span.set("mcp_proxy.replay.events", 0u64);
            span.set("mcp_proxy.replay.coalesced", 0u64);
            span.set("mcp_proxy.replay.gap", gap);
            span
        });
    }

    fn note_replayed(&mut self, delivery: &Delivery) {
        let Some(span) = &mut self.replay else {
            return;
        };
        span.add("mcp_proxy.replay.events", delivery.events.len() as u64);
        span.add("mcp_proxy.replay.coalesced", delivery.coalesced);
        if !delivery.invalidations.is_empty() {
            span.set("mcp_proxy.replay.gap", true);
        }
        if self.cursor >= self.catch_up_through {
            self.replay = None;
        }
    }

    /// Reads on in the session that succeeded this one (a view taken over here), at the same
    /// stream and position; what it missed in between it catches up on.
    fn move_to(&mut self, successor: &Arc<Session>) {
        if self.generation == TAP {
            *self = successor.tap();
            return;
        }
        let moved = {
            let mut state = successor.lock();
            successor.attach_at(&mut state, self.stream, self.cursor)
        };
        let replay = self.replay.take();
        *self = moved; // detaches from the view
        self.replay = replay;
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        match self.generation {
            TAP => self.session.lock().reading.untap(),
            generation => self.session.detach(self.stream, generation),
        }
    }
}

/// The generation of a tap: never one of an attachment.
const TAP: u64 = u64::MAX;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{ResumeError, StreamKey};
    use crate::session::testing::{call, initialized, principal, read_from, registry};
    use crate::session::SessionSettings;

    #[tokio::test]
    async fn a_reader_attached_after_an_event_gets_exactly_what_followed_it() {
        let registry = registry(SessionSettings::default());
        let session = initialized(&registry, principal("alice")).await;
        let stream = session.call(call(json!(1), "chatty")).await.unwrap();
        let whole = read_from(&session, stream, None, usize::MAX).await;
        assert_eq!(whole.len(), 2);
        let after_the_log_line = read_from(&session, stream, Some(whole[0].0), usize::MAX).await;
        assert_eq!(
            after_the_log_line,
            whole[1..].to_vec(),
            "the answer alone, again"
        );
        let after_the_end = read_from(&session, stream, Some(whole[1].0), usize::MAX).await;
        assert!(
            after_the_end.is_empty(),
            "a finished stream has nothing more"
        );
    }

    #[tokio::test]
    async fn a_newer_reader_of_a_stream_replaces_the_older_one() {
        let registry = registry(SessionSettings::default());
        let session = initialized(&registry, principal("alice")).await;
        let stream = session.call(call(json!(1), "never")).await.unwrap();
        let mut older = session.attach(stream, None);
        let newer = session.attach(stream, None);
        assert!(older.next().await.is_none(), "the older one ends");
        assert!(older.replaced() && !newer.replaced());
        assert_eq!(session.attached_streams(), vec![stream]);
    }

    #[tokio::test]
    async fn a_resume_from_beyond_the_newest_event_is_refused() {
        let registry = registry(SessionSettings::default());
        let session = initialized(&registry, principal("alice")).await;
        let ahead = session.resume(Some(1_000)).map(|_| ()).unwrap_err();
        assert!(matches!(ahead, ResumeError::Ahead { .. }), "{ahead}");
        let resumed = session.resume(None).unwrap();
        assert_eq!(resumed.reader.stream(), StreamKey::Standalone);
        assert!(!resumed.catchup && resumed.first.is_none());
    }
}
