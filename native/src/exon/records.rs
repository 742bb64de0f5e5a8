//! Soft state: one send record and one receive record per peer and direction (twins of
//! `a3m/exon/records.py`); the engine owns every rule that changes them.

use std::collections::{BTreeMap, VecDeque};

use super::{Map as HashMap, Set as HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

pub const INF: f64 = f64::INFINITY;

/// A receipt id, or none.
pub type Rid = Option<i64>;

/// A message sent in fragments, kept whole until every fragment is acknowledged.
#[derive(Debug)]
pub struct Message {
    pub data: Vec<u8>,
    pub chunk: usize,
    pub count: u32,
    pub remaining: i64,
    pub bound: u32,
    pub rid: Rid,
    /// The receive record its fragments are bound to (-1: none yet).
    pub r: i128,
}

/// A shared fragmented message (its queued pieces and tokens all refer to it): the
/// engine's own lock is held whenever it is touched, so this one is never contended.
#[derive(Debug, Clone)]
pub struct MsgRef(Arc<Mutex<Message>>);

impl MsgRef {
    pub fn borrow(&self) -> MutexGuard<'_, Message> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub fn borrow_mut(&self) -> MutexGuard<'_, Message> {
        self.borrow()
    }
    /// Python's `is`.
    pub fn ptr_eq(a: &MsgRef, b: &MsgRef) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl Message {
    /// A message to send in `count` fragments of `chunk` bytes, shared.
    pub fn shared(data: Vec<u8>, chunk: usize, count: u32, rid: Rid) -> MsgRef {
        MsgRef(Arc::new(Mutex::new(Message { data, chunk, count, remaining: count as i64, bound: 0, rid, r: -1 })))
    }
}

/// What a token or a queued piece belongs to: a whole message's receipt, or a fragmented
/// message.
#[derive(Debug, Clone)]
pub enum Meta {
    Rid(Rid),
    Msg(MsgRef),
}

impl Meta {
    pub fn msg(&self) -> Option<&MsgRef> {
        match self {
            Meta::Msg(m) => Some(m),
            Meta::Rid(_) => None,
        }
    }
    /// Python's `meta is not None`.
    pub fn is_some(&self) -> bool {
        !matches!(self, Meta::Rid(None))
    }
    /// Python's `meta is other` (a receipt id compares by value: the Python ints are the
    /// same object only when equal, and the runs it groups are of one message).
    pub fn same(&self, other: &Meta) -> bool {
        match (self, other) {
            (Meta::Msg(a), Meta::Msg(b)) => MsgRef::ptr_eq(a, b),
            (Meta::Rid(Some(a)), Meta::Rid(Some(b))) => a == b,
            _ => false,
        }
    }
}

/// A queued piece: the payload (empty for a fragment: cut from its message when bound), the
/// fragment (index, count, total) or none, and what it belongs to.
#[derive(Debug, Clone)]
pub struct QueueItem {
    pub data: Vec<u8>,
    pub frag: Option<(u32, u32, u32)>,
    pub meta: Meta,
}

/// An unacknowledged token: its encoded frame, the rck it is bound to, what it belongs to,
/// when its last copy left, its transmissions, the transmission sequence of its last copy.
#[derive(Debug, Clone)]
pub struct Token {
    pub frame: Vec<u8>,
    pub r: u64,
    pub meta: Meta,
    pub sent_at: f64,
    pub tx: i64,
    pub seq: i64,
}

pub fn pieces(msg: &MsgRef) -> Vec<QueueItem> {
    let m = msg.borrow();
    let total = m.data.len() as u32;
    (0..m.count)
        .map(|i| QueueItem { data: Vec::new(), frag: Some((i, m.count, total)), meta: Meta::Msg(msg.clone()) })
        .collect()
}

pub struct SendRecord {
    pub id: u64,
    pub peer: Arc<str>,
    pub sck: u64,
    /// -1: no grant yet.
    pub rck: i128,
    pub env_lo: u64,
    pub queue: VecDeque<QueueItem>,
    /// In slot order (the first key is the lowest in use).
    pub tokens: BTreeMap<u64, Token>,
    pub req_out: bool,
    pub req_sent_at: f64,
    pub req_tx: i64,
    pub req_times: Vec<f64>,
    pub req_end: u64,
    // (its path, `rec.path` in Python, is the engine's `paths[peer]`: it outlives the record)
    pub last_sent: f64,
    pub loss_time: f64,
    /// None: not idle.
    pub idle_since: Option<f64>,
    pub timer_at: f64,
    pub alive: bool,
    pub max_single: i64,
    pub closed_r: i128,
    pub void_floor: i128,
    pub revoked: i128,
    pub heard_at: f64,
    pub silent: bool,
    /// slot -> (sent at, transmission sequence, declared lost) of a token's first copy.
    pub first_tx: HashMap<u64, (f64, i64, bool)>,
    pub held_probes: i64,
    pub probe_slot: f64,
}

impl SendRecord {
    pub fn new(id: u64, peer: Arc<str>, start: u64, now: f64) -> SendRecord {
        SendRecord {
            id,
            peer,
            sck: start,
            rck: -1,
            env_lo: start,
            queue: VecDeque::new(),
            tokens: BTreeMap::new(),
            req_out: false,
            req_sent_at: 0.0,
            req_tx: 0,
            req_times: Vec::new(),
            req_end: start,
            last_sent: now,
            loss_time: INF,
            idle_since: Some(now),
            timer_at: INF,
            alive: true,
            max_single: 0,
            closed_r: -1,
            void_floor: -1,
            revoked: -1,
            heard_at: now,
            silent: false,
            first_tx: HashMap::default(),
            held_probes: 0,
            probe_slot: 0.0,
        }
    }

    pub fn pending(&self) -> i64 {
        (self.queue.len() + self.tokens.len()) as i64
    }

    pub fn lowest_in_use(&self) -> u64 {
        match self.tokens.keys().next() {
            Some(&s) => s,
            None => self.env_lo,
        }
    }
}

/// Fragments of one message, by fragment index.
#[derive(Debug)]
pub struct Reassembly {
    pub count: u32,
    pub total: u32,
    pub size: u64,
    pub parts: HashMap<u32, Vec<u8>>,
}

pub struct RecvRecord {
    pub id: u64,
    pub peer: Arc<str>,
    pub rck: u64,
    pub sck: u64,
    pub low: u64,
    pub dead: HashSet<u64>,
    /// first slot of a message (may be below 0 for a forged index) -> its fragments; in
    /// insertion order (Python dict) for the scans that drop old ones.
    pub reasm: super::omap::OMap<i128, Reassembly>,
    pub last_active: f64,
    pub probe_iv: f64,
    pub deferred: Option<(u64, u64)>,
    pub timer_at: f64,
    pub alive: bool,
    pub revoking: bool,
    pub revoke_due: f64,
    pub first: u64,
    pub high: u64,
    pub copies: HashSet<u64>,
}

impl RecvRecord {
    pub fn new(id: u64, peer: Arc<str>, rck: u64, start: u64, now: f64, probe_iv: f64) -> RecvRecord {
        RecvRecord {
            id,
            peer,
            rck,
            sck: start,
            low: start,
            dead: HashSet::default(),
            reasm: super::omap::OMap::new(),
            last_active: now,
            probe_iv,
            deferred: None,
            timer_at: INF,
            alive: true,
            revoking: false,
            revoke_due: INF,
            first: start,
            high: start,
            copies: HashSet::default(),
        }
    }

    pub fn is_live(&self, s: u64) -> bool {
        self.low <= s && s < self.sck && !self.dead.contains(&s)
    }

    pub fn consume(&mut self, s: u64) {
        if s == self.low {
            let mut low = s + 1;
            if !self.dead.is_empty() {
                while self.dead.remove(&low) {
                    low += 1;
                }
            }
            self.low = low;
        } else {
            self.dead.insert(s);
        }
    }

    pub fn drop_below(&mut self, bound: u64) {
        let bound = bound.min(self.sck);
        if bound <= self.low {
            return;
        }
        self.low = bound;
        if !self.dead.is_empty() {
            self.dead.retain(|&x| x >= bound);
            self.consume_prefix();
        }
    }

    pub fn consume_prefix(&mut self) {
        let mut low = self.low;
        while self.dead.remove(&low) {
            low += 1;
        }
        self.low = low;
    }
}
