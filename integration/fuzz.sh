#!/usr/bin/env bash
# Fuzzes every parser that meets outside input (cargo-fuzz, libFuzzer; targets in
# fuzz/fuzz_targets, seed corpora in fuzz/corpus), each for SECONDS, and prints the
# executions and crashes per target. A crash fails the run and leaves its input in
# fuzz/artifacts/TARGET/: turn it into a regression test.
#
#   integration/fuzz.sh [SECONDS] [TARGET ...]     (default 60 s, every target)
#   RUNS=N integration/fuzz.sh 0 TARGET ...        (N executions each, no time limit)
#   SANITIZER=none ...                             (no AddressSanitizer: braid's parsers
#                                                   are safe Rust, and without it the
#                                                   slow targets run twice as fast)
#
# Needs a nightly toolchain (installed with rustup if missing) and cargo-fuzz
# (installed from crates.io if missing). New inputs go to target/fuzz-corpus, so the
# committed seeds stay as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
cargo +nightly --version >/dev/null 2>&1 || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --quiet
if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cd fuzz && cargo +nightly fuzz list)
fi
sanitizer=${SANITIZER:-address}
limits=(-max_total_time="$seconds")
[ -n "${RUNS:-}" ] && limits=(-runs="$RUNS")
(cd fuzz && cargo +nightly fuzz build -O -s "$sanitizer")
printf '%-16s %14s %8s %8s\n' target executions crashes seconds
for t in "${targets[@]}"; do
    work=target/fuzz-corpus/$t
    mkdir -p "$work"
    log=$(mktemp)
    status=0
    started=$(date +%s)
    (cd fuzz && cargo +nightly fuzz run -O -s "$sanitizer" "$t" "../$work" "corpus/$t" -- \
        "${limits[@]}" -print_final_stats=1) >"$log" 2>&1 || status=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
    crashes=$(ls "fuzz/artifacts/$t" 2>/dev/null | wc -l)
    printf '%-16s %14s %8s %8s\n' "$t" "$runs" "$crashes" "$(($(date +%s) - started))"
    if [ "$status" != 0 ]; then
        tail -n 40 "$log" >&2
        echo "error: fuzz target $t failed: its input is in fuzz/artifacts/$t" >&2
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
done
