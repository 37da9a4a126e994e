//! A lane's state beyond what the scheduler sees, and handing datagrams to it.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::core::aqm::CoDel;
use crate::core::cutoff::Cutoff;
use crate::core::lane::{Colour, LaneId, LaneView};
use crate::core::site::SiteIdx;
use crate::core::time::Instant;
use crate::core::wire::{DATAGRAM_HEADER_LEN, mark_copy, set_lane_seq};

use super::counters::LaneCounters;
use super::liveness::EXCHANGES_TO_STALL;
use super::shaping::UplinkShaper;
use super::standby::UplinkPolicy;
use super::timers::Timer;
use super::{DataPath, Transmit};

/// A lane's state beyond what the scheduler sees.
pub(super) struct Lane {
    pub site: SiteIdx,
    pub uplink: String,
    pub colour: Colour,
    /// Its uplink's tier and quality limits, and whether it is beyond them now
    /// (`standby.rs`).
    pub policy: UplinkPolicy,
    pub cutoff: Cutoff,
    /// Up by its own state: connected, heard from, not recovering. Scheduled only
    /// while its tier carries too, not on `standby` (`standby.rs`).
    pub healthy: bool,
    pub standby: bool,
    /// Replaced by a newer lane of the same uplink and colour: never scheduled again.
    pub retired: bool,
    /// The last sample's sign of life, and when it last grew.
    pub rx_datagrams: u64,
    pub heard_at: Instant,
    /// quinn's PING frames sent at the last sample, and when the peer was last heard.
    pub sent_pings: u64,
    pub pings_when_heard: u64,
    /// Set when a packet is handed to the lane and the peer has not been heard from
    /// since: when the evidence of silence is judged next (see [`Lane::review_wait`]).
    pub answer_due: Option<Instant>,
    /// The number of that packet among those handed to the lane: until quinn has
    /// transmitted that many, it waits for the congestion window, not for an answer.
    pub answer_for: u64,
    /// When that packet was handed to quinn: the wait for an answer began.
    pub answer_wait_from: Instant,
    /// The samples since then that saw quinn transmit packets of the wait, at least
    /// the peer's ACK delay apart: each needed an acknowledgement of its own. And
    /// when the last of them was, and the first [`EXCHANGES_TO_STALL`] were.
    pub answer_chances: u64,
    pub last_chance_at: Instant,
    pub chances_at: [Instant; EXCHANGES_TO_STALL as usize],
    /// When the lane sends its next probe while it waits (see
    /// [`PROBE_INTERVAL`](super::liveness::PROBE_INTERVAL)), and how many it sent in
    /// this wait.
    pub probe_at: Option<Instant>,
    pub probes_in_wait: u32,
    /// Datagrams handed to the shell for sending, and how many of them quinn has
    /// transmitted, refused or abandoned at the last sample.
    pub handed_datagrams: u64,
    pub left_quinn: u64,
    /// Fell silent and is not scheduled until heard from again with nothing left
    /// queued from before: packets that waited out the outage inside braid or quinn
    /// would arrive late, behind the ones other lanes carried meanwhile.
    pub recovering: bool,
    /// Bytes handed to the shell for sending, and how many of them had left braid's
    /// queue at the last sample: the difference is the lane's queue.
    pub handed_bytes: u64,
    pub dequeued_bytes: u64,
    pub quinn_queued_bytes: u64,
    /// The lowest SRTT sampled recently.
    pub min_srtt: WindowedMin,
    /// In its first slow start: neither a window reduction nor a loss has shown the
    /// path's capacity yet (see [`DataPath::warm_up`] and [`DataPath::open_lanes`]).
    pub opening: bool,
    /// Keeps the lane's queue inside braid short in time, whatever its rate.
    pub codel: CoDel,
    /// The shaper of the lane's uplink (an index into the engine's), when its rate is
    /// known: the lane's packets wait there, not in the lane's queue.
    pub shaper: Option<usize>,
    pub closed: bool,
    pub counters: LaneCounters,
    /// The last sample's refused and abandoned datagrams, counted as drops.
    pub refused_datagrams: u64,
    pub abandoned_datagrams: u64,
    /// When the lane last went up or down (scheduled or not).
    pub state_since: Instant,
    /// The datagrams handed to it in the last [`RESEND_WINDOW`], oldest first, and
    /// their bytes.
    pub recent: VecDeque<(Instant, Bytes)>,
    pub recent_bytes: usize,
    /// The lane sequence number of the next packet the lane carries for the site,
    /// and of the next one expected from the peer (`None` before the first).
    pub tx_lane_seq: u16,
    pub rx_lane_seq: Option<u16>,
    /// The delay variation last reported to the peer, and when
    /// (`variation_report.rs`).
    pub variation_reported: (Duration, Option<Instant>),
    /// When it was last sampled; whether it sent or received since; whether it is
    /// among the lanes sampled at every round (`quiet.rs`).
    pub sampled_at: Instant,
    pub touched: bool,
    pub listed_busy: bool,
    /// The datagrams handed when its keep-alives last looked, and about when the
    /// last of them was (`quiet.rs`).
    pub keep_alive_seen: u64,
    pub sent_at: Instant,
}

