//! Exon's datagram codec: the header and the frames (byte layout in `docs/exon-wire.md`).
//!
//! The twin of `a3m/exon/wire.py` (`decode_header`, `decode_frames`): the same frames from the
//! same bytes, the same error kind and detail for the same damage, checked by
//! `tests/native/test_native_wire.py` over golden vectors, random and malformed datagrams.
//! Decoding never panics and never reads past the buffer (fuzzed: `native/fuzz`).

/// Wire version (`a3m.exon.wire.VERSION`).
pub const VERSION: u8 = 5;
/// The datagram type of an Exon datagram in clear.
pub const PLAIN: u8 = 0x00;

pub const REQSLOTS: u8 = 0x01;
pub const SLOTS: u8 = 0x02;
pub const TOKEN: u8 = 0x03;
pub const ACK: u8 = 0x04;
pub const VOID: u8 = 0x05;
pub const REVOKE: u8 = 0x06;
pub const REVOKED: u8 = 0x07;

pub const FLAG_FRAGMENT: u8 = 0x01;
pub const FLAG_RETRANSMIT: u8 = 0x02;
pub const TOKEN_FLAGS: u8 = FLAG_FRAGMENT | FLAG_RETRANSMIT;
pub const ACK_ARRIVALS: u8 = 0x01;

const REQSLOTS_SIZE: usize = 22; // >BQIQB
const SLOTS_SIZE: usize = 26; // >BQQIIB
const TOKEN_SIZE: usize = 20; // >BBQQH
const TOKEN_FRAG_SIZE: usize = 32; // >BBQQHIII
const ACK_SIZE: usize = 12; // >BBQH
const COUNT_SIZE: usize = 2; // >H
const RANGE_SIZE: usize = 12; // >QI
const VOID_SIZE: usize = 9; // >BQ
const REVOKED_SIZE: usize = 13; // >BQI

/// Why a datagram could not be decoded: `kind` is "truncated" or "malformed" (the Python
/// `WireError.kind`), `detail` the same words as the Python codec's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError {
    pub kind: &'static str,
    pub detail: String,
}

impl WireError {
    fn truncated(detail: &str) -> Self {
        WireError { kind: "truncated", detail: detail.to_string() }
    }
    fn malformed(detail: impl Into<String>) -> Self {
        WireError { kind: "malformed", detail: detail.into() }
    }
}

/// A decoded frame; payloads borrow the datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    ReqSlots { s: u64, n: u32, low: u64, copy: u8 },
    Slots { s: u64, r: u64, n: u32, ack_delay_us: u32, echo: u8 },
    /// Unfragmented: index 0, count 1, total = the payload's length.
    Token { s: u64, r: u64, payload: &'a [u8], index: u32, count: u32, total: u32, flags: u8 },
    /// `copies`: the ranges where a copy sent again arrived (flag ARRIVALS), None: not known.
    Ack { r: u64, ranges: Vec<(u64, u32)>, copies: Option<Vec<(u64, u32)>> },
    Void { r: u64 },
    Revoke { r: u64 },
    Revoked { r: u64, held: u32 },
}

#[inline]
fn be_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
fn be_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(a)
}

#[inline]
fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// `(source id, destination id, offset of the first frame)` of an Exon datagram in clear.
pub fn decode_header(data: &[u8]) -> Result<(&[u8], &[u8], usize), WireError> {
    let n = data.len();
    if n < 4 {
        return Err(WireError::truncated("shorter than the smallest header"));
    }
    if data[0] != VERSION {
        return Err(WireError::malformed(format!("unknown version {}", data[0])));
    }
    if data[1] != PLAIN {
        return Err(WireError::malformed(format!(
            "datagram type {} is not an Exon datagram",
            data[1]
        )));
    }
    let ls = data[2] as usize;
    let end_src = 3 + ls;
    if n < end_src + 1 {
        return Err(WireError::truncated("source id cut short"));
    }
    let ld = data[end_src] as usize;
    let end_dst = end_src + 1 + ld;
    if n < end_dst {
        return Err(WireError::truncated("destination id cut short"));
    }
    if ls == 0 || ld == 0 {
        return Err(WireError::malformed("empty node id"));
    }
    Ok((&data[3..end_src], &data[end_src + 1..end_dst], end_dst))
}

