//! The core message format's BATCH (`docs/core-messages.md`): several DATA messages of one
//! link in one sequenced message. Twin of `a3m.core.message` (`split_batch`, `batch_runs`),
//! the specification; `tests/native/test_native_batch.py` gives both the same inputs.
//!
//! A BATCH body, after its sequence number: count (u32), `count` lengths (u32 each), the
//! payloads back to back; every integer big-endian. A sequenced message is the fixed header
//! (version u16, protocol u8, type u8, remaining length u32), the link's head (tags and
//! incarnations, made by the caller), the sequence number (u64), then the body.

/// The core format's version and the socket protocol (`a3m.core.message`).
pub const VERSION: u16 = 1;
pub const PROTO_SOCKET: u8 = 0x01;
/// Message types.
pub const DATA: u8 = 0x02;
pub const BATCH: u8 = 0x08;

/// Why a BATCH body is refused (the Python twin's `ProtocolViolation` texts).
pub const CUT_SHORT: &str = "BATCH cut short";
pub const COUNT_DOES_NOT_FIT: &str = "BATCH count does not fit";
pub const LENGTHS_DO_NOT_MATCH: &str = "BATCH lengths do not match its size";

fn u32_at(body: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]])
}

/// Check a BATCH body; the payloads' count and where the first starts. Their lengths follow
/// the count (`lengths`). Nothing is allocated: a body is refused before any payload is made.
pub fn check(body: &[u8]) -> Result<(usize, usize), &'static str> {
    let size = body.len();
    if size < 4 {
        return Err(CUT_SHORT);
    }
    let n = u32_at(body, 0) as usize;
    // (u64: 4 + 4n cannot overflow whatever the count says)
    let off = 4 + 4 * n as u64;
    if n == 0 || off > size as u64 {
        return Err(COUNT_DOES_NOT_FIT);
    }
    let off = off as usize;
    let total: u64 = lengths(body, n).map(|l| l as u64).sum();
    if off as u64 + total != size as u64 {
        return Err(LENGTHS_DO_NOT_MATCH);
    }
    Ok((n, off))
}

/// The `n` payload lengths of a checked body.
pub fn lengths(body: &[u8], n: usize) -> impl Iterator<Item = u32> + '_ {
    (0..n).map(move |i| u32_at(body, 4 + 4 * i))
}

/// The payloads of a BATCH body, as slices of it.
pub fn split(body: &[u8]) -> Result<Vec<&[u8]>, &'static str> {
    let (n, mut off) = check(body)?;
    let mut out = Vec::with_capacity(n);
    for length in lengths(body, n) {
        let end = off + length as usize;
        out.push(&body[off..end]);
        off = end;
    }
    Ok(out)
}

/// The runs `_emit_runs` sends `sizes` in (at least two messages): each the longest from
/// where the last ended whose payload bytes, plus 4 a message, stay within `limit` (at least
/// one message; a run of one leaves as DATA). Half-open index ranges.
pub fn runs(sizes: &[usize], limit: usize) -> Vec<(usize, usize)> {
    let n = sizes.len();
    let mut out = Vec::new();
    let mut start = 0;
    while start < n {
        let mut used = sizes[start] as u64 + 4;
        let mut end = start + 1;
        while end < n {
            let more = used + sizes[end] as u64 + 4;
            if more > limit as u64 {
                break;
            }
            used = more;
            end += 1;
        }
        out.push((start, end));
        start = end;
    }
    out
}

/// Why a message cannot be encoded: its remaining length does not fit the header's u32.
pub const TOO_LONG: &str = "a message's remaining length does not fit 32 bits";

/// The size of a DATA message with a `head_len`-byte head and a `size`-byte payload.
pub fn data_len(head_len: usize, size: usize) -> Result<usize, &'static str> {
    remaining_ok(head_len + 8 + size).map(|r| 8 + r)
}

/// The size of a BATCH of `n` payloads of `total` bytes in all.
pub fn batch_len(head_len: usize, n: usize, total: usize) -> Result<usize, &'static str> {
    remaining_ok(head_len + 12 + 4 * n + total).map(|r| 8 + r)
}

fn remaining_ok(remaining: usize) -> Result<usize, &'static str> {
    u32::try_from(remaining).map(|_| remaining).map_err(|_| TOO_LONG)
}

/// Write the fixed header, the head and the sequence number; the offset after them.
fn write_head(dst: &mut [u8], mtype: u8, head: &[u8], seq: u64) -> usize {
    let remaining = (dst.len() - 8) as u32; // (checked by data_len / batch_len)
    dst[0..2].copy_from_slice(&VERSION.to_be_bytes());
    dst[2] = PROTO_SOCKET;
    dst[3] = mtype;
    dst[4..8].copy_from_slice(&remaining.to_be_bytes());
    let h = 8 + head.len();
    dst[8..h].copy_from_slice(head);
    dst[h..h + 8].copy_from_slice(&seq.to_be_bytes());
    h + 8
}

