//! Receiver restarts, sender side (VOID, REVOKE/REVOKED), graceful close and the linger,
//! peer liveness: the twins of `a3m/exon/restarts.py`, `closing.py` and `liveness.py`.

use std::sync::Arc;

use super::engine::{Engine, Linger, MAX_UNREACHABLE};
use super::events::Event;
use super::records::{pieces, Meta, MsgRef, Rid};
use crate::wire;

/// Add `m` to `msgs` unless there (Python's dict keyed by `id(meta)`, in insertion order).
fn note(msgs: &mut Vec<MsgRef>, m: &MsgRef) {
    if !msgs.iter().any(|x| MsgRef::ptr_eq(x, m)) {
        msgs.push(m.clone());
    }
}

impl<A: Clone + PartialEq> Engine<A> {
    // ------------------------------------------------------------------ restarts

    /// VOID r: the receiver restarted and records up to `r` are gone.
    pub(crate) fn on_void(&mut self, src: &Arc<str>, r: u64, now: f64) {
        self.stats.voids_received += 1;
        let r_i = r as i128;
        let Some(rec) = self.sr.get_mut(src) else {
            self.stats.stale_frames += 1;
            return;
        };
        if r_i <= rec.void_floor {
            self.stats.stale_frames += 1;
            return;
        }
        rec.void_floor = r_i;
        if r_i > rec.closed_r {
            rec.closed_r = r_i;
        }
        if rec.rck <= r_i {
            rec.env_lo = rec.sck;
        }
        let dead: Vec<u64> = rec.tokens.iter().filter(|(_, t)| (t.r as i128) <= r_i).map(|(&s, _)| s).collect();
        let mut msgs: Vec<MsgRef> = Vec::new();
        let mut unknown: Vec<(Vec<u8>, Rid)> = Vec::new();
        let mut removed_bytes: Vec<i64> = Vec::new();
        for s in &dead {
            let tok = rec.tokens.remove(s).expect("listed");
            removed_bytes.push(tok.frame.len() as i64);
            match &tok.meta {
                Meta::Msg(m) => note(&mut msgs, m),
                Meta::Rid(rid) => unknown.push((tok.frame[wire::TOKEN_OVERHEAD..].to_vec(), *rid)),
            }
        }
        // (the twin reports each as it drops it: the order of events is the same)
        let path = self.path_mut(src);
        for b in removed_bytes {
            path.on_removed_bytes(b);
        }
        for (payload, rid) in unknown {
            self.unknown(src, payload, rid);
        }
        self.pending_total -= dead.len() as i64;
        for m in msgs {
            let (bound, count) = {
                let b = m.borrow();
                (b.bound, b.count)
            };
            if bound >= count {
                let (data, rid) = {
                    let b = m.borrow();
                    (b.data.clone(), b.rid)
                };
                self.unknown(src, data, rid);
            } else {
                self.requeue(src, &m);
            }
        }
        self.requeue_partial_head(src, r_i);
        self.path_mut(src).on_progress();
        if self.sr.get(src).is_some_and(|rec| rec.req_out) {
            self.request_slots(src, now);
        }
        self.after_removal(src, now);
    }

    /// REVOKE r: the receiver is closing.
    pub(crate) fn on_revoke(&mut self, src: &Arc<str>, r: u64, now: f64) {
        self.stats.revokes_received += 1;
        let r_i = r as i128;
        if self.sr.get(src).is_none() {
            if self.closing {
                let ck = self.clock.value;
                self.emit(src, wire::reqslots(ck, 0, ck, 0));
                if self.linger.is_some() {
                    self.stats.linger_answers += 1;
                }
            } else {
                self.emit(src, wire::revoked(r, 0));
            }
            return;
        }
        let rec = self.sr.get_mut(src).expect("held");
        if r_i > rec.closed_r {
            rec.closed_r = r_i;
        }
        if rec.rck == r_i {
            rec.env_lo = rec.sck;
        }
        self.requeue_partial_head(src, r_i);
        let rec = self.sr.get_mut(src).expect("held");
        let held = rec.tokens.values().filter(|t| t.r == r).count();
        if held != 0 && r_i == rec.rck {
            rec.revoked = r_i;
        } else if rec.revoked == r_i {
            rec.revoked = -1;
        }
        self.emit(src, wire::revoked(r, held as u32));
        self.after_removal(src, now);
    }

    /// After an ACK: the last token bound to a revoked record is acknowledged -> tell it.
    pub(crate) fn check_revoked(&mut self, peer: &Arc<str>) {
        let Some(rec) = self.sr.get_mut(peer) else { return };
        let r = rec.revoked;
        if rec.tokens.values().any(|t| t.r as i128 == r) {
            return;
        }
        rec.revoked = -1;
        self.emit(peer, wire::revoked(r as u64, 0));
    }

    /// The message at the head of the queue, if fragments of it were bound to record `r` (or
    /// an older one) now gone or revoked: send it again, whole.
    pub(crate) fn requeue_partial_head(&mut self, peer: &Arc<str>, r: i128) {
        let head = match self.sr.get(peer).and_then(|rec| rec.queue.front()) {
            Some(item) => item.meta.msg().cloned(),
            None => None,
        };
        if let Some(m) = head {
            let (bound, mr) = {
                let b = m.borrow();
                (b.bound, b.r)
            };
            if bound != 0 && mr <= r {
                self.requeue(peer, &m);
            }
        }
    }

