//! quinn's congestion-control interface around the core's [`LaneWindow`]: the lanes'
//! delay-capped NewReno (see `core/lane_cc/` for why).

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant as StdInstant;

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};

use crate::core::lane_cc::LaneWindow;
use crate::core::time::Instant;

/// Initial window: quinn's default (10 packets of 1200 bytes, at least 14 720 bytes).
const INITIAL_WINDOW: u64 = 14_720;

/// The rate of a lane's uplink in the lane's sending direction, once known. The
/// entry knows it from its configuration before the lane opens, the exit only from
/// the lane's hello, after the handshake: so it is shared with the lane's controller
/// rather than given to it when quinn builds it.
#[derive(Debug, Default)]
pub struct KnownRate {
    /// Bytes per second; 0 while unknown.
    bytes_per_second: AtomicU64,
}

impl KnownRate {
    pub fn new(kbps: Option<u64>) -> Arc<KnownRate> {
        let rate = Arc::new(KnownRate::default());
        rate.set(kbps);
        rate
    }

    pub fn set(&self, kbps: Option<u64>) {
        let bytes = kbps.unwrap_or(0).saturating_mul(1000 / 8);
        self.bytes_per_second.store(bytes, Ordering::Relaxed);
    }

    fn get(&self) -> Option<u64> {
        Some(self.bytes_per_second.load(Ordering::Relaxed)).filter(|&b| b > 0)
    }
}

/// Builds the [`LaneController`] of one lane's connection.
#[derive(Debug, Default)]
pub struct LaneControllerFactory {
    pub rate: Arc<KnownRate>,
}

impl ControllerFactory for LaneControllerFactory {
    fn build(self: Arc<Self>, now: StdInstant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(LaneController {
            origin: now,
            window: LaneWindow::new(INITIAL_WINDOW, current_mtu, Instant::ZERO),
            rate: Some(self.rate.clone()),
        })
    }
}

#[derive(Debug, Clone)]
pub struct LaneController {
    /// quinn's instants are converted to the core's, counted from here.
    origin: StdInstant,
    window: LaneWindow,
    /// The uplink's rate, until the window has started at it.
    rate: Option<Arc<KnownRate>>,
}

impl LaneController {
    fn at(&self, t: StdInstant) -> Instant {
        let nanos = t.saturating_duration_since(self.origin).as_nanos();
        Instant::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

impl Controller for LaneController {
    fn on_ack(
        &mut self,
        now: StdInstant,
        sent: StdInstant,
        bytes: u64,
        app_limited: bool,
        rtt: &quinn_proto::RttEstimator,
    ) {
        let (now, sent) = (self.at(now), self.at(sent));
        if let Some(rate) = self.rate.as_ref().and_then(|r| r.get()) {
            self.window.start_at_rate(rate, now, sent, rtt.min());
            self.rate = None;
        }
        self.window
            .on_ack(now, sent, bytes, app_limited, rtt.get(), rtt.min());
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
