//! The event loop that owns the data path: reads the clock once per wake-up, feeds
//! TUN packets and lane datagrams to the engine in batches, and carries out its
//! verdicts (queue a datagram on a lane, write a packet to the TUN device, count a drop).
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
use crate::core::engine::{DataPath, SiteIdx, TunVerdict};
use crate::core::lane::{Colour, LaneId, LaneView};
use crate::core::stats::DropReason;
use crate::core::time::Instant;
use crate::lane::{LaneEvent, NewLane};
use crate::tun::Tun;

/// Packets handled per wake-up before the loop looks at its other inputs again.
const BATCH: usize = 64;
/// Bytes a lane may have queued inside braid before packets for it are dropped.
const LANE_QUEUE_LIMIT: u64 = 256 * 1024;
/// Datagrams a lane's send queue holds at most (the byte limit usually binds first).
const LANE_QUEUE_PACKETS: usize = 4096;
/// Lane snapshots are refreshed from quinn at most this often.
const REFRESH_INTERVAL: Duration = Duration::from_millis(1);

/// Per-lane counters shared between the driver and the lane's tasks.
#[derive(Debug, Default)]
pub struct LaneCounters {
    /// Bytes handed to the lane's send task and not yet accepted by quinn.
    pub queued: AtomicU64,
    pub tx_bytes: AtomicU64,
    pub tx_packets: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub rx_packets: AtomicU64,
    /// Datagrams quinn refused (connection lost, too large).
    pub send_failures: AtomicU64,
}

/// What lane receive tasks send to the driver.
enum LaneInput {
    Datagram(LaneId, Bytes),
    Closed(LaneId),
}

struct LaneIo {
    conn: quinn::Connection,
    queue: mpsc::Sender<Bytes>,
    counters: Arc<LaneCounters>,
    key: LaneKey,
    colour: Colour,
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
}

impl Driver {
    pub fn new(
        engine: DataPath,
        clock: Clock,
        tun: Tun,
        tun_mtu: usize,
        events: mpsc::Receiver<LaneEvent>,
    ) -> Driver {
        let (input_tx, input_rx) = mpsc::channel(4096);
        Driver {
            engine,
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
        }
    }

    /// Runs until `shutdown`, then closes every lane.
    pub async fn run(mut self, shutdown: CancellationToken) {
        info!(tun = self.tun.name(), "data path running");
        // A handle of our own, so that waiting for the device does not borrow `self`.
        let tun = self.tun.clone();
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
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
                            self.rx_buf.resize(self.tun_mtu, 0);
                            match guard.try_io(|fd| fd.get_ref().recv(&mut self.rx_buf)) {
                                Ok(Ok(n)) => {
                                    self.rx_buf.truncate(n);
                                    let packet = self.rx_buf.split();
                                    self.handle_tun_packet(packet, now);
                                    self.rx_buf.reserve(self.tun_mtu);
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
            LaneEvent::Refused { reason, detail } => {
                self.engine.count(reason);
                self.log_drop(reason, &detail);
            }
        }
    }

    fn add_lane(&mut self, lane: NewLane) {
        let NewLane {
            conn,
            site,
            uplink,
            colour,
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
                self.engine.update_lane(LaneView {
                    up: false,
                    ..LaneView::new(old, old_io.colour)
                });
            }
        }
        let id = self.engine.add_lane(site_idx, colour);
        let counters = Arc::new(LaneCounters::default());
        let (queue, queue_rx) = mpsc::channel(LANE_QUEUE_PACKETS);
        tokio::spawn(send_loop(conn.clone(), queue_rx, counters.clone()));
        tokio::spawn(receive_loop(
            id,
            conn.clone(),
            self.input_tx.clone(),
            counters.clone(),
        ));
        info!(lane = %id, site = self.engine.site_id(site_idx), uplink = %key.uplink, colour = colour.as_str(), peer = %conn.remote_address(), "lane added");
        let io = LaneIo {
            conn,
            queue,
            counters,
            key: key.clone(),
            colour,
        };
        let slot = id.0 as usize;
        if self.lanes.len() <= slot {
            self.lanes.resize_with(slot + 1, || None);
        }
        self.lanes[slot] = Some(io);
        self.live.insert(key, id);
        self.refresh_lane(id);
    }

