//! The data path of one gateway, as one state machine.
//!
//! Contract, after quinn-proto's `Connection`: the shell hands in what happened, with
//! the current instant, and drains what the engine decided.
//!
//! - Inputs: a packet read from the TUN device ([`DataPath::handle_tun_packet`]), a
//!   datagram received on a lane ([`DataPath::handle_lane_datagram`]), a lane that came
//!   up or closed ([`DataPath::handle_lane_up`], [`DataPath::handle_lane_closed`]), a
//!   sample of a lane's QUIC state ([`DataPath::handle_lane_sample`], whenever
//!   [`DataPath::wants_lane_samples`] says so), a controller's pacing table
//!   ([`DataPath::handle_pacing_table`]), and the passing of time
//!   ([`DataPath::handle_timeout`]).
//! - Outputs, polled: datagrams to send on a lane ([`DataPath::poll_transmit`]),
//!   packets (and ICMP errors) to write to the TUN device
//!   ([`DataPath::poll_tun_write`]), lanes to close ([`DataPath::poll_lane_close`]),
//!   packets for a site another of an exit's threads serves ([`DataPath::poll_handoff`],
//!   see [`Shard`]), the next instant it wants to be woken ([`DataPath::poll_timeout`]),
//!   and counters.
//!
//! Everything that decides lives here: admission, classification and pacing per
//! application, scheduling, lane liveness and replacement, the lane queue limit, flow
//! expiry, reordering measurement, and counting, which happens once per packet after
//! its verdict. The engine never touches a socket, a clock or quinn; per-packet work
//! allocates nothing but the rare ICMP reply.
//!
//! Every packet sent to a site carries the site's next sequence number (see
//! `wire::DATAGRAM_HEADER_LEN`); the receiving engine counts, per flow, packets that
//! arrive after a packet of the same flow that was sent later: reordering.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use ipnet::IpNet;

use super::app_pacing::{AppCounters, AppPacing};
use super::aqm::{self, AqmDrop, CoDel, StripedDrops};
use super::flow::FlowTable;
use super::icmp::{self, MAX_REPLY_LEN};
use super::lane::{Colour, LaneId, LaneSample, LaneView, longest_one_way};
use super::lane_cc::MAX_START_WINDOW;
use super::pacer::Enqueued;
use super::pacing_table::{AppIdx, Direction, PacingTable};
use super::packet::PacketInfo;
use super::reseq::{HeldBudget, RESEQ_MIN_DEADLINE, ReseqCounters, Resequencer, base_deadline};
use super::route::PrefixMap;
use super::sched::{Algorithm, DecisionKind, Scheduler};
use super::shaper::{AbeSettings, Released, ShapeDrop, Shaper};
pub use super::site::SiteIdx;
use super::stats::{DelayHistogram, DropReason};
use super::time::Instant;
use super::wire::{
    DATAGRAM_HEADER_LEN, Datagram, DatagramHeader, LossReport, PROBE, PROBE_PADDING, mark_copy,
    set_lane_seq, split_datagram, write_datagram_header,
};

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
const ANSWER_SLACK: Duration = Duration::from_millis(20);
/// The shortest wait for an answer: scheduling hiccups of a loaded router (both
/// gateways share its cores with everything else) must not look like a dead path.
const MIN_ANSWER_TIMEOUT: Duration = Duration::from_millis(60);
/// Exchanges (a transmission and the acknowledgement it asks for) that must each have
/// failed, in a row, before a lane that carries packets is given up: on a path losing
/// 5 % each way one exchange in ten fails, six in a row once in a million. Packets
/// that leave together are answered together, by one acknowledgement, so they count
/// once (see [`Lane::unanswered`]). Four were too few: a lane carrying a 50 packets/s
/// flow over such a path was given up falsely in 2 of 34 runs of 20 s, as it makes
/// thousands of exchanges; so a lane whose answer is overdue makes more of them, by
/// probing (see [`PROBE_INTERVAL`]), rather than waiting longer for its traffic to.
const EXCHANGES_TO_STALL: u64 = 6;
/// Failed exchanges that suffice while the lane cannot make more: quinn holds its
/// packets (its congestion window is full of ones the dead path lost), and braid's
/// probes would wait behind them. A lane that fills its window on a live path hears
/// the acknowledgements of that window all the time, lossy or not; the lanes given
/// up falsely with four exchanges were ones that carry little, which now probe.
const EXCHANGES_TO_STALL_WHEN_HELD: u64 = 4;
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
const MAX_PROBES_PER_WAIT: u32 = 16;
/// After two answer timeouts of silence (one while the flows' packets wait in the
/// lane, see [`Lane::review_wait`]) one unanswered packet is enough. quinn sends little
/// while its congestion window is full of packets the dead path lost: a probe after
/// its probe timeout, then after twice that, and so on, so three packets take four
/// to eight round trips to leave; on a live path, lossy or not, the peer's
/// acknowledgements of the packets in flight and its keep-alives answer long before
/// that.
const UNANSWERED_AFTER_LAST_RESORT: u64 = 1;

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
fn exchange_timeout(srtt: Duration) -> Duration {
    srtt + PEER_ACK_DELAY + ANSWER_SLACK
}
/// Datagrams handed to a lane are kept this long (at most [`RESEND_MAX_BYTES`]), so
/// that those its path may have lost are sent again over the other lanes when it is
/// given up: packets still queued behind its congestion window and packets in flight
/// when the path died. A lane is given up at the latest [`LANE_STALL`] after it was
/// last heard, and what it was handed a round trip before that may be lost too.
pub const RESEND_WINDOW: Duration = Duration::from_millis(LANE_STALL.as_millis() as u64 + 100);
/// The most a lane keeps for sending again: what a lane of up to 250 Mbit/s carries
/// in a round trip of 134 ms, as a report of its losses comes a round trip after
/// the packets left (see [`LossReport`]); beyond it, the inner flows recover what
/// the lane lost themselves. Half a megabyte, what a lane of 70 Mbit/s queues in 50
/// ms, let a 50 Mbit/s lane over 60 ms each way forget its lost packets before their
/// report came (the simulator's striped flow: none of 214 sent again).
pub const RESEND_MAX_BYTES: usize = 4 * 1024 * 1024;
/// The longest run of a lane's packets missing that the receiver reports lost (see
/// [`LossReport`]): a longer one is an outage, whose packets the sender sends again
/// when it gives the lane up ([`RESEND_WINDOW`]).
const MAX_REPORTED_LOSS: u16 = 64;
/// Bytes a lane may have queued inside braid before packets for it are dropped: a
/// bound on memory; the queue is kept short in time by CoDel and its bound
/// ([`super::aqm::lane_max_sojourn`]), which govern every lane slower than about
/// 170 Mbit/s. On faster ones the data path hands a lane a wake-up's TCP
/// super-packets at once, megabytes, and a bound of 256 KiB dropped a fifth of four
/// downloads' packets over unshaped uplinks: 1 MiB carried 1.12–1.37× as much
/// (README, "A lane's queue of a megabyte").
pub const LANE_QUEUE_LIMIT: u64 = 1024 * 1024;
/// Lanes are sampled at most this often while packets flow: quinn's accessors take
/// its connection lock, so once per batch, not per packet.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(1);
/// Lanes are sampled at least this often, traffic or not, so that liveness and the
/// metrics stay fresh.
pub const IDLE_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
/// How far ahead a lane that warms up keeps padding queued (see
/// [`DataPath::warm_up`]): two samples' worth, so that quinn does not run out between
/// two, and little enough that a packet put behind it hardly waits.
const WARM_AHEAD: Duration = Duration::from_millis(2);
/// A lane's delay without a queue is the lowest SRTT of one to two of these: long,
/// as a lane loaded for a whole window would otherwise take its queue for its path
/// delay, and short enough to follow a path that got longer within minutes.
const MIN_SRTT_WINDOW: Duration = Duration::from_secs(300);

/// Which end of the tunnel this gateway is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// At the branch: one site, packets from the TUN go to that site's lanes.
    Entry,
    /// At the concentrator: many sites, packets from the TUN go to the site whose
    /// prefixes contain the destination.
    Exit,
}

impl Role {
    /// The direction this end paces (SPEC §4): the entry `up`, the exit `down`.
    pub fn paced_direction(self) -> Direction {
        match self {
            Role::Entry => Direction::Up,
            Role::Exit => Direction::Down,
        }
    }
}

/// Which of an exit's data-path threads an engine is, of how many. The exit's sites
/// are spread over the threads by index, so that each site's flows, lanes, queues and
/// resequencing live on one thread and no per-packet state is shared: site `i` is
/// served by thread `i % count`. Every thread's engine knows every site (the indexes
/// then agree, and a reload gives each the same ones); a packet read from the TUN
/// device for another thread's site is handed over ([`DataPath::poll_handoff`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// The one thread of an entry, or of an exit that runs one.
    pub const ONLY: Shard = Shard { index: 0, count: 1 };

    /// The thread serving `site`.
    pub fn of(site: SiteIdx, count: usize) -> usize {
        site.0 as usize % count.max(1)
    }
}

/// One site the engine carries traffic for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteSpec {
    pub id: String,
    /// The site's LAN prefixes (exit only; an entry's site has none).
    pub prefixes: Vec<IpNet>,
}

/// Everything the engine is built from.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub role: Role,
    pub sites: Vec<SiteSpec>,
    pub tun_mtu: usize,
    pub algorithm: Algorithm,
    /// Flows idle this long are forgotten (scheduler, classifier and reordering tables).
    pub flow_idle_timeout: Duration,
    /// At most this many flows per site and table; the least recently used goes.
    pub max_flows: usize,
    /// The rate of applications without one of their own (`pacing.default_rate_kbps`).
    pub default_rate_kbps: Option<u64>,
    /// See [`LANE_STALL`].
    pub lane_stall: Duration,
    /// See [`LANE_QUEUE_LIMIT`].
    pub lane_queue_limit: u64,
    /// Inner DSCPs that make a packet green when its application has no colour
    /// (`abe.green_inner_dscp`).
    pub green_inner_dscp: Vec<u8>,
    /// How uplinks of known rate are shaped and served (`[abe]`).
    pub abe: AbeSettings,
    /// Which sites this engine serves ([`Shard::ONLY`]: all of them).
    pub shard: Shard,
    /// Whether blue lanes of unknown rate open their windows with padding as they
    /// come up ([`DataPath::warm_up`]): on in the daemon; off where only the packets
    /// a test sends should cross its lanes.
    pub warm_up_lanes: bool,
}

/// The daemon's settings where its configuration has a default, an entry serving no
/// site yet: a start for [`EngineConfig::builder`].
impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            role: Role::Entry,
            sites: Vec::new(),
            // What a QUIC datagram carries over a 1500-byte path that may be IPv6.
            tun_mtu: 1406,
            algorithm: Algorithm::default(),
            flow_idle_timeout: Duration::from_secs(10),
            max_flows: 65_536,
            default_rate_kbps: None,
            lane_stall: LANE_STALL,
            lane_queue_limit: LANE_QUEUE_LIMIT,
            green_inner_dscp: vec![46],
            abe: AbeSettings::default(),
            shard: Shard::ONLY,
            warm_up_lanes: true,
        }
    }
}

impl EngineConfig {
    /// A builder that starts from [`EngineConfig::default`]: callers name only what
    /// they set, and a new setting does not touch them all.
    pub fn builder() -> EngineConfigBuilder {
        EngineConfigBuilder(EngineConfig::default())
    }
}

/// Builds an [`EngineConfig`]: one method per field, each setting it.
#[derive(Debug, Clone)]
pub struct EngineConfigBuilder(EngineConfig);

/// One setter per field of [`EngineConfig`], named after it.
macro_rules! setters {
    ($($field:ident: $ty:ty),* $(,)?) => {
        $(
            #[doc = concat!("Sets [`EngineConfig::", stringify!($field), "`].")]
            pub fn $field(mut self, $field: $ty) -> Self {
                self.0.$field = $field;
                self
            }
        )*
    };
}

impl EngineConfigBuilder {
    setters! {
        role: Role,
        sites: Vec<SiteSpec>,
        tun_mtu: usize,
        algorithm: Algorithm,
        flow_idle_timeout: Duration,
        max_flows: usize,
        default_rate_kbps: Option<u64>,
        lane_stall: Duration,
        lane_queue_limit: u64,
        green_inner_dscp: Vec<u8>,
        abe: AbeSettings,
        shard: Shard,
        warm_up_lanes: bool,
    }

    pub fn build(self) -> EngineConfig {
        self.0
    }
}

/// A datagram to send on a lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    pub lane: LaneId,
    pub datagram: Bytes,
}

/// A lane as the shell announces it, once its handshake and hello are done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneUp<'a> {
    pub site: &'a str,
    pub uplink: &'a str,
    pub colour: Colour,
    /// The uplink's position in the entry's configuration.
    pub rank: u32,
    /// The uplink's rate in this gateway's sending direction, when known (kbit/s).
    pub rate_kbps: Option<u64>,
}

/// Why the engine wants a lane closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneClose {
    /// A newer lane of its site, uplink and colour took its place.
    Replaced,
    /// A reload removed its site.
    SiteRemoved,
}

impl LaneClose {
    /// The reason given to the peer in the QUIC close frame.
    pub fn reason(self) -> &'static [u8] {
        match self {
            LaneClose::Replaced => b"replaced",
            LaneClose::SiteRemoved => b"site removed",
        }
    }
}

/// A lane taken out of service because its path fell silent, or put back: what the
/// shell logs, so that an operator sees why traffic left an uplink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

/// What a lane carried, counted by the engine (decisions, receptions) or passed on
/// from the shell's samples (what quinn sent and lost).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneCounters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub lost_packets: u64,
    /// Times the lane was taken out of service because its peer fell silent.
    pub stalls: u64,
    /// Datagrams sent again over the other lanes when it was.
    pub resent: u64,
    /// Probes sent while an answer was overdue (see [`PROBE_INTERVAL`]), and probes
    /// received from the peer.
    pub probes_sent: u64,
    pub probes_received: u64,
    /// Bytes of padding sent to open the lane's window (see `DataPath::open_lanes`).
    pub opening_bytes: u64,
    /// The peer's packets found missing on the lane and reported to it, and the
    /// lane's own packets its peer reported missing that were sent again over the
    /// other lanes (see [`LossReport`]).
    pub loss_reported: u64,
    pub loss_repaired: u64,
    /// Scheduler decisions for this lane, indexed like `DecisionKind::ALL`.
    pub decisions: [u64; DecisionKind::ALL.len()],
}

/// What the engine tells about one lane.
#[derive(Debug, Clone, Copy)]
pub struct LaneReport<'a> {
    pub site: SiteIdx,
    pub uplink: &'a str,
    pub view: &'a LaneView,
    pub counters: &'a LaneCounters,
    /// When it last went up or down.
    pub state_since: Instant,
    /// Replaced by a newer lane of its uplink and colour.
    pub replaced: bool,
}

/// A packet read from the TUN device on its way to a lane: its datagram, with room
/// for the header in front, and what it is.
struct Packet {
    info: PacketInfo,
    datagram: BytesMut,
}

struct Site {
    id: String,
    /// The site's LAN prefixes (exit only).
    prefixes: Vec<IpNet>,
    /// False once a reload removed the site: its lanes are closed and refused, and
    /// nothing is routed to it. It keeps its index should it come back.
    served: bool,
    /// Snapshots of the site's lanes, in the order they came up.
    lanes: Vec<LaneView>,
    /// By the packets' `Colour as usize`: a flow has one colour.
    schedulers: [Box<dyn Scheduler>; 2],
    /// Sequence number of the next packet sent to this site.
    tx_seq: u32,
    /// Puts this site's striped flows back in order and counts reordering.
    reseq: Resequencer,
    /// Flows the receiver resequences that the lanes' CoDel dropped a packet of: until
    /// when it drops no other, on whichever lane ([`aqm::resequenced_drop_spacing`]).
    resequenced_drops: FlowTable<Instant>,
    /// When the lanes' CoDel may drop a packet of any flow the receiver resequences
    /// (all blue: green flows are never striped).
    striped_drops: StripedDrops,
}

/// A lane's state beyond what the scheduler sees.
struct Lane {
    site: SiteIdx,
    uplink: String,
    colour: Colour,
    /// Replaced by a newer lane of the same uplink and colour: never scheduled again.
    retired: bool,
    /// The last sample's sign of life, and when it last grew.
    rx_datagrams: u64,
    heard_at: Instant,
    /// quinn's PING frames sent at the last sample, and when the peer was last heard.
    sent_pings: u64,
    pings_when_heard: u64,
    /// Set when a packet is handed to the lane and the peer has not been heard from
    /// since: when the evidence of silence is judged next (see [`Lane::review_wait`]).
    answer_due: Option<Instant>,
    /// The number of that packet among those handed to the lane: until quinn has
    /// transmitted that many, it waits for the congestion window, not for an answer.
    answer_for: u64,
    /// When that packet was handed to quinn: the wait for an answer began.
    answer_wait_from: Instant,
    /// The samples since then that saw quinn transmit packets of the wait, at least
    /// the peer's ACK delay apart: each needed an acknowledgement of its own. And
    /// when the last of them was, and the first [`EXCHANGES_TO_STALL`] were.
    answer_chances: u64,
    last_chance_at: Instant,
    chances_at: [Instant; EXCHANGES_TO_STALL as usize],
    /// When the lane sends its next probe while it waits (see [`PROBE_INTERVAL`]),
    /// and how many it sent in this wait.
    probe_at: Option<Instant>,
    probes_in_wait: u32,
    /// Datagrams handed to the shell for sending, and how many of them quinn has
    /// transmitted, refused or abandoned at the last sample.
    handed_datagrams: u64,
    left_quinn: u64,
    /// Fell silent and is not scheduled until heard from again with nothing left
    /// queued from before: packets that waited out the outage inside braid or quinn
    /// would arrive late, behind the ones other lanes carried meanwhile.
    recovering: bool,
    /// Bytes handed to the shell for sending, and how many of them had left braid's
    /// queue at the last sample: the difference is the lane's queue.
    handed_bytes: u64,
    dequeued_bytes: u64,
    quinn_queued_bytes: u64,
    /// The lowest SRTT sampled recently.
    min_srtt: WindowedMin,
    /// In its first slow start: neither a window reduction nor a loss has shown the
    /// path's capacity yet (see [`DataPath::warm_up`] and [`DataPath::open_lanes`]).
    opening: bool,
    /// Keeps the lane's queue inside braid short in time, whatever its rate.
    codel: CoDel,
    /// The shaper of the lane's uplink (an index into the engine's), when its rate is
    /// known: the lane's packets wait there, not in the lane's queue.
    shaper: Option<usize>,
    closed: bool,
    counters: LaneCounters,
    /// The last sample's refused and abandoned datagrams, counted as drops.
    refused_datagrams: u64,
    abandoned_datagrams: u64,
    /// When the lane last went up or down (scheduled or not).
    state_since: Instant,
    /// The datagrams handed to it in the last [`RESEND_WINDOW`], oldest first, and
    /// their bytes.
    recent: VecDeque<(Instant, Bytes)>,
    recent_bytes: usize,
    /// The lane sequence number of the next packet the lane carries for the site,
    /// and of the next one expected from the peer (`None` before the first).
    tx_lane_seq: u16,
    rx_lane_seq: Option<u16>,
}

impl Lane {
    /// Opening its window by slow start, unpaced: not yet cut, and not held to its
    /// uplink's rate by a shaper.
    fn in_first_slow_start(&self) -> bool {
        self.opening && self.shaper.is_none()
    }

    fn queued_bytes(&self) -> u64 {
        self.handed_bytes.saturating_sub(self.dequeued_bytes)
    }

    /// Bytes handed to the lane and not yet sent: in braid's queue and in quinn's.
    fn own_queue(&self) -> u64 {
        self.queued_bytes() + self.quinn_queued_bytes
    }

    /// Bytes ahead of a packet scheduled on the lane now: its own queue, and its
    /// uplink shaper's (both colours').
    fn fill(&self, shapers: &[UplinkShaper]) -> u64 {
        let shaped = self.shaper.map_or(0, |s| shapers[s].shaper.queued_bytes());
        shaped + self.own_queue()
    }

    /// From when the lane counts as silent, unless it is heard from before.
    fn silent_from(&self, stall: Duration) -> Instant {
        let idle_bound = self.heard_at.saturating_add(stall);
        self.answer_due
            .map_or(idle_bound, |due| due.min(idle_bound))
    }

