//! Harness for tests that run braid in the network-namespace testbed
//! (`integration/testbed.sh`). Needs root. Testbeds are built one at a time (a
//! process-wide lock) and torn down by `Drop`, also when a test fails.
#![allow(dead_code)] // each test binary uses its own part of the harness

use std::path::PathBuf;
use std::process::Output;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

pub use braid::demo::testbed::Ready;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub const SERVER_V4: &str = "198.18.100.2";
pub const SERVER_V6: &str = "fd00:100::2";
pub const CLIENT_V4: &str = "198.18.1.2";
pub const CLIENT2_V4: &str = "198.18.2.2";

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn braid_bin() -> &'static str {
    env!("CARGO_BIN_EXE_braid")
}

pub fn linkemu_bin() -> &'static str {
    env!("CARGO_BIN_EXE_braid-linkemu")
}

/// Holds the testbed lock without building one (for `braid demo`, which builds its own).
pub fn exclusive() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// A testbed of the shared harness (`braid::demo::testbed`), built while holding the
/// process-wide lock; every failure panics with the gateways' logs.
pub struct Testbed {
    inner: braid::demo::testbed::Testbed,
    pub name: String,
    pub state: PathBuf,
    _lock: MutexGuard<'static, ()>,
}

impl Testbed {
    /// Builds the testbed `name` with the script's environment knobs (RATES, DELAYS...).
    pub fn up(name: &str, env: &[(&str, &str)]) -> Testbed {
        let lock = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        assert!(
            nix::unistd::geteuid().is_root(),
            "the end-to-end tests build network namespaces and need root"
        );
        let mut env = env.to_vec();
        env.push(("BRAID", braid_bin()));
        env.push(("LINKEMU", linkemu_bin()));
        let script = repo().join("integration/testbed.sh");
        let inner = braid::demo::testbed::Testbed::up(name, &script, &env)
            .unwrap_or_else(|e| panic!("{e:#}"));
        Testbed {
            inner,
            name: name.to_string(),
            state: PathBuf::from("/tmp/braid-testbed").join(name),
            _lock: lock,
        }
    }

    /// Writes certificates and configs and starts the gateways; returns once every
    /// site's client reaches the server through the tunnel.
    pub fn start(&self) {
        let started = self.inner.start();
        self.check(started);
    }

    /// The value of `result`, or a panic with the gateways' logs.
    fn check<T>(&self, result: anyhow::Result<T>) -> T {
        result.unwrap_or_else(|e| panic!("{e:#}\nlogs:\n{}", self.logs()))
    }

    pub fn ns(&self, role: &str) -> String {
        self.inner.ns(role)
    }

    /// Runs a command in a namespace and waits for it.
    pub fn run(&self, role: &str, args: &[&str]) -> Output {
        let out = self.inner.run(role, args);
        self.check(out)
    }

    /// Runs a command in a namespace, asserting success, and returns its stdout.
    pub fn ok(&self, role: &str, args: &[&str]) -> String {
        let out = self.run(role, args);
        assert!(
            out.status.success(),
            "{args:?} in {role} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts a command in a namespace and waits until it is ready; it is killed
    /// when the testbed goes down.
    pub fn spawn(&mut self, role: &str, args: &[&str], ready: Ready<'_>) -> usize {
        let handle = self.inner.spawn(role, args, ready);
        self.check(handle)
    }

    pub fn child_pid(&self, handle: usize) -> u32 {
        self.inner.pid(handle).expect("a spawned command")
    }

    /// Waits for a spawned command and returns its remaining stdout.
    pub fn wait(&mut self, handle: usize, timeout: Duration) -> String {
        let out = self.inner.wait(handle, timeout);
        self.check(out)
    }

    /// Waits until a TCP socket listens on `port` in a role's namespace.
    pub fn wait_listening(&self, role: &str, port: u16) {
        let ready = self
            .inner
            .wait_listening(role, port, Duration::from_secs(10));
        self.check(ready)
    }

    pub fn blob(&self) -> String {
        repo().join("integration/blob.py").display().to_string()
    }

    /// The gateways' logs, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for f in ["exit.log", "site1.log", "site2.log"] {
            if let Ok(text) = std::fs::read_to_string(self.state.join(f)) {
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                out.push_str(&format!("== {f}\n"));
                for l in tail.into_iter().rev() {
                    out.push_str(l);
                    out.push('\n');
                }
            }
        }
        out
    }

    pub fn log(&self, file: &str) -> String {
        std::fs::read_to_string(self.state.join(file)).unwrap_or_default()
    }

    /// Waits up to `timeout` for a gateway's log `file` to contain `text`; fails the
    /// test with every log otherwise.
    pub fn expect_log(&self, file: &str, text: &str, timeout: Duration) {
        assert!(
            eventually(timeout, || self.log(file).contains(text)),
            "{file} never said {text:?}:\n{}",
            self.logs()
        );
    }

