#!/usr/bin/env python3
"""Deadline applications: how many responses of a synchronised burst finish within
their deadlines when the uplink cannot carry them all in time, with fair sharing and
with braid's `deadline` class (P2D), in braid's namespace testbed.

The scenario is priority synchronisation, P2D's (Ye, Lin and Huang) observation, in
small. In a partition-aggregate burst every response starts at the same moment;
flows of similar size and deadline that share a congested bottleneck slow down
together, finish together, and all miss, under fair sharing and under schemes that
weight each flow by its urgency (D2TCP) alike, as their urgencies are alike. P2D
breaks the tie: when the flows cannot all finish in time, the gateway decelerates
some of them, with a probability that depends on their urgency, so that the others
finish in time. Fair sharing is the baseline: the target is at least 1.2 times its
deadlines met.

One uplink of 20 Mbit/s with a one-way delay of 10 ms each way, one site. All
traffic is downloads (server to client), which the exit paces. Per round, at one
instant (one client process releases nine threads at a barrier; each connects and
sends a one-byte request, and the server answers with the response's bytes):

  small   5 responses of 250,000 bytes, deadline 600 ms, server ports 6000-6004
  large   4 responses of 1,250,000 bytes, deadline 2,500 ms, server ports 6005-6008

beside `bulk`, a TCP download from port 5301 of the server that runs throughout
(started LEAD_S seconds before the first round) as a `background` application in
every mode. A response's completion time is measured at the client, from the barrier
(before the connection's SYN, the flow's first packet) to its last byte; it meets
its deadline if that is within the deadline. The nine responses are 6.25 MB: at the
tunnel's goodput of about 18 Mbit/s they take about 2.75 s, which neither deadline
allows all of them. Shared fairly (as a fluid), the small ones take about 1 s (all
miss) and the large ones about 2.8 s (all miss; measured, nine flows starting at
once lose packets and the burst takes 3 to 4 s, one large response in a round
making it); the small ones first (0.6 s) and three large ones next (2.2 s) would meet
eight of nine.

Before the rounds, CAPACITY_FLOWS unpaced TCP downloads measure the goodput the
testbed offers; from it the report gives how many of the nine responses could meet
their deadlines at most, were it handed out perfectly (Moore and Hodgson's
algorithm, each response's first byte two connection setups after the barrier):
the scenario is right when fair sharing meets few and that bound more than half.

Modes, the exit's application table (`remote_ports` is the server's side):

  fair   `bulk` is `background`; `small` and `large` are plain applications
  p2d    the same, and `small` and `large` have `"deadline": {"ms": D, "bytes": B}`
         with their deadline and size

The modes take turns round by round (the order alternates), each putting its table
as a new version before its burst (the bulk application keeps its search across
versions); a round waits --gap seconds after the burst, so that the queues drain and
the bulk download climbs back towards the spare (its search may take longer than
that: "bg before" shows how far it got). Reported per mode: deadlines
met of 9 per round (mean, min, max), total met, the small and large responses met and
their mean completion times, the bulk download's Mbit/s during the bursts (barrier
to last byte) and in the second before each (with no burst, all of the capacity is
spare); for p2d, beside them, the exit's counters
`braid_app_deadlines_met_total` and `_missed_total` (direction down), their change
from a burst to the next round's; the server's TCP retransmissions and timeouts
per burst (the bulk download's among them); and the ratio p2d/fair of total met.

Both gateways run at nice -10 (`--gateway-nice`): the traffic generators share this
machine's cores with them, where on a real network they are other hosts.

Usage (root): integration/bench_deadline.py --braid target/release/braid
              [--linkemu PATH] [--modes fair,p2d] [--rounds 10] [--gap 3] [--out DIR]

The printed table and DIR/deadline.json (every response of every round) are the
output. A build without the `deadline` class refuses p2d's table (400): the script
stops before its first round and says so; `--modes fair` runs without it.
"""
import argparse
import json
import os
import re
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import admin, admin_token, inns, metrics_text, prioritise_gateways, sh, tcp_counters, write_report

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.join(HERE, "testbed.sh")
SERVER = "198.18.100.2"
NAME = "bdl"
RATES = [20]
DELAYS = [10]
# The responses of a burst: application, how many, bytes each, deadline, first port.
RESPONSES = [
    {"app": "small", "count": 5, "bytes": 250_000, "deadline_ms": 600, "port": 6000},
    {"app": "large", "count": 4, "bytes": 1_250_000, "deadline_ms": 2500, "port": 6005},
]
BULK_PORT = 5301
CAPACITY_PORT, CAPACITY_FLOWS, CAPACITY_SECONDS = 5201, 4, 6  # the first second is a warm-up
LEAD_S = 3  # seconds the bulk download runs before the first burst
RESPONSE_TIMEOUT_S = 15  # a response not complete by then is missed (and counted as such)
MODES = ["fair", "p2d"]
TARGET_RATIO = 1.2
CHUNK = 1 << 16


