//! Lane liveness: how a lane waits for its peer's answers, probes when one is overdue,
//! and is taken out of service (and given up) when its path falls silent.

use std::time::Duration;

use bytes::Bytes;

use crate::core::cutoff::CutChange;
use crate::core::lane::LaneId;
use crate::core::time::Instant;
use crate::core::wire::PROBE;

use super::lanes::Lane;
use super::sites::view_mut;
use super::timers::{Timer, earliest};
use super::{DataPath, Transmit};

/// How often each end of an idle lane sends a keep-alive (quinn's PING): it keeps
/// SRTT fresh and reveals dead uplinks.
pub const KEEP_ALIVE: Duration = Duration::from_millis(100);
/// A lane that received nothing for this long is not scheduled: both ends send at
/// least a keep-alive every [`KEEP_ALIVE`], so silence means the path is broken, long before
/// QUIC's idle timeout closes the connection. Lanes that carry packets are given up
/// much sooner, after [`EXCHANGES_TO_STALL`] failed exchanges; this is the bound for
/// idle ones.
pub const LANE_STALL: Duration = Duration::from_millis(400);
/// The longest a lane's peer delays an acknowledgement: each lane asks its peer for
/// this (QUIC's ACK frequency extension; 25 ms otherwise), so that a silent path
/// shows soon even when the lane carries little.
pub const PEER_ACK_DELAY: Duration = Duration::from_millis(5);
/// Allowance for the variation of the round trip (QUIC's PTO adds four times its
/// mean deviation) and for the probe QUIC sends when an acknowledgement was lost.
pub(super) const ANSWER_SLACK: Duration = Duration::from_millis(20);
/// The shortest wait for an answer: scheduling hiccups of a loaded router (both
/// gateways share its cores with everything else) must not look like a dead path.
pub(super) const MIN_ANSWER_TIMEOUT: Duration = Duration::from_millis(60);
/// Exchanges (a transmission and the acknowledgement it asks for) that must each have
/// failed, in a row, before a lane that carries packets is given up: on a path losing
/// 5 % each way one exchange in ten fails, six in a row once in a million. Packets
/// that leave together are answered together, by one acknowledgement, so they count
/// once (see [`Lane::unanswered`]). Four were too few: a lane carrying a 50 packets/s
/// flow over such a path makes thousands of exchanges and was given up falsely
/// (docs/design/failover.md); so a lane whose answer is overdue makes more of them, by
/// probing (see [`PROBE_INTERVAL`]), rather than waiting longer for its traffic to.
pub(super) const EXCHANGES_TO_STALL: u64 = 6;
/// Failed exchanges that suffice while the lane cannot make more: quinn holds its
/// packets (its congestion window is full of ones the dead path lost), and braid's
/// probes would wait behind them. A lane that fills its window on a live path hears
/// the acknowledgements of that window all the time, lossy or not; the lanes given
/// up falsely with four exchanges were ones that carry little, which now probe.
pub(super) const EXCHANGES_TO_STALL_WHEN_HELD: u64 = 4;
/// Once the answer a lane waits for is overdue (its round trip and the peer's ACK
/// delay have passed), it sends a probe, a datagram of braid's protocol that carries
/// no packet (see [`super::wire::PROBE`]), this often while nothing is heard and
/// nothing else of its leaves quinn: each asks the peer for an acknowledgement of its
/// own, so that a lane carrying little gathers [`EXCHANGES_TO_STALL`] failed
/// exchanges within a few round trips on a dead path, and is answered at once on a
/// live one. One per ACK delay: faster ones would be answered together.
pub const PROBE_INTERVAL: Duration = PEER_ACK_DELAY;
/// The most probes a lane sends while it waits for one answer: enough to give up a
/// dead path with, and to ride out a lossy one; a lane still waiting after that is
/// given up by the rules for stuck queues or at the idle bound.
pub(super) const MAX_PROBES_PER_WAIT: u32 = 16;
/// After two answer timeouts of silence (one while the flows' packets wait in the
/// lane, see [`Lane::review_wait`]) one unanswered packet is enough. quinn sends little
/// while its congestion window is full of packets the dead path lost: a probe after
/// its probe timeout, then after twice that, and so on, so three packets take four
/// to eight round trips to leave; on a live path, lossy or not, the peer's
/// acknowledgements of the packets in flight and its keep-alives answer long before
/// that.
pub(super) const UNANSWERED_AFTER_LAST_RESORT: u64 = 1;

/// The wait for an answer that a lane with this SRTT allows before the evidence of
/// fewer exchanges suffices: after two of them, one unanswered transmission (see
/// [`UNANSWERED_AFTER_LAST_RESORT`]). Any datagram from the peer answers: its
/// acknowledgement comes within a round trip and its ACK delay, or, when that was
/// lost, after QUIC's probe a round trip later.
pub fn answer_timeout(srtt: Duration) -> Duration {
    (2 * srtt + PEER_ACK_DELAY + ANSWER_SLACK).max(MIN_ANSWER_TIMEOUT)
}

