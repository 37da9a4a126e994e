"""What the benchmark scripts share: running commands, in a testbed's namespaces, and
reading a gateway's metrics there."""
import json
import os
import subprocess

METRICS_URL = "http://127.0.0.1:9190/metrics"


def sh(*args, env=None, check=True):
    """Runs a command and returns its stdout; a failure raises with its output."""
    r = subprocess.run(args, env=env, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {r.stdout}{r.stderr}")
    return r.stdout


def inns(testbed, role, *args):
    """The command line that runs `args` in the namespace of `role` in `testbed`."""
    return ["ip", "netns", "exec", f"{testbed}-{role}", *args]


def metrics_text(testbed, role):
    """A gateway's /metrics, read inside its namespace."""
    return sh(*inns(testbed, role, "python3", "-c",
                    f"import urllib.request;print(urllib.request.urlopen('{METRICS_URL}').read().decode())"))


def metric_sum(text, sample):
    """The sum of the samples of a /metrics text whose lines start with `sample`."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(sample))


def tcp_counters(testbed, role):
    """The TcpExt counters of a namespace's kernel (/proc/net/netstat): {name: value}."""
    lines = [line.split() for line in sh(*inns(testbed, role, "cat", "/proc/net/netstat")).splitlines()
             if line.startswith("TcpExt:")]
    return dict(zip(lines[0][1:], map(int, lines[1][1:])))


def admin(testbed, role, method, path, token, body=b""):
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
    r = subprocess.run(inns(testbed, role, "python3", "-c", code, path, method, token), input=body,
                       capture_output=True)
    head, _, rest = r.stdout.partition(b"\n")
    status, secs = head.split()
    return int(status), rest.decode(), float(secs)


def admin_token(testbed):
    """The bearer token of a testbed's gateways."""
    with open(f"/tmp/braid-testbed/{testbed}/admin.token") as f:
        return f.read().strip()


def prioritise_gateways(testbed, nice):
    """Gives both gateways of `testbed` (every thread) CPU priority over the traffic
    generators, which on a real network run on other machines."""
    state = os.environ.get("STATE_DIR", "/tmp/braid-testbed")
    for gateway in ("exit", "site1"):
        with open(os.path.join(state, testbed, f"{gateway}.pid")) as f:
            pid = f.read().strip()
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)


def write_report(out, name, report):
    """Writes a benchmark's raw numbers as `out/name` (JSON) and says where."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"\nraw numbers: {path}")
