#!/usr/bin/env python3
"""Per-application pacing benchmarks (issue 4) in braid's namespace testbed.

Accuracy: 1, 10, 100 and 1,000 applications, each one UDP port of the server, paced by
the entry (`rate_up_kbps`). The client offers every application 25 % more than its
rate; the server counts what arrives per port over 10 s after a 2 s warm-up. The
error of an application is its measured IP rate (payload + 28 bytes of headers per
datagram) against its target. Then a six-connection "browser" and a one-connection
"download" share the tunnel, paced by the exit (`rate_down_kbps`), measured by
iperf3 over 10 s. Finally the time a PUT of a 10,000-application table takes to
answer (it answers once the table is persisted and in force).

Mix (the paper's experiment in small, `--mix 20,60`): one 100 Mbit/s uplink; N
applications, 30 % web-like (six parallel TCP connections fetching 100 KB pages
again and again), 30 % download-like (one bulk TCP connection), 20 % VoIP-like
(50 datagrams/s of 200 bytes, server to client, one-way delay and loss measured)
and 20 % SSH-like (a 100-byte request and a 1000-byte answer every 100 ms, response
time measured; VoIP arrival times are the kernel's socket timestamps, and the
latency-sensitive applications run in processes of their own), all downloads paced by the exit. Best effort (no table) and paced
(rates summing to 92 Mbit/s of inner traffic, just under the uplink once the
tunnel's 56 bytes per packet are added) run one after the other. Reported: per class
the rate per application against its target, the packets the bottleneck (the
router's tbf) and braid's lane queue dropped, VoIP one-way delay p50/p95 against the
idle delay, VoIP loss, SSH response time p50/p95.

Both gateways run at nice -10 (`--gateway-nice`): the traffic generators share this
machine's two cores with them, where on a real network they are other hosts.

Rates: 1 application at 50 Mbit/s; 10 from 1 to 50 Mbit/s (geometric); 100 at
1 Mbit/s; 1,000 at 0.1 Mbit/s. (1,000 at 1 Mbit/s or more would be over 1 Gbit/s,
beyond what this 2-core machine carries through both gateways.)

Usage (root): integration/bench_pacing.py --braid target/release/braid [--out DIR]
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import resource
import selectors
import socket
import struct
import subprocess
import sys
import time

from benchlib import admin, admin_token, inns, metric_sum, metrics_text, prioritise_gateways, sh

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.join(HERE, "testbed.sh")
SERVER = "198.18.100.2"
NAME = "bpace"
IP_UDP_HEADERS = 28
DATAGRAM = 1400  # IP bytes of every datagram the sender sends
BASE_PORT = 20000
WARMUP, WINDOW = 2, 10


def table(apps):
    return {"version": int(time.time() * 1000), "apps": apps}


def receive(n, warmup, window):
    """Counts IP bytes per port BASE_PORT..+n arriving in [warmup, warmup + window)."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
    sel = selectors.DefaultSelector()
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        s.bind(("0.0.0.0", BASE_PORT + i))
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
    print("ready", flush=True)
    counts = [0] * n
    start = time.monotonic()
    t0, t1 = start + warmup, start + warmup + window
    while time.monotonic() < t1:
        for key, _ in sel.select(timeout=0.1):
            while True:
                try:
                    data = key.fileobj.recv(65535)
                except BlockingIOError:
                    break
                t = time.monotonic()
                if t0 <= t < t1:
                    counts[key.data] += len(data) + IP_UDP_HEADERS
    print(json.dumps(counts), flush=True)


