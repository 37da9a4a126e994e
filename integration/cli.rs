//! The command line as a user meets it: `check-config` on the shipped examples and on
//! broken files, `cert`, `run` refusing a bad configuration, and `controller --check`.
// Test code: a failed expectation is a failed test, and timeouts use the wall clock.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{braid_bin, repo};

fn braid(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(braid_bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run braid")
}

/// A scratch directory with a CA and certificates for `exit`, `site1`, `branch-01`.
fn pki(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("braid-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().expect("utf-8 path");
    assert!(braid(&["cert", "init", d], &[]).status.success());
    for id in ["exit", "site1", "branch-01"] {
        let out = braid(&["cert", "issue", "--ca", d, "--name", id], &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

const ENTRY: &str = r#"
role = "entry"
site = "site1"
[tun]
routes = ["198.18.100.0/24"]
[tls]
ca = "ca.pem"
cert = "site1.pem"
key = "site1.key"
[exit]
address = "198.19.200.1:4433"
[[uplinks]]
name = "a"
interface = "lo"
[[uplinks]]
name = "b"
interface = "lo"
"#;

const EXIT: &str = r#"
role = "exit"
[tun]
[tls]
ca = "ca.pem"
cert = "exit.pem"
key = "exit.key"
[listen]
address = "0.0.0.0:4433"
[[sites]]
id = "site1"
prefixes = ["198.18.1.0/24"]
[[sites]]
id = "site2"
prefixes = ["198.18.2.0/24"]
"#;

fn check(dir: &Path, file: &str, text: &str, env: &[(&str, &str)]) -> Output {
    let path = dir.join(file);
    std::fs::write(&path, text).expect("write config");
    braid(
        &["check-config", "--config", path.to_str().expect("utf-8")],
        env,
    )
}

#[test]
fn valid_configs_pass_with_a_summary() {
    let dir = pki("valid");
    let out = check(&dir, "entry.toml", ENTRY, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        summary.contains("role: entry") && summary.contains("mtu 1426"),
        "{summary}"
    );
    let out = check(&dir, "exit.toml", EXIT, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(dir).expect("cleanup");
}

#[test]
fn configuration_errors_name_the_key_and_exit_with_2() {
    let dir = pki("errors");
    // (which file, its text, environment overrides, the expected first words)
    type Case<'a> = (&'a str, String, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "entry",
            ENTRY.replacen(
                "interface = \"lo\"\n[[uplinks]]\nname = \"b\"\ninterface = \"lo\"",
                "interface = \"lo\"\n[[uplinks]]\nname = \"b\"\ninterface = \"eth/7\"",
                1,
            ),
            vec![],
            "error: uplinks[1].interface: \"eth/7\" is not an interface name",
        ),
        (
            "entry",
            ENTRY.replace("[tun]\n", "[tun]\nmtuu = 1400\n"),
            vec![],
            "error: tun.mtuu: unknown field `mtuu`",
        ),
        (
            "entry",
            ENTRY.replace("[tun]\n", "[tun]\nmtu = \"big\"\n"),
            vec![],
            "error: tun.mtu: ",
        ),
        (
            "entry",
            ENTRY.to_string(),
            vec![("BRAID__TUN__MTU", "100")],
            "error: tun.mtu: 100 is outside 1280..=65535",
        ),
        (
            "entry",
            ENTRY.to_string(),
            vec![("BRAID__ABE__GREEN_DELAY_MS", "0")],
            "error: abe.green_delay_ms: 0 is outside 1..=1000",
        ),
        (
            "exit",
            EXIT.to_string(),
            vec![("BRAID__ABE__BUFFER_BYTES", "1500")],
            "error: abe.buffer_bytes: 1500 is outside 3000..=100000000",
        ),
        (
            "exit",
            EXIT.to_string(),
            vec![("BRAID__ABE__SCHEDULER", "wfq")],
            "error: abe.scheduler: \"wfq\" is neither \"dsd\" nor \"fifo\"",
        ),
        (
            "entry",
            ENTRY.replace("role = \"entry\"", "role = \"middle\""),
            vec![],
            "error: role: \"middle\" is neither",
        ),
        (
            "entry",
            ENTRY.replace("site = \"site1\"", "site = \"branch-01\""),
            vec![],
            "error: tls.cert: the certificate is for \"site1\", not for site \"branch-01\"",
        ),
        (
            "entry",
            ENTRY.replace("ca = \"ca.pem\"", "ca = \"nope.pem\""),
            vec![],
            "error: tls.ca: cannot read",
        ),
        (
            "entry",
            ENTRY.replace("198.19.200.1:4433", "198.19.200.1"),
            vec![],
            "error: exit.address: \"198.19.200.1\" is not host:port",
        ),
        (
            "entry",
            ENTRY.replace("198.18.100.0/24", "198.18.100.0/33"),
            vec![],
            "error: tun.routes[0]: ",
        ),
        (
            "entry",
            ENTRY.replace("[[uplinks]]\nname = \"a\"", "[[uplinks]]\nname = \"b\""),
            vec![],
            "error: uplinks[1].name: \"b\" is used by another uplink",
        ),
        (
            "entry",
            ENTRY.replace(
                "[[uplinks]]\nname = \"b\"",
                "[[uplinks]]\nname = \"b\"\npriority = 0",
            ),
            vec![],
            "error: uplinks[1].priority: must be 1 (the highest) or more",
        ),
        (
            "entry",
            ENTRY.replace(
                "[[uplinks]]\nname = \"b\"",
                "[[uplinks]]\nname = \"b\"\npriority = 2\nstandby = \"hot\"",
            ),
            vec![],
            "error: uplinks[1].standby: \"hot\" is neither \"warm\" nor \"cold\"",
        ),
        (
            "exit",
            EXIT.to_string(),
            vec![("BRAID__TIERS__HOLD_MS", "0")],
            "error: tiers.hold_ms: must be at least 1",
        ),
        (
            "entry",
            ENTRY.replace(
                "[[uplinks]]\nname = \"b\"",
                "[[uplinks]]\nname = \"b\"\ncap_period = \"week\"",
            ),
            vec![],
            "error: uplinks[1].cap_period: goes with cap_mb, which is not set",
        ),
        (
            "entry",
            ENTRY.replace(
                "[[uplinks]]\nname = \"b\"",
                "[[uplinks]]\nname = \"b\"\ncap_mb = 20\ncap_period = \"fortnight\"",
            ),
            vec![],
            "error: uplinks[1].cap_period: \"fortnight\" is not",
        ),
        (
            "entry",
            ENTRY.replace(
                "[[uplinks]]\nname = \"b\"",
                "[[uplinks]]\nname = \"b\"\nmax_loss_percent = 0.0",
            ),
            vec![],
            "error: uplinks[1].max_loss_percent: must be above 0 and at most 100",
        ),
        (
            "entry",
            ENTRY.replace(
                "[[uplinks]]\nname = \"b\"",
                "[[uplinks]]\nname = \"b\"\ndelay_variation_ms = 1500",
            ),
            vec![],
            "error: uplinks[1].delay_variation_ms: must be at most 1000",
        ),
        (
            "exit",
            EXIT.replace("198.18.2.0/24", "198.18.0.0/16"),
            vec![],
            "error: sites[1].prefixes[0]: 198.18.0.0/16 overlaps 198.18.1.0/24 of sites[0]",
        ),
        (
            "exit",
            EXIT.replace("[listen]\naddress = \"0.0.0.0:4433\"\n", ""),
            vec![],
            "error: listen: missing",
        ),
        (
            "exit",
            EXIT.replace("0.0.0.0:4433\"\n", "0.0.0.0:4433\"\nthreads = 0\n"),
            vec![],
            "error: listen.threads: 0 is out of range: 1 to 64 data-path threads",
        ),
        (
            "exit",
            EXIT.replace("role = \"exit\"", "role = \"exit\"\nsite = \"x\""),
            vec![],
            "error: site: only an entry gateway",
        ),
        (
            "exit",
            EXIT.to_string(),
            vec![("BRAID__SCHEDULER__ALGORITHM", "fastest")],
            "error: scheduler.algorithm: \"fastest\" is not one of",
        ),
        (
            "exit",
            format!("{EXIT}[pacing]\nbackground_method = \"newton\"\n"),
            vec![],
            "error: pacing.background_method: \"newton\" is not one of binary-search, stochastic-approximation",
        ),
        (
            "entry",
            format!("{ENTRY}[pacing]\nbackground_interval_ms = 50\n"),
            vec![],
            "error: pacing.background_interval_ms: must be 100 to 5000",
        ),
        (
            "exit",
            format!("{EXIT}[log]\nfilter = \"braid=loud\"\n"),
            vec![],
            "error: log.filter: \"braid=loud\" is not a log filter",
        ),
    ];
    for (role, text, env, expected) in cases {
        let out = check(&dir, &format!("{role}.toml"), &text, &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{expected}: got {stderr}");
        assert!(
            stderr.starts_with(expected),
            "expected {expected:?}, got {stderr:?}"
        );
        assert_eq!(
            stderr.lines().count(),
            1,
            "one line, no backtrace: {stderr}"
        );
    }
    let missing = braid(
        &["check-config", "--config", "/nonexistent/braid.toml"],
        &[],
    );
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .starts_with("error: /nonexistent/braid.toml: cannot read")
    );
    std::fs::remove_dir_all(dir).expect("cleanup");
}

#[test]
fn an_uplink_whose_interface_is_missing_is_a_warning_not_an_error() {
    let dir = pki("missing");
    let text = ENTRY.replacen("interface = \"lo\"", "interface = \"wwan7\"", 1);
    let out = check(&dir, "entry.toml", &text, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "warning: uplinks[0].interface: no such interface \"wwan7\" now; its lanes wait for it"
        ),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("configuration OK"));
    std::fs::remove_dir_all(dir).expect("cleanup");
}

#[test]
fn run_refuses_a_bad_configuration_before_touching_the_system() {
    let dir = pki("run");
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        ENTRY.replace("interface = \"lo\"", "interface = \"\""),
    )
    .expect("write");
    let out = braid(&["run", "--config", path.to_str().expect("utf-8")], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: uplinks[0].interface: \"\" is not an interface name"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).expect("cleanup");
}

#[test]
fn cert_issue_refuses_to_overwrite_and_rejects_bad_names() {
    let dir = pki("cert");
    let d = dir.to_str().expect("utf-8");
    let again = braid(&["cert", "issue", "--ca", d, "--name", "site1"], &[]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("site1.key"));
    let bad = braid(&["cert", "issue", "--ca", d, "--name", "a/b"], &[]);
    assert_eq!(bad.status.code(), Some(1));
    let no_ca = braid(
        &["cert", "issue", "--ca", "/nonexistent", "--name", "x"],
        &[],
    );
    assert!(
        String::from_utf8_lossy(&no_ca.stderr)
            .starts_with("error: cannot read /nonexistent/ca.pem")
    );
    std::fs::remove_dir_all(dir).expect("cleanup");
}

/// The shipped examples pass `check-config` on a host that has their interfaces.
#[test]
fn shipped_example_configs_pass_check_config() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "needs root to make the example's interfaces"
    );
    let dir = pki("examples");
    for f in ["entry.toml", "exit.toml"] {
        std::fs::copy(repo().join("config").join(f), dir.join(f)).expect("copy example");
    }
    std::fs::write(dir.join("admin.token"), "a-secret\n").expect("token file");
    let ns = format!("braid-cli-{}", std::process::id());
    let ip = |args: &[&str]| {
        assert!(
            Command::new("ip")
                .args(args)
                .status()
                .expect("ip")
                .success(),
            "ip {args:?}"
        )
    };
    ip(&["netns", "add", &ns]);
    struct Cleanup(String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let _cleanup = Cleanup(ns.clone());
    // This kernel has no dummy interfaces: a veth pair provides both names.
    ip(&[
        "-n", &ns, "link", "add", "name", "eth1", "type", "veth", "peer", "name", "wwan0",
    ]);
    for (f, cert) in [("entry.toml", "branch-01"), ("exit.toml", "exit")] {
        let path = dir.join(f);
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                braid_bin(),
                "check-config",
                "--config",
                path.to_str().expect("utf-8"),
            ])
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{f} ({cert}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("configuration OK"));
    }
    std::fs::remove_dir_all(dir).expect("cleanup");
}

