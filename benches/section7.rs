//! The pacing paper's Section 7 experiment in small: one site's downloads of 20, 60
//! and 100 applications of the five classes (integration/appmix.py generates each
//! class's traffic), over one uplink of 100 Mbit/s and over two of 50 Mbit/s and
//! unequal delay, best effort (the applications classified, nothing paced) against
//! braid paced by `braid controller`. Each application's utility is its class's
//! utility function at the throughput and delay it measured; reported per class the
//! median and the least, against the least the controller computed, with the
//! loss on the way (braid's queues and the routers') and the queueing delay VoIP
//! measured. Needs root.
//!
//! `cargo bench --bench section7 [-- SECONDS [APPS...] [one|two]]`: each run's length
//! (default 40 s, of which the first 12 are not measured: the controller's first
//! periods), the numbers of applications (default 20 60 100), the topologies
//! (default both).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

#[path = "../integration/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use braid::core::allocation::catalogue;
use common::{Ready, SERVER_V4, Testbed, braid_bin, repo};
use serde_json::Value;

const CLASSES: [&str; 5] = ["web", "download", "terminal", "video", "voip"];
const WARMUP_S: u64 = 12;
const DEFAULT_SECONDS: u64 = 40;

struct Topology {
    name: &'static str,
    env: &'static [(&'static str, &'static str)],
    /// The uplinks' one-way delay with no queue, as configured.
    base_ms: f64,
}

const TOPOLOGIES: [Topology; 2] = [
    Topology {
        name: "one uplink of 100 Mbit/s, 5 ms",
        env: &[("RATES", "100"), ("DELAYS", "5"), ("KNOWN_RATES", "1")],
        base_ms: 5.0,
    },
    Topology {
        name: "two uplinks of 50 Mbit/s, 5 and 25 ms",
        env: &[("RATES", "50 50"), ("DELAYS", "5 25"), ("KNOWN_RATES", "1")],
        base_ms: 5.0,
    },
];

/// What one run gave.
struct Run {
    /// Per class: the utilities of its applications.
    utilities: BTreeMap<&'static str, Vec<f64>>,
    /// The least utility the controller computed (downloads), if it ran.
    computed: Option<f64>,
    /// Packets dropped on the way, as a share of those sent.
    loss: f64,
    /// VoIP's median one-way delay above the uplinks' own.
    queue_ms: f64,
    /// Each application's measurement and utility.
    raw: Vec<Value>,
}

fn spec(apps: usize) -> String {
    (0..apps)
        .map(|i| format!("{}:{}", CLASSES[i % CLASSES.len()], 20000 + i))
        .collect::<Vec<_>>()
        .join(",")
}

fn table(apps: usize) -> String {
    let apps: Vec<Value> = (0..apps)
        .map(|i| {
            serde_json::json!({
                "name": format!("app{i}"),
                "match": {"remote_ports": format!("{}", 20000 + i)},
                "utility": CLASSES[i % CLASSES.len()],
            })
        })
        .collect();
    serde_json::json!({"version": 1, "apps": apps}).to_string()
}

