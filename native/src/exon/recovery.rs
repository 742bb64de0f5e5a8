//! Loss recovery and congestion control for the path to one peer, without I/O.
//!
//! The twin of `a3m/exon/recovery.py` (`PathRecovery`), which stays the specification: the
//! same fields under the same names, the same methods (the Python's private `_update_pto`,
//! `_end_round`, `_next_phase` and `_set_pacing_rate` without their underscore), the same
//! arithmetic in the same order, so that every result is bit for bit CPython's
//! (`tests/native/test_native_recovery.py` compares the two after every call of long random
//! sequences). The argument and the constants: the Python module and `docs/exon-wire.md`
//! ("Loss recovery").
//!
//! Python's number semantics, kept here:
//!
//! - Python ints are `i64`; an int converted to a float (`int / float`, `int * float`,
//!   `int - float`) rounds to nearest, ties to even, as `as f64` does. `int / int` is the
//!   correctly rounded quotient ([`int_truediv`]: exact beyond 2^53 too, where two `as f64`
//!   conversions would round twice). A comparison of an int with a float is exact
//!   ([`cmp_int_float`]), as Python's is.
//! - `max`/`min` keep the first argument unless a later one is strictly greater (smaller):
//!   with a NaN, Python's, not `f64::max`'s, answer.
//! - `int(x)` of a float truncates toward zero; `a % b` of floats is CPython's `float_rem`
//!   (the sign of the divisor).
//! - Where Python raises (a division by zero, `int()` of an infinity or a NaN, a negative
//!   shift, an index out of range), the `try_` method returns the same exception as a
//!   [`Raise`], the state left exactly as Python leaves it at that point (what ran before the
//!   raise stays done, nothing after it runs); the plain method of the same name stops there
//!   too and returns the value its documentation gives. The protocol never reaches those
//!   points (each `Raise` says why); the differential test drives both twins into them.
//!
//! Beyond Python: its ints have no bound; here counters and sums add with saturation at the
//! `i64` bounds, and `int(x)` of a finite float beyond them saturates (Python would give a
//! larger int). Byte counts and window sizes of a real path stay many orders of magnitude
//! below 2^63; nothing here panics on any input.

use std::cmp::Ordering;

/// Timer granularity: the smallest variance term of a probe timeout (RFC 9002: 1 ms).
pub const GRANULARITY_S: f64 = 0.001;
/// A token is lost once one sent this many transmissions after it is acknowledged.
pub const PACKET_THRESHOLD: i64 = 3;
/// ... or once it is this many (smoothed or latest) RTTs old and a later one is acknowledged.
pub const TIME_THRESHOLD: f64 = 9.0 / 8.0;
/// Spurious retransmissions taken as proof that the path reorders (packet threshold off).
pub const SPURIOUS_FOR_REORDERING: i64 = 3;
/// Most quarters of extra time threshold after spurious retransmissions (up to 4x).
pub const MAX_REORDER_QUARTERS: i64 = 12;
/// Losses declared with no spurious retransmission among them after which the widened time
/// threshold narrows by a quarter (RACK's reo_wnd_persist, RFC 8985 6.2).
pub const LOSSES_TO_NARROW: i64 = 16;
/// Consecutive probe timeouts without any acknowledgement taken as persistent congestion.
pub const PERSISTENT_PTOS: i64 = 3;
/// Before any RTT sample, this many probe timeouts in a row keep the initial timeout.
pub const UNSAMPLED_STEADY_PTOS: i64 = 10;
/// Initial window: min(10 x datagram, max(14720, 2 x datagram)) bytes (RFC 9002, 7.2).
pub const INITIAL_WINDOW_DATAGRAMS: i64 = 10;
/// The least window: 4 datagrams, as BBR's.
pub const MIN_WINDOW_DATAGRAMS: i64 = 4;
/// The bandwidth estimate's decay a round (unpaced).
pub const BW_DECAY: f64 = 0.95;
/// The window is this many bandwidth-delay products (BBR's cwnd gain).
pub const CWND_GAIN: f64 = 2.0;
/// ACK aggregation: an epoch that has acknowledged this many bytes starts again.
pub const ACK_EPOCH_RESET_BYTES: i64 = 1 << 20;
/// A round trip that loses more than this share of what it sent is taken as congestion.
pub const LOSS_TOLERANCE: f64 = 0.15;
/// Pacing gains (BBR's): startup, drain (its inverse), and the cruise cycle.
pub const STARTUP_GAIN: f64 = 2.885;
pub const DRAIN_GAIN: f64 = 1.0 / STARTUP_GAIN;
pub const CYCLE_GAINS: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// Startup ends after this many rounds in a row without the delivery rate growing by a
/// quarter.
pub const FULL_BW_GROWTH: f64 = 1.25;
pub const FULL_BW_ROUNDS: i64 = 3;
/// The pacer's bucket: this much time at the pacing rate, or this many datagrams if more.
pub const PACING_QUANTUM_S: f64 = 0.001;
pub const PACING_QUANTUM_DATAGRAMS: i64 = 4;
/// With pacing, the bandwidth estimate is the largest delivery rate of this many rounds.
pub const BW_WINDOW_ROUNDS: usize = 10;
/// Paced, heavy loss is congestion only while the smoothed RTT is this many least RTTs or more.
pub const QUEUED_RTT: f64 = 1.125;
/// A sender that came back too late for its paced tokens makes the lost time up at this gain.
pub const CATCH_UP_GAIN: f64 = 1.25;
/// Phases of the pacing gain.
pub const STARTUP: i64 = 0;
pub const DRAIN: i64 = 1;
pub const CRUISE: i64 = 2;
/// `float("inf")`.
pub const INF: f64 = f64::INFINITY;

