//! How many requests of one kind the issuer gets from this proxy per second at most: a bucket
//! (GCRA: the theoretical arrival time of the next request) refilled at a rate, with a second's
//! worth at once, so a flood of new opaque tokens costs the issuer what the operator allowed
//! and no more. Time is tokio's, so tests pause it.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

pub struct Budget {
    /// Time one request takes from the bucket.
    interval: Duration,
    /// How far ahead of now the bucket may be spent.
    burst: Duration,
    /// When the bucket is full again.
    full_at: Mutex<Option<Instant>>,
}

impl Budget {
    /// `per_second` requests per second, a second's worth (at least one) at once. The
    /// configuration checks it is above 0; here it is held between 0.001 and a million.
    pub fn per_second(per_second: f64) -> Budget {
        let per_second = match per_second {
            rate if rate >= 0.001 => rate.min(1e6),
            _ => 0.001,
        };
        let interval = Duration::from_secs_f64(1.0 / per_second);
        Budget {
            interval,
            burst: interval.mul_f64(per_second.ceil().max(1.0)),
            full_at: Mutex::new(None),
        }
    }

    /// Takes one request from the budget, or says how long until one is there.
    pub fn take(&self, now: Instant) -> Result<(), Duration> {
        let mut full_at = self
            .full_at
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let from = full_at.filter(|at| *at > now).unwrap_or(now);
        let after = from + self.interval;
        let ahead = after.saturating_duration_since(now);
        if ahead > self.burst {
            return Err(ahead - self.burst);
        }
        *full_at = Some(after);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_seconds_worth_at_once_then_the_rate() {
        let budget = Budget::per_second(10.0);
        let start = Instant::now();
        let taken = (0..100).filter(|_| budget.take(start).is_ok()).count();
        assert_eq!(taken, 10, "a second's worth at once");
        let wait = budget.take(start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        tokio::time::advance(Duration::from_millis(350)).await;
        let taken = (0..100)
            .filter(|_| budget.take(Instant::now()).is_ok())
            .count();
        assert_eq!(taken, 3, "the rate after it");
        tokio::time::advance(Duration::from_secs(60)).await;
        let taken = (0..100)
            .filter(|_| budget.take(Instant::now()).is_ok())
            .count();
        assert_eq!(taken, 10, "never more than a second's worth saved up");
    }

    #[test]
    fn a_rate_under_one_still_allows_one() {
        let budget = Budget::per_second(0.5);
        let now = Instant::now();
        assert!(budget.take(now).is_ok());
        assert_eq!(budget.take(now), Err(Duration::from_secs(2)));
    }
}
