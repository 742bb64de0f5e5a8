//! The send order's lock (`UdpIo.send_order`): held from taking the engine's output until it
//! is sent, by whichever thread sends, so that output leaves in the order it was made.

use std::sync::{Condvar, Mutex};

/// A lock that can be held across calls (acquired in one, released in another) and waited
/// for without the interpreter's lock. A release wakes a waiter only when there is one: the
/// standard library's `Condvar::notify_one` is a `futex` system call every time (it keeps no
/// count of waiters), and the lock is taken and released twice a message on a round trip's
/// path with nobody waiting.
#[derive(Default)]
pub struct OrderLock {
    state: Mutex<OrderState>,
    freed: Condvar,
}

#[derive(Default)]
struct OrderState {
    held: bool,
    waiting: u32,
}

impl OrderLock {
    /// Wait for the lock (no interpreter lock held: call it detached).
    pub fn acquire(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while st.held {
            st.waiting += 1;
            st = self.freed.wait(st).unwrap_or_else(|p| p.into_inner());
            st.waiting -= 1;
        }
        st.held = true;
    }

    /// Take the lock when it is free (no wait).
    pub fn try_acquire(&self) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.held {
            return false;
        }
        st.held = true;
        true
    }

    pub fn release(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.held = false;
        let wake = st.waiting > 0;
        drop(st);
        if wake {
            self.freed.notify_one();
        }
    }

    /// Threads waiting for the lock now (tests).
    #[cfg(test)]
    fn waiting(&self) -> u32 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).waiting
    }
}

#[cfg(test)]
mod tests {
    use super::OrderLock;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn taken_once_until_released() {
        let l = OrderLock::default();
        assert!(l.try_acquire());
        assert!(!l.try_acquire());
        l.release();
        assert!(l.try_acquire());
        l.release();
        assert_eq!(l.waiting(), 0);
    }

    #[test]
    fn a_waiter_is_counted_and_woken_by_the_release() {
        let l = Arc::new(OrderLock::default());
        l.acquire();
        let l2 = l.clone();
        let t = std::thread::spawn(move || {
            l2.acquire(); // waits: the lock is held
            l2.release();
        });
        let end = Instant::now() + Duration::from_secs(30);
        while l.waiting() == 0 {
            assert!(Instant::now() < end, "the waiter never waited");
            std::thread::sleep(Duration::from_millis(1));
        }
        l.release(); // must wake it: the join below would hang otherwise
        t.join().unwrap();
        assert_eq!(l.waiting(), 0);
        assert!(l.try_acquire());
    }

    #[test]
    fn many_threads_take_turns() {
        let l = Arc::new(OrderLock::default());
        let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (l, inside) = (l.clone(), inside.clone());
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        l.acquire();
                        assert_eq!(inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst), 0);
                        inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                        l.release();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(l.waiting(), 0);
    }
}