    /// The pid `testbed.sh start` recorded for a gateway ("exit", "site1", "site2").
    pub fn gateway_pid(&self, gateway: &str) -> nix::unistd::Pid {
        let text = std::fs::read_to_string(self.path(&format!("{gateway}.pid"))).expect("pid file");
        nix::unistd::Pid::from_raw(text.trim().parse().expect("pid"))
    }

    /// Waits until a process has ended (after a signal).
    pub fn wait_gone(&self, pid: nix::unistd::Pid) {
        let gone = eventually(Duration::from_secs(5), || {
            nix::sys::signal::kill(pid, None).is_err()
        });
        assert!(gone, "process {pid} is still running after 5 s");
    }

    /// Sends `signal` to a gateway `testbed.sh start` started and waits until it is
    /// gone.
    pub fn stop_gateway(&self, gateway: &str, signal: nix::sys::signal::Signal) {
        let pid = self.gateway_pid(gateway);
        nix::sys::signal::kill(pid, signal).expect("signal the gateway");
        self.wait_gone(pid);
    }

    /// Whether one ping from the client reaches the server through the tunnel.
    pub fn ping_once(&self) -> bool {
        self.run("cl", &["ping", "-c", "1", "-W", "1", SERVER_V4])
            .status
            .success()
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.state.join(file)
    }

    /// Bytes sent on a router's interface (tbf counters), to see which uplinks carried
    /// traffic.
    pub fn tx_bytes(&self, role: &str, dev: &str) -> u64 {
        let out = self.ok(
            role,
            &["cat", &format!("/sys/class/net/{dev}/statistics/tx_bytes")],
        );
        out.trim().parse().expect("tx_bytes is a number")
    }

    /// `GET path` from a gateway's admin API (127.0.0.1:9190 in its namespace):
    /// (status code, body).
    pub fn admin_get(&self, role: &str, path: &str) -> (u16, String) {
        self.admin_request(role, "GET", path, None, b"")
    }

    /// Lanes a gateway reports up (its /healthz), of every site and colour; 0 while
    /// it does not answer (not started yet, or stopped).
    pub fn lanes_up(&self, role: &str) -> u64 {
        let answer = self.inner.admin_request(role, "GET", "/healthz", None, b"");
        answer
            .ok()
            .and_then(|(_, body)| {
                let rest = body.strip_prefix("ok: ")?;
                rest.split(' ').next()?.parse().ok()
            })
            .unwrap_or(0)
    }

    /// One request to a gateway's admin API, with a bearer token if given; returns
    /// the status and the body.
    pub fn admin_request(
        &self,
        role: &str,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &[u8],
    ) -> (u16, String) {
        let answer = self.inner.admin_request(role, method, path, token, body);
        self.check(answer)
    }

    /// Sends `request`, any bytes, to a gateway's admin API; whatever it answered.
    pub fn admin_raw(&self, role: &str, request: &[u8]) -> String {
        let answer = self.inner.admin_raw(role, request.to_vec());
        self.check(answer)
    }

    /// A gateway's whole `/metrics` text.
    pub fn metrics(&self, role: &str) -> String {
        let metrics = self.inner.metrics(role);
        self.check(metrics)
    }

    /// The value of one sample of a gateway's metrics, e.g.
    /// `braid_packets_dropped_total{reason="spoofed"}`. A sample the gateway does not
    /// export fails the test: a misspelt name must not read as 0.
    pub fn metric(&self, role: &str, sample: &str) -> f64 {
        let metrics = self.inner.metrics(role);
        let metrics = self.check(metrics);
        braid::demo::testbed::sample(&metrics, sample)
            .unwrap_or_else(|| panic!("{role} exports no sample {sample}:\n{metrics}"))
    }
}

/// Polls `done` every 20 ms until it holds or `timeout` has passed; whether it held.
pub fn eventually(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads `read` every 300 ms (three metric exports, and longer than the testbed's
/// round trips) until two readings agree, at most for `timeout`; the last reading.
/// Two gateways' counters compared must be read once neither moves: each exports
/// its counts every 100 ms, and a packet lost at the end of a transfer is reported
/// and repaired after it.
pub fn settled<T: PartialEq>(timeout: Duration, mut read: impl FnMut() -> T) -> T {
    let deadline = std::time::Instant::now() + timeout;
    let mut last = read();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = read();
        if now == last || std::time::Instant::now() >= deadline {
            return now;
        }
        last = now;
    }
}

/// Runs `f` on a thread inside the namespace `ns`, so that its sockets live there.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    braid::demo::testbed::in_netns(ns, f).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Parses "received BYTES SHA SECONDS" or "sent BYTES SHA" from a helper's output.
pub fn digest(output: &str, word: &str) -> (u64, String, f64) {
    let line = output
        .lines()
        .find(|l| l.starts_with(word))
        .unwrap_or_else(|| panic!("no {word:?} line in {output:?}"));
    let parts: Vec<&str> = line.split_whitespace().collect();
    (
        parts[1].parse().expect("byte count"),
        parts[2].to_string(),
        parts.get(3).map_or(0.0, |s| s.parse().expect("seconds")),
    )
}