    fn handle_input(&mut self, input: LaneInput, now: Instant) {
        match input {
            LaneInput::Datagram(lane, datagram) => {
                match self.engine.handle_lane_datagram(lane, &datagram, now) {
                    Ok(()) => match self.tun.write(&datagram) {
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            self.drop_packet(DropReason::QueueFull);
                        }
                        Err(e) => debug!(error = %e, "writing to the TUN device"),
                    },
                    Err(reason) => self.log_drop(reason, "from a lane"),
                }
            }
            LaneInput::Closed(lane) => {
                self.engine.remove_lane(lane);
                if let Some(io) = self.lanes.get_mut(lane.0 as usize).and_then(Option::take) {
                    if self.live.get(&io.key) == Some(&lane) {
                        self.live.remove(&io.key);
                    }
                    info!(lane = %lane, uplink = %io.key.uplink, "lane removed");
                }
            }
        }
    }

    fn handle_tun_packet(&mut self, mut packet: BytesMut, now: Instant) {
        match self.engine.handle_tun_packet(&mut packet, now) {
            TunVerdict::Forward(lane) => {
                let Some(io) = self.lanes.get(lane.0 as usize).and_then(Option::as_ref) else {
                    return self.drop_packet(DropReason::NoLane);
                };
                let len = packet.len() as u64;
                if io.counters.queued.load(Ordering::Relaxed) + len > LANE_QUEUE_LIMIT {
                    return self.drop_packet(DropReason::QueueFull);
                }
                io.counters.queued.fetch_add(len, Ordering::Relaxed);
                if io.queue.try_send(packet.freeze()).is_err() {
                    io.counters.queued.fetch_sub(len, Ordering::Relaxed);
                    self.drop_packet(DropReason::QueueFull);
                }
            }
            TunVerdict::Reply(n) => {
                if let Err(e) = self.tun.write(self.engine.reply(n)) {
                    debug!(error = %e, "writing an ICMP error to the TUN device");
                }
                self.log_drop(DropReason::TooBig, "larger than the lane carries");
            }
            TunVerdict::Drop(reason) => self.log_drop(reason, "from the TUN device"),
        }
    }

    fn drop_packet(&mut self, reason: DropReason) {
        self.engine.count(reason);
        self.log_drop(reason, "");
    }

    /// Logs the first drop of each reason as a warning, later ones at trace level.
    /// Link-local chatter of the kernel is expected and never warned about.
    fn log_drop(&self, reason: DropReason, detail: &str) {
        if self.engine.drops().get(reason) == 1 && reason != DropReason::LinkLocal {
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
            let n = self.engine.drops().get(reason);
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
            self.refresh_lane(LaneId(i as u32));
        }
    }

    /// Reads a lane's state from quinn (each accessor takes quinn's connection lock,
    /// hence once per batch, not per packet).
    fn refresh_lane(&mut self, id: LaneId) {
        let Some(io) = self.lanes.get(id.0 as usize).and_then(Option::as_ref) else {
            return;
        };
        let max_datagram = io.conn.max_datagram_size().unwrap_or(0);
        let in_quinn = crate::lane::QUINN_DATAGRAM_SEND_BUFFER
            .saturating_sub(io.conn.datagram_send_buffer_space()) as u64;
        let view = LaneView {
            id,
            colour: io.colour,
            up: max_datagram > 0
                && io.conn.close_reason().is_none()
                && self.live.get(&io.key) == Some(&id),
            srtt: io.conn.rtt(),
            cwnd: io.conn.stats().path.cwnd,
            fill: io.counters.queued.load(Ordering::Relaxed) + in_quinn,
            max_datagram,
        };
        self.engine.update_lane(view);
    }
}

async fn send_loop(
    conn: quinn::Connection,
    mut queue: mpsc::Receiver<Bytes>,
    counters: Arc<LaneCounters>,
) {
    while let Some(datagram) = queue.recv().await {
        let len = datagram.len() as u64;
        let sent = conn.send_datagram_wait(datagram).await;
        counters.queued.fetch_sub(len, Ordering::Relaxed);
        match sent {
            Ok(()) => {
                counters.tx_packets.fetch_add(1, Ordering::Relaxed);
                counters.tx_bytes.fetch_add(len, Ordering::Relaxed);
            }
            Err(quinn::SendDatagramError::ConnectionLost(_)) => break,
            Err(e) => {
                counters.send_failures.fetch_add(1, Ordering::Relaxed);
                debug!(error = %e, "quinn refused a datagram");
            }
        }
    }
    // Whatever is still queued is lost with the lane; give its bytes back.
    queue.close();
    while let Ok(datagram) = queue.try_recv() {
        counters
            .queued
            .fetch_sub(datagram.len() as u64, Ordering::Relaxed);
        counters.send_failures.fetch_add(1, Ordering::Relaxed);
    }
}

async fn receive_loop(
    id: LaneId,
    conn: quinn::Connection,
    input: mpsc::Sender<LaneInput>,
    counters: Arc<LaneCounters>,
) {
    while let Ok(datagram) = conn.read_datagram().await {
        counters.rx_packets.fetch_add(1, Ordering::Relaxed);
        counters
            .rx_bytes
            .fetch_add(datagram.len() as u64, Ordering::Relaxed);
        if input.send(LaneInput::Datagram(id, datagram)).await.is_err() {
            return;
        }
    }
    let _ = input.send(LaneInput::Closed(id)).await;
}
