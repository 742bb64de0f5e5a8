//! The engine and the batched socket, joined: a turn's reads go from the kernel's buffers into
//! the engine, and its output from the engine into one send buffer, without a Python object
//! per datagram (`ExonCore.receive_io`, `ExonCore.output_batch`, `OutBatch`).
//!
//! Each is `receive_datagrams` / `datagrams_to_send` of the twin with the socket's batch in
//! the middle: the same datagrams in the same order, the same rules (live sessions' datagrams
//! first; handshake packets first out). Datagrams that are not a live session's plain case
//! (handshakes, path moves, forged or replayed ones) still go through the Python secure layer.

use std::net::SocketAddr;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::python::{UdpIo, ARENA};
use crate::udp::{Received, RecvArena};

/// A datagram's destination: a socket address, or a Python address the socket module resolves
/// (a host name).
enum Dest {
    Sock(SocketAddr),
    Py(Py<PyAny>),
}

/// A turn's output, sealed, in order: one buffer and where each datagram goes. Made by
/// `ExonCore.output_batch`, sent by `UdpIo.send` (outside the driver's lock).
#[pyclass(module = "a3m._native")]
#[derive(Default)]
pub struct OutBatch {
    pub(crate) data: Vec<u8>,
    entries: Vec<(usize, usize, Dest)>,
}

#[pymethods]
impl OutBatch {
    fn __len__(&self) -> usize {
        self.entries.len()
    }

    fn __bool__(&self) -> bool {
        !self.entries.is_empty()
    }

    /// The datagrams as `[(bytes, address), ...]` (tests, diagnostics).
    fn datagrams<'py>(&self, py: Python<'py>, io: &UdpIo) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for (s, l, d) in &self.entries {
            let addr = match d {
                Dest::Sock(sa) => io.addr_object(py, *sa)?.into_any(),
                Dest::Py(o) => o.bind(py).clone(),
            };
            out.append((PyBytes::new(py, &self.data[*s..*s + *l]), addr))?;
        }
        Ok(out)
    }
}

impl OutBatch {
    /// An empty batch with room for `bytes` of datagrams.
    pub(crate) fn with_capacity(bytes: usize, datagrams: usize) -> OutBatch {
        OutBatch { data: Vec::with_capacity(bytes), entries: Vec::with_capacity(datagrams) }
    }

    /// Append a datagram for `addr` (a Python address: parsed once per object by the
    /// socket's cache). Returns its length.
    pub(crate) fn push(&mut self, py: Python<'_>, io: &UdpIo, bytes: &[u8], addr: &Bound<'_, PyAny>) -> PyResult<usize> {
        let start = self.data.len();
        self.data.extend_from_slice(bytes);
        self.entries.push((start, bytes.len(), self.dest(py, io, addr)?));
        Ok(bytes.len())
    }

    /// Reserve `n` bytes for a datagram to `addr` (already parsed as `sock`, or None: parse
    /// it) and return them, to be sealed in place.
    pub(crate) fn reserve_to(&mut self, py: Python<'_>, io: &UdpIo, n: usize, addr: &Bound<'_, PyAny>, sock: Option<SocketAddr>) -> PyResult<&mut [u8]> {
        let start = self.data.len();
        self.data.resize(start + n, 0);
        let d = match sock {
            Some(sa) => Dest::Sock(sa),
            None => self.dest(py, io, addr)?,
        };
        self.entries.push((start, n, d));
        Ok(&mut self.data[start..start + n])
    }

    fn dest(&self, py: Python<'_>, io: &UdpIo, addr: &Bound<'_, PyAny>) -> PyResult<Dest> {
        Ok(match io.dest(py, addr) {
            Ok(Some(sa)) => Dest::Sock(sa),
            _ => Dest::Py(addr.clone().unbind()),
        })
    }

    /// Prepend `other` (the secure layer's handshake packets go first).
    pub(crate) fn prepend(&mut self, mut other: OutBatch) {
        let shift = other.data.len();
        other.data.extend_from_slice(&self.data);
        for e in &mut self.entries {
            e.0 += shift;
        }
        other.entries.append(&mut self.entries);
        *self = other;
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn total_bytes(&self) -> usize {
        self.entries.iter().map(|e| e.1).sum()
    }

    /// Send every datagram, in order: runs to socket addresses through the batched layer,
    /// Python addresses through the socket's `sendto`. The number that failed.
    pub(crate) fn send(&self, py: Python<'_>, io: &UdpIo) -> PyResult<usize> {
        let Ok(fd) = io.fd(py) else {
            return Ok(self.entries.len());
        };
        let mut errors = 0;
        let mut run: Vec<(usize, usize, SocketAddr)> = Vec::with_capacity(self.entries.len());
        for (s, l, d) in &self.entries {
            match d {
                Dest::Sock(sa) => run.push((*s, *l, *sa)),
                Dest::Py(a) => {
                    if !run.is_empty() {
                        errors += io.send_now(py, fd, &self.data, &run);
                        run.clear();
                    }
                    let b = PyBytes::new(py, &self.data[*s..*s + *l]);
                    if io.sock_sendto(py, &b, a.bind(py)).is_err() {
                        errors += 1;
                    }
                }
            }
        }
        if !run.is_empty() {
            errors += io.send_now(py, fd, &self.data, &run);
        }
        Ok(errors)
    }
}

/// `time.monotonic()`: the clock the drivers give the protocol.
pub(crate) fn monotonic() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // CLOCK_MONOTONIC always exists on Linux: the call cannot fail with a valid pointer.
    // SAFETY: clock_gettime only writes the timespec it is given, which lives across it.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Datagrams read in one turn: their bytes back to back, and where each came from.
#[derive(Default)]
pub(crate) struct Read {
    pub(crate) data: Vec<u8>,
    pub(crate) items: Vec<(usize, usize, SocketAddr)>,
}

impl Read {
    pub(crate) fn bytes(&self, i: usize) -> &[u8] {
        let (s, l, _) = self.items[i];
        &self.data[s..s + l]
    }

    pub(crate) fn bytes_mut(&mut self, i: usize) -> &mut [u8] {
        let (s, l, _) = self.items[i];
        &mut self.data[s..s + l]
    }
}

/// Read up to `max` datagrams waiting on `io` (recvmmsg calls of up to a batch each, through
/// this thread's arena, until one comes back short). An error before anything was read is
/// raised, as `UdpIo.recv` raises it; a later one ends the reads (counted by the socket).
pub(crate) fn read_batch(py: Python<'_>, io: &UdpIo, max: usize) -> PyResult<Read> {
    let fd = io.fd(py)?;
    ARENA.with(|cell| {
        let mut slot = cell.borrow_mut();
        let arena = slot.get_or_insert_with(RecvArena::default);
        let mut out = Read::default();
        out.data.reserve(64 * 1500);
        let mut got: Vec<Received> = Vec::new();
        while out.items.len() < max {
            got.clear();
            match io.udp.recv(fd, arena, max - out.items.len(), &mut got) {
                Ok(()) => {}
                Err(e) if out.items.is_empty() => return Err(e.into()),
                Err(_) => break,
            }
            for r in &got {
                let start = out.data.len();
                out.data.extend_from_slice(&arena.buf[r.start..r.start + r.len]);
                out.items.push((start, r.len, r.addr));
            }
            if got.len() < quinn_udp::BATCH_SIZE {
                break; // the queue ran dry within that call
            }
        }
        Ok(out)
    })
}

