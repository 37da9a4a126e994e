//! The TUN device's writes, on a thread of their own.
//!
//! Writing a packet into the TUN device runs the kernel's receive path for it there
//! and then (routing, forwarding, or the receiving socket's TCP): with both directions
//! loaded, that `writev` took about half of the data-path thread's time, so the two
//! directions took turns on one thread (docs/design/tun-offload-and-threads.md). Now
//! the data-path thread hands each wake-up's packets over in one batch, and this
//! thread merges them as Linux's GRO would ([`Coalescer`], over every batch waiting,
//! not one wake-up's) and writes them, while the data path goes on reading the TUN
//! device and the lanes.
//!
//! Packets keep their order: one thread writes them in the order the engine yielded
//! them. At most [`MAX_IN_FLIGHT`] packets wait for this thread; a batch that would
//! exceed it is dropped and counted as the TUN device's queue being full, as the
//! device's own full queue is.

use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use bytes::Bytes;

use crate::core::offload::Coalescer;
use crate::tun::Tun;

/// Packets handed to the writing thread and not yet taken by it: about 12 MB, 40 ms
/// at 2.5 Gbit/s.
pub const MAX_IN_FLIGHT: usize = 8192;

/// Packets a new batch has room for before it grows: a busy wake-up's worth.
const SPARE_CAPACITY: usize = 256;

/// Where the writing thread puts packets: the TUN device, or a test's recorder.
pub trait PacketSink: Send + Sync + 'static {
    /// True if packets may be merged into TCP super-packets.
    fn merges(&self) -> bool;
    /// Writes one packet, virtio-net header first, in pieces.
    fn write(&self, parts: &[IoSlice<'_>]) -> io::Result<usize>;
}

impl PacketSink for Tun {
    fn merges(&self) -> bool {
        self.offload()
    }

    fn write(&self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        Tun::write(self, parts)
    }
}

/// What the writing thread did, read by the data path for its counters.
#[derive(Default)]
struct Progress {
    /// Packets handed over and not yet taken from the queue.
    in_flight: AtomicUsize,
    /// Writes that carried more than one packet, and the packets they carried.
    merged_writes: AtomicU64,
    merged_packets: AtomicU64,
    /// Packets the device refused because its queue was full, or for another reason,
    /// since the data path last took them.
    refused_full: AtomicU64,
    refused_other: AtomicU64,
}

/// Packets the device refused since the last [`TunWriter::take_refused`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub full: u64,
    pub other: u64,
}

/// The writing thread has ended: the data path cannot write to the TUN device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterGone;

/// The data path's end of the writing thread.
pub struct TunWriter {
    /// `None` once closed, which ends the thread.
    batches: Option<mpsc::Sender<Vec<Bytes>>>,
    /// Emptied batches, back from the thread, so that handing over allocates nothing.
    spares: mpsc::Receiver<Vec<Bytes>>,
    batch: Vec<Bytes>,
    progress: Arc<Progress>,
    thread: Option<JoinHandle<()>>,
}

impl TunWriter {
    /// Starts the thread writing into `sink`; `name` names it (`ps -L`, `top -H`).
    pub fn spawn(sink: Arc<dyn PacketSink>, name: String) -> io::Result<TunWriter> {
        let (batches, queue) = mpsc::channel();
        let (spare_tx, spares) = mpsc::channel();
        let progress = Arc::new(Progress::default());
        let thread = {
            let progress = progress.clone();
            std::thread::Builder::new()
                .name(name)
                .spawn(move || write_batches(&*sink, &queue, &spare_tx, &progress))?
        };
        Ok(TunWriter {
            batches: Some(batches),
            spares,
            batch: Vec::new(),
            progress,
            thread: Some(thread),
        })
    }

    /// Takes a packet for the next batch.
    pub fn push(&mut self, packet: Bytes) {
        self.batch.push(packet);
    }

