#!/usr/bin/env bash
# The compose testbed as CI runs it, on a Debian machine without Docker or a reachable
# registry: installs and starts the engine (docker/engine.sh), builds braid on the
# host and the images on a local Debian base, brings the testbed up, checks that a
# download through the client crosses every uplink at more than any uplink alone
# carries, that the gateways run the braid just built, that Prometheus scrapes
# the gateways and that the controller allocates an application of their table,
# that the site's lanes move to the second exit while the first is stopped and
# return after the hold once it is started again, and tears everything down. Grafana runs only where its image can be had
# (GRAFANA_IMAGE present locally or pullable); the dashboard's expressions are checked
# against live metrics by the end-to-end tests either way. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
docker=/usr/bin/docker
project=braid-check
started_engine=
[ -f /run/braid-dockerd/dockerd.pid ] || started_engine=1
bash docker/engine.sh start

cargo build --release --locked --quiet --bin braid --bin braid-linkemu
export BUILD_IMAGE=braid-base:bookworm RUNTIME_IMAGE=braid-base:bookworm PREBUILT=target/release
if ! "$docker" image inspect "${PROMETHEUS_IMAGE:=prom/prometheus:v2.53.2}" >/dev/null 2>&1 &&
    ! "$docker" pull -q "$PROMETHEUS_IMAGE" >/dev/null 2>&1; then
    PROMETHEUS_IMAGE=braid-prometheus:local
    "$docker" build -q -f docker/prometheus.Dockerfile --build-arg BASE_IMAGE=braid-base:bookworm \
        -t "$PROMETHEUS_IMAGE" docker >/dev/null
fi
export PROMETHEUS_IMAGE
services=(certs client entry router1 router2 router3 exit exit2 server controller prometheus)
if "$docker" image inspect "${GRAFANA_IMAGE:=grafana/grafana-oss:11.3.0}" >/dev/null 2>&1 ||
    "$docker" pull -q "$GRAFANA_IMAGE" >/dev/null 2>&1; then
    services+=(grafana)
else
    echo "compose check: Grafana skipped: no $GRAFANA_IMAGE image here and no registry to pull it from"
fi

compose() { docker-compose --ansi never -p "$project" -f docker/compose.yaml "$@"; }
cleanup() {
    compose down -v --remove-orphans >/dev/null 2>&1 || true
    [ -z "$started_engine" ] || bash docker/engine.sh stop
}
trap cleanup EXIT
fail() {
    echo "compose check: $*" >&2
    compose ps >&2 || true
    compose logs --tail 30 >&2 || true
    exit 1
}

# The daemon's own image: small, and it runs.
"$docker" build -q -f docker/Dockerfile --target daemon --build-arg BUILD_IMAGE \
    --build-arg RUNTIME_IMAGE --build-arg PREBUILT -t braid:check . >/dev/null
"$docker" run --rm braid:check --version >/dev/null || fail "the daemon image does not run"
"$docker" image rm braid:check >/dev/null

# The testbed's image (every node's), from the binaries just built; a failed build
# fails the check rather than leaving an older image to run.
build_log=$(compose build -q certs 2>&1) || {
    echo "$build_log" >&2
    fail "compose build failed"
}
compose up -d --no-build "${services[@]}" >/dev/null 2>&1 || fail "compose up failed"
# The gateways run the braid just built, not an image left from before.
built=$(sha256sum target/release/braid | cut -d' ' -f1)
for node in entry exit exit2; do
    running=$(compose exec -T "$node" sha256sum /usr/bin/braid | cut -d' ' -f1) ||
        fail "cannot read the $node's braid"
    [ "$running" = "$built" ] || fail "the $node runs another braid ($running) than the one built ($built)"
done

# prom EXPR [all]: a Prometheus instant query's result, one "uplink value" line per
# series ("-" where it has no uplink); with "all", every label instead of the uplink.
prom() {
    python3 - "$1" "${2:-}" <<'PY'
import json, sys, urllib.parse, urllib.request
url = "http://127.0.0.1:9090/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[1]})
try:
    result = json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]
except OSError:
    result = []
for r in result:
    labels = ",".join(f"{k}={v}" for k, v in sorted(r["metric"].items()) if k != "__name__")
    key = labels if sys.argv[2] == "all" else r["metric"].get("uplink", "-")
    print(key or "-", r["value"][1])
PY
}
for _ in $(seq 60); do
    [ "$(prom 'sum(braid_uplink_up{role="entry"}) + sum(braid_uplink_up{role="exit"})' | awk '{print $2}')" = 6 ] && break
    sleep 1
done
[ "$(prom 'sum(braid_uplink_up)' | awk '{print $2}')" = 6 ] ||
    fail "Prometheus does not see three uplinks up at both gateways"

