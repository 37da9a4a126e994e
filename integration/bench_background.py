#!/usr/bin/env python3
"""Background applications: how much of the capacity a site's other traffic leaves a
`background` application takes, and what it costs that traffic, in braid's namespace
testbed.

Three uplinks of 16, 32 and 50 Mbit/s with one-way delays of 10, 20 and 30 ms (the
steady uplinks of bench_afmt.py), one site. All traffic is downloads (server to
client), which the exit paces. The application under test is a bulk TCP download
(CUBIC, port 5301 of the server: `remote_ports` at the exit) run in four modes,
one testbed (fresh gateways) each, side by side in one invocation; the mode's table
is put again, as a new version, before each scenario:

  background     the application's class is `background`: the exit sets its rate,
                 searching for the spare capacity (binary search, the default)
  background-sa  the same, searching by stochastic approximation
                 (`pacing.background_method`, BACKGROUND_METHOD of testbed.sh)
  unpaced        no table: the bulk download competes as any TCP flow
  fixed          a normal application paced at a fixed rate_down_kbps (--fixed-kbps)

Scenarios:

  capacity    once per invocation (in the first mode's testbed, before its table):
              four parallel unpaced TCP downloads; what they carry over the window is
              the capacity braid offers, the denominator of the utilisations below.
  foreground  three TCP downloads held by their sender to 15 Mbit/s each (iperf3
              -b 15M -P 3, port 5201), alone (A) and with the bulk download started
              beside them at once (B), each measured over the window after a
              warm-up. Reported: the foreground's Mbit/s in A and B and their ratio
              (B/A, target >= 0.97: the background does not hurt it), the bulk
              download's Mbit/s, and utilisation = (foreground + background in B) /
              capacity (target >= 0.95: it takes what is left). A is measured per
              mode, right before its B, so that both see the same testbed.
  onoff       a UDP download at 40 Mbit/s (port 5401) on for a quarter of
              --onoff-seconds, off for a quarter, twice, while the bulk download runs
              throughout (started 5 s before). Per second of iperf3's intervals:
              spare = capacity - UDP received, used = min(background, spare).
              Reported: spare used = sum(used) / sum(spare) (target >= 0.85: it
              follows the spare as it comes and goes), the background's Mbit/s
              while the UDP flow is on and off, and the UDP flow's loss while on (the
              harm it does the foreground).

During B and onoff the exit's `GET /v1/sites/site1/apps` is sampled once a second;
the JSON keeps the bulk application's `target_bps` (its searched rate, in the
background modes) and measured `rate_down_bps`, to see what the search did, and
beside them the exit's lanes' SRTT and queued bytes per uplink and, in builds that
have it, `braid_app_background_spare_bps` (the search's estimate of the spare).

Both gateways run at nice -10 (`--gateway-nice`): the traffic generators share this
machine's cores with them, where on a real network they are other hosts.

Usage (root): integration/bench_background.py --braid target/release/braid
              [--linkemu PATH] [--modes background,background-sa,unpaced,fixed]
              [--scenarios foreground,onoff] [--seconds 20] [--warmup 5]
              [--onoff-seconds 40] [--fixed-kbps 30000] [--interval-ms N] [--out DIR]

--seconds is the measured window of capacity and foreground, --interval-ms the
gateways' `pacing.background_interval_ms` (their default unless given). The printed
tables and DIR/background.json (every per-second series) are the output.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time

from benchlib import admin, admin_token, inns, metric_sum, metrics_text, prioritise_gateways, sh, write_report

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.join(HERE, "testbed.sh")
SERVER = "198.18.100.2"
NAME = "bbg"
RATES = [16, 32, 50]
DELAYS = [10, 20, 30]
MODES = ["background", "background-sa", "unpaced", "fixed"]
SCENARIOS = ["foreground", "onoff"]
FG_PORT, BG_PORT, UDP_PORT = 5201, 5301, 5401
FG_FLOWS, FG_MBPS = 3, 15
CAPACITY_FLOWS = 4
UDP_MBPS = 40
UDP_LENGTH = 1200  # payload bytes of the UDP flow's datagrams: well within the tunnel's MTU
ONOFF_LEAD = 5  # seconds the bulk download runs before the UDP flow first comes on
TARGETS = {"ratio": 0.97, "utilisation": 0.95, "spare_used": 0.85}


def testbed_env(mode, braid, linkemu, interval_ms):
    env = dict(os.environ, RATES=" ".join(map(str, RATES)), DELAYS=" ".join(map(str, DELAYS)),
               BRAID=braid, LINKEMU=linkemu)
    env.pop("BACKGROUND_METHOD", None)
    if mode == "background-sa":
        env["BACKGROUND_METHOD"] = "stochastic-approximation"
    if interval_ms:
        env["BACKGROUND_INTERVAL_MS"] = str(interval_ms)
    return env


def bulk_table(mode, fixed_kbps):
    """The exit's application table of a mode (None: no table)."""
    app = {"name": "bulk", "match": {"proto": "tcp", "remote_ports": str(BG_PORT)}}
    if mode in ("background", "background-sa"):
        app["class"] = "background"
    elif mode == "fixed":
        app["rate_down_kbps"] = fixed_kbps
    else:
        return None
    return {"version": int(time.time() * 1000), "apps": [app]}


