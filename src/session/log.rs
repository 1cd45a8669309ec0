//! A session's event log: every server→client message gets a sequence number and a stream key,
//! is kept for replay inside a window bounded by count, bytes and age, and is coalesced with an
//! earlier message that carries the same coalesce key: at append, with an undelivered one while
//! no reader is attached (a reader takes every message as it comes); at read, within what a
//! reader catches up on (a replay or a flush gives the latest message per key, wherever the
//! earlier ones went).
//!
//! Pure data structure: no I/O, no locking; time comes in as an argument.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

pub use crate::base::event::{EventId, Logged, StreamKey};
use crate::base::lazy_map::LazyMap;

/// The bounds of a replay window.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub max_events: usize,
    pub max_bytes: usize,
    pub max_age: Duration,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            max_events: 1024,
            max_bytes: 1 << 20,
            max_age: Duration::from_secs(600),
        }
    }
}

/// One logged message. An empty payload is an end-of-stream marker that is never sent.
#[derive(Debug, Clone)]
pub struct LogEvent {
    pub seq: u64,
    pub payload: Bytes,
    /// The message ends its stream (the response of a request stream).
    pub terminal: bool,
}

#[derive(Debug)]
struct Entry {
    stream: StreamKey,
    payload: Bytes,
    terminal: bool,
    coalesce: Option<String>,
    at: Instant,
    /// How many messages it stands for: itself, and those it replaced at append (coalescing).
    stands_for: u64,
}

/// What a read of one stream found.
#[derive(Debug, Default)]
pub struct Read {
    pub events: Vec<LogEvent>,
    /// Some message of this stream after the read position was evicted before it was read.
    pub gap: bool,
    /// The position the reader has now caught up to (its next `after`).
    pub through: u64,
    /// Messages left out because a later one read with them carries the same coalesce key.
    pub coalesced: u64,
    /// Messages the ones read stand for beyond themselves: replaced by a later one before
    /// this read (coalesced at append), and so never read one by one.
    pub superseded: u64,
}

/// What one append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    pub coalesced: u64,
    pub evicted: u64,
    /// The earlier message this one replaced (coalescing).
    pub replaced: Option<u64>,
}

/// Counters the log keeps about itself.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LogCounters {
    pub appended: u64,
    pub coalesced: u64,
    pub evicted: u64,
}

/// How many per-request eviction records are kept; older ones fall back to `evicted_floor`.
const EVICTION_RECORDS: usize = 1024;

#[derive(Debug)]
pub struct EventLog {
    window: Window,
    next_seq: u64,
    entries: BTreeMap<u64, Entry>,
    by_stream: LazyMap<StreamKey, BTreeSet<u64>>,
    /// Undelivered coalescable entries: (stream, key) → seq.
    pending_coalesce: LazyMap<(StreamKey, String), u64>,
    delivered: LazyMap<StreamKey, u64>,
    /// Highest evicted seq of the standalone stream.
    evicted_standalone: u64,
    /// Highest evicted seq per request stream, for the newest `EVICTION_RECORDS` of them.
    evicted_requests: BTreeMap<u64, u64>,
    /// Records of request streams numbered below this were dropped.
    requests_forgotten_below: u64,
    /// Highest seq evicted from any stream.
    evicted_floor: u64,
    bytes: usize,
    counters: LogCounters,
}

impl EventLog {
    pub fn new(window: Window) -> EventLog {
        EventLog {
            window,
            next_seq: 1,
            entries: BTreeMap::new(),
            by_stream: LazyMap::new(),
            pending_coalesce: LazyMap::new(),
            delivered: LazyMap::new(),
            evicted_standalone: 0,
            evicted_requests: BTreeMap::new(),
            requests_forgotten_below: 0,
            evicted_floor: 0,
            bytes: 0,
            counters: LogCounters::default(),
        }
    }

    /// The sequence number of the newest message (0 before the first).
    pub fn head(&self) -> u64 {
        self.next_seq - 1
    }

