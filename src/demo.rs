//! `braid demo`: the namespace testbed of `integration/testbed.sh` (client, entry,
//! three uplinks of 16, 32 and 50 Mbit/s, exit, server) with both gateways and three
//! bulk TCP downloads, a live per-uplink table, and a clean teardown on exit, Ctrl-C or
//! failure. Needs root, iproute2 and iperf3 (`integration/testbed.sh deps`).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

/// The testbed script, built into the binary so that the demo runs from anywhere.
const TESTBED: &str = include_str!("../integration/testbed.sh");
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
    let testbed = Testbed::up(scheduler)?;
    println!("gateways up; starting three bulk TCP downloads (CUBIC) through braid ({scheduler})");
    let goodput = Arc::new(AtomicU64::new(0));
    testbed.start_traffic(goodput.clone())?;
    let mut previous = testbed.lane_counters()?;
    let mut elapsed = 0u64;
    while !stop.load(Ordering::Relaxed) && seconds.is_none_or(|s| elapsed < s) {
        std::thread::sleep(Duration::from_secs(1));
        elapsed += 1;
        let now = testbed.lane_counters()?;
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

/// The demo's testbed; dropping it stops the traffic and removes every namespace.
struct Testbed {
    dir: PathBuf,
    children: std::sync::Mutex<Vec<Child>>,
}

impl Testbed {
    fn up(scheduler: &str) -> anyhow::Result<Testbed> {
        let dir = std::env::temp_dir().join(format!("braid-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("testbed.sh"), TESTBED).context("writing the testbed script")?;
        let testbed = Testbed {
            dir,
            children: std::sync::Mutex::new(Vec::new()),
        };
        testbed.script("up", scheduler)?;
        testbed.script("start", scheduler)?;
        Ok(testbed)
    }

    fn script(&self, cmd: &str, scheduler: &str) -> anyhow::Result<()> {
        let braid = std::env::current_exe().context("locating the braid binary")?;
        let out = Command::new("bash")
            .arg(self.dir.join("testbed.sh"))
            .args([cmd, NAME])
            .env("RATES", RATES.map(|r| r.to_string()).join(" "))
            .env("BRAID", braid)
            .env("SCHEDULER", scheduler)
            .env("STATE_DIR", &self.dir)
            .output()
            .with_context(|| format!("running testbed.sh {cmd}"))?;
        if !out.status.success() {
            bail!(
                "testbed.sh {cmd} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Starts an iperf3 server and client; the client's per-second total lands in
    /// `goodput` (Mbit/s as f64 bits).
    fn start_traffic(&self, goodput: Arc<AtomicU64>) -> anyhow::Result<()> {
        let server = Command::new("ip")
            .args(["netns", "exec", &format!("{NAME}-sv"), "iperf3", "-s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting iperf3 -s")?;
        std::thread::sleep(Duration::from_millis(300));
        let mut client = Command::new("ip")
            .args([
                "netns",
                "exec",
                &format!("{NAME}-cl"),
                "iperf3",
                "-c",
                "198.18.100.2",
                "-R",
                "-P",
                "3",
            ])
            .args(["-t", "86400", "-i", "1", "-C", "cubic", "--forceflush"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting iperf3 -c")?;
        let stdout = client.stdout.take().context("iperf3 output")?;
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
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        children.push(client);
        children.push(server);
        Ok(())
    }

    /// Per-uplink counters from the exit's `/metrics`.
    fn lane_counters(&self) -> anyhow::Result<Vec<Uplink>> {
        let body = http_get_in_netns(&format!("{NAME}-ex"), "127.0.0.1:9190", "/metrics")?;
        let mut uplinks = vec![Uplink::default(); RATES.len()];
        for line in body.lines() {
            let Some((sample, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            for (i, u) in uplinks.iter_mut().enumerate() {
                if !sample.contains(&format!("uplink=\"up{}\"", i + 1)) {
                    continue;
                }
                if sample.starts_with("braid_lane_tx_bytes_total") {
                    u.tx_bytes = value;
                } else if sample.starts_with("braid_lane_srtt_seconds") {
                    u.srtt = value;
                } else if sample.starts_with("braid_lane_cwnd_bytes") {
                    u.cwnd = value;
                }
            }
        }
        Ok(uplinks)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        for child in self
            .children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter_mut()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new("bash")
            .arg(self.dir.join("testbed.sh"))
            .args(["down", NAME])
            .env("STATE_DIR", &self.dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `GET path` from `addr` inside the network namespace `ns` (on a thread that enters
/// it, so the rest of the process stays where it is).
fn http_get_in_netns(ns: &str, addr: &str, path: &str) -> anyhow::Result<String> {
    let (ns, addr, path) = (
        format!("/run/netns/{ns}"),
        addr.to_string(),
        path.to_string(),
    );
    std::thread::spawn(move || -> anyhow::Result<String> {
        let file = std::fs::File::open(&ns).with_context(|| format!("opening {ns}"))?;
        nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
            .context("entering the namespace")?;
        let mut stream =
            std::net::TcpStream::connect(&addr).with_context(|| format!("connecting to {addr}"))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: braid\r\nConnection: close\r\n\r\n"
        )?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        Ok(text
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_string())
            .unwrap_or_default())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the metrics reader panicked"))?
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
