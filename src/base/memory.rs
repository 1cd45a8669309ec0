//! Giving freed memory back to the system. The allocator may keep what ended sessions freed
//! mapped (glibc's does); the binary installs how to hand it back, and the session registry says
//! when: after an idle sweep has ended many sessions at once.

use std::sync::OnceLock;

static RELEASE: OnceLock<fn()> = OnceLock::new();

/// Sessions ended in one sweep from which on freed memory is handed back.
pub const RELEASE_AFTER: usize = 64;

/// Installs how freed memory is handed back (once, at start).
pub fn set_release(release: fn()) {
    let _ = RELEASE.set(release);
}

/// Hands freed memory back, off the async workers (it walks the whole heap); a no-op until a
/// way is installed.
pub fn release() {
    if let Some(release) = RELEASE.get().copied() {
        tokio::task::spawn_blocking(release);
    }
}
