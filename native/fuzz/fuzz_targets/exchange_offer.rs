//! `exchange::Table::offer` on any bytes as a message for lent REQ and REP sockets
//! (`checks::exchange_offer`): no panic, a refusal changes nothing, a FLOW that reads is made
//! again from its fields.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::exchange_offer(data);
});
