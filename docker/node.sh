#!/usr/bin/env bash
# Entrypoint of the compose testbed's containers (compose.yaml). Compose gives each
# container its addresses; this names the interfaces after them, routes, shapes and
# then runs the container's process:
#
#   node.sh certs DIR        a CA and certificates for the exit and site1, and the
#                            gateways' admin token, in DIR (kept when they exist)
#   node.sh client           routes through the entry, then waits
#   node.sh entry            uplinks up1..up$UPLINKS, then `braid run`
#   node.sh router N         WAN router of uplink N: RATE_MBIT, DELAY_MS, LOSS_PCT
#   node.sh exit [N]         exit N (1 or 2): its service address 198.19.(199+N).1,
#                            then `braid run`
#   node.sh server           routes through the first exit that answers (the job of
#                            VRRP or a routing protocol in a real fleet), then an
#                            iperf3 server
#   node.sh controller       `braid controller` for both gateways
#
# Addresses (all in 198.18.0.0/15): site LAN 198.18.1.0/24 (entry .1, client .2),
# uplink N 198.19.N.0/24 (router .1, entry .2), router N to the exits
# 198.19.(100+N).0/24 (router .1, exit .2, exit2 .3), server LAN 198.18.100.0/24
# (exit .1, server .2, exit2 .3).
set -euo pipefail
exit_services=(198.19.200.1 198.19.201.1)
uplinks=${UPLINKS:-3}

# rename ADDRESS NAME: the interface holding ADDRESS becomes NAME.
rename() {
    local dev
    dev=$(ip -o -4 addr show | awk -v a="$1" '{split($4, p, "/")} p[1] == a {print $2; exit}')
    [ -n "$dev" ] || { echo "error: no interface has address $1" >&2; exit 1; }
    [ "$dev" = "$2" ] && return 0
    ip link set dev "$dev" down
    ip link set dev "$dev" name "$2"
    ip link set dev "$2" up
}

case "${1:-}" in
certs)
    dir=$2
    if [ ! -f "$dir/ca.pem" ]; then
        braid cert init "$dir"
        braid cert issue --ca "$dir" --name exit
        braid cert issue --ca "$dir" --name site1
    fi
    [ -f "$dir/admin.token" ] || od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$dir/admin.token"
    ;;
client)
    ip route replace default via 198.18.1.1
    exec sleep infinity
    ;;
entry)
    rename 198.18.1.1 lan
    for ((i = 1; i <= uplinks; i++)); do
        rename "198.19.$i.2" "up$i"
        # One route to each exit per uplink device, so that a lane socket bound to
        # its device (SO_BINDTODEVICE) finds its own.
        for service in "${exit_services[@]}"; do
            ip route add "$service/32" via "198.19.$i.1" dev "up$i" metric "$i"
        done
    done
    exec braid run --config /etc/braid/entry.toml
    ;;
router)
    n=$2
    rename "198.19.$n.1" a
    rename "198.19.$((100 + n)).1" b
    ip route add "${exit_services[0]}/32" via "198.19.$((100 + n)).2"
    ip route add "${exit_services[1]}/32" via "198.19.$((100 + n)).3"
    # Both directions: the bottleneck is the WAN's, as with a real modem.
    for dev in a b; do bash /usr/lib/braid-testbed/uplink.sh shape "$dev" "${RATE_MBIT:-0}"; done
    LINKEMU=/usr/bin/braid-linkemu bash /usr/lib/braid-testbed/uplink.sh \
        emulate a b "${DELAY_MS:-0}" "${LOSS_PCT:-0}" /proc/1/fd/1 "${JITTER_MS:-0}" "${RATE_MBIT:-0}"
    echo "router $n: ${RATE_MBIT:-0} Mbit/s, ${DELAY_MS:-0} ms, ${LOSS_PCT:-0} % loss each way"
    exec sleep infinity
    ;;
exit)
    n=${2:-1}
    host=$((n + 1)) # exit .2, exit2 .3 on the core networks
    ip addr add "${exit_services[n - 1]}/32" dev lo
    rename "198.18.100.$([ "$n" = 1 ] && echo 1 || echo 3)" srv
    for ((i = 1; i <= uplinks; i++)); do
        rename "198.19.$((100 + i)).$host" "core$i"
        ip route add "198.19.$i.0/24" via "198.19.$((100 + i)).1" dev "core$i"
    done
    exec braid run --config /etc/braid/exit.toml
    ;;
server)
    ip route replace default via 198.18.100.1
    iperf3 --server &
    # Return traffic goes to the first exit while it answers, else to the second.
    while sleep 1; do
        via=198.18.100.1
        ping -c1 -W1 -q "$via" >/dev/null 2>&1 || via=198.18.100.3
        ip route replace default via "$via"
    done
    ;;
controller)
    exec braid controller --config /etc/braid/controller.toml
    ;;
*)
    sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