/// The sum of every sample of a metric.
fn total(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Packets sent towards the site and dropped on the way, so far: the exit's (its
/// lanes' packets; what its queues and application queues dropped) and the routers'
/// (tbf, both ways).
fn bottleneck(tb: &Testbed, uplinks: usize) -> (f64, f64) {
    let exit = tb.metrics("ex");
    let mut sent = total(&exit, "braid_lane_tx_packets_total");
    let mut dropped =
        total(&exit, "braid_packets_dropped_total") + total(&exit, "braid_app_drops_total");
    for r in 1..=uplinks {
        let out = tb.ok(&format!("r{r}"), &["tc", "-s", "qdisc", "show"]);
        for line in out.lines().filter(|l| l.trim_start().starts_with("Sent")) {
            // " Sent 123 bytes 45 pkt (dropped 6, overlimits ...)"
            let words: Vec<&str> = line.split_whitespace().collect();
            sent += words[3].parse::<f64>().unwrap_or(0.0);
            dropped += words[6].trim_end_matches(',').parse::<f64>().unwrap_or(0.0);
        }
    }
    (sent, dropped)
}

fn run(topology: &Topology, apps: usize, controlled: bool, seconds: u64) -> Run {
    let mut env = topology.env.to_vec();
    env.push(("EXIT_ADMIN_LISTEN", "0.0.0.0:9190"));
    let mut tb = Testbed::up("s7", &env);
    tb.start();
    let token = std::fs::read_to_string(tb.path("admin.token")).unwrap();
    for gateway in ["en", "ex"] {
        let (status, body) = tb.admin_request(
            gateway,
            "PUT",
            "/v1/sites/site1/pacing",
            Some(token.trim()),
            table(apps).as_bytes(),
        );
        assert_eq!(status, 200, "{body}");
    }
    let controller = controlled.then(|| {
        let config = tb.path("controller.toml");
        std::fs::write(
            &config,
            "name = \"s7\"\nperiod_ms = 2000\n\
             [[gateways]]\nurl = \"http://127.0.0.1:9190\"\ntoken_file = \"admin.token\"\n\
             [[gateways]]\nurl = \"http://198.19.200.1:9190\"\ntoken_file = \"admin.token\"\n",
        )
        .unwrap();
        tb.spawn(
            "en",
            &[
                braid_bin(),
                "controller",
                "--config",
                config.to_str().unwrap(),
            ],
            Ready::Listens(9290),
        )
    });
    let appmix = repo().join("integration/appmix.py");
    let appmix = appmix.to_str().unwrap();
    let (server_out, client_out) = (tb.path("server.json"), tb.path("client.json"));
    let spec = spec(apps);
    let server = tb.spawn(
        "sv",
        &[
            "python3",
            appmix,
            "serve",
            "--spec",
            &spec,
            "--out",
            server_out.to_str().unwrap(),
        ],
        Ready::Says("serving"),
    );
    let uplinks = topology.env[0].1.split_whitespace().count();
    let before = bottleneck(&tb, uplinks);
    let client = tb.spawn(
        "cl",
        &[
            "python3",
            appmix,
            "client",
            "--spec",
            &spec,
            "--server",
            SERVER_V4,
            "--seconds",
            &seconds.to_string(),
            "--warmup",
            &WARMUP_S.to_string(),
            "--out",
            client_out.to_str().unwrap(),
        ],
        Ready::Now,
    );
    // While the client measures: the least utility the controller computed, every
    // 2 s (the median stands), and at the end the rates in force.
    let begun = std::time::Instant::now();
    let mut computed = Vec::new();
    std::thread::sleep(Duration::from_secs(WARMUP_S));
    while controller.is_some() && begun.elapsed() < Duration::from_secs(seconds - 1) {
        let metrics = tb.ok(
            "en",
            &[
                "python3",
                "-c",
                "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9290/metrics').read().decode())",
            ],
        );
        computed.extend(braid::demo::testbed::sample(
            &metrics,
            "braid_controller_min_utility{direction=\"down\",site=\"site1\"}",
        ));
        std::thread::sleep(Duration::from_secs(2));
    }
    let (_, body) = tb.admin_get("ex", "/v1/sites/site1/pacing");
    let in_force: Value = serde_json::from_str(&body).unwrap();
    tb.wait(client, Duration::from_secs(seconds + 30));
    let after = bottleneck(&tb, uplinks);
    let computed = (!computed.is_empty()).then(|| median(&computed));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(tb.child_pid(server) as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    tb.wait(server, Duration::from_secs(10));
    let client: Value =
        serde_json::from_str(&std::fs::read_to_string(&client_out).unwrap()).unwrap();
    let server: Value =
        serde_json::from_str(&std::fs::read_to_string(&server_out).unwrap()).unwrap();
    let (from, to) = (
        client["window"][0].as_f64().unwrap(),
        client["window"][1].as_f64().unwrap(),
    );
    let classes = catalogue::defaults().unwrap();
    let mut utilities: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let mut voip_delays = Vec::new();
    let mut raw = Vec::new();
    for app in client["apps"].as_array().unwrap() {
        let class = CLASSES
            .iter()
            .find(|c| app["class"] == **c)
            .copied()
            .unwrap();
        let port = app["port"].as_u64().unwrap().to_string();
        // TCP classes: half the median smoothed round trip within the window.
        let delay = app["delay_ms"].as_f64().unwrap_or_else(|| {
            let mut halves: Vec<f64> = server[&port]
                .as_array()
                .map(|samples| {
                    samples
                        .iter()
                        .filter(|s| (from..to).contains(&s[0].as_f64().unwrap()))
                        .map(|s| s[1].as_f64().unwrap() / 2.0)
                        .collect()
                })
                .unwrap_or_default();
            halves.sort_by(f64::total_cmp);
            halves
                .get(halves.len() / 2)
                .copied()
                .unwrap_or(f64::INFINITY)
        });
        if class == "voip" {
            voip_delays.push(delay);
        }
        let function = &classes.iter().find(|c| c.name == class).unwrap().utility;
        let measured = app["throughput_kbps"].as_f64().unwrap();
        // A class of one fixed rate (terminal, VoIP) has its grid's throughput when
        // it got what it asked for (95 % of it: the measurement's edges), and that
        // share of it otherwise.
        let kbps = match app["demand_kbps"].as_f64() {
            Some(demand) if measured >= 0.95 * demand => function.throughput_kbps()[0],
            Some(demand) => measured / demand * function.throughput_kbps()[0],
            None => measured,
        };
        let utility = function.at(kbps, delay);
        let paced = in_force["apps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["match"]["remote_ports"] == port.as_str())
            .and_then(|a| a["rate_down_kbps"].as_u64());
        raw.push(
            serde_json::json!({"class": class, "port": port, "kbps": measured,
            "delay_ms": delay, "utility": utility, "loss": app.get("loss"),
            "paced_kbps": paced}),
        );
        utilities.entry(class).or_default().push(utility);
    }
    voip_delays.sort_by(f64::total_cmp);
    Run {
        utilities,
        computed,
        loss: (after.1 - before.1) / (after.0 - before.0 + after.1 - before.1).max(1.0),
        queue_ms: voip_delays[voip_delays.len() / 2] - topology.base_ms,
        raw,
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn least(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn main() {
    // SECONDS, then which numbers of applications (default 20 60 100) and which
    // topologies (`one`, `two`; default both).
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let numbers: Vec<u64> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let seconds = numbers.first().copied().unwrap_or(DEFAULT_SECONDS);
    let sizes: Vec<usize> = match numbers.len() {
        0 | 1 => vec![20, 60, 100],
        _ => numbers[1..].iter().map(|&n| n as usize).collect(),
    };
    let chosen: Vec<&Topology> = TOPOLOGIES
        .iter()
        .filter(|t| {
            let named: Vec<&String> = args.iter().filter(|a| a.parse::<u64>().is_err()).collect();
            named.is_empty() || named.iter().any(|n| t.name.starts_with(n.as_str()))
        })
        .collect();
    let mut report = Vec::new();
    for topology in chosen {
        println!("\n{}", topology.name);
        println!(
            "{:>5} {:<11} {:>7} {:>9} | {}",
            "apps",
            "mode",
            "least",
            "computed",
            CLASSES
                .iter()
                .map(|c| format!("{c:>13}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        for &apps in &sizes {
            for controlled in [false, true] {
                let r = run(topology, apps, controlled, seconds);
                let all: Vec<f64> = r.utilities.values().flatten().copied().collect();
                let mode = if controlled {
                    "controller"
                } else {
                    "best effort"
                };
                println!(
                    "{apps:>5} {mode:<11} {:>7.2} {:>9} | {}   loss {:.2} %, VoIP queue {:.1} ms",
                    least(&all),
                    r.computed.map_or("-".into(), |c| format!("{c:.2}")),
                    CLASSES
                        .iter()
                        .map(|c| {
                            let u = &r.utilities[c];
                            format!("{:>6.2}/{:<6.2}", median(u), least(u))
                        })
                        .collect::<Vec<_>>()
                        .join(" "),
                    r.loss * 100.0,
                    r.queue_ms,
                );
                report.push(serde_json::json!({
                    "topology": topology.name, "apps": apps, "mode": mode,
                    "least": least(&all), "computed_least": r.computed,
                    "loss": r.loss, "voip_queue_ms": r.queue_ms, "apps": r.raw,
                    "classes": CLASSES.iter().map(|c| (c.to_string(), serde_json::json!({
                        "median": median(&r.utilities[c]), "least": least(&r.utilities[c])
                    }))).collect::<serde_json::Map<_, _>>(),
                }));
            }
        }
    }
    println!("\n(per class: median/least utility; least: of every application)");
    let out = repo().join("target/section7.json");
    std::fs::write(&out, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!("written to {}", out.display());
}