    pub fn counters(&self) -> LogCounters {
        self.counters
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Appends a message. With a coalesce key and no reader attached to `stream`, an
    /// undelivered earlier message of the same stream and key is removed: the survivor takes
    /// this position. An attached reader gets every message as it comes.
    pub fn append(
        &mut self,
        stream: StreamKey,
        payload: Bytes,
        terminal: bool,
        coalesce: Option<String>,
        reader_attached: bool,
        now: Instant,
    ) -> Appended {
        let before = self.counters;
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut replaced = None;
        let mut stands_for = 1;
        if let Some(key) = &coalesce {
            let delivered = self.delivered_through(stream);
            if let Some(old) = self.pending_coalesce.insert((stream, key.clone()), seq) {
                let undelivered = !reader_attached && old > delivered;
                if let Some(gone) = undelivered.then(|| self.remove(old)).flatten() {
                    self.counters.coalesced += 1;
                    replaced = Some(old);
                    stands_for += gone.stands_for;
                }
            }
        }
        self.file(
            seq,
            Entry {
                stream,
                payload,
                terminal,
                coalesce,
                at: now,
                stands_for,
            },
        );
        Appended {
            seq,
            coalesced: self.counters.coalesced - before.coalesced,
            evicted: self.counters.evicted - before.evicted,
            replaced,
        }
    }

    /// The messages of `stream` after `after`, oldest first, and whether any were lost. Of the
    /// messages up to `catch_up_through` (what a reader finds waiting when it attaches), one
    /// with a coalesce key is left out when a later one read with it carries the same key.
    pub fn read(
        &mut self,
        stream: StreamKey,
        after: u64,
        catch_up_through: u64,
        now: Instant,
    ) -> Read {
        self.expire(now);
        let Some(seqs) = self.by_stream.get(&stream) else {
            let evicted = self.evicted_through(stream);
            return Read {
                events: Vec::new(),
                gap: evicted > after,
                through: after.max(evicted),
                coalesced: 0,
                superseded: 0,
            };
        };
        let last = seqs.range(after + 1..).next_back().copied().unwrap_or(0);
        let mut later_keys: HashSet<&str> = HashSet::new();
        let catching_up = catch_up_through > after;
        let mut coalesced = 0;
        let mut superseded = 0;
        let mut events: Vec<LogEvent> = Vec::new();
        for seq in seqs.range(after + 1..).rev() {
            let entry = &self.entries[seq];
            superseded += entry.stands_for - 1;
            if let (true, Some(key)) = (catching_up, entry.coalesce.as_deref()) {
                if !later_keys.insert(key) && *seq <= catch_up_through {
                    coalesced += 1;
                    continue;
                }
            }
            events.push(LogEvent {
                seq: *seq,
                payload: entry.payload.clone(),
                terminal: entry.terminal,
            });
        }
        events.reverse();
        self.counters.coalesced += coalesced;
        let evicted = self.evicted_through(stream);
        Read {
            events,
            gap: evicted > after,
            through: after.max(evicted).max(last),
            coalesced,
            superseded,
        }
    }

    /// Records that `stream` was handed out through `seq`: earlier messages are no longer
    /// coalesced away, since the client may have seen them.
    pub fn mark_delivered(&mut self, stream: StreamKey, seq: u64) {
        // A request stream with nothing left in the log needs no mark.
        if matches!(stream, StreamKey::Request(_)) && !self.by_stream.contains_key(&stream) {
            self.delivered.remove(&stream);
            return;
        }
        let delivered = self.delivered.entry(stream).or_insert(0);
        *delivered = (*delivered).max(seq);
    }

    /// Drops every message of `stream` without recording a gap: for messages handed over in a
    /// way no client can resume (a plain JSON response body carries no event id). Returns their
    /// positions.
    pub fn forget_stream(&mut self, stream: StreamKey) -> Vec<u64> {
        let seqs: Vec<u64> = self
            .by_stream
            .get(&stream)
            .map(|seqs| seqs.iter().copied().collect())
            .unwrap_or_default();
        for &seq in &seqs {
            self.remove(seq);
        }
        seqs
    }

    /// Files a message another replica logged, at its own position (a view of a session owned
    /// elsewhere: the owner numbered and coalesced it). Returns false for one already here.
    pub fn insert_logged(
        &mut self,
        seq: u64,
        stream: StreamKey,
        payload: Bytes,
        terminal: bool,
        coalesce: Option<String>,
        now: Instant,
    ) -> bool {
        if self.entries.contains_key(&seq) || seq <= self.evicted_floor {
            return false;
        }
        self.next_seq = self.next_seq.max(seq + 1);
        self.file(
            seq,
            Entry {
                stream,
                payload,
                terminal,
                coalesce,
                at: now,
                stands_for: 1,
            },
        );
        true
    }

    /// Keeps an entry at `seq`, then holds the window.
    fn file(&mut self, seq: u64, entry: Entry) {
        let now = entry.at;
        self.bytes += entry.payload.len();
        self.by_stream.entry(entry.stream).or_default().insert(seq);
        self.entries.insert(seq, entry);
        self.counters.appended += 1;
        self.enforce_window(now);
    }

    /// Records that the owner evicted everything up to `seq` before this log saw it.
    pub fn assume_evicted_through(&mut self, seq: u64) {
        self.evicted_floor = self.evicted_floor.max(seq);
        self.evicted_standalone = self.evicted_standalone.max(seq);
        self.next_seq = self.next_seq.max(seq + 1);
    }

    /// Whether `stream` holds its final message (a request stream's response).
    pub fn holds_end_of(&self, stream: StreamKey) -> bool {
        self.by_stream
            .get(&stream)
            .and_then(|seqs| seqs.last())
            .is_some_and(|seq| self.entries[seq].terminal)
    }

    /// Moves the next position to the next multiple of 2^32. A replica taking a session over
    /// does this: its dead owner may have handed clients positions it never wrote to the shared
    /// store, and no new message may ever reuse one of those.
    pub fn start_new_epoch(&mut self) {
        self.next_seq = (((self.next_seq - 1) >> 32) + 1) << 32;
    }

    /// Every retained message, oldest first.
    pub fn entries(&self) -> impl Iterator<Item = Logged> + '_ {
        self.entries.iter().map(|(seq, e)| Logged {
            seq: *seq,
            stream: e.stream,
            terminal: e.terminal,
            coalesce: e.coalesce.clone(),
            payload: e.payload.clone(),
        })
    }

