//! What every input must satisfy, shared by the fuzz targets (`fuzz_targets/*.rs`) and the
//! corpus replay (`native/tests/corpus_replay.rs`, `#[path]`-included): a check fails by
//! panicking, which the fuzzer reports as a crash and `cargo test` as a failure.
//!
//! - `decode_header`: never panics; on success the ids are the bytes the lengths say, non
//!   empty, and the offset is right after them; an error is "truncated" or "malformed".
//! - `decode_frames`: never panics, from offset 0 and from the header's offset, at two
//!   message-size bounds; error kinds as above; the frames lie back to back from the offset
//!   (TOKEN and ACK, which the crate encodes, re-encode to exactly their bytes; the others
//!   are their fixed size and start with their type); without an error they end the buffer.
//! - `aead_open`: never panics, whatever the length; what opens seals back to the same bytes;
//!   the same bytes as an INITIATE (`cookie_keys`): never panics, never a cookie that opens.
//! - `split_batch`: never panics; a body that splits is made again, byte for byte, from its
//!   payloads; a refusal is one of the three of `batch`.
//! - `decode_sequenced`: never panics; a message that reads is made again, byte for byte,
//!   from its fields (its tags, incarnations, type, sequence number and payload); a refusal is
//!   one of the four of `sequenced`.
//! - `exchange_offer`: a core message offered to lent REQ and REP sockets (`exchange::Table`):
//!   never panics; one not taken leaves the table unchanged; a FLOW that reads is made again,
//!   byte for byte, from its fields.

#![allow(dead_code)]

use a3m_native::aead::{self, Cipher};
use a3m_native::cookie_keys::{self, Check, CookieKeys};
use a3m_native::batch;
use a3m_native::exchange::{self, Lent, Row, Table, REP, REQ};
use a3m_native::sequenced;
use a3m_native::wire::{self, Frame, WireError};

/// The message-size bounds each datagram is decoded at (as the Python replay does).
pub const MAX_MESSAGE_SIZES: [u64; 2] = [1 << 20, u64::MAX];
/// The key of the `aead_open` target and its corpus.
pub const KEY: [u8; 32] = [0x42; 32];

fn check_error(e: &WireError) {
    assert!(e.kind == "truncated" || e.kind == "malformed", "error kind {:?}", e.kind);
    assert!(!e.detail.is_empty());
}

/// The checks of `decode_header` on `data`; the frames' offset when it decodes.
pub fn header(data: &[u8]) -> Option<usize> {
    match wire::decode_header(data) {
        Ok((src, dst, offset)) => {
            let ls = data[2] as usize;
            let ld = data[3 + ls] as usize;
            assert!(data[0] == wire::VERSION && data[1] == wire::PLAIN);
            assert_eq!((src.len(), dst.len()), (ls, ld));
            assert!(ls > 0 && ld > 0);
            assert_eq!(src, &data[3..3 + ls]);
            assert_eq!(dst, &data[4 + ls..4 + ls + ld]);
            assert_eq!(offset, 4 + ls + ld);
            assert!(offset <= data.len());
            Some(offset)
        }
        Err(e) => {
            check_error(&e);
            None
        }
    }
}

/// The bytes one decoded frame occupied, made again (TOKEN and ACK by the crate's encoders;
/// the others are checked by size and type byte only: None).
fn encoded(frame: &Frame<'_>) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match frame {
        Frame::Token { s, r, payload, index, count, total, flags } => {
            let fragment =
                (flags & wire::FLAG_FRAGMENT != 0).then_some((*index, *count, *total));
            if fragment.is_none() {
                assert_eq!((*index, *count, *total as usize), (0, 1, payload.len()));
            }
            wire::encode_token(&mut out, *s, *r, payload, fragment, flags & wire::FLAG_RETRANSMIT != 0);
        }
        Frame::Ack { r, ranges, copies } => {
            assert!(!ranges.is_empty());
            wire::encode_ack(&mut out, *r, ranges, copies.as_deref());
        }
        _ => return None,
    }
    Some(out)
}