    /// Hands the packets pushed since the last call to the thread in one batch. Returns
    /// how many were dropped instead because [`MAX_IN_FLIGHT`] would be exceeded, or
    /// [`WriterGone`] if the thread has ended (closed, or it panicked): nothing would
    /// ever be written again.
    pub fn hand_over(&mut self) -> Result<usize, WriterGone> {
        let n = self.batch.len();
        if n == 0 {
            return Ok(0);
        }
        let batches = match &self.batches {
            Some(batches) if self.thread.as_ref().is_some_and(|t| !t.is_finished()) => batches,
            _ => return Err(WriterGone),
        };
        if self.progress.in_flight.load(Ordering::Acquire) + n > MAX_IN_FLIGHT {
            self.batch.clear();
            return Ok(n);
        }
        let next = self
            .spares
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(SPARE_CAPACITY));
        let batch = std::mem::replace(&mut self.batch, next);
        self.progress.in_flight.fetch_add(n, Ordering::AcqRel);
        batches.send(batch).map_err(|_| WriterGone)?;
        Ok(0)
    }

    /// Packets the device refused since the last call.
    pub fn take_refused(&mut self) -> Refused {
        Refused {
            full: self.progress.refused_full.swap(0, Ordering::Relaxed),
            other: self.progress.refused_other.swap(0, Ordering::Relaxed),
        }
    }

    /// Writes that merged more than one packet so far, and the packets they carried.
    pub fn merged(&self) -> (u64, u64) {
        (
            self.progress.merged_writes.load(Ordering::Relaxed),
            self.progress.merged_packets.load(Ordering::Relaxed),
        )
    }

    /// Ends the thread once it has written what it was handed, and waits for it.
    pub fn close(&mut self) {
        self.batches = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for TunWriter {
    fn drop(&mut self) {
        self.close();
    }
}

/// The writing thread: takes every batch waiting, merges and writes them, and sends
/// the emptied batches back, until the data path closes its end.
fn write_batches(
    sink: &dyn PacketSink,
    queue: &mpsc::Receiver<Vec<Bytes>>,
    spares: &mpsc::Sender<Vec<Bytes>>,
    progress: &Progress,
) {
    let mut writes = Coalescer::new(sink.merges());
    while let Ok(mut batch) = queue.recv() {
        loop {
            progress.in_flight.fetch_sub(batch.len(), Ordering::AcqRel);
            for packet in batch.drain(..) {
                if writes.push(packet) {
                    flush(sink, &mut writes, progress);
                }
            }
            // Back to the data path for its next batch; it allocates one if none is.
            let _ = spares.send(batch);
            match queue.try_recv() {
                Ok(next) => batch = next,
                Err(_) => break,
            }
        }
        flush(sink, &mut writes, progress);
    }
}

fn flush(sink: &dyn PacketSink, writes: &mut Coalescer, progress: &Progress) {
    writes.flush(|write| match sink.write(write.parts) {
        Ok(_) if write.packets > 1 => {
            progress.merged_writes.fetch_add(1, Ordering::Relaxed);
            progress
                .merged_packets
                .fetch_add(write.packets as u64, Ordering::Relaxed);
        }
        Ok(_) => {}
        Err(e) => {
            let packets = write.packets as u64;
            if e.kind() == io::ErrorKind::WouldBlock {
                progress.refused_full.fetch_add(packets, Ordering::Relaxed);
            } else {
                // Counted as `tun_refused`; it may come for every packet, so the log
                // stays quiet about it.
                tracing::debug!(error = %e, packets, "the TUN device refused a write");
                progress.refused_other.fetch_add(packets, Ordering::Relaxed);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Records every write as the bytes after the virtio-net header, and refuses
    /// writes with the error its packets' first byte names (or panics).
    #[derive(Default)]
    struct Recorder {
        writes: Mutex<Vec<Vec<u8>>>,
        /// Holds the thread inside a write until released.
        gate: Mutex<()>,
    }

    impl PacketSink for Recorder {
        fn merges(&self) -> bool {
            false
        }

        fn write(&self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
            let _open = self.gate.lock().unwrap();
            let bytes: Vec<u8> = parts[1..].iter().flat_map(|p| p.iter().copied()).collect();
            match bytes.first() {
                Some(0xee) => Err(io::Error::from(io::ErrorKind::WouldBlock)),
                Some(0xef) => Err(io::Error::from(io::ErrorKind::InvalidInput)),
                Some(0xdd) => panic!("the sink broke"),
                _ => {
                    self.writes.lock().unwrap().push(bytes);
                    Ok(0)
                }
            }
        }
    }

    fn packet(first: u8, n: u8) -> Bytes {
        Bytes::from(vec![first, n])
    }

    #[test]
    fn packets_are_written_in_the_order_handed_over_and_refusals_are_counted() {
        let sink = Arc::new(Recorder::default());
        let mut writer = TunWriter::spawn(sink.clone(), "test-tun-write".into()).unwrap();
        for n in 0..100u8 {
            writer.push(packet(0x45, n));
            if n % 7 == 0 {
                assert_eq!(writer.hand_over(), Ok(0));
            }
        }
        writer.push(packet(0xee, 0));
        writer.push(packet(0xef, 0));
        writer.push(packet(0xef, 1));
        assert_eq!(writer.hand_over(), Ok(0));
        writer.close();
        let writes = sink.writes.lock().unwrap();
        let order: Vec<u8> = writes.iter().map(|w| w[1]).collect();
        assert_eq!(order, (0..100).collect::<Vec<u8>>());
        assert_eq!(writer.take_refused(), Refused { full: 1, other: 2 });
        assert_eq!(writer.take_refused(), Refused::default(), "reported once");
    }

    #[test]
    fn a_thread_that_falls_behind_costs_whole_batches_beyond_the_bound() {
        let sink = Arc::new(Recorder::default());
        let mut writer = TunWriter::spawn(sink.clone(), "test-tun-write".into()).unwrap();
        // The thread is stuck in its first write, the first batch's last packet (a
        // full coalescer is written at once), while the data path hands over more.
        let held = sink.gate.lock().unwrap();
        for _ in 0..Coalescer::CAPACITY {
            writer.push(packet(0x45, 0));
        }
        assert_eq!(writer.hand_over(), Ok(0));
        while writer.progress.in_flight.load(Ordering::Acquire) > 0 {
            std::thread::yield_now();
        }
        for _ in 0..MAX_IN_FLIGHT {
            writer.push(packet(0x45, 1));
        }
        assert_eq!(writer.hand_over(), Ok(0), "up to the bound waits");
        writer.push(packet(0x45, 2));
        assert_eq!(writer.hand_over(), Ok(1), "beyond it the batch is dropped");
        drop(held);
        writer.close();
        let writes = sink.writes.lock().unwrap().len();
        assert_eq!(writes, Coalescer::CAPACITY + MAX_IN_FLIGHT);
    }

    #[test]
    fn a_writing_thread_that_ended_is_reported_not_fed_for_ever() {
        let sink = Arc::new(Recorder::default());
        let mut writer = TunWriter::spawn(sink, "test-tun-write".into()).unwrap();
        writer.push(packet(0xdd, 0));
        assert_eq!(writer.hand_over(), Ok(0));
        while !writer.thread.as_ref().unwrap().is_finished() {
            std::thread::yield_now();
        }
        writer.push(packet(0x45, 1));
        assert_eq!(writer.hand_over(), Err(WriterGone));
        writer.close();
        writer.push(packet(0x45, 2));
        assert_eq!(writer.hand_over(), Err(WriterGone), "nor once closed");
    }
}
