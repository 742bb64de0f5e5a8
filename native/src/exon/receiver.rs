//! The receiving half: the twin of `a3m/exon/receiver.py` (slot grants, delivery and
//! reassembly, ACKs, probes of a silent sender, the buffer space that paces grants), and the
//! TOKEN branch of `protocol.py`'s frame loop.

use std::sync::Arc;

use super::engine::Engine;
use super::events::Event;
use super::records::{Reassembly, RecvRecord, INF};
use crate::wire;

/// An ACK frame's ranges and copy ranges.
type AckFrame = (Vec<(u64, u64)>, Vec<(u64, u64)>);

/// ACKs repeat the slots consumed within this many below the highest received.
pub const REACK_SPAN: u64 = 1024;

impl<A: Clone + PartialEq> Engine<A> {
    /// The TOKEN branch of the frame loop; false: no ACK for it (VOID sent, or stale).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_token(
        &mut self,
        src: &Arc<str>,
        s: u64,
        r: u64,
        payload: &[u8],
        index: u32,
        count: u32,
        total: u32,
        flags: u8,
        now: f64,
        n_deliv: &mut i64,
        n_bytes: &mut i64,
    ) -> bool {
        let live = match self.rr.get(src) {
            Some(rr) => rr.rck == r && rr.low <= s && s < rr.sck && !rr.dead.contains(&s),
            None => false,
        };
        if live {
            let rr = self.rr.get_mut(src).expect("looked up");
            if s == rr.low && rr.dead.is_empty() {
                rr.low = s + 1; // in-order arrival: the common case
                if s >= rr.high {
                    rr.high = s + 1;
                }
            } else {
                rr.consume(s);
                if s != rr.high {
                    self.ack_now = true; // it opens a gap or fills one: ACK at once
                }
                if s >= rr.high {
                    rr.high = s + 1;
                }
            }
            if flags & wire::FLAG_RETRANSMIT != 0 {
                self.ack_now = true;
                rr.copies.insert(s);
            }
            rr.last_active = now;
            if count == 1 {
                self.events.push(Event::Delivered { source: src.clone(), payload: payload.to_vec() });
                *n_deliv += 1;
                *n_bytes += payload.len() as i64;
                self.buffered += payload.len() as i64;
            } else {
                self.reassemble(src, s, payload, index, count, total);
            }
            let rr = self.rr.get_mut(src).expect("still held");
            if let Some((d_s, d_n)) = rr.deferred.take() {
                self.grant(src, d_s, d_n, 0);
            }
            return true;
        }
        let abandoned = !self.abandoned.is_empty() && self.abandoned.get(src) == Some(&r);
        if r < self.boot || abandoned {
            self.void(src, r);
            if self.linger.is_some() {
                self.stats.linger_answers += 1;
            }
            return false;
        }
        if r >= self.clock.value {
            self.stats.stale_frames += 1;
            return false;
        }
        self.stats.duplicates += 1;
        self.ack_now = true;
        if let Some(rr) = self.rr.get_mut(src) {
            if rr.rck == r && flags & wire::FLAG_RETRANSMIT != 0 {
                rr.copies.insert(s);
            }
        }
        if self.linger.is_some() {
            self.stats.linger_answers += 1;
        }
        true
    }

    /// The application took `nbytes` of delivered payload: receive buffer space returns.
    pub fn consumed(&mut self, nbytes: i64) {
        self.buffered = (self.buffered - nbytes).max(0);
        if !self.deferred.is_empty() && self.buffered < self.cfg.recv_buffer_bytes {
            for peer in self.deferred.key_list() {
                let grant = match self.rr.get_mut(&peer) {
                    Some(rec) if rec.alive => rec.deferred.take(),
                    _ => None,
                };
                if let Some((s, n)) = grant {
                    self.grant(&peer, s, n, 0);
                }
            }
            let keep: Vec<Arc<str>> = self
                .deferred
                .key_list()
                .into_iter()
                .filter(|p| self.rr.get(p).is_some_and(|r| r.deferred.is_some()))
                .collect();
            self.deferred.clear();
            for p in keep {
                self.deferred.insert(p, ());
            }
        }
    }

    pub fn buffered_bytes(&self) -> i64 {
        self.buffered
    }

    pub(crate) fn deliver(&mut self, src: &Arc<str>, payload: Vec<u8>) {
        let n = payload.len() as i64;
        self.events.push(Event::Delivered { source: src.clone(), payload });
        self.buffered += n;
        self.stats.delivered += 1;
        self.stats.delivered_bytes += n;
    }

    fn reassemble(&mut self, src: &Arc<str>, s: u64, payload: &[u8], index: u32, count: u32, total: u32) {
        let first = s as i128 - index as i128;
        let rec = self.rr.get_mut(src).expect("a live record");
        if rec.reasm.get(&first).is_none() {
            rec.reasm.insert(first, Reassembly { count, total, size: 0, parts: Default::default() });
        }
        let entry = rec.reasm.get_mut(&first).expect("inserted");
        if entry.count != count || entry.total != total || entry.parts.contains_key(&index) {
            self.stats.reassembly_errors += 1;
            return;
        }
        entry.parts.insert(index, payload.to_vec());
        entry.size += payload.len() as u64;
        if entry.size > total as u64 {
            self.stats.reassembly_errors += 1;
            rec.reasm.remove(&first);
            return;
        }
        if entry.parts.len() == count as usize {
            let mut entry = rec.reasm.remove(&first).expect("present");
            if entry.size != total as u64 {
                self.stats.reassembly_errors += 1;
                return;
            }
            let mut whole = Vec::with_capacity(entry.size as usize);
            for i in 0..count {
                whole.extend_from_slice(&entry.parts.remove(&i).unwrap_or_default());
            }
            self.deliver(src, whole);
        }
    }

    pub(crate) fn on_reqslots(&mut self, src: &Arc<str>, s: u64, n: u64, low: u64, copy: u8, now: f64) {
        if self.closing {
            let mut discard = false;
            if let Some(rec) = self.rr.get_mut(src) {
                rec.drop_below(low);
                discard = low >= rec.sck;
            }
            if discard {
                self.discard_recv(src, now);
            }
            return;
        }
        if self.rr.get(src).is_none() {
            if n == 0 {
                return; // a release for a record already gone
            }
            let rck = self.clock_take();
            let id = self.rec_id();
            let rec = RecvRecord::new(id, src.clone(), rck, s, now, self.cfg.probe_interval_s);
            let iv = rec.probe_iv;
            self.rr.insert(src.clone(), rec);
            self.stats.recv_records_created += 1;
            self.schedule_recv(src, now + iv);
        }
        let probe_iv = self.cfg.probe_interval_s;
        let rec = self.rr.get_mut(src).expect("held or made");
        rec.last_active = now;
        rec.probe_iv = probe_iv;
        rec.drop_below(low);
        if !rec.reasm.is_empty() {
            let bound = rec.low.max(low) as i128;
            let gone: Vec<i128> =
                rec.reasm.iter().filter(|(f, e)| **f + e.count as i128 <= bound).map(|(f, _)| *f).collect();
            for f in gone {
                rec.reasm.remove(&f);
            }
        }
        if n != 0 {
            self.grant(src, s, n, copy);
            let rec = self.rr.get(src).expect("held");
            if rec.deferred.is_some() {
                let f = wire::slots(rec.sck, rec.rck, 0, self.ack_delay_us, 0);
                self.emit(src, f);
            }
        } else {
            let rec = self.rr.get_mut(src).expect("held");
            if let Some((ds, dn)) = rec.deferred {
                if low as u128 >= ds as u128 + dn as u128 {
                    rec.deferred = None;
                    self.deferred.remove(src);
                }
            }
            let rec = self.rr.get(src).expect("held");
            if rec.low >= rec.sck && rec.reasm.is_empty() && rec.deferred.is_none() {
                self.discard_recv(src, now);
            }
        }
    }

    /// Answer REQSLOTS(s, n): grant `[s, s+m)`, all live, or defer while buffers are full.
    pub(crate) fn grant(&mut self, peer: &Arc<str>, s: u64, n: u64, copy: u8) {
        if self.closing {
            return;
        }
        let max_live = self.cfg.max_live_slots as u64;
        let recv_buffer = self.cfg.recv_buffer_bytes;
        let buffered = self.buffered;
        let ack_delay_us = self.ack_delay_us;
        let Some(rec) = self.rr.get_mut(peer) else { return };
        let dead_max_at_least_s = s < rec.sck && rec.dead.iter().any(|&x| x >= s);
        if s < rec.low || (!rec.dead.is_empty() && dead_max_at_least_s) {
            self.stats.stale_frames += 1;
            return;
        }
        if s > rec.sck {
            if rec.low >= rec.sck {
                rec.low = s;
                rec.sck = s;
                rec.dead.clear();
            } else if s - rec.sck <= max_live {
                for x in rec.sck..s {
                    rec.dead.insert(x);
                }
                rec.sck = s;
            } else {
                self.stats.stale_frames += 1;
                return;
            }
        }
        let end = (s as u128 + n as u128).min(rec.low as u128 + max_live as u128) as u64;
        if buffered >= recv_buffer || end <= s {
            if rec.deferred.is_none() {
                self.stats.grants_deferred += 1;
            }
            rec.deferred = Some((s, n));
            if buffered >= recv_buffer {
                self.deferred.insert(peer.clone(), ());
            }
            return;
        }
        if end > rec.sck {
            rec.sck = end;
        }
        let f = wire::slots(s, rec.rck, (end - s) as u32, ack_delay_us, copy);
        self.emit(peer, f);
    }

    pub(crate) fn recv_timer(&mut self, peer: &Arc<str>, now: f64) {
        let revoke_until = self.revoke_until;
        let rto_max = self.cfg.rto_max_s;
        let Some(rec) = self.rr.get_mut(peer) else { return };
        if rec.revoking {
            if now < rec.revoke_due {
                let t = rec.revoke_due;
                self.schedule_recv(peer, t);
                return;
            }
            if now >= revoke_until {
                self.stats.revocations_abandoned += 1;
                let rck = rec.rck;
                self.abandoned.insert(peer.clone(), rck);
                self.discard_recv(peer, now);
                return;
            }
            let rck = rec.rck;
            rec.probe_iv = (rec.probe_iv * 2.0).min(rto_max);
            rec.revoke_due = (now + rec.probe_iv).min(revoke_until);
            let due = rec.revoke_due;
            self.emit(peer, wire::record_frame(wire::REVOKE, rck));
            self.stats.revokes_sent += 1;
            self.schedule_recv(peer, due);
            return;
        }
        let due = rec.last_active + rec.probe_iv;
        if now < due {
            self.schedule_recv(peer, due);
            return;
        }
        if rec.low >= rec.sck && rec.reasm.is_empty() && rec.deferred.is_none() {
            self.discard_recv(peer, now);
            return;
        }
        let f = wire::slots(rec.sck, rec.rck, 0, self.ack_delay_us, 0);
        rec.last_active = now;
        rec.probe_iv = (rec.probe_iv * 2.0).min(self.cfg.probe_interval_max_s);
        let next = now + rec.probe_iv;
        self.emit(peer, f);
        self.stats.probes_sent += 1;
        self.schedule_recv(peer, next);
    }

    pub(crate) fn discard_recv(&mut self, peer: &Arc<str>, now: f64) {
        if let Some(mut rec) = self.rr.remove(peer) {
            rec.alive = false;
        }
        self.deferred.remove(peer);
        self.stats.recv_records_discarded += 1;
        if self.closing {
            self.check_closed(now);
        }
    }

    /// Emit the pending ACKs (of the peers in `only`, when given: piggybacking).
    pub(crate) fn flush_acks(&mut self, only: Option<&[Arc<str>]>) {
        let peers: Vec<Arc<str>> = match only {
            None => self.acks.key_list(),
            Some(o) => o.iter().filter(|p| self.acks.contains_key(p)).cloned().collect(),
        };
        for peer in peers {
            let per_r = self.acks.remove(&peer).unwrap_or_default();
            let budget = self.limit(&peer).min(self.mds) - 300;
            let max_ranges = ((budget - wire::ack_size(0, Some(0)) as i64) / wire::RANGE_BYTES as i64).max(1) as usize;
            for (r, slots) in per_r {
                let held = self.rr.get(&peer).is_some_and(|rr| rr.rck == r);
                if held {
                    let frames = {
                        let rr = self.rr.get_mut(&peer).expect("held");
                        let ranges = reack_ranges(rr, &slots);
                        with_copies(rr, &ranges, max_ranges)
                    };
                    for (chunk, marked) in frames {
                        let mut f = Vec::new();
                        wire::encode_ack(&mut f, r, &as_u32(&chunk), Some(&as_u32(&marked)));
                        self.emit(&peer, f);
                    }
                    continue;
                }
                if slots.len() == 1 {
                    let mut f = Vec::new();
                    wire::encode_ack(&mut f, r, &[(slots[0], 1)], None);
                    self.emit(&peer, f);
                    continue;
                }
                let ranges = wire::to_ranges(&slots);
                for chunk in ranges.chunks(max_ranges) {
                    let mut f = Vec::new();
                    wire::encode_ack(&mut f, r, &as_u32(chunk), None);
                    self.emit(&peer, f);
                }
            }
        }
        if self.acks.is_empty() {
            self.ack_due = INF;
            self.ack_now = self.closing;
            self.ack_dgrams = 0;
        }
    }

    /// Tell `src` that record `r` (below our boot clock) is gone: once per output.
    pub(crate) fn void(&mut self, src: &Arc<str>, r: u64) {
        let key = (src.clone(), r);
        if self.voids_out.contains(&key) {
            return;
        }
        self.voids_out.insert(key);
        self.emit(src, wire::record_frame(wire::VOID, r));
        self.stats.voids_sent += 1;
    }

    pub(crate) fn on_revoked(&mut self, src: &Arc<str>, r: u64, held: u32, now: f64) {
        let ok = self.rr.get(src).is_some_and(|rec| rec.rck == r && rec.revoking);
        if !ok {
            self.stats.stale_frames += 1;
            return;
        }
        if held == 0 {
            self.discard_recv(src, now);
        }
    }
}

