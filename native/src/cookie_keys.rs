//! The check of an INITIATE's cookie, the twin of `CookieJar.open` in
//! `a3m/exon/secure/cookies.py`: the native reads refuse a forged INITIATE (a cookie that does
//! not open under the responder's secrets, bound to another address or handshake, or past its
//! life) before any Python runs, as the responder refuses it first (`cookie_invalid`). The
//! secrets are the jar's, handed over at each rotation (the jar makes them; this side only
//! opens). A cookie is `nonce (12: the secret's epoch, 11 random) | ChaCha20-Poly1305(e_priv
//! (32) | index (4) | time made (f64), 16-byte tag)`, bound to the initiator's address, e and
//! index by the associated data.
//!
//! It also makes the jar's address tokens (the twin of `CookieJar.token`: `time (f64) |
//! HMAC-SHA-256(newest secret, bound | time)[:16]`), so the native reads answer a token-less
//! HELLO the budgets give a RETRY without Python (`retry`), while the newest secret is not due
//! to be replaced (the jar replaces it, in Python, when it next makes one).

use std::net::SocketAddr;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
use ring::hmac;

/// Bytes of a cookie.
pub const COOKIE_BYTES: usize = 72;
/// Bytes of the nonce that starts it.
const NONCE_BYTES: usize = 12;
/// Bytes of its plaintext: the responder's ephemeral private key, its index, the time made.
const PLAIN_BYTES: usize = 32 + 4 + 8;
/// A cookie is honoured this long after it was made (`COOKIE_LIFETIME_S`).
pub const LIFETIME_S: f64 = 120.0;
/// The INITIATE's header (`>BBI`: version, type, the initiator's index) and its ephemeral key.
const INITIATE_HEAD: usize = 6;
const KEY_BYTES: usize = 32;
/// An INITIATE shorter than this is truncated (the responder counts it so).
pub const INITIATE_MIN: usize = INITIATE_HEAD + KEY_BYTES + COOKIE_BYTES;
/// Bytes of an address token: the time it was made, then the MAC's first 16 bytes.
pub const TOKEN_BYTES: usize = 24;
/// A token-less HELLO's e and index follow its header (version, type, token length).
const HELLO_HEAD: usize = 3;

/// What a cookie's check says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// It opens and is within its life: the responder goes on.
    Valid,
    /// No secret of its epoch, a tag that does not verify, or past its life: refused.
    Invalid,
    /// It opens but says it was made after `now` (a clock the reader and the responder do
    /// not share): left to the responder, which reads the time later.
    Early,
}

/// The jar's secrets, newest first (three at most), each with its epoch (modulo 256).
/// The newest secret's MAC key, for tokens, when it became current and how long the jar keeps
/// it current (the jar's own rule, handed over with the secrets).
#[derive(Default)]
pub struct CookieKeys {
    keys: Vec<(u8, LessSafeKey)>,
    mac: Option<hmac::Key>,
    since: f64,
    rotation_s: f64,
}

impl CookieKeys {
    /// The jar rotated at `since` and rotates again `rotation_s` later: these are its secrets
    /// now, newest first. A secret that is not 32 bytes is left out (the jar makes none).
    pub fn set(&mut self, secrets: &[(u8, Vec<u8>)], since: f64, rotation_s: f64) {
        self.mac = secrets.first().filter(|(_, s)| s.len() == 32).map(|(_, s)| hmac::Key::new(hmac::HMAC_SHA256, s));
        self.since = since;
        self.rotation_s = rotation_s;
        self.keys = secrets
            .iter()
            .filter_map(|(epoch, s)| {
                UnboundKey::new(&CHACHA20_POLY1305, s).ok().map(|k| (*epoch, LessSafeKey::new(k)))
            })
            .collect();
    }

    /// The secrets held (the jar has made none before its first cookie or token).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// `CookieJar.open(cookie, bound, now)`: the first secret of the cookie's epoch opens it
    /// or nothing does; then its age says.
    pub fn check(&self, cookie: &[u8], bound: &[u8], now: f64) -> Check {
        if cookie.len() < NONCE_BYTES + PLAIN_BYTES + crate::aead::TAG {
            return Check::Invalid;
        }
        let Some((_, key)) = self.keys.iter().find(|(e, _)| *e == cookie[0]) else {
            return Check::Invalid;
        };
        let mut n = [0u8; NONCE_BYTES];
        n.copy_from_slice(&cookie[..NONCE_BYTES]);
        let mut sealed = cookie[NONCE_BYTES..].to_vec();
        let Ok(plain) = key.open_in_place(Nonce::assume_unique_for_key(n), Aad::from(bound), &mut sealed) else {
            return Check::Invalid;
        };
        if plain.len() != PLAIN_BYTES {
            return Check::Invalid; // (the jar's `unpack` would raise: none it sealed)
        }
        let mut t = [0u8; 8];
        t.copy_from_slice(&plain[36..44]);
        let age = now - f64::from_be_bytes(t);
        if age < 0.0 {
            Check::Early
        } else if age <= LIFETIME_S {
            Check::Valid
        } else {
            Check::Invalid
        }
    }

