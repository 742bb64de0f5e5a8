//! `wire::decode_header` on any bytes (`checks::header`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::header(data);
});
