//! A node-wide pace for the probes of first exchanges (`FirstProbePacer`).
//!
//! The twin of `a3m/exon/pacer.py`, which stays the specification: the same fields, methods
//! and arithmetic (`tests/native/test_native_recovery.py` compares the two after every call).
//! Before a round trip to a peer is measured, a node that starts thousands of first exchanges
//! at once gives every probe a slot of one node-wide schedule, `rate` a second after a burst.
//! Nothing here raises or panics, on any input.

/// Probes of first exchanges a second, in all, when the config does not say.
pub const FIRST_PROBE_RATE: f64 = 200.0;
/// The schedule may lag this long behind the present (the burst: rate x this many probes).
pub const FIRST_PROBE_BURST_S: f64 = 0.1;

/// Slots for the probes of first exchanges, `rate` a second after a burst of
/// `rate * burst_s` (a reservation schedule: O(1) a probe, no queue). `rate` 0: no pace.
#[derive(Debug, Clone, PartialEq)]
pub struct FirstProbePacer {
    pub interval: f64,
    pub burst_s: f64,
    /// The next free slot of the schedule.
    pub free_at: f64,
    /// Probes given a slot later than asked (diagnostics).
    pub deferred: i64,
}

impl Default for FirstProbePacer {
    /// `FirstProbePacer()`: the Python defaults.
    fn default() -> Self {
        FirstProbePacer::new(FIRST_PROBE_RATE, FIRST_PROBE_BURST_S)
    }
}

impl FirstProbePacer {
    /// The names of the fields, in the order of the Python `__slots__`.
    pub const FIELDS: [&'static str; 4] = ["interval", "burst_s", "free_at", "deferred"];

    /// `FirstProbePacer(rate, burst_s)`.
    pub fn new(rate: f64, burst_s: f64) -> Self {
        FirstProbePacer {
            interval: if rate > 0.0 { 1.0 / rate } else { 0.0 },
            burst_s,
            free_at: -1e18,
            deferred: 0,
        }
    }

    /// Reserve a slot for a probe due at `now`: `now` itself when the schedule has room,
    /// else the later time the probe must wait for (it is reserved: probe then).
    pub fn slot(&mut self, now: f64) -> f64 {
        if self.interval == 0.0 {
            return now;
        }
        let mut t = self.free_at;
        let floor = now - self.burst_s;
        if t < floor {
            t = floor;
        }
        self.free_at = t + self.interval;
        if t <= now {
            return now;
        }
        self.deferred = self.deferred.saturating_add(1);
        t
    }

    /// For a probe that holds the slot `reserved` (0: none): 0.0 when it may go now (its
    /// slot came, within `grace` of it, or the schedule has room), else the slot it waits
    /// for (the one it held, or a new one reserved for it).
    pub fn admit(&mut self, reserved: f64, now: f64, grace: f64) -> f64 {
        if reserved != 0.0 {
            if reserved <= now && now < reserved + grace {
                return 0.0;
            }
            if now < reserved {
                return reserved;
            }
        }
        let t = self.slot(now);
        if t <= now {
            0.0
        } else {
            t
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_rate() {
        // 256/s after a burst of 0.125 s (exact binary fractions): the schedule starts 32
        // slots behind, so 33 probes at t=0 go at once, the next ones 1/256 s apart.
        let mut p = FirstProbePacer::new(256.0, 0.125);
        assert_eq!(p.interval, 1.0 / 256.0);
        for _ in 0..33 {
            assert_eq!(p.slot(0.0), 0.0);
        }
        assert_eq!(p.deferred, 0);
        assert_eq!(p.slot(0.0), 1.0 / 256.0);
        assert_eq!(p.slot(0.0), 2.0 / 256.0);
        assert_eq!(p.deferred, 2);
        // Later, the schedule may lag no more than the burst behind the present.
        assert_eq!(p.slot(10.0), 10.0);
        assert_eq!(p.free_at, 10.0 - 0.125 + 1.0 / 256.0);
        assert_eq!(FirstProbePacer::default().interval, 1.0 / 200.0);
    }

    #[test]
    fn no_pace() {
        let mut p = FirstProbePacer::new(0.0, 0.1);
        assert_eq!(p.interval, 0.0);
        assert_eq!(p.slot(5.0), 5.0);
        assert_eq!(p.admit(0.0, 5.0, 1.0), 0.0);
        assert_eq!(FirstProbePacer::new(f64::NAN, 0.1).interval, 0.0);
        assert_eq!(FirstProbePacer::new(-3.0, 0.1).interval, 0.0);
    }

    #[test]
    fn admit_reserve_keep_go() {
        let mut p = FirstProbePacer::new(10.0, 0.0);
        assert_eq!(p.admit(0.0, 1.0, 0.5), 0.0); // room: go (slot 1.0 taken)
        let held = p.admit(0.0, 1.0, 0.5); // the next slot, 0.1 s on
        assert_eq!(held, 1.1);
        assert_eq!(p.admit(held, 1.05, 0.5), held); // not yet: keep it
        assert_eq!(p.admit(held, 1.2, 0.5), 0.0); // within grace: go
        let again = p.admit(held, 1.7, 0.5); // past grace: a new slot (room again: go)
        assert_eq!(again, 0.0);
        assert_eq!(p.free_at, 1.7 + 0.1);
    }
}