    /// Answers missing since the peer was last heard from: transmissions of the
    /// packets handed since (those that left together count once), and quinn's
    /// probes, as a PTO probe or keep-alive that goes unanswered is as telling as a
    /// packet.
    fn unanswered(&self) -> u64 {
        if self.answer_due.is_none() {
            return 0;
        }
        self.answer_chances + self.pings()
    }

    /// Counts a datagram of `len` bytes handed to the lane's sender, to leave after
    /// `sojourn` in its queue: from then on the lane waits for its peer's answer.
    /// Returns when the engine must look at the wait first (its first probe), if this
    /// datagram starts it.
    fn hand(
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

    /// Starts waiting for an answer to the `answer_for`-th packet handed, from `at`;
    /// returns when the engine must look at the wait first: its first probe, which
    /// comes before its silence is judged (see [`Lane::review_wait`]).
    fn await_answer(&mut self, answer_for: u64, at: Instant, srtt: Duration) -> Instant {
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
    fn answered(&mut self) {
        self.answer_due = None;
        self.probe_at = None;
    }

    /// Counts a sample that saw quinn transmit packets of the wait as a chance for
    /// an answer, if it came the peer's ACK delay or more after the last one; returns
    /// when the lane's silence is judged, when this chance may decide it.
    fn count_chance(&mut self, srtt: Duration, now: Instant) -> Option<Instant> {
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
    fn exchanges_failed_at(&self, n: u64, srtt: Duration) -> Option<Instant> {
        let nth = *self.chances_at.get(n.checked_sub(1)? as usize)?;
        let at = (self.answer_chances >= n).then(|| nth + exchange_timeout(srtt))?;
        Some(at.max(self.answer_wait_from + MIN_ANSWER_TIMEOUT))
    }

    /// Packets handed to the lane wait inside braid or quinn: what it would send next
    /// waits behind them.
    fn holds_packets(&self) -> bool {
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
    fn review_wait(&mut self, srtt: Duration, now: Instant) {
        if self.answer_due.is_none_or(|due| due > now) {
            return;
        }
        let timeout = answer_timeout(srtt);
        let held = self.holds_packets();
        // While packets of the flows (more than braid's own probes could be) wait in
        // the lane, one timeout of silence will do: on a live path the
        // acknowledgements of a full window arrive all the time, and on a dead one
        // braid's probes wait behind that window. With two, a VoIP flow's longest gap
        // in a cut reached 131-214 ms (the lane given up after 140-183 ms of silence),
        // where probes gave lanes up after 90-110 ms. A lane holding only a probe is
        // not full: counted as such, lanes on a path losing 5 % each way were given
        // up falsely 3 times in 24 runs.
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
    fn probe(&mut self, now: Instant) -> (Option<Bytes>, Option<Instant>) {
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
    fn unanswered_datagrams(&self) -> u64 {
        if self.answer_due.is_none() {
            return 0;
        }
        (self.left_quinn + 1).saturating_sub(self.answer_for)
    }

    /// quinn's PING frames (probes and keep-alives) since the peer was last heard.
    fn pings(&self) -> u64 {
        self.sent_pings.saturating_sub(self.pings_when_heard)
    }

    /// What the shell logs when the lane is taken out of service at `now`.
    fn stalled(&self, srtt: Duration, resent: u64, now: Instant) -> LaneService {
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

    /// Keeps a datagram handed to the lane at `now`, forgetting those older than
    /// [`RESEND_WINDOW`] or beyond [`RESEND_MAX_BYTES`].
    fn keep_recent(&mut self, datagram: &Bytes, now: Instant) {
        self.recent.push_back((now, datagram.clone()));
        self.recent_bytes += datagram.len();
        self.forget_old(now);
    }

    /// Forgets the kept datagrams older than [`RESEND_WINDOW`] or beyond
    /// [`RESEND_MAX_BYTES`]; at every sample too, so that a lane whose traffic
    /// stopped does not pin its last datagrams' buffers.
    fn forget_old(&mut self, now: Instant) {
        while let Some((at, d)) = self.recent.front() {
            if now.saturating_since(*at) <= RESEND_WINDOW && self.recent_bytes <= RESEND_MAX_BYTES {
                break;
            }
            self.recent_bytes -= d.len();
            self.recent.pop_front();
        }
    }

    /// The lane sequence number for the next packet handed to the lane, counted.
    fn next_lane_seq(&mut self) -> u16 {
        let seq = self.tx_lane_seq;
        self.tx_lane_seq = seq.wrapping_add(1);
        seq
    }

    /// The peer's packet with lane sequence number `seq` arrived: the run of packets
    /// before it that did not, if it is one to report. A packet behind the one
    /// expected is a copy or came late, and changes nothing.
    fn received_lane_seq(&mut self, seq: u16) -> Option<LossReport> {
        let expected = self.rx_lane_seq.unwrap_or(seq);
        let missing = seq.wrapping_sub(expected);
        if missing >= 0x8000 {
            return None;
        }
        self.rx_lane_seq = Some(seq.wrapping_add(1));
        (1..=MAX_REPORTED_LOSS)
            .contains(&missing)
            .then_some(LossReport {
                first: expected,
                count: missing as u8,
            })
    }
}

/// The shaper of one uplink of known rate.
struct UplinkShaper {
    site: SiteIdx,
    uplink: String,
    shaper: Shaper,
}

/// Green packets DSD dropped (`abe_green_drops_total{reason}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GreenDrops {
    /// Refused at arrival: they could not have left within `abe.green_delay_ms`.
    pub acceptance: u64,
    /// Waited until they could no longer leave in time.
    pub stale: u64,
}

/// What the engine tells about an uplink's shaper.
#[derive(Debug, Clone, Copy)]
pub struct ShaperReport<'a> {
    pub site: SiteIdx,
    pub uplink: &'a str,
    /// DSD's g.
    pub green_bias: f64,
}

/// The data path state machine.
pub struct DataPath {
    role: Role,
    shard: Shard,
    /// See [`EngineConfig::warm_up_lanes`].
    warm_up_lanes: bool,
    sites: Vec<Site>,
    site_by_prefix: PrefixMap<SiteIdx>,
    /// Lane id -> lane; `None` for free ids, which are reused.
    lanes: Vec<Option<Lane>>,
    pacing: AppPacing<Packet>,
    tun_mtu: usize,
    /// The scheduler settings, for sites added later.
    algorithm: Algorithm,
    max_flows: usize,
    flow_idle_timeout: Duration,
    lane_stall: Duration,
    lane_queue_limit: u64,
    /// Bit `d` set: inner DSCP `d` is green.
    green_inner_dscp: u64,
    /// Packets sent per colour (by `Colour as usize`), and those of them that took
    /// the other colour's lanes for want of their own.
    colour_packets: [u64; 2],
    colour_fallbacks: [u64; 2],
    /// How long packets of each colour were expected to wait in their lane's queue.
    queue_delay: [DelayHistogram; 2],
    abe: AbeSettings,
    /// The egress of every uplink of known rate, by site and uplink name; kept while
    /// the engine runs (an uplink's lanes come and go).
    shapers: Vec<UplinkShaper>,
    /// The earliest instant a shaper has a packet to let go.
    shaper_due: Option<Instant>,
    /// Packets the shapers let go, reused between timeouts.
    shaped: Vec<Released>,
    /// Datagrams of a lane given up, on their way to the other lanes; reused.
    resend_batch: Vec<Bytes>,
    /// Green packets DSD refused at arrival and dropped as stale.
    green_drops: GreenDrops,
    dropped: [u64; DropReason::ALL.len()],
    transmits: VecDeque<Transmit>,
    tun_writes: VecDeque<Bytes>,
    /// Packets read from the TUN device for other threads' sites, with the thread.
    handoffs: VecDeque<(usize, BytesMut)>,
    lanes_to_close: VecDeque<(LaneId, LaneClose)>,
    lane_services: VecDeque<(LaneId, LaneService)>,
    /// When a flow table may next forget a flow (`None`: all are empty).
    expiry_at: Option<Instant>,
    /// No later than this, some lane that is up counts as silent.
    stall_check_at: Option<Instant>,
    /// The earliest deadline of a packet some resequencer holds.
    reseq_due: Option<Instant>,
    /// Bytes every site's resequencer holds, bounded together.
    held_budget: HeldBudget,
    /// When lanes were last sampled, and whether a new lane wants a sample at once.
    sampled_at: Instant,
    sample_due: bool,
    /// While a lane warms up (see [`DataPath::warm_up`]): when it wants its next
    /// sample, sooner than an idle lane's.
    warm_sample_at: Option<Instant>,
    /// Packets the pacer released, reused between timeouts.
    released: Vec<(SiteIdx, AppIdx, Packet)>,
    reply: [u8; MAX_REPLY_LEN],
}

impl DataPath {
    pub fn new(config: EngineConfig) -> DataPath {
        let sites: Vec<Site> = config
            .sites
            .iter()
            .map(|spec| {
                Site::new(
                    spec,
                    config.algorithm,
                    config.flow_idle_timeout,
                    config.max_flows,
                )
            })
            .collect();
        let pacing = AppPacing::new(
            sites.len(),
            config.role.paced_direction(),
            config.default_rate_kbps,
            config.flow_idle_timeout,
            config.max_flows,
        );
        let site_by_prefix = prefix_map(&sites);
        DataPath {
            role: config.role,
            shard: config.shard,
            warm_up_lanes: config.warm_up_lanes,
            sites,
            site_by_prefix,
            lanes: Vec::new(),
            pacing,
            tun_mtu: config.tun_mtu,
            algorithm: config.algorithm,
            max_flows: config.max_flows,
            flow_idle_timeout: config.flow_idle_timeout,
            lane_stall: config.lane_stall,
            lane_queue_limit: config.lane_queue_limit,
            green_inner_dscp: config
                .green_inner_dscp
                .iter()
                .filter(|&&d| d < 64)
                .fold(0, |mask, &d| mask | 1 << d),
            colour_packets: [0; 2],
            colour_fallbacks: [0; 2],
            queue_delay: [DelayHistogram::default(); 2],
            abe: config.abe,
            shapers: Vec::new(),
            shaper_due: None,
            shaped: Vec::new(),
            resend_batch: Vec::new(),
            green_drops: GreenDrops::default(),
            dropped: [0; DropReason::ALL.len()],
            transmits: VecDeque::new(),
            tun_writes: VecDeque::new(),
            handoffs: VecDeque::new(),
            lanes_to_close: VecDeque::new(),
            lane_services: VecDeque::new(),
            expiry_at: None,
            stall_check_at: None,
            reseq_due: None,
            held_budget: HeldBudget::default(),
            sampled_at: Instant::ZERO,
            sample_due: false,
            warm_sample_at: None,
            released: Vec::new(),
            reply: [0; MAX_REPLY_LEN],
        }
    }

    // ---- inputs -------------------------------------------------------------------

    /// Handles a packet read from the TUN device, which sits in `datagram` behind
    /// [`DATAGRAM_HEADER_LEN`] bytes of room for the header, so that the datagram is
    /// built in place: admitted, classified, paced, scheduled, queued on its lane.
    /// At an exit, a packet for another thread's site is handed over untouched.
    pub fn handle_tun_packet(&mut self, mut datagram: BytesMut, now: Instant) {
        let Some(packet) = datagram.get_mut(DATAGRAM_HEADER_LEN..) else {
            return self.count_drop(DropReason::Malformed);
        };
        let info = match PacketInfo::parse(packet) {
            Ok(info) => info,
            Err(_) => return self.count_drop(DropReason::Malformed),
        };
        if info.to_link_local() {
            return self.count_drop(DropReason::LinkLocal);
        }
        let site = match self.role {
            Role::Entry => SiteIdx(0),
            Role::Exit => match self.site_by_prefix.lookup(info.dst) {
                Some(site) if self.owns(site) => site,
                Some(site) => {
                    let thread = Shard::of(site, self.shard.count);
                    return self.handoffs.push_back((thread, datagram));
                }
                None => return self.count_drop(DropReason::NoSite),
            },
        };
        info.clamp_tcp_mss(packet, || self.max_mss(site, info.is_ipv6()));
        self.flows_touched(now);
        let direction = self.pacing.direction();
        let app = self.pacing.classify(site, &info, direction, now);
        match self
            .pacing
            .enqueue(site, app, Packet { info, datagram }, info.len, now)
        {
            Enqueued::Now(packet) => self.forward(site, app, packet, now),
            Enqueued::Queued => {}
            Enqueued::Dropped(_) => self.count_drop(DropReason::QueueFull),
        }
    }

    /// Handles a datagram received on `lane`: after the header it must hold exactly
    /// one IP packet and, at the exit, come from an address of the lane's own site.
    /// Its packet then goes to the TUN device.
    pub fn handle_lane_datagram(&mut self, lane: LaneId, datagram: Bytes, now: Instant) {
        let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) else {
            return self.count_drop(DropReason::NoLane);
        };
        let parsed = Datagram::parse(&datagram);
        match parsed {
            // A probe: QUIC acknowledges it; it carries nothing for braid.
            Some(Datagram::Probe) => {
                l.counters.probes_received += 1;
                return;
            }
            Some(Datagram::LossReport(report)) => return self.repair(lane, report, now),
            Some(Datagram::Packet { .. }) | None => {}
        }
        // Counted before the check: a datagram too short for a header was received too.
        l.counters.rx_packets += 1;
        l.counters.rx_bytes += datagram.len() as u64;
        let site_idx = l.site;
        let Some(Datagram::Packet { header, packet }) = parsed else {
            return self.count_drop(DropReason::Malformed);
        };
        if let Some(report) = l.received_lane_seq(header.lane_seq) {
            l.counters.loss_reported += u64::from(report.count);
            let datagram = Bytes::copy_from_slice(&report.encode());
            let srtt = view_mut(&mut self.sites, site_idx, lane).map_or(Duration::ZERO, |v| v.srtt);
            let due = l.hand(datagram.len() as u64, srtt, Duration::ZERO, now);
            self.stall_check_at = earliest(self.stall_check_at, due);
            self.transmits.push_back(Transmit { lane, datagram });
        }
        let Ok(info) = PacketInfo::parse(packet) else {
            return self.count_drop(DropReason::Malformed);
        };
        if self.role == Role::Exit && self.site_by_prefix.lookup(info.src) != Some(site_idx) {
            return self.count_drop(DropReason::Spoofed);
        }
        self.flows_touched(now);
        // Only measured: the other end paced this direction.
        let incoming = self.pacing.direction().reverse();
        let app = self.pacing.classify(site_idx, &info, incoming, now);
        self.pacing.count_carried(site_idx, app, incoming, info.len);
        // The packet behind the header: `advance` moves the start, where `slice`
        // would touch the buffer's reference count, shared with quinn's receive path.
        let mut packet = datagram;
        packet.advance(DATAGRAM_HEADER_LEN);
        // The sending gateway clamped the SYN to its own path MTU; this one's may be
        // lower (an exit on `[::]` assumes IPv6 uplinks), and a segment too large for
        // this gateway's lanes or TUN device would cost the connection a path MTU
        // discovery round and its first window. SYNs are rare: copying one is cheap.
        let max_mss = || self.max_mss(site_idx, info.is_ipv6());
        if info.needs_mss_clamp(&packet, max_mss) {
            let mut owned = BytesMut::from(&packet[..]);
            info.clamp_tcp_mss(&mut owned, max_mss);
            packet = owned.freeze();
        }
        let site = &mut self.sites[site_idx.0 as usize];
        site.reseq.receive(
            info.flow_key(),
            header,
            packet,
            now,
            &mut self.held_budget,
            &mut self.tun_writes,
        );
        self.reseq_due = earliest(self.reseq_due, site.reseq.poll_timeout());
    }

    /// Registers a lane whose handshake and hello are done and returns its id, or
    /// `None` for a site this gateway does not serve. A live lane of the same site,
    /// uplink and colour is replaced (a reconnect overtook its idle timeout): it is
    /// never scheduled again and comes out of [`DataPath::poll_lane_close`].
    pub fn handle_lane_up(&mut self, up: LaneUp<'_>, now: Instant) -> Option<LaneId> {
        let site = self.site_index(up.site).filter(|&s| self.owns(s))?;
        for (i, old) in self.lanes.iter_mut().enumerate() {
            if let Some(old) = old
                && !old.retired
                && old.site == site
                && old.colour == up.colour
                && old.uplink == up.uplink
            {
                old.retired = true;
                old.state_since = now;
                let id = LaneId(i as u32);
                self.lanes_to_close.push_back((id, LaneClose::Replaced));
                if let Some(v) = view_mut(&mut self.sites, site, id) {
                    v.up = false;
                }
            }
        }
        let lane = Lane {
            site,
            uplink: up.uplink.to_string(),
            colour: up.colour,
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
        };
        let id = match self.lanes.iter().position(Option::is_none) {
            Some(free) => {
                self.lanes[free] = Some(lane);
                LaneId(free as u32)
            }
            None => {
                self.lanes.push(Some(lane));
                LaneId(self.lanes.len() as u32 - 1)
            }
        };
        // Known, and so shaped, only if positive.
        let rate_kbps = up.rate_kbps.filter(|&r| r > 0);
        let shaper = self.attach_shaper(site, up.uplink, up.colour, id, rate_kbps, now);
        if let Some(Some(l)) = self.lanes.get_mut(id.0 as usize) {
            l.shaper = shaper;
        }
        // Lanes stay grouped by colour, each group in the order its lanes came up.
        let lanes = &mut self.sites[site.0 as usize].lanes;
        let at = lanes.partition_point(|v| v.colour <= up.colour);
        lanes.insert(
            at,
            LaneView {
                rank: up.rank,
                rate_kbps,
                ..LaneView::new(id, up.colour)
            },
        );
        self.sample_due = true;
        self.stall_check_at = earliest(
            self.stall_check_at,
            Some(now.saturating_add(self.lane_stall)),
        );
        Some(id)
    }

    /// Forgets a lane whose connection is closed and whose datagrams were all handed
    /// in; its id may be handed out again.
    pub fn handle_lane_closed(&mut self, lane: LaneId) {
        for s in &mut self.shapers {
            s.shaper.lane_closed(lane);
        }
        if let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize).map(Option::take) {
            self.sites[l.site.0 as usize].lanes.retain(|v| v.id != lane);
        }
    }

    /// True when the shell should sample every lane with
    /// [`DataPath::handle_lane_sample`] before handing in more.
    pub fn wants_lane_samples(&self, now: Instant) -> bool {
        self.sample_due || now.saturating_since(self.sampled_at) >= SAMPLE_INTERVAL
    }

    /// Takes how many bytes a lane's sender has taken off its queue so far: cheaper
    /// than a whole sample (no quinn lock), so the shell passes it in on every
    /// wake-up and the queue limit and the scheduler see the queue as it is, not as
    /// it was at the last sample.
    pub fn handle_lane_dequeued(&mut self, lane: LaneId, dequeued_bytes: u64) {
        let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) else {
            return;
        };
        if dequeued_bytes <= l.dequeued_bytes {
            return;
        }
        l.dequeued_bytes = dequeued_bytes;
        // The scheduler's view too: striping picks lanes by when packets arrive.
        let fill = l.fill(&self.shapers);
        if let Some(v) = view_mut(&mut self.sites, l.site, lane) {
            v.fill = fill;
        }
    }

    /// Takes a lane's sample: liveness, fill, SRTT, cwnd and counters.
    pub fn handle_lane_sample(&mut self, lane: LaneId, sample: LaneSample, now: Instant) {
        self.sampled_at = now;
        self.sample_due = false;
        if self.warm_sample_at.is_some_and(|at| at <= now) {
            self.warm_sample_at = None;
        }
        let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) else {
            return;
        };
        let heard = sample.rx_datagrams != l.rx_datagrams;
        if heard {
            l.rx_datagrams = sample.rx_datagrams;
            l.heard_at = now;
            l.answered();
            l.pings_when_heard = sample.sent_pings;
        }
        l.sent_pings = sample.sent_pings;
        l.forget_old(now);
        l.dequeued_bytes = sample.dequeued_bytes;
        l.quinn_queued_bytes = sample.quinn_queued_bytes;
        l.closed = sample.closed;
        let lost_more = sample.lost_packets > l.counters.lost_packets;
        l.counters.tx_packets = sample.sent_packets;
        l.counters.tx_bytes = sample.sent_bytes;
        l.counters.lost_packets = sample.lost_packets;
        // Packets the engine handed out that never left: counted once, here.
        self.dropped[DropReason::TooBig as usize] +=
            sample.refused_datagrams.saturating_sub(l.refused_datagrams);
        self.dropped[DropReason::NoLane as usize] += sample
            .abandoned_datagrams
            .saturating_sub(l.abandoned_datagrams);
        l.refused_datagrams = sample.refused_datagrams;
        l.abandoned_datagrams = sample.abandoned_datagrams;
        let left_before = l.left_quinn;
        l.left_quinn =
            sample.transmitted_datagrams + sample.refused_datagrams + sample.abandoned_datagrams;
        if l.answer_due.is_some() && l.left_quinn > left_before && l.left_quinn >= l.answer_for {
            let due = l.count_chance(sample.srtt, now);
            self.stall_check_at = earliest(self.stall_check_at, due);
        }
        if heard && l.left_quinn < l.handed_datagrams {
            // Packets handed before are still inside braid or quinn (its congestion
            // window is full): the next of them to leave, or quinn's probe, must be
            // answered in turn. Without this, a lane the scheduler stops handing
            // packets to because of that queue would wait for the idle bound.
            let due = l.await_answer(l.left_quinn + 1, now, sample.srtt);
            self.stall_check_at = earliest(self.stall_check_at, Some(due));
        }
        l.review_wait(sample.srtt, now);
        let silent_from = l.silent_from(self.lane_stall);
        let alive = now < silent_from;
        // Its own queue, not its uplink shaper's: the other colour's packets there
        // would keep it from ever returning while they flow.
        let mut recovered = false;
        if !alive {
            l.recovering = true;
        } else if l.recovering && l.own_queue() == 0 && l.left_quinn >= l.handed_datagrams {
            l.recovering = false;
            recovered = true;
        }
        let fill = l.fill(&self.shapers);
        let up = !l.retired && !l.closed && sample.max_datagram > 0 && alive && !l.recovering;
        if up {
            self.stall_check_at = earliest(self.stall_check_at, Some(silent_from));
        }
        let mut stalled = false;
        if let Some(v) = view_mut(&mut self.sites, l.site, lane) {
            if v.up != up {
                if v.up && !alive {
                    l.counters.stalls += 1;
                    stalled = true;
                } else if recovered {
                    let out_for = now.saturating_since(l.state_since);
                    self.lane_services
                        .push_back((lane, LaneService::Back { out_for }));
                }
                l.state_since = now;
            }
            v.up = up;
            v.srtt = sample.srtt;
            v.min_srtt = l.min_srtt.observe(sample.srtt, now);
            if lost_more || sample.cwnd < v.cwnd {
                l.opening = false;
            }
            v.first_slow_start = l.in_first_slow_start();
            l.codel.fit_lane(v.min_srtt);
            // A shaped lane carries no more than its uplink's rate, whatever QUIC's
            // window would allow: what it takes in a round trip at that rate.
            v.cwnd = match l.shaper {
                Some(s) => {
                    let rate = self.shapers[s].shaper.rate_bytes_per_sec();
                    let bdp = u128::from(rate) * sample.srtt.as_nanos() / 1_000_000_000;
                    sample
                        .cwnd
                        .min(u64::try_from(bdp).unwrap_or(u64::MAX).max(1))
                }
                None => sample.cwnd,
            };
            v.fill = fill;
            v.max_datagram = sample.max_datagram;
        }
        let site = &mut self.sites[l.site.0 as usize];
        site.reseq.set_base_deadline(base_deadline(&site.lanes));
        if stalled {
            self.give_up(lane, sample.srtt, now);
        } else {
            self.warm_up(lane, now);
        }
    }

    /// Opens the window of a blue lane still in its first slow start before traffic
    /// needs it: keeps what the lane sends in [`WARM_AHEAD`] at slow start's pace
    /// (twice its window per round trip) queued with padding, so that quinn's window
    /// grows on every acknowledgement, until the lane's delay cap or a loss cuts it
    /// (which ends the first slow start) or it reaches [`MAX_START_WINDOW`].
    ///
    /// Why: striping weighs a lane by its window, and quinn's first 14,720 bytes say
    /// nothing of what a path carries: a long lane looked slow and got nothing while
    /// the site's first flows overran the short ones' queues, and CUBIC then spent
    /// seconds regrowing from that first loss (the AFMT paper's delay variant: 4.0
    /// MiB in its first second and 74.0 % of the capacity left on average, against
    /// 5.8 and 76.9 with the warm-up; README, "Lanes that warm up as they come up").
    /// Blue only: green lanes carry sparse low-delay packets and are never striped,
    /// and their padding would only crowd the same uplinks.
    fn warm_up(&mut self, lane: LaneId, now: Instant) {
        let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) else {
            return;
        };
        if !self.warm_up_lanes || !l.in_first_slow_start() {
            return;
        }
        let Some(view) = view_mut(&mut self.sites, l.site, lane) else {
            return;
        };
        if !view.up || view.colour != Colour::Blue || view.cwnd >= MAX_START_WINDOW {
            return;
        }
        self.warm_sample_at = Some(now.saturating_add(SAMPLE_INTERVAL));
        let len = (view.max_datagram + DATAGRAM_HEADER_LEN).min(PROBE_PADDING.len());
        // Never more than a window (over a path shorter than WARM_AHEAD, slow start
        // sends no more than that per round trip), nor than half what braid queues
        // for a lane, so that the site's packets always find room behind it.
        let at_pace =
            u128::from(view.cwnd) * 2 * WARM_AHEAD.as_nanos() / view.srtt.as_nanos().max(1);
        let ahead = u64::try_from(at_pace)
            .unwrap_or(u64::MAX)
            .min(view.cwnd)
            .min(self.lane_queue_limit / 2)
            .max(2 * len as u64);
        while view.fill < ahead {
            let due = pad(l, view, len, now, &mut self.transmits);
            self.stall_check_at = earliest(self.stall_check_at, due);
        }
    }

