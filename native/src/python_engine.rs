//! `a3m._native.ExonCore`: the Rust Exon engine (`exon::engine`) with the Python verbs of
//! `a3m.exon.protocol.ExonProtocol`, its twin and specification.
//!
//! The secure layer stays Python (`a3m.exon.secure.SecureLayer`): it opens each datagram
//! before the engine reads it and seals what the engine sends, and calls back into the
//! engine (`_path_proven`, `_session_ready`, `peer_pto`). So the engine's state sits in a
//! `RefCell` borrowed only between calls into Python, never across one. Events go to the
//! same deque the secure layer writes to, in the order they happen; the engine's counters
//! are added to the same `ExonStats` object after each call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::exon::clock::ClockStore;
use crate::exon::config::Config;
use crate::exon::engine::{Engine, Host, OutItem, SendError};
use crate::exon::events::Event;

/// A Python address (any hashable, e.g. `("127.0.0.1", 5000)`), compared as Python does.
pub struct PyAddr(Py<PyAny>);

impl Clone for PyAddr {
    fn clone(&self) -> Self {
        Python::attach(|py| PyAddr(self.0.clone_ref(py)))
    }
}

impl PartialEq for PyAddr {
    fn eq(&self, o: &Self) -> bool {
        if self.0.as_ptr() == o.0.as_ptr() {
            return true;
        }
        Python::attach(|py| self.0.bind(py).eq(o.0.bind(py)).unwrap_or(false))
    }
}

type ErrSlot = Arc<Mutex<Option<PyErr>>>;
type SecSlot = Arc<Mutex<Option<Py<PyAny>>>>;

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The host's side of the engine: Python objects the engine calls while it runs (none of
/// them calls back into the engine).
struct PyHost {
    refs: RefsSlot,
    sec: SecSlot,
    err: ErrSlot,
}

/// The Python objects the engine calls, shared with the `ExonCore` so that the garbage
/// collector can see them (`__traverse__`) and break a cycle through them (`__clear__`:
/// a resolver that refers back to its node, say).
#[derive(Default)]
struct HostRefs {
    store: Option<Py<PyAny>>,
    resolver: Option<Py<PyAny>>,
    path_mtu: Option<Py<PyAny>>,
    pacer: Option<Py<PyAny>>,
}

type RefsSlot = Arc<Mutex<HostRefs>>;

impl PyHost {
    /// One of the host's objects (None once cleared by the garbage collector).
    fn get(&self, py: Python<'_>, which: fn(&HostRefs) -> &Option<Py<PyAny>>) -> Option<Py<PyAny>> {
        which(&locked(&self.refs)).as_ref().map(|o| o.clone_ref(py))
    }
}

impl PyHost {
    fn keep<T>(&self, r: PyResult<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                let mut slot = locked(&self.err);
                if slot.is_none() {
                    *slot = Some(e);
                }
                None
            }
        }
    }
}

impl ClockStore for PyHost {
    fn load(&mut self) -> u64 {
        Python::attach(|py| {
            let store = self.get(py, |r| &r.store)?;
            self.keep(store.bind(py).call_method0("load").and_then(|v| v.extract::<u64>()))
        })
        .unwrap_or(0)
    }
    fn reserve(&mut self, upto: u64) {
        Python::attach(|py| {
            if let Some(store) = self.get(py, |r| &r.store) {
                self.keep(store.bind(py).call_method1("reserve", (upto,)));
            }
        });
    }
}

impl Host<PyAddr> for PyHost {
    fn resolve(&mut self, peer: &str) -> Option<PyAddr> {
        Python::attach(|py| {
            let r = self.get(py, |r| &r.resolver)?;
            let v = self.keep(r.bind(py).call1((peer,)))?;
            if v.is_none() {
                None
            } else {
                Some(PyAddr(v.unbind()))
            }
        })
    }
    fn path_mtu(&mut self, addr: &PyAddr) -> Option<i64> {
        Python::attach(|py| {
            let f = self.get(py, |r| &r.path_mtu)?;
            self.keep(f.bind(py).call1((addr.0.bind(py),)).and_then(|v| v.extract::<i64>()))
        })
    }
    fn sec_holding(&mut self, peer: &str) -> bool {
        let sec = Python::attach(|py| locked(&self.sec).as_ref().map(|s| s.clone_ref(py)));
        let Some(s) = sec else { return false };
        Python::attach(|py| self.keep(s.bind(py).call_method1("holding", (peer,)).and_then(|v| v.extract::<bool>())))
            .unwrap_or(false)
    }
    fn pacer_admit(&mut self, reserved: f64, now: f64, grace: f64) -> f64 {
        Python::attach(|py| {
            let pacer = self.get(py, |r| &r.pacer)?;
            self.keep(pacer.bind(py).call_method1("admit", (reserved, now, grace)).and_then(|v| v.extract::<f64>()))
        })
        .unwrap_or(0.0)
    }
}

