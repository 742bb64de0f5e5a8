//! A socket's send buffer, natively (the twin of `a3m/runtime/send_buffer.py`, which stays
//! the specification and the fallback), and the application's ways in and out: `FastSend`,
//! the socket's `send` for the common case, a message handed to the buffer in one native
//! call (as a send enters libzmq under pyzmq), with no Python frame; `FastRecv`, its `recv`
//! taking the next message of the socket's inbox the same way.
//!
//! In a stream, sends wait in the buffer for the I/O thread's next turn instead of taking
//! the node's lock, as many as the links' credits took when it opened (its room), so that a
//! send still returns only once the message can go. The owner drains it under the node's
//! lock. Every method runs with the interpreter's lock held; the buffer's own mutex orders
//! a send against a drain (lock order: the node's, then the buffer's) and is never held
//! while Python code runs (`drain` calls `hand` without it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFloat, PyInt, PyList, PyTuple};

struct Inner {
    items: Vec<Py<PyAny>>,
    /// A mark per item (a socket's cookies, None where an item has none), once any item has
    /// one (None: none has).
    marks: Option<Vec<Py<PyAny>>>,
    /// How many more sends it takes (0: closed, sends take the node's lock).
    room: i64,
}

/// The send buffer (see the module's docstring); the same methods and attributes as the
/// Python twin's.
#[pyclass(module = "a3m._native", name = "SendBuffer", frozen)]
pub struct SendBuffer {
    inner: Mutex<Inner>,
    stalled: AtomicBool,
}

fn nones(py: Python<'_>, n: usize) -> Vec<Py<PyAny>> {
    (0..n).map(|_| py.None()).collect()
}

impl SendBuffer {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // (a poisoned lock still holds consistent data: every update below completes
        // without a call that could panic half-way)
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `offer`'s work (`mark`: None for none), for it and for `FastSend`.
    fn push(&self, py: Python<'_>, item: &Bound<'_, PyAny>, mark: Option<&Bound<'_, PyAny>>) -> bool {
        let mut g = self.lock();
        if g.room <= 0 {
            return false;
        }
        g.room -= 1;
        if mark.is_some() && g.marks.is_none() {
            g.marks = Some(nones(py, g.items.len()));
        }
        if let Some(marks) = g.marks.as_mut() {
            marks.push(mark.map_or_else(|| py.None(), |m| m.clone().unbind()));
        }
        g.items.push(item.clone().unbind());
        true
    }
}

#[pymethods]
impl SendBuffer {
    #[new]
    fn new() -> Self {
        SendBuffer { inner: Mutex::new(Inner { items: Vec::new(), marks: None, room: 0 }), stalled: AtomicBool::new(false) }
    }

    /// How many more sends it takes (0: closed).
    #[getter]
    fn room(&self) -> i64 {
        self.lock().room
    }

