//! braid-linkemu: a small userspace link emulator for the namespace testbed, standing in
//! for netem on kernels without it. It serves two persistent TUN devices of a router
//! namespace, one per direction: every packet the router routes into a device is read,
//! dropped with the configured probability, held for the configured one-way delay plus
//! a uniformly random jitter and written back to the same device, from where the router
//! forwards it on. Jitter never reorders: a packet leaves no earlier than the one before
//! it, as behind a radio link's retransmissions or a busy modem's queue. Rates are not
//! its business: tbf on the router's egress interfaces shapes them.
//!
//! Usage: braid-linkemu --dev NAME --delay-ms N --loss-pct P [--jitter-ms J] [--seed S]
//! (repeatable groups, one per direction, e.g. `--dev eu --delay-ms 10 --loss-pct 0
//! --dev ed ...`).

#![allow(clippy::disallowed_methods)] // a test tool that lives on wall-clock time

use std::collections::VecDeque;
use std::process::ExitCode;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tun_tap::{Iface, Mode};

struct Direction {
    dev: String,
    delay: Duration,
    /// Each packet waits up to this much longer, uniformly at random.
    jitter: Duration,
    loss: f64,
    seed: u64,
}

fn main() -> ExitCode {
    let directions = match parse(std::env::args().skip(1).collect()) {
        Ok(d) if !d.is_empty() => d,
        Ok(_) => {
            return fail(
                "usage: braid-linkemu --dev NAME --delay-ms N --loss-pct P [--jitter-ms J] [--seed S] ...",
            );
        }
        Err(e) => return fail(&e),
    };
    let mut threads = Vec::new();
    for d in directions {
        let iface = match Iface::without_packet_info(&d.dev, Mode::Tun) {
            Ok(i) => Arc::new(i),
            Err(e) => return fail(&format!("opening TUN device {}: {e}", d.dev)),
        };
        threads.extend(serve(iface, d));
    }
    for t in threads {
        let _ = t.join();
    }
    ExitCode::SUCCESS
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

fn parse(args: Vec<String>) -> Result<Vec<Direction>, String> {
    let mut out: Vec<Direction> = Vec::new();
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = || format!("{flag}: {value:?} is not a number");
        if flag == "--dev" {
            out.push(Direction {
                dev: value,
                delay: Duration::ZERO,
                jitter: Duration::ZERO,
                loss: 0.0,
                seed: 1 + out.len() as u64,
            });
            continue;
        }
        let d = out.last_mut().ok_or("--dev must come first")?;
        match flag.as_str() {
            "--delay-ms" => {
                d.delay = Duration::from_secs_f64(value.parse::<f64>().map_err(|_| bad())? / 1000.0)
            }
            "--jitter-ms" => {
                d.jitter =
                    Duration::from_secs_f64(value.parse::<f64>().map_err(|_| bad())? / 1000.0)
            }
            "--loss-pct" => d.loss = value.parse::<f64>().map_err(|_| bad())? / 100.0,
            "--seed" => d.seed = value.parse().map_err(|_| bad())?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(out)
}

/// A FIFO of (release time, packet): release times never decrease (jitter does not
/// reorder), so one queue and one writer suffice.
type DelayLine = Arc<(Mutex<VecDeque<(Instant, Vec<u8>)>>, Condvar)>;

fn serve(iface: Arc<Iface>, d: Direction) -> [std::thread::JoinHandle<()>; 2] {
    let line: DelayLine = Arc::new((Mutex::new(VecDeque::new()), Condvar::new()));
    let (reader_iface, reader_line) = (iface.clone(), line.clone());
    let reader = std::thread::spawn(move || {
        let mut rng = d.seed.max(1);
        let mut buf = vec![0u8; 65536];
        let mut last_release = Instant::now();
        loop {
            let n = match reader_iface.recv(&mut buf) {
                Ok(n) => n,
                Err(e) => {
                    eprintln!("error: reading {}: {e}", d.dev);
                    std::process::exit(1);
                }
            };
            // xorshift64: reproducible loss and jitter for a given seed.
            let mut uniform = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as f64 / u64::MAX as f64
            };
            if uniform() < d.loss {
                continue;
            }
            let jitter = d.jitter.mul_f64(uniform());
            last_release = last_release.max(Instant::now() + d.delay + jitter);
            let (queue, ready) = &*reader_line;
            let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
            q.push_back((last_release, buf[..n].to_vec()));
            ready.notify_one();
        }
    });
    let writer = std::thread::spawn(move || {
        let (queue, ready) = &*line;
        let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let now = Instant::now();
            match q.front() {
                None => q = ready.wait(q).unwrap_or_else(|p| p.into_inner()),
                Some((due, _)) if *due > now => {
                    let wait = *due - now;
                    q = ready
                        .wait_timeout(q, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                Some(_) => {
                    let Some((_, packet)) = q.pop_front() else {
                        continue;
                    };
                    drop(q);
                    let _ = iface.send(&packet);
                    q = queue.lock().unwrap_or_else(|p| p.into_inner());
                }
            }
        }
    });
    [reader, writer]
}
