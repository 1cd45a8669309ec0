//! The ops of a batch that a later op of the same batch undoes, left unwritten.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::store::{Op, Queued};

/// Ops of one batch that a later op of the same batch undoes: a message logged and removed
/// again (an answer given as JSON, which no one can resume), a request in flight and answered,
/// a record field written again. None of them is written.
#[derive(Default)]
pub(super) struct Undone {
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
    pub(super) fn of(batch: &[Queued]) -> Undone {
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
    pub(super) fn skips(&mut self, queued: &Queued) -> bool {
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