/// The Python classes the engine's events and errors are made of.
struct Classes {
    delivered: Py<PyAny>,
    receipt_ready: Py<PyAny>,
    writable: Py<PyAny>,
    outcome_unknown: Py<PyAny>,
    not_delivered: Py<PyAny>,
    peer_unreachable: Py<PyAny>,
    peer_reachable: Py<PyAny>,
    closed: Py<PyAny>,
    too_large: Py<PyAny>,
    would_block: Py<PyAny>,
    usage: Py<PyAny>,
}

impl Classes {
    fn load(py: Python<'_>) -> PyResult<Classes> {
        let ev = py.import("a3m.exon.events")?;
        let er = py.import("a3m.errors")?;
        let g = |m: &Bound<'_, PyModule>, n: &str| -> PyResult<Py<PyAny>> { Ok(m.getattr(n)?.unbind()) };
        Ok(Classes {
            delivered: g(&ev, "Delivered")?,
            receipt_ready: g(&ev, "ReceiptReady")?,
            writable: g(&ev, "Writable")?,
            outcome_unknown: g(&ev, "OutcomeUnknown")?,
            not_delivered: g(&ev, "NotDelivered")?,
            peer_unreachable: g(&ev, "PeerUnreachable")?,
            peer_reachable: g(&ev, "PeerReachable")?,
            closed: g(&er, "Closed")?,
            too_large: g(&er, "MessageTooLarge")?,
            would_block: g(&er, "WouldBlock")?,
            usage: g(&er, "UsageError")?,
        })
    }
}

/// The Exon engine, driven as an `ExonProtocol` is (see the module's docstring).
#[pyclass(module = "a3m._native", name = "ExonCore")]
pub struct ExonCore {
    eng: Mutex<Engine<PyAddr>>,
    sec: SecSlot,
    refs: RefsSlot,
    events: Py<PyAny>,
    stats: Py<PyAny>,
    config: Py<PyAny>,
    err: ErrSlot,
    classes: Classes,
    names: Mutex<HashMap<Arc<str>, Py<PyString>>>,
    id: Py<PyString>,
}

fn cfg_of(c: &Bound<'_, PyAny>) -> PyResult<Config> {
    let f = |n: &str| -> PyResult<f64> { c.getattr(n)?.extract::<f64>() };
    let i = |n: &str| -> PyResult<i64> { c.getattr(n)?.extract::<i64>() };
    let b = |n: &str| -> PyResult<bool> { c.getattr(n)?.extract::<bool>() };
    Ok(Config {
        max_datagram_size: i("max_datagram_size")?,
        window_per_peer: i("window_per_peer")?,
        window_global: i("window_global")?,
        slots_ahead: i("slots_ahead")?,
        max_live_slots: i("max_live_slots")?,
        rto_initial_s: f("rto_initial_s")?,
        rto_max_s: f("rto_max_s")?,
        first_probe_rate: f("first_probe_rate")?,
        ack_delay_s: f("ack_delay_s")?,
        pacing: b("pacing")?,
        idle_release_s: f("idle_release_s")?,
        probe_interval_s: f("probe_interval_s")?,
        probe_interval_max_s: f("probe_interval_max_s")?,
        max_message_size: i("max_message_size")?,
        recv_buffer_bytes: i("recv_buffer_bytes")?,
        clock_reserve_block: c.getattr("clock_reserve_block")?.extract::<u64>()?,
        close_revoke_timeout_s: f("close_revoke_timeout_s")?,
        close_linger_rtos: f("close_linger_rtos")?,
        peer_timeout_s: f("peer_timeout_s")?,
        secure: b("secure")?,
    })
}

