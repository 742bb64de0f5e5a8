//! A3M's native data plane: the per-datagram work under the Python front.
//!
//! The pure-Rust core (`wire`, `aead`, `udp`) is what `cargo test` and the fuzz targets use;
//! the `python` feature adds the bindings (`python`), the module `a3m._native`. Every native
//! function has a Python twin that stays the specification (`docs/design.md`, "The native
//! data plane"); `unsafe` appears only at system calls and in the allocation counter's hook
//! over the interpreter's allocators (`python_alloc`, a measuring tool with no twin), each
//! with its reason.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod aead;
pub mod batch;
pub mod exon;
pub mod cookie_keys;
pub mod exchange;
pub mod meter;
pub mod order_lock;
pub mod poll_choice;
pub mod replay;
pub mod sequenced;
pub mod udp;
pub mod wire;

#[cfg(feature = "python")]
pub mod python;
#[cfg(feature = "python")]
pub mod python_engine;
#[cfg(feature = "python")]
pub mod python_exchange;
#[cfg(feature = "python")]
pub mod python_alloc;
#[cfg(feature = "python")]
pub mod python_batch;
#[cfg(feature = "python")]
pub mod python_io;
#[cfg(feature = "python")]
mod python_loop;
#[cfg(feature = "python")]
pub mod python_sendbuf;
#[cfg(feature = "python")]
pub mod python_session;
#[cfg(feature = "python")]
pub mod python_meter;
#[cfg(feature = "python")]
pub mod python_cookie_keys;
#[cfg(feature = "python")]
pub mod python_poll;
#[cfg(feature = "python")]
pub mod python_recovery;
