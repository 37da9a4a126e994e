#!/usr/bin/env python3
"""What one exit holds: `braid loadgen` runs SITES sites x 3 uplinks x 2 colours of
real QUIC lanes against a real exit, in two network namespaces joined by three veth
pairs (one per uplink). For each site count in turn, measured:

- the time until every lane is up, from the loadgen's start;
- the exit's RSS and CPU (share of one core) at idle, every lane up and the sites
  quiet (--settle seconds after the last lane came up: a site is active for 10 s
  after its last packet, and every site is at start), over --idle seconds;
- `/metrics`: its size and the slowest of three scrapes;
- the exit restarted (SIGTERM, then started again): the time until every lane is
  back, and RSS and idle CPU again;
- --send sites sending at once (--rate kbit/s each, each to the next site, across
  the exit): each one's goodput, its spread and Jain's fairness index; with --busy
  KBPS the first of them sends that much instead, and the others' spread is given
  apart from the busy flow's (whether one busy site takes the others' share).

Targets (docs/benchmarks.md, "An exit for a thousand sites"): 1,000 sites up within
60 s and back within 60 s of a restart, RSS under 1 GiB, idle CPU under 10 % of a
core, a scrape under 1 s.

Usage (root): integration/bench_scale.py --braid target/release/braid
              [--sites 100,300,1000] [--idle 10] [--settle 15] [--send 100] [--rate 2000]
              [--busy KBPS]
              [--exit-threads N] [--out DIR]

The loadgen shares the machine with the exit: on two cores it takes one of them
while lanes come up.
"""
import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time

from benchlib import inns, sh, write_report

NAME = "bscale"
LG, EX = f"{NAME}-lg", f"{NAME}-ex"
UPLINKS = 3
SERVICE = "10.99.200.1"
PORT = 4433
STATE = f"/tmp/braid-{NAME}"
TICKS = os.sysconf("SC_CLK_TCK")
METRICS = "http://127.0.0.1:9190/metrics"


def ns_up():
    ns_down()
    for ns in (LG, EX):
        sh("ip", "netns", "add", ns)
        sh(*inns(NAME, ns.split("-")[1], "ip", "link", "set", "lo", "up"))
    for i in range(1, UPLINKS + 1):
        sh("ip", "link", "add", f"up{i}", "netns", LG, "type", "veth", "peer", "name", f"dn{i}", "netns", EX)
        sh(*inns(NAME, "lg", "ip", "addr", "add", f"10.99.{i}.2/24", "dev", f"up{i}"))
        sh(*inns(NAME, "ex", "ip", "addr", "add", f"10.99.{i}.1/24", "dev", f"dn{i}"))
        sh(*inns(NAME, "lg", "ip", "link", "set", f"up{i}", "up"))
        sh(*inns(NAME, "ex", "ip", "link", "set", f"dn{i}", "up"))
        # Each uplink reaches the exit's service address; a lane bound to its
        # interface takes that uplink's route.
        sh(*inns(NAME, "lg", "ip", "route", "add", f"{SERVICE}/32", "via", f"10.99.{i}.1",
                 "dev", f"up{i}", "metric", str(i)))
    sh(*inns(NAME, "ex", "ip", "addr", "add", f"{SERVICE}/32", "dev", "lo"))
    # Sites' packets to each other cross the exit's kernel (site_to_site).
    sh(*inns(NAME, "ex", "sysctl", "-qw", "net.ipv4.ip_forward=1"))
    sh(*inns(NAME, "ex", "sysctl", "-qw", "net.ipv4.conf.all.send_redirects=0"))


def ns_down():
    for ns in (LG, EX):
        subprocess.run(["ip", "netns", "pids", ns], capture_output=True)
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def write_exit_config(braid, sites, threads):
    if os.path.exists(STATE):
        shutil.rmtree(STATE)
    os.makedirs(STATE)
    sh(braid, "cert", "init", STATE)
    sh(braid, "cert", "issue", "--ca", STATE, "--name", "exit")
    config = (
        'role = "exit"\nsite_to_site = true\n'
        '[tun]\nname = "braid0"\naddress = ["10.127.0.1/32"]\n'
        f'[tls]\nca = "{STATE}/ca.pem"\ncert = "{STATE}/exit.pem"\nkey = "{STATE}/exit.key"\n'
        f'[listen]\naddress = "0.0.0.0:{PORT}"\n'
        + (f"threads = {threads}\n" if threads else "")
        + '[log]\nfilter = "warn"\n'
        + sh(braid, "loadgen", "sites", str(sites))
    )
    path = os.path.join(STATE, "exit.toml")
    with open(path, "w") as f:
        f.write(config)
    return path


def start_exit(braid, config):
    log = open(os.path.join(STATE, "exit.log"), "a")
    return subprocess.Popen(inns(NAME, "ex", braid, "run", "--config", config), stdout=log, stderr=log)


def exit_pid(proc):
    """The braid process under `ip netns exec` (which execs, so the same pid)."""
    return proc.pid


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def idle(pid, seconds):
    """The exit's RSS (MiB) and CPU (share of one core) over `seconds` of idle."""
    before, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return rss_mib(pid), (cpu_seconds(pid) - before) / (time.monotonic() - t0)


