//! One lane over one emulated uplink, packet by packet, for the lane window's tests:
//! an exit's lane sending a download (the entry acknowledges a lone packet after its
//! acknowledgement delay; the exit acknowledges the entry's at once). The sender
//! first idles for a while if asked (a keep-alive every 100 ms), then always has data and
//! sends whenever its [`LaneWindow`] has room, a
//! delay line each way whose delay varies uniformly per packet without reordering
//! (as `braid-linkemu --jitter-ms` and a modem's varying queue do), random loss
//! before it, and a bottleneck of fixed rate with a drop-tail buffer. The receiver
//! acknowledges every second packet at once. A packet counts as lost once three
//! packets sent after it were acknowledged, as QUIC's packet threshold does. A
//! virtual clock jumps from event to event; a seeded generator draws delays and
//! losses, so a run is reproducible.

use std::collections::VecDeque;
use std::time::Duration;

use super::LaneWindow;
use crate::core::engine::{KEEP_ALIVE, PEER_ACK_DELAY};
use crate::core::sched::sim::Rng;
use crate::core::time::Instant;

const MTU: u64 = 1200;

/// An uplink as the lane's packets meet it.
#[derive(Debug, Clone, Copy)]
pub struct Path {
    pub rate_bps: u64,
    /// One-way delay without variation.
    pub one_way: Duration,
    /// Each packet is held up to this much longer each way, uniformly at random, but
    /// never leaves before the one before it.
    pub jitter: Duration,
    /// Per mille of packets lost each way, at random.
    pub loss_per_mille: u64,
    /// The bottleneck's buffer, as time at its rate.
    pub buffer: Duration,
}

impl Path {
    pub fn steady(rate_mbps: u64, one_way_ms: u64) -> Path {
        Path {
            rate_bps: rate_mbps * 1_000_000,
            one_way: Duration::from_millis(one_way_ms),
            jitter: Duration::ZERO,
            loss_per_mille: 0,
            buffer: Duration::from_millis(50),
        }
    }
}

/// What a run measured over its second half, after the lane settled.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// What the bottleneck delivered, as a share of its rate.
    pub utilisation: f64,
    /// The bottleneck's mean queue, as time at its rate.
    pub mean_queue: Duration,
    /// Packets the bottleneck's buffer dropped.
    pub overflows: u64,
    /// Packets the bottleneck's buffer dropped in the first half: slow start's
    /// overshoot.
    pub start_overflows: u64,
    /// The delay variation the lane judged its queue with at the end.
    pub variation: Duration,
}

/// How a run's lane knows its uplink: what its configuration declares, and how long
/// it idles before it has data to send.
#[derive(Debug, Clone, Copy, Default)]
pub struct Start {
    pub declared: Duration,
    pub idle: Duration,
    /// The lane's slow start already ended at this window (a loss or a cut in its
    /// first round trips, as the sending gateway's warm-up and the inner flows'
    /// bursts make them in the testbed).
    pub left_slow_start_at: Option<u64>,
}

/// A delay line that keeps order: each packet leaves no earlier than the one before.
struct DelayLine {
    base: Duration,
    jitter: Duration,
    last: Instant,
}

impl DelayLine {
    fn release(&mut self, now: Instant, rng: &mut Rng) -> Instant {
        let extra = Duration::from_nanos(rng.next(self.jitter.as_nanos() as u64 + 1));
        self.last = self.last.max(now + self.base + extra);
        self.last
    }
}

/// Runs a lane over `path` for `seconds` of virtual time, loaded from the start.
pub fn run(path: Path, seconds: u64, seed: u64) -> Outcome {
    run_from(path, Start::default(), seconds, seed)
}

/// Runs a lane over `path` whose uplink's configuration declares a delay variation
/// of `spread` each way.
pub fn run_declaring(path: Path, spread: Duration, seconds: u64, seed: u64) -> Outcome {
    let start = Start {
        declared: spread,
        ..Start::default()
    };
    run_from(path, start, seconds, seed)
}