    /// What waits, in order (a copy).
    #[getter]
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let g = self.lock();
        PyList::new(py, g.items.iter().map(|x| x.clone_ref(py)))
    }

    /// Their marks (a copy), or None when none has one.
    #[getter]
    fn marks<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        let g = self.lock();
        match &g.marks {
            None => Ok(None),
            Some(m) => Ok(Some(PyList::new(py, m.iter().map(|x| x.clone_ref(py)))?)),
        }
    }

    /// The last drain left sends behind: they wait first in line, retried on every turn.
    #[getter]
    fn stalled(&self) -> bool {
        self.stalled.load(Ordering::Relaxed)
    }

    #[setter]
    fn set_stalled(&self, value: bool) {
        self.stalled.store(value, Ordering::Relaxed);
    }

    /// How many items wait.
    fn __len__(&self) -> usize {
        self.lock().items.len()
    }

    /// From any thread: queue `item` (with `mark`, if not None) if the buffer has room
    /// (False: take the lock).
    #[pyo3(signature = (item, mark = None))]
    fn offer(&self, py: Python<'_>, item: &Bound<'_, PyAny>, mark: Option<&Bound<'_, PyAny>>) -> bool {
        self.push(py, item, mark.filter(|m| !m.is_none()))
    }

    /// From any thread: queue all of `items` (with `marks`, one each) if the buffer has
    /// room for all of them (False, nothing queued: take the lock).
    #[pyo3(signature = (items, marks = None, max_size = -1))]
    fn offer_many(&self, py: Python<'_>, items: Vec<Py<PyAny>>, marks: Option<Vec<Py<PyAny>>>, max_size: i64) -> bool {
        if max_size >= 0 {
            // (the twin's one pass: every item exactly bytes, none longer than max_size)
            for item in &items {
                match item.bind(py).cast_exact::<PyBytes>() {
                    Ok(b) if b.as_bytes().len() as u64 <= max_size as u64 => {}
                    _ => return false,
                }
            }
        }
        let n = items.len();
        let mut g = self.lock();
        if g.room < n as i64 {
            return false;
        }
        g.room -= n as i64;
        if marks.is_some() || g.marks.is_some() {
            let have = g.items.len();
            let own = g.marks.get_or_insert_with(|| nones(py, have));
            match marks {
                Some(m) => own.extend(m),
                None => own.extend(nones(py, n)),
            }
        }
        g.items.extend(items);
        true
    }

    /// Under the node's lock: hand what waits on, in order (`hand(items, marks)` returns
    /// how many it took); True when some went. The buffer takes nothing more until it opens
    /// again (when there was something). What `hand` did not take stays first in line, and
    /// the buffer is `stalled` until a drain takes it all.
    fn drain(&self, py: Python<'_>, hand: &Bound<'_, PyAny>) -> PyResult<bool> {
        let (items, marks) = {
            let mut g = self.lock();
            if g.items.is_empty() {
                (Vec::new(), None)
            } else {
                g.room = 0;
                (std::mem::take(&mut g.items), g.marks.take())
            }
        };
        if items.is_empty() {
            self.stalled.store(false, Ordering::Relaxed);
            return Ok(false);
        }
        let n = items.len();
        let list = PyList::new(py, items.iter().map(|x| x.clone_ref(py)))?;
        let mark_list = match &marks {
            None => None,
            Some(m) => Some(PyList::new(py, m.iter().map(|x| x.clone_ref(py)))?),
        };
        // (on an error in hand, nothing was taken: all of it goes back first in line)
        let went = match hand.call1((list, mark_list)).and_then(|r| r.extract::<usize>()) {
            Ok(w) => w.min(n),
            Err(e) => {
                self.put_back(py, items, marks, 0);
                self.stalled.store(true, Ordering::Relaxed);
                return Err(e);
            }
        };
        let stalled = went < n;
        self.stalled.store(stalled, Ordering::Relaxed);
        if stalled {
            self.put_back(py, items, marks, went);
        }
        Ok(went > 0)
    }

    /// Under the node's lock: take out what waits with a mark (a cookie), keeping the order
    /// of the rest; the marks given up, in order.
    fn give_up_marked(&self, py: Python<'_>) -> Vec<Py<PyAny>> {
        let mut g = self.lock();
        let Some(marks) = g.marks.take() else { return Vec::new() };
        let items = std::mem::take(&mut g.items);
        let mut out = Vec::new();
        for (x, m) in items.into_iter().zip(marks) {
            if m.is_none(py) {
                g.items.push(x);
            } else {
                out.push(m);
            }
        }
        out
    }

    /// Under the node's lock: the marks of what waits (before `clear`).
    fn clear_marks(&self, py: Python<'_>) -> Vec<Py<PyAny>> {
        let g = self.lock();
        match &g.marks {
            None => Vec::new(),
            Some(m) => m.iter().filter(|x| !x.is_none(py)).map(|x| x.clone_ref(py)).collect(),
        }
    }

    /// Under the node's lock: take up to `room` sends (less what waits already); False
    /// when that leaves no room.
    fn open(&self, room: i64) -> bool {
        let mut g = self.lock();
        let room = room - g.items.len() as i64;
        g.room = room.max(0);
        room > 0
    }

    /// Under the node's lock: take nothing more; True when nothing waits either.
    fn shut(&self) -> bool {
        let mut g = self.lock();
        g.room = 0;
        g.items.is_empty()
    }

    /// Under the node's lock: shut it and give up what waits (returned; their marks, if
    /// any, are taken by `clear_marks` first).
    fn clear(&self) -> Vec<Py<PyAny>> {
        let items = {
            let mut g = self.lock();
            g.marks = None;
            g.room = 0;
            std::mem::take(&mut g.items)
        };
        self.stalled.store(false, Ordering::Relaxed);
        items
    }
}