impl Lane {
    /// A lane of `site` over `uplink` in `colour` that came up at `now`: heard then,
    /// in its first slow start, with nothing handed yet.
    pub(super) fn new(site: SiteIdx, uplink: &str, colour: Colour, now: Instant) -> Lane {
        Lane {
            site,
            uplink: uplink.to_string(),
            colour,
            policy: UplinkPolicy::default(),
            cutoff: Cutoff::default(),
            healthy: false,
            standby: false,
            retired: false,
            rx_datagrams: 0,
            heard_at: now,
            sent_pings: 0,
            pings_when_heard: 0,
            answer_due: None,
            answer_for: 0,
            answer_wait_from: now,
            answer_chances: 0,
            last_chance_at: Instant::ZERO,
            chances_at: [Instant::ZERO; EXCHANGES_TO_STALL as usize],
            probe_at: None,
            probes_in_wait: 0,
            handed_datagrams: 0,
            left_quinn: 0,
            recovering: false,
            handed_bytes: 0,
            dequeued_bytes: 0,
            quinn_queued_bytes: 0,
            opening: true,
            codel: CoDel::for_lane(Duration::ZERO),
            shaper: None,
            min_srtt: WindowedMin::default(),
            closed: false,
            counters: LaneCounters::default(),
            refused_datagrams: 0,
            abandoned_datagrams: 0,
            state_since: now,
            recent: VecDeque::new(),
            recent_bytes: 0,
            tx_lane_seq: 0,
            rx_lane_seq: None,
            variation_reported: (Duration::ZERO, None),
            sampled_at: Instant::ZERO,
            touched: false,
            listed_busy: false,
            keep_alive_seen: 0,
            sent_at: now,
        }
    }

    /// Sampled at every round: it sent or received since its last sample, waits for
    /// an answer or to leave quinn, has bytes queued, or is coming back.
    pub(super) fn busy(&self) -> bool {
        self.touched
            || self.answer_due.is_some()
            || self.own_queue() > 0
            || self.left_quinn < self.handed_datagrams
            || self.recovering
    }

    /// Opening its window by slow start, unpaced: not yet cut, and not held to its
    /// uplink's rate by a shaper.
    pub(super) fn in_first_slow_start(&self) -> bool {
        self.opening && self.shaper.is_none()
    }

    pub(super) fn queued_bytes(&self) -> u64 {
        self.handed_bytes.saturating_sub(self.dequeued_bytes)
    }

    /// Bytes handed to the lane and not yet sent: in braid's queue and in quinn's.
    pub(super) fn own_queue(&self) -> u64 {
        self.queued_bytes() + self.quinn_queued_bytes
    }

    /// Bytes ahead of a packet scheduled on the lane now: its own queue, and its
    /// uplink shaper's (both colours').
    pub(super) fn fill(&self, shapers: &[UplinkShaper]) -> u64 {
        let shaped = self.shaper.map_or(0, |s| shapers[s].shaper.queued_bytes());
        shaped + self.own_queue()
    }
}

/// Gives `datagram`, about to be handed to `lane`, the lane's next sequence number.
pub(super) fn number_for_lane(lane: &mut Lane, mut datagram: BytesMut) -> Bytes {
    set_lane_seq(&mut datagram, lane.next_lane_seq());
    datagram.freeze()
}

/// Hands a datagram to a lane's sender, after `sojourn` in the lane's queue, and keeps
/// it for sending again (see [`RESEND_WINDOW`]); see [`Lane::hand`].
pub(super) fn hand_to_lane(
    lane: &mut Lane,
    datagram: &Bytes,
    srtt: Duration,
    sojourn: Duration,
    now: Instant,
) -> Option<Instant> {
    lane.keep_recent(datagram, now);
    lane.hand(datagram.len() as u64, srtt, sojourn, now)
}

