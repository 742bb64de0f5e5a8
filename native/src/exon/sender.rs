//! The sending half: the twin of `a3m/exon/sender.py` (admission, envelopes, tokens,
//! acknowledgements, loss recovery with `recovery`, the idle release).

use std::sync::Arc;

use super::engine::{copy_no, Engine, SendError, MAX_PATHS, PROBE_TOKENS};
use super::events::Event;
use super::records::{pieces, Message, Meta, QueueItem, Rid, SendRecord, Token, INF};
use super::recovery::PathRecovery;
use crate::wire;

/// Whether slot `s` is in `ranges` (sorted, their first slots in `starts`).
fn within(starts: &[u64], ranges: &[(u64, u32)], s: u64) -> bool {
    let j = starts.partition_point(|&x| x <= s);
    j >= 1 && (s as u128) < ranges[j - 1].0 as u128 + ranges[j - 1].1 as u128
}

fn token_frame(s: u64, r: u64, data: &[u8], frag: Option<(u32, u32, u32)>) -> Vec<u8> {
    let mut f = Vec::with_capacity(data.len() + wire::FRAGMENT_OVERHEAD);
    wire::encode_token(&mut f, s, r, data, frag, false);
    f
}

impl<A: Clone + PartialEq> Engine<A> {
    pub(crate) fn path_mut(&mut self, peer: &Arc<str>) -> &mut PathRecovery {
        self.paths.get_mut(peer).expect("a send record's path is kept while it lives")
    }

    /// Whether `send(dst, ...)` would be admitted now by both windows.
    pub fn can_send(&self, dst: &str) -> bool {
        if self.closing {
            return false;
        }
        if *self.id == *dst {
            return true;
        }
        let rec = self.sr.get(&Arc::from(dst));
        let pend = rec.map_or(0, |r| r.pending());
        pend < self.peer_window(rec) && self.pending_total < self.cfg.window_global
    }

    /// Queue the first of `payloads` the windows admit (no receipts); how many.
    pub fn send_many(&mut self, dst: &str, payloads: &[&[u8]], now: f64) -> usize {
        let n = (self.send_room(dst) as usize).min(payloads.len());
        if n == 0 {
            return 0;
        }
        let key: Arc<str> = Arc::from(dst);
        let rec = self.sr.get_mut(&key).expect("send_room saw it");
        let single = rec.max_single;
        let mut count = 0;
        for data in &payloads[..n] {
            if data.len() as i64 > single {
                break;
            }
            rec.queue.push_back(QueueItem { data: data.to_vec(), frag: None, meta: Meta::Rid(None) });
            count += 1;
        }
        if count > 0 {
            if rec.queue.len() == count && rec.tokens.is_empty() {
                rec.heard_at = now;
            }
            rec.idle_since = None;
            self.pending_total += count as i64;
            self.pump(&key, now);
        }
        count
    }

    /// How many more one-token sends to `dst` both windows admit now.
    pub fn send_room(&self, dst: &str) -> i64 {
        let Some(rec) = self.sr.get(&Arc::from(dst)) else { return 0 };
        if self.closing {
            return 0;
        }
        (self.peer_window(Some(rec)) - rec.pending()).min(self.cfg.window_global - self.pending_total).max(0)
    }

    pub fn in_flight(&self) -> i64 {
        self.pending_total
    }

