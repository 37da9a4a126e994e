#!/usr/bin/env bash
# What building braid needs beside Rust, installed when missing (Debian and Ubuntu):
# a C++ compiler and cmake to build HiGHS, the controller's solver, libclang for the
# bindings to it, and ccache. Sourced as root by run-tests.sh and demo.sh: it also
# exports the compiler launcher, so that HiGHS is compiled once, not once per cargo
# profile (the suite builds debug, test and release; each takes minutes).
missing=()
command -v c++ >/dev/null || missing+=(g++)
command -v ccache >/dev/null || missing+=(ccache)
command -v cmake >/dev/null || missing+=(cmake)
# libclang itself: libclang-cpp, which some packages bring alone, is not what
# bindgen loads.
compgen -G "/usr/lib/llvm-*/lib/libclang.so*" >/dev/null ||
    compgen -G "/usr/lib/llvm-*/lib/libclang-[0-9]*.so*" >/dev/null ||
    compgen -G "/usr/lib/*/libclang.so*" >/dev/null ||
    compgen -G "/usr/lib/*/libclang-[0-9]*.so*" >/dev/null || missing+=(libclang-dev)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# CMake takes the launcher from these; with the base directory at the root, the
# absolute paths in a compile line become relative, so two profiles' builds of the
# same sources share their objects.
export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=/
