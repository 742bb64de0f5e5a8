//! `sequenced::decode` on any bytes as a core message (`checks::decode_sequenced`): no panic,
//! a message that reads is made again from its fields, a refusal is one of the four.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::decode_sequenced(data);
});
