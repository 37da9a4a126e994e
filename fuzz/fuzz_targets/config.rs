//! A gateway's configuration file.
#![no_main]

use std::path::Path;

use braid::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Config::parse(text, Path::new("/nonexistent"));
    }
});