fn as_u32(ranges: &[(u64, u64)]) -> Vec<(u64, u32)> {
    ranges.iter().map(|&(f, c)| (f, c.min(u32::MAX as u64) as u32)).collect()
}

/// The ACK frames for record `rr`: `(ranges, copy ranges)` pairs, each within `max_ranges`
/// ranges in all; then forget the copies below the span ACKs repeat.
pub(crate) fn with_copies(
    rr: &mut RecvRecord,
    ranges: &[(u64, u64)],
    max_ranges: usize,
) -> Vec<AckFrame> {
    if rr.copies.is_empty() {
        return ranges.chunks(max_ranges).map(|c| (c.to_vec(), Vec::new())).collect();
    }
    let cap = max_ranges.max(2);
    let mut marks: Vec<u64> = rr.copies.iter().copied().collect();
    marks.sort_unstable();
    #[allow(clippy::type_complexity)]
    let mut items: Vec<((u64, u64), Vec<(u64, u64)>)> = Vec::new();
    let n = marks.len();
    let mut i = 0;
    for &(f, c) in ranges {
        let end = f + c;
        while i < n && marks[i] < f {
            i += 1;
        }
        let mut start = f;
        let mut inside: Vec<(u64, u64)> = Vec::new();
        while i < n && marks[i] < end {
            let x = marks[i];
            i += 1;
            if let Some(last) = inside.last_mut() {
                if last.0 + last.1 == x {
                    last.1 += 1;
                    continue;
                }
            }
            if inside.len() == cap - 1 {
                items.push(((start, x - start), std::mem::take(&mut inside)));
                start = x;
            }
            inside.push((x, 1));
        }
        items.push(((start, end - start), inside));
    }
    let mut out: Vec<AckFrame> = Vec::new();
    let mut chunk: Vec<(u64, u64)> = Vec::new();
    let mut marked: Vec<(u64, u64)> = Vec::new();
    let mut size = 0usize;
    for (rng, inside) in items {
        if !chunk.is_empty() && size + 1 + inside.len() > cap {
            out.push((std::mem::take(&mut chunk), std::mem::take(&mut marked)));
            size = 0;
        }
        chunk.push(rng);
        size += 1 + inside.len();
        marked.extend(inside);
    }
    out.push((chunk, marked));
    let floor = rr.high.saturating_sub(REACK_SPAN).max(rr.first);
    if marks[0] < floor {
        rr.copies.retain(|&x| x >= floor);
    }
    out
}