/// The testbed's uplinks use netem where the kernel has it: its command lines, which
/// this kernel (without netem) cannot run, are checked as `uplink.sh` prints them.
#[test]
fn the_testbed_emulates_an_uplink_with_netem_keeping_the_packets_order() {
    let script = repo().join("integration/uplink.sh");
    let emulate = |args: &[&str]| {
        let out = Command::new("bash")
            .arg(&script)
            .arg("emulate")
            .args(args)
            .envs([("UPLINK_DRY_RUN", "1"), ("LINK_EMULATOR", "netem")])
            .output()
            .expect("run uplink.sh");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // 20 ms plus up to 20 (30 +- 10), 1 % loss, 50 Mbit/s with a 50 ms buffer.
    let (lines, said) = emulate(&["a", "b", "20", "1", "/dev/null", "20", "50"]);
    for dev in ["a", "b"] {
        let line = format!(
            "tc qdisc replace dev {dev} root netem limit 208 delay 30ms 10ms \
             distribution uniform loss 1% rate 50mbit\n"
        );
        assert!(lines.contains(&line), "{lines}");
    }
    assert!(said.contains("by netem"), "{said}");
    // Unshaped, jitter still keeps the order: a rate far above the testbed's.
    let (lines, _) = emulate(&["a", "b", "0", "0", "/dev/null", "10", "0"]);
    assert!(
        lines.contains("delay 5ms 5ms distribution uniform loss 0% rate 10000mbit"),
        "{lines}"
    );
    // Nothing to emulate: nothing run.
    let (lines, _) = emulate(&["a", "b", "0", "0", "/dev/null", "0", "50"]);
    assert_eq!(lines, "");
}

/// The Grafana dashboard as Grafana provisions it, checked where no Grafana image can
/// run: panels of types Grafana has, on its 24-column grid, each query and variable on
/// the datasource that `docker/grafana/provisioning` creates, every `$variable` in a
/// query defined, and the file mounted where the dashboard provider reads. (The
/// queries' metrics are checked against live gateways by the end-to-end tests.)
#[test]
fn the_dashboard_is_what_grafana_provisions() {
    let read = |path: &str| {
        std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("docker/grafana/braid.json")).expect("JSON");
    let datasources = read("docker/grafana/provisioning/datasources/prometheus.yaml");
    let uid = datasources
        .lines()
        .find_map(|l| l.trim().strip_prefix("uid: "))
        .expect("a provisioned datasource uid");
    let provider = read("docker/grafana/provisioning/dashboards/braid.yaml");
    let compose = read("docker/compose.yaml");
    assert!(
        provider.contains("path: /var/lib/grafana/dashboards")
            && compose.contains("./grafana/braid.json:/var/lib/grafana/dashboards/braid.json"),
        "the dashboard is not mounted where the provider reads"
    );
    assert!(dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 30));
    let on_datasource = |what: &str, ds: &serde_json::Value| {
        assert_eq!(
            (ds["type"].as_str(), ds["uid"].as_str()),
            (Some("prometheus"), Some(uid)),
            "{what}: datasource {ds}"
        );
    };
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .map(|v| {
            let name = v["name"].as_str().expect("variable name");
            assert_eq!(v["type"], "query", "variable {name}");
            on_datasource(&format!("variable {name}"), &v["datasource"]);
            name
        })
        .collect();
    let known_types = [
        "timeseries",
        "stat",
        "gauge",
        "bargauge",
        "table",
        "text",
        "row",
    ];
    let mut ids = std::collections::HashSet::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    for panel in panels {
        let id = panel["id"].as_u64().expect("panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        let kind = panel["type"].as_str().unwrap_or_default();
        assert!(known_types.contains(&kind), "panel {id}: type {kind:?}");
        let grid = &panel["gridPos"];
        let (x, w, h) = (grid["x"].as_u64(), grid["w"].as_u64(), grid["h"].as_u64());
        assert!(
            matches!((x, w, h), (Some(x), Some(w), Some(h)) if w > 0 && h > 0 && x + w <= 24),
            "panel {id}: gridPos {grid}"
        );
        on_datasource(&format!("panel {id}"), &panel["datasource"]);
        for target in panel["targets"].as_array().expect("targets") {
            on_datasource(&format!("panel {id}"), &target["datasource"]);
            assert!(target["refId"].as_str().is_some(), "panel {id}: no refId");
            let expr = target["expr"].as_str().expect("expr");
            for used in expr.split('$').skip(1) {
                let name: String = used
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    name.starts_with("__") || variables.contains(&name.as_str()),
                    "panel {id}: ${name} is no variable of the dashboard"
                );
            }
        }
    }
}

#[test]
fn controller_check_passes_the_shipped_example_and_names_what_is_wrong() {
    let dir = std::env::temp_dir().join(format!("braid-cli-controller-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let config = dir.join("controller.toml");
    std::fs::copy(repo().join("config/controller.toml"), &config).expect("copy the example");
    let c = config.to_str().expect("utf-8");
    let check = |env: &[(&str, &str)]| braid(&["controller", "--check", "--config", c], env);

    // Its token files do not exist yet: the first one is named.
    let out = check(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: gateways[0].token_file: cannot read"),
        "{stderr}"
    );
    std::fs::write(dir.join("branch-01.token"), "secret\n").expect("token");
    std::fs::write(dir.join("exit.token"), "\n").expect("token");
    let out = check(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: gateways[1].token_file:") && stderr.contains("is empty"),
        "{stderr}"
    );
    std::fs::write(dir.join("exit.token"), "secret\n").expect("token");
    let out = check(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("controller on 127.0.0.1:9290: 2 gateways, every 5000 ms"),
        "{stdout}"
    );
    // A key overridden from the environment is checked like the file's.
    let out = check(&[("BRAID_CONTROLLER__PERIOD_MS", "10")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: period_ms: must be 500"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).expect("cleanup");
}
