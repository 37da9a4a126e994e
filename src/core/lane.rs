//! Lanes as the scheduler sees them.
//!
//! Contract: a [`LaneView`] is a snapshot of one lane's state (up, SRTT, cwnd, bytes
//! queued, largest datagram) taken by the I/O shell once per batch; the core never
//! asks quinn itself.

use std::fmt;
use std::time::Duration;

use crate::core::aqm;
use crate::core::lane_cc;
use crate::core::time::Instant;

/// Index of a lane inside one gateway; reused after the lane is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaneId(pub u32);

impl fmt::Display for LaneId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lane{}", self.0)
    }
}

/// ABE colour of a lane and of the packets it carries.
/// Ordered green first: a site's lanes are kept grouped by colour in this order.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Colour {
    /// Low delay; may be dropped first.
    Green,
    /// Throughput; never worse than flat best effort. Packets without a colour are blue.
    #[default]
    Blue,
}

impl Colour {
    pub const ALL: [Colour; 2] = [Colour::Green, Colour::Blue];

    /// The other colour, whose lanes carry this one's packets while it has none up.
    pub fn other(self) -> Colour {
        match self {
            Colour::Green => Colour::Blue,
            Colour::Blue => Colour::Green,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Colour::Green => "green",
            Colour::Blue => "blue",
        }
    }
}

/// What the scheduler knows about a lane at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneView {
    pub id: LaneId,
    pub colour: Colour,
    pub up: bool,
    pub srtt: Duration,
    /// The lowest SRTT of the last 5 to 10 minutes: the lane's delay without a
    /// queue, against which `srtt` shows the queue at the uplink's bottleneck.
    pub min_srtt: Duration,
    pub cwnd: u64,
    /// Bytes queued for this lane inside braid and not yet sent by QUIC.
    pub fill: u64,
    /// When the lane was last given a packet: a lane idle for longer than its SRTT
    /// has no queue left at its bottleneck, whatever its last SRTT says.
    pub last_sent: Instant,
    /// Largest inner packet the lane can carry right now.
    pub max_datagram: usize,
    /// The uplink's configured rate in this direction, when known (kbit/s).
    pub rate_kbps: Option<u64>,
    /// The uplink's position in the entry's configuration (0 first).
    pub rank: u32,
    /// In its first slow start and not shaped: no window reduction or loss has
    /// paced it yet, so a small window goes out in bursts
    /// (see [`LaneView::latest_arrival`]).
    pub first_slow_start: bool,
    /// How much the uplink's one-way delay varies by itself, declared or learned
    /// ([`LaneSample::delay_variation`]): round trips that far above the lowest are
    /// the path's, not a queue.
    pub delay_variation: Duration,
}

/// The path delay of the longest of `lanes` that are up, one way, loaded
/// ([`LaneView::one_way`]): what a flow striped over them waits for at the receiver,
/// and so what a shorter lane may queue without delaying the flow.
pub fn longest_one_way(lanes: &[LaneView]) -> Duration {
    lanes
        .iter()
        .filter(|v| v.up)
        .map(LaneView::one_way)
        .max()
        .unwrap_or_default()
}

/// A window smaller than this many datagrams, in a lane's first slow start, goes out
/// in one or two bursts per round trip: QUIC sends up to 10 datagrams at once before
/// its pacer spaces them (quinn-proto's `MIN_BURST_SIZE`).
const BURST_WINDOW_DATAGRAMS: u64 = 20;

/// What the shell reads from a lane's QUIC connection and its send task, once per
/// sampling round ([`crate::core::engine::DataPath::lanes_to_sample`]): current
/// estimates and monotonic counts. The core decides from it whether the lane is up,
/// how full it is and what it carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaneSample {
    pub srtt: Duration,
    pub cwnd: u64,
    /// Largest inner packet the lane can carry now (0: none).
    pub max_datagram: usize,
    /// The connection is closed or closing.
    pub closed: bool,
    /// UDP datagrams the connection received so far: the lane's sign of life.
    pub rx_datagrams: u64,
    /// QUIC packets the connection declared lost so far.
    pub lost_packets: u64,
    /// Bytes of datagrams inside quinn, not yet sent.
    pub quinn_queued_bytes: u64,
    /// Bytes that left the lane's queue inside braid so far (sent or discarded).
    pub dequeued_bytes: u64,
    /// Datagrams and their bytes quinn accepted for sending so far.
    pub sent_packets: u64,
    pub sent_bytes: u64,
    /// Datagrams quinn has put on the wire so far (its congestion window may hold
    /// accepted ones back).
    pub transmitted_datagrams: u64,
    /// PING frames quinn has sent so far: its probes when acknowledgements stop
    /// coming (and keep-alives), each of which the peer must answer.
    pub sent_pings: u64,
    /// Datagrams quinn refused so far because they no longer fit the path (its MTU
    /// shrank after the packet was scheduled).
    pub refused_datagrams: u64,
    /// Datagrams lost with the connection so far: the one being sent when it was
    /// lost, and those still queued.
    pub abandoned_datagrams: u64,
    /// How much the uplink's one-way delay varies by itself, as the lane's congestion
    /// controller judges its queue: declared, or learned (`core/lane_cc/variation.rs`);
    /// zero for a steady uplink.
    pub delay_variation: Duration,
    /// What this end of the lane learned of that variation itself, from its own lone
    /// packets (zero: nothing): what it reports to the peer
    /// (`core/engine/variation_report.rs`).
    pub learned_variation: Duration,
    /// QUIC packets the connection sent so far (keep-alives and acknowledgements
    /// too): what its `lost_packets` are a share of.
    pub quic_sent_packets: u64,
    /// Bytes the connection put on the wire and took off it so far, both ways, IP
    /// and UDP headers counted: what an uplink's data cap counts.
    pub wire_bytes: u64,
}

