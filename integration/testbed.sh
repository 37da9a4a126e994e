#!/usr/bin/env bash
# braid's network-namespace testbed. Usable as root on any Linux host with iproute2.
#
#   testbed.sh up NAME      build the network
#   testbed.sh start NAME   write a CA, certificates and configs, start both gateways
#   testbed.sh down NAME    stop everything in the testbed and remove it
#   testbed.sh deps         install the tools the testbed and its tests use (Debian)
#
# Topology (namespaces are NAME-<role>):
#
#   cl --lan-- en ==up1== r1 ==== ex --srv-- sv          site "site1"
#                ==up2== r2 ====                        (N uplinks, one router each)
#                ==upN== rN ====
#   c2 --lan-- e2 ==up1== s1 ==== ex                     site "site2" (SITES=2)
#
# Each router shapes its uplink both ways with tbf (the bottleneck is remote, as with a
# real modem) and, where delay or loss is asked for, passes packets through
# braid-linkemu (this kernel has no netem). Environment knobs, one value per uplink:
#   RATES="16 32 50"   Mbit/s both ways (0 = unshaped)   UPLINKS defaults to their count
#   DELAYS="0 0 0"     one-way delay in ms each way       LOSS="0 0 0"  loss % each way
#   SITES=1|2          whether the second site exists    BUFFER_MS=50  tbf queue length
#   JITTER="0 0 0"     extra one-way delay in ms, uniform, never reordering, each way
#   BRAID=path/to/braid  LINKEMU=path/to/braid-linkemu  (start, and up with delay/loss)
#   SCHEDULER=afmt     scheduler.algorithm of both gateways
#   KNOWN_RATES=1      configure site1's uplinks with their RATES (rate_up_kbps and
#                      rate_down_kbps): braid shapes them and serves them with DSD
#   KNOWN_VARIATION=1  configure site1's uplinks that have a JITTER with it as their
#                      delay_variation_ms: their lanes' delay cap allows it
#   ABE_SCHEDULER=dsd  abe.scheduler of both gateways (dsd or fifo)
#   TUN_OFFLOAD=false  tun.offload of both gateways (a packet per TUN read and write);
#                      unset, the key is left out (builds before it refuse it)
#   BACKGROUND_METHOD=binary-search|stochastic-approximation  BACKGROUND_INTERVAL_MS=N
#                      pacing.background_method and _interval_ms of both gateways
#   EXIT_THREADS=N     listen.threads of the exit (its data-path threads); unset,
#                      the key is left out (one per core, at most one per site)
#   PRIORITIES="1 1 2" STANDBY="warm warm cold" OVERFLOW="0 0 1"  site1's uplinks'
#                      priority, standby and overflow (unset: the keys are left out)
#   MAX_RTT_MS="0 100" MAX_LOSS_PERCENT="0 5" CUT_OFF="green all"  site1's uplinks'
#                      quality cut-offs (0 or unset: the key is left out)
#   CAP_MB="0 20" CAP_PERIOD=30s CAP_ACTION=cold  site1's uplinks' data caps, kept
#                      in caps-site1.json (0 or unset: no cap)
#   TIERS_HOLD_MS=N TIERS_OVERFLOW_AFTER_MS=N  [tiers] of both gateways
#   SITE_TO_SITE=0|1   the exit's site_to_site, and each site routes the other's LAN
#                      into its tunnel (unset: neither)
#   EXIT_ADMIN_LISTEN=0.0.0.0:9190  admin.listen of the exit (default 127.0.0.1:9190);
#                      on every address, the entry's namespace reaches it at the
#                      exit's service address (a controller there reads both)
#   EXITS=2            a second exit, ex2, at 198.19.201.1 fd00:19:201::1 behind every
#                      router, serving the same sites and reaching the server too;
#                      site1 lists both ([[exit]], hold_ms EXIT_HOLD_MS, default 30000).
#                      The server's return route stays on the first exit; moving it
#                      is the routing's job (docs/scale-out.md). Rates only: delay and
#                      loss are emulated on the way to the first exit alone
#
# Addresses come from the benchmarking range 198.18.0.0/15 and ULA fd00::/8 only:
#   site1 LAN 198.18.1.0/24 fd00:1::/64, site2 LAN 198.18.2.0/24 fd00:2::/64,
#   server LAN 198.18.100.0/24 fd00:100::/64, uplink i 198.19.i.0/24 fd00:19:i::/64,
#   router i to exit 198.19.(100+i).0/24, exit service address 198.19.200.1 fd00:19:200::1,
#   router i to ex2 198.19.(110+i).0/24, server to ex2 198.18.101.0/24.
set -euo pipefail

