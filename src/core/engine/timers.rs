//! The engine's deadlines in one table: each [`Timer`] has a slot, and
//! [`DataPath::poll_timeout`](super::DataPath::poll_timeout) is the earliest of them.

use crate::core::time::Instant;

/// What the engine wants to be woken for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// The earliest instant a shaper has a packet to let go.
    ShaperRelease,
    /// The earliest deadline of a packet some resequencer holds.
    Reseq,
    /// When a flow table may next forget a flow (unset: all are empty).
    FlowExpiry,
    /// No later than this, some lane that is up counts as silent (or sends a probe).
    StallCheck,
    /// While a lane warms up (see `DataPath::warm_up`): when it wants its next sample,
    /// sooner than an idle lane's.
    WarmSample,
    /// While a site has a background application: the next sample of its lanes'
    /// queues, and the end of the control interval (`background.rs`).
    BackgroundSample,
    BackgroundRevise,
    /// While a site has flows with deadlines: their next review (`deadlines.rs`).
    DeadlineReview,
    /// The pacer's next release. The pacer keeps it; filled in when polled.
    PacingRelease,
    /// While there are lanes: the next round that samples the idle ones whose
    /// interval passed (`quiet.rs`).
    IdleSample,
    /// While a site is active: the next look for lanes due a keep-alive (`quiet.rs`).
    KeepAlive,
}

impl Timer {
    const COUNT: usize = Timer::KeepAlive as usize + 1;
}

/// One optional instant per [`Timer`].
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TimerTable([Option<Instant>; Timer::COUNT]);

impl TimerTable {
    pub(super) fn get(&self, timer: Timer) -> Option<Instant> {
        self.0[timer as usize]
    }

    pub(super) fn set(&mut self, timer: Timer, at: Option<Instant>) {
        self.0[timer as usize] = at;
    }

    /// Moves `timer` to `at` if that is earlier (or it is unset); `None` changes
    /// nothing.
    pub(super) fn earliest(&mut self, timer: Timer, at: Option<Instant>) {
        let slot = &mut self.0[timer as usize];
        *slot = earliest(*slot, at);
    }

    /// Whether `timer` is set and due at `now`.
    pub(super) fn is_due(&self, timer: Timer, now: Instant) -> bool {
        self.get(timer).is_some_and(|at| at <= now)
    }

    /// The earliest instant of all.
    pub(super) fn next(&self) -> Option<Instant> {
        self.0.iter().flatten().min().copied()
    }
}

/// The earlier of two optional instants.
pub(super) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
