//! The egress of an uplink of known rate (SPEC §5): braid sends no faster than the
//! uplink carries, so that the queue forms here, where DSD decides who waits, and
//! not in the modem's buffer, where nothing does.
//!
//! Contract: the engine hands in each datagram scheduled on one of the uplink's lanes
//! with [`Shaper::enqueue`] (accepted or refused at once, with the reason), and calls
//! [`Shaper::release`] no later than [`Shaper::next_release`]; released datagrams go to
//! the uplink's current lane of the colour they were queued for. One shaper serves both
//! lanes of an uplink, green and blue, as one modem carries both.
//!
//! The queue is DSD's ([`Dsd`]) under `abe.scheduler = "dsd"`, or one FIFO under
//! `"fifo"` (every packet queued as blue: DSD then is exactly the drop-tail FIFO its
//! virtual queue models). Either way flat best effort's FIFO is managed like every
//! other queue inside braid, by time: CoDel and the `aqm::MAX_SOJOURN` bound judge
//! the wait in the virtual FIFO, which is exact here (its backlog at the rate), and a
//! packet whose duplicate they drop is dropped whatever its colour.

use std::time::Duration;

use bytes::BytesMut;

use super::aqm::{AqmDrop, CoDel};
use super::dsd::{Dsd, DsdConfig, DsdDrop};
use super::lane::{Colour, LaneId};
use super::time::Instant;

/// How an uplink of known rate is served (`abe.scheduler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbeScheduler {
    /// Duplicate Scheduling with Deadlines: green leaves within `green_delay`.
    Dsd,
    /// One FIFO for both colours, for comparison.
    Fifo,
}

/// `[abe]`'s queueing settings, for every shaped uplink.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AbeSettings {
    pub scheduler: AbeScheduler,
    pub buffer_bytes: u64,
    pub green_delay: Duration,
    pub control_interval: Duration,
}

/// The defaults of `[abe]`: a green packet leaves within 10 ms, flat best effort's
/// buffer is 250 kB, g is adjusted every 100 ms.
impl Default for AbeSettings {
    fn default() -> AbeSettings {
        AbeSettings {
            scheduler: AbeScheduler::Dsd,
            buffer_bytes: 250_000,
            green_delay: Duration::from_millis(10),
            control_interval: Duration::from_millis(100),
        }
    }
}

/// The share of the configured rate braid sends at. The uplink also carries what
/// braid does not shape (the lanes' acknowledgements for the other direction, QUIC's
/// keep-alives and handshakes): at the full rate those bytes would build a queue in
/// the modem that never drains while braid's queue is busy.
const SHAPED_SHARE_PERCENT: u64 = 95;

/// Bytes an uplink carries per datagram beyond braid's: the outer IPv4 and UDP
/// headers (28), QUIC's short header and DATAGRAM frame (about 16 with quinn's
/// 8-byte connection ids) and the AEAD tag (16), and an Ethernet header (14) where
/// the uplink's rate counts frames. Nominal: IPv6 uplinks carry 20 more.
pub const OUTER_OVERHEAD: u64 = 74;

/// How late a blue packet may leave against flat best effort (DSD's
/// `blue_slack_bytes`): one full-size datagram of an Ethernet uplink, the least that
/// lets a small green packet pass a queue of full-size blue ones.
const BLUE_SLACK_BYTES: u64 = 1500 + OUTER_OVERHEAD;

/// How late the shaper's timer may fire: to the millisecond.
const TIMER_GRANULARITY: Duration = Duration::from_millis(1);

/// How far the shaper catches up after a late wake-up: up to this much of the rate
/// goes out at once.
const MAX_BURST: Duration = Duration::from_millis(2);

/// The delay DSD gives green packets in the shaper, so that they leave within
/// `green_delay` in real time: DSD schedules each packet to the nanosecond, but it
/// leaves when the timer fires, up to [`TIMER_GRANULARITY`] later (at most half the
/// bound is set aside).
fn green_budget(green_delay: Duration) -> Duration {
    green_delay - TIMER_GRANULARITY.min(green_delay / 2)
}

/// Why the shaper refused or dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShapeDrop {
    /// Flat best effort's FIFO is full: its bytes, or `aqm::MAX_SOJOURN`.
    QueueFull,
    /// CoDel on flat best effort's FIFO.
    QueueDelay,
    /// Green that could not have left within `green_delay`.
    GreenAcceptance,
    /// Green that waited until it could no longer leave within `green_delay`.
    GreenStale,
}

