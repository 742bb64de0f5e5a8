//! `aead::Cipher::open` with a fixed key on any bytes (`checks::open`): no panic at any
//! length, and what opens seals back to the same datagram.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::open(data);
});