    fn drop_message(&mut self, peer: &Arc<str>, msg: &MsgRef) {
        let Some(rec) = self.sr.get_mut(peer) else { return };
        let mine: Vec<u64> = rec
            .tokens
            .iter()
            .filter(|(_, t)| t.meta.msg().is_some_and(|m| MsgRef::ptr_eq(m, msg)))
            .map(|(&s, _)| s)
            .collect();
        let mut bytes = Vec::with_capacity(mine.len());
        for s in &mine {
            bytes.push(rec.tokens.remove(s).expect("listed").frame.len() as i64);
        }
        let mut n = mine.len() as i64;
        while rec.queue.front().is_some_and(|q| q.meta.msg().is_some_and(|m| MsgRef::ptr_eq(m, msg))) {
            rec.queue.pop_front();
            n += 1;
        }
        let path = self.path_mut(peer);
        for b in bytes {
            path.on_removed_bytes(b);
        }
        self.pending_total -= n;
    }

    /// Send `msg` again, whole, ahead of the queue (it is proven undelivered).
    fn requeue(&mut self, peer: &Arc<str>, msg: &MsgRef) {
        self.drop_message(peer, msg);
        let count = {
            let mut m = msg.borrow_mut();
            m.bound = 0;
            m.remaining = m.count as i64;
            m.r = -1;
            m.count
        };
        if let Some(rec) = self.sr.get_mut(peer) {
            for item in pieces(msg).into_iter().rev() {
                rec.queue.push_front(item);
            }
        }
        self.pending_total += count as i64;
        self.stats.resent_whole += 1;
    }

    pub(crate) fn unknown(&mut self, dst: &Arc<str>, payload: Vec<u8>, rid: Rid) {
        self.events.push(Event::OutcomeUnknown { destination: dst.clone(), payload, receipt_id: rid });
        self.stats.outcome_unknown += 1;
    }

    pub(crate) fn not_delivered(&mut self, dst: &Arc<str>, payload: Vec<u8>, rid: Rid) {
        self.events.push(Event::NotDelivered { destination: dst.clone(), payload, receipt_id: rid });
        self.stats.not_delivered += 1;
    }

    // ------------------------------------------------------------------ closing

    /// Begin a graceful close (see the twin's `close`).
    pub fn close(&mut self, now: f64) {
        if self.closing {
            return;
        }
        self.closing = true;
        self.ack_now = true;
        self.revoke_until = now + self.cfg.close_revoke_timeout_s;
        let rtos: super::Map<Arc<str>, f64> = self
            .sr
            .keys()
            .map(|p| (p.clone(), self.paths.get(p).map_or(0.0, |x| x.pto)))
            .collect();
        for peer in self.sr.key_list() {
            let Some(rec) = self.sr.get(&peer) else { continue };
            if rec.queue.is_empty() && rec.tokens.is_empty() {
                self.release(&peer, now);
            } else if rec.silent {
                self.abandon(&peer, now);
            }
        }
        let initial = self.cfg.rto_initial_s;
        for peer in self.rr.key_list() {
            let Some(rr) = self.rr.get_mut(&peer) else { continue };
            rr.revoking = true;
            rr.deferred = None;
            let rck = rr.rck;
            self.emit(&peer, wire::record_frame(wire::REVOKE, rck));
            self.stats.revokes_sent += 1;
            if self.unreachable.contains_key(&peer) {
                self.stats.revocations_abandoned += 1;
                self.abandoned.insert(peer.clone(), rck);
                self.discard_recv(&peer, now);
                continue;
            }
            let iv = rtos.get(&peer).copied().unwrap_or(initial);
            let revoke_until = self.revoke_until;
            let rr = self.rr.get_mut(&peer).expect("held");
            rr.probe_iv = iv;
            rr.revoke_due = (now + iv).min(revoke_until);
            let due = rr.revoke_due;
            self.schedule_recv(&peer, due);
        }
        self.deferred.clear();
        self.check_closed(now);
    }

    pub fn closing(&self) -> bool {
        self.closing
    }

    pub fn is_closed(&self) -> bool {
        self.closing && self.sr.is_empty() && self.rr.is_empty()
    }

    pub fn is_finished(&mut self) -> bool {
        self.closing
            && self.sr.is_empty()
            && self.rr.is_empty()
            && self.out.is_empty()
            && self.acks.is_empty()
            && self.exon_timer().is_none()
    }

    /// On the step that makes `is_closed` true: start the linger.
    pub(crate) fn check_closed(&mut self, now: f64) {
        if self.linger.is_some() || !self.sr.is_empty() || !self.rr.is_empty() {
            return;
        }
        let end = now + self.cfg.close_linger_s();
        let iv = self.cfg.rto_initial_s;
        self.linger = Some(Linger { alive: true, timer_at: f64::INFINITY, end, iv });
        if end > now {
            self.schedule_linger((now + iv).min(end));
        }
    }

