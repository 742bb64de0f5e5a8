//! The Python module `a3m._native` (PyO3): the bindings of `wire`, `aead` and `udp`.
//!
//! Typed stubs: `src/a3m/_native.pyi`. Every entry point runs under `guard`: a panic is
//! caught here, counted (`panics()`) and raised as `a3m._native.NativePanic` (a
//! RuntimeError), never unwound into the interpreter nor left to abort the process.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyOverflowError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::aead::{self, Cipher as RawCipher};
use crate::order_lock::OrderLock;
use crate::udp::{self, Received, RecvArena, Udp};
use crate::wire::{self, Frame};

create_exception!(_native, NativePanic, PyRuntimeError, "A panic in a3m's native code (caught, counted, reported).");

static PANICS: AtomicU64 = AtomicU64::new(0);

/// Run `f`, turning a panic into a counted NativePanic.
pub(crate) fn guard<T>(what: &str, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(e) => {
            PANICS.fetch_add(1, Ordering::Relaxed);
            let msg = e
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".to_string());
            Err(NativePanic::new_err(format!("a3m native {what}: panic: {msg}")))
        }
    }
}

/// Panics caught at the boundary since the module loaded.
#[pyfunction]
fn panics() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

// ------------------------------------------------------------------ the codec

static WIRE_ERROR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn wire_error<'py>(py: Python<'py>, e: &wire::WireError) -> PyResult<Bound<'py, PyAny>> {
    let cls = WIRE_ERROR.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import("a3m.exon.wire")?.getattr(pyo3::intern!(py, "WireError"))?.unbind())
    })?;
    cls.bind(py).call1((e.kind, e.detail.as_str()))
}

fn ranges_tuple<'py>(py: Python<'py>, ranges: &[(u64, u32)]) -> PyResult<Bound<'py, PyTuple>> {
    let items: Vec<Bound<'py, PyTuple>> =
        ranges.iter().map(|&(f, c)| PyTuple::new(py, [f.into_pyobject(py)?.into_any(), c.into_pyobject(py)?.into_any()])).collect::<PyResult<_>>()?;
    PyTuple::new(py, items)
}

fn frame_tuple<'py>(py: Python<'py>, f: &Frame<'_>) -> PyResult<Bound<'py, PyTuple>> {
    macro_rules! t {
        ($($x:expr),*) => { PyTuple::new(py, [$($x.into_pyobject(py)?.into_any()),*]) };
    }
    match f {
        Frame::ReqSlots { s, n, low, copy } => t!(wire::REQSLOTS, *s, *n, *low, *copy),
        Frame::Slots { s, r, n, ack_delay_us, echo } => t!(wire::SLOTS, *s, *r, *n, *ack_delay_us, *echo),
        Frame::Token { s, r, payload, index, count, total, flags } => {
            t!(wire::TOKEN, *s, *r, PyBytes::new(py, payload), *index, *count, *total, *flags)
        }
        Frame::Ack { r, ranges, copies } => {
            let rt = ranges_tuple(py, ranges)?;
            match copies {
                None => t!(wire::ACK, *r, rt, py.None()),
                Some(c) => t!(wire::ACK, *r, rt, ranges_tuple(py, c)?),
            }
        }
        Frame::Void { r } => t!(wire::VOID, *r),
        Frame::Revoke { r } => t!(wire::REVOKE, *r),
        Frame::Revoked { r, held } => t!(wire::REVOKED, *r, *held),
    }
}

/// The twin of `a3m.exon.wire.decode_header`: (source id, destination id, frames' offset).
#[pyfunction]
fn decode_header<'py>(py: Python<'py>, data: &[u8]) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, usize)> {
    guard("decode_header", || match wire::decode_header(data) {
        Ok((s, d, off)) => Ok((PyBytes::new(py, s), PyBytes::new(py, d), off)),
        Err(e) => Err(PyErr::from_value(wire_error(py, &e)?)),
    })
}

/// The twin of `a3m.exon.wire.decode_frames`: (frames before any error, the error or None).
#[pyfunction]
fn decode_frames<'py>(py: Python<'py>, data: &[u8], offset: usize, max_message_size: u64) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyAny>)> {
    guard("decode_frames", || {
        let (frames, err) = wire::decode_frames(data, offset, max_message_size);
        let list = PyList::empty(py);
        for f in &frames {
            list.append(frame_tuple(py, f)?)?;
        }
        let err = match err {
            None => py.None().into_bound(py),
            Some(e) => wire_error(py, &e)?,
        };
        Ok((list, err))
    })
}

