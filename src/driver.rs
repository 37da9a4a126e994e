//! The event loop that owns the data path: reads the clock once per wake-up, feeds
//! TUN packets and lane datagrams to the engine in batches, and carries out its
//! verdicts (queue a datagram on a lane, write a packet to the TUN device, count a drop).
//!
//! Packets read from the TUN device pass their application's pacer queue (one calendar
//! for all, one timer here) before the scheduler picks their lane.
//!
//! Each lane has a send task (braid's own queue -> `send_datagram_wait`, so quinn never
//! silently discards datagrams) and a receive task (datagrams -> this loop). A lane is
//! forgotten only when its receive task says it is closed: that is the lane's last
//! message, so its id can be reused without mixing two lanes' datagrams.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::clock::Clock;
use crate::core::apps::AppIdx;
use crate::core::engine::{Admitted, DataPath, SiteIdx, TunVerdict};
use crate::core::lane::{Colour, LaneId, LaneStatus};
use crate::core::pacer::Enqueued;
use crate::core::pacing::AppPacing;
use crate::core::packet::PacketInfo;
use crate::core::stats::DropReason;
use crate::core::time::Instant;
use crate::core::wire::{DATAGRAM_HEADER_LEN, write_datagram_header};
use crate::lane::{LaneEvent, NewLane, QUINN_DATAGRAM_SEND_BUFFER};
use crate::metrics::{LaneMetrics, Metrics};
use crate::pacing::{AppStats, PacingCommand};
use crate::tun::Tun;
use prometheus::IntCounter;

/// Packets handled per wake-up before the loop looks at its other inputs again.
const BATCH: usize = 64;
/// Bytes a lane may have queued inside braid before packets for it are dropped.
const LANE_QUEUE_LIMIT: u64 = 256 * 1024;
/// Datagrams a lane's send queue holds at most (the byte limit usually binds first).
const LANE_QUEUE_PACKETS: usize = 4096;
/// Lane snapshots are refreshed from quinn at most this often.
const REFRESH_INTERVAL: Duration = Duration::from_millis(1);
/// The status of a lane that is no longer used.
const LANE_GONE: LaneStatus = LaneStatus {
    up: false,
    srtt: Duration::ZERO,
    cwnd: 0,
    fill: 0,
    max_datagram: 0,
};
/// Lane snapshots are refreshed at least this often, traffic or not.
const IDLE_REFRESH_INTERVAL: Duration = Duration::from_millis(100);
/// A lane that received nothing for this long is not scheduled: both ends send at
/// least a keep-alive every 100 ms, so silence means the path is broken, long before
/// QUIC's idle timeout closes the connection.
const LANE_STALL: Duration = Duration::from_millis(400);

/// How often per-application rates are measured and reported.
const APP_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// A packet waiting in its application's pacer queue, already a datagram but for the
/// header.
pub struct Paced {
    info: PacketInfo,
    datagram: BytesMut,
}

/// State of a lane shared between the driver and the lane's tasks.
struct LaneShared {
    /// Bytes handed to the lane's send task and not yet accepted by quinn.
    queued: AtomicU64,
    metrics: LaneMetrics,
}

/// What lane receive tasks send to the driver.
enum LaneInput {
    Datagram(LaneId, Bytes),
    Closed(LaneId),
}

struct LaneIo {
    conn: quinn::Connection,
    queue: mpsc::Sender<Bytes>,
    shared: Arc<LaneShared>,
    key: LaneKey,
    /// quinn's lost-packet count at the last refresh, to feed the metric its growth.
    lost_seen: u64,
    /// UDP datagrams quinn had received at the last refresh, and when that count last
    /// grew: the lane's liveness.
    rx_seen: u64,
    rx_progress_at: Instant,
}

/// A site's lane over one uplink in one colour: at most one is live at a time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct LaneKey {
    site: SiteIdx,
    uplink: String,
    colour: Colour,
}