def send(host, rates_kbps, seconds, factor):
    """Offers port BASE_PORT + i `factor` times rates_kbps[i], in small rounds."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    payload = b"x" * (DATAGRAM - IP_UDP_HEADERS)
    per_sec = [k * 1000 / 8 * factor for k in rates_kbps]
    # Independent applications are not in step: a random phase each. (In step, 1,000
    # applications would each send their datagram in the same round, and the lane's
    # queue behind the pacer would overflow with every burst.)
    rng = random.Random(7)
    credit = [rng.uniform(0, DATAGRAM) for _ in per_sec]
    round_s = 0.002 if len(per_sec) <= 10 else 0.01
    start = last = time.monotonic()
    while last - start < seconds:
        time.sleep(round_s)
        now = time.monotonic()
        dt, last = now - last, now
        for i, rate in enumerate(per_sec):
            credit[i] += rate * dt
            while credit[i] >= DATAGRAM:
                credit[i] -= DATAGRAM
                try:
                    s.sendto(payload, (host, BASE_PORT + i))
                except OSError:
                    pass


def rates_for(n):
    if n == 1:
        return [50_000]
    if n == 10:
        return [round(1000 * 50 ** (i / 9)) for i in range(10)]
    if n == 100:
        return [1000] * 100
    return [100] * n


def accuracy(n, token):
    rates = rates_for(n)
    apps = [{"name": f"app{i}", "match": {"proto": "udp", "remote_ports": str(BASE_PORT + i)},
             "rate_up_kbps": r} for i, r in enumerate(rates)]
    status, body, secs = admin(NAME, "en", "PUT", "/v1/sites/site1/pacing", token, json.dumps(table(apps)).encode())
    assert status == 200, body
    rx = subprocess.Popen(inns(NAME, "sv", "python3", __file__, "_receive", str(n), str(WARMUP), str(WINDOW)),
                          stdout=subprocess.PIPE, text=True)
    assert rx.stdout.readline().strip() == "ready"
    tx = subprocess.Popen(inns(NAME, "cl", "python3", __file__, "_send", SERVER, ",".join(map(str, rates)),
                               str(WARMUP + WINDOW + 1), "1.25"))
    counts = json.loads(rx.stdout.readline())
    rx.wait()
    tx.wait()
    # Let the queues (up to 100 ms or 16 KiB each) drain before the next run.
    time.sleep(2)
    errors = [100.0 * (c * 8 / WINDOW / (r * 1000) - 1) for c, r in zip(counts, rates)]
    worst = max(errors, key=abs)
    return {"apps": n, "total_target_mbps": sum(rates) / 1000, "measured_mbps": sum(counts) * 8 / WINDOW / 1e6,
            "worst_error_pct": worst, "mean_abs_error_pct": sum(map(abs, errors)) / n, "put_seconds": secs,
            "errors_pct": errors}


def tcp_mix(token):
    apps = [{"name": "browser", "match": {"proto": "tcp", "remote_ports": "5201"}, "rate_down_kbps": 12000},
            {"name": "download", "match": {"proto": "tcp", "remote_ports": "5202"}, "rate_down_kbps": 6000}]
    status, body, _ = admin(NAME, "ex", "PUT", "/v1/sites/site1/pacing", token, json.dumps(table(apps)).encode())
    assert status == 200, body
    servers = [subprocess.Popen(inns(NAME, "sv", "iperf3", "-s", "-1", "-p", str(p)), stdout=subprocess.DEVNULL)
               for p in (5201, 5202)]
    time.sleep(0.5)
    clients = [subprocess.Popen(inns(NAME, "cl", "iperf3", "-c", SERVER, "-p", str(p), "-R", "-P", str(k), "-t", str(WINDOW),
                                     "-O", str(WARMUP), "-C", "cubic", "-J"), stdout=subprocess.PIPE, text=True)
               for p, k in ((5201, 6), (5202, 1))]
    results = []
    for (name, target_kbps, conns), c in zip((("browser", 12000, 6), ("download", 6000, 1)), clients):
        out = json.loads(c.communicate()[0])
        goodput = out["end"]["sum_received"]["bits_per_second"]
        # TCP goodput is the paced IP rate less 52 header bytes (IP, TCP with
        # timestamps) per 1426-byte packet.
        ip_rate = goodput * 1426 / 1374
        results.append({"app": name, "connections": conns, "target_mbps": target_kbps / 1000,
                        "goodput_mbps": goodput / 1e6, "ip_rate_mbps": ip_rate / 1e6,
                        "error_pct": 100.0 * (ip_rate / (target_kbps * 1000) - 1)})
    for s in servers:
        s.wait()
    return results


def big_put(token):
    apps = [{"name": f"app{i}", "match": {"proto": "udp", "remote_ports": str(30000 + i)}, "rate_up_kbps": 500}
            for i in range(10_000)]
    body = json.dumps(table(apps)).encode()
    status, text, secs = admin(NAME, "en", "PUT", "/v1/sites/site1/pacing", token, body)
    assert status == 200, text
    return {"apps": 10_000, "body_bytes": len(body), "put_seconds": secs}


MIX_BASE = 6000
MIX_CLASSES = ("web", "download", "voip", "ssh")
VOIP_BYTES, VOIP_PPS = 200, 50
# Linux's SO_TIMESTAMPNS (also SCM_TIMESTAMPNS), which Python's socket module lacks.
SO_TIMESTAMPNS = 35


def mix_classes(n):
    """30 % web, 30 % download, 20 % VoIP, 20 % SSH, interleaved."""
    pattern = ["web", "download", "voip", "ssh", "web", "download", "voip", "ssh", "web", "download"]
    return [pattern[i % len(pattern)] for i in range(n)]


async def mix_server(classes, kinds):
    """Serves the applications of the classes in `kinds` (the others are served by
    another process: latency-sensitive ones get an event loop of their own, so that
    what they measure is the network, not Python busy with bulk transfers)."""
    import asyncio

    async def web(reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                size = int(line)
                writer.write(b"w" * size)
                await writer.drain()
        except (ConnectionError, ValueError):
            pass
        writer.close()

    async def download(reader, writer):
        chunk = b"d" * 65536
        try:
            while True:
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    async def ssh(reader, writer):
        try:
            while True:
                await reader.readexactly(100)
                writer.write(b"s" * 1000)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        writer.close()

    class Voip(asyncio.DatagramProtocol):
        def connection_made(self, transport):
            self.transport = transport

        def datagram_received(self, data, peer):
            # A client's hello: stream to it for the seconds it asks.
            seconds = float(data)
            asyncio.get_running_loop().create_task(self.stream(peer, seconds))

        async def stream(self, peer, seconds):
            seq, start = 0, time.monotonic()
            while time.monotonic() - start < seconds:
                head = json.dumps([seq, time.time()]).encode()
                self.transport.sendto(head.ljust(VOIP_BYTES - IP_UDP_HEADERS, b" "), peer)
                seq += 1
                await asyncio.sleep(start + seq / VOIP_PPS - time.monotonic())

    loop = asyncio.get_running_loop()
    for i, cls in enumerate(classes):
        port = MIX_BASE + i
        if cls not in kinds:
            continue
        if cls == "voip":
            await loop.create_datagram_endpoint(Voip, local_addr=("0.0.0.0", port))
        else:
            await asyncio.start_server({"web": web, "download": download, "ssh": ssh}[cls], "0.0.0.0", port)
    print("ready", flush=True)
    await asyncio.Event().wait()


async def mix_client(host, classes, kinds, warmup, window):
    """Runs the applications of the classes in `kinds`; prints per application what it
    measured in the window (null for the others)."""
    import asyncio
    t0 = time.monotonic() + warmup
    t1 = t0 + window
    results = [{"class": c, "bytes": 0, "samples": [], "sent": 0, "received": 0} for c in classes]

    def in_window():
        return t0 <= time.monotonic() < t1

    async def web(i):
        async def conn():
            reader, writer = await asyncio.open_connection(host, MIX_BASE + i)
            while time.monotonic() < t1:
                writer.write(b"100000\n")
                await writer.drain()
                left = 100000
                while left:
                    data = await reader.read(left)
                    if not data:
                        return
                    left -= len(data)
                    if in_window():
                        results[i]["bytes"] += len(data)
            writer.close()
        await asyncio.gather(*(conn() for _ in range(6)))

    async def download(i):
        reader, writer = await asyncio.open_connection(host, MIX_BASE + i)
        while time.monotonic() < t1:
            data = await reader.read(1 << 16)
            if not data:
                break
            if in_window():
                results[i]["bytes"] += len(data)
        writer.close()

    async def ssh(i):
        reader, writer = await asyncio.open_connection(host, MIX_BASE + i)
        while time.monotonic() < t1:
            start = time.monotonic()
            writer.write(b"r" * 100)
            await writer.drain()
            await reader.readexactly(1000)
            took = time.monotonic() - start
            if in_window():
                results[i]["samples"].append(took * 1000)
                results[i]["bytes"] += 1000
            await asyncio.sleep(max(0.0, start + 0.1 - time.monotonic()))
        writer.close()

    def voip_blocking(i):
        # The kernel stamps each datagram as it reaches the socket (SO_TIMESTAMPNS): the
        # delay measured is the path's, not this process's wait for a CPU.
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        s.connect((host, MIX_BASE + i))
        s.send(str(t1 - time.monotonic() + 1).encode())
        seqs = set()
        while time.monotonic() < t1:
            s.settimeout(max(0.01, t1 - time.monotonic()))
            try:
                data, anc, _, _ = s.recvmsg(2048, 64)
            except socket.timeout:
                break
            arrived = time.time()
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", raw[:16])
                    arrived = sec + nsec / 1e9
            seq, sent = json.loads(data.decode())
            if in_window():
                seqs.add(seq)
                results[i]["samples"].append((arrived - sent) * 1000)
                results[i]["bytes"] += len(data)
        s.close()
        if seqs:
            results[i]["sent"] = max(seqs) - min(seqs) + 1
            results[i]["received"] = len(seqs)

    # A thread per VoIP application (the default executor has too few).
    threads = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, classes.count("voip")))

    async def voip(i):
        await asyncio.get_running_loop().run_in_executor(threads, voip_blocking, i)

    await asyncio.gather(*({"web": web, "download": download, "voip": voip, "ssh": ssh}[c](i)
                           for i, c in enumerate(classes) if c in kinds))
    print(json.dumps([r if r["class"] in kinds else None for r in results]), flush=True)


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


# Interactive applications may send a little at once: a VoIP datagram that comes
# early (sender jitter) or a whole SSH answer should not wait for the rate.
MIX_BURST = {"voip": {"burst_bytes": 1000}, "ssh": {"burst_bytes": 3000}}


def mix_targets(classes, budget_kbps=92_000):
    """Paced rate (kbit/s) of each application: VoIP and SSH what they need with
    room, the rest of the budget shared by web and download applications."""
    fixed = {"voip": 150, "ssh": 200}
    bulk = [c for c in classes if c not in fixed]
    rest = budget_kbps - sum(fixed[c] for c in classes if c in fixed)
    return [fixed.get(c, rest // max(1, len(bulk))) for c in classes]


def tbf_drops():
    out = sh(*inns(NAME, "r1", "tc", "-s", "qdisc", "show", "dev", "a"))
    return int(re.search(r"dropped (\d+)", out).group(1))


def exit_drops():
    """(lane queue, pacing queue) drops at the exit: `queue_full` counts both."""
    text = metrics_text(NAME, "ex")
    paced = metric_sum(text, "braid_app_drops_total")
    return int(metric_sum(text, 'braid_packets_dropped_total{reason="queue_full"}') - paced), int(paced)


def cpu_times():
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def lane_fill_sampler(stop, into):
    """Bytes waiting in the exit's lane queue (braid's and quinn's), every 0.2 s."""
    while not stop.wait(0.2):
        into.append(metric_sum(metrics_text(NAME, "ex"), "braid_lane_fill_bytes"))