impl SendBuffer {
    /// What a drain handed on from `went` on goes back first in line, before what came
    /// since, marks aligned.
    fn put_back(&self, py: Python<'_>, items: Vec<Py<PyAny>>, marks: Option<Vec<Py<PyAny>>>, went: usize) {
        let left = items.len() - went;
        let mut g = self.lock();
        if marks.is_some() || g.marks.is_some() {
            let later = match g.marks.take() {
                Some(m) => m,
                None => nones(py, g.items.len()),
            };
            let mut head = match marks {
                Some(m) => m.into_iter().skip(went).collect::<Vec<_>>(),
                None => nones(py, left),
            };
            head.extend(later);
            g.marks = Some(head);
        }
        let later = std::mem::take(&mut g.items);
        g.items = items.into_iter().skip(went).collect();
        g.items.extend(later);
    }
}

/// A socket's `send` for the common case, in one native call: a `bytes` message of at most
/// `fast_size` bytes, no cookie, no option, a timeout absent or not negative, while the
/// buffer has room, is queued there; anything else goes to `slow(owner, data, timeout,
/// cookie, **kw)` (the Python `Socket.send`, whose own first lines try the buffer again).
/// `owner` is held weakly: no cycle through the socket's attribute.
#[pyclass(module = "a3m._native", name = "FastSend", frozen)]
pub struct FastSend {
    buf: Py<SendBuffer>,
    fast_size: usize,
    slow: Py<PyAny>,
    owner: Py<PyAny>,
}

static CLOSED: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// The socket behind a weak reference; gone, it was closed and let go: `a3m.Closed`, as a
/// closed socket's own methods raise.
pub(crate) fn live_owner<'py>(py: Python<'py>, owner: &Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let o = owner.bind(py).call0()?;
    if !o.is_none() {
        return Ok(o);
    }
    let cls = CLOSED.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import("a3m.errors")?.getattr("Closed")?.unbind())
    })?;
    Err(PyErr::from_value(cls.bind(py).call1(("the socket is closed",))?))
}

pub(crate) fn timeout_ok(t: Option<&Bound<'_, PyAny>>) -> bool {
    match t {
        None => true,
        Some(t) if t.is_none() => true,
        Some(t) if t.is_exact_instance_of::<PyFloat>() || t.is_exact_instance_of::<PyInt>() => {
            matches!(t.extract::<f64>(), Ok(v) if v >= 0.0)
        }
        Some(_) => false, // (the Python path says what is wrong with it)
    }
}

#[pymethods]
impl FastSend {
    #[new]
    fn new(buf: Py<SendBuffer>, fast_size: usize, slow: Py<PyAny>, owner: Py<PyAny>) -> Self {
        FastSend { buf, fast_size, slow, owner }
    }

    /// The send (see the class's docstring): the socket's ``send`` is this bound method. It
    /// takes no other keyword (the socket's pattern takes none: `Socket` binds it only then),
    /// so that PyO3 gives it the vectorcall convention: a `**kw` would make every call build
    /// an argument tuple and a keyword dict (~100 ns of a ~230 ns send).
    #[pyo3(signature = (data, timeout = None, cookie = None))]
    fn send(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        timeout: Option<&Bound<'_, PyAny>>,
        cookie: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let fast = |b: &Bound<'_, PyBytes>| Ok(b.as_bytes().len() <= self.fast_size && self.buf.get().push(py, data, None));
        plain_send(py, data, timeout, cookie, fast, &self.slow, &self.owner)
    }
}

