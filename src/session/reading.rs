//! Who reads a session's streams: the attached reader of each, readers through other replicas'
//! views, taps. The readers' part of the session's state (`readers` does the reading).

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::log::StreamKey;
use crate::base::lazy_map::LazyMap;

/// Who reads the session's streams: the session's state of its readers.
#[derive(Debug)]
pub(super) struct Reading {
    attachments: LazyMap<StreamKey, Attachment>,
    /// Streams clients read through other replicas' views, until when (renewed while read):
    /// like an attached reader, they get every message as it comes.
    remote_readers: LazyMap<StreamKey, Instant>,
    /// Readers of the session's own messages beside the attached one (`Session::tap`).
    taps: usize,
    next_generation: u64,
}

impl Default for Reading {
    fn default() -> Reading {
        Reading {
            attachments: LazyMap::new(),
            remote_readers: LazyMap::new(),
            taps: 0,
            next_generation: 1,
        }
    }
}

/// The reader attached to a stream: a newer one detaches it.
#[derive(Debug)]
struct Attachment {
    generation: u64,
    detached: CancellationToken,
}

/// A reader attached to a stream: its generation, and what tells it a newer one replaced it.
pub(super) struct Attached {
    pub(super) generation: u64,
    pub(super) detached: CancellationToken,
}

impl Reading {
    /// Attaches a new reader to `stream`; the one it replaces, if any, is detached.
    pub(super) fn attach(&mut self, stream: StreamKey) -> Attached {
        let generation = self.next_generation;
        self.next_generation += 1;
        let detached = CancellationToken::new();
        let attachment = Attachment {
            generation,
            detached: detached.clone(),
        };
        if let Some(previous) = self.attachments.insert(stream, attachment) {
            previous.detached.cancel();
        }
        Attached {
            generation,
            detached,
        }
    }

    /// The reader of `generation` leaves `stream`, unless a newer one replaced it already.
    pub(super) fn detach(&mut self, stream: StreamKey, generation: u64) {
        if self.attachments.get(&stream).map(|a| a.generation) == Some(generation) {
            self.attachments.remove(&stream);
        }
    }

    pub(super) fn tap(&mut self) {
        self.taps += 1;
    }

    pub(super) fn untap(&mut self) {
        self.taps = self.taps.saturating_sub(1);
    }

    pub(super) fn tapped(&self) -> bool {
        self.taps > 0
    }

    /// No reader here: nothing attached, no tap.
    pub(super) fn unread(&self) -> bool {
        self.attachments.is_empty() && self.taps == 0
    }

    /// The streams read here.
    pub(super) fn attached(&self) -> impl Iterator<Item = StreamKey> + '_ {
        self.attachments.keys().copied()
    }

    /// Clients read `streams` through another replica's view for `lease` from `now` (the
    /// leases that ran out before are forgotten).
    pub(super) fn read_elsewhere(&mut self, streams: &[StreamKey], now: Instant, lease: Duration) {
        self.remote_readers.retain(|_, until| *until > now);
        for stream in streams {
            let until = crate::base::clock::deadline(now, lease);
            self.remote_readers.insert(*stream, until);
        }
    }

    /// Whether a reader, here or through another replica, takes `stream` as it comes.
    pub(super) fn read_live(&self, stream: StreamKey, now: Instant) -> bool {
        self.attachments.contains_key(&stream)
            || (stream == StreamKey::Standalone && self.taps > 0)
            || self
                .remote_readers
                .get(&stream)
                .is_some_and(|until| *until > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_reader_detaches_the_older_and_the_older_leaving_changes_nothing() {
        let mut reading = Reading::default();
        let stream = StreamKey::Request(1);
        let older = reading.attach(stream);
        let newer = reading.attach(stream);
        assert!(older.detached.is_cancelled() && !newer.detached.is_cancelled());
        reading.detach(stream, older.generation);
        assert!(
            reading.read_live(stream, Instant::now()),
            "the newer one still reads"
        );
        reading.detach(stream, newer.generation);
        assert!(reading.unread());
    }

    #[test]
    fn a_tap_reads_the_standalone_stream_and_nothing_else() {
        let mut reading = Reading::default();
        let now = Instant::now();
        reading.tap();
        assert!(reading.tapped() && !reading.unread());
        assert!(reading.read_live(StreamKey::Standalone, now));
        assert!(!reading.read_live(StreamKey::Request(1), now));
        reading.untap();
        reading.untap();
        assert!(reading.unread(), "never below none");
    }

    #[test]
    fn a_stream_read_elsewhere_is_read_live_until_its_lease_runs_out() {
        let mut reading = Reading::default();
        let now = Instant::now();
        let stream = StreamKey::Request(4);
        reading.read_elsewhere(&[stream], now, Duration::from_secs(10));
        assert!(reading.read_live(stream, now + Duration::from_secs(9)));
        assert!(!reading.read_live(stream, now + Duration::from_secs(10)));
        assert!(reading.unread(), "a remote reader is not attached here");
        let later = now + Duration::from_secs(11);
        reading.read_elsewhere(&[], later, Duration::from_secs(10));
        assert!(
            reading.remote_readers.is_empty(),
            "the lapsed lease is forgotten"
        );
    }
}
