//! A secure session's per-datagram state, kept in Rust (`SessionPath`), and the table of live
//! sessions by index and by peer (`SessionTable`): what the native engine reads and changes when
//! it opens or seals a live session's datagram, without calling into Python.
//!
//! The twins are `a3m.exon.secure.session.SessionPath` and `SessionTable`: the Python secure
//! layer keeps every rule (handshakes, paths, rekeys); its `Session` reads and writes these
//! fields through properties, so both see one state.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use ahash::AHashMap as HashMap;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::aead::Cipher;
use crate::replay::ReplayWindow;
use crate::udp::parse_addr;

/// The fields sealing and opening read and change.
pub struct Hot {
    pub peer: String,
    pub local_index: u32,
    pub remote_index: u32,
    pub initiator: bool,
    pub seal: Cipher,
    pub open: Cipher,
    pub counter: u64,
    pub window: ReplayWindow,
    pub last_recv: f64,
    pub last_sent: f64,
    pub unanswered: i64,
    pub confirmed: bool,
    pub candidate: Option<Py<PyAny>>,
    pub addr: Py<PyAny>,
    /// `addr` as a socket address (None: an address this module does not parse).
    pub sock_addr: Option<SocketAddr>,
    pub reject_at: f64,
    pub rekey_at: f64,
    pub silence_s: f64,
    pub rtt: f64,
}

pub type HotRef = Arc<Mutex<Hot>>;

pub fn lock(h: &HotRef) -> MutexGuard<'_, Hot> {
    h.lock().unwrap_or_else(|p| p.into_inner())
}

/// A numeric `(host, port[, flow, scope])` tuple as a socket address.
pub fn sock_addr_of(addr: &Bound<'_, PyAny>) -> Option<SocketAddr> {
    let t = addr.cast::<PyTuple>().ok()?;
    if t.len() < 2 {
        return None;
    }
    let host: String = t.get_item(0).ok()?.extract().ok()?;
    let port: u16 = t.get_item(1).ok()?.extract().ok()?;
    let flow: u32 = if t.len() > 2 { t.get_item(2).ok()?.extract().ok()? } else { 0 };
    let scope: u32 = if t.len() > 3 { t.get_item(3).ok()?.extract().ok()? } else { 0 };
    parse_addr(&host, port, flow, scope)
}

/// A session's per-datagram state (see the module's docstring).
#[pyclass(module = "a3m._native", name = "SessionPath")]
pub struct SessionPath {
    pub hot: HotRef,
}