// ------------------------------------------------------------------ sealing

/// One direction of a secure session (ChaCha20-Poly1305, ring): the twin of
/// `a3m.exon.secure.aead.PyCipher`.
#[pyclass(frozen, module = "a3m._native")]
pub struct Cipher {
    pub inner: RawCipher,
}

#[pymethods]
impl Cipher {
    #[new]
    fn new(key: &[u8]) -> PyResult<Self> {
        RawCipher::new(key).map(|inner| Cipher { inner }).ok_or_else(|| PyValueError::new_err("the key must be 32 bytes"))
    }

    /// The sealed datagram: header (version, `kind`, `index`, `counter`), ciphertext, tag,
    /// written once into the bytes returned.
    fn seal<'py>(&self, py: Python<'py>, kind: u8, index: u32, counter: u64, plain: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        guard("seal", || {
            PyBytes::new_with(py, plain.len() + aead::OVERHEAD, |out| {
                self.inner.seal(out, wire::VERSION, kind, index, counter, plain);
                Ok(())
            })
        })
    }

    /// Seal each of `plains` as a DATA datagram, counters from `counter` on.
    fn seal_many<'py>(&self, py: Python<'py>, index: u32, counter: u64, plains: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
        guard("seal_many", || {
            if plains.len() > 1 && counter.checked_add(plains.len() as u64 - 1).is_none() {
                // (the twin's struct.pack refuses the counter past 2**64 - 1: no nonce twice)
                return Err(PyOverflowError::new_err("the packet counter would pass 2**64 - 1"));
            }
            let out = PyList::empty(py);
            for (k, item) in plains.iter().enumerate() {
                let plain = item.cast::<PyBytes>()?.as_bytes();
                let pkt = PyBytes::new_with(py, plain.len() + aead::OVERHEAD, |o| {
                    self.inner.seal(o, wire::VERSION, aead::DATA, index, counter + k as u64, plain);
                    Ok(())
                })?;
                out.append(pkt)?;
            }
            Ok(out)
        })
    }

    /// The plaintext of a sealed datagram, or None when its tag does not verify.
    fn open<'py>(&self, py: Python<'py>, datagram: &[u8]) -> PyResult<Option<Bound<'py, PyBytes>>> {
        guard("open", || {
            if datagram.len() < aead::OVERHEAD {
                return Ok(None);
            }
            let mut ok = true;
            let pt = PyBytes::new_with(py, datagram.len() - aead::OVERHEAD, |out| {
                ok = self.inner.open(datagram, out);
                Ok(())
            })?;
            Ok(ok.then_some(pt))
        })
    }
}

/// The replay window of a session's receiving direction: the twin of
/// `a3m.exon.secure.replay.ReplayWindow`.
#[pyclass(module = "a3m._native", name = "ReplayWindow")]
#[derive(Default)]
pub struct PyReplayWindow {
    pub inner: crate::replay::ReplayWindow,
}

#[pymethods]
impl PyReplayWindow {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// The highest counter accepted (-1: none yet).
    #[getter]
    fn top(&self) -> i128 {
        self.inner.top
    }

    /// The ring (a copy: bit `c % 8` of byte `(c // 8) % len` for counter `c`).
    #[getter]
    fn ring<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.ring)
    }

    /// Whether `counter` was never accepted and is not too old.
    fn fresh(&self, counter: u64) -> bool {
        self.inner.fresh(counter)
    }

    /// Record `counter`.
    fn accept(&mut self, counter: u64) {
        self.inner.accept(counter)
    }
}

// ------------------------------------------------------------------ batched UDP I/O

thread_local! {
    /// Receive buffers, one set per thread (a thread reads one socket at a time).
    pub(crate) static ARENA: RefCell<Option<RecvArena>> = const { RefCell::new(None) };
}

