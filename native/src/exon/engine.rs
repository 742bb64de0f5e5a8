//! The engine's shared state and its dispatcher: the twin of `a3m/exon/state.py` and
//! `a3m/exon/protocol.py` (the rules live in `sender`, `receiver`, `restarts`, `closing`,
//! `liveness`, each the twin of the Python module of the same name).
//!
//! Sans-I/O like its twin: datagrams, times and timer expiries go in; datagrams to send,
//! events and the next deadline come out. What the engine does not own is the host's
//! (`Host`): the clock store, the resolver, the path MTU hook, and the secure layer, which
//! opens and seals around the engine (the bindings call it before and after).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::{Map as HashMap, Set as HashSet};
use std::sync::Arc;

use super::clock::{ClockStore, NodeClock};
use super::config::Config;
use super::events::Event;
use super::omap::OMap;
use super::records::{RecvRecord, SendRecord, INF};
use super::recovery::PathRecovery;
use super::stats::Stats;
use crate::wire::{self, Frame};

/// Most paths remembered beyond their send records' lives.
pub const MAX_PATHS: usize = 4096;
/// Tokens one probe timeout sends again.
pub const PROBE_TOKENS: usize = 2;
/// Most peers remembered as unreachable.
pub const MAX_UNREACHABLE: usize = 4096;
/// Retransmissions back off no further than `peer_timeout_s` / this.
pub const PEER_CHANCES: f64 = 8.0;
/// The sealed datagram's overhead (header and tag), taken off the limit when secure.
pub const SEALED_OVERHEAD: i64 = 30;

/// The copy number REQSLOTS carries for its `tx`-th transmission: 1..255, cycling.
pub fn copy_no(tx: i64) -> u8 {
    ((tx - 1).rem_euclid(255) + 1) as u8
}

/// What the engine asks of its host.
pub trait Host<A>: ClockStore {
    /// The resolver's address for `peer` (None: unknown, or no resolver).
    fn resolve(&mut self, peer: &str) -> Option<A>;
    /// The path MTU hook's answer for `addr` (None: no hook).
    fn path_mtu(&mut self, addr: &A) -> Option<i64>;
    /// The secure layer holds what we send to `peer` (a handshake under way).
    fn sec_holding(&mut self, peer: &str) -> bool;
    /// The node-wide pace of first-exchange probes (shared with the secure layer's
    /// resends): `FirstProbePacer.admit`.
    fn pacer_admit(&mut self, reserved: f64, now: f64, grace: f64) -> f64;
}

/// What takes a timer-heap entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Send,
    Recv,
    Linger,
}

#[derive(Debug, Clone)]
pub struct TimerEntry {
    pub t: f64,
    pub seq: u64,
    pub kind: Kind,
    pub peer: Option<Arc<str>>,
    pub id: u64,
}

