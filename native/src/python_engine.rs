//! `a3m._native.ExonCore`: the Rust Exon engine (`exon::engine`) with the Python verbs of
//! `a3m.exon.protocol.ExonProtocol`, its twin and specification.
//!
//! The secure layer stays Python (`a3m.exon.secure.SecureLayer`): it opens each datagram
//! before the engine reads it and seals what the engine sends, and calls back into the
//! engine (`_path_proven`, `_session_ready`, `peer_pto`). So the engine's state sits in a
//! `RefCell` borrowed only between calls into Python, never across one. Events go to the
//! same deque the secure layer writes to, in the order they happen; the engine's counters
//! are added to the same `ExonStats` object after each call.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use ahash::AHashMap as HashMap;

use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::exon::clock::ClockStore;
use crate::exon::config::Config;
use crate::exon::engine::{Engine, Host, OutItem, SendError};
use crate::exon::events::Event;
use crate::python::UdpIo;
use crate::python_io::{monotonic, read_batch, OutBatch};

/// A Python address (any hashable, e.g. `("127.0.0.1", 5000)`), compared as Python does.
/// A numeric socket address also keeps its parsed form (and its tuple's length, which
/// Python's equality sees), so that cloning and comparing need no interpreter: the engine
/// then runs without the interpreter's lock (`run_io`).
pub struct PyAddr {
    obj: Arc<Py<PyAny>>,
    sock: Option<(SocketAddr, usize)>,
}

impl PyAddr {
    pub fn new(obj: Py<PyAny>) -> PyAddr {
        let sock = Python::attach(|py| {
            let b = obj.bind(py);
            let n = b.len().unwrap_or(0);
            crate::python_session::sock_addr_of(b).map(|sa| (sa, n))
        });
        PyAddr { obj: Arc::new(obj), sock }
    }

    /// A socket address read natively, with its Python tuple (made by the socket's cache).
    pub fn sock(sa: SocketAddr, obj: Py<PyAny>) -> PyAddr {
        let n = if sa.is_ipv4() { 2 } else { 4 };
        PyAddr { obj: Arc::new(obj), sock: Some((sa, n)) }
    }

    pub fn bind<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        self.obj.bind(py)
    }

    pub fn socket_addr(&self) -> Option<SocketAddr> {
        self.sock.map(|(sa, _)| sa)
    }
}

impl Clone for PyAddr {
    fn clone(&self) -> Self {
        PyAddr { obj: self.obj.clone(), sock: self.sock }
    }
}

impl PartialEq for PyAddr {
    fn eq(&self, o: &Self) -> bool {
        if Arc::ptr_eq(&self.obj, &o.obj) || self.obj.as_ptr() == o.obj.as_ptr() {
            return true;
        }
        if let (Some(a), Some(b)) = (self.sock, o.sock) {
            return a == b;
        }
        Python::attach(|py| self.obj.bind(py).eq(o.obj.bind(py)).unwrap_or(false))
    }
}

type ErrSlot = Arc<Mutex<Option<PyErr>>>;
type SecSlot = Arc<Mutex<Option<Py<PyAny>>>>;

