//! The pure core of braid: packet parsing, scheduling and the data path state machine.
//!
//! Nothing in here performs I/O, reads a clock, spawns tasks or talks to quinn; time
//! comes in as [`time::Instant`] arguments. A test below enforces the boundary.

pub mod apps;
pub mod engine;
pub mod flow;
pub mod icmp;
pub mod lane;
pub mod lane_cc;
pub mod pacer;
pub mod pacing;
pub mod packet;
pub mod route;
pub mod sched;
pub mod stats;
pub mod time;
pub mod wire;

#[cfg(test)]
mod purity {
    /// The core must not depend on the I/O shell's crates or on the clock.
    #[test]
    fn core_imports_no_io() {
        let forbidden = [
            "tokio::",
            "use tokio",
            "quinn::",
            "use quinn",
            "std::net::Udp",
            "std::net::Tcp",
            "std::fs",
            "Instant::now",
            "SystemTime",
            "prometheus::",
        ];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
        let mut files = vec![dir];
        while let Some(path) = files.pop() {
            if path.is_dir() {
                for entry in std::fs::read_dir(&path).expect("read src/core") {
                    files.push(entry.expect("dir entry").path());
                }
                continue;
            }
            if path.file_name().is_some_and(|n| n == "mod.rs") && path.ends_with("core/mod.rs") {
                continue; // this test names the forbidden words
            }
            let text = std::fs::read_to_string(&path).expect("read source");
            for word in forbidden {
                assert!(!text.contains(word), "{} uses {word}", path.display());
            }
        }
    }
}
