# Sourced at the top of the scripts a user runs (run-tests.sh, demo.sh): re-runs the
# script as root, directly when already root (CI, a root shell without sudo), else
# through sudo, keeping the user's PATH and Rust toolchain so that cargo is found.
if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null; then
        echo "error: $0 builds network namespaces: run it as root" >&2
        exit 1
    fi
    exec sudo env "PATH=$PATH" "RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}" \
        "CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}" bash "$0" "$@"
fi