/// How long after a transmission its exchange counts as failed: its round trip, the
/// peer's ACK delay and the slack for the round trip's variation.
pub(super) fn exchange_timeout(srtt: Duration) -> Duration {
    srtt + PEER_ACK_DELAY + ANSWER_SLACK
}

/// What the shell must hear of a lane: taken out of service because its path fell
/// silent, or put back (logged, so that an operator sees why traffic left an
/// uplink); or what the peer learned of the uplink's delay variation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LaneService {
    /// Nothing heard from the peer for `silent_for`, while `unanswered` datagrams
    /// it was sent waited for an answer (0: an idle lane whose keep-alives went
    /// unanswered); `srtt` set how long they could wait.
    Stalled {
        silent_for: Duration,
        unanswered: u64,
        /// quinn's PING frames (its probes and keep-alives) sent since the peer was
        /// last heard.
        pings: u64,
        /// braid's probes sent in this wait for an answer.
        probes: u32,
        /// Bytes handed to the lane and not yet sent: they will be late, or lost.
        queued: u64,
        /// Datagrams handed to it since shortly before the peer was last heard, sent
        /// again over the other lanes.
        resent: u64,
        srtt: Duration,
    },
    /// Heard from again, with nothing left queued from before, after `out_for`.
    Back { out_for: Duration },
    /// The peer's end learned that the uplink's delay varies by `spread` each way
    /// (`core/engine/variation_report.rs`): the shell hands it to the lane's
    /// congestion controller.
    PeerVariation { spread: Duration },
    /// The lane went beyond its uplink's quality limits, or came back within them
    /// (`core::cutoff`).
    Quality(CutChange),
}

impl Lane {
    /// From when the lane counts as silent, unless it is heard from before.
    pub(super) fn silent_from(&self, idle_bound: Instant) -> Instant {
        self.answer_due
            .map_or(idle_bound, |due| due.min(idle_bound))
    }

    /// Answers missing since the peer was last heard from: transmissions of the
    /// packets handed since (those that left together count once), and quinn's
    /// probes, as a PTO probe or keep-alive that goes unanswered is as telling as a
    /// packet.
    pub(super) fn unanswered(&self) -> u64 {
        if self.answer_due.is_none() {
            return 0;
        }
        self.answer_chances + self.pings()
    }

    /// Counts a datagram of `len` bytes handed to the lane's sender, to leave after
    /// `sojourn` in its queue: from then on the lane waits for its peer's answer.
    /// Returns when the engine must look at the wait first (its first probe), if this
    /// datagram starts it.
    pub(super) fn hand(
        &mut self,
        len: u64,
        srtt: Duration,
        sojourn: Duration,
        now: Instant,
    ) -> Option<Instant> {
        self.handed_bytes += len;
        self.handed_datagrams += 1;
        if self.answer_due.is_some() {
            return None;
        }
        Some(self.await_answer(self.handed_datagrams, now + sojourn, srtt))
    }

    /// Counts a keep-alive of `len` bytes handed to the lane's sender: like QUIC's
    /// PING it starts no wait, the lane's silence shows by the idle bound.
    pub(super) fn hand_unawaited(&mut self, len: u64) {
        self.handed_bytes += len;
        self.handed_datagrams += 1;
    }

    /// Starts waiting for an answer to the `answer_for`-th packet handed, from `at`;
    /// returns when the engine must look at the wait first: its first probe, which
    /// comes before its silence is judged (see [`Lane::review_wait`]).
    pub(super) fn await_answer(&mut self, answer_for: u64, at: Instant, srtt: Duration) -> Instant {
        self.answer_for = answer_for;
        self.answer_wait_from = at;
        self.answer_chances = 0;
        self.last_chance_at = Instant::ZERO;
        self.answer_due = Some(at + answer_timeout(srtt));
        let first_probe = at + srtt + PEER_ACK_DELAY;
        self.probe_at = Some(first_probe);
        self.probes_in_wait = 0;
        first_probe
    }

    /// Stops waiting: the peer was heard.
    pub(super) fn answered(&mut self) {
        self.answer_due = None;
        self.probe_at = None;
    }

