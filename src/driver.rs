//! The event loop around the data path: it reads the TUN device and the lanes in
//! batches, hands what it read to the engine with the instant of the wake-up, carries
//! out what the engine decided (datagrams onto lanes, packets onto the TUN device
//! through a thread that writes them, [`TunWriter`], lanes to close) and sleeps until
//! the engine's next deadline. It decides nothing about a packet, a flow or a lane:
//! that is [`DataPath`]'s.
//!
//! An exit may run several drivers, one per data-path thread, each with its own
//! engine, TUN queue and lanes, serving its share of the sites ([`Shard`]): packets
//! read for another thread's site are handed to that thread in batches, and the
//! first thread speaks to systemd for all of them.
//!
//! Each lane has a send task (the lane's queue -> `send_datagram_wait`, so quinn never
//! silently discards datagrams) and a receive task (datagrams -> this loop). A lane is
//! forgotten only when its receive task says it is closed: that is the lane's last
//! message, so its id can be reused without mixing two lanes' datagrams.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::control::app_stats::AppStats;
use crate::control::app_stats::SiteReport;
use crate::control::caps::CapKeeper;
use crate::control::command::DriverCommand;
use crate::control::metrics::{Export, Metrics, TunOffload};
use crate::control::status::{StatusBoard, StatusBuilder};
use crate::core::cutoff::{Breach, CutChange};
use crate::core::engine::{DataPath, LaneService, LaneUp, Shard};
use crate::core::lane::LaneId;
use crate::core::offload::{MAX_SUPER_PACKET, TunRead, VNET_HDR_LEN};
use crate::core::stats::DropReason;
use crate::core::time::Instant;
use crate::core::wire::DATAGRAM_HEADER_LEN;
use crate::lane::client::DialDemand;
use crate::lane::io::{LaneInput, LaneIo};
use crate::lane::{LaneEvent, NewLane};
use crate::notify::Notifier;
use crate::tun::Tun;
use crate::tun_writer::{TunWriter, WriterGone};

/// Packets read per wake-up before the loop looks at its other inputs again.
const BATCH: usize = 64;
/// How often the engine's counters, and those of the lanes that carry, are copied
/// into the Prometheus metrics.
const METRICS_INTERVAL: Duration = Duration::from_millis(100);
/// How often every lane's and application's metrics are copied: an idle lane's
/// change only when it is sampled, once a second while its site is quiet
/// (`core/engine/quiet.rs`), and an idle application's not at all.
const FULL_METRICS_INTERVAL: Duration = Duration::from_secs(1);
/// How often per-application and lane rates are measured for `GET /v1/sites/{site}/apps`
/// and `GET /v1/status`.
const APP_REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Which metrics an export copies besides the engine's own counters.
#[derive(Clone, Copy)]
enum Exported {
    /// Every lane's and every application's.
    All,
    /// Those of the lanes that carried since their last sample.
    Busy,
    /// One lane's, as it comes up or goes.
    Lane(LaneId),
}

/// Packets read from the TUN device by one data-path thread for another's sites.
pub type Handoff = Vec<BytesMut>;

/// How an exit's data-path thread reaches the others.
pub struct ThreadLinks {
    pub shard: Shard,
    /// Packets the other threads read for this one's sites.
    pub inbox: mpsc::Receiver<Handoff>,
    /// Every thread's inbox, by thread (this one's too, unused).
    pub inboxes: Vec<mpsc::Sender<Handoff>>,
    /// When each thread last reached its watchdog instant, in [`Clock`] nanoseconds:
    /// the first thread tells systemd's watchdog all is well only while every
    /// thread's loop keeps turning.
    pub beats: Arc<[AtomicU64]>,
}

impl ThreadLinks {
    /// The links of `count` threads, by thread.
    pub fn all(count: usize) -> Vec<ThreadLinks> {
        // Batches, not packets: one per wake-up of the sending thread.
        const INBOX_BATCHES: usize = 1024;
        let (inboxes, receivers): (Vec<_>, Vec<_>) =
            (0..count).map(|_| mpsc::channel(INBOX_BATCHES)).unzip();
        let beats: Arc<[AtomicU64]> = (0..count).map(|_| AtomicU64::new(0)).collect();
        receivers
            .into_iter()
            .enumerate()
            .map(|(index, inbox)| ThreadLinks {
                shard: Shard { index, count },
                inbox,
                inboxes: inboxes.clone(),
                beats: beats.clone(),
            })
            .collect()
    }

