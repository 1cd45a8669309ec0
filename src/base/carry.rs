//! Work one task carries for another layer: a future [`hand_over`]ed while a [`Carrying`]
//! future is polled is polled by that same task, beside it, instead of being spawned as a task
//! of its own. A request's answer then comes back without a task hand-off or a wake-up from
//! another thread each way. What is still unfinished when the carrying future ends, or is
//! dropped (its client gone), is spawned then, so handed work is never lost with its carrier.
//! When the handed work wakes the carrier's own future during the carrier's poll (it filed the
//! answer that future waits for), the future is polled again at once: no reschedule of the
//! task, which the runtime would also announce to its other threads.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

type Handed = Pin<Box<dyn Future<Output = ()> + Send>>;

thread_local! {
    /// What is handed over during the poll of a [`Carrying`] future on this thread (none: no
    /// carrier is being polled here).
    static HANDED: RefCell<Option<Vec<Handed>>> = const { RefCell::new(None) };
    /// Whether a relay is polling on this thread: one inside it polls once and passes a
    /// wake-up on, so that the outer one's bound is the bound.
    static RELAYING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `work` in the task that is polling a [`Carrying`] future now, or as a task of its own
/// when none is.
pub fn hand_over(work: impl Future<Output = ()> + Send + 'static) {
    let unclaimed = HANDED.with(|handed| match handed.borrow_mut().as_mut() {
        Some(handed) => {
            handed.push(Box::pin(work));
            None
        }
        None => Some(work),
    });
    if let Some(work) = unclaimed {
        tokio::spawn(work);
    }
}

pin_project_lite::pin_project! {
    /// `main` polled together with the work handed over while it runs; it ends when `main`
    /// does.
    pub struct Carrying<F> {
        #[pin]
        main: F,
        carried: Vec<Handed>,
        relay: Arc<Relay>,
        waker: Waker,
    }

    impl<F> PinnedDrop for Carrying<F> {
        fn drop(this: Pin<&mut Self>) {
            spawn_rest(this.project().carried);
        }
    }
}

impl<F: Future> Carrying<F> {
    pub fn new(main: F) -> Carrying<F> {
        let relay = Arc::new(Relay::default());
        Carrying {
            main,
            carried: Vec::new(),
            waker: Waker::from(relay.clone()),
            relay,
        }
    }
}

/// Times a carrier polls its future again for wake-ups during its own poll, before it leaves
/// the next to the runtime (so that a future that always wakes itself cannot hold the thread).
const MAX_REPOLLS: usize = 16;

/// The waker a carrier's future and its carried work are polled with: during the carrier's poll
/// a wake-up is noted (the carrier polls again); at any other time it wakes the task.
#[derive(Default)]
struct Relay {
    task: AtomicWaker,
    polling: AtomicBool,
    woken: AtomicBool,
}

impl Relay {
    /// `poll` with `waker` (this relay's) until it is ready, or it was not woken meanwhile.
    fn settle<T>(
        &self,
        waker: &Waker,
        cx: &mut Context<'_>,
        mut poll: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        self.task.register(cx.waker());
        let mut inner = Context::from_waker(waker);
        let outer = RELAYING.with(|relaying| relaying.replace(true));
        let _restored = Restore(outer);
        let rounds = if outer { 1 } else { MAX_REPOLLS };
        for _ in 0..rounds {
            self.polling.store(true, Ordering::SeqCst);
            let polled = poll(&mut inner);
            self.polling.store(false, Ordering::SeqCst);
            if polled.is_ready() || !self.woken.swap(false, Ordering::SeqCst) {
                return polled;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Puts back whether a relay was polling on this thread, also when the poll panics.
struct Restore(bool);

impl Drop for Restore {
    fn drop(&mut self) {
        RELAYING.with(|relaying| relaying.set(self.0));
    }
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::SeqCst) {
            self.woken.store(true, Ordering::SeqCst);
            // The poll may have ended before it could see the note: the task is woken then.
            if self.polling.load(Ordering::SeqCst) {
                return;
            }
        }
        self.task.wake();
    }
}

/// Polls every future of `carried` once, keeping those not finished. One that panics is
/// dropped there, as a task of its own would have ended alone: the carrier and the rest of its
/// work go on.
fn poll_all(carried: &mut Vec<Handed>, cx: &mut Context<'_>) {
    carried.retain_mut(|work| {
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(cx)));
        polled.is_ok_and(|polled| polled.is_pending())
    });
}

/// Spawns what is left of `carried` (on the runtime of this thread; nothing if it has none,
/// as when the runtime itself is being dropped).
fn spawn_rest(carried: &mut Vec<Handed>) {
    if carried.is_empty() {
        return;
    }
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        for work in carried.drain(..) {
            runtime.spawn(work);
        }
    }
}

