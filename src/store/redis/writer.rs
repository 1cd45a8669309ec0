//! The writer: the owners' ops, in order, many per round trip to Redis.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::RedisStore;
use crate::event::Logged;
use crate::store::{Op, Queued, Record};

/// Ops written per round trip at most.
const BATCH: usize = 1024;

impl RedisStore {
    /// Writes the owners' ops in order, many per round trip; each session's keys get their
    /// TTL once per round trip, not once per op. Exposes how far behind it is.
    pub(super) async fn run_writer(self: Arc<Self>, mut queue: mpsc::UnboundedReceiver<Queued>) {
        let mut batch = Vec::with_capacity(BATCH);
        let mut ttls = Ttls::new(self.ttl);
        while queue.recv_many(&mut batch, BATCH).await > 0 {
            self.gather(&mut queue, &mut batch).await;
            let count = batch.len();
            let oldest = batch[0].at;
            let mut pipe = redis::pipe();
            let mut flushes = Vec::new();
            let mut touched: HashMap<(Arc<str>, Arc<str>), Touched> = HashMap::new();
            let mut undone = Undone::of(&batch);
            for queued in batch.drain(..) {
                if undone.skips(&queued) {
                    continue;
                }
                let session = (queued.server.clone(), queued.session.clone());
                let counted_in = queued.counted_in.as_deref();
                match queued.op {
                    Op::Flush(done) => flushes.push(done),
                    Op::End => {
                        touched.remove(&session);
                        ttls.forget(&session);
                        self.encode(&mut pipe, &session, counted_in, Op::End);
                    }
                    op => {
                        if let Some(keys) = self.encode(&mut pipe, &session, counted_in, op) {
                            let touched = touched.entry(session).or_default();
                            touched.keys |= keys;
                            touched.counted_in = queued.counted_in.clone();
                        }
                    }
                }
            }
            self.encode_ttls(&mut pipe, &mut ttls, &touched);
            let written = self.write(&pipe, &mut ttls).await;
            for done in flushes {
                let _ = done.send(written);
            }
            self.backlog.written(count);
            self.metrics
                .write_lag_ms
                .set(oldest.elapsed().as_millis() as i64);
        }
    }

    /// Sets the TTL of the keys of each session the batch touched that are due one (the set of
    /// its principal's sessions with its record: it lives as long as the longest-lived).
    fn encode_ttls(
        &self,
        pipe: &mut redis::Pipeline,
        ttls: &mut Ttls,
        touched: &HashMap<(Arc<str>, Arc<str>), Touched>,
    ) {
        let now = Instant::now();
        for ((server, session), touched) in touched {
            let keys = ttls.due(&(server.clone(), session.clone()), touched.keys, now);
            let counted_in = touched.counted_in.as_deref().map(str::to_owned);
            for (key, name) in [
                (Keys::RECORD, Some(self.session_key(server, session))),
                (Keys::LOG, Some(self.log_key(server, session))),
                (Keys::INFLIGHT, Some(self.inflight_key(server, session))),
                (Keys::SUBS, Some(self.subs_key(server, session))),
                (Keys::RECORD, counted_in),
            ] {
                if let (true, Some(name)) = (keys.contains(key), name) {
                    pipe.cmd("PEXPIRE").arg(name).arg(ttls.millis).ignore();
                }
            }
        }
    }

    /// One round trip for the batch; whether it was written.
    async fn write(&self, pipe: &redis::Pipeline, ttls: &mut Ttls) -> bool {
        let mut connection = self.timed();
        match pipe.cmd_iter().next().is_none() {
            true => true, // only flushes: everything before them is written already
            false => match pipe.query_async::<()>(&mut connection).await {
                Ok(()) => true,
                Err(error) => {
                    self.failed("write", &error);
                    ttls.clear(); // whatever TTL this batch set may not be set
                    false
                }
            },
        }
    }
}

impl RedisStore {
    /// Lets more ops join `batch` until `write_delay` after its oldest was queued, unless
    /// someone waits for it to be written (a flush) or it is full: one round trip and one
    /// wake-up of the writer for many ops, and a request answered within the delay never
    /// reaches Redis.
    async fn gather(&self, queue: &mut mpsc::UnboundedReceiver<Queued>, batch: &mut Vec<Queued>) {
        let waited_for = |ops: &[Queued]| ops.iter().any(|q| matches!(q.op, Op::Flush(_)));
        if self.write_delay.is_zero() || waited_for(batch) {
            return;
        }
        let due = tokio::time::Instant::from_std(batch[0].at + self.write_delay);
        tokio::time::sleep_until(due).await;
        while batch.len() < BATCH {
            match queue.try_recv() {
                Ok(queued) => batch.push(queued),
                Err(_) => break,
            }
        }
    }
}

