//! Harness for tests that run braid in the network-namespace testbed
//! (`integration/testbed.sh`). Needs root. Testbeds are built one at a time (a
//! process-wide lock) and torn down by `Drop`, also when a test fails.
#![allow(dead_code)] // each test binary uses its own part of the harness

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

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

/// Holds the testbed lock without building one (for `braid demo`, which builds its own).
pub fn exclusive() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct Testbed {
    pub name: String,
    pub state: PathBuf,
    env: Vec<(String, String)>,
    children: Vec<Child>,
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
        let mut env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.push(("BRAID".into(), braid_bin().into()));
        env.push(("LINKEMU".into(), env!("CARGO_BIN_EXE_braid-linkemu").into()));
        let tb = Testbed {
            name: name.to_string(),
            state: PathBuf::from("/tmp/braid-testbed").join(name),
            env,
            children: Vec::new(),
            _lock: lock,
        };
        tb.script("up");
        tb
    }

    /// Writes certificates and configs and starts the gateways; returns once every
    /// site's client reaches the server through the tunnel.
    pub fn start(&self) {
        self.script("start");
    }

    fn script(&self, cmd: &str) {
        let out = Command::new("bash")
            .arg(repo().join("integration/testbed.sh"))
            .args([cmd, &self.name])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run testbed.sh");
        assert!(
            out.status.success(),
            "testbed.sh {cmd} {} failed:\n{}{}\nlogs:\n{}",
            self.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
    }

    pub fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.name)
    }

    /// Runs a command in a namespace and waits for it.
    pub fn run(&self, role: &str, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns(role)])
            .args(args)
            .output()
            .expect("run ip netns exec")
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

    /// Starts a command in a namespace; it is killed when the testbed goes down.
    /// Waits for its first line of output when `wait_ready` (the helpers print
    /// "ready" once they listen).
    pub fn spawn(&mut self, role: &str, args: &[&str], wait_ready: bool) -> usize {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.ns(role)])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn in namespace");
        if wait_ready {
            use std::io::BufRead;
            let stdout = child.stdout.take().expect("piped stdout");
            let mut reader = std::io::BufReader::new(stdout);
            let mut line = String::new();
            reader.read_line(&mut line).expect("read helper output");
            assert_eq!(line.trim(), "ready", "{args:?} did not get ready");
            child.stdout = Some(reader.into_inner());
        }
        self.children.push(child);
        self.children.len() - 1
    }

    pub fn child_pid(&self, handle: usize) -> u32 {
        self.children[handle].id()
    }

    /// Waits for a spawned command and returns its remaining stdout.
    pub fn wait(&mut self, handle: usize, timeout: Duration) -> String {
        let child = &mut self.children[handle];
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                let mut out = String::new();
                if let Some(mut s) = child.stdout.take() {
                    use std::io::Read;
                    s.read_to_string(&mut out).expect("read stdout");
                }
                assert!(status.success(), "helper failed ({status}): {out}");
                return out;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "helper timed out\nlogs:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
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

    /// The pid `testbed.sh start` recorded for a gateway ("exit", "site1", "site2").
    pub fn gateway_pid(&self, gateway: &str) -> nix::unistd::Pid {
        let text = std::fs::read_to_string(self.path(&format!("{gateway}.pid"))).expect("pid file");
        nix::unistd::Pid::from_raw(text.trim().parse().expect("pid"))
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
}

impl Drop for Testbed {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("bash")
            .arg(repo().join("integration/testbed.sh"))
            .args(["down", &self.name])
            .output();
    }
}

/// Runs `f` on a thread inside the namespace `ns`, so that its sockets live there.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    use std::os::fd::AsFd;
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("open netns");
        nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
    .join()
    .expect("netns thread")
}

impl Testbed {
    /// `GET path` from a gateway's admin API (127.0.0.1:9190 in its namespace):
    /// (status code, body).
    pub fn admin_get(&self, role: &str, path: &str) -> (u16, String) {
        self.admin_request(role, "GET", path, None, b"")
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
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: braid\r\nConnection: close\r\nContent-Length: {}\r\n{}\r\n",
            body.len(),
            token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n")),
        );
        let body = body.to_vec();
        in_netns(&self.ns(role), move || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect("127.0.0.1:9190").expect("admin API");
            s.write_all(head.as_bytes()).expect("request");
            // The server may answer (413) before taking the whole body.
            let _ = s.write_all(&body);
            let mut raw = Vec::new();
            let _ = s.read_to_end(&mut raw);
            let text = String::from_utf8_lossy(&raw).to_string();
            let status = text
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .expect("status");
            let body = text
                .split_once("\r\n\r\n")
                .map(|(_, b)| b.to_string())
                .unwrap_or_default();
            (status, body)
        })
    }

    /// The value of one sample of a gateway's metrics, e.g.
    /// `braid_packets_dropped_total{reason="spoofed"}`; 0 when absent.
    pub fn metric(&self, role: &str, sample: &str) -> f64 {
        let (status, body) = self.admin_get(role, "/metrics");
        assert_eq!(status, 200, "GET /metrics: {body}");
        body.lines()
            .find_map(|l| l.strip_prefix(sample).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0.0)
    }
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