/// Batched reads and sends on a Python socket (which stays the caller's: its descriptor is
/// taken at each call, so a closed socket raises as the socket module would): the twin of
/// `a3m.runtime.offload.UdpOffload`.
#[pyclass(frozen, module = "a3m._native")]
pub struct UdpIo {
    sock: Py<PyAny>,
    pub(crate) udp: Udp,
    /// Address tuples made for datagrams read (a stream's datagrams share one object).
    addrs: Mutex<HashMap<SocketAddr, Py<PyTuple>>>,
    /// The addresses sends parsed, by the identity of the object given (kept alive here).
    dests: Mutex<Vec<(Py<PyAny>, SocketAddr)>>,
    /// Held from taking a turn's output until it is sent, by whichever thread sends (Python
    /// or the engine's own I/O loop): output leaves in the order it was made.
    pub(crate) order: Arc<OrderLock>,
}

/// `UdpIo.send_order`: the order lock, as Python's `threading.Lock` is used.
#[pyclass(frozen, module = "a3m._native")]
pub struct SendOrder {
    lock: Arc<OrderLock>,
}

#[pymethods]
impl SendOrder {
    #[pyo3(signature = (blocking = true, timeout = -1.0))]
    fn acquire(&self, py: Python<'_>, blocking: bool, timeout: f64) -> bool {
        let _ = timeout;
        if self.lock.try_acquire() {
            return true; // (the usual case: no wait, the interpreter's lock kept)
        }
        if !blocking {
            return false;
        }
        let lock = self.lock.clone();
        py.detach(move || lock.acquire());
        true
    }

    fn release(&self) {
        self.lock.release();
    }

    fn __enter__(&self, py: Python<'_>) -> bool {
        self.acquire(py, true, -1.0)
    }

    fn __exit__(&self, _t: &Bound<'_, PyAny>, _v: &Bound<'_, PyAny>, _tb: &Bound<'_, PyAny>) {
        self.release();
    }
}

const ADDR_CACHE: usize = 4096;
const DEST_CACHE: usize = 8;

impl UdpIo {
    pub(crate) fn fd(&self, py: Python<'_>) -> PyResult<i32> {
        // (the name interned once: a str made per call was an allocation per system call)
        let fd: i32 = self.sock.bind(py).call_method0(pyo3::intern!(py, "fileno"))?.extract()?;
        if fd < 0 {
            return Err(PyOSError::new_err((libc::EBADF, "Bad file descriptor")));
        }
        Ok(fd)
    }

    pub(crate) fn addr_object<'py>(&self, py: Python<'py>, addr: SocketAddr) -> PyResult<Bound<'py, PyTuple>> {
        let mut cache = self.addrs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = cache.get(&addr) {
            return Ok(t.bind(py).clone());
        }
        let t = match addr {
            SocketAddr::V4(a) => PyTuple::new(py, [a.ip().to_string().into_pyobject(py)?.into_any(), a.port().into_pyobject(py)?.into_any()])?,
            SocketAddr::V6(a) => PyTuple::new(
                py,
                [
                    a.ip().to_string().into_pyobject(py)?.into_any(),
                    a.port().into_pyobject(py)?.into_any(),
                    a.flowinfo().into_pyobject(py)?.into_any(),
                    a.scope_id().into_pyobject(py)?.into_any(),
                ],
            )?,
        };
        if cache.len() >= ADDR_CACHE {
            cache.clear();
        }
        cache.insert(addr, t.clone().unbind());
        Ok(t)
    }

    /// The socket address of a Python address object (None: a name to resolve).
    pub(crate) fn dest(&self, py: Python<'_>, addr: &Bound<'_, PyAny>) -> PyResult<Option<SocketAddr>> {
        let mut dests = self.dests.lock().unwrap_or_else(|p| p.into_inner());
        for (obj, sa) in dests.iter() {
            if obj.bind(py).is(addr) {
                return Ok(Some(*sa));
            }
        }
        let t = addr.cast::<PyTuple>()?;
        let host: String = t.get_item(0)?.extract()?;
        let port: u16 = t.get_item(1)?.extract()?;
        let flow: u32 = if t.len() > 2 { t.get_item(2)?.extract()? } else { 0 };
        let scope: u32 = if t.len() > 3 { t.get_item(3)?.extract()? } else { 0 };
        let Some(sa) = udp::parse_addr(&host, port, flow, scope) else { return Ok(None) };
        if dests.len() >= DEST_CACHE {
            dests.remove(0);
        }
        dests.push((addr.clone().unbind(), sa));
        Ok(Some(sa))
    }
}