    fn first(&self) -> bool {
        self.shard.index == 0
    }
}

/// Why the loop woke up.
enum Wake<G> {
    Stop,
    Timeout,
    Command(DriverCommand),
    Lane(LaneEvent),
    Input(LaneInput),
    Handoff(Handoff),
    Tun(std::io::Result<G>),
}

pub struct Driver {
    engine: DataPath,
    clock: Clock,
    tun: Arc<Tun>,
    /// By `LaneId`.
    lanes: Vec<Option<LaneIo>>,
    /// The send and receive tasks of every lane; they end with their lane, and those
    /// still running when the loop stops are ended with it.
    lane_tasks: tokio::task::JoinSet<()>,
    events: mpsc::Receiver<LaneEvent>,
    input_tx: mpsc::Sender<LaneInput>,
    input_rx: mpsc::Receiver<LaneInput>,
    /// What one TUN read lands in: a virtio-net header and up to a 64 KB super-packet.
    tun_read: Vec<u8>,
    /// Where packets are built for the engine, each behind room for its datagram header.
    rx_buf: BytesMut,
    /// The packets of one wake-up on their way to the TUN device, written by a
    /// thread of their own.
    tun_writer: TunWriter,
    offload_counts: TunOffload,
    app_stats: AppStats,
    commands: mpsc::Receiver<DriverCommand>,
    links: ThreadLinks,
    /// Packets for each other thread, gathered over one wake-up.
    handoffs: Vec<Handoff>,
    /// Copies the engine's counters into the metrics.
    export: Export,
    /// Metrics shared by every thread (lanes up, for systemd's status line).
    metrics: Arc<Metrics>,
    status_builder: StatusBuilder,
    /// Where `GET /v1/status` reads this thread's part, renewed with the
    /// application report and whenever the admin API asks.
    status: Arc<StatusBoard>,
    /// The applications' last report, for the status asked for in between.
    apps: Vec<SiteReport>,
    /// systemd: `READY=1` once sent, and the lanes up last told in `STATUS=`.
    notifier: Arc<Notifier>,
    ready: bool,
    lanes_reported: Option<usize>,
    /// The entry's uplinks to dial or hang up, as the engine wants them.
    dial_demand: Option<DialDemand>,
    /// The entry's uplinks' tiers as configured, and their data caps' counts.
    caps: Option<CapKeeper>,
    /// The lanes the engine wants sampled or told about, reused.
    lane_ids: Vec<LaneId>,
}

/// What a driver is built from.
pub struct DriverParts {
    pub engine: DataPath,
    pub app_stats: AppStats,
    pub metrics: Arc<Metrics>,
    pub clock: Clock,
    pub tun: Tun,
    pub events: mpsc::Receiver<LaneEvent>,
    pub commands: mpsc::Receiver<DriverCommand>,
    pub links: ThreadLinks,
    pub status: Arc<StatusBoard>,
    pub notifier: Arc<Notifier>,
    pub dial_demand: Option<DialDemand>,
    pub caps: Option<CapKeeper>,
}

impl Driver {
    pub fn new(parts: DriverParts) -> std::io::Result<Driver> {
        let DriverParts {
            engine,
            app_stats,
            metrics,
            clock,
            tun,
            events,
            commands,
            links,
            status,
            notifier,
            dial_demand,
            caps,
        } = parts;
        let mut engine = engine;
        if let Some(caps) = &caps {
            engine.handle_uplink_tiers(&caps.tiers(), caps.settings(), clock.now());
        }
        let (input_tx, input_rx) = mpsc::channel(4096);
        let tun = Arc::new(tun);
        let tun_writer =
            TunWriter::spawn(tun.clone(), format!("braid-tun-w{}", links.shard.index))?;
        let export = Export::new(metrics.clone(), &engine);
        let handoffs = (0..links.shard.count).map(|_| Vec::new()).collect();
        let status_builder = StatusBuilder::new(engine.role());
        Ok(Driver {
            engine,
            clock,
            tun,
            lanes: Vec::new(),
            lane_tasks: tokio::task::JoinSet::new(),
            events,
            input_tx,
            input_rx,
            tun_read: vec![0; VNET_HDR_LEN + MAX_SUPER_PACKET],
            rx_buf: BytesMut::with_capacity(256 * 1024),
            tun_writer,
            offload_counts: TunOffload::default(),
            app_stats,
            commands,
            links,
            handoffs,
            export,
            metrics,
            status_builder,
            status,
            apps: Vec::new(),
            notifier,
            ready: false,
            lanes_reported: None,
            dial_demand,
            caps,
            lane_ids: Vec::new(),
        })
    }

