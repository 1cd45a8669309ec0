//! Durations as the configuration writes them: `250ms`, `15s`, `10m`, `1h`; and the number
//! and unit any such quantity is written as.

use std::time::Duration;

/// The number a quantity starts with and the unit after it (trimmed): `None` when it does not
/// start with a number that fits.
pub(super) fn number_and_unit(text: &str) -> Option<(u64, &str)> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    Some((number.parse().ok()?, unit.trim()))
}

/// Why a text is not a quantity the configuration takes (a duration, a size).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a duration like 250ms, 15s, 10m or 1h")]
    NotADuration(String),
    #[error("{0:?} has an unknown unit (use ms, s, m or h)")]
    DurationUnit(String),
    #[error("{0:?} is too long a duration")]
    TooLong(String),
    #[error("{0:?} is not a size (bytes, or a number with KiB, MiB, GiB)")]
    NotASize(String),
    #[error("{0:?} is not a unit of size (KiB, MiB, GiB)")]
    SizeUnit(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

/// Parses `250ms`, `15s`, `10m`, `1h` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, QuantityError> {
    let text = text.trim();
    let (number, unit) =
        number_and_unit(text).ok_or_else(|| QuantityError::NotADuration(text.to_owned()))?;
    let scaled = |per: u64| {
        number
            .checked_mul(per)
            .map(Duration::from_secs)
            .ok_or_else(|| QuantityError::TooLong(text.to_owned()))
    };
    match unit {
        "ms" => Ok(Duration::from_millis(number)),
        "" | "s" => scaled(1),
        "m" => scaled(60),
        "h" => scaled(3600),
        _ => Err(QuantityError::DurationUnit(text.to_owned())),
    }
}
