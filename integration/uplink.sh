#!/usr/bin/env bash
# One emulated uplink as a router forwards it, applied in the current network
# namespace; the namespace testbed (testbed.sh) and the compose testbed's WAN routers
# (docker/) both use it.
#
#   uplink.sh shape DEV MBIT            tbf at MBIT (0: unshaped) with a queue of
#                                       BUFFER_MS (default 50) ms, as a modem's buffer
#   uplink.sh emulate A B DELAY LOSS LOG [JITTER [MBIT]]
#                                       delay (ms, one way), loss (%) and jitter (ms,
#                                       uniform, never reordering) both ways
#                                       between devices A and B, shaped at MBIT; nothing
#                                       when delay, loss and jitter are all 0
#
# Delay, loss and jitter come from netem where the kernel has it (its `rate` keeps
# the packets' order, and it then shapes instead of tbf), and from braid-linkemu
# ($LINKEMU, logging to LOG) where it has not. LINK_EMULATOR=netem|linkemu forces
# one (default auto); UPLINK_DRY_RUN=1 prints netem's command lines instead of
# running them. The emulator used is printed.
set -euo pipefail

# A command, or with UPLINK_DRY_RUN=1 its command line.
run() {
    if [ -n "${UPLINK_DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi
}

# Whether this kernel has netem: a qdisc on a throwaway device says (a veth pair:
# some kernels have no dummy devices).
have_netem() {
    [ -n "${UPLINK_DRY_RUN:-}" ] && return 0
    modprobe -q sch_netem 2>/dev/null || true
    ip link add braid-nemtest type veth peer name braid-nemtest1 2>/dev/null || return 1
    local ok=1
    tc qdisc add dev braid-nemtest root netem delay 1ms 2>/dev/null && ok=0
    ip link del braid-nemtest 2>/dev/null || true
    return "$ok"
}

shape() { # shape DEV MBIT
    local dev=$1 mbit=$2
    [ "$mbit" = 0 ] && return 0
    # Queue of BUFFER_MS at the rate, burst of ~2 ms or 16 KB.
    local bytes_per_ms=$((mbit * 125)) buffer_ms=${BUFFER_MS:-50}
    local limit=$((bytes_per_ms * buffer_ms)); [ "$limit" -lt 30000 ] && limit=30000
    local burst=$((bytes_per_ms * 2)); [ "$burst" -lt 16000 ] && burst=16000
    tc qdisc replace dev "$dev" root tbf rate "${mbit}mbit" burst "$burst" limit "$limit"
}

emulate() { # emulate A B DELAY_MS LOSS_PCT LOG [JITTER_MS [MBIT]]
    local a=$1 b=$2 delay=$3 loss=$4 log=$5 jitter=${6:-0} mbit=${7:-0}
    [ "$delay" = 0 ] && [ "$loss" = 0 ] && [ "$jitter" = 0 ] && return 0
    local emulator=${LINK_EMULATOR:-auto}
    if [ "$emulator" = auto ]; then
        emulator=linkemu
        have_netem && emulator=netem
    fi
    echo "uplink $a/$b: ${delay} ms + up to ${jitter} ms, ${loss} % loss each way by $emulator" >&2
    case "$emulator" in
    netem) netem "$a" "$delay" "$loss" "$jitter" "$mbit"; netem "$b" "$delay" "$loss" "$jitter" "$mbit" ;;
    linkemu) linkemu "$a" "$b" "$delay" "$loss" "$log" "$jitter" ;;
    *) echo "error: LINK_EMULATOR=$emulator: netem, linkemu or auto" >&2; exit 2 ;;
    esac
}

netem() { # netem DEV DELAY_MS LOSS_PCT JITTER_MS MBIT
    local dev=$1 delay=$2 loss=$3 jitter=$4 mbit=$5
    # netem's jitter is +-J around the delay; braid-linkemu's is up to JITTER extra.
    local centre half
    centre=$(awk "BEGIN { print $delay + $jitter / 2 }")
    half=$(awk "BEGIN { print $jitter / 2 }")
    # A rate keeps the order (each packet leaves after the one before), so an
    # unshaped uplink with jitter gets one far above anything the testbed sends.
    local rate=$mbit limit=1000
    [ "$rate" = 0 ] && rate=10000
    if [ "$mbit" != 0 ]; then
        limit=$((mbit * 125 * ${BUFFER_MS:-50} / 1500))
        [ "$limit" -lt 20 ] && limit=20
    fi
    run tc qdisc replace dev "$dev" root netem limit "$limit" delay "${centre}ms" "${half}ms" \
        distribution uniform loss "${loss}%" rate "${rate}mbit"
}

linkemu() { # linkemu A B DELAY_MS LOSS_PCT LOG JITTER_MS
    local a=$1 b=$2 delay=$3 loss=$4 log=$5 jitter=$6
    local emu=${LINKEMU:?set LINKEMU to braid-linkemu}
    [ -x "$emu" ] || { echo "error: delay/loss needs braid-linkemu (LINKEMU=$emu)" >&2; exit 1; }
    for dev in eu ed; do
        ip tuntap add dev "$dev" mode tun
        ip link set dev "$dev" up mtu 1500
    done
    # Packets arriving from A go through eu, from B through ed; what linkemu writes
    # back arrives on eu/ed and is routed by the main table.
    local families=(-4)
    # Containers may run without IPv6.
    [ "$(cat /proc/sys/net/ipv6/conf/all/disable_ipv6 2>/dev/null || echo 1)" = 0 ] && families+=(-6)
    for fam in "${families[@]}"; do
        ip "$fam" rule add iif "$a" lookup 10 pref 100
        ip "$fam" rule add iif "$b" lookup 20 pref 101
        ip "$fam" route add default dev eu table 10
        ip "$fam" route add default dev ed table 20
    done
    # Replies leave by another device than eu/ed: no reverse-path filter on them. (A
    # container's /proc/sys is read-only; compose sets the default to 0 beforehand.)
    for dev in eu ed; do
        [ "$(cat "/proc/sys/net/ipv4/conf/$dev/rp_filter")" = 0 ] ||
            sysctl -qw "net.ipv4.conf.$dev.rp_filter=0"
    done
    "$emu" --dev eu --delay-ms "$delay" --loss-pct "$loss" --jitter-ms "$jitter" --seed "$RANDOM" \
        --dev ed --delay-ms "$delay" --loss-pct "$loss" --jitter-ms "$jitter" --seed "$RANDOM" \
        >>"$log" 2>&1 &
}

case "${1:-}" in
shape) shift; shape "$@" ;;
emulate) shift; emulate "$@" ;;
*) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