/// What a batch did to a session: the keys whose TTL it may need, and the set of its
/// principal's sessions it counts in.
#[derive(Default)]
struct Touched {
    keys: Keys,
    counted_in: Option<Arc<str>>,
}

/// A session's keys, as a set: those whose TTL a round trip sets.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct Keys(u8);

impl Keys {
    const NONE: Keys = Keys(0);
    const RECORD: Keys = Keys(1);
    const LOG: Keys = Keys(2);
    const INFLIGHT: Keys = Keys(4);
    const SUBS: Keys = Keys(8);
    const ALL: Keys = Keys(15);

    fn contains(self, other: Keys) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOrAssign for Keys {
    fn bitor_assign(&mut self, other: Keys) {
        self.0 |= other.0;
    }
}

/// When each session's keys last had their TTL set. A key a write may have created gets its
/// TTL in the same round trip; the rest of an active session's keys get theirs again at most
/// once per `every`, not at every write.
struct Ttls {
    millis: u64,
    every: Duration,
    set: HashMap<(Arc<str>, Arc<str>), Instant>,
    /// Entries after the last pruning: the map is pruned of stale ones when it doubles.
    pruned_at: usize,
}

impl Ttls {
    fn new(ttl: Duration) -> Ttls {
        Ttls {
            millis: ttl.as_millis() as u64,
            every: (ttl / 4).min(Duration::from_secs(1)),
            set: HashMap::new(),
            pruned_at: 1024,
        }
    }

    /// The keys of `session` whose TTL is set now: those `created` may have made, or all of
    /// them when they were last set longer than `every` ago.
    fn due(&mut self, session: &(Arc<str>, Arc<str>), created: Keys, now: Instant) -> Keys {
        if self.set.len() > 2 * self.pruned_at {
            self.set
                .retain(|_, at| now.duration_since(*at) < self.every);
            self.pruned_at = self.set.len().max(1024);
        }
        match self.set.get(session) {
            Some(at) if now.duration_since(*at) < self.every => created,
            _ => {
                self.set.insert(session.clone(), now);
                Keys::ALL
            }
        }
    }

    fn forget(&mut self, session: &(Arc<str>, Arc<str>)) {
        self.set.remove(session);
    }

    fn clear(&mut self) {
        self.set.clear();
    }
}

/// Ops of one batch that a later op of the same batch undoes: a message logged and removed
/// again (an answer given as JSON, which no one can resume), a request in flight and answered,
/// a record field written again. None of them is written.
#[derive(Default)]
struct Undone {
    /// (session, position) of each message the batch removes; (session, stream) of each request
    /// it answers.
    removed: HashSet<(Arc<str>, u64)>,
    answered: HashSet<(Arc<str>, u64)>,
    /// Those whose first half was skipped: the second is skipped too.
    skipped_appends: HashSet<(Arc<str>, u64)>,
    skipped_inflight: HashSet<(Arc<str>, u64)>,
    /// How many writes of each record field are still to come: all but the last are skipped.
    fields: HashMap<(Arc<str>, &'static str), usize>,
}

impl Undone {
    fn of(batch: &[Queued]) -> Undone {
        let mut undone = Undone::default();
        for queued in batch {
            let session = queued.session.clone();
            match &queued.op {
                Op::Remove { seq } => {
                    undone.removed.insert((session, *seq));
                }
                Op::Answered { stream } => {
                    undone.answered.insert((session, *stream));
                }
                Op::Field { name, .. } => {
                    *undone.fields.entry((session, name)).or_default() += 1;
                }
                _ => {}
            }
        }
        undone
    }