def put_table(mode, token, fixed_kbps):
    """Puts the mode's table (a new version) to the exit, if it has one."""
    table = bulk_table(mode, fixed_kbps)
    if table:
        status, body, _ = admin(NAME, "ex", "PUT", "/v1/sites/site1/pacing", token, json.dumps(table).encode())
        if status != 200:
            raise RuntimeError(f"{mode}: the exit refused the table ({status}): {body}")


def server(port):
    """An iperf3 server in the server's namespace for one test on `port`."""
    return subprocess.Popen(inns(NAME, "sv", "iperf3", "-s", "-1", "-p", str(port)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def download(port, seconds, *args):
    """Starts an iperf3 download (server to client, -R) from `port` of the server."""
    return subprocess.Popen(inns(NAME, "cl", "iperf3", "-c", SERVER, "-p", str(port), "-R", "-t", str(seconds),
                                 "-i", "1", "-J", *args), stdout=subprocess.PIPE, text=True)


def result(proc):
    """The JSON report of a finished iperf3 client; its error raises."""
    out, _ = proc.communicate()
    report = json.loads(out) if out.strip() else {"error": "no output"}
    if "error" in report:
        raise RuntimeError(f"iperf3: {report['error']}")
    return report


def per_second(report):
    """Mbit/s the client received in each of its 1-s intervals."""
    return [i["sum"]["bits_per_second"] / 1e6 for i in report["intervals"]]


def window_mean(series, warmup, window):
    part = series[warmup:warmup + window]
    return sum(part) / len(part) if part else float("nan")


def lane_state(text):
    """From the exit's /metrics: per uplink, its blue lane's SRTT (ms) and the bytes
    waiting in its queue; and the bulk application's estimated spare (bit/s;
    `braid_app_background_spare_bps`, None in a build without it)."""
    def lane(family, i):
        return metric_sum(text, f'braid_{family}{{colour="blue",site="site1",uplink="up{i}"}}')
    spare = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
             if line.startswith("braid_app_background_spare_bps{") and 'app="bulk"' in line]
    return {"srtt_ms": [round(1000 * lane("lane_srtt_seconds", i), 2) for i in range(1, len(RATES) + 1)],
            "fill_bytes": [lane("lane_fill_bytes", i) for i in range(1, len(RATES) + 1)],
            "spare_bps": spare[0] if spare else None}


def sample_apps(token, stop, t0, into):
    """Once a second until `stop`: the exit's report of site1's applications and its
    lanes, as [seconds since t0, {app: {target_bps, rate_down_bps, queue_bytes,
    drops}}, lane_state]."""
    while not stop.wait(1):
        status, body, _ = admin(NAME, "ex", "GET", "/v1/sites/site1/apps", token)
        apps = {}
        if status == 200:
            apps = {a["name"]: {k: a.get(k) for k in ("target_bps", "rate_down_bps", "queue_bytes", "drops", "background_spare_bps", "background_queue_ms")}
                    for a in json.loads(body).get("apps", [])}
        into.append([round(time.monotonic() - t0, 2), apps, lane_state(metrics_text(NAME, "ex"))])


def bulk_series(samples, key):
    """The bulk application's `key` (Mbit/s) per sample; None where it has none."""
    return [(t, apps["bulk"][key] / 1e6 if "bulk" in apps else None) for t, apps, _ in samples]


def capacity(warmup, window):
    """Mbit/s CAPACITY_FLOWS parallel unpaced TCP downloads carry over the window."""
    s = server(FG_PORT)
    time.sleep(0.5)
    report = result(download(FG_PORT, warmup + window, "-P", str(CAPACITY_FLOWS), "-C", "cubic"))
    s.wait()
    series = per_second(report)
    return {"mbps": window_mean(series, warmup, window), "per_second": series}


def foreground(token, warmup, window):
    """Phase A (the foreground alone) and B (beside the bulk download)."""
    fg_args = ("-P", str(FG_FLOWS), "-b", f"{FG_MBPS}M", "-C", "cubic")
    s = server(FG_PORT)
    time.sleep(0.5)
    alone = per_second(result(download(FG_PORT, warmup + window, *fg_args)))
    s.wait()
    time.sleep(2)
    servers = [server(FG_PORT), server(BG_PORT)]
    time.sleep(0.5)
    samples, stop = [], threading.Event()
    t0 = time.monotonic()
    fg = download(FG_PORT, warmup + window, *fg_args)
    bg = download(BG_PORT, warmup + window, "-C", "cubic")
    sampler = threading.Thread(target=sample_apps, args=(token, stop, t0, samples))
    sampler.start()
    try:
        beside, bulk = per_second(result(fg)), per_second(result(bg))
    finally:
        stop.set()
        sampler.join()
    for p in servers:
        p.wait()
    return {"alone_per_second": alone, "beside_per_second": beside, "background_per_second": bulk,
            "alone_mbps": window_mean(alone, warmup, window), "beside_mbps": window_mean(beside, warmup, window),
            "background_mbps": window_mean(bulk, warmup, window),
            "target_mbps": bulk_series(samples, "target_bps"), "bulk_rate_mbps": bulk_series(samples, "rate_down_bps"),
            "apps_samples": samples}


def onoff(token, seconds):
    """The bulk download throughout, a UDP download on and off twice beside it."""
    period = seconds // 4
    total = ONOFF_LEAD + 4 * period
    servers = [server(BG_PORT)]
    time.sleep(0.5)
    samples, stop = [], threading.Event()
    t0 = time.monotonic()
    bg = download(BG_PORT, total + 1, "-C", "cubic")
    sampler = threading.Thread(target=sample_apps, args=(token, stop, t0, samples))
    sampler.start()
    udp = []
    try:
        for k in range(2):
            on_at = ONOFF_LEAD + 2 * k * period
            time.sleep(max(0.0, t0 + on_at - 0.5 - time.monotonic()))
            servers.append(server(UDP_PORT))
            time.sleep(max(0.0, t0 + on_at - time.monotonic()))
            launched = time.monotonic() - t0
            report = result(download(UDP_PORT, period, "-u", "-b", f"{UDP_MBPS}M", "-l", str(UDP_LENGTH)))
            udp.append({"offset_s": launched, "intervals": [
                {k2: i["sum"].get(k2) for k2 in ("start", "end", "bits_per_second", "lost_packets", "packets")}
                for i in report["intervals"]]})
        bulk = per_second(result(bg))
    finally:
        stop.set()
        sampler.join()
    for p in servers:
        p.wait()
    return {"period_s": period, "lead_s": ONOFF_LEAD, "background_per_second": bulk, "udp": udp,
            "target_mbps": bulk_series(samples, "target_bps"), "bulk_rate_mbps": bulk_series(samples, "rate_down_bps"),
            "apps_samples": samples}


def onoff_summary(r, capacity_mbps):
    """Spare used, the background's rate on and off, the UDP flow's loss while on."""
    period, lead, bulk = r["period_s"], r["lead_s"], r["background_per_second"]
    udp_rate = [0.0] * (lead + 4 * period)
    on = [False] * len(udp_rate)
    lost = packets = 0
    for run in r["udp"]:
        shift = round(run["offset_s"])
        for i, interval in enumerate(run["intervals"]):
            j = shift + i
            if j < len(udp_rate):
                udp_rate[j] = interval["bits_per_second"] / 1e6
                on[j] = True
            lost += interval["lost_packets"] or 0
            packets += interval["packets"] or 0
    spare = used = 0.0
    rows = []
    for j in range(lead, lead + 4 * period):
        s = max(0.0, capacity_mbps - udp_rate[j])
        b = bulk[j] if j < len(bulk) else 0.0
        spare += s
        used += min(b, s)
        rows.append({"second": j, "udp_mbps": udp_rate[j], "spare_mbps": s, "background_mbps": b, "on": on[j]})
    on_rates = [x["background_mbps"] for x in rows if x["on"]]
    off_rates = [x["background_mbps"] for x in rows if not x["on"]]
    return {"spare_used": used / spare if spare else float("nan"),
            "background_on_mbps": statistics.mean(on_rates) if on_rates else float("nan"),
            "background_off_mbps": statistics.mean(off_rates) if off_rates else float("nan"),
            "udp_on_mbps": statistics.mean([x["udp_mbps"] for x in rows if x["on"]] or [float("nan")]),
            "udp_loss_pct": 100.0 * lost / packets if packets else float("nan"), "seconds": rows}


def run_mode(mode, a, braid, linkemu, report):
    env = testbed_env(mode, braid, linkemu, a.interval_ms)
    sh("bash", TESTBED, "up", NAME, env=env)
    try:
        sh("bash", TESTBED, "start", NAME, env=env)
        if a.gateway_nice:
            prioritise_gateways(NAME, a.gateway_nice)
        token = admin_token(NAME)
        time.sleep(1)
        if report.get("capacity") is None:
            print(f"capacity ({CAPACITY_FLOWS} unpaced downloads) ...", flush=True)
            report["capacity"] = capacity(a.warmup, a.seconds)
            time.sleep(2)
        row = {"mode": mode, "table": bulk_table(mode, a.fixed_kbps)}
        for scenario in a.scenarios:
            print(f"{mode}: {scenario} ...", flush=True)
            put_table(mode, token, a.fixed_kbps)
            if scenario == "foreground":
                row["foreground"] = foreground(token, a.warmup, a.seconds)
            else:
                row["onoff"] = onoff(token, a.onoff_seconds)
            time.sleep(2)
        return row
    finally:
        sh("bash", TESTBED, "down", NAME, env=env, check=False)


def median_target(series, start, end):
    """The median of a target series' samples taken in [start, end) seconds."""
    values = [v for t, v in series if start <= t < end and v is not None]
    return statistics.median(values) if values else None


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def print_report(report, a):
    cap = report["capacity"]["mbps"]
    print(f"\n== capacity: uplinks {RATES} Mbit/s, one-way delays {DELAYS} ms: {CAPACITY_FLOWS} unpaced TCP "
          f"downloads carry {cap:.1f} Mbit/s (mean of {a.seconds} s after {a.warmup} s)")
    rows = [r for r in report["modes"] if "foreground" in r]
    if rows:
        print(f"\n== foreground: {FG_FLOWS} TCP downloads at {FG_MBPS} Mbit/s each, alone (A) and beside a bulk "
              f"download (B); {a.seconds} s after {a.warmup} s")
        print(f"{'mode':14} {'fg A':>7} {'fg B':>7} {'B/A (>=' + str(TARGETS['ratio']) + ')':>14} {'bg':>7} "
              f"{'util (>=' + str(TARGETS['utilisation']) + ')':>14} {'bg target (median)':>19}   Mbit/s")
        for r in rows:
            f = r["foreground"]
            ratio = f["beside_mbps"] / f["alone_mbps"] if f["alone_mbps"] else float("nan")
            util = (f["beside_mbps"] + f["background_mbps"]) / cap if cap else float("nan")
            f["ratio"], f["utilisation"] = ratio, util
            target = median_target(f["target_mbps"], a.warmup, a.warmup + a.seconds)
            print(f"{r['mode']:14} {f['alone_mbps']:7.1f} {f['beside_mbps']:7.1f} {ratio:14.3f} "
                  f"{f['background_mbps']:7.1f} {util:14.3f} {fmt(target, '19.1f')}")
    rows = [r for r in report["modes"] if "onoff" in r]
    if rows:
        period = rows[0]["onoff"]["period_s"]
        print(f"\n== onoff: UDP download at {UDP_MBPS} Mbit/s, on {period} s / off {period} s twice, beside a bulk "
              f"download (from {ONOFF_LEAD} s before); spare = capacity - UDP")
        print(f"{'mode':14} {'spare used (>=' + str(TARGETS['spare_used']) + ')':>20} {'bg on':>7} {'bg off':>7} "
              f"{'UDP on':>7} {'UDP loss on %':>14} {'bg target on/off (median)':>26}   Mbit/s")
        for r in rows:
            o = r["onoff"]
            s = onoff_summary(o, cap)
            o["summary"] = s
            lead = o["lead_s"]
            on_t = [median_target(o["target_mbps"], lead + k * period + 1, lead + (k + 1) * period)
                    for k in range(4)]
            on_med = [v for v in on_t[0::2] if v is not None]
            off_med = [v for v in on_t[1::2] if v is not None]
            target = (f"{statistics.mean(on_med):.1f} / {statistics.mean(off_med):.1f}"
                      if on_med and off_med else "-")
            print(f"{r['mode']:14} {s['spare_used']:20.3f} {s['background_on_mbps']:7.1f} "
                  f"{s['background_off_mbps']:7.1f} {s['udp_on_mbps']:7.1f} {s['udp_loss_pct']:14.2f} {target:>26}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--braid", required=True)
    p.add_argument("--linkemu")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--seconds", type=int, default=20, help="measured window of capacity and foreground")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--onoff-seconds", type=int, default=40, help="two on/off cycles, a quarter each")
    p.add_argument("--fixed-kbps", type=int, default=30000)
    p.add_argument("--interval-ms", type=int, help="the gateways' pacing.background_interval_ms")
    p.add_argument("--gateway-nice", type=int, default=-10,
                   help="nice value of both gateways (0: as the traffic generators)")
    p.add_argument("--out", help="where background.json goes (default: a new temporary directory)")
    a = p.parse_args()
    a.modes = a.modes.split(",")
    a.scenarios = a.scenarios.split(",")
    for mode in a.modes:
        if mode not in MODES:
            raise SystemExit(f"unknown mode {mode!r}: {', '.join(MODES)}")
    for scenario in a.scenarios:
        if scenario not in SCENARIOS:
            raise SystemExit(f"unknown scenario {scenario!r}: {', '.join(SCENARIOS)} (capacity always runs)")
    if a.onoff_seconds < 4:
        raise SystemExit("--onoff-seconds must be at least 4 (two cycles of on and off)")
    braid = os.path.abspath(a.braid)
    linkemu = os.path.abspath(a.linkemu or os.path.join(os.path.dirname(braid), "braid-linkemu"))
    out = a.out or tempfile.mkdtemp(prefix="bench-background-")
    os.makedirs(out, exist_ok=True)
    report = {"rates": RATES, "delays": DELAYS, "warmup_s": a.warmup, "window_s": a.seconds,
              "onoff_s": a.onoff_seconds, "fixed_kbps": a.fixed_kbps, "interval_ms": a.interval_ms,
              "targets": TARGETS, "capacity": None, "modes": []}
    for mode in a.modes:
        report["modes"].append(run_mode(mode, a, braid, linkemu, report))
    print_report(report, a)
    write_report(out, "background.json", report)


if __name__ == "__main__":
    main()
