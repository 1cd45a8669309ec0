//! A layer's settings as one handle that can be replaced whole while the proxy runs: a reader
//! takes the value current when it starts and keeps it as long as it needs it (one request or
//! session sees one set of settings throughout), and a replacement reaches every reader that
//! starts after it. Reading writes no memory other threads read (`arc_swap`): many cores serving
//! requests do not contend on it.

use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};

/// The current value of a layer's settings.
#[derive(Debug)]
pub struct Swappable<T> {
    current: ArcSwap<T>,
}

impl<T> Swappable<T> {
    pub fn new(value: T) -> Swappable<T> {
        Swappable {
            current: ArcSwap::from_pointee(value),
        }
    }

    /// The value now, for a reader that keeps it (a session for its life).
    pub fn current(&self) -> Arc<T> {
        self.current.load_full()
    }

    /// The value now, for a short read (a request's handler).
    pub fn now(&self) -> Guard<Arc<T>> {
        self.current.load()
    }

    /// Replaces the value for every reader that starts after; those started keep theirs.
    pub fn replace(&self, value: T) {
        self.current.store(Arc::new(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_keeps_what_it_took_and_the_next_one_sees_the_replacement() {
        let settings = Swappable::new(10);
        let taken = settings.current();
        let reading = settings.now();
        settings.replace(20);
        assert_eq!(
            (*taken, **reading),
            (10, 10),
            "readers started before keep their value"
        );
        assert_eq!((*settings.current(), **settings.now()), (20, 20));
    }
}
