#!/usr/bin/env python3
"""The AFMT paper's experiment (Sailer & Hähner, Section IV) in braid's namespace testbed.

Three bulk TCP downloads (CUBIC) run for 20 s from the server to the client through
braid; from second 4 to 12 a bulk TCP flow outside the tunnel loads the 32 Mbit/s
uplink in the same direction. Every scheduling algorithm and a no-tunnel single-path
baseline (the fastest uplink, plain routing) run one after the other in one
invocation, so their figures are comparable. Variants:

  3up     uplinks 16, 32, 50 Mbit/s                 (the paper's first topology)
  2up     uplinks 32, 50 Mbit/s                     (the paper's second)
  delay   uplinks 16, 32, 50 Mbit/s, one-way delays 10, 30, 60 ms
  1flow   uplinks 16, 32, 50 Mbit/s, one download alone, no background flow
  1flow-delay  the same with one-way delays 10, 30, 60 ms
  1flow-60ms   the same with one-way delays 60, 60, 60 ms (equal, but long)
  mix     uplinks 16, 32, 50 Mbit/s; downloads wanting 20, 1 and 1 Mbit/s and one bulk

Uplinks as they really are (uplinks 16, 32, 50 Mbit/s, one-way delays 10, 20, 30 ms):
the paper's experiment (`vary10`, ...) and one download alone (`1flow-vary10`, ...):

  vary5, vary10, vary20   the 50 Mbit/s uplink's delay varies uniformly by +-5, +-10
                          or +-20 ms around its 30, per packet and each way, the
                          packets' order kept (as a modem's varying queue keeps it)
  vary-all                every uplink's delay varies by +-10 ms (+-10 around 10 ms:
                          0 to 20)
  loss1                   the 50 Mbit/s uplink loses 1 % of packets each way, at random
  steady                  the same uplinks, steady and clean (the variants' reference)

The `sum-path` baseline is what perfect bonding would give: no tunnel, plain routing
over one path whose rate is the uplinks' sum and whose one-way delay is the longest
uplink's (a flow that uses every uplink cannot arrive sooner than over the slowest
path), the background flow sharing that path. Where an uplink's delay varies, that
path's varies by the most any uplink's does; where uplinks lose packets, it loses
their rate-weighted mean. `no-tunnel` routes over the fastest uplink without braid,
`uplink-N` over uplink N (`uplink-2` is the best clean uplink of `loss1`). The
`sum-path` rows also print each round's share of the capacity left by its own
background flow, which takes a different part of a path it shares with the downloads.

Usage (root): integration/bench_afmt.py --braid target/release/braid [--variants 3up,2up]
              [--algorithms afmt,round-robin,...] [--seconds 20] [--rounds 1] [--out bench-out]
              [--warm SECONDS] [--settle SECONDS]

An algorithm written ALGORITHM@BINARY runs that braid binary instead of --braid's,
so that two builds are measured side by side (e.g. afmt@old/braid,afmt@new/braid).
ALGORITHM+rates configures the entry with the uplinks' rates (`rate_up_kbps` and
`rate_down_kbps`, which the exit learns from the hello): braid then shapes each uplink
to its rate and starts its lanes' windows at it (e.g. afmt,afmt+rates).
ALGORITHM+variation configures each uplink whose delay varies with that variation
(`delay_variation_ms`), which its lanes' delay cap then allows (e.g. afmt,afmt+variation).
With --rounds N every algorithm runs N times, the algorithms taking turns, and the
table shows the run with the median goodput and the goodput of every round. With
--warm S every run begins with one download of S seconds and a 2 s pause before it is
measured: lanes whose congestion windows earlier traffic has opened, as on a gateway
that has been carrying traffic, instead of freshly connected ones. --settle S (0.5 s
unless given) is how long the gateways run, idle, between their start and the measured
traffic: a gateway up for a while, as in a branch office, against one just started.

Per variant it prints a table and writes DIR/VARIANT.json and DIR/VARIANT.svg (goodput
per second, like the paper's Figure 4), and DIR/VARIANT-rounds.json: every round of every
algorithm as the JSON has the median one, to look into a round far from the others.
"Capacity left to the tunnel" is the sum of the uplinks' rates over the run minus the
bytes the background flow carried; AFMT's target is at least 80 % of it. Below the
table: the exit's drops by reason and its lanes' QUIC losses (the downloads' sending
side) and the entry's resequencing outcomes, and in how many rounds the downloads'
sender (the server's kernel) left slow start by HyStart and how many loss recoveries it
went through; the JSON has the lanes' SRTT, window and losses per second, the exit's
drops per second, and per round the sender's TcpExt counters of both (`sender_tcp`).
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

from benchlib import inns, metric_sum, metrics_text, sh, tcp_counters

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.join(HERE, "testbed.sh")
SERVER = "198.18.100.2"
VARIANTS = {
    "3up": {"rates": [16, 32, 50], "delays": [0, 0, 0]},
    "2up": {"rates": [32, 50], "delays": [0, 0]},
    "delay": {"rates": [16, 32, 50], "delays": [10, 30, 60]},
    # One big download and nothing else: does one flow get every uplink?
    "1flow": {"rates": [16, 32, 50], "delays": [0, 0, 0], "flows": 1, "background": False},
    "1flow-delay": {"rates": [16, 32, 50], "delays": [10, 30, 60], "flows": 1, "background": False},
    # Equal delays, but long: what the inner flow's slow start meets without striping's
    # delay differences.
    "1flow-60ms": {"rates": [16, 32, 50], "delays": [60, 60, 60], "flows": 1, "background": False},
    # Flows of unequal demand (Mbit/s; None: as much as it gets): does each get it?
    "mix": {"rates": [16, 32, 50], "delays": [0, 0, 0], "demands": [20, 1, 1, None], "background": False},
}
# Uplinks as they really are: delays 10, 20, 30 ms, one of them varying (JITTER is the
# uniform extra delay the emulator adds, so +-J around D is a delay of D - J plus up to
# 2J) or losing packets at random.
REAL = {
    "steady": {},
    "vary5": {"delays": [10, 20, 25], "jitters": [0, 0, 10]},
    "vary10": {"delays": [10, 20, 20], "jitters": [0, 0, 20]},
    "vary20": {"delays": [10, 20, 10], "jitters": [0, 0, 40]},
    "vary-all": {"delays": [0, 10, 20], "jitters": [20, 20, 20]},
    "loss1": {"losses": [0, 0, 1]},
}
for _name, _spec in REAL.items():
    _base = {"rates": [16, 32, 50], "delays": [10, 20, 30], **_spec}
    VARIANTS[_name] = _base
    VARIANTS[f"1flow-{_name}"] = dict(_base, flows=1, background=False)
ALGORITHMS = ["afmt", "afmt-flowlet", "round-robin", "weighted-round-robin", "min-rtt", "single"]
# Baselines without braid: the fastest uplink alone, and one path of the uplinks' sum.
PLAIN = ("no-tunnel", "sum-path")


def plain(algorithm):
    """For a baseline without braid, the uplink it is routed over (0: the fastest, or
    sum-path's one); None for braid's algorithms."""
    if algorithm in PLAIN:
        return 0
    if algorithm.startswith("uplink-") and algorithm[7:].isdigit():
        return int(algorithm[7:])
    return None


MIB = 1024 * 1024


def testbed(cmd, name, env):
    return sh("bash", TESTBED, cmd, name, env=env)


def metric(name, role, sample, text=None):
    """The sum of the samples of a gateway's /metrics (or of `text`) that start with
    `sample`."""
    return metric_sum(text if text is not None else metrics_text(name, role), sample)


def lane_bytes(name, uplink, text=None):
    """Bytes the exit sent over one uplink's lanes (the downloads' direction)."""
    return metric(name, "ex", f'braid_lane_tx_bytes_total{{colour="blue",site="site1",uplink="up{uplink}"}}', text)


def sample_uplinks(name, n, done, into, drops):
    """Once a second until `done`: per uplink, the exit's bytes sent, SRTT (ms), cwnd
    (bytes), QUIC packets lost so far and the delay variation its lane allows (ms; a
    build before the metric reads 0); into `drops`, the exit's packets dropped so far
    (every reason)."""
    while not done.wait(1):
        text = metrics_text(name, "ex")
        drops.append(metric(name, "ex", "braid_packets_dropped_total", text))
        lane = lambda family, i: metric(name, "ex", f'braid_{family}{{colour="blue",site="site1",uplink="up{i}"}}', text)
        into.append([{"tx_bytes": lane_bytes(name, i, text), "srtt_ms": 1000 * lane("lane_srtt_seconds", i),
                      "cwnd": lane("lane_cwnd_bytes", i), "lost": lane("lane_lost_packets_total", i),
                      "variation_ms": 1000 * lane("lane_delay_variation_seconds", i)}
                     for i in range(1, n + 1)])


def counters(text, family):
    """The samples of one counter family in a /metrics text: {labels: value}."""
    out = {}
    for line in text.splitlines():
        if line.startswith(family + "{"):
            labels, value = line[len(family):].rsplit(" ", 1)
            out[labels] = float(value)
    return out


# Where a download's packets were lost: the exit's drops by reason and its lanes' QUIC
# losses (the uplinks' queues) and the lost packets it sent again, and what the entry's
# resequencer did; and the padding the exit's lanes sent to open their windows.
FAMILIES = (("ex", "braid_packets_dropped_total"), ("ex", "braid_lane_lost_packets_total"),
            ("ex", "braid_lane_loss_repairs_total"),
            ("en", "braid_reseq_packets_total"), ("ex", "braid_lane_opening_bytes_total"))


def counter_deltas(name, before):
    """What the counters of FAMILIES did since `before`, nonzero ones only."""
    now = counter_snapshot(name)
    out = {}
    for role, family in FAMILIES:
        for labels, value in now[role][family].items():
            delta = value - before.get(role, {}).get(family, {}).get(labels, 0.0)
            if delta:
                out[f"{role} {family[6:]}{labels}"] = int(delta)
    return out


def counter_snapshot(name):
    """The counters of FAMILIES now: {role: {family: {labels: value}}}."""
    text = {"ex": metrics_text(name, "ex"), "en": metrics_text(name, "en")}
    snapshot = {"ex": {}, "en": {}}
    for role, family in FAMILIES:
        snapshot[role][family] = counters(text[role], family)
    return snapshot


def plain_route(name, i):
    """The no-tunnel baseline: client <-> server routed over uplink `i`, no braid."""
    sub = i
    sh(*inns(name, "en", "ip", "route", "replace", "198.18.100.0/24", "via", f"198.19.{sub}.1", "dev", f"up{i}"))
    sh(*inns(name, f"r{i}", "ip", "route", "replace", "198.18.100.0/24", "via", f"198.19.{100 + sub}.2"))
    sh(*inns(name, f"r{i}", "ip", "route", "replace", "198.18.1.0/24", "via", f"198.19.{sub}.2"))
    sh(*inns(name, "ex", "ip", "route", "replace", "198.18.1.0/24", "via", f"198.19.{100 + sub}.1"))


SENDER_COUNTERS = ["TCPHystartDelayDetect", "TCPHystartDelayCwnd", "TCPHystartTrainDetect",
                   "TCPHystartTrainCwnd", "TCPSackRecovery", "TCPTimeouts"]


def run_one(variant, label, seconds, braid, linkemu, warm=0, settle=0.5):
    """One run of `label` (an algorithm, or ALGORITHM@BINARY) on `variant`."""
    algorithm, _, binary = label.partition("@")
    algorithm, _, option = algorithm.partition("+")
    if option not in ("", "rates", "variation"):
        sys.exit(f"{label}: unknown option +{option} (known: +rates, +variation)")
    braid = os.path.abspath(binary) if binary else braid
    rates, delays = VARIANTS[variant]["rates"], VARIANTS[variant]["delays"]
    if not 0 <= (plain(algorithm) or 0) <= len(rates):
        sys.exit(f"{label}: {variant} has uplinks 1 to {len(rates)}")
    jitters = VARIANTS[variant].get("jitters", [0] * len(rates))
    losses = VARIANTS[variant].get("losses", [0] * len(rates))
    # The background flow loads the 32 Mbit/s uplink, or the one path of sum-path.
    bg = rates.index(32) + 1
    if algorithm == "sum-path":
        loss = sum(r * l for r, l in zip(rates, losses)) / sum(rates)
        rates, delays, jitters, losses, bg = [sum(rates)], [max(delays)], [max(jitters)], [round(loss, 3)], 1
    flows = VARIANTS[variant].get("flows", 3)
    with_background = VARIANTS[variant].get("background", True)
    name = "bafmt"
    env = dict(os.environ, RATES=" ".join(map(str, rates)), DELAYS=" ".join(map(str, delays)),
               JITTER=" ".join(map(str, jitters)), LOSS=" ".join(map(str, losses)), BRAID=braid, LINKEMU=linkemu,
               SCHEDULER=algorithm if plain(algorithm) is None else "afmt",
               KNOWN_RATES="1" if option == "rates" else "0",
               KNOWN_VARIATION="1" if option == "variation" else "0")
    testbed("up", name, env)
    try:
        if plain(algorithm) is not None:
            plain_route(name, plain(algorithm) or rates.index(max(rates)) + 1)
        else:
            testbed("start", name, env)
        # The background flow runs exit -> entry like the downloads, outside the tunnel.
        bg_addr = f"198.19.{bg}.2"
        servers = [
            subprocess.Popen(inns(name, "sv", "iperf3", "-s", "-1", "-p", "5201"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            subprocess.Popen(inns(name, "en", "iperf3", "-s", "-1", "-p", "5301", "-B", bg_addr),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        ]
        time.sleep(settle)
        if warm:
            # Lanes whose windows earlier traffic has opened, as on a gateway that has
            # carried traffic before: one download of `warm` seconds, then a pause.
            sh(*inns(name, "sv", "sh", "-c", "iperf3 -s -1 -p 5202 >/dev/null 2>&1 &"))
            time.sleep(0.3)
            sh(*inns(name, "cl", "iperf3", "-c", SERVER, "-p", "5202", "-R", "-t", str(warm), "-C", "cubic"))
            time.sleep(2)
        before = {}
        if plain(algorithm) is None:
            before["reordered"] = metric(name, "en", 'braid_reordered_packets_total{site="site1"}')
            before["rx"] = metric(name, "en", "braid_lane_rx_packets_total")
            before["lanes"] = [lane_bytes(name, i) for i in range(1, len(rates) + 1)]
            before["counters"] = counter_snapshot(name)
            before["drops"] = metric(name, "ex", "braid_packets_dropped_total")
        sender_before = tcp_counters(name, "sv")
        results = {}

        def background():
            time.sleep(4)
            out = sh(*inns(name, "ex", "iperf3", "-c", bg_addr, "-p", "5301", "-t", str(int(seconds * 0.4)),
                     "-C", "cubic", "-J"), check=False)
            results["background"] = json.loads(out) if out.strip() else {}

        t = threading.Thread(target=background if with_background else lambda: None)
        t.start()
        uplinks, drops, done = [], [], threading.Event()
        sampler = threading.Thread(target=sample_uplinks, args=(name, len(rates), done, uplinks, drops))
        if plain(algorithm) is None:
            sampler.start()
        demands = VARIANTS[variant].get("demands")
        if demands:
            runs = download_mix(name, demands, seconds)
        else:
            runs = [json.loads(sh(*inns(name, "cl", "iperf3", "-c", SERVER, "-p", "5201", "-R", "-P", str(flows),
                                        "-t", str(seconds), "-i", "1", "-C", "cubic", "-J")))]
        t.join()
        done.set()
        if sampler.is_alive():
            sampler.join()
        per_second = [sum(r["intervals"][i]["sum"]["bytes"] if i < len(r["intervals"]) else 0 for r in runs)
                      for i in range(max(len(r["intervals"]) for r in runs))]
        received = sum(r["end"]["sum_received"]["bytes"] for r in runs)
        retransmits = sum(r["end"]["sum_sent"].get("retransmits", 0) for r in runs)
        bg_bytes = results.get("background", {}).get("end", {}).get("sum_received", {}).get("bytes", 0)
        row = {"algorithm": label, "bytes": received, "per_second": per_second,
               "retransmits": retransmits, "background_bytes": bg_bytes, "uplinks_per_second": uplinks}
        # How the downloads' sender (the server's kernel) left slow start: HyStart on a
        # rising round trip (delay), on a long train of acknowledgements (train), or on
        # a loss; the ...Cwnd counters sum the windows (segments) it left at.
        sender_after = tcp_counters(name, "sv")
        # A kernel without HyStart's counters (before Linux 5.7) counts none.
        row["sender_tcp"] = {k: sender_after.get(k, 0) - sender_before.get(k, 0) for k in SENDER_COUNTERS}
        if drops:
            # Where in the run the exit dropped: the losses the inner flows saw inside braid.
            row["exit_drops_per_second"] = [int(b - a) for a, b in zip([before["drops"]] + drops, drops)]
        if demands:
            row["flows"] = [{"demand_mbps": d, "mbps": r["end"]["sum_received"]["bits_per_second"] / 1e6}
                            for d, r in zip(demands, runs)]
        if plain(algorithm) is None:
            reordered = metric(name, "en", 'braid_reordered_packets_total{site="site1"}') - before["reordered"]
            rx = metric(name, "en", "braid_lane_rx_packets_total") - before["rx"]
            row["reordered"] = reordered
            row["rx_packets"] = rx
            row["reordered_pct"] = 100.0 * reordered / rx if rx else 0.0
            carried = [lane_bytes(name, i) - b for i, b in enumerate(before["lanes"], 1)]
            row["uplink_share_pct"] = [100.0 * c / sum(carried) if sum(carried) else 0.0 for c in carried]
            row["counters"] = counter_deltas(name, before["counters"])
        for s in servers:
            s.kill()
        return row
    finally:
        testbed("down", name, env)


def download_mix(name, demands, seconds):
    """One CUBIC download per demand (Mbit/s, None: unlimited), all at once, each on
    its own server port; their iperf3 reports."""
    servers = [subprocess.Popen(inns(name, "sv", "iperf3", "-s", "-1", "-p", str(5210 + i)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(len(demands))]
    time.sleep(0.5)
    reports = [None] * len(demands)

    def client(i, demand):
        rate = ["-b", f"{demand}M"] if demand else []
        reports[i] = json.loads(sh(*inns(name, "cl", "iperf3", "-c", SERVER, "-p", str(5210 + i), "-R",
                                         "-t", str(seconds), "-i", "1", "-C", "cubic", "-J", *rate)))

    threads = [threading.Thread(target=client, args=(i, d)) for i, d in enumerate(demands)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in servers:
        s.wait()
    return reports


def svg(variant, rows, seconds, path):
    w, h, pad = 720, 400, 50
    peak = max(max(r["per_second"]) for r in rows) / MIB * 1.1 or 1
    colours = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">Total goodput, {variant} '
           f'(background flow on the 32 Mbit/s uplink from 4 s to 12 s)</text>',
           f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle">time (s)</text>',
           f'<text x="15" y="{h / 2}" transform="rotate(-90 15 {h / 2})" text-anchor="middle">MiB/s</text>']
    sx = (w - 2 * pad) / seconds
    sy = (h - 2 * pad) / peak
    for k in range(0, int(peak) + 1):
        y = h - pad - k * sy
        out.append(f'<text x="{pad - 8}" y="{y + 4}" text-anchor="end">{k}</text>')
    for k in range(0, seconds + 1, 2):
        out.append(f'<text x="{pad + k * sx}" y="{h - pad + 15}" text-anchor="middle">{k}</text>')
    for i, r in enumerate(rows):
        pts = " ".join(f"{pad + (j + 1) * sx:.1f},{h - pad - b / MIB * sy:.1f}" for j, b in enumerate(r["per_second"]))
        c = colours[i % len(colours)]
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{pts}"/>')
        out.append(f'<text x="{w - pad - 150}" y="{pad + 15 * i}" fill="{c}">{r["algorithm"]}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def report(variant, rows, seconds):
    rates = VARIANTS[variant]["rates"]
    capacity = sum(rates) * 1e6 / 8 * seconds
    # AFMT's runs, with the uplinks' rates configured or not.
    bg = max((r["background_bytes"] for r in rows
              if r["algorithm"].partition("@")[0].partition("+")[0] == "afmt"), default=0)
    left = capacity - bg
    spec = VARIANTS[variant]
    print(f"\n== {variant}: uplinks {rates} Mbit/s, delays {spec['delays']} ms"
          + (f" + up to {spec['jitters']} ms (uniform)" if any(spec.get("jitters", [])) else "")
          + (f", loss {spec['losses']} %" if any(spec.get("losses", [])) else "") + f", {seconds} s")
    print(f"capacity {capacity / MIB:.1f} MiB; background flow (AFMT run) {bg / MIB:.1f} MiB; "
          f"left to the tunnel {left / MIB:.1f} MiB")
    print(f"{'algorithm':22} {'MiB':>7} {'Mbit/s':>7} {'of left':>8} {'retrans':>8} {'reordered':>10} "
          f"{'uplink shares %':>16}  per second (MiB)")
    for r in rows:
        reord = f"{r['reordered_pct']:.2f}%" if "reordered_pct" in r else "-"
        share = 100.0 * r["bytes"] / left if left else 0
        series = " ".join(f"{b / MIB:.1f}" for b in r["per_second"])
        shares = "/".join(f"{p:.0f}" for p in r.get("uplink_share_pct", [])) or "-"
        print(f"{r['algorithm']:22} {r['bytes'] / MIB:7.1f} {r['bytes'] * 8 / seconds / 1e6:7.1f} {share:7.1f}% "
              f"{r['retransmits']:8d} {reord:>10} {shares:>16}  {series}")
        if len(r.get("rounds", [])) > 1:
            print(f"{'':22} every round, % of left: "
                  + " ".join(f"{100.0 * b / left:.1f}" if left else "-" for b in r["rounds"]))
        own = zip(r.get("rounds", [r["bytes"]]), r.get("rounds_background", [r["background_bytes"]]))
        if r["algorithm"] == "sum-path" and r["background_bytes"]:
            print(f"{'':22} every round, % of the capacity its own background flow left: "
                  + " ".join(f"{100.0 * b / (capacity - g):.1f}" for b, g in own))
    for r in rows:
        if "flows" in r:
            demanded = ", ".join(f"{f['mbps']:.1f} of {f['demand_mbps'] or 'all'}" for f in r["flows"])
            print(f"{r['algorithm']:22} per flow (Mbit/s got of wanted): {demanded}")
    for r in rows:
        if r.get("counters"):
            print(f"{r['algorithm']:22} drops, resequencing, padding: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(r["counters"].items())))
    for r in rows:
        senders = r.get("sender_rounds", [])
        if senders:
            print(f"{r['algorithm']:22} sender left slow start by HyStart in {len(senders)} rounds: "
                  f"delay {sum(1 for t in senders if t['TCPHystartDelayDetect'])}, "
                  f"train {sum(1 for t in senders if t['TCPHystartTrainDetect'])}; "
                  "loss recoveries per round " + " ".join(str(t["TCPSackRecovery"]) for t in senders))
    by = {r["algorithm"]: r["bytes"] for r in rows}
    alone = {a: b for a, b in by.items() if plain(a) is not None and a != "sum-path"}
    if alone:
        best, best_bytes = max(alone.items(), key=lambda kv: kv[1])
        for r in rows:
            if plain(r["algorithm"]) is None and best_bytes:
                rounds = r.get("rounds", [r["bytes"]])
                print(f"{r['algorithm']:22} / best uplink alone ({best}, median): "
                      + " ".join(f"{b / best_bytes:.2f}" for b in rounds)
                      + (f"; / sum-path: " + " ".join(f"{b / by['sum-path']:.2f}" for b in rounds)
                         if by.get("sum-path") else ""))
    if "afmt" in by:
        if "round-robin" in by and by["round-robin"]:
            print(f"AFMT / round-robin = {by['afmt'] / by['round-robin']:.2f}")
        if "no-tunnel" in by and by["no-tunnel"]:
            print(f"AFMT / single fastest path (no tunnel) = {by['afmt'] / by['no-tunnel']:.2f}")
        if "sum-path" in by and by["sum-path"]:
            print(f"AFMT / one path of the uplinks' sum (no tunnel) = {by['afmt'] / by['sum-path']:.2f}")
        print(f"AFMT / capacity left to the tunnel = {by['afmt'] / left:.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--braid", required=True)
    p.add_argument("--linkemu")
    p.add_argument("--variants", default="3up,2up,delay")
    p.add_argument("--algorithms", default=",".join(ALGORITHMS + ["no-tunnel"]))
    p.add_argument("--seconds", type=int, default=20)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--out", default="bench-out")
    p.add_argument("--warm", type=int, default=0,
                   help="seconds of one download before each measured run (lanes' windows open)")
    p.add_argument("--settle", type=float, default=0.5,
                   help="seconds between the gateways' start and the measured traffic")
    a = p.parse_args()
    braid = os.path.abspath(a.braid)
    linkemu = os.path.abspath(a.linkemu or os.path.join(os.path.dirname(braid), "braid-linkemu"))
    os.makedirs(a.out, exist_ok=True)
    for variant in a.variants.split(","):
        labels = a.algorithms.split(",")
        runs = {label: [] for label in labels}
        for round_ in range(1, a.rounds + 1):
            for label in labels:
                print(f"running {variant} / {label} (round {round_} of {a.rounds}) ...", file=sys.stderr, flush=True)
                runs[label].append(run_one(variant, label, a.seconds, braid, linkemu, a.warm, a.settle))
        rows = []
        for label in labels:
            ordered = sorted(runs[label], key=lambda r: r["bytes"])
            median = dict(ordered[len(ordered) // 2], rounds=[r["bytes"] for r in runs[label]],
                          rounds_background=[r["background_bytes"] for r in runs[label]],
                          sender_rounds=[r["sender_tcp"] for r in runs[label]])
            rows.append(median)
        with open(os.path.join(a.out, f"{variant}.json"), "w") as f:
            json.dump(rows, f, indent=1)
        with open(os.path.join(a.out, f"{variant}-rounds.json"), "w") as f:
            json.dump(runs, f, indent=1)
        svg(variant, rows, a.seconds, os.path.join(a.out, f"{variant}.svg"))
        report(variant, rows, a.seconds)


if __name__ == "__main__":
    main()