/// The ranges of an ACK for record `rr`: the slots just consumed, and again every slot
/// consumed within REACK_SPAN below the highest received.
pub(crate) fn reack_ranges(rr: &RecvRecord, slots: &[u64]) -> Vec<(u64, u64)> {
    let low = rr.low;
    let floor = rr.high.saturating_sub(REACK_SPAN).max(rr.first);
    let mut extra: Vec<u64> = slots.iter().copied().filter(|&s| s >= low || s < floor).collect();
    if !rr.dead.is_empty() {
        let from = low.max(floor);
        if from < rr.high {
            // (the twin walks the span; the dead set is at most a window's worth)
            if ((rr.high - from) as usize) <= rr.dead.len() * 4 + 64 {
                extra.extend((from..rr.high).filter(|x| rr.dead.contains(x)));
            } else {
                let mut d: Vec<u64> = rr.dead.iter().copied().filter(|&x| x >= from && x < rr.high).collect();
                d.sort_unstable();
                extra.extend(d);
            }
        }
    }
    let mut ranges = wire::to_ranges(&extra);
    if floor < low {
        ranges.push((floor, low - floor));
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (first, count) in ranges {
            if let Some(last) = merged.last_mut() {
                if first <= last.0 + last.1 {
                    last.1 = last.1.max(first + count - last.0);
                    continue;
                }
            }
            merged.push((first, count));
        }
        ranges = merged;
    }
    ranges
}
