#!/usr/bin/env bash
# The Docker engine the compose testbed needs, on a Debian machine that may have no
# engine and no reachable registry (as CI's):
#
#   docker/engine.sh start   install docker.io, docker-compose and debootstrap if
#                            missing; start dockerd unless an engine already answers;
#                            make the base image braid-base:bookworm if missing
#   docker/engine.sh stop    stop the engine, if this script started it
#
# The engine this script starts keeps its bridge in 198.18.0.0/15 (no other private
# range is touched) and its state under /var/lib/docker. Prints nothing on success
# but what it does. Run as root.
set -euo pipefail
state=/run/braid-dockerd
# Debian's client talks to Debian's engine; a newer static client elsewhere on PATH
# may have no engine behind it.
docker=/usr/bin/docker
base_image=braid-base:bookworm

install() {
    local missing=()
    [ -x "$docker" ] || missing+=(docker.io)
    command -v docker-compose >/dev/null || missing+=(docker-compose)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

start() {
    install
    if ! "$docker" info >/dev/null 2>&1; then
        echo "starting dockerd (bridge 198.18.254.1/24; log in $state/dockerd.log)"
        mkdir -p "$state"
        dockerd --bip 198.18.254.1/24 \
            --default-address-pool base=198.18.192.0/19,size=24 \
            --pidfile "$state/dockerd.pid" >"$state/dockerd.log" 2>&1 &
        for _ in $(seq 100); do
            "$docker" info >/dev/null 2>&1 && break
            sleep 0.3
        done
        "$docker" info >/dev/null 2>&1 ||
            { echo "error: dockerd did not start; see $state/dockerd.log" >&2; exit 1; }
    fi
    if ! "$docker" image inspect "$base_image" >/dev/null 2>&1; then
        # No registry: the base image is Debian's minimal system, made here.
        echo "making $base_image with debootstrap"
        local root
        root=$(mktemp -d)
        debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$root.log" 2>&1 ||
            { echo "error: debootstrap failed; see $root.log" >&2; exit 1; }
        tar -C "$root" -c . | "$docker" import - "$base_image" >/dev/null
        rm -rf "$root" "$root.log"
    fi
}

stop() {
    [ -f "$state/dockerd.pid" ] || return 0
    local pid
    pid=$(cat "$state/dockerd.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    rm -rf "$state"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
*) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
