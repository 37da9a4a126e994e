#!/usr/bin/env bash
# What building braid needs beside Rust, installed when missing (Debian and Ubuntu):
# a C++ compiler and cmake to build HiGHS, the controller's solver, and libclang for
# the bindings to it. Run as root; run-tests.sh and demo.sh call it.
set -euo pipefail
missing=()
command -v c++ >/dev/null || missing+=(g++)
command -v cmake >/dev/null || missing+=(cmake)
compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null ||
    compgen -G "/usr/lib/*/libclang*.so*" >/dev/null || missing+=(libclang-dev)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