    /// Whether `queued` is left out of the batch.
    fn skips(&mut self, queued: &Queued) -> bool {
        let session = &queued.session;
        match &queued.op {
            Op::Append(logged) => {
                let key = (session.clone(), logged.seq);
                self.removed.contains(&key) && self.skipped_appends.insert(key)
            }
            Op::Remove { seq } => self.skipped_appends.contains(&(session.clone(), *seq)),
            Op::Inflight { stream, .. } => {
                let key = (session.clone(), *stream);
                self.answered.contains(&key) && self.skipped_inflight.insert(key)
            }
            Op::Answered { stream } => self.skipped_inflight.contains(&(session.clone(), *stream)),
            Op::Field { name, .. } => match self.fields.get_mut(&(session.clone(), *name)) {
                Some(to_come) => {
                    *to_come -= 1;
                    *to_come > 0
                }
                None => false,
            },
            _ => false,
        }
    }
}

impl RedisStore {
    /// Adds `op` of `session` (server, id) to `pipe`; `counted_in`: the set of its principal's
    /// sessions, if it counts in one. `Some`: the session is active, its keys live on, and
    /// those named may have been created by the op (the writer sets their TTL).
    fn encode(
        &self,
        pipe: &mut redis::Pipeline,
        (server, session): &(Arc<str>, Arc<str>),
        counted_in: Option<&str>,
        op: Op,
    ) -> Option<Keys> {
        let (server, session) = (server.as_ref(), session.as_ref());
        let record = self.session_key(server, session);
        let log = self.log_key(server, session);
        let inflight = self.inflight_key(server, session);
        let subs = self.subs_key(server, session);
        match op {
            Op::Create(r) => {
                self.encode_record(pipe, &record, &subs, &r);
                if let Some(sessions) = counted_in {
                    // Counted from now on by its record (written first), for as long as it lives.
                    pipe.cmd("ZADD").arg(sessions).arg(0).arg(session).ignore();
                }
                Some(Keys::ALL)
            }
            Op::Append(logged) => {
                encode_append(pipe, &log, &logged);
                Some(Keys::LOG)
            }
            Op::Remove { seq } => {
                pipe.cmd("XDEL").arg(&log).arg(format!("{seq}-0")).ignore();
                None
            }
            Op::Evicted { through } => {
                encode_eviction(pipe, &log, &record, through);
                None
            }
            Op::Field { name, value } => {
                pipe.cmd("HSET").arg(&record).arg(name).arg(value).ignore();
                Some(Keys::NONE)
            }
            Op::Inflight { stream, client_id } => {
                pipe.cmd("HSET")
                    .arg(&inflight)
                    .arg(stream)
                    .arg(client_id)
                    .ignore();
                Some(Keys::INFLIGHT)
            }
            Op::Answered { stream } => {
                pipe.cmd("HDEL").arg(&inflight).arg(stream).ignore();
                None
            }
            Op::Subscribed { uri } => {
                pipe.cmd("SADD").arg(&subs).arg(uri).ignore();
                Some(Keys::SUBS)
            }
            Op::Unsubscribed { uri } => {
                pipe.cmd("SREM").arg(&subs).arg(uri).ignore();
                None
            }
            Op::Touch => Some(Keys::NONE),
            Op::End => {
                pipe.cmd("DEL")
                    .arg(&record)
                    .arg(&log)
                    .arg(&inflight)
                    .arg(&subs)
                    .ignore();
                if let Some(sessions) = counted_in {
                    pipe.cmd("ZREM").arg(sessions).arg(session).ignore();
                }
                None
            }
            Op::Flush(_) => None, // answered by the writer
        }
    }

