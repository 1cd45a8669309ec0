//! The writer: the owners' ops, in order, many per round trip to Redis.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::RedisStore;
use crate::metrics::Metrics;
use crate::store::{Op, Queued, Record};

/// Ops written per round trip at most.
const BATCH: usize = 1024;

impl RedisStore {
    /// Writes the owners' ops in order, many per round trip; each session's keys get their
    /// TTL once per round trip, not once per op. Exposes how far behind it is.
    pub(super) async fn run_writer(self: Arc<Self>, mut queue: mpsc::UnboundedReceiver<Queued>) {
        let mut batch = Vec::with_capacity(BATCH);
        let ttl = self.ttl.as_millis() as u64;
        while queue.recv_many(&mut batch, BATCH).await > 0 {
            let count = batch.len();
            let oldest = batch[0].at;
            let mut pipe = redis::pipe();
            let mut flushes = Vec::new();
            let mut touched: HashSet<(Arc<str>, Arc<str>)> = HashSet::new();
            let mut undone = Undone::of(&batch);
            for queued in batch.drain(..) {
                if undone.skips(&queued) {
                    continue;
                }
                match queued.op {
                    Op::Flush(done) => flushes.push(done),
                    Op::End => {
                        touched.remove(&(queued.server.clone(), queued.session.clone()));
                        self.encode(&mut pipe, &queued.server, &queued.session, Op::End);
                    }
                    op => {
                        if self.encode(&mut pipe, &queued.server, &queued.session, op) {
                            touched.insert((queued.server, queued.session));
                        }
                    }
                }
            }
            for (server, session) in &touched {
                for key in [
                    self.session_key(server, session),
                    self.log_key(server, session),
                    self.inflight_key(server, session),
                ] {
                    pipe.cmd("PEXPIRE").arg(key).arg(ttl).ignore();
                }
            }
            let mut connection = self.connection.clone();
            let written = match pipe.cmd_iter().next().is_none() {
                true => true, // only flushes: everything before them is written already
                false => match pipe.query_async::<()>(&mut connection).await {
                    Ok(()) => true,
                    Err(error) => {
                        self.failed("write", &error);
                        false
                    }
                },
            };
            for done in flushes {
                let _ = done.send(written);
            }
            self.backlog.written(count);
            Metrics::set(
                &self.metrics.store_write_queue,
                self.backlog.queued() as u64,
            );
            Metrics::set(
                &self.metrics.store_write_lag_ms,
                oldest.elapsed().as_millis() as u64,
            );
        }
    }
}

/// Ops of one batch that a later op of the same batch undoes: a message logged and removed
/// again (an answer given as JSON, which no one can resume), a request in flight and answered.
/// Neither is written: nothing of them reaches Redis.
#[derive(Default)]
struct Undone {
    /// (session, position) of each message the batch removes; (session, stream) of each request
    /// it answers.
    removed: HashSet<(Arc<str>, u64)>,
    answered: HashSet<(Arc<str>, u64)>,
    /// Those whose first half was skipped: the second is skipped too.
    skipped_appends: HashSet<(Arc<str>, u64)>,
    skipped_inflight: HashSet<(Arc<str>, u64)>,
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
            _ => false,
        }
    }
}

impl RedisStore {
    /// Adds `op` to `pipe`; true when the session's keys must live on (their TTL is set once
    /// per round trip, by the writer).
    fn encode(&self, pipe: &mut redis::Pipeline, server: &str, session: &str, op: Op) -> bool {
        let record = self.session_key(server, session);
        let log = self.log_key(server, session);
        let inflight = self.inflight_key(server, session);
        match op {
            Op::Create(r) => {
                self.encode_record(pipe, &record, &r);
                true
            }
            Op::Append(logged) => {
                let add = pipe
                    .cmd("XADD")
                    .arg(&log)
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
                true
            }
            Op::Remove { seq } => {
                pipe.cmd("XDEL").arg(&log).arg(format!("{seq}-0")).ignore();
                false
            }
            Op::Evicted { through } => {
                pipe.cmd("XTRIM")
                    .arg(&log)
                    .arg("MINID")
                    .arg(format!("{}-0", through + 1))
                    .ignore();
                pipe.cmd("HSET")
                    .arg(&record)
                    .arg("evicted")
                    .arg(through)
                    .ignore();
                false
            }
            Op::Field { name, value } => {
                pipe.cmd("HSET").arg(&record).arg(name).arg(value).ignore();
                true
            }
            Op::Inflight { stream, client_id } => {
                pipe.cmd("HSET")
                    .arg(&inflight)
                    .arg(stream)
                    .arg(client_id)
                    .ignore();
                true
            }
            Op::Answered { stream } => {
                pipe.cmd("HDEL").arg(&inflight).arg(stream).ignore();
                false
            }
            Op::Touch => true,
            Op::End => {
                pipe.cmd("DEL")
                    .arg(&record)
                    .arg(&log)
                    .arg(&inflight)
                    .ignore();
                false
            }
            Op::Flush(_) => false, // answered by the writer
        }
    }

    /// A session record: every field it has, the owner this replica unless it names one.
    fn encode_record(&self, pipe: &mut redis::Pipeline, record: &str, r: &Record) {
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
            .ignore();
        for (name, value) in [
            ("version", &r.version),
            ("init", &r.init),
            ("subs", &r.subs),
            ("upstream", &r.upstream),
        ] {
            if let Some(value) = value {
                pipe.cmd("HSET").arg(record).arg(name).arg(value).ignore();
            }
        }
    }
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
}
