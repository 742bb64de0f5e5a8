//! Exon's protocol engine in Rust, twin by twin of the Python sans-I/O core (`a3m/exon/`),
//! which stays the specification (`docs/design.md`, "The native data plane").
//!
//! - `engine`: the shared state and the dispatcher (`state.py`, `protocol.py`);
//! - `sender`, `receiver`, `restarts` (with closing and liveness): the rules;
//! - `recovery`: the per-path loss recovery, RTT, probe timeout, congestion window and
//!   pacing arithmetic (`recovery.py`, `PathRecovery`);
//! - `pacer`: the node-wide pace of first-exchange probes (`pacer.py`);
//! - `records`, `clock`, `config`, `events`, `stats`, `omap`: their data.

pub mod clock;
pub mod config;
pub mod engine;
pub mod events;
pub mod omap;
pub mod pacer;
pub mod receiver;
pub mod records;
pub mod recovery;
pub mod restarts;
pub mod sender;
pub mod stats;

/// The engine's hash maps and sets: aHash (keyed at random per process: peer ids and slots
/// may be chosen by whoever sends us datagrams), not SipHash (several times slower here).
pub type Map<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;
pub type Set<T> = std::collections::HashSet<T, ahash::RandomState>;
