#!/usr/bin/env python3
"""Failover: how long flows stop when the path behind an uplink dies, and how soon a
path that returns is used again, in braid's namespace testbed.

Three uplinks of 20 Mbit/s with one-way delays of 5, 10 and 15 ms (round trips of
10 to 30 ms). A VoIP-like UDP flow runs both ways (200-byte datagrams, 50 per second,
one-way delay and loss measured by integration/probe.py), alone for two seconds, then
beside a TCP download (CUBIC). Three seconds into the download the path behind the
uplink that carries the VoIP flow dies: its router drops everything it would forward,
both ways, silently (neither gateway's interface goes down). After HOLD seconds the
path returns.

Reported per run: the longest gap between VoIP datagrams arriving in time to be
played (within PLAYOUT_MS of being sent, each way) and the datagrams lost or late
from a second before the cut until the path returns (and, apart, in the two seconds
after), the download's goodput in the 100 ms intervals after the cut (as a
share of its mean over the second before the cut; the intervals are iperf3's, aligned
to the cut within about 10 ms), the time until the returning path carried packets again,
the VoIP datagrams that arrived twice (a loss repair's copy and its original),
and the lanes each gateway took out of service (`braid_lane_stalls_total`; in the steady
variants below, with the log line that says why each one was, and the probes each
gateway's lanes sent per second, `braid_lane_probes_total{direction="sent"}`).

Two variants with backup tiers, `backup-warm` and `backup-cold`: uplinks 1 and 2 are
primaries, uplink 3 a backup (`priority = 2`, warm or cold standby, `tiers.hold_ms`
3000); the paths behind both primaries die at once, and the figures are the same as
the cut's, with the inner bytes the backup carried while the primaries were up and
how long after they returned the backup stood by again (warm) or was hung up (cold).

A further variant, `lossy`, cuts nothing: every uplink loses 5 % of its packets each
way, and every lane taken out of service is a false failover; `jittery` is the same
with up to 20 ms of extra one-way delay (uniform, never reordering) instead of loss,
as a cellular uplink has. A fourth, `idle`,
carries no traffic: what the lanes' keep-alives and acknowledgements cost, counted on
the first uplink's router for 10 s.

Usage (root): integration/bench_failover.py --braid target/release/braid
              [--runs afmt,afmt-flowlet,round-robin]
              [--variants cut,backup-warm,backup-cold,lossy,jittery,idle]
              [--hold 1,5]

A run names the scheduler; RUN@BINARY uses that braid binary instead of --braid's, so
that two builds are measured side by side in one invocation. RUN+dup gives both
gateways an application table that duplicates the VoIP flow (`duplicate`, within a
`duplicate_kbps` of 500): each of its datagrams also goes over a second uplink. --hold lists how long
the path stays dead, one cut per value (below QUIC's idle timeout of 3 s the lanes
survive; above it they reconnect).
"""
import argparse
import json
import os
import re
import subprocess
import tempfile
import time

from benchlib import inns, metrics_text, sh

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.join(HERE, "testbed.sh")
PROBE = os.path.join(HERE, "probe.py")
SERVER = "198.18.100.2"
CLIENT = "198.18.1.2"
RATES = [20, 20, 20]
DELAYS = [5, 10, 15]
VOIP = {"size": 200, "kbps": 80}  # 50 datagrams per second
VOIP_PORTS = {"down": 6001, "up": 6002}
# A VoIP datagram that takes longer than this one way is too late to be played
# (ITU-T G.114's bound for one-way delay): to the call it is lost, whenever it comes.
PLAYOUT_MS = 150
ALONE_SECONDS = 2
BEFORE_CUT_SECONDS = 3
AFTER_RETURN_SECONDS = 3
LOSSY_SECONDS = 20
JITTER_MS = 20
# The variants that cut nothing and count false failovers: what each does to every uplink.
STEADY = {"lossy": ("LOSS", "5"), "jittery": ("JITTER", str(JITTER_MS))}
# Backup tiers: uplink 3 stands by for 1 and 2 (warm or cold), traffic returns 3 s
# after they do.
BACKUP = {"backup-warm": "warm", "backup-cold": "cold"}
CUTS = ("cut", *BACKUP)
NAME = "bfail"


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def lane_counts(text, metric):
    """{uplink: value} of a lane metric summed over colours."""
    out = {}
    for m in re.finditer(rf'^braid_{metric}\{{[^}}]*uplink="([^"]+)"[^}}]*\}} (\S+)$', text, re.M):
        out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def probes_sent(text):
    """Probes the gateway's lanes sent (`braid_lane_probes_total{direction="sent"}`)."""
    return sum(float(m.group(1)) for m in re.finditer(
        r'^braid_lane_probes_total\{[^}]*direction="sent"[^}]*\} (\S+)$', text, re.M))