    /// The newest position evicted from any stream (0: none).
    pub fn evicted_floor(&self) -> u64 {
        self.evicted_floor
    }

    /// Whether every message of `stream` after `after` is still in the log (none was evicted).
    pub fn retains_after(&mut self, stream: StreamKey, after: u64, now: Instant) -> bool {
        self.expire(now);
        self.evicted_through(stream) <= after
    }

    pub fn delivered_through(&self, stream: StreamKey) -> u64 {
        self.delivered.get(&stream).copied().unwrap_or(0)
    }

    /// The newest evicted position of `stream`. For a request stream whose record was dropped,
    /// the newest eviction of any stream stands in: a false gap costs a few synthesized
    /// invalidations, a missed one would lose data.
    fn evicted_through(&self, stream: StreamKey) -> u64 {
        match stream {
            StreamKey::Standalone => self.evicted_standalone,
            StreamKey::Request(n) => match self.evicted_requests.get(&n) {
                Some(evicted) => *evicted,
                None if n < self.requests_forgotten_below => self.evicted_floor,
                None => 0,
            },
        }
    }

    fn enforce_window(&mut self, now: Instant) {
        self.expire(now);
        while self.entries.len() > self.window.max_events || self.bytes > self.window.max_bytes {
            if !self.evict_oldest() {
                break;
            }
        }
    }

    fn expire(&mut self, now: Instant) {
        while let Some((_, entry)) = self.entries.first_key_value() {
            if now.saturating_duration_since(entry.at) < self.window.max_age {
                break;
            }
            self.evict_oldest();
        }
    }

    fn evict_oldest(&mut self) -> bool {
        let Some(seq) = self.entries.keys().next().copied() else {
            return false;
        };
        let Some(entry) = self.remove(seq) else {
            return false;
        };
        self.counters.evicted += 1;
        self.evicted_floor = self.evicted_floor.max(seq);
        match entry.stream {
            StreamKey::Standalone => self.evicted_standalone = seq,
            StreamKey::Request(n) => {
                self.evicted_requests.insert(n, seq);
                if self.evicted_requests.len() > EVICTION_RECORDS {
                    if let Some((oldest, _)) = self.evicted_requests.pop_first() {
                        self.requests_forgotten_below = oldest + 1;
                    }
                }
            }
        }
        true
    }

    fn remove(&mut self, seq: u64) -> Option<Entry> {
        let entry = self.entries.remove(&seq)?;
        self.bytes -= entry.payload.len();
        if let Some(seqs) = self.by_stream.get_mut(&entry.stream) {
            seqs.remove(&seq);
            if seqs.is_empty() {
                self.by_stream.remove(&entry.stream);
                if matches!(entry.stream, StreamKey::Request(_)) {
                    self.delivered.remove(&entry.stream);
                }
            }
        }
        if let Some(key) = &entry.coalesce {
            let index_key = (entry.stream, key.clone());
            if self.pending_coalesce.get(&index_key) == Some(&seq) {
                self.pending_coalesce.remove(&index_key);
            }
        }
        if self.entries.is_empty() {
            self.release_containers();
        }
        Some(entry)
    }

