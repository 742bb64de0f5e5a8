//! The bindings of REQ and REP's native exchange (`exchange.rs`; docs/design.md 1e, "The
//! exchange"): `Exchange`, one a node, shares its table of lent sockets with the node's
//! `ExonCore` (a leader's reads hand them their messages), and `XSocket`, one a REQ or REP
//! socket, is its `send` and `recv`: a request or a reply in one native call while the
//! socket is lent, else the Python method (`a3m.runtime.exchange`, which lends and takes
//! back).

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBool, PyBytes};

use crate::exchange::{Lent, Row, Table, Take, REP, REQ};
use crate::python::UdpIo;
use crate::python_engine::{locked, ExonCore};
use crate::python_io::monotonic;
use crate::python_sendbuf::{live_owner, plain_send, timeout_ok};

/// A lent link, as `a3m.runtime.exchange` hands it over: the peer's node and tag, this
/// side's incarnation, the link's head, then its counters (`ROW_INTS`, `ROW_FLOATS`).
type RowIn = (String, String, u64, Vec<u8>, Vec<i64>, Vec<f64>);
/// A link's counters as they come back (`back_of`).
type RowBack = (Vec<i64>, Vec<f64>);
/// What `reclaim` gives back: the rows, the inbox, what is owed, the last request id, and
/// the socket's received, delivered and sent counts since it was lent.
type Reclaimed = (Vec<RowBack>, Vec<(usize, u32, Py<PyBytes>)>, Option<(usize, u32)>, u32, i64, i64, i64);

/// A lent row's integer counters, in this order: expected_seq, next_seq, received,
/// max_edge, arrived_bytes, delivered, edge, capacity, batch, limit, round_start_delivered,
/// flow_seq, send_edge, send_sent, send_flow_seq, data_in, processed; its float ones:
/// round_end, last_active, ka_at (`a3m.runtime.exchange.Lender.lend` lists them so).
const ROW_INTS: usize = 17;
const ROW_FLOATS: usize = 3;

fn row_of(r: RowIn) -> PyResult<Row> {
    let (node, tag, my_inc, head, i, f) = r;
    if i.len() != ROW_INTS || f.len() != ROW_FLOATS {
        return Err(pyo3::exceptions::PyValueError::new_err("a lent row has the wrong number of counters"));
    }
    Ok(Row {
        peer_node: Arc::from(node.as_str()),
        peer_tag: tag,
        my_inc,
        head,
        expected_seq: i[0] as u64,
        next_seq: i[1] as u64,
        received: i[2],
        max_edge: i[3],
        arrived_bytes: i[4],
        delivered: i[5],
        edge: i[6],
        capacity: i[7],
        batch: i[8],
        limit: i[9],
        round_start_delivered: i[10],
        flow_seq: i[11],
        send_edge: i[12],
        send_sent: i[13],
        send_flow_seq: i[14] as u64,
        data_in: i[15],
        processed: i[16],
        round_end: f[0],
        last_active: f[1],
        ka_at: f[2],
    })
}

/// The counters a lent row may have changed, in this order (`Lender.take_back` reads
/// them so): expected_seq, next_seq, received, max_edge, arrived_bytes, delivered, edge,
/// round_start_delivered, flow_seq, send_edge, send_sent, send_flow_seq, data_in,
/// processed; then round_end, last_active.
fn back_of(r: &Row) -> RowBack {
    (
        vec![
            r.expected_seq as i64,
            r.next_seq as i64,
            r.received,
            r.max_edge,
            r.arrived_bytes,
            r.delivered,
            r.edge,
            r.round_start_delivered,
            r.flow_seq,
            r.send_edge,
            r.send_sent,
            r.send_flow_seq as i64,
            r.data_in,
            r.processed,
        ],
        vec![r.round_end, r.last_active],
    )
}

/// A node's lent REQ and REP sockets (`exchange::Table`). The runtime's `Exchange` shares
/// it with the node's engine (`Exchange.table`): a leader's reads offer it what Exon
/// delivers. The seeded simulator (`a3m.testing`) makes one alone and drives it itself:
/// `offer` a message Exon delivered; `take` the application's receive (`(payload, flow)`
/// where `flow` is `(peer, message)` to hand to Exon or None, None to wait, False for the
/// core); `send` the application's send (`(peer, message)` to hand to Exon, or None for the
/// core). `rtt(peer)` and `can_send(peer)` are the engine's.
#[pyclass(module = "a3m._native", name = "ExchangeTable", frozen)]
pub struct ExchangeTable {
    table: Arc<Mutex<Table>>,
}

