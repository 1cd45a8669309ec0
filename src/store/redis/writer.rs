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
            for queued in batch.drain(..) {
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