/// The hand-overs of one poll of a carrier's `main`, collected on this thread; what was there
/// before is put back when it ends, also when `main` panics.
struct Scope {
    outer: Option<Option<Vec<Handed>>>,
}

impl Scope {
    fn enter() -> Scope {
        let outer = HANDED.with(|handed| handed.borrow_mut().replace(Vec::new()));
        Scope { outer: Some(outer) }
    }

    /// What was handed over in the scope.
    fn leave(&mut self) -> Vec<Handed> {
        let outer = self.outer.take().flatten();
        HANDED
            .with(|handed| std::mem::replace(&mut *handed.borrow_mut(), outer))
            .unwrap_or_default()
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if self.outer.is_some() {
            // Unwinding: what was handed over goes on as tasks of its own.
            spawn_rest(&mut self.leave());
        }
    }
}

impl<F: Future> Future for Carrying<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        this.relay.settle(this.waker, cx, |inner| {
            poll_all(this.carried, inner);
            let mut scope = Scope::enter();
            let polled = this.main.as_mut().poll(inner);
            let mut new = scope.leave();
            // Handed work polled at once: it starts now and registers what it waits on.
            poll_all(&mut new, inner);
            this.carried.append(&mut new);
            if polled.is_ready() {
                spawn_rest(this.carried);
            }
            polled
        })
    }
}

pin_project_lite::pin_project! {
    /// A future polled again at once when it wakes itself during its own poll (a connection
    /// whose reading hands a body to the handler it runs, say), instead of being rescheduled.
    pub struct Repolled<F> {
        #[pin]
        inner: F,
        relay: Arc<Relay>,
        waker: Waker,
    }
}

impl<F: Future> Repolled<F> {
    pub fn new(inner: F) -> Repolled<F> {
        let relay = Arc::new(Relay::default());
        Repolled {
            inner,
            waker: Waker::from(relay.clone()),
            relay,
        }
    }

    /// The future itself.
    pub fn get_pin_mut(self: Pin<&mut Self>) -> Pin<&mut F> {
        self.project().inner
    }
}