pub struct Driver {
    engine: DataPath,
    metrics: Arc<Metrics>,
    clock: Clock,
    tun: Arc<Tun>,
    tun_mtu: usize,
    lanes: Vec<Option<LaneIo>>,
    live: HashMap<LaneKey, LaneId>,
    events: mpsc::Receiver<LaneEvent>,
    input_tx: mpsc::Sender<LaneInput>,
    input_rx: mpsc::Receiver<LaneInput>,
    rx_buf: BytesMut,
    last_refresh: Instant,
    /// Reordering counters by site index.
    reordered: Vec<IntCounter>,
    pacing: AppPacing<Paced>,
    app_stats: AppStats,
    commands: mpsc::Receiver<PacingCommand>,
    /// Packets the pacer released, reused between wake-ups.
    released: Vec<(SiteIdx, AppIdx, Paced)>,
}

/// What a driver is built from.
pub struct DriverParts {
    pub engine: DataPath,
    pub pacing: AppPacing<Paced>,
    pub app_stats: AppStats,
    pub metrics: Arc<Metrics>,
    pub clock: Clock,
    pub tun: Tun,
    pub tun_mtu: usize,
    pub events: mpsc::Receiver<LaneEvent>,
    pub commands: mpsc::Receiver<PacingCommand>,
}

impl Driver {
    pub fn new(parts: DriverParts) -> Driver {
        let DriverParts {
            engine,
            pacing,
            app_stats,
            metrics,
            clock,
            tun,
            tun_mtu,
            events,
            commands,
        } = parts;
        let (input_tx, input_rx) = mpsc::channel(4096);
        let reordered = engine
            .sites()
            .map(|(_, id)| metrics.reordered(id))
            .collect();
        Driver {
            engine,
            metrics,
            clock,
            tun: Arc::new(tun),
            tun_mtu,
            lanes: Vec::new(),
            live: HashMap::new(),
            events,
            input_tx,
            input_rx,
            rx_buf: BytesMut::with_capacity(256 * 1024),
            last_refresh: Instant::ZERO,
            reordered,
            pacing,
            app_stats,
            commands,
            released: Vec::new(),
        }
    }

