#!/usr/bin/env bash
# One busy site beside another at an exit of one data-path thread, for one or more
# braid builds in turn: site 2's client sends UDP at RATE through the tunnel while
# site 1's client pings the server every 10 ms; prints site 1's round trips alone and
# beside the flood, and what the flood got across.
#
#   sudo integration/bench_busy_site.sh BUILD_A [BUILD_B ...]    (paths to braid binaries)
#   ROUNDS=2 RATE=5G
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-2}
rate=${RATE:-5G}
name=busy
trap 'bash integration/testbed.sh down "$name" >/dev/null 2>&1 || true' EXIT
export EXIT_THREADS=1 SITES=2 RATES="0 0 0"
rtt() { ip netns exec "$name-cl" ping -q -i 0.01 -c "$1" 198.18.100.2 | tail -2 | tr '\n' ' '; }
for round in $(seq "$rounds"); do
    for build in "$@"; do
        bash integration/testbed.sh down "$name" >/dev/null 2>&1 || true
        BRAID="$build" bash integration/testbed.sh up "$name" >/dev/null
        BRAID="$build" bash integration/testbed.sh start "$name" >/dev/null
        ip netns exec "$name-sv" iperf3 -s -D -1 >/dev/null
        sleep 1
        echo "round $round  $build"
        echo "  alone:            $(rtt 300)"
        out=$(mktemp)
        ip netns exec "$name-c2" iperf3 -u -b "$rate" -l 1300 -t 14 -c 198.18.100.2 -J >"$out" &
        sleep 3
        echo "  beside the flood: $(rtt 800)"
        wait
        python3 - "$out" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["end"]["sum"]
print(f"  flood: {s['bits_per_second'] / 1e6:.0f} Mbit/s sent, {s['lost_percent']:.0f} % of it lost")
PY
        rm -f "$out"
    done
done