def flows():
    """Every response of a burst: [(port, app, bytes, deadline_ms)]."""
    return [(r["port"] + i, r["app"], r["bytes"], r["deadline_ms"]) for r in RESPONSES for i in range(r["count"])]


# --- run inside the namespaces -------------------------------------------------------

def serve(spec):
    """The server: on each response port, every connection gets its bytes after a
    one-byte request, then a FIN; on BULK_PORT, bytes until the peer goes."""
    sizes = {int(p): int(n) for p, n in (x.split("=") for x in spec.split(","))}
    payload = bytes(max(sizes.values()))
    chunk = bytes(CHUNK)

    def respond(conn, size):
        try:
            if conn.recv(1):
                conn.sendall(memoryview(payload)[:size])
            conn.shutdown(socket.SHUT_WR)
            conn.recv(1)  # the client closes once it has read everything
        except OSError:
            pass
        conn.close()

    def bulk(conn):
        try:
            while True:
                conn.sendall(chunk)
        except OSError:
            pass
        conn.close()

    def accept(s, port):
        while True:
            conn, _ = s.accept()
            args = (conn,) if port == BULK_PORT else (conn, sizes[port])
            threading.Thread(target=bulk if port == BULK_PORT else respond, args=args, daemon=True).start()

    for port in [*sizes, BULK_PORT]:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
        s.listen(64)
        threading.Thread(target=accept, args=(s, port), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


def burst(host, spec):
    """One burst: a thread per response, released at one barrier, each connecting,
    requesting and reading to EOF. Prints JSON: the barrier's CLOCK_MONOTONIC (s) and
    per response its port, bytes read and seconds from the barrier to the connection
    and to the last byte (null if it did not complete)."""
    ports = [(int(p), int(n)) for p, n in (x.split("=") for x in spec.split(","))]
    barrier = threading.Barrier(len(ports))
    released = [0.0] * len(ports)
    results = [None] * len(ports)

    def fetch(i, port, size):
        barrier.wait()
        t0 = released[i] = time.monotonic()
        got, connected, last = 0, None, None
        try:
            conn = socket.create_connection((host, port), timeout=RESPONSE_TIMEOUT_S)
            connected = time.monotonic()
            conn.sendall(b"r")
            conn.settimeout(max(0.1, t0 + RESPONSE_TIMEOUT_S - time.monotonic()))
            while True:
                b = conn.recv(CHUNK)
                if not b:
                    break
                got += len(b)
                if got >= size and last is None:
                    last = time.monotonic()
            conn.close()
        except OSError:
            pass
        results[i] = {"port": port, "bytes": got, "connected_at": connected, "done_at": last}

    threads = [threading.Thread(target=fetch, args=(i, p, n)) for i, (p, n) in enumerate(ports)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    start = min(released)
    for r in results:
        for k in ("connected_at", "done_at"):
            r[k.replace("_at", "_s")] = None if r[k] is None else r[k] - start
            del r[k]
    print(json.dumps({"start": start, "release_spread_s": max(released) - start, "responses": results}), flush=True)


def bulk_receive(host, port):
    """The bulk download's client: reads until its stdin closes, then prints JSON,
    [[CLOCK_MONOTONIC s, bytes so far]] every 50 ms."""
    conn = socket.create_connection((host, port), timeout=10)
    conn.setblocking(False)
    samples, total, next_at = [], 0, time.monotonic()
    while True:
        ready, _, _ = select.select([conn, sys.stdin], [], [], 0.05)
        if sys.stdin in ready and not sys.stdin.buffer.read1(1):
            break
        if conn in ready:
            try:
                b = conn.recv(1 << 20)
                if not b:
                    break
                total += len(b)
            except BlockingIOError:
                pass
        now = time.monotonic()
        if now >= next_at:
            samples.append([now, total])
            next_at = now + 0.05
    samples.append([time.monotonic(), total])
    conn.close()
    print(json.dumps(samples), flush=True)


# --- the benchmark -------------------------------------------------------------------

_last_version = [0]


def table(mode):
    """The exit's application table of a mode, as a new version."""
    version = max(int(time.time() * 1000), _last_version[0] + 1)
    _last_version[0] = version
    apps = []
    for r in RESPONSES:
        last = r["port"] + r["count"] - 1
        app = {"name": r["app"], "match": {"proto": "tcp", "remote_ports": f"{r['port']}-{last}"}}
        if mode == "p2d":
            app["deadline"] = {"ms": r["deadline_ms"], "bytes": r["bytes"]}
        apps.append(app)
    apps.append({"name": "bulk", "match": {"proto": "tcp", "remote_ports": str(BULK_PORT)}, "class": "background"})
    return {"version": version, "apps": apps}


def put_table(mode, token):
    t = table(mode)
    status, body, _ = admin(NAME, "ex", "PUT", "/v1/sites/site1/pacing", token, json.dumps(t).encode())
    if status != 200:
        raise RuntimeError(f"{mode}: the exit refused the table ({status}): {body.strip()}")
    return t


def deadline_counts(text):
    """The exit's deadline counters of direction down: {app: [met, missed]}; None if
    this build has none."""
    if "braid_app_deadlines_" not in text:
        return None
    out = {}
    for m in re.finditer(r'^braid_app_deadlines_(met|missed)_total\{([^}]*)\} (\S+)$', text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if labels.get("direction") != "down" or labels.get("site", "site1") != "site1":
            continue
        pair = out.setdefault(labels.get("app", "?"), [0.0, 0.0])
        pair[0 if m.group(1) == "met" else 1] += float(m.group(3))
    return out


def counts_delta(after, before):
    if after is None or before is None:
        return None
    return {app: [after[app][k] - before.get(app, [0.0, 0.0])[k] for k in (0, 1)] for app in after}


def capacity():
    """Mbit/s CAPACITY_FLOWS parallel unpaced TCP downloads carry (goodput), seconds 2
    to CAPACITY_SECONDS of iperf3's."""
    server = subprocess.Popen(inns(NAME, "sv", "iperf3", "-s", "-1", "-p", str(CAPACITY_PORT)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    out = sh(*inns(NAME, "cl", "iperf3", "-c", SERVER, "-p", str(CAPACITY_PORT), "-R", "-P", str(CAPACITY_FLOWS),
                   "-t", str(CAPACITY_SECONDS), "-i", "1", "-J"))
    server.wait()
    series = [i["sum"]["bits_per_second"] / 1e6 for i in json.loads(out)["intervals"]]
    return {"mbps": statistics.mean(series[1:]), "per_second": series}


def feasible(capacity_mbps, offset_ms):
    """How many of a burst's responses could meet their deadlines at most, if the
    capacity were handed out perfectly (Moore and Hodgson's algorithm, which is
    optimal for one server and jobs released together: earliest deadline first,
    dropping the longest job whenever one would be late). Each response takes its
    bytes at the capacity, after `offset_ms` (its handshake and request)."""
    jobs = sorted((deadline_ms - offset_ms, size * 8 / (capacity_mbps * 1000)) for _, _, size, deadline_ms in flows())
    kept, t = [], 0.0
    for deadline, took in jobs:
        kept.append(took)
        t += took
        if t > deadline:
            longest = max(kept)
            kept.remove(longest)
            t -= longest
    return len(kept)


def server_tcp():
    """The server's TCP segments retransmitted and retransmission timeouts so far."""
    snmp = [line.split() for line in sh(*inns(NAME, "sv", "cat", "/proc/net/snmp")).splitlines()
            if line.startswith("Tcp:")]
    retrans = int(dict(zip(snmp[0][1:], snmp[1][1:]))["RetransSegs"])
    return retrans, tcp_counters(NAME, "sv").get("TCPTimeouts", 0)


def drops():
    """Packets dropped so far at the bottleneck (the router's tbf towards the site) and
    in the exit (`braid_packets_dropped_total`: {reason: packets})."""
    out = sh(*inns(NAME, "r1", "tc", "-s", "qdisc", "show", "dev", "a"))
    tbf = sum(int(x) for x in re.findall(r"dropped (\d+)", out))
    exit_drops = {}
    for m in re.finditer(r'^braid_packets_dropped_total\{[^}]*reason="([^"]+)"[^}]*\} (\S+)$',
                         metrics_text(NAME, "ex"), re.M):
        exit_drops[m.group(1)] = exit_drops.get(m.group(1), 0) + int(float(m.group(2)))
    return tbf, exit_drops


def run_burst(mode, token):
    """Puts the mode's table and runs one burst: the row of the round."""
    put_table(mode, token)
    spec = ",".join(f"{port}={size}" for port, _, size, _ in flows())
    counts0 = deadline_counts(metrics_text(NAME, "ex"))
    tcp0, drops0 = server_tcp(), drops()
    out = sh(*inns(NAME, "cl", "python3", os.path.abspath(__file__), "_burst", SERVER, spec))
    b = json.loads(out)
    tcp1, drops1 = server_tcp(), drops()
    responses = []
    for (port, app, size, deadline_ms), r in zip(flows(), b["responses"]):
        done = r["done_s"]
        responses.append({"port": port, "app": app, "bytes": size, "received": r["bytes"],
                          "deadline_ms": deadline_ms, "connect_ms": None if r["connected_s"] is None
                          else 1000 * r["connected_s"], "completion_ms": None if done is None else 1000 * done,
                          "met": done is not None and 1000 * done <= deadline_ms})
    last = max((x["completion_ms"] for x in responses if x["completion_ms"] is not None), default=None)
    return {"mode": mode, "start": b["start"], "release_spread_ms": 1000 * b["release_spread_s"],
            "responses": responses, "met": sum(x["met"] for x in responses),
            "last_ms": last if last is not None else 1000 * RESPONSE_TIMEOUT_S, "counts_before": counts0,
            "retransmitted_segments": tcp1[0] - tcp0[0], "rto_timeouts": tcp1[1] - tcp0[1],
            "bottleneck_drops": drops1[0] - drops0[0],
            "exit_drops": {k: v - drops0[1].get(k, 0) for k, v in drops1[1].items() if v - drops0[1].get(k, 0)}}


def bulk_mbps(samples, t0, t1):
    """The bulk download's Mbit/s in [t0, t1] from its [time, bytes] samples."""
    def at(t):
        before = [s for s in samples if s[0] <= t]
        after = [s for s in samples if s[0] >= t]
        if not before or not after:
            return None
        (ta, ba), (tb, bb) = before[-1], after[0]
        return ba if tb == ta else ba + (bb - ba) * (t - ta) / (tb - ta)
    a, b = at(t0), at(t1)
    return None if a is None or b is None or t1 <= t0 else (b - a) * 8 / (t1 - t0) / 1e6


def run(a, braid, linkemu):
    env = dict(os.environ, RATES=" ".join(map(str, RATES)), DELAYS=" ".join(map(str, DELAYS)),
               BRAID=braid, LINKEMU=linkemu)
    sh("bash", TESTBED, "up", NAME, env=env)
    server = receiver = None
    try:
        sh("bash", TESTBED, "start", NAME, env=env)
        if a.gateway_nice:
            prioritise_gateways(NAME, a.gateway_nice)
        token = admin_token(NAME)
        # Every mode's table once, up front: a build that refuses one stops here.
        for mode in a.modes:
            put_table(mode, token)
        print("capacity ...", flush=True)
        cap = capacity()
        time.sleep(1)
        spec = ",".join(f"{port}={size}" for port, _, size, _ in flows())
        server = subprocess.Popen(inns(NAME, "sv", "python3", os.path.abspath(__file__), "_serve", spec),
                                  stdout=subprocess.PIPE, text=True)
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the server did not start")
        put_table(a.modes[0], token)
        receiver = subprocess.Popen(inns(NAME, "cl", "python3", os.path.abspath(__file__), "_bulk", SERVER,
                                         str(BULK_PORT)), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        time.sleep(LEAD_S)
        counts_start = deadline_counts(metrics_text(NAME, "ex"))
        rows = []
        for k in range(a.rounds):
            order = a.modes if k % 2 == 0 else a.modes[::-1]
            for mode in order:
                row = run_burst(mode, token)
                row["round"] = k + 1
                time.sleep(a.gap)
                row["counts_after"] = deadline_counts(metrics_text(NAME, "ex"))
                row["gateway"] = counts_delta(row["counts_after"], row["counts_before"])
                rows.append(row)
                small = [x for x in row["responses"] if x["app"] == "small"]
                large = [x for x in row["responses"] if x["app"] == "large"]
                gw = row["gateway"]
                gw_text = ("" if gw is None else "; exit met/missed " + ", ".join(
                    f"{app} {m:.0f}/{x:.0f}" for app, (m, x) in sorted(gw.items()) if m or x))
                print(f"round {k + 1} {mode:5}: met {row['met']}/9 (small {sum(x['met'] for x in small)}/5, "
                      f"large {sum(x['met'] for x in large)}/4), completion small "
                      f"{fmt(mean_completion(small), '.0f')} ms, large {fmt(mean_completion(large), '.0f')} ms, "
                      f"last {row['last_ms']:.0f} ms, server retransmitted {row['retransmitted_segments']} "
                      f"({row['rto_timeouts']} timeouts), dropped {row['bottleneck_drops']} at the bottleneck, "
                      f"{sum(row['exit_drops'].values())} in the exit "
                      f"({', '.join(f'{k} {v}' for k, v in sorted(row['exit_drops'].items())) or '-'}){gw_text}",
                      flush=True)
        # Over the whole run, whenever the exit counted them (only p2d's flows have deadlines).
        cap["gateway_run"] = counts_delta(deadline_counts(metrics_text(NAME, "ex")), counts_start)
        receiver.stdin.close()
        samples = json.loads(receiver.stdout.read())
        receiver.wait()
        receiver = None
        for row in rows:
            row["bulk_mbps"] = bulk_mbps(samples, row["start"], row["start"] + row["last_ms"] / 1000)
            row["bulk_before_mbps"] = bulk_mbps(samples, row["start"] - 1, row["start"])
        return rows, samples, cap
    finally:
        for p in (receiver, server):
            if p is not None:
                p.kill()
                p.wait()
        sh("bash", TESTBED, "down", NAME, env=env, check=False)


def mean_completion(responses):
    done = [x["completion_ms"] for x in responses if x["completion_ms"] is not None]
    return statistics.mean(done) if done else None


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def mean_of(values):
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def summarise(rows, mode):
    mine = [r for r in rows if r["mode"] == mode]
    if not mine:
        return None
    met = [r["met"] for r in mine]
    per_app = {}
    for r0 in RESPONSES:
        app = r0["app"]
        xs = [x for r in mine for x in r["responses"] if x["app"] == app]
        per_app[app] = {"met": sum(x["met"] for x in xs), "of": len(xs), "mean_completion_ms": mean_completion(xs),
                        "incomplete": sum(x["completion_ms"] is None for x in xs)}
    gateway = None
    if all(r["gateway"] is not None for r in mine):
        gateway = {}
        for r in mine:
            for app, (m, x) in r["gateway"].items():
                pair = gateway.setdefault(app, [0.0, 0.0])
                pair[0] += m
                pair[1] += x
    return {"mode": mode, "rounds": len(mine), "met_mean": statistics.mean(met), "met_min": min(met),
            "met_max": max(met), "met_total": sum(met), "apps": per_app,
            "bulk_mbps": mean_of(r["bulk_mbps"] for r in mine),
            "bulk_before_mbps": mean_of(r["bulk_before_mbps"] for r in mine),
            "release_spread_ms_max": max(r["release_spread_ms"] for r in mine),
            "retransmitted_mean": statistics.mean(r["retransmitted_segments"] for r in mine),
            "rto_mean": statistics.mean(r["rto_timeouts"] for r in mine),
            "exit_drops_mean": statistics.mean(sum(r["exit_drops"].values()) for r in mine),
            "bottleneck_drops_mean": statistics.mean(r["bottleneck_drops"] for r in mine), "gateway": gateway}


def print_report(summary, a, cap):
    n = sum(r["count"] for r in RESPONSES)
    what = "; ".join(f"{r['count']} x {r['bytes']:,} B within {r['deadline_ms']} ms ({r['app']}, ports "
                     f"{r['port']}-{r['port'] + r['count'] - 1})" for r in RESPONSES)
    print(f"\n== deadline: one uplink of {RATES[0]} Mbit/s, one-way delay {DELAYS[0]} ms; per burst {what}, "
          f"at once, beside a background bulk download; {a.rounds} rounds per mode, {a.gap} s apart")
    demand = sum(r["count"] * r["bytes"] for r in RESPONSES)
    print(f"capacity: {CAPACITY_FLOWS} unpaced TCP downloads carry {cap['mbps']:.2f} Mbit/s; a burst's "
          f"{demand / 1e6:.2f} MB take {demand * 8 / (cap['mbps'] * 1e3):.0f} ms of it; handed out perfectly "
          f"(EDF dropping the longest, first byte after {cap['offset_ms']:.0f} ms), {cap['feasible']} of {n} "
          f"would meet their deadlines")
    print(f"{'mode':5} {'met/' + str(n) + ' mean':>10} {'min':>4} {'max':>4} {'total':>6} "
          + " ".join(f"{r['app'] + ' met':>10} {r['app'] + ' ms':>9}" for r in RESPONSES)
          + f" {'bg burst':>9} {'bg before':>9} {'retx':>6} {'RTOs':>5} {'drops':>6}   {'exit met/missed':<}")
    for s in summary:
        gw = s["gateway"]
        gw_text = ", ".join(f"{app} {m:.0f}/{x:.0f}" for app, (m, x) in sorted((gw or {}).items())) or "-"
        print(f"{s['mode']:5} {s['met_mean']:10.2f} {s['met_min']:4d} {s['met_max']:4d} {s['met_total']:6d} "
              + " ".join(f"{str(s['apps'][r['app']]['met']) + '/' + str(s['apps'][r['app']]['of']):>10} "
                         f"{fmt(s['apps'][r['app']]['mean_completion_ms'], '9.0f'):>9}" for r in RESPONSES)
              + f" {fmt(s['bulk_mbps'], '9.2f'):>9} {fmt(s['bulk_before_mbps'], '9.2f'):>9} "
              f"{s['retransmitted_mean']:6.0f} {s['rto_mean']:5.1f} "
              f"{s['exit_drops_mean'] + s['bottleneck_drops_mean']:6.0f}   {gw_text}")
    print("(ms: mean completion from the barrier; bg: the bulk download's Mbit/s from the barrier to the burst's last "
          "byte, and in the second before; retx, RTOs: the server's TCP retransmitted segments and timeouts per burst, "
          "the bulk download's among them; drops: packets dropped per burst in the exit and at the bottleneck; exit: "
          "its deadline counters' change from each burst to the next, summed)")
    gw = cap.get("gateway_run")
    if gw is not None:
        print("exit's deadline counters over the whole run (met/missed): "
              + ", ".join(f"{app} {m:.0f}/{x:.0f}" for app, (m, x) in sorted(gw.items())))
    by = {s["mode"]: s for s in summary}
    if "fair" in by and "p2d" in by:
        f, p = by["fair"]["met_total"], by["p2d"]["met_total"]
        ratio = p / f if f else float("inf") if p else float("nan")
        print(f"p2d/fair deadlines met: {p} / {f} = {ratio:.2f} (target >= {TARGET_RATIO})")
        return ratio
    return None


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_serve":
        return serve(sys.argv[2])
    if len(sys.argv) > 1 and sys.argv[1] == "_burst":
        return burst(sys.argv[2], sys.argv[3])
    if len(sys.argv) > 1 and sys.argv[1] == "_bulk":
        return bulk_receive(sys.argv[2], int(sys.argv[3]))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--braid", required=True)
    p.add_argument("--linkemu")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--rounds", type=int, default=10, help="bursts per mode")
    p.add_argument("--gap", type=float, default=3, help="seconds from a burst's end to the next burst")
    p.add_argument("--gateway-nice", type=int, default=-10,
                   help="nice value of both gateways (0: as the traffic generators)")
    p.add_argument("--out", help="where deadline.json goes (default: a new temporary directory)")
    a = p.parse_args()
    a.modes = a.modes.split(",")
    if a.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    for mode in a.modes:
        if mode not in MODES:
            raise SystemExit(f"unknown mode {mode!r}: {', '.join(MODES)}")
    braid = os.path.abspath(a.braid)
    linkemu = os.path.abspath(a.linkemu or os.path.join(os.path.dirname(braid), "braid-linkemu"))
    out = a.out or tempfile.mkdtemp(prefix="bench-deadline-")
    os.makedirs(out, exist_ok=True)
    try:
        rows, samples, cap = run(a, braid, linkemu)
    except RuntimeError as e:
        if "refused the table" in str(e) and "p2d" in str(e):
            raise SystemExit(f"{e}\nthis build has no `deadline` class: run with --modes fair, or a newer build")
        raise
    summary = [s for s in (summarise(rows, m) for m in a.modes) if s]
    # A response's first byte comes two round trips after the barrier (handshake,
    # request); the connection's setup time is one.
    offset_ms = 2 * (mean_of(x["connect_ms"] for r in rows for x in r["responses"]) or 0.0)
    cap["offset_ms"] = offset_ms
    cap["feasible"] = feasible(cap["mbps"], offset_ms)
    ratio = print_report(summary, a, cap)
    report = {"rates": RATES, "delays": DELAYS, "responses": RESPONSES, "bulk_port": BULK_PORT, "lead_s": LEAD_S,
              "gap_s": a.gap, "rounds": a.rounds, "modes": a.modes, "tables": {m: table(m) for m in a.modes},
              "capacity": cap, "summary": summary,
              "ratio": ratio if ratio is None or ratio < float("inf") else None, "target_ratio": TARGET_RATIO, "rows": rows,
              "bulk_samples": samples}
    write_report(out, "deadline.json", report)


if __name__ == "__main__":
    main()
