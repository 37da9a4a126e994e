#!/usr/bin/env bash
# braid's whole test suite, exactly as CI runs it: formatting, lints, unit and property
# tests, and the end-to-end tests in network namespaces (real TUN, QUIC, TCP, UDP).
# Run it as root or with sudo on Linux with Rust >= 1.88; it installs the tools the
# tests use.
set -euo pipefail
# Network namespaces need root: as root go ahead, else re-run through sudo.
source "$(dirname "$0")/as-root.sh"
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "error: cargo not found: install Rust >= 1.88" >&2; exit 1; }
source integration/build-deps.sh
bash integration/testbed.sh deps
# promtool checks /metrics in the end-to-end tests. It is taken out of Debian's
# prometheus package rather than installed with it, so that no Prometheus server is
# installed or started on the machine running the tests.
if ! command -v promtool >/dev/null; then
    tools=$PWD/target/tools
    if [ ! -x "$tools/promtool" ]; then
        echo "fetching promtool from Debian's prometheus package"
        dl=$(mktemp -d)
        (cd "$dl" && { apt-get download prometheus >/dev/null 2>&1 ||
            { apt-get update -qq && apt-get download prometheus >/dev/null 2>&1; }; })
        dpkg-deb -x "$dl"/prometheus_*.deb "$dl/x"
        install -D "$dl/x/usr/bin/promtool" "$tools/promtool"
        rm -rf "$dl"
    fi
    export PATH="$tools:$PATH"
fi

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings

# The systemd units (gateway and controller): clean under `systemd-analyze verify`
# (the binary this tree builds standing in for /usr/bin/braid) and a sandbox
# exposure of at most 2.5.
command -v systemd-analyze >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null; }
cargo build --locked --quiet
unit_dir=$(mktemp -d)
for unit in braid@.service braid-controller.service; do
    sed "s|/usr/bin/braid|$PWD/target/debug/braid|g" "systemd/$unit" >"$unit_dir/$unit"
    systemd-analyze verify "$unit_dir/$unit"
    (cd systemd && systemd-analyze security --offline=true --threshold=25 "$unit" | tail -n 1)
done
rm -rf "$unit_dir"
# The Debian package: built, installed with dpkg -i, its examples checked, purged.
bash integration/package-check.sh
# The docker-compose testbed: engine, images, a download over every uplink, Prometheus.
bash docker/check.sh
# A short pass of every fuzz target over its seeds and what it finds in 10 s: a
# crash fails the suite (longer runs: integration/fuzz.sh SECONDS).
bash integration/fuzz.sh 10
# A minute's soak: mixed traffic while uplinks flap and the exit restarts; fails on a
# panic, a dead gateway, growth or lost connectivity (an hour: --seconds 3600).
python3 integration/soak.py --braid target/debug/braid --seconds 60 --restart-every 25 \
    --flap-every 3 --out target/soak
# Library, binaries and integration tests; the crate has no doc tests, and their
# empty run would otherwise be the suite's last line.
cargo test --locked --lib --bins --tests