/// Runs a lane over `path` from `start` for `seconds` of virtual time, the idle
/// time included; the outcome measures the second half.
pub fn run_from(path: Path, start: Start, seconds: u64, seed: u64) -> Outcome {
    let mut rng = Rng(seed | 1);
    let mut window = LaneWindow::new(14_720, MTU as u16, Instant::ZERO);
    window.set_delay_variation(start.declared);
    if let Some(left) = start.left_slow_start_at {
        (window.window, window.ssthresh) = (left, left);
        // With the variation already in force: not a slow start to begin again.
        window.variation_in_force = start.declared;
    }
    let loaded_at = Instant::ZERO + start.idle;
    let serialise = Duration::from_nanos(MTU * 8 * 1_000_000_000 / path.rate_bps);
    let buffer_packets = (path.buffer.as_nanos() / serialise.as_nanos()).max(1) as usize;
    let mut forward = DelayLine {
        base: path.one_way,
        jitter: path.jitter,
        last: Instant::ZERO,
    };
    let mut back = DelayLine {
        base: path.one_way,
        jitter: path.jitter,
        last: Instant::ZERO,
    };
    // Packets in flight, by number: when sent, and whether acknowledged or lost.
    let mut sent: VecDeque<(Instant, bool)> = VecDeque::new();
    let mut first_unsettled = 0u64;
    let mut next_number = 0u64;
    let mut in_flight = 0u64;
    // Packets on their way to the bottleneck (arrival, number), at it (number), and
    // acknowledgements on their way back (arrival, the numbers they acknowledge).
    let mut to_bottleneck: VecDeque<(Instant, u64)> = VecDeque::new();
    let mut bottleneck: VecDeque<u64> = VecDeque::new();
    let mut bottleneck_free = Instant::ZERO;
    let mut acks: VecDeque<(Instant, Vec<u64>)> = VecDeque::new();
    let mut unacked_at_receiver: Vec<u64> = Vec::new();
    let (mut srtt, mut min_rtt) = (None::<Duration>, Duration::MAX);
    let half = Instant::ZERO + Duration::from_secs(seconds) / 2;
    let end = Instant::ZERO + Duration::from_secs(seconds);
    let (mut delivered, mut queue_integral) = (0u64, 0u128);
    let (mut overflows, mut start_overflows) = (0u64, 0u64);
    let mut now = Instant::ZERO;
    let mut largest_acked = None::<u64>;
    let mut next_send = Instant::ZERO;
    while now < end {
        // Send while the window has room, paced as quinn paces: a window and a
        // quarter per smoothed round trip; while idle, a keep-alive every 100 ms.
        while in_flight + MTU <= window.window() && next_send <= now {
            let rtt = srtt.unwrap_or(Duration::from_millis(100));
            let rate = u128::from(window.window()) * 5 / 4;
            let gap = rtt.as_nanos() * u128::from(MTU) / rate.max(1);
            next_send = if now < loaded_at {
                (now + KEEP_ALIVE).min(loaded_at)
            } else {
                now + Duration::from_nanos(gap as u64)
            };
            window.on_sent(now);
            let number = next_number;
            next_number += 1;
            sent.push_back((now, false));
            in_flight += MTU;
            if rng.next(1000) >= path.loss_per_mille {
                to_bottleneck.push_back((forward.release(now, &mut rng), number));
            }
        }
        // The next event: a packet reaching the bottleneck, leaving it, or an ack.
        let room = in_flight + MTU <= window.window();
        let next = [
            room.then_some(next_send),
            to_bottleneck.front().map(|&(t, _)| t),
            (!bottleneck.is_empty()).then_some(bottleneck_free),
            acks.front().map(|(t, _)| *t),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(end);
        let step = next.max(now);
        if step > half {
            let queued = bottleneck.len() as u128 * serialise.as_nanos();
            queue_integral += queued * step.saturating_since(now.max(half)).as_nanos();
        }
        now = step;
        while to_bottleneck.front().is_some_and(|&(t, _)| t <= now) {
            let Some((_, number)) = to_bottleneck.pop_front() else {
                break;
            };
            if bottleneck.len() >= buffer_packets {
                overflows += u64::from(now > half);
                start_overflows += u64::from(now <= half);
                continue;
            }
            if bottleneck.is_empty() {
                bottleneck_free = now + serialise;
            }
            bottleneck.push_back(number);
        }
        while !bottleneck.is_empty() && bottleneck_free <= now {
            let Some(number) = bottleneck.pop_front() else {
                break;
            };
            if now > half {
                delivered += MTU;
            }
            let departed = bottleneck_free;
            bottleneck_free = departed + serialise;
            unacked_at_receiver.push(number);
            // Every second packet is acknowledged, a keep-alive after the peer's
            // acknowledgement delay; what a lost acknowledgement carried, the next
            // carries again (QUIC acknowledges ranges).
            let lone = departed < loaded_at;
            if (lone || unacked_at_receiver.len().is_multiple_of(2))
                && rng.next(1000) >= path.loss_per_mille
            {
                let numbers = std::mem::take(&mut unacked_at_receiver);
                let at = if lone {
                    departed + PEER_ACK_DELAY
                } else {
                    departed
                };
                acks.push_back((back.release(at, &mut rng), numbers));
            }
        }
        while acks.front().is_some_and(|(t, _)| *t <= now) {
            let Some((_, numbers)) = acks.pop_front() else {
                break;
            };
            for number in numbers {
                let Some(i) = number.checked_sub(first_unsettled) else {
                    continue;
                };
                let Some(entry) = sent.get_mut(i as usize) else {
                    continue;
                };
                if entry.1 {
                    continue;
                }
                entry.1 = true;
                in_flight -= MTU;
                let sample = now.saturating_since(entry.0);
                min_rtt = min_rtt.min(sample);
                let s = srtt.map_or(sample, |s| (s * 7 + sample) / 8);
                srtt = Some(s);
                window.on_ack(now, entry.0, MTU, entry.0 < loaded_at, s, min_rtt);
                largest_acked = largest_acked.max(Some(number));
            }
            // Packets three or more below the largest acknowledged are lost.
            let Some(largest) = largest_acked else {
                continue;
            };
            while first_unsettled + 3 <= largest {
                let Some((sent_at, acked)) = sent.pop_front() else {
                    break;
                };
                first_unsettled += 1;
                if !acked {
                    in_flight -= MTU;
                    window.on_loss(now, sent_at, MTU, false);
                }
            }
        }
    }
    let measured = end.saturating_since(half);
    Outcome {
        utilisation: delivered as f64 * 8.0 / measured.as_secs_f64() / path.rate_bps as f64,
        mean_queue: Duration::from_nanos((queue_integral / measured.as_nanos()) as u64),
        overflows,
        start_overflows,
        variation: window.delay_variation(),
    }
}
