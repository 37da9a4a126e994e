#!/usr/bin/env bash
# braid's demo, as the README's first line runs it: installs what the build and the
# testbed need, builds braid, then runs `braid demo` (three uplinks, both gateways,
# live per-uplink table; Ctrl-C removes everything). Run it as root or with sudo.
set -euo pipefail
# Network namespaces need root: as root go ahead, else re-run through sudo.
source "$(dirname "$0")/as-root.sh"
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "error: cargo not found: install Rust >= 1.88" >&2; exit 1; }
source integration/build-deps.sh
bash integration/testbed.sh deps
cargo build --release --locked --quiet --bin braid
exec target/release/braid demo "$@"