def cut(router, dead):
    """Drops (`dead`) or lets through again everything router `router` forwards."""
    if dead:
        sh(*inns(NAME, router, "nft", "add", "table", "inet", "cut"))
        sh(*inns(NAME, router, "nft", "add", "chain", "inet", "cut", "forward",
                 "{ type filter hook forward priority 0; policy drop; }"))
    else:
        sh(*inns(NAME, router, "nft", "delete", "table", "inet", "cut"))


def voip(tmp, seconds):
    """Starts the VoIP flow both ways; returns its processes."""
    procs = []
    for direction, port in VOIP_PORTS.items():
        receiver = "cl" if direction == "down" else "sv"
        procs.append(subprocess.Popen(inns(NAME, receiver, "python3", PROBE, "recv", str(port), "--seconds",
                                           str(seconds + 2), "--out", f"{tmp}/{direction}.json")))
    time.sleep(0.3)
    for direction, port in VOIP_PORTS.items():
        sender, target = ("sv", CLIENT) if direction == "down" else ("cl", SERVER)
        procs.append(subprocess.Popen(inns(NAME, sender, "python3", PROBE, "send", target, str(port), "--kbps",
                                           str(VOIP["kbps"]), "--size", str(VOIP["size"]), "--seconds",
                                           str(seconds))))
    return procs


def gaps(data, start_ns, end_ns):
    """The longest gap between arrivals in time to be played (ms), the datagrams
    lost or too late among those sent in [start_ns, end_ns), and how many were sent."""
    samples = [s for s in data["samples"] if start_ns <= s[1] < end_ns]
    if not samples:
        return float("nan"), float("nan"), 0
    playable = [s for s in samples if s[2] <= PLAYOUT_MS * 1e6]
    arrivals = sorted(s[1] + s[2] for s in playable)
    longest = max((b - a for a, b in zip(arrivals, arrivals[1:])), default=0) / 1e6
    seqs = [s[0] for s in samples]
    # A datagram sent again when its lane was given up may arrive twice.
    sent = max(seqs) - min(seqs) + 1
    lost = sent - len({s[0] for s in playable})
    return longest, lost, sent


def duplicates(data):
    """VoIP datagrams that arrived more than once: the receiving gateway should pass
    each once, also when loss repair sent it again and the original arrived too."""
    seqs = [s[0] for s in data["samples"]]
    return len(seqs) - len(set(seqs))


def idle_cost(label):
    """Packets and bits per second the idle first uplink carries, both ways."""
    def counters():
        text = sh(*inns(NAME, "r1", "cat", "/proc/net/dev"))
        # The router's side towards the entry: the interface that is not lo.
        line = next(l for l in text.splitlines()[2:] if not l.strip().startswith("lo:"))
        f = line.split(":", 1)[1].split()
        return int(f[1]) + int(f[9]), int(f[0]) + int(f[8])  # packets, bytes
    time.sleep(2)
    (p0, b0), start = counters(), time.monotonic()
    time.sleep(10)
    (p1, b1), seconds = counters(), time.monotonic() - start
    return {"run": label, "variant": "idle", "packets_per_s": (p1 - p0) / seconds,
            "kbps": (b1 - b0) * 8 / seconds / 1000}


def stall_log():
    """The gateways' log lines of every lane taken out of service: why each one was."""
    state = os.path.join(os.environ.get("STATE_DIR", "/tmp/braid-testbed"), NAME)
    lines = []
    for gateway, log in (("en", "site1.log"), ("ex", "exit.log")):
        with open(os.path.join(state, log), errors="replace") as f:
            lines += [f"{gateway}: {l.strip()}" for l in f if "lane out of service" in l]
    return lines


# Both directions of the VoIP flow as `duplicate` applications: the site's side is
# the client's port downwards, the server's upwards.
DUPLICATE_TABLE = {"version": 1, "duplicate_kbps": 500, "apps": [
    {"name": "voip-down", "match": {"proto": "udp", "local_ports": VOIP_PORTS["down"]}, "duplicate": True},
    {"name": "voip-up", "match": {"proto": "udp", "remote_ports": VOIP_PORTS["up"]}, "duplicate": True}]}