    /// Counts a sample that saw quinn transmit packets of the wait as a chance for
    /// an answer, if it came the peer's ACK delay or more after the last one; returns
    /// when the lane's silence is judged, when this chance may decide it.
    pub(super) fn count_chance(&mut self, srtt: Duration, now: Instant) -> Option<Instant> {
        if now.saturating_since(self.last_chance_at) < PEER_ACK_DELAY {
            return None;
        }
        if let Some(at) = self.chances_at.get_mut(self.answer_chances as usize) {
            *at = now;
        }
        self.answer_chances += 1;
        self.last_chance_at = now;
        if ![EXCHANGES_TO_STALL_WHEN_HELD, EXCHANGES_TO_STALL].contains(&self.answer_chances) {
            return None;
        }
        let due = self.exchanges_failed_at(self.answer_chances, srtt)?;
        self.answer_due = Some(self.answer_due.map_or(due, |d| d.min(due)));
        Some(due)
    }

    /// When the first `n` chances counted all count as failed, if there were `n`.
    pub(super) fn exchanges_failed_at(&self, n: u64, srtt: Duration) -> Option<Instant> {
        let nth = *self.chances_at.get(n.checked_sub(1)? as usize)?;
        let at = (self.answer_chances >= n).then(|| nth + exchange_timeout(srtt))?;
        Some(at.max(self.answer_wait_from + MIN_ANSWER_TIMEOUT))
    }

    /// Packets handed to the lane wait inside braid or quinn: what it would send next
    /// waits behind them.
    pub(super) fn holds_packets(&self) -> bool {
        self.own_queue() > 0 || self.left_quinn < self.handed_datagrams
    }

    /// At the instant the lane's silence is due to be judged (`answer_due`): leaves
    /// it there when the evidence is in, so that the lane counts as silent, or moves
    /// it to when there will be more. Either [`EXCHANGES_TO_STALL`] exchanges failed
    /// ([`EXCHANGES_TO_STALL_WHEN_HELD`] while quinn holds its packets), or, after two
    /// answer timeouts (one while the flows' packets wait in it), any one did: quinn sends
    /// little while its congestion window is full of packets a dead path lost (a
    /// probe after its probe timeout, then after twice that), and braid's probes wait
    /// behind them too.
    pub(super) fn review_wait(&mut self, srtt: Duration, now: Instant) {
        if self.answer_due.is_none_or(|due| due > now) {
            return;
        }
        let timeout = answer_timeout(srtt);
        let held = self.holds_packets();
        // While packets of the flows (more than braid's own probes could be) wait in
        // the lane, one timeout of silence will do: on a live path the
        // acknowledgements of a full window arrive all the time, and on a dead one
        // braid's probes wait behind that window. With two, a VoIP flow's gaps in a
        // cut grew well past those of lanes that probes gave up. A lane holding only
        // a probe is not full: counted as such, lanes on a lossy path were given up
        // falsely (docs/design/failover.md).
        let flows_queued = self.own_queue() > PROBE.len() as u64 * u64::from(MAX_PROBES_PER_WAIT);
        let last_resort = self.answer_wait_from + if flows_queued { timeout } else { 2 * timeout };
        let needed = if held {
            EXCHANGES_TO_STALL_WHEN_HELD
        } else {
            EXCHANGES_TO_STALL
        };
        let by_exchanges = self.exchanges_failed_at(needed, srtt);
        let enough = if now >= last_resort {
            self.unanswered() >= UNANSWERED_AFTER_LAST_RESORT
        } else {
            by_exchanges.is_some_and(|at| at <= now)
        };
        if !enough {
            let next = if now < last_resort {
                last_resort
            } else {
                now + timeout
            };
            self.answer_due = Some(by_exchanges.map_or(next, |at| at.min(next)));
        }
    }

    /// When due, sends a probe (returned, for the shell) while the lane waits for an
    /// answer and has nothing else in braid's queue or quinn's; returns too when the
    /// next one is due.
    pub(super) fn probe(&mut self, now: Instant) -> (Option<Bytes>, Option<Instant>) {
        // Set with `answer_due` when a wait starts, cleared with it when answered.
        let Some(due) = self.probe_at else {
            return (None, None);
        };
        if due > now {
            return (None, Some(due));
        }
        if self.probes_in_wait >= MAX_PROBES_PER_WAIT {
            self.probe_at = None;
            return (None, None);
        }
        self.probe_at = Some(now + PROBE_INTERVAL);
        if self.holds_packets() {
            // What is queued will leave and count, or it is stuck behind quinn's
            // congestion window, as a probe would be.
            return (None, self.probe_at);
        }
        let probe = Bytes::from_static(&PROBE);
        // Handed while the lane waits: no new wait starts.
        self.hand(probe.len() as u64, Duration::ZERO, Duration::ZERO, now);
        self.probes_in_wait += 1;
        self.counters.probes_sent += 1;
        (Some(probe), self.probe_at)
    }

    /// The packets quinn has transmitted since the peer was last heard from (from
    /// the first one handed after that on).
    pub(super) fn unanswered_datagrams(&self) -> u64 {
        if self.answer_due.is_none() {
            return 0;
        }
        (self.left_quinn + 1).saturating_sub(self.answer_for)
    }