/// A socket's `send` bound natively (`FastSend`, the exchange's `XSocket`): a plain message
/// (bytes, no cookie, a timeout absent or not negative) goes to `fast`, which says whether
/// it took it; anything else, and what `fast` did not take, to `slow(owner(), data,
/// timeout, cookie)`, the Python `send` (which says what is wrong).
pub(crate) fn plain_send(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    timeout: Option<&Bound<'_, PyAny>>,
    cookie: Option<&Bound<'_, PyAny>>,
    fast: impl FnOnce(&Bound<'_, PyBytes>) -> PyResult<bool>,
    slow: &Py<PyAny>,
    owner: &Py<PyAny>,
) -> PyResult<Py<PyAny>> {
    if cookie.is_none_or(|c| c.is_none()) && timeout_ok(timeout) {
        if let Ok(b) = data.cast_exact::<PyBytes>() {
            if fast(b)? {
                return Ok(py.None());
            }
        }
    }
    let owner = live_owner(py, owner)?;
    Ok(slow.bind(py).call1((owner, data, timeout, cookie))?.unbind())
}

/// A socket's `recv` for the common case, in one native call: while its inbox (a deque of
/// `(payload, source)` filled under the node's lock) holds messages, the first one's
/// payload; else `slow(owner, timeout)` (the Python `Socket.recv`, which looks again).
/// `owner` is held weakly: no cycle through the socket's attribute.
#[pyclass(module = "a3m._native", name = "FastRecv", frozen)]
pub struct FastRecv {
    inbox: Py<PyAny>,
    /// The inbox's bound ``popleft`` (looked up once, not per message).
    popleft: Py<PyAny>,
    slow: Py<PyAny>,
    owner: Py<PyAny>,
}

/// The payload of an inbox item: the first of its ``(payload, source)``.
fn payload_of<'py>(item: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    match item.cast::<PyTuple>() {
        Ok(t) => t.get_item(0),
        Err(_) => item.get_item(0),
    }
}

#[pymethods]
impl FastRecv {
    #[new]
    fn new(py: Python<'_>, inbox: Py<PyAny>, slow: Py<PyAny>, owner: Py<PyAny>) -> PyResult<Self> {
        let popleft = inbox.bind(py).getattr(pyo3::intern!(py, "popleft"))?.unbind();
        Ok(FastRecv { inbox, popleft, slow, owner })
    }

    /// The receive (see the class's docstring): the socket's ``recv`` is this bound method.
    #[pyo3(signature = (timeout = None))]
    fn recv(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let inbox = self.inbox.bind(py);
        if inbox.len().unwrap_or(0) > 0 {
            // (another thread may take the last one first: IndexError, then the slow way)
            if let Ok(item) = self.popleft.bind(py).call0() {
                return Ok(payload_of(item)?.unbind());
            }
        }
        let owner = live_owner(py, &self.owner)?;
        Ok(self.slow.bind(py).call1((owner, timeout))?.unbind())
    }

    /// The socket's ``recv_many`` (a ``FastRecv`` made with ``Socket.recv_many`` as its
    /// slow way): up to ``max_items`` payloads from the inbox in one call, as the Python
    /// method's first lines take them; nothing there, or ``max_items`` not an int >= 1: the
    /// Python method (which waits, or says what is wrong).
    #[pyo3(signature = (max_items, timeout = None))]
    fn recv_many(&self, py: Python<'_>, max_items: &Bound<'_, PyAny>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let want = match max_items.cast_exact::<PyInt>() {
            Ok(i) => i.extract::<i64>().unwrap_or(0),
            Err(_) => 0,
        };
        if want >= 1 {
            let inbox = self.inbox.bind(py);
            let n = (inbox.len().unwrap_or(0) as i64).min(want);
            let mut out: Vec<Bound<'_, PyAny>> = Vec::with_capacity(n.max(0) as usize);
            let popleft = self.popleft.bind(py);
            for _ in 0..n {
                match popleft.call0() {
                    Ok(item) => out.push(payload_of(item)?),
                    // (another thread took the rest first)
                    Err(e) if e.is_instance_of::<pyo3::exceptions::PyIndexError>(py) => break,
                    Err(e) => return Err(e),
                }
            }
            if !out.is_empty() {
                return Ok(PyList::new(py, out)?.into_any().unbind());
            }
        }
        let owner = live_owner(py, &self.owner)?;
        Ok(self.slow.bind(py).call1((owner, max_items, timeout))?.unbind())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SendBuffer>()?;
    m.add_class::<FastSend>()?;
    m.add_class::<FastRecv>()?;
    Ok(())
}
