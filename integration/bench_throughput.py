#!/usr/bin/env python3
"""Throughput and CPU cost per byte of braid builds, side by side, in the namespace
testbed: unshaped uplinks, CUBIC iperf3 flows through the tunnel, up (site to
server), down, and both at once (`--directions both`, iperf3's `--bidir`).

For every uplink count, every round and every build in turn: the testbed comes up
with that build, and each combination of flow count and direction runs for
--seconds. Printed per run: goodput (Mbit/s, iperf3's receiver) and the CPU time
the gateways used per GB carried (user + system, from /proc), which is what a
change to the per-packet path moves even when the machine, not braid, limits the
goodput, and the exit's CPU time per second of the run ("exit cores": above 1, its
work ran on more than one core at once), that of its main thread (which runs the
first data-path thread) and of its two busiest other threads (tokio's workers, which
run QUIC and any further data-path threads), and the entry's main thread (its
data-path thread, which takes both directions). With --baseline, the
ratios of this build to the baseline come last (medians over rounds).

Usage (root): integration/bench_throughput.py --braid target/release/braid
              [--baseline OLD/braid] [--uplinks 2,3] [--flows 1,4]
              [--directions up,down,both] [--seconds 10] [--rounds 1] [--callgrind 20000]
              [--sites 2] [--exit-threads N] [--baseline-exit-threads N]

--sites 2 runs the same flows from the second site (its own entry, one uplink) at
the same time: goodput is both sites' sum, CPU all three gateways'. --exit-threads
and --baseline-exit-threads set the exit's `listen.threads` for each build (left
out unless given, so that builds before the key run): the same binary as both
builds with 1 and 2 measures what spreading the sites over threads does.

--callgrind N first counts the instructions the pure core spends per packet (entry
and exit together, `examples/per_packet.rs` under valgrind's callgrind, N packets
less an empty run): repeatable to the instruction, unlike timings on a shared
machine. It needs the example built from the tree measured (`cargo build --release
--example per_packet`), and valgrind.

Run it on an otherwise idle machine: a build beside it halves the figures.
"""
import argparse
import json
import os
import statistics
import subprocess
import time

from benchlib import inns, sh

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.join(HERE, "testbed.sh")
STATE = os.environ.get("STATE_DIR", "/tmp/braid-testbed")
SERVER = "198.18.100.2"
NAME = "bthr"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User and system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def thread_cpu(pid):
    """CPU seconds of each thread of a process so far, by thread id."""
    cpu = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            cpu[tid] = cpu_seconds(f"{pid}/task/{tid}")
        except FileNotFoundError:
            pass  # ended meanwhile
    return cpu


def gateway_pids(sites):
    gateways = ["site1", "exit"] + (["site2"] if sites == 2 else [])
    pids = []
    for gateway in gateways:
        with open(os.path.join(STATE, NAME, f"{gateway}.pid")) as f:
            pids.append(int(f.read().strip()))
    return pids