impl PartialEq for TimerEntry {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for TimerEntry {}
impl PartialOrd for TimerEntry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for TimerEntry {
    /// Reversed: BinaryHeap is a max-heap, the timers pop earliest (time, then sequence).
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

/// The linger's timer (a heap entry like a record's).
#[derive(Debug, Clone)]
pub struct Linger {
    pub alive: bool,
    pub timer_at: f64,
    pub end: f64,
    pub iv: f64,
}

/// Something to send: a run of datagrams to one peer, or one datagram of its own (a probe's
/// second copy); plaintext Exon datagrams (the host seals them when secure).
pub enum OutItem<A> {
    Batch { peer: Arc<str>, addr: A, plains: Vec<Vec<u8>> },
    Solo { peer: Arc<str>, addr: A, plain: Vec<u8> },
}

/// Errors of `send` (the host raises them as the Python twin does).
#[derive(Debug, Clone, PartialEq)]
pub enum SendError {
    Closed(String),
    TooLarge(String),
    WouldBlock(String),
    Usage(String),
}

pub struct Engine<A: Clone + PartialEq> {
    pub id: Arc<str>,
    pub id_bytes: Vec<u8>,
    pub cfg: Config,
    pub(crate) clock: NodeClock,
    pub(crate) boot: u64,
    pub(crate) host: Box<dyn Host<A> + Send>,
    pub stats: Stats,
    pub(crate) sr: OMap<Arc<str>, SendRecord>,
    pub(crate) rr: OMap<Arc<str>, RecvRecord>,
    pub(crate) addr: HashMap<Arc<str>, A>,
    pub(crate) headers: HashMap<Arc<str>, Vec<u8>>,
    pub(crate) src_cache: HashMap<Vec<u8>, Arc<str>>,
    pub(crate) rx_hdr: Vec<u8>,
    pub(crate) rx_src: Arc<str>,
    pub(crate) out: OMap<Arc<str>, Vec<Vec<u8>>>,
    /// peer -> [(r, slots to ACK)], both in insertion order.
    pub(crate) acks: OMap<Arc<str>, Vec<(u64, Vec<u64>)>>,
    /// (peer, record id, largest transmission acked, its send time or -1), in insertion order.
    pub(crate) ack_detect: Vec<(Arc<str>, u64, i64, f64)>,
    pub(crate) ack_due: f64,
    pub(crate) ack_now: bool,
    pub(crate) ack_dgrams: i64,
    pub(crate) ack_delay: f64,
    pub(crate) events: Vec<Event>,
    pub(crate) timers: BinaryHeap<TimerEntry>,
    pub(crate) timer_seq: u64,
    pub(crate) pending_total: i64,
    pub(crate) buffered: i64,
    pub(crate) deferred: OMap<Arc<str>, ()>,
    pub(crate) blocked: bool,
    pub(crate) closing: bool,
    pub(crate) revoke_until: f64,
    pub(crate) abandoned: HashMap<Arc<str>, u64>,
    pub(crate) released: OMap<Arc<str>, ()>,
    pub(crate) linger: Option<Linger>,
    pub(crate) next_receipt: i64,
    pub(crate) mds: i64,
    pub(crate) has_path_mtu: bool,
    pub(crate) peer_mds: HashMap<Arc<str>, i64>,
    pub(crate) voids_out: HashSet<(Arc<str>, u64)>,
    pub(crate) solo: Vec<(Arc<str>, Vec<u8>)>,
    pub(crate) unreachable: OMap<Arc<str>, f64>,
    pub(crate) peer_timeout: f64,
    pub(crate) backoff_cap: f64,
    pub(crate) paths: OMap<Arc<str>, PathRecovery>,
    pub(crate) ack_delay_us: u32,
    pub(crate) next_rec_id: u64,
}

impl<A: Clone + PartialEq> Engine<A> {
    /// `node_id` is 1..255 UTF-8 bytes (the host checks it as `wire.encode_id` does).
    pub fn new(node_id: &str, cfg: Config, mut host: Box<dyn Host<A> + Send>, has_path_mtu: bool) -> Engine<A> {
        let clock = NodeClock::new(host.as_mut(), cfg.clock_reserve_block);
        let boot = clock.value;
        let backoff_cap = if cfg.peer_timeout_s != 0.0 {
            cfg.rto_max_s.min(cfg.peer_timeout_s / PEER_CHANCES)
        } else {
            cfg.rto_max_s
        };
        Engine {
            id: Arc::from(node_id),
            id_bytes: node_id.as_bytes().to_vec(),
            clock,
            boot,
            host,
            stats: Stats::default(),
            sr: OMap::new(),
            rr: OMap::new(),
            addr: HashMap::default(),
            headers: HashMap::default(),
            src_cache: HashMap::default(),
            rx_hdr: Vec::new(),
            rx_src: Arc::from(""),
            out: OMap::new(),
            acks: OMap::new(),
            ack_detect: Vec::new(),
            ack_due: INF,
            ack_now: false,
            ack_dgrams: 0,
            ack_delay: cfg.ack_delay_s,
            events: Vec::new(),
            timers: BinaryHeap::new(),
            timer_seq: 0,
            pending_total: 0,
            buffered: 0,
            deferred: OMap::new(),
            blocked: false,
            closing: false,
            revoke_until: INF,
            abandoned: HashMap::default(),
            released: OMap::new(),
            linger: None,
            next_receipt: 1,
            mds: cfg.max_datagram_size,
            has_path_mtu,
            peer_mds: HashMap::default(),
            voids_out: HashSet::default(),
            solo: Vec::new(),
            unreachable: OMap::new(),
            peer_timeout: cfg.peer_timeout_s,
            backoff_cap,
            paths: OMap::new(),
            ack_delay_us: (cfg.ack_delay_s * 1_000_000.0) as u32,
            next_rec_id: 1,
            cfg,
        }
    }