    /// After lane `lane` was taken out of service because its path fell silent:
    /// sends what it may have lost over the other lanes, and says why for the log.
    fn give_up(&mut self, lane: LaneId, srtt: Duration, now: Instant) {
        let resent = self.resend_from(lane, srtt, now);
        if let Some(Some(l)) = self.lanes.get(lane.0 as usize) {
            let why = l.stalled(srtt, resent, now);
            self.lane_services.push_back((lane, why));
        }
    }

    /// Schedules with new settings from now on (a reload changed them). The new
    /// schedulers start without flow state: each flow is scheduled as new from its
    /// next packet.
    pub fn handle_scheduler_config(
        &mut self,
        algorithm: Algorithm,
        flow_idle_timeout: Duration,
        max_flows: usize,
    ) {
        (self.algorithm, self.max_flows) = (algorithm, max_flows);
        for site in &mut self.sites {
            site.schedulers = schedulers(algorithm, flow_idle_timeout, max_flows);
        }
    }

    /// Paces traffic no application matches at `default_rate_kbps` from now on
    /// (`pacing.default_rate_kbps` changed at a reload).
    pub fn handle_default_rate(&mut self, default_rate_kbps: Option<u64>, now: Instant) {
        self.pacing.set_default_rate(default_rate_kbps, now);
    }

