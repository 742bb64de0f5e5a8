//! The node's I/O loop without the interpreter's lock (`ExonCore.run_io`): wait on the socket,
//! a wake-up descriptor and the timers, read, open, run the engine's frames and timers, seal
//! and send, and come back to Python only for what needs it (events for the layer above, a
//! datagram or output the Python secure layer must handle, its deadlines, a wake-up).
//!
//! What it does is what a turn of the drivers does (`receive_io`, `handle_timer`,
//! `output_batch`, `UdpIo.send`) restricted to the live sessions' plain case, with the same
//! rules: the Python turn that follows finds the rest where it would have been (the datagrams
//! left, in order, in `pending_rx`; output taken but not sealed here, in order, in
//! `pending_tx`), and output leaves in the order it was made (the socket's order lock, held
//! from taking it to sending it).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use crate::exon::engine::OutItem;
use crate::python::{UdpIo, ARENA};
use crate::python_engine::{locked, ExonCore, PyAddr};
use crate::python_io::{monotonic, Read};
use crate::python_session::{lock, table};
use crate::udp::{Received, RecvArena};

/// What the native loop refused (`refuse_native`), by the secure layer's counter for it
/// (`REFUSED_NAMES`, in this order).
#[derive(Clone, Copy)]
pub(crate) enum Refused {
    Malformed = 0,
    Truncated = 1,
    UnknownSession = 2,
    InClear = 3,
    /// A token-less HELLO the handshake budgets shed (`meter.rs`).
    Shed = 4,
    /// An INITIATE whose cookie does not open (`cookie_keys.rs`).
    CookieInvalid = 5,
}

/// The `ExonStats` fields of `Refused`, in order.
pub(crate) const REFUSED_NAMES: [&str; 6] = ["malformed", "truncated", "unknown_session", "plain_refused", "unauth_shed", "cookie_invalid"];

/// Whether the secure layer may install a session when it handles `d`: an INITIATE (the
/// responder's side) or a WELCOME (the initiator's); a HELLO, a RETRY or a datagram sealed
/// under a session never does.
fn may_install(d: &[u8]) -> bool {
    d.len() >= 2 && d[0] == crate::wire::VERSION && matches!(d[1], crate::aead::INITIATE | crate::aead::WELCOME)
}

/// Why `run_io` came back.
pub const TIMEOUT: u8 = 0;
pub const WOKEN: u8 = 1;
pub const PYTHON: u8 = 2;
pub const LEADER: u8 = 3;
/// A leader's read handed lent sockets their messages (`exchange.rs`) and left Python
/// nothing else: the waiting thread looks at its socket, no turn is due.
pub const EXCHANGE: u8 = 4;

/// Read up to `max` datagrams without the interpreter (see `python_io::read_batch`).
fn read_fd(io: &UdpIo, fd: i32, max: usize) -> io::Result<Read> {
    ARENA.with(|cell| {
        let mut slot = cell.borrow_mut();
        let arena = slot.get_or_insert_with(RecvArena::default);
        let mut out = Read::default();
        let mut got: Vec<Received> = Vec::new();
        while out.items.len() < max {
            got.clear();
            match io.udp.recv(fd, arena, max - out.items.len(), &mut got) {
                Ok(()) => {}
                Err(e) if out.items.is_empty() => return Err(e),
                Err(_) => break,
            }
            for r in &got {
                let start = out.data.len();
                out.data.extend_from_slice(&arena.buf[r.start..r.start + r.len]);
                out.items.push((start, r.len, r.addr));
            }
            if got.len() < quinn_udp::BATCH_SIZE {
                break;
            }
        }
        Ok(out)
    })
}

/// A spin's `yield` that came back this much later gave the CPU to another task for a
/// scheduler slice (the Python twin's `PREEMPTED_S`): the spin stops and says so.
const PREEMPTED_S: f64 = 0.001;

/// What one wait saw: the socket readable, the wake-up readable, the spin lost the CPU.
#[derive(Clone, Copy, Default)]
struct Seen {
    sock: bool,
    woke: bool,
    preempted: bool,
}

