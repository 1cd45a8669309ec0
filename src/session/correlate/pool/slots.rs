//! The anonymous pool's book-keeping, without I/O: which sessions are ready for which client
//! capabilities, how many are being prepared or lent, and which capabilities borrowers wait
//! for.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::super::canonical;

/// The client capabilities a session is initialized with; equal when their canonical forms
/// are.
#[derive(Debug, Clone)]
pub(super) struct Want {
    pub(super) key: String,
    pub(super) capabilities: Arc<Map<String, Value>>,
}

impl Want {
    pub(super) fn new(capabilities: &Map<String, Value>) -> Want {
        Want {
            key: canonical(capabilities),
            capabilities: Arc::new(capabilities.clone()),
        }
    }
}

/// The pool's book-keeping, without I/O: the ready sessions (with the capabilities they were
/// initialized with), how many are being prepared for which capabilities, how many are lent,
/// and how many borrowers wait for which. Ready, being prepared and lent together never
/// exceed `size`.
#[derive(Debug)]
pub(super) struct Slots<T> {
    size: usize,
    /// Oldest first.
    pub(super) ready: VecDeque<(Want, T)>,
    preparing: HashMap<String, usize>,
    lent: usize,
    waiting: HashMap<String, (usize, Want)>,
}

/// A place `Slots::claim` found for one more session.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Claimed<T> {
    /// None: as many are being prepared for those capabilities as borrowers wait for them,
    /// or every place is lent or being prepared.
    No,
    /// A free place.
    Free,
    /// The place of this ready one, initialized for other capabilities, which is to be ended.
    Evicted(T),
}

impl<T> Slots<T> {
    pub(super) fn new(size: usize) -> Slots<T> {
        Slots {
            size,
            ready: VecDeque::new(),
            preparing: HashMap::new(),
            lent: 0,
            waiting: HashMap::new(),
        }
    }

    fn places(&self) -> usize {
        self.ready.len() + self.preparing.values().sum::<usize>() + self.lent
    }

    fn preparing_for(&self, key: &str) -> usize {
        self.preparing.get(key).copied().unwrap_or(0)
    }

    fn begin(&mut self, want: &Want) {
        *self.preparing.entry(want.key.clone()).or_default() += 1;
    }