#[pymethods]
impl UdpIo {
    #[new]
    #[pyo3(signature = (sock, gso = true, gro = true))]
    fn new(py: Python<'_>, sock: Py<PyAny>, gso: bool, gro: bool) -> PyResult<Self> {
        guard("UdpIo", || {
            let fd: i32 = sock.bind(py).call_method0(pyo3::intern!(py, "fileno"))?.extract()?;
            let udp = Udp::new(fd, gso, gro).map_err(PyErr::from)?;
            Ok(UdpIo {
                sock,
                udp,
                addrs: Mutex::new(HashMap::new()),
                dests: Mutex::new(Vec::new()),
                order: Arc::new(OrderLock::default()),
            })
        })
    }

    /// The lock that keeps output in order (``acquire``/``release``, a context manager).
    #[getter]
    fn send_order(&self) -> SendOrder {
        SendOrder { lock: self.order.clone() }
    }

    /// Segmented sends on (False once the kernel or the path refused one).
    #[getter]
    fn gso(&self) -> bool {
        self.udp.gso()
    }

    /// Coalesced reads on.
    #[getter]
    fn gro(&self) -> bool {
        self.udp.gro()
    }

    /// 1 once a segmented send was refused and offload went off for the socket.
    #[getter]
    fn gso_refused(&self) -> u64 {
        self.udp.gso_refused.load(Ordering::Relaxed) as u64
    }

    /// Segmented sends made (as the twin's ``gso_sends``).
    #[getter]
    fn gso_sends(&self) -> u64 {
        self.udp.counters.gso_sends.load(Ordering::Relaxed)
    }

    /// Datagrams the segmented sends carried.
    #[getter]
    fn gso_datagrams(&self) -> u64 {
        self.udp.counters.gso_datagrams.load(Ordering::Relaxed)
    }

    /// Reads that held more than one datagram (GRO).
    #[getter]
    fn gro_reads(&self) -> u64 {
        self.udp.counters.gro_reads.load(Ordering::Relaxed)
    }

    /// System calls and what they carried, by name.
    fn counters(&self) -> HashMap<&'static str, u64> {
        let c = &self.udp.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        HashMap::from([
            ("recv_calls", g(&c.recv_calls)),
            ("recv_datagrams", g(&c.recv_datagrams)),
            ("gro_reads", g(&c.gro_reads)),
            ("send_calls", g(&c.send_calls)),
            ("send_datagrams", g(&c.send_datagrams)),
            ("gso_sends", g(&c.gso_sends)),
            ("gso_datagrams", g(&c.gso_datagrams)),
            ("send_errors", g(&c.send_errors)),
            ("recv_errors", g(&c.recv_errors)),
        ])
    }

    /// Up to `max` datagrams waiting, as `[(bytes, address), ...]` in arrival order (empty:
    /// none waits). Raises OSError for an error before any datagram was read.
    #[pyo3(signature = (max = 512))]
    fn recv<'py>(&self, py: Python<'py>, max: usize) -> PyResult<Bound<'py, PyList>> {
        guard("recv", || {
            let fd = self.fd(py)?;
            let list = PyList::empty(py);
            ARENA.with(|cell| -> PyResult<()> {
                let mut slot = cell.borrow_mut();
                let arena = slot.get_or_insert_with(RecvArena::default);
                let mut got: Vec<Received> = Vec::new();
                while list.len() < max {
                    got.clear();
                    let before = list.len();
                    match self.udp.recv(fd, arena, max - before, &mut got) {
                        Ok(()) => {}
                        Err(e) if before == 0 => return Err(e.into()),
                        Err(_) => break, // counted (recv_errors); what was read goes up
                    }
                    if got.is_empty() {
                        break;
                    }
                    for r in &got {
                        let data = PyBytes::new(py, &arena.buf[r.start..r.start + r.len]);
                        list.append(PyTuple::new(py, [data.into_any(), self.addr_object(py, r.addr)?.into_any()])?)?;
                    }
                    if got.len() < quinn_udp::BATCH_SIZE {
                        break; // the queue ran dry within that call
                    }
                }
                Ok(())
            })?;
            Ok(list)
        })
    }

    /// Send `out` (`[(bytes, address), ...]`) in order: GSO runs where consecutive datagrams
    /// go to one address at one size, `sendmmsg` for the rest. Returns how many failed.
    fn send(&self, py: Python<'_>, out: &Bound<'_, PyAny>) -> PyResult<usize> {
        if let Ok(batch) = out.cast::<crate::python_io::OutBatch>() {
            return guard("send", || batch.borrow().send(py, self));
        }
        let out = out.cast::<PyList>()?;
        guard("send", || {
            let Ok(fd) = self.fd(py) else {
                // A closed socket: every datagram failed (as the twin counts its sendto's
                // errors); the protocol's timers resend, the driver counts them.
                self.udp.counters.send_errors.fetch_add(out.len() as u64, Ordering::Relaxed);
                return Ok(out.len());
            };
            let mut data: Vec<u8> = Vec::new();
            let mut dgrams: Vec<(usize, usize, SocketAddr)> = Vec::with_capacity(out.len());
            let mut errors = 0usize;
            let mut resolved_elsewhere: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = Vec::new();
            for item in out.iter() {
                let t = item.cast::<PyTuple>()?;
                let payload = t.get_item(0)?;
                let addr = t.get_item(1)?;
                match self.dest(py, &addr) {
                    Ok(Some(sa)) => {
                        let b = payload.cast::<PyBytes>()?.as_bytes();
                        dgrams.push((data.len(), b.len(), sa));
                        data.extend_from_slice(b);
                    }
                    // A host name (or an address this module cannot parse): the socket
                    // module's sendto resolves it, after what came before it.
                    _ => {
                        if !dgrams.is_empty() {
                            errors += self.send_now(py, fd, &data, &dgrams);
                            data.clear();
                            dgrams.clear();
                        }
                        resolved_elsewhere.push((payload, addr));
                        for (p, a) in resolved_elsewhere.drain(..) {
                            if self.sock.bind(py).call_method1(pyo3::intern!(py, "sendto"), (p, a)).is_err() {
                                errors += 1;
                            }
                        }
                    }
                }
            }
            if !dgrams.is_empty() {
                errors += self.send_now(py, fd, &data, &dgrams);
            }
            Ok(errors)
        })
    }
}

