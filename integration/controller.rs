//! Two controllers pointed at one fleet, against a simulated gateway: they do not
//! fight. Started together, both read the same table and put their own as replacing
//! it; the gateway takes one, refuses the other (409), the loser says so and from then
//! on leaves the site to the winner.
// Test code: a failed expectation is a failed test, and timeouts use the wall clock.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

mod common;
mod sim_gateway;

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::braid_bin;
use sim_gateway::{Seen, SimGateway};

/// A loopback port free now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn metrics(port: u16) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .expect("ask for metrics");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read metrics");
    answer
}

fn until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

struct Controller {
    name: &'static str,
    port: u16,
    child: Child,
    log: std::path::PathBuf,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn two_controllers_started_together_one_is_refused_says_so_and_leaves_the_site_to_the_other() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let seen = Arc::new(Seen::default());
    let gateway = Arc::new(SimGateway::new("site1", 2));
    let port = runtime.block_on(gateway.clone().serve(seen.clone()));
    let dir = std::env::temp_dir().join(format!("braid-two-controllers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), "test\n").unwrap();
    let start = |name: &'static str| {
        let listen = free_port();
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(
            &config,
            format!(
                "name = \"{name}\"\nlisten = \"127.0.0.1:{listen}\"\nperiod_ms = 2000\nsolver = \"fast\"\n\
                 [[gateways]]\nurl = \"http://127.0.0.1:{port}\"\ntoken_file = \"token\"\n"
            ),
        )
        .unwrap();
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(braid_bin())
            .args(["controller", "--config"])
            .arg(&config)
            .env("RUST_LOG", "info")
            .stderr(std::fs::File::create(&log).unwrap())
            .stdout(Stdio::null())
            .spawn()
            .expect("start a controller");
        Controller {
            name,
            port: listen,
            child,
            log,
        }
    };
    let controllers = [start("ctl-a"), start("ctl-b")];
    assert!(
        until(Duration::from_secs(10), || {
            seen.puts.load(Ordering::Relaxed) >= 1 && seen.refused.load(Ordering::Relaxed) >= 1
        }),
        "expected one table taken and one refused: {} taken, {} refused",
        seen.puts.load(Ordering::Relaxed),
        seen.refused.load(Ordering::Relaxed)
    );
    let winner = gateway.table.lock().unwrap()["controller"]
        .as_str()
        .expect("the table names its controller")
        .to_string();
    let (won, lost) = if winner == controllers[0].name {
        (&controllers[0], &controllers[1])
    } else {
        (&controllers[1], &controllers[0])
    };
    assert_eq!(winner, won.name);

    // Two periods on (the period is long enough that a controller slow to start still
    // reads within it), the loser has seen the winner's table: it holds and puts
    // nothing more.
    std::thread::sleep(Duration::from_millis(4500));
    assert_eq!(
        seen.refused.load(Ordering::Relaxed),
        1,
        "the loser put again"
    );
    assert_eq!(gateway.table.lock().unwrap()["controller"], winner.as_str());
    let lost_metrics = metrics(lost.port);
    assert!(
        lost_metrics.contains("braid_controller_sites{state=\"held\"} 1"),
        "{lost_metrics}"
    );
    assert!(
        lost_metrics
            .lines()
            .any(|l| l.starts_with("braid_controller_push_failures_total{")
                && l.contains("reason=\"refused\"")
                && l.ends_with(" 1")),
        "{lost_metrics}"
    );
    let won_metrics = metrics(won.port);
    assert!(
        won_metrics.contains("braid_controller_sites{state=\"own\"} 1"),
        "{won_metrics}"
    );
    assert!(!won_metrics.contains("reason=\"refused\""), "{won_metrics}");
    let lost_log = std::fs::read_to_string(&lost.log).unwrap();
    assert!(
        lost_log.contains("refused the table"),
        "the loser did not say so: {lost_log}"
    );
    assert!(
        lost_log.contains(&format!("controller {winner} allocates the site")),
        "{lost_log}"
    );
    drop(controllers);
    std::fs::remove_dir_all(dir).unwrap();
}