out=$(compose exec -T client iperf3 -c 198.18.100.2 --reverse --time 10 --json) || fail "iperf3 failed"
mbit=$(python3 -c 'import json, sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e6, 1))' <<<"$out")
sleep 2 # the last scrape
shares=$(prom 'sum by (uplink) (increase(braid_lane_rx_bytes_total{role="entry"}[20s]))')
echo "compose check: one download of 10 s: $mbit Mbit/s; bytes per uplink at the entry:"
awk '{printf "  %s %.1f MB\n", $1, $2 / 1e6}' <<<"$shares"
[ "$(echo "$shares" | awk '$2 > 1000000' | wc -l)" = 3 ] || fail "the download did not cross every uplink"
# What braid dropped, lost and resequenced meanwhile: what explains a low figure.
counts() {
    local q
    for q in "sum by (instance, reason) (increase(braid_packets_dropped_total[15s])) > 0" \
        "sum by (instance) (increase(braid_lane_lost_packets_total[15s]))" \
        "sum by (instance, action) (increase(braid_lane_loss_repairs_total[15s]))" \
        "sum by (outcome) (increase(braid_reseq_packets_total{role=\"entry\"}[15s]))" \
        "sum(increase(braid_reordered_packets_total{role=\"entry\"}[15s]))"; do
        prom "$q" all | sed 's/^/    /'
    done
    # The downloads' lanes: smoothed RTT (ms), window (kB) and the delay variation
    # they allow (ms), averaged over the download.
    for q in srtt_seconds:1000:ms cwnd_bytes:0.001:kB delay_variation_seconds:1000:ms; do
        IFS=: read -r name scale unit <<<"$q"
        prom "avg_over_time(braid_lane_$name{role=\"exit\",colour=\"blue\"}[12s]) > 0" all |
            awk -v s="$scale" -v u="$unit" -v n="$name" '{ printf "    %s %s %.1f %s\n", n, $1, $2 * s, u }'
    done
}
echo "compose check: braid's counts over the download:"
counts
# The uplinks carry 98 Mbit/s; braid gets about 88 of it here. Below the floor it
# gives no more than its best uplink (50 Mbit/s) alone.
floor=${COMPOSE_MIN_MBIT:-55}
python3 -c 'import sys; sys.exit(float(sys.argv[1]) < float(sys.argv[2]))' "$mbit" "$floor" ||
    fail "the download got $mbit Mbit/s, under the floor of $floor"
# The controller: once the entry's table names the download's application, it
# allocates it (a download's best level, 5 Mbit/s, fits in the uplinks; paced a
# tenth above it) and puts the table to both gateways.
compose exec -T entry braid pacing put /dev/stdin --token-file /certs/admin.token >/dev/null <<'JSON' ||
{"version": 1, "apps": [{"name": "bulk", "match": {"proto": "tcp", "remote_ports": "5201"},
  "utility": "download"}]}
JSON
    fail "putting a table to the entry failed"
compose exec -T client iperf3 -c 198.18.100.2 --reverse --time 6 >/dev/null || fail "iperf3 failed"
for node in entry exit; do
    rate=$(compose exec -T "$node" braid pacing get |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["apps"][0].get("rate_down_kbps"))') ||
        fail "cannot read the $node's table"
    [ "$rate" = 5750 ] || fail "the controller did not give the $node's bulk its rate (rate_down_kbps $rate)"
done
pushes=$(prom 'sum(braid_controller_pushes_total)' | awk '{print $2}')
echo "compose check: the controller paced the download at 5750 kbit/s at both gateways ($pushes tables put)"
# The second exit: with the first stopped, every lane of the site moves to it and a
# download crosses it; with the first started again, every lane returns after the
# entry's hold (hold_ms 10000 in docker/config/entry.toml).
lanes_at() { prom "sum(braid_uplink_up{instance=\"$1:9190\"})" | awk '{print $2} END {if (NR == 0) print 0}'; }
compose stop exit >/dev/null 2>&1 || fail "stopping the first exit failed"
for _ in $(seq 30); do
    [ "$(lanes_at exit2)" = 3 ] && break
    sleep 1
done
[ "$(lanes_at exit2)" = 3 ] || fail "the site's lanes did not move to the second exit"
sleep 2 # the server's return route follows (docker/node.sh server)
out=$(compose exec -T client iperf3 -c 198.18.100.2 --reverse --time 10 --json) || fail "iperf3 through the second exit failed"
mbit2=$(python3 -c 'import json, sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e6, 1))' <<<"$out")
echo "compose check: the first exit stopped: every lane on the second, one download of 10 s: $mbit2 Mbit/s"
sleep 2 # the last scrape
echo "compose check: braid's counts over the download:"
counts
python3 -c 'import sys; sys.exit(float(sys.argv[1]) < float(sys.argv[2]))' "$mbit2" "$floor" ||
    fail "the download through the second exit got $mbit2 Mbit/s, under the floor of $floor"
compose start exit >/dev/null 2>&1 || fail "starting the first exit again failed"
started=$SECONDS
for _ in $(seq 40); do
    [ "$(lanes_at exit)" = 3 ] && [ "$(lanes_at exit2)" = 0 ] && break
    sleep 1
done
back=$((SECONDS - started))
[ "$(lanes_at exit)" = 3 ] && [ "$(lanes_at exit2)" = 0 ] ||
    fail "the site's lanes did not return to the first exit"
[ "$back" -ge 10 ] || fail "the lanes returned to the first exit after $back s, within the 10 s hold"
echo "compose check: the first exit started again: every lane back on it after $back s (hold 10 s)"
# Where Grafana runs, it serves the dashboard it provisioned (anonymous viewers may
# read it; docker/compose.yaml).
if [[ " ${services[*]} " == *" grafana "* ]]; then
    served=
    for _ in $(seq 60); do
        served=$(python3 - <<'PY'
import json, urllib.request
try:
    d = json.load(urllib.request.urlopen("http://127.0.0.1:3000/api/dashboards/uid/braid", timeout=5))
    print(len(d["dashboard"]["panels"]))
except (OSError, ValueError, KeyError):
    pass
PY
        )
        [ -n "$served" ] && break
        sleep 1
    done
    [ -n "$served" ] || fail "Grafana does not serve the provisioned dashboard (uid braid)"
    echo "compose check: Grafana serves the provisioned dashboard ($served panels)"
fi
echo "compose check: passed"