/// Write a DATA message into `dst` (exactly :func:`data_len` bytes).
pub fn write_data(dst: &mut [u8], head: &[u8], seq: u64, payload: &[u8]) {
    let at = write_head(dst, DATA, head, seq);
    dst[at..].copy_from_slice(payload);
}

/// Write a BATCH into `dst` (exactly :func:`batch_len` bytes).
pub fn write_batch<P: AsRef<[u8]>>(dst: &mut [u8], head: &[u8], seq: u64, payloads: &[P]) {
    let mut at = write_head(dst, BATCH, head, seq);
    dst[at..at + 4].copy_from_slice(&(payloads.len() as u32).to_be_bytes());
    at += 4;
    for p in payloads {
        dst[at..at + 4].copy_from_slice(&(p.as_ref().len() as u32).to_be_bytes());
        at += 4;
    }
    for p in payloads {
        let p = p.as_ref();
        dst[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
}

/// A DATA message: `encode_with_head(head, seq, payload)`.
pub fn encode_data(head: &[u8], seq: u64, payload: &[u8]) -> Result<Vec<u8>, &'static str> {
    let mut out = vec![0; data_len(head.len(), payload.len())?];
    write_data(&mut out, head, seq, payload);
    Ok(out)
}

/// A BATCH of `payloads` numbered from `seq`: `encode_batch_with_head(head, seq, payloads)`.
pub fn encode_batch<P: AsRef<[u8]>>(head: &[u8], seq: u64, payloads: &[P]) -> Result<Vec<u8>, &'static str> {
    let total: usize = payloads.iter().map(|p| p.as_ref().len()).sum();
    let mut out = vec![0; batch_len(head.len(), payloads.len(), total)?];
    write_batch(&mut out, head, seq, payloads);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(payloads: &[&[u8]]) -> Vec<u8> {
        // the body after the sequence number: the message less its 8 + 0 + 8 bytes of header
        encode_batch(b"", 0, payloads).unwrap()[16..].to_vec()
    }

    #[test]
    fn a_body_splits_into_its_payloads() {
        let ps: [&[u8]; 3] = [b"a", b"", b"xyz"];
        let b = body(&ps);
        assert_eq!(split(&b).unwrap(), ps.to_vec());
    }

    #[test]
    fn refusals_name_their_reason() {
        assert_eq!(split(b"\0\0\0"), Err(CUT_SHORT));
        assert_eq!(split(b"\0\0\0\0"), Err(COUNT_DOES_NOT_FIT));
        assert_eq!(split(b"\xff\xff\xff\xff\0\0\0\0"), Err(COUNT_DOES_NOT_FIT));
        assert_eq!(split(b"\0\0\0\x01\0\0\0\x02a"), Err(LENGTHS_DO_NOT_MATCH));
        assert_eq!(split(b"\0\0\0\x01\0\0\0\x01ab"), Err(LENGTHS_DO_NOT_MATCH));
        // lengths whose sum overflows 32 bits do not wrap around to the size
        assert_eq!(split(b"\0\0\0\x02\xff\xff\xff\xff\0\0\0\x0d"), Err(LENGTHS_DO_NOT_MATCH));
    }

    #[test]
    fn runs_are_the_longest_within_the_limit() {
        assert_eq!(runs(&[10, 10, 10], 100), vec![(0, 3)]);
        assert_eq!(runs(&[10, 10, 10], 28), vec![(0, 2), (2, 3)]);
        // a message above the limit goes alone
        assert_eq!(runs(&[10, 200, 10, 10], 40), vec![(0, 1), (1, 2), (2, 4)]);
        assert_eq!(runs(&[5, 5], 0), vec![(0, 1), (1, 2)]);
    }

    #[test]
    fn data_and_batch_layouts() {
        let d = encode_data(b"HH", 7, b"pp").unwrap();
        assert_eq!(d, b"\0\x01\x01\x02\0\0\0\x0cHH\0\0\0\0\0\0\0\x07pp".to_vec());
        let b = encode_batch(b"H", 1 << 63, &[b"a".as_slice(), b"bc".as_slice()]).unwrap();
        assert_eq!(&b[..8], b"\0\x01\x01\x08\0\0\0\x18");
        assert_eq!(&b[8..9], b"H");
        assert_eq!(&b[9..17], &(1u64 << 63).to_be_bytes());
        assert_eq!(&b[17..], b"\0\0\0\x02\0\0\0\x01\0\0\0\x02abc");
    }
}