impl LaneView {
    /// A lane that is up, with an empty queue and QUIC's initial estimates.
    pub fn new(id: LaneId, colour: Colour) -> LaneView {
        LaneView {
            id,
            colour,
            up: true,
            srtt: Duration::from_millis(100),
            min_srtt: Duration::from_millis(100),
            cwnd: 12_000,
            fill: 0,
            last_sent: Instant::ZERO,
            max_datagram: 1200,
            rate_kbps: None,
            rank: 0,
            first_slow_start: false,
            delay_variation: Duration::ZERO,
        }
    }

    /// How long the lane takes to send what braid queued for it, plus `len` bytes, at
    /// its rate: a congestion window per `srtt`.
    pub fn drain_time(&self, len: usize, srtt: Duration) -> Duration {
        let bytes = u128::from(self.fill) + len as u128;
        let nanos = bytes * srtt.as_nanos() / u128::from(self.cwnd.max(1));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The lane's round-trip time as a packet handed to it now meets it: its SRTT,
    /// or, once it has been idle for longer than that, its round trip without a
    /// queue (whatever queue the SRTT measured has drained, and an idle connection's
    /// SRTT is not renewed): its lowest SRTT, and over an uplink whose delay varies,
    /// what the variation adds to a loaded lane's (see [`LaneView::one_way`]).
    pub fn path_srtt(&self, now: Instant) -> Duration {
        if now.saturating_since(self.last_sent) > self.srtt {
            (2 * self.one_way()).min(self.srtt)
        } else {
            self.srtt
        }
    }

    /// How far the lane's round trip stands above its lowest beyond what the uplink's
    /// delay variation puts there when the lane is loaded
    /// ([`crate::core::lane_cc::variation_allowance`]): the queue at the uplink's
    /// bottleneck.
    pub fn bottleneck_queue(&self, now: Instant) -> Duration {
        self.path_srtt(now)
            .saturating_sub(self.min_srtt)
            .saturating_sub(lane_cc::variation_allowance(self.delay_variation))
    }

    /// When a packet of `len` bytes handed to the lane now is expected to arrive:
    /// half its round-trip time (the one-way delay) after braid's queue for it drains.
    /// A packet that finds the queue empty is counted as leaving at once: QUIC took
    /// every packet before it, so its window most likely has room (braid sees the
    /// queue, not the bytes in flight; docs/design/afmt-and-striping.md).
    /// Counting its own bytes at the window's rate made a lane with a small window look
    /// later than it is by a whole packet's share of its round trip, so that striped
    /// packets went to it only once the other lanes' queues were that much longer, and
    /// its window stayed at its initial size for seconds.
    pub fn arrival(&self, len: usize, now: Instant) -> Duration {
        let srtt = self.path_srtt(now);
        let behind = if self.fill == 0 { 0 } else { len };
        srtt / 2 + self.drain_time(behind, srtt)
    }

    /// The latest a packet of `len` bytes handed to the lane now may arrive, where
    /// that can be later than its [`LaneView::arrival`]; `None` elsewhere. Where the
    /// window goes out in bursts, a queue does not drain at the window's rate: in
    /// its first slow start a window of a few bursts leaves at once, its
    /// acknowledgements come back together a round trip later, and nothing leaves in
    /// between, so a packet that finds the window full may wait a whole round trip.
    /// Counted at the window's rate instead, a striped packet put behind such a
    /// window arrived well after its [`LaneView::arrival`], past the resequencing
    /// deadline (docs/design/afmt-and-striping.md).
    pub fn latest_arrival(&self, len: usize, now: Instant) -> Option<Duration> {
        (self.fill > 0 && self.sends_in_bursts()).then(|| {
            let srtt = self.path_srtt(now);
            srtt / 2 + self.drain_time(len, srtt).max(srtt)
        })
    }

    /// How long a packet that waits `sojourn` in braid's queue for the lane (its
    /// [`LaneView::drain_time`]) waits beyond the path delay of the longest lane of
    /// its colour, `longest_one_way` away (see [`longest_one_way`]): less what the
    /// longer path would take anyway. AFMT means to queue on a short lane as long as
    /// a longer lane takes more (striping evens out the arrival of a flow's packets
    /// that way), so only this excess is a queue for the lane's CoDel to drain and
    /// to bound.
    pub fn wait_beyond(&self, sojourn: Duration, longest_one_way: Duration) -> Duration {
        (self.one_way() + sojourn).saturating_sub(longest_one_way)
    }

    /// The lane's path delay one way when it carries traffic, without a queue: half
    /// its lowest SRTT, and over an uplink whose delay varies, half what the variation
    /// puts on a loaded lane's round trip
    /// ([`crate::core::lane_cc::variation_allowance`]). Counted at its lowest alone,
    /// a varying lane looked shorter than its packets take: the shorter lanes' queues
    /// were drained (CoDel) before a striped packet would arrive as early on the
    /// varying lane, so one download's packets were dropped on the 16 and 32 Mbit/s
    /// lanes while the 50 Mbit/s one carried 1-8 Mbit/s of it.
    pub fn one_way(&self) -> Duration {
        (self.min_srtt + lane_cc::variation_allowance(self.delay_variation)) / 2
    }

    /// braid's queue for the lane is past its bound in time: a packet handed to the
    /// lane now is dropped at once (`AqmDrop::TooLate`). The bound is the lane's
    /// queue's ([`aqm::lane_max_sojourn`]), or, for an uplink of known rate, its
    /// shaper's ([`aqm::MAX_SOJOURN`]).
    pub fn past_bound(&self, longest_one_way: Duration) -> bool {
        let bound = match self.rate_kbps {
            Some(_) => aqm::MAX_SOJOURN,
            None => aqm::lane_max_sojourn(self.min_srtt),
        };
        let wait = self.wait_beyond(self.drain_time(0, self.srtt), longest_one_way);
        aqm::past_bound(wait, bound, self.fill, self.max_datagram as u64)
    }

    /// The lane's window goes out in one or two bursts per round trip.
    fn sends_in_bursts(&self) -> bool {
        self.first_slow_start && self.cwnd < BURST_WINDOW_DATAGRAMS * self.max_datagram as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn lane(id: u32, min_srtt: u64, srtt: u64, variation: u64) -> LaneView {
        LaneView {
            min_srtt: ms(min_srtt),
            srtt: ms(srtt),
            delay_variation: ms(variation),
            ..LaneView::new(LaneId(id), Colour::Blue)
        }
    }

    #[test]
    fn a_varying_lane_counts_as_long_as_its_loaded_packets_take() {
        // 20 ms each way, lowest round trip 45 ms: loaded, 30 ms above it.
        let lanes = [lane(0, 20, 20, 0), lane(1, 45, 75, 20)];
        assert_eq!(lanes[1].one_way(), Duration::from_micros(37_500));
        assert_eq!(longest_one_way(&lanes), Duration::from_micros(37_500));
        // The short lane may queue until its packets arrive as late: 27.5 ms.
        assert_eq!(
            lanes[0].wait_beyond(ms(27), longest_one_way(&lanes)),
            Duration::ZERO
        );
        assert_eq!(
            lanes[0].wait_beyond(ms(30), longest_one_way(&lanes)),
            Duration::from_micros(2_500)
        );
        // The varying lane's own queue is a queue from its first byte.
        assert_eq!(lanes[1].wait_beyond(ms(4), longest_one_way(&lanes)), ms(4));
        // Its round trip up to the variation's allowance above the lowest is no
        // queue at its bottleneck; beyond, it is.
        assert_eq!(lanes[1].bottleneck_queue(Instant::ZERO), Duration::ZERO);
        let queued = LaneView {
            srtt: ms(80),
            ..lanes[1]
        };
        assert_eq!(queued.bottleneck_queue(Instant::ZERO), ms(5));
        // Idle for longer than its SRTT, it counts as loaded without a queue.
        let idle = LaneView {
            srtt: ms(90),
            last_sent: Instant::ZERO,
            ..lanes[1]
        };
        assert_eq!(idle.path_srtt(Instant::ZERO + ms(91)), ms(75));
        assert_eq!(idle.path_srtt(Instant::ZERO + ms(90)), ms(90));
        // A lane that went down counts for nothing.
        let down = [
            lanes[0],
            LaneView {
                up: false,
                ..lanes[1]
            },
        ];
        assert_eq!(longest_one_way(&down), ms(10));
    }
}
