//! Deadlines from durations, never overflowing the clock: configuration bounds every duration
//! (at most [`MAX_DURATION`]), and a deadline that would still not fit is as good as never.

use std::time::Duration;

use tokio::time::Instant;

/// The longest duration configuration takes.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// `after` past `from`; far in the future (never reached) when that does not fit the clock.
pub fn deadline(from: Instant, after: Duration) -> Instant {
    from.checked_add(after)
        .or_else(|| from.checked_add(MAX_DURATION))
        .unwrap_or(from)
}

/// `after` from now.
pub fn from_now(after: Duration) -> Instant {
    deadline(Instant::now(), after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_too_long_for_the_clock_is_far_away_not_a_panic() {
        let now = Instant::now();
        assert_eq!(
            deadline(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        assert!(deadline(now, Duration::MAX) >= now + MAX_DURATION);
    }
}