    /// Runs until `shutdown`, then closes every lane. An error says why the data path
    /// could not go on (its TUN device, or the thread that writes it, failed): the
    /// gateway then stops with it, so that systemd restarts it.
    pub async fn run(mut self, shutdown: CancellationToken) -> anyhow::Result<()> {
        info!(
            tun = self.tun.name(),
            thread = self.links.shard.index,
            "data path running"
        );
        // A handle of our own, so that waiting for the device does not borrow `self`.
        let tun = self.tun.clone();
        // One timer for everything the loop waits for but packets: the engine's
        // deadline, the two export instants and systemd's watchdog. It is moved only
        // when something wants an earlier wake-up than it is armed for: a timer that
        // fires early costs an idle turn of the loop, one re-armed on every wake-up
        // the timer wheel's lock.
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        let mut armed: Option<Instant> = None;
        let mut export_at = self.clock.now();
        let mut full_export_at = export_at;
        let mut report_at = export_at;
        // Pinged from this loop, so that a loop that is stuck misses it.
        let watchdog_every = self.notifier.watchdog_interval().map(|i| i / 2);
        let mut watchdog_at = export_at;
        let mut failure = None;
        loop {
            let due = self
                .engine
                .poll_timeout()
                .map_or(export_at, |at| at.min(export_at));
            let due = due.min(report_at);
            let due = watchdog_every.map_or(due, |_| due.min(watchdog_at));
            if armed.is_none_or(|armed| due < armed) {
                timer.as_mut().reset(self.clock.deadline(due));
                armed = Some(due);
            }
            // Unbiased: under load, lane datagrams and TUN reads are both always ready,
            // and a fixed order would starve the later one.
            let wake = tokio::select! {
                () = shutdown.cancelled() => Wake::Stop,
                () = &mut timer, if armed.is_some() => {
                    armed = None;
                    Wake::Timeout
                }
                Some(command) = self.commands.recv() => Wake::Command(command),
                Some(event) = self.events.recv() => Wake::Lane(event),
                Some(input) = self.input_rx.recv() => Wake::Input(input),
                Some(packets) = self.links.inbox.recv() => Wake::Handoff(packets),
                ready = tun.readable() => Wake::Tun(ready),
            };
            let now = self.clock.now();
            self.engine.lanes_to_sample(now, &mut self.lane_ids);
            if self.lane_ids.is_empty() {
                self.pass_dequeued();
            } else {
                self.sample_lanes(now);
            }
            match wake {
                Wake::Stop => break,
                Wake::Timeout => {}
                Wake::Command(command) => self.handle_command(command, now),
                Wake::Lane(LaneEvent::Up(lane)) => self.add_lane(lane, now),
                Wake::Lane(LaneEvent::Refused { reason, detail }) => {
                    warn!(reason = reason.as_str(), detail, "refused a peer");
                    self.engine.handle_peer_refused(reason);
                }
                Wake::Input(input) => {
                    let mut taken = self.handle_input(input, now);
                    while taken < BATCH {
                        match self.input_rx.try_recv() {
                            Ok(input) => taken += self.handle_input(input, now),
                            Err(_) => break,
                        }
                    }
                }
                Wake::Handoff(packets) => {
                    for datagram in packets {
                        self.engine.handle_tun_packet(datagram, now);
                        self.carry_out();
                    }
                }
                Wake::Tun(Ok(mut guard)) => {
                    for _ in 0..BATCH {
                        match guard.try_io(|fd| Tun::read(fd, &mut self.tun_read)) {
                            Ok(Ok(n)) => self.handle_tun_read(n, now),
                            Ok(Err(e)) => {
                                warn!(error = %e, "reading the TUN device");
                                break;
                            }
                            Err(_would_block) => break,
                        }
                    }
                }
                Wake::Tun(Err(e)) => {
                    failure = Some(anyhow::anyhow!("the TUN device failed: {e}"));
                    break;
                }
            }
            self.engine.handle_timeout(now);
            self.carry_out();
            if let Err(WriterGone) = self.hand_over_tun_writes() {
                failure = Some(anyhow::anyhow!(
                    "the thread writing the TUN device ended (see the panic above)"
                ));
                break;
            }
            self.send_handoffs();
            // Checked on every wake-up, so that traffic cannot starve them.
            if now >= full_export_at {
                self.export_metrics(Exported::All);
                full_export_at = now + FULL_METRICS_INTERVAL;
                export_at = now + METRICS_INTERVAL;
            } else if now >= export_at {
                self.export_metrics(Exported::Busy);
                export_at = now + METRICS_INTERVAL;
            }
            if now >= report_at {
                self.count_caps(now);
                self.apps = self.app_stats.report(now, &self.engine);
                self.publish_status(now);
                report_at = now + APP_REPORT_INTERVAL;
            }
            if let Some(every) = watchdog_every
                && now >= watchdog_at
            {
                self.watchdog(now, every);
                watchdog_at = now + every;
            }
        }
        // What this turn handed over is written before the counters are read a last
        // time; with a writing thread that ended, nothing more can be.
        let _ = self.hand_over_tun_writes();
        self.tun_writer.close();
        if let Some(caps) = &mut self.caps {
            caps.account(&self.engine, crate::clock::unix_now());
            caps.flush();
        }
        self.count_tun_refusals();
        for lane in self.lanes.iter().flatten() {
            lane.conn.close(0u32.into(), b"shutdown");
        }
        self.export_metrics(Exported::All);
        self.log_drops();
        self.lane_tasks.shutdown().await;
        failure.map_or(Ok(()), Err)
    }

