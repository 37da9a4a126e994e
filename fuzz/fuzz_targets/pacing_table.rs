//! An application table as a controller PUTs it.
#![no_main]

use braid::core::pacing_table::PacingTable;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = PacingTable::parse(data);
});