fn cut_short() -> WireError {
    WireError::truncated("frame cut short")
}

/// Decode the frames from `offset` on: the frames decoded before any error, and the error (a
/// datagram whose tail is damaged still yields its intact leading frames).
pub fn decode_frames(
    buf: &[u8],
    mut offset: usize,
    max_message_size: u64,
) -> (Vec<Frame<'_>>, Option<WireError>) {
    let mut frames = Vec::new();
    let n = buf.len();
    if offset >= n {
        return (frames, Some(WireError::malformed("no frame")));
    }
    while offset < n {
        match decode_one(buf, offset, max_message_size) {
            Ok((frame, next)) => {
                frames.push(frame);
                offset = next;
            }
            Err(e) => return (frames, Some(e)),
        }
    }
    (frames, None)
}

/// One frame at `offset` (< buf.len()) and the offset after it.
fn decode_one(buf: &[u8], offset: usize, max_message_size: u64) -> Result<(Frame<'_>, usize), WireError> {
    let n = buf.len();
    let left = n - offset;
    let kind = buf[offset];
    match kind {
        TOKEN => {
            let (flags, s, r, length, index, count, total, mut at);
            if left >= TOKEN_FRAG_SIZE && buf[offset + 1] & FLAG_FRAGMENT != 0 {
                flags = buf[offset + 1];
                s = be_u64(buf, offset + 2);
                r = be_u64(buf, offset + 10);
                length = be_u16(buf, offset + 18) as usize;
                index = be_u32(buf, offset + 20);
                count = be_u32(buf, offset + 24);
                total = be_u32(buf, offset + 28);
                at = offset + TOKEN_FRAG_SIZE;
            } else {
                if left < TOKEN_SIZE {
                    return Err(cut_short());
                }
                flags = buf[offset + 1];
                s = be_u64(buf, offset + 2);
                r = be_u64(buf, offset + 10);
                length = be_u16(buf, offset + 18) as usize;
                at = offset + TOKEN_SIZE;
                if flags & FLAG_FRAGMENT != 0 && flags & !TOKEN_FLAGS == 0 {
                    return Err(WireError::truncated("fragment fields cut short"));
                }
                index = 0;
                count = 1;
                total = length as u32;
            }
            if flags & !TOKEN_FLAGS != 0 {
                return Err(WireError::malformed(format!("unknown token flags {flags:#x}")));
            }
            if flags & FLAG_FRAGMENT != 0
                && !(index < count
                    && 2 <= count
                    && count <= total
                    && (total as u64) <= max_message_size
                    && (length as u64) <= total as u64)
            {
                return Err(WireError::malformed("inconsistent fragment fields"));
            }
            let end = at + length;
            if end > n {
                return Err(WireError::truncated("token payload cut short"));
            }
            let payload = &buf[at..end];
            at = end;
            Ok((Frame::Token { s, r, payload, index, count, total, flags }, at))
        }
        ACK => {
            if left < ACK_SIZE {
                return Err(cut_short());
            }
            let flags = buf[offset + 1];
            let r = be_u64(buf, offset + 2);
            let mut k = be_u16(buf, offset + 10) as usize;
            let mut at = offset + ACK_SIZE;
            if k == 0 {
                return Err(WireError::malformed("ack without ranges"));
            }
            if flags & !ACK_ARRIVALS != 0 {
                return Err(WireError::malformed(format!("unknown ack flags {flags:#x}")));
            }
            let mut c: Option<usize> = None;
            if flags != 0 {
                if n - at < COUNT_SIZE {
                    return Err(cut_short());
                }
                let cc = be_u16(buf, at) as usize;
                at += COUNT_SIZE;
                k += cc;
                c = Some(cc);
            }
            if at + k * RANGE_SIZE > n {
                return Err(WireError::truncated("ack ranges cut short"));
            }
            let mut all: Vec<(u64, u32)> = Vec::with_capacity(k);
            for i in 0..k {
                let p = at + i * RANGE_SIZE;
                all.push((be_u64(buf, p), be_u32(buf, p + 8)));
            }
            at += k * RANGE_SIZE;
            for &(first, count) in &all {
                if count == 0 || first.checked_add(count as u64).is_none() {
                    return Err(WireError::malformed("empty or overflowing ack range"));
                }
            }
            match c {
                None => Ok((Frame::Ack { r, ranges: all, copies: None }, at)),
                Some(cc) => {
                    let copies = all.split_off(k - cc);
                    Ok((Frame::Ack { r, ranges: all, copies: Some(copies) }, at))
                }
            }
        }
        REQSLOTS => {
            if left < REQSLOTS_SIZE {
                return Err(cut_short());
            }
            let s = be_u64(buf, offset + 1);
            let count = be_u32(buf, offset + 9);
            let low = be_u64(buf, offset + 13);
            let copy = buf[offset + 21];
            if s.checked_add(count as u64).is_none() {
                return Err(WireError::malformed("slot range overflows"));
            }
            Ok((Frame::ReqSlots { s, n: count, low, copy }, offset + REQSLOTS_SIZE))
        }
        SLOTS => {
            if left < SLOTS_SIZE {
                return Err(cut_short());
            }
            let s = be_u64(buf, offset + 1);
            let r = be_u64(buf, offset + 9);
            let count = be_u32(buf, offset + 17);
            let ack_delay_us = be_u32(buf, offset + 21);
            let echo = buf[offset + 25];
            if s.checked_add(count as u64).is_none() {
                return Err(WireError::malformed("slot range overflows"));
            }
            Ok((Frame::Slots { s, r, n: count, ack_delay_us, echo }, offset + SLOTS_SIZE))
        }
        VOID | REVOKE => {
            if left < VOID_SIZE {
                return Err(cut_short());
            }
            let r = be_u64(buf, offset + 1);
            let f = if kind == VOID { Frame::Void { r } } else { Frame::Revoke { r } };
            Ok((f, offset + VOID_SIZE))
        }
        REVOKED => {
            if left < REVOKED_SIZE {
                return Err(cut_short());
            }
            let r = be_u64(buf, offset + 1);
            let held = be_u32(buf, offset + 9);
            Ok((Frame::Revoked { r, held }, offset + REVOKED_SIZE))
        }
        _ => Err(WireError::malformed(format!("unknown frame type {kind:#x}"))),
    }
}