    /// Drains the engine's outputs: datagrams to lanes, packets to the TUN device,
    /// lanes to close.
    fn carry_out(&mut self) {
        while let Some(transmit) = self.engine.poll_transmit() {
            let sent = self
                .lanes
                .get(transmit.lane.0 as usize)
                .and_then(Option::as_ref)
                .is_some_and(|io| io.send(transmit.datagram));
            if !sent {
                self.engine.handle_lane_gone();
            }
        }
        while let Some(packet) = self.engine.poll_tun_write() {
            self.tun_writer.push(packet);
        }
        while let Some((lane, why)) = self.engine.poll_lane_close() {
            if let Some(io) = self.lanes.get(lane.0 as usize).and_then(Option::as_ref) {
                io.close(why.reason());
            }
        }
        while let Some((lane, service)) = self.engine.poll_lane_service() {
            self.serve_lane(lane, service);
        }
        while let Some((thread, datagram)) = self.engine.poll_handoff() {
            self.handoffs[thread].push(datagram);
        }
        while let Some(demand) = self.engine.poll_uplink_demand() {
            if demand.dial {
                info!(uplink = demand.uplink, "uplink wanted: dialling it");
            } else {
                info!(uplink = demand.uplink, "uplink held down: hanging it up");
            }
            if let Some(held) = &self.dial_demand {
                held.set(&demand.uplink, demand.dial);
            }
        }
    }

    /// Hands the packets gathered for other threads over, a batch each; a thread
    /// whose inbox is full loses them (counted as `handoff_full`).
    fn send_handoffs(&mut self) {
        for (thread, packets) in self.handoffs.iter_mut().enumerate() {
            if packets.is_empty() {
                continue;
            }
            let batch = std::mem::take(packets);
            let n = batch.len();
            if self.links.inboxes[thread].try_send(batch).is_ok() {
                self.offload_counts.handed_over += n as u64;
            } else {
                self.engine.handle_handoff_refused(n);
            }
        }
    }

    /// Tells systemd's watchdog all is well, from the first thread and only while
    /// every thread turns its loop (each wakes for its own watchdog instant).
    fn watchdog(&self, now: Instant, every: Duration) {
        let beats = &self.links.beats;
        beats[self.links.shard.index].store(now.as_nanos(), Ordering::Relaxed);
        let stale = now.as_nanos().saturating_sub(2 * every.as_nanos() as u64);
        if self.links.first() && beats.iter().all(|b| b.load(Ordering::Relaxed) >= stale) {
            self.notifier.watchdog();
        }
    }