/// A datagram waiting for the uplink.
#[derive(Debug)]
struct Shaped {
    datagram: BytesMut,
    /// The colour of the lane it was scheduled on.
    lane_colour: Colour,
    queued_at: Instant,
}

/// A datagram the shaper lets go: to the uplink's lane of `colour`.
#[derive(Debug)]
pub struct Released {
    pub lane: Option<LaneId>,
    pub colour: Colour,
    pub datagram: BytesMut,
    /// How long it waited in the shaper.
    pub waited: Duration,
}

pub struct Shaper {
    /// The uplink's lanes by `Colour as usize`, as they are now.
    lanes: [Option<LaneId>; 2],
    scheduler: AbeScheduler,
    /// `abe.green_delay_ms`: green leaves within it in real time, or not at all.
    green_delay: Duration,
    dsd: Dsd<Shaped>,
    codel: CoDel,
    /// When the uplink has sent what the shaper let go.
    next_send: Instant,
    rate_kbps: u64,
}

impl Shaper {
    pub fn new(rate_kbps: u64, settings: AbeSettings, now: Instant) -> Shaper {
        let config = DsdConfig {
            rate_bps: shaped_rate_bps(rate_kbps),
            buffer_bytes: settings.buffer_bytes,
            blue_slack_bytes: BLUE_SLACK_BYTES,
            green_delay: green_budget(settings.green_delay),
            control_interval: settings.control_interval,
        };
        Shaper {
            lanes: [None; 2],
            scheduler: settings.scheduler,
            green_delay: settings.green_delay,
            dsd: Dsd::new(config, now),
            codel: CoDel::default(),
            next_send: now,
            rate_kbps,
        }
    }

    /// The uplink's lane of `colour` is `lane` from now on: what is queued for that
    /// colour goes to it.
    pub fn set_lane(&mut self, colour: Colour, lane: LaneId) {
        self.lanes[colour as usize] = Some(lane);
    }

    /// `lane` is gone: what waits for it is dropped when let go, unless a lane of its
    /// colour comes up first.
    pub fn lane_closed(&mut self, lane: LaneId) {
        for slot in &mut self.lanes {
            if *slot == Some(lane) {
                *slot = None;
            }
        }
    }

    /// The uplink's configured rate, which may change when its lanes reconnect.
    pub fn set_rate(&mut self, rate_kbps: u64) {
        if rate_kbps != self.rate_kbps {
            self.rate_kbps = rate_kbps;
            self.dsd.set_rate(shaped_rate_bps(rate_kbps));
        }
    }

    /// Bytes the uplink sends per second, as the shaper sends them.
    pub fn rate_bytes_per_sec(&self) -> u64 {
        shaped_rate_bps(self.rate_kbps) / 8
    }

    /// Queues a datagram scheduled on the uplink's lane of `lane_colour`, or says why
    /// it is dropped. `mtu` is the largest datagram the uplink carries (a queue of one
    /// packet is never a standing queue). `intended` is the wait the scheduler means
    /// packets to have here, which the AQM does not count: AFMT queues on a short
    /// uplink while a longer one takes more, as in a lane's own queue (`engine/forward.rs`).
    pub fn enqueue(
        &mut self,
        datagram: BytesMut,
        lane_colour: Colour,
        mtu: u64,
        intended: Duration,
        now: Instant,
    ) -> Result<(), ShapeDrop> {
        self.dsd.poll_control(now);
        let (wait, backlog) = self.dsd.virtual_backlog(now);
        let excess = wait.saturating_sub(intended);
        match self
            .codel
            .verdict(excess, backlog, mtu + OUTER_OVERHEAD, now, || Instant::ZERO)
        {
            Some(AqmDrop::TooLate) => return Err(ShapeDrop::QueueFull),
            Some(AqmDrop::Standing) => return Err(ShapeDrop::QueueDelay),
            None => {}
        }
        let wire_len = datagram.len() as u64 + OUTER_OVERHEAD;
        let dsd_colour = match self.scheduler {
            AbeScheduler::Dsd => lane_colour,
            AbeScheduler::Fifo => Colour::Blue,
        };
        let shaped = Shaped {
            datagram,
            lane_colour,
            queued_at: now,
        };
        if self.dsd.queued_bytes() == 0 {
            // An idle uplink starts now: only time lost while packets wait is caught up.
            self.next_send = self.next_send.max(now);
        }
        self.dsd
            .enqueue(shaped, wire_len, dsd_colour, now)
            .map_err(|(_, why)| match why {
                DsdDrop::BufferFull if dsd_colour == Colour::Blue => ShapeDrop::QueueFull,
                DsdDrop::BufferFull | DsdDrop::Acceptance => ShapeDrop::GreenAcceptance,
                DsdDrop::Stale => ShapeDrop::GreenStale,
            })
    }