    /// Serves exactly `specs` from now on (an exit's reload): new sites are added,
    /// the lanes of sites that are gone close and new ones are refused, and packets
    /// are routed by the prefixes `specs` give. Indexes stay: a site that comes back
    /// takes its old one.
    pub fn handle_sites(&mut self, specs: &[SiteSpec], now: Instant) {
        for site in &mut self.sites {
            site.served = false;
        }
        for spec in specs {
            match self.sites.iter_mut().find(|s| s.id == spec.id) {
                Some(site) => {
                    site.served = true;
                    site.prefixes.clone_from(&spec.prefixes);
                }
                None => {
                    self.sites.push(Site::new(
                        spec,
                        self.algorithm,
                        self.flow_idle_timeout,
                        self.max_flows,
                    ));
                    self.pacing.add_site();
                }
            }
        }
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            if let Some(l) = lane
                && !l.retired
                && !self.sites[l.site.0 as usize].served
            {
                l.retired = true;
                l.state_since = now;
                let id = LaneId(i as u32);
                self.lanes_to_close.push_back((id, LaneClose::SiteRemoved));
                if let Some(v) = view_mut(&mut self.sites, l.site, id) {
                    v.up = false;
                }
            }
        }
        self.site_by_prefix = prefix_map(&self.sites);
    }

    /// Replaces a site's application table (already validated). Queues of
    /// applications that keep their name keep their packets; packets of applications
    /// that are gone were accepted, so they go on unpaced.
    pub fn handle_pacing_table(&mut self, site: SiteIdx, table: PacingTable, now: Instant) {
        let mut unpaced = std::mem::take(&mut self.released);
        self.pacing.apply(site, table, now, |p| {
            unpaced.push((site, AppIdx::DEFAULT, p))
        });
        self.forward_released(&mut unpaced, now);
        self.released = unpaced;
    }

    /// Does what is due at `now`: releases paced packets, forgets idle flows, and
    /// stops scheduling lanes that fell silent. Cheap when nothing is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.shaper_due.is_some_and(|at| at <= now) {
            self.release_shaped(now);
        }
        if self.reseq_due.is_some_and(|at| at <= now) {
            let mut next = None;
            for site in &mut self.sites {
                site.reseq
                    .handle_timeout(now, &mut self.held_budget, &mut self.tun_writes);
                next = earliest(next, site.reseq.poll_timeout());
            }
            self.reseq_due = next;
        }
        if self.pacing.next_release().is_some_and(|at| at <= now) {
            let mut released = std::mem::take(&mut self.released);
            self.pacing
                .release(now, |site, app, p| released.push((site, app, p)));
            self.forward_released(&mut released, now);
            self.released = released;
        }
        if self.expiry_at.is_some_and(|at| at <= now) {
            self.pacing.expire(now);
            let mut next = self.pacing.next_expiry();
            for site in &mut self.sites {
                for scheduler in &mut site.schedulers {
                    scheduler.expire(now);
                    next = earliest(next, scheduler.next_expiry());
                }
                site.reseq.expire(now);
                next = earliest(next, site.reseq.next_expiry());
                site.resequenced_drops.expire(now, |_| ());
                next = earliest(next, site.resequenced_drops.next_expiry());
            }
            self.expiry_at = next;
        }
        if self.stall_check_at.is_some_and(|at| at <= now) {
            self.stall_check_at = None;
            // Allocates only when a lane falls silent.
            let mut stalled = Vec::new();
            for (i, l) in self.lanes.iter_mut().enumerate() {
                let Some(l) = l else { continue };
                let id = LaneId(i as u32);
                let Some(v) = view_mut(&mut self.sites, l.site, id).filter(|v| v.up) else {
                    continue;
                };
                let silent_from = l.silent_from(self.lane_stall);
                if silent_from <= now && self.sampled_at < silent_from {
                    // The answer may have come since the last sample: decided on the
                    // next one, taken at once.
                    self.sample_due = true;
                    self.stall_check_at = Some(now);
                } else if silent_from <= now {
                    v.up = false;
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
                    self.stall_check_at = earliest(self.stall_check_at, next);
                }
            }
            for (id, srtt) in stalled {
                self.give_up(id, srtt, now);
            }
        }
    }

    /// Counts a peer refused before it became a lane (failed handshake, wrong site).
    pub fn handle_peer_refused(&mut self, reason: DropReason) {
        self.count_drop(reason);
    }

    /// Counts a read from the TUN device that held no packet braid can take apart.
    pub fn handle_tun_malformed(&mut self) {
        self.count_drop(DropReason::Malformed);
    }

    /// Counts `packets` the TUN device refused in one write: because its queue was
    /// full, or for another reason.
    pub fn handle_tun_refused(&mut self, packets: usize, full: bool) {
        let reason = if full {
            DropReason::QueueFull
        } else {
            DropReason::TunRefused
        };
        self.dropped[reason as usize] += packets as u64;
    }

    /// Counts a datagram the shell could not hand to its lane (the lane is closing).
    pub fn handle_lane_gone(&mut self) {
        self.count_drop(DropReason::NoLane);
    }

    /// Counts `packets` the shell could not hand to the thread serving their site
    /// (that thread's inbox was full).
    pub fn handle_handoff_refused(&mut self, packets: usize) {
        self.dropped[DropReason::HandoffFull as usize] += packets as u64;
    }

    // ---- outputs ------------------------------------------------------------------

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next packet to write to the TUN device.
    pub fn poll_tun_write(&mut self) -> Option<Bytes> {
        self.tun_writes.pop_front()
    }

    /// The next packet for another thread's site, with that thread: it goes to that
    /// thread's [`DataPath::handle_tun_packet`] as it is.
    pub fn poll_handoff(&mut self) -> Option<(usize, BytesMut)> {
        self.handoffs.pop_front()
    }

    /// The next lane whose connection the shell should close, and why.
    pub fn poll_lane_close(&mut self) -> Option<(LaneId, LaneClose)> {
        self.lanes_to_close.pop_front()
    }

    /// The next lane taken out of service or put back, for the log.
    pub fn poll_lane_service(&mut self) -> Option<(LaneId, LaneService)> {
        self.lane_services.pop_front()
    }

    /// When [`DataPath::handle_timeout`] should run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let idle_sample = self
            .lanes
            .iter()
            .any(Option::is_some)
            .then(|| self.sampled_at.saturating_add(IDLE_SAMPLE_INTERVAL));
        [
            self.pacing.next_release(),
            self.shaper_due,
            self.expiry_at,
            self.stall_check_at,
            self.reseq_due,
            idle_sample,
            self.warm_sample_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    // ---- what the shell reports ---------------------------------------------------

    pub fn role(&self) -> Role {
        self.role
    }

    /// The index of the served site with this id.
    pub fn site_index(&self, id: &str) -> Option<SiteIdx> {
        self.sites
            .iter()
            .position(|s| s.id == id && s.served)
            .map(|i| SiteIdx(i as u32))
    }

    /// Whether this thread serves the site (see [`Shard`]).
    pub fn owns(&self, site: SiteIdx) -> bool {
        Shard::of(site, self.shard.count) == self.shard.index
    }

    /// Whether the site is served (a reload may have removed it).
    pub fn site_served(&self, site: SiteIdx) -> bool {
        self.sites[site.0 as usize].served
    }

    pub fn site_id(&self, site: SiteIdx) -> &str {
        &self.sites[site.0 as usize].id
    }

    /// Every site by index, served or removed by a reload.
    pub fn sites(&self) -> impl Iterator<Item = (SiteIdx, &str)> {
        self.sites
            .iter()
            .enumerate()
            .map(|(i, s)| (SiteIdx(i as u32), s.id.as_str()))
    }

    /// Packets dropped for `reason` so far.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped[reason as usize]
    }

    /// Packets of `colour` sent so far, and how many of them took the other
    /// colour's lanes because `colour` had none up.
    pub fn colour_packets(&self, colour: Colour) -> (u64, u64) {
        (
            self.colour_packets[colour as usize],
            self.colour_fallbacks[colour as usize],
        )
    }

    /// How long packets of a colour were expected to wait in their lane's queue
    /// inside braid when they were queued.
    pub fn queue_delay(&self, colour: Colour) -> &DelayHistogram {
        &self.queue_delay[colour as usize]
    }

    pub fn green_drops(&self) -> GreenDrops {
        self.green_drops
    }

    /// The shapers of the uplinks of known rate.
    pub fn shapers(&self) -> impl Iterator<Item = ShaperReport<'_>> {
        self.shapers.iter().map(|s| ShaperReport {
            site: s.site,
            uplink: &s.uplink,
            green_bias: s.shaper.green_bias(),
        })
    }

    /// Packets of a site written to the TUN device after a later-sent packet of their
    /// flow: the reordering the inner flows see.
    pub fn reordered(&self, site: SiteIdx) -> u64 {
        self.sites[site.0 as usize].reseq.counters().reordered
    }

    /// What a site's resequencer held, released and counted.
    pub fn reseq_counters(&self, site: SiteIdx) -> &ReseqCounters {
        self.sites[site.0 as usize].reseq.counters()
    }

    /// Flows the schedulers of all sites track.
    pub fn flows_active(&self) -> usize {
        self.sites
            .iter()
            .flat_map(|s| &s.schedulers)
            .map(|scheduler| scheduler.flows())
            .sum()
    }

    /// A lane: whose it is, how the scheduler sees it, and what it carried.
    pub fn lane(&self, lane: LaneId) -> Option<LaneReport<'_>> {
        let l = self.lanes.get(lane.0 as usize)?.as_ref()?;
        let view = self.sites[l.site.0 as usize]
            .lanes
            .iter()
            .find(|v| v.id == lane)?;
        Some(LaneReport {
            site: l.site,
            uplink: &l.uplink,
            view,
            counters: &l.counters,
            state_since: l.state_since,
            replaced: l.retired,
        })
    }

    /// The ids of every lane the engine knows (up, down or replaced).
    pub fn lane_ids(&self) -> impl Iterator<Item = LaneId> + '_ {
        self.lanes
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_some())
            .map(|(i, _)| LaneId(i as u32))
    }

    /// Whether the gateway can carry traffic, as the service manager is told: the
    /// exit as soon as it runs (sites come to it), the entry once a lane is up.
    pub fn ready(&self) -> bool {
        self.role == Role::Exit || self.lanes_up() > 0
    }

    /// Lanes that are up.
    pub fn lanes_up(&self) -> usize {
        self.sites
            .iter()
            .map(|s| s.lanes.iter().filter(|v| v.up).count())
            .sum()
    }

    /// Per-application pacing state (tables, queues, flows, targets).
    pub fn pacing(&self) -> &AppPacing<impl Sized> {
        &self.pacing
    }

    /// What an application of a site carried and lost.
    pub fn app_counters(&self, site: SiteIdx, app: AppIdx) -> AppCounters {
        self.pacing.counters(site, app)
    }

    // ---- helpers ------------------------------------------------------------------

    /// Picks the lane of a packet its pacer let go and queues it there, or answers
    /// with an ICMP error when it is too big for that lane.
    fn forward(&mut self, site_idx: SiteIdx, app: AppIdx, packet: Packet, now: Instant) {
        let Packet { info, mut datagram } = packet;
        let colour = self.colour_of(site_idx, app, &info);
        let site = &mut self.sites[site_idx.0 as usize];
        let flow = info.flow_key();
        // AFMT picks among the live lanes of the packet's colour; while that colour
        // has none, the other colour's carry it.
        let mut lanes = lanes_of(&site.lanes, colour);
        let mut borrowed = false;
        if !site.lanes[lanes.clone()].iter().any(|v| v.up) {
            let other = lanes_of(&site.lanes, colour.other());
            if site.lanes[other.clone()].iter().any(|v| v.up) {
                lanes = other;
                borrowed = true;
            }
        }
        let scheduler = &mut site.schedulers[colour as usize];
        let Some(mut pick) =
            scheduler.pick(flow, info.len, site.tx_seq, &site.lanes[lanes.clone()], now)
        else {
            return self.count_drop(DropReason::NoLane);
        };
        pick.lane += lanes.start;
        let group = lanes.clone();
        let longest = longest_one_way(&site.lanes[lanes]);
        let view = &mut site.lanes[pick.lane];
        if info.len > view.max_datagram {
            scheduler.unsent(flow);
            let mtu = u16::try_from(view.max_datagram).unwrap_or(u16::MAX);
            return self.too_big(&info, &datagram[DATAGRAM_HEADER_LEN..], mtu);
        }
        let len = datagram.len() as u64;
        // How long the packet will wait in braid: the bytes ahead of it at the lane's
        // rate; of that, CoDel drains only the wait beyond the longest lane's delay.
        let sojourn = view.drain_time(0, view.srtt);
        let excess = view.wait_beyond(sojourn, longest);
        let Some(Some(lane)) = self.lanes.get_mut(view.id.0 as usize) else {
            scheduler.unsent(flow);
            return self.count_drop(DropReason::NoLane);
        };
        // The lane sequence number comes as the packet is handed to the lane
        // ([`number_for_lane`]): a shaped uplink's packets may wait behind packets
        // sent again, which go straight to the lane.
        let header = DatagramHeader {
            seq: site.tx_seq,
            gap: pick.gap,
            copy: false,
            lane_seq: 0,
        };
        write_datagram_header(&mut datagram, header);
        // The lane's uplink shaper takes it, or the lane's own queue, each managed by
        // time. `Some` is a packet to hand to the lane now.
        let verdict = match lane.shaper {
            Some(s) => {
                let mtu = view.max_datagram as u64;
                let intended = longest.saturating_sub(view.min_srtt / 2);
                let shaper = &mut self.shapers[s].shaper;
                // Flows striped over the site's lanes hear of its drops as late as the
                // longest lane delivers.
                shaper.fit_paths(longest);
                let queued = shaper.enqueue(datagram, view.colour, mtu, intended, now);
                self.shaper_due = earliest(self.shaper_due, shaper.next_release());
                queued.map(|()| None)
            }
            None if lane.queued_bytes() + len > self.lane_queue_limit => Err(ShapeDrop::QueueFull),
            None => {
                // A flow the receiver resequences is striped over the colour's lanes,
                // each with its own CoDel: one drop per congestion episode of the
                // flow, not one per lane.
                let resequenced = pick.gap != 0;
                let (dropped, striped) = (&site.resequenced_drops, &site.striped_drops);
                let not_before = || {
                    if resequenced {
                        let flow_after = dropped.get(flow).map_or(Instant::ZERO, |e| e.value);
                        flow_after.max(striped.not_before())
                    } else {
                        Instant::ZERO
                    }
                };
                let mtu = view.max_datagram as u64;
                lane.codel.fit_striped_paths(longest);
                match lane.codel.verdict(excess, view.fill, mtu, now, not_before) {
                    Some(AqmDrop::TooLate) => Err(ShapeDrop::QueueFull),
                    Some(AqmDrop::Standing) => {
                        if resequenced {
                            let until = now + aqm::resequenced_drop_spacing(longest);
                            site.resequenced_drops.record(flow, until, now);
                            site.striped_drops.dropped(now, longest);
                        }
                        Err(ShapeDrop::QueueDelay)
                    }
                    None => Ok(Some(number_for_lane(lane, datagram))),
                }
            }
        };
        let datagram = match verdict {
            Ok(datagram) => datagram,
            Err(why) => {
                scheduler.unsent(flow);
                return self.count_shape_drop(why);
            }
        };
        site.tx_seq = site.tx_seq.wrapping_add(1);
        let queued_ahead = view.fill > 0;
        // Until the next sample, the packet counts towards the lane's fill, so that a
        // batch of packets does not all pick the same lane.
        view.fill += info.len as u64;
        view.last_sent = now;
        lane.counters.decisions[pick.kind as usize] += 1;
        // Counted once the packet is on its way, like every other count.
        self.colour_packets[colour as usize] += 1;
        self.colour_fallbacks[colour as usize] += u64::from(borrowed);
        let direction = self.pacing.direction();
        self.pacing
            .count_carried(site_idx, app, direction, info.len);
        if let Some(datagram) = datagram {
            self.queue_delay[colour as usize].observe(sojourn);
            let id = view.id;
            let due = hand_to_lane(lane, &datagram, view.srtt, sojourn, now);
            self.stall_check_at = earliest(self.stall_check_at, due);
            let len = datagram.len();
            self.transmits.push_back(Transmit { lane: id, datagram });
            if queued_ahead {
                self.open_lanes(site_idx, group, pick.lane, len, now);
            }
        }
    }

    /// A packet of `len` bytes was queued behind others on the site's lane at index
    /// `busy`: hands a probe as long, padded with zeros, to each other lane of `group`
    /// that is still in its first slow start, has nothing queued, and whose window
    /// carries less in a round trip than the busy lane's. The receiver drops it (see
    /// [`super::wire::is_probe`]).
    ///
    /// Why: a lane's window grows only while it is full (quinn calls a connection that
    /// ran out of data application-limited), and striping fills a lane only once it
    /// delivers a packet as early as the others do: by its window per round trip. So
    /// a long lane of unknown rate stayed at a few packets' window while one
    /// download ramped up over the shorter ones, and the download met its first loss
    /// where it overran them (one download over 10, 30 and 60 ms: the 60 ms lane's
    /// window at 15-90 kB for seconds, 40-67 % of the uplinks' sum; README, "What ends
    /// the inner flow's ramp"). Padding fills that lane's window while the site has
    /// more to send than the others take, so it opens at its uplink's pace, and no
    /// packet of the site waits behind it: the padding only goes where nothing is
    /// queued, and striping counts it as queued. It stops for good at the lane's first
    /// window reduction or loss, and meanwhile once its window matches the busy lane's:
    /// a 60 ms lane whose window never met congestion stayed eligible for padding for
    /// a whole download without that rule. That download then got 45-79 % of the sum,
    /// mean 68 against 48 for the build before in eleven rounds each.
    fn open_lanes(
        &mut self,
        site_idx: SiteIdx,
        group: std::ops::Range<usize>,
        busy: usize,
        len: usize,
        now: Instant,
    ) {
        let len = len.min(PROBE_PADDING.len());
        let site = &mut self.sites[site_idx.0 as usize];
        let busy = site.lanes[busy];
        for view in &mut site.lanes[group] {
            if !view.up
                || view.id == busy.id
                || view.fill > 0
                || view.max_datagram + DATAGRAM_HEADER_LEN < len
            {
                continue;
            }
            let Some(Some(lane)) = self.lanes.get_mut(view.id.0 as usize) else {
                continue;
            };
            if !lane.in_first_slow_start() {
                continue;
            }
            // cwnd / srtt against the busy lane's.
            let carries = u128::from(view.cwnd) * busy.srtt.as_nanos();
            if carries >= u128::from(busy.cwnd) * view.srtt.as_nanos() {
                continue;
            }
            let due = pad(lane, view, len, now, &mut self.transmits);
            self.stall_check_at = earliest(self.stall_check_at, due);
        }
    }

    /// Makes the lane of an uplink of known rate (`rate_kbps`, positive when known)
    /// use the uplink's shaper (created at its first lane), and sends what waits
    /// there for the lane's colour to this lane from now on. A lane whose uplink has no rate (any longer) is not shaped,
    /// but still receives what its shaper holds.
    fn attach_shaper(
        &mut self,
        site: SiteIdx,
        uplink: &str,
        colour: Colour,
        lane: LaneId,
        rate_kbps: Option<u64>,
        now: Instant,
    ) -> Option<usize> {
        let existing = self
            .shapers
            .iter()
            .position(|s| s.site == site && s.uplink == uplink);
        let index = match (existing, rate_kbps) {
            (Some(index), _) => index,
            (None, Some(rate)) => {
                self.shapers.push(UplinkShaper {
                    site,
                    uplink: uplink.to_string(),
                    shaper: Shaper::new(rate, self.abe, now),
                });
                self.shapers.len() - 1
            }
            (None, None) => return None,
        };
        let shaper = &mut self.shapers[index].shaper;
        shaper.set_lane(colour, lane);
        shaper.set_rate(rate_kbps?);
        Some(index)
    }

    /// Hands the lanes what their uplinks' shapers let go by `now`.
    fn release_shaped(&mut self, now: Instant) {
        let mut released = std::mem::take(&mut self.shaped);
        let mut next = None;
        for s in &mut self.shapers {
            s.shaper
                .release(now, &mut released, &mut self.green_drops.stale);
            next = earliest(next, s.shaper.next_release());
        }
        self.shaper_due = next;
        for r in released.drain(..) {
            let lane = r.lane.and_then(|id| {
                let l = self.lanes.get_mut(id.0 as usize)?.as_mut()?;
                (!l.retired && !l.closed).then_some((id, l))
            });
            let Some((id, lane)) = lane else {
                self.count_drop(DropReason::NoLane);
                continue;
            };
            let Some(view) = view_mut(&mut self.sites, lane.site, id) else {
                self.count_drop(DropReason::NoLane);
                continue;
            };
            self.queue_delay[r.colour as usize].observe(r.waited);
            let sojourn = view.drain_time(0, view.srtt);
            let datagram = number_for_lane(lane, r.datagram);
            let due = hand_to_lane(lane, &datagram, view.srtt, sojourn, now);
            self.stall_check_at = earliest(self.stall_check_at, due);
            self.transmits.push_back(Transmit { lane: id, datagram });
        }
        self.shaped = released;
    }

    /// Sends again, over the site's other lanes that are up, the datagrams lane
    /// `dead` was handed since a round trip before its peer was last heard: those its
    /// dead path lost, or holds until it returns. Returns how many were sent.
    fn resend_from(&mut self, dead: LaneId, srtt: Duration, now: Instant) -> u64 {
        let Some(Some(l)) = self.lanes.get_mut(dead.0 as usize) else {
            return 0;
        };
        let heard_at = l.heard_at;
        let mut batch = std::mem::take(&mut self.resend_batch);
        batch.extend(
            l.recent
                .drain(..)
                .filter(|(at, _)| heard_at.saturating_since(*at) <= srtt)
                .map(|(_, d)| d),
        );
        l.recent_bytes = 0;
        let resent = self.send_again(dead, &mut batch, now);
        self.resend_batch = batch;
        if let Some(Some(l)) = self.lanes.get_mut(dead.0 as usize) {
            l.counters.resent += resent;
        }
        resent
    }

    /// The peer reported that `report`'s run of the packets lane `lane` carried did
    /// not arrive: sends those it still keeps again over the site's other lanes.
    ///
    /// Why: a lane loses packets when its uplink's buffer overflows, as a competing
    /// flow's slow start makes it do, and the flows striped over the lanes each lost
    /// one and cut their windows, which CUBIC over a 130 ms round trip took seconds
    /// to regrow (the AFMT paper's delay variant: 5.7–7.5 MiB/s in the background
    /// flow's seconds, 70.0–83.8 % of the capacity left in ten rounds; 6.7–7.4 and
    /// 78.5–84.2 % with this; README, "Lost packets sent again"). Sent again over
    /// the lane where it arrives first, the packet mostly fills its gap before the
    /// receiver stops waiting for it, and the inner flows do not see the loss; the
    /// lane's own window still does.
    fn repair(&mut self, lane: LaneId, report: LossReport, now: Instant) {
        let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) else {
            return;
        };
        // Only packets of flows the receiver keeps in order: it holds their flows'
        // later packets until the copy arrives. Another flow's copy would arrive
        // behind its later packets, reordered.
        let lost = |(_, d): &(Instant, Bytes)| {
            split_datagram(d).is_some_and(|(h, _)| {
                h.gap != 0 && h.lane_seq.wrapping_sub(report.first) < u16::from(report.count)
            })
        };
        let mut batch = std::mem::take(&mut self.resend_batch);
        // The lost packets are among the latest handed: looked for from the newest.
        batch.extend(
            l.recent
                .iter()
                .rev()
                .filter(|entry| lost(entry))
                .take(usize::from(report.count))
                .map(|(_, d)| d.clone()),
        );
        batch.reverse();
        let repaired = self.send_again(lane, &mut batch, now);
        self.resend_batch = batch;
        if let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) {
            l.counters.loss_repaired += repaired;
        }
    }

    /// Sends `batch`, datagrams lane `from` carried, again over the other lanes of
    /// its site that are up: each where it arrives first, on a lane of the same
    /// colour if one is up, renumbered in that lane's sequence and marked as copies.
    /// They keep their sequence numbers for the site: the receiving gateway puts them
    /// back in their flows' order, or, where it gave up waiting for them, passes them
    /// on late (to TCP, a retransmission that came early). Drains `batch`; returns
    /// how many were sent.
    fn send_again(&mut self, from: LaneId, batch: &mut Vec<Bytes>, now: Instant) -> u64 {
        let Some(Some(l)) = self.lanes.get(from.0 as usize) else {
            batch.clear();
            return 0;
        };
        let (site, colour) = (l.site, l.colour);
        let mut sent = 0;
        for datagram in batch.drain(..) {
            let len = datagram.len();
            let lanes = &mut self.sites[site.0 as usize].lanes;
            let Some(view) =
                quickest_other_lane(lanes, from, colour, len - DATAGRAM_HEADER_LEN, now)
            else {
                continue;
            };
            let Some(Some(lane)) = self.lanes.get_mut(view.id.0 as usize) else {
                continue;
            };
            // Straight to the lane's queue, not through its uplink's shaper: once per
            // failure or loss, a round trip's packets at most.
            if lane.queued_bytes() + len as u64 > self.lane_queue_limit {
                continue;
            }
            let mut copy = BytesMut::from(&datagram[..]);
            mark_copy(&mut copy);
            let datagram = number_for_lane(lane, copy);
            let sojourn = view.drain_time(0, view.srtt);
            let due = hand_to_lane(lane, &datagram, view.srtt, sojourn, now);
            self.stall_check_at = earliest(self.stall_check_at, due);
            view.fill += len as u64;
            self.transmits.push_back(Transmit {
                lane: view.id,
                datagram,
            });
            sent += 1;
        }
        sent
    }

    fn count_shape_drop(&mut self, why: ShapeDrop) {
        match why {
            ShapeDrop::QueueFull => self.count_drop(DropReason::QueueFull),
            ShapeDrop::QueueDelay => self.count_drop(DropReason::QueueDelay),
            ShapeDrop::GreenAcceptance => self.green_drops.acceptance += 1,
            ShapeDrop::GreenStale => self.green_drops.stale += 1,
        }
    }

    /// A packet's colour (SPEC §5), first rule that applies: its application's
    /// colour; its inner DSCP is one of `abe.green_inner_dscp`; blue.
    fn colour_of(&self, site: SiteIdx, app: AppIdx, info: &PacketInfo) -> Colour {
        let app_colour = self.pacing.table(site).app(app).and_then(|a| a.colour);
        app_colour.unwrap_or(if self.green_inner_dscp >> (info.dscp & 63) & 1 == 1 {
            Colour::Green
        } else {
            Colour::Blue
        })
    }

    fn forward_released(&mut self, released: &mut Vec<(SiteIdx, AppIdx, Packet)>, now: Instant) {
        for (site, app, packet) in released.drain(..) {
            self.forward(site, app, packet, now);
        }
    }

    /// Drops a packet too big for its lane and, where the sender asked not to
    /// fragment, writes the ICMP error that tells it the lane's MTU.
    fn too_big(&mut self, info: &PacketInfo, packet: &[u8], mtu: u16) {
        self.count_drop(DropReason::TooBig);
        if !info.dont_fragment {
            return;
        }
        if let Some(n) = icmp::write_too_big(packet, info.src, info.dst, mtu, &mut self.reply) {
            self.tun_writes
                .push_back(Bytes::copy_from_slice(&self.reply[..n]));
        }
    }

    fn count_drop(&mut self, reason: DropReason) {
        self.dropped[reason as usize] += 1;
    }

    /// A flow table was (or may have been) written at `now`: its entry expires one
    /// flow timeout later, no earlier than any entry already there.
    fn flows_touched(&mut self, now: Instant) {
        if self.expiry_at.is_none() {
            self.expiry_at = Some(now.saturating_add(self.flow_idle_timeout));
        }
    }

    /// Largest TCP MSS whose segments fit both the TUN MTU and every live lane of the
    /// site, so that TCP never depends on ICMP errors to find the path MTU.
    fn max_mss(&self, site: SiteIdx, ipv6: bool) -> u16 {
        let path_mtu = self.sites[site.0 as usize]
            .lanes
            .iter()
            .filter(|l| l.up)
            .map(|l| l.max_datagram)
            .fold(self.tun_mtu, usize::min);
        let headers = if ipv6 { 60 } else { 40 };
        u16::try_from(path_mtu.saturating_sub(headers)).unwrap_or(u16::MAX)
    }
}

/// Where the lanes of `colour` are among a site's lanes, which are grouped by colour.
fn lanes_of(lanes: &[LaneView], colour: Colour) -> std::ops::Range<usize> {
    lanes.partition_point(|v| v.colour < colour)..lanes.partition_point(|v| v.colour <= colour)
}

/// The lowest of the values observed in the current and the previous
/// [`MIN_SRTT_WINDOW`], so that a lane whose path got longer forgets its old minimum.
#[derive(Debug, Default)]
struct WindowedMin {
    current: Option<Duration>,
    previous: Option<Duration>,
    window_start: Instant,
}

impl WindowedMin {
    /// Takes a value observed at `now` and returns the minimum.
    fn observe(&mut self, value: Duration, now: Instant) -> Duration {
        if now.saturating_since(self.window_start) >= MIN_SRTT_WINDOW {
            self.previous = self.current.take();
            self.window_start = now;
        }
        let current = self.current.map_or(value, |c| c.min(value));
        self.current = Some(current);
        self.previous.map_or(current, |p| p.min(current))
    }
}

/// The scheduler's view of a lane of `site`.
impl Site {
    fn new(
        spec: &SiteSpec,
        algorithm: Algorithm,
        flow_idle_timeout: Duration,
        max_flows: usize,
    ) -> Site {
        Site {
            id: spec.id.clone(),
            prefixes: spec.prefixes.clone(),
            served: true,
            lanes: Vec::new(),
            schedulers: schedulers(algorithm, flow_idle_timeout, max_flows),
            tx_seq: 0,
            reseq: Resequencer::new(flow_idle_timeout, max_flows, RESEQ_MIN_DEADLINE),
            resequenced_drops: FlowTable::new(flow_idle_timeout, max_flows),
            striped_drops: StripedDrops::default(),
        }
    }
}

/// A site's schedulers by colour. Green flows are not striped (`afmt` is
/// `afmt-flowlet` for them): the receiver's resequencing would add its deadline to
/// their delay, and a green packet DSD drops as stale after it was numbered would
/// hold its flow's next packets for a whole deadline. Moved between lanes only where
/// the flowlet rule allows, they stay in order without it.
fn schedulers(
    algorithm: Algorithm,
    flow_idle_timeout: Duration,
    max_flows: usize,
) -> [Box<dyn Scheduler>; 2] {
    let green = match algorithm {
        Algorithm::Afmt => Algorithm::AfmtFlowlet,
        other => other,
    };
    [green, algorithm].map(|a| a.build(flow_idle_timeout, max_flows))
}

/// Which served site each destination prefix belongs to.
fn prefix_map(sites: &[Site]) -> PrefixMap<SiteIdx> {
    let mut map = PrefixMap::default();
    for (i, site) in sites.iter().enumerate().filter(|(_, s)| s.served) {
        for p in &site.prefixes {
            map.insert(*p, SiteIdx(i as u32));
        }
    }
    map
}

fn view_mut(sites: &mut [Site], site: SiteIdx, lane: LaneId) -> Option<&mut LaneView> {
    sites[site.0 as usize]
        .lanes
        .iter_mut()
        .find(|v| v.id == lane)
}

/// Gives `datagram`, about to be handed to `lane`, the lane's next sequence number.
fn number_for_lane(lane: &mut Lane, mut datagram: BytesMut) -> Bytes {
    set_lane_seq(&mut datagram, lane.next_lane_seq());
    datagram.freeze()
}

/// Hands a datagram to a lane's sender, after `sojourn` in the lane's queue, and keeps
/// it for sending again (see [`RESEND_WINDOW`]); see [`Lane::hand`].
fn hand_to_lane(
    lane: &mut Lane,
    datagram: &Bytes,
    srtt: Duration,
    sojourn: Duration,
    now: Instant,
) -> Option<Instant> {
    lane.keep_recent(datagram, now);
    lane.hand(datagram.len() as u64, srtt, sojourn, now)
}

/// The lane other than `dead` that is up, can carry a packet of `len` bytes and
/// delivers it first, of `colour` if one can.
fn quickest_other_lane(
    lanes: &mut [LaneView],
    dead: LaneId,
    colour: Colour,
    len: usize,
    now: Instant,
) -> Option<&mut LaneView> {
    lanes
        .iter_mut()
        .filter(|v| v.up && v.id != dead && v.max_datagram >= len)
        .min_by_key(|v| (v.colour != colour, v.arrival(len, now)))
}

/// Hands `lane` a probe of `len` bytes of padding to open its window, counted as
/// queued; returns when the engine must look at the lane's wait for an answer.
fn pad(
    lane: &mut Lane,
    view: &mut LaneView,
    len: usize,
    now: Instant,
    transmits: &mut VecDeque<Transmit>,
) -> Option<Instant> {
    let due = lane.hand(len as u64, view.srtt, Duration::ZERO, now);
    lane.counters.opening_bytes += len as u64;
    view.fill += len as u64;
    transmits.push_back(Transmit {
        lane: view.id,
        datagram: Bytes::from_static(&PROBE_PADDING[..len]),
    });
    due
}