cmd=${1:-}
name=${2:-braid}
state=${STATE_DIR:-/tmp/braid-testbed}/$name
read -r -a rates <<<"${RATES:-16 32 50}"
read -r -a priorities <<<"${PRIORITIES:-}"
read -r -a standby <<<"${STANDBY:-}"
read -r -a overflow <<<"${OVERFLOW:-}"
read -r -a max_rtts <<<"${MAX_RTT_MS:-}"
read -r -a max_losses <<<"${MAX_LOSS_PERCENT:-}"
read -r -a cut_offs <<<"${CUT_OFF:-}"
read -r -a caps <<<"${CAP_MB:-}"
uplinks=${UPLINKS:-${#rates[@]}}
read -r -a delays <<<"${DELAYS:-}"
read -r -a losses <<<"${LOSS:-}"
read -r -a jitters <<<"${JITTER:-}"
sites=${SITES:-1}
exits=${EXITS:-1}
if [ "$exits" = 2 ] && [ -n "${DELAYS:-}${LOSS:-}${JITTER:-}" ]; then
    echo "error: EXITS=2 emulates rates only; leave DELAYS, LOSS and JITTER unset" >&2
    exit 2
fi

ns() { echo "$name-$1"; }
inns() { local n; n=$(ns "$1"); shift; ip netns exec "$n" "$@"; }

veth() { # veth NS_A IF_A NS_B IF_B
    ip link add name "$2" netns "$(ns "$1")" type veth peer name "$4" netns "$(ns "$3")"
    inns "$1" ip link set dev "$2" up
    inns "$3" ip link set dev "$4" up
}

addr() { inns "$1" ip addr add "$3" dev "$2" ${4:+nodad}; }

new_ns() {
    ip netns add "$(ns "$1")"
    inns "$1" ip link set lo up
    inns "$1" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 \
        net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
        net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
}

# The uplink's shaping and emulation, applied inside router namespace NS.
uplink() { local n; n=$(ns "$1"); shift; ip netns exec "$n" bash "$(dirname "$0")/uplink.sh" "$@"; }

# exit_link SITE_ENTRY UPLINK_INDEX ROUTER SUBNET ROUTER_DEV EXIT_NS CORE SERVICE: router
# ROUTER's ROUTER_DEV to exit namespace EXIT_NS over 198.19.CORE.0/24, and the routes
# that take uplink SUBNET to the exit's service address 198.19.SERVICE.1 and back.
exit_link() {
    local en=$1 i=$2 r=$3 sub=$4 dev=$5 ex=$6 core=$7 service=$8
    veth "$r" "$dev" "$ex" "u$sub"
    addr "$r" "$dev" "198.19.$core.1/24"; addr "$r" "$dev" "fd00:19:$core::1/64" nodad
    addr "$ex" "u$sub" "198.19.$core.2/24"; addr "$ex" "u$sub" "fd00:19:$core::2/64" nodad
    inns "$r" ip route add "198.19.$service.1/32" via "198.19.$core.2"
    inns "$r" ip -6 route add "fd00:19:$service::1/128" via "fd00:19:$core::2"
    inns "$ex" ip route add "198.19.$sub.0/24" via "198.19.$core.1"
    inns "$ex" ip -6 route add "fd00:19:$sub::/64" via "fd00:19:$core::1"
    # The entry reaches the exit over every uplink: one route per uplink device, so a
    # lane socket bound to that device (SO_BINDTODEVICE) finds its own.
    inns "$en" ip route add "198.19.$service.1/32" via "198.19.$sub.1" dev "up$i" metric "$i"
    inns "$en" ip -6 route add "fd00:19:$service::1/128" via "fd00:19:$sub::1" dev "up$i" metric "$i"
}

router() { # router SITE_ENTRY UPLINK_INDEX ROUTER_NAME SUBNET RATE DELAY LOSS [JITTER]
    local en=$1 i=$2 r=$3 sub=$4 rate=$5 delay=$6 loss=$7 jitter=${8:-0}
    new_ns "$r"
    veth "$en" "up$i" "$r" a
    addr "$en" "up$i" "198.19.$sub.2/24"; addr "$en" "up$i" "fd00:19:$sub::2/64" nodad
    addr "$r" a "198.19.$sub.1/24"; addr "$r" a "fd00:19:$sub::1/64" nodad
    exit_link "$en" "$i" "$r" "$sub" b ex $((100 + sub)) 200
    # The router's far side, for traffic outside the tunnel (benchmarks' background flows).
    inns "$en" ip route add "198.19.$((100 + sub)).0/24" via "198.19.$sub.1" dev "up$i"
    if [ "$exits" = 2 ]; then
        exit_link "$en" "$i" "$r" "$sub" c ex2 $((110 + sub)) 201
        uplink "$r" shape c "$rate"
    fi
    uplink "$r" shape b "$rate"
    uplink "$r" shape a "$rate"
    LINKEMU=${LINKEMU:-$(dirname "${BRAID:-$0}")/braid-linkemu} \
        uplink "$r" emulate a b "$delay" "$loss" "$state/linkemu-$r.log" "$jitter" "$rate"
}

site() { # site CLIENT ENTRY LAN_INDEX
    local cl=$1 en=$2 k=$3
    new_ns "$cl"; new_ns "$en"
    veth "$cl" lan "$en" lan
    addr "$cl" lan "198.18.$k.2/24"; addr "$cl" lan "fd00:$k::2/64" nodad
    addr "$en" lan "198.18.$k.1/24"; addr "$en" lan "fd00:$k::1/64" nodad
    inns "$cl" ip route add default via "198.18.$k.1"
    inns "$cl" ip -6 route add default via "fd00:$k::1"
}

up() {
    down 2>/dev/null || true
    mkdir -p "$state"
    new_ns ex; new_ns sv
    addr ex lo 198.19.200.1/32; addr ex lo fd00:19:200::1/128 nodad
    veth ex srv sv srv
    addr ex srv 198.18.100.1/24; addr ex srv fd00:100::1/64 nodad
    addr sv srv 198.18.100.2/24; addr sv srv fd00:100::2/64 nodad
    inns sv ip route add default via 198.18.100.1
    inns sv ip -6 route add default via fd00:100::1
    if [ "$exits" = 2 ]; then
        # The second exit reaches the server at its usual address over its own link.
        new_ns ex2
        addr ex2 lo 198.19.201.1/32; addr ex2 lo fd00:19:201::1/128 nodad
        veth ex2 srv sv srv2
        addr ex2 srv 198.18.101.1/24; addr ex2 srv fd00:101::1/64 nodad
        addr sv srv2 198.18.101.2/24; addr sv srv2 fd00:101::2/64 nodad
        inns ex2 ip route add 198.18.100.2/32 dev srv
        inns ex2 ip -6 route add fd00:100::2/128 dev srv
    fi
    site cl en 1
    for ((i = 1; i <= uplinks; i++)); do
        router en "$i" "r$i" "$i" "${rates[i - 1]:-0}" "${delays[i - 1]:-0}" "${losses[i - 1]:-0}" \
            "${jitters[i - 1]:-0}"
    done
    if [ "$sites" = 2 ]; then
        site c2 e2 2
        router e2 1 s1 11 0 0 0
    fi
    echo "testbed $name is up ($uplinks uplinks, rates ${rates[*]} Mbit/s)"
}

write_entry_config() { # write_entry_config ENTRY_NS SITE_ID UPLINK_COUNT FILE
    local n=$3
    {
        echo "role = \"entry\""
        echo "site = \"$2\""
        echo "[tun]"
        echo "name = \"braid0\""
        echo "address = [\"198.18.251.1/32\", \"fd00:251::1/128\"]"
        if [ -n "${SITE_TO_SITE:-}" ]; then
            local other=$([ "$2" = site1 ] && echo 2 || echo 1)
            echo "routes = [\"198.18.100.0/24\", \"fd00:100::/64\", \"198.18.$other.0/24\"]"
        else
            echo "routes = [\"198.18.100.0/24\", \"fd00:100::/64\"]"
        fi
        [ -z "${TUN_OFFLOAD:-}" ] || echo "offload = $TUN_OFFLOAD"
        echo "[tls]"
        echo "ca = \"ca.pem\""
        echo "cert = \"$2.pem\""
        echo "key = \"$2.key\""
        if [ "$exits" = 2 ] && [ "$2" = site1 ]; then
            echo "[[exit]]"
            echo "address = \"198.19.200.1:4433\""
            echo "hold_ms = ${EXIT_HOLD_MS:-30000}"
            echo "[[exit]]"
            echo "address = \"198.19.201.1:4433\""
        else
            echo "[exit]"
            echo "address = \"${EXIT_ADDRESS:-198.19.200.1:4433}\""
        fi
        echo "[scheduler]"
        echo "algorithm = \"${SCHEDULER:-afmt}\""
        echo "[admin]"
        echo "listen = \"127.0.0.1:9190\""
        echo "token_file = \"admin.token\""
        echo "[pacing]"
        echo "state_file = \"pacing-$2.json\""
        background_keys
        abe_section
        for ((i = 1; i <= n; i++)); do
            echo "[[uplinks]]"
            echo "name = \"up$i\""
            echo "interface = \"up$i\""
            if [ "${KNOWN_RATES:-0}" = 1 ] && [ "$2" = site1 ] && [ "${rates[i - 1]:-0}" != 0 ]; then
                echo "rate_up_kbps = $((rates[i - 1] * 1000))"
                echo "rate_down_kbps = $((rates[i - 1] * 1000))"
            fi
            if [ "${KNOWN_VARIATION:-0}" = 1 ] && [ "$2" = site1 ] && [ "${jitters[i - 1]:-0}" != 0 ]; then
                echo "delay_variation_ms = ${jitters[i - 1]}"
            fi
            if [ "$2" = site1 ]; then
                [ -z "${priorities[i - 1]:-}" ] || echo "priority = ${priorities[i - 1]}"
                [ -z "${standby[i - 1]:-}" ] || echo "standby = \"${standby[i - 1]}\""
                [ "${overflow[i - 1]:-0}" != 1 ] || echo "overflow = true"
                [ "${max_rtts[i - 1]:-0}" = 0 ] || echo "max_rtt_ms = ${max_rtts[i - 1]}"
                [ "${max_losses[i - 1]:-0}" = 0 ] || echo "max_loss_percent = ${max_losses[i - 1]}"
                [ -z "${cut_offs[i - 1]:-}" ] || echo "cut_off = \"${cut_offs[i - 1]}\""
                if [ "${caps[i - 1]:-0}" != 0 ]; then
                    echo "cap_mb = ${caps[i - 1]}"
                    [ -z "${CAP_PERIOD:-}" ] || echo "cap_period = \"$CAP_PERIOD\""
                    [ -z "${CAP_ACTION:-}" ] || echo "cap_action = \"$CAP_ACTION\""
                fi
            fi
        done
        tiers_section
        if [ "$2" = site1 ] && [ -n "${CAP_MB:-}" ]; then
            echo "[caps]"
            echo "state_file = \"caps-site1.json\""
        fi
    } >"$4"
}

tiers_section() {
    [ -n "${TIERS_HOLD_MS:-}${TIERS_OVERFLOW_AFTER_MS:-}" ] || return 0
    echo "[tiers]"
    [ -z "${TIERS_HOLD_MS:-}" ] || echo "hold_ms = $TIERS_HOLD_MS"
    [ -z "${TIERS_OVERFLOW_AFTER_MS:-}" ] || echo "overflow_after_ms = $TIERS_OVERFLOW_AFTER_MS"
}

background_keys() {
    [ -z "${BACKGROUND_METHOD:-}" ] || echo "background_method = \"$BACKGROUND_METHOD\""
    [ -z "${BACKGROUND_INTERVAL_MS:-}" ] || echo "background_interval_ms = $BACKGROUND_INTERVAL_MS"
    return 0
}

abe_section() {
    echo "[abe]"
    echo "scheduler = \"${ABE_SCHEDULER:-dsd}\""
}

write_exit_config() { # write_exit_config FILE EXIT_NAME
    cat >"$1" <<CONF
role = "exit"
$([ -z "${SITE_TO_SITE:-}" ] || { [ "$SITE_TO_SITE" = 1 ] && echo "site_to_site = true" || echo "site_to_site = false"; })
[tun]
name = "braid0"
address = ["198.18.252.1/32", "fd00:252::1/128"]
$([ -z "${TUN_OFFLOAD:-}" ] || echo "offload = $TUN_OFFLOAD")
[tls]
ca = "ca.pem"
cert = "exit.pem"
key = "exit.key"
[listen]
address = "[::]:4433"
$([ -z "${EXIT_THREADS:-}" ] || echo "threads = $EXIT_THREADS")
[scheduler]
algorithm = "${SCHEDULER:-afmt}"
[admin]
listen = "${EXIT_ADMIN_LISTEN:-127.0.0.1:9190}"
token_file = "admin.token"
[pacing]
state_file = "pacing-$2.json"
$(background_keys)
[[sites]]
id = "site1"
prefixes = ["198.18.1.0/24", "fd00:1::/64"]
[[sites]]
id = "site2"
prefixes = ["198.18.2.0/24", "fd00:2::/64"]
CONF
    abe_section >>"$1"
    tiers_section >>"$1"
}

# How many lanes, of every site and colour, the gateway in namespace ROLE reports up
# (its /healthz; 0 while its admin API is not listening yet or no lane is up).
lanes_up() {
    local n
    n=$(inns "$1" bash -c 'exec 3<>/dev/tcp/127.0.0.1/9190 && printf "GET /healthz HTTP/1.0\r\n\r\n" >&3 && cat <&3' 2>/dev/null |
        sed -n 's/^ok: \([0-9]*\) lanes up.*/\1/p')
    echo "${n:-0}"
}

start() {
    local braid=${BRAID:?set BRAID to the braid binary}
    mkdir -p "$state"
    if [ ! -f "$state/ca.pem" ]; then
        "$braid" cert init "$state" >/dev/null
        for id in exit site1 site2; do "$braid" cert issue --ca "$state" --name "$id" >/dev/null; done
    fi
    # The bearer token of the gateways' admin API (pacing tables).
    [ -f "$state/admin.token" ] || od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$state/admin.token"
    write_exit_config "$state/exit.toml" exit
    write_entry_config en site1 "$uplinks" "$state/site1.toml"
    # Not through inns: $! must be the gateway itself (ip netns exec execs it).
    ip netns exec "$(ns ex)" "$braid" run --config "$state/exit.toml" >>"$state/exit.log" 2>&1 &
    echo $! >"$state/exit.pid"
    if [ "$exits" = 2 ]; then
        write_exit_config "$state/exit2.toml" exit2
        ip netns exec "$(ns ex2)" "$braid" run --config "$state/exit2.toml" >>"$state/exit2.log" 2>&1 &
        echo $! >"$state/exit2.pid"
    fi
    ip netns exec "$(ns en)" "$braid" run --config "$state/site1.toml" >>"$state/site1.log" 2>&1 &
    echo $! >"$state/site1.pid"
    if ip netns list | grep -qw "$(ns e2)"; then
        write_entry_config e2 site2 1 "$state/site2.toml"
        ip netns exec "$(ns e2)" "$braid" run --config "$state/site2.toml" >>"$state/site2.log" 2>&1 &
        echo $! >"$state/site2.pid"
    fi
    # Ready when both ends of every uplink's green and blue lanes are up (a test that
    # starts while one is still connecting sees its handshake; cold standby uplinks
    # are not dialled) and every site's client reaches the server through the tunnel.
    local cold=0 u
    for u in "${standby[@]}"; do [ "$u" != cold ] || cold=$((cold + 1)); done
    local sites_up=("en site1 $((uplinks - cold))"); ip netns list | grep -qw "$(ns e2)" && sites_up+=("e2 site2 1")
    local s entry site n exit_lanes=0
    for s in "${sites_up[@]}"; do
        read -r entry site n <<<"$s"
        exit_lanes=$((exit_lanes + 2 * n))
        for _ in $(seq 100); do
            [ "$(lanes_up "$entry")" -ge $((2 * n)) ] && continue 2
            sleep 0.1
        done
        echo "error: $site has $(lanes_up "$entry") of $((2 * n)) lanes up; see $state/*.log" >&2
        exit 1
    done
    for _ in $(seq 100); do
        [ "$(lanes_up ex)" -ge "$exit_lanes" ] && break
        sleep 0.1
    done
    if [ "$(lanes_up ex)" -lt "$exit_lanes" ]; then
        echo "error: the exit has $(lanes_up ex) of $exit_lanes lanes up; see $state/*.log" >&2
        exit 1
    fi
    local clients=(cl); ip netns list | grep -qw "$(ns c2)" && clients+=(c2)
    for c in "${clients[@]}"; do
        for _ in $(seq 100); do
            inns "$c" ping -c1 -W1 198.18.100.2 >/dev/null 2>&1 && continue 2
            sleep 0.1
        done
        echo "error: $c cannot reach the server through braid; see $state/*.log" >&2
        exit 1
    done
    echo "gateways of $name are up (logs in $state)"
}

down() {
    for pidfile in "$state"/*.pid; do
        [ -f "$pidfile" ] || continue
        kill "$(cat "$pidfile")" 2>/dev/null || true
        rm -f "$pidfile"
    done
    for n in $(ip netns list | awk '{print $1}' | grep "^$name-" || true); do
        # Whatever still runs inside (gateways, linkemu, iperf3) stops with it.
        for pid in $(ip netns pids "$n" 2>/dev/null); do kill "$pid" 2>/dev/null || true; done
    done
    sleep 0.2
    for n in $(ip netns list | awk '{print $1}' | grep "^$name-" || true); do
        for pid in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        ip netns del "$n"
    done
}

deps() {
    local missing=()
    command -v ip >/dev/null || missing+=(iproute2)
    command -v ping >/dev/null || missing+=(iputils-ping)
    command -v iperf3 >/dev/null || missing+=(iperf3)
    command -v tcpdump >/dev/null || missing+=(tcpdump)
    command -v nft >/dev/null || missing+=(nftables)
    command -v sysctl >/dev/null || missing+=(procps)
    command -v python3 >/dev/null || missing+=(python3)
    command -v setpriv >/dev/null || missing+=(util-linux)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

case "$cmd" in
up) up ;;
start) start ;;
down) down; rm -rf "$state" ;;
deps) deps ;;
*) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
