#!/usr/bin/env python3
"""Queueing delay by colour under load (the ABE paper's setup, in small), in braid's
namespace testbed.

Downloads from the server to the client through braid, with two 1 Mbit/s
constant-rate UDP probes beside them, one green and one blue, measuring one-way delay
and loss. The probes run alone for the first seconds, which gives the idle delay; the
figures are the delays above it while the downloads run. Variants (10 ms one-way delay
on every uplink):

  1up    one 10 Mbit/s uplink; 5 blue bulk TCP downloads (CUBIC) and 5 green ones (an
         application coloured green in the exit's pacing table)
  2up    the same over two uplinks of 10 and 20 Mbit/s
  5blue  one 10 Mbit/s uplink; 5 blue downloads only

Usage (root): integration/bench_abe.py --braid target/release/braid [--variants 1up,2up,5blue]
              [--runs unknown-rate] [--seconds 20] [--rounds 1] [--out bench-out]

A run is a way of configuring the uplinks: `unknown-rate` (no rate configured: braid
learns each lane's rate from QUIC), `dsd` (each uplink's rate configured: braid shapes
it and serves it with DSD) or `fifo` (the same, with one FIFO for both colours). A run written RUN@BINARY uses that braid binary
instead of --braid's, so that two builds are measured side by side in one invocation
(e.g. unknown-rate@old/braid,unknown-rate@new/braid); with --rounds N every run is
repeated N times, taking turns, and the table shows the round with the median blue
probe p99.

Beside the probes' delays, the table gives the share of all green packets that left
the exit's queues (its shaper's, under dsd) within 10 ms (`queue_delay_seconds`): the
part of green's delay braid's queueing decides, where the probe's also has the lane,
quinn and the path.

Per variant it prints a table and writes DIR/abe-VARIANT.json and DIR/abe-VARIANT.svg
(each probe's one-way delay above idle over time).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time

from benchlib import admin, admin_token, inns, metric_sum, metrics_text, sh

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.join(HERE, "testbed.sh")
PROBE = os.path.join(HERE, "probe.py")
SERVER = "198.18.100.2"
CLIENT = "198.18.1.2"
# Uplink rates (Mbit/s), one-way delays (ms) and downloads per colour. 20 ms round
# trips, as a DSL or cable line has: with none, ten downloads' smallest windows (two
# packets each) would hold 23 ms of queue on 10 Mbit/s whatever manages the queue.
# `5blue` is the load the queue-delay target was first measured with: five blue
# downloads beside the probes.
VARIANTS = {
    "1up": {"rates": [10], "delays": [10], "downloads": {"blue": 5, "green": 5}},
    "2up": {"rates": [10, 20], "delays": [10, 10], "downloads": {"blue": 5, "green": 5}},
    "5blue": {"rates": [10], "delays": [10], "downloads": {"blue": 5}},
}
RUNS = ["unknown-rate", "dsd", "fifo"]
# The testbed's settings for each run.
RUN_ENV = {"unknown-rate": {}, "dsd": {"KNOWN_RATES": "1", "ABE_SCHEDULER": "dsd"},
           "fifo": {"KNOWN_RATES": "1", "ABE_SCHEDULER": "fifo"}}
IDLE_SECONDS = 3
# Inner TOS of the green probe: DSCP 46 (EF), in abe.green_inner_dscp by default.
GREEN_TOS = 0xB8
PROBES = {"green": (6001, GREEN_TOS), "blue": (6002, 0)}
# Server ports of the downloads; the green ones are an application coloured green.
DOWNLOADS = {"blue": 5201, "green": 5202}
PACING_TABLE = {"version": 1, "apps": [
    {"name": "green-downloads", "match": {"proto": "tcp", "remote_ports": str(DOWNLOADS["green"])},
     "colour": "green"}]}


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def run_one(variant, label, seconds, braid, linkemu):
    """One run of `label` (RUN or RUN@BINARY) on `variant`."""
    mode, _, binary = label.partition("@")
    if mode not in RUNS:
        raise SystemExit(f"unknown run {mode!r}: one of {', '.join(RUNS)}")
    braid = os.path.abspath(binary) if binary else braid
    rates, delays = VARIANTS[variant]["rates"], VARIANTS[variant]["delays"]
    downloads = VARIANTS[variant]["downloads"]
    name = "babe"
    env = dict(os.environ, RATES=" ".join(map(str, rates)), DELAYS=" ".join(map(str, delays)),
               BRAID=braid, LINKEMU=linkemu, **RUN_ENV[mode])
    sh("bash", TESTBED, "up", name, env=env)
    try:
        sh("bash", TESTBED, "start", name, env=env)
        status, body, _ = admin(name, "ex", "PUT", "/v1/sites/site1/pacing", admin_token(name),
                                json.dumps(PACING_TABLE).encode())
        if status != 200:
            raise RuntimeError(f"the exit refused the pacing table: {status} {body}")
        servers = [subprocess.Popen(inns(name, "sv", "iperf3", "-s", "-1", "-p", str(port)),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for port in DOWNLOADS.values()]
        total = IDLE_SECONDS + seconds + 1
        with tempfile.TemporaryDirectory() as tmp:
            receivers = {c: subprocess.Popen(inns(name, "cl", "python3", PROBE, "recv", str(port),
                                                  "--seconds", str(total + 1), "--out", f"{tmp}/{c}.json"))
                         for c, (port, _) in PROBES.items()}
            time.sleep(0.3)
            senders = [subprocess.Popen(inns(name, "sv", "python3", PROBE, "send", CLIENT, str(port),
                                             "--kbps", "1000", "--seconds", str(total), "--tos", str(tos)))
                       for port, tos in PROBES.values()]
            time.sleep(IDLE_SECONDS)
            before = metrics_text(name, "ex")
            reports = {}

            def download(colour, flows):
                reports[colour] = json.loads(sh(*inns(
                    name, "cl", "iperf3", "-c", SERVER, "-p", str(DOWNLOADS[colour]), "-R", "-P", str(flows),
                    "-t", str(seconds), "-C", "cubic", "-J")))

            threads = [threading.Thread(target=download, args=item) for item in downloads.items()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            after = metrics_text(name, "ex")
            for p in senders + list(receivers.values()):
                p.wait()
            probes = {}
            for c in PROBES:
                with open(f"{tmp}/{c}.json") as f:
                    probes[c] = json.load(f)
        for s in servers:
            s.kill()
        return summarise(label, probes, reports, before, after)
    finally:
        sh("bash", TESTBED, "down", name, env=env)


def summarise(label, probes, reports, before, after):
    row = {"run": label, "probes": {}, "goodput_mbps": {}}
    for colour, data in probes.items():
        samples = data["samples"]
        if not samples:
            raise RuntimeError(f"the {colour} probe received nothing: is the tunnel up? (see the gateways' logs)")
        start = min(s[1] for s in samples)
        idle = [s[2] / 1e6 for s in samples if s[1] - start < (IDLE_SECONDS - 0.5) * 1e9]
        loaded = [(s[1] - start) / 1e9 for s in samples if s[1] - start > (IDLE_SECONDS + 1) * 1e9]
        idle_ms = statistics.median(idle)
        delays = [s[2] / 1e6 - idle_ms for s in samples if s[1] - start > (IDLE_SECONDS + 1) * 1e9]
        row["probes"][colour] = {
            "idle_ms": idle_ms,
            "p50_ms": percentile(delays, 50),
            "p99_ms": percentile(delays, 99),
            "loss_pct": 100.0 * (1 - len(samples) / data["sent"]) if data["sent"] else 0.0,
            "series": [[t, d] for t, d in zip(loaded, delays)],
        }
    for colour, r in reports.items():
        row["goodput_mbps"][colour] = r["end"]["sum_received"]["bits_per_second"] / 1e6
    drops = lambda text, reason: metric_sum(text, f'braid_packets_dropped_total{{reason="{reason}"}}')
    row["drops"] = {reason: drops(after, reason) - drops(before, reason) for reason in ("queue_delay", "queue_full")}
    green = lambda text, reason: metric_sum(text, f'braid_abe_green_drops_total{{reason="{reason}"}}')
    row["green_drops"] = {reason: green(after, reason) - green(before, reason) for reason in ("acceptance", "stale")}
    # The exit's own part of green's delay: the share of green packets that left its
    # queues (the shaper's, under dsd) within green_delay_ms (10 ms, a bucket bound).
    waited = lambda text, le: metric_sum(text, f'braid_queue_delay_seconds_bucket{{colour="green",le="{le}"}}')
    counted = waited(after, "+Inf") - waited(before, "+Inf")
    in_time = waited(after, "0.01") - waited(before, "0.01")
    row["green_in_time_pct"] = 100.0 * in_time / counted if counted else 100.0
    return row


def svg(variant, rows, path):
    w, h, pad = 720, 400, 50
    peak = max(max((d for _, d in p["series"]), default=1) for r in rows for p in r["probes"].values()) * 1.1
    end = max(max((t for t, _ in p["series"]), default=1) for r in rows for p in r["probes"].values())
    palette = ["#2ca02c", "#1f77b4", "#d62728", "#9467bd", "#8c564b", "#7f7f7f"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">Probe one-way delay above idle, {variant}</text>',
           f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle">time (s)</text>',
           f'<text x="15" y="{h / 2}" transform="rotate(-90 15 {h / 2})" text-anchor="middle">ms</text>',
           f'<text x="{pad - 8}" y="{pad + 4}" text-anchor="end">{peak:.0f}</text>',
           f'<text x="{pad - 8}" y="{h - pad + 4}" text-anchor="end">0</text>']
    sx, sy = (w - 2 * pad) / end, (h - 2 * pad) / peak
    i = 0
    for r in rows:
        for colour, p in r["probes"].items():
            pts = " ".join(f"{pad + t * sx:.1f},{h - pad - max(d, 0) * sy:.1f}" for t, d in p["series"][::5])
            c = palette[i % len(palette)]
            out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1" points="{pts}"/>')
            out.append(f'<text x="{w - pad - 220}" y="{pad + 15 * i}" fill="{c}">{r["run"]} {colour}</text>')
            i += 1
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def report(variant, rows, seconds):
    v = VARIANTS[variant]
    downloads = " and ".join(f"{n} {colour}" for colour, n in v["downloads"].items())
    print(f"\n== {variant}: uplinks {v['rates']} Mbit/s, one-way delays {v['delays']} ms, {downloads} downloads "
          f"for {seconds} s, 1 Mbit/s probes of each colour")
    print(f"{'run':34} {'probe':6} {'idle ms':>8} {'p50 ms':>7} {'p99 ms':>7} {'loss %':>7} "
          f"{'goodput Mbit/s':>15} {'CoDel drops':>12} {'green refused/stale':>20} {'green <=10 ms at exit %':>24}")
    for r in rows:
        for colour, p in r["probes"].items():
            print(f"{r['run']:34} {colour:6} {p['idle_ms']:8.2f} {p['p50_ms']:7.1f} {p['p99_ms']:7.1f} "
                  f"{p['loss_pct']:7.2f} {r['goodput_mbps'].get(colour, 0):15.2f} {r['drops']['queue_delay']:12.0f} "
                  f"{r['green_drops']['acceptance']:>11.0f}/{r['green_drops']['stale']:<8.0f} "
                  f"{r['green_in_time_pct']:24.2f}")
        if len(r.get("rounds", [])) > 1:
            print(f"{'':34} every round, blue p99 ms: " + " ".join(f"{v:.1f}" for v in r["rounds"]))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--braid", required=True)
    p.add_argument("--linkemu")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--runs", default=",".join(RUNS))
    p.add_argument("--seconds", type=int, default=20)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--out", default="bench-out")
    args = p.parse_args()
    linkemu = args.linkemu or os.path.join(os.path.dirname(os.path.abspath(args.braid)), "braid-linkemu")
    os.makedirs(args.out, exist_ok=True)
    for variant in args.variants.split(","):
        labels = args.runs.split(",")
        results = {label: [] for label in labels}
        for _ in range(args.rounds):
            for label in labels:
                results[label].append(run_one(variant, label, args.seconds, args.braid, linkemu))
        rows = []
        for label in labels:
            runs = sorted(results[label], key=lambda r: r["probes"]["blue"]["p99_ms"])
            row = dict(runs[len(runs) // 2])
            row["rounds"] = [r["probes"]["blue"]["p99_ms"] for r in results[label]]
            rows.append(row)
        report(variant, rows, args.seconds)
        with open(os.path.join(args.out, f"abe-{variant}.json"), "w") as f:
            json.dump(rows, f)
        svg(variant, rows, os.path.join(args.out, f"abe-{variant}.svg"))


if __name__ == "__main__":
    main()
