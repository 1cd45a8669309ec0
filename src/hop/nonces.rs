//! The nonces of the hops a replica took, kept while their signatures are valid, so that each
//! hop is taken once: a pure, bounded structure (time passed in), locked by its owner. A hop is
//! valid while its time `t` is within [`MAX_SKEW`] of the clock, so its nonce is kept until the
//! clock passes `t + MAX_SKEW`; then the time check refuses it anyway. No hop signed before the
//! replica started (another process of the same name may have taken it), nor before the newest
//! time forgotten (the clock went back), is taken. When full, a new hop is refused rather than an
//! older nonce forgotten (which would let its hop be replayed).

use std::collections::BTreeSet;
use std::time::SystemTime;

use super::{Nonce, MAX_SKEW};

/// How many nonces a replica keeps unless configured (`cluster.max_hop_nonces`): some 32,000
/// hops a second for the 31 s a nonce is kept when clocks agree, in about 40 MB at most.
pub const DEFAULT_MAX_NONCES: usize = 1_000_000;

/// The nonces taken, by the time their hop was signed (oldest first).
#[derive(Debug)]
pub struct Nonces {
    taken: BTreeSet<(u64, Nonce)>,
    /// Hops signed before this time (Unix seconds) may have been forgotten: none is taken.
    floor: u64,
    capacity: usize,
}

/// Why a hop's nonce is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NonceRefused {
    #[error("the hop was taken already (a replay)")]
    Replayed,
    #[error("the hop was signed before this replica started, or before the nonces it still keeps: refused, as a replay of it could not be told (sign it again)")]
    TooOld,
    #[error("this replica keeps {0} hop nonces already (cluster.max_hop_nonces): the hop is refused until older ones expire")]
    Full(usize),
}

impl Default for Nonces {
    fn default() -> Nonces {
        Nonces::new(DEFAULT_MAX_NONCES, super::unix_seconds(SystemTime::now()))
    }
}

impl Nonces {
    /// Keeps at most `capacity` nonces, for a replica that started at `started` (Unix seconds).
    pub fn new(capacity: usize, started: u64) -> Nonces {
        Nonces {
            taken: BTreeSet::new(),
            floor: started,
            capacity,
        }
    }

    /// Takes the nonce of a hop signed at `time` (its signature checked, its time within the
    /// skew of `now`), once: a second time, or when the nonces kept are at capacity, it is
    /// refused. The nonces of hops whose time is past are forgotten first.
    pub fn take(&mut self, time: u64, nonce: Nonce, now: u64) -> Result<(), NonceRefused> {
        self.forget_before(now.saturating_sub(MAX_SKEW.as_secs()));
        if time < self.floor {
            return Err(NonceRefused::TooOld);
        }
        if self.taken.contains(&(time, nonce)) {
            return Err(NonceRefused::Replayed);
        }
        if self.taken.len() >= self.capacity {
            return Err(NonceRefused::Full(self.capacity));
        }
        self.taken.insert((time, nonce));
        Ok(())
    }

    /// How many are kept.
    pub fn len(&self) -> usize {
        self.taken.len()
    }

    pub fn is_empty(&self) -> bool {
        self.taken.is_empty()
    }

    /// Forgets the nonces of hops signed before `floor`, and takes no such hop from now on.
    fn forget_before(&mut self, floor: u64) {
        if floor <= self.floor {
            return;
        }
        self.floor = floor;
        while self
            .taken
            .first()
            .is_some_and(|(time, _)| *time < self.floor)
        {
            self.taken.pop_first();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;
    const SKEW: u64 = MAX_SKEW.as_secs();

    #[test]
    fn a_nonce_is_taken_once_while_its_hop_is_valid() {
        let mut nonces = Nonces::new(10, NOW - SKEW);
        let nonce = Nonce::minted();
        assert_eq!(nonces.take(NOW, nonce, NOW), Ok(()));
        assert_eq!(nonces.take(NOW, nonce, NOW), Err(NonceRefused::Replayed));
        assert_eq!(
            nonces.take(NOW, nonce, NOW + SKEW),
            Err(NonceRefused::Replayed),
            "kept to the window's last second"
        );
        assert_eq!(nonces.take(NOW, Nonce::minted(), NOW + SKEW), Ok(()));
        assert_eq!(nonces.len(), 2);
    }

    #[test]
    fn nonces_past_the_window_are_forgotten_and_their_hops_never_taken_again() {
        let mut nonces = Nonces::new(10, NOW - SKEW);
        let old = Nonce::minted();
        assert_eq!(nonces.take(NOW - SKEW, old, NOW), Ok(()));
        assert_eq!(nonces.take(NOW + SKEW, Nonce::minted(), NOW), Ok(()));
        let later = NOW + 1;
        assert_eq!(nonces.take(later, Nonce::minted(), later), Ok(()));
        assert_eq!(nonces.len(), 2, "the hop signed at NOW - SKEW expired");
        // The clock goes back: the forgotten hop is still refused.
        assert_eq!(nonces.take(NOW - SKEW, old, NOW), Err(NonceRefused::TooOld));
    }

    #[test]
    fn no_hop_signed_before_the_replica_started_is_taken() {
        let mut nonces = Nonces::new(10, NOW);
        let before = NOW - 1;
        assert_eq!(
            nonces.take(before, Nonce::minted(), NOW),
            Err(NonceRefused::TooOld),
            "a process of the same name may have taken it"
        );
        assert_eq!(nonces.take(NOW, Nonce::minted(), NOW), Ok(()));
    }

    #[test]
    fn when_full_a_new_hop_is_refused_and_nothing_is_forgotten_early() {
        let mut nonces = Nonces::new(2, NOW);
        let (first, second) = (Nonce::minted(), Nonce::minted());
        assert_eq!(nonces.take(NOW, first, NOW), Ok(()));
        assert_eq!(nonces.take(NOW, second, NOW), Ok(()));
        assert_eq!(
            nonces.take(NOW, Nonce::minted(), NOW),
            Err(NonceRefused::Full(2))
        );
        assert_eq!(nonces.take(NOW, first, NOW), Err(NonceRefused::Replayed));
        let expired = NOW + SKEW + 1;
        assert_eq!(nonces.take(expired, Nonce::minted(), expired), Ok(()));
        assert_eq!(nonces.len(), 1, "room again once the first two expired");
    }
}