    fn done(&mut self, key: &str) {
        if let Some(count) = self.preparing.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                self.preparing.remove(key);
            }
        }
    }

    /// A ready one for `want`, lent now: the newest (with reuse, the warmest).
    pub(super) fn take(&mut self, want: &Want) -> Option<T> {
        let at = self.ready.iter().rposition(|(w, _)| w.key == want.key)?;
        let (_, taken) = self.ready.remove(at)?;
        self.lent += 1;
        Some(taken)
    }

    /// A borrower waits for one of `want`.
    pub(super) fn wait(&mut self, want: &Want) {
        self.waiting
            .entry(want.key.clone())
            .or_insert((0, want.clone()))
            .0 += 1;
    }

    /// A borrower of `key` waits no more.
    pub(super) fn unwait(&mut self, key: &str) {
        if let Some((count, _)) = self.waiting.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                self.waiting.remove(key);
            }
        }
    }

    /// A place for one more to be prepared for `want`, which a borrower waits for.
    pub(super) fn claim(&mut self, want: &Want) -> Claimed<T> {
        let waiting = self.waiting.get(&want.key).map_or(0, |(count, _)| *count);
        if self.preparing_for(&want.key) >= waiting {
            return Claimed::No;
        }
        if self.places() < self.size {
            self.begin(want);
            return Claimed::Free;
        }
        let Some(at) = self.ready.iter().position(|(w, _)| w.key != want.key) else {
            return Claimed::No;
        };
        let Some((_, evicted)) = self.ready.remove(at) else {
            return Claimed::No;
        };
        self.begin(want);
        Claimed::Evicted(evicted)
    }

    /// Places taken to be prepared for `want` until the pool is full; how many.
    pub(super) fn top_up(&mut self, want: &Want) -> usize {
        let free = self.size.saturating_sub(self.places());
        if free > 0 {
            *self.preparing.entry(want.key.clone()).or_default() += free;
        }
        free
    }

    /// One prepared for `want` is ready.
    pub(super) fn prepared(&mut self, want: Want, ready: T) {
        self.done(&want.key);
        self.ready.push_back((want, ready));
    }

    /// One being prepared for `key` failed: its place is free.
    pub(super) fn failed(&mut self, key: &str) {
        self.done(key);
    }

    /// A lent one comes back ready (with reuse).
    pub(super) fn give_back(&mut self, want: Want, ready: T) {
        self.lent = self.lent.saturating_sub(1);
        self.ready.push_back((want, ready));
    }

    /// A lent one will not come back: its place is free.
    pub(super) fn release(&mut self) {
        self.lent = self.lent.saturating_sub(1);
    }

    /// A lent one will not come back: its place goes to one prepared for what a borrower
    /// waits for and nothing is being prepared for, else for `want` again; that.
    pub(super) fn replace(&mut self, want: Want) -> Want {
        self.lent = self.lent.saturating_sub(1);
        let wanted = self
            .waiting
            .iter()
            .find(|(key, (count, _))| *count > self.preparing_for(key))
            .map(|(_, (_, wanted))| wanted.clone());
        let next = wanted.unwrap_or(want);
        self.begin(&next);
        next
    }

    /// Drops the ready one `gone` picks; whether there was one.
    pub(super) fn remove_ready(&mut self, gone: impl Fn(&T) -> bool) -> bool {
        let Some(at) = self.ready.iter().position(|(_, t)| gone(t)) else {
            return false;
        };
        self.ready.remove(at);
        true
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::gauge::Gauge;

    use super::super::{AnonymousPool, DEFAULT_WAIT};
    use super::*;

    fn want(key: &str) -> Want {
        Want {
            key: key.into(),
            capabilities: Arc::default(),
        }
    }

    #[test]
    fn lends_a_ready_one_of_the_same_capabilities_the_newest_first() {
        let mut slots = Slots::new(3);
        assert_eq!(slots.top_up(&want("a")), 3);
        slots.prepared(want("a"), 1);
        slots.prepared(want("a"), 2);
        assert_eq!(slots.take(&want("b")), None);
        assert_eq!(slots.take(&want("a")), Some(2));
        assert_eq!(slots.take(&want("a")), Some(1));
        assert_eq!(slots.take(&want("a")), None, "the third is being prepared");
        assert_eq!((slots.lent, slots.places()), (2, 3));
    }

    #[test]
    fn a_borrower_claims_a_place_only_for_what_nothing_is_prepared_for() {
        let mut slots = Slots::new(2);
        slots.wait(&want("a"));
        assert_eq!(slots.claim(&want("a")), Claimed::Free);
        assert_eq!(
            slots.claim(&want("a")),
            Claimed::No,
            "one waits, one coming"
        );
        slots.wait(&want("a"));
        assert_eq!(slots.claim(&want("a")), Claimed::Free);
        slots.wait(&want("b"));
        assert_eq!(slots.claim(&want("b")), Claimed::No, "full");
        slots.prepared(want("a"), 7);
        // Full: a ready one of other capabilities makes way.
        assert_eq!(slots.claim(&want("b")), Claimed::Evicted(7));
        assert_eq!(slots.places(), 2);
        slots.unwait("a");
        slots.unwait("a");
        slots.unwait("b");
        assert!(slots.waiting.is_empty());
    }

    #[test]
    fn a_place_lost_goes_to_what_a_borrower_waits_for() {
        let mut slots = Slots::new(1);
        slots.top_up(&want("a"));
        slots.prepared(want("a"), 1);
        assert_eq!(slots.take(&want("a")), Some(1));
        assert_eq!(slots.top_up(&want("a")), 0, "full");
        assert_eq!(slots.replace(want("a")).key, "a");
        slots.prepared(want("a"), 2);
        assert_eq!(slots.take(&want("a")), Some(2));
        slots.wait(&want("b"));
        assert_eq!(slots.replace(want("a")).key, "b");
        assert_eq!(slots.claim(&want("b")), Claimed::No, "b is being prepared");
        slots.failed("b");
        assert_eq!(slots.places(), 0);
        assert_eq!(slots.claim(&want("b")), Claimed::Free);
    }

    #[test]
    fn with_reuse_a_lent_one_comes_back_and_a_released_place_is_free() {
        let mut slots = Slots::new(1);
        slots.wait(&want("a"));
        assert_eq!(slots.claim(&want("a")), Claimed::Free);
        slots.unwait("a");
        slots.prepared(want("a"), 1);
        assert_eq!(slots.take(&want("a")), Some(1));
        slots.give_back(want("a"), 1);
        assert_eq!(slots.take(&want("a")), Some(1));
        slots.release();
        assert_eq!(slots.places(), 0);
        assert!(!slots.remove_ready(|_| true), "none ready");
    }

    #[test]
    fn a_pool_of_none_lends_nothing() {
        let mut slots: Slots<u8> = Slots::new(0);
        slots.wait(&want("a"));
        assert_eq!(slots.claim(&want("a")), Claimed::No);
        assert_eq!(slots.top_up(&want("a")), 0);
        assert!(!AnonymousPool::new(0, DEFAULT_WAIT, false, Gauge::default()).lends());
    }
}