def mix_run(classes, token, paced, budget_kbps=92_000, warmup=3, window=10):
    import threading
    targets = mix_targets(classes, budget_kbps)
    apps = [{"name": f"{c}{i}", "match": {"proto": "udp" if c == "voip" else "tcp",
                                            "remote_ports": str(MIX_BASE + i)},
             **({"rate_down_kbps": t, **MIX_BURST.get(c, {})} if paced else {})}
            for i, (c, t) in enumerate(zip(classes, targets))]
    status, body, _ = admin(NAME, "ex", "PUT", "/v1/sites/site1/pacing", token, json.dumps(table(apps)).encode())
    assert status == 200, body
    groups = [("web", "download"), ("voip", "ssh")]
    servers = [subprocess.Popen(inns(NAME, "sv", "python3", __file__, "_mix-server", ",".join(classes), ",".join(g)),
                                stdout=subprocess.PIPE, text=True) for g in groups]
    try:
        for server in servers:
            assert server.stdout.readline().strip() == "ready"
        drops0 = (tbf_drops(), *exit_drops())
        fills, stop = [], threading.Event()
        sampler = threading.Thread(target=lane_fill_sampler, args=(stop, fills))
        sampler.start()
        cpu0 = cpu_times()
        clients = [subprocess.Popen(inns(NAME, "cl", "python3", __file__, "_mix-client", SERVER, ",".join(classes),
                                         ",".join(g), str(warmup), str(window)), stdout=subprocess.PIPE, text=True)
                   for g in groups]
        outs = [json.loads(c.communicate()[0]) for c in clients]
        cpu1 = cpu_times()
        stop.set()
        sampler.join()
        drops1 = (tbf_drops(), *exit_drops())
    finally:
        for server in servers:
            server.kill()
            server.wait()
    # Each application was run by exactly one of the clients.
    apps_out = [a or b for a, b in zip(*outs)]
    row = {"paced": paced, "apps": len(classes), "bottleneck_drops": drops1[0] - drops0[0],
           "lane_queue_drops": drops1[1] - drops0[1], "pacing_queue_drops": drops1[2] - drops0[2],
           "lane_fill_mean_bytes": sum(fills) / len(fills) if fills else 0, "lane_fill_max_bytes": max(fills, default=0),
           "cpu_busy_pct": 100.0 * (cpu1[0] - cpu0[0]) / max(1, cpu1[1] - cpu0[1]),
           "classes": {}}
    for cls in MIX_CLASSES:
        members = [(a, t) for a, t in zip(apps_out, targets) if a["class"] == cls]
        if not members:
            continue
        rates = [a["bytes"] * 8 / window / 1e6 for a, _ in members]
        entry = {"apps": len(members), "mean_mbps": sum(rates) / len(rates), "min_mbps": min(rates),
                 "target_mbps": members[0][1] / 1000 if paced else None}
        samples = [x for a, _ in members for x in a["samples"]]
        if cls in ("voip", "ssh"):
            entry["p50_ms"], entry["p95_ms"] = percentile(samples, 50), percentile(samples, 95)
        if cls == "voip":
            sent = sum(a["sent"] for a, _ in members)
            entry["loss_pct"] = 100.0 * (1 - sum(a["received"] for a, _ in members) / sent) if sent else float("nan")
        row["classes"][cls] = entry
    return row


