//! End-to-end tests of per-application pacing: the admin API and its answers, the
//! table surviving a kill -9, and paced rates on real TCP traffic. Run as root.
// Test code: a failed expectation is a failed test, and timeouts use the wall clock.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

mod common;

use std::time::Duration;

use common::*;

const PACING: &str = "/v1/sites/site1/pacing";

fn token(tb: &Testbed) -> String {
    std::fs::read_to_string(tb.path("admin.token"))
        .expect("token file")
        .trim()
        .to_string()
}

fn version_of(body: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(body).expect("JSON");
    v["version"].as_u64().expect("version")
}

#[test]
fn the_pacing_api_answers_each_case_and_the_table_survives_kill_9() {
    let mut tb = Testbed::up("e2eapi", &[("RATES", "0")]);
    tb.start();
    let token = token(&tb);
    let put = |tb: &Testbed, token: Option<&str>, body: &str| {
        tb.admin_request("en", "PUT", PACING, token, body.as_bytes())
    };
    let current = |tb: &Testbed| {
        let (status, body) = tb.admin_get("en", PACING);
        assert_eq!(status, 200, "{body}");
        version_of(&body)
    };
    assert_eq!(current(&tb), 0, "no table before the controller's first");

    let table = r#"{"version": 5, "apps": [
        {"name": "ssh", "match": {"proto": "tcp", "remote_ports": "22"}, "rate_up_kbps": 1000},
        {"name": "voip", "match": {"proto": "udp", "dscp": 46}, "colour": "green"}]}"#;
    // No token or a wrong one: 401, nothing changes.
    for bad in [None, Some("not-the-token")] {
        let (status, body) = put(&tb, bad, table);
        assert_eq!(status, 401, "{body}");
    }
    // Malformed and invalid tables: 400 with the reason.
    let (status, body) = put(&tb, Some(&token), "{\"version\": 6, \"apps\": [");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid table"), "{body}");
    let (status, body) = put(
        &tb,
        Some(&token),
        r#"{"version": 6, "apps": [{"name": "a"}, {"name": "a"}]}"#,
    );
    assert_eq!(
        (status, body.trim()),
        (400, "invalid table: apps[1].name: \"a\" is defined twice")
    );
    let (status, body) = put(
        &tb,
        Some(&token),
        r#"{"version": 6, "apps": [{"name": "a", "match": {"remote_ports": "99999"}}]}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("apps[0].match.remote_ports"), "{body}");
    // A body over 16 MiB is refused without being read to the end.
    let huge = vec![b' '; 17 << 20];
    let (status, _) = tb.admin_request("en", "PUT", PACING, Some(&token), &huge);
    assert_eq!(status, 413);
    // Wrongly typed fields and a prefix that is none.
    for bad in [
        r#"{"version": "six", "apps": []}"#,
        r#"{"version": 6, "apps": [{"name": "a", "match": {"remote_prefix": "300.1.2.3/33"}}]}"#,
    ] {
        let (status, body) = put(&tb, Some(&token), bad);
        assert_eq!(status, 400, "{bad}: {body}");
    }
    // Wrong methods and resources.
    for (method, path, expected) in [
        ("DELETE", PACING, 405),
        ("POST", "/metrics", 405),
        ("GET", "/v1/nothing/here", 404),
        ("GET", "/v1/sites/site9/apps", 404),
    ] {
        let (status, body) = tb.admin_request("en", method, path, None, b"");
        assert_eq!(status, expected, "{method} {path}: {body}");
    }
    // Malformed HTTP and oversized headers: hyper answers and closes the connection.
    let huge_header = format!(
        "GET /metrics HTTP/1.1\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(1 << 20)
    );
    for (request, expected) in [
        (b"GARBAGE\r\n\r\n".to_vec(), "400"),
        (b"GET /metrics HTTP/9.9\r\n\r\n".to_vec(), "400"),
        (huge_header.into_bytes(), "431"),
    ] {
        let answer = tb.admin_raw("en", &request);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {expected}")),
            "{:?} answered {answer:?}",
            String::from_utf8_lossy(&request[..request.len().min(40)])
        );
    }
    assert_eq!(current(&tb), 0, "refused tables changed nothing");
    // Every refusal is counted: the answered ones by status, the connections hyper
    // ended by the HTTP error counter.
    let answered = |code: &str| {
        tb.metric(
            "en",
            &format!("braid_admin_requests_total{{code=\"{code}\"}}"),
        )
    };
    assert_eq!(answered("401"), 2.0);
    assert_eq!(answered("400"), 5.0);
    assert_eq!(answered("413"), 1.0);
    assert_eq!(answered("405"), 2.0);
    assert_eq!(answered("404"), 2.0);
    assert_eq!(tb.metric("en", "braid_admin_connections_failed_total"), 3.0);
    assert_eq!(
        tb.admin_get("en", "/healthz").0,
        200,
        "the gateway serves on"
    );

    // The real thing, through the controller's command-line client.
    let file = tb.path("table.json");
    std::fs::write(&file, table).expect("write table");
    let out = tb.ok(
        "en",
        &[
            braid_bin(),
            "pacing",
            "put",
            &file.display().to_string(),
            "--token-file",
            &tb.path("admin.token").display().to_string(),
        ],
    );
    assert!(out.contains("\"version\": 5"), "{out}");
    let got = tb.ok("en", &[braid_bin(), "pacing", "get"]);
    assert_eq!(version_of(&got), 5);
    assert!(got.contains("\"remote_ports\": \"22\""), "{got}");
    // An older version: 409. The same version again is taken (a controller retrying).
    let older = table.replace("\"version\": 5", "\"version\": 4");
    let (status, body) = put(&tb, Some(&token), &older);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("older than the current version 5"), "{body}");
    assert_eq!(put(&tb, Some(&token), table).0, 200);
    // A table that replaces a version no longer in force (a second controller with
    // an older view) is refused and says so; one that replaces the version in force
    // is taken.
    let late = table.replace("\"version\": 5", "\"version\": 7, \"replaces\": 4");
    let (status, body) = put(&tb, Some(&token), &late);
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("replaces version 4, but version 5 is in force"),
        "{body}"
    );
    let next = table.replace("\"version\": 5", "\"version\": 6, \"replaces\": 5");
    assert_eq!(put(&tb, Some(&token), &next).0, 200);
    // The entry serves only its own site.
    let (status, body) = tb.admin_request(
        "en",
        "PUT",
        "/v1/sites/site2/pacing",
        Some(&token),
        table.as_bytes(),
    );
    assert_eq!(status, 404, "{body}");
    // The metrics and the report know the applications.
    let target = tb.metric(
        "en",
        "braid_app_rate_target_bps{app=\"ssh\",direction=\"up\",site=\"site1\"}",
    );
    assert_eq!(target, 1_000_000.0);
    // The report is renewed every second: wait for one that knows the new table.
    let app_names = |tb: &Testbed| {
        let (status, body) = tb.admin_get("en", "/v1/sites/site1/apps");
        assert_eq!(status, 200, "{body}");
        let report: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        let names: Vec<String> = report["apps"]
            .as_array()
            .expect("apps")
            .iter()
            .map(|a| a["name"].as_str().expect("name").to_string())
            .collect();
        names
    };
    let reported = eventually(Duration::from_secs(3), || {
        app_names(&tb) == ["default", "ssh", "voip"]
    });
    assert!(
        reported,
        "the report never listed the table's applications: {:?}",
        app_names(&tb)
    );

    // kill -9 and restart: the table is back before the first packet.
    tb.stop_gateway("site1", nix::sys::signal::Signal::SIGKILL);
    let config = tb.path("site1.toml").display().to_string();
    tb.spawn("en", &[braid_bin(), "run", "--config", &config], Ready::Now);
    let back = (0..100).find_map(|_| {
        std::thread::sleep(Duration::from_millis(50));
        let out = tb.run("en", &[braid_bin(), "pacing", "get"]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).to_string())
    });
    let got = back.expect("the admin API came back");
    assert_eq!(version_of(&got), 6, "the table survived the restart");
    assert!(got.contains("\"name\": \"voip\""), "{got}");
}