    /// Queue `payload` for exactly-once delivery to `dst`; the receipt id when `receipt`.
    pub fn send(&mut self, dst: &str, payload: &[u8], now: f64, receipt: bool) -> Result<Rid, SendError> {
        if self.closing {
            return Err(SendError::Closed("the Exon node is closing".into()));
        }
        let size = payload.len() as i64;
        if size > self.cfg.max_message_size {
            return Err(SendError::TooLarge(format!(
                "{size} bytes > max_message_size {}",
                self.cfg.max_message_size
            )));
        }
        let mut rid: Rid = None;
        if receipt {
            rid = Some(self.next_receipt);
            self.next_receipt += 1;
        }
        if *self.id == *dst {
            let me = self.id.clone();
            self.deliver(&me, payload.to_vec());
            if let Some(r) = rid {
                self.events.push(Event::ReceiptReady { receipt_id: r });
            }
            return Ok(rid);
        }
        let key: Arc<str> = Arc::from(dst);
        if self.sr.get(&key).is_none() {
            if self.pending_total >= self.cfg.window_global {
                self.blocked = true;
                return Err(SendError::WouldBlock("global send window full".into()));
            }
            if dst.is_empty() || dst.len() > wire::MAX_ID_BYTES {
                return Err(SendError::Usage(format!("bad node id {dst:?}")));
            }
            let start = self.clock.value;
            self.path(&key);
            let id = self.rec_id();
            let mut rec = SendRecord::new(id, key.clone(), start, now);
            rec.max_single = self.max_unfragmented(&key);
            self.sr.insert(key.clone(), rec);
            self.stats.send_records_created += 1;
        } else {
            let rec = self.sr.get(&key).expect("held");
            if rec.pending() >= self.peer_window(Some(rec)) || self.pending_total >= self.cfg.window_global {
                self.blocked = true;
                return Err(SendError::WouldBlock(format!("send window to {dst:?} full")));
            }
        }
        let slots_half = (self.cfg.slots_ahead >> 1) as u64;
        let rec = self.sr.get_mut(&key).expect("held");
        let data = payload.to_vec();
        if rec.tokens.is_empty() && rec.queue.is_empty() {
            rec.heard_at = now;
        }
        rec.idle_since = None;
        if size <= rec.max_single {
            let path = self.paths.get_mut(&key).expect("path of a live record");
            if rec.queue.is_empty()
                && rec.env_lo < rec.sck
                && path.inflight < path.cwnd
                && path.pace_at <= now
            {
                // Fast path: an envelope in hand, room in the window and the pacer.
                let s = rec.env_lo;
                rec.env_lo = s + 1;
                let r = rec.rck as u64;
                let frame = token_frame(s, r, &data, None);
                path.seq += 1;
                let flen = frame.len() as i64;
                rec.tokens.insert(
                    s,
                    Token { frame: frame.clone(), r, meta: Meta::Rid(rid), sent_at: now, tx: 1, seq: path.seq },
                );
                path.inflight += flen;
                if path.pacing_rate != 0.0 {
                    path.paced(flen, now);
                }
                path.app_limited = true;
                let pto = path.pto;
                rec.last_sent = now;
                let want_slots = rec.sck - rec.env_lo < slots_half && !rec.req_out;
                let timer_at = rec.timer_at;
                self.pending_total += 1;
                self.emit(&key, frame);
                self.stats.tokens_sent += 1;
                let t = now + pto;
                if t < timer_at {
                    self.schedule_send(&key, t);
                }
                if want_slots {
                    self.request_slots(&key, now);
                }
                return Ok(rid);
            }
            rec.queue.push_back(QueueItem { data, frag: None, meta: Meta::Rid(rid) });
            self.pending_total += 1;
        } else {
            let chunk = (rec.max_single - (wire::FRAGMENT_OVERHEAD - wire::TOKEN_OVERHEAD) as i64).max(1);
            let count = (size + chunk - 1) / chunk;
            let msg = Message::shared(data, chunk as usize, count as u32, rid);
            rec.queue.extend(pieces(&msg));
            self.pending_total += count;
        }
        self.pump(&key, now);
        Ok(rid)
    }

    /// The loss-recovery state of the path to `peer` (kept beyond its send records).
    fn path(&mut self, peer: &Arc<str>) {
        match self.paths.remove(peer) {
            None => {
                let mds = self.limit(peer);
                let p = PathRecovery::new(
                    self.cfg.rto_initial_s,
                    self.cfg.ack_delay_s,
                    self.backoff_cap,
                    mds,
                    self.cfg.pacing,
                );
                if self.paths.len() >= MAX_PATHS + self.sr.len() {
                    let old: Vec<Arc<str>> = self
                        .paths
                        .keys()
                        .filter(|p| !self.sr.contains_key(p))
                        .take(MAX_PATHS / 4)
                        .cloned()
                        .collect();
                    for o in old {
                        self.paths.remove(&o);
                    }
                }
                self.paths.insert(peer.clone(), p);
            }
            Some(mut p) => {
                p.mds = self.limit(peer);
                self.paths.insert(peer.clone(), p);
            }
        }
        let p = self.path_mut(peer);
        p.inflight = 0;
        p.largest_acked = p.seq;
        p.pto_count = 0;
    }