    /// Says why traffic left an uplink's lane, or that it carries again; hands the
    /// lane's controller what the peer learned of its uplink's delay variation.
    fn serve_lane(&self, lane: LaneId, service: LaneService) {
        if let LaneService::PeerVariation { spread } = service {
            if let Some(io) = self.lanes.get(lane.0 as usize).and_then(Option::as_ref) {
                io.set_peer_variation(spread);
            }
            return;
        }
        let Some(report) = self.engine.lane(lane) else {
            return;
        };
        // An entry's choice of exit counts the lanes in service.
        let io = self.lanes.get(lane.0 as usize).and_then(Option::as_ref);
        if let Some(standing) = io.and_then(|io| io.standing.as_ref()) {
            match service {
                LaneService::Stalled { .. } => standing.set(false),
                LaneService::Back { .. } => standing.set(true),
                _ => {}
            }
        }
        let site = self.engine.site_id(report.site);
        let (uplink, colour) = (report.uplink, report.view.colour.as_str());
        match service {
            LaneService::Stalled {
                silent_for,
                unanswered,
                pings,
                probes,
                queued,
                resent,
                srtt,
            } => warn!(
                lane = %lane,
                site,
                uplink,
                colour,
                silent_ms = silent_for.as_millis() as u64,
                unanswered,
                pings,
                probes,
                queued_bytes = queued,
                resent,
                srtt_ms = srtt.as_millis() as u64,
                "lane out of service: its path fell silent"
            ),
            LaneService::Back { out_for } => info!(
                lane = %lane,
                site,
                uplink,
                colour,
                out_ms = out_for.as_millis() as u64,
                "lane back in service"
            ),
            LaneService::Quality(CutChange::Cut(breach)) => {
                let (value, limit) = match breach {
                    Breach::Rtt { rtt, max } => (
                        format!("{} ms", rtt.as_millis()),
                        format!("{} ms", max.as_millis()),
                    ),
                    Breach::Loss { percent, max } => {
                        (format!("{percent:.1} %"), format!("{max:.2} %"))
                    }
                };
                warn!(
                    lane = %lane,
                    site,
                    uplink,
                    colour,
                    reason = breach.reason(),
                    value,
                    limit,
                    "lane beyond its uplink's quality cut-off: not carrying its traffic"
                );
            }
            LaneService::Quality(CutChange::Restored { cut_for }) => info!(
                lane = %lane,
                site,
                uplink,
                colour,
                cut_ms = cut_for.as_millis() as u64,
                "lane within its uplink's quality cut-off again: carrying"
            ),
            LaneService::PeerVariation { .. } => {}
        }
    }

    /// Hands the engine the packets of one TUN read of `n` bytes: one packet, or the
    /// segments of a TCP super-packet.
    fn handle_tun_read(&mut self, n: usize, now: Instant) {
        // Moved out for the loop, so that the engine can be driven while it is read.
        let buf = std::mem::take(&mut self.tun_read);
        match TunRead::parse(&buf[..n]) {
            Ok(read) => {
                let segments = read.segments();
                if segments > 1 {
                    self.offload_counts.read_super += 1;
                    self.offload_counts.read_packets += segments as u64;
                }
                for i in 0..segments {
                    // Built behind room for the datagram header, so that the datagram
                    // is built in place.
                    self.rx_buf.put_bytes(0, DATAGRAM_HEADER_LEN);
                    read.write_segment(i, &mut self.rx_buf);
                    let datagram = self.rx_buf.split();
                    self.engine.handle_tun_packet(datagram, now);
                    // At once, not after the read: the lane's send task on the other
                    // core starts while this one reads on.
                    self.carry_out();
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "an unreadable packet from the TUN device");
                self.engine.handle_tun_malformed();
            }
        }
        self.tun_read = buf;
    }

    /// Hands the packets of this wake-up to the TUN writing thread, and counts what
    /// it could not take or the device refused since.
    fn hand_over_tun_writes(&mut self) -> Result<(), WriterGone> {
        let dropped = self.tun_writer.hand_over()?;
        if dropped > 0 {
            self.engine.handle_tun_refused(dropped, true);
        }
        self.count_tun_refusals();
        Ok(())
    }

