//! quinn's congestion-control interface around the core's [`LaneWindow`]: the lanes'
//! delay-capped NewReno (see `core/lane_cc/` for why).

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant as StdInstant};

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};

use crate::core::lane_cc::LaneWindow;
use crate::core::time::Instant;

/// Initial window: quinn's default (10 packets of 1200 bytes, at least 14 720 bytes).
const INITIAL_WINDOW: u64 = 14_720;

/// What the configuration says of a lane's uplink: its rate in the lane's sending
/// direction and how much its delay varies by itself. The entry knows both from its
/// configuration before the lane opens, the exit only from the lane's hello, after
/// the handshake: so they are shared with the lane's controller rather than given to
/// it when quinn builds it.
#[derive(Debug, Default)]
pub struct KnownUplink {
    /// Bytes per second; 0 while unknown.
    bytes_per_second: AtomicU64,
    /// The one-way delay's variation, in microseconds; 0 while none is declared.
    delay_variation_us: AtomicU64,
    /// The variation the lane's controller judges its queue with (declared, or else
    /// learned), in microseconds, for the engine (`LaneSample::delay_variation`).
    variation_in_force_us: AtomicU64,
    /// What this end learned of the variation itself, in microseconds, for the
    /// engine to report to the peer (`LaneSample::learned_variation`).
    learned_variation_us: AtomicU64,
    /// What the peer's end reported it learned, in microseconds.
    peer_variation_us: AtomicU64,
}

impl KnownUplink {
    pub fn new(kbps: Option<u64>, delay_variation_ms: Option<u64>) -> Arc<KnownUplink> {
        let uplink = Arc::new(KnownUplink::default());
        uplink.set(kbps, delay_variation_ms);
        uplink
    }

    pub fn set(&self, kbps: Option<u64>, delay_variation_ms: Option<u64>) {
        let bytes = kbps.unwrap_or(0).saturating_mul(1000 / 8);
        self.bytes_per_second.store(bytes, Ordering::Relaxed);
        let micros = delay_variation_ms.unwrap_or(0).saturating_mul(1000);
        self.delay_variation_us.store(micros, Ordering::Relaxed);
    }

    fn rate(&self) -> Option<u64> {
        Some(self.bytes_per_second.load(Ordering::Relaxed)).filter(|&b| b > 0)
    }

    fn delay_variation(&self) -> Duration {
        micros(&self.delay_variation_us)
    }

    /// The delay variation the lane's controller judges its queue with.
    pub fn variation_in_force(&self) -> Duration {
        micros(&self.variation_in_force_us)
    }

    /// The delay variation this end learned itself.
    pub fn learned_variation(&self) -> Duration {
        micros(&self.learned_variation_us)
    }

    /// The peer's end reports it learned that the delay varies by `spread`.
    pub fn set_peer_variation(&self, spread: Duration) {
        store_micros(&self.peer_variation_us, spread);
    }
}

fn micros(value: &AtomicU64) -> Duration {
    Duration::from_micros(value.load(Ordering::Relaxed))
}

/// Stores `d` in microseconds where it changed: the controller publishes on every
/// acknowledgement, and a store would dirty a cache line the driver's thread reads.
fn store_micros(value: &AtomicU64, d: Duration) {
    let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    if us != value.load(Ordering::Relaxed) {
        value.store(us, Ordering::Relaxed);
    }
}

/// Builds the [`LaneController`] of one lane's connection.
#[derive(Debug, Default)]
pub struct LaneControllerFactory {
    pub uplink: Arc<KnownUplink>,
}

impl ControllerFactory for LaneControllerFactory {
    fn build(self: Arc<Self>, now: StdInstant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(LaneController {
            origin: now,
            window: LaneWindow::new(INITIAL_WINDOW, current_mtu, Instant::ZERO),
            uplink: self.uplink.clone(),
            started_at_rate: false,
        })
    }
}

#[derive(Debug, Clone)]
pub struct LaneController {
    /// quinn's instants are converted to the core's, counted from here.
    origin: StdInstant,
    window: LaneWindow,
    uplink: Arc<KnownUplink>,
    /// The window has started at the uplink's rate: once, when it becomes known.
    started_at_rate: bool,
}

impl LaneController {
    fn at(&self, t: StdInstant) -> Instant {
        let nanos = t.saturating_duration_since(self.origin).as_nanos();
        Instant::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

impl Controller for LaneController {
    fn on_sent(&mut self, now: StdInstant, _bytes: u64, _last_packet_number: u64) {
        let now = self.at(now);
        self.window.on_sent(now);
    }

    fn on_ack(
        &mut self,
        now: StdInstant,
        sent: StdInstant,
        bytes: u64,
        app_limited: bool,
        rtt: &quinn_proto::RttEstimator,
    ) {
        let (now, sent) = (self.at(now), self.at(sent));
        if !self.started_at_rate
            && let Some(rate) = self.uplink.rate()
        {
            self.window.start_at_rate(rate, now, sent, rtt.min());
            self.started_at_rate = true;
        }
        self.window
            .set_delay_variation(self.uplink.delay_variation());
        self.window
            .set_peer_variation(micros(&self.uplink.peer_variation_us));
        self.window
            .on_ack(now, sent, bytes, app_limited, rtt.get(), rtt.min());
        store_micros(
            &self.uplink.variation_in_force_us,
            self.window.delay_variation(),
        );
        store_micros(
            &self.uplink.learned_variation_us,
            self.window.learned_variation(),
        );
    }

    fn on_congestion_event(
        &mut self,
        now: StdInstant,
        sent: StdInstant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        let (now, sent) = (self.at(now), self.at(sent));
        self.window
            .on_loss(now, sent, lost_bytes, is_persistent_congestion);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.window.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        self.window.window()
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = ControllerMetrics::default();
        m.congestion_window = self.window.window();
        m.ssthresh = Some(self.window.ssthresh());
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        self.window.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}
