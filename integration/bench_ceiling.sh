#!/usr/bin/env bash
# The CPU ceiling of one or more braid builds, measured alternately in one sitting:
# three unshaped uplinks, AFMT, one CUBIC iperf3 flow up and one down through the
# namespace testbed, ROUNDS rounds of every build in turn.
#
#   sudo integration/bench_ceiling.sh BUILD_A [BUILD_B ...]    (paths to braid binaries)
#   ROUNDS=3 SECONDS_PER_RUN=10 DIRECTIONS="up down"
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
secs=${SECONDS_PER_RUN:-10}
read -r -a directions <<<"${DIRECTIONS:-up down}"
name=ceil
trap 'bash integration/testbed.sh down "$name" >/dev/null 2>&1 || true' EXIT
mbps() { python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))'; }
for round in $(seq "$rounds"); do
    for build in "$@"; do
        bash integration/testbed.sh down "$name" >/dev/null 2>&1 || true
        RATES="0 0 0" BRAID="$build" bash integration/testbed.sh up "$name" >/dev/null
        RATES="0 0 0" BRAID="$build" bash integration/testbed.sh start "$name" >/dev/null
        line="round $round  $build"
        for direction in "${directions[@]}"; do
            ip netns exec "$name-sv" iperf3 -s -D -1 >/dev/null
            sleep 0.5
            reverse=$([ "$direction" = down ] && echo -R || true)
            rate=$(ip netns exec "$name-cl" iperf3 -c 198.18.100.2 -C cubic -t "$secs" $reverse -J | mbps)
            line="$line  $direction $rate Mbit/s"
        done
        echo "$line"
    done
done
