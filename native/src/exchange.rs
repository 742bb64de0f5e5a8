//! REQ and REP's exchange, natively (docs/design.md 1e, "The exchange"): an established
//! link's counters and the pattern's own state, lent by the Python core while nothing but
//! plain requests and replies cross the socket, so that a round trip enters Python only for
//! the application's `send` and `recv`.
//!
//! The twin is the Python core itself (`a3m.core.socket_recv`, `socket_send`,
//! `socket_cookies`, `credits` and `a3m.patterns.reqrep`): what this module does to a lent
//! socket is what those do to it in the common case, and anything else is refused here
//! (`false`, `None`, `Take::Python`) with nothing changed, so that the Python core takes the
//! socket back (`reclaim`) and does it. Tests: `tests/native/test_native_exchange.py` runs the
//! same traffic with and without the exchange and wants the same counters, messages and
//! pattern state, and every refusal below.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::batch::{DATA, PROTO_SOCKET, VERSION};

/// The pattern a lent socket runs.
pub const REP: u8 = 1;
pub const REQ: u8 = 2;

/// The cookie bit of a sequence number (`a3m.core.cookies.CONFIRM`).
const CONFIRM: u64 = 1 << 63;
/// A request id's size (`a3m.patterns.framing.ID`, u32 big-endian before the body).
const ID: usize = 4;
/// The fixed header's size (version u16, protocol u8, type u8, remaining length u32).
const FIXED: usize = 8;

/// One established link's counters, as the Python `Link` and its credits hold them.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub peer_node: Arc<str>,
    pub peer_tag: String,
    pub my_inc: u64,
    /// The extended header of the link's sequenced messages (`message.data_head`).
    pub head: Vec<u8>,
    pub expected_seq: u64,
    pub next_seq: u64,
    // `RecvCredits`
    pub received: i64,
    pub max_edge: i64,
    pub arrived_bytes: i64,
    pub delivered: i64,
    pub edge: i64,
    pub capacity: i64,
    pub batch: i64,
    pub limit: i64,
    pub round_end: f64,
    pub round_start_delivered: i64,
    pub flow_seq: i64,
    // `SendCredits`
    pub send_edge: i64,
    pub send_sent: i64,
    pub send_flow_seq: u64,
    pub data_in: i64,
    pub processed: i64,
    pub last_active: f64,
    pub ka_at: f64,
}

impl Row {
    /// A link of socket `me` just established with `peer_tag` of `peer_node` (this side's
    /// incarnation `my_inc`, the peer's `peer_inc`): nothing sent or received yet, `credits`
    /// each way, returned `batch` at a time, a fixed capacity, no keepalive armed.
    pub fn established(peer_node: &str, peer_tag: &str, me: &str, my_inc: u64, peer_inc: u64, credits: i64, batch: i64) -> Row {
        Row {
            peer_node: Arc::from(peer_node),
            peer_tag: peer_tag.to_string(),
            my_inc,
            head: crate::sequenced::data_head(me, peer_tag, my_inc, peer_inc),
            expected_seq: 1,
            next_seq: 1,
            received: 0,
            max_edge: credits,
            arrived_bytes: 0,
            delivered: 0,
            edge: credits,
            capacity: credits,
            batch,
            limit: 0,
            round_end: 0.0,
            round_start_delivered: 0,
            flow_seq: 0,
            send_edge: credits,
            send_sent: 0,
            send_flow_seq: 0,
            data_in: 0,
            processed: 0,
            last_active: 0.0,
            ka_at: f64::INFINITY,
        }
    }
}

/// A lent socket: its links' rows and its pattern's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Lent {
    pub kind: u8,
    pub rows: Vec<Row>,
    /// REP: the requests not yet received, (row, id, body), in order; REQ: the reply not yet
    /// received (at most one).
    pub inbox: VecDeque<(usize, u32, Vec<u8>)>,
    /// REP: the request the next send answers; REQ: the request outstanding.
    pub owed: Option<(usize, u32)>,
    /// REQ: the last request id sent.
    pub next_id: u32,
    /// The socket's `stats` since it was lent: received, delivered, sent.
    pub received: i64,
    pub delivered: i64,
    pub sent: i64,
    /// The socket's `keepalive_s`, and the largest payload a send takes here (the node's
    /// `max_message_size` less `DATA_OVERHEAD_MAX`, as `send_on` checks it).
    pub ka_s: f64,
    pub max_payload: usize,
    by_node: HashMap<Arc<str>, Vec<usize>>,
}

