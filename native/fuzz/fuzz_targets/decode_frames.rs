//! `wire::decode_frames` on any bytes, from offset 0 and from the header's offset
//! (`checks::datagram`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::datagram(data);
});