#[pymethods]
impl ExchangeTable {
    #[new]
    fn new() -> Self {
        ExchangeTable { table: Arc::new(Mutex::new(Table::default())) }
    }

    /// Lend the socket `tag` (kind 1 REP, 2 REQ): its established links' rows (see
    /// `RowIn`), its requests not yet received (REP) or its reply (REQ) as (row, id, body),
    /// what it owes (REP: the request to answer; REQ: the request outstanding) as (row,
    /// id), the last request id (REQ), its `keepalive_s` and the largest payload a send
    /// takes.
    #[allow(clippy::too_many_arguments)]
    fn lend(
        &self,
        tag: String,
        kind: u8,
        rows: Vec<RowIn>,
        inbox: Vec<(usize, u32, Vec<u8>)>,
        owed: Option<(usize, u32)>,
        next_id: u32,
        ka_s: f64,
        max_payload: usize,
    ) -> PyResult<()> {
        if kind != REP && kind != REQ {
            return Err(pyo3::exceptions::PyValueError::new_err("a lent socket is a REP (1) or a REQ (2)"));
        }
        let rows: Vec<Row> = rows.into_iter().map(row_of).collect::<PyResult<_>>()?;
        let n = rows.len();
        if inbox.iter().any(|e| e.0 >= n) || owed.is_some_and(|o| o.0 >= n) {
            return Err(pyo3::exceptions::PyValueError::new_err("a lent message names no lent row"));
        }
        let mut l = Lent::new(kind, rows, ka_s, max_payload);
        l.inbox = inbox.into_iter().collect();
        l.owed = owed;
        l.next_id = next_id;
        locked(&self.table).socks.insert(tag, l);
        Ok(())
    }

    /// Take the socket `tag` back: None when it is not lent, else what `Reclaimed` says.
    fn reclaim(&self, py: Python<'_>, tag: &str) -> Option<Reclaimed> {
        let l = locked(&self.table).socks.remove(tag)?;
        Some((
            l.rows.iter().map(back_of).collect(),
            l.inbox.into_iter().map(|(i, id, b)| (i, id, PyBytes::new(py, &b).unbind())).collect(),
            l.owed,
            l.next_id,
            l.received,
            l.delivered,
            l.sent,
        ))
    }

    /// Whether the socket `tag` is lent.
    fn lent(&self, tag: &str) -> bool {
        locked(&self.table).socks.contains_key(tag)
    }

    /// The tags of the lent sockets.
    fn tags(&self) -> Vec<String> {
        locked(&self.table).socks.keys().cloned().collect()
    }

    fn offer(&self, src: &str, msg: &[u8], now: f64) -> bool {
        locked(&self.table).offer(src, msg, now)
    }

    fn take<'py>(&self, py: Python<'py>, tag: &str, now: f64, rtt: Bound<'py, PyAny>, can_send: Bound<'py, PyAny>) -> PyResult<Py<PyAny>> {
        let mut err: Option<PyErr> = None;
        let mut ask_rtt = |peer: &str| match rtt.call1((peer,)).and_then(|r| r.extract::<Option<f64>>()) {
            Ok(v) => v,
            Err(e) => {
                err.get_or_insert(e);
                None
            }
        };
        let sendable = |peer: &str| can_send.call1((peer,)).and_then(|r| r.is_truthy()).unwrap_or(false);
        let got = locked(&self.table).take(tag, now, &mut ask_rtt, &sendable);
        if let Some(e) = err {
            return Err(e);
        }
        Ok(match got {
            Take::Got(body, flow) => {
                let flow = flow.map(|(p, m)| (p.to_string(), PyBytes::new(py, &m)));
                (PyBytes::new(py, &body), flow).into_pyobject(py)?.into_any().unbind()
            }
            Take::Wait => py.None(),
            Take::Python => PyBool::new(py, false).to_owned().into_any().unbind(),
        })
    }

    fn send<'py>(&self, py: Python<'py>, tag: &str, payload: &[u8], now: f64, can_send: Bound<'py, PyAny>) -> Option<(String, Py<PyBytes>)> {
        let sendable = |peer: &str| can_send.call1((peer,)).and_then(|r| r.is_truthy()).unwrap_or(false);
        let made = locked(&self.table).send(tag, payload, now, &sendable);
        made.map(|(p, m)| (p.to_string(), PyBytes::new(py, &m).unbind()))
    }
}