impl Lent {
    pub fn new(kind: u8, rows: Vec<Row>, ka_s: f64, max_payload: usize) -> Lent {
        let mut by_node: HashMap<Arc<str>, Vec<usize>> = HashMap::new();
        for (i, r) in rows.iter().enumerate() {
            by_node.entry(r.peer_node.clone()).or_default().push(i);
        }
        Lent { kind, rows, inbox: VecDeque::new(), owed: None, next_id: 0, received: 0, delivered: 0, sent: 0, ka_s, max_payload, by_node }
    }

    fn row_of(&self, node: &str, tag: &str) -> Option<usize> {
        self.by_node.get(node)?.iter().copied().find(|&i| self.rows[i].peer_tag == tag)
    }

    /// Whether a reply (REQ) or a request (REP) waits for the application.
    pub fn readable(&self) -> bool {
        !self.inbox.is_empty() && (self.kind == REQ || self.owed.is_none())
    }
}

/// What the application's receive gets.
#[derive(Debug, PartialEq)]
pub enum Take {
    /// The next payload, and the FLOW its credit made due, for Exon: (peer, message).
    Got(Vec<u8>, Option<(Arc<str>, Vec<u8>)>),
    /// Nothing yet: wait for the network.
    Wait,
    /// The Python core must do it (the capacity to grow, a misuse to report, a FLOW that
    /// Exon cannot take now, the socket not lent): nothing changed.
    Python,
}

/// The lent sockets of one node, by tag.
#[derive(Debug, Default)]
pub struct Table {
    pub socks: HashMap<String, Lent>,
}

fn u32_at(d: &[u8]) -> u32 {
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// The FLOW message type (`a3m.core.message.FLOW`): its body is the FLOW's number (u32)
/// and the edge (u64).
pub const FLOW: u8 = 0x06;

/// A FLOW's fields: source and destination tags and incarnations, its number, the edge.
pub type Flow<'a> = (&'a str, &'a str, u64, u64, u64, i64);

/// A FLOW read as `a3m.core.message.decode` reads it; None: not a well-formed FLOW (the
/// core says what is wrong with it), or an edge beyond 2^63 - 1 (which the core takes and
/// no link can reach: left to it).
pub fn decode_flow(d: &[u8]) -> Option<Flow<'_>> {
    if d.len() < FIXED || u16::from_be_bytes([d[0], d[1]]) != VERSION || d[2] != PROTO_SOCKET || d[3] != FLOW {
        return None;
    }
    if u32_at(&d[4..]) as usize != d.len() - FIXED {
        return None;
    }
    let ls = *d.get(FIXED)? as usize;
    let src = std::str::from_utf8(d.get(FIXED + 1..FIXED + 1 + ls)?).ok()?;
    let at = FIXED + 1 + ls;
    let ld = *d.get(at)? as usize;
    let dst = std::str::from_utf8(d.get(at + 1..at + 1 + ld)?).ok()?;
    let at = at + 1 + ld;
    if ls == 0 || ld == 0 || d.len() != at + 16 + 12 {
        return None;
    }
    let src_inc = u64::from_be_bytes(d[at..at + 8].try_into().ok()?);
    let dst_inc = u64::from_be_bytes(d[at + 8..at + 16].try_into().ok()?);
    let flow_seq = u64::from(u32_at(&d[at + 16..]));
    let edge = u64::from_be_bytes(d[at + 20..at + 28].try_into().ok()?);
    Some((src, dst, src_inc, dst_inc, flow_seq, i64::try_from(edge).ok()?))
}

/// A FLOW on a link of `head` (`a3m.core.message.encode` of the socket's `_send_flow`).
pub fn flow_message(head: &[u8], flow_seq: u32, edge: i64) -> Vec<u8> {
    let rest = head.len() + 12;
    let mut m = Vec::with_capacity(FIXED + rest);
    m.extend_from_slice(&VERSION.to_be_bytes());
    m.push(PROTO_SOCKET);
    m.push(FLOW);
    m.extend_from_slice(&(rest as u32).to_be_bytes());
    m.extend_from_slice(head);
    m.extend_from_slice(&flow_seq.to_be_bytes());
    m.extend_from_slice(&(edge as u64).to_be_bytes());
    m
}

impl Table {
    pub fn is_empty(&self) -> bool {
        self.socks.is_empty()
    }