    /// The check of an INITIATE datagram `d` from `source` (its version and type looked at
    /// already), the address as the responder binds it (`repr` of the address tuple the
    /// native reads hand it, made from `source`); None when it is truncated.
    pub fn check_initiate(&self, d: &[u8], source: &SocketAddr, now: f64) -> Option<Check> {
        if d.len() < INITIATE_MIN {
            return None;
        }
        let e_and_cookie = INITIATE_HEAD + KEY_BYTES;
        let mut bound = bound_address(source).into_bytes();
        bound.extend_from_slice(&d[INITIATE_HEAD..e_and_cookie]); // e
        bound.extend_from_slice(&d[2..INITIATE_HEAD]); // the index, as sent (big-endian)
        Some(self.check(&d[e_and_cookie..e_and_cookie + COOKIE_BYTES], &bound, now))
    }
}

impl CookieKeys {
    /// `CookieJar.token(bound, now)`, or None outside the newest secret's span: the jar would
    /// replace it first (its own test, `now - since >= rotation_s`), or `now` is before it
    /// became current (a token dated then is checked against the secret before it): left to
    /// the jar.
    pub fn token(&self, bound: &[u8], now: f64) -> Option<[u8; TOKEN_BYTES]> {
        let mac = self.mac.as_ref()?;
        let age = now - self.since;
        if !(0.0..self.rotation_s).contains(&age) {
            return None;
        }
        let ts = now.to_be_bytes();
        let mut ctx = hmac::Context::with_key(mac);
        ctx.update(bound);
        ctx.update(&ts);
        let tag = ctx.sign();
        let mut t = [0u8; TOKEN_BYTES];
        t[..8].copy_from_slice(&ts);
        t[8..].copy_from_slice(&tag.as_ref()[..TOKEN_BYTES - 8]);
        Some(t)
    }

    /// The responder's RETRY to the token-less HELLO `d` from `source` (`_on_hello`'s busy
    /// case: version, RETRY, the HELLO's index, then a token bound to the source's address,
    /// the HELLO's e and index), or None: not a token-less HELLO of its size, or no token
    /// now (see `token`).
    pub fn retry(&self, d: &[u8], source: &SocketAddr, now: f64) -> Option<Vec<u8>> {
        if !crate::meter::is_plain_hello(d) {
            return None;
        }
        let e_and_index = &d[HELLO_HEAD..HELLO_HEAD + KEY_BYTES + 4];
        let mut bound = bound_address(source).into_bytes();
        bound.extend_from_slice(e_and_index);
        let token = self.token(&bound, now)?;
        let mut out = Vec::with_capacity(6 + TOKEN_BYTES);
        out.extend_from_slice(&[crate::wire::VERSION, crate::aead::RETRY]);
        out.extend_from_slice(&e_and_index[KEY_BYTES..]); // the index, as sent (big-endian)
        out.extend_from_slice(&token);
        Some(out)
    }
}