    pub(crate) fn rec_id(&mut self) -> u64 {
        self.next_rec_id += 1;
        self.next_rec_id
    }

    // ------------------------------------------------------------------ state helpers

    /// The secure layer proved `peer` is at `addr`: send there from now on.
    pub fn path_proven(&mut self, peer: &str, addr: A) {
        let key: Arc<str> = Arc::from(peer);
        if self.addr.get(&key) != Some(&addr) {
            if self.addr.contains_key(&key) {
                self.stats.address_changes += 1;
            }
            self.addr.insert(key.clone(), addr);
            self.peer_mds.remove(&key);
        }
    }

    /// The known (or discoverable) address of `node_id`.
    pub fn address_of(&mut self, node_id: &Arc<str>) -> Option<A> {
        if let Some(a) = self.addr.get(node_id) {
            return Some(a.clone());
        }
        let a = self.host.resolve(node_id)?;
        self.addr.insert(node_id.clone(), a.clone());
        Some(a)
    }

    pub(crate) fn header(&mut self, peer: &Arc<str>) -> Vec<u8> {
        if let Some(h) = self.headers.get(peer) {
            return h.clone();
        }
        if self.headers.len() > 4096 {
            self.headers.clear();
        }
        let h = wire::header(&self.id_bytes, peer.as_bytes());
        self.headers.insert(peer.clone(), h.clone());
        h
    }

    pub(crate) fn header_len(&mut self, peer: &Arc<str>) -> usize {
        match self.headers.get(peer) {
            Some(h) => h.len(),
            None => self.header(peer).len(),
        }
    }

    /// Largest datagram toward `peer`: the path MTU hook's answer for its address.
    pub(crate) fn limit(&mut self, peer: &Arc<str>) -> i64 {
        if let Some(&v) = self.peer_mds.get(peer) {
            return v;
        }
        let mut v = self.mds;
        if self.has_path_mtu {
            let Some(addr) = self.address_of(peer) else { return v };
            if let Some(m) = self.host.path_mtu(&addr) {
                v = m.clamp(128, 65507);
            }
        }
        self.peer_mds.insert(peer.clone(), v);
        if self.peer_mds.len() > 4096 {
            self.peer_mds.clear();
        }
        v
    }

    pub(crate) fn emit(&mut self, peer: &Arc<str>, frame: Vec<u8>) {
        match self.out.get_mut(peer) {
            Some(v) => v.push(frame),
            None => self.out.insert(peer.clone(), vec![frame]),
        }
    }

    pub(crate) fn push_timer(&mut self, t: f64, kind: Kind, peer: Option<Arc<str>>, id: u64) {
        self.timer_seq += 1;
        self.timers.push(TimerEntry { t, seq: self.timer_seq, kind, peer, id });
    }

    /// Make the send record of `peer`'s timer fire by `t` (an earlier deadline stays).
    pub(crate) fn schedule_send(&mut self, peer: &Arc<str>, t: f64) {
        let Some(rec) = self.sr.get_mut(peer) else { return };
        if t < rec.timer_at {
            rec.timer_at = t;
            let id = rec.id;
            self.push_timer(t, Kind::Send, Some(peer.clone()), id);
        }
    }

    /// Move the send record's timer to `t`, later as well as earlier.
    pub(crate) fn reschedule_send(&mut self, peer: &Arc<str>, t: f64) {
        let Some(rec) = self.sr.get_mut(peer) else { return };
        if t != rec.timer_at {
            rec.timer_at = t;
            let id = rec.id;
            self.push_timer(t, Kind::Send, Some(peer.clone()), id);
        }
    }

    pub(crate) fn schedule_recv(&mut self, peer: &Arc<str>, t: f64) {
        let Some(rec) = self.rr.get_mut(peer) else { return };
        if t < rec.timer_at {
            rec.timer_at = t;
            let id = rec.id;
            self.push_timer(t, Kind::Recv, Some(peer.clone()), id);
        }
    }

    pub(crate) fn schedule_linger(&mut self, t: f64) {
        let Some(lg) = self.linger.as_mut() else { return };
        if t < lg.timer_at {
            lg.timer_at = t;
            self.push_timer(t, Kind::Linger, None, 0);
        }
    }

