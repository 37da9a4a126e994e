//! Duplicate Scheduling with Deadlines (Hurley et al., "ABE: Providing a Low-Delay
//! Service within Best Effort", Section 3) for one uplink of known rate.
//!
//! Contract: packets of both colours are handed in with [`Dsd::enqueue`] and taken
//! out with [`Dsd::dequeue`] whenever the uplink can send the next one (the caller
//! shapes the uplink to `rate_bps`). A duplicate of every packet enters a virtual
//! drop-tail FIFO of `buffer_bytes` served at the rate, as flat best effort would
//! serve it: a blue packet is dropped exactly when its duplicate is, and otherwise
//! gets the time its duplicate would start service as its deadline. A green packet
//! must leave within `green_delay` of its arrival: it is refused if the green
//! acceptance test says it cannot, and dropped if it goes stale. When both heads can
//! wait for the other, green goes first with probability `g`, which
//! [`Dsd::poll_control`] adjusts every `control_interval` by the paper's control law so
//! that green gets no more throughput than it would as blue. Pure: time is an
//! argument and the coin is a seeded generator.
//!
//! Deadlines are latest start times. A green packet's is `arrival + green_delay -
//! its transmission time`, so that it has left when `green_delay` is up; with it, the
//! serve order of the paper's Figure 2 example is the one its text gives for both
//! g = 1 and g = 0 (the tests below).
//!
//! Two additions. A green packet whose duplicate the virtual FIFO refuses is dropped
//! too, so that green traffic never gets a packet through that flat best effort would
//! have dropped. And a blue packet may start up to `blue_slack_bytes`' transmission
//! time after its duplicate would (the shaper gives one full-size packet's): the
//! paper's packets are all of one size, but a small green packet in a queue longer
//! than `green_delay` otherwise never passes. The blue packet whose duplicate starts
//! just before green's deadline ends after it, so the acceptance test refuses green,
//! and the blue packets behind have no slack to let it go first: a green ping behind
//! bulk downloads was refused every time. The same bound holds between any
//! packet-by-packet scheduler and the fluid one it follows (PGPS against GPS), and it
//! costs blue no throughput; accepted green uses the slack up until the duplicates of
//! green packets, already gone, reach the head of the virtual FIFO and give it back.

use std::collections::VecDeque;
use std::time::Duration;

use super::lane::Colour;
use super::time::Instant;

/// The control law's virtual base RTT (the paper's 20 ms): small, which favours blue.
const BASE_RTT: Duration = Duration::from_millis(20);
/// Green may get this fraction less than blue before g falls (the paper's κ,
/// "slightly larger than 1").
const TARGET_RATIO: f64 = 1.1;
/// The control law's gain α and the sigmoid's slope K.
const GAIN: f64 = 0.5;
const SLOPE: f64 = 2.0;

/// Why DSD dropped a packet: `abe_green_drops_total{reason}` for green, and blue's
/// drops are flat best effort's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DsdDrop {
    /// The virtual FIFO was full: flat best effort would have dropped it too.
    BufferFull,
    /// Green that could not have left within the delay bound.
    Acceptance,
    /// Green that waited until it could no longer leave within the delay bound.
    Stale,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DsdConfig {
    pub rate_bps: u64,
    pub buffer_bytes: u64,
    /// A blue packet's deadline is its duplicate's start plus the time to send this
    /// many bytes (zero: the paper's DSD).
    pub blue_slack_bytes: u64,
    pub green_delay: Duration,
    pub control_interval: Duration,
}

/// What DSD did, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DsdCounters {
    /// Packets sent, by `Colour as usize`.
    pub sent: [u64; 2],
    pub blue_drops: u64,
    pub green_acceptance_drops: u64,
    pub green_stale_drops: u64,
}

#[derive(Debug)]
struct Queued<P> {
    packet: P,
    len: u64,
    arrived: Instant,
    /// The latest instant its transmission may start.
    deadline: Instant,
    /// Bytes of its queue enqueued up to and including it (blue: to sum the bytes of
    /// packets with deadlines up to an instant by binary search).
    through: u64,
}

/// What one colour met during a control interval.
#[derive(Debug, Clone, Copy, Default)]
struct Interval {
    arrived: u64,
    dropped: u64,
    sent: u64,
    waited: Duration,
}

