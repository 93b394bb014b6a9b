//! What this node doubts about other voters' processes, for readers on any thread: the
//! broker's Metadata answers, on every shard, must not name as a partition's leader a node
//! this one has seen die, in the moments before the active controller's fencing of it arrives
//! in the image (a client told the dead leader keeps it until its next topic scan, a second
//! later).
//!
//! A doubt begins when a voter's quorum connection to this node ends (the kernel closes a dead
//! process's sockets) and hardens when its quorum port refuses a connection; it ends when a
//! message from that node arrives again, or — for a connection that ended while its port still
//! accepts — when the probe finds it listening, or after [`ENDED_DOUBT_MAX`] at the latest; a
//! refusal when the port accepts again (the transport watches it), or after [`GONE_DOUBT_MAX`]
//! at the latest, by when the active controller's fencing has long moved its partitions. Only
//! a refusal is evidence; the rest is a short hold on a name a client is about to be given.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a connection that ended, without a refusal, keeps its node doubted: past the
/// transport's last probe (see `transport::PROBE_AFTER`), which settles it either way.
pub const ENDED_DOUBT_MAX: Duration = Duration::from_millis(500);

/// How long a refusal keeps its node doubted at most, heard from or not.
pub const GONE_DOUBT_MAX: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Doubt {
    /// Its connection ended at this moment; its port is being probed.
    ConnectionEnded(Instant),
    /// Its port refused a connection at this moment: nothing listens there.
    Gone(Instant),
}

/// This node's doubts by node id. Cheap when there are none (one atomic load), which is
/// nearly always.
#[derive(Debug, Default)]
pub struct PeerDoubts {
    any: AtomicBool,
    doubts: Mutex<HashMap<i32, Doubt>>,
}

impl PeerDoubts {
    /// The nodes doubted at `now`, taken once per answer (one lock while any doubt stands,
    /// none otherwise, and no allocation then).
    pub fn doubted(&self, now: Instant) -> Vec<i32> {
        if !self.any.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut doubts = self.lock();
        // Lapsed doubts are forgotten, so a node without doubts goes back to the one-load path.
        doubts.retain(|_, doubt| match doubt {
            Doubt::Gone(at) => now.saturating_duration_since(*at) < GONE_DOUBT_MAX,
            Doubt::ConnectionEnded(at) => now.saturating_duration_since(*at) < ENDED_DOUBT_MAX,
        });
        self.any.store(!doubts.is_empty(), Ordering::Release);
        doubts.keys().copied().collect()
    }

    /// Node `node`'s connection ended at `at`; a refusal already recorded stands.
    pub fn connection_ended(&self, node: i32, at: Instant) {
        let mut doubts = self.lock();
        doubts.entry(node).or_insert(Doubt::ConnectionEnded(at));
        self.any.store(true, Ordering::Release);
    }

    /// Node `node`'s port refused a connection at `at`; whether it was not refused already.
    pub fn refused(&self, node: i32, at: Instant) -> bool {
        let mut doubts = self.lock();
        let standing = matches!(doubts.get(&node), Some(Doubt::Gone(_)));
        if !standing {
            doubts.insert(node, Doubt::Gone(at));
        }
        self.any.store(true, Ordering::Release);
        !standing
    }

    /// When node `node`'s standing refusal came, if one stands.
    pub fn refused_since(&self, node: i32) -> Option<Instant> {
        match self.lock().get(&node) {
            Some(Doubt::Gone(at)) => Some(*at),
            _ => None,
        }
    }

    /// Node `node` answered (a message, an accepted probe): no doubt about it stands.
    pub fn cleared(&self, node: i32) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut doubts = self.lock();
        doubts.remove(&node);
        if doubts.is_empty() {
            self.any.store(false, Ordering::Release);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Doubt>> {
        // The map holds plain values: a panic while it was locked left it whole.
        self.doubts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_connection_is_doubted_briefly_and_a_refusal_until_heard() {
        let d = PeerDoubts::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(d.doubted(t0), Vec::<i32>::new());
        d.connection_ended(2, t0);
        assert_eq!(d.doubted(t0 + ms(10)), [2]);
        assert_eq!(
            d.doubted(t0 + ENDED_DOUBT_MAX),
            Vec::<i32>::new(),
            "an ended connection alone is not evidence"
        );
        assert!(!d.any.load(Ordering::Acquire), "lapsed: forgotten");
        assert!(d.refused(2, t0));
        assert!(!d.refused(2, t0), "news once");
        assert_eq!(d.doubted(t0 + ms(1000)), [2]);
        assert_eq!(d.refused_since(2), Some(t0));
        // A later ended connection does not soften a refusal.
        d.connection_ended(2, t0);
        assert_eq!(d.doubted(t0 + ms(1000)), [2]);
        assert_eq!(
            d.doubted(t0 + GONE_DOUBT_MAX),
            Vec::<i32>::new(),
            "a refusal does not stand for ever"
        );
        assert!(d.refused(2, t0));
        d.connection_ended(3, t0);
        d.cleared(2);
        assert_eq!(d.refused_since(2), None);
        assert_eq!(d.doubted(t0), [3]);
        d.cleared(3);
        assert!(!d.any.load(Ordering::Acquire));
    }
}