/// Batches of at least this many datagrams are sent without the interpreter's lock (a
/// segmented send can run the receiver's path on a veth pair); smaller ones keep it (a lock
/// hand-off costs more than the call).
const DETACH_AT: usize = 8;

impl UdpIo {
    /// The socket's own `sendto` (a host name to resolve).
    pub(crate) fn sock_sendto(&self, py: Python<'_>, data: &Bound<'_, PyBytes>, addr: &Bound<'_, PyAny>) -> PyResult<()> {
        self.sock.bind(py).call_method1(pyo3::intern!(py, "sendto"), (data, addr)).map(|_| ())
    }

    pub(crate) fn send_now(&self, py: Python<'_>, fd: i32, data: &[u8], dgrams: &[(usize, usize, SocketAddr)]) -> usize {
        if dgrams.len() >= DETACH_AT {
            py.detach(|| self.udp.send(fd, data, dgrams))
        } else {
            self.udp.send(fd, data, dgrams)
        }
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("AEAD", "ring 0.17 ChaCha20-Poly1305")?;
    m.add("UDP", "quinn-udp 0.6 (recvmmsg, GRO, GSO) and sendmmsg")?;
    m.add("NativePanic", m.py().get_type::<NativePanic>())?;
    m.add_function(wrap_pyfunction!(panics, m)?)?;
    m.add_function(wrap_pyfunction!(decode_header, m)?)?;
    m.add_function(wrap_pyfunction!(decode_frames, m)?)?;
    m.add_class::<Cipher>()?;
    m.add_class::<PyReplayWindow>()?;
    m.add_class::<crate::python_session::SessionPath>()?;
    m.add_class::<crate::python_session::SessionTable>()?;
    m.add_class::<UdpIo>()?;
    m.add_class::<crate::python_io::OutBatch>()?;
    m.add_class::<SendOrder>()?;
    crate::python_engine::register(m)?;
    crate::python_exchange::register(m)?;
    crate::python_batch::register(m)?;
    crate::python_recovery::register(m)?;
    crate::python_sendbuf::register(m)?;
    crate::python_poll::register(m)?;
    crate::python_meter::register(m)?;
    crate::python_cookie_keys::register(m)?;
    crate::python_alloc::register(m)?;
    Ok(())
}