pub struct Dsd<P> {
    config: DsdConfig,
    /// When the virtual FIFO has served every duplicate it holds.
    virtual_idle_at: Instant,
    blue: VecDeque<Queued<P>>,
    green: VecDeque<Queued<P>>,
    /// Bytes ever enqueued as blue; blue bytes dequeued are `blue_in - blue bytes queued`.
    blue_in: u64,
    blue_bytes: u64,
    green_bytes: u64,
    /// g: the probability that green goes first when both heads can wait.
    green_bias: f64,
    rng: u64,
    next_control: Instant,
    interval: [Interval; 2],
    counters: DsdCounters,
    /// Time the uplink lost while packets waited ([`Dsd::uplink_lost`]): DSD's clock,
    /// in which arrivals, deadlines and the virtual FIFO are kept, runs this far
    /// behind the caller's.
    lost: Duration,
}

impl<P> Dsd<P> {
    pub fn new(config: DsdConfig, now: Instant) -> Dsd<P> {
        Dsd {
            config,
            virtual_idle_at: now,
            blue: VecDeque::new(),
            green: VecDeque::new(),
            blue_in: 0,
            blue_bytes: 0,
            green_bytes: 0,
            // The paper starts with g = 1.
            green_bias: 1.0,
            rng: 0x9e37_79b9_7f4a_7c15,
            next_control: now.saturating_add(config.control_interval),
            interval: [Interval::default(); 2],
            counters: DsdCounters::default(),
            lost: Duration::ZERO,
        }
    }

    /// The uplink sent nothing for `time` while packets waited (its sender woke up
    /// late): the virtual FIFO, which served on, must wait as long, or every deadline
    /// would come that much too early for the real queue, which now holds more than
    /// the virtual one. Blue would then always be unable to wait, green refused or
    /// stale, and the AQM would judge a queue shorter than the real one. Green's
    /// deadlines stay where they were in the caller's time: its delay bound is the
    /// application's, not the uplink's (the green queue is short: what leaves within
    /// `green_delay`).
    pub fn uplink_lost(&mut self, time: Duration) {
        self.lost += time;
        for green in &mut self.green {
            green.deadline = green.deadline - time;
        }
    }

    /// `now` on DSD's clock.
    fn link_time(&self, now: Instant) -> Instant {
        now - self.lost
    }

