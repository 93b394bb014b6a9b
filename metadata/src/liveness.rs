//! The active controller's judgement of each broker's liveness, pure (time passed in as
//! durations): a broker whose process left evidence that it is gone (its port refused a
//! connection after its connection ended) is fenced at once; one that left none (a pause, a
//! cut) only after a whole `broker.session.timeout.ms` of silence; a fenced one heard again
//! well inside a session is unfenced.
//!
//! Silence is measured by this node only since it became the active controller, except for
//! the controller it followed before: a follower hears its leader all the time, so that
//! silence is real, and a controller that stopped (paused, cut off) is fenced one session
//! after it went silent rather than one session after the new controller took over.

use std::time::{Duration, Instant};

use crate::command::FenceReason;

/// What this controller knows of one registered broker (not itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heard {
    /// How long since its last message (raft traffic for a voter, a metadata fetch for a
    /// broker-only node), clamped as the module doc says.
    pub silence: Duration,
    /// Evidence newer than its last message that its process is gone.
    pub gone: bool,
}

/// The broker's registration as the image holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
    /// Fenced because its process was seen gone: whatever is heard from that node now is its
    /// successor, which registers itself.
    pub fenced_as_gone: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Fence(FenceReason),
    Unfence,
    Keep,
}

/// Fence, unfence or leave a broker, from what was heard of it.
pub fn judge(broker: Registered, heard: Heard, session: Duration) -> Verdict {
    if !broker.fenced {
        if heard.gone {
            return Verdict::Fence(FenceReason::ProcessGone);
        }
        if heard.silence > session {
            return Verdict::Fence(FenceReason::Silent);
        }
        return Verdict::Keep;
    }
    // Heard again well inside a session: back. The gap between half a session and a whole
    // one keeps a broker that answers slowly (a loaded machine) from flapping in and out.
    let back_by_itself = broker.in_controlled_shutdown || broker.fenced_as_gone;
    if !back_by_itself && !heard.gone && heard.silence < session / 2 {
        return Verdict::Unfence;
    }
    Verdict::Keep
}

/// A broker's silence as this controller may count it: `since_heard` (none: never heard in
/// this process) within `tenure` (how long this node has been the active controller, or since
/// its own stall), unless the broker is the controller this node followed before, whose
/// silence this node measured all along.
pub fn silence(since_heard: Option<Duration>, tenure: Duration, was_controller: bool) -> Duration {
    match since_heard {
        Some(s) if was_controller => s,
        Some(s) => s.min(tenure),
        None => tenure,
    }
}

/// The active controller's memory across its rounds, time passed in.
#[derive(Debug, Default, Clone)]
pub struct Tenure {
    /// The quorum term this node leads, and when its brokers' sessions began.
    led: Option<(u64, Instant)>,
    /// The controller this node last followed while it did not lead.
    followed: Option<i32>,
    /// The controller before this node's term, whose silence this node measured all along.
    pub predecessor: Option<i32>,
}

impl Tenure {
    /// A round as a follower of `leader` (none known: the last one known stays).
    pub fn follow(&mut self, leader: Option<i32>) {
        self.led = None;
        if leader.is_some() {
            self.followed = leader;
        }
    }

    /// A round as the leader of `term` at `now`; `stalled`: this node itself was stalled since
    /// the last round, so every session starts afresh.
    pub fn lead(&mut self, term: u64, stalled: bool, now: Instant) {
        if self.led.is_none_or(|(t, _)| t != term) {
            self.led = Some((term, now));
            self.predecessor = self.followed.take();
        }
        if stalled {
            self.led = Some((term, now));
            self.predecessor = None;
        }
    }

    /// How long this node has led without a stall, at `now`.
    pub fn age(&self, now: Instant) -> Duration {
        self.led.map_or(Duration::ZERO, |(_, since)| {
            now.saturating_duration_since(since)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: Duration = Duration::from_millis(2000);
    const LIVE: Registered = Registered {
        fenced: false,
        in_controlled_shutdown: false,
        fenced_as_gone: false,
    };
    const FENCED: Registered = Registered {
        fenced: true,
        in_controlled_shutdown: false,
        fenced_as_gone: false,
    };

    fn heard(ms: u64, gone: bool) -> Heard {
        Heard {
            silence: Duration::from_millis(ms),
            gone,
        }
    }

    #[test]
    fn evidence_fences_at_once_and_silence_only_after_a_session() {
        assert_eq!(
            judge(LIVE, heard(5, true), SESSION),
            Verdict::Fence(FenceReason::ProcessGone)
        );
        assert_eq!(judge(LIVE, heard(1999, false), SESSION), Verdict::Keep);
        assert_eq!(judge(LIVE, heard(2000, false), SESSION), Verdict::Keep);
        assert_eq!(
            judge(LIVE, heard(2001, false), SESSION),
            Verdict::Fence(FenceReason::Silent)
        );
    }

    #[test]
    fn a_fenced_broker_comes_back_only_when_heard_well_inside_a_session() {
        assert_eq!(judge(FENCED, heard(10, false), SESSION), Verdict::Unfence);
        assert_eq!(judge(FENCED, heard(999, false), SESSION), Verdict::Unfence);
        assert_eq!(judge(FENCED, heard(1000, false), SESSION), Verdict::Keep);
        // Its port still refuses: not back, however recent the last message was.
        assert_eq!(judge(FENCED, heard(10, true), SESSION), Verdict::Keep);
        let shutting = Registered {
            in_controlled_shutdown: true,
            ..FENCED
        };
        assert_eq!(judge(shutting, heard(10, false), SESSION), Verdict::Keep);
        // Fenced as dead: what is heard now is its successor, which registers itself.
        let dead = Registered {
            fenced_as_gone: true,
            ..FENCED
        };
        assert_eq!(judge(dead, heard(10, false), SESSION), Verdict::Keep);
    }

    #[test]
    fn silence_counts_from_the_takeover_except_for_the_old_controller() {
        let s = Duration::from_millis;
        // A follower of this node's old term: heard long ago only as a voter, so only the
        // time since the takeover counts.
        assert_eq!(silence(Some(s(60_000)), s(300), false), s(300));
        assert_eq!(silence(Some(s(100)), s(300), false), s(100));
        assert_eq!(silence(None, s(300), false), s(300));
        // The old controller was heard continuously until it stopped.
        assert_eq!(silence(Some(s(1500)), s(300), true), s(1500));
        assert_eq!(silence(None, s(300), true), s(300));
    }
}
