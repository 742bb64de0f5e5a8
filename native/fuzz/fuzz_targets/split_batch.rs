//! `batch::split` on any bytes as a BATCH body (`checks::split_batch`): no panic, a body that
//! splits is made again from its payloads, a refusal is one of the three.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::split_batch(data);
});