/// A node's lent REQ and REP sockets (see the module's docstring). `wake`: a weak method,
/// the driver's wake-up, called when an exchange's send leaves output to Python or sets a
/// timer earlier than a sleeper's deadline; `unsent`: a weak method that puts `(peer,
/// message)` in the Python bridge's outbox, for a message Exon refused after all (the node
/// closing). Each is told whether the calling thread holds the node's lock already (`take`,
/// from the Python `recv`'s wait) or not (`send`, `recv`). (Weak: the driver holds the
/// exchange.)
#[pyclass(module = "a3m._native", name = "Exchange", frozen)]
pub struct Exchange {
    /// The lent sockets (lent and taken back through it).
    #[pyo3(get)]
    table: Py<ExchangeTable>,
    engine: Py<ExonCore>,
    io: Mutex<Py<UdpIo>>,
    wake: Py<PyAny>,
    unsent: Py<PyAny>,
}

impl Exchange {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        locked(&self.table.get().table)
    }

    /// A message Exon took for sendable a moment ago and refused (closing since): the
    /// bridge's outbox holds it as it holds any message Exon refuses, and its pump decides.
    fn unsent(&self, py: Python<'_>, peer: &str, msg: &[u8], held: bool) -> PyResult<()> {
        let unsent = self.unsent.bind(py).call0()?; // (a weak method: no cycle)
        if !unsent.is_none() {
            unsent.call1((peer, PyBytes::new(py, msg), held))?;
        }
        Ok(())
    }

    /// What the engine holds now goes out from this thread (as the driver's `flush`); the
    /// driver is woken where some of it is left to Python or a timer it set comes before
    /// the deadline a sleeper waits until (the native loop's or a leader's).
    fn flush(&self, py: Python<'_>, core: &ExonCore, now: f64, held: bool) -> PyResult<()> {
        let io = locked(&self.io).clone_ref(py);
        let io = io.bind(py).borrow();
        let fd = io.fd(py)?;
        let left = core.flush_native(py, &io, fd, now);
        let t = core.eng.lock_py_attached(py).unwrap_or_else(|p| p.into_inner()).exon_timer();
        let until = |a: &std::sync::atomic::AtomicU64| f64::from_bits(a.load(std::sync::atomic::Ordering::SeqCst));
        let (lu, ld) = (until(&core.loop_until), until(&core.lead_until));
        let early = t.is_some_and(|t| (lu > 0.0 && t < lu) || (ld > 0.0 && t < ld));
        if left || early {
            let wake = self.wake.bind(py).call0()?; // (a weak method: no cycle)
            if !wake.is_none() {
                wake.call1((held,))?;
            }
        }
        Ok(())
    }
}

#[pymethods]
impl Exchange {
    /// The exchange of the node whose engine is `engine` and socket layer `io`, installed
    /// in the engine (a leader's reads hand lent sockets their messages from now on).
    #[new]
    fn new(engine: Bound<'_, ExonCore>, io: Py<UdpIo>, wake: Py<PyAny>, unsent: Py<PyAny>) -> PyResult<Self> {
        let py = engine.py();
        let table = ExchangeTable::new();
        *locked(&engine.borrow().exchange) = Some(table.table.clone());
        Ok(Exchange { table: Py::new(py, table)?, engine: engine.unbind(), io: Mutex::new(io), wake, unsent })
    }

    /// The socket layer changed (the node rebound): sends go through `io` from now on.
    fn set_io(&self, io: Py<UdpIo>) {
        *locked(&self.io) = io;
    }

    /// The engine stops handing lent sockets anything (the node closes); what is lent stays
    /// until taken back.
    fn detach(&self, py: Python<'_>) {
        *locked(&self.engine.bind(py).borrow().exchange) = None;
    }

    /// The send and receive of the socket `tag` (see `XSocket`): `slow_send(owner, data,
    /// timeout, cookie)` and `slow_recv(owner, timeout)` are the Python methods, `owner`
    /// a weak reference to the socket.
    fn socket(slf: Py<Self>, tag: String, slow_send: Py<PyAny>, slow_recv: Py<PyAny>, owner: Py<PyAny>) -> XSocket {
        XSocket { x: slf, tag, slow_send, slow_recv, owner }
    }
}

/// A REQ or REP socket's `send` and `recv` (see `Exchange.socket`): while the socket is
/// lent, a plain request or reply (bytes, no cookie, a timeout absent or not negative) goes
/// to Exon and out, and a request or reply already there is taken, in one native call each;
/// anything else runs the Python method, which takes the socket back where the core must
/// act.
#[pyclass(module = "a3m._native", name = "XSocket", frozen)]
pub struct XSocket {
    x: Py<Exchange>,
    tag: String,
    slow_send: Py<PyAny>,
    slow_recv: Py<PyAny>,
    owner: Py<PyAny>,
}

