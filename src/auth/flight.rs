//! One request to the issuer in flight per key (single flight): the first caller for a key does
//! the work, the callers that come while it runs wait for its outcome, each for a bounded time,
//! so a burst of the same question costs the issuer one request. A leader that goes away (its
//! client hung up) leaves the key free, and one of those waiting leads in its place.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

/// The flights in progress, by key: each a channel its followers read the outcome from.
pub struct Flights<K, V> {
    running: Mutex<HashMap<K, watch::Receiver<Option<V>>>>,
}

impl<K, V> Default for Flights<K, V> {
    fn default() -> Self {
        Flights {
            running: Mutex::new(HashMap::new()),
        }
    }
}

/// How a caller had its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlight {
    /// It did the work.
    Led,
    /// It waited for another caller's.
    Followed,
}

/// A follower waited longer than it may for the leader's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the same request was still in flight after {0:?}")]
pub struct Overdue(pub Duration);

enum Joined<V> {
    Lead(watch::Sender<Option<V>>),
    Follow(watch::Receiver<Option<V>>),
}

impl<K: Hash + Eq + Clone, V: Clone> Flights<K, V> {
    /// The outcome of `work` for `key`: done here if no flight for `key` is in progress, else
    /// the one in progress's, waited for at most `wait`.
    pub async fn run<F, Fut>(
        &self,
        key: K,
        wait: Duration,
        work: F,
    ) -> Result<(V, InFlight), Overdue>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V>,
    {
        let mut work = Some(work);
        loop {
            match self.join(&key) {
                Joined::Lead(outcome) => {
                    let _landing = Landing { flights: self, key };
                    let work = work.take().expect("a caller leads at most once");
                    let value = work().await;
                    outcome.send_replace(Some(value.clone()));
                    return Ok((value, InFlight::Led));
                }
                Joined::Follow(mut outcome) => {
                    match tokio::time::timeout(wait, outcome.wait_for(Option::is_some)).await {
                        Err(_) => return Err(Overdue(wait)),
                        Ok(Ok(value)) => {
                            let value = value.clone().expect("waited for a value");
                            return Ok((value, InFlight::Followed));
                        }
                        // The leader went away without an outcome: lead (or follow) anew.
                        Ok(Err(_)) => continue,
                    }
                }
            }
        }
    }

    /// Flights in progress.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn join(&self, key: &K) -> Joined<V> {
        let mut running = self.lock();
        if let Some(outcome) = running.get(key) {
            return Joined::Follow(outcome.clone());
        }
        let (sender, receiver) = watch::channel(None);
        running.insert(key.clone(), receiver);
        Joined::Lead(sender)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, watch::Receiver<Option<V>>>> {
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Ends a leader's flight when it is done or dropped, so the key is free again.
struct Landing<'f, K: Hash + Eq, V> {
    flights: &'f Flights<K, V>,
    key: K,
}

impl<K: Hash + Eq, V> Drop for Landing<'_, K, V> {
    fn drop(&mut self) {
        self.flights
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const WAIT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_burst_for_one_key_does_the_work_once_and_each_key_its_own() {
        let flights = Flights::<&str, usize>::default();
        let done = AtomicUsize::new(0);
        let work = |n| {
            let done = &done;
            move || async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                done.fetch_add(1, Ordering::SeqCst);
                n
            }
        };
        let burst = (0..10).map(|_| flights.run("a", WAIT, work(1)));
        let other = flights.run("b", WAIT, work(2));
        let (answers, other) = tokio::join!(futures_util::future::join_all(burst), other);
        assert_eq!(done.load(Ordering::SeqCst), 2);
        assert_eq!(other, Ok((2, InFlight::Led)));
        let led = answers
            .iter()
            .filter(|a| **a == Ok((1, InFlight::Led)))
            .count();
        let followed = answers
            .iter()
            .filter(|a| **a == Ok((1, InFlight::Followed)));
        assert_eq!((led, followed.count()), (1, 9));
        assert!(flights.is_empty(), "every flight landed");
        flights.run("a", WAIT, work(3)).await.unwrap();
        assert_eq!(
            done.load(Ordering::SeqCst),
            3,
            "a later call does the work again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_waits_a_bounded_time() {
        let flights = Flights::<&str, u8>::default();
        let slow = flights.run("a", WAIT, || async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            1
        });
        let impatient = flights.run("a", Duration::from_secs(2), || async { 2 });
        let (slow, impatient) = tokio::join!(slow, impatient);
        assert_eq!(slow, Ok((1, InFlight::Led)));
        assert_eq!(impatient, Err(Overdue(Duration::from_secs(2))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_leads_when_the_leader_goes_away() {
        let flights = Flights::<&str, u8>::default();
        let abandoned = flights.run("a", WAIT, || async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            1
        });
        let follower = flights.run("a", WAIT, || async { 2 });
        let (mut abandoned, mut follower) = (Box::pin(abandoned), Box::pin(follower));
        // Both join: the first leads, the second follows.
        assert!(abandoned.as_mut().now_or_never().is_none());
        assert!(follower.as_mut().now_or_never().is_none());
        drop(abandoned);
        assert_eq!(follower.await, Ok((2, InFlight::Led)));
        assert!(flights.is_empty());
    }
}
