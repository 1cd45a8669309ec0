//! Deadlines from durations, never overflowing the clock: configuration bounds every duration
//! (at most [`MAX_DURATION`]), and a deadline that would still not fit is as good as never.

use std::time::Duration;

use tokio::time::Instant;

/// The longest duration configuration takes.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// A duration as the configuration writes it, in the largest unit that divides it: `10m`, `5s`,
/// `250ms`, `0s` (what logs and the reference show).
pub fn written(duration: Duration) -> String {
    let ms = duration.as_millis();
    match ms {
        0 => "0s".into(),
        _ if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        _ if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        _ if ms % 1000 == 0 => format!("{}s", ms / 1000),
        _ => format!("{ms}ms"),
    }
}

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
