//! The responder's budgets for handshake datagrams from unproven addresses: the twin of
//! `a3m.exon.secure.meter.HandshakeMeter` (the specification), step for step and with the
//! same floating-point operations in the same order, so that both decide alike on the same
//! calls (`tests/native/test_native_meter.py` compares them after every call).
//!
//! Shared by the Python responder (through `python_meter::HandshakeMeter`) and the native
//! loop, which sheds a flood's token-less HELLOs before any Python runs.

use std::cmp::Ordering;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use ahash::AHashMap as HashMap;

/// Under load, handshake datagrams a second one source may make the node work on.
pub const SOURCE_RATE: f64 = 100.0;
/// The key exchange and RETRY budgets hold this many seconds' worth at most.
pub const HANDSHAKE_BURST_S: f64 = 0.1;
/// What a HELLO answered with a RETRY takes of its source's budget under load.
pub const RETRY_COST: f64 = 0.05;
/// Sources tracked at once.
pub const MAX_SOURCES: usize = 4096;
/// A HELLO's size (padded), and the only token length besides none.
pub const HELLO_SIZE: usize = 256;

/// A token-less HELLO's verdicts (the twin's `SHED`, `RETRY`, `EXCHANGE`).
pub const SHED: u8 = 0;
pub const RETRY: u8 = 1;
pub const EXCHANGE: u8 = 2;

/// The source an address counts as (the twin's `source_of`): an IPv4 address as its text,
/// an IPv6 /64, any other host as its text, an address that is no `(host, port, ...)` tuple
/// by its `repr`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum SourceKey {
    Host(String),
    Net6([u8; 8]),
    Other(String),
}

fn net6(ip: &Ipv6Addr) -> SourceKey {
    let mut k = [0u8; 8];
    k.copy_from_slice(&ip.octets()[..8]);
    SourceKey::Net6(k)
}

impl SourceKey {
    /// The key of a `(host, port, ...)` tuple's host, as the twin reads it.
    pub fn of_host(host: &str) -> Self {
        if !host.contains(':') {
            return SourceKey::Host(host.to_owned());
        }
        let bare = host.split('%').next().unwrap_or(host);
        match bare.parse::<Ipv6Addr>() {
            Ok(ip) => net6(&ip),
            Err(_) => SourceKey::Host(host.to_owned()),
        }
    }

    /// The key of an address read natively (its Python tuple's host is the address's text).
    pub fn of_socket(sa: &SocketAddr) -> Self {
        match sa.ip() {
            IpAddr::V4(ip) => SourceKey::Host(ip.to_string()),
            IpAddr::V6(ip) => net6(&ip),
        }
    }
}

/// Python's `min(a, b)`: `a` unless `b` is smaller.
fn py_min(a: f64, b: f64) -> f64 {
    if b < a { b } else { a }
}

/// Python's `max(a, b)`: `a` unless `b` is larger.
fn py_max(a: f64, b: f64) -> f64 {
    if b > a { b } else { a }
}

/// The buckets (see the twin's docstring).
#[derive(Debug, Clone)]
pub struct Meter {
    rate: f64,
    load: f64,
    load_at: f64,
    bucket: f64,
    bucket_at: f64,
    retry_rate: f64,
    retries: f64,
    retries_at: f64,
    sources: HashMap<SourceKey, (f64, f64)>,
}

impl Meter {
    pub fn new(handshake_rate: f64, retry_rate: f64) -> Self {
        Meter {
            rate: handshake_rate,
            load: handshake_rate,
            load_at: f64::NEG_INFINITY,
            bucket: handshake_rate * HANDSHAKE_BURST_S,
            bucket_at: f64::NEG_INFINITY,
            retry_rate,
            retries: retry_rate * HANDSHAKE_BURST_S,
            retries_at: f64::NEG_INFINITY,
            sources: HashMap::default(),
        }
    }

    /// Under load, take `cost` from the budget of the source `key` names (made only under
    /// load, as the twin looks the source up only then); false: spent.
    pub fn source_ok(&mut self, key: impl FnOnce() -> SourceKey, now: f64, cost: f64) -> bool {
        let rate = self.rate;
        let load = py_min(rate, self.load + (now - self.load_at) * rate);
        self.load_at = now;
        self.load = py_max(-rate, load - 1.0);
        if load >= 1.0 {
            return true;
        }
        let key = key();
        let Some(b) = self.sources.get_mut(&key) else {
            if self.sources.len() >= MAX_SOURCES {
                // (the twin forgets those with `now - when >= 1.0`: a NaN is kept by both)
                self.sources.retain(|_, v| !matches!((now - v.1).partial_cmp(&1.0), Some(Ordering::Greater | Ordering::Equal)));
                if self.sources.len() >= MAX_SOURCES {
                    self.sources.clear();
                }
            }
            self.sources.insert(key, (SOURCE_RATE - cost, now));
            return true;
        };
        let left = py_min(SOURCE_RATE, b.0 + (now - b.1) * SOURCE_RATE);
        b.1 = now;
        if left < cost {
            b.0 = left;
            return false;
        }
        b.0 = left - cost;
        true
    }