impl XSocket {
    /// The exchange's receive; a FLOW it made due goes to Exon and out at once, as the
    /// core's after-call sends it. `held`: the calling thread holds the node's lock (the
    /// Python `recv`'s wait), which a wake-up of the driver must then not take again.
    fn take_native(&self, py: Python<'_>, held: bool) -> PyResult<Take> {
        let x = self.x.get();
        let core = x.engine.bind(py).borrow();
        let now = monotonic();
        let got = {
            let mut e = core.eng.lock_py_attached(py).unwrap_or_else(|p| p.into_inner());
            let got = {
                let eng = &*e;
                x.table().take(&self.tag, now, &mut |peer| eng.srtt(peer), &|p| eng.can_send(p))
            };
            match got {
                Take::Got(body, Some((peer, flow))) => {
                    if e.send(&peer, &flow, now, false).is_err() {
                        drop(e);
                        x.unsent(py, &peer, &flow, held)?;
                    }
                    Take::Got(body, Some((peer, Vec::new())))
                }
                other => other,
            }
        };
        if let Take::Got(_, Some(_)) = got {
            x.flush(py, &core, now, held)?;
        }
        Ok(got)
    }

    /// A plain send natively; false: the Python method's (nothing changed).
    fn send_native(&self, py: Python<'_>, payload: &[u8]) -> PyResult<bool> {
        let x = self.x.get();
        let core = x.engine.bind(py).borrow();
        let now = monotonic();
        let mut refused: Option<(std::sync::Arc<str>, Vec<u8>)> = None;
        {
            let mut e = core.eng.lock_py_attached(py).unwrap_or_else(|p| p.into_inner());
            let made = x.table().send(&self.tag, payload, now, &|p| e.can_send(p));
            let Some((peer, msg)) = made else { return Ok(false) };
            if e.send(&peer, &msg, now, false).is_err() {
                refused = Some((peer, msg));
            }
        }
        if let Some((peer, msg)) = refused {
            x.unsent(py, &peer, &msg, false)?;
            return Ok(true);
        }
        x.flush(py, &core, now, false)?;
        Ok(true)
    }
}

#[pymethods]
impl XSocket {
    /// The socket's ``recv``: a request (REP) or the reply (REQ) already there, natively;
    /// else the Python ``recv`` (which waits).
    #[pyo3(signature = (timeout = None))]
    fn recv(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let got = crate::python::guard("XSocket.recv", || if timeout_ok(timeout) { self.take_native(py, false) } else { Ok(Take::Python) })?;
        if let Take::Got(b, _) = got {
            return Ok(PyBytes::new(py, &b).into_any().unbind());
        }
        let owner = live_owner(py, &self.owner)?;
        Ok(self.slow_recv.bind(py).call1((owner, timeout))?.unbind())
    }

    /// The socket's ``send``: a reply (REP) or a request (REQ) natively (see the class's
    /// docstring), else the Python ``send``.
    #[pyo3(signature = (data, timeout = None, cookie = None))]
    fn send(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        timeout: Option<&Bound<'_, PyAny>>,
        cookie: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let fast = |b: &Bound<'_, PyBytes>| crate::python::guard("XSocket.send", || self.send_native(py, b.as_bytes()));
        plain_send(py, data, timeout, cookie, fast, &self.slow_send, &self.owner)
    }

    /// Under the node's lock, for the Python ``recv``'s wait: the payload natively (bytes),
    /// nothing yet (None), or False: the core must do it (the socket not lent, a FLOW due,
    /// a misuse to report).
    fn take(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(match crate::python::guard("XSocket.take", || self.take_native(py, true))? {
            Take::Got(b, _) => PyBytes::new(py, &b).into_any().unbind(),
            Take::Wait => py.None(),
            Take::Python => PyBool::new(py, false).to_owned().into_any().unbind(),
        })
    }
}

/// A core FLOW message read (`exchange::decode_flow`, twin of `a3m.core.message.decode`
/// for FLOW): (source tag, destination tag, source and destination incarnations, FLOW
/// number, edge), or None where the core refuses it, reads another type, or reads an edge
/// beyond 2^63 - 1.
#[pyfunction]
fn decode_flow(data: &[u8]) -> Option<(String, String, u64, u64, u64, i64)> {
    crate::exchange::decode_flow(data).map(|(s, d, si, di, f, e)| (s.to_string(), d.to_string(), si, di, f, e))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_flow, m)?)?;
    m.add_class::<Exchange>()?;
    m.add_class::<ExchangeTable>()?;
    m.add_class::<XSocket>()?;
    Ok(())
}