    pub(crate) fn count_error(&mut self, e: &wire::WireError) {
        if e.kind == "truncated" {
            self.stats.truncated += 1;
        } else {
            self.stats.malformed += 1;
        }
    }

    pub(crate) fn clock_cover(&mut self, upto: u64) {
        self.clock.cover(self.host.as_mut(), upto);
    }

    pub(crate) fn clock_advance_to(&mut self, v: u64) {
        self.clock.advance_to(self.host.as_mut(), v);
    }

    pub(crate) fn clock_take(&mut self) -> u64 {
        self.clock.take(self.host.as_mut())
    }

    // ------------------------------------------------------------------ the public verbs

    /// Register the address of `node_id` (the host checks the id and pins a key).
    pub fn associate(&mut self, node_id: &str, addr: A) {
        let key: Arc<str> = Arc::from(node_id);
        self.addr.insert(key.clone(), addr);
        self.peer_mds.remove(&key);
    }

    /// Tell every peer we hold a record with where we are now (after a rebind).
    pub fn announce(&mut self, _now: f64) {
        let recv: Vec<(Arc<str>, u64, u64)> = self.rr.iter().map(|(p, r)| (p.clone(), r.sck, r.rck)).collect();
        for (peer, sck, rck) in recv {
            let f = wire::slots(sck, rck, 0, self.ack_delay_us, 0);
            self.emit(&peer, f);
        }
        let send: Vec<(Arc<str>, u64, u64)> =
            self.sr.iter().map(|(p, r)| (p.clone(), r.sck, r.lowest_in_use())).collect();
        for (peer, sck, low) in send {
            let f = wire::reqslots(sck, 0, low, 0);
            self.emit(&peer, f);
        }
    }

    pub fn clock_value(&self) -> u64 {
        self.clock.value
    }

    pub fn boot_clock(&self) -> u64 {
        self.boot
    }

    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    pub fn is_idle(&self) -> bool {
        self.sr.is_empty() && self.rr.is_empty() && self.out.is_empty() && self.acks.is_empty()
    }

    /// Exon's own output (the secure layer's is the host's to add).
    pub fn has_output(&self) -> bool {
        !self.out.is_empty() || (self.ack_now && !self.acks.is_empty())
    }

    pub fn ack_deadline(&self) -> Option<f64> {
        if self.acks.is_empty() || self.ack_due == INF {
            None
        } else {
            Some(self.ack_due)
        }
    }

    pub fn record_counts(&self) -> (usize, usize) {
        (self.sr.len(), self.rr.len())
    }

    /// The peer of a record's send half, in `_sr` order (diagnostics, tests).
    pub fn send_peers(&self) -> Vec<Arc<str>> {
        self.sr.key_list()
    }

    /// Count a datagram read (secure nodes: before the secure layer opens it).
    pub fn note_datagram(&mut self, nbytes: usize) {
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += nbytes as i64;
    }

    /// A datagram read by a node in clear (`receive_datagram` of the twin, `secure=False`).
    pub fn receive_clear(&mut self, data: &[u8], addr: A, now: f64) {
        self.note_datagram(data.len());
        if data.len() > 1 && data[1] != wire::PLAIN {
            self.stats.secure_refused += 1;
            return;
        }
        self.receive_plain(data, None, Some(addr), now);
    }

