//! The harness around `integration/testbed.sh`, shared by `braid demo` and the
//! end-to-end tests: builds and starts a namespace testbed, runs and spawns commands in
//! its namespaces, waits for them to be ready, talks to the gateways' admin API from
//! inside their namespace, and tears everything down when dropped (also on a panic
//! or an early return). Needs root.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, bail};

/// The testbed scripts, built into the binary so that the demo runs from anywhere:
/// `testbed.sh` and the `uplink.sh` it runs beside it.
const SCRIPTS: [(&str, &str); 2] = [
    ("testbed.sh", include_str!("../../integration/testbed.sh")),
    ("uplink.sh", include_str!("../../integration/uplink.sh")),
];

/// Writes the built-in testbed scripts into `dir` and returns the path of
/// `testbed.sh`.
pub fn write_scripts(dir: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    for (name, text) in SCRIPTS {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(dir.join(SCRIPTS[0].0))
}
/// Where a gateway's admin API listens inside its namespace.
pub const ADMIN: &str = "127.0.0.1:9190";

/// When a spawned command counts as ready.
#[derive(Debug, Clone, Copy)]
pub enum Ready<'a> {
    /// At once.
    Now,
    /// Once its first line of output is this (the test helpers print "ready").
    Says(&'a str),
    /// Once a line of its standard error contains this (tcpdump's "listening on").
    Logs(&'a str),
    /// Once a TCP socket listens on this port in its namespace (iperf3 -s).
    Listens(u16),
}

/// A built testbed; dropping it stops what it spawned and removes every namespace.
pub struct Testbed {
    name: String,
    script: PathBuf,
    env: Vec<(String, String)>,
    children: Mutex<Vec<Child>>,
}

impl Testbed {
    /// Builds the testbed `name` with `script` and its environment knobs (RATES,
    /// DELAYS, BRAID, STATE_DIR...).
    pub fn up(name: &str, script: &Path, env: &[(&str, &str)]) -> anyhow::Result<Testbed> {
        let testbed = Testbed {
            name: name.to_string(),
            script: script.to_path_buf(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            children: Mutex::new(Vec::new()),
        };
        testbed.script("up")?;
        Ok(testbed)
    }

    /// Writes certificates and configurations and starts the gateways; returns once
    /// every lane is up and the client reaches the server through the tunnel.
    pub fn start(&self) -> anyhow::Result<()> {
        self.script("start")
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace of a role (`cl`, `en`, `ex`, `sv`, `r1`...).
    pub fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.name)
    }

    /// Runs a command in a namespace and waits for it.
    pub fn run(&self, role: &str, args: &[&str]) -> anyhow::Result<Output> {
        self.command(role, args)
            .output()
            .with_context(|| format!("running {args:?} in {}", self.ns(role)))
    }

    /// Starts a command in a namespace and waits until it is ready; it is killed when
    /// the testbed goes down. Returns a handle for [`Testbed::wait`].
    pub fn spawn(&self, role: &str, args: &[&str], ready: Ready<'_>) -> anyhow::Result<usize> {
        let mut command = self.command(role, args);
        command.stdout(Stdio::piped()).stderr(match ready {
            Ready::Logs(_) => Stdio::piped(),
            _ => Stdio::inherit(),
        });
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {args:?} in {}", self.ns(role)))?;
        let readiness = match ready {
            Ready::Now => Ok(()),
            Ready::Says(word) => {
                let stdout = child.stdout.take().context("piped stdout")?;
                let mut reader = BufReader::new(stdout);
                let mut line = String::new();
                reader.read_line(&mut line).context("reading its output")?;
                child.stdout = Some(reader.into_inner());
                if line.trim() == word {
                    Ok(())
                } else {
                    Err(anyhow::anyhow!("said {line:?}, not {word:?}"))
                }
            }
            Ready::Logs(text) => {
                let stderr = child.stderr.take().context("piped stderr")?;
                let mut lines = BufReader::new(stderr).lines();
                let found = lines
                    .by_ref()
                    .map_while(Result::ok)
                    .any(|l| l.contains(text));
                // Keep draining its standard error, so that it never blocks on it.
                std::thread::spawn(move || lines.for_each(drop));
                if found {
                    Ok(())
                } else {
                    Err(anyhow::anyhow!("ended without logging {text:?}"))
                }
            }
            Ready::Listens(port) => self.wait_listening(role, port, Duration::from_secs(10)),
        };
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        children.push(child);
        readiness.with_context(|| format!("{args:?} in {} did not get ready", self.ns(role)))?;
        Ok(children.len() - 1)
    }

    /// Waits for a spawned command to end and returns its remaining output; fails if
    /// it fails or takes longer than `timeout`.
    pub fn wait(&self, handle: usize, timeout: Duration) -> anyhow::Result<String> {
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        let child = children.get_mut(handle).context("no such command")?;
        for _ in 0..timeout.as_millis().div_ceil(20) {
            if let Some(status) = child.try_wait()? {
                let mut out = String::new();
                if let Some(mut s) = child.stdout.take() {
                    s.read_to_string(&mut out)?;
                }
                if !status.success() {
                    bail!("it failed ({status}): {out}");
                }
                return Ok(out);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("it did not end within {timeout:?}")
    }

    /// Takes a spawned command's standard output, to read it as it comes.
    pub fn take_stdout(&self, handle: usize) -> Option<std::process::ChildStdout> {
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        children.get_mut(handle)?.stdout.take()
    }

    /// The operating system's id of a spawned command.
    pub fn pid(&self, handle: usize) -> Option<u32> {
        let children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        children.get(handle).map(Child::id)
    }

    /// Waits until a TCP socket listens on `port` in a role's namespace.
    pub fn wait_listening(&self, role: &str, port: u16, timeout: Duration) -> anyhow::Result<()> {
        let filter = format!("sport = :{port}");
        for _ in 0..timeout.as_millis().div_ceil(20) {
            let out = self.run(role, &["ss", "-Hltn", &filter])?;
            if !out.stdout.is_empty() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!(
            "nothing listens on TCP port {port} in {} after {timeout:?}",
            self.ns(role)
        )
    }

    /// One request to a gateway's admin API from inside its namespace, with a bearer
    /// token if given: the status code and the body.
    pub fn admin_request(
        &self,
        role: &str,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &[u8],
    ) -> anyhow::Result<(u16, String)> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: braid\r\nConnection: close\r\nContent-Length: {}\r\n{}\r\n",
            body.len(),
            token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n")),
        );
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        let text = self.admin_raw(role, request)?;
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .with_context(|| format!("no HTTP status in {text:?}"))?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    }

    /// Sends `request`, any bytes, to a gateway's admin API and returns whatever it
    /// answered until it closed the connection (or 5 s passed).
    pub fn admin_raw(&self, role: &str, request: Vec<u8>) -> anyhow::Result<String> {
        in_netns(&self.ns(role), move || -> anyhow::Result<String> {
            let mut s = std::net::TcpStream::connect(ADMIN)
                .with_context(|| format!("connecting to the admin API on {ADMIN}"))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            // The server may answer (413, 431) before taking the whole request.
            let _ = s.write_all(&request);
            let mut raw = Vec::new();
            // A server that resets the connection after answering is done too.
            let _ = s.read_to_end(&mut raw);
            Ok(String::from_utf8_lossy(&raw).to_string())
        })?
    }

    /// A gateway's metrics in the Prometheus text format.
    pub fn metrics(&self, role: &str) -> anyhow::Result<String> {
        let (status, body) = self.admin_request(role, "GET", "/metrics", None, b"")?;
        if status != 200 {
            bail!("GET /metrics answered {status}: {body}");
        }
        Ok(body)
    }

    fn script(&self, cmd: &str) -> anyhow::Result<()> {
        let out = Command::new("bash")
            .arg(&self.script)
            .args([cmd, &self.name])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .with_context(|| format!("running testbed.sh {cmd}"))?;
        if !out.status.success() {
            bail!(
                "testbed.sh {cmd} {} failed: {}{}",
                self.name,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    fn command(&self, role: &str, args: &[&str]) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.ns(role)]).args(args);
        command
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let children = self.children.get_mut().unwrap_or_else(|p| p.into_inner());
        for child in children.iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = self.script("down");
    }
}

/// The value of one sample in a Prometheus text exposition, e.g.
/// `braid_packets_dropped_total{reason="spoofed"}`; `None` when it is absent.
pub fn sample(metrics: &str, sample: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(sample)
            .filter(|v| v.starts_with(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

/// Runs `f` on a thread inside the network namespace `ns`, so that its sockets live
/// there while the rest of the process stays where it is.
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> anyhow::Result<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || -> anyhow::Result<T> {
        let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
            .with_context(|| format!("entering {path}"))?;
        Ok(f())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the thread in {ns} panicked"))?
}
