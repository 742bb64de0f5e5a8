//! A secure session's sealed datagrams: ChaCha20-Poly1305 (ring), in place.
//!
//! The layout is `docs/exon-wire.md`'s ("Secure associations"): a 14-byte header (version,
//! type, the receiver's session index, the 64-bit packet counter), which is the associated
//! data, then the ciphertext and the 16-byte tag; the nonce is 32 zero bits and the counter,
//! big-endian. The twin is `a3m/exon/secure/aead.py` (`PyCipher`, over `cryptography`):
//! `tests/native/test_native_aead.py` gives both the same keys, counters and datagrams and
//! wants the same bytes.

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, CHACHA20_POLY1305};

/// Bytes of the sealed header (`>BBIQ`).
pub const HEADER: usize = 14;
/// Bytes of the tag.
pub const TAG: usize = 16;
/// What sealing adds to a plaintext.
pub const OVERHEAD: usize = HEADER + TAG;

/// The secure layer's datagram types (the second byte; `a3m/exon/secure/packets.py`).
pub const PLAIN: u8 = 0x00;
pub const HELLO: u8 = 0x01;
pub const WELCOME: u8 = 0x02;
pub const INITIATE: u8 = 0x03;
pub const RETRY: u8 = 0x04;
pub const DATA: u8 = 0x05;
pub const CHALLENGE: u8 = 0x06;
pub const RESPONSE: u8 = 0x07;

/// One direction of a session: a 32-byte key.
pub struct Cipher {
    key: LessSafeKey,
}

#[inline]
fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

/// Write the sealed header into `out[..HEADER]`.
#[inline]
pub fn write_header(out: &mut [u8], version: u8, kind: u8, index: u32, counter: u64) {
    out[0] = version;
    out[1] = kind;
    out[2..6].copy_from_slice(&index.to_be_bytes());
    out[6..14].copy_from_slice(&counter.to_be_bytes());
}

/// The counter a sealed datagram names (`datagram.len() >= HEADER`).
#[inline]
pub fn counter_of(datagram: &[u8]) -> u64 {
    let mut c = [0u8; 8];
    c.copy_from_slice(&datagram[6..14]);
    u64::from_be_bytes(c)
}

/// The session index a sealed datagram names (`datagram.len() >= HEADER`).
#[inline]
pub fn index_of(datagram: &[u8]) -> u32 {
    u32::from_be_bytes([datagram[2], datagram[3], datagram[4], datagram[5]])
}

impl Cipher {
    /// None unless `key` is 32 bytes.
    pub fn new(key: &[u8]) -> Option<Cipher> {
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, key).ok()?;
        Some(Cipher { key: LessSafeKey::new(unbound) })
    }

    /// Seal into `out` (exactly `plain_len + OVERHEAD` bytes, the plaintext already at
    /// `out[HEADER..HEADER + plain_len]`): header, ciphertext in place, tag.
    pub fn seal_in_place(&self, out: &mut [u8], version: u8, kind: u8, index: u32, counter: u64) {
        let plain_end = out.len() - TAG;
        write_header(out, version, kind, index, counter);
        let (head, rest) = out.split_at_mut(HEADER);
        let (body, tag_out) = rest.split_at_mut(plain_end - HEADER);
        // Sealing fails only for a plaintext past ChaCha20's 256 GiB block counter.
        match self.key.seal_in_place_separate_tag(nonce(counter), Aad::from(&*head), body) {
            Ok(tag) => tag_out.copy_from_slice(tag.as_ref()),
            Err(_) => tag_out.fill(0), // (unreachable for datagrams: the tag then fails to open)
        }
    }

    /// Seal `plain` into `out` (`plain.len() + OVERHEAD` bytes).
    pub fn seal(&self, out: &mut [u8], version: u8, kind: u8, index: u32, counter: u64, plain: &[u8]) {
        out[HEADER..HEADER + plain.len()].copy_from_slice(plain);
        self.seal_in_place(out, version, kind, index, counter);
    }

    /// Open the sealed datagram in place: `datagram` (>= OVERHEAD bytes) holds it, and on
    /// success its plaintext, at `datagram[HEADER..len - TAG]`. False when the tag does not
    /// verify (the bytes are then garbage).
    pub fn open_in_place(&self, datagram: &mut [u8]) -> bool {
        let n = datagram.len();
        if n < OVERHEAD {
            return false;
        }
        let mut tag = [0u8; TAG];
        tag.copy_from_slice(&datagram[n - TAG..]);
        let mut aad = [0u8; HEADER];
        aad.copy_from_slice(&datagram[..HEADER]);
        let counter = counter_of(datagram);
        self.key
            .open_in_place_separate_tag(
                nonce(counter),
                Aad::from(&aad),
                Tag::from(tag),
                &mut datagram[HEADER..n - TAG],
                0..,
            )
            .is_ok()
    }

    /// Open the sealed `datagram` (>= OVERHEAD bytes) into `out` (`datagram.len() - OVERHEAD`
    /// bytes): false when the tag does not verify (`out` is then garbage).
    pub fn open(&self, datagram: &[u8], out: &mut [u8]) -> bool {
        let n = datagram.len();
        if n < OVERHEAD || out.len() != n - OVERHEAD {
            return false;
        }
        out.copy_from_slice(&datagram[HEADER..n - TAG]);
        let mut tag = [0u8; TAG];
        tag.copy_from_slice(&datagram[n - TAG..]);
        self.key
            .open_in_place_separate_tag(
                nonce(counter_of(datagram)),
                Aad::from(&datagram[..HEADER]),
                Tag::from(tag),
                out,
                0..,
            )
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_then_open() {
        let c = Cipher::new(&[7u8; 32]).unwrap();
        let plain = b"an exon datagram";
        let mut out = vec![0u8; plain.len() + OVERHEAD];
        c.seal(&mut out, 5, 5, 0xdeadbeef, 42, plain);
        assert_eq!(index_of(&out), 0xdeadbeef);
        assert_eq!(counter_of(&out), 42);
        let mut back = vec![0u8; plain.len()];
        assert!(c.open(&out, &mut back));
        assert_eq!(&back, plain);
        let mut inplace = out.clone();
        assert!(c.open_in_place(&mut inplace));
        assert_eq!(&inplace[HEADER..HEADER + plain.len()], plain);
        out[20] ^= 1;
        assert!(!c.open(&out, &mut back));
        let mut forged = out.clone();
        assert!(!c.open_in_place(&mut forged));
    }

    #[test]
    fn the_header_is_authenticated() {
        let c = Cipher::new(&[1u8; 32]).unwrap();
        let mut out = vec![0u8; 3 + OVERHEAD];
        c.seal(&mut out, 5, 5, 1, 1, b"abc");
        out[2] ^= 0x80; // another session index
        let mut back = [0u8; 3];
        assert!(!c.open(&out, &mut back));
    }

    #[test]
    fn a_short_key_is_refused() {
        assert!(Cipher::new(&[0u8; 16]).is_none());
    }
}