    /// Counts, as the engine's drops, the packets the device refused since the last
    /// call (the writing thread tells them afterwards).
    fn count_tun_refusals(&mut self) {
        let refused = self.tun_writer.take_refused();
        for (packets, full) in [(refused.full, true), (refused.other, false)] {
            if packets > 0 {
                self.engine.handle_tun_refused(packets as usize, full);
            }
        }
    }

    fn add_lane(&mut self, lane: NewLane, now: Instant) {
        let NewLane {
            conn,
            path,
            site,
            uplink,
            colour,
            rank,
            policy,
            rate_kbps,
            standing,
        } = lane;
        let up = LaneUp {
            site: &site,
            uplink: &uplink,
            colour,
            rank,
            policy,
            rate_kbps,
        };
        // The exit authenticated the site id; the entry's lanes carry its own.
        let Some(id) = self.engine.handle_lane_up(up, now) else {
            conn.close(1u32.into(), b"unknown site");
            return;
        };
        let mut io = LaneIo::start(id, conn, path, &mut self.lane_tasks, self.input_tx.clone());
        io.standing = standing;
        info!(
            lane = %id,
            site,
            uplink,
            colour = colour.as_str(),
            peer = %io.conn.remote_address(),
            "lane added"
        );
        self.export.lane_up(id, &site, &uplink, colour);
        let slot = id.0 as usize;
        if self.lanes.len() <= slot {
            self.lanes.resize_with(slot + 1, || None);
        }
        self.lanes[slot] = Some(io);
        self.engine.lanes_to_sample(now, &mut self.lane_ids);
        self.sample_lanes(now);
        self.export_metrics(Exported::Lane(id));
    }

    /// Hands the engine what a lane's receive task sent; how many inputs that was.
    fn handle_input(&mut self, input: LaneInput, now: Instant) -> usize {
        match input {
            LaneInput::Datagrams(lane, datagrams) => {
                let n = datagrams.len();
                for datagram in datagrams {
                    self.engine.handle_lane_datagram(lane, datagram, now);
                    self.carry_out();
                }
                n
            }
            LaneInput::Closed(lane) => {
                // Its last counts reach the metrics before the lane is forgotten.
                self.lane_ids.clear();
                self.lane_ids.push(lane);
                self.sample_lanes(now);
                self.export_metrics(Exported::Lane(lane));
                self.engine.handle_lane_closed(lane);
                self.export.lane_closed(lane);
                if self
                    .lanes
                    .get_mut(lane.0 as usize)
                    .and_then(Option::take)
                    .is_some()
                {
                    info!(lane = %lane, "lane removed");
                }
                while self.lane_tasks.try_join_next().is_some() {}
                1
            }
        }
    }

    /// Every thread takes the commands that are not about one site; the first logs
    /// them.
    fn handle_command(&mut self, command: DriverCommand, now: Instant) {
        let log = self.links.first();
        match command {
            DriverCommand::ApplyPacing { site, table, done } => {
                let (version, apps) = (table.version, table.apps.len());
                self.engine.handle_pacing_table(site, table, now);
                self.app_stats.rebuild(site, self.engine.pacing());
                info!(
                    site = self.engine.site_id(site),
                    version, apps, "pacing table applied"
                );
                let _ = done.send(());
            }
            DriverCommand::Reschedule(config) => {
                self.engine.handle_scheduler_config(
                    config.algorithm,
                    config.flow_idle_timeout,
                    config.max_flows,
                );
                if log {
                    info!(
                        algorithm = config.algorithm.as_str(),
                        "scheduler settings applied"
                    );
                }
            }
            DriverCommand::DefaultRate(kbps) => {
                self.engine.handle_default_rate(Some(kbps), now);
                if log {
                    info!(default_rate_kbps = kbps, "default pacing rate applied");
                }
            }
            DriverCommand::Background(settings) => {
                self.engine.handle_background_settings(settings, now);
                if log {
                    info!(
                        method = settings.method.as_str(),
                        interval_ms = settings.interval.as_millis() as u64,
                        "background search settings applied"
                    );
                }
            }
            DriverCommand::ServeSites(sites) => {
                self.engine.handle_sites(&sites, now);
                self.app_stats.add_sites(&self.engine);
                if log {
                    let ids: Vec<&str> = sites.iter().map(|s| s.id.as_str()).collect();
                    info!(sites = ids.join(", "), "sites applied");
                }
            }
            DriverCommand::SiteToSite(allowed) => {
                self.engine.handle_site_to_site(allowed);
                if log {
                    info!(site_to_site = allowed, "forwarding between sites applied");
                }
            }
            DriverCommand::Tiers { entry, settings } => {
                match &mut self.caps {
                    Some(caps) => {
                        caps.reconfigure(entry.as_deref(), settings);
                        self.engine
                            .handle_uplink_tiers(&caps.tiers(), settings, now);
                    }
                    None => self.engine.handle_uplink_tiers(&[], settings, now),
                }
                if log {
                    info!(
                        hold_ms = settings.hold.as_millis() as u64,
                        overflow_after_ms = settings.overflow_after.as_millis() as u64,
                        "uplink tiers applied"
                    );
                }
            }
            DriverCommand::PublishStatus(done) => {
                self.publish_status(now);
                let _ = done.try_send(());
            }
        }
    }

