//! `braid loadgen`: many sites against one exit from one process, to find what an
//! exit holds. Each site is a real entry (its own engine, driver and dialers, real
//! QUIC lanes with a certificate issued for it) whose TUN device is a socket pair
//! ([`site`]); what a site's LAN sends crosses the exit to another site's LAN.
//!
//! SIGUSR1 makes the first `--send-sites` sites send at once, each to the next,
//! `--rate-kbps` each; their goodput is measured after [`SETTLE`] over
//! `--send-seconds`, and they stop.
//!
//! Output: a JSON line every half second (`t`, `lanes_up`), one when every lane is
//! up, one per send (`goodput`), and a summary at the end (time until every lane was
//! up, the fastest rate of lanes coming up, the last send's goodput).

mod site;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::control::metrics::Metrics;
pub use site::exit_sites;
use site::{MAX_SITES, Shared, Site};

/// How often the lanes up are reported.
const REPORT_EVERY: Duration = Duration::from_millis(500);
/// How long sending sites send before their goodput is measured: their lanes'
/// windows open.
const SETTLE: Duration = Duration::from_secs(2);
/// File descriptors a site takes: a UDP socket per lane, the socket pair, its
/// netlink watch and the writing thread's; with room to spare.
const FILES_PER_SITE: u64 = 16;

/// What `braid loadgen run` is asked to do.
pub struct Options {
    /// The exit's `address:port`, and the name in its certificate.
    pub exit: String,
    pub exit_name: String,
    /// The CA directory: `ca.pem` and `ca.key`; each site's certificate is issued
    /// there unless it exists.
    pub ca: PathBuf,
    pub sites: usize,
    /// The uplinks' interfaces.
    pub interfaces: Vec<String>,
    /// Stop after this long (none: at SIGINT or SIGTERM).
    pub seconds: Option<u64>,
    /// How many sites send, each to the next of them, at SIGUSR1.
    pub send_sites: usize,
    pub rate_kbps: u64,
    /// What the first sending site sends instead, if given.
    pub busy_kbps: Option<u64>,
    /// How long the sending sites' goodput is measured over.
    pub send_seconds: u64,
}

pub fn run(options: Options) -> anyhow::Result<()> {
    if options.sites == 0 || options.sites > MAX_SITES {
        bail!("--sites must be 1 to {MAX_SITES}, not {}", options.sites);
    }
    if options.interfaces.is_empty() {
        bail!("--uplinks names no interface");
    }
    if options.send_sites > options.sites {
        bail!(
            "--send-sites {} is more than the {} sites",
            options.send_sites,
            options.sites
        );
    }
    if !site::has_ca(&options.ca) {
        bail!(
            "{}: no CA (ca.pem and ca.key; `braid cert init` writes one)",
            options.ca.display()
        );
    }
    let lanes = options.sites * options.interfaces.len() * 2;
    raise_file_limit(options.sites as u64 * FILES_PER_SITE + 256)?;
    // Issued before the clock starts: the time until the lanes are up is the exit's.
    for index in 0..options.sites {
        let id = site::site_id(index);
        if !options.ca.join(format!("{id}.pem")).exists() {
            crate::cert::issue(&options.ca, &id)?;
        }
    }
    // Thousands of lanes in one process: without GRO each receive buffer is 47 KB.
    crate::lane::dscp::cap_receive_segments(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(generate(options, lanes))
}

async fn generate(options: Options, lanes: usize) -> anyhow::Result<()> {
    let shared = Shared {
        exit: options.exit.clone(),
        exit_name: options.exit_name.clone(),
        ca_dir: options.ca.clone(),
        interfaces: options.interfaces.clone(),
        metrics: std::sync::Arc::new(Metrics::new()?),
        clock: Clock::new(),
        shutdown: CancellationToken::new(),
        tasks: TaskTracker::new(),
    };
    let stop = shared.shutdown.clone();
    tokio::spawn(cancel_on_signal(stop.clone()));
    let mut send_signal =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
            .context("listening for SIGUSR1")?;
    let started = shared.clock.now();
    let elapsed = || shared.clock.now().saturating_since(started).as_secs_f64();
    let sites = (0..options.sites)
        .map(|index| Site::start(index, &shared))
        .collect::<anyhow::Result<Vec<Site>>>()?;
    let mut all_up: Option<f64> = None;
    let mut fastest = 0.0f64;
    let mut last = (0.0, 0usize);
    let mut goodput = Vec::new();
    let mut sending: Option<Sending> = None;
    let mut tick = tokio::time::interval(REPORT_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = send_signal.recv() => {
                if sending.is_none() && options.send_sites > 0 {
                    sending = Some(Sending::start(&sites[..options.send_sites], &options, &shared, elapsed()));
                }
                continue;
            }
            () = stop.cancelled() => break,
        }
        let (t, up) = (elapsed(), shared.metrics.lanes_up());
        println!("{}", json!({"t": round(t), "lanes_up": up, "lanes": lanes}));
        fastest = fastest.max((up as f64 - last.1 as f64) / (t - last.0));
        last = (t, up);
        if all_up.is_none() && up >= lanes {
            all_up = Some(t);
            println!("{}", json!({"event": "all_up", "t": round(t)}));
        }
        if let Some(send) = &mut sending
            && let Some(measured) = send.step(&sites[..options.send_sites], &options, t)
        {
            println!(
                "{}",
                json!({"event": "goodput", "t": round(t), "goodput_kbps": summarise(&measured, &options)})
            );
            goodput = measured;
            sending = None;
        }
        if options.seconds.is_some_and(|s| t >= s as f64) {
            break;
        }
    }
    stop.cancel();
    shared.tasks.close();
    let _ = tokio::time::timeout(Duration::from_secs(5), shared.tasks.wait()).await;
    println!(
        "{}",
        json!({"summary": {
            "sites": options.sites,
            "lanes": lanes,
            "all_up_s": all_up.map(round),
            "lanes_up_per_s_fastest": round(fastest),
            "goodput_kbps": summarise(&goodput, &options),
        }})
    );
    Ok(())
}