    /// A session record: every field it has, the owner this replica unless it names one; its
    /// subscriptions, when it names them, replace the set (and a `subs` field an earlier
    /// version of the proxy wrote in the record).
    fn encode_record(&self, pipe: &mut redis::Pipeline, record: &str, subs: &str, r: &Record) {
        let owner = match r.owner.as_str() {
            "" => self.node_id.as_str(),
            owner => owner,
        };
        pipe.cmd("HSET")
            .arg(record)
            .arg("owner")
            .arg(owner)
            .arg("principal")
            .arg(&r.principal)
            .arg("shape")
            .arg(&r.shape)
            .arg("numbered")
            .arg(u8::from(r.numbered))
            .arg("next_stream")
            .arg(r.next_stream)
            .arg("evicted")
            .arg(r.evicted)
            .arg("upstream_ids")
            .arg(r.upstream_ids)
            .ignore();
        for (name, value) in [
            ("version", &r.version),
            ("init", &r.init),
            ("upstream", &r.upstream),
            ("lists", &r.lists),
        ] {
            if let Some(value) = value {
                pipe.cmd("HSET").arg(record).arg(name).arg(value).ignore();
            }
        }
        // Always: a record written again (a takeover) says whether the server keeps a session.
        pipe.cmd("HSET")
            .arg(record)
            .arg("upstream_session")
            .arg(r.upstream_session.as_deref().unwrap_or_default())
            .ignore();
        if let Some(uris) = &r.subs {
            let uris: Vec<String> = serde_json::from_str(uris).unwrap_or_default();
            pipe.cmd("HDEL").arg(record).arg("subs").ignore();
            pipe.cmd("DEL").arg(subs).ignore();
            if !uris.is_empty() {
                pipe.cmd("SADD").arg(subs).arg(uris).ignore();
            }
        }
    }
}

/// A logged message, as entry `<seq>-0` of the session's stream.
fn encode_append(pipe: &mut redis::Pipeline, log: &str, logged: &Logged) {
    let add = pipe
        .cmd("XADD")
        .arg(log)
        .arg(format!("{}-0", logged.seq))
        .arg("k")
        .arg(logged.stream.to_string())
        .arg("t")
        .arg(u8::from(logged.terminal))
        .arg("p")
        .arg(logged.payload.as_ref());
    if let Some(key) = &logged.coalesce {
        add.arg("c").arg(key);
    }
    add.ignore();
}

/// The log trimmed of what the window evicted, through `through`, and the record told so.
fn encode_eviction(pipe: &mut redis::Pipeline, log: &str, record: &str, through: u64) {
    pipe.cmd("XTRIM")
        .arg(log)
        .arg("MINID")
        .arg(format!("{}-0", through + 1))
        .ignore();
    pipe.cmd("HSET")
        .arg(record)
        .arg("evicted")
        .arg(through)
        .ignore();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Logged;
    use crate::session::log::StreamKey;

    fn queued(session: &str, op: Op) -> Queued {
        Queued {
            server: "default".into(),
            session: session.into(),
            counted_in: None,
            op,
            at: std::time::Instant::now(),
        }
    }

    fn append(session: &str, seq: u64) -> Queued {
        queued(
            session,
            Op::Append(Logged {
                seq,
                stream: StreamKey::Request(1),
                terminal: true,
                coalesce: None,
                payload: "{}".into(),
            }),
        )
    }

    #[test]
    fn what_a_batch_undoes_is_not_written_and_the_rest_is() {
        let batch = vec![
            queued(
                "a",
                Op::Inflight {
                    stream: 1,
                    client_id: "1".into(),
                },
            ),
            append("a", 1),
            queued("a", Op::Answered { stream: 1 }),
            append("a", 2),
            queued("b", Op::Remove { seq: 1 }),
            queued("a", Op::Remove { seq: 1 }),
            queued("a", Op::Answered { stream: 7 }),
        ];
        let mut undone = Undone::of(&batch);
        let kept: Vec<bool> = batch.iter().map(|q| !undone.skips(q)).collect();
        // a's request 1 in flight and answered, its answer logged and removed: none of it; a's
        // message 2 stays; b's removal of a message logged in an earlier batch is written, as
        // is a's answer to a request put in flight earlier.
        assert_eq!(kept, [false, false, false, true, true, false, true]);
    }

    fn field(session: &str, name: &'static str, value: &str) -> Queued {
        queued(
            session,
            Op::Field {
                name,
                value: value.into(),
            },
        )
    }

    #[test]
    fn a_record_field_written_again_in_a_batch_is_written_once_with_its_last_value() {
        let batch = vec![
            field("a", "next_stream", "2"),
            field("b", "next_stream", "2"),
            field("a", "version", "2025-11-25"),
            field("a", "next_stream", "3"),
            field("a", "next_stream", "4"),
        ];
        let mut undone = Undone::of(&batch);
        let kept: Vec<bool> = batch.iter().map(|q| !undone.skips(q)).collect();
        assert_eq!(kept, [false, true, true, false, true]);
    }

    #[test]
    fn a_sessions_ttls_are_set_for_keys_just_created_and_all_again_only_now_and_then() {
        let mut ttls = Ttls::new(Duration::from_secs(60));
        let a: (Arc<str>, Arc<str>) = ("default".into(), "a".into());
        let start = Instant::now();
        assert_eq!(
            ttls.due(&a, Keys::NONE, start),
            Keys::ALL,
            "first seen: all"
        );
        let soon = start + Duration::from_millis(10);
        assert_eq!(ttls.due(&a, Keys::NONE, soon), Keys::NONE, "just set");
        assert_eq!(
            ttls.due(&a, Keys::INFLIGHT, soon),
            Keys::INFLIGHT,
            "a key the round trip may have created gets its TTL at once"
        );
        let later = start + Duration::from_secs(2);
        assert_eq!(
            ttls.due(&a, Keys::NONE, later),
            Keys::ALL,
            "a second on: all again"
        );
        ttls.forget(&a);
        assert_eq!(
            ttls.due(&a, Keys::NONE, later),
            Keys::ALL,
            "ended and seen again"
        );
        ttls.clear();
        assert_eq!(
            ttls.due(&a, Keys::NONE, later),
            Keys::ALL,
            "after a failed write"
        );
    }
}