/// Kills the entry (the one `testbed.sh` started, or `previous` that this function
/// started), starts it again with `env` (`VAR=value` settings) and waits for its
/// admin API; returns the new one's handle.
fn restart_entry(tb: &mut Testbed, previous: Option<usize>, env: &[&str]) -> usize {
    match previous {
        None => tb.stop_gateway("site1", nix::sys::signal::Signal::SIGKILL),
        Some(handle) => {
            let pid = nix::unistd::Pid::from_raw(tb.child_pid(handle) as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("kill");
            // Dead once a zombie: the testbed reaps its commands when it goes down.
            let dead = eventually(Duration::from_secs(5), || {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map_or(true, |stat| stat.contains(") Z "))
            });
            assert!(dead, "the entry {pid} is still running");
        }
    }
    let listening = |tb: &Testbed| {
        !tb.ok("en", &["ss", "-Hltn", "sport = :9190"])
            .trim()
            .is_empty()
    };
    let free = eventually(Duration::from_secs(5), || !listening(tb));
    assert!(
        free,
        "the admin port is still taken: {}{}",
        tb.ok("en", &["ss", "-ltnp"]),
        tb.ok("en", &["ps", "-eo", "pid,ppid,stat,args"])
    );
    let config = tb.path("site1.toml").display().to_string();
    let mut command = vec!["env"];
    command.extend_from_slice(env);
    command.extend_from_slice(&[braid_bin(), "run", "--config", &config]);
    let handle = tb.spawn("en", &command, Ready::Now);
    let up = eventually(Duration::from_secs(5), || {
        tb.run("en", &[braid_bin(), "pacing", "get"])
            .status
            .success()
    });
    assert!(
        up,
        "the entry's admin API did not come back:\n{}",
        tb.logs()
    );
    handle
}

/// A tmpfs of 64 KiB mounted at `dir` while it lives.
struct TinyDisk(std::path::PathBuf);

impl TinyDisk {
    fn mount(dir: std::path::PathBuf) -> TinyDisk {
        std::fs::create_dir_all(&dir).expect("mount point");
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&dir)
            .status()
            .expect("mount")
            .success();
        assert!(ok, "cannot mount a tmpfs at {}", dir.display());
        TinyDisk(dir)
    }

    /// Fills the disk with one file, as large as it takes.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join("filler")).expect("filler");
        while f.write_all(&[0; 4096]).is_ok() {}
    }

    fn free(&self) {
        std::fs::remove_file(self.0.join("filler")).expect("filler");
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_corrupt_or_unreadable_state_file_and_a_full_disk_leave_the_gateway_serving() {
    let mut tb = Testbed::up("e2estate", &[("RATES", "0")]);
    tb.start();
    let token = token(&tb);
    let put = |tb: &Testbed, version: u64| {
        let table = format!(
            r#"{{"version": {version}, "apps": [{{"name": "ssh", "match": {{"proto": "tcp", "remote_ports": "22"}}}}]}}"#
        );
        tb.admin_request("en", "PUT", PACING, Some(&token), table.as_bytes())
    };
    let current = |tb: &Testbed| version_of(&tb.admin_get("en", PACING).1);
    assert_eq!(put(&tb, 1).0, 200);
    let state = tb.path("pacing-site1.json");
    let aside = tb.path("pacing-site1.json.corrupt");

    // Corrupt at start: the gateway starts without tables, serves, and keeps the file.
    std::fs::write(&state, b"{\"site1\": {\"version\": ").expect("corrupt");
    let entry = restart_entry(&mut tb, None, &[]);
    assert_eq!(current(&tb), 0, "no table from a corrupt file");
    assert_eq!(tb.metric("en", "braid_pacing_state_set_aside_total"), 1.0);
    assert_eq!(
        std::fs::read(&aside).expect("set aside"),
        b"{\"site1\": {\"version\": "
    );
    assert!(
        eventually(Duration::from_secs(5), || tb.ping_once()),
        "the site cannot reach the server"
    );
    assert_eq!(put(&tb, 2).0, 200, "the controller's next table is taken");

    // Unreadable at start (a directory where the file should be): the same.
    std::fs::remove_file(&state).expect("state file");
    std::fs::remove_file(&aside).expect("set-aside file");
    std::fs::create_dir(&state).expect("a directory in its place");
    let entry = restart_entry(&mut tb, Some(entry), &[]);
    assert_eq!(current(&tb), 0, "no table from an unreadable file");
    assert_eq!(tb.metric("en", "braid_pacing_state_set_aside_total"), 1.0);
    assert!(aside.is_dir(), "the directory is set aside");
    assert!(
        eventually(Duration::from_secs(5), || tb.ping_once()),
        "the site cannot reach the server"
    );

    // A full disk when persisting: the API answers an error naming it, the table in
    // force stays, and the next table once there is room is taken.
    let disk = TinyDisk::mount(tb.path("tiny"));
    let tiny_state = format!(
        "BRAID__PACING__STATE_FILE={}",
        disk.0.join("pacing.json").display()
    );
    restart_entry(&mut tb, Some(entry), &[&tiny_state]);
    assert_eq!(put(&tb, 3).0, 200);
    disk.fill();
    let (status, body) = put(&tb, 4);
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("No space left on device"), "{body}");
    assert_eq!(current(&tb), 3, "the table in force stays");
    let leftovers: Vec<_> = std::fs::read_dir(&disk.0)
        .expect("tiny disk")
        .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "half-written files left: {leftovers:?}"
    );
    assert!(
        eventually(Duration::from_secs(5), || tb.ping_once()),
        "the site cannot reach the server"
    );
    assert_eq!(
        tb.metric("en", "braid_admin_requests_total{code=\"500\"}"),
        1.0
    );
    disk.free();
    assert_eq!(put(&tb, 4).0, 200);
    assert_eq!(current(&tb), 4);
    let saved = std::fs::read_to_string(disk.0.join("pacing.json")).expect("state file");
    assert_eq!(
        version_of(
            &serde_json::from_str::<serde_json::Value>(&saved).expect("JSON")["site1"].to_string()
        ),
        4
    );
}