/// Encode a TOKEN frame into `out` (the twin of `wire.encode_token`).
pub fn encode_token(
    out: &mut Vec<u8>,
    s: u64,
    r: u64,
    payload: &[u8],
    fragment: Option<(u32, u32, u32)>,
    retransmit: bool,
) {
    let mut flags = if retransmit { FLAG_RETRANSMIT } else { 0 };
    if fragment.is_some() {
        flags |= FLAG_FRAGMENT;
    }
    out.push(TOKEN);
    out.push(flags);
    out.extend_from_slice(&s.to_be_bytes());
    out.extend_from_slice(&r.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    if let Some((index, count, total)) = fragment {
        out.extend_from_slice(&index.to_be_bytes());
        out.extend_from_slice(&count.to_be_bytes());
        out.extend_from_slice(&total.to_be_bytes());
    }
    out.extend_from_slice(payload);
}

/// Encode an ACK frame into `out` (the twin of `wire.encode_ack`).
pub fn encode_ack(out: &mut Vec<u8>, r: u64, ranges: &[(u64, u32)], copies: Option<&[(u64, u32)]>) {
    out.push(ACK);
    out.push(if copies.is_some() { ACK_ARRIVALS } else { 0 });
    out.extend_from_slice(&r.to_be_bytes());
    out.extend_from_slice(&(ranges.len() as u16).to_be_bytes());
    if let Some(c) = copies {
        out.extend_from_slice(&(c.len() as u16).to_be_bytes());
    }
    for &(first, count) in ranges.iter().chain(copies.unwrap_or(&[]).iter()) {
        out.extend_from_slice(&first.to_be_bytes());
        out.extend_from_slice(&count.to_be_bytes());
    }
}

/// REQSLOTS(s, n, l, copy).
pub fn reqslots(s: u64, n: u32, low: u64, copy: u8) -> Vec<u8> {
    let mut o = Vec::with_capacity(22);
    o.push(REQSLOTS);
    o.extend_from_slice(&s.to_be_bytes());
    o.extend_from_slice(&n.to_be_bytes());
    o.extend_from_slice(&low.to_be_bytes());
    o.push(copy);
    o
}

/// SLOTS(s, r, n, ack delay, echo).
pub fn slots(s: u64, r: u64, n: u32, ack_delay_us: u32, echo: u8) -> Vec<u8> {
    let mut o = Vec::with_capacity(26);
    o.push(SLOTS);
    o.extend_from_slice(&s.to_be_bytes());
    o.extend_from_slice(&r.to_be_bytes());
    o.extend_from_slice(&n.to_be_bytes());
    o.extend_from_slice(&ack_delay_us.to_be_bytes());
    o.push(echo);
    o
}

/// VOID(r), REVOKE(r).
pub fn record_frame(kind: u8, r: u64) -> Vec<u8> {
    let mut o = Vec::with_capacity(9);
    o.push(kind);
    o.extend_from_slice(&r.to_be_bytes());
    o
}

/// REVOKED(r, held).
pub fn revoked(r: u64, held: u32) -> Vec<u8> {
    let mut o = Vec::with_capacity(13);
    o.push(REVOKED);
    o.extend_from_slice(&r.to_be_bytes());
    o.extend_from_slice(&held.to_be_bytes());
    o
}

/// An encoded TOKEN frame with its RETRANSMIT flag set (in place).
pub fn set_retransmit(frame: &mut [u8]) {
    if frame.len() > 1 {
        frame[1] |= FLAG_RETRANSMIT;
    }
}

/// The header of an Exon datagram in clear from `src` to `dst` (ids of 1..255 bytes).
pub fn header(src: &[u8], dst: &[u8]) -> Vec<u8> {
    let mut h = Vec::with_capacity(4 + src.len() + dst.len());
    h.push(VERSION);
    h.push(PLAIN);
    h.push(src.len() as u8);
    h.extend_from_slice(src);
    h.push(dst.len() as u8);
    h.extend_from_slice(dst);
    h
}

/// Encoded size of an ACK frame (the twin of `wire.ack_size`).
pub fn ack_size(nranges: usize, ncopies: Option<usize>) -> usize {
    match ncopies {
        None => ACK_SIZE + RANGE_SIZE * nranges,
        Some(c) => ACK_SIZE + COUNT_SIZE + RANGE_SIZE * (nranges + c),
    }
}

/// Range-encode slots: sorted, duplicates merged, `(first, count)` pairs (`wire.to_ranges`).
pub fn to_ranges(slots: &[u64]) -> Vec<(u64, u64)> {
    let mut v: Vec<u64> = slots.to_vec();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for s in v {
        match out.last_mut() {
            Some((f, c)) if *f + *c == s => *c += 1,
            Some((f, c)) if *f + *c > s => {}
            _ => out.push((s, 1)),
        }
    }
    out
}

pub const TOKEN_OVERHEAD: usize = TOKEN_SIZE;
pub const FRAGMENT_OVERHEAD: usize = TOKEN_FRAG_SIZE;
pub const RANGE_BYTES: usize = RANGE_SIZE;
pub const MAX_ID_BYTES: usize = 255;

#[cfg(test)]
mod tests {
    use super::*;

    fn header(src: &[u8], dst: &[u8]) -> Vec<u8> {
        let mut h = vec![VERSION, PLAIN, src.len() as u8];
        h.extend_from_slice(src);
        h.push(dst.len() as u8);
        h.extend_from_slice(dst);
        h
    }

    #[test]
    fn header_round_trip() {
        let h = header(b"tx", b"rx");
        let (s, d, off) = decode_header(&h).unwrap();
        assert_eq!((s, d, off), (&b"tx"[..], &b"rx"[..], h.len()));
    }

    #[test]
    fn header_errors_say_what_the_python_codec_says() {
        assert_eq!(decode_header(b"\x05\x00\x01").unwrap_err().detail, "shorter than the smallest header");
        assert_eq!(decode_header(b"\x04\x00\x01a\x01b").unwrap_err().detail, "unknown version 4");
        assert_eq!(
            decode_header(b"\x05\x05\x01a\x01b").unwrap_err().detail,
            "datagram type 5 is not an Exon datagram"
        );
        assert_eq!(decode_header(b"\x05\x00\x05ab").unwrap_err().detail, "source id cut short");
        assert_eq!(decode_header(b"\x05\x00\x01a\x03b").unwrap_err().detail, "destination id cut short");
        assert_eq!(decode_header(b"\x05\x00\x00\x01b").unwrap_err().detail, "empty node id");
    }

    #[test]
    fn token_and_ack_round_trip() {
        let mut out = Vec::new();
        encode_token(&mut out, 7, 9, b"hello", None, true);
        encode_token(&mut out, 8, 9, b"frag", Some((1, 3, 100)), false);
        encode_ack(&mut out, 9, &[(1, 2), (5, 1)], Some(&[(5, 1)]));
        encode_ack(&mut out, 9, &[(1, 2)], None);
        let (frames, err) = decode_frames(&out, 0, 1 << 20);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(
            frames,
            vec![
                Frame::Token { s: 7, r: 9, payload: b"hello", index: 0, count: 1, total: 5, flags: FLAG_RETRANSMIT },
                Frame::Token { s: 8, r: 9, payload: b"frag", index: 1, count: 3, total: 100, flags: FLAG_FRAGMENT },
                Frame::Ack { r: 9, ranges: vec![(1, 2), (5, 1)], copies: Some(vec![(5, 1)]) },
                Frame::Ack { r: 9, ranges: vec![(1, 2)], copies: None },
            ]
        );
    }

    #[test]
    fn a_damaged_tail_keeps_the_frames_before_it() {
        let mut out = Vec::new();
        encode_token(&mut out, 1, 2, b"ok", None, false);
        out.extend_from_slice(&[REVOKED, 0, 0]);
        let (frames, err) = decode_frames(&out, 0, 1 << 20);
        assert_eq!(frames.len(), 1);
        assert_eq!(err.unwrap().detail, "frame cut short");
    }

    #[test]
    fn overflowing_ranges_are_malformed() {
        let mut out = Vec::new();
        encode_ack(&mut out, 1, &[(u64::MAX, 1)], None);
        assert_eq!(decode_frames(&out, 0, 1 << 20).1.unwrap().detail, "empty or overflowing ack range");
        let mut req = vec![REQSLOTS];
        req.extend_from_slice(&u64::MAX.to_be_bytes());
        req.extend_from_slice(&1u32.to_be_bytes());
        req.extend_from_slice(&0u64.to_be_bytes());
        req.push(0);
        assert_eq!(decode_frames(&req, 0, 1 << 20).1.unwrap().detail, "slot range overflows");
    }

    #[test]
    fn every_prefix_of_every_frame_decodes_or_errs_without_panic() {
        let mut out = Vec::new();
        encode_token(&mut out, 1, 2, b"abc", Some((0, 2, 6)), false);
        encode_ack(&mut out, 3, &[(1, 1)], Some(&[]));
        for cut in 0..=out.len() {
            let _ = decode_frames(&out[..cut], 0, 1 << 20);
            let _ = decode_header(&out[..cut]);
        }
    }
}