/// The earlier of two optional instants.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::core::packet::tests::{tcp_syn_v4, tcp_v4, udp_v6};
    use crate::core::shaper::AbeScheduler;
    use crate::core::wire::is_probe;
    use etherparse::PacketBuilder;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    const MS: u64 = 1_000_000;

    pub fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * MS)
    }

    pub fn config(role: Role, algorithm: Algorithm) -> EngineConfig {
        EngineConfig::builder()
            .role(role)
            .sites(vec![
                SiteSpec {
                    id: "a".into(),
                    prefixes: vec!["198.18.0.0/24".parse().expect("net")],
                },
                SiteSpec {
                    id: "b".into(),
                    prefixes: vec!["fd00::/64".parse().expect("net")],
                },
            ])
            .tun_mtu(1400)
            .algorithm(algorithm)
            .max_flows(100)
            .warm_up_lanes(false)
            .build()
    }

    fn engine(role: Role, algorithm: Algorithm) -> DataPath {
        DataPath::new(config(role, algorithm))
    }

    fn exit_engine() -> DataPath {
        engine(Role::Exit, Algorithm::RoundRobin)
    }

    fn sample(max_datagram: usize, rx_datagrams: u64) -> LaneSample {
        LaneSample {
            srtt: Duration::from_millis(20),
            cwnd: 100_000,
            max_datagram,
            rx_datagrams,
            ..LaneSample::default()
        }
    }

    /// A sample of a lane that has heard `rx_datagrams` and transmitted every packet
    /// it was handed.
    fn drained(e: &DataPath, lane: LaneId, rx_datagrams: u64) -> LaneSample {
        let l = e.lanes[lane.0 as usize].as_ref().expect("lane");
        LaneSample {
            transmitted_datagrams: l.handed_datagrams,
            dequeued_bytes: l.handed_bytes,
            ..sample(1400, rx_datagrams)
        }
    }

    /// Brings up a blue lane of `site` over `uplink` at `now`, sampled as live.
    fn lane_up(
        e: &mut DataPath,
        site: &str,
        uplink: &str,
        max_datagram: usize,
        now: Instant,
    ) -> LaneId {
        coloured_lane_up(e, site, uplink, Colour::Blue, max_datagram, now)
    }

    /// Brings up a lane of `site` over `uplink` in `colour` at `now`, sampled as live.
    fn coloured_lane_up(
        e: &mut DataPath,
        site: &str,
        uplink: &str,
        colour: Colour,
        max_datagram: usize,
        now: Instant,
    ) -> LaneId {
        let up = LaneUp {
            site,
            uplink,
            colour,
            rank: 0,
            rate_kbps: None,
        };
        let id = e.handle_lane_up(up, now).expect("known site");
        e.handle_lane_sample(id, sample(max_datagram, 1), now);
        id
    }

    /// A lane over a fresh uplink, at time zero.
    fn up(e: &mut DataPath, site: &str, max_datagram: usize) -> LaneId {
        let uplink = format!("up{}", e.lanes.len());
        lane_up(e, site, &uplink, max_datagram, Instant::ZERO)
    }

    /// Hands `packet` in as read from the TUN device.
    pub fn send(e: &mut DataPath, packet: &[u8], now: Instant) {
        let mut datagram = BytesMut::zeroed(DATAGRAM_HEADER_LEN);
        datagram.extend_from_slice(packet);
        e.handle_tun_packet(datagram, now);
    }

    fn transmits(e: &mut DataPath) -> Vec<Transmit> {
        std::iter::from_fn(|| e.poll_transmit()).collect()
    }

    /// Sends `packet` and returns the lane it went out on. Datagrams already waiting
    /// to go (sent again from a lane given up) are let go first.
    fn sent_on(e: &mut DataPath, packet: &[u8], now: Instant) -> Option<LaneId> {
        transmits(e);
        send(e, packet, now);
        let out = transmits(e);
        assert!(out.len() <= 1, "{out:?}");
        out.first().map(|t| t.lane)
    }

    /// A TCP SYN with DF set from the server side towards site a's host.
    fn to_site_a() -> Vec<u8> {
        let mut pkt = tcp_syn_v4(1460);
        // swap source and destination: 198.19.0.2 -> 198.18.0.2
        let (s, d) = (pkt[12..16].to_vec(), pkt[16..20].to_vec());
        pkt[12..16].copy_from_slice(&d);
        pkt[16..20].copy_from_slice(&s);
        let mut header = etherparse::Ipv4Header::from_slice(&pkt).expect("v4").0;
        header.dont_fragment = true;
        header.header_checksum = header.calc_header_checksum();
        header.write(&mut &mut pkt[..20]).expect("write");
        pkt
    }

    /// `packet` behind a datagram header carrying `seq` and no flow gap.
    fn datagram(seq: u32, packet: &[u8]) -> Bytes {
        striped_datagram(seq, 0, packet)
    }

    /// `packet` behind a datagram header carrying `seq` and `gap`.
    fn striped_datagram(seq: u32, gap: u16, packet: &[u8]) -> Bytes {
        let mut d = vec![0; DATAGRAM_HEADER_LEN];
        write_datagram_header(
            &mut d,
            DatagramHeader {
                seq,
                gap,
                copy: false,
                lane_seq: 0,
            },
        );
        d.extend_from_slice(packet);
        Bytes::from(d)
    }

    #[test]
    fn exit_routes_by_destination_to_the_sites_own_lanes() {
        let mut e = exit_engine();
        let a = up(&mut e, "a", 1400);
        let b = up(&mut e, "b", 1400);
        assert_eq!(sent_on(&mut e, &to_site_a(), Instant::ZERO), Some(a));
        let mut v6 = udp_v6(100);
        v6[24..40].copy_from_slice(&"fd00::9".parse::<Ipv6Addr>().expect("ip").octets());
        assert_eq!(sent_on(&mut e, &v6, Instant::ZERO), Some(b));
    }

    #[test]
    fn an_exit_thread_hands_packets_for_another_threads_site_over_and_refuses_its_lanes() {
        let thread = |index| {
            DataPath::new(EngineConfig {
                shard: Shard { index, count: 2 },
                ..config(Role::Exit, Algorithm::RoundRobin)
            })
        };
        // Site a (index 0) is thread 0's, site b (index 1) thread 1's.
        let (mut first, mut second) = (thread(0), thread(1));
        assert!(first.owns(SiteIdx(0)) && !first.owns(SiteIdx(1)));
        assert!(second.owns(SiteIdx(1)) && !second.owns(SiteIdx(0)));
        let a_on_second = LaneUp {
            site: "a",
            uplink: "up0",
            colour: Colour::Blue,
            rank: 0,
            rate_kbps: None,
        };
        assert_eq!(second.handle_lane_up(a_on_second, Instant::ZERO), None);
        let a = up(&mut first, "a", 1400);
        up(&mut second, "b", 1400);

        // Read by the second thread: handed to the first as it was read, not dropped.
        send(&mut second, &to_site_a(), Instant::ZERO);
        assert!(transmits(&mut second).is_empty());
        let (to, datagram) = second.poll_handoff().expect("handed over");
        assert_eq!(to, 0);
        assert_eq!(&datagram[DATAGRAM_HEADER_LEN..], &to_site_a()[..]);
        assert_eq!(second.poll_handoff(), None);
        assert!(DropReason::ALL.iter().all(|&r| second.dropped(r) == 0));
        first.handle_tun_packet(datagram, Instant::ZERO);
        assert_eq!(first.poll_handoff(), None);
        assert_eq!(transmits(&mut first).first().map(|t| t.lane), Some(a));

        second.handle_handoff_refused(3);
        assert_eq!(second.dropped(DropReason::HandoffFull), 3);
        // Sites a reload adds are spread the same way: c (index 2) is the first's.
        let mut specs = config(Role::Exit, Algorithm::RoundRobin).sites;
        specs.push(SiteSpec {
            id: "c".into(),
            prefixes: vec!["198.18.9.0/24".parse().expect("net")],
        });
        for thread in [&mut first, &mut second] {
            thread.handle_sites(&specs, at(1));
        }
        assert!(first.owns(SiteIdx(2)) && !second.owns(SiteIdx(2)));
    }

    #[test]
    fn a_reload_adds_and_removes_sites_and_a_removed_site_keeps_its_index() {
        let mut e = exit_engine();
        let a = up(&mut e, "a", 1400);
        let b = up(&mut e, "b", 1400);
        let [a_spec, b_spec] =
            [0, 1].map(|i| config(Role::Exit, Algorithm::RoundRobin).sites[i].clone());
        // Site a moves to another prefix and c arrives with a's old one; b is gone.
        let a_moved = SiteSpec {
            id: "a".into(),
            prefixes: vec!["198.18.9.0/24".parse().expect("net")],
        };
        let c = SiteSpec {
            id: "c".into(),
            prefixes: a_spec.prefixes.clone(),
        };
        e.handle_sites(&[a_moved, c], at(1));
        assert_eq!(
            e.poll_lane_close(),
            Some((b, LaneClose::SiteRemoved)),
            "b's lane closes"
        );
        assert_eq!(e.poll_lane_close(), None, "a's lane stays");
        assert!(e.lane(a).expect("a").view.up);
        assert_eq!(e.site_index("b"), None);
        assert_eq!(e.site_index("c"), Some(SiteIdx(2)));
        let up_b = LaneUp {
            site: "b",
            uplink: "up9",
            colour: Colour::Blue,
            rank: 0,
            rate_kbps: None,
        };
        assert_eq!(e.handle_lane_up(up_b.clone(), at(1)), None, "b is refused");
        // a's old prefix now belongs to c, which has no lane yet.
        assert_eq!(sent_on(&mut e, &to_site_a(), at(1)), None);
        assert_eq!(e.dropped(DropReason::NoLane), 1);
        let c_lane = lane_up(&mut e, "c", "up1", 1400, at(1));
        assert_eq!(sent_on(&mut e, &to_site_a(), at(1)), Some(c_lane));
        // The pacing and status views have the new site too.
        assert_eq!(e.pacing().apps(SiteIdx(2)), 1);
        assert!(!e.site_served(SiteIdx(1)) && e.site_served(SiteIdx(2)));
        // b comes back with its old index.
        e.handle_sites(&[a_spec, b_spec], at(2));
        assert_eq!(e.site_index("b"), Some(SiteIdx(1)));
        assert!(e.handle_lane_up(up_b, at(2)).is_some());
        assert_eq!(e.sites().count(), 3);
    }

    #[test]
    fn each_site_numbers_its_packets_in_sending_order() {
        let mut e = exit_engine();
        up(&mut e, "a", 1400);
        for _ in 0..3 {
            send(&mut e, &to_site_a(), Instant::ZERO);
        }
        let seqs: Vec<u32> = transmits(&mut e)
            .iter()
            .map(|t| split_datagram(&t.datagram).expect("header").0.seq)
            .collect();
        assert_eq!(seqs, [0, 1, 2]);
    }

    #[test]
    fn exit_drops_unknown_destinations_and_sites_without_lanes() {
        let mut e = exit_engine();
        assert_eq!(sent_on(&mut e, &to_site_a(), Instant::ZERO), None);
        assert_eq!(e.dropped(DropReason::NoLane), 1);
        // Destined to 198.19.0.2: no site.
        assert_eq!(sent_on(&mut e, &tcp_syn_v4(1460), Instant::ZERO), None);
        assert_eq!(e.dropped(DropReason::NoSite), 1);
        send(&mut e, b"garbage", Instant::ZERO);
        assert_eq!(e.dropped(DropReason::Malformed), 1);
    }

    #[test]
    fn packets_the_tun_device_refuses_are_counted_by_why() {
        let mut e = exit_engine();
        e.handle_tun_refused(9, true);
        e.handle_tun_refused(3, false);
        assert_eq!(e.dropped(DropReason::QueueFull), 9);
        assert_eq!(e.dropped(DropReason::TunRefused), 3);
    }

    #[test]
    fn exit_refuses_a_sites_packets_with_another_sites_source() {
        let mut e = exit_engine();
        let a = up(&mut e, "a", 1400);
        let b = up(&mut e, "b", 1400);
        let from_a = tcp_syn_v4(1300); // source 198.18.0.2, site a
        e.handle_lane_datagram(a, datagram(0, &from_a), Instant::ZERO);
        assert_eq!(e.poll_tun_write().as_deref(), Some(&from_a[..]));
        e.handle_lane_datagram(b, datagram(1, &from_a), Instant::ZERO);
        assert_eq!(e.dropped(DropReason::Spoofed), 1);
        e.handle_lane_datagram(a, datagram(2, b"garbage"), Instant::ZERO);
        e.handle_lane_datagram(a, Bytes::from_static(b"abc"), Instant::ZERO);
        assert_eq!(e.dropped(DropReason::Malformed), 2);
        assert_eq!(e.poll_tun_write(), None);
        let counters = e.lane(a).expect("lane a").counters;
        assert_eq!(
            (counters.rx_packets, counters.rx_bytes),
            (3, 8 + 48 + 8 + 7 + 3)
        );
    }

    #[test]
    fn a_million_flows_each_with_a_gap_keep_the_receiving_side_within_its_bounds() {
        // Site a's hosts (198.18.0.0/24) send, all at once, a million flows whose every
        // packet claims an earlier one of its flow is still on its way: each would be
        // held for a deadline, which the shared budget cuts short.
        let mut e = exit_engine();
        let lane = up(&mut e, "a", 1400);
        let mut packet = tcp_v4("198.18.0.2", 1, "203.0.113.1", 443);
        let mut max_held = 0;
        for i in 0..1_000_000u32 {
            // A flow of its own: source host and port.
            packet[15] = (i % 250 + 2) as u8;
            packet[20..22].copy_from_slice(&((i / 250) as u16 + 1).to_be_bytes());
            e.handle_lane_datagram(lane, striped_datagram(i * 2 + 1, 1, &packet), at(1));
            max_held = max_held.max(e.held_budget.bytes());
            while e.poll_tun_write().is_some() {}
        }
        assert!(max_held <= crate::core::reseq::MAX_HELD_BYTES, "{max_held}");
        assert!(
            max_held > crate::core::reseq::MAX_HELD_BYTES * 9 / 10,
            "{max_held}"
        );
        let site = &e.sites[0];
        assert!(site.reseq.flows() <= 100, "{} flows", site.reseq.flows());
        // Nothing was dropped: held packets went early, or go at their deadline.
        let c = *e.reseq_counters(SiteIdx(0));
        assert_eq!((c.held, c.dropped), (1_000_000, 0));
        e.handle_timeout(at(2_000));
        assert_eq!(e.held_budget.bytes(), 0);
        assert_eq!(e.reseq_counters(SiteIdx(0)).released_at_deadline, 1_000_000);
    }

    #[test]
    fn a_packet_overtaken_by_a_later_one_of_its_flow_is_counted_as_reordered() {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let lane = up(&mut e, "a", 1400);
        let site = SiteIdx(0);
        let flow_x = tcp_syn_v4(1460);
        let flow_y = udp_v6(10);
        let mut got = |seq, pkt: &[u8]| {
            let before = e.reordered(site);
            e.handle_lane_datagram(lane, datagram(seq, pkt), Instant::ZERO);
            assert!(e.poll_tun_write().is_some(), "delivered either way");
            e.reordered(site) > before
        };
        assert!(!got(10, &flow_x));
        assert!(!got(12, &flow_x));
        assert!(!got(11, &flow_y), "another flow's order is its own");
        assert!(got(11, &flow_x), "11 arrived after 12 of the same flow");
        assert!(!got(13, &flow_x));
        // Sequence numbers wrap around.
        let mut flow_z = udp_v6(10);
        flow_z[40..42].copy_from_slice(&7777u16.to_be_bytes());
        assert!(!got(u32::MAX, &flow_z));
        assert!(!got(0, &flow_z));
        assert!(got(u32::MAX - 1, &flow_z));
    }

    #[test]
    fn too_big_packets_get_an_icmp_reply_with_the_lane_mtu() {
        let mut e = exit_engine();
        up(&mut e, "a", 40); // the SYN is 48 bytes
        let pkt = to_site_a();
        assert_eq!(sent_on(&mut e, &pkt, Instant::ZERO), None);
        assert_eq!(e.dropped(DropReason::TooBig), 1);
        let reply = e.poll_tun_write().expect("an ICMP error");
        let reply = PacketInfo::parse(&reply).expect("valid reply");
        assert_eq!(reply.dst, PacketInfo::parse(&pkt).expect("valid").src);
        assert_eq!(reply.src, IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)));
    }

    #[test]
    fn syn_mss_is_clamped_to_the_tun_mtu_or_the_smallest_lane() {
        let mss_sent = |e: &mut DataPath| {
            send(e, &to_site_a(), Instant::ZERO);
            let t = transmits(e).pop().expect("sent");
            let pkt = &t.datagram[DATAGRAM_HEADER_LEN..];
            u16::from_be_bytes([pkt[42], pkt[43]])
        };
        let mut e = exit_engine(); // TUN MTU 1400
        let big = up(&mut e, "a", 1500);
        assert_eq!(mss_sent(&mut e), 1360);
        e.handle_lane_closed(big);
        up(&mut e, "a", 1300);
        assert_eq!(mss_sent(&mut e), 1260);
    }

    #[test]
    fn a_syn_from_a_lane_is_clamped_to_this_gateways_path_mtu_too() {
        // The entry clamped to its own, larger MTU; this exit's TUN MTU is 1400.
        let mut e = exit_engine();
        let a = up(&mut e, "a", 1500);
        let mss_written = |e: &mut DataPath, seq, syn: &[u8]| {
            e.handle_lane_datagram(a, datagram(seq, syn), Instant::ZERO);
            let pkt = e.poll_tun_write().expect("written");
            let info = PacketInfo::parse(&pkt).expect("still a valid packet");
            let tcp = etherparse::TcpHeaderSlice::from_slice(&pkt[20..]).expect("tcp");
            let sum = tcp
                .to_header()
                .calc_checksum_ipv4_raw([198, 18, 0, 2], [198, 19, 0, 2], &[]);
            assert_eq!(tcp.checksum(), sum.expect("checksum"), "checksum fixed");
            assert_eq!(info.len, syn.len());
            u16::from_be_bytes([pkt[42], pkt[43]])
        };
        assert_eq!(mss_written(&mut e, 0, &tcp_syn_v4(1460)), 1360);
        assert_eq!(
            mss_written(&mut e, 1, &tcp_syn_v4(1200)),
            1200,
            "small enough"
        );
    }

    #[test]
    fn lane_ids_are_reused_and_removed_lanes_are_not_picked() {
        let mut e = exit_engine();
        let a1 = up(&mut e, "a", 1400);
        let a2 = up(&mut e, "a", 1400);
        e.handle_lane_closed(a1);
        assert_eq!(sent_on(&mut e, &to_site_a(), Instant::ZERO), Some(a2));
        let again = up(&mut e, "a", 1400);
        assert_eq!(again, a1);
        e.handle_lane_closed(a2);
        e.handle_lane_closed(again);
        assert_eq!(sent_on(&mut e, &to_site_a(), Instant::ZERO), None);
        assert_eq!(e.dropped(DropReason::NoLane), 1);
    }

    #[test]
    fn afmt_spreads_new_flows_within_one_batch_by_counting_what_it_queued() {
        // Between two samples, the engine adds each packet to its lane's fill;
        // otherwise every new flow of a batch would pick the same lane.
        let mut e = engine(Role::Exit, Algorithm::Afmt);
        let a = up(&mut e, "a", 1400);
        let b = up(&mut e, "a", 1400);
        let mut lanes = Vec::new();
        for port in 0..4u16 {
            let mut pkt = to_site_a();
            pkt[20..22].copy_from_slice(&(1000 + port).to_be_bytes()); // another flow
            lanes.push(sent_on(&mut e, &pkt, Instant::ZERO).expect("sent"));
        }
        assert_eq!(lanes, [a, b, a, b]);
        assert_eq!(e.flows_active(), 4);
        let decided =
            |l| e.lane(l).expect("lane").counters.decisions[DecisionKind::NewFlow as usize];
        assert_eq!((decided(a), decided(b)), (2, 2));
    }

    #[test]
    fn a_lane_that_falls_silent_is_not_scheduled_from_exactly_the_stall_time() {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
        // b hears from its peer until 100 ms, a keeps hearing.
        for t in [50, 100] {
            e.handle_lane_sample(a, sample(1400, t), at(t));
            e.handle_lane_sample(b, sample(1400, t), at(t));
        }
        e.handle_lane_sample(a, sample(1400, 300), at(300));
        e.handle_lane_sample(b, sample(1400, 100), at(300));
        e.handle_timeout(at(450));
        assert_eq!(e.stall_check_at, Some(at(100) + LANE_STALL));
        e.handle_timeout(at(499));
        let lanes: Vec<_> = (0..2)
            .filter_map(|_| sent_on(&mut e, &pkt, at(499)))
            .collect();
        assert!(lanes.contains(&b), "one nanosecond early b is still up");
        // The deadline passes with the last sample 200 ms old: the engine asks for a
        // fresh one before it gives b up.
        e.handle_timeout(at(500));
        assert_eq!(e.lanes_up(), 2);
        assert!(e.wants_lane_samples(at(500)));
        assert!(e.poll_timeout().is_some_and(|due| due <= at(500)));
        e.handle_lane_sample(a, sample(1400, 500), at(500));
        e.handle_lane_sample(b, sample(1400, 100), at(500));
        e.handle_timeout(at(500));
        for _ in 0..4 {
            assert_eq!(sent_on(&mut e, &pkt, at(500)), Some(a));
        }
        assert_eq!(e.lanes_up(), 1);
        assert_eq!(
            e.lane(b).map(|l| l.state_since),
            Some(at(500)),
            "down since"
        );
        // Its peer is heard again, and what was handed to b has left: b is back.
        e.handle_lane_sample(b, drained(&e, b, 101), at(520));
        assert_eq!(e.lane(b).map(|l| l.state_since), Some(at(520)), "up since");
        let lanes: Vec<_> = (0..2)
            .filter_map(|_| sent_on(&mut e, &pkt, at(520)))
            .collect();
        assert!(lanes.contains(&b));
    }

    /// Round-robin over lanes a and b over `span` (ms), a packet every 10 ms each,
    /// sampled before every send; b's peer answers at the instants `b_heard` says,
    /// quinn transmits b's packets once `b_sends` says so, and takes them out of
    /// braid's queue at once if `b_drains`. Returns the last instant b was picked.
    fn run_two_lanes(
        e: &mut DataPath,
        (a, b): (LaneId, LaneId),
        span: std::ops::RangeInclusive<u64>,
        b_heard: impl Fn(u64) -> bool,
        b_sends: impl Fn(u64) -> bool,
        b_drains: bool,
    ) -> Option<u64> {
        let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
        let (mut b_rx, mut b_last) = (*span.start(), None);
        let handed = |lane| drained(e, lane, 0).transmitted_datagrams;
        let (mut a_handed, mut b_handed) = (handed(a), handed(b));
        let mut b_transmitted = b_handed;
        for t in span.step_by(10) {
            b_rx += u64::from(b_heard(t));
            if b_sends(t) {
                b_transmitted = b_handed;
            }
            let a_sample = LaneSample {
                transmitted_datagrams: a_handed,
                ..sample(1400, t)
            };
            // What b was handed left braid's queue for quinn's, or stays in braid's.
            let b_dequeued = if b_drains {
                drained(e, b, 0).dequeued_bytes
            } else {
                0
            };
            let b_sample = LaneSample {
                transmitted_datagrams: b_transmitted,
                dequeued_bytes: b_dequeued,
                ..sample(1400, b_rx)
            };
            e.handle_lane_sample(a, a_sample, at(t));
            e.handle_lane_sample(b, b_sample, at(t));
            e.handle_timeout(at(t));
            for _ in 0..2 {
                match sent_on(e, &pkt, at(t)) {
                    Some(lane) if lane == b => {
                        b_last = Some(t);
                        b_handed += 1;
                    }
                    Some(_) => a_handed += 1,
                    None => {}
                }
            }
        }
        b_last
    }

    #[test]
    fn a_busy_lane_whose_packets_go_unanswered_is_given_up_within_one_timeout() {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        // b's path dies after 100 ms; its packet of 100 ms is the first unanswered,
        // seen on the wire at the sample of 110 ms, its successors every 10 ms. Its
        // samples report its packets still queued (it holds more than it sent): it
        // cannot probe, and one answer timeout of silence suffices, before four
        // failed exchanges would.
        let failed_after = exchange_timeout(Duration::from_millis(20)).as_millis() as u64;
        assert_eq!(
            failed_after, 45,
            "a 20 ms round trip, the peer's ACK delay, slack"
        );
        let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
        let decisive = 100 + 10 * EXCHANGES_TO_STALL_WHEN_HELD + failed_after;
        let b_last = run_two_lanes(&mut e, (a, b), 10..=400, |t| t <= 100, |_| true, false);
        assert_eq!(
            b_last,
            Some((100 + timeout) / 10 * 10),
            "b is given up at the first sample {timeout} ms after its wait began (100 ms), \
             before four failed exchanges ({decisive} ms), long before the idle bound of \
             {LANE_STALL:?}"
        );
        assert_eq!(e.lanes_up(), 1);
        assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(1));
        let stalled = e.poll_lane_service();
        assert_eq!(
            stalled,
            Some((
                b,
                LaneService::Stalled {
                    silent_for: Duration::from_millis(70),
                    unanswered: 7,
                    pings: 0,
                    // None: its queue is never empty, and what leaves it counts.
                    probes: 0,
                    // Every packet b was handed (its samples report none dequeued).
                    queued: 2368,
                    resent: 9,
                    srtt: Duration::from_millis(20),
                }
            )),
            "why, for the log: heard last at 100 ms, given up at the sample of 170 ms, \
             its packets of 100 to 160 ms unanswered"
        );
        assert_eq!(e.poll_lane_service(), None, "once");
        // Its peer is heard again, but packets handed to b before the outage are still
        // inside quinn: they would arrive late, so b waits until they have left.
        let stuck = LaneSample {
            quinn_queued_bytes: 200,
            ..drained(&e, b, 1000)
        };
        e.handle_lane_sample(b, stuck, at(410));
        assert_eq!(e.lanes_up(), 1);
        assert_eq!(e.poll_lane_service(), None, "not back yet");
        e.handle_lane_sample(b, drained(&e, b, 1001), at(420));
        assert_eq!(e.lanes_up(), 2);
        assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(1), "one stall");
        assert_eq!(
            e.poll_lane_service(),
            Some((
                b,
                LaneService::Back {
                    out_for: Duration::from_millis(250)
                }
            ))
        );
    }

    #[test]
    fn a_lane_answered_within_its_timeout_stays_up_however_sparse_the_answers() {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        // An answer every 60 ms: a packet waits at most 60 ms for one (timeout: 65).
        // quinn takes what b is handed, so that braid's queue for it stays empty.
        let b_last = run_two_lanes(&mut e, (a, b), 10..=2000, |t| t % 60 == 0, |_| true, true);
        assert_eq!(b_last, Some(2000));
        assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(0));
    }

    #[test]
    fn packets_to_link_local_and_link_scope_multicast_destinations_are_dropped_and_counted() {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        lane_up(&mut e, "a", "dsl", 1400, at(0));
        for dst in ["169.254.1.1", "224.0.0.251", "224.0.0.22"] {
            assert_eq!(
                sent_on(&mut e, &tcp_v4("198.18.0.2", 1, dst, 80), at(1)),
                None
            );
        }
        assert_eq!(e.dropped(DropReason::LinkLocal), 3);
        // A routable destination beside them is carried.
        assert!(sent_on(&mut e, &tcp_v4("198.18.0.2", 1, "203.0.113.1", 80), at(1)).is_some());
    }

    #[test]
    fn one_unanswered_packet_is_a_loss_until_two_timeouts_pass_in_silence() {
        let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
        let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
        // One packet, sent at 100 ms: it or its acknowledgement is lost. The peer's
        // next keep-alive, at 200 ms, is heard (within two timeouts): a loss.
        // With `probes_leave` false, braid's probes stay in the lane's queue (quinn
        // holds them): a lane holding only probes is not full of the flows' packets,
        // and still gets two timeouts.
        let lone_packet = |heard_again: u64, probes_leave: bool| {
            let mut e = engine(Role::Entry, Algorithm::RoundRobin);
            let b = lane_up(&mut e, "a", "lte", 1400, at(0));
            e.handle_lane_sample(b, sample(1400, 100), at(100));
            assert_eq!(sent_on(&mut e, &pkt, at(100)), Some(b));
            let packet_left = drained(&e, b, 100);
            let mut up = Vec::new();
            for t in (110..=400).step_by(10) {
                let rx = if t >= heard_again { t } else { 100 };
                let sent = if probes_leave {
                    drained(&e, b, rx)
                } else {
                    LaneSample {
                        rx_datagrams: rx,
                        ..packet_left
                    }
                };
                e.handle_lane_sample(b, sent, at(t));
                e.handle_timeout(at(t));
                up.push(e.lanes_up());
            }
            up
        };
        assert!(
            lone_packet(200, true).iter().all(|&n| n == 1),
            "{:?}",
            lone_packet(200, true)
        );
        // Silent past two timeouts: given up at the first sample after 100 + 2 × 65 ms.
        for probes_leave in [true, false] {
            let up = lone_packet(1000, probes_leave);
            let given_up_at = 110 + 10 * up.iter().position(|&n| n == 0).expect("given up") as u64;
            assert_eq!(
                given_up_at,
                (100 + 2 * timeout).div_ceil(10) * 10,
                "probes leave: {probes_leave}, {up:?}"
            );
        }
    }

    #[test]
    fn a_lane_whose_window_is_full_when_its_path_dies_is_given_up_after_one_timeout() {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
        // b's path dies at 100 ms with its congestion window full of packets it lost:
        // quinn sends nothing more but one probe, at 160 ms.
        let (mut b_last, mut b_on_the_wire) = (None, 0);
        for t in (10..=400).step_by(10) {
            let b_handed = drained(&e, b, 0).transmitted_datagrams;
            if t <= 100 {
                b_on_the_wire = b_handed;
            } else if t == 160 {
                b_on_the_wire += 1;
            }
            let b_sample = LaneSample {
                transmitted_datagrams: b_on_the_wire,
                ..sample(1400, t.min(100))
            };
            e.handle_lane_sample(a, drained(&e, a, t), at(t));
            e.handle_lane_sample(b, b_sample, at(t));
            e.handle_timeout(at(t));
            for _ in 0..2 {
                if sent_on(&mut e, &pkt, at(t)) == Some(b) {
                    b_last = Some(t);
                }
            }
        }
        let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
        assert_eq!(
            b_last,
            Some(160),
            "its first unanswered packet left just after 100 ms (behind the packet queued \
             before it); quinn holds its packets, so at the first timeout ({timeout} ms) one \
             unanswered packet, the probe, is enough: given up at the sample of 170 ms, \
             long before the idle bound"
        );
        assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(1));
    }

    #[test]
    fn a_lane_whose_queue_is_stuck_when_its_path_dies_waits_for_quinns_probe_not_the_idle_bound() {
        let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
        let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
        // Ten packets handed by 100 ms, five of them on the wire when the peer is last
        // heard; nothing is handed after that (the scheduler avoids the full lane).
        // quinn sends a probe (a PING) at `probe_at`, or none.
        let given_up_at = |probe_at: Option<u64>| {
            let mut e = engine(Role::Entry, Algorithm::RoundRobin);
            let b = lane_up(&mut e, "a", "lte", 1400, at(0));
            for _ in 0..10 {
                assert_eq!(sent_on(&mut e, &pkt, at(90)), Some(b));
            }
            for t in (100..=600).step_by(10) {
                let stuck = LaneSample {
                    transmitted_datagrams: 5,
                    sent_pings: u64::from(probe_at.is_some_and(|p| t >= p)),
                    ..sample(1400, t.min(100))
                };
                e.handle_lane_sample(b, stuck, at(t));
                e.handle_timeout(at(t));
                if e.lanes_up() == 0 {
                    return Some(t);
                }
            }
            None
        };
        assert_eq!(
            given_up_at(Some(150)),
            Some((100 + timeout).div_ceil(10) * 10),
            "the wait for the stuck packets begins when the peer is last heard, and the \
             probe goes unanswered for a timeout (quinn holds the packets)"
        );
        assert_eq!(given_up_at(None), Some(100 + LANE_STALL.as_millis() as u64));
    }

    #[test]
    fn a_lane_given_up_has_what_its_path_may_have_lost_sent_again_over_the_others() {
        let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
        // Lanes a and (when `with_a`) b, a packet each every 10 ms; b's path dies at
        // 100 ms. Returns what b was handed and what went out at b's stall.
        let run = |with_a: bool| {
            let mut e = engine(Role::Entry, Algorithm::RoundRobin);
            let a = with_a.then(|| lane_up(&mut e, "a", "dsl", 1400, at(0)));
            let b = lane_up(&mut e, "a", "lte", 1400, at(0));
            let (mut on_b, mut at_stall) = (Vec::new(), None);
            for t in (10..=300).step_by(10) {
                if let Some(a) = a {
                    e.handle_lane_sample(a, drained(&e, a, t), at(t));
                }
                e.handle_lane_sample(b, drained(&e, b, t.min(100)), at(t));
                e.handle_timeout(at(t));
                if e.lane(b).is_some_and(|l| l.counters.stalls == 1) && at_stall.is_none() {
                    at_stall = Some((t, transmits(&mut e)));
                }
                for _ in 0..2 {
                    send(&mut e, &pkt, at(t));
                    on_b.extend(
                        transmits(&mut e)
                            .into_iter()
                            .filter(|x| x.lane == b && x.datagram[..] != PROBE)
                            .map(|x| (t, x.datagram)),
                    );
                }
            }
            let resent = e.lane(b).map(|l| l.counters.resent);
            (a, on_b, at_stall, resent)
        };
        let (a, on_b, at_stall, resent) = run(true);
        let (t, again) = at_stall.expect("b given up");
        assert_eq!(
            t, 210,
            "45 ms after its sixth unanswered transmission (160 ms), at the next sample"
        );
        // Heard last at 100 ms with a 20 ms SRTT: what b was handed from 80 ms on may
        // be lost; it goes to a, in order, with the same sequence numbers for the
        // site and the next ones of a's own.
        let expected: Vec<_> = on_b
            .iter()
            .filter(|(t, _)| *t >= 80)
            .map(|(_, d)| d.clone())
            .collect();
        assert_eq!(expected.len(), 13);
        assert!(again.iter().all(|x| Some(x.lane) == a), "{again:?}");
        let a_next = split_datagram(&again[0].datagram)
            .expect("header")
            .0
            .lane_seq;
        for (i, (x, d)) in again.iter().zip(&expected).enumerate() {
            let (header, packet) = split_datagram(&x.datagram).expect("header");
            let (original, original_packet) = split_datagram(d).expect("header");
            assert_eq!((header.seq, header.gap), (original.seq, original.gap));
            assert!(header.copy && !original.copy);
            assert_eq!(header.lane_seq, a_next.wrapping_add(i as u16));
            assert_eq!(packet, original_packet);
        }
        assert_eq!(again.len(), expected.len());
        assert_eq!(resent, Some(13));
        // With no other lane there is nowhere to send them.
        let (_, _, at_stall, resent) = run(false);
        assert!(at_stall.expect("b given up").1.is_empty());
        assert_eq!(resent, Some(0));
    }

    /// `packet` behind a datagram header carrying `seq`, no flow gap and `lane_seq`.
    fn laned_datagram(seq: u32, lane_seq: u16, packet: &[u8]) -> Bytes {
        let mut d = vec![0; DATAGRAM_HEADER_LEN];
        let header = DatagramHeader {
            seq,
            gap: 0,
            copy: false,
            lane_seq,
        };
        write_datagram_header(&mut d, header);
        d.extend_from_slice(packet);
        Bytes::from(d)
    }

    #[test]
    fn a_run_of_packets_missing_on_a_lane_is_reported_back_on_it_once() {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        let pkt = tcp_v4("203.0.113.1", 80, "198.18.0.2", 1);
        let mut receive = |lane, seq, lane_seq| {
            e.handle_lane_datagram(lane, laned_datagram(seq, lane_seq, &pkt), at(1));
            transmits(&mut e)
                .into_iter()
                .map(|t| (t.lane, LossReport::decode(&t.datagram)))
                .collect::<Vec<_>>()
        };
        let report = |first, count| Some(LossReport { first, count });
        assert!(
            receive(a, 0, 7).is_empty(),
            "the first sets where the lane is"
        );
        assert!(receive(a, 1, 8).is_empty());
        assert_eq!(receive(a, 2, 11), [(a, report(9, 2))]);
        // What comes late, a copy, or the next in line is no loss.
        assert!(receive(a, 3, 9).is_empty());
        assert!(receive(a, 4, 11).is_empty());
        assert!(receive(a, 5, 12).is_empty());
        // Each lane counts for itself, across the wrap.
        assert!(receive(b, 6, 65_534).is_empty());
        assert_eq!(receive(b, 7, 1), [(b, report(65_535, 2))]);
        // The longest run reported; a longer one is an outage, not reported.
        assert_eq!(receive(a, 8, 13 + 64), [(a, report(13, 64))]);
        assert!(receive(a, 9, 78 + 65).is_empty());
        assert!(receive(a, 10, 144).is_empty());
        let reported = |l| e.lane(l).map(|l| l.counters.loss_reported);
        assert_eq!((reported(a), reported(b)), (Some(66), Some(2)));
        // Every packet was passed on, reported or not.
        assert_eq!(std::iter::from_fn(|| e.poll_tun_write()).count(), 11);
    }

    #[test]
    fn packets_a_lane_lost_are_sent_again_over_the_lane_where_they_arrive_first() {
        let mut e = engine(Role::Entry, Algorithm::Afmt);
        let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
        // Far more than a lane's window at once: the flow is striped.
        let (mut on_a, mut on_b) = (Vec::new(), 0u16);
        for _ in 0..1000 {
            send(&mut e, &pkt, at(1));
            for t in transmits(&mut e) {
                if t.lane == a {
                    on_a.push(t.datagram);
                } else {
                    on_b += 1;
                }
            }
        }
        let header = |d: &Bytes| split_datagram(d).expect("header").0;
        assert!(
            on_a.iter()
                .enumerate()
                .all(|(i, d)| usize::from(header(d).lane_seq) == i),
            "a numbers what it carries"
        );
        // The flow's first packets went before it was striped, without a gap.
        let striped = on_a
            .iter()
            .position(|d| header(d).gap != 0)
            .expect("striped");
        assert!(striped > 0 && header(&on_a[striped + 1]).gap != 0);
        let mut report = |first: usize, count| {
            let first = u16::try_from(first).expect("few");
            let datagram = Bytes::copy_from_slice(&LossReport { first, count }.encode());
            e.handle_lane_datagram(a, datagram, at(15));
            transmits(&mut e)
        };
        // Of a run from the last packet without a gap, the two the receiver holds
        // the flow for go again: oldest first, over b, in b's numbering.
        let again = report(striped - 1, 3);
        assert_eq!(again.len(), 2, "{again:?}");
        for (i, t) in again.iter().enumerate() {
            assert_eq!(t.lane, b);
            let (resent, packet) = split_datagram(&t.datagram).expect("header");
            let (original, original_packet) = split_datagram(&on_a[striped + i]).expect("header");
            assert_eq!((resent.seq, resent.gap), (original.seq, original.gap));
            assert!(resent.copy && !original.copy);
            assert_eq!(resent.lane_seq, on_b + i as u16, "b's next");
            assert_eq!(packet, original_packet);
        }
        // Packets a did not carry are not sent.
        assert!(report(on_a.len(), 5).is_empty());
        let repaired = |l| e.lane(l).map(|l| l.counters.loss_repaired);
        assert_eq!((repaired(a), repaired(b)), (Some(2), Some(0)));
    }

    #[test]
    fn a_lane_whose_traffic_stops_lets_go_of_the_datagrams_it_kept() {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
        for _ in 0..5 {
            assert_eq!(sent_on(&mut e, &pkt, at(100)), Some(b));
        }
        let kept = |e: &DataPath, t: u64| {
            let l = e.lanes[b.0 as usize].as_ref().expect("lane");
            (t, l.recent.len(), l.recent_bytes)
        };
        // Heard all along; samples only, every 100 ms, no more traffic.
        let mut seen = Vec::new();
        for t in (200..=700).step_by(100) {
            e.handle_lane_sample(b, drained(&e, b, t), at(t));
            seen.push(kept(&e, t));
        }
        let window = 100 + RESEND_WINDOW.as_millis() as u64;
        for (t, n, bytes) in seen {
            let expected = if t <= window { 5 } else { 0 };
            assert_eq!(n, expected, "at {t} ms");
            assert_eq!(bytes == 0, expected == 0, "at {t} ms");
        }
    }

    /// Lane b alone, heard until 100 ms, is handed `burst` packets at 100 ms, which
    /// leave at once; it is sampled and its timers run every millisecond, its probes
    /// leave at once too, and its peer is heard again from `heard_again` (ms) on. Returns
    /// when b sent probes, and when it was given up.
    fn probed(burst: usize, heard_again: u64) -> (Vec<u64>, Option<u64>) {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        e.handle_lane_sample(b, drained(&e, b, 100), at(100));
        let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
        for _ in 0..burst {
            assert_eq!(sent_on(&mut e, &pkt, at(100)), Some(b));
        }
        let mut probes = Vec::new();
        for t in 101..=600 {
            let rx = if t >= heard_again { t } else { 100 };
            e.handle_lane_sample(b, drained(&e, b, rx), at(t));
            e.handle_timeout(at(t));
            if e.lanes_up() == 0 {
                assert_eq!(
                    e.lane(b).map(|l| l.counters.probes_sent),
                    Some(probes.len() as u64)
                );
                return (probes, Some(t));
            }
            for x in transmits(&mut e) {
                assert_eq!((x.lane, &x.datagram[..]), (b, &PROBE[..]), "only probes");
                probes.push(t);
            }
        }
        (probes, None)
    }

    #[test]
    fn a_lane_whose_answer_is_overdue_probes_and_is_given_up_after_six_failed_exchanges() {
        let srtt = Duration::from_millis(20);
        let overdue = 100 + (srtt + PEER_ACK_DELAY).as_millis() as u64;
        let failed_after = exchange_timeout(srtt).as_millis() as u64;
        let every = PROBE_INTERVAL.as_millis() as u64;
        // One packet, seen on the wire at 101 ms, then probes from when its answer is
        // overdue: the fifth, seen at the sample after it, is the sixth exchange.
        let (probes, given_up) = probed(1, 1000);
        let decisive = overdue + 4 * every + 1;
        assert_eq!(given_up, Some(decisive + failed_after));
        let expected: Vec<u64> = (overdue..given_up.unwrap_or(0))
            .step_by(every as usize)
            .collect();
        assert_eq!(
            probes, expected,
            "every {every} ms from {overdue} ms until given up"
        );
        assert_eq!(given_up, Some(191), "on a dead path, within 5 round trips");
        // A burst that leaves at once is answered by one acknowledgement: its loss is
        // one failed exchange, not six, and the probes make up the rest.
        assert_eq!(probed(6, 1000), (expected, given_up));
        // Answered before the sixth exchange fails (five of them lost, each packet or
        // its acknowledgement, as on a lossy path): b stays up, and probing stops.
        let (probes, given_up) = probed(1, 190);
        assert_eq!(given_up, None);
        assert_eq!(probes.last(), Some(&185));
        // A lane that is heard sends no probe.
        assert_eq!(probed(1, 110), (vec![], None));
    }

    #[test]
    fn a_probe_is_counted_and_dropped_by_the_receiving_gateway() {
        let mut e = engine(Role::Exit, Algorithm::RoundRobin);
        let lane = lane_up(&mut e, "a", "dsl", 1400, at(0));
        e.handle_lane_datagram(lane, Bytes::from_static(&PROBE), at(1));
        // Padded, as a lane opening its window sends it.
        e.handle_lane_datagram(lane, Bytes::from_static(&PROBE_PADDING[..1200]), at(1));
        let counters = e.lane(lane).map(|l| *l.counters);
        assert_eq!(
            counters.map(|c| (c.probes_received, c.rx_packets)),
            Some((2, 0))
        );
        assert_eq!(e.poll_tun_write(), None);
        assert!(
            DropReason::ALL.iter().all(|r| e.dropped(*r) == 0),
            "not a drop"
        );
    }

    #[test]
    fn a_lane_in_its_first_slow_start_is_padded_while_a_lane_with_a_larger_window_queues() {
        let mut e = engine(Role::Exit, Algorithm::Single);
        let short = up(&mut e, "a", 1400);
        let up = LaneUp {
            site: "a",
            uplink: "lte",
            colour: Colour::Blue,
            rank: 1,
            rate_kbps: None,
        };
        let long = e.handle_lane_up(up, at(0)).expect("known site");
        // The long lane: 14 720 bytes per 120 ms, against the short one's 100 000 per
        // 20 ms.
        let small = |e: &DataPath, cwnd| LaneSample {
            srtt: Duration::from_millis(120),
            cwnd,
            ..drained(e, long, 1)
        };
        e.handle_lane_sample(long, small(&e, 14_720), at(1));
        let packet = to_site_a();
        let len = packet.len() + DATAGRAM_HEADER_LEN;
        let sent = |e: &mut DataPath, now| {
            send(e, &packet, now);
            transmits(e)
                .iter()
                .map(|t| (t.lane, t.datagram.len(), is_probe(&t.datagram)))
                .collect::<Vec<_>>()
        };
        // Nothing queued ahead of the first packet: nothing to open the lane for.
        assert_eq!(sent(&mut e, at(2)), [(short, len, false)]);
        // The second queues behind it: the long lane gets as many bytes of padding.
        assert_eq!(
            sent(&mut e, at(2)),
            [(short, len, false), (long, len, true)]
        );
        let opened = |e: &DataPath| e.lane(long).map(|l| l.counters.opening_bytes);
        assert_eq!(opened(&e), Some(len as u64));
        // Padding counts as queued: none goes on top of it.
        assert_eq!(sent(&mut e, at(2)), [(short, len, false)]);
        // Once the long lane's window carries as much per round trip, none either.
        e.handle_lane_sample(long, small(&e, 600_000), at(3));
        assert_eq!(sent(&mut e, at(3)), [(short, len, false)]);
        // Nor, for good, once its window was cut.
        let in_first_slow_start =
            |e: &mut DataPath| view_mut(&mut e.sites, SiteIdx(0), long).map(|v| v.first_slow_start);
        assert_eq!(in_first_slow_start(&mut e), Some(true));
        e.handle_lane_sample(long, small(&e, 14_720), at(4));
        assert_eq!(in_first_slow_start(&mut e), Some(false));
        e.handle_lane_sample(long, small(&e, 20_000), at(5));
        assert_eq!(sent(&mut e, at(5)), [(short, len, false)]);
        assert_eq!(opened(&e), Some(len as u64));
        assert_eq!(in_first_slow_start(&mut e), Some(false));
    }

    #[test]
    fn a_blue_lane_of_unknown_rate_warms_up_with_padding_until_its_window_is_cut() {
        let mut e = DataPath::new(EngineConfig {
            warm_up_lanes: true,
            ..config(Role::Exit, Algorithm::Afmt)
        });
        let mut up = |uplink, colour, rate_kbps| {
            let up = LaneUp {
                site: "a",
                uplink,
                colour,
                rank: 0,
                rate_kbps,
            };
            e.handle_lane_up(up, at(0)).expect("known site")
        };
        let blue = up("lte", Colour::Blue, None);
        let green = up("lte", Colour::Green, None);
        let shaped = up("dsl", Colour::Blue, Some(10_000));
        // Over 120 ms, with everything handed so far sent.
        let sample = |e: &DataPath, lane, cwnd| LaneSample {
            srtt: Duration::from_millis(120),
            cwnd,
            ..drained(e, lane, 1)
        };
        let padded = |e: &mut DataPath| {
            let out = transmits(e);
            assert!(out.iter().all(|t| is_probe(&t.datagram)), "{out:?}");
            out.iter()
                .map(|t| (t.lane, t.datagram.len()))
                .collect::<Vec<_>>()
        };
        let len = 1400 + DATAGRAM_HEADER_LEN;
        for lane in [blue, green, shaped] {
            e.handle_lane_sample(lane, sample(&e, lane, 14_720), at(1));
        }
        // At quinn's first window, 2 ms at slow start's pace is less than two
        // datagrams: two go ahead, on the blue lane of unknown rate alone.
        assert_eq!(padded(&mut e), [(blue, len), (blue, len)]);
        // The lane wants its next sample within a millisecond, traffic or not.
        assert_eq!(e.poll_timeout(), Some(at(2)));
        // Not sent yet: nothing more goes on top.
        let unsent = LaneSample {
            dequeued_bytes: 0,
            transmitted_datagrams: 0,
            ..sample(&e, blue, 14_720)
        };
        e.handle_lane_sample(blue, unsent, at(2));
        assert_eq!(padded(&mut e), []);
        // Sent, and the window grew to 100 kB over a path shorter than 2 ms: no more
        // than a window goes ahead.
        let short = |e: &DataPath, cwnd| LaneSample {
            srtt: Duration::from_millis(1),
            ..sample(e, blue, cwnd)
        };
        e.handle_lane_sample(blue, short(&e, 100_000), at(3));
        assert_eq!(padded(&mut e), vec![(blue, len); 72]);
        // Over 120 ms at 600 kB, 2 ms at twice its rate is 20 kB.
        e.handle_lane_sample(blue, sample(&e, blue, 600_000), at(4));
        assert_eq!(padded(&mut e), vec![(blue, len); 15]);
        let opened = |e: &DataPath, lane| e.lane(lane).map(|l| l.counters.opening_bytes);
        assert_eq!(opened(&e, blue), Some((2 + 72 + 15) * len as u64));
        assert_eq!((opened(&e, green), opened(&e, shaped)), (Some(0), Some(0)));
        // Never more than half the lane's queue limit (512 KiB).
        e.handle_lane_sample(blue, short(&e, 1_000_000), at(5));
        assert_eq!(padded(&mut e).len(), 373);
        // At the most a lane starts at, it stops.
        e.handle_lane_sample(blue, sample(&e, blue, MAX_START_WINDOW), at(6));
        assert_eq!(padded(&mut e), []);
        // And for good once its delay cap or a loss cut it.
        e.handle_lane_sample(blue, sample(&e, blue, 500_000), at(7));
        e.handle_lane_sample(blue, sample(&e, blue, 700_000), at(8));
        assert_eq!(padded(&mut e), []);
        assert!(e.poll_timeout().is_some_and(|t| t > at(9)));
    }

    #[test]
    fn a_packet_quinn_holds_back_is_not_waiting_for_an_answer() {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        // b's congestion window holds its packets from 100 ms to 300 ms (quinn waits
        // for a loss to be declared); its peer answers whatever b sends.
        let sends = |t| !(100..300).contains(&t);
        let b_last = run_two_lanes(&mut e, (a, b), 10..=1000, sends, sends, false);
        assert_eq!(b_last, Some(1000));
        assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(0));
        // Packets that do leave and get no answer still count.
        let b_last = run_two_lanes(&mut e, (a, b), 1010..=1200, |t| t <= 1050, |_| true, false);
        let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
        assert_eq!(b_last, Some((1050 + timeout) / 10 * 10), "{b_last:?}");
        assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(1));
    }

    #[test]
    fn a_reconnected_lane_replaces_the_old_one_which_is_closed_and_never_revived() {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let old = lane_up(&mut e, "a", "dsl", 1400, at(0));
        let other = lane_up(&mut e, "a", "lte", 1400, at(0));
        assert_eq!(e.poll_lane_close(), None, "another uplink replaces nothing");
        let new = lane_up(&mut e, "a", "dsl", 1400, at(10));
        assert_eq!(e.poll_lane_close(), Some((old, LaneClose::Replaced)));
        assert_eq!(e.poll_lane_close(), None);
        // The old connection still reports life until it is closed: it stays out.
        e.handle_lane_sample(old, sample(1400, 99), at(20));
        let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
        let mut used: Vec<_> = (0..4)
            .filter_map(|_| sent_on(&mut e, &pkt, at(20)))
            .collect();
        used.sort();
        used.dedup();
        assert_eq!(used, [other, new]);
        e.handle_lane_closed(old);
        assert!(e.lane(old).is_none());
    }

    #[test]
    fn a_lane_queue_holds_at_most_its_limit_until_the_lane_sends() {
        let mut cfg = config(Role::Entry, Algorithm::RoundRobin);
        cfg.lane_queue_limit = 3 * (DATAGRAM_HEADER_LEN as u64 + 140);
        let mut e = DataPath::new(cfg);
        let lane = lane_up(&mut e, "a", "dsl", 1400, at(0));
        let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80); // 140 bytes
        for _ in 0..4 {
            send(&mut e, &pkt, at(1));
        }
        assert_eq!(transmits(&mut e).len(), 3);
        assert_eq!(e.dropped(DropReason::QueueFull), 1);
        // The send task took two datagrams off the queue: room for two more.
        let taken = 2 * (DATAGRAM_HEADER_LEN as u64 + 140);
        e.handle_lane_sample(
            lane,
            LaneSample {
                dequeued_bytes: taken,
                ..sample(1400, 2)
            },
            at(2),
        );
        for _ in 0..3 {
            send(&mut e, &pkt, at(2));
        }
        assert_eq!(transmits(&mut e).len(), 2);
        assert_eq!(e.dropped(DropReason::QueueFull), 2);
        // Between samples the shell passes the dequeued count alone: room for one
        // more at once, and a stale count never shrinks the room again.
        e.handle_lane_dequeued(lane, taken + (DATAGRAM_HEADER_LEN as u64 + 140));
        e.handle_lane_dequeued(lane, taken);
        for _ in 0..2 {
            send(&mut e, &pkt, at(2));
        }
        assert_eq!(transmits(&mut e).len(), 1);
        assert_eq!(e.dropped(DropReason::QueueFull), 3);
    }

    /// Runs a lane of 5 MB/s (a window of 100 000 bytes per 20 ms) for `ms`
    /// milliseconds: `arriving(t)` packets of 146 bytes arrive at millisecond `t`,
    /// and the shell sends up to 5 000 bytes a millisecond of what the engine handed
    /// it. Answers the milliseconds in which CoDel dropped, and the bytes sent.
    fn run_lane(ms: u64, arriving: impl Fn(u64) -> u64) -> (DataPath, Vec<u64>, u64) {
        let (e, drops, sent) = run_lanes(Algorithm::RoundRobin, 1, 1, ms, arriving);
        (e, drops.into_iter().map(|(t, _)| t).collect(), sent)
    }

    /// [`run_lane`] over `count` such lanes of one site, scheduled by `algorithm`,
    /// with the packets of `flows` flows in turn. Answers each of CoDel's drops as
    /// the millisecond and the flow's index.
    fn run_lanes(
        algorithm: Algorithm,
        count: usize,
        flows: u16,
        ms: u64,
        arriving: impl Fn(u64) -> u64,
    ) -> (DataPath, Vec<(u64, u16)>, u64) {
        let mut e = engine(Role::Entry, algorithm);
        let lanes: Vec<LaneId> = (0..count)
            .map(|i| lane_up(&mut e, "a", &format!("up{i}"), 1400, at(0)))
            .collect();
        let (drops, sent) = drive_lanes(&mut e, &lanes, flows, ms, arriving);
        (e, drops, sent)
    }

    /// The traffic of [`run_lanes`] through `lanes`, already up.
    fn drive_lanes(
        e: &mut DataPath,
        lanes: &[LaneId],
        flows: u16,
        ms: u64,
        arriving: impl Fn(u64) -> u64,
    ) -> (Vec<(u64, u16)>, u64) {
        let count = lanes.len();
        let packets: Vec<Vec<u8>> = (1..=flows)
            .map(|port| tcp_v4("198.18.0.2", port, "203.0.113.1", 80))
            .collect();
        let datagram = DATAGRAM_HEADER_LEN as u64 + packets[0].len() as u64;
        let (mut handed, mut dequeued) = (vec![0; count], vec![0; count]);
        let mut drops = Vec::new();
        let mut next_flow = 0;
        for t in 1..ms {
            for _ in 0..arriving(t) {
                let before = e.dropped(DropReason::QueueDelay);
                send(e, &packets[usize::from(next_flow)], at(t));
                if e.dropped(DropReason::QueueDelay) > before {
                    drops.push((t, next_flow));
                }
                next_flow = (next_flow + 1) % flows;
            }
            for sent in transmits(e) {
                let i = lanes.iter().position(|&l| l == sent.lane).expect("a lane");
                handed[i] += datagram;
            }
            for (i, &lane) in lanes.iter().enumerate() {
                dequeued[i] = handed[i].min(dequeued[i] + 5_000);
                e.handle_lane_dequeued(lane, dequeued[i]);
            }
        }
        (drops, dequeued.iter().sum())
    }

    /// The datagram of [`run_lane`]'s packets.
    const RUN_LANE_DATAGRAM: u64 = DATAGRAM_HEADER_LEN as u64 + 140;

    #[test]
    fn a_lane_queue_that_stands_above_codels_target_is_dropped_from_after_an_interval() {
        // 50 000 bytes at once, then as much as the lane sends: a standing queue of
        // 10 ms.
        let d = RUN_LANE_DATAGRAM;
        let (e, drops_at, _) = run_lane(400, |t| {
            if t == 1 {
                50_000 / d
            } else {
                t * 5_000 / d - (t - 1) * 5_000 / d
            }
        });
        // Nothing before the queue stood for the lane's CoDel interval, then drops
        // ever closer.
        assert!(drops_at.len() >= 4, "{drops_at:?}");
        assert!(
            (50..=53).contains(&drops_at[0]),
            "first drop at {drops_at:?}"
        );
        assert_eq!(e.dropped(DropReason::QueueFull), 0);
        // Each packet's expected wait is counted for its colour: about 10 ms.
        let delays = e.queue_delay(Colour::Blue);
        assert!(delays.count() > 10_000, "{delays:?}");
        let mean = delays.sum / delays.count() as u32;
        assert!(
            mean > Duration::from_millis(8) && mean < Duration::from_millis(11),
            "{mean:?}"
        );
        assert_eq!(e.queue_delay(Colour::Green).count(), 0);
    }

    #[test]
    fn a_flow_striped_over_lanes_meets_one_drop_per_two_of_its_round_trips() {
        // Flows over lanes of 5 MB/s, one more lane than flows, so that each flow
        // spreads from its own: 50 000 bytes a lane at once, then as much as the
        // lanes send, a standing queue of 10 ms on each. A lane alone drops from it
        // ever faster (the test above); a striped flow, resequenced at the receiver,
        // meets one drop per 200 ms (two round trips of a site whose longest lane is
        // 10 ms away: CoDel's 100 ms), on whichever lane; and once a flow met one,
        // the others are spared for a round trip of theirs (70 ms).
        let d = RUN_LANE_DATAGRAM;
        for flows in [1, 2] {
            let lanes = usize::from(flows) + 1;
            let rate = lanes as u64 * 5_000;
            let standing = |t| {
                if t == 1 {
                    10 * rate / d
                } else {
                    t * rate / d - (t - 1) * rate / d
                }
            };
            let (e, drops, _) = run_lanes(Algorithm::Afmt, lanes, flows, 1_000, standing);
            let striped: u64 = (0..lanes)
                .map(|i| {
                    let lane = e.lanes[i].as_ref().expect("lane");
                    lane.counters.decisions[DecisionKind::Stripe as usize]
                })
                .sum();
            assert!(striped > 1_000, "{striped} packets striped");
            assert!((50..=60).contains(&drops[0].0), "{drops:?}");
            for flow in 0..flows {
                let at: Vec<u64> = drops.iter().filter(|d| d.1 == flow).map(|d| d.0).collect();
                assert!(at.len() >= 3, "{flows} flows: {drops:?}");
                assert!(at.windows(2).all(|p| p[1] - p[0] >= 200), "{drops:?}");
            }
            if flows > 1 {
                assert!(drops[1].1 != drops[0].1, "{drops:?}");
                assert!(drops[1].0 - drops[0].0 >= 70, "{drops:?}");
            }
            // Yet another flow is not spared for two round trips: drops come closer
            // than 200 ms apart.
            let closer = drops.windows(2).any(|p| p[1].0 - p[0].0 < 200);
            assert_eq!(closer, flows > 1, "{flows} flows: {drops:?}");
            assert_eq!(e.dropped(DropReason::QueueFull), 0);
        }
    }

    /// [`run_lane`]'s traffic over a lane 10 ms away that carries every packet
    /// (active/backup), beside an idle lane of round trip `far`, its queue standing
    /// `standing` bytes deep for a second. Answers the milliseconds of CoDel's drops.
    fn drops_beside_a_far_lane(far: Duration, standing: u64) -> Vec<u64> {
        let mut e = engine(Role::Entry, Algorithm::Single);
        // Ranked, as active/backup takes the lowest rank; the far lane reports its
        // round trip from the start.
        let mut up = |uplink, rank, srtt| {
            let up = LaneUp {
                site: "a",
                uplink,
                colour: Colour::Blue,
                rank,
                rate_kbps: None,
            };
            let id = e.handle_lane_up(up, at(0)).expect("site a");
            let live = LaneSample {
                srtt,
                ..sample(1400, 1)
            };
            e.handle_lane_sample(id, live, at(0));
            id
        };
        let lanes = [up("near", 0, Duration::from_millis(20)), up("far", 1, far)];
        let d = RUN_LANE_DATAGRAM;
        let arriving = |t| {
            if t == 1 {
                standing / d
            } else {
                t * 5_000 / d - (t - 1) * 5_000 / d
            }
        };
        let (drops, _) = drive_lanes(&mut e, &lanes, 1, 1_000, arriving);
        assert_eq!(e.dropped(DropReason::QueueFull), 0);
        drops.into_iter().map(|(t, _)| t).collect()
    }

    #[test]
    fn a_lane_queue_stands_longer_at_a_site_whose_longest_lane_is_far() {
        // A queue that stands 7 ms beyond the site's longest lane: above CoDel's 5 ms
        // where that lane is 25 ms away (22 ms queued on the lane 10 ms away),
        // within the 8.5 ms of a site whose longest lane is 60 ms away (57 ms queued).
        let ms = Duration::from_millis;
        let dropped = drops_beside_a_far_lane(ms(50), 110_000);
        assert!((50..=53).contains(&dropped[0]), "{dropped:?}");
        assert_eq!(drops_beside_a_far_lane(ms(120), 285_000), Vec::<u64>::new());
    }

    #[test]
    fn a_burst_that_drains_within_codels_interval_loses_nothing() {
        // A packet every millisecond, and every 200 ms a burst of 25 ms of queue
        // (within the 30 ms bound of a lane 10 ms away), which the lane drains at
        // its 5 MB/s: above the target for 20 ms at a time, within the 50 ms interval.
        let d = RUN_LANE_DATAGRAM;
        let (e, drops_at, sent) = run_lane(2_000, |t| if t % 200 == 1 { 125_000 / d } else { 1 });
        assert_eq!(drops_at, Vec::<u64>::new());
        assert_eq!(e.dropped(DropReason::QueueFull), 0);
        assert!(sent > 9 * 125_000, "{sent}");
    }

    #[test]
    fn new_scheduler_settings_take_over_from_the_next_packet() {
        let mut e = engine(Role::Entry, Algorithm::Afmt);
        let lane = lane_up(&mut e, "a", "dsl", 1400, at(0));
        let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
        send(&mut e, &pkt, at(1));
        send(&mut e, &pkt, at(2));
        assert_eq!(e.flows_active(), 1);
        e.handle_scheduler_config(Algorithm::RoundRobin, Duration::from_secs(10), 100);
        assert_eq!(e.flows_active(), 0, "round-robin keeps no flows");
        send(&mut e, &pkt, at(3));
        assert_eq!(transmits(&mut e).len(), 3);
        let decisions = e.lane(lane).expect("lane").counters.decisions;
        assert_eq!(decisions[DecisionKind::NewFlow as usize], 1);
        assert_eq!(decisions[DecisionKind::SameLane as usize], 1);
        assert_eq!(decisions[DecisionKind::Stateless as usize], 1);
    }

    #[test]
    fn datagrams_a_lane_refused_or_lost_count_as_drops_once() {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        assert!(!e.ready(), "an entry without a lane cannot carry traffic");
        let lane = lane_up(&mut e, "a", "dsl", 1400, at(0));
        assert!(e.ready());
        let lost = |refused, abandoned| LaneSample {
            refused_datagrams: refused,
            abandoned_datagrams: abandoned,
            ..sample(1400, 1)
        };
        e.handle_lane_sample(lane, lost(2, 3), at(1));
        e.handle_lane_sample(lane, lost(2, 3), at(2));
        assert_eq!(e.dropped(DropReason::TooBig), 2);
        assert_eq!(e.dropped(DropReason::NoLane), 3);
        e.handle_lane_sample(lane, lost(5, 3), at(3));
        assert_eq!(e.dropped(DropReason::TooBig), 5);
        assert!(DataPath::new(config(Role::Exit, Algorithm::Afmt)).ready());
    }

    #[test]
    fn idle_flows_expire_at_the_flow_timeout_without_traffic() {
        let mut e = engine(Role::Entry, Algorithm::Afmt);
        let lane = lane_up(&mut e, "a", "dsl", 1400, at(0));
        send(&mut e, &tcp_v4("198.18.0.2", 1, "203.0.113.1", 80), at(5));
        send(&mut e, &tcp_v4("198.18.0.2", 2, "203.0.113.1", 80), at(7));
        e.handle_lane_datagram(
            lane,
            datagram(0, &tcp_v4("203.0.113.1", 80, "198.18.0.2", 1)),
            at(8),
        );
        assert_eq!(e.flows_active(), 2);
        assert_eq!(e.pacing.flows(SiteIdx(0), AppIdx::DEFAULT), 2);
        // Without lanes, nothing but the flow timeout (10 s) is ahead.
        e.handle_lane_closed(lane);
        e.handle_timeout(at(9_000));
        assert_eq!(e.poll_timeout(), Some(at(5) + Duration::from_secs(10)));
        e.handle_timeout(at(10_005) - Duration::from_nanos(1));
        assert_eq!(e.flows_active(), 2, "one nanosecond before the timeout");
        e.handle_timeout(at(10_005));
        assert_eq!(e.flows_active(), 1);
        assert_eq!(e.pacing.flows(SiteIdx(0), AppIdx::DEFAULT), 1);
        assert_eq!(e.poll_timeout(), Some(at(10_007)));
        e.handle_timeout(at(10_008));
        assert_eq!(e.flows_active(), 0);
        assert_eq!(e.pacing.flows(SiteIdx(0), AppIdx::DEFAULT), 0);
        assert_eq!(e.sites[0].reseq.flows(), 0, "the reordering table too");
        assert_eq!(e.expiry_at, None, "nothing left to expire");
    }

    #[test]
    fn paced_packets_leave_at_their_departure_time_and_count_only_when_sent() {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        // 1120 kbit/s: a 140-byte packet every millisecond.
        let table = PacingTable::parse(
            br#"{"version": 1, "apps": [{"name": "web", "match": {"remote_ports": "80"}, "rate_up_kbps": 1120}]}"#,
        )
        .expect("valid");
        e.handle_pacing_table(SiteIdx(0), table, at(0));
        let web = AppIdx(1);
        let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
        // No lane yet: the first packet leaves the pacer at once and is dropped.
        send(&mut e, &pkt, at(0));
        assert_eq!(e.dropped(DropReason::NoLane), 1);
        assert_eq!(
            e.app_counters(SiteIdx(0), web).paced_bytes,
            0,
            "not carried"
        );
        lane_up(&mut e, "a", "dsl", 1400, at(0));
        for _ in 0..3 {
            send(&mut e, &pkt, at(0));
        }
        assert!(transmits(&mut e).is_empty(), "all wait for their departure");
        assert_eq!(e.poll_timeout(), Some(at(1)));
        e.handle_timeout(at(1));
        assert_eq!(transmits(&mut e).len(), 1);
        e.handle_timeout(at(3));
        assert_eq!(transmits(&mut e).len(), 2);
        assert_eq!(e.app_counters(SiteIdx(0), web).paced_bytes, 3 * 140);
        // A new table without the application sends what is queued, unpaced.
        send(&mut e, &pkt, at(3));
        send(&mut e, &pkt, at(3));
        let empty = PacingTable::parse(br#"{"version": 2, "apps": []}"#).expect("valid");
        e.handle_pacing_table(SiteIdx(0), empty, at(3));
        assert_eq!(transmits(&mut e).len(), 2);
    }

    /// An IPv4 `packet` with its DSCP set to `dscp`.
    fn with_dscp(mut packet: Vec<u8>, dscp: u8) -> Vec<u8> {
        let mut header = etherparse::Ipv4Header::from_slice(&packet).expect("v4").0;
        header.dscp = etherparse::IpDscp::try_new(dscp).expect("a DSCP");
        header.header_checksum = header.calc_header_checksum();
        header.write(&mut &mut packet[..20]).expect("write");
        packet
    }

    #[test]
    fn a_packet_takes_a_lane_of_its_applications_colour_else_of_its_inner_dscp() {
        let mut e = engine(Role::Entry, Algorithm::Afmt);
        let table = PacingTable::parse(
            br#"{"version": 1, "apps": [
                {"name": "voice", "match": {"remote_ports": "5060"}, "colour": "green"},
                {"name": "backup", "match": {"remote_ports": "873"}, "colour": "blue"}]}"#,
        )
        .expect("valid");
        e.handle_pacing_table(SiteIdx(0), table, at(0));
        let blue = lane_up(&mut e, "a", "dsl", 1400, at(0));
        let green = coloured_lane_up(&mut e, "a", "dsl", Colour::Green, 1400, at(0));
        let to =
            |port, dscp| with_dscp(tcp_v4("198.18.0.2", 1000 + port, "203.0.113.1", port), dscp);
        for (port, dscp, lane, why) in [
            (5060, 0, green, "green application"),
            (873, 46, blue, "the application's colour first"),
            (80, 46, green, "inner DSCP 46 (EF)"),
            (81, 10, blue, "other DSCPs are blue"),
        ] {
            assert_eq!(sent_on(&mut e, &to(port, dscp), at(1)), Some(lane), "{why}");
        }
        assert_eq!(e.colour_packets(Colour::Green), (2, 0));
        assert_eq!(e.colour_packets(Colour::Blue), (2, 0));
        // A second blue lane comes up after the green one: the colours stay apart.
        let blue2 = lane_up(&mut e, "a", "lte", 1400, at(1));
        for port in 2000..2010 {
            let lane = sent_on(&mut e, &to(port, 0), at(2));
            assert!(lane == Some(blue) || lane == Some(blue2), "{lane:?}");
            assert_eq!(sent_on(&mut e, &to(port, 46), at(2)), Some(green));
        }
    }

    /// One second over one uplink of known rate (10 Mbit/s): four blue flows offering
    /// 11 Mbit/s as the uplink counts it, one packet a millisecond, and an EF packet
    /// every 20 ms. Returns the green packets' waits and the blue bytes sent in the
    /// last half second. The AQM of flat best effort's FIFO drops green as well as
    /// blue (blue does not slow down), and DSD green that cannot leave in time.
    fn shaped_uplink(scheduler: AbeScheduler) -> (Vec<Duration>, u64) {
        let mut cfg = config(Role::Entry, Algorithm::Afmt);
        cfg.abe.scheduler = scheduler;
        let mut e = DataPath::new(cfg);
        let lanes = Colour::ALL.map(|colour| {
            let up = LaneUp {
                site: "a",
                uplink: "dsl",
                colour,
                rank: 0,
                rate_kbps: Some(10_000),
            };
            e.handle_lane_up(up, at(0)).expect("site a")
        });
        let [green, blue] = lanes;
        let bulk = |flow: u16| {
            let builder =
                PacketBuilder::ipv4([198, 18, 0, 2], [203, 0, 113, 1], 64).udp(5000 + flow, 9);
            let mut out = Vec::new();
            builder.write(&mut out, &[0; 1300]).expect("write to vec");
            out
        };
        // The n-th EF packet comes from port n.
        let ef = |n: u64| with_dscp(tcp_v4("198.18.0.2", n as u16, "203.0.113.1", 80), 46);
        let (mut green_waits, mut blue_bytes) = (Vec::new(), 0);
        let mut rx = 1;
        for step in 0..10_000u64 {
            let now = Instant::from_nanos(step * 100_000);
            if e.wants_lane_samples(now) {
                rx += 1;
                for lane in lanes {
                    let sample = drained(&e, lane, rx);
                    e.handle_lane_sample(lane, sample, now);
                }
            }
            if step % 10 == 0 {
                send(&mut e, &bulk((step / 10 % 4) as u16), now);
            }
            if step % 200 == 5 {
                send(&mut e, &ef(step / 200), now);
            }
            if e.poll_timeout().is_some_and(|at| at <= now) {
                e.handle_timeout(now);
            }
            for t in transmits(&mut e) {
                if t.lane == green {
                    let port = &t.datagram[DATAGRAM_HEADER_LEN + 20..][..2];
                    let sent = Instant::from_nanos(
                        (u64::from(u16::from_be_bytes([port[0], port[1]])) * 200 + 5) * 100_000,
                    );
                    green_waits.push(now.saturating_since(sent));
                } else if t.lane == blue && step >= 5_000 {
                    blue_bytes += t.datagram.len() as u64;
                }
            }
        }
        (green_waits, blue_bytes)
    }

    #[test]
    fn an_uplink_of_known_rate_is_shaped_and_dsd_sends_green_within_its_delay() {
        let (dsd_waits, dsd_blue) = shaped_uplink(AbeScheduler::Dsd);
        let (fifo_waits, fifo_blue) = shaped_uplink(AbeScheduler::Fifo);
        // Shaped to 95 % of 10 Mbit/s, counting 74 bytes of outer headers a datagram:
        // 1334-byte datagrams go at 843 a second, 562 kB in half a second.
        for blue in [dsd_blue, fifo_blue] {
            assert!(blue.abs_diff(562_000) < 8_000, "{blue}");
        }
        let max = |w: &[Duration]| w.iter().max().copied().unwrap_or_default();
        assert!(dsd_waits.len() >= 25, "{dsd_waits:?}");
        assert!(
            max(&dsd_waits) <= Duration::from_millis(11),
            "{dsd_waits:?}"
        );
        // FIFO: green waits behind the blue queue CoDel keeps standing near its bound
        // against blue that does not slow down.
        let late = fifo_waits
            .iter()
            .filter(|w| **w > Duration::from_millis(20))
            .count();
        assert!(late > fifo_waits.len() / 2, "{fifo_waits:?}");
    }

    /// Offers one blue lane of known rate (10 Mbit/s) over a path of round trip `srtt`
    /// 11 Mbit/s as the uplink counts it, one packet a millisecond, for a second.
    /// Answers the millisecond of the first packet the shaper's CoDel dropped.
    fn first_standing_queue_drop(srtt: Duration) -> u64 {
        let mut e = engine(Role::Entry, Algorithm::Afmt);
        let up = LaneUp {
            site: "a",
            uplink: "dsl",
            colour: Colour::Blue,
            rank: 0,
            rate_kbps: Some(10_000),
        };
        let lane = e.handle_lane_up(up, at(0)).expect("site a");
        let mut packet = Vec::new();
        PacketBuilder::ipv4([198, 18, 0, 2], [203, 0, 113, 1], 64)
            .udp(5000, 9)
            .write(&mut packet, &[0; 1300])
            .expect("write to vec");
        let mut rx = 1;
        for t in 0..1000 {
            if e.wants_lane_samples(at(t)) {
                rx += 1;
                let sample = LaneSample {
                    srtt,
                    ..drained(&e, lane, rx)
                };
                e.handle_lane_sample(lane, sample, at(t));
            }
            send(&mut e, &packet, at(t));
            if e.dropped(DropReason::QueueDelay) > 0 {
                return t;
            }
            if e.poll_timeout().is_some_and(|due| due <= at(t)) {
                e.handle_timeout(at(t));
            }
            transmits(&mut e);
        }
        panic!("no packet dropped from the standing queue");
    }

    #[test]
    fn a_shapers_queue_stands_longer_before_drops_when_the_sites_lane_is_far() {
        let near = first_standing_queue_drop(Duration::from_millis(20));
        let far = first_standing_queue_drop(Duration::from_millis(120));
        // CoDel's 100 ms interval for the near lane; 170 ms, and a target of 8.5 ms
        // instead of 5, for the lane 60 ms away.
        assert!(near >= 100, "{near}");
        assert!(far >= near + 70, "near {near}, far {far}");
    }

    #[test]
    fn a_shaped_lane_returns_while_the_other_colour_keeps_its_uplink_shaper_busy() {
        let mut e = engine(Role::Entry, Algorithm::Afmt);
        let [green, blue] = Colour::ALL.map(|colour| {
            let up = LaneUp {
                site: "a",
                uplink: "dsl",
                colour,
                rank: 0,
                rate_kbps: Some(1_000),
            };
            let id = e.handle_lane_up(up, at(0)).expect("site a");
            e.handle_lane_sample(id, sample(1400, 1), at(0));
            id
        });
        // The blue lane's peer falls silent for longer than an idle lane may: given up.
        e.handle_lane_sample(green, sample(1400, 2), at(500));
        e.handle_lane_sample(blue, sample(1400, 1), at(500));
        assert!(!e.lane(blue).expect("blue").view.up);
        // Green packets wait in the uplink's shaper...
        let ef = with_dscp(tcp_v4("198.18.0.2", 7, "203.0.113.1", 80), 46);
        for _ in 0..5 {
            send(&mut e, &ef, at(500));
        }
        assert!(e.shapers[0].shaper.queued_bytes() > 0);
        // ...when blue is heard again with nothing of its own left: it is back.
        let heard = drained(&e, blue, 2);
        e.handle_lane_sample(blue, heard, at(510));
        assert!(e.lane(blue).expect("blue").view.up);
    }

    #[test]
    fn a_flow_its_lane_cannot_carry_is_striped_when_blue_and_never_when_green() {
        for (dscp, colour, stripes) in [(0, Colour::Blue, true), (46, Colour::Green, false)] {
            let mut e = engine(Role::Entry, Algorithm::Afmt);
            let lanes = ["dsl", "lte"]
                .map(|uplink| coloured_lane_up(&mut e, "a", uplink, colour, 1400, at(0)));
            let packet = with_dscp(tcp_v4("198.18.0.2", 1, "203.0.113.1", 80), dscp);
            // A thousand packets at once: far more than one lane's window.
            let mut gaps = 0;
            for _ in 0..1000 {
                send(&mut e, &packet, at(1));
                for t in transmits(&mut e) {
                    let (header, _) = split_datagram(&t.datagram).expect("a datagram");
                    gaps += u64::from(header.gap != 0);
                }
            }
            let striped: u64 = lanes
                .iter()
                .map(|&l| {
                    e.lane(l).expect("lane").counters.decisions[DecisionKind::Stripe as usize]
                })
                .sum();
            assert_eq!(striped > 0, stripes, "{colour:?}: {striped} striped");
            assert_eq!(gaps > 0, stripes, "{colour:?}: {gaps} packets carry a gap");
        }
    }

    #[test]
    fn a_colour_without_live_lanes_borrows_the_others_until_one_returns() {
        let mut e = engine(Role::Entry, Algorithm::Afmt);
        let blue = lane_up(&mut e, "a", "dsl", 1400, at(0));
        let green_pkt = with_dscp(tcp_v4("198.18.0.2", 1, "203.0.113.1", 80), 46);
        let blue_pkt = tcp_v4("198.18.0.2", 2, "203.0.113.1", 80);
        assert_eq!(sent_on(&mut e, &green_pkt, at(1)), Some(blue));
        assert_eq!(
            e.colour_packets(Colour::Green),
            (1, 1),
            "counted as borrowed"
        );
        let green = coloured_lane_up(&mut e, "a", "dsl", Colour::Green, 1400, at(2));
        assert_eq!(
            sent_on(&mut e, &green_pkt, at(3)),
            Some(green),
            "back on its colour"
        );
        assert_eq!(e.colour_packets(Colour::Green), (2, 1));
        // And the other way round: the blue lane goes, blue borrows the green one.
        e.handle_lane_closed(blue);
        assert_eq!(sent_on(&mut e, &blue_pkt, at(4)), Some(green));
        assert_eq!(e.colour_packets(Colour::Blue), (1, 1));
        e.handle_lane_closed(green);
        assert_eq!(sent_on(&mut e, &blue_pkt, at(5)), None);
        assert_eq!(e.dropped(DropReason::NoLane), 1);
    }
}