/// Starts `iperf3 -s` on `port` in the server namespace, once.
fn iperf_server(tb: &mut Testbed, port: u16) -> usize {
    tb.spawn(
        "sv",
        &["iperf3", "-s", "-1", "-p", &port.to_string()],
        Ready::Listens(port),
    )
}

/// Mbit/s the client received in an iperf3 download (`-R`) of `streams` streams.
fn download(tb: &Testbed, port: u16, streams: u32, seconds: u32) -> f64 {
    let out = tb.ok(
        "cl",
        &[
            "iperf3",
            "-c",
            SERVER_V4,
            "-p",
            &port.to_string(),
            "-R",
            "-P",
            &streams.to_string(),
            "-t",
            &seconds.to_string(),
            "-O",
            "2",
            "-C",
            "cubic",
            "-J",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("iperf3 JSON");
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .expect("rate")
        / 1e6
}

#[test]
fn the_exit_paces_each_application_to_its_rate_however_many_connections_it_has() {
    let mut tb = Testbed::up("e2epace", &[("RATES", "0 0")]);
    tb.start();
    let token = token(&tb);
    // Downloads are paced by the exit; the server's port is the remote port.
    let table = r#"{"version": 1, "apps": [
        {"name": "browser", "match": {"proto": "tcp", "remote_ports": "5201"}, "rate_down_kbps": 12000},
        {"name": "download", "match": {"proto": "tcp", "remote_ports": "5202"}, "rate_down_kbps": 6000}]}"#;
    let (status, body) = tb.admin_request("ex", "PUT", PACING, Some(&token), table.as_bytes());
    assert_eq!(status, 200, "{body}");
    let servers = [iperf_server(&mut tb, 5201), iperf_server(&mut tb, 5202)];
    // Both at once: six connections of "browser", one of "download".
    let (browser, download_rate) = std::thread::scope(|s| {
        let b = s.spawn(|| download(&tb, 5201, 6, 8));
        let d = s.spawn(|| download(&tb, 5202, 1, 8));
        (b.join().expect("browser"), d.join().expect("download"))
    });
    for s in servers {
        tb.wait(s, Duration::from_secs(10));
    }
    println!(
        "browser (6 connections): {browser:.2} Mbit/s of 12; download (1): {download_rate:.2} of 6"
    );
    // Goodput is the paced IP rate minus the IP and TCP headers (with timestamps, 52
    // of each 1426 bytes).
    for (rate, target) in [(browser, 12.0), (download_rate, 6.0)] {
        let error = (rate / (target * (1.0 - 52.0 / 1426.0)) - 1.0) * 100.0;
        assert!(
            error.abs() < 5.0,
            "{rate:.2} Mbit/s for a target of {target}: {error:+.1} %"
        );
    }
    let (_, body) = tb.admin_get("ex", "/v1/sites/site1/apps");
    assert!(body.contains("\"name\": \"browser\""), "{body}");
}