impl<F: Future> Future for Repolled<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        this.relay
            .settle(this.waker, cx, |inner| this.inner.as_mut().poll(inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::sync::oneshot;

    #[tokio::test(flavor = "current_thread")]
    async fn handed_work_runs_in_the_carrying_task_and_answers_it() {
        let (tell, told) = oneshot::channel();
        let answer = Carrying::new(async move {
            hand_over(async move {
                tokio::task::yield_now().await;
                let _ = tell.send(tokio::task::try_id());
            });
            told.await.unwrap()
        })
        .await;
        assert_eq!(answer, tokio::task::try_id(), "no task of its own");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn what_is_unfinished_goes_on_when_the_carrier_ends_or_is_dropped() {
        let done = Arc::new(AtomicUsize::new(0));
        let later = |done: Arc<AtomicUsize>| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            done.fetch_add(1, Ordering::SeqCst);
        };
        let handed = done.clone();
        Carrying::new(async move { hand_over(later(handed)) }).await;
        let handed = done.clone();
        let dropped = Carrying::new(async move {
            hand_over(later(handed));
            std::future::pending::<()>().await
        });
        let _ = tokio::time::timeout(Duration::from_millis(10), dropped).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(done.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn without_a_carrier_handed_work_is_a_task_of_its_own() {
        let (tell, told) = oneshot::channel();
        hand_over(async move {
            let _ = tell.send(tokio::task::try_id());
        });
        let id = told.await.unwrap();
        assert!(id.is_some() && id != tokio::task::try_id());
    }

    /// Counts the wake-ups of the task.
    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_future_woken_during_its_own_poll_is_polled_again_at_once_and_a_busy_one_yields() {
        let task = Arc::new(Counted::default());
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        let mut left = 3;
        let mut wakes_itself = std::pin::pin!(Repolled::new(std::future::poll_fn(|cx| {
            if left == 0 {
                return Poll::Ready(());
            }
            left -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        })));
        assert!(wakes_itself.as_mut().poll(&mut cx).is_ready());
        assert_eq!(task.0.load(Ordering::SeqCst), 0, "no reschedule");

        let mut always = std::pin::pin!(Repolled::new(std::future::poll_fn(|cx| {
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        })));
        assert!(always.as_mut().poll(&mut cx).is_pending());
        assert_eq!(task.0.load(Ordering::SeqCst), 1, "left to the runtime once");
    }

    /// A carried future that panics (an upstream delivery hitting a bug) ends alone, as a task
    /// of its own would: neither the carrier (the client's request) nor the work handed over
    /// beside it goes with it.
    #[tokio::test(flavor = "current_thread")]
    async fn a_panic_in_handed_work_ends_it_alone() {
        let ran = Arc::new(AtomicUsize::new(0));
        let counted = ran.clone();
        let carrier = tokio::spawn(Carrying::new(async move {
            hand_over(async { panic!("a bug in one delivery") });
            hand_over(async move {
                tokio::task::yield_now().await;
                counted.fetch_add(1, Ordering::SeqCst);
            });
            tokio::task::yield_now().await;
        }));
        let panicked = carrier.await.is_err_and(|e| e.is_panic());
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let ran = ran.load(Ordering::SeqCst);
        assert!(
            !panicked && ran == 1,
            "the carrier (the client's request) panicked: {panicked}; the delivery handed over \
             beside the panicking one ran {ran} times"
        );
    }

    /// Where the carrier's own future panics, what it handed over goes on (sound).
    #[tokio::test(flavor = "current_thread")]
    async fn a_panic_in_the_carriers_own_future_spawns_what_it_handed_over() {
        let ran = Arc::new(AtomicUsize::new(0));
        let counted = ran.clone();
        let carrier = tokio::spawn(Carrying::new(async move {
            hand_over(async move {
                tokio::task::yield_now().await;
                counted.fetch_add(1, Ordering::SeqCst);
            });
            panic!("the carrier's own future fails")
        }));
        let _ = carrier.await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            ran.load(Ordering::SeqCst),
            1,
            "spawned by the scope on unwinding"
        );
    }

    /// Nested relays keep one bound: a carrier polled inside a repolled connection (every
    /// carried POST) polls a future that always wakes itself at most 16 times before the task
    /// is rescheduled once.
    #[test]
    fn nested_relays_poll_a_self_waking_future_at_most_16_times_per_task_poll() {
        let task = Arc::new(Counted::default());
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = polls.clone();
        let mut nested = std::pin::pin!(Repolled::new(Carrying::new(std::future::poll_fn(
            move |cx| {
                counted.fetch_add(1, Ordering::SeqCst);
                cx.waker().wake_by_ref();
                Poll::<()>::Pending
            }
        ))));
        assert!(nested.as_mut().poll(&mut cx).is_pending());
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        assert!(
            polls.load(Ordering::SeqCst) <= MAX_REPOLLS,
            "polled {} times in one task poll",
            polls.load(Ordering::SeqCst)
        );
    }

    /// Wake-ups from other threads at any moment of the carrier's poll (before, during, after)
    /// are never lost: a repolled carrier whose carried work waits on another thread, and whose
    /// own future waits on the carried work, always finishes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wakes_from_other_threads_are_never_lost() {
        for round in 0..3000u32 {
            let (go, gone) = oneshot::channel::<()>();
            let (tell, told) = oneshot::channel::<u32>();
            std::thread::spawn(move || {
                for _ in 0..(round % 7) * 50 {
                    std::hint::spin_loop();
                }
                let _ = go.send(());
            });
            let carrier = Repolled::new(Carrying::new(async move {
                hand_over(async move {
                    let _ = gone.await;
                    let _ = tell.send(round);
                });
                told.await.unwrap()
            }));
            let done = tokio::time::timeout(Duration::from_secs(5), carrier).await;
            assert_eq!(
                done.ok(),
                Some(round),
                "a wake-up was lost in round {round}"
            );
        }
    }
}