impl ExonCore {
    /// The engine, locked (waiting for the lock without the interpreter's: another thread
    /// may hold it while it calls into Python).
    fn eng(&self, py: Python<'_>) -> MutexGuard<'_, Engine<PyAddr>> {
        self.eng.lock_py_attached(py).unwrap_or_else(|p| p.into_inner())
    }

    fn name<'py>(&self, py: Python<'py>, peer: &Arc<str>) -> Bound<'py, PyString> {
        let mut names = locked(&self.names);
        if let Some(n) = names.get(peer) {
            return n.bind(py).clone();
        }
        if names.len() > 8192 {
            names.clear();
        }
        let s = PyString::new(py, peer);
        names.insert(peer.clone(), s.clone().unbind());
        s
    }

    fn event<'py>(&self, py: Python<'py>, ev: Event) -> PyResult<Bound<'py, PyAny>> {
        let c = &self.classes;
        let rid = |r: Option<i64>| -> Bound<'py, PyAny> {
            match r {
                Some(v) => v.into_pyobject(py).expect("ints convert").into_any(),
                None => py.None().into_bound(py),
            }
        };
        match ev {
            Event::Delivered { source, payload } => {
                c.delivered.bind(py).call1((self.name(py, &source), PyBytes::new(py, &payload)))
            }
            Event::ReceiptReady { receipt_id } => c.receipt_ready.bind(py).call1((receipt_id,)),
            Event::Writable => c.writable.bind(py).call0(),
            Event::OutcomeUnknown { destination, payload, receipt_id } => c.outcome_unknown.bind(py).call1((
                self.name(py, &destination),
                PyBytes::new(py, &payload),
                rid(receipt_id),
            )),
            Event::NotDelivered { destination, payload, receipt_id } => c.not_delivered.bind(py).call1((
                self.name(py, &destination),
                PyBytes::new(py, &payload),
                rid(receipt_id),
            )),
            Event::PeerUnreachable { peer, silent_s } => {
                c.peer_unreachable.bind(py).call1((self.name(py, &peer), silent_s))
            }
            Event::PeerReachable { peer } => c.peer_reachable.bind(py).call1((self.name(py, &peer),)),
        }
    }

    /// After each step: the engine's events into the deque, its counters into the stats,
    /// and an error a Python callback raised, raised here.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let (events, deltas) = {
            let mut e = self.eng(py);
            (e.take_events(), e.stats.take())
        };
        if !events.is_empty() {
            let dq = self.events.bind(py);
            for ev in events {
                dq.call_method1("append", (self.event(py, ev)?,))?;
            }
        }
        if !deltas.is_empty() {
            let st = self.stats.bind(py);
            for (name, d) in deltas {
                let v: i64 = st.getattr(name)?.extract()?;
                st.setattr(name, v + d)?;
            }
        }
        let taken = locked(&self.err).take();
        if let Some(e) = taken {
            return Err(e);
        }
        Ok(())
    }

    fn sec(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        locked(&self.sec).as_ref().map(|s| s.clone_ref(py))
    }

    fn send_error(&self, py: Python<'_>, e: SendError) -> PyErr {
        let (cls, msg) = match e {
            SendError::Closed(m) => (&self.classes.closed, m),
            SendError::TooLarge(m) => (&self.classes.too_large, m),
            SendError::WouldBlock(m) => (&self.classes.would_block, m),
            SendError::Usage(m) => (&self.classes.usage, m),
        };
        match cls.bind(py).call1((msg,)) {
            Ok(v) => PyErr::from_value(v),
            Err(e) => e,
        }
    }

    /// One datagram read by a secure node: the secure layer opens it (no borrow held: it
    /// may call back), then the engine runs its frames.
    fn receive_sealed(&self, py: Python<'_>, sec: &Bound<'_, PyAny>, data: &Bound<'_, PyAny>, addr: &Bound<'_, PyAny>, now: f64) -> PyResult<()> {
        let n = data.len()?;
        self.eng(py).note_datagram(n);
        let opened = sec.call_method1("open", (data, addr, now))?;
        if opened.is_none() {
            return Ok(());
        }
        let t = opened.cast::<PyTuple>()?;
        let pt = t.get_item(0)?;
        let peer = t.get_item(1)?;
        let peer_s: &str = &peer.cast::<PyString>()?.to_cow()?;
        let pt_b = pt.cast::<PyBytes>()?;
        self.eng(py).receive_plain(pt_b.as_bytes(), Some(peer_s), Some(PyAddr(addr.clone().unbind())), now);
        self.sync(py)
    }
}

