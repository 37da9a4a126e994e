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

Rates: 1 application at 50 Mbit/s; 10 from 1 to 50 Mbit/s (geometric); 100 at
1 Mbit/s; 1,000 at 0.1 Mbit/s. (1,000 at 1 Mbit/s or more would be over 1 Gbit/s,
beyond what this 2-core machine carries through both gateways.)

Usage (root): integration/bench_pacing.py --braid target/release/braid [--out DIR]
"""
import argparse
import json
import os
import random
import resource
import selectors
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.join(HERE, "testbed.sh")
SERVER = "198.18.100.2"
NAME = "bpace"
IP_UDP_HEADERS = 28
DATAGRAM = 1400  # IP bytes of every datagram the sender sends
BASE_PORT = 20000
WARMUP, WINDOW = 2, 10


def sh(*args, env=None, check=True, input=None):
    r = subprocess.run(args, env=env, capture_output=True, text=True, input=input)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {r.stdout}{r.stderr}")
    return r.stdout


def inns(role, *args):
    return ["ip", "netns", "exec", f"{NAME}-{role}", *args]


def admin(role, method, path, token, body=b""):
    """One admin API request inside a gateway's namespace: (status, body, seconds)."""
    code = (
        "import sys,time,urllib.request as u\n"
        "r=u.Request('http://127.0.0.1:9190'+sys.argv[1],data=sys.stdin.buffer.read() or None,method=sys.argv[2])\n"
        "r.add_header('Authorization','Bearer '+sys.argv[3])\n"
        "t=time.monotonic()\n"
        "try:\n  s=u.urlopen(r);c=s.status;b=s.read()\n"
        "except u.HTTPError as e:\n  c=e.code;b=e.read()\n"
        "print(c,time.monotonic()-t);sys.stdout.flush();sys.stdout.buffer.write(b)\n"
    )
    r = subprocess.run(inns(role, "python3", "-c", code, path, method, token), input=body, capture_output=True)
    head, _, rest = r.stdout.partition(b"\n")
    status, secs = head.split()
    return int(status), rest.decode(), float(secs)


def table(apps, direction):
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
    status, body, secs = admin("en", "PUT", "/v1/sites/site1/pacing", token, json.dumps(table(apps, "up")).encode())
    assert status == 200, body
    rx = subprocess.Popen(inns("sv", "python3", __file__, "_receive", str(n), str(WARMUP), str(WINDOW)),
                          stdout=subprocess.PIPE, text=True)
    assert rx.stdout.readline().strip() == "ready"
    tx = subprocess.Popen(inns("cl", "python3", __file__, "_send", SERVER, ",".join(map(str, rates)),
                               str(WARMUP + WINDOW + 1), "1.25"))
    counts = json.loads(rx.stdout.readline())
    rx.wait()
    tx.wait()
    errors = [100.0 * (c * 8 / WINDOW / (r * 1000) - 1) for c, r in zip(counts, rates)]
    worst = max(errors, key=abs)
    return {"apps": n, "total_target_mbps": sum(rates) / 1000, "measured_mbps": sum(counts) * 8 / WINDOW / 1e6,
            "worst_error_pct": worst, "mean_abs_error_pct": sum(map(abs, errors)) / n, "put_seconds": secs,
            "errors_pct": errors}


def tcp_mix(token):
    apps = [{"name": "browser", "match": {"proto": "tcp", "remote_ports": "5201"}, "rate_down_kbps": 12000},
            {"name": "download", "match": {"proto": "tcp", "remote_ports": "5202"}, "rate_down_kbps": 6000}]
    status, body, _ = admin("ex", "PUT", "/v1/sites/site1/pacing", token, json.dumps(table(apps, "down")).encode())
    assert status == 200, body
    servers = [subprocess.Popen(inns("sv", "iperf3", "-s", "-1", "-p", str(p)), stdout=subprocess.DEVNULL)
               for p in (5201, 5202)]
    time.sleep(0.5)
    clients = [subprocess.Popen(inns("cl", "iperf3", "-c", SERVER, "-p", str(p), "-R", "-P", str(k), "-t", str(WINDOW),
                                     "-O", str(WARMUP), "-C", "cubic", "-J"), stdout=subprocess.PIPE, text=True)
               for p, k in ((5201, 6), (5202, 1))]
    results = []
    for (name, target_kbps, conns), c in zip((("browser", 12000, 6), ("download", 6000, 1)), clients):
        out = json.loads(c.communicate()[0])
        goodput = out["end"]["sum_received"]["bits_per_second"]
        # TCP goodput is the paced IP rate less 40 header bytes per 1430-byte packet.
        ip_rate = goodput * 1430 / 1390
        results.append({"app": name, "connections": conns, "target_mbps": target_kbps / 1000,
                        "goodput_mbps": goodput / 1e6, "ip_rate_mbps": ip_rate / 1e6,
                        "error_pct": 100.0 * (ip_rate / (target_kbps * 1000) - 1)})
    for s in servers:
        s.wait()
    return results


def big_put(token):
    apps = [{"name": f"app{i}", "match": {"proto": "udp", "remote_ports": str(30000 + i)}, "rate_up_kbps": 500}
            for i in range(10_000)]
    body = json.dumps(table(apps, "up")).encode()
    status, text, secs = admin("en", "PUT", "/v1/sites/site1/pacing", token, body)
    assert status == 200, text
    return {"apps": 10_000, "body_bytes": len(body), "put_seconds": secs}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_receive":
        return receive(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
    if len(sys.argv) > 1 and sys.argv[1] == "_send":
        return send(sys.argv[2], [int(r) for r in sys.argv[3].split(",")], float(sys.argv[4]), float(sys.argv[5]))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--braid", required=True)
    p.add_argument("--out", default="bench-out")
    p.add_argument("--apps", default="1,10,100,1000")
    a = p.parse_args()
    braid = os.path.abspath(a.braid)
    env = dict(os.environ, RATES="0", BRAID=braid, LINKEMU=os.path.join(os.path.dirname(braid), "braid-linkemu"))
    os.makedirs(a.out, exist_ok=True)
    sh("bash", TESTBED, "up", NAME, env=env)
    try:
        sh("bash", TESTBED, "start", NAME, env=env)
        with open(f"/tmp/braid-testbed/{NAME}/admin.token") as f:
            token = f.read().strip()
        report = {"accuracy": [], "tcp": None, "big_put": None}
        print(f"{'apps':>5} {'target Mbit/s':>14} {'measured':>9} {'worst error':>12} {'mean |error|':>13} {'PUT s':>7}")
        for n in map(int, a.apps.split(",")):
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
        print(f"PUT of {b['apps']} applications ({b['body_bytes']} bytes): answered after {b['put_seconds']:.3f} s")
        with open(os.path.join(a.out, "pacing.json"), "w") as f:
            json.dump(report, f, indent=1)
    finally:
        sh("bash", TESTBED, "down", NAME, env=env, check=False)


if __name__ == "__main__":
    sys.exit(main())
