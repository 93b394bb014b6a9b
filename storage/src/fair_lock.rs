//! A first-come, first-served lock for one executor: whoever asked first gets it first.
//!
//! A partition's appends must land in the order they were asked for: the batches of one
//! connection reach the owning shard in request order, and a producer without idempotence
//! relies on that order. glommio's `Semaphore` does not keep it: releasing a permit takes the
//! first waiter off its list and wakes it, and a task that asks before the woken one runs
//! finds the list empty and the permit free, and takes it. Here a lock is granted only to the
//! front of the line; a waiter that gives up (its future dropped) leaves the line, handing the
//! lock on if it was next.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct FairLock {
    state: RefCell<State>,
}

#[derive(Default)]
struct State {
    held: bool,
    next_ticket: u64,
    /// Waiting tickets in arrival order, with the waker of the task holding each.
    line: VecDeque<(u64, Option<Waker>)>,
}

impl State {
    fn wake_front(&mut self) {
        if let Some((_, Some(w))) = self.line.front_mut().map(|(t, w)| (t, w.take())) {
            w.wake();
        }
    }
}

impl FairLock {
    pub fn new() -> Self {
        Self::default()
    }

    /// Waits for the lock, behind everyone who asked before.
    pub fn lock(&self) -> Acquire<'_> {
        Acquire {
            lock: self,
            ticket: None,
        }
    }

    /// Whether someone holds it now.
    pub fn is_held(&self) -> bool {
        self.state.borrow().held
    }
}

/// The future of [`FairLock::lock`].
pub struct Acquire<'a> {
    lock: &'a FairLock,
    /// Its place in the line, once it had to wait.
    ticket: Option<u64>,
}

impl<'a> Future for Acquire<'a> {
    type Output = FairGuard<'a>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<FairGuard<'a>> {
        let lock = self.lock;
        let mut st = lock.state.borrow_mut();
        let first = match self.ticket {
            None => st.line.is_empty(),
            Some(t) => st.line.front().is_some_and(|(f, _)| *f == t),
        };
        if !st.held && first {
            st.held = true;
            if self.ticket.take().is_some() {
                st.line.pop_front();
            }
            return Poll::Ready(FairGuard { lock });
        }
        match self.ticket {
            Some(t) => {
                if let Some(entry) = st.line.iter_mut().find(|(f, _)| *f == t) {
                    entry.1 = Some(cx.waker().clone());
                }
            }
            None => {
                let t = st.next_ticket;
                st.next_ticket += 1;
                st.line.push_back((t, Some(cx.waker().clone())));
                drop(st);
                self.ticket = Some(t);
            }
        }
        Poll::Pending
    }
}

impl Drop for Acquire<'_> {
    fn drop(&mut self) {
        let Some(t) = self.ticket else {
            return;
        };
        let mut st = self.lock.state.borrow_mut();
        let was_first = st.line.front().is_some_and(|(f, _)| *f == t);
        st.line.retain(|(f, _)| *f != t);
        if was_first && !st.held {
            st.wake_front();
        }
    }
}

/// Holds the lock; dropping it hands the lock to the front of the line.
pub struct FairGuard<'a> {
    lock: &'a FairLock,
}

impl Drop for FairGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.lock.state.borrow_mut();
        st.held = false;
        st.wake_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[test]
    fn the_lock_goes_in_the_order_it_was_asked_for_even_to_a_late_arrival() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let lock = Rc::new(FairLock::new());
                let order = Rc::new(RefCell::new(Vec::new()));
                let held = lock.lock().await;
                let mut tasks = Vec::new();
                // One waiter: the case glommio's semaphore gets wrong (its woken waiter leaves
                // the list, which a newcomer then finds empty).
                for i in 0..1 {
                    let (lock, order) = (lock.clone(), order.clone());
                    tasks.push(glommio::spawn_local(async move {
                        let _g = lock.lock().await;
                        order.borrow_mut().push(i);
                        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
                    }));
                }
                glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
                // Released, then a newcomer asks before the woken waiter runs: it queues.
                drop(held);
                let (l2, o2) = (lock.clone(), order.clone());
                let late = glommio::spawn_local(async move {
                    let _g = l2.lock().await;
                    o2.borrow_mut().push(9);
                });
                for t in tasks {
                    t.await;
                }
                late.await;
                assert_eq!(*order.borrow(), vec![0, 9]);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn a_waiter_that_gives_up_hands_its_turn_on() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let lock = Rc::new(FairLock::new());
                let held = lock.lock().await;
                let l = lock.clone();
                let gives_up = glommio::spawn_local(async move {
                    let _ = glommio::timer::timeout(std::time::Duration::from_millis(10), async {
                        let _g = l.lock().await;
                        Ok(())
                    })
                    .await;
                });
                let l = lock.clone();
                let waits = glommio::spawn_local(async move {
                    let _g = l.lock().await;
                    7
                });
                gives_up.await;
                drop(held);
                assert_eq!(waits.await, 7);
                assert!(!lock.is_held());
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
