//! The `braid` command. See README.md.

fn main() -> std::process::ExitCode {
    braid::cli::main()
}