pub(crate) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
            self.keep(store.bind(py).call_method0(pyo3::intern!(py, "load")).and_then(|v| v.extract::<u64>()))
        })
        .unwrap_or(0)
    }
    fn reserve(&mut self, upto: u64) {
        Python::attach(|py| {
            if let Some(store) = self.get(py, |r| &r.store) {
                self.keep(store.bind(py).call_method1(pyo3::intern!(py, "reserve"), (upto,)));
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
                Some(PyAddr::new(v.unbind()))
            }
        })
    }
    fn path_mtu(&mut self, addr: &PyAddr) -> Option<i64> {
        Python::attach(|py| {
            let f = self.get(py, |r| &r.path_mtu)?;
            self.keep(f.bind(py).call1((addr.bind(py),)).and_then(|v| v.extract::<i64>()))
        })
    }
    fn sec_holding(&mut self, peer: &str) -> bool {
        let sec = Python::attach(|py| locked(&self.sec).as_ref().map(|s| s.clone_ref(py)));
        let Some(s) = sec else { return false };
        Python::attach(|py| self.keep(s.bind(py).call_method1(pyo3::intern!(py, "holding"), (peer,)).and_then(|v| v.extract::<bool>())))
            .unwrap_or(false)
    }
    fn pacer_admit(&mut self, reserved: f64, now: f64, grace: f64) -> f64 {
        Python::attach(|py| {
            let pacer = self.get(py, |r| &r.pacer)?;
            self.keep(pacer.bind(py).call_method1(pyo3::intern!(py, "admit"), (reserved, now, grace)).and_then(|v| v.extract::<f64>()))
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

/// A datagram a native loop read and left to Python: its bytes, its source, and the
/// meter's verdict when it is a token-less HELLO the loop metered.
pub(crate) type Pending = (Vec<u8>, SocketAddr, Option<u8>);

/// What the fast path of a live session reads of the secure layer (its own dicts), and what a
/// native read refuses and meters by; a read takes a copy once (its `Arc`s cloned).
#[derive(Clone)]
pub(crate) struct FastPath {
    /// The secure layer's session table (its `_by_index` and `_current`, natively).
    pub(crate) table: Arc<Mutex<crate::python_session::Table>>,
    pub(crate) unanswered_rehandshake: i64,
    /// The secure layer's handshake budgets (its `meter()`), when native: the native reads
    /// shed a flood's token-less HELLOs from them before any Python runs.
    pub(crate) meter: Option<crate::python_meter::SharedMeter>,
    /// The cookie jar's secrets (its `cookie_keys()`), when native: the native reads refuse
    /// a forged INITIATE from them before any Python runs.
    pub(crate) cookies: Option<crate::python_cookie_keys::SharedKeys>,
}

/// Where sealed datagrams go: the twin's list of `(bytes, address)`, or a batch for the
/// socket (no Python object per datagram).
enum Sink<'a, 'py> {
    List(&'a Bound<'py, PyList>),
    Batch(&'a mut OutBatch, &'a UdpIo),
}

/// Where a datagram came from: a socket address read natively (its Python tuple made only if
/// needed), or a Python address (the twin's batches, the simulator's).
pub(crate) enum Source<'a, 'py> {
    Sock(SocketAddr, &'a UdpIo),
    Py(&'a Bound<'py, PyAny>),
}

impl<'a, 'py> Source<'a, 'py> {
    /// Whether it is the session's proven address (`addr`, parsed as `sock`).
    fn is(&self, py: Python<'py>, addr: &Py<PyAny>, sock: Option<SocketAddr>) -> PyResult<bool> {
        match self {
            Source::Sock(sa, io) => match sock {
                Some(s) => Ok(s == *sa),
                None => addr.bind(py).eq(io.addr_object(py, *sa)?),
            },
            Source::Py(a) => Ok(addr.bind(py).is(*a) || addr.bind(py).eq(*a)?),
        }
    }
}

/// A datagram the fast path may open: borrowed (a Python `bytes`: opened into a copy) or the
/// native read buffer's own (opened in place).
pub(crate) enum Datagram<'a> {
    Shared(&'a [u8], Vec<u8>),
    Owned(&'a mut [u8]),
}

impl<'a> Datagram<'a> {
    fn bytes(&self) -> &[u8] {
        match self {
            Datagram::Shared(b, _) => b,
            Datagram::Owned(b) => b,
        }
    }

    /// The plaintext, or None when the tag does not verify (an owned buffer is then garbage).
    fn open(&mut self, c: &crate::aead::Cipher) -> Option<&[u8]> {
        let n = self.bytes().len();
        match self {
            Datagram::Shared(b, out) => {
                out.resize(n - crate::aead::OVERHEAD, 0);
                c.open(b, out).then_some(&out[..])
            }
            Datagram::Owned(b) => {
                c.open_in_place(b).then_some(&b[crate::aead::HEADER..n - crate::aead::TAG])
            }
        }
    }
}

/// A sealed DATA datagram's header fields (None: not one).
pub(crate) fn sealed_data(d: &[u8]) -> Option<(u32, u64)> {
    if d.len() < crate::aead::OVERHEAD || d[0] != crate::wire::VERSION || d[1] != crate::aead::DATA {
        return None;
    }
    Some((crate::aead::index_of(d), crate::aead::counter_of(d)))
}

/// The Exon engine, driven as an `ExonProtocol` is (see the module's docstring).
#[pyclass(module = "a3m._native", name = "ExonCore")]
pub struct ExonCore {
    pub(crate) eng: Mutex<Engine<PyAddr>>,
    pub(crate) sec: SecSlot,
    /// Datagrams the native loop (`run_io`) read but left to the secure layer (Python), in
    /// order: the next `receive_io` takes them first.
    /// Each with the meter's verdict when it is a token-less HELLO the loop metered (else
    /// none): the secure layer answers it without metering it again (`open_hello`).
    pub(crate) pending_rx: Mutex<Vec<Pending>>,
    /// Output the native loop took but could not seal itself, in order: the next
    /// `output_batch` sends it first.
    pub(crate) pending_tx: Mutex<Vec<OutItem<PyAddr>>>,
    /// When the native loop (`run_io`) sleeps until, as f64 bits (0: awake or not in it).
    pub(crate) loop_until: std::sync::atomic::AtomicU64,
    /// An application thread leads (runs the turn itself): the native loop leaves the socket
    /// to it (`set_leader`).
    pub(crate) leader: std::sync::atomic::AtomicBool,
    /// Until when a leader's wait (`lead_io`) sleeps at most, as f64 bits (0: none waits):
    /// an exchange's send that sets an earlier timer wakes it (`python_exchange.rs`).
    pub(crate) lead_until: std::sync::atomic::AtomicU64,
    /// The node's lent REQ and REP sockets (`exchange.rs`), when it has an `Exchange`: a
    /// leader's reads hand them their requests and replies without Python.
    pub(crate) exchange: Mutex<Option<Arc<Mutex<crate::exchange::Table>>>>,
    /// Forgeries the native paths found (opened in place: counted here, added to the secure
    /// layer's `forged` when the counters are read).
    pub(crate) forged: std::sync::atomic::AtomicI64,
    /// Datagrams the native loop refused as the secure layer would (`python_loop::Refused`;
    /// added to its counters when they are read).
    pub(crate) refused: [std::sync::atomic::AtomicI64; crate::python_loop::REFUSED_NAMES.len()],
    /// Datagrams a native loop read and left to Python (`pending_rx`), ever (diagnostics).
    pub(crate) left: std::sync::atomic::AtomicU64,
    /// Token-less HELLOs the native reads shed from the meter, ever (diagnostics: none of
    /// them reached Python).
    pub(crate) shed: std::sync::atomic::AtomicU64,
    /// INITIATEs the native reads refused (truncated, or a cookie that does not open), ever
    /// (diagnostics: none of them reached Python).
    pub(crate) initiates_refused: std::sync::atomic::AtomicU64,
    /// Token-less HELLOs the native reads answered with a RETRY (added to the secure
    /// layer's `retries_sent` when the counters are read).
    pub(crate) retries: std::sync::atomic::AtomicI64,
    /// Datagrams handed to the Python secure layer (`open`, `open_hello`), ever (diagnostics).
    pub(crate) to_python: std::sync::atomic::AtomicU64,
    /// A leader's poll-or-sleep choice (`lead_io`; its budget is `set_busy_poll`'s).
    pub(crate) poll: Mutex<crate::poll_choice::PollChoice>,
    /// Datagrams the native loop failed to send (the driver adds them to its `io_errors`).
    pub(crate) io_errors: std::sync::atomic::AtomicU64,
    /// The secure layer's live sessions by index and by peer (its own dicts, read here) and
    /// its rehandshake threshold: the fast path of a live session's datagrams.
    pub(crate) fast: Mutex<Option<FastPath>>,
    /// The secure layer's queues (`SecLooks`), when it has them.
    looks: Mutex<Option<SecLooks>>,
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

/// The secure layer's own queues, read without calling it (`state.py` keeps their identity
/// for the layer's life): its control datagrams, its timers' heap and its kept WELCOMEs'
/// order. A turn then calls it only when it has output or a timer may be due, not three or
/// four times a turn to hear that nothing is.
pub(crate) struct SecLooks {
    control: Py<PyList>,
    timers: Py<PyList>,
    welcomes: Py<PyAny>,
}

impl SecLooks {
    /// The queues of `s` (None: a secure layer without them, asked by its methods).
    fn of(s: &Bound<'_, PyAny>) -> Option<SecLooks> {
        let py = s.py();
        let list = |name: &Bound<'_, PyString>| s.getattr(name).ok()?.cast_into::<PyList>().ok().map(Bound::unbind);
        Some(SecLooks {
            control: list(pyo3::intern!(py, "_control"))?,
            timers: list(pyo3::intern!(py, "_timers"))?,
            welcomes: s.getattr(pyo3::intern!(py, "_welcomes_order")).ok()?.unbind(),
        })
    }

    /// `has_output()`: control datagrams wait.
    fn has_output(&self, py: Python<'_>) -> bool {
        !self.control.bind(py).is_empty()
    }

    /// A bound below (or at) `next_timer()` and every time `handle_timer` acts on: the heap's
    /// top (its least entry, stale ones included) and the oldest kept WELCOME's expiry;
    /// infinity when both are empty (`next_timer()` is None then).
    fn earliest(&self, py: Python<'_>) -> PyResult<f64> {
        let first = |q: &Bound<'_, PyAny>| -> PyResult<f64> {
            if q.len()? == 0 {
                return Ok(f64::INFINITY);
            }
            q.get_item(0)?.get_item(0)?.extract()
        };
        Ok(first(self.timers.bind(py).as_any())?.min(first(self.welcomes.bind(py))?))
    }
}

impl ExonCore {
    /// The secure layer's control datagrams (handshake and path packets, with their
    /// addresses), taken when it has any (`take_control`); None: none.
    fn sec_control<'py>(&self, s: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyList>>> {
        let py = s.py();
        if !self.sec_has_output(s)? {
            return Ok(None);
        }
        Ok(Some(s.call_method0(pyo3::intern!(py, "take_control"))?.cast::<PyList>()?.clone()))
    }

    /// The secure layer `s` has control datagrams to send (its queue read, else asked).
    fn sec_has_output(&self, s: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = s.py();
        if let Some(l) = locked(&self.looks).as_ref() {
            return Ok(l.has_output(py));
        }
        s.call_method0(pyo3::intern!(py, "has_output"))?.extract()
    }

    /// `SecLooks::earliest` of the secure layer (None: it has no queues to read).
    fn sec_earliest(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        match locked(&self.looks).as_ref() {
            Some(l) => l.earliest(py).map(Some),
            None => Ok(None),
        }
    }

    /// `SecureLayer.open` of a DATA datagram under a live session, done here when its rules
    /// are the plain ones (the session confirmed, the datagram from its proven address, no
    /// candidate path, a fresh counter, a tag that verifies): the same checks and the same
    /// updates (replay window, last_recv, unanswered) as the twin, then the engine reads the
    /// plaintext, all without a Python call. False: the secure layer's `open` does it (a
    /// handshake packet, an unknown or unconfirmed session, a path move, a replayed or forged
    /// datagram: each counted there), nothing having changed. `turn` holds what this call's
    /// datagrams read of their sessions (see `Turn`).
    fn open_fast<'py>(&self, py: Python<'py>, d: &mut Datagram<'_>, from: Source<'_, 'py>, now: f64) -> PyResult<bool> {
        let Some((index, counter)) = sealed_data(d.bytes()) else { return Ok(false) };
        let Some(hot) = self.session_by_index(index) else { return Ok(false) };
        let mut h = crate::python_session::lock(&hot);
        if !h.confirmed || h.candidate.is_some() || !from.is(py, &h.addr, h.sock_addr)? {
            return Ok(false);
        }
        if !h.window.fresh(counter) {
            return Ok(false);
        }
        let Some(pt) = d.open(&h.open) else {
            if matches!(d, Datagram::Shared(..)) {
                return Ok(false); // (the secure layer opens it again, and counts it forged)
            }
            // Opened in place: the datagram is gone. The twin's open would count it forged
            // and change nothing else (the counter was fresh, the session found): so here.
            self.forged.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(true);
        };
        h.window.accept(counter);
        h.last_recv = now;
        h.unanswered = 0;
        if pt.is_empty() {
            return Ok(true); // a keepalive
        }
        let peer = h.peer.clone();
        drop(h);
        // (an authenticated peer's address is the secure layer's business: unused here)
        self.eng(py).receive_plain(pt, Some(&peer), None, now);
        Ok(true)
    }

    fn session_by_index(&self, index: u32) -> Option<crate::python_session::HotRef> {
        let fast = locked(&self.fast);
        let f = fast.as_ref()?;
        let t = crate::python_session::table(&f.table);
        t.by_index.get(&index).cloned()
    }

    fn session_of_peer(&self, peer: &str) -> Option<(crate::python_session::HotRef, i64)> {
        let fast = locked(&self.fast);
        let f = fast.as_ref()?;
        let t = crate::python_session::table(&f.table);
        t.current.get(peer).cloned().map(|h| (h, f.unanswered_rehandshake))
    }

    /// `SecureLayer.seal_many` of `plains` for `peer`, done here when its rules are the plain
    /// ones (a current session, not refused yet, no candidate path, no new handshake due):
    /// the same datagrams and updates (counter, unanswered, last_sent) as the twin. False:
    /// the secure layer's `seal_many` does it, nothing having changed.
    fn seal_fast(&self, py: Python<'_>, peer: &Bound<'_, PyString>, plains: &[Vec<u8>], now: f64, out: &Bound<'_, PyList>) -> PyResult<bool> {
        self.seal_fast_to(py, peer, plains, now, &mut Sink::List(out))
    }

    fn seal_fast_to(&self, py: Python<'_>, peer: &Bound<'_, PyString>, plains: &[Vec<u8>], now: f64, sink: &mut Sink<'_, '_>) -> PyResult<bool> {
        let name: &str = &peer.to_cow()?;
        let Some((hot, limit)) = self.session_of_peer(name) else { return Ok(false) };
        let mut h = crate::python_session::lock(&hot);
        if now >= h.reject_at || h.candidate.is_some() || (h.initiator && now >= h.rekey_at) {
            return Ok(false);
        }
        let after = h.unanswered + plains.len() as i64;
        if after > limit && now - h.last_recv > h.silence_s.max(4.0 * h.rtt) {
            return Ok(false); // a new handshake may be due: the secure layer decides
        }
        let counter = h.counter;
        if counter.checked_add(plains.len() as u64).is_none() {
            return Ok(false);
        }
        let index = h.remote_index;
        let dest = h.addr.bind(py).clone();
        let sock = h.sock_addr;
        for (k, p) in plains.iter().enumerate() {
            let n = p.len() + crate::aead::OVERHEAD;
            let c = &h.seal;
            let seal = |o: &mut [u8]| c.seal(o, crate::wire::VERSION, crate::aead::DATA, index, counter + k as u64, p);
            match sink {
                Sink::List(out) => {
                    let pkt = PyBytes::new_with(py, n, |o| {
                        seal(o);
                        Ok(())
                    })?;
                    out.append((pkt, &dest))?;
                }
                Sink::Batch(b, io) => seal(b.reserve_to(py, io, n, &dest, sock)?),
            }
        }
        h.unanswered = after;
        h.counter = counter + plains.len() as u64;
        h.last_sent = now;
        Ok(true)
    }

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

    /// After each step: the engine's events into the deque (in the order they happened
    /// beside the secure layer's), and an error a Python callback raised, raised here.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.sync_events(py)
    }

    /// `sync` without the counters (per datagram: the call that read them syncs those).
    fn sync_events(&self, py: Python<'_>) -> PyResult<()> {
        let events = self.eng(py).take_events();
        if !events.is_empty() {
            let dq = self.events.bind(py);
            for ev in events {
                dq.call_method1(pyo3::intern!(py, "append"), (self.event(py, ev)?,))?;
            }
        }
        let taken = locked(&self.err).take();
        if let Some(e) = taken {
            return Err(e);
        }
        Ok(())
    }

    /// The engine's counters added to the `ExonStats` object, when that is read (`stats`):
    /// the secure layer only ever adds to its own fields there, so the object is exact
    /// whenever it is read through `stats` (one held across calls lags: read it again).
    fn sync_stats(&self, py: Python<'_>) -> PyResult<()> {
        let mut deltas = self.eng(py).stats.take();
        let forged = self.forged.swap(0, std::sync::atomic::Ordering::Relaxed);
        if forged != 0 {
            deltas.push(("forged", forged));
        }
        let retries = self.retries.swap(0, std::sync::atomic::Ordering::Relaxed);
        if retries != 0 {
            deltas.push(("retries_sent", retries));
        }
        for (name, count) in crate::python_loop::REFUSED_NAMES.iter().zip(&self.refused) {
            let c = count.swap(0, std::sync::atomic::Ordering::Relaxed);
            if c != 0 {
                deltas.push((name, c));
            }
        }
        let st = self.stats.bind(py);
        for (name, d) in deltas {
            let v: i64 = st.getattr(name)?.extract()?;
            st.setattr(name, v + d)?;
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

    /// One datagram read by a secure node (`receive_sealed` of bytes read natively; `verdict`:
    /// the meter's, when the native loop metered this HELLO already). A live session's DATA
    /// is opened here; else what the secure layer's first rules refuse is refused and a
    /// token-less HELLO metered (shed: counted, no Python), as the native loop does, with the
    /// session table exact here (what came before was handled in order); the rest goes to the
    /// secure layer (no borrow held: it may call back), then the engine runs its frames. A
    /// Python object is made only for that slow path.
    #[allow(clippy::too_many_arguments)]
    fn receive_sealed_bytes<'py>(&self, py: Python<'py>, sec: &Bound<'py, PyAny>, d: &mut [u8], sa: SocketAddr, io: &UdpIo, now: f64, verdict: Option<u8>, fast: &Option<FastPath>) -> PyResult<()> {
        let n = d.len();
        if verdict.is_none() && self.open_fast(py, &mut Datagram::Owned(&mut *d), Source::Sock(sa, io), now)? {
            self.eng(py).note_datagram(n);
            return self.sync_events(py);
        }
        // (refuse_native and meter_hello count what they drop in datagrams_in themselves)
        if let Some(f) = fast {
            if self.refuse_native(d, &f.table, false) || self.refuse_initiate(f.cookies.as_ref(), d, &sa, now) {
                return Ok(());
            }
            if let Some(v) = verdict.or_else(|| self.meter_hello(f.meter.as_ref(), d, &sa, now)) {
                if v == crate::meter::SHED {
                    return Ok(());
                }
                if v == crate::meter::RETRY {
                    if let Some(r) = self.answer_retry(f.cookies.as_ref(), d, &sa, now) {
                        self.send_retries(io, io.fd(py)?, &[(r, sa)]);
                        return Ok(());
                    }
                }
                self.eng(py).note_datagram(n);
                let addr = io.addr_object(py, sa)?;
                self.to_python.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                sec.call_method1(pyo3::intern!(py, "open_hello"), (PyBytes::new(py, d), &addr, now, v))?;
                return self.sync_events(py);
            }
        }
        self.eng(py).note_datagram(n);
        let addr = io.addr_object(py, sa)?;
        self.to_python.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let opened = sec.call_method1(pyo3::intern!(py, "open"), (PyBytes::new(py, d), &addr, now))?;
        self.opened(py, &opened, addr.as_any(), now)
    }

    /// The engine reads what the secure layer opened (None: nothing for it).
    fn opened(&self, py: Python<'_>, opened: &Bound<'_, PyAny>, addr: &Bound<'_, PyAny>, now: f64) -> PyResult<()> {
        if opened.is_none() {
            return self.sync_events(py);
        }
        let t = opened.cast::<PyTuple>()?;
        let pt = t.get_item(0)?;
        let peer = t.get_item(1)?;
        let peer_s: &str = &peer.cast::<PyString>()?.to_cow()?;
        let pt_b = pt.cast::<PyBytes>()?;
        self.eng(py).receive_plain(pt_b.as_bytes(), Some(peer_s), Some(PyAddr::new(addr.clone().unbind())), now);
        self.sync_events(py)
    }

    fn receive_sealed(&self, py: Python<'_>, sec: &Bound<'_, PyAny>, data: &Bound<'_, PyAny>, addr: &Bound<'_, PyAny>, now: f64) -> PyResult<()> {
        let n = data.len()?;
        self.eng(py).note_datagram(n);
        if let Ok(b) = data.cast::<PyBytes>() {
            if self.open_fast(py, &mut Datagram::Shared(b.as_bytes(), Vec::new()), Source::Py(addr), now)? {
                return self.sync_events(py);
            }
        }
        self.to_python.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let opened = sec.call_method1(pyo3::intern!(py, "open"), (data, addr, now))?;
        self.opened(py, &opened, addr, now)
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
            pending_rx: Mutex::new(Vec::new()),
            pending_tx: Mutex::new(Vec::new()),
            loop_until: std::sync::atomic::AtomicU64::new(0),
            leader: std::sync::atomic::AtomicBool::new(false),
            lead_until: std::sync::atomic::AtomicU64::new(0),
            exchange: Mutex::new(None),
            forged: std::sync::atomic::AtomicI64::new(0),
            refused: Default::default(),
            left: std::sync::atomic::AtomicU64::new(0),
            shed: std::sync::atomic::AtomicU64::new(0),
            initiates_refused: std::sync::atomic::AtomicU64::new(0),
            retries: std::sync::atomic::AtomicI64::new(0),
            to_python: std::sync::atomic::AtomicU64::new(0),
            poll: Mutex::new(crate::poll_choice::PollChoice::new(0.0)),
            io_errors: std::sync::atomic::AtomicU64::new(0),
            fast: Mutex::new(None),
            looks: Mutex::new(None),
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
        if let Ok(looks) = self.looks.try_lock() {
            if let Some(l) = looks.as_ref() {
                visit.call(&l.control)?;
                visit.call(&l.timers)?;
                visit.call(&l.welcomes)?;
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
        if let Ok(mut looks) = self.looks.try_lock() {
            *looks = None;
        }
        if let Ok(mut refs) = self.refs.try_lock() {
            *refs = HostRefs::default();
        }
    }

    /// Attach the secure layer (made with this core's callbacks).
    fn attach_secure(&self, py: Python<'_>, sec: Py<PyAny>) -> PyResult<()> {
        let s = sec.bind(py);
        *locked(&self.looks) = SecLooks::of(s);
        let t = s.call_method0(pyo3::intern!(py, "session_table"))?;
        let table = match t.cast::<crate::python_session::SessionTable>() {
            Ok(t) => t.borrow().inner.clone(),
            Err(_) => {
                // (a Python table: the secure layer runs on its Python twins; no fast path)
                *locked(&self.sec) = Some(sec);
                return Ok(());
            }
        };
        let unanswered = py
            .import("a3m.exon.secure.state")?
            .getattr(pyo3::intern!(py, "UNANSWERED_REHANDSHAKE"))
            .and_then(|v| v.extract::<i64>())
            .unwrap_or(4);
        let meter = s
            .call_method0(pyo3::intern!(py, "meter"))
            .ok()
            .and_then(|m| m.cast::<crate::python_meter::HandshakeMeter>().ok().map(|m| m.get().shared.clone()));
        let cookies = s
            .call_method0(pyo3::intern!(py, "cookie_keys"))
            .ok()
            .and_then(|k| k.cast::<crate::python_cookie_keys::CookieKeys>().ok().map(|k| k.get().shared.clone()));
        *locked(&self.fast) = Some(FastPath { table, unanswered_rehandshake: unanswered, meter, cookies });
        *locked(&self.sec) = Some(sec);
        Ok(())
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
        self.sync_stats(py)?;
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
        self.eng(py).path_proven(peer, PyAddr::new(addr));
        self.sync(py)
    }

    fn _session_ready(&self, py: Python<'_>, peer: &str, now: f64, held: bool) -> PyResult<()> {
        let (loaded, rtt) = match self.sec(py) {
            Some(s) => {
                let s = s.bind(py);
                (s.call_method1(pyo3::intern!(py, "loaded"), (peer,))?.extract::<bool>()?, s.call_method1(pyo3::intern!(py, "handshake_rtt"), (peer,))?.extract::<f64>()?)
            }
            None => (false, 0.0),
        };
        self.eng(py).session_ready(peer, now, held, loaded, rtt);
        self.sync(py)
    }

    #[pyo3(signature = (node_id, addr, public_key = None))]
    fn associate(&self, py: Python<'_>, node_id: &str, addr: Py<PyAny>, public_key: Option<Py<PyAny>>) -> PyResult<()> {
        py.import("a3m.exon.wire")?.call_method1(pyo3::intern!(py, "encode_id"), (node_id,))?;
        self.eng(py).associate(node_id, PyAddr::new(addr));
        if let Some(k) = public_key {
            match self.sec(py) {
                None => {
                    let e = self.classes.usage.bind(py).call1(("a public key pins nothing at a node that opted out of security",))?;
                    return Err(PyErr::from_value(e));
                }
                Some(s) => {
                    let key = py.import("a3m.exon.secure")?.call_method1(pyo3::intern!(py, "parse_public_key"), (k,))?;
                    s.bind(py).getattr(pyo3::intern!(py, "trust"))?.call_method1(pyo3::intern!(py, "pin"), (node_id, key))?;
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
        Ok(a.map(|a| a.bind(py).clone().unbind()))
    }

    fn next_event(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.sync(py)?;
        let dq = self.events.bind(py);
        if dq.len()? == 0 {
            return Ok(None);
        }
        Ok(Some(dq.call_method0(pyo3::intern!(py, "popleft"))?.unbind()))
    }

    fn drain_events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.sync(py)?;
        let dq = self.events.bind(py);
        let out = PyList::new(py, dq.try_iter()?.collect::<PyResult<Vec<_>>>()?)?;
        dq.call_method0(pyo3::intern!(py, "clear"))?;
        Ok(out)
    }

    fn is_idle(&self, py: Python<'_>) -> bool {
        self.eng(py).is_idle()
    }

    fn has_output(&self, py: Python<'_>) -> PyResult<bool> {
        if self.eng(py).has_output() || !locked(&self.pending_tx).is_empty() {
            return Ok(true);
        }
        match self.sec(py) {
            Some(s) => self.sec_has_output(s.bind(py)),
            None => Ok(false),
        }
    }

    fn ack_deadline(&self, py: Python<'_>) -> Option<f64> {
        self.eng(py).ack_deadline()
    }

    fn record_counts(&self, py: Python<'_>) -> (usize, usize) {
        self.eng(py).record_counts()
    }

    /// The node's I/O without the interpreter's lock (`python_loop`): wait on `io`'s socket,
    /// `wake_fd` (-1: none) and the engine's timers until `until` (monotonic seconds;
    /// polling first for `spin_s`), doing the live sessions' plain work natively; back when
    /// Python has work. Returns (why: 0 `until` came, 1 woken, 2 Python has work, 3 the
    /// socket is readable and an application thread leads; datagrams read; the time).
    #[pyo3(signature = (io, wake_fd, until, spin_s = 0.0))]
    fn run_io(&self, py: Python<'_>, io: &UdpIo, wake_fd: i32, until: f64, spin_s: f64) -> PyResult<(u8, usize, f64)> {
        let fd = io.fd(py)?;
        // (a panic is counted and raised as NativePanic: the driver logs it, never a silent
        // stall of the I/O thread)
        let r = crate::python::guard("run_io", || Ok(py.detach(|| self.io_loop(io, fd, wake_fd, until, spin_s, false))))?;
        let taken = locked(&self.err).take();
        if let Some(e) = taken {
            return Err(e);
        }
        Ok((r.why, r.reads, r.now))
    }

    /// A leading application thread's wait, in one call (`run_io`'s loop for the thread
    /// that leads: it reads whatever the leader flag says and publishes no deadline): until
    /// `until` (the leader's deadline: the driver compares new deadlines with it), polling
    /// first as the node's poll choice says (`set_busy_poll`: its budget; the twin of
    /// `a3m/runtime/poll_choice.py`, told how long the input took), or for `window_s` when
    /// that is not 0 (the layer above's output waits for Exon's window: no choice, nothing
    /// recorded). A poll stops when a yield loses the CPU. Returns (why, as `run_io`'s;
    /// datagrams read; the time; whether a poll saw the input come).
    #[pyo3(signature = (io, wake_fd, until, window_s = 0.0))]
    fn lead_io(&self, py: Python<'_>, io: &UdpIo, wake_fd: i32, until: f64, window_s: f64) -> PyResult<(u8, usize, f64, bool)> {
        let fd = io.fd(py)?;
        let left = until - crate::python_io::monotonic();
        let (choose, polled, spin) = if window_s > 0.0 {
            (false, true, window_s.min(left))
        } else {
            let mut c = locked(&self.poll);
            if c.budget > 0.0 {
                let p = c.poll_next();
                (true, p, if p { c.budget.min(left) } else { 0.0 })
            } else {
                (false, false, 0.0)
            }
        };
        self.lead_until.store(until.to_bits(), std::sync::atomic::Ordering::SeqCst);
        let r = crate::python::guard("lead_io", || Ok(py.detach(|| self.io_loop(io, fd, wake_fd, until, spin, true))));
        self.lead_until.store(0, std::sync::atomic::Ordering::SeqCst);
        let r = r?;
        if choose && r.input_after >= 0.0 {
            locked(&self.poll).record(polled, r.input_after, r.preempted);
        }
        let taken = locked(&self.err).take();
        if let Some(e) = taken {
            return Err(e);
        }
        Ok((r.why, r.reads, r.now, polled && spin > 0.0 && r.input_after >= 0.0 && r.input_after <= spin))
    }

    /// The busy-poll budget of a leader's waits (seconds; 0: never poll).
    fn set_busy_poll(&self, budget: f64) {
        *locked(&self.poll) = crate::poll_choice::PollChoice::new(budget);
    }

    /// When the native loop sleeps until (monotonic seconds; 0.0 while it is awake or not
    /// running): a thread that set an earlier timer wakes it.
    fn loop_until(&self) -> f64 {
        f64::from_bits(self.loop_until.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// An application thread leads from now on (True) or no longer (False): while one does,
    /// the native loop reads nothing and comes back when the socket is readable (the leader
    /// reads: its reply reaches it without a hand-off between threads).
    fn set_leader(&self, leading: bool) {
        self.leader.store(leading, std::sync::atomic::Ordering::SeqCst);
    }

    /// Datagrams the native loops read and left to the Python turn (`pending_rx`: a
    /// handshake's, anything the plain rules do not cover), since the engine was made.
    fn loop_left(&self) -> u64 {
        self.left.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Token-less HELLOs the native reads shed from the handshake budgets (`meter.rs`)
    /// since the engine was made: counted in `unauth_shed` too, and never seen by Python.
    fn hellos_shed(&self) -> u64 {
        self.shed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// INITIATEs the native reads refused (truncated, or a cookie that does not open under
    /// the jar's secrets: `cookie_keys.rs`), ever (diagnostics).
    fn initiates_refused(&self) -> u64 {
        self.initiates_refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Datagrams handed to the Python secure layer (its `open` or `open_hello`) since the
    /// engine was made, by any path: what the native reads neither opened nor refused.
    fn secure_python(&self) -> u64 {
        self.to_python.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Datagrams the native loop failed to send since the last call (the driver counts them).
    fn take_io_errors(&self) -> u64 {
        self.io_errors.swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    /// A turn's reads, from the socket straight into the engine (`receive_datagrams` of
    /// what `io.recv(max)` returns, with the time read after the reads): how many datagrams
    /// were read, and that time.
    fn receive_io(&self, py: Python<'_>, io: &UdpIo, max: usize) -> PyResult<(usize, f64)> {
        let pending = std::mem::take(&mut *locked(&self.pending_rx));
        // the meter's verdicts on what the native loop left (the HELLOs it metered)
        let mut verdicts: Vec<Option<u8>> = Vec::new();
        let mut read = if pending.is_empty() {
            read_batch(py, io, max)?
        } else {
            // what the native loop left first, then what waits (an error reading: later)
            let mut r = crate::python_io::Read::default();
            for (d, sa, verdict) in pending {
                let start = r.data.len();
                r.data.extend_from_slice(&d);
                r.items.push((start, d.len(), sa));
                verdicts.push(verdict);
            }
            if let Ok(more) = read_batch(py, io, max) {
                for i in 0..more.items.len() {
                    let start = r.data.len();
                    r.data.extend_from_slice(more.bytes(i));
                    r.items.push((start, more.items[i].1, more.items[i].2));
                }
            }
            r
        };
        let now = monotonic();
        let n = read.items.len();
        if n == 0 {
            return Ok((0, now));
        }
        let Some(sec) = self.sec(py) else {
            for i in 0..n {
                let addr = io.addr_object(py, read.items[i].2)?;
                self.eng(py).receive_clear(read.bytes(i), PyAddr::sock(read.items[i].2, addr.into_any().unbind()), now);
            }
            self.sync(py)?;
            return Ok((n, now));
        };
        let sec = sec.bind(py);
        // Live sessions' datagrams first (as receive_datagrams: a flood waits behind them).
        let mut order: Vec<usize> = Vec::with_capacity(n);
        let mut rest: Vec<usize> = Vec::new();
        if n < 2 {
            order.push(0);
        } else {
            for i in 0..n {
                let live = match sealed_data(read.bytes(i)) {
                    Some((index, _)) => self.session_by_index(index).is_some(),
                    None => false,
                };
                if live {
                    if !rest.is_empty() {
                        self.eng(py).stats.data_first += 1;
                    }
                    order.push(i);
                } else {
                    rest.push(i);
                }
            }
            order.extend(rest);
        }
        let fast = locked(&self.fast).clone();
        for i in order {
            let (sa, verdict) = (read.items[i].2, verdicts.get(i).copied().flatten());
            self.receive_sealed_bytes(py, sec, read.bytes_mut(i), sa, io, now, verdict, &fast)?;
        }
        self.sync(py)?;
        Ok((n, now))
    }

    /// `datagrams_to_send(now)`, sealed into one batch for `io.send` (None: nothing to send).
    fn output_batch(&self, py: Python<'_>, io: &UdpIo, now: f64) -> PyResult<Option<OutBatch>> {
        let mut items = std::mem::take(&mut *locked(&self.pending_tx));
        items.extend(self.eng(py).take_output(now));
        let sec = self.sec(py);
        let (mut bytes, mut count) = (0usize, 0usize);
        for item in &items {
            match item {
                OutItem::Batch { plains, .. } => {
                    count += plains.len();
                    bytes += plains.iter().map(|p| p.len() + crate::aead::OVERHEAD).sum::<usize>();
                }
                OutItem::Solo { plain, .. } => {
                    count += 1;
                    bytes += plain.len() + crate::aead::OVERHEAD;
                }
            }
        }
        let mut batch = OutBatch::with_capacity(bytes, count);
        let control = |b: &mut OutBatch| -> PyResult<()> {
            let Some(s) = &sec else { return Ok(()) };
            if let Some(ctl) = self.sec_control(s.bind(py))? {
                let mut first = OutBatch::default();
                for item in ctl.iter() {
                    let t = item.cast::<PyTuple>()?;
                    first.push(py, io, t.get_item(0)?.cast::<PyBytes>()?.as_bytes(), &t.get_item(1)?)?;
                }
                b.prepend(first);
            }
            Ok(())
        };
        if items.is_empty() {
            control(&mut batch)?;
        } else {
            for item in items {
                match item {
                    OutItem::Batch { peer, addr, plains } => match &sec {
                        None => {
                            for p in &plains {
                                batch.push(py, io, p, addr.bind(py))?;
                            }
                        }
                        Some(s) => {
                            let name = self.name(py, &peer);
                            if !self.seal_fast_to(py, &name, &plains, now, &mut Sink::Batch(&mut batch, io))? {
                                let pl = PyList::new(py, plains.iter().map(|p| PyBytes::new(py, p)))?;
                                let out = PyList::empty(py);
                                s.bind(py).call_method1(pyo3::intern!(py, "seal_many"), (name, pl, addr.bind(py), now, &out))?;
                                self.append_list(py, io, &mut batch, &out)?;
                            }
                        }
                    },
                    OutItem::Solo { peer, addr, plain } => match &sec {
                        None => {
                            batch.push(py, io, &plain, addr.bind(py))?;
                        }
                        Some(s) => {
                            let out = PyList::empty(py);
                            s.bind(py).call_method1(pyo3::intern!(py, "seal"), (self.name(py, &peer), PyBytes::new(py, &plain), addr.bind(py), now, &out))?;
                            self.append_list(py, io, &mut batch, &out)?;
                        }
                    },
                }
            }
            control(&mut batch)?;
        }
        let (n, bytes) = (batch.len(), batch.total_bytes());
        self.eng(py).count_out(n, bytes);
        self.sync(py)?;
        Ok(if batch.is_empty() { None } else { Some(batch) })
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
            return self.sync(py);
        }
        let live = sec.call_method0(pyo3::intern!(py, "sessions_by_index"))?;
        let live = live.cast::<PyDict>()?;
        let mut rest: Vec<Bound<'_, PyAny>> = Vec::new();
        for item in batch.iter() {
            let t = item.cast::<PyTuple>()?;
            let data = t.get_item(0)?;
            let first = match data.cast::<PyBytes>() {
                Ok(b) => {
                    let d = b.as_bytes();
                    d.len() >= 30
                        && d[1] == crate::aead::DATA
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
            Some(sec) => {
                self.receive_sealed(py, sec.bind(py), data, addr.bind(py), now)?;
                self.sync(py)
            }
            None => {
                let b: Vec<u8>;
                let bytes: &[u8] = match data.cast::<PyBytes>() {
                    Ok(x) => x.as_bytes(),
                    Err(_) => {
                        b = data.call_method0(pyo3::intern!(py, "__bytes__")).or_else(|_| py.import("builtins")?.getattr(pyo3::intern!(py, "bytes"))?.call1((data,)))?.extract()?;
                        &b
                    }
                };
                self.eng(py).receive_clear(bytes, PyAddr::new(addr), now);
                self.sync(py)
            }
        }
    }

    fn datagrams_to_send<'py>(&self, py: Python<'py>, now: f64) -> PyResult<Bound<'py, PyList>> {
        let mut items = std::mem::take(&mut *locked(&self.pending_tx));
        items.extend(self.eng(py).take_output(now));
        let sec = self.sec(py);
        let result = PyList::empty(py);
        if items.is_empty() {
            if let Some(s) = &sec {
                if let Some(ctl) = self.sec_control(s.bind(py))? {
                    self.count(py, &ctl)?;
                    self.sync(py)?;
                    return Ok(ctl);
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
                            result.append((PyBytes::new(py, &p), addr.bind(py)))?;
                        }
                    }
                    Some(s) => {
                        let name = self.name(py, &peer);
                        if !self.seal_fast(py, &name, &plains, now, &result)? {
                            let pl = PyList::new(py, plains.iter().map(|p| PyBytes::new(py, p)))?;
                            s.bind(py).call_method1(pyo3::intern!(py, "seal_many"), (name, pl, addr.bind(py), now, &result))?;
                        }
                    }
                },
                OutItem::Solo { peer, addr, plain } => match &sec {
                    None => result.append((PyBytes::new(py, &plain), addr.bind(py)))?,
                    Some(s) => {
                        s.bind(py).call_method1(pyo3::intern!(py, "seal"), (self.name(py, &peer), PyBytes::new(py, &plain), addr.bind(py), now, &result))?;
                    }
                },
            }
        }
        let mut out = result;
        if let Some(s) = &sec {
            if let Some(ctl) = self.sec_control(s.bind(py))? {
                let joined = ctl.call_method1(pyo3::intern!(py, "__add__"), (&out,))?;
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
            // The secure layer's timer cannot come first when its queues' bound does not
            // (or they are empty): it is not asked then.
            if let Some(bound) = self.sec_earliest(py)? {
                if bound == f64::INFINITY || t_exon.is_some_and(|te| bound >= te) {
                    return Ok(t_exon);
                }
            }
            let t: Option<f64> = s.bind(py).call_method0(pyo3::intern!(py, "next_timer"))?.extract()?;
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
            // (nothing of the secure layer's is due before its queues' bound)
            if self.sec_earliest(py)?.is_none_or(|bound| bound <= now) {
                s.bind(py).call_method1(pyo3::intern!(py, "handle_timer"), (now,))?;
            }
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
    fn append_list(&self, py: Python<'_>, io: &UdpIo, batch: &mut OutBatch, out: &Bound<'_, PyList>) -> PyResult<()> {
        for item in out.iter() {
            let t = item.cast::<PyTuple>()?;
            batch.push(py, io, t.get_item(0)?.cast::<PyBytes>()?.as_bytes(), &t.get_item(1)?)?;
        }
        Ok(())
    }

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