    /// A message Exon delivered from `src` at `now`: taken (true) when it is the next DATA
    /// of a lent link, unflagged, within its credits and what the pattern expects (REP: a
    /// request with an id; REQ: the reply to the request outstanding on that link); false
    /// leaves it to the Python core, nothing changed.
    pub fn offer(&mut self, src: &str, msg: &[u8], now: f64) -> bool {
        if msg.len() > 3 && msg[3] == FLOW {
            return self.offer_flow(src, msg, now);
        }
        let Ok(s) = crate::sequenced::decode(msg) else { return false };
        if s.mtype != DATA || s.seq >= CONFIRM || s.payload.len() < ID {
            return false;
        }
        let Some(l) = self.socks.get_mut(s.dst_tag) else { return false };
        let Some(i) = l.row_of(src, s.src_tag) else { return false };
        let id = u32_at(s.payload);
        let r = &l.rows[i];
        if r.my_inc != s.dst_inc || s.seq != r.expected_seq || r.received >= r.max_edge {
            return false;
        }
        if l.kind == REQ && (!l.inbox.is_empty() || l.owed != Some((i, id))) {
            return false;
        }
        let r = &mut l.rows[i];
        r.received += 1;
        r.arrived_bytes += s.payload.len() as i64;
        r.expected_seq += 1;
        r.data_in += 1;
        r.processed += 1;
        r.last_active = now;
        l.received += 1;
        l.inbox.push_back((i, id, s.payload[ID..].to_vec()));
        if l.kind == REQ {
            l.owed = None;
        }
        true
    }

    /// A FLOW for a lent link (`handle`'s: the link's activity, then `SendCredits.on_flow`);
    /// false leaves it to the core.
    fn offer_flow(&mut self, src: &str, msg: &[u8], now: f64) -> bool {
        let Some((src_tag, dst_tag, _, dst_inc, flow_seq, edge)) = decode_flow(msg) else { return false };
        let Some(l) = self.socks.get_mut(dst_tag) else { return false };
        let Some(i) = l.row_of(src, src_tag) else { return false };
        let r = &mut l.rows[i];
        if r.my_inc != dst_inc {
            return false;
        }
        r.last_active = now;
        if flow_seq > r.send_flow_seq {
            r.send_flow_seq = flow_seq;
            r.send_edge = edge;
        }
        true
    }

    /// The application's receive on `tag` at `now` (`choose_recv` and `delivered_from`):
    /// `rtt(peer)` is the round trip to the link's node (`RecvCredits.rtt_of`, Exon's
    /// smoothed RTT), asked only when a round of the capacity's tuning ends.
    pub fn take(&mut self, tag: &str, now: f64, rtt: &mut dyn FnMut(&str) -> Option<f64>, can_send: &dyn Fn(&str) -> bool) -> Take {
        let Some(l) = self.socks.get_mut(tag) else { return Take::Python };
        if l.kind == REP && l.owed.is_some() {
            return Take::Python; // (a reply is owed first: the core says so)
        }
        let Some(&(i, _, _)) = l.inbox.front() else {
            return if l.kind == REP || l.owed.is_some() { Take::Wait } else { Take::Python };
        };
        let r = &mut l.rows[i];
        // `RecvCredits.on_delivered(now, 1)`: the round of the capacity's tuning first (the
        // capacity to grow is the core's), then the FLOW due, if any (`_returned`).
        let d = r.delivered + 1;
        let target = d + r.capacity;
        let flow = target - r.edge >= r.batch;
        if flow && (r.flow_seq >= i64::from(u32::MAX) || !can_send(&r.peer_node)) {
            return Take::Python;
        }
        let mut round: Option<(f64, i64)> = None;
        if now >= r.round_end && r.limit > r.capacity {
            let peer = r.peer_node.clone();
            round = Some(match rtt(&peer) {
                None => (now + 1.0, d),
                Some(_) if 4 * (d - r.round_start_delivered) > r.capacity => return Take::Python,
                Some(t) => (now + t.max(0.001), d),
            });
        }
        if let Some((end, start)) = round {
            r.round_end = end;
            r.round_start_delivered = start;
        }
        r.delivered = d;
        let out = flow.then(|| {
            r.edge = target;
            r.max_edge = r.max_edge.max(target);
            r.flow_seq += 1;
            (r.peer_node.clone(), flow_message(&r.head, r.flow_seq as u32, target))
        });
        l.delivered += 1;
        let (i, id, body) = l.inbox.pop_front().expect("looked at above");
        if l.kind == REP {
            l.owed = Some((i, id));
        }
        Take::Got(body, out)
    }

