//! `a3m._native.CookieKeys`: the binding of `cookie_keys::CookieKeys`. The cookie jar
//! (`a3m/exon/secure/cookies.py`) hands it its secrets at each rotation; the engine takes its
//! state (`shared`) when the secure layer is attached, and the native reads refuse a forged
//! INITIATE from it, and answer a HELLO the budgets give a RETRY, before any Python runs.

use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::cookie_keys::{Check, CookieKeys as Keys};

/// The secrets, shared by the binding and the engine's native reads.
pub type SharedKeys = Arc<Mutex<Keys>>;

pub fn keys_lock(k: &SharedKeys) -> MutexGuard<'_, Keys> {
    k.lock().unwrap_or_else(|p| p.into_inner())
}

fn name(c: Check) -> &'static str {
    match c {
        Check::Valid => "valid",
        Check::Invalid => "invalid",
        Check::Early => "early",
    }
}

/// A cookie jar's secrets, for the native check of INITIATEs (see `cookie_keys.rs`).
#[pyclass(module = "a3m._native", name = "CookieKeys", frozen)]
pub struct CookieKeys {
    pub shared: SharedKeys,
}

#[pymethods]
impl CookieKeys {
    #[new]
    fn new() -> Self {
        CookieKeys { shared: Arc::new(Mutex::new(Keys::default())) }
    }

    /// The jar's secrets now, newest first: `(epoch, secret)` pairs; the newest became
    /// current at `since` and is replaced `rotation_s` later.
    fn set(&self, secrets: Vec<(u8, Vec<u8>)>, since: f64, rotation_s: f64) {
        keys_lock(&self.shared).set(&secrets, since, rotation_s);
    }

    /// The RETRY the native reads send for the token-less HELLO `d` from `addr` (a numeric
    /// address tuple), the responder's own, or None (outside the newest secret's span: `cookie_keys.rs`).
    fn retry<'py>(&self, py: Python<'py>, d: &[u8], addr: &Bound<'py, PyTuple>, now: f64) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let sa = socket_addr(addr)?;
        Ok(keys_lock(&self.shared).retry(d, &sa, now).map(|r| PyBytes::new(py, &r)))
    }

    fn __len__(&self) -> usize {
        keys_lock(&self.shared).len()
    }

    /// `CookieJar.open(cookie, bound, now) is not None`.
    fn opens(&self, cookie: &[u8], bound: &[u8], now: f64) -> bool {
        keys_lock(&self.shared).check(cookie, bound, now) == Check::Valid
    }

    /// What the native reads decide of INITIATE datagram `d` from `addr` (a numeric
    /// address tuple): "valid", "invalid" (refused, `cookie_invalid`), "early" (left to the
    /// responder), or None (truncated: left to it too).
    fn check_initiate(&self, d: &Bound<'_, PyBytes>, addr: &Bound<'_, PyTuple>, now: f64) -> PyResult<Option<&'static str>> {
        let sa = socket_addr(addr)?;
        Ok(keys_lock(&self.shared).check_initiate(d.as_bytes(), &sa, now).map(name))
    }
}

/// A numeric address tuple (`(host, port)` or `(host, port, flow, scope)`) as a socket address.
fn socket_addr(addr: &Bound<'_, PyTuple>) -> PyResult<std::net::SocketAddr> {
    let host: String = addr.get_item(0)?.extract()?;
    let port: u16 = addr.get_item(1)?.extract()?;
    let (flow, scope): (u32, u32) = if addr.len() >= 4 {
        (addr.get_item(2)?.extract()?, addr.get_item(3)?.extract()?)
    } else {
        (0, 0)
    };
    crate::udp::parse_addr(&host, port, flow, scope).ok_or_else(|| pyo3::exceptions::PyValueError::new_err("a numeric address"))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CookieKeys>()
}
