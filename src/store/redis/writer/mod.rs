//! The writer: the owners' ops, in order, many per round trip to Redis. Each session's ops of a
//! round trip go in one run of the fenced write script (`fenced`): written only while the owner
//! still holds the session's epoch. A session whose write is refused was taken over: its
//! registry is told (`RedisStore::deposals`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use self::ttls::{Keys, Ttls};
use self::undone::Undone;
use super::fenced::{arg, Commands, SessionKey, REFUSED};
use super::RedisStore;
use crate::base::event::Logged;
use crate::store::{Deposed, Fence, Op, Queued, Record};

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
            let mut flushes = Vec::new();
            let mut writes = Writes::default();
            let mut undone = Undone::of(&batch);
            for queued in batch.drain(..) {
                if undone.skips(&queued) {
                    continue;
                }
                match queued.op {
                    Op::Flush(done) => flushes.push(done),
                    op => {
                        let session = writes.of(&queued.server, &queued.session, &queued.fence);
                        if matches!(op, Op::End) {
                            ttls.forget(&(queued.server.clone(), queued.session.clone()));
                        }
                        session.counted_in = queued.counted_in.clone();
                        self.encode(session, op);
                    }
                }
            }
            self.encode_ttls(&mut writes, &mut ttls);
            let written = self.write(&writes, &mut ttls).await;
            for done in flushes {
                let _ = done.send(written);
            }
            self.backlog.written(count);
            self.metrics
                .write_lag_ms
                .set(oldest.elapsed().as_millis() as i64);
        }
    }

    /// Sets the TTL of the keys of each session the batch left active that are due one (the
    /// set of its principal's sessions with its record: it lives as long as the longest-lived).
    fn encode_ttls(&self, writes: &mut Writes, ttls: &mut Ttls) {
        let now = Instant::now();
        for session in &mut writes.sessions {
            let Some(created) = session.active else {
                continue;
            };
            let due = ttls.due(
                &(session.server.clone(), session.session.clone()),
                created,
                now,
            );
            for (keys, key) in [
                (Keys::RECORD, SessionKey::Record),
                (Keys::LOG, SessionKey::Log),
                (Keys::INFLIGHT, SessionKey::Inflight),
                (Keys::SUBS, SessionKey::Subs),
            ] {
                if due.contains(keys) {
                    session.commands.push("PEXPIRE", key, [arg(ttls.millis)]);
                }
            }
            session.expire_counted_in = due.contains(Keys::RECORD);
        }
    }

    /// One round trip for the batch: the script run of each session, then what it does to
    /// the sets of principals' sessions; whether Redis answered. A session whose write was
    /// refused is reported deposed; an ended one leaves its principal's set after.
    async fn write(&self, writes: &Writes, ttls: &mut Ttls) -> bool {
        let scripted: Vec<&SessionWrites> = writes
            .sessions
            .iter()
            .filter(|session| !session.commands.is_empty())
            .collect();
        if scripted.is_empty() {
            return true; // only flushes: everything before them is written already
        }
        let mut pipe = redis::pipe();
        self.load_fenced(&mut pipe);
        for session in &scripted {
            self.add_fenced(
                &mut pipe,
                (&session.server, &session.session),
                session.fence.epoch(),
                session.whole_record,
                &session.commands,
            );
        }
        self.add_counting(&mut pipe, &scripted, ttls);
        let mut connection = self.timed();
        let answers: Vec<i64> = match pipe.query_async(&mut connection).await {
            Ok(answers) => answers,
            Err(error) => {
                self.failed("write", &error);
                ttls.clear(); // whatever TTL this batch set may not be set
                return false;
            }
        };
        let mut uncounted = redis::pipe();
        for (session, answer) in scripted.iter().zip(answers) {
            if answer == REFUSED {
                if session.fence.retire() {
                    let deposed = Deposed {
                        session: session.session.clone(),
                        fence: session.fence.clone(),
                    };
                    self.deposed(&session.server, deposed);
                }
                continue;
            }
            if let (true, Some(sessions)) = (session.ended, &session.counted_in) {
                let id = session.session.as_ref();
                uncounted
                    .cmd("ZREM")
                    .arg(sessions.as_ref())
                    .arg(id)
                    .ignore();
            }
        }
        if uncounted.cmd_iter().next().is_some() {
            if let Err(error) = uncounted.query_async::<()>(&mut connection).await {
                self.failed("write", &error);
            }
        }
        true
    }

    /// Adds to `pipe` the counting of each session the principal's sessions count from now on
    /// (by its record, written first, until the record expires).
    fn add_counting(&self, pipe: &mut redis::Pipeline, scripted: &[&SessionWrites], ttls: &Ttls) {
        let counting = scripted
            .iter()
            .any(|s| s.counted_in.is_some() && (s.counts || s.expire_counted_in));
        if counting {
            pipe.cmd("SCRIPT")
                .arg("LOAD")
                .arg(super::principals::COUNT)
                .ignore();
        }
        for session in scripted {
            let Some(sessions) = &session.counted_in else {
                continue;
            };
            if session.counts || session.expire_counted_in {
                pipe.cmd("EVALSHA")
                    .arg(&self.count_sha)
                    .arg(1)
                    .arg(sessions.as_ref())
                    .arg(session.session.as_ref())
                    .arg(ttls.millis)
                    .arg(if session.counts { "" } else { "XX" })
                    .ignore();
            }
        }
    }
}