    /// Lets go of what the uplink can have sent by `now` into `out`, and counts green
    /// packets that went stale into `stale`.
    pub fn release(&mut self, now: Instant, out: &mut Vec<Released>, stale: &mut u64) {
        let resume_at = now - MAX_BURST;
        let lost = resume_at.saturating_since(self.next_send);
        if lost > Duration::ZERO && self.dsd.queued_bytes() > 0 {
            self.dsd.uplink_lost(lost);
        }
        self.next_send = self.next_send.max(resume_at);
        let green_delay = self.green_delay;
        // DSD's green queue holds only packets of green lanes, and only under `dsd`.
        let late = move |shaped: &Shaped| now.saturating_since(shaped.queued_at) > green_delay;
        while self.next_send <= now {
            // Decided as of the moment the uplink starts sending it, which a late
            // wake-up has passed already; but a green packet leaves now, and one that
            // would leave after `green_delay` in real time is stale.
            let Some((shaped, _)) = self.dsd.dequeue(self.next_send, late, |_| *stale += 1) else {
                break;
            };
            let waited = now.saturating_since(shaped.queued_at);
            let wire_len = shaped.datagram.len() as u64 + OUTER_OVERHEAD;
            self.next_send = self.next_send + self.dsd.transmission_time(wire_len);
            out.push(Released {
                lane: self.lanes[shaped.lane_colour as usize],
                colour: shaped.lane_colour,
                waited,
                datagram: shaped.datagram,
            });
        }
    }

    /// When [`Shaper::release`] has something to let go.
    pub fn next_release(&self) -> Option<Instant> {
        (self.dsd.queued_bytes() > 0).then_some(self.next_send)
    }

    /// Fits the queue's management to the site's longest live lane, now
    /// `longest_one_way` away ([`super::aqm::shaper_interval`]).
    pub fn fit_paths(&mut self, longest_one_way: Duration) {
        self.codel.fit_shaper(longest_one_way);
    }

    /// Bytes waiting, both colours, counted as the uplink carries them.
    pub fn queued_bytes(&self) -> u64 {
        self.dsd.queued_bytes()
    }

    /// DSD's g: the probability that green goes first when both can wait.
    pub fn green_bias(&self) -> f64 {
        self.dsd.green_bias()
    }
}

