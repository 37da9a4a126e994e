//! A lane's I/O in the shell: the task that hands quinn what the driver queued for
//! the lane, the task that hands the driver what the lane received, and what they
//! count for the engine's samples.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::cc::KnownUplink;
use super::exits::LaneStanding;
use crate::core::lane::{LaneId, LaneSample};
use crate::core::wire::{DATAGRAM_HEADER_LEN, is_probe};

/// The most datagrams a receive task hands the driver in one message.
pub const BATCH: usize = 64;

/// What a lane's send task has done, for the engine's samples.
#[derive(Default)]
struct SendProgress {
    /// Bytes that left the lane's queue (accepted by quinn, or discarded with the lane).
    dequeued_bytes: AtomicU64,
    sent_packets: AtomicU64,
    sent_bytes: AtomicU64,
    /// Datagrams quinn refused (too large for the path now).
    refused: AtomicU64,
    /// Datagrams lost with the connection.
    abandoned: AtomicU64,
}

/// What lane receive tasks send to the driver.
pub enum LaneInput {
    /// The datagrams quinn had ready for the lane, in order (at most [`BATCH`]): one
    /// message per batch, so that the driver takes them in one wake-up, and the TUN
    /// device gets their TCP segments merged.
    Datagrams(LaneId, Vec<Bytes>),
    Closed(LaneId),
}

/// A lane's connection and the two tasks that carry its datagrams: one sends what
/// the driver queues, one hands the driver what arrives.
pub struct LaneIo {
    pub conn: quinn::Connection,
    queue: mpsc::UnboundedSender<Bytes>,
    progress: Arc<SendProgress>,
    /// quinn's datagram send space while nothing is queued: less than its buffer by
    /// quinn's own bookkeeping.
    empty_send_space: usize,
    /// What the lane's congestion controller knows of the uplink.
    path: Arc<KnownUplink>,
    /// Whether it counts for its exit (an entry's lanes; `super::exits`).
    pub standing: Option<Arc<LaneStanding>>,
}

impl LaneIo {
    /// Starts the lane's send and receive tasks in `tasks`; what arrives goes to
    /// `input`, tagged with `id`.
    pub fn start(
        id: LaneId,
        conn: quinn::Connection,
        path: Arc<KnownUplink>,
        tasks: &mut JoinSet<()>,
        input: mpsc::Sender<LaneInput>,
    ) -> LaneIo {
        let progress = Arc::new(SendProgress::default());
        let (queue, queue_rx) = mpsc::unbounded_channel();
        tasks.spawn(send_loop(conn.clone(), queue_rx, progress.clone()));
        tasks.spawn(receive_loop(id, conn.clone(), input));
        LaneIo {
            empty_send_space: conn.datagram_send_buffer_space(),
            conn,
            queue,
            progress,
            path,
            standing: None,
        }
    }

    /// Queues a datagram for the send task; false once the lane is gone.
    pub fn send(&self, datagram: Bytes) -> bool {
        self.queue.send(datagram).is_ok()
    }

    /// The peer's end reports it learned that the uplink's delay varies by `spread`:
    /// for the lane's congestion controller.
    pub fn set_peer_variation(&self, spread: Duration) {
        self.path.set_peer_variation(spread);
    }

    /// Bytes that have left the lane's queue so far.
    pub fn dequeued_bytes(&self) -> u64 {
        self.progress.dequeued_bytes.load(Ordering::Relaxed)
    }

    pub fn close(&self, reason: &[u8]) {
        self.conn.close(0u32.into(), reason);
    }

    /// Reads the lane's state from quinn (each accessor takes quinn's connection lock).
    pub fn sample(&self) -> LaneSample {
        let stats = self.conn.stats();
        let p = &self.progress;
        LaneSample {
            srtt: stats.path.rtt,
            cwnd: stats.path.cwnd,
            max_datagram: self
                .conn
                .max_datagram_size()
                .map_or(0, |m| m.saturating_sub(DATAGRAM_HEADER_LEN)),
            closed: self.conn.close_reason().is_some(),
            rx_datagrams: stats.udp_rx.datagrams,
            lost_packets: stats.path.lost_packets,
            quinn_queued_bytes: self
                .empty_send_space
                .saturating_sub(self.conn.datagram_send_buffer_space())
                as u64,
            dequeued_bytes: p.dequeued_bytes.load(Ordering::Relaxed),
            sent_packets: p.sent_packets.load(Ordering::Relaxed),
            sent_bytes: p.sent_bytes.load(Ordering::Relaxed),
            transmitted_datagrams: stats.frame_tx.datagram,
            sent_pings: stats.frame_tx.ping,
            refused_datagrams: p.refused.load(Ordering::Relaxed),
            abandoned_datagrams: p.abandoned.load(Ordering::Relaxed),
            delay_variation: self.path.variation_in_force(),
            learned_variation: self.path.learned_variation(),
            quic_sent_packets: stats.path.sent_packets,
            wire_bytes: wire_bytes(&stats, self.conn.remote_address().is_ipv6()),
        }
    }
}

/// The bytes a connection put on the wire and took off it, IP and UDP headers counted.
fn wire_bytes(stats: &quinn::ConnectionStats, ipv6: bool) -> u64 {
    let header = if ipv6 { 40 + 8 } else { 20 + 8 };
    let (tx, rx) = (&stats.udp_tx, &stats.udp_rx);
    tx.bytes + rx.bytes + header * (tx.datagrams + rx.datagrams)
}

async fn send_loop(
    conn: quinn::Connection,
    mut queue: mpsc::UnboundedReceiver<Bytes>,
    progress: Arc<SendProgress>,
) {
    while let Some(datagram) = queue.recv().await {
        let len = datagram.len() as u64;
        let probe = is_probe(&datagram);
        let sent = conn.send_datagram_wait(datagram).await;
        progress.dequeued_bytes.fetch_add(len, Ordering::Relaxed);
        match sent {
            // Counted as the lane's inner packets: not probes, which carry none.
            Ok(()) if probe => {}
            Ok(()) => {
                progress.sent_packets.fetch_add(1, Ordering::Relaxed);
                progress.sent_bytes.fetch_add(len, Ordering::Relaxed);
            }
            Err(quinn::SendDatagramError::ConnectionLost(_)) => {
                progress.abandoned.fetch_add(1, Ordering::Relaxed);
                break;
            }
            Err(e) => {
                tracing::debug!(error = %e, "quinn refused a datagram");
                progress.refused.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    // Whatever is still queued is lost with the lane; it leaves the queue all the same.
    queue.close();
    while let Ok(datagram) = queue.try_recv() {
        progress
            .dequeued_bytes
            .fetch_add(datagram.len() as u64, Ordering::Relaxed);
        progress.abandoned.fetch_add(1, Ordering::Relaxed);
    }
}

async fn receive_loop(id: LaneId, conn: quinn::Connection, input: mpsc::Sender<LaneInput>) {
    while let Ok(first) = conn.read_datagram().await {
        let mut batch = Vec::with_capacity(BATCH);
        batch.push(first);
        // Whatever else quinn has ready goes with it, without waiting for more.
        while batch.len() < BATCH {
            match conn.read_datagram().now_or_never() {
                Some(Ok(datagram)) => batch.push(datagram),
                _ => break,
            }
        }
        if input.send(LaneInput::Datagrams(id, batch)).await.is_err() {
            return;
        }
    }
    let _ = input.send(LaneInput::Closed(id)).await;
}