#[pymethods]
impl ExonCore {
    /// `node_id`, `config` (an `ExonConfig`), the clock store, the resolver and path MTU
    /// hook (or None), the pacer of first exchanges (shared with the secure layer), and the
    /// deque and `ExonStats` the secure layer writes to as well.
    #[new]
    #[pyo3(signature = (node_id, config, clock_store, resolver, path_mtu, pacer, events, stats))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        node_id: &str,
        config: &Bound<'_, PyAny>,
        clock_store: Py<PyAny>,
        resolver: Option<Py<PyAny>>,
        path_mtu: Option<Py<PyAny>>,
        pacer: Py<PyAny>,
        events: Py<PyAny>,
        stats: Py<PyAny>,
    ) -> PyResult<Self> {
        let cfg = cfg_of(config)?;
        let err: ErrSlot = Arc::new(Mutex::new(None));
        let sec: SecSlot = Arc::new(Mutex::new(None));
        let has_mtu = path_mtu.is_some();
        let refs: RefsSlot = Arc::new(Mutex::new(HostRefs {
            store: Some(clock_store),
            resolver,
            path_mtu,
            pacer: Some(pacer),
        }));
        let host = PyHost { refs: refs.clone(), sec: sec.clone(), err: err.clone() };
        let eng = Engine::new(node_id, cfg, Box::new(host), has_mtu);
        let taken = locked(&err).take();
        if let Some(e) = taken {
            return Err(e);
        }
        Ok(ExonCore {
            eng: Mutex::new(eng),
            sec,
            refs,
            events,
            stats,
            config: config.clone().unbind(),
            err,
            classes: Classes::load(py)?,
            names: Mutex::new(HashMap::new()),
            id: PyString::new(py, node_id).unbind(),
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // (try_lock: a collection that runs while this thread holds a lock skips what it
        // guards, which only keeps those objects alive a while longer)
        if let Ok(sec) = self.sec.try_lock() {
            if let Some(s) = sec.as_ref() {
                visit.call(s)?;
            }
        }
        if let Ok(refs) = self.refs.try_lock() {
            for r in [&refs.store, &refs.resolver, &refs.path_mtu, &refs.pacer].into_iter().flatten() {
                visit.call(r)?;
            }
        }
        visit.call(&self.events)?;
        visit.call(&self.stats)?;
        visit.call(&self.config)?;
        Ok(())
    }

    fn __clear__(&self) {
        if let Ok(mut sec) = self.sec.try_lock() {
            *sec = None;
        }
        if let Ok(mut refs) = self.refs.try_lock() {
            *refs = HostRefs::default();
        }
    }

    /// Attach the secure layer (made with this core's callbacks).
    fn attach_secure(&self, sec: Py<PyAny>) {
        *locked(&self.sec) = Some(sec);
    }

    #[getter]
    fn id(&self, py: Python<'_>) -> Py<PyString> {
        self.id.clone_ref(py)
    }

    #[getter]
    fn config(&self, py: Python<'_>) -> Py<PyAny> {
        self.config.clone_ref(py)
    }

    #[getter]
    fn stats(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.sync(py)?;
        Ok(self.stats.clone_ref(py))
    }

    #[getter]
    fn secure(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.sec(py)
    }

    #[getter]
    fn clock(&self, py: Python<'_>) -> u64 {
        self.eng(py).clock_value()
    }

    #[getter]
    fn boot_clock(&self, py: Python<'_>) -> u64 {
        self.eng(py).boot_clock()
    }

    #[getter]
    fn closing(&self, py: Python<'_>) -> bool {
        self.eng(py).closing()
    }

    #[getter]
    fn buffered_bytes(&self, py: Python<'_>) -> i64 {
        self.eng(py).buffered_bytes()
    }

    fn _path_proven(&self, py: Python<'_>, peer: &str, addr: Py<PyAny>) -> PyResult<()> {
        self.eng(py).path_proven(peer, PyAddr(addr));
        self.sync(py)
    }

    fn _session_ready(&self, py: Python<'_>, peer: &str, now: f64, held: bool) -> PyResult<()> {
        let (loaded, rtt) = match self.sec(py) {
            Some(s) => {
                let s = s.bind(py);
                (s.call_method1("loaded", (peer,))?.extract::<bool>()?, s.call_method1("handshake_rtt", (peer,))?.extract::<f64>()?)
            }
            None => (false, 0.0),
        };
        self.eng(py).session_ready(peer, now, held, loaded, rtt);
        self.sync(py)
    }

    #[pyo3(signature = (node_id, addr, public_key = None))]
    fn associate(&self, py: Python<'_>, node_id: &str, addr: Py<PyAny>, public_key: Option<Py<PyAny>>) -> PyResult<()> {
        py.import("a3m.exon.wire")?.call_method1("encode_id", (node_id,))?;
        self.eng(py).associate(node_id, PyAddr(addr));
        if let Some(k) = public_key {
            match self.sec(py) {
                None => {
                    let e = self.classes.usage.bind(py).call1(("a public key pins nothing at a node that opted out of security",))?;
                    return Err(PyErr::from_value(e));
                }
                Some(s) => {
                    let key = py.import("a3m.exon.secure")?.call_method1("parse_public_key", (k,))?;
                    s.bind(py).getattr("trust")?.call_method1("pin", (node_id, key))?;
                }
            }
        }
        Ok(())
    }

    fn announce(&self, py: Python<'_>, now: f64) -> PyResult<()> {
        self.eng(py).announce(now);
        self.sync(py)
    }

    fn address_of(&self, py: Python<'_>, node_id: &str) -> PyResult<Option<Py<PyAny>>> {
        let a = self.eng(py).address_of(&Arc::from(node_id));
        self.sync(py)?;
        Ok(a.map(|a| a.0))
    }

    fn next_event(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.sync(py)?;
        let dq = self.events.bind(py);
        if dq.len()? == 0 {
            return Ok(None);
        }
        Ok(Some(dq.call_method0("popleft")?.unbind()))
    }

    fn drain_events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.sync(py)?;
        let dq = self.events.bind(py);
        let out = PyList::new(py, dq.try_iter()?.collect::<PyResult<Vec<_>>>()?)?;
        dq.call_method0("clear")?;
        Ok(out)
    }

    fn is_idle(&self, py: Python<'_>) -> bool {
        self.eng(py).is_idle()
    }

    fn has_output(&self, py: Python<'_>) -> PyResult<bool> {
        if self.eng(py).has_output() {
            return Ok(true);
        }
        match self.sec(py) {
            Some(s) => s.bind(py).call_method0("has_output")?.extract(),
            None => Ok(false),
        }
    }

    fn ack_deadline(&self, py: Python<'_>) -> Option<f64> {
        self.eng(py).ack_deadline()
    }

    fn record_counts(&self, py: Python<'_>) -> (usize, usize) {
        self.eng(py).record_counts()
    }

    fn receive_datagrams(&self, py: Python<'_>, batch: &Bound<'_, PyList>, now: f64) -> PyResult<()> {
        let Some(sec) = self.sec(py) else {
            for item in batch.iter() {
                let t = item.cast::<PyTuple>()?;
                self.receive_datagram(py, &t.get_item(0)?, t.get_item(1)?.unbind(), now)?;
            }
            return Ok(());
        };
        let sec = sec.bind(py);
        if batch.len() < 2 {
            for item in batch.iter() {
                let t = item.cast::<PyTuple>()?;
                self.receive_sealed(py, sec, &t.get_item(0)?, &t.get_item(1)?, now)?;
            }
            return Ok(());
        }
        let live = sec.call_method0("sessions_by_index")?;
        let live = live.cast::<PyDict>()?;
        let mut rest: Vec<Bound<'_, PyAny>> = Vec::new();
        for item in batch.iter() {
            let t = item.cast::<PyTuple>()?;
            let data = t.get_item(0)?;
            let first = match data.cast::<PyBytes>() {
                Ok(b) => {
                    let d = b.as_bytes();
                    d.len() >= 30
                        && d[1] == 0x05
                        && d[0] == crate::wire::VERSION
                        && live.contains(u32::from_be_bytes([d[2], d[3], d[4], d[5]]))?
                }
                Err(_) => false,
            };
            if first {
                if !rest.is_empty() {
                    self.eng(py).stats.data_first += 1;
                }
                self.receive_sealed(py, sec, &data, &t.get_item(1)?, now)?;
            } else {
                rest.push(item);
            }
        }
        for item in rest {
            let t = item.cast::<PyTuple>()?;
            self.receive_sealed(py, sec, &t.get_item(0)?, &t.get_item(1)?, now)?;
        }
        self.sync(py)
    }

    fn receive_datagram(&self, py: Python<'_>, data: &Bound<'_, PyAny>, addr: Py<PyAny>, now: f64) -> PyResult<()> {
        match self.sec(py) {
            Some(sec) => self.receive_sealed(py, sec.bind(py), data, addr.bind(py), now),
            None => {
                let b: Vec<u8>;
                let bytes: &[u8] = match data.cast::<PyBytes>() {
                    Ok(x) => x.as_bytes(),
                    Err(_) => {
                        b = data.call_method0("__bytes__").or_else(|_| py.import("builtins")?.getattr("bytes")?.call1((data,)))?.extract()?;
                        &b
                    }
                };
                self.eng(py).receive_clear(bytes, PyAddr(addr), now);
                self.sync(py)
            }
        }
    }

    fn datagrams_to_send<'py>(&self, py: Python<'py>, now: f64) -> PyResult<Bound<'py, PyList>> {
        let items = self.eng(py).take_output(now);
        let sec = self.sec(py);
        let result = PyList::empty(py);
        if items.is_empty() {
            if let Some(s) = &sec {
                let s = s.bind(py);
                if s.call_method0("has_output")?.extract::<bool>()? {
                    let ctl = s.call_method0("take_control")?;
                    let ctl = ctl.cast::<PyList>()?;
                    self.count(py, ctl)?;
                    self.sync(py)?;
                    return Ok(ctl.clone());
                }
            }
            self.sync(py)?;
            return Ok(result);
        }
        for item in items {
            match item {
                OutItem::Batch { peer, addr, plains } => match &sec {
                    None => {
                        for p in plains {
                            result.append((PyBytes::new(py, &p), addr.0.bind(py)))?;
                        }
                    }
                    Some(s) => {
                        let pl = PyList::new(py, plains.iter().map(|p| PyBytes::new(py, p)))?;
                        s.bind(py).call_method1("seal_many", (self.name(py, &peer), pl, addr.0.bind(py), now, &result))?;
                    }
                },
                OutItem::Solo { peer, addr, plain } => match &sec {
                    None => result.append((PyBytes::new(py, &plain), addr.0.bind(py)))?,
                    Some(s) => {
                        s.bind(py).call_method1("seal", (self.name(py, &peer), PyBytes::new(py, &plain), addr.0.bind(py), now, &result))?;
                    }
                },
            }
        }
        let mut out = result;
        if let Some(s) = &sec {
            let s = s.bind(py);
            if s.call_method0("has_output")?.extract::<bool>()? {
                let ctl = s.call_method0("take_control")?;
                let joined = ctl.call_method1("__add__", (&out,))?;
                out = joined.cast::<PyList>()?.clone();
            }
        }
        self.count(py, &out)?;
        self.sync(py)?;
        Ok(out)
    }

    fn next_timer(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        let t_exon = self.eng(py).exon_timer();
        if let Some(s) = self.sec(py) {
            let t: Option<f64> = s.bind(py).call_method0("next_timer")?.extract()?;
            if let Some(ts) = t {
                if t_exon.is_none_or(|te| ts < te) {
                    return Ok(Some(ts));
                }
            }
        }
        Ok(t_exon)
    }

    fn handle_timer(&self, py: Python<'_>, now: f64) -> PyResult<()> {
        self.eng(py).timer_ack_due(now);
        if let Some(s) = self.sec(py) {
            s.bind(py).call_method1("handle_timer", (now,))?;
        }
        self.eng(py).handle_exon_timers(now);
        self.sync(py)
    }

    #[pyo3(signature = (dst, nbytes = 0))]
    fn can_send(&self, py: Python<'_>, dst: &str, nbytes: i64) -> bool {
        let _ = nbytes;
        self.eng(py).can_send(dst)
    }

    fn send_many(&self, py: Python<'_>, dst: &str, payloads: &Bound<'_, PyList>, now: f64) -> PyResult<usize> {
        let held: Vec<Bound<'_, PyBytes>> = payloads.iter().map(|p| p.cast_into::<PyBytes>().map_err(PyErr::from)).collect::<PyResult<_>>()?;
        let slices: Vec<&[u8]> = held.iter().map(|b| b.as_bytes()).collect();
        let n = self.eng(py).send_many(dst, &slices, now);
        self.sync(py)?;
        Ok(n)
    }

    fn send_room(&self, py: Python<'_>, dst: &str) -> i64 {
        self.eng(py).send_room(dst)
    }

    fn in_flight(&self, py: Python<'_>) -> i64 {
        self.eng(py).in_flight()
    }

    #[pyo3(signature = (dst, payload, now, receipt = false))]
    fn send(&self, py: Python<'_>, dst: &str, payload: &[u8], now: f64, receipt: bool) -> PyResult<Option<i64>> {
        let r = self.eng(py).send(dst, payload, now, receipt);
        match r {
            Ok(rid) => {
                self.sync(py)?;
                Ok(rid)
            }
            Err(e) => {
                self.sync(py)?;
                Err(self.send_error(py, e))
            }
        }
    }

    fn consumed(&self, py: Python<'_>, nbytes: i64) -> PyResult<()> {
        self.eng(py).consumed(nbytes);
        self.sync(py)
    }

    fn close(&self, py: Python<'_>, now: f64) -> PyResult<()> {
        self.eng(py).close(now);
        self.sync(py)
    }

    fn is_closed(&self, py: Python<'_>) -> bool {
        self.eng(py).is_closed()
    }

    fn is_finished(&self, py: Python<'_>) -> bool {
        self.eng(py).is_finished()
    }

    fn abandon(&self, py: Python<'_>, peer: &str, now: f64) -> PyResult<usize> {
        let n = self.eng(py).abandon(&Arc::from(peer), now);
        self.sync(py)?;
        Ok(n)
    }

    fn unreachable_peers(&self, py: Python<'_>) -> Vec<Py<PyString>> {
        let peers = self.eng(py).unreachable_peers();
        peers.iter().map(|p| self.name(py, p).unbind()).collect()
    }

    fn srtt(&self, py: Python<'_>, peer: &str) -> Option<f64> {
        self.eng(py).srtt(peer)
    }

    fn peer_pto(&self, py: Python<'_>, peer: &str) -> f64 {
        self.eng(py).peer_pto(peer)
    }

    fn max_peer_pto(&self, py: Python<'_>) -> f64 {
        self.eng(py).max_peer_pto()
    }

    fn max_unfragmented(&self, py: Python<'_>, peer: &str) -> PyResult<i64> {
        let v = self.eng(py).max_unfragmented(&Arc::from(peer));
        self.sync(py)?;
        Ok(v)
    }

    fn path_stats<'py>(&self, py: Python<'py>, peer: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
        let eng = self.eng(py);
        let Some(p) = eng.path_stats(peer) else { return Ok(None) };
        let d = PyDict::new(py);
        use crate::exon::recovery::SnapValue;
        for (k, v) in p.snapshot() {
            match v {
                SnapValue::Float(x) => d.set_item(k, x)?,
                SnapValue::Int(x) => d.set_item(k, x)?,
                SnapValue::Bool(x) => d.set_item(k, x)?,
            }
        }
        Ok(Some(d))
    }

    /// Diagnostics: the peers of the send records, in order.
    fn send_peers(&self, py: Python<'_>) -> Vec<Py<PyString>> {
        let peers = self.eng(py).send_peers();
        peers.iter().map(|p| self.name(py, p).unbind()).collect()
    }
}

impl ExonCore {
    fn count(&self, py: Python<'_>, out: &Bound<'_, PyList>) -> PyResult<()> {
        let mut n = 0usize;
        for item in out.iter() {
            n += item.cast::<PyTuple>()?.get_item(0)?.len()?;
        }
        self.eng(py).count_out(out.len(), n);
        Ok(())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ExonCore>()?;
    Ok(())
}