    /// Time to send `len` bytes at the uplink's rate.
    pub fn transmission_time(&self, len: u64) -> Duration {
        let nanos = u128::from(len) * 8 * 1_000_000_000 / u128::from(self.config.rate_bps.max(1));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Bytes the uplink sends in `time`.
    fn bytes_in(&self, time: Duration) -> u64 {
        let bytes = time.as_nanos() * u128::from(self.config.rate_bps) / 8 / 1_000_000_000;
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }

    /// Takes a packet of `len` bytes and `colour`, or gives it back with the reason it
    /// was dropped.
    pub fn enqueue(
        &mut self,
        packet: P,
        len: u64,
        colour: Colour,
        now: Instant,
    ) -> Result<(), (P, DsdDrop)> {
        let now = self.link_time(now);
        self.interval[colour as usize].arrived += 1;
        // The duplicate, in the virtual FIFO.
        let starts = self.virtual_idle_at.max(now);
        let backlog = self.bytes_in(starts.saturating_since(now));
        let verdict = if backlog + len > self.config.buffer_bytes {
            Err(DsdDrop::BufferFull)
        } else {
            self.virtual_idle_at = starts + self.transmission_time(len);
            match colour {
                Colour::Blue => Ok(starts + self.transmission_time(self.config.blue_slack_bytes)),
                Colour::Green => self.accept_green(len, now),
            }
        };
        let deadline = match verdict {
            Ok(deadline) => deadline,
            Err(reason) => {
                self.count_drop(colour, reason);
                return Err((packet, reason));
            }
        };
        let queued = |through| Queued {
            packet,
            len,
            arrived: now,
            deadline,
            through,
        };
        match colour {
            Colour::Blue => {
                self.blue_in += len;
                self.blue_bytes += len;
                self.blue.push_back(queued(self.blue_in));
            }
            Colour::Green => {
                self.green_bytes += len;
                self.green.push_back(queued(0));
            }
        }
        Ok(())
    }

    /// The green acceptance test: what must leave before a green packet of `len`
    /// bytes arriving `now` (every queued green, and the blue whose deadlines come no
    /// later than its own) and the packet itself fit in `green_delay` at the rate.
    /// Its deadline if it passes.
    fn accept_green(&self, len: u64, now: Instant) -> Result<Instant, DsdDrop> {
        let leave_by = now.saturating_add(self.config.green_delay);
        let deadline = leave_by - self.transmission_time(len);
        let blue_before = self.blue.partition_point(|q| q.deadline <= deadline);
        let blue_ahead = match blue_before.checked_sub(1) {
            Some(last) => self.blue[last].through - (self.blue_in - self.blue_bytes),
            None => 0,
        };
        if self.green_bytes + blue_ahead + len > self.bytes_in(self.config.green_delay) {
            Err(DsdDrop::Acceptance)
        } else {
            Ok(deadline)
        }
    }

    fn count_drop(&mut self, colour: Colour, reason: DsdDrop) {
        self.interval[colour as usize].dropped += 1;
        let counter = match (colour, reason) {
            (Colour::Blue, _) => &mut self.counters.blue_drops,
            // Refused at arrival either way: a full buffer leaves no room to leave in time.
            (Colour::Green, DsdDrop::Acceptance | DsdDrop::BufferFull) => {
                &mut self.counters.green_acceptance_drops
            }
            (Colour::Green, DsdDrop::Stale) => &mut self.counters.green_stale_drops,
        };
        *counter += 1;
    }

    /// The packet the uplink should send `now`, when it is free, with its colour;
    /// stale green packets are dropped on the way (and handed to `dropped`): those
    /// past their deadline on DSD's clock, and those that `late` says would leave
    /// after `green_delay` in real time (a caller that sends when its timer fires
    /// sends them later than `now`). Either way they count as dropped, not served,
    /// for the control law.
    pub fn dequeue(
        &mut self,
        now: Instant,
        late: impl Fn(&P) -> bool,
        mut dropped: impl FnMut(P),
    ) -> Option<(P, Colour)> {
        let now = self.link_time(now);
        while self
            .green
            .front()
            .is_some_and(|g| g.deadline < now || late(&g.packet))
        {
            if let Some(stale) = self.green.pop_front() {
                self.green_bytes -= stale.len;
                self.count_drop(Colour::Green, DsdDrop::Stale);
                dropped(stale.packet);
            }
        }
        let colour = match (self.green.front(), self.blue.front()) {
            (None, None) => return None,
            (Some(_), None) => Colour::Green,
            (None, Some(_)) => Colour::Blue,
            (Some(g), Some(b)) => {
                let (green_time, blue_time) =
                    (self.transmission_time(g.len), self.transmission_time(b.len));
                let blue_cannot_wait = now + green_time > b.deadline;
                let green_cannot_wait = now + blue_time > g.deadline;
                if blue_cannot_wait {
                    Colour::Blue
                } else if green_cannot_wait || self.coin() < self.green_bias {
                    Colour::Green
                } else {
                    Colour::Blue
                }
            }
        };
        let queue = match colour {
            Colour::Green => &mut self.green,
            Colour::Blue => &mut self.blue,
        };
        let q = queue.pop_front()?;
        match colour {
            Colour::Green => self.green_bytes -= q.len,
            Colour::Blue => self.blue_bytes -= q.len,
        }
        let stats = &mut self.interval[colour as usize];
        stats.sent += 1;
        stats.waited += now.saturating_since(q.arrived);
        self.counters.sent[colour as usize] += 1;
        Some((q.packet, colour))
    }

    /// A uniform number in [0, 1) (xorshift64*).
    fn coin(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Updates g by the control law once a control interval is over; returns when it
    /// wants to be called again.
    ///
    /// Each colour's throughput is estimated as a TCP-friendly flow's (the paper's
    /// equation 1) from its loss ratio and its mean wait plus [`BASE_RTT`], as if every
    /// flow were greedy; a colour without loss counts as one loss in what arrived,
    /// so that the delay difference still decides. Then
    /// `g <- (1 - α) g + α / (1 + (κ λg / λb)^K)`.
    pub fn poll_control(&mut self, now: Instant) -> Instant {
        if now < self.next_control {
            return self.next_control;
        }
        let [green, blue] = [Colour::Green, Colour::Blue].map(|c| self.interval[c as usize]);
        if green.arrived > 0 && blue.arrived > 0 {
            let ratio = tcp_friendly_rate(green) / tcp_friendly_rate(blue);
            let target = 1.0 / (1.0 + (TARGET_RATIO * ratio).powf(SLOPE));
            self.green_bias = (1.0 - GAIN) * self.green_bias + GAIN * target;
        }
        self.interval = [Interval::default(); 2];
        self.next_control = now.saturating_add(self.config.control_interval);
        self.next_control
    }

    /// g, the probability that green goes first when both heads can wait.
    pub fn green_bias(&self) -> f64 {
        self.green_bias
    }

    pub fn counters(&self) -> DsdCounters {
        self.counters
    }

    /// Bytes queued, both colours.
    pub fn queued_bytes(&self) -> u64 {
        self.blue_bytes + self.green_bytes
    }

    /// How long a packet arriving `now` would wait in the virtual FIFO, and the bytes
    /// ahead of it there: flat best effort's queue, which an AQM in front manages.
    pub fn virtual_backlog(&self, now: Instant) -> (Duration, u64) {
        let now = self.link_time(now);
        let wait = self.virtual_idle_at.saturating_since(now);
        (wait, self.bytes_in(wait))
    }

    /// Serves at `rate_bps` from now on (the uplink's configured rate changed).
    pub fn set_rate(&mut self, rate_bps: u64) {
        self.config.rate_bps = rate_bps;
    }

    #[cfg(test)]
    fn set_green_bias(&mut self, g: f64) {
        self.green_bias = g;
    }
}

/// Equation 1 of the paper (packets per second, for unit packet size) for a colour's
/// interval: `1 / (R sqrt(2p/3) + 4R (3 sqrt(3p/8)) p (1 + 32 p²))`.
fn tcp_friendly_rate(stats: Interval) -> f64 {
    let p = (stats.dropped.max(1) as f64 / stats.arrived.max(1) as f64).min(1.0);
    let wait = if stats.sent > 0 {
        stats.waited / u32::try_from(stats.sent).unwrap_or(u32::MAX)
    } else {
        Duration::ZERO
    };
    let r = (BASE_RTT + wait).as_secs_f64();
    let denominator = r * (2.0 * p / 3.0).sqrt()
        + 4.0 * r * (3.0 * (3.0 * p / 8.0).sqrt()) * p * (1.0 + 32.0 * p * p);
    1.0 / denominator
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Figure 2's units: 1000-byte packets, one per millisecond (8 Mbit/s), and a
    /// green delay of 3 packet times, with a buffer of `buffer_bytes`.
    fn in_packet_times(buffer_bytes: u64) -> Dsd<&'static str> {
        let config = DsdConfig {
            rate_bps: 8_000_000,
            buffer_bytes,
            blue_slack_bytes: 0,
            green_delay: Duration::from_millis(3),
            control_interval: Duration::from_millis(500),
        };
        Dsd::new(config, Instant::ZERO)
    }

    /// Figure 2's arrivals, with its buffer of 7 packets.
    fn figure2() -> Dsd<&'static str> {
        let mut dsd = in_packet_times(7000);
        for (name, colour) in [
            ("B1", Colour::Blue),
            ("G1", Colour::Green),
            ("B2", Colour::Blue),
            ("B3", Colour::Blue),
            ("G2", Colour::Green),
            ("B4", Colour::Blue),
            ("B5", Colour::Blue),
            ("B6", Colour::Blue),
        ] {
            let verdict = dsd.enqueue(name, 1000, colour, Instant::ZERO);
            let expected = match name {
                // Queued: G1, B2, B3 and B1 = 4 packets to leave within 3 + 1.
                "G2" => Err(("G2", DsdDrop::Acceptance)),
                // The virtual queue holds B1 G1 B2 B3 G2 B4 B5: Buff = 7.
                "B6" => Err(("B6", DsdDrop::BufferFull)),
                _ => Ok(()),
            };
            assert_eq!(verdict, expected, "{name}");
        }
        dsd
    }