fn fixed_size(frame: &Frame<'_>) -> (u8, usize) {
    match frame {
        Frame::ReqSlots { .. } => (wire::REQSLOTS, 22),
        Frame::Slots { .. } => (wire::SLOTS, 26),
        Frame::Void { .. } => (wire::VOID, 9),
        Frame::Revoke { .. } => (wire::REVOKE, 9),
        Frame::Revoked { .. } => (wire::REVOKED, 13),
        Frame::Token { .. } | Frame::Ack { .. } => unreachable!(),
    }
}

/// The checks of `decode_frames` on `data` from `offset`.
pub fn frames_at(data: &[u8], offset: usize, max_message_size: u64) {
    let (frames, err) = wire::decode_frames(data, offset, max_message_size);
    if let Some(e) = &err {
        check_error(e);
    }
    if offset >= data.len() {
        assert!(frames.is_empty() && err.as_ref().is_some_and(|e| e.detail == "no frame"));
        return;
    }
    let mut at = offset;
    for frame in &frames {
        match encoded(frame) {
            Some(bytes) => {
                assert!(at + bytes.len() <= data.len(), "a frame past the end");
                assert_eq!(&data[at..at + bytes.len()], &bytes[..], "a frame that does not re-encode");
                at += bytes.len();
            }
            None => {
                let (kind, size) = fixed_size(frame);
                assert!(at + size <= data.len() && data[at] == kind);
                at += size;
            }
        }
    }
    if err.is_none() {
        assert_eq!(at, data.len(), "frames do not end the datagram");
    } else {
        assert!(at < data.len(), "an error after the last byte");
    }
}

/// Every check of the codec on one datagram: the header, then the frames from offset 0 and
/// from the header's offset, at each bound.
pub fn datagram(data: &[u8]) {
    let offset = header(data);
    for mms in MAX_MESSAGE_SIZES {
        frames_at(data, 0, mms);
        if let Some(off) = offset {
            frames_at(data, off, mms);
        }
    }
}

/// The checks of `Cipher::open` (key `KEY`) on `data`; the plaintext when it opens.
pub fn open(data: &[u8]) -> Option<Vec<u8>> {
    initiate(data);
    let c = Cipher::new(&KEY).expect("a 32-byte key");
    // A wrong-sized output never opens and never panics.
    assert!(!c.open(data, &mut vec![0u8; data.len() + 1]));
    if data.len() < aead::OVERHEAD {
        assert!(!c.open(data, &mut []));
        return None;
    }
    let mut plain = vec![0u8; data.len() - aead::OVERHEAD];
    if !c.open(data, &mut plain) {
        return None;
    }
    // What opens seals back to the very datagram (the header fields, the counter as nonce).
    let mut again = vec![0u8; data.len()];
    c.seal(&mut again, data[0], data[1], aead::index_of(data), aead::counter_of(data), &plain);
    assert_eq!(again, data, "an opened datagram that does not seal back");
    Some(plain)
}

/// The native reads' check of an INITIATE (`cookie_keys`) on `data`, under secrets of the
/// epochs its cookie may name: never panics, whatever the length; a datagram shorter than an
/// INITIATE is truncated; no input forges a cookie (nothing opens that the key did not seal).
/// The same input as a HELLO: a RETRY only for a token-less HELLO of its size, never a panic.
pub fn initiate(data: &[u8]) {
    let mut keys = CookieKeys::default();
    keys.set(&[(0, KEY.to_vec()), (1, vec![0x43; 32]), (2, vec![0x44; 31])], 0.5, 60.0);
    let from: std::net::SocketAddr = "192.0.2.1:9".parse().expect("an address");
    match keys.check_initiate(data, &from, 1.0) {
        None => assert!(data.len() < cookie_keys::INITIATE_MIN),
        Some(c) => {
            assert!(data.len() >= cookie_keys::INITIATE_MIN);
            assert_eq!(c, Check::Invalid, "a forged cookie that checks out");
        }
    }
    assert_eq!(keys.check(data, b"", 1.0), Check::Invalid, "a forged cookie that opens");
    match keys.retry(data, &from, 1.0) {
        Some(r) => {
            assert!(a3m_native::meter::is_plain_hello(data), "a RETRY to no token-less HELLO");
            assert_eq!(r.len(), 6 + cookie_keys::TOKEN_BYTES);
            assert_eq!(&r[2..6], &data[35..39], "a RETRY for another index");
        }
        None => assert!(!a3m_native::meter::is_plain_hello(data), "a HELLO left unanswered"),
    }
}