    fn peer_window(&self, rec: Option<&SendRecord>) -> i64 {
        let wpp = self.cfg.window_per_peer;
        let Some(rec) = rec else { return wpp };
        let ct = self.paths.get(&rec.peer).map_or(0, |p| p.cwnd_tokens);
        if ct <= wpp {
            return wpp;
        }
        ct.min(self.cfg.window_global)
    }

    pub fn srtt(&self, peer: &str) -> Option<f64> {
        let p = self.paths.get(&Arc::from(peer))?;
        p.sampled.then_some(p.srtt)
    }

    pub fn max_peer_pto(&self) -> f64 {
        self.paths.iter().map(|(_, p)| if p.sampled { p.base_pto() } else { 0.0 }).fold(0.0, f64::max)
    }

    pub fn peer_pto(&self, peer: &str) -> f64 {
        match self.paths.get(&Arc::from(peer)) {
            Some(p) if p.sampled => p.base_pto(),
            _ => 0.0,
        }
    }

    pub fn max_unfragmented(&mut self, peer: &Arc<str>) -> i64 {
        self.limit(peer) - self.header_len(peer) as i64 - wire::TOKEN_OVERHEAD as i64
    }

    pub fn path_stats(&self, peer: &str) -> Option<&PathRecovery> {
        self.paths.get(&Arc::from(peer))
    }

    /// Bind queued pieces to envelopes while the window and the pacer have room, then keep
    /// envelopes coming.
    pub(crate) fn pump(&mut self, peer: &Arc<str>, now: f64) {
        let slots_half = (self.cfg.slots_ahead >> 1) as u64;
        let Some(rec) = self.sr.get_mut(peer) else { return };
        let path = self.paths.get_mut(peer).expect("path of a live record");
        let mut schedule: Vec<f64> = Vec::new();
        if !rec.queue.is_empty() && rec.env_lo < rec.sck && path.inflight < path.cwnd {
            let mut allowed = path.pace_allowance(now, rec.max_single + wire::TOKEN_OVERHEAD as i64);
            if allowed > 0.0 {
                let r = rec.rck as u64;
                let mut s = rec.env_lo;
                let end = rec.sck;
                let cwnd = path.cwnd;
                let mut inflight = path.inflight;
                let mut seq = path.seq;
                let mut sent = 0i64;
                let out = match self.out.get_mut(peer) {
                    Some(o) => o,
                    None => {
                        self.out.insert(peer.clone(), Vec::new());
                        self.out.get_mut(peer).expect("inserted")
                    }
                };
                while !rec.queue.is_empty() && s < end && inflight < cwnd && allowed > 0.0 {
                    let item = rec.queue.pop_front().expect("not empty");
                    let frame = match item.frag {
                        None => token_frame(s, r, &item.data, None),
                        Some((index, count, total)) => {
                            let msg = item.meta.msg().expect("a fragment's meta is its message");
                            let mut m = msg.borrow_mut();
                            let c = m.chunk;
                            let i = (index as usize).saturating_mul(c).min(m.data.len());
                            let j = i.saturating_add(c).min(m.data.len());
                            if m.bound == 0 {
                                m.r = r as i128;
                            }
                            m.bound += 1;
                            token_frame(s, r, &m.data[i..j], Some((index, count, total)))
                        }
                    };
                    seq += 1;
                    let flen = frame.len() as i64;
                    rec.tokens.insert(s, Token { frame: frame.clone(), r, meta: item.meta, sent_at: now, tx: 1, seq });
                    inflight += flen;
                    allowed -= flen as f64;
                    out.push(frame);
                    s += 1;
                    sent += 1;
                }
                if path.pacing_rate != 0.0 {
                    path.paced(inflight - path.inflight, now);
                }
                rec.env_lo = s;
                path.seq = seq;
                path.inflight = inflight;
                self.stats.tokens_sent += sent;
                rec.last_sent = now;
                schedule.push(now + path.pto);
            }
            if !rec.queue.is_empty() && rec.env_lo < rec.sck && path.inflight < path.cwnd {
                self.stats.pacer_holds += 1;
                schedule.push(path.pace_wake());
            }
        }
        if rec.queue.is_empty() {
            path.app_limited = true;
        }
        let want = !rec.req_out && (!rec.queue.is_empty() || rec.sck - rec.env_lo < slots_half);
        for t in schedule {
            self.schedule_send(peer, t);
        }
        if want {
            self.request_slots(peer, now);
        }
    }