    /// An Exon datagram in clear (opened by the secure layer, which authenticated `peer`, or
    /// read in clear from `addr`): decode it and run its frames.
    pub fn receive_plain(&mut self, buf: &[u8], peer: Option<&str>, addr: Option<A>, now: f64) {
        let src: Arc<str>;
        let offset: usize;
        if !self.rx_hdr.is_empty() && buf.starts_with(&self.rx_hdr) {
            src = self.rx_src.clone();
            offset = self.rx_hdr.len();
        } else {
            let (src_b, dst_b, off) = match wire::decode_header(buf) {
                Ok(h) => h,
                Err(e) => {
                    self.count_error(&e);
                    return;
                }
            };
            if dst_b != self.id_bytes.as_slice() {
                self.stats.wrong_dst += 1;
                return;
            }
            let cached = match self.src_cache.get(src_b) {
                Some(s) => s.clone(),
                None => {
                    let Ok(s) = std::str::from_utf8(src_b) else {
                        self.stats.malformed += 1;
                        return;
                    };
                    let s: Arc<str> = Arc::from(s);
                    if self.src_cache.len() > 4096 {
                        self.src_cache.clear();
                    }
                    self.src_cache.insert(src_b.to_vec(), s.clone());
                    s
                }
            };
            if cached == self.id {
                self.stats.from_self += 1;
                return;
            }
            self.rx_hdr = buf[..off].to_vec();
            self.rx_src = cached.clone();
            src = cached;
            offset = off;
        }
        if let Some(p) = peer {
            if *src != *p {
                self.stats.spoofed += 1;
                return;
            }
        }
        let (frames, error) = wire::decode_frames(buf, offset, self.cfg.max_message_size as u64);
        if let Some(e) = &error {
            self.count_error(e);
        }
        if frames.is_empty() {
            return;
        }
        if peer.is_none() {
            if let Some(a) = addr {
                if self.addr.get(&src) != Some(&a) {
                    // In clear, any datagram moves its source.
                    if self.addr.contains_key(&src) {
                        self.stats.address_changes += 1;
                    }
                    self.addr.insert(src.clone(), a);
                    self.peer_mds.remove(&src);
                }
            }
        }
        if let Some(sr) = self.sr.get_mut(&src) {
            sr.heard_at = now;
        }
        if !self.unreachable.is_empty() && self.unreachable.contains_key(&src) {
            self.heard_again(&src);
        }
        self.stats.frames_in += frames.len() as i64;
        self.run_frames(&src, frames, now);
        if !self.ack_detect.is_empty() {
            self.detect_acked(now);
        }
    }

    fn run_frames(&mut self, src: &Arc<str>, frames: Vec<Frame<'_>>, now: f64) {
        let mut acked_dgram = false;
        let mut n_deliv: i64 = 0;
        let mut n_bytes: i64 = 0;
        for f in frames {
            match f {
                Frame::Token { s, r, payload, index, count, total, flags } => {
                    let ack = self.on_token(src, s, r, payload, index, count, total, flags, now, &mut n_deliv, &mut n_bytes);
                    if !ack {
                        continue; // (VOID sent, or a stale frame: no ACK)
                    }
                    if !acked_dgram {
                        acked_dgram = true;
                        if !self.acks.contains_key(src) {
                            self.acks.insert(src.clone(), Vec::new());
                        }
                        self.ack_dgrams += 1;
                        if self.ack_dgrams >= 2 || self.ack_delay == 0.0 {
                            self.ack_now = true;
                        } else if self.ack_due == INF {
                            self.ack_due = now + self.ack_delay;
                        }
                    }
                    let list = self.acks.get_mut(src).expect("created above");
                    match list.last_mut() {
                        Some((lr, slots)) if *lr == r => slots.push(s),
                        _ => match list.iter_mut().find(|(lr, _)| *lr == r) {
                            Some((_, slots)) => slots.push(s),
                            None => list.push((r, vec![s])),
                        },
                    }
                }
                Frame::Ack { r, ranges, copies } => self.on_ack(src, r, &ranges, copies.as_deref(), now),
                Frame::ReqSlots { s, n, low, copy } => self.on_reqslots(src, s, n as u64, low, copy, now),
                Frame::Slots { s, r, n, ack_delay_us, echo } => self.on_slots(src, s, r, n as u64, ack_delay_us, echo, now),
                Frame::Void { r } => self.on_void(src, r, now),
                Frame::Revoke { r } => self.on_revoke(src, r, now),
                Frame::Revoked { r, held } => self.on_revoked(src, r, held, now),
            }
        }
        if n_deliv != 0 {
            self.stats.delivered += n_deliv;
            self.stats.delivered_bytes += n_bytes;
        }
    }

