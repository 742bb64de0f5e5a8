//! `a3m._native.HandshakeMeter`: the binding of `meter::Meter`, the twin of
//! `a3m.exon.secure.meter.HandshakeMeter`. The secure layer makes it and calls it for
//! INITIATEs and the HELLOs it reads itself; the engine takes its state (`shared`) when the
//! secure layer is attached, and the native loop meters the token-less HELLOs it reads.

use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::meter::{Meter, SourceKey};

/// The meter's state, shared by the binding and the engine's native loop.
pub type SharedMeter = Arc<Mutex<Meter>>;

pub fn meter_lock(m: &SharedMeter) -> MutexGuard<'_, Meter> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The source a Python address counts as (the twin's `source_of`).
fn key_of(addr: &Bound<'_, PyAny>) -> PyResult<SourceKey> {
    if let Ok(t) = addr.cast::<PyTuple>() {
        if !t.is_empty() {
            if let Ok(host) = t.get_item(0)?.cast::<PyString>() {
                return Ok(SourceKey::of_host(&host.to_cow()?));
            }
        }
    }
    Ok(SourceKey::Other(addr.repr()?.to_cow()?.into_owned()))
}

/// `addr`'s key, made only when the meter asks for it (under load, as the twin looks a
/// source up only then); an error making it lands in `bad`, for the caller to raise.
fn lazy_key<'a>(addr: &'a Bound<'_, PyAny>, bad: &'a mut Option<PyErr>) -> impl FnOnce() -> SourceKey + 'a {
    move || {
        key_of(addr).unwrap_or_else(|e| {
            *bad = Some(e);
            SourceKey::Other(String::new())
        })
    }
}

/// The budgets of handshake datagrams (see `a3m.exon.secure.meter.HandshakeMeter`).
#[pyclass(module = "a3m._native", name = "HandshakeMeter", frozen)]
pub struct HandshakeMeter {
    pub shared: SharedMeter,
}

#[pymethods]
impl HandshakeMeter {
    #[new]
    #[pyo3(signature = (handshake_rate = 1000.0, retry_rate = 2000.0))]
    fn new(handshake_rate: f64, retry_rate: f64) -> Self {
        HandshakeMeter { shared: Arc::new(Mutex::new(Meter::new(handshake_rate, retry_rate))) }
    }

    #[pyo3(signature = (addr, now, cost = 1.0))]
    fn source_ok(&self, addr: &Bound<'_, PyAny>, now: f64, cost: f64) -> PyResult<bool> {
        let mut bad = None;
        let ok = meter_lock(&self.shared).source_ok(lazy_key(addr, &mut bad), now, cost);
        bad.map_or(Ok(ok), Err)
    }

    fn hello(&self, addr: &Bound<'_, PyAny>, now: f64) -> PyResult<u8> {
        let mut bad = None;
        let verdict = meter_lock(&self.shared).hello(lazy_key(addr, &mut bad), now);
        bad.map_or(Ok(verdict), Err)
    }

    fn source_count(&self) -> usize {
        meter_lock(&self.shared).source_count()
    }

    fn state(&self) -> (f64, f64, f64, f64, f64, f64, usize) {
        meter_lock(&self.shared).state()
    }

    fn budget_of(&self, addr: &Bound<'_, PyAny>) -> PyResult<Option<(f64, f64)>> {
        Ok(meter_lock(&self.shared).budget_of(&key_of(addr)?))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<HandshakeMeter>()
}