    /// quinn's PING frames (probes and keep-alives) since the peer was last heard.
    pub(super) fn pings(&self) -> u64 {
        self.sent_pings.saturating_sub(self.pings_when_heard)
    }

    /// What the shell logs when the lane is taken out of service at `now`.
    pub(super) fn stalled(&self, srtt: Duration, resent: u64, now: Instant) -> LaneService {
        LaneService::Stalled {
            silent_for: now.saturating_since(self.heard_at),
            unanswered: self.unanswered_datagrams(),
            pings: self.pings(),
            probes: self.probes_in_wait,
            queued: self.own_queue(),
            resent,
            srtt,
        }
    }
}

impl DataPath {
    /// The stall check is due at `now`: takes lanes that fell silent out of service
    /// (and gives them up), sends the probes due, and sets when to look again.
    pub(super) fn check_stalls(&mut self, now: Instant) {
        self.timers.set(Timer::StallCheck, None);
        // Allocates only when a lane falls silent.
        let (mut stalled, mut resample) = (Vec::new(), Vec::new());
        for (i, l) in self.lanes.iter_mut().enumerate() {
            let Some(l) = l else { continue };
            let id = LaneId(i as u32);
            if !l.healthy {
                continue;
            }
            let site = &self.sites[l.site.0 as usize];
            let silent_from = l.silent_from(site.idle_bound(l.heard_at, self.lane_stall, now));
            let Some(v) = view_mut(&mut self.sites, l.site, id) else {
                continue;
            };
            if silent_from <= now && l.sampled_at < silent_from {
                // The answer may have come since the last sample: decided on the
                // next one, taken at once.
                resample.push(id);
                self.timers.set(Timer::StallCheck, Some(now));
            } else if silent_from <= now {
                v.up = false;
                l.healthy = false;
                l.recovering = true;
                l.state_since = now;
                l.counters.stalls += 1;
                stalled.push((id, v.srtt));
            } else {
                let (probe, next_probe) = l.probe(now);
                if let Some(datagram) = probe {
                    self.transmits.push_back(Transmit { lane: id, datagram });
                }
                let next = earliest(Some(silent_from), next_probe);
                self.timers.earliest(Timer::StallCheck, next);
            }
        }
        self.sample_due |= !resample.is_empty();
        for id in resample {
            self.touch_lane(id);
        }
        for (id, srtt) in stalled {
            self.give_up(id, srtt, now);
        }
    }

    /// After lane `lane` was taken out of service because its path fell silent:
    /// takes the site's lanes silent as long as it out of service with it, sends
    /// what they may have lost over the other lanes, and says why for the log.
    pub(super) fn give_up(&mut self, lane: LaneId, srtt: Duration, now: Instant) {
        let alike = self.silent_alike(lane, now);
        if let Some(Some(l)) = self.lanes.get(lane.0 as usize) {
            // Before what they lost is sent again: over the tier that takes over.
            self.review_tiers(l.site, now);
        }
        self.doubt_tier(lane, now);
        for (id, srtt) in std::iter::once((lane, srtt)).chain(alike) {
            let resent = self.resend_from(id, srtt, now);
            if let Some(Some(l)) = self.lanes.get(id.0 as usize) {
                let why = l.stalled(srtt, resent, now);
                self.lane_services.push_back((id, why));
            }
        }
    }

    /// The lanes of `lane`'s site, other than it, that wait for an answer and have
    /// not been heard from since it was, give or take a round trip of theirs: one
    /// cause silenced them together (both lines of a tier cut at once, the exit
    /// gone), and waiting for each one's own failed exchanges would move the flows
    /// from one dead lane to the next. Taken out of service here, with their round
    /// trips. A live lane that waits for an answer hears its acknowledgements far
    /// more often than a silence takes to be judged.
    fn silent_alike(&mut self, lane: LaneId, now: Instant) -> Vec<(LaneId, Duration)> {
        let Some(Some(given_up)) = self.lanes.get(lane.0 as usize) else {
            return Vec::new();
        };
        let (site, heard_at) = (given_up.site, given_up.heard_at);
        let mut alike = Vec::new();
        for (i, l) in self.lanes.iter_mut().enumerate() {
            let id = LaneId(i as u32);
            let Some(l) = l.as_mut().filter(|l| id != lane && l.site == site) else {
                continue;
            };
            if !l.healthy || l.answer_due.is_none() {
                continue;
            }
            let Some(v) = view_mut(&mut self.sites, site, id) else {
                continue;
            };
            if l.heard_at > heard_at.saturating_add(v.srtt) {
                continue;
            }
            v.up = false;
            l.healthy = false;
            l.recovering = true;
            l.state_since = now;
            l.counters.stalls += 1;
            alike.push((id, v.srtt));
        }
        alike
    }
}