    /// Runs until `shutdown`, then closes every lane.
    pub async fn run(mut self, shutdown: CancellationToken) {
        info!(tun = self.tun.name(), "data path running");
        // A handle of our own, so that waiting for the device does not borrow `self`.
        let tun = self.tun.clone();
        // Keeps lane snapshots and their metrics fresh while no packet flows.
        let mut idle_refresh = tokio::time::interval(IDLE_REFRESH_INTERVAL);
        idle_refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut app_sample = tokio::time::interval(APP_SAMPLE_INTERVAL);
        app_sample.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let pacer_due = self.pacing.next_release().map(|at| self.clock.deadline(at));
            // Unbiased: under load, lane datagrams and TUN reads are both always ready,
            // and a fixed order would starve the later one.
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = idle_refresh.tick() => self.refresh_lanes(self.clock.now()),
                _ = app_sample.tick() => self.app_stats.sample(self.clock.now(), &self.pacing),
                () = sleep_until_or_never(pacer_due) => {
                    let now = self.clock.now();
                    self.refresh_lanes(now);
                    self.release_paced(now);
                }
                Some(command) = self.commands.recv() => self.handle_command(command),
                Some(event) = self.events.recv() => self.handle_event(event),
                Some(input) = self.input_rx.recv() => {
                    let now = self.clock.now();
                    self.handle_input(input, now);
                    for _ in 1..BATCH {
                        match self.input_rx.try_recv() {
                            Ok(input) => self.handle_input(input, now),
                            Err(_) => break,
                        }
                    }
                }
                ready = tun.readable() => match ready {
                    Ok(mut guard) => {
                        let now = self.clock.now();
                        self.refresh_lanes(now);
                        for _ in 0..BATCH {
                            // Read behind room for the datagram header, so that the
                            // datagram is built in place.
                            self.rx_buf.resize(DATAGRAM_HEADER_LEN + self.tun_mtu, 0);
                            let room = &mut self.rx_buf[DATAGRAM_HEADER_LEN..];
                            match guard.try_io(|fd| fd.get_ref().recv(room)) {
                                Ok(Ok(n)) => {
                                    self.rx_buf.truncate(DATAGRAM_HEADER_LEN + n);
                                    let datagram = self.rx_buf.split();
                                    self.handle_tun_packet(datagram, now);
                                }
                                Ok(Err(e)) => {
                                    warn!(error = %e, "reading the TUN device");
                                    break;
                                }
                                Err(_would_block) => break,
                            }
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "TUN device failed; stopping");
                        break;
                    }
                },
            }
        }
        for lane in self.lanes.iter().flatten() {
            lane.conn.close(0u32.into(), b"shutdown");
        }
        self.log_drops();
    }

    fn handle_event(&mut self, event: LaneEvent) {
        match event {
            LaneEvent::Up(lane) => self.add_lane(lane),
            LaneEvent::Refused { reason, detail } => self.count_drop(reason, &detail),
        }
    }

    fn add_lane(&mut self, lane: NewLane) {
        let NewLane {
            conn,
            site,
            uplink,
            colour,
            rank,
            rate_kbps,
        } = lane;
        // The exit authenticated the site id; the entry's lanes carry its own.
        let Some(site_idx) = self.engine.site_index(&site) else {
            conn.close(1u32.into(), b"unknown site");
            return;
        };
        let key = LaneKey {
            site: site_idx,
            uplink,
            colour,
        };
        if let Some(old) = self.live.get(&key).copied() {
            // A reconnect overtook the old lane's idle timeout: retire the old one now;
            // its receive task removes it when quinn reports it closed.
            if let Some(old_io) = self.lanes.get(old.0 as usize).and_then(Option::as_ref) {
                old_io.conn.close(0u32.into(), b"replaced");
                self.engine.update_lane(old, LANE_GONE);
            }
        }
        let id = self.engine.add_lane(site_idx, colour, rank, rate_kbps);
        let shared = Arc::new(LaneShared {
            queued: AtomicU64::new(0),
            metrics: self
                .metrics
                .lane(self.engine.site_id(site_idx), &key.uplink, colour),
        });
        shared.metrics.up.set(1);
        let (queue, queue_rx) = mpsc::channel(LANE_QUEUE_PACKETS);
        tokio::spawn(send_loop(conn.clone(), queue_rx, shared.clone()));
        tokio::spawn(receive_loop(
            id,
            conn.clone(),
            self.input_tx.clone(),
            shared.clone(),
        ));
        info!(
            lane = %id,
            site = self.engine.site_id(site_idx),
            uplink = %key.uplink,
            colour = colour.as_str(),
            peer = %conn.remote_address(),
            "lane added"
        );
        let io = LaneIo {
            conn,
            queue,
            shared,
            key: key.clone(),
            lost_seen: 0,
            rx_seen: 0,
            rx_progress_at: self.clock.now(),
        };
        let slot = id.0 as usize;
        if self.lanes.len() <= slot {
            self.lanes.resize_with(slot + 1, || None);
        }
        self.lanes[slot] = Some(io);
        self.live.insert(key, id);
        self.metrics.set_lanes_up(self.live.len());
        self.refresh_lane(id, self.clock.now());
    }

    fn handle_input(&mut self, input: LaneInput, now: Instant) {
        match input {
            LaneInput::Datagram(lane, datagram) => {
                match self.engine.handle_lane_datagram(lane, &datagram, now) {
                    Ok(delivery) => {
                        if delivery.reordered {
                            self.reordered[delivery.site.0 as usize].inc();
                        }
                        match self.tun.write(&datagram[delivery.offset..]) {
                            Ok(_) => {
                                // Measured only: the other side paced this direction.
                                let incoming = self.pacing.direction().reverse();
                                let (site, info) = (delivery.site, &delivery.info);
                                let app = self.pacing.classify(site, info, incoming, now);
                                self.app_stats.carried(site, app, incoming, info.len);
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                                self.count_drop(DropReason::QueueFull, "the TUN device is full");
                            }
                            Err(e) => debug!(error = %e, "writing to the TUN device"),
                        }
                    }
                    Err(reason) => self.count_drop(reason, "from a lane"),
                }
            }
            LaneInput::Closed(lane) => {
                self.engine.remove_lane(lane);
                if let Some(io) = self.lanes.get_mut(lane.0 as usize).and_then(Option::take) {
                    if self.live.get(&io.key) == Some(&lane) {
                        self.live.remove(&io.key);
                        io.shared.metrics.up.set(0);
                        self.metrics.set_lanes_up(self.live.len());
                    }
                    info!(lane = %lane, uplink = %io.key.uplink, "lane removed");
                }
            }
        }
    }

    fn handle_command(&mut self, command: PacingCommand) {
        match command {
            PacingCommand::Apply { site, table, done } => {
                let now = self.clock.now();
                let version = table.version;
                let apps = table.apps.len();
                let mut unpaced = Vec::new();
                self.pacing.apply(site, table, now, |p| unpaced.push(p));
                self.app_stats.rebuild(site, &self.pacing);
                // Packets of applications that are gone were accepted: they go on.
                for paced in unpaced {
                    self.forward(site, AppIdx::DEFAULT, paced, now);
                }
                info!(
                    site = self.engine.site_id(site),
                    version, apps, "pacing table applied"
                );
                let _ = done.send(());
            }
        }
    }

    /// Handles a packet read from the TUN device, which sits in `datagram` behind room
    /// for the datagram header: admitted, classified, paced, then forwarded.
    fn handle_tun_packet(&mut self, mut datagram: BytesMut, now: Instant) {
        let Admitted { site, info } = match self
            .engine
            .admit_tun_packet(&mut datagram[DATAGRAM_HEADER_LEN..])
        {
            Ok(admitted) => admitted,
            Err(verdict) => return self.carry_out(verdict, datagram),
        };
        let app = self
            .pacing
            .classify(site, &info, self.pacing.direction(), now);
        match self
            .pacing
            .enqueue(site, app, Paced { info, datagram }, info.len, now)
        {
            Enqueued::Now(paced) => self.forward(site, app, paced, now),
            Enqueued::Queued => {}
            Enqueued::Dropped(_) => {
                self.app_stats.dropped(site, app);
                self.count_drop(
                    DropReason::QueueFull,
                    "the application's pacing queue is full",
                );
            }
        }
    }

    /// Sends the packets whose departure time has come.
    fn release_paced(&mut self, now: Instant) {
        let mut released = std::mem::take(&mut self.released);
        self.pacing
            .release(now, |site, app, paced| released.push((site, app, paced)));
        for (site, app, paced) in released.drain(..) {
            self.forward(site, app, paced, now);
        }
        self.released = released;
    }

    /// Hands a packet its pacer let go to the scheduler and its lane.
    fn forward(&mut self, site: SiteIdx, app: AppIdx, paced: Paced, now: Instant) {
        let Paced { info, mut datagram } = paced;
        self.app_stats
            .carried(site, app, self.pacing.direction(), info.len);
        let verdict = self
            .engine
            .forward(site, &info, &mut datagram[DATAGRAM_HEADER_LEN..], now);
        self.carry_out(verdict, datagram);
    }

    /// Carries out the engine's verdict on a packet from the TUN device.
    fn carry_out(&mut self, verdict: TunVerdict, mut datagram: BytesMut) {
        match verdict {
            TunVerdict::Forward(forward) => {
                let Some(io) = self
                    .lanes
                    .get(forward.lane.0 as usize)
                    .and_then(Option::as_ref)
                else {
                    return self.count_drop(DropReason::NoLane, "the lane is gone");
                };
                io.shared.metrics.decisions[forward.kind as usize].inc();
                let len = datagram.len() as u64;
                let queued = &io.shared.queued;
                if queued.load(Ordering::Relaxed) + len > LANE_QUEUE_LIMIT {
                    return self.count_drop(DropReason::QueueFull, "the lane's queue is full");
                }
                write_datagram_header(&mut datagram, forward.seq);
                queued.fetch_add(len, Ordering::Relaxed);
                if io.queue.try_send(datagram.freeze()).is_err() {
                    queued.fetch_sub(len, Ordering::Relaxed);
                    self.count_drop(DropReason::QueueFull, "the lane's queue is full");
                }
            }
            TunVerdict::Reply(n) => {
                if let Err(e) = self.tun.write(self.engine.reply(n)) {
                    debug!(error = %e, "writing an ICMP error to the TUN device");
                }
                self.count_drop(DropReason::TooBig, "larger than the lane carries");
            }
            TunVerdict::Drop(reason) => self.count_drop(reason, "from the TUN device"),
        }
    }

    /// Counts a drop; logs the first of each reason as a warning, later ones at trace
    /// level. Link-local chatter of the kernel is expected and never warned about.
    fn count_drop(&self, reason: DropReason, detail: &str) {
        let counter = self.metrics.dropped(reason);
        counter.inc();
        if counter.get() == 1 && reason != DropReason::LinkLocal {
            warn!(
                reason = reason.as_str(),
                detail, "dropped a packet (first of its kind; later ones are only counted)"
            );
        } else {
            tracing::trace!(reason = reason.as_str(), detail, "dropped a packet");
        }
    }

    fn log_drops(&self) {
        for reason in DropReason::ALL {
            let n = self.metrics.dropped(reason).get();
            if n > 0 {
                info!(reason = reason.as_str(), packets = n, "dropped in total");
            }
        }
    }

    fn refresh_lanes(&mut self, now: Instant) {
        if now.saturating_since(self.last_refresh) < REFRESH_INTERVAL {
            return;
        }
        self.last_refresh = now;
        for i in 0..self.lanes.len() {
            self.refresh_lane(LaneId(i as u32), now);
        }
        self.metrics
            .flows_active
            .set(i64::try_from(self.engine.flows_active()).unwrap_or(i64::MAX));
    }

    /// Reads a lane's state from quinn (each accessor takes quinn's connection lock,
    /// hence once per batch, not per packet).
    fn refresh_lane(&mut self, id: LaneId, now: Instant) {
        let Some(io) = self.lanes.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return;
        };
        let max_datagram = io
            .conn
            .max_datagram_size()
            .map_or(0, |m| m.saturating_sub(DATAGRAM_HEADER_LEN));
        let in_quinn =
            QUINN_DATAGRAM_SEND_BUFFER.saturating_sub(io.conn.datagram_send_buffer_space()) as u64;
        let stats = io.conn.stats();
        if stats.udp_rx.datagrams != io.rx_seen {
            io.rx_seen = stats.udp_rx.datagrams;
            io.rx_progress_at = now;
        }
        let path = stats.path;
        let alive = now.saturating_since(io.rx_progress_at) < LANE_STALL;
        let view = LaneStatus {
            up: alive
                && max_datagram > 0
                && io.conn.close_reason().is_none()
                && self.live.get(&io.key) == Some(&id),
            srtt: path.rtt,
            cwnd: path.cwnd,
            fill: io.shared.queued.load(Ordering::Relaxed) + in_quinn,
            max_datagram,
        };
        let m = &io.shared.metrics;
        m.up.set(i64::from(view.up));
        m.srtt.set(view.srtt.as_secs_f64());
        m.cwnd.set(i64::try_from(view.cwnd).unwrap_or(i64::MAX));
        m.fill.set(i64::try_from(view.fill).unwrap_or(i64::MAX));
        m.lost
            .inc_by(path.lost_packets.saturating_sub(io.lost_seen));
        io.lost_seen = path.lost_packets;
        self.engine.update_lane(id, view);
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_or_never(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn send_loop(
    conn: quinn::Connection,
    mut queue: mpsc::Receiver<Bytes>,
    shared: Arc<LaneShared>,
) {
    while let Some(datagram) = queue.recv().await {
        let len = datagram.len() as u64;
        let sent = conn.send_datagram_wait(datagram).await;
        shared.queued.fetch_sub(len, Ordering::Relaxed);
        match sent {
            Ok(()) => {
                shared.metrics.tx_packets.inc();
                shared.metrics.tx_bytes.inc_by(len);
            }
            Err(quinn::SendDatagramError::ConnectionLost(_)) => break,
            Err(e) => debug!(error = %e, "quinn refused a datagram"),
        }
    }
    // Whatever is still queued is lost with the lane; give its bytes back.
    queue.close();
    while let Ok(datagram) = queue.try_recv() {
        shared
            .queued
            .fetch_sub(datagram.len() as u64, Ordering::Relaxed);
    }
}

async fn receive_loop(
    id: LaneId,
    conn: quinn::Connection,
    input: mpsc::Sender<LaneInput>,
    shared: Arc<LaneShared>,
) {
    while let Ok(datagram) = conn.read_datagram().await {
        shared.metrics.rx_packets.inc();
        shared.metrics.rx_bytes.inc_by(datagram.len() as u64);
        if input.send(LaneInput::Datagram(id, datagram)).await.is_err() {
            return;
        }
    }
    let _ = input.send(LaneInput::Closed(id)).await;
}