    fn serve(dsd: &mut Dsd<&'static str>) -> Vec<&'static str> {
        (0..10)
            .map_while(|ms| {
                let now = Instant::from_nanos(ms * 1_000_000);
                dsd.dequeue(now, |_| false, |p| panic!("{p} went stale"))
                    .map(|(p, _)| p)
            })
            .collect()
    }

    #[test]
    fn figure_2_serves_green_first_whenever_both_can_wait_with_g_1() {
        let mut dsd = figure2();
        assert_eq!(serve(&mut dsd), ["B1", "G1", "B2", "B3", "B4", "B5"]);
    }

    #[test]
    fn figure_2_serves_blue_first_whenever_both_can_wait_with_g_0() {
        let mut dsd = figure2();
        dsd.set_green_bias(0.0);
        assert_eq!(serve(&mut dsd), ["B1", "B2", "G1", "B3", "B4", "B5"]);
    }

    #[test]
    fn a_green_packet_that_waited_too_long_is_dropped_as_stale() {
        let mut dsd = in_packet_times(100_000);
        dsd.set_green_bias(0.0);
        dsd.enqueue("G", 1000, Colour::Green, Instant::ZERO)
            .expect("accepted");
        let mut stale = Vec::new();
        // The uplink was busy for 2.5 ms: G can no longer leave within 3 ms.
        assert_eq!(
            dsd.dequeue(Instant::from_nanos(2_500_000), |_| false, |p| stale.push(p)),
            None
        );
        assert_eq!(stale, ["G"]);
        assert_eq!(dsd.counters().green_stale_drops, 1);
    }

    #[test]
    fn a_green_packet_its_caller_would_send_too_late_is_dropped_not_served() {
        let mut dsd = in_packet_times(100_000);
        for (name, colour) in [
            ("G1", Colour::Green),
            ("B", Colour::Blue),
            ("G2", Colour::Green),
        ] {
            dsd.enqueue(name, 1000, colour, Instant::ZERO)
                .expect("accepted");
        }
        // In time on DSD's clock, but the caller's wake-up would send G1 too late.
        let mut stale = Vec::new();
        assert_eq!(
            dsd.dequeue(Instant::ZERO, |p| *p == "G1", |p| stale.push(p)),
            Some(("G2", Colour::Green))
        );
        assert_eq!(stale, ["G1"]);
        assert_eq!(dsd.counters().green_stale_drops, 1);
        assert_eq!(dsd.counters().sent, [1, 0], "green, blue");
        // The control law hears of a drop and one packet served, not two served.
        let green = dsd.interval[Colour::Green as usize];
        assert_eq!((green.sent, green.dropped), (1, 1));
    }

    #[test]
    fn time_the_uplink_lost_delays_blue_deadlines_but_not_greens() {
        let ms = |t: u64| Instant::from_nanos(t * 100_000);
        let mut dsd = in_packet_times(100_000);
        dsd.enqueue("B", 1000, Colour::Blue, ms(100))
            .expect("accepted");
        dsd.enqueue("G", 1000, Colour::Green, ms(100))
            .expect("accepted");
        // At 10 ms the uplink has sent nothing for 2.5 ms: B's deadline (10 ms) moves
        // with it, but G must still have left by 13 ms, so it can no longer start.
        dsd.uplink_lost(Duration::from_micros(2_500));
        let mut stale = Vec::new();
        assert_eq!(
            dsd.dequeue(ms(125), |_| false, |p| stale.push(p)),
            Some(("B", Colour::Blue))
        );
        assert_eq!(stale, ["G"]);
        // Flat best effort's queue has not moved either: both duplicates, 2 ms.
        assert_eq!(dsd.virtual_backlog(ms(125)).0, Duration::from_millis(2));
    }

    /// Green packets of `green_len` bytes every 20 ms for 2 s behind a standing 20 ms
    /// queue of 1500-byte blue packets on a 10 Mbit/s uplink, with `blue_slack_bytes`:
    /// how many of the 100 were refused, went stale, and left in time.
    fn pings_behind_a_standing_queue(blue_slack_bytes: u64) -> (usize, u64, usize) {
        let config = DsdConfig {
            rate_bps: 10_000_000,
            buffer_bytes: 250_000,
            blue_slack_bytes,
            green_delay: Duration::from_millis(10),
            control_interval: Duration::from_millis(100),
        };
        let mut dsd: Dsd<Instant> = Dsd::new(config, Instant::ZERO);
        let blue_time = dsd.transmission_time(1500);
        let (mut refused, mut in_time) = (0, 0);
        let mut link_free_at = Instant::ZERO;
        let mut next_blue = Instant::ZERO;
        let step = Duration::from_micros(100);
        let mut now = Instant::ZERO;
        for tick in 0..20_000u64 {
            // 20 ms of blue at once, then blue at the rate: the queue stands at 20 ms.
            while next_blue <= now {
                let burst = tick == 0;
                for _ in 0..if burst { 17 } else { 1 } {
                    dsd.enqueue(now, 1500, Colour::Blue, now).expect("room");
                }
                next_blue = next_blue + blue_time;
            }
            if tick % 200 == 100 && dsd.enqueue(now, 100, Colour::Green, now).is_err() {
                refused += 1;
            }
            while link_free_at <= now {
                let Some((arrived, colour)) = dsd.dequeue(link_free_at, |_| false, drop) else {
                    break;
                };
                let len = if colour == Colour::Green { 100 } else { 1500 };
                link_free_at = link_free_at + dsd.transmission_time(len);
                if colour == Colour::Green && link_free_at <= arrived + config.green_delay {
                    in_time += 1;
                }
            }
            link_free_at = link_free_at.max(now);
            now = now + step;
        }
        (refused, dsd.counters().green_stale_drops, in_time)
    }

    #[test]
    fn a_small_green_packet_passes_a_standing_queue_of_full_size_blue_ones() {
        // The paper's DSD refuses a ping whenever the blue packet whose start falls
        // just before the ping's deadline would end after it.
        let (refused, _, _) = pings_behind_a_standing_queue(0);
        assert!(refused > 0, "none refused without slack");
        // One full-size packet of slack: every one leaves within the delay bound.
        assert_eq!(pings_behind_a_standing_queue(1574), (0, 0, 100));
    }

    #[test]
    fn the_control_law_lowers_g_while_green_would_get_more_than_blue() {
        let config = DsdConfig {
            rate_bps: 8_000_000,
            buffer_bytes: 20_000,
            blue_slack_bytes: 0,
            green_delay: Duration::from_millis(5),
            control_interval: Duration::from_millis(100),
        };
        let mut dsd: Dsd<()> = Dsd::new(config, Instant::ZERO);
        let ms = |t: u64| Instant::from_nanos(t * 1_000_000);
        let mut g = Vec::new();
        // Both colours offer the whole rate, taking turns to arrive first: the buffer
        // stays full, and green waits little while blue waits for the whole buffer.
        for t in 0..2000 {
            let first = if t % 2 == 0 {
                Colour::Green
            } else {
                Colour::Blue
            };
            for colour in [first, first.other()] {
                let _ = dsd.enqueue((), 1000, colour, ms(t));
            }
            let _ = dsd.dequeue(ms(t), |_| false, drop);
            if t % 100 == 99 {
                dsd.poll_control(ms(t + 1));
                g.push(dsd.green_bias());
            }
        }
        // Same loss, less delay: a TCP-friendly green flow would get more than a blue
        // one, so g falls from 1 and settles.
        assert!(g.windows(2).take(5).all(|w| w[1] < w[0]), "{g:?}");
        let last = g[g.len() - 1];
        assert!(last < 0.5 && (last - g[g.len() - 5]).abs() < 0.01, "{g:?}");
        let c = dsd.counters();
        assert!(
            c.sent[Colour::Green as usize] <= c.sent[Colour::Blue as usize],
            "{c:?}"
        );
    }

    /// One packet of a random run: when it arrives, its size and colour.
    #[derive(Debug, Clone)]
    struct Arrival {
        gap_us: u64,
        len: u64,
        green: bool,
    }

    fn arrivals() -> impl Strategy<Value = Vec<Arrival>> {
        prop::collection::vec(
            (0u64..1500, 40u64..1500, any::<bool>()).prop_map(|(gap_us, len, green)| Arrival {
                gap_us,
                len,
                green,
            }),
            1..400,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The paper's properties over random arrivals on a 4 Mbit/s uplink whose
        /// sender takes a packet whenever the previous one has left.
        #[test]
        fn dsd_keeps_blue_at_least_as_well_off_as_flat_best_effort(
            run in arrivals(),
            g in 0.0f64..=1.0,
            blue_slack_bytes in prop_oneof![Just(0u64), Just(1500)],
        ) {
            let config = DsdConfig {
                rate_bps: 4_000_000,
                buffer_bytes: 15_000,
                blue_slack_bytes,
                green_delay: Duration::from_millis(10),
                control_interval: Duration::from_millis(50),
            };
            let mut dsd: Dsd<usize> = Dsd::new(config, Instant::ZERO);
            dsd.set_green_bias(g);
            // Flat best effort: a drop-tail FIFO of the same size at the same rate.
            let mut flat_idle_at = Instant::ZERO;
            let mut flat_starts = Vec::new();
            let mut now = Instant::ZERO;
            let mut link_free_at = Instant::ZERO;
            let mut left = vec![None; run.len()];
            let mut dropped = vec![false; run.len()];
            let mut sent_bytes = [0u64; 2];
            let send_until = |dsd: &mut Dsd<usize>, until: Instant, link_free_at: &mut Instant,
                              left: &mut Vec<Option<Instant>>, dropped: &mut Vec<bool>,
                              sent_bytes: &mut [u64; 2]| {
                while *link_free_at <= until {
                    let at = *link_free_at;
                    match dsd.dequeue(at, |_| false, |i| dropped[i] = true) {
                        Some((i, colour)) => {
                            left[i] = Some(at);
                            sent_bytes[colour as usize] += run[i].len;
                            *link_free_at = at + dsd.transmission_time(run[i].len);
                        }
                        None => break,
                    }
                }
            };
            for (i, a) in run.iter().enumerate() {
                now = now + Duration::from_micros(a.gap_us);
                send_until(&mut dsd, now, &mut link_free_at, &mut left, &mut dropped, &mut sent_bytes);
                link_free_at = link_free_at.max(now);
                let flat_start = flat_idle_at.max(now);
                let backlog = dsd.bytes_in(flat_start.saturating_since(now));
                let flat_keeps = backlog + a.len <= config.buffer_bytes;
                if flat_keeps {
                    flat_idle_at = flat_start + dsd.transmission_time(a.len);
                }
                flat_starts.push(flat_keeps.then_some(flat_start));
                let colour = if a.green { Colour::Green } else { Colour::Blue };
                if let Err((i, reason)) = dsd.enqueue(i, a.len, colour, now) {
                    dropped[i] = true;
                    // No blue packet is dropped that flat best effort keeps.
                    prop_assert!(a.green || !flat_keeps, "blue {i} dropped ({reason:?})");
                }
                // The test keeps the queue within the buffer, and blue's slack more.
                prop_assert!(dsd.queued_bytes() <= config.buffer_bytes + blue_slack_bytes);
            }
            send_until(&mut dsd, Instant::from_nanos(u64::MAX / 2), &mut link_free_at,
                       &mut left, &mut dropped, &mut sent_bytes);
            let mut flat_green_bytes = 0;
            for (i, a) in run.iter().enumerate() {
                let arrived: Instant = Instant::from_nanos(
                    run[..=i].iter().map(|x| x.gap_us * 1000).sum());
                prop_assert!(left[i].is_some() != dropped[i], "packet {i} both or neither");
                if a.green {
                    flat_green_bytes += if flat_starts[i].is_some() { a.len } else { 0 };
                    // Every green packet leaves within the delay bound or is dropped.
                    if let Some(at) = left[i] {
                        let done = at + dsd.transmission_time(a.len);
                        prop_assert!(done <= arrived + config.green_delay, "green {i} late");
                    }
                } else if let Some(at) = left[i] {
                    // No accepted blue packet starts after its flat best-effort time
                    // and its slack.
                    let slack = dsd.transmission_time(blue_slack_bytes);
                    prop_assert!(at <= flat_starts[i].map_or(at, |t| t + slack), "blue {i} after its deadline");
                }
            }
            // Green never gets more through than the same packets would as blue.
            prop_assert!(sent_bytes[Colour::Green as usize] <= flat_green_bytes);
            let c = dsd.counters();
            let green_dropped = run.iter().zip(&dropped).filter(|(a, d)| a.green && **d).count() as u64;
            prop_assert_eq!(c.green_acceptance_drops + c.green_stale_drops, green_dropped);
        }
    }
}
