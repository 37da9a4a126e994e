#!/usr/bin/env python3
"""Soak: braid under mixed traffic for a given time while uplinks flap at random and
the exit restarts now and then, in braid's namespace testbed. Fails on a panic, a
gateway that died, growth of memory or file descriptors, or lost connectivity.

Three uplinks of 20 Mbit/s with one-way delays of 5, 10 and 15 ms. Traffic: TCP
downloads and uploads (iperf3, 10 s each, taking turns) and a 20 packets/s UDP probe
each way (integration/probe.py). Every few seconds one uplink's router, picked at
random, changes state: its path dies (drops everything, both ways, silently), turns
lossy (drops 10 % at random) or comes back clean; at least one uplink stays clean.
Every --restart-every seconds (at random, around it) the exit is stopped (SIGTERM)
and started again.

Every 5 s it records each gateway's memory (RSS), file descriptors and threads, the
lanes up at the entry, and the TCP goodput; it writes them, with each flap and restart,
to DIR/soak.json, copies the gateways' logs to DIR, and prints a summary.

Verdict, each a failure on its own:
  - "panicked" in a gateway's log, or a gateway that exits without being told to;
  - the entry's RSS at the end more than 50 % and 30 MB above its median over the
    second fifth of the run (after warm-up: its bounded buffers, quinn's and the
    resequencer's, fill in the first minutes), or its file descriptors 20 above; in
    a run shorter than 10 minutes, whose buffers are still filling, an RSS over
    128 MB at the end (filled, they hold it at 60-65 MB over an hour; a leak of a
    packet's worth per packet passes 128 MB within a minute at this load);
  - the UDP probe silent for more than 3 s in either direction, from the run's start
    to its end (a probe that stops arriving for good, or never arrives, is silent
    until the end), less the first 8 s after each exit restart (the lanes reconnect
    then);
  - no lane up at the entry in a sample outside those 8 s (one uplink is always
    clean), or not every lane up 20 s after the last uplink came back clean;
  - no TCP download or no upload that ran its 10 s, or the runs' mean goodput under
    2 Mbit/s (the uplinks carry 60; a gateway built for debugging reaches 10-20).

--break-after S stops the exit for good S seconds in: the soak must then fail (how
the verdict itself is checked).

Usage (root): integration/soak.py --braid target/release/braid [--seconds 3600]
              [--restart-every 300] [--flap-every 5] [--seed 1] [--out bench-out]
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time

from benchlib import inns, metrics_text, sh

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.join(HERE, "testbed.sh")
PROBE = os.path.join(HERE, "probe.py")
NAME = "soak"
STATE = f"/tmp/braid-testbed/{NAME}"
SERVER = "198.18.100.2"
CLIENT = "198.18.1.2"
UPLINKS = 3
PROBE_PORTS = {"down": 6101, "up": 6102}
SAMPLE_EVERY = 5
# After an exit restart the lanes reconnect (backoff from 200 ms): the probe may be
# silent that long.
RESTART_GRACE = 8.0
MAX_SILENCE = 3.0
# Shorter runs end before the gateways' bounded buffers have filled: their memory is
# judged against a fixed bound.
GROWTH_JUDGED_FROM = 600
SHORT_RUN_MAX_RSS_MB = 128
MIN_GOODPUT_MBPS = 2.0


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def pid_of(gateway):
    with open(f"{STATE}/{gateway}.pid") as f:
        return int(f.read().strip())


# Exits this script started again, by pid: they are its children, and a child that
# ended stays a zombie (still signallable) until it is waited for.
RESTARTED = {}


def alive(pid):
    if pid in RESTARTED:
        return RESTARTED[pid].poll() is None
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def proc_sample(pid):
    """(RSS in MB, open file descriptors, threads) of a process."""
    with open(f"/proc/{pid}/status") as f:
        status = f.read()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
    return rss, len(os.listdir(f"/proc/{pid}/fd")), threads


def set_uplink(index, state):
    """Puts the path behind uplink `index` in `state`: clean, dead or lossy."""
    router = f"r{index}"
    sh(*inns(NAME, router, "nft", "delete", "table", "inet", "soak"), check=False)
    if state == "clean":
        return
    sh(*inns(NAME, router, "nft", "add", "table", "inet", "soak"))
    sh(*inns(NAME, router, "nft", "add", "chain", "inet", "soak", "forward",
             "{ type filter hook forward priority 0; }"))
    rule = ["drop"] if state == "dead" else ["numgen", "random", "mod", "100", "<", "10", "drop"]
    sh(*inns(NAME, router, "nft", "add", "rule", "inet", "soak", "forward", *rule))


def restart_exit(braid):
    pid = pid_of("exit")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        raise RuntimeError("the exit did not stop within 10 s of SIGTERM")
    with open(f"{STATE}/exit.log", "a") as log:
        # `ip netns exec` execs the gateway: the child's pid is the gateway's.
        child = subprocess.Popen(["ip", "netns", "exec", f"{NAME}-ex", braid, "run", "--config",
                                  f"{STATE}/exit.toml"], stdout=log, stderr=log, start_new_session=True)
    RESTARTED[child.pid] = child
    with open(f"{STATE}/exit.pid", "w") as f:
        f.write(str(child.pid))


def traffic(stop, goodput):
    """iperf3 downloads and uploads, 10 s each, taking turns until `stop`. Each run
    has a server of its own and at most 30 s: a run cut short (its control connection
    lost in an exit restart) must not block the next."""
    reverse = True
    while not stop.is_set():
        server = subprocess.Popen(inns(NAME, "sv", "iperf3", "-s", "-1"), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        args = ["iperf3", "-c", SERVER, "-t", "10", "-J"] + (["-R"] if reverse else [])
        mbps = float("nan")  # a run cut short counts as no goodput
        try:
            r = subprocess.run(inns(NAME, "cl", *args), capture_output=True, text=True, timeout=30)
            mbps = json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6
        except (subprocess.TimeoutExpired, ValueError, KeyError):
            pass
        server.kill()
        server.wait()
        goodput.append((time.monotonic(), "down" if reverse else "up", mbps))
        reverse = not reverse


def longest_silence(samples, windows, start, end):
    """The longest time (s) without a probe arriving between `start` and `end` (ns),
    less what of it falls in `windows` [(from, to) ns], and the instant (ns) it began:
    the run's start and end count as arrivals, so a probe that stops arriving is
    silent until the end."""
    arrivals = sorted(a for a in (s[1] + s[2] for s in samples) if start < a < end)
    points = [start] + arrivals + [end]
    worst, began = 0.0, start
    for a, b in zip(points, points[1:]):
        excused = sum(max(0, min(b, to) - max(a, frm)) for frm, to in windows)
        if (b - a - excused) / 1e9 > worst:
            worst, began = (b - a - excused) / 1e9, a
    return worst, began


def in_windows(t, windows):
    return any(frm <= t <= to for frm, to in windows)


def lanes_up():
    """The entry's lanes up, from its metrics; None when they do not answer."""
    try:
        text = metrics_text(NAME, "en")
    except RuntimeError:
        return None
    return len(re.findall(r'^braid_uplink_up\{site="site1"[^}]*\} 1$', text, re.M))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--braid", required=True)
    p.add_argument("--linkemu")
    p.add_argument("--seconds", type=int, default=3600)
    p.add_argument("--restart-every", type=float, default=300)
    p.add_argument("--flap-every", type=float, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="bench-out")
    p.add_argument("--break-after", type=float, help="stop the exit for good this many seconds in")
    args = p.parse_args()
    braid = os.path.abspath(args.braid)
    linkemu = args.linkemu or os.path.join(os.path.dirname(braid), "braid-linkemu")
    rng = random.Random(args.seed)
    env = dict(os.environ, RATES=" ".join(["20"] * UPLINKS), DELAYS="5 10 15", BRAID=braid, LINKEMU=linkemu)
    os.makedirs(args.out, exist_ok=True)
    sh("bash", TESTBED, "up", NAME, env=env)
    failures, timeline, goodput, restarts, events = [], [], [], [], []
    flaps = 0
    stop = threading.Event()
    try:
        sh("bash", TESTBED, "start", NAME, env=env)
        with tempfile.TemporaryDirectory() as tmp:
            probes = []
            for direction, port in PROBE_PORTS.items():
                receiver = "cl" if direction == "down" else "sv"
                probes.append(subprocess.Popen(inns(NAME, receiver, "python3", PROBE, "recv", str(port), "--seconds",
                                                    str(args.seconds + 3), "--out", f"{tmp}/{direction}.json")))
            time.sleep(0.3)
            for direction, port in PROBE_PORTS.items():
                sender, target = ("sv", CLIENT) if direction == "down" else ("cl", SERVER)
                probes.append(subprocess.Popen(inns(NAME, sender, "python3", PROBE, "send", target, str(port),
                                                    "--kbps", "32", "--size", "200", "--seconds",
                                                    str(args.seconds))))
            load = threading.Thread(target=traffic, args=(stop, goodput))
            load.start()
            start = time.monotonic()
            start_ns = now_ns()
            # The probes' first packets are on their way within a second.
            probe_start = now_ns() + int(1e9)
            broken = False
            states = ["clean"] * UPLINKS
            next_flap = start + args.flap_every
            next_restart = start + args.restart_every * rng.uniform(0.5, 1.5)
            next_sample = start
            entry_pid = pid_of("site1")
            while time.monotonic() - start < args.seconds:
                t = time.monotonic()
                if t >= next_flap:
                    i = rng.randrange(UPLINKS)
                    state = rng.choice(["dead", "lossy", "clean", "clean"])
                    others_clean = any(s == "clean" for j, s in enumerate(states) if j != i)
                    if state == "clean" or others_clean:
                        set_uplink(i + 1, state)
                        states[i] = state
                        flaps += 1
                        events.append((round(t - start, 1), f"uplink {i + 1} {state}"))
                    next_flap = t + args.flap_every * rng.uniform(0.5, 1.5)
                if args.break_after is not None and not broken and t - start >= args.break_after:
                    os.kill(pid_of("exit"), signal.SIGTERM)
                    broken = True
                if t >= next_restart and not broken:
                    restart_exit(braid)
                    restarts.append(now_ns())
                    events.append((round(t - start, 1), "exit restarted"))
                    next_restart = t + args.restart_every * rng.uniform(0.5, 1.5)
                if t >= next_sample:
                    row = {"t": round(t - start, 1), "ns": now_ns(), "uplinks": list(states)}
                    for gateway in ("site1", "exit"):
                        pid = pid_of(gateway)
                        if gateway == "exit" and broken:
                            row[gateway] = {"rss_mb": 0.0, "fds": 0, "threads": 0}
                            continue
                        if not alive(pid):
                            raise RuntimeError(f"{gateway} (pid {pid}) is gone at {row['t']} s")
                        row[gateway] = dict(zip(("rss_mb", "fds", "threads"), proc_sample(pid)))
                    row["uplinks_up"] = lanes_up()
                    row["goodput_mbps"] = goodput[-1][2] if goodput else None
                    timeline.append(row)
                    print(f"{row['t']:7.1f} s  uplinks {' '.join(s[0] for s in states)}  up {row['uplinks_up']}  "
                          f"entry {row['site1']['rss_mb']:.1f} MB {row['site1']['fds']} fds "
                          f"{row['site1']['threads']} thr  exit {row['exit']['rss_mb']:.1f} MB "
                          f"{row['exit']['fds']} fds {row['exit']['threads']} thr  "
                          f"goodput {row['goodput_mbps'] or 0:.1f} Mbit/s", flush=True)
                    next_sample = t + SAMPLE_EVERY
                time.sleep(0.1)
            probe_end = now_ns() - int(0.5e9)
            if pid_of("site1") != entry_pid:
                failures.append("the entry's pid changed")
            stop.set()
            for i in range(UPLINKS):
                set_uplink(i + 1, "clean")
            windows = [(r, r + int(RESTART_GRACE * 1e9)) for r in restarts]
            for row in timeline:
                if row["uplinks_up"] in (None, 0) and not in_windows(row["ns"], windows):
                    failures.append(f"no lane up at the entry at {row['t']} s ({row['uplinks_up']})")
                    break
            deadline = time.monotonic() + 20
            while (up := lanes_up()) != UPLINKS and time.monotonic() < deadline:
                time.sleep(0.5)
            if up != UPLINKS:
                failures.append(f"{up} of {UPLINKS} lanes up 20 s after every uplink came back clean")
            for proc in probes:
                proc.wait()
            load.join()
            silence = {}
            for direction in PROBE_PORTS:
                with open(f"{tmp}/{direction}.json") as f:
                    data = json.load(f)
                silence[direction], began = longest_silence(data["samples"], windows, probe_start, probe_end)
                if silence[direction] > MAX_SILENCE:
                    failures.append(f"the {direction} probe was silent for {silence[direction]:.1f} s "
                                    f"from {(began - start_ns) / 1e9:.1f} s "
                                    f"(at most {MAX_SILENCE} s outside exit restarts)")
    except Exception as e:
        failures.append(f"{type(e).__name__}: {e}")
        silence = {}
    finally:
        stop.set()
        for gateway in ("exit", "site1"):
            try:
                shutil.copy(f"{STATE}/{gateway}.log", args.out)
                with open(f"{STATE}/{gateway}.log") as f:
                    panics = [line for line in f if "panicked" in line]
                if panics:
                    failures.append(f"{gateway} panicked: {panics[0].strip()}")
            except OSError:
                pass
        sh("bash", TESTBED, "down", NAME, env=env, check=False)

    summary = {"seconds": args.seconds, "flaps": flaps, "exit_restarts": len(restarts),
               "longest_probe_silence_s": silence, "failures": failures}
    if len(timeline) >= 5:
        warm = timeline[len(timeline) // 5: max(len(timeline) * 2 // 5, len(timeline) // 5 + 1)]
        base_rss = statistics.median(r["site1"]["rss_mb"] for r in warm)
        base_fds = statistics.median(r["site1"]["fds"] for r in warm)
        end = timeline[-1]["site1"]
        summary["entry"] = {"rss_mb_start": timeline[0]["site1"]["rss_mb"], "rss_mb_warm": base_rss,
                            "rss_mb_end": end["rss_mb"], "fds_start": timeline[0]["site1"]["fds"],
                            "fds_end": end["fds"], "threads_end": end["threads"]}
        summary["exit"] = {"rss_mb_end": timeline[-1]["exit"]["rss_mb"], "fds_end": timeline[-1]["exit"]["fds"]}
        if args.seconds >= GROWTH_JUDGED_FROM:
            grew = end["rss_mb"] > base_rss * 1.5 and end["rss_mb"] > base_rss + 30
        else:
            grew = end["rss_mb"] > SHORT_RUN_MAX_RSS_MB
        if grew:
            failures.append(f"the entry's memory grew from {base_rss:.1f} to {end['rss_mb']:.1f} MB")
        if end["fds"] > base_fds + 20:
            failures.append(f"the entry's file descriptors grew from {base_fds:.0f} to {end['fds']}")
    else:
        failures.append(f"{len(timeline)} samples: too few to judge memory and file descriptors")
    measured = [g for _, _, g in goodput if g == g]
    for direction in ("down", "up"):
        if not any(d == direction and g == g for _, d, g in goodput):
            failures.append(f"no TCP {direction}load ran its 10 s")
    if measured and statistics.mean(measured) < MIN_GOODPUT_MBPS:
        failures.append(f"TCP goodput {statistics.mean(measured):.1f} Mbit/s on average, "
                        f"under {MIN_GOODPUT_MBPS}")
    summary["goodput_mbps_mean"] = statistics.mean(measured) if measured else 0.0
    summary["tcp_runs"] = len(goodput)
    summary["tcp_runs_cut_short"] = len(goodput) - len(measured)
    with open(os.path.join(args.out, "soak.json"), "w") as f:
        json.dump({"summary": summary, "timeline": timeline, "events": events, "goodput": goodput}, f)
    print(json.dumps(summary, indent=2))
    if failures:
        print("SOAK FAILED:\n  " + "\n  ".join(failures))
        raise SystemExit(1)
    print("soak passed")


if __name__ == "__main__":
    main()