/// A batch's writes, per session (and per hold: a session deposed and taken over anew here
/// within one batch is two), in the order the sessions first come.
#[derive(Default)]
struct Writes {
    sessions: Vec<SessionWrites>,
    index: HashMap<(Arc<str>, Arc<str>, usize), usize>,
}

impl Writes {
    fn of(
        &mut self,
        server: &Arc<str>,
        session: &Arc<str>,
        fence: &Arc<Fence>,
    ) -> &mut SessionWrites {
        let key = (server.clone(), session.clone(), Arc::as_ptr(fence) as usize);
        let at = *self.index.entry(key).or_insert_with(|| {
            self.sessions.push(SessionWrites {
                server: server.clone(),
                session: session.clone(),
                fence: fence.clone(),
                counted_in: None,
                commands: Commands::default(),
                whole_record: false,
                active: None,
                ended: false,
                counts: false,
                expire_counted_in: false,
            });
            self.sessions.len() - 1
        });
        &mut self.sessions[at]
    }
}

/// What a batch writes of one session: the commands of its script run, and what the set of its
/// principal's sessions gets after it.
struct SessionWrites {
    server: Arc<str>,
    session: Arc<str>,
    fence: Arc<Fence>,
    /// The key of the set of its principal's sessions it counts in, if any.
    counted_in: Option<Arc<str>>,
    commands: Commands,
    /// Its record is written whole: a missing record is written (a new session, or one Redis
    /// lost), not left missing.
    whole_record: bool,
    /// `Some` while it is active (its keys live on), with the keys a command may have created,
    /// whose TTL is set in the same round trip.
    active: Option<Keys>,
    /// It ended: it leaves its principal's set once its keys are deleted.
    ended: bool,
    /// Its record was written: it counts in its principal's set.
    counts: bool,
    /// Its record's TTL was renewed: it counts that much longer in its principal's set.
    expire_counted_in: bool,
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

impl RedisStore {
    /// Adds `op` to what the batch writes of `session`.
    fn encode(&self, session: &mut SessionWrites, op: Op) {
        let commands = &mut session.commands;
        let created = match op {
            Op::Create(record) => {
                self.encode_record(commands, &record, session.fence.epoch());
                session.whole_record = true;
                session.counts = true;
                Some(Keys::ALL)
            }
            Op::Append(logged) => {
                encode_append(commands, &logged);
                Some(Keys::LOG)
            }
            Op::Remove { seq } => {
                commands.push("XDEL", SessionKey::Log, [arg(format!("{seq}-0"))]);
                None
            }
            Op::ClearLog => {
                commands.push("DEL", SessionKey::Log, []);
                None
            }
            Op::Evicted { through } => {
                encode_eviction(commands, through);
                None
            }
            Op::Field { name, value } => {
                commands.push("HSET", SessionKey::Record, [arg(name), arg(value)]);
                Some(Keys::NONE)
            }
            Op::Inflight { stream, client_id } => {
                commands.push("HSET", SessionKey::Inflight, [arg(stream), arg(client_id)]);
                Some(Keys::INFLIGHT)
            }
            Op::Answered { stream } => {
                commands.push("HDEL", SessionKey::Inflight, [arg(stream)]);
                None
            }
            Op::Subscribed { uri } => {
                commands.push("SADD", SessionKey::Subs, [arg(uri)]);
                Some(Keys::SUBS)
            }
            Op::Unsubscribed { uri } => {
                commands.push("SREM", SessionKey::Subs, [arg(uri)]);
                None
            }
            Op::Touch => Some(Keys::NONE),
            Op::End => {
                for key in SessionKey::ALL {
                    commands.push("DEL", key, []);
                }
                session.ended = true;
                session.active = None;
                return;
            }
            Op::Flush(_) => None, // answered by the writer
        };
        // `Some`: the session is active, its keys live on, and those named may have been
        // created by the op (their TTL is set in the same round trip).
        if let Some(keys) = created {
            let active = session.active.get_or_insert(Keys::NONE);
            *active |= keys;
            session.ended = false;
        }
    }