/// Hands `copy` to `lane` (seen by the scheduler as `view`), straight to its queue,
/// marked as a copy and numbered in the lane's sequence: a datagram sent again over
/// another lane, or a `duplicate` application's second one. Returns what to send,
/// and when the engine must look at the lane's wait for an answer.
fn hand_copy(
    lane: &mut Lane,
    view: &mut LaneView,
    mut copy: BytesMut,
    now: Instant,
) -> (Transmit, Option<Instant>) {
    let len = copy.len() as u64;
    mark_copy(&mut copy);
    let datagram = number_for_lane(lane, copy);
    let sojourn = view.drain_time(0, view.srtt);
    let due = hand_to_lane(lane, &datagram, view.srtt, sojourn, now);
    view.fill += len;
    let transmit = Transmit {
        lane: view.id,
        datagram,
    };
    (transmit, due)
}

/// Of a site's lanes (`views`), the one `admits` lets carry a copy of a packet of
/// `len` bytes that fits it and delivers it first, of `colour` if one can; its index.
pub(super) fn quickest_lane(
    views: &[LaneView],
    colour: Colour,
    len: usize,
    now: Instant,
    admits: impl Fn(&LaneView) -> bool,
) -> Option<usize> {
    views
        .iter()
        .enumerate()
        .filter(|(_, v)| v.max_datagram >= len && admits(v))
        .min_by_key(|(_, v)| (v.colour != colour, v.arrival(len, now)))
        .map(|(i, _)| i)
}

impl DataPath {
    /// Where a copy of `len` bytes of a datagram that went to lane `first` goes: the
    /// lane of `site` on another uplink that `admits` and that delivers it first, of
    /// the same colour if one can; its index among the site's lanes.
    pub(super) fn copy_target(
        &self,
        site: SiteIdx,
        first: LaneId,
        len: usize,
        now: Instant,
        admits: impl Fn(&LaneView, &Lane) -> bool,
    ) -> Option<usize> {
        let first = self.lanes.get(first.0 as usize)?.as_ref()?;
        let elsewhere = |v: &LaneView| {
            self.lanes
                .get(v.id.0 as usize)
                .and_then(Option::as_ref)
                .is_some_and(|l| l.uplink != first.uplink && admits(v, l))
        };
        let views = &self.sites[site.0 as usize].lanes;
        quickest_lane(
            views,
            first.colour,
            len - DATAGRAM_HEADER_LEN,
            now,
            elsewhere,
        )
    }

    /// Sends `copy` over the lane `site`'s `view`-th lane, straight to its queue (past
    /// its uplink's shaper: what copies add is bounded where they are made), unless
    /// that queue is full; whether it went.
    pub(super) fn send_copy(
        &mut self,
        site: SiteIdx,
        view: usize,
        copy: BytesMut,
        now: Instant,
    ) -> bool {
        let Some(view) = self.sites[site.0 as usize].lanes.get_mut(view) else {
            return false;
        };
        let Some(Some(lane)) = self.lanes.get_mut(view.id.0 as usize) else {
            return false;
        };
        if lane.queued_bytes() + copy.len() as u64 > self.lane_queue_limit {
            return false;
        }
        let (transmit, due) = hand_copy(lane, view, copy, now);
        self.timers.earliest(Timer::StallCheck, due);
        self.transmits.push_back(transmit);
        true
    }
}

/// A lane's delay without a queue is the lowest SRTT of one to two of these: long,
/// as a lane loaded for a whole window would otherwise take its queue for its path
/// delay, and short enough to follow a path that got longer within minutes.
pub(super) const MIN_SRTT_WINDOW: Duration = Duration::from_secs(300);

/// The lowest of the values observed in the current and the previous
/// [`MIN_SRTT_WINDOW`], so that a lane whose path got longer forgets its old minimum.
#[derive(Debug, Default)]
pub(super) struct WindowedMin {
    pub current: Option<Duration>,
    pub previous: Option<Duration>,
    pub window_start: Instant,
}

impl WindowedMin {
    /// Takes a value observed at `now` and returns the minimum.
    pub(super) fn observe(&mut self, value: Duration, now: Instant) -> Duration {
        if now.saturating_since(self.window_start) >= MIN_SRTT_WINDOW {
            self.previous = self.current.take();
            self.window_start = now;
        }
        let current = self.current.map_or(value, |c| c.min(value));
        self.current = Some(current);
        self.previous.map_or(current, |p| p.min(current))
    }
}