def duplicate_voip(braid):
    """Puts DUPLICATE_TABLE to both gateways."""
    state = os.path.join(os.environ.get("STATE_DIR", "/tmp/braid-testbed"), NAME)
    path = os.path.join(state, "duplicate.json")
    with open(path, "w") as f:
        json.dump(DUPLICATE_TABLE, f)
    for role in ("en", "ex"):
        sh(*inns(NAME, role, braid, "pacing", "put", path, "--site", "site1",
                 "--token-file", os.path.join(state, "admin.token")))


def duplicate_bytes():
    """Bytes of the VoIP flow's copies the gateways sent."""
    return sum(float(m.group(1)) for role in ("en", "ex") for m in re.finditer(
        r'^braid_app_duplicate_bytes_total\{[^}]*\} (\S+)$', metrics_text(NAME, role), re.M))


def run_one(variant, label, hold, braid, linkemu):
    algorithm, _, binary = label.partition("@")
    algorithm, _, option = algorithm.partition("+")
    braid = os.path.abspath(binary) if binary else braid
    env = dict(os.environ, RATES=" ".join(map(str, RATES)), DELAYS=" ".join(map(str, DELAYS)),
               SCHEDULER=algorithm, BRAID=braid, LINKEMU=linkemu)
    if variant in STEADY:
        knob, value = STEADY[variant]
        env[knob] = " ".join(value for _ in RATES)
    if variant in BACKUP:
        env.update(PRIORITIES="1 1 2", STANDBY=f"warm warm {BACKUP[variant]}", TIERS_HOLD_MS="3000")
    sh("bash", TESTBED, "up", NAME, env=env)
    try:
        sh("bash", TESTBED, "start", NAME, env=env)
        if option == "dup":
            duplicate_voip(braid)
        if variant == "idle":
            return idle_cost(label)
        download_seconds = (LOSSY_SECONDS if variant in STEADY
                            else BEFORE_CUT_SECONDS + hold + AFTER_RETURN_SECONDS)
        total = ALONE_SECONDS + download_seconds + 1
        server = subprocess.Popen(inns(NAME, "sv", "iperf3", "-s", "-1"), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        with tempfile.TemporaryDirectory() as tmp:
            procs = voip(tmp, total)
            time.sleep(ALONE_SECONDS - 1)
            before = lane_counts(metrics_text(NAME, "ex"), "lane_tx_packets_total")
            time.sleep(1)
            after = lane_counts(metrics_text(NAME, "ex"), "lane_tx_packets_total")
            voip_uplink = max(after, key=lambda u: after[u] - before.get(u, 0))
            inner_before = lane_counts(metrics_text(NAME, "ex"), "lane_tx_bytes_total")
            stalls_before = {role: lane_counts(metrics_text(NAME, role), "lane_stalls_total") for role in ("en", "ex")}
            probes_before = {role: probes_sent(metrics_text(NAME, role)) for role in ("en", "ex")}
            probes_since = time.monotonic()
            iperf_started = now_ns()
            download = subprocess.Popen(inns(NAME, "cl", "iperf3", "-c", SERVER, "-R", "-t", str(download_seconds),
                                             "-C", "cubic", "-i", "0.1", "-J"), stdout=subprocess.PIPE, text=True)
            row = {"run": label, "variant": variant, "hold_s": hold, "voip_uplink": voip_uplink}
            if variant in CUTS:
                time.sleep(BEFORE_CUT_SECONDS - 0.5)
                bytes_before = lane_counts(metrics_text(NAME, "ex"), "lane_tx_bytes_total")
                time.sleep(0.5)
                bytes_after = lane_counts(metrics_text(NAME, "ex"), "lane_tx_bytes_total")
                total_bytes = sum(bytes_after.values()) - sum(bytes_before.values())
                row["cut_share"] = ((bytes_after[voip_uplink] - bytes_before.get(voip_uplink, 0)) / total_bytes
                                    if total_bytes else 0.0)
                if variant in BACKUP:
                    inner = lane_counts(metrics_text(NAME, "ex"), "lane_tx_bytes_total")
                    row["backup_bytes_before"] = inner.get("up3", 0) - inner_before.get("up3", 0)
                    routers = ["r1", "r2"]
                    # Back on the primaries: the backup stands by (warm) or has no lane
                    # up (cold: hung up after the hold and a 2 s linger).
                    back = (rf'^braid_uplink_standby\{{[^}}]*uplink="up3"[^}}]*\}} 1$' if BACKUP[variant] == "warm"
                            else rf'^braid_uplink_up\{{[^}}]*uplink="up3"[^}}]*\}} 0$')
                else:
                    routers = ["r" + voip_uplink.removeprefix("up")]
                    back = rf'^braid_uplink_up\{{[^}}]*uplink="{voip_uplink}"[^}}]*\}} 1$'
                for router in routers:
                    cut(router, True)
                cut_at = now_ns()
                time.sleep(hold)
                for router in routers:
                    cut(router, False)
                returned_at = now_ns()
                row["return_s"] = float("nan")
                while now_ns() - returned_at < 15e9:
                    if re.search(back, metrics_text(NAME, "en"), re.M):
                        row["return_s"] = (now_ns() - returned_at) / 1e9
                        break
                    time.sleep(0.05)
            out, _ = download.communicate()
            for p in procs:
                p.wait()
            report = json.loads(out)
            voip_data = {}
            for direction in VOIP_PORTS:
                with open(f"{tmp}/{direction}.json") as f:
                    voip_data[direction] = json.load(f)
        server.kill()
        stalls = {role: sum(lane_counts(metrics_text(NAME, role), "lane_stalls_total").values())
                  - sum(stalls_before[role].values()) for role in ("en", "ex")}
        row["stalls"] = stalls
        row["probes_per_s"] = {role: (probes_sent(metrics_text(NAME, role)) - probes_before[role])
                               / (time.monotonic() - probes_since) for role in ("en", "ex")}
        row["stall_log"] = stall_log()
        intervals = [(i["sum"]["start"], i["sum"]["end"], i["sum"]["bits_per_second"] / 1e6)
                     for i in report["intervals"]]
        row["duplicates"] = {d: duplicates(voip_data[d]) for d in VOIP_PORTS}
        if variant in CUTS:
            cut_s = (cut_at - iperf_started) / 1e9
            row["voip"] = {d: gaps(voip_data[d], cut_at - 1_000_000_000, returned_at) for d in VOIP_PORTS}
            row["voip_return"] = {d: gaps(voip_data[d], returned_at, returned_at + 2_000_000_000)
                                  for d in VOIP_PORTS}
            pre = [mbps for start, end, mbps in intervals if cut_s - 1 <= start and end <= cut_s]
            pre_mean = sum(pre) / len(pre) if pre else float("nan")
            post = [mbps for start, end, mbps in intervals if start >= cut_s - 0.05][:5]
            row["pre_cut_mbps"] = pre_mean
            row["after_cut_share"] = [mbps / pre_mean for mbps in post]
        else:
            row["voip"] = {d: gaps(voip_data[d], 0, 2**63) for d in VOIP_PORTS}
            row["goodput_mbps"] = report["end"]["sum_received"]["bits_per_second"] / 1e6
        row["duplicate_kbps"] = duplicate_bytes() * 8 / 1000 / total
        return row
    finally:
        sh("bash", TESTBED, "down", NAME, env=env)


def cut_cells(r):
    """A cut's VoIP gaps and losses each way, and the download's goodput after it."""
    v = r["voip"]
    shares = " ".join(f"{s:.2f}" for s in r["after_cut_share"])
    return (f"{v['down'][0]:9.0f} / {v['up'][0]:<8.0f} {v['down'][1]:5.0f} / {v['up'][1]:<4.0f} "
            f"{shares:>40}")


def report_backup(rows):
    backups = [r for r in rows if r["variant"] in BACKUP]
    if backups:
        print(f"\n== backup tiers: uplinks {RATES} Mbit/s, one-way delays {DELAYS} ms, uplink 3 the backup "
              f"of 1 and 2; both primaries' paths die beside a TCP download and a VoIP flow")
        print(f"{'run':34} {'standby':>7} {'hold s':>6} {'backup bytes before':>19} {'VoIP gap down/up ms':>20} "
              f"{'lost down/up':>12} {'TCP goodput per 100 ms after the cut (share of before)':>40} "
              f"{'back on primaries s':>19}")
        for r in backups:
            print(f"{r['run']:34} {BACKUP[r['variant']]:>7} {r['hold_s']:6.1f} {r['backup_bytes_before']:19.0f} "
                  f"{cut_cells(r)} {r['return_s']:19.2f}")


def report(rows):
    cuts = [r for r in rows if r["variant"] == "cut"]
    if cuts:
        print(f"\n== cut: uplinks {RATES} Mbit/s, one-way delays {DELAYS} ms; the path behind the uplink of a "
              f"50 packets/s VoIP flow dies beside a TCP download")
        print(f"{'run':34} {'hold s':>6} {'uplink':>6} {'share':>6} {'VoIP gap down/up ms':>20} "
              f"{'lost down/up':>12} {'TCP goodput per 100 ms after the cut (share of before)':>40} "
              f"{'return s':>8} {'stalls en/ex':>12} {'dup down/up':>11} {'after the return: gap ms, lost':>30}")
        for r in cuts:
            print(f"{r['run']:34} {r['hold_s']:6.1f} {r['voip_uplink']:>6} {r['cut_share']:6.2f} "
                  f"{cut_cells(r)} {r['return_s']:8.2f} {r['stalls']['en']:5.0f} / {r['stalls']['ex']:<4.0f} "
                  f"{r['duplicates']['down']:5d} / {r['duplicates']['up']:<3d} "
                  + " ".join(f"{d} {g:.0f}, {lost:.0f}" for d, (g, lost, _) in r["voip_return"].items()))
    for variant, what in (("lossy", "5 % loss each way"),
                          ("jittery", f"up to {JITTER_MS} ms of jitter each way")):
        steady = [r for r in rows if r["variant"] == variant]
        if not steady:
            continue
        print(f"\n== {variant}: uplinks {RATES} Mbit/s, one-way delays {DELAYS} ms, {what}, "
              f"{LOSSY_SECONDS} s of TCP download and VoIP flow; nothing is cut")
        print(f"{'run':34} {'false failovers en/ex':>22} {'VoIP gap down/up ms':>20} "
              f"{'VoIP lost down/up %':>20} {'goodput Mbit/s':>15} {'probes/s en/ex':>15} {'copies kbit/s':>13}")
        for r in steady:
            v, probes = r["voip"], r.get("probes_per_s", {"en": 0.0, "ex": 0.0})
            lost = {d: 100.0 * v[d][1] / v[d][2] if v[d][2] else float("nan") for d in v}
            print(f"{r['run']:34} {r['stalls']['en']:10.0f} / {r['stalls']['ex']:<9.0f} "
                  f"{v['down'][0]:9.0f} / {v['up'][0]:<8.0f} {lost['down']:9.2f} / {lost['up']:<8.2f} "
                  f"{r['goodput_mbps']:15.2f} {probes['en']:7.1f} / {probes['ex']:<6.1f} "
                  f"{r.get('duplicate_kbps', 0.0):13.1f}")
            for line in r["stall_log"]:
                print(f"    {line}")


def report_idle(rows):
    idle = [r for r in rows if r["variant"] == "idle"]
    if idle:
        print("\n== idle: what an uplink without traffic carries (its green and blue lanes, both ways)")
        print(f"{'run':34} {'packets/s':>10} {'kbit/s':>8}")
        for r in idle:
            print(f"{r['run']:34} {r['packets_per_s']:10.1f} {r['kbps']:8.1f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--braid", required=True)
    p.add_argument("--linkemu")
    p.add_argument("--runs", default="afmt,afmt-flowlet,round-robin")
    p.add_argument("--variants", default="cut,lossy,jittery,idle")
    p.add_argument("--hold", default="1,5")
    p.add_argument("--out", default="bench-out")
    args = p.parse_args()
    linkemu = args.linkemu or os.path.join(os.path.dirname(os.path.abspath(args.braid)), "braid-linkemu")
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for variant in args.variants.split(","):
        if variant not in (*CUTS, "idle", *STEADY):
            raise SystemExit(f"unknown variant {variant!r}: cut, backup-warm, backup-cold, lossy, "
                             "jittery or idle")
        holds = [float(h) for h in args.hold.split(",")] if variant in CUTS else [0.0]
        for hold in holds:
            for label in args.runs.split(","):
                rows.append(run_one(variant, label, hold, args.braid, linkemu))
    report(rows)
    report_backup(rows)
    report_idle(rows)
    with open(os.path.join(args.out, "failover.json"), "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main()