fn shaped_rate_bps(rate_kbps: u64) -> u64 {
    (rate_kbps * 1000 * SHAPED_SHARE_PERCENT / 100).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::aqm;

    fn settings(scheduler: AbeScheduler) -> AbeSettings {
        AbeSettings {
            scheduler,
            ..AbeSettings::default()
        }
    }

    fn at_us(us: u64) -> Instant {
        Instant::from_nanos(us * 1000)
    }

    fn datagram(len: usize, tag: u8) -> BytesMut {
        BytesMut::from(&vec![tag; len][..])
    }

    /// Queues `n` blue datagrams of 1426 bytes at time zero, every one accepted.
    fn queue_blue(shaper: &mut Shaper, n: u8) {
        for i in 0..n {
            shaper
                .enqueue(
                    datagram(1426, i),
                    Colour::Blue,
                    1426,
                    Duration::ZERO,
                    at_us(0),
                )
                .expect("accepted");
        }
    }

    #[test]
    fn releases_at_the_shaped_rate_counting_the_outer_headers() {
        // 10 Mbit/s configured: 9.5 Mbit/s shaped, 1500 wire bytes take 1263 µs.
        let mut shaper = Shaper::new(10_000, settings(AbeScheduler::Dsd), at_us(0));
        shaper.set_lane(Colour::Blue, LaneId(1));
        queue_blue(&mut shaper, 30);
        let (mut out, mut stale) = (Vec::new(), 0);
        // Released in 1 ms steps for 20 ms: 20 / 1.263 = 15.8, plus the first at 0.
        for ms in 0..=20 {
            shaper.release(at_us(ms * 1000), &mut out, &mut stale);
        }
        assert_eq!(out.len(), 16);
        assert!(out.iter().all(|r| r.lane == Some(LaneId(1))));
        assert_eq!(stale, 0);
        let next = shaper.next_release().expect("more queued");
        assert!(next > at_us(20_000) && next <= at_us(21_300), "{next:?}");
    }

    #[test]
    fn a_late_wake_up_sends_at_most_a_short_burst() {
        let mut shaper = Shaper::new(10_000, settings(AbeScheduler::Fifo), at_us(0));
        shaper.set_lane(Colour::Blue, LaneId(0));
        queue_blue(&mut shaper, 20);
        let (mut out, mut stale) = (Vec::new(), 0);
        // Idle until 100 ms: 2 ms of credit at most, the packets due from 98 ms on: two.
        shaper.release(at_us(100_000), &mut out, &mut stale);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn time_the_uplink_lost_to_a_late_wake_up_is_lost_to_dsd_too() {
        let mut shaper = Shaper::new(10_000, settings(AbeScheduler::Dsd), at_us(0));
        shaper.set_lane(Colour::Blue, LaneId(0));
        shaper.set_lane(Colour::Green, LaneId(1));
        queue_blue(&mut shaper, 20);
        let (mut out, mut stale) = (Vec::new(), 0);
        // Woken up about 8 ms late, three times: the uplink lost 23 ms while blue
        // waited (what is due within the last 2 ms of each still goes).
        for ms in [10, 20, 30] {
            shaper.release(at_us(ms * 1000), &mut out, &mut stale);
        }
        assert_eq!(out.len(), 6);
        // Flat best effort's queue is the real one: 14 packets of 1263 µs.
        let (wait, _) = shaper.dsd.virtual_backlog(at_us(30_000));
        let ahead = shaper.next_send.saturating_since(at_us(30_000))
            + shaper.dsd.transmission_time(shaper.queued_bytes());
        assert!(
            wait.abs_diff(ahead) < Duration::from_micros(50),
            "virtual {wait:?}, real {ahead:?}"
        );
        // So a green ping still finds blue packets that can wait for it.
        shaper
            .enqueue(
                datagram(100, 9),
                Colour::Green,
                1426,
                Duration::ZERO,
                at_us(30_000),
            )
            .expect("green accepted");
        for us in (30_000..40_000).step_by(500) {
            shaper.release(at_us(us), &mut out, &mut stale);
        }
        assert_eq!(stale, 0);
        assert!(out.iter().any(|r| r.colour == Colour::Green));
    }

    /// Blue at 10.4 Mbit/s (as the uplink counts it) into 9.5, and green at about
    /// 1.1 Mbit/s, for two seconds released about every millisecond: green's waits, and
    /// the share of its packets sent.
    fn overload(scheduler: AbeScheduler) -> (Vec<Duration>, f64) {
        let mut shaper = Shaper::new(10_000, settings(scheduler), at_us(0));
        shaper.set_lane(Colour::Green, LaneId(0));
        shaper.set_lane(Colour::Blue, LaneId(1));
        let (mut out, mut stale) = (Vec::new(), 0);
        let mut green_sent = 0;
        for us in (0..2_000_000).step_by(100) {
            let now = at_us(us);
            if us % 1100 == 0 {
                let _ = shaper.enqueue(datagram(1426, 0), Colour::Blue, 1426, Duration::ZERO, now);
            }
            if us % 2000 == 0
                && shaper
                    .enqueue(datagram(200, 1), Colour::Green, 1426, Duration::ZERO, now)
                    .is_ok()
            {
                green_sent += 1;
            }
            // Every millisecond, as the timer fires, 0.9 ms after green arrived, but
            // one wake-up in seven comes a millisecond later still.
            if us % 1000 == 900 && us / 1000 % 7 != 3 {
                shaper.release(now, &mut out, &mut stale);
            }
        }
        let waits = out
            .iter()
            .filter(|r| r.colour == Colour::Green)
            .map(|r| r.waited)
            .collect();
        (waits, (green_sent - stale) as f64 / 1000.0)
    }

    #[test]
    fn under_overload_dsd_sends_green_within_its_delay_where_fifo_makes_it_queue() {
        let (dsd_waits, dsd_share) = overload(AbeScheduler::Dsd);
        let (fifo_waits, fifo_share) = overload(AbeScheduler::Fifo);
        let max = |w: &[Duration]| w.iter().max().copied().unwrap_or_default();
        let mean = |w: &[Duration]| w.iter().sum::<Duration>() / w.len().max(1) as u32;
        eprintln!(
            "dsd: green max {:?} mean {:?} sent {dsd_share}; fifo: max {:?} mean {:?} sent {fifo_share}",
            max(&dsd_waits),
            mean(&dsd_waits),
            max(&fifo_waits),
            mean(&fifo_waits)
        );
        // Within the 10 ms green delay in real time, however late the wake-ups.
        assert!(max(&dsd_waits) <= AbeSettings::default().green_delay);
        assert!(mean(&fifo_waits) > Duration::from_millis(10));
        // The overload is blue's, which does not slow down: green loses packets either
        // way, and under DSD no fewer than as blue (ABE's promise to blue).
        assert!(
            dsd_share > 0.3,
            "green got {dsd_share} of its packets through"
        );
        assert!(dsd_share <= fifo_share);
    }

    /// Offers a 10 Mbit/s uplink's shaper, fitted to a site whose longest lane is
    /// `longest_one_way` away, 11 Mbit/s of blue for a second: the virtual queue grows
    /// past CoDel's target. Answers the milliseconds of the drops and why.
    fn drops_under_overload(longest_one_way: Duration) -> Vec<(u64, ShapeDrop)> {
        let mut shaper = Shaper::new(10_000, settings(AbeScheduler::Dsd), at_us(0));
        shaper.set_lane(Colour::Blue, LaneId(0));
        shaper.fit_paths(longest_one_way);
        let (mut out, mut stale) = (Vec::new(), 0);
        let mut drops = Vec::new();
        for i in 0..1000u64 {
            let now = at_us(i * 1000);
            if let Err(why) =
                shaper.enqueue(datagram(1300, 0), Colour::Blue, 1426, Duration::ZERO, now)
            {
                drops.push((i, why));
            }
            shaper.release(now, &mut out, &mut stale);
            let (wait, _) = shaper.dsd.virtual_backlog(now);
            assert!(
                wait <= aqm::MAX_SOJOURN + Duration::from_millis(2),
                "{wait:?}"
            );
        }
        drops
    }

    #[test]
    fn a_standing_queue_in_flat_best_effort_is_dropped_from_after_codels_interval() {
        let drops = drops_under_overload(Duration::ZERO);
        let first = drops.first().expect("some packet dropped");
        assert!(first.0 >= 100, "dropped before an interval: {drops:?}");
        assert_eq!(first.1, ShapeDrop::QueueDelay);
    }

    #[test]
    fn a_shaper_of_a_site_with_a_long_lane_lets_a_queue_stand_for_that_lanes_round_trip() {
        let ms = Duration::from_millis;
        let short = drops_under_overload(Duration::ZERO);
        // Lanes 10 ms away: CoDel's defaults, the same drops.
        assert_eq!(drops_under_overload(ms(10)), short);
        // A lane 60 ms away: the interval is 170 ms and the target 8.5 ms.
        let long = drops_under_overload(ms(60));
        let (first, why) = long.first().copied().expect("some packet dropped");
        assert_eq!(why, ShapeDrop::QueueDelay);
        assert!(
            first >= 170 && first > short[0].0 + 70,
            "{short:?} {long:?}"
        );
    }

    #[test]
    fn green_is_refused_when_what_must_leave_first_fills_its_delay() {
        let green = |shaper: &mut Shaper| {
            shaper.enqueue(
                datagram(1000, 9),
                Colour::Green,
                1426,
                Duration::ZERO,
                at_us(0),
            )
        };
        // 9.5 Mbit/s shaped: 10.7 kB leave in the 9 ms DSD gives green (its 10 ms
        // less the timer's millisecond). The blue packets that cannot wait for it
        // (deadlines before 8.1 ms, their slack counted) are 6 of 1500 wire bytes:
        // with the first green's 1074, 10.1 kB fit; with a second one's, 11.1 kB do
        // not.
        let mut shaper = Shaper::new(10_000, settings(AbeScheduler::Dsd), at_us(0));
        shaper.set_lane(Colour::Blue, LaneId(0));
        queue_blue(&mut shaper, 20);
        assert_eq!(green(&mut shaper), Ok(()));
        assert_eq!(green(&mut shaper), Err(ShapeDrop::GreenAcceptance));
        // Under fifo it is queued like any packet.
        let mut fifo = Shaper::new(10_000, settings(AbeScheduler::Fifo), at_us(0));
        queue_blue(&mut fifo, 20);
        assert_eq!(green(&mut fifo), Ok(()));
        assert_eq!(green(&mut fifo), Ok(()));
    }
}