/// The exception the Python twin raises at the same point (class and message as CPython
/// 3.11 words them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raise {
    /// `ZeroDivisionError`.
    ZeroDivision(&'static str),
    /// `ValueError`.
    Value(&'static str),
    /// `OverflowError`.
    Overflow(&'static str),
    /// `IndexError`.
    Index(&'static str),
}

impl Raise {
    /// The Python exception class's name.
    pub fn class_name(&self) -> &'static str {
        match self {
            Raise::ZeroDivision(_) => "ZeroDivisionError",
            Raise::Value(_) => "ValueError",
            Raise::Overflow(_) => "OverflowError",
            Raise::Index(_) => "IndexError",
        }
    }

    /// The exception's message.
    pub fn message(&self) -> &'static str {
        match self {
            Raise::ZeroDivision(m) | Raise::Value(m) | Raise::Overflow(m) | Raise::Index(m) => m,
        }
    }
}

const INT_DIV_ZERO: Raise = Raise::ZeroDivision("division by zero");
const FLOAT_DIV_ZERO: Raise = Raise::ZeroDivision("float division by zero");

// ------------------------------------------------------------------ Python's number rules

/// Python's `a / b` of two ints: the correctly rounded quotient. Within 2^53 both convert
/// exactly and one IEEE division rounds once (CPython's own fast path); beyond, the quotient
/// is rounded from an exact integer division (CPython's `long_true_divide`), never twice.
pub fn int_truediv(a: i128, b: i128) -> Result<f64, Raise> {
    if b == 0 {
        return Err(INT_DIV_ZERO);
    }
    const SMALL: u128 = 1 << 53;
    let (n, d) = (a.unsigned_abs(), b.unsigned_abs());
    if n <= SMALL && d <= SMALL {
        return Ok(a as f64 / b as f64);
    }
    let negative = (a < 0) != (b < 0);
    if n == 0 {
        return Ok(if negative { -0.0 } else { 0.0 });
    }
    // A quotient of 55 or 56 bits: q = floor(n * 2^s / d), the rest sticky.
    let bits = |x: u128| 128 - x.leading_zeros() as i32;
    let s = 55 - (bits(n) - bits(d));
    let (mut q, rem) = if s >= 0 {
        let num = n << s;
        (num / d, num % d)
    } else {
        let den = d << -s;
        (n / den, n % den)
    };
    let r = bits(q) - 53;
    let low = q & ((1u128 << r) - 1);
    let half = 1u128 << (r - 1);
    q >>= r;
    if low > half || (low == half && (rem != 0 || q & 1 == 1)) {
        q += 1;
    }
    // q <= 2^53 is exact as a float; the power of two is a normal float (|r - s| < 200).
    let scale = f64::from_bits(((r - s + 1023) as u64) << 52);
    let v = q as f64 * scale;
    Ok(if negative { -v } else { v })
}

/// Python's comparison of an int with a float: exact (None: the float is a NaN).
pub fn cmp_int_float(n: i64, x: f64) -> Option<Ordering> {
    if x.is_nan() {
        return None;
    }
    let nf = n as f64; // rounded to nearest: the order against any other float is kept
    if nf != x {
        return nf.partial_cmp(&x);
    }
    // x is then an integer of at most 2^63 in magnitude: exact in i128.
    Some((n as i128).cmp(&(x as i128)))
}

fn int_lt_float(n: i64, x: f64) -> bool {
    cmp_int_float(n, x) == Some(Ordering::Less)
}

fn int_le_float(n: i64, x: f64) -> bool {
    matches!(cmp_int_float(n, x), Some(Ordering::Less | Ordering::Equal))
}

fn int_gt_float(n: i64, x: f64) -> bool {
    cmp_int_float(n, x) == Some(Ordering::Greater)
}

/// Python's `int(x)` of a float: toward zero; an infinity or a NaN raises as Python's does;
/// beyond the i64 bounds it saturates (Python's int would be larger).
pub fn py_int(x: f64) -> Result<i64, Raise> {
    if x.is_nan() {
        return Err(Raise::Value("cannot convert float NaN to integer"));
    }
    if x.is_infinite() {
        return Err(Raise::Overflow("cannot convert float infinity to integer"));
    }
    Ok(x as i64) // (toward zero, saturating)
}

/// Python's `x % y` of floats (CPython's `float_rem`: the result has the divisor's sign).
pub fn py_fmod(x: f64, y: f64) -> Result<f64, Raise> {
    if y == 0.0 {
        return Err(Raise::ZeroDivision("float modulo"));
    }
    let mut m = x % y; // C's fmod
    if m != 0.0 {
        if (y < 0.0) != (m < 0.0) {
            m += y;
        }
    } else {
        m = 0.0f64.copysign(y);
    }
    Ok(m)
}

/// Python's `max(a, b)`: `a` unless `b` is strictly greater (a NaN stays where it is).
fn py_max(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

/// Python's `int / float` (the int rounded to a float first); a zero divisor raises.
fn int_div_float(n: i128, x: f64) -> Result<f64, Raise> {
    if x == 0.0 {
        return Err(FLOAT_DIV_ZERO);
    }
    Ok(n as f64 / x)
}

/// A Python int result stored in an i64 field (saturating beyond the bounds).
fn clamp(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

// ------------------------------------------------------------------ the state

/// One value of [`PathRecovery::snapshot`] (the Python dict's value, of the same type).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SnapValue {
    Float(f64),
    Int(i64),
    Bool(bool),
}

impl SnapValue {
    /// As a float (an int converted, a bool 0 or 1).
    pub fn as_f64(self) -> f64 {
        match self {
            SnapValue::Float(v) => v,
            SnapValue::Int(v) => v as f64,
            SnapValue::Bool(v) => f64::from(u8::from(v)),
        }
    }
}

/// RTT, probe timeout, loss thresholds and congestion window of the path to one peer (the
/// twin of the Python `PathRecovery`; the fields are its `__slots__`, in their order).
#[derive(Debug, Clone, PartialEq)]
pub struct PathRecovery {
    pub srtt: f64,
    pub rttvar: f64,
    pub min_rtt: f64,
    pub latest_rtt: f64,
    pub sampled: bool,
    pub initial_pto: f64,
    /// The peer's largest ACK delay (it says so in SLOTS; our own until then).
    pub peer_ack_delay: f64,
    pub pto_count: i64,
    pub pto: f64,
    pub backoff_cap: f64,
    /// Transmission sequence: every token transmission takes the next number.
    pub seq: i64,
    pub largest_acked: i64,
    /// PACKET_THRESHOLD, or "never" (1 << 62) once reordering was seen on the path.
    pub packet_threshold: i64,
    pub reorder_quarters: i64,
    pub spurious: i64,
    pub losses_since_spurious: i64,
    pub mds: i64,
    pub cwnd: i64,
    pub min_window: i64,
    pub inflight: i64,
    pub bw: f64,
    pub round_start: f64,
    pub round_acked: i64,
    pub round_lost: i64,
    pub loss_rate: f64,
    pub congestion_events: i64,
    pub cwnd_tokens: i64,
    pub token_bytes: f64,
    pub epoch_start: f64,
    pub epoch_acked: i64,
    pub extra_acked: f64,
    pub loaded: bool,
    pub pacing_allowed: bool,
    pub pacing: bool,
    pub pacing_rate: f64,
    pub pace_at: f64,
    pub pace_burst_s: f64,
    pub phase: i64,
    pub cycle: i64,
    pub full_bw: f64,
    pub full_bw_rounds: i64,
    /// The sender ran out of queued tokens this round (set by the sender).
    pub app_limited: bool,
    pub bw_samples: Vec<f64>,
    pub sent: i64,
    pub round_sent: i64,
    pub send_rate: f64,
    pub pace_late_s: f64,
    pub pace_wake_at: f64,
    pub pace_owed_s: f64,
}

impl PathRecovery {
    /// The names of the fields, in the order of the Python `__slots__`.
    pub const FIELDS: [&'static str; 49] = [
        "srtt", "rttvar", "min_rtt", "latest_rtt", "sampled", "initial_pto", "peer_ack_delay",
        "pto_count", "pto", "backoff_cap", "seq", "largest_acked", "packet_threshold",
        "reorder_quarters", "spurious", "losses_since_spurious",
        "mds", "cwnd", "min_window", "inflight", "bw", "round_start", "round_acked",
        "round_lost", "loss_rate", "congestion_events", "cwnd_tokens", "token_bytes",
        "epoch_start", "epoch_acked", "extra_acked", "loaded",
        "pacing_allowed", "pacing", "pacing_rate", "pace_at", "pace_burst_s", "phase", "cycle",
        "full_bw", "full_bw_rounds", "app_limited", "bw_samples", "sent", "round_sent",
        "send_rate", "pace_late_s", "pace_wake_at", "pace_owed_s",
    ];

    /// `PathRecovery(initial_pto, peer_ack_delay, backoff_cap, mds, pacing)` (Python's
    /// default for `pacing`: true). Saturates for `mds` beyond 2^61 (Python's ints grow).
    pub fn new(initial_pto: f64, peer_ack_delay: f64, backoff_cap: f64, mds: i64, pacing: bool) -> Self {
        let min_window = clamp(MIN_WINDOW_DATAGRAMS as i128 * mds as i128);
        let initial = INITIAL_WINDOW_DATAGRAMS as i128 * mds as i128;
        let floor = if (min_window as i128) > 14720 { min_window as i128 } else { 14720 };
        let cwnd = clamp(if floor < initial { floor } else { initial });
        let mut r = PathRecovery {
            srtt: 0.0,
            rttvar: 0.0,
            min_rtt: INF,
            latest_rtt: 0.0,
            sampled: false,
            initial_pto,
            peer_ack_delay,
            pto_count: 0,
            pto: initial_pto,
            backoff_cap,
            seq: 0,
            largest_acked: -1,
            packet_threshold: PACKET_THRESHOLD,
            reorder_quarters: 0,
            spurious: 0,
            losses_since_spurious: 0,
            mds,
            cwnd,
            min_window,
            inflight: 0,
            bw: 0.0,
            round_start: -1.0,
            round_acked: 0,
            round_lost: 0,
            loss_rate: 0.0,
            congestion_events: 0,
            cwnd_tokens: 0,
            token_bytes: 64.0,
            epoch_start: 0.0,
            epoch_acked: 0,
            extra_acked: 0.0,
            loaded: false,
            pacing_allowed: pacing,
            pacing: false,
            pacing_rate: 0.0,
            pace_at: 0.0,
            pace_burst_s: PACING_QUANTUM_S,
            phase: STARTUP,
            cycle: 0,
            full_bw: 0.0,
            full_bw_rounds: 0,
            app_limited: false,
            bw_samples: Vec::new(),
            sent: 0,
            round_sent: 0,
            send_rate: 0.0,
            pace_late_s: 0.0,
            pace_wake_at: 0.0,
            pace_owed_s: 0.0,
        };
        r.update_pto(); // (pto_count 0: cannot raise)
        r
    }

    // -------------------------------------------------------------- RTT and timeouts

    /// The probe timeout without back-off.
    pub fn base_pto(&self) -> f64 {
        if !self.sampled {
            return self.initial_pto;
        }
        self.srtt + py_max(4.0 * self.rttvar, GRANULARITY_S) + self.peer_ack_delay
    }

    /// Python's `_update_pto`. Raises (`1 << n`, n < 0: ValueError) only when `pto_count` was
    /// set below 0 (the sender sets it to 0; `on_pto` counts up): `pto` is then unchanged.
    pub fn try_update_pto(&mut self) -> Result<(), Raise> {
        let base = self.base_pto();
        let mut n = self.pto_count;
        if !self.sampled && !self.loaded {
            n = if n > UNSAMPLED_STEADY_PTOS { n - UNSAMPLED_STEADY_PTOS } else { 0 };
        }
        let t = if n < 16 {
            if n < 0 {
                return Err(Raise::Value("negative shift count"));
            }
            base * (1i64 << n) as f64
        } else {
            self.backoff_cap
        };
        self.pto = if t < self.backoff_cap { t } else { py_max(self.backoff_cap, base) };
        Ok(())
    }

    /// Python's `_update_pto` (see [`Self::try_update_pto`]).
    pub fn update_pto(&mut self) {
        let _ = self.try_update_pto();
    }

    /// A round trip measured without ambiguity. Raises only where `try_update_pto` or
    /// `try_set_pacing_rate` do (states the protocol never makes).
    pub fn try_on_rtt_sample(&mut self, sample: f64) -> Result<(), Raise> {
        if sample < 0.0 {
            return Ok(());
        }
        self.latest_rtt = sample;
        if sample < self.min_rtt {
            self.min_rtt = sample;
        }
        if !self.sampled {
            self.sampled = true;
            self.srtt = sample;
            self.rttvar = sample / 2.0;
        } else {
            self.rttvar = 0.75 * self.rttvar + 0.25 * (self.srtt - sample).abs();
            self.srtt = 0.875 * self.srtt + 0.125 * sample;
        }
        self.try_update_pto()?;
        if self.pacing_allowed {
            self.pacing = self.min_rtt >= PACING_QUANTUM_S;
            self.try_set_pacing_rate()?;
        }
        Ok(())
    }

    /// A round trip measured without ambiguity (a first transmission answered).
    pub fn on_rtt_sample(&mut self, sample: f64) {
        let _ = self.try_on_rtt_sample(sample);
    }

    /// The peer's largest ACK delay. Raises only where `try_update_pto` does.
    pub fn try_set_peer_ack_delay(&mut self, delay: f64) -> Result<(), Raise> {
        if delay != self.peer_ack_delay {
            self.peer_ack_delay = delay;
            self.try_update_pto()?;
        }
        Ok(())
    }

    pub fn set_peer_ack_delay(&mut self, delay: f64) {
        let _ = self.try_set_peer_ack_delay(delay);
    }

    /// Something was acknowledged (or answered): the back-off ends. (Never raises:
    /// `pto_count` is 0 when `update_pto` runs.)
    pub fn on_progress(&mut self) {
        if self.pto_count != 0 {
            self.pto_count = 0;
            self.update_pto();
        }
    }

    /// Before any sample: the handshake's round trip raises the probe timeout (never below
    /// the initial guess). Raises only where `try_update_pto` does.
    pub fn try_seed_pto(&mut self, handshake_rtt: f64) -> Result<(), Raise> {
        if self.sampled || handshake_rtt <= 0.0 {
            return Ok(());
        }
        let seeded = 3.0 * handshake_rtt + self.peer_ack_delay;
        if seeded > self.initial_pto {
            self.initial_pto = seeded;
            self.try_update_pto()?;
        }
        Ok(())
    }

    pub fn seed_pto(&mut self, handshake_rtt: f64) {
        let _ = self.try_seed_pto(handshake_rtt);
    }

    /// The peer is loaded (a RETRY in the handshake). Raises only where `try_update_pto`
    /// does.
    pub fn try_set_loaded(&mut self) -> Result<(), Raise> {
        if !self.loaded {
            self.loaded = true;
            self.try_update_pto()?;
        }
        Ok(())
    }

    pub fn set_loaded(&mut self) {
        let _ = self.try_set_loaded();
    }

    /// The probe timeout expired; true on persistent congestion. Raises only where
    /// `try_update_pto` or `try_set_pacing_rate` do.
    pub fn try_on_pto(&mut self) -> Result<bool, Raise> {
        self.pto_count = self.pto_count.saturating_add(1);
        self.try_update_pto()?;
        if self.pto_count == PERSISTENT_PTOS {
            self.cwnd = self.min_window;
            self.cwnd_tokens = 0;
            self.bw = 0.0; // the model starts again from the minimum window
            self.bw_samples.clear();
            self.extra_acked = 0.0;
            self.round_start = -1.0;
            self.round_acked = 0;
            self.round_lost = 0;
            self.congestion_events = self.congestion_events.saturating_add(1);
            self.phase = STARTUP;
            self.full_bw = 0.0;
            self.full_bw_rounds = 0;
            if self.pacing {
                self.try_set_pacing_rate()?;
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// The probe timeout expired; true on persistent congestion (where the Python twin
    /// would raise: whether `pto_count` reached PERSISTENT_PTOS).
    pub fn on_pto(&mut self) -> bool {
        match self.try_on_pto() {
            Ok(v) => v,
            Err(_) => self.pto_count == PERSISTENT_PTOS,
        }
    }

    /// A first transmission was acknowledged after a later one: the path reorders.
    pub fn on_reordering(&mut self) {
        self.packet_threshold = 1 << 62;
    }

    /// A retransmission turned out needless (the first copy was only late).
    pub fn on_spurious(&mut self) {
        self.spurious = self.spurious.saturating_add(1);
        self.losses_since_spurious = 0;
        if self.spurious >= SPURIOUS_FOR_REORDERING {
            self.packet_threshold = 1 << 62;
        }
        if self.reorder_quarters < MAX_REORDER_QUARTERS {
            self.reorder_quarters += 1;
        }
    }

    /// How old a token must be, with a later one acknowledged, to be taken as lost.
    pub fn loss_delay(&self) -> f64 {
        let mut rtt = if self.sampled { self.srtt } else { self.initial_pto };
        if self.latest_rtt > rtt {
            rtt = self.latest_rtt;
        }
        // (int / 4: never raises)
        let quarters = int_truediv(self.reorder_quarters as i128, 4).unwrap_or(0.0);
        let d = TIME_THRESHOLD * rtt * (1.0 + quarters);
        if d > GRANULARITY_S {
            d
        } else {
            GRANULARITY_S
        }
    }

    // -------------------------------------------------------------- congestion

    /// Tokens left flight without an acknowledgement (voided, abandoned, dropped).
    pub fn on_removed_bytes(&mut self, nbytes: i64) {
        self.inflight = self.inflight.saturating_sub(nbytes);
        if self.inflight < 0 {
            self.inflight = 0;
        }
    }

    /// `nbytes` of `ntokens` tokens were acknowledged at `now`. Raises:
    ///
    /// - `ntokens == 0` (ZeroDivisionError, before any change): the protocol passes the
    ///   tokens it counted, at least 1;
    /// - where `try_end_round` does: a round that acknowledged and lost 0 bytes, which the
    ///   protocol never reports (each token acknowledged carries its frame's bytes, > 0).
    pub fn try_on_acked(&mut self, nbytes: i64, now: f64, ntokens: i64) -> Result<(), Raise> {
        let per_token = int_truediv(nbytes as i128, ntokens as i128)?;
        self.token_bytes += 0.125 * (per_token - self.token_bytes);
        self.inflight = if self.inflight > nbytes { self.inflight.saturating_sub(nbytes) } else { 0 };
        self.round_acked = self.round_acked.saturating_add(nbytes);
        let bw = self.bw;
        if bw > 0.0 {
            // ACK aggregation (BBR's extra_acked).
            let mut expected = bw * (now - self.epoch_start);
            let mut acked = self.epoch_acked;
            if int_le_float(acked, expected)
                || acked as i128 + nbytes as i128 >= ACK_EPOCH_RESET_BYTES as i128
            {
                self.epoch_start = now; // the ACK rate fell to the delivery rate: new epoch
                acked = 0;
                expected = 0.0;
            }
            acked = acked.saturating_add(nbytes);
            self.epoch_acked = acked;
            let mut extra: f64 = acked as f64 - expected;
            if int_lt_float(self.cwnd, extra) {
                // (extra > cwnd)
                extra = self.cwnd as f64;
            }
            if extra > self.extra_acked {
                self.extra_acked = extra;
            }
        }
        if self.round_start < 0.0 {
            self.round_start = now;
            return Ok(()); // the round's clock starts at its first acknowledgement
        }
        let span = now - self.round_start;
        if span >= (if self.srtt > GRANULARITY_S { self.srtt } else { GRANULARITY_S }) {
            self.try_end_round(span, now)?;
        }
        Ok(())
    }

    /// `nbytes` of `ntokens` tokens were acknowledged at `now` (see [`Self::try_on_acked`]
    /// for where the Python twin raises: this stops there, in the same state).
    pub fn on_acked(&mut self, nbytes: i64, now: f64, ntokens: i64) {
        let _ = self.try_on_acked(nbytes, now, ntokens);
    }

    /// Python's `_end_round`: a round trip of acknowledgements. Raises:
    ///
    /// - `span == 0` (ZeroDivisionError, before any change): `on_acked` calls it with a span
    ///   of a millisecond or more;
    /// - `round_lost + round_acked == 0` (ZeroDivisionError, after the rate sample): a round
    ///   with nothing acknowledged (only 0-byte acknowledgements), which the protocol never
    ///   reports;
    /// - `int()` of an infinite or NaN window (OverflowError, ValueError): a `min_rtt` or a
    ///   rate near the float range's end, or `token_bytes` 0 (ZeroDivisionError) or
    ///   vanishing (below ~1e-290: hundreds of 0-byte acknowledgements): none reachable
    ///   from the protocol's values;
    /// - where `try_set_pacing_rate` does.
    pub fn try_end_round(&mut self, span: f64, now: f64) -> Result<(), Raise> {
        let mut rate = int_div_float(self.round_acked as i128, span)?;
        let pacing = self.pacing;
        let app_limited = pacing && self.app_limited;
        if !pacing {
            let decayed = self.bw * BW_DECAY;
            self.bw = if rate > decayed { rate } else { decayed };
        } else {
            // Never more than was sent a round before (what these ACKs answer).
            let bound = self.send_rate;
            self.send_rate = int_div_float(self.sent as i128 - self.round_sent as i128, span)?;
            self.round_sent = self.sent;
            if rate > bound && bound > 0.0 {
                rate = bound;
            }
            if !app_limited || rate > self.bw {
                // (an application-limited round only raises the estimate: BBR's rule)
                let samples = &mut self.bw_samples;
                samples.push(rate);
                if samples.len() > BW_WINDOW_ROUNDS {
                    samples.remove(0);
                }
                let mut best = samples[0];
                for &v in &samples[1..] {
                    best = py_max(best, v);
                }
                self.bw = best;
            }
        }
        self.extra_acked *= BW_DECAY;
        let (lost, acked) = (self.round_lost, self.round_acked);
        let total = lost as i128 + acked as i128;
        self.loss_rate += 0.125 * (int_truediv(lost as i128, total)? - self.loss_rate);
        let heavy = int_gt_float(lost, LOSS_TOLERANCE * total as f64);
        if self.loss_rate > LOSS_TOLERANCE && heavy && (!pacing || self.srtt > QUEUED_RTT * self.min_rtt) {
            // More loss, over several rounds, than a lossy link explains: congestion.
            if pacing && self.phase <= DRAIN {
                self.phase = DRAIN; // startup found the limit: drain, do not halve
            } else {
                self.bw *= 0.5;
                if pacing {
                    self.bw_samples.clear();
                    self.bw_samples.push(self.bw);
                }
            }
            self.loss_rate = 0.0;
            self.congestion_events = self.congestion_events.saturating_add(1);
        }
        self.round_start = now;
        self.round_acked = 0;
        self.round_lost = 0;
        self.app_limited = false;
        if self.bw > 0.0 && self.min_rtt != INF {
            let model = py_int(CWND_GAIN * self.bw * self.min_rtt + self.extra_acked)?;
            self.cwnd = if model > self.min_window { model } else { self.min_window };
            self.cwnd_tokens = py_int(int_div_float(self.cwnd as i128, self.token_bytes)?)?;
        }
        if pacing {
            self.next_phase(app_limited, heavy);
            self.try_set_pacing_rate()?;
        }
        Ok(())
    }

    /// Python's `_end_round` (see [`Self::try_end_round`]).
    pub fn end_round(&mut self, span: f64, now: f64) {
        let _ = self.try_end_round(span, now);
    }

    // -------------------------------------------------------------- pacing

    /// Python's `_next_phase`: at the end of a round, the pacing phase moves on.
    pub fn next_phase(&mut self, app_limited: bool, heavy_loss: bool) {
        if self.phase == STARTUP {
            if self.bw >= FULL_BW_GROWTH * self.full_bw {
                self.full_bw = self.bw; // (growth counts even in an application-limited round)
                self.full_bw_rounds = 0;
            } else if heavy_loss {
                self.phase = DRAIN;
            } else if !app_limited {
                self.full_bw_rounds = self.full_bw_rounds.saturating_add(1);
                if self.full_bw_rounds >= FULL_BW_ROUNDS {
                    self.phase = DRAIN;
                }
            }
        }
        if self.phase == DRAIN {
            if int_le_float(self.inflight, self.bw * self.min_rtt) {
                self.phase = CRUISE;
                self.cycle = 2; // (cruise first: the drain just emptied the queue)
            }
        } else if self.phase == CRUISE {
            self.cycle = ((self.cycle as i128 + 1).rem_euclid(CYCLE_GAINS.len() as i128)) as i64;
        }
    }

    /// Python's `_set_pacing_rate`: the pacing rate from the model and the phase (0: not
    /// paced). Raises, before any change, only on states the protocol never makes: `srtt` 0
    /// while pacing (ZeroDivisionError: pacing needs a least RTT of a millisecond or more,
    /// and the smoothed RTT is a mean of such samples), `cycle` outside -8..8 (IndexError:
    /// it is 2 or moves on modulo 8).
    pub fn try_set_pacing_rate(&mut self) -> Result<(), Raise> {
        let mut rate;
        if !self.pacing {
            rate = 0.0; // no RTT yet, or a path whose whole window fits in one quantum
        } else {
            let phase = self.phase;
            let gain = if phase == STARTUP {
                STARTUP_GAIN
            } else if phase == DRAIN {
                DRAIN_GAIN
            } else {
                let n = CYCLE_GAINS.len() as i64;
                let i = self.cycle;
                if !(-n..n).contains(&i) {
                    return Err(Raise::Index("tuple index out of range"));
                }
                CYCLE_GAINS[if i < 0 { i + n } else { i } as usize]
            };
            rate = gain * self.bw;
            if phase == STARTUP {
                // At least the window per smoothed RTT (the rate estimate lags a round).
                let floor = int_div_float(self.cwnd as i128, self.srtt)?;
                if floor > rate {
                    rate = floor;
                }
            }
            let floor = int_div_float(self.min_window as i128, self.srtt)?; // never slower
            if floor > rate {
                rate = floor;
            }
        }
        if rate <= 0.0 {
            self.pacing_rate = 0.0;
            self.pace_at = 0.0; // nothing held back
            return Ok(());
        }
        self.pacing_rate = rate;
        // (rate > 0 or NaN here: the division cannot raise)
        let burst = (PACING_QUANTUM_DATAGRAMS as i128 * self.mds as i128) as f64 / rate;
        self.pace_burst_s = if burst > PACING_QUANTUM_S { burst } else { PACING_QUANTUM_S };
        Ok(())
    }

    /// Python's `_set_pacing_rate` (see [`Self::try_set_pacing_rate`]).
    pub fn set_pacing_rate(&mut self) {
        let _ = self.try_set_pacing_rate();
    }

    /// Bytes of new tokens the pacer lets leave at `now`: the whole datagrams (of `unit`
    /// bytes) its bucket holds (0: wait until `pace_wake`); unbounded (infinity) when not
    /// paced. Raises only for `unit == 0` with a credit of 0 or more (ZeroDivisionError
    /// "float modulo", after the wake-up bookkeeping): the protocol's unit is a datagram's
    /// frames, never 0.
    pub fn try_pace_allowance(&mut self, now: f64, unit: i64) -> Result<f64, Raise> {
        let rate = self.pacing_rate;
        if rate == 0.0 {
            return Ok(INF);
        }
        let floor = now - self.pace_burst_s;
        let at = self.pace_at;
        if self.pace_wake_at != 0.0 {
            self.pace_wake_at = 0.0;
            if at < floor {
                // The sender came back too late: what overflowed the full bucket is made up
                // at CATCH_UP_GAIN x the rate, up to a quarter of a round trip of it.
                let over = floor - at;
                self.pace_late_s += over;
                let owed = self.pace_owed_s + over;
                let cap = 0.25 * self.srtt;
                self.pace_owed_s = if owed < cap { owed } else { cap };
            }
        }
        let credit = (now - (if at > floor { at } else { floor })) * rate;
        if int_le_float(unit, credit) {
            // (credit >= unit)
            Ok(credit - py_fmod(credit, unit as f64)?)
        } else {
            Ok(0.0)
        }
    }

    /// Bytes of new tokens the pacer lets leave at `now` (see [`Self::try_pace_allowance`];
    /// where the Python twin raises: 0).
    pub fn pace_allowance(&mut self, now: f64, unit: i64) -> f64 {
        self.try_pace_allowance(now, unit).unwrap_or(0.0)
    }

    /// `nbytes` of new tokens left at `now`: the bucket pays for them.
    pub fn paced(&mut self, nbytes: i64, now: f64) {
        let rate = self.pacing_rate;
        if rate != 0.0 {
            self.sent = self.sent.saturating_add(nbytes);
            let floor = now - self.pace_burst_s;
            let at = self.pace_at;
            let mut t = nbytes as f64 / rate;
            let owed = self.pace_owed_s;
            if owed > 0.0 {
                // catching up (pace_allowance): the bucket pays 1/CATCH_UP_GAIN
                let mut saved = t * (1.0 - 1.0 / CATCH_UP_GAIN);
                if saved > owed {
                    saved = owed;
                }
                self.pace_owed_s = owed - saved;
                t -= saved;
            }
            self.pace_at = (if at > floor { at } else { floor }) + t;
        }
    }

    /// When a sender the pacer held back comes back: once the bucket holds half a quantum.
    pub fn pace_wake(&mut self) -> f64 {
        let t = self.pace_at + 0.5 * self.pace_burst_s;
        self.pace_wake_at = t;
        t
    }

    /// `nbytes` of tokens were declared lost (they are sent again at once).
    pub fn on_lost(&mut self, nbytes: i64) {
        self.round_lost = self.round_lost.saturating_add(nbytes);
        self.sent = self.sent.saturating_add(nbytes); // (sent again at once, unpaced)
        if self.pacing_rate != 0.0 {
            self.pace_at += nbytes as f64 / self.pacing_rate;
        }
        if self.reorder_quarters != 0 {
            self.losses_since_spurious = self.losses_since_spurious.saturating_add(1);
            if self.losses_since_spurious >= LOSSES_TO_NARROW {
                self.losses_since_spurious = 0;
                self.reorder_quarters = self.reorder_quarters.saturating_sub(1);
            }
        }
    }

    /// Diagnostics (seconds, bytes, bytes/s): the Python dict's keys, order and value types.
    pub fn snapshot(&self) -> Vec<(&'static str, SnapValue)> {
        use SnapValue::{Bool, Float, Int};
        vec![
            ("srtt_s", Float(self.srtt)),
            ("rttvar_s", Float(self.rttvar)),
            ("min_rtt_s", Float(if self.min_rtt != INF { self.min_rtt } else { 0.0 })),
            ("pto_s", Float(self.pto)),
            ("pto_count", Int(self.pto_count)),
            ("cwnd", Int(self.cwnd)),
            ("inflight", Int(self.inflight)),
            ("bandwidth_Bps", Float(self.bw)),
            ("extra_acked", Float(self.extra_acked)),
            ("peer_ack_delay_s", Float(self.peer_ack_delay)),
            ("spurious", Int(self.spurious)),
            ("reordering", Bool(self.packet_threshold != PACKET_THRESHOLD)),
            ("time_threshold_quarters", Int(self.reorder_quarters)),
            ("loss_rate", Float(self.loss_rate)),
            ("congestion_events", Int(self.congestion_events)),
            ("pacing_Bps", Float(self.pacing_rate)),
            ("pacing_phase", Int(self.phase)),
            ("pacing_late_s", Float(self.pace_late_s)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values: the Python twin's (`a3m.exon.recovery`, CPython 3.11), as `repr`
    // prints them (a float's repr reads back to the same double).

    fn path(pacing: bool) -> PathRecovery {
        PathRecovery::new(0.2, 0.025, 60.0, 1400, pacing)
    }

    #[test]
    fn initial_state() {
        let r = path(true);
        assert_eq!((r.cwnd, r.min_window, r.pto, r.largest_acked), (14000, 5600, 0.2, -1));
        assert_eq!(r.min_rtt, INF);
        assert_eq!(r.packet_threshold, PACKET_THRESHOLD);
        assert_eq!(PathRecovery::FIELDS.len(), 49);
        // The constants Python computes at import.
        assert_eq!(DRAIN_GAIN, 0.3466204506065858);
        assert_eq!(1.0 - 1.0 / CATCH_UP_GAIN, 0.19999999999999996);
        assert_eq!(TIME_THRESHOLD, 1.125);
    }

    #[test]
    fn unsampled_backoff_and_persistent_congestion() {
        let mut r = path(true);
        let got: Vec<(bool, f64)> = (0..13).map(|_| (r.on_pto(), r.pto)).collect();
        let mut want = vec![(false, 0.2); 13];
        want[2].0 = true; // the third expiry in a row
        want[10].1 = 0.4;
        want[11].1 = 0.8;
        want[12].1 = 1.6;
        assert_eq!(got, want);
        assert_eq!(r.cwnd, r.min_window);
        assert_eq!(r.congestion_events, 1);
        r.on_progress();
        assert_eq!((r.pto_count, r.pto), (0, 0.2));
        // A loaded peer: the back-off doubles from the first expiry.
        let mut r = path(true);
        r.set_loaded();
        r.on_pto();
        assert_eq!(r.pto, 0.4);
    }

    #[test]
    fn paced_path_reaches_cruise() {
        let mut r = path(true);
        let mut now = 1.0;
        r.on_rtt_sample(0.02);
        assert_eq!((r.srtt, r.rttvar, r.pto), (0.02, 0.01, 0.08499999999999999));
        assert!(r.pacing);
        assert_eq!((r.pacing_rate, r.pace_burst_s), (700000.0, 0.008));
        for i in 0..60i64 {
            now += 0.002;
            r.inflight += 2800;
            r.seq += 2;
            if r.pace_allowance(now, 1420) != 0.0 {
                r.paced(2800, now);
            }
            if i % 7 == 3 {
                r.on_lost(1400);
            }
            r.on_acked(2800 + 28 * i, now, 2);
            if i % 5 == 0 {
                r.on_rtt_sample(0.02 + 0.0001 * i as f64);
            }
        }
        assert_eq!(r.srtt, 0.022805668952001718);
        assert_eq!(r.rttvar, 0.002832131024333653);
        assert_eq!(r.pto, 0.059134193049336335);
        assert_eq!(r.bw, 1611272.727272726);
        assert_eq!((r.cwnd, r.cwnd_tokens), (90315, 43));
        assert_eq!(r.token_bytes, 2127.5942443283107);
        assert_eq!(r.pacing_rate, 1611272.727272726);
        assert_eq!(r.pace_at, 1.11913112164297);
        assert_eq!(r.pace_burst_s, 0.0034755134281200663);
        assert_eq!((r.phase, r.cycle), (CRUISE, 3));
        assert_eq!(r.loss_rate, 0.02486370524643785);
        assert_eq!(r.congestion_events, 0);
        assert_eq!(r.extra_acked, 30830.54545454544);
        assert_eq!((r.epoch_acked, r.epoch_start), (169400, 1.034));
        assert_eq!((r.sent, r.round_sent), (163800, 154000));
        assert_eq!(r.send_rate, 1516666.6666666653);
        assert_eq!(
            r.bw_samples,
            vec![1611272.727272726, 890909.0909090901, 1463636.3636363624, 1527272.727272726, 1463636.3636363624]
        );
        assert_eq!((r.full_bw, r.full_bw_rounds), (1611272.727272726, 3));
        assert_eq!((r.inflight, r.round_start, r.round_acked, r.round_lost), (0, 1.114, 13272, 1400));
        assert_eq!(r.loss_delay(), 0.0286875);
    }

    #[test]
    fn unpaced_short_path() {
        let mut r = path(false);
        let mut now = 5.0;
        for i in 0..40 {
            now += 0.0003;
            r.on_rtt_sample(0.0004 + 0.00001 * (i % 3) as f64);
            r.inflight += 5000;
            r.on_acked(4000, now, 3);
            if i % 9 == 8 {
                r.on_lost(3000);
            }
        }
        assert_eq!(r.srtt, 0.0004094744773478375);
        assert_eq!(r.bw, 13333333.333324933);
        assert_eq!((r.cwnd, r.cwnd_tokens), (14466, 10));
        assert_eq!(r.token_bytes, 1327.2534141585884);
        assert_eq!(r.loss_rate, 0.05527503866898386);
        assert_eq!(r.extra_acked, 4000.0);
        assert!(!r.pacing);
        assert_eq!((r.pacing_rate, r.inflight), (0.0, 40000));
    }

    #[test]
    fn raises_where_python_does() {
        let mut r = path(true);
        r.on_rtt_sample(0.02);
        let before = r.clone();
        assert_eq!(r.try_on_acked(100, 1.0, 0), Err(INT_DIV_ZERO));
        assert_eq!(r, before); // (raised before any change)
        // A round of 0-byte acknowledgements: 0 / 0 after the rate sample.
        r.on_acked(0, 1.0, 1);
        let e = r.try_on_acked(0, 2.0, 1);
        assert_eq!(e, Err(INT_DIV_ZERO));
        assert_eq!(r.bw_samples, vec![0.0]);
        assert_eq!(r.round_start, 1.0); // (not reached)
        assert_eq!(r.try_end_round(0.0, 3.0), Err(FLOAT_DIV_ZERO));
        // unit 0: float modulo, after the wake-up bookkeeping.
        let mut r = path(true);
        r.on_rtt_sample(0.02);
        r.pace_wake();
        assert_eq!(r.try_pace_allowance(5.0, 0), Err(Raise::ZeroDivision("float modulo")));
        assert_eq!(r.pace_wake_at, 0.0);
        assert!(r.pace_late_s > 0.0);
        assert_eq!(r.pace_allowance(5.0, 0), 0.0);
        // States only a direct write makes.
        let mut r = path(true);
        r.set_loaded();
        r.pto_count = -1;
        assert_eq!(r.try_update_pto().unwrap_err().class_name(), "ValueError");
        assert_eq!(r.try_on_rtt_sample(0.02).unwrap_err().class_name(), "ValueError");
        assert!(r.sampled && !r.pacing); // (stopped at the raise, before pacing)
        r.pto_count = 0;
        r.on_rtt_sample(0.02);
        assert!(r.pacing);
        r.srtt = 0.0;
        assert_eq!(r.try_set_pacing_rate(), Err(FLOAT_DIV_ZERO));
        r.srtt = 0.02;
        r.phase = CRUISE;
        r.cycle = -1;
        assert_eq!(r.try_set_pacing_rate(), Ok(()));
        r.cycle = 8;
        assert_eq!(r.try_set_pacing_rate().unwrap_err().class_name(), "IndexError");
    }

    #[test]
    fn extreme_inputs_never_panic() {
        // (a debug build checks every integer operation for overflow)
        let ints = [i64::MIN, i64::MIN + 1, -1, 0, 1, 1 << 53, i64::MAX - 1, i64::MAX];
        let floats = [f64::NAN, INF, -INF, 0.0, -0.0, 5e-324, 1e-300, 1e300, f64::MAX, -1.0];
        for (k, &n) in ints.iter().enumerate() {
            for (j, &x) in floats.iter().enumerate() {
                for pacing in [false, true] {
                    let mut r = PathRecovery::new(x, x, x, n, pacing);
                    let m = ints[(k + j) % ints.len()];
                    let y = floats[(k + 3 * j + 1) % floats.len()];
                    r.pto_count = m;
                    r.cycle = m;
                    r.reorder_quarters = m;
                    r.inflight = m;
                    r.sent = n;
                    r.round_sent = m;
                    r.round_acked = m;
                    r.round_lost = n;
                    r.epoch_acked = m;
                    r.losses_since_spurious = m;
                    r.full_bw_rounds = m;
                    r.congestion_events = m;
                    r.spurious = m;
                    r.on_rtt_sample(y);
                    r.on_rtt_sample(0.01);
                    r.set_peer_ack_delay(y);
                    r.seed_pto(y);
                    r.set_loaded();
                    r.bw = y;
                    r.phase = m;
                    r.on_acked(n, y, m);
                    r.on_acked(m, x, n);
                    r.end_round(y, x);
                    r.next_phase(pacing, !pacing);
                    r.set_pacing_rate();
                    r.pace_wake();
                    r.pace_allowance(y, n);
                    r.pace_allowance(x, m);
                    r.paced(n, y);
                    r.paced(m, x);
                    r.on_lost(n);
                    r.on_lost(m);
                    r.on_removed_bytes(n);
                    r.on_removed_bytes(m);
                    r.on_pto();
                    r.on_pto();
                    r.on_progress();
                    r.on_spurious();
                    r.on_reordering();
                    let _ = (r.base_pto(), r.loss_delay(), r.snapshot());
                    let mut p = crate::exon::pacer::FirstProbePacer::new(x, y);
                    p.deferred = m;
                    p.slot(y);
                    p.admit(x, y, x);
                }
            }
        }
        for a in ints {
            for b in ints {
                let _ = int_truediv(a as i128, b as i128);
                let _ = int_truediv(a as i128 + b as i128, (a as i128) - (b as i128));
            }
        }
    }

    #[test]
    fn python_numbers() {
        let p53 = 1i128 << 53;
        let m = i64::MAX as i128;
        let cases: [(i128, i128, f64); 9] = [
            (p53 + 1, 1, 9007199254740992.0),
            (p53 + 3, 1, 9007199254740996.0),
            (m, 3, 3.0744573456182584e+18),
            (m, -(1i128 << 62) - 12345, -1.9999999999999947),
            (i64::MIN as i128, 7, -1.3176245766935393e+18),
            (123456789012345678, 98765432109876543, 1.249999988609375),
            (1, (1i128 << 60) + 1, 8.673617379884035e-19),
            (0, -(1i128 << 60), -0.0),
            ((1i128 << 64) - 5, 3, 6.148914691236517e+18),
        ];
        for (a, b, want) in cases {
            let got = int_truediv(a, b).unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "{a} / {b}");
        }
        assert_eq!(int_truediv(7, 0), Err(INT_DIV_ZERO));
        assert_eq!(cmp_int_float((1 << 53) + 1, 9007199254740992.0), Some(Ordering::Greater));
        assert_eq!(cmp_int_float(i64::MAX, 9223372036854775808.0), Some(Ordering::Less));
        assert_eq!(cmp_int_float(i64::MIN, -9223372036854775808.0), Some(Ordering::Equal));
        assert_eq!(cmp_int_float(3, 2.5), Some(Ordering::Greater));
        assert_eq!(cmp_int_float(3, f64::NAN), None);
        assert_eq!(cmp_int_float(3, -INF), Some(Ordering::Greater));
        assert_eq!(py_int(-2.9), Ok(-2));
        assert_eq!(py_int(1e300), Ok(i64::MAX));
        assert_eq!(py_int(INF).unwrap_err().class_name(), "OverflowError");
        assert_eq!(py_int(f64::NAN).unwrap_err().class_name(), "ValueError");
        assert_eq!(py_fmod(7.5, 2.0), Ok(1.5));
        assert_eq!(py_fmod(-7.5, 2.0), Ok(0.5));
        assert_eq!(py_fmod(7.5, -2.0), Ok(-0.5));
        assert_eq!(py_fmod(-4.0, 2.0).map(f64::to_bits), Ok(0.0f64.to_bits()));
        assert_eq!(py_fmod(4.0, -2.0).map(f64::to_bits), Ok((-0.0f64).to_bits()));
        assert!(py_fmod(INF, 3.0).unwrap().is_nan());
        assert!(py_max(f64::NAN, 1.0).is_nan());
        assert_eq!(py_max(1.0, f64::NAN), 1.0);
    }
}
