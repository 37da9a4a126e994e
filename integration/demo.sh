#!/usr/bin/env bash
# braid's demo, as the README's first line runs it: installs what the testbed needs,
# then runs `braid demo` (three uplinks, both gateways, live per-uplink table; Ctrl-C
# removes everything). Run it after `cargo build --release`, as root or with sudo.
set -euo pipefail
# Network namespaces need root: as root go ahead, else re-run through sudo.
source "$(dirname "$0")/as-root.sh"
cd "$(dirname "$0")/.."
bash integration/testbed.sh deps
exec target/release/braid demo "$@"