#[pymethods]
impl SessionPath {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        peer: String,
        local_index: u32,
        remote_index: u32,
        send_key: &[u8],
        recv_key: &[u8],
        initiator: bool,
        addr: &Bound<'_, PyAny>,
        now: f64,
    ) -> PyResult<Self> {
        let seal = Cipher::new(send_key).ok_or_else(|| PyValueError::new_err("the key must be 32 bytes"))?;
        let open = Cipher::new(recv_key).ok_or_else(|| PyValueError::new_err("the key must be 32 bytes"))?;
        let hot = Hot {
            peer,
            local_index,
            remote_index,
            initiator,
            seal,
            open,
            counter: 0,
            window: ReplayWindow::default(),
            last_recv: now,
            last_sent: now,
            unanswered: 0,
            confirmed: !initiator,
            candidate: None,
            sock_addr: sock_addr_of(addr),
            addr: addr.clone().unbind(),
            reject_at: f64::INFINITY,
            rekey_at: f64::INFINITY,
            silence_s: 1.0,
            rtt: 0.0,
        };
        Ok(SessionPath { hot: Arc::new(Mutex::new(hot)) })
    }

    #[getter]
    fn counter(&self) -> u64 {
        lock(&self.hot).counter
    }

    #[setter]
    fn set_counter(&self, v: u64) {
        lock(&self.hot).counter = v;
    }

    #[getter]
    fn last_recv(&self) -> f64 {
        lock(&self.hot).last_recv
    }

    #[setter]
    fn set_last_recv(&self, v: f64) {
        lock(&self.hot).last_recv = v;
    }

    #[getter]
    fn last_sent(&self) -> f64 {
        lock(&self.hot).last_sent
    }

    #[setter]
    fn set_last_sent(&self, v: f64) {
        lock(&self.hot).last_sent = v;
    }

    #[getter]
    fn unanswered(&self) -> i64 {
        lock(&self.hot).unanswered
    }

    #[setter]
    fn set_unanswered(&self, v: i64) {
        lock(&self.hot).unanswered = v;
    }

    #[getter]
    fn confirmed(&self) -> bool {
        lock(&self.hot).confirmed
    }

    #[setter]
    fn set_confirmed(&self, v: bool) {
        lock(&self.hot).confirmed = v;
    }

    #[getter]
    fn reject_at(&self) -> f64 {
        lock(&self.hot).reject_at
    }

    #[setter]
    fn set_reject_at(&self, v: f64) {
        lock(&self.hot).reject_at = v;
    }

    #[getter]
    fn rekey_at(&self) -> f64 {
        lock(&self.hot).rekey_at
    }

    #[setter]
    fn set_rekey_at(&self, v: f64) {
        lock(&self.hot).rekey_at = v;
    }

    #[getter]
    fn silence_s(&self) -> f64 {
        lock(&self.hot).silence_s
    }

    #[setter]
    fn set_silence_s(&self, v: f64) {
        lock(&self.hot).silence_s = v;
    }

    #[getter]
    fn rtt(&self) -> f64 {
        lock(&self.hot).rtt
    }

    #[setter]
    fn set_rtt(&self, v: f64) {
        lock(&self.hot).rtt = v;
    }


    #[getter]
    fn peer(&self) -> String {
        lock(&self.hot).peer.clone()
    }

    #[getter]
    fn local_index(&self) -> u32 {
        lock(&self.hot).local_index
    }

    #[getter]
    fn remote_index(&self) -> u32 {
        lock(&self.hot).remote_index
    }

    #[getter]
    fn initiator(&self) -> bool {
        lock(&self.hot).initiator
    }

    /// The proven address of the peer.
    #[getter]
    fn addr(&self, py: Python<'_>) -> Py<PyAny> {
        lock(&self.hot).addr.clone_ref(py)
    }

    #[setter]
    fn set_addr(&self, addr: &Bound<'_, PyAny>) {
        let sa = sock_addr_of(addr);
        let mut h = lock(&self.hot);
        h.addr = addr.clone().unbind();
        h.sock_addr = sa;
    }

    /// A newer address awaiting its path challenge (None: none).
    #[getter]
    fn candidate(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        lock(&self.hot).candidate.as_ref().map(|c| c.clone_ref(py))
    }

    #[setter]
    fn set_candidate(&self, c: Option<Py<PyAny>>) {
        lock(&self.hot).candidate = c;
    }

    /// The replay window's highest counter (-1: none yet).
    #[getter]
    fn top(&self) -> i128 {
        lock(&self.hot).window.top
    }

    /// Whether `counter` was never accepted and is not too old.
    fn fresh(&self, counter: u64) -> bool {
        lock(&self.hot).window.fresh(counter)
    }

    /// Record `counter`.
    fn accept(&self, counter: u64) {
        lock(&self.hot).window.accept(counter)
    }

    /// A copy of the replay window's ring (tests).
    #[getter]
    fn ring<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &lock(&self.hot).window.ring)
    }
}

/// The live sessions, by the index their datagrams carry and by peer (the current one): the
/// secure layer's `_by_index` and `_current`, mirrored as it installs and drops sessions.
#[pyclass(module = "a3m._native", name = "SessionTable")]
#[derive(Default)]
pub struct SessionTable {
    pub inner: Arc<Mutex<Table>>,
}

#[derive(Default)]
pub struct Table {
    pub by_index: HashMap<u32, HotRef>,
    pub current: HashMap<String, HotRef>,
}

pub fn table(t: &Arc<Mutex<Table>>) -> MutexGuard<'_, Table> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

#[pymethods]
impl SessionTable {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// `path` is the session of `index`, and the current one of its peer.
    fn install(&self, index: u32, path: &SessionPath) {
        let peer = lock(&path.hot).peer.clone();
        let mut t = table(&self.inner);
        t.by_index.insert(index, path.hot.clone());
        t.current.insert(peer, path.hot.clone());
    }

    /// The session of `index` is gone (and no longer its peer's current one, if it was).
    fn drop(&self, index: u32, path: &SessionPath) {
        let peer = lock(&path.hot).peer.clone();
        let mut t = table(&self.inner);
        t.by_index.remove(&index);
        if t.current.get(&peer).is_some_and(|h| Arc::ptr_eq(h, &path.hot)) {
            t.current.remove(&peer);
        }
    }

    fn __len__(&self) -> usize {
        table(&self.inner).by_index.len()
    }
}