/// `repr()` of the address tuple the native reads give the secure layer for `sa`
/// (`UdpIo.addr_object`: the host as Rust writes it, the port, and for IPv6 the flow info and
/// scope id), which the responder binds a cookie to.
pub fn bound_address(sa: &SocketAddr) -> String {
    match sa {
        SocketAddr::V4(a) => format!("('{}', {})", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("('{}', {}, {}, {})", a.ip(), a.port(), a.flowinfo(), a.scope_id()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::aead::NONCE_LEN;

    fn seal(secret: &[u8; 32], epoch: u8, made: f64, bound: &[u8]) -> Vec<u8> {
        let key = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, secret).unwrap());
        let mut nonce = [7u8; NONCE_LEN];
        nonce[0] = epoch;
        let mut body = vec![1u8; 36];
        body.extend_from_slice(&made.to_be_bytes());
        key.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(bound), &mut body).unwrap();
        let mut c = nonce.to_vec();
        c.extend_from_slice(&body);
        c
    }

    fn keys(list: &[(u8, [u8; 32])]) -> CookieKeys {
        let mut k = CookieKeys::default();
        k.set(&list.iter().map(|(e, s)| (*e, s.to_vec())).collect::<Vec<_>>(), 0.0, 60.0);
        k
    }

    #[test]
    fn a_cookie_opens_under_its_epoch_s_secret_within_its_life() {
        let k = keys(&[(2, [2; 32]), (1, [1; 32])]);
        let c = seal(&[1; 32], 1, 10.0, b"bound");
        assert_eq!(c.len(), COOKIE_BYTES);
        assert_eq!(k.check(&c, b"bound", 10.0), Check::Valid);
        assert_eq!(k.check(&c, b"bound", 130.0), Check::Valid);
        assert_eq!(k.check(&c, b"bound", 130.5), Check::Invalid);
        assert_eq!(k.check(&c, b"bound", 9.0), Check::Early);
        assert_eq!(k.check(&c, b"other", 10.0), Check::Invalid);
        let mut forged = c.clone();
        forged[0] = 2; // another epoch's secret
        assert_eq!(k.check(&forged, b"bound", 10.0), Check::Invalid);
        forged[0] = 3; // no such secret
        assert_eq!(k.check(&forged, b"bound", 10.0), Check::Invalid);
        assert_eq!(k.check(&c[..40], b"bound", 10.0), Check::Invalid);
        assert_eq!(CookieKeys::default().check(&c, b"bound", 10.0), Check::Invalid);
    }

    #[test]
    fn an_initiate_is_bound_to_its_source_e_and_index() {
        let sa: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        assert_eq!(bound_address(&sa), "('127.0.0.1', 5000)");
        let v6: SocketAddr = "[::1]:7".parse().unwrap();
        assert_eq!(bound_address(&v6), "('::1', 7, 0, 0)");
        let e = [9u8; 32];
        let mut bound = bound_address(&sa).into_bytes();
        bound.extend_from_slice(&e);
        bound.extend_from_slice(&77u32.to_be_bytes());
        let k = keys(&[(5, [5; 32])]);
        let mut d = vec![1u8, crate::aead::INITIATE];
        d.extend_from_slice(&77u32.to_be_bytes());
        d.extend_from_slice(&e);
        d.extend_from_slice(&seal(&[5; 32], 5, 1.0, &bound));
        d.extend_from_slice(&[0u8; 80]);
        assert_eq!(k.check_initiate(&d, &sa, 2.0), Some(Check::Valid));
        let elsewhere: SocketAddr = "127.0.0.1:5001".parse().unwrap();
        assert_eq!(k.check_initiate(&d, &elsewhere, 2.0), Some(Check::Invalid));
        assert_eq!(k.check_initiate(&d[..INITIATE_MIN - 1], &sa, 2.0), None);
    }

    #[test]
    fn a_token_is_made_with_the_newest_secret_until_it_is_due() {
        let k = keys(&[(2, [2; 32]), (1, [1; 32])]);
        let t = k.token(b"bound", 10.0).unwrap();
        assert_eq!(&t[..8], &10.0f64.to_be_bytes());
        let mut ctx = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, &[2; 32]));
        ctx.update(b"bound");
        ctx.update(&10.0f64.to_be_bytes());
        assert_eq!(&t[8..], &ctx.sign().as_ref()[..16]);
        assert_ne!(k.token(b"other", 10.0).unwrap(), t);
        assert!(k.token(b"bound", 59.999).is_some());
        assert!(k.token(b"bound", 60.0).is_none()); // the jar rotates first
        assert!(k.token(b"bound", -1.0).is_none());
        assert!(CookieKeys::default().token(b"bound", 1.0).is_none());
    }

    #[test]
    fn a_retry_answers_a_token_less_hello_only() {
        let sa: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let k = keys(&[(1, [1; 32])]);
        let mut d = vec![0u8; crate::meter::HELLO_SIZE];
        d[0] = crate::wire::VERSION;
        d[1] = crate::aead::HELLO;
        d[3..35].copy_from_slice(&[9; 32]);
        d[35..39].copy_from_slice(&77u32.to_be_bytes());
        let r = k.retry(&d, &sa, 1.0).unwrap();
        assert_eq!(r.len(), 6 + TOKEN_BYTES);
        assert_eq!(&r[..6], &[crate::wire::VERSION, crate::aead::RETRY, 0, 0, 0, 77]);
        let mut bound = bound_address(&sa).into_bytes();
        bound.extend_from_slice(&d[3..39]);
        assert_eq!(&r[6..], &k.token(&bound, 1.0).unwrap());
        assert!(k.retry(&d[..crate::meter::HELLO_SIZE - 1], &sa, 1.0).is_none());
        d[2] = TOKEN_BYTES as u8; // a HELLO with a token is the responder's
        assert!(k.retry(&d, &sa, 1.0).is_none());
    }
}
