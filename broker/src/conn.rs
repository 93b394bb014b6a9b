//! Who sent a request, as the handlers and the services they call see it: the connection's
//! peer, listener and principal, its quota throttle, the replica link it may be, and the shards
//! its produce requests write to (`ProduceTrail`, which decides its handover).

use tributary_replication::LinkId;

/// Who sent a request: the peer's address and the listener it connected to (brokers'
/// endpoints are answered on that listener).
#[derive(Debug, Clone, Copy)]
pub struct Conn<'a> {
    pub peer: &'a str,
    pub listener: &'a str,
    /// Who authenticated on the connection (`User:NAME`; `User:ANONYMOUS` without SASL).
    pub principal: &'a str,
    /// Set by a handler whose request put the client over a quota: the connection reads
    /// nothing more for this long after queueing the response (KIP-219).
    pub throttle: &'a std::cell::Cell<std::time::Duration>,
    /// The follower whose fetches the connection carries, once one came.
    pub link: &'a ReplicaLink,
    /// The shards the connection's produce requests wrote to, request after request.
    pub trail: &'a ProduceTrail,
}

/// What a connection knows of the follower whose fetches it carries.
#[derive(Debug)]
pub struct ReplicaLink {
    pub id: LinkId,
    /// Set by the first follower fetch: the connection is a replica link from then on.
    pub follower: std::cell::Cell<Option<i32>>,
}

impl ReplicaLink {
    pub fn new() -> Self {
        Self {
            id: LinkId::next(),
            follower: std::cell::Cell::new(None),
        }
    }
}

impl Default for ReplicaLink {
    fn default() -> Self {
        Self::new()
    }
}

/// The shards one produce request's batches went to, each named by its index (`ShardId.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// No batch was appended: every partition was refused.
    Nothing,
    /// Every appended batch went to this shard.
    One(usize),
    /// Batches went to more than one shard.
    Several,
}

impl Written {
    /// This request's shards once a batch also went to `shard`.
    pub fn and(self, shard: usize) -> Self {
        match self {
            Self::Nothing => Self::One(shard),
            Self::One(k) if k == shard => self,
            _ => Self::Several,
        }
    }
}

/// Where a connection's produce requests write, request after request: once
/// `connection.handover.produce.requests` requests in a row wrote only to one other shard than
/// the connection's, the connection moves there, once (`connection.rs`), so its batches need no hop
/// and its answers no wake-up of a second shard. Measured at 5,000 msgs/s on one partition: a
/// connection on the other shard cost ~45 % more CPU (BENCHMARKS.md).
#[derive(Debug, Default)]
pub struct ProduceTrail {
    /// The other shard the latest requests all wrote to, and how many requests in a row did.
    run: std::cell::Cell<Option<(usize, u32)>>,
    /// Set once the connection fetched (its fetch session lives on this shard) or moved
    /// already (a connection moves once): it stays.
    pinned: std::cell::Cell<bool>,
}

impl ProduceTrail {
    /// Notes a produce request served by shard `here` that wrote `written`. A request that
    /// appended nothing leaves the run as it was.
    pub fn note(&self, written: Written, here: usize) {
        let run = match (written, self.run.get()) {
            (Written::Nothing, run) => run,
            (Written::One(k), Some((to, n))) if k == to => Some((to, n.saturating_add(1))),
            (Written::One(k), _) if k != here => Some((k, 1)),
            (Written::One(_) | Written::Several, _) => None,
        };
        self.run.set(run);
    }

    /// Keeps the connection where it is from now on: it fetched, or it moved once already.
    pub fn pin(&self) {
        self.pinned.set(true);
        self.run.set(None);
    }

    /// The shard the connection should move to once `after` (> 0) requests in a row wrote
    /// only there; `None` with `after` 0 (handover off) or a pinned connection.
    pub fn due(&self, after: u32) -> Option<usize> {
        match self.run.get() {
            Some((to, n)) if after > 0 && n >= after && !self.pinned.get() => Some(to),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_folds_the_shards_of_a_request() {
        assert_eq!(Written::Nothing.and(1), Written::One(1));
        assert_eq!(Written::One(1).and(1), Written::One(1));
        assert_eq!(Written::One(1).and(0), Written::Several);
        assert_eq!(Written::Several.and(1), Written::Several);
    }

    #[test]
    fn a_run_of_requests_to_one_other_shard_is_due_after_the_count() {
        let trail = ProduceTrail::default();
        for _ in 0..3 {
            assert_eq!(trail.due(3), None);
            trail.note(Written::One(1), 0);
        }
        assert_eq!(trail.due(3), Some(1));
        assert_eq!(trail.due(4), None);
        assert_eq!(trail.due(0), None, "0 turns the handover off");
    }

    #[test]
    fn the_run_restarts_on_this_shard_another_shard_or_several() {
        let trail = ProduceTrail::default();
        trail.note(Written::One(1), 0);
        trail.note(Written::One(0), 0);
        assert_eq!(trail.due(1), None, "a request to this shard ends the run");
        trail.note(Written::One(1), 0);
        trail.note(Written::Several, 0);
        assert_eq!(trail.due(1), None, "a request to several shards ends it");
        trail.note(Written::One(1), 2);
        trail.note(Written::One(3), 2);
        assert_eq!(trail.due(2), None, "another shard starts a new run");
        assert_eq!(trail.due(1), Some(3));
        trail.note(Written::Nothing, 2);
        assert_eq!(trail.due(1), Some(3), "a refused request changes nothing");
    }

    #[test]
    fn a_connection_that_fetched_stays() {
        let trail = ProduceTrail::default();
        trail.pin();
        for _ in 0..10 {
            trail.note(Written::One(1), 0);
        }
        assert_eq!(trail.due(1), None);
    }
}
