//! `braid demo`: the namespace testbed of `integration/testbed.sh` (client, entry,
//! three uplinks of 16, 32 and 50 Mbit/s, exit, server) with both gateways and three
//! bulk TCP downloads, a live per-uplink table, and a clean teardown on exit, Ctrl-C or
//! failure. Needs root, iproute2 and iperf3 (`integration/testbed.sh deps`).

pub mod testbed;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

use testbed::{Ready, Testbed};

const NAME: &str = "braid-demo";
const RATES: [u32; 3] = [16, 32, 50];

/// Runs the demo for `seconds` (until Ctrl-C when `None`).
pub fn run(seconds: Option<u64>, scheduler: &str) -> anyhow::Result<()> {
    if crate::core::sched::Algorithm::from_name(scheduler).is_none() {
        bail!(
            "--scheduler: {scheduler:?} is not one of afmt, round-robin, weighted-round-robin, min-rtt, single"
        );
    }
    if !nix::unistd::geteuid().is_root() {
        bail!("the demo builds network namespaces: run it as root");
    }
    for tool in ["ip", "tc", "iperf3"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map_or(true, |o| !o.status.success())
        {
            bail!(
                "the demo needs {tool}: install iproute2 and iperf3 (integration/testbed.sh deps)"
            );
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc_on(move || flag.store(true, Ordering::Relaxed))?;
    let testbed = Demo::up(scheduler)?;
    println!("gateways up; starting three bulk TCP downloads (CUBIC) through braid ({scheduler})");
    let goodput = Arc::new(AtomicU64::new(0));
    testbed.start_traffic(goodput.clone())?;
    let mut previous = testbed.lane_counters()?;
    let mut elapsed = 0u64;
    while !stop.load(Ordering::Relaxed) && seconds.is_none_or(|s| elapsed < s) {
        std::thread::sleep(Duration::from_secs(1));
        elapsed += 1;
        // Ctrl-C reaches the gateways too (one process group): once it came, a
        // gateway that no longer answers is the stop, not an error.
        let now = match testbed.lane_counters() {
            Ok(now) => now,
            Err(_) if stop.load(Ordering::Relaxed) => break,
            Err(e) => return Err(e),
        };
        print_table(
            &previous,
            &now,
            f64::from_bits(goodput.load(Ordering::Relaxed)),
            elapsed,
            scheduler,
        );
        previous = now;
    }
    println!("stopping; tearing the testbed down");
    Ok(())
}

/// What the exit reports per uplink (it schedules the downloads).
#[derive(Debug, Clone, Default)]
struct Uplink {
    tx_bytes: f64,
    srtt: f64,
    cwnd: f64,
}

fn print_table(
    before: &[Uplink],
    now: &[Uplink],
    goodput_mbit: f64,
    elapsed: u64,
    scheduler: &str,
) {
    let rates: Vec<f64> = before
        .iter()
        .zip(now)
        .map(|(b, n)| (n.tx_bytes - b.tx_bytes) * 8.0 / 1e6)
        .collect();
    let total: f64 = rates.iter().sum();
    let mut out = String::new();
    out.push_str("\x1b[2J\x1b[H");
    out.push_str(&format!(
        "braid demo: three TCP downloads over uplinks of {} Mbit/s, scheduler {scheduler}, {elapsed} s (Ctrl-C to stop)\n\n",
        RATES.map(|r| r.to_string()).join(", ")
    ));
    out.push_str(&format!(
        "{:8} {:>9} {:>12} {:>7} {:>9} {:>9}\n",
        "uplink", "capacity", "rate Mbit/s", "share", "SRTT ms", "cwnd KB"
    ));
    for (i, (u, rate)) in now.iter().zip(&rates).enumerate() {
        let share = if total > 0.0 {
            100.0 * rate / total
        } else {
            0.0
        };
        out.push_str(&format!(
            "{:8} {:>9} {:>12.1} {:>6.0}% {:>9.1} {:>9.0}\n",
            format!("up{}", i + 1),
            format!("{} Mbit/s", RATES[i]),
            rate,
            share,
            u.srtt * 1000.0,
            u.cwnd / 1000.0
        ));
    }
    out.push_str(&format!(
        "\ntotal goodput {goodput_mbit:.1} Mbit/s (iperf3, last second); lanes carried {total:.1} Mbit/s of {} Mbit/s\n",
        RATES.iter().sum::<u32>()
    ));
    print!("{out}");
    let _ = std::io::stdout().flush();
}

/// The demo's testbed, with the script written to a directory of its own; dropping
/// it stops the traffic and removes every namespace and the directory.
struct Demo {
    // Declared first: dropped (torn down) before the directory goes.
    testbed: Testbed,
    _dir: TempDir,
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Demo {
    fn up(scheduler: &str) -> anyhow::Result<Demo> {
        let dir = TempDir(std::env::temp_dir().join(format!("braid-demo-{}", std::process::id())));
        std::fs::create_dir_all(&dir.0).with_context(|| format!("creating {}", dir.0.display()))?;
        let script = testbed::write_scripts(&dir.0)?;
        let braid = std::env::current_exe().context("locating the braid binary")?;
        let rates = RATES.map(|r| r.to_string()).join(" ");
        let env = [
            ("RATES", rates.as_str()),
            ("BRAID", &braid.display().to_string()),
            ("SCHEDULER", scheduler),
            ("STATE_DIR", &dir.0.display().to_string()),
        ];
        let testbed = Testbed::up(NAME, &script, &env)?;
        testbed.start()?;
        Ok(Demo { testbed, _dir: dir })
    }

    /// Starts an iperf3 server and client; the client's per-second total lands in
    /// `goodput` (Mbit/s as f64 bits).
    fn start_traffic(&self, goodput: Arc<AtomicU64>) -> anyhow::Result<()> {
        let tb = &self.testbed;
        tb.spawn("sv", &["iperf3", "-s"], Ready::Listens(5201))?;
        let client = tb.spawn(
            "cl",
            &[
                "iperf3",
                "-c",
                "198.18.100.2",
                "-R",
                "-P",
                "3",
                "-t",
                "86400",
                "-i",
                "1",
                "-C",
                "cubic",
                "--forceflush",
            ],
            Ready::Now,
        )?;
        let stdout = tb.take_stdout(client).context("iperf3 output")?;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // "[SUM]   3.00-4.00   sec  11.2 MBytes  94.0 Mbits/sec ..."
                if !line.starts_with("[SUM]") {
                    continue;
                }
                let words: Vec<&str> = line.split_whitespace().collect();
                let mbit = words
                    .iter()
                    .position(|w| *w == "Mbits/sec")
                    .and_then(|i| words.get(i.checked_sub(1)?))
                    .and_then(|v| v.parse::<f64>().ok());
                if let Some(v) = mbit {
                    goodput.store(v.to_bits(), Ordering::Relaxed);
                }
            }
        });
        Ok(())
    }

    /// Per-uplink counters from the exit's `/metrics` (it schedules the downloads).
    fn lane_counters(&self) -> anyhow::Result<Vec<Uplink>> {
        let metrics = self.testbed.metrics("ex")?;
        let read = |name: &str, i: usize| {
            let labels = format!("{{colour=\"blue\",site=\"site1\",uplink=\"up{}\"}}", i + 1);
            testbed::sample(&metrics, &format!("{name}{labels}")).unwrap_or(0.0)
        };
        Ok((0..RATES.len())
            .map(|i| Uplink {
                tx_bytes: read("braid_lane_tx_bytes_total", i),
                srtt: read("braid_lane_srtt_seconds", i),
                cwnd: read("braid_lane_cwnd_bytes", i),
            })
            .collect())
    }
}

/// Calls `f` on SIGINT or SIGTERM, from a thread of its own.
fn ctrlc_on(f: impl Fn() + Send + 'static) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the signal thread")?;
    std::thread::spawn(move || {
        runtime.block_on(async {
            let (Ok(mut term), Ok(mut int)) = (
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()),
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()),
            ) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            f();
        });
    });
    Ok(())
}
