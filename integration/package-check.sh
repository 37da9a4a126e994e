#!/usr/bin/env bash
# The Debian package as a user gets it: built with cargo-deb (installed into
# target/tools when missing), installed with dpkg -i, checked for what it puts where,
# the gateways' example configurations passed through `braid check-config` once
# certificates exist and the entry's uplink interfaces do (a veth pair in a
# namespace), the controller's through `braid controller --check` once its token
# files do, then purged.
# Run as root; run-tests.sh runs it. On a machine where a braid package is installed
# it does nothing and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=$PWD/target/tools
export PATH="$tools/bin:$PATH"
if ! command -v cargo-deb >/dev/null; then
    echo "installing cargo-deb into target/tools"
    cargo install --quiet --locked --root "$tools" cargo-deb
fi
if dpkg -s braid >/dev/null 2>&1; then
    # A machine running braid from the package: installing and purging another
    # would stop and remove the user's gateway.
    echo "package check: skipped, a braid package is installed on this machine"
    exit 0
fi
cargo deb --locked --quiet >/dev/null
deb=$(ls -t target/debian/braid_*.deb | head -n 1)

ns=braid-pkg
made=(/etc/braid/ca.pem /etc/braid/ca.key /etc/braid/branch-01.pem /etc/braid/branch-01.key
    /etc/braid/exit.pem /etc/braid/exit.key /etc/braid/admin.token /etc/braid/branch-01.token
    /etc/braid/exit.token)
cleanup() {
    ip netns del "$ns" 2>/dev/null || true
    rm -f "${made[@]}"
    dpkg --purge braid >/dev/null 2>&1 || true
}
trap cleanup EXIT
dpkg -i "$deb" >/dev/null

fail() { echo "package check: $*" >&2; exit 1; }
[ -x /usr/bin/braid ] || fail "no /usr/bin/braid"
[ -f /lib/systemd/system/braid@.service ] || fail "no systemd unit"
[ -f /lib/systemd/system/braid-controller.service ] || fail "no controller unit"
[ -f /usr/share/doc/braid/README.md ] || fail "no documentation"
getent passwd braid >/dev/null || fail "no braid user"
[ "$(stat -c %G:%a /etc/braid)" = braid:750 ] || fail "/etc/braid is $(stat -c %G:%a /etc/braid), not braid:750"
dpkg-query -W -f='${Conffiles}\n' braid | grep -q /etc/braid/entry.toml.example ||
    fail "the example configurations are not conffiles"
# Nothing enabled: no instance of the unit is wanted by any target.
! ls /etc/systemd/system/*.wants/braid* >/dev/null 2>&1 || fail "a braid unit is enabled"

# The examples pass check-config once what they name exists.
braid cert init /etc/braid >/dev/null
braid cert issue --ca /etc/braid --name branch-01 >/dev/null
braid cert issue --ca /etc/braid --name exit >/dev/null
od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >/etc/braid/admin.token
ip netns add "$ns"
ip -n "$ns" link add eth1 type veth peer name wwan0
ip netns exec "$ns" braid check-config --config /etc/braid/entry.toml.example
braid check-config --config /etc/braid/exit.toml.example
cp /etc/braid/admin.token /etc/braid/branch-01.token
cp /etc/braid/admin.token /etc/braid/exit.token
braid controller --check --config /etc/braid/controller.toml.example
echo "package check: $(basename "$deb") installs, and its example configurations pass their checks"