    /// Counts what the entry's capped uplinks carried; one that reached its cap, or
    /// got it back with a new period, changes the tiers.
    fn count_caps(&mut self, now: Instant) {
        let Some(caps) = &mut self.caps else {
            return;
        };
        if caps.account(&self.engine, crate::clock::unix_now()) {
            self.engine
                .handle_uplink_tiers(&caps.tiers(), caps.settings(), now);
        }
    }

    /// Publishes what the engine knows now: its lanes, flows and drops, with the
    /// applications' rates of the last report (their rates are measured over the
    /// report's interval, which an asked-for status must not shorten).
    fn publish_status(&mut self, now: Instant) {
        let mut status = self.status_builder.build(now, &self.engine, &self.apps);
        if let (Some(caps), Some(site)) = (&self.caps, status.sites.first_mut()) {
            site.caps = caps.status();
        }
        self.status.publish(self.links.shard.index, status);
    }

    /// Tells the engine what left the queues of the lanes that send.
    fn pass_dequeued(&mut self) {
        self.engine.lanes_sending(&mut self.lane_ids);
        for &lane in &self.lane_ids {
            if let Some(Some(io)) = self.lanes.get(lane.0 as usize) {
                self.engine.handle_lane_dequeued(lane, io.dequeued_bytes());
            }
        }
    }

    /// Samples the lanes in `lane_ids`.
    fn sample_lanes(&mut self, now: Instant) {
        for &lane in &self.lane_ids {
            if let Some(Some(io)) = self.lanes.get(lane.0 as usize) {
                self.engine.handle_lane_sample(lane, io.sample(), now);
            }
        }
        self.export.lanes_sampled(&self.lane_ids);
    }

    /// Copies the engine's counters into the metrics, with the lanes' and
    /// applications' that `exported` names, and (the first thread) tells systemd
    /// once the engine is ready and whenever the number of lanes up changes.
    fn export_metrics(&mut self, exported: Exported) {
        match exported {
            Exported::All => {
                self.export.copy_all(&self.engine);
                self.app_stats.export(&self.engine);
            }
            Exported::Busy => self.export.copy(&self.engine),
            Exported::Lane(lane) => self.export.copy_one_lane(&self.engine, lane),
        }
        (
            self.offload_counts.write_super,
            self.offload_counts.write_packets,
        ) = self.tun_writer.merged();
        self.export.copy_offload(&self.offload_counts);
        if !self.links.first() {
            return;
        }
        if !self.ready && self.engine.ready() {
            self.notifier.ready();
            self.ready = true;
        }
        let up = self.metrics.lanes_up();
        if self.lanes_reported != Some(up) {
            self.notifier.status(&format!("{up} lanes up"));
            self.lanes_reported = Some(up);
        }
    }

    fn log_drops(&self) {
        for reason in DropReason::ALL {
            let n = self.engine.dropped(reason);
            if n > 0 {
                info!(reason = reason.as_str(), packets = n, "dropped in total");
            }
        }
    }
}