def scrape():
    """/metrics' size (bytes) and the slowest of three scrapes (s)."""
    code = ("import time,urllib.request as u\nw=0\nfor _ in range(3):\n"
            f" t=time.monotonic();b=u.urlopen('{METRICS}',timeout=30).read();w=max(w,time.monotonic()-t)\n"
            "print(len(b),w)")
    size, secs = sh(*inns(NAME, "ex", "python3", "-c", code)).split()
    return int(size), float(secs)


class Loadgen:
    """The load generator's process and its JSON lines, read as they come."""

    def __init__(self, braid, sites, send, rate, busy):
        self.lines = queue.Queue()
        busy_args = ("--busy-kbps", str(busy)) if busy else ()
        self.proc = subprocess.Popen(
            inns(NAME, "lg", braid, "loadgen", "run", "--exit", f"{SERVICE}:{PORT}", "--ca", STATE,
                 "--sites", str(sites), "--uplinks", ",".join(f"up{i}" for i in range(1, UPLINKS + 1)),
                 "--send-sites", str(send), "--rate-kbps", str(rate), *busy_args),
            stdout=subprocess.PIPE, stderr=open(os.path.join(STATE, "loadgen.log"), "a"), text=True)
        self.up = 0
        self.lanes = sites * UPLINKS * 2
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def until(self, wanted, timeout):
        """Seconds until a line satisfies `wanted` (None after `timeout`)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            self.up = line.get("lanes_up", self.up)
            if wanted(line):
                return line
        return None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        summary = self.until(lambda l: "summary" in l, 30)
        self.proc.wait(timeout=30)
        return summary


def measure(braid, sites, args):
    config = write_exit_config(braid, sites, args.exit_threads)
    sh(braid, "check-config", "--config", config)
    exit_proc = start_exit(braid, config)
    time.sleep(1)
    # Site certificates issued before the loadgen's clock starts; its `t` counts
    # from when the first site starts dialling.
    gen = Loadgen(braid, sites, args.send, args.rate, args.busy)
    result = {"sites": sites, "lanes": gen.lanes}
    try:
        up = gen.until(lambda l: l.get("event") == "all_up", args.timeout)
        result["all_up_s"] = up and up["t"]
        print(f"{sites} sites: every lane up after {result['all_up_s']} s", flush=True)
        time.sleep(args.settle)
        result["rss_mib"], result["idle_cpu"] = idle(exit_pid(exit_proc), args.idle)
        result["metrics_bytes"], result["scrape_s"] = scrape()
        print(f"  idle: RSS {result['rss_mib']:.0f} MiB, CPU {100 * result['idle_cpu']:.1f} % of a core; "
              f"/metrics {result['metrics_bytes'] / 1e6:.1f} MB in {result['scrape_s']:.2f} s", flush=True)
        if args.send:
            gen.proc.send_signal(signal.SIGUSR1)
            good = gen.until(lambda l: l.get("event") == "goodput", 60)
            result["goodput"] = good and good["goodput_kbps"]
            if good:
                g = good["goodput_kbps"]
                print(f"  {g['sites']} sites sending {g['offered']} kbit/s each: min {g['min']}, "
                      f"median {g['median']}, max {g['max']} kbit/s, Jain {g['jain']}", flush=True)
                if g.get("busy") is not None:
                    print(f"  beside them one site sending {g['busy_offered']} kbit/s: "
                          f"{g['busy']} kbit/s arrived", flush=True)
        exit_proc.send_signal(signal.SIGTERM)
        exit_proc.wait(timeout=30)
        gen.until(lambda l: l.get("lanes_up", gen.lanes) < gen.lanes // 2, 30)
        restarted = time.monotonic()
        exit_proc = start_exit(braid, config)
        back = gen.until(lambda l: l.get("lanes_up", 0) >= gen.lanes, args.timeout)
        result["back_s"] = back and round(time.monotonic() - restarted, 1)
        print(f"  restarted: every lane back after {result['back_s']} s", flush=True)
        time.sleep(args.settle)
        result["rss_after_mib"], result["idle_cpu_after"] = idle(exit_pid(exit_proc), args.idle)
        print(f"  idle after: RSS {result['rss_after_mib']:.0f} MiB, CPU {100 * result['idle_cpu_after']:.1f} %",
              flush=True)
        result["loadgen"] = gen.stop()
    finally:
        if gen.proc.poll() is None:
            gen.proc.kill()
        exit_proc.send_signal(signal.SIGTERM)
        try:
            exit_proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            exit_proc.kill()
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--braid", required=True)
    p.add_argument("--sites", default="100,300,1000")
    p.add_argument("--idle", type=float, default=10.0)
    p.add_argument("--settle", type=float, default=15.0)
    p.add_argument("--send", type=int, default=100)
    p.add_argument("--rate", type=int, default=2000)
    p.add_argument("--busy", type=int, help="kbit/s the first sending site sends instead")
    p.add_argument("--exit-threads", type=int)
    p.add_argument("--timeout", type=float, default=180.0)
    p.add_argument("--out", default="/tmp")
    args = p.parse_args()
    braid = os.path.abspath(args.braid)
    results = []
    try:
        ns_up()
        for sites in map(int, args.sites.split(",")):
            args_send = min(args.send, sites)
            saved, args.send = args.send, args_send
            results.append(measure(braid, sites, args))
            args.send = saved
    finally:
        ns_down()
    write_report(args.out, "bench_scale.json", results)


if __name__ == "__main__":
    main()