    /// While lingering, send our releases again (backing off).
    pub(crate) fn linger_timer(&mut self, now: f64) {
        let Some(lg) = self.linger.as_mut() else { return };
        if now >= lg.end {
            lg.alive = false;
            return;
        }
        let ck = self.clock.value;
        for peer in self.released.key_list() {
            self.emit(&peer, wire::reqslots(ck, 0, ck, 0));
        }
        let lg = self.linger.as_mut().expect("lingering");
        lg.iv *= 2.0;
        let t = (now + lg.iv).min(lg.end);
        self.schedule_linger(t);
    }

    // ------------------------------------------------------------------ liveness

    /// Give up on `peer`: every message queued or in flight to it is reported, its send
    /// record goes. How many messages were reported.
    pub fn abandon(&mut self, peer: &Arc<str>, now: f64) -> usize {
        let Some(rec) = self.sr.get_mut(peer) else { return 0 };
        let mut reported = 0usize;
        let mut msgs: Vec<MsgRef> = Vec::new();
        let mut reports: Vec<(bool, Vec<u8>, Rid)> = Vec::new(); // (unknown?, payload, rid)
        for tok in rec.tokens.values() {
            match &tok.meta {
                Meta::Msg(m) => note(&mut msgs, m),
                Meta::Rid(rid) => {
                    reports.push((true, tok.frame[wire::TOKEN_OVERHEAD..].to_vec(), *rid));
                    reported += 1;
                }
            }
        }
        for item in rec.queue.iter() {
            match (&item.frag, &item.meta) {
                (None, Meta::Rid(rid)) => {
                    reports.push((false, item.data.clone(), *rid));
                    reported += 1;
                }
                (None, Meta::Msg(m)) | (Some(_), Meta::Msg(m)) => note(&mut msgs, m),
                (Some(_), Meta::Rid(_)) => {}
            }
        }
        for m in &msgs {
            let b = m.borrow();
            reports.push((b.bound >= b.count, b.data.clone(), b.rid));
            reported += 1;
        }
        let pending = (rec.tokens.len() + rec.queue.len()) as i64;
        let bytes: i64 = rec.tokens.values().map(|t| t.frame.len() as i64).sum();
        rec.tokens.clear();
        rec.queue.clear();
        rec.req_out = false;
        for (unknown, payload, rid) in reports {
            if unknown {
                self.unknown(peer, payload, rid);
            } else {
                self.not_delivered(peer, payload, rid);
            }
        }
        self.pending_total -= pending;
        self.path_mut(peer).on_removed_bytes(bytes);
        self.stats.peers_abandoned += 1;
        self.release(peer, now);
        if self.closing {
            self.check_closed(now);
        }
        if self.blocked {
            self.blocked = false;
            self.events.push(Event::Writable);
        }
        reported
    }

    /// Peers reported unreachable and not heard from since (oldest first).
    pub fn unreachable_peers(&self) -> Vec<Arc<str>> {
        self.unreachable.key_list()
    }

    /// `peer`'s record waits on it and nothing was heard for `peer_timeout_s`: report it.
    pub(crate) fn silent(&mut self, peer: &Arc<str>, now: f64) {
        let Some(rec) = self.sr.get_mut(peer) else { return };
        rec.silent = true;
        let heard_at = rec.heard_at;
        self.unreachable.remove(peer);
        self.unreachable.insert(peer.clone(), now);
        if self.unreachable.len() > MAX_UNREACHABLE {
            if let Some(oldest) = self.unreachable.first_key().cloned() {
                self.unreachable.remove(&oldest);
                if let Some(other) = self.sr.get_mut(&oldest) {
                    other.silent = false;
                }
            }
        }
        self.events.push(Event::PeerUnreachable { peer: peer.clone(), silent_s: now - heard_at });
        self.stats.peers_unreachable += 1;
        if self.closing {
            self.abandon(peer, now);
        }
    }

    /// A datagram from a peer reported unreachable.
    pub(crate) fn heard_again(&mut self, src: &Arc<str>) {
        self.unreachable.remove(src);
        if let Some(rec) = self.sr.get_mut(src) {
            rec.silent = false;
        }
        self.events.push(Event::PeerReachable { peer: src.clone() });
        self.stats.peers_reachable += 1;
    }

    /// Tokens left the record without an ACK (void, revoke): pump, go idle, unblock.
    pub(crate) fn after_removal(&mut self, peer: &Arc<str>, now: f64) {
        let Some(rec) = self.sr.get_mut(peer) else { return };
        if !rec.alive {
            return;
        }
        if !rec.queue.is_empty() {
            self.pump(peer, now);
        } else if rec.tokens.is_empty() {
            if rec.idle_since.is_none() {
                rec.idle_since = Some(now);
            }
            if self.closing {
                self.release(peer, now);
            } else {
                let t = rec.idle_since.unwrap_or(now) + self.cfg.idle_release_s;
                self.schedule_send(peer, t);
            }
        }
        if self.blocked {
            self.blocked = false;
            self.events.push(Event::Writable);
        }
    }
}