    /// Ask for slots (again); the REQSLOTS frame sent (None: nothing wanted).
    pub(crate) fn request_slots(&mut self, peer: &Arc<str>, now: f64) -> Option<Vec<u8>> {
        let slots_ahead = self.cfg.slots_ahead;
        let max_live = self.cfg.max_live_slots;
        let cwnd_tokens = self.paths.get(peer).map_or(0, |p| p.cwnd_tokens);
        let pto = self.paths.get(peer).map_or(0.0, |p| p.pto);
        let rec = self.sr.get_mut(peer)?;
        let have = (rec.sck - rec.env_lo) as i64;
        let mut ahead = slots_ahead;
        if cwnd_tokens > ahead {
            ahead = cwnd_tokens.min(max_live >> 1);
        }
        let want = (ahead + rec.queue.len() as i64 - have).min(max_live);
        if want <= 0 {
            rec.req_out = false;
            return None;
        }
        let end = rec.sck + want as u64;
        if end > rec.req_end {
            rec.req_end = end;
        }
        let req_end = rec.req_end;
        if !rec.req_out {
            rec.req_out = true;
            rec.req_tx = 1;
            rec.req_times = vec![now];
        } else {
            rec.req_tx += 1;
            if rec.req_tx <= 255 {
                rec.req_times.push(now);
            }
        }
        let frame = wire::reqslots(rec.sck, want as u32, rec.lowest_in_use(), copy_no(rec.req_tx));
        rec.req_sent_at = now;
        rec.last_sent = now;
        self.clock_cover(req_end);
        self.emit(peer, frame.clone());
        self.stats.reqslots_sent += 1;
        self.schedule_send(peer, now + pto);
        Some(frame)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_slots(&mut self, src: &Arc<str>, s: u64, r: u64, n: u64, ack_delay_us: u32, echo: u8, now: f64) {
        if n == 0 {
            let f = match self.sr.get(src) {
                None => {
                    let ck = self.clock.value;
                    wire::reqslots(ck, 0, ck, 0)
                }
                Some(rec) => wire::reqslots(rec.sck, 0, rec.lowest_in_use(), 0),
            };
            self.emit(src, f);
            return;
        }
        let Some(rec) = self.sr.get_mut(src) else {
            let ck = self.clock.value;
            self.emit(src, wire::reqslots(ck, 0, ck, 0));
            self.stats.stale_frames += 1;
            return;
        };
        let r_i = r as i128;
        if s != rec.sck || r_i < rec.rck || r_i <= rec.closed_r {
            self.stats.stale_frames += 1;
            return;
        }
        let n = n.min(rec.req_end.saturating_sub(s));
        if n == 0 {
            self.stats.stale_frames += 1;
            return;
        }
        let path = self.paths.get_mut(src).expect("path of a live record");
        path.set_peer_ack_delay(ack_delay_us.min(1_000_000) as f64 / 1_000_000.0);
        if rec.req_out && echo != 0 {
            if echo == copy_no(rec.req_tx) {
                path.on_rtt_sample(now - rec.req_sent_at);
            } else if (echo as usize) <= rec.req_times.len() {
                path.on_rtt_sample(now - rec.req_times[echo as usize - 1]);
            }
        }
        rec.req_out = false;
        path.on_progress();
        if !rec.queue.is_empty() && rec.env_lo >= rec.sck {
            self.stats.slot_stalls += 1;
        }
        let mut requeue_old: Option<i128> = None;
        if r_i != rec.rck {
            let old = rec.rck;
            rec.rck = r_i;
            if old >= 0 {
                rec.env_lo = s;
                requeue_old = Some(old);
            }
        }
        if let Some(old) = requeue_old {
            self.requeue_partial_head(src, old);
        }
        let rec = self.sr.get_mut(src).expect("held");
        rec.sck = s + n;
        self.pump(src, now);
    }

    pub(crate) fn on_ack(&mut self, src: &Arc<str>, r: u64, ranges: &[(u64, u32)], copies: Option<&[(u64, u32)]>, now: f64) {
        let Some(rec) = self.sr.get_mut(src) else { return };
        let path = self.paths.get_mut(src).expect("path of a live record");
        let mut acked: i64 = 0;
        let mut nbytes: i64 = 0;
        let mut sample_at: f64 = -1.0;
        let mut largest: i64 = -1;
        let mut reordered = false;
        let mut fresh = false;
        let mut last_copy: f64 = -1.0;
        let prev_largest = path.largest_acked;
        let mut spurious = 0i64;
        let mut needless = 0i64;
        let starts: Option<Vec<u64>> = match copies {
            Some(c) if !c.is_empty() => Some(c.iter().map(|&(f, _)| f).collect()),
            _ => None,
        };
        let spurious_within = if path.sampled { path.min_rtt / 2.0 } else { 0.0 };
        let too_soon = if path.sampled { path.min_rtt } else { 0.0 };
        let mut runs: Vec<(Meta, i64)> = Vec::new();
        let mut run_meta: Option<Meta> = None;
        let mut run: i64 = 0;
        let Some(&lowest) = rec.tokens.keys().next() else {
            self.stats.stale_frames += 1;
            return;
        };
        for &(first0, count0) in ranges {
            let end = first0 as u128 + count0 as u128;
            if end <= lowest as u128 {
                continue;
            }
            let first = first0.max(lowest);
            let end_u = end.min(u64::MAX as u128 + 1);
            let slots: Vec<u64> = if end_u > u64::MAX as u128 {
                rec.tokens.range(first..).map(|(&k, _)| k).collect()
            } else {
                rec.tokens.range(first..end_u as u64).map(|(&k, _)| k).collect()
            };
            for s in slots {
                let matches = rec.tokens.get(&s).is_some_and(|t| t.r == r);
                if !matches {
                    continue;
                }
                let tok = rec.tokens.remove(&s).expect("present");
                acked += 1;
                nbytes += tok.frame.len() as i64;
                let tx = tok.tx;
                if tx == 1 {
                    fresh = true;
                    if tok.seq > largest {
                        largest = tok.seq;
                        sample_at = tok.sent_at;
                    }
                    if tok.seq < prev_largest {
                        reordered = true;
                    }
                } else {
                    if tok.sent_at > last_copy {
                        last_copy = tok.sent_at;
                    }
                    let orig = rec.first_tx.remove(&s);
                    match copies {
                        None => {
                            if tok.seq > largest && now - tok.sent_at >= too_soon {
                                largest = tok.seq;
                                sample_at = -1.0;
                            }
                            if now - tok.sent_at < spurious_within {
                                spurious += 1;
                                needless += 1;
                            }
                        }
                        Some(c) if starts.is_none() || !within(starts.as_deref().unwrap_or(&[]), c, s) => {
                            needless += 1;
                            if let Some((o_at, o_seq, o_lost)) = orig {
                                if o_lost {
                                    spurious += 1;
                                }
                                if o_seq > largest {
                                    largest = o_seq;
                                    sample_at = o_at;
                                }
                            }
                        }
                        Some(_) => {
                            if tx == 2 {
                                if tok.seq > largest {
                                    largest = tok.seq;
                                    sample_at = tok.sent_at;
                                }
                            } else if tok.seq > largest && now - tok.sent_at >= too_soon {
                                largest = tok.seq;
                                sample_at = -1.0;
                            }
                        }
                    }
                }
                let meta = tok.meta;
                if meta.is_some() {
                    match &run_meta {
                        Some(m) if m.same(&meta) => run += 1,
                        _ => {
                            if run > 0 {
                                if let Some(m) = run_meta.take() {
                                    runs.push((m, run));
                                }
                            }
                            run_meta = Some(meta);
                            run = 1;
                        }
                    }
                }
            }
        }
        if run > 0 {
            if let Some(m) = run_meta.take() {
                runs.push((m, run));
            }
        }
        for (m, n) in runs {
            self.receipt_progress(&m, n);
        }
        if acked == 0 {
            self.stats.stale_frames += 1;
            return;
        }
        self.pending_total -= acked;
        let rec = self.sr.get_mut(src).expect("held");
        let revoked = rec.revoked >= 0;
        if revoked {
            self.check_revoked(src);
        }
        let path = self.paths.get_mut(src).expect("path of a live record");
        if reordered {
            path.on_reordering();
        }
        if needless != 0 {
            self.stats.spurious_retransmits += needless;
        }
        if spurious != 0 {
            path.on_spurious();
        }
        if !fresh && sample_at < 0.0 && last_copy >= 0.0 && now - last_copy > path.base_pto() {
            path.on_rtt_sample(now - last_copy);
        }
        path.on_progress();
        let events = path.congestion_events;
        path.on_acked(nbytes, now, acked);
        if path.congestion_events != events {
            self.stats.congestion_events += path.congestion_events - events;
        }
        let rec = self.sr.get_mut(src).expect("held");
        let id = rec.id;
        match self.ack_detect.iter_mut().find(|e| e.1 == id) {
            Some(e) => {
                if largest > e.2 {
                    e.2 = largest;
                    e.3 = sample_at;
                }
            }
            None => self.ack_detect.push((src.clone(), id, largest, sample_at)),
        }
        let rec = self.sr.get_mut(src).expect("held");
        if !rec.queue.is_empty() {
            self.pump(src, now);
        } else if rec.tokens.is_empty() {
            if !rec.first_tx.is_empty() {
                rec.first_tx.clear();
            }
            rec.idle_since = Some(now);
            rec.loss_time = INF;
            let req_out = rec.req_out;
            if self.closing {
                self.release(src, now);
            } else if req_out {
                let t = now + self.cfg.idle_release_s;
                self.schedule_send(src, t);
            } else {
                let t = now + self.cfg.idle_release_s;
                self.reschedule_send(src, t);
            }
        }
        if self.blocked {
            self.blocked = false;
            self.events.push(Event::Writable);
        }
    }

    /// For each record the datagram just read acknowledged: move the largest acknowledged
    /// transmission, take the RTT sample, then detect losses.
    pub(crate) fn detect_acked(&mut self, now: f64) {
        let recs = std::mem::take(&mut self.ack_detect);
        for (peer, id, largest, sample_at) in recs {
            if let Some(path) = self.paths.get_mut(&peer) {
                if largest > path.largest_acked {
                    if sample_at >= 0.0 {
                        path.on_rtt_sample(now - sample_at);
                    }
                    path.largest_acked = largest;
                }
            }
            let live = self.sr.get(&peer).is_some_and(|r| r.id == id && r.alive && !r.tokens.is_empty());
            if live {
                self.detect_losses(&peer, now);
            }
        }
    }

    /// Declare lost, and send again at once, each token acknowledged transmissions overtook
    /// (packet or time threshold); arm the loss timer for the next that may become lost.
    pub(crate) fn detect_losses(&mut self, peer: &Arc<str>, now: f64) {
        let Some(rec) = self.sr.get_mut(peer) else { return };
        let path = self.paths.get_mut(peer).expect("path of a live record");
        let largest = path.largest_acked;
        let threshold = path.packet_threshold;
        let delay = path.loss_delay();
        let mut loss_time = INF;
        let mut lost: Vec<u64> = Vec::new();
        for (&s, tok) in rec.tokens.iter() {
            let seq = tok.seq;
            if seq > largest {
                if tok.tx == 1 {
                    break;
                }
                continue;
            }
            let t = tok.sent_at + delay;
            if largest - seq >= threshold || t <= now {
                lost.push(s);
            } else if t < loss_time {
                loss_time = t;
            }
        }
        rec.loss_time = loss_time;
        if !lost.is_empty() {
            self.stats.fast_retransmits += lost.len() as i64;
            let nbytes = self.resend(peer, &lost, now, true);
            let path = self.path_mut(peer);
            path.on_lost(nbytes);
            let pto = path.pto;
            if let Some(rec) = self.sr.get_mut(peer) {
                rec.last_sent = now;
            }
            self.schedule_send(peer, now + pto);
        }
        let timer_at = self.sr.get(peer).map_or(INF, |r| r.timer_at);
        if loss_time < timer_at {
            self.schedule_send(peer, loss_time);
        }
    }

    /// `n` tokens of the message `meta` (a receipt, or a fragmented message) were acked.
    pub(crate) fn receipt_progress(&mut self, meta: &Meta, n: i64) {
        match meta {
            Meta::Rid(Some(r)) => self.events.push(Event::ReceiptReady { receipt_id: *r }),
            Meta::Rid(None) => {}
            Meta::Msg(m) => {
                let mut msg = m.borrow_mut();
                msg.remaining -= n;
                if msg.remaining == 0 {
                    if let Some(r) = msg.rid {
                        self.events.push(Event::ReceiptReady { receipt_id: r });
                    }
                }
            }
        }
    }

    pub(crate) fn send_timer(&mut self, peer: &Arc<str>, now: f64) {
        let idle_release = self.cfg.idle_release_s;
        {
            let Some(rec) = self.sr.get_mut(peer) else { return };
            if rec.tokens.is_empty() {
                rec.loss_time = INF;
            } else if rec.loss_time <= now {
                self.detect_losses(peer, now);
            }
        }
        if self.sr.get(peer).is_some_and(|r| !r.queue.is_empty()) {
            self.pump(peer, now);
        }
        let Some(rec) = self.sr.get(peer) else { return };
        let mut next_t;
        if !rec.tokens.is_empty() || rec.req_out {
            let pto = self.paths.get(peer).map_or(0.0, |p| p.pto);
            let mut due = rec.last_sent + pto;
            if now >= due {
                let holding = self.cfg.secure && self.host.sec_holding(peer);
                if holding {
                    let rec = self.sr.get_mut(peer).expect("held");
                    rec.last_sent = now;
                    rec.held_probes += 1;
                    due = now + pto;
                } else if self.paths.get(peer).is_some_and(|p| p.sampled) || self.paced(peer, now) {
                    self.probe(peer, now);
                    due = now + self.paths.get(peer).map_or(0.0, |p| p.pto);
                } else {
                    due = self.sr.get(peer).map_or(0.0, |r| r.probe_slot);
                }
            }
            next_t = due;
        } else {
            next_t = INF;
        }
        let Some(rec) = self.sr.get_mut(peer) else { return };
        if rec.loss_time < next_t {
            next_t = rec.loss_time;
        }
        if rec.tokens.is_empty() && rec.queue.is_empty() {
            if rec.idle_since.is_none() {
                rec.idle_since = Some(now);
            }
            let idle_due = rec.idle_since.unwrap_or(now) + idle_release;
            if now >= idle_due || self.closing {
                self.release(peer, now);
                return;
            }
            next_t = next_t.min(idle_due);
        } else if self.peer_timeout != 0.0 && !rec.silent {
            let due = rec.heard_at + self.peer_timeout;
            if now >= due {
                self.silent(peer, now);
                if !self.sr.get(peer).is_some_and(|r| r.alive) {
                    return;
                }
            } else if due < next_t {
                next_t = due;
            }
        }
        self.schedule_send(peer, next_t);
    }

    /// Whether the probe of `peer`'s record, a first exchange, may go now.
    fn paced(&mut self, peer: &Arc<str>, now: f64) -> bool {
        let pto = self.paths.get(peer).map_or(0.0, |p| p.pto);
        let Some(rec) = self.sr.get_mut(peer) else { return true };
        let held = rec.probe_slot;
        let t = self.host.pacer_admit(held, now, pto);
        rec.probe_slot = t;
        if t != 0.0 && t != held {
            self.stats.probes_deferred += 1;
        }
        t == 0.0
    }

    /// The probe timeout expired: send the oldest token or two again, and the slot request.
    fn probe(&mut self, peer: &Arc<str>, now: f64) {
        self.stats.probe_timeouts += 1;
        if self.path_mut(peer).on_pto() {
            self.stats.congestion_events += 1;
        }
        let mut solo: Option<Vec<u8>> = None;
        let slots: Vec<u64> = self.sr.get(peer).map_or(Vec::new(), |r| r.tokens.keys().take(PROBE_TOKENS).copied().collect());
        if !slots.is_empty() {
            self.resend(peer, &slots, now, false);
            solo = self.sr.get(peer).and_then(|r| r.tokens.get(&slots[0])).map(|t| t.frame.clone());
        }
        if self.sr.get(peer).is_some_and(|r| r.req_out) {
            self.stats.reqslots_retransmits += 1;
            let req = self.request_slots(peer, now);
            if self.sr.get(peer).is_some_and(|r| r.tokens.is_empty()) {
                solo = req;
            }
        }
        if let Some(f) = solo {
            self.solo.push((peer.clone(), f));
            self.stats.probe_copies += 1;
        }
        if let Some(rec) = self.sr.get_mut(peer) {
            rec.last_sent = now;
        }
    }

    /// Send the tokens of `slots` again, flagged RETRANSMIT; their bytes.
    pub(crate) fn resend(&mut self, peer: &Arc<str>, slots: &[u64], now: f64, lost: bool) -> i64 {
        let Some(rec) = self.sr.get_mut(peer) else { return 0 };
        let path = self.paths.get_mut(peer).expect("path of a live record");
        let mut seq = path.seq;
        let mut nbytes = 0i64;
        let mut frames: Vec<Vec<u8>> = Vec::with_capacity(slots.len());
        for &s in slots {
            let Some(tok) = rec.tokens.get_mut(&s) else { continue };
            if tok.tx == 1 {
                rec.first_tx.insert(s, (tok.sent_at, tok.seq, lost));
            }
            nbytes += tok.frame.len() as i64;
            wire::set_retransmit(&mut tok.frame);
            seq += 1;
            tok.sent_at = now;
            tok.tx += 1;
            tok.seq = seq;
            frames.push(tok.frame.clone());
        }
        path.seq = seq;
        self.stats.retransmits += slots.len() as i64;
        for f in frames {
            self.emit(peer, f);
        }
        nbytes
    }

    /// The secure layer installed a session with `peer` (`loaded`: it sent a RETRY;
    /// `handshake_rtt`: its lower bound of the handshake's round trip, 0: none).
    pub fn session_ready(&mut self, peer: &str, now: f64, held: bool, loaded: bool, handshake_rtt: f64) {
        let key: Arc<str> = Arc::from(peer);
        if let Some(path) = self.paths.get_mut(&key) {
            if path.pto_count != 0 {
                path.on_progress();
            }
            if self.cfg.secure {
                if loaded {
                    path.set_loaded();
                }
                path.seed_pto(handshake_rtt);
            }
        }
        let ok = self.sr.get(&key).is_some_and(|r| r.alive && (!r.tokens.is_empty() || r.req_out));
        if ok {
            let rec = self.sr.get_mut(&key).expect("held");
            rec.last_sent = now;
            if held {
                if rec.req_out {
                    rec.req_sent_at = now;
                    let n = rec.req_times.len();
                    rec.req_times = vec![now; n];
                }
                for tok in rec.tokens.values_mut() {
                    tok.sent_at = now;
                }
                if rec.held_probes != 0 && rec.req_out {
                    self.stats.reqslots_retransmits += 1;
                    if let Some(f) = self.request_slots(&key, now) {
                        self.solo.push((key.clone(), f));
                        self.stats.probe_copies += 1;
                    }
                }
            }
            if let Some(rec) = self.sr.get_mut(&key) {
                rec.held_probes = 0;
            }
            let pto = self.paths.get(&key).map_or(0.0, |p| p.pto);
            self.schedule_send(&key, now + pto);
        }
    }

    /// Discard an idle send record, giving back every slot it holds or asked for.
    pub(crate) fn release(&mut self, peer: &Arc<str>, now: f64) {
        let Some(rec) = self.sr.get(peer) else { return };
        let end = rec.sck.max(rec.req_end);
        let revoked = rec.revoked;
        self.clock_advance_to(end);
        self.emit(peer, wire::reqslots(end, 0, end, 0));
        if revoked >= 0 {
            self.emit(peer, wire::revoked(revoked as u64, 0));
        }
        if let Some(mut rec) = self.sr.remove(peer) {
            rec.alive = false;
        }
        self.stats.send_records_discarded += 1;
        if self.closing {
            self.released.insert(peer.clone(), ());
            self.check_closed(now);
        }
    }
}