    /// Emptied collections keep their allocations; an idle session should hold no log memory.
    fn release_containers(&mut self) {
        self.entries = BTreeMap::new();
        self.by_stream = LazyMap::new();
        self.pending_coalesce = LazyMap::new();
        self.delivered.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(max_events: usize, max_bytes: usize) -> EventLog {
        EventLog::new(Window {
            max_events,
            max_bytes,
            max_age: Duration::from_secs(60),
        })
    }

    fn payloads(read: &Read) -> Vec<&[u8]> {
        read.events.iter().map(|e| &e.payload[..]).collect()
    }

    const G: StreamKey = StreamKey::Standalone;

    #[test]
    fn event_ids_round_trip() {
        for id in [
            EventId { stream: G, seq: 9 },
            EventId {
                stream: StreamKey::Request(3),
                seq: 12,
            },
        ] {
            assert_eq!(id.to_string().parse::<EventId>(), Ok(id));
        }
        assert!("x.1".parse::<EventId>().is_err());
        assert!("17".parse::<EventId>().is_err());
    }

    #[test]
    fn streams_are_read_separately_in_order() {
        let now = Instant::now();
        let mut log = log(100, 1 << 20);
        let r1 = StreamKey::Request(1);
        log.append(G, "a".into(), false, None, false, now);
        log.append(r1, "b".into(), false, None, false, now);
        log.append(G, "c".into(), false, None, false, now);
        log.append(r1, "d".into(), true, None, false, now);
        assert_eq!(payloads(&log.read(G, 0, 0, now)), [b"a", b"c"]);
        assert_eq!(payloads(&log.read(r1, 2, 0, now)), [b"d"]);
        assert!(log.read(r1, 2, 0, now).events[0].terminal);
        assert_eq!(log.head(), 4);
    }

    #[test]
    fn coalesces_undelivered_messages_with_the_same_key() {
        let now = Instant::now();
        let mut log = log(10_000, 1 << 20);
        for i in 0..1000 {
            let uri = format!("u{}", i % 10);
            log.append(G, format!("{uri}#{i}").into(), false, Some(uri), false, now);
        }
        let read = log.read(G, 0, 0, now);
        assert_eq!(read.events.len(), 10);
        assert_eq!(&read.events[0].payload[..], b"u0#990");
        assert_eq!(&read.events[9].payload[..], b"u9#999");
        assert_eq!(log.counters().coalesced, 990);
        assert!(!read.gap);
    }

    #[test]
    fn delivered_messages_are_not_coalesced_away() {
        let now = Instant::now();
        let mut log = log(100, 1 << 20);
        let first = log
            .append(G, "1".into(), false, Some("k".into()), false, now)
            .seq;
        log.mark_delivered(G, first);
        log.append(G, "2".into(), false, Some("k".into()), false, now);
        log.append(G, "3".into(), false, Some("k".into()), false, now);
        assert_eq!(payloads(&log.read(G, 0, 0, now)), [b"1", b"3"]);
    }

    #[test]
    fn keys_do_not_coalesce_across_streams() {
        let now = Instant::now();
        let mut log = log(100, 1 << 20);
        log.append(G, "1".into(), false, Some("k".into()), false, now);
        log.append(
            StreamKey::Request(1),
            "2".into(),
            false,
            Some("k".into()),
            false,
            now,
        );
        assert_eq!(log.read(G, 0, 0, now).events.len(), 1);
    }

    #[test]
    fn evicts_by_count_and_reports_the_gap() {
        let now = Instant::now();
        let mut log = log(3, 1 << 20);
        for i in 1..=5 {
            log.append(G, format!("{i}").into(), false, None, false, now);
        }
        let read = log.read(G, 1, 0, now);
        assert_eq!(payloads(&read), [b"3", b"4", b"5"]);
        assert!(read.gap, "2 was evicted");
        assert_eq!(read.through, 5);
        assert!(!log.read(G, 2, 0, now).gap);
        let caught_up = log.read(G, 5, 0, now);
        assert!(!caught_up.gap && caught_up.events.is_empty());
        assert_eq!(log.counters().evicted, 2);
    }

    #[test]
    fn evicts_by_bytes() {
        let now = Instant::now();
        let mut log = log(100, 10);
        log.append(G, "12345".into(), false, None, false, now);
        log.append(G, "12345".into(), false, None, false, now);
        log.append(G, "1".into(), false, None, false, now);
        assert_eq!(log.len(), 2);
        assert_eq!(log.bytes(), 6);
    }

    #[test]
    fn evicts_by_age() {
        let start = Instant::now();
        let mut log = log(100, 1 << 20);
        log.append(G, "old".into(), false, None, false, start);
        let later = start + Duration::from_secs(61);
        log.append(G, "new".into(), false, None, false, later);
        let read = log.read(G, 0, 0, later);
        assert_eq!(payloads(&read), [b"new"]);
        assert!(read.gap);
    }

    #[test]
    fn a_gap_in_one_stream_is_not_a_gap_in_another() {
        let now = Instant::now();
        let mut log = log(2, 1 << 20);
        log.append(StreamKey::Request(1), "x".into(), true, None, false, now);
        log.append(G, "a".into(), false, None, false, now);
        log.append(G, "b".into(), false, None, false, now);
        assert!(!log.read(G, 0, 0, now).gap);
        assert!(log.read(StreamKey::Request(1), 0, 0, now).gap);
    }

    #[test]
    fn bookkeeping_of_request_streams_goes_with_their_messages() {
        let now = Instant::now();
        let mut log = log(4, 1 << 20);
        for n in 1..=100 {
            let stream = StreamKey::Request(n);
            let seq = log.append(stream, "r".into(), true, None, false, now).seq;
            log.mark_delivered(stream, seq);
        }
        assert!(
            log.delivered.len() <= 4,
            "{} delivery marks",
            log.delivered.len()
        );
        log.forget_stream(StreamKey::Request(100));
        assert_eq!(log.len(), 3);
        assert!(
            !log.read(StreamKey::Request(100), 0, 0, now).gap,
            "forgetting is not a gap"
        );
    }

    #[test]
    fn an_attached_reader_is_sent_every_message() {
        let now = Instant::now();
        let mut log = log(100, 1 << 20);
        for i in 0..6 {
            log.append(G, format!("{i}").into(), false, Some("k".into()), true, now);
        }
        assert_eq!(log.len(), 6, "nothing replaced while a reader takes them");
        assert_eq!(log.read(G, 0, 0, now).events.len(), 6);
    }

    #[test]
    fn a_catch_up_gives_the_latest_message_per_key_and_everything_after_it() {
        let now = Instant::now();
        let mut log = log(10_000, 1 << 20);
        let r1 = StreamKey::Request(1);
        for i in 0..300 {
            let uri = format!("u{}", i % 3);
            log.append(G, format!("{uri}#{i}").into(), false, Some(uri), true, now);
        }
        log.append(G, "plain".into(), false, None, true, now);
        let caught_up_to = log.head();
        log.append(G, "u0#live".into(), false, Some("u0".into()), true, now);
        let read = log.read(G, 0, caught_up_to, now);
        assert_eq!(
            payloads(&read),
            [&b"u1#298"[..], b"u2#299", b"plain", b"u0#live"],
            "the latest per key, in log order; what came after the catch-up is kept"
        );
        assert_eq!(
            read.coalesced, 298,
            "all of u0 before the live one, all but the last of u1 and u2"
        );
        assert_eq!(read.through, log.head());
        let live = log.read(G, caught_up_to - 3, 0, now);
        assert_eq!(live.events.len(), 4, "a live read leaves everything in");
        // A request stream's progress (with its coalesce key) stays before its response.
        for step in 1..=3 {
            let payload = format!("progress {step}");
            log.append(r1, payload.into(), false, Some("p".into()), true, now);
        }
        log.append(r1, "response".into(), true, None, true, now);
        let read = log.read(r1, 0, log.head(), now);
        assert_eq!(payloads(&read), [&b"progress 3"[..], b"response"]);
    }

    #[test]
    fn coalesce_index_is_dropped_with_evicted_entries() {
        let now = Instant::now();
        let mut log = log(2, 1 << 20);
        for i in 0..50 {
            log.append(G, "x".into(), false, Some(format!("k{i}")), false, now);
        }
        assert!(log.pending_coalesce.len() <= 2);
    }
}
