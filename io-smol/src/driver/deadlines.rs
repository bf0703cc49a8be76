//! Deadlines of the driver thread's tasks, fired by the driver loop.
//!
//! An async-io `Timer` per provider call would cost a wake-up of the
//! reactor thread on every call: async-io notifies it of each new timer so
//! that it can re-arm its `timerfd`, even when the timer is cancelled long
//! before it is due (as a provider call's timeout nearly always is). These
//! deadlines live in a map on the driver thread instead; the driver loop
//! sleeps until the earliest one ([`Deadlines::next`]) and wakes the tasks
//! whose deadline passed ([`Deadlines::fire`]).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The pending deadlines, by instant (ties kept apart by a sequence number).
#[derive(Default)]
pub struct Deadlines {
    inner: RefCell<Inner>,
}

#[derive(Default)]
struct Inner {
    /// A deadline's waker once its task has waited on it.
    waiting: BTreeMap<(Instant, u64), Option<Waker>>,
    next_seq: u64,
}

impl Deadlines {
    /// A deadline `after` from now. It counts from now, not from its first
    /// poll, and leaves the map when dropped.
    pub fn after(self: &Rc<Self>, after: Duration) -> Deadline {
        let at = Instant::now() + after;
        let mut inner = self.inner.borrow_mut();
        let key = (at, inner.next_seq);
        inner.next_seq += 1;
        inner.waiting.insert(key, None);
        Deadline {
            shared: Rc::clone(self),
            key,
        }
    }

    /// The earliest pending deadline.
    pub fn next(&self) -> Option<Instant> {
        self.inner.borrow().waiting.keys().next().map(|k| k.0)
    }

    /// Wakes every task whose deadline is at or before `now`. Their entries
    /// leave the map, so [`Deadlines::next`] never names a passed instant
    /// twice (the driver loop would spin on it); a woken [`Deadline`]
    /// resolves by its own clock check.
    pub fn fire(&self, now: Instant) {
        let mut due = Vec::new();
        {
            let mut inner = self.inner.borrow_mut();
            while let Some(entry) = inner.waiting.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                if let Some(w) = entry.remove() {
                    due.push(w);
                }
            }
        }
        // Outside the borrow: a waker may run code that touches the map.
        for w in due {
            w.wake();
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.borrow().waiting.len()
    }
}

/// Resolves once its instant has passed (and [`Deadlines::fire`] ran, or
/// it is polled after the instant).
pub struct Deadline {
    shared: Rc<Deadlines>,
    key: (Instant, u64),
}

impl Future for Deadline {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.key.0 {
            return Poll::Ready(());
        }
        let mut inner = self.shared.inner.borrow_mut();
        if let Some(slot) = inner.waiting.get_mut(&self.key) {
            match slot {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *slot = Some(cx.waker().clone()),
            }
        }
        Poll::Pending
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.shared.inner.borrow_mut().waiting.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll(d: &mut Deadline, waker: &Waker) -> Poll<()> {
        Pin::new(d).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn fire_wakes_only_the_deadlines_that_passed() {
        let shared = Rc::new(Deadlines::default());
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut soon = shared.after(Duration::from_millis(20));
        let mut late = shared.after(Duration::from_secs(3600));
        assert!(poll(&mut soon, &waker).is_pending());
        assert!(poll(&mut late, &waker).is_pending());
        assert!(shared.next().unwrap() <= Instant::now() + Duration::from_millis(20));

        shared.fire(Instant::now());
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "nothing is due yet");
        let at = shared.next().unwrap();
        shared.fire(at);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "only the first fired");
        assert!(
            shared.next().unwrap() > at,
            "a fired deadline is not named again"
        );
        while Instant::now() < at {
            std::thread::yield_now();
        }
        assert!(poll(&mut soon, &waker).is_ready());
        assert!(poll(&mut late, &waker).is_pending());
    }

    #[test]
    fn a_dropped_deadline_leaves_the_map() {
        let shared = Rc::new(Deadlines::default());
        let a = shared.after(Duration::from_secs(1));
        let b = shared.after(Duration::from_secs(1));
        assert_eq!(shared.len(), 2, "equal instants are kept apart");
        drop(a);
        assert_eq!(shared.len(), 1);
        drop(b);
        assert_eq!(shared.len(), 0);
        assert_eq!(shared.next(), None);
    }
}