/// The sending sites, started at `started` (seconds), measured from `measuring`'s
/// instant with each one's count then.
struct Sending {
    stop: CancellationToken,
    started: f64,
    measuring: Option<(f64, Vec<u64>)>,
}

impl Sending {
    fn start(senders: &[Site], options: &Options, shared: &Shared, now: f64) -> Sending {
        let stop = shared.shutdown.child_token();
        for site in senders {
            let to = (site.index + 1) % senders.len();
            let rate = match options.busy_kbps {
                Some(busy) if site.index == 0 => busy,
                _ => options.rate_kbps,
            };
            site.send(to, rate, &shared.tasks, stop.clone());
        }
        Sending {
            stop,
            started: now,
            measuring: None,
        }
    }

    /// At `now`: counts from once the lanes' windows had [`SETTLE`] to open; after
    /// `send_seconds` stops the senders and returns each one's kbit/s received.
    fn step(&mut self, senders: &[Site], options: &Options, now: f64) -> Option<Vec<f64>> {
        match &self.measuring {
            None if now - self.started >= SETTLE.as_secs_f64() => {
                self.measuring = Some((now, senders.iter().map(Site::received).collect()));
                None
            }
            Some((from, counts)) if now - from >= options.send_seconds as f64 => {
                let span = now - from;
                self.stop.cancel();
                Some(
                    senders
                        .iter()
                        .zip(counts)
                        .map(|(site, before)| {
                            (site.received() - before) as f64 * 8.0 / 1000.0 / span
                        })
                        .collect(),
                )
            }
            _ => None,
        }
    }
}

/// The spread of the sending sites' goodput (kbit/s), each counted where it arrives;
/// with a busy site, the others' spread and the busy flow's apart (it arrives at the
/// second site).
fn summarise(goodput: &[f64], options: &Options) -> serde_json::Value {
    let busy = options.busy_kbps.and(goodput.get(BUSY_ARRIVES_AT).copied());
    let others: Vec<f64> = goodput
        .iter()
        .enumerate()
        .filter(|&(i, _)| busy.is_none() || i != BUSY_ARRIVES_AT)
        .map(|(_, g)| *g)
        .collect();
    let goodput = &others[..];
    let mut sorted = goodput.to_vec();
    sorted.sort_by(f64::total_cmp);
    json!({
        "sites": goodput.len(),
        "offered": options.rate_kbps,
        "busy": busy.map(round),
        "busy_offered": options.busy_kbps,
        "min": sorted.first().copied().map(round),
        "median": sorted.get(sorted.len() / 2).copied().map(round),
        "max": sorted.last().copied().map(round),
        "jain": jain(goodput).map(|j| (j * 1000.0).round() / 1000.0),
        "per_site": goodput.iter().map(|g| round(*g)).collect::<Vec<_>>(),
    })
}

/// Where the busy site's flow arrives: the first sending site sends to the second.
const BUSY_ARRIVES_AT: usize = 1;

/// Jain's fairness index of `rates`: 1 when all are equal, 1/n when one has all.
fn jain(rates: &[f64]) -> Option<f64> {
    let sum: f64 = rates.iter().sum();
    let squares: f64 = rates.iter().map(|r| r * r).sum();
    (squares > 0.0).then(|| sum * sum / (rates.len() as f64 * squares))
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Raises the open-file limit to at least `wanted` (the hard limit too, as root).
fn raise_file_limit(wanted: u64) -> anyhow::Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= wanted {
        return Ok(());
    }
    setrlimit(Resource::RLIMIT_NOFILE, wanted.max(soft), wanted.max(hard)).with_context(|| {
        format!("raising the open-file limit to {wanted} (it is {soft}, at most {hard}; as root, or with `ulimit -n {wanted}`)")
    })
}

async fn cancel_on_signal(stop: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        () = stop.cancelled() => {}
    }
    stop.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_for_one_taking_all() {
        assert_eq!(jain(&[5.0, 5.0, 5.0]), Some(1.0));
        assert_eq!(jain(&[9.0, 0.0, 0.0]), Some(1.0 / 3.0));
        assert_eq!(jain(&[0.0, 0.0]), None);
    }
}