    /// Everything due now, packed into as few datagrams as fit the path (plaintexts: the
    /// host seals them when secure, and counts what it sends with `count_out`).
    pub fn take_output(&mut self, now: f64) -> Vec<OutItem<A>> {
        if !self.acks.is_empty() {
            if self.ack_now || now >= self.ack_due {
                self.flush_acks(None);
            } else if !self.out.is_empty() {
                let only = self.out.key_list();
                self.flush_acks(Some(&only));
            }
        }
        let mut result: Vec<OutItem<A>> = Vec::new();
        if self.out.is_empty() {
            return result;
        }
        if !self.voids_out.is_empty() {
            self.voids_out.clear();
        }
        let secure = self.cfg.secure;
        let peers = self.out.key_list();
        for peer in peers {
            let frames = self.out.get_mut(&peer).map(std::mem::take).unwrap_or_default();
            let Some(addr) = self.address_of(&peer) else {
                self.stats.no_address += frames.len() as i64;
                continue;
            };
            let mut limit = self.limit(&peer);
            if secure {
                limit -= SEALED_OVERHEAD;
            }
            let hdr = self.header(&peer);
            self.stats.frames_out += frames.len() as i64;
            let mut plains: Vec<Vec<u8>> = Vec::new();
            let mut buf: Vec<u8> = hdr.clone();
            let mut nframes = 0usize;
            for f in frames {
                if buf.len() as i64 + f.len() as i64 > limit && nframes > 0 {
                    plains.push(std::mem::replace(&mut buf, hdr.clone()));
                    nframes = 0;
                }
                buf.extend_from_slice(&f);
                nframes += 1;
            }
            plains.push(buf);
            result.push(OutItem::Batch { peer, addr, plains });
        }
        self.out.clear();
        if !self.solo.is_empty() {
            let solo = std::mem::take(&mut self.solo);
            for (peer, frame) in solo {
                if let Some(addr) = self.address_of(&peer) {
                    let mut d = self.header(&peer);
                    d.extend_from_slice(&frame);
                    result.push(OutItem::Solo { peer, addr, plain: d });
                }
            }
        }
        result
    }

    /// Count datagrams sent (`_count_out`).
    pub fn count_out(&mut self, datagrams: usize, nbytes: usize) {
        self.stats.datagrams_out += datagrams as i64;
        self.stats.bytes_out += nbytes as i64;
    }

    /// The earliest deadline of Exon's own timers (the secure layer's are the host's).
    pub fn exon_timer(&mut self) -> Option<f64> {
        let mut t_exon = self.ack_due;
        while let Some(top) = self.timers.peek() {
            if self.entry_live(top) {
                if top.t < t_exon {
                    t_exon = top.t;
                }
                break;
            }
            self.timers.pop();
        }
        if t_exon == INF {
            None
        } else {
            Some(t_exon)
        }
    }

    fn entry_live(&self, e: &TimerEntry) -> bool {
        match e.kind {
            Kind::Send => e
                .peer
                .as_ref()
                .and_then(|p| self.sr.get(p))
                .is_some_and(|r| r.id == e.id && r.alive && r.timer_at == e.t),
            Kind::Recv => e
                .peer
                .as_ref()
                .and_then(|p| self.rr.get(p))
                .is_some_and(|r| r.id == e.id && r.alive && r.timer_at == e.t),
            Kind::Linger => self.linger.as_ref().is_some_and(|l| l.alive && l.timer_at == e.t),
        }
    }

    /// Before the secure layer's timers run (`handle_timer`'s first step).
    pub fn timer_ack_due(&mut self, now: f64) {
        if now >= self.ack_due {
            self.ack_now = true;
        }
    }

    /// Run every Exon timer due at `now` (after the secure layer's).
    pub fn handle_exon_timers(&mut self, now: f64) {
        while let Some(top) = self.timers.peek() {
            if top.t > now {
                break;
            }
            let e = self.timers.pop().expect("peeked");
            if !self.entry_live(&e) {
                continue;
            }
            match e.kind {
                Kind::Send => {
                    let peer = e.peer.expect("send entries name their peer");
                    if let Some(r) = self.sr.get_mut(&peer) {
                        r.timer_at = INF;
                    }
                    self.send_timer(&peer, now);
                }
                Kind::Recv => {
                    let peer = e.peer.expect("recv entries name their peer");
                    if let Some(r) = self.rr.get_mut(&peer) {
                        r.timer_at = INF;
                    }
                    self.recv_timer(&peer, now);
                }
                Kind::Linger => {
                    if let Some(l) = self.linger.as_mut() {
                        l.timer_at = INF;
                    }
                    self.linger_timer(now);
                }
            }
        }
        if self.timers.len() > 64 && self.timers.len() > 4 * (self.sr.len() + self.rr.len()) {
            let entries: Vec<TimerEntry> = std::mem::take(&mut self.timers).into_vec();
            let kept: Vec<TimerEntry> = entries.into_iter().filter(|e| self.entry_live(e)).collect();
            self.timers = BinaryHeap::from(kept);
        }
    }
}