/// Wait up to `timeout_s` for `fd` or `wake` to be readable (polling first for `spin_s`,
/// until a yield loses the CPU to another task).
fn wait2(fd: i32, wake: i32, timeout_s: f64, spin_s: f64) -> Seen {
    let mut fds = [
        libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: wake, events: libc::POLLIN, revents: 0 },
    ];
    let nfds: libc::nfds_t = if wake >= 0 { 2 } else { 1 };
    let look = |fds: &mut [libc::pollfd; 2], t: f64| -> Seen {
        let secs = t.max(0.0);
        let ts = libc::timespec { tv_sec: secs.trunc() as libc::time_t, tv_nsec: (secs.fract() * 1e9) as libc::c_long };
        fds[0].revents = 0;
        fds[1].revents = 0;
        // The timespec lives across the call; no signal mask is changed (null sigmask).
        // SAFETY: `fds` holds `nfds` valid pollfd entries, and `ts` is a valid timespec.
        let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), nfds, &ts, std::ptr::null()) };
        if rc <= 0 {
            return Seen::default();
        }
        Seen { sock: fds[0].revents != 0, woke: nfds == 2 && fds[1].revents != 0, preempted: false }
    };
    let mut preempted = false;
    let mut left = timeout_s;
    if spin_s > 0.0 {
        let start = monotonic();
        let end = start + spin_s.min(timeout_s);
        loop {
            let r = look(&mut fds, 0.0);
            if r.sock || r.woke {
                return r;
            }
            let t = monotonic();
            if t >= end {
                break;
            }
            std::thread::yield_now();
            if monotonic() - t > PREEMPTED_S {
                preempted = true; // another task wants this CPU: sleep instead
                break;
            }
        }
        left = timeout_s - (monotonic() - start);
    }
    let mut r = look(&mut fds, left.max(0.0));
    r.preempted = preempted;
    r
}

/// How a loop ended: why (`TIMEOUT`, `WOKEN`, `PYTHON`, `LEADER`), the datagrams it read,
/// the time, when the socket first became readable (seconds after the start; negative:
/// never) and whether its spin lost the CPU.
pub(crate) struct LoopEnd {
    pub why: u8,
    pub reads: usize,
    pub now: f64,
    pub input_after: f64,
    pub preempted: bool,
}

impl LoopEnd {
    /// The loop ends now, for `why`.
    fn done(mut self, why: u8) -> LoopEnd {
        self.why = why;
        self.now = monotonic();
        self
    }
}