def mix(sizes, token, budget_kbps):
    idle = mix_run(["voip"], token, paced=False, warmup=1, window=5)
    idle_p50 = idle["classes"]["voip"]["p50_ms"]
    print(f"\nidle VoIP one-way delay: p50 {idle_p50:.2f} ms, p95 {idle['classes']['voip']['p95_ms']:.2f} ms")
    rows = []
    for n in sizes:
        classes = mix_classes(n)
        for paced in (False, True):
            r = mix_run(classes, token, paced, budget_kbps)
            rows.append(r)
            c = r["classes"]
            label = "paced" if paced else "best effort"
            print(f"{n} apps, {label}: dropped at the bottleneck (tbf) {r['bottleneck_drops']}, in braid's lane queue "
                  f"{r['lane_queue_drops']}, in pacing queues {r['pacing_queue_drops']}; lane queue mean "
                  f"{r['lane_fill_mean_bytes'] / 1000:.0f} KB, max {r['lane_fill_max_bytes'] / 1000:.0f} KB; "
                  f"CPU {r['cpu_busy_pct']:.0f} % busy")
            for cls in MIX_CLASSES:
                e = c[cls]
                target = f" (target {e['target_mbps']:.2f})" if e["target_mbps"] else ""
                extra = ""
                if cls == "voip":
                    extra = (f"; one-way delay p50 {e['p50_ms']:.2f} ms, p95 {e['p95_ms']:.2f} ms "
                             f"(p95 - idle p50 = {e['p95_ms'] - idle_p50:+.2f} ms), loss {e['loss_pct']:.2f} %")
                if cls == "ssh":
                    extra = f"; response p50 {e['p50_ms']:.2f} ms, p95 {e['p95_ms']:.2f} ms"
                print(f"  {cls:9} {e['apps']:3d} apps: mean {e['mean_mbps']:.2f} Mbit/s, min {e['min_mbps']:.2f}{target}{extra}",
                      flush=True)
    return {"idle": idle, "runs": rows}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_receive":
        return receive(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
    if len(sys.argv) > 1 and sys.argv[1] == "_send":
        return send(sys.argv[2], [int(r) for r in sys.argv[3].split(",")], float(sys.argv[4]), float(sys.argv[5]))
    if len(sys.argv) > 1 and sys.argv[1] == "_mix-server":
        import asyncio
        return asyncio.run(mix_server(sys.argv[2].split(","), sys.argv[3].split(",")))
    if len(sys.argv) > 1 and sys.argv[1] == "_mix-client":
        import asyncio
        return asyncio.run(mix_client(sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(","),
                                      float(sys.argv[5]), float(sys.argv[6])))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--braid", required=True)
    p.add_argument("--out", default="bench-out")
    p.add_argument("--apps", default="1,10,100,1000", help="accuracy: application counts ('' to skip)")
    p.add_argument("--mix", default="20,60", help="mix: application counts ('' to skip)")
    p.add_argument("--mix-budget", type=int, default=92_000, help="mix: kbit/s the paced applications share")
    p.add_argument("--gateway-nice", type=int, default=-10,
                   help="nice value of both gateways (0: as the traffic generators)")
    a = p.parse_args()
    braid = os.path.abspath(a.braid)
    os.makedirs(a.out, exist_ok=True)
    report = {}

    def on_testbed(rates, run):
        env = dict(os.environ, RATES=rates, BRAID=braid,
                   LINKEMU=os.path.join(os.path.dirname(braid), "braid-linkemu"))
        sh("bash", TESTBED, "up", NAME, env=env)
        try:
            sh("bash", TESTBED, "start", NAME, env=env)
            if a.gateway_nice:
                prioritise_gateways(NAME, a.gateway_nice)
            run(admin_token(NAME))
        finally:
            sh("bash", TESTBED, "down", NAME, env=env, check=False)

    def accuracy_part(token):
        report["accuracy"] = []
        print(f"{'apps':>5} {'target Mbit/s':>14} {'measured':>9} {'worst error':>12} {'mean |error|':>13} {'PUT s':>7}")
        for n in map(int, filter(None, a.apps.split(","))):
            r = accuracy(n, token)
            report["accuracy"].append(r)
            print(f"{n:5d} {r['total_target_mbps']:14.1f} {r['measured_mbps']:9.1f} {r['worst_error_pct']:+11.2f}% "
                  f"{r['mean_abs_error_pct']:12.2f}% {r['put_seconds']:7.3f}", flush=True)
        report["tcp"] = tcp_mix(token)
        for t in report["tcp"]:
            print(f"{t['app']} ({t['connections']} TCP connections): target {t['target_mbps']:.1f} Mbit/s, "
                  f"goodput {t['goodput_mbps']:.2f}, IP rate {t['ip_rate_mbps']:.2f} ({t['error_pct']:+.2f} %)")
        report["big_put"] = big_put(token)
        b = report["big_put"]
        print(f"PUT of {b['apps']} applications ({b['body_bytes']} bytes): answered after {b['put_seconds']:.3f} s",
              flush=True)

    def mix_part(token):
        report["mix"] = mix([int(n) for n in filter(None, a.mix.split(","))], token, a.mix_budget)

    if a.apps:
        on_testbed("0", accuracy_part)
    if a.mix:
        on_testbed("100", mix_part)
    for part in report:
        with open(os.path.join(a.out, f"pacing-{part}.json"), "w") as f:
            json.dump(report[part], f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
