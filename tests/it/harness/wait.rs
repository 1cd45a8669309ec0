//! Bounded waits: every wait on the proxy or a peer fails the test after [`WAIT`] of real
//! time (tighter where a test says so), on tokio's paused clock too.

use std::time::Duration;

/// Waits until `condition` holds (for effects the test cannot await directly, such as another
/// process reacting), failing the test if it does not within the usual bound.
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    within(what, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// Waits until `probe` (something only a round trip can tell: a process's metrics, Redis) gives
/// `wanted`, failing the test if it does not within the usual bound.
pub async fn until<T: PartialEq, F: std::future::Future<Output = T>>(
    what: &str,
    wanted: T,
    mut probe: impl FnMut() -> F,
) {
    within(what, async {
        while probe().await != wanted {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// How long a helper waits for the proxy or a peer before it fails the test.
pub const WAIT: Duration = Duration::from_secs(20);

tokio::task_local! {
    /// The bound of [`within`] in this task, where a test sets one ([`with_bound`]).
    static BOUND: Duration;
}

/// Runs `future` with every [`within`] it awaits (those of the helpers included) bounded by
/// `bound` instead of [`WAIT`]: the harness's own tests show a helper gives up without
/// waiting 20 s for it.
pub async fn with_bound<T>(bound: Duration, future: impl std::future::Future<Output = T>) -> T {
    BOUND.scope(bound, future).await
}

/// Bounds a wait that should finish quickly, so a regression fails instead of hanging: the
/// test panics ("timed out waiting for `what`") if `future` has not finished after [`WAIT`] of
/// real time. Real time, not tokio's: on a paused clock tokio's time leaps to its next timer
/// whenever the runtime waits on a socket or a child, so a bound in tokio's time would run out
/// at once there.
pub async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    let bound = BOUND.try_with(|bound| *bound).unwrap_or(WAIT);
    tokio::select! {
        biased;
        done = future => done,
        () = real_sleep(bound) => panic!("timed out waiting for {what} ({bound:?})"),
    }
}

/// Sleeps `duration` of real time, whatever the caller's clock: on a runtime of its own (one
/// thread for the whole test binary), whose clock nothing pauses.
async fn real_sleep(duration: Duration) {
    static CLOCK: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("test-clock")
            .enable_time()
            .build()
            .expect("the test clock's runtime starts")
    });
    /// Its sleep, cancelled when the wait ends first.
    struct Sleeping(tokio::task::JoinHandle<()>);
    impl Drop for Sleeping {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    // The sleep is made on that runtime: one made here would take this runtime's clock.
    let sleep = async move { tokio::time::sleep(duration).await };
    let mut sleeping = Sleeping(CLOCK.spawn(sleep));
    let _ = (&mut sleeping.0).await;
}

/// Waits until `condition` holds, on tokio's paused clock: polls with virtual sleeps, bounded in
/// real time (virtual time leaps forward whenever the runtime idles, so a `within` on it could
/// run out while a real child exits).
pub async fn on_the_paused_clock_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