    /// The application's send of `payload` on `tag` at `now` (REP: the reply to the request
    /// received; REQ: a request on its one link), when Exon takes a message for the peer
    /// now (`can_send(peer)`): the peer and the DATA to hand to Exon; None leaves it to the
    /// Python core, nothing changed.
    pub fn send(&mut self, tag: &str, payload: &[u8], now: f64, can_send: &dyn Fn(&str) -> bool) -> Option<(Arc<str>, Vec<u8>)> {
        let l = self.socks.get_mut(tag)?;
        let (i, id) = if l.kind == REP {
            l.owed?
        } else {
            if l.owed.is_some() || !l.inbox.is_empty() || l.rows.len() != 1 {
                return None;
            }
            (0, l.next_id.wrapping_add(1))
        };
        let r = &l.rows[i];
        if r.send_edge <= r.send_sent || payload.len() + ID > l.max_payload || !can_send(&r.peer_node) {
            return None;
        }
        if l.ka_s > 0.0 && r.ka_at > now + l.ka_s {
            return None; // (the send arms the link's keepalive: the core's timers)
        }
        if l.kind == REQ {
            l.next_id = id;
            l.owed = Some((i, id));
        } else {
            l.owed = None;
        }
        l.sent += 1;
        let r = &mut l.rows[i];
        let seq = r.next_seq;
        r.next_seq += 1;
        r.last_active = now;
        r.send_sent += 1;
        let rest = r.head.len() + 8 + ID + payload.len();
        let mut msg = Vec::with_capacity(FIXED + rest);
        msg.extend_from_slice(&VERSION.to_be_bytes());
        msg.push(PROTO_SOCKET);
        msg.push(DATA);
        msg.extend_from_slice(&(rest as u32).to_be_bytes());
        msg.extend_from_slice(&r.head);
        msg.extend_from_slice(&seq.to_be_bytes());
        msg.extend_from_slice(&id.to_be_bytes());
        msg.extend_from_slice(payload);
        Some((r.peer_node.clone(), msg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sequenced::data_head;

    fn row(node: &str, tag: &str) -> Row {
        Row::established(node, tag, "me", 7, 9, 4, 2)
    }

    fn data(src: &str, dst: &str, dst_inc: u64, seq: u64, body: &[u8]) -> Vec<u8> {
        let head = data_head(src, dst, 9, dst_inc);
        let rest = head.len() + 8 + body.len();
        let mut m = vec![0, 1, PROTO_SOCKET, DATA];
        m.extend_from_slice(&(rest as u32).to_be_bytes());
        m.extend_from_slice(&head);
        m.extend_from_slice(&seq.to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn table(kind: u8) -> Table {
        let mut t = Table::default();
        t.socks.insert("me".into(), Lent::new(kind, vec![row("n1", "req")], 0.0, 1000));
        t
    }

    #[test]
    fn rep_takes_a_request_and_answers_it() {
        let mut t = table(REP);
        assert!(t.offer("n1", &data("req", "me", 7, 1, b"\0\0\0\x05hello"), 2.0));
        assert!(t.socks["me"].readable());
        assert_eq!(t.take("me", 2.5, &mut |_| None, &|_| true), Take::Got(b"hello".to_vec(), None));
        assert_eq!(t.socks["me"].owed, Some((0, 5)));
        assert_eq!(t.take("me", 2.5, &mut |_| None, &|_| true), Take::Python); // a reply is owed
        let (peer, msg) = t.send("me", b"world", 3.0, &|_| true).unwrap();
        assert_eq!(&*peer, "n1");
        let s = crate::sequenced::decode(&msg).unwrap();
        assert_eq!((s.mtype, s.src_tag, s.dst_tag, s.src_inc, s.dst_inc, s.seq), (DATA, "me", "req", 7, 9, 1));
        assert_eq!(s.payload, b"\0\0\0\x05world");
        let l = &t.socks["me"];
        let r = &l.rows[0];
        assert_eq!((r.expected_seq, r.received, r.delivered, r.next_seq, r.send_sent), (2, 1, 1, 2, 1));
        assert_eq!((r.data_in, r.processed, r.last_active, r.arrived_bytes), (1, 1, 3.0, 9));
        assert_eq!((l.received, l.delivered, l.sent, l.owed), (1, 1, 1, None));
        assert_eq!(t.send("me", b"again", 3.0, &|_| true), None); // nothing owed
    }

    #[test]
    fn what_the_core_must_do_is_refused_unchanged() {
        let mut t = table(REP);
        let before = t.socks["me"].clone();
        for m in [
            data("req", "me", 7, 2, b"\0\0\0\x01x"),         // not the next in sequence
            data("req", "me", 8, 1, b"\0\0\0\x01x"),         // another incarnation
            data("req", "me", 7, 1 | CONFIRM, b"\0\0\0\x01x"), // sent with a cookie
            data("req", "me", 7, 1, b"\0\0\x01"),             // no request id
            data("other", "me", 7, 1, b"\0\0\0\x01x"),       // not a lent link
            data("req", "you", 7, 1, b"\0\0\0\x01x"),        // not a lent socket
            b"\0\x01\x01\x02\0\0\0\0".to_vec(),                // not a message
        ] {
            assert!(!t.offer("n1", &m, 1.0));
        }
        assert!(!t.offer("n2", &data("req", "me", 7, 1, b"\0\0\0\x01x"), 1.0)); // another node
        assert_eq!(t.socks["me"], before);
        // beyond its credits
        t.socks.get_mut("me").unwrap().rows[0].received = 4;
        assert!(!t.offer("n1", &data("req", "me", 7, 1, b"\0\0\0\x01x"), 1.0));
    }

    #[test]
    fn flows_both_ways() {
        let mut t = table(REP);
        assert!(t.offer("n1", &data("req", "me", 7, 1, b"\0\0\0\x01a"), 1.0));
        // delivered 0 -> 1: edge 4, capacity 4, batch 2: 1 + 4 - 4 = 1 < 2
        assert_eq!(t.take("me", 1.0, &mut |_| None, &|_| true), Take::Got(b"a".to_vec(), None));
        t.send("me", b"r", 1.0, &|_| true).unwrap();
        assert!(t.offer("n1", &data("req", "me", 7, 2, b"\0\0\0\x02b"), 1.0));
        let before = t.socks["me"].clone();
        // 2 + 4 - 4 = 2: a FLOW, which Exon cannot take now: the core's
        assert_eq!(t.take("me", 1.0, &mut |_| None, &|_| false), Take::Python);
        assert_eq!(t.socks["me"], before);
        let Take::Got(body, Some((peer, flow))) = t.take("me", 1.0, &mut |_| None, &|_| true) else { panic!("no FLOW") };
        assert_eq!((body.as_slice(), &*peer), (&b"b"[..], "n1"));
        let r = &t.socks["me"].rows[0];
        assert_eq!((r.edge, r.max_edge, r.flow_seq), (6, 6, 1));
        let mut want = vec![0, 1, PROTO_SOCKET, FLOW, 0, 0, 0, 0];
        want.extend_from_slice(&data_head("me", "req", 7, 9));
        want.extend_from_slice(&1u32.to_be_bytes());
        want.extend_from_slice(&6u64.to_be_bytes());
        let n = (want.len() - 8) as u32;
        want[4..8].copy_from_slice(&n.to_be_bytes());
        assert_eq!(flow, want);
        assert_eq!(decode_flow(&flow), Some(("me", "req", 7, 9, 1, 6)));
        // the peer's FLOWs: newer ones move the send edge, older ones do not
        let from_peer = |seq: u32, edge: u64, dst_inc: u64| {
            let mut m = vec![0, 1, PROTO_SOCKET, FLOW, 0, 0, 0, 0];
            m.extend_from_slice(&data_head("req", "me", 9, dst_inc));
            m.extend_from_slice(&seq.to_be_bytes());
            m.extend_from_slice(&edge.to_be_bytes());
            let n = (m.len() - 8) as u32;
            m[4..8].copy_from_slice(&n.to_be_bytes());
            m
        };
        assert!(!t.offer("n1", &from_peer(1, 9, 8), 2.0)); // another incarnation
        assert!(t.offer("n1", &from_peer(2, 9, 7), 2.0));
        assert!(t.offer("n1", &from_peer(1, 5, 7), 2.5));
        let r = &t.socks["me"].rows[0];
        assert_eq!((r.send_edge, r.send_flow_seq, r.last_active), (9, 2, 2.5));
        let mut cut = from_peer(3, 10, 7);
        cut.pop();
        assert!(!t.offer("n1", &cut, 3.0));
    }

    #[test]
    fn the_capacitys_rounds() {
        let mut t = table(REP);
        {
            let r = &mut t.socks.get_mut("me").unwrap().rows[0];
            r.limit = 64;
            r.batch = 100;
        }
        assert!(t.offer("n1", &data("req", "me", 7, 1, b"\0\0\0\x01a"), 1.0));
        assert_eq!(t.take("me", 1.0, &mut |_| None, &|_| true), Take::Got(b"a".to_vec(), None));
        let r = &t.socks["me"].rows[0];
        assert_eq!((r.round_end, r.round_start_delivered), (2.0, 1)); // no RTT yet: a second
        t.send("me", b"r", 1.0, &|_| true).unwrap();
        assert!(t.offer("n1", &data("req", "me", 7, 2, b"\0\0\0\x02b"), 2.5));
        assert_eq!(t.take("me", 2.5, &mut |_| Some(0.0001), &|_| true), Take::Got(b"b".to_vec(), None));
        let r = &t.socks["me"].rows[0];
        assert_eq!((r.round_end, r.round_start_delivered), (2.501, 2));
        // two deliveries in the round against a capacity of 4: 4 * 2 > 4, it would grow
        t.send("me", b"r", 2.5, &|_| true).unwrap();
        t.socks.get_mut("me").unwrap().rows[0].round_start_delivered = 0;
        assert!(t.offer("n1", &data("req", "me", 7, 3, b"\0\0\0\x03c"), 3.0));
        assert_eq!(t.take("me", 3.0, &mut |_| Some(0.01), &|_| true), Take::Python);
    }

    #[test]
    fn req_sends_and_takes_its_reply() {
        let mut t = table(REQ);
        t.socks.get_mut("me").unwrap().next_id = u32::MAX;
        assert_eq!(t.take("me", 1.0, &mut |_| None, &|_| true), Take::Python); // nothing outstanding
        let (_, msg) = t.send("me", b"ask", 1.0, &|_| true).unwrap();
        assert_eq!(crate::sequenced::decode(&msg).unwrap().payload, b"\0\0\0\0ask"); // wraps
        assert_eq!(t.send("me", b"ask", 1.0, &|_| true), None); // one at a time
        assert_eq!(t.take("me", 1.0, &mut |_| None, &|_| true), Take::Wait);
        assert!(!t.offer("n1", &data("req", "me", 7, 1, b"\0\0\0\x01no"), 1.1)); // another id
        assert!(t.offer("n1", &data("req", "me", 7, 1, b"\0\0\0\0yes"), 1.1));
        assert!(!t.offer("n1", &data("req", "me", 7, 2, b"\0\0\0\0dup"), 1.1)); // none asked
        assert_eq!(t.take("me", 1.2, &mut |_| None, &|_| true), Take::Got(b"yes".to_vec(), None));
        assert_eq!(t.socks["me"].owed, None);
    }

    #[test]
    fn sends_the_core_must_make() {
        let mut t = table(REP);
        assert!(t.offer("n1", &data("req", "me", 7, 1, b"\0\0\0\x01a"), 1.0));
        assert_eq!(t.take("me", 1.0, &mut |_| None, &|_| true), Take::Got(b"a".to_vec(), None));
        let before = t.socks["me"].clone();
        assert_eq!(t.send("me", b"r", 1.0, &|_| false), None); // Exon's window is full
        assert_eq!(t.send("me", &[0u8; 997], 1.0, &|_| true), None); // too large here
        t.socks.get_mut("me").unwrap().rows[0].send_sent = 4;
        assert_eq!(t.send("me", b"r", 1.0, &|_| true), None); // no credit
        t.socks.get_mut("me").unwrap().rows[0].send_sent = 0;
        t.socks.get_mut("me").unwrap().ka_s = 5.0;
        t.socks.get_mut("me").unwrap().rows[0].ka_at = 100.0;
        assert_eq!(t.send("me", b"r", 1.0, &|_| true), None); // it would arm the keepalive
        t.socks.get_mut("me").unwrap().ka_s = 0.0;
        t.socks.get_mut("me").unwrap().rows[0].ka_at = f64::INFINITY;
        assert_eq!(t.socks["me"], before);
        assert!(t.send("me", &[0u8; 996], 1.0, &|_| true).is_some());
    }
}