def run_flows(flows, direction, seconds, sites):
    """One iperf3 run from each site at once: (goodput Mbit/s summed over the sites
    and directions, gateways' CPU seconds per GB, the exit's CPU seconds per second,
    those of its main thread and two busiest other threads, and that of the entry's
    main thread)."""
    clients = [("cl", 5201), ("c2", 5202)][:sites]
    servers = [subprocess.Popen(inns(NAME, "sv", "iperf3", "-s", "-1", "-p", str(port)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for _, port in clients]
    time.sleep(0.5)
    pids = gateway_pids(sites)
    cpu_before = [cpu_seconds(p) for p in pids]
    exit_threads_before = thread_cpu(pids[1])
    main_before = exit_threads_before.get(str(pids[1]), 0)
    entry_main_before = cpu_seconds(f"{pids[0]}/task/{pids[0]}")
    started = time.monotonic()
    runs = []
    for client, port in clients:
        args = ["iperf3", "-c", SERVER, "-p", str(port), "-C", "cubic", "-P", str(flows),
                "-t", str(seconds), "-J"]
        if direction == "down":
            args.append("-R")
        elif direction == "both":
            args.append("--bidir")
        runs.append(subprocess.Popen(inns(NAME, client, *args), stdout=subprocess.PIPE, text=True))
    reports = [json.loads(run.communicate()[0]) for run in runs]
    cpu = [cpu_seconds(p) - before for p, before in zip(pids, cpu_before)]
    elapsed = time.monotonic() - started
    exit_cores = cpu[1] / elapsed
    entry_main = (cpu_seconds(f"{pids[0]}/task/{pids[0]}") - entry_main_before) / elapsed
    threads = thread_cpu(pids[1])
    # The main thread runs the first data-path thread; tokio's workers run QUIC and
    # any further data-path threads.
    main = (threads.pop(str(pids[1]), main_before) - main_before) / elapsed
    busiest = [main] + sorted(((c - exit_threads_before.get(t, 0)) / elapsed for t, c in threads.items()),
                              reverse=True)[:2]
    for server in servers:
        server.wait(timeout=10)
    received = [r["end"][key] for r in reports for key in ("sum_received", "sum_received_bidir_reverse")
                if key in r["end"]]
    gigabytes = sum(r["bytes"] for r in received) / 1e9
    mbps = sum(r["bits_per_second"] for r in received) / 1e6
    return mbps, sum(cpu) / gigabytes if gigabytes else float("nan"), exit_cores, busiest, entry_main


def instructions(example, packets):
    """Instructions callgrind counts for a run of the per-packet example."""
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", example, str(packets)],
                         capture_output=True, text=True, check=True).stderr
    line = next(l for l in out.splitlines() if "Collected" in l)
    return int(line.rsplit(":", 1)[1].strip())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--braid", required=True)
    p.add_argument("--baseline")
    p.add_argument("--uplinks", default="2,3")
    p.add_argument("--flows", default="1,4")
    p.add_argument("--directions", default="up,down")
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--callgrind", type=int, metavar="N")
    p.add_argument("--sites", type=int, choices=(1, 2), default=1)
    p.add_argument("--exit-threads", type=int)
    p.add_argument("--baseline-exit-threads", type=int)
    args = p.parse_args()
    if args.callgrind:
        example = os.path.join(os.path.dirname(os.path.abspath(args.braid)), "examples", "per_packet")
        per_packet = (instructions(example, args.callgrind) - instructions(example, 0)) / args.callgrind
        print(f"pure core, entry and exit together: {per_packet:.0f} instructions per packet "
              f"({args.callgrind} packets, {example})\n")
    builds = {"this": (os.path.abspath(args.braid), args.exit_threads)}
    if args.baseline:
        builds["baseline"] = (os.path.abspath(args.baseline), args.baseline_exit_threads)
    flows = [int(f) for f in args.flows.split(",")]
    directions = args.directions.split(",")
    # (uplinks, flows, direction, build) -> [(Mbit/s, CPU s/GB) per round]
    results = {}
    print(f"{'uplinks':>7} {'flows':>5} {'dir':>4} {'build':>8} {'round':>5} {'Mbit/s':>8} {'CPU s/GB':>9} "
          f"{'exit cores':>10}  exit: main thread, two busiest others; entry: main thread")
    for uplinks in [int(u) for u in args.uplinks.split(",")]:
        for rnd in range(1, args.rounds + 1):
            for build, (braid, exit_threads) in builds.items():
                env = dict(os.environ, RATES=" ".join(["0"] * uplinks), BRAID=braid,
                           SITES=str(args.sites))
                if exit_threads:
                    env["EXIT_THREADS"] = str(exit_threads)
                sh("bash", TESTBED, "down", NAME, env=env, check=False)
                sh("bash", TESTBED, "up", NAME, env=env)
                try:
                    sh("bash", TESTBED, "start", NAME, env=env)
                    for n in flows:
                        for direction in directions:
                            mbps, cpu_per_gb, exit_cores, busiest, entry_main = run_flows(
                                n, direction, args.seconds, args.sites)
                            results.setdefault((uplinks, n, direction, build), []).append((mbps, cpu_per_gb))
                            print(f"{uplinks:>7} {n:>5} {direction:>4} {build:>8} {rnd:>5} "
                                  f"{mbps:8.0f} {cpu_per_gb:9.2f} {exit_cores:10.2f}  "
                                  f"{' '.join(f'{b:.2f}' for b in busiest)}; {entry_main:.2f}", flush=True)
                finally:
                    sh("bash", TESTBED, "down", NAME, env=env, check=False)
    if "baseline" not in builds:
        return
    print("\nthis build against the baseline (medians over rounds):")
    print(f"{'uplinks':>7} {'flows':>5} {'dir':>4} {'Mbit/s':>14} {'ratio':>6} {'CPU s/GB':>14} {'ratio':>6}")
    for (uplinks, n, direction, build), runs in results.items():
        if build != "this":
            continue
        base = results[(uplinks, n, direction, "baseline")]
        new_mbps, old_mbps = (statistics.median(r[0] for r in rs) for rs in (runs, base))
        new_cpu, old_cpu = (statistics.median(r[1] for r in rs) for rs in (runs, base))
        print(f"{uplinks:>7} {n:>5} {direction:>4} {old_mbps:6.0f} → {new_mbps:5.0f} {new_mbps / old_mbps:6.2f} "
              f"{old_cpu:6.2f} → {new_cpu:5.2f} {new_cpu / old_cpu:6.2f}")


if __name__ == "__main__":
    main()