    /// A session record: every field it has, the owner this replica unless it names one, the
    /// epoch this replica holds; its subscriptions, when it names them, replace the set (and a
    /// `subs` field an earlier version of the proxy wrote in the record).
    fn encode_record(&self, commands: &mut Commands, r: &Record, epoch: u64) {
        let owner = match r.owner.as_str() {
            "" => self.node_id.as_str(),
            owner => owner,
        };
        let mut fields = vec![
            arg("owner"),
            arg(owner),
            arg("epoch"),
            arg(epoch),
            arg("principal"),
            arg(&r.principal),
            arg("shape"),
            arg(&r.shape),
            arg("numbered"),
            arg(u8::from(r.numbered)),
            arg("next_stream"),
            arg(r.next_stream),
            arg("evicted"),
            arg(r.evicted),
            arg("upstream_ids"),
            arg(r.upstream_ids),
        ];
        for (name, value) in [
            ("version", &r.version),
            ("init", &r.init),
            ("upstream", &r.upstream),
            ("lists", &r.lists),
        ] {
            if let Some(value) = value {
                fields.extend([arg(name), arg(value)]);
            }
        }
        // Always: a record written again (a takeover) says whether the server keeps a session.
        fields.extend([
            arg("upstream_session"),
            arg(r.upstream_session.as_deref().unwrap_or_default()),
        ]);
        commands.push("HSET", SessionKey::Record, fields);
        if let Some(uris) = &r.subs {
            let uris: Vec<String> = serde_json::from_str(uris).unwrap_or_default();
            commands.push("HDEL", SessionKey::Record, [arg("subs")]);
            commands.push("DEL", SessionKey::Subs, []);
            if !uris.is_empty() {
                commands.push("SADD", SessionKey::Subs, uris.into_iter().map(arg));
            }
        }
    }
}

/// A logged message, as entry `<seq>-0` of the session's stream.
fn encode_append(commands: &mut Commands, logged: &Logged) {
    let mut args = vec![
        arg(format!("{}-0", logged.seq)),
        arg("k"),
        arg(logged.stream.to_string()),
        arg("t"),
        arg(u8::from(logged.terminal)),
        arg("p"),
        logged.payload.to_vec(),
    ];
    if let Some(key) = &logged.coalesce {
        args.extend([arg("c"), arg(key)]);
    }
    commands.push("XADD", SessionKey::Log, args);
}

/// The log trimmed of what the window evicted, through `through`, and the record told so.
fn encode_eviction(commands: &mut Commands, through: u64) {
    commands.push(
        "XTRIM",
        SessionKey::Log,
        [arg("MINID"), arg(format!("{}-0", through + 1))],
    );
    commands.push("HSET", SessionKey::Record, [arg("evicted"), arg(through)]);
}

mod ttls;
mod undone;

#[cfg(test)]
mod tests;