impl ExonCore {
    /// The GIL-free loop (see the module's docstring). `lead`: an application thread's wait
    /// (`lead_io`): it reads whatever the leader flag says and publishes no deadline (the
    /// driver compares a new timer with the leader's own `until`); otherwise the I/O thread's
    /// (`run_io`), which leaves the socket to a leader and publishes `loop_until`.
    pub(crate) fn io_loop(&self, io: &UdpIo, fd: i32, wake: i32, until: f64, spin_s: f64, lead: bool) -> LoopEnd {
        let start = monotonic();
        let mut end = LoopEnd { why: TIMEOUT, reads: 0, now: start, input_after: -1.0, preempted: false };
        let fast = locked(&self.fast).clone();
        let Some(crate::python_engine::FastPath { table: tbl, unanswered_rehandshake: limit, meter, cookies }) = fast else {
            // No native sessions (the secure layer's Python twins, or a node in clear): only
            // the wait is done here, until the engine's next timer at the latest.
            let deadline = match locked(&self.eng).exon_timer() {
                Some(t) if t < until => t,
                _ => until,
            };
            let seen = self.wait_published(fd, wake, deadline, start, spin_s, !lead);
            end.preempted = seen.preempted;
            let end = end.done(if seen.woke { WOKEN } else if seen.sock { PYTHON } else { TIMEOUT });
            return LoopEnd { input_after: if seen.sock { end.now - start } else { -1.0 }, ..end };
        };
        let mut spin = spin_s;
        loop {
            let now = monotonic();
            if now >= until {
                return LoopEnd { why: TIMEOUT, now, ..end };
            }
            let t_exon = locked(&self.eng).exon_timer();
            if let Some(t) = t_exon {
                if t <= now {
                    {
                        let mut e = locked(&self.eng);
                        e.timer_ack_due(now);
                        e.handle_exon_timers(now);
                    }
                    if self.send_native(io, fd, now, &tbl, limit) || self.python_due() {
                        return end.done(PYTHON);
                    }
                    continue;
                }
            }
            let deadline = match t_exon {
                Some(t) if t < until => t,
                _ => until,
            };
            if self.timer_moved(deadline, !lead) {
                continue; // another thread set an earlier timer meanwhile
            }
            let seen = self.wait_published(fd, wake, deadline, now, spin, !lead);
            if spin > 0.0 {
                end.preempted = seen.preempted;
            }
            spin = 0.0;
            if seen.sock && end.input_after < 0.0 {
                end.input_after = monotonic() - start;
            }
            if seen.woke {
                return end.done(WOKEN);
            }
            if !seen.sock {
                continue;
            }
            if !lead && self.leader.load(Ordering::SeqCst) {
                return end.done(LEADER); // (the leader reads it)
            }
            let mut read = match read_fd(io, fd, 512) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(_) => return end.done(PYTHON), // (the Python turn counts it)
            };
            let now = monotonic();
            end.reads += read.items.len();
            let n = read.items.len();
            // Live sessions' DATA first, as `receive_datagrams` takes them (a flood's
            // datagrams left to Python do not drag the stream behind them there): what is
            // left keeps its order, and the Python turn's `receive_io` applies the same rule
            // to all of it.
            let mut held: Vec<(usize, Option<u8>)> = Vec::new();
            let mut ahead: i64 = 0;
            // Whether a handshake datagram left to Python may install a session (one still
            // waiting from an earlier read, or this read's): looked up at the first datagram
            // not opened here, so a read of live DATA alone never takes `pending_rx`'s lock.
            let mut installing: Option<bool> = None;
            // RETRYs answered here, sent after the read's loop (`answer_retry`).
            let mut retries: Vec<(Vec<u8>, SocketAddr)> = Vec::new();
            for i in 0..n {
                let sa = read.items[i].2;
                if self.open_native(read.bytes_mut(i), sa, now, &tbl) {
                    ahead += i64::from(!held.is_empty());
                    continue;
                }
                let behind = *installing.get_or_insert_with(|| locked(&self.pending_rx).iter().any(|p| may_install(&p.0)));
                if !self.refuse_native(read.bytes(i), &tbl, behind) && !self.refuse_initiate(cookies.as_ref(), read.bytes(i), &sa, now) {
                    // A token-less HELLO is metered here, in the order read: shed or given
                    // a RETRY (no Python at all), or left to Python with its verdict
                    // (`open_hello`).
                    let verdict = self.meter_hello(meter.as_ref(), read.bytes(i), &sa, now);
                    if verdict == Some(crate::meter::RETRY) {
                        if let Some(r) = self.answer_retry(cookies.as_ref(), read.bytes(i), &sa, now) {
                            retries.push((r, sa));
                            continue;
                        }
                    }
                    if verdict != Some(crate::meter::SHED) {
                        if may_install(read.bytes(i)) {
                            installing = Some(true);
                        }
                        held.push((i, verdict));
                    }
                }
            }
            if ahead > 0 {
                locked(&self.eng).stats.data_first += ahead;
            }
            self.send_retries(io, fd, &retries);
            if !held.is_empty() {
                let mut pending = locked(&self.pending_rx);
                for &(i, verdict) in &held {
                    pending.push((read.bytes(i).to_vec(), read.items[i].2, verdict));
                }
                self.left.fetch_add(held.len() as u64, Ordering::Relaxed);
                drop(pending);
                self.send_native(io, fd, now, &tbl, limit);
                return end.done(PYTHON);
            }
            let took = if lead { self.exchange_take(now) } else { 0 };
            if self.send_native(io, fd, now, &tbl, limit) || self.python_due() {
                return end.done(PYTHON);
            }
            if took > 0 {
                return end.done(EXCHANGE);
            }
        }
    }

    /// A leader's part of the exchange (`exchange.rs`): the `Delivered` events at the front
    /// of the engine's queue that lent sockets take, in order, taken off it and consumed (a
    /// lent link's credits bound what its socket keeps, as the Python bridge's `consumed`
    /// after its turn); the first one not taken and all after it stay for Python. How many.
    fn exchange_take(&self, now: f64) -> usize {
        let Some(x) = locked(&self.exchange).clone() else { return 0 };
        let mut e = locked(&self.eng);
        if e.events.is_empty() {
            return 0;
        }
        let mut t = locked(&x);
        if t.is_empty() {
            return 0;
        }
        let mut k = 0;
        let mut bytes = 0i64;
        for ev in e.events.iter() {
            match ev {
                crate::exon::events::Event::Delivered { source, payload } if t.offer(source, payload, now) => {
                    k += 1;
                    bytes += payload.len() as i64;
                }
                _ => break,
            }
        }
        drop(t);
        if k > 0 {
            e.events.drain(..k);
            e.consumed(bytes);
        }
        k
    }

    /// Send what the engine holds now from the calling thread, which holds the interpreter's
    /// lock (an exchange's send), as the loop does; true when some of it is left to Python
    /// (`pending_tx`: a session the plain rules do not cover), or the node has no native
    /// sessions. The engine and the send order are waited for without the interpreter's
    /// lock: a thread that holds either may need it to let go (a host call into Python
    /// under the engine's lock, a Python turn's send under the order's).
    pub(crate) fn flush_native(&self, py: pyo3::Python<'_>, io: &UdpIo, fd: i32, now: f64) -> bool {
        use pyo3::sync::MutexExt;
        let Some(crate::python_engine::FastPath { table: tbl, unanswered_rehandshake: limit, .. }) = locked(&self.fast).clone() else {
            return true;
        };
        let eng = || self.eng.lock_py_attached(py).unwrap_or_else(|p| p.into_inner());
        if !locked(&self.pending_tx).is_empty() {
            return true;
        }
        if !eng().has_output() {
            return false;
        }
        if !io.order.try_acquire() {
            let order = io.order.clone();
            py.detach(move || order.acquire());
        }
        self.send_ordered(io, fd, now, &tbl, limit, &eng)
    }

    /// Publish `deadline` (`loop_until`: what a thread that sets a timer compares with,
    /// after setting it, to know whether to wake the loop; not for a leader's loop); true
    /// when the engine's timer came before it meanwhile (look again before sleeping).
    fn timer_moved(&self, deadline: f64, publish: bool) -> bool {
        if publish {
            self.loop_until.store(deadline.to_bits(), Ordering::SeqCst);
        }
        let moved = matches!(locked(&self.eng).exon_timer(), Some(t) if t < deadline);
        if moved && publish {
            self.loop_until.store(0f64.to_bits(), Ordering::SeqCst);
        }
        moved
    }

    /// Wait for the socket, the wake-up or `deadline`, with `loop_until` published for the
    /// wait when `publish` (0 again after it: awake, timers are looked at before the next
    /// one).
    fn wait_published(&self, fd: i32, wake: i32, deadline: f64, now: f64, spin: f64, publish: bool) -> Seen {
        if publish {
            self.loop_until.store(deadline.to_bits(), Ordering::SeqCst);
        }
        let r = wait2(fd, wake, deadline - now, spin);
        if publish {
            self.loop_until.store(0f64.to_bits(), Ordering::SeqCst);
        }
        r
    }

    /// The secure layer's refusals that need no state but the session table (`open`'s
    /// first lines: a wrong version, a type it does not know, a datagram in clear, a sealed
    /// one too short or under the index of no session), counted as it counts them, before
    /// any Python runs (a storm of garbage costs no turn); false: left to it. An unknown
    /// index only while no datagram that may install a session waits for Python
    /// (`installing`: an INITIATE or a WELCOME of `pending_rx` or of this read, see
    /// `may_install`): it may be about to install the session the index names. The other
    /// refusals depend on no state.
    pub(crate) fn refuse_native(&self, d: &[u8], tbl: &std::sync::Arc<std::sync::Mutex<crate::python_session::Table>>, installing: bool) -> bool {
        let n = d.len();
        let why = if n < 2 || d[0] != crate::wire::VERSION {
            Refused::Malformed
        } else {
            use crate::aead::{CHALLENGE, DATA, HELLO, INITIATE, PLAIN, RESPONSE, RETRY, WELCOME};
            match d[1] {
                DATA | CHALLENGE | RESPONSE => {
                    if n < crate::aead::OVERHEAD {
                        Refused::Truncated
                    } else if installing || table(tbl).by_index.contains_key(&crate::aead::index_of(d)) {
                        return false;
                    } else {
                        Refused::UnknownSession
                    }
                }
                PLAIN => Refused::InClear,
                HELLO | WELCOME | INITIATE | RETRY => return false,
                _ => Refused::Malformed,
            }
        };
        locked(&self.eng).note_datagram(n);
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Whether `d` is an INITIATE the responder refuses before anything else (`_on_initiate`'s
    /// first lines): truncated, or a cookie that does not open under the jar's secrets
    /// (`cookie_keys.rs`, when native); counted here as it counts them (`truncated`,
    /// `cookie_invalid`, and the datagram in `datagrams_in`). Such a refusal changes no
    /// state, so it may come ahead of the datagrams left to Python. Its version was looked at
    /// (`refuse_native`).
    pub(crate) fn refuse_initiate(&self, keys: Option<&crate::python_cookie_keys::SharedKeys>, d: &[u8], sa: &SocketAddr, now: f64) -> bool {
        let Some(keys) = keys else { return false };
        if d.len() < 2 || d[1] != crate::aead::INITIATE {
            return false;
        }
        let why = match crate::python_cookie_keys::keys_lock(keys).check_initiate(d, sa, now) {
            None => Refused::Truncated,
            Some(crate::cookie_keys::Check::Invalid) => Refused::CookieInvalid,
            Some(_) => return false,
        };
        locked(&self.eng).note_datagram(d.len());
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
        self.initiates_refused.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The handshake budgets' verdict on `d` when it is a token-less HELLO and the meter is
    /// native (None: not one, or no native meter); a shed one is counted here (`unauth_shed`,
    /// and the datagram in `datagrams_in`), as the secure layer counts it.
    pub(crate) fn meter_hello(&self, meter: Option<&crate::python_meter::SharedMeter>, d: &[u8], sa: &std::net::SocketAddr, now: f64) -> Option<u8> {
        if !crate::meter::is_plain_hello(d) {
            return None;
        }
        let verdict = crate::python_meter::meter_lock(meter?).hello(|| crate::meter::SourceKey::of_socket(sa), now);
        if verdict == crate::meter::SHED {
            locked(&self.eng).note_datagram(d.len());
            self.refused[Refused::Shed as usize].fetch_add(1, Ordering::Relaxed);
            self.shed.fetch_add(1, Ordering::Relaxed);
        }
        Some(verdict)
    }

    /// The RETRY the responder sends for the token-less HELLO `d` the budgets gave one
    /// (`_on_hello`'s busy case), made here with the jar's newest secret (`cookie_keys.rs`),
    /// counted as it counts it (`retries_sent`, and the datagram in `datagrams_in`); None
    /// (nothing counted): no native keys, or the jar replaces its secret first (Python does,
    /// with the verdict).
    pub(crate) fn answer_retry(&self, keys: Option<&crate::python_cookie_keys::SharedKeys>, d: &[u8], sa: &SocketAddr, now: f64) -> Option<Vec<u8>> {
        let r = crate::python_cookie_keys::keys_lock(keys?).retry(d, sa, now)?;
        locked(&self.eng).note_datagram(d.len());
        self.retries.fetch_add(1, Ordering::Relaxed);
        Some(r)
    }

    /// Send the RETRYs `answer_retry` made (stateless answers: in any order with the rest of
    /// the output), counted as the secure layer's control datagrams are.
    pub(crate) fn send_retries(&self, io: &UdpIo, fd: i32, retries: &[(Vec<u8>, SocketAddr)]) {
        if retries.is_empty() {
            return;
        }
        let mut data: Vec<u8> = Vec::new();
        let mut dgrams: Vec<(usize, usize, SocketAddr)> = Vec::with_capacity(retries.len());
        for (r, sa) in retries {
            dgrams.push((data.len(), r.len(), *sa));
            data.extend_from_slice(r);
        }
        locked(&self.eng).count_out(dgrams.len(), data.len());
        let errors = io.udp.send(fd, &data, &dgrams);
        self.io_errors.fetch_add(errors as u64, Ordering::Relaxed);
    }

    /// Events for the layer above, or output left to Python.
    fn python_due(&self) -> bool {
        locked(&self.eng).has_events() || !locked(&self.pending_tx).is_empty()
    }

    /// The twin's `open` of a live session's plain DATA datagram (see `open_fast`), without
    /// the interpreter; false: left to the secure layer, nothing changed.
    fn open_native(&self, d: &mut [u8], sa: SocketAddr, now: f64, tbl: &std::sync::Arc<std::sync::Mutex<crate::python_session::Table>>) -> bool {
        let Some((index, counter)) = crate::python_engine::sealed_data(d) else { return false };
        let Some(hot) = table(tbl).by_index.get(&index).cloned() else { return false };
        let mut h = lock(&hot);
        if !h.confirmed || h.candidate.is_some() || h.sock_addr != Some(sa) || !h.window.fresh(counter) {
            return false;
        }
        let n = d.len();
        let opened = h.open.open_in_place(d);
        let peer = if opened {
            h.window.accept(counter);
            h.last_recv = now;
            h.unanswered = 0;
            Some(h.peer.clone())
        } else {
            None
        };
        drop(h); // (the engine's lock is never taken under a session's: see output_batch)
        let mut e = locked(&self.eng);
        e.note_datagram(n);
        match peer {
            None => {
                self.forged.fetch_add(1, Ordering::Relaxed); // (all the twin's open would do)
            }
            Some(peer) if n > crate::aead::OVERHEAD => {
                e.receive_plain(&d[crate::aead::HEADER..n - crate::aead::TAG], Some(&peer), None, now);
            }
            Some(_) => {} // a keepalive
        }
        true
    }

    /// Take the engine's output and send what sealing here allows, in order, under the
    /// socket's order lock; what it does not (a session the secure layer must handle) is left
    /// in `pending_tx`, in order, for the Python turn. True when something was left.
    fn send_native(&self, io: &UdpIo, fd: i32, now: f64, tbl: &std::sync::Arc<std::sync::Mutex<crate::python_session::Table>>, limit: i64) -> bool {
        if !locked(&self.pending_tx).is_empty() || !locked(&self.eng).has_output() {
            return !locked(&self.pending_tx).is_empty();
        }
        io.order.acquire();
        self.send_ordered(io, fd, now, tbl, limit, &|| locked(&self.eng))
    }

    /// `send_native`'s work once the order lock is held (released here); `eng` locks the
    /// engine as the calling thread must (`locked` without the interpreter's lock, waiting
    /// without it where the thread holds it).
    #[allow(clippy::too_many_arguments)]
    fn send_ordered<'a>(
        &'a self,
        io: &UdpIo,
        fd: i32,
        now: f64,
        tbl: &std::sync::Arc<std::sync::Mutex<crate::python_session::Table>>,
        limit: i64,
        eng: &dyn Fn() -> std::sync::MutexGuard<'a, crate::exon::engine::Engine<PyAddr>>,
    ) -> bool {
        let items = eng().take_output(now);
        let mut data: Vec<u8> = Vec::new();
        let mut dgrams: Vec<(usize, usize, SocketAddr)> = Vec::new();
        let mut rest: Vec<OutItem<PyAddr>> = Vec::new();
        for item in items {
            if !rest.is_empty() {
                rest.push(item);
                continue;
            }
            let (peer, plains): (&str, Vec<&[u8]>) = match &item {
                OutItem::Batch { peer, plains, .. } => (peer, plains.iter().map(|p| p.as_slice()).collect()),
                OutItem::Solo { peer, plain, .. } => (peer, vec![plain.as_slice()]),
            };
            if !seal_native(tbl, limit, peer, &plains, now, &mut data, &mut dgrams) {
                rest.push(item);
            }
        }
        let bytes: usize = dgrams.iter().map(|d| d.1).sum();
        eng().count_out(dgrams.len(), bytes);
        if !dgrams.is_empty() {
            let errors = io.udp.send(fd, &data, &dgrams);
            self.io_errors.fetch_add(errors as u64, Ordering::Relaxed);
        }
        let left = !rest.is_empty();
        if left {
            locked(&self.pending_tx).extend(rest);
        }
        io.order.release();
        left
    }
}

/// The twin's `seal_many` of a live session's plain case (see `seal_fast_to`), without the
/// interpreter, into `data`/`dgrams`; false: the secure layer must do it, nothing changed.
fn seal_native(
    tbl: &std::sync::Arc<std::sync::Mutex<crate::python_session::Table>>,
    limit: i64,
    peer: &str,
    plains: &[&[u8]],
    now: f64,
    data: &mut Vec<u8>,
    dgrams: &mut Vec<(usize, usize, SocketAddr)>,
) -> bool {
    let Some(hot) = table(tbl).current.get(peer).cloned() else { return false };
    let mut h = lock(&hot);
    let Some(dest) = h.sock_addr else { return false };
    if now >= h.reject_at || h.candidate.is_some() || (h.initiator && now >= h.rekey_at) {
        return false;
    }
    let after = h.unanswered + plains.len() as i64;
    if after > limit && now - h.last_recv > h.silence_s.max(4.0 * h.rtt) {
        return false;
    }
    let counter = h.counter;
    if counter.checked_add(plains.len() as u64).is_none() {
        return false;
    }
    let index = h.remote_index;
    for (k, p) in plains.iter().enumerate() {
        let n = p.len() + crate::aead::OVERHEAD;
        let start = data.len();
        data.resize(start + n, 0);
        h.seal.seal(&mut data[start..start + n], crate::wire::VERSION, crate::aead::DATA, index, counter + k as u64, p);
        dgrams.push((start, n, dest));
    }
    h.unanswered = after;
    h.counter = counter + plains.len() as u64;
    h.last_sent = now;
    true
}