    /// A token-less HELLO: `SHED`, `RETRY` or `EXCHANGE`.
    pub fn hello(&mut self, key: impl FnOnce() -> SourceKey, now: f64) -> u8 {
        let rate = self.rate;
        let left = py_min(rate * HANDSHAKE_BURST_S, self.bucket + (now - self.bucket_at) * rate);
        if !self.source_ok(key, now, if left < 1.0 { RETRY_COST } else { 1.0 }) {
            return SHED;
        }
        self.bucket_at = now;
        self.bucket = py_max(-rate, left - 1.0);
        if left >= 1.0 {
            return EXCHANGE;
        }
        let r = self.retry_rate;
        let retries = py_min(r * HANDSHAKE_BURST_S, self.retries + (now - self.retries_at) * r);
        self.retries_at = now;
        if retries < 1.0 {
            self.retries = retries;
            return SHED;
        }
        self.retries = retries - 1.0;
        RETRY
    }

    pub fn source_count(&self) -> usize {
        self.sources.len()
    }

    /// The twin's `state()`.
    pub fn state(&self) -> (f64, f64, f64, f64, f64, f64, usize) {
        (self.load, self.load_at, self.bucket, self.bucket_at, self.retries, self.retries_at, self.sources.len())
    }

    pub fn budget_of(&self, key: &SourceKey) -> Option<(f64, f64)> {
        self.sources.get(key).copied()
    }
}

/// Whether a datagram read is a token-less HELLO of the right size: the only kind the native
/// reads meter (a look at its first bytes, before the meter's lock is taken).
pub fn is_plain_hello(d: &[u8]) -> bool {
    d.len() >= HELLO_SIZE && d[0] == crate::wire::VERSION && d[1] == crate::aead::HELLO && d[2] == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> impl FnOnce() -> SourceKey {
        move || SourceKey::Host(format!("192.0.2.{i}"))
    }

    #[test]
    fn a_lasting_flood_from_many_sources_gets_its_retries_then_nothing() {
        let mut m = Meter::new(1000.0, 2000.0);
        let (mut shed, mut retry, mut exchange) = (0, 0, 0);
        for i in 0..200_000u32 {
            match m.hello(key(i % 254), f64::from(i) / 20_000.0) {
                SHED => shed += 1,
                RETRY => retry += 1,
                _ => exchange += 1,
            }
        }
        // 10 s at 20 000 a second: the burst's key exchanges (100, and the refill while it
        // lasts), then ~2 000 RETRYs a second.
        assert!((100..=110).contains(&exchange), "{exchange}");
        assert!((19_000..=21_000).contains(&retry), "{retry}");
        assert_eq!(shed + retry + exchange, 200_000);
    }

    #[test]
    fn one_source_under_load_gets_its_budget_only() {
        let mut m = Meter::new(1000.0, 1e9);
        let mut ok = 0;
        for i in 0..100_000u32 {
            // all from one source, 10 000 a second for 10 s: under load after the first second
            ok += u32::from(m.source_ok(key(1), f64::from(i) / 10_000.0, 1.0));
        }
        // the load's burst (a second's worth, refilled while it lasts: ~0.11 s), then the
        // source's burst and 100 a second
        assert!((2100..=1120 + 100 + 100 * 10).contains(&ok), "{ok}");
        assert_eq!(m.source_count(), 1);
    }

    #[test]
    fn sources_beyond_the_bound_are_forgotten() {
        let mut m = Meter::new(0.0, 0.0);
        for i in 0..3 * MAX_SOURCES as u32 {
            m.source_ok(move || SourceKey::Host(format!("h{i}")), 0.0, 1.0);
            assert!(m.source_count() <= MAX_SOURCES);
        }
    }

    #[test]
    fn an_ipv6_64_is_one_source() {
        assert_eq!(SourceKey::of_host("2001:db8::1"), SourceKey::of_host("2001:db8::ffff:1%eth0"));
        assert_ne!(SourceKey::of_host("2001:db8:0:1::1"), SourceKey::of_host("2001:db8::1"));
        let sa: SocketAddr = "[2001:db8::7]:5".parse().unwrap();
        assert_eq!(SourceKey::of_socket(&sa), SourceKey::of_host("2001:db8::1"));
        let sa: SocketAddr = "192.0.2.7:9".parse().unwrap();
        assert_eq!(SourceKey::of_socket(&sa), SourceKey::of_host("192.0.2.7"));
        assert_eq!(SourceKey::of_host("[bad"), SourceKey::Host("[bad".into()));
    }

    #[test]
    fn only_a_token_less_hello_of_its_size_is_metered() {
        let mut d = vec![0u8; HELLO_SIZE];
        d[0] = crate::wire::VERSION;
        d[1] = crate::aead::HELLO;
        assert!(is_plain_hello(&d));
        d[2] = 24; // a token
        assert!(!is_plain_hello(&d));
        d[2] = 0;
        assert!(!is_plain_hello(&d[..HELLO_SIZE - 1]));
        d[1] = crate::aead::INITIATE;
        assert!(!is_plain_hello(&d));
        d[1] = crate::aead::HELLO;
        d[0] ^= 1;
        assert!(!is_plain_hello(&d));
    }
}
