//! A sequenced core message's header read (`docs/core-messages.md`): DATA, BATCH and the
//! patterns' own types. Twin of `a3m.core.message.decode_sequenced`, the specification;
//! `tests/native/test_native_sequenced.py` gives both the same inputs and wants the same
//! fields or the same refusal. The first step of a link's data path made native
//! (docs/design.md 1e): what a native delivery must read before it can route a message.
//!
//! The layout: the fixed header (version u16, protocol u8, type u8, remaining length u32),
//! the source and destination tags (u8 length, UTF-8 each), the source and destination
//! incarnations (u64 each), the sequence number (u64), the payload; integers big-endian.

use crate::batch::{BATCH, DATA, PROTO_SOCKET, VERSION};

/// The first of the patterns' own message types (all sequenced).
pub const PATTERN_MIN: u8 = 0x40;

/// Why a message is refused (the Python twin's `ProtocolViolation` texts, after "bad
/// middleware message: "). Every short read and every tag that is not UTF-8 is `CUT_SHORT`,
/// as the twin's `except (IndexError, struct.error, UnicodeDecodeError)` makes it.
pub const CUT_SHORT: &str = "cut short or not UTF-8";
pub const NOT_SEQUENCED: &str = "not a well-formed sequenced message";
pub const EMPTY_TAG: &str = "empty tag";
pub const SEQ_ZERO: &str = "sequence numbers start at 1";

/// A sequenced message read in place: its fields, and its payload as a slice of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequenced<'a> {
    pub mtype: u8,
    pub src_tag: &'a str,
    pub dst_tag: &'a str,
    pub src_inc: u64,
    pub dst_inc: u64,
    pub seq: u64,
    pub payload: &'a [u8],
}

/// A link's head, as `a3m.core.message.data_head` makes it (the tags' length bytes and
/// UTF-8, then the incarnations): what `batch::write_data` takes, and what `decode` reads.
pub fn data_head(src_tag: &str, dst_tag: &str, src_inc: u64, dst_inc: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(2 + src_tag.len() + dst_tag.len() + 16);
    h.push(src_tag.len() as u8);
    h.extend_from_slice(src_tag.as_bytes());
    h.push(dst_tag.len() as u8);
    h.extend_from_slice(dst_tag.as_bytes());
    h.extend_from_slice(&src_inc.to_be_bytes());
    h.extend_from_slice(&dst_inc.to_be_bytes());
    h
}

/// Whether a message of type `t` carries a sequence number.
pub fn is_sequenced(t: u8) -> bool {
    t == DATA || t == BATCH || t >= PATTERN_MIN
}

fn u64_at(d: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[at..at + 8]);
    u64::from_be_bytes(b)
}

/// Read a sequenced message, checking what the twin checks, in its order (so that a message
/// wrong in two ways gets the same refusal from both). Nothing is allocated.
pub fn decode(d: &[u8]) -> Result<Sequenced<'_>, &'static str> {
    if d.len() < 8 {
        return Err(CUT_SHORT);
    }
    let version = u16::from_be_bytes([d[0], d[1]]);
    let remaining = u32::from_be_bytes([d[4], d[5], d[6], d[7]]) as usize;
    if version != VERSION || d[2] != PROTO_SOCKET || remaining != d.len() - 8 || !is_sequenced(d[3]) {
        return Err(NOT_SEQUENCED);
    }
    let ls = *d.get(8).ok_or(CUT_SHORT)? as usize;
    let end_src = 9 + ls;
    let ld = *d.get(end_src).ok_or(CUT_SHORT)? as usize;
    let end_dst = end_src + 1 + ld;
    if ls == 0 || ld == 0 {
        return Err(EMPTY_TAG);
    }
    // (the source tag lies wholly before its length byte's successor, read above; the
    // destination tag may run past the end: the twin's slice stops there, and a tag cut so
    // is still decoded before the incarnations are found missing)
    let src_tag = std::str::from_utf8(&d[9..end_src]).map_err(|_| CUT_SHORT)?;
    let dst_tag = std::str::from_utf8(&d[end_src + 1..end_dst.min(d.len())]).map_err(|_| CUT_SHORT)?;
    if d.len() < end_dst + 24 {
        return Err(CUT_SHORT);
    }
    let seq = u64_at(d, end_dst + 16);
    if seq == 0 {
        return Err(SEQ_ZERO);
    }
    Ok(Sequenced {
        mtype: d[3],
        src_tag,
        dst_tag,
        src_inc: u64_at(d, end_dst),
        dst_inc: u64_at(d, end_dst + 8),
        seq,
        payload: &d[end_dst + 24..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{data_len, write_data};

    fn data(src: &str, dst: &str, seq: u64, payload: &[u8]) -> Vec<u8> {
        let h = data_head(src, dst, 7, u64::MAX);
        let mut out = vec![0u8; data_len(h.len(), payload.len()).unwrap()];
        write_data(&mut out, &h, seq, payload);
        out
    }

    #[test]
    fn a_data_message_reads_back_its_fields() {
        let m = data("req", "réponse", 42, b"payload");
        let got = decode(&m).unwrap();
        assert_eq!(got, Sequenced { mtype: DATA, src_tag: "req", dst_tag: "réponse", src_inc: 7, dst_inc: u64::MAX, seq: 42, payload: b"payload" });
        let empty = data("a", "b", 1, b"");
        assert_eq!(decode(&empty).unwrap().payload, b"");
    }

    #[test]
    fn each_refusal_in_the_twins_order() {
        let m = data("src", "dst", 1, b"xy");
        assert_eq!(decode(&m[..7]), Err(CUT_SHORT));
        let mut bad = m.clone();
        bad[3] = 0x03; // LINK: not sequenced
        assert_eq!(decode(&bad), Err(NOT_SEQUENCED));
        bad[3] = PATTERN_MIN;
        assert!(decode(&bad).is_ok());
        let mut bad = m.clone();
        bad[7] ^= 1; // the remaining length wrong
        assert_eq!(decode(&bad), Err(NOT_SEQUENCED));
        let mut bad = m.clone();
        bad[8] = 0; // an empty source tag: its "length byte" is then the destination's
        assert_eq!(decode(&bad), Err(EMPTY_TAG));
        let mut bad = m.clone();
        bad[9] = 0xff; // not UTF-8
        assert_eq!(decode(&bad), Err(CUT_SHORT));
        let mut zero = data("src", "dst", 1, b"xy");
        let at = zero.len() - 2 - 8;
        zero[at + 7] = 0;
        assert_eq!(decode(&zero), Err(SEQ_ZERO));
    }

    #[test]
    fn a_message_cut_anywhere_is_refused_never_read_past_its_end() {
        let m = data("a-tag", "another", 9, b"0123456789");
        for n in 0..m.len() - 10 {  // (cut within the payload, it is a shorter message)
            let mut cut = m[..n].to_vec();
            if n >= 8 {
                cut[4..8].copy_from_slice(&((n - 8) as u32).to_be_bytes()); // a consistent length
            }
            assert!(decode(&cut).is_err(), "{n} bytes read");
        }
    }
}