/// The checks of `batch::split` on `data` (a BATCH body); the payloads' count when it splits.
pub fn split_batch(data: &[u8]) -> Option<usize> {
    match batch::split(data) {
        Ok(parts) => {
            assert!(!parts.is_empty());
            // the body is the message less its fixed header (8) and sequence number (8)
            let again = batch::encode_batch(b"", 0, &parts).expect("a body that split fits");
            assert_eq!(&again[16..], data, "a split body made again differs");
            Some(parts.len())
        }
        Err(why) => {
            assert!([batch::CUT_SHORT, batch::COUNT_DOES_NOT_FIT, batch::LENGTHS_DO_NOT_MATCH]
                .contains(&why));
            None
        }
    }
}

/// The checks of `sequenced::decode` on `data`; whether it read.
pub fn decode_sequenced(data: &[u8]) -> bool {
    match sequenced::decode(data) {
        Ok(m) => {
            assert!(!m.src_tag.is_empty() && !m.dst_tag.is_empty() && m.seq != 0);
            assert!(sequenced::is_sequenced(m.mtype));
            let head = sequenced::data_head(m.src_tag, m.dst_tag, m.src_inc, m.dst_inc);
            let mut again = vec![0u8; batch::data_len(head.len(), m.payload.len()).expect("it fit")];
            batch::write_data(&mut again, &head, m.seq, m.payload);
            again[3] = m.mtype;
            assert_eq!(again, data, "a message read is made again differently");
            true
        }
        Err(why) => {
            assert!([sequenced::CUT_SHORT, sequenced::NOT_SEQUENCED, sequenced::EMPTY_TAG, sequenced::SEQ_ZERO]
                .contains(&why));
            false
        }
    }
}

/// A table with a REP (`rep`, linked to `n/req` and `m/req`) and a REQ (`req`, its request 5
/// outstanding to `n/rep`) lent: what `exchange_offer` offers its input to.
pub fn exchange_table() -> Table {
    let row = |node: &str, tag: &str, me: &str| Row {
        limit: 64,
        ..Row::established(node, tag, me, 7, 9, 8, 2)
    };
    let mut t = Table::default();
    t.socks.insert("rep".into(), Lent::new(REP, vec![row("n", "req", "rep"), row("m", "req", "rep")], 5.0, 1 << 20));
    let mut req = Lent::new(REQ, vec![row("n", "rep", "req")], 5.0, 1 << 20);
    req.owed = Some((0, 5));
    t.socks.insert("req".into(), req);
    t
}

/// The checks of an exchange's `offer` (and `decode_flow`) on `data`; whether it was taken.
pub fn exchange_offer(data: &[u8]) -> bool {
    if let Some((src, dst, src_inc, dst_inc, flow_seq, edge)) = exchange::decode_flow(data) {
        let again = exchange::flow_message(&sequenced::data_head(src, dst, src_inc, dst_inc), flow_seq as u32, edge);
        assert_eq!(again, data, "a FLOW read is made again differently");
    }
    let mut taken = false;
    for node in ["n", "m"] {
        let mut t = exchange_table();
        let before = t.socks.clone();
        if t.offer(node, data, 1.0) {
            taken = true;
        } else {
            assert_eq!(t.socks, before, "a refused offer changed the table");
        }
    }
    taken
}
