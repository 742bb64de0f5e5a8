//! Whether a waiting thread polls its socket briefly before it sleeps: the twin of
//! `a3m/runtime/poll_choice.py` (its docstring says why, its constants are these), kept by
//! the native engine for a leader's wait (`ExonCore.lead_io`). The same calls give the same
//! choices and the same averages, bit for bit (tests/native/test_native_poll_choice.py).

/// One wait in this many goes the way the averages do not prefer.
pub const EXPLORE: u64 = 32;
/// The averages' weight of a new wait.
pub const WEIGHT: f64 = 0.125;
/// Polling goes on while its average wait is within this factor of sleeping's.
pub const POLL_LEEWAY: f64 = 1.25;
/// A wait counts for at most this many budgets.
pub const CAP_BUDGETS: f64 = 1.0;
/// Polling stops while more than this share of the polled waits lost the CPU.
pub const PREEMPTED_SHARE: f64 = 0.25;

/// The poll-or-sleep choice of one node's leading waits (in Python, for the differential
/// test: `a3m._native.PollChoiceCore`, its fields read-only; `python_poll` adds the methods).
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "python", pyo3::pyclass(module = "a3m._native", name = "PollChoiceCore", get_all))]
pub struct PollChoice {
    pub budget: f64,
    pub waits: u64,
    /// Average wait until input when polling first.
    pub poll_s: f64,
    /// ... when sleeping at once.
    pub block_s: f64,
    /// Average share of polled waits that lost the CPU.
    pub preempted: f64,
}

impl PollChoice {
    pub fn new(budget: f64) -> Self {
        PollChoice { budget, ..Default::default() }
    }

    /// Whether the next wait polls first.
    pub fn poll_next(&mut self) -> bool {
        self.waits += 1;
        let prefer = self.poll_s <= self.block_s * POLL_LEEWAY && self.preempted <= PREEMPTED_SHARE;
        prefer != (self.waits % EXPLORE == 0)
    }

    /// A wait that ended with input after `waited_s` seconds; `preempted`: its poll lost the
    /// CPU to another task.
    pub fn record(&mut self, polled: bool, waited_s: f64, preempted: bool) {
        let cap = CAP_BUDGETS * self.budget;
        let waited_s = if cap < waited_s { cap } else { waited_s };
        if polled {
            self.preempted += ((if preempted { 1.0 } else { 0.0 }) - self.preempted) * WEIGHT;
            self.poll_s += (waited_s - self.poll_s) * WEIGHT;
        } else {
            self.block_s += (waited_s - self.block_s) * WEIGHT;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_until_sleeping_answers_clearly_sooner() {
        let mut c = PollChoice::new(200e-6);
        for _ in 0..200 {
            let p = c.poll_next();
            c.record(p, if p { 150e-6 } else { 100e-6 }, false);
        }
        assert!(!c.poll_next() || c.waits % EXPLORE == 0);
        let mut c = PollChoice::new(200e-6);
        for _ in 0..200 {
            let p = c.poll_next();
            c.record(p, if p { 60e-6 } else { 100e-6 }, false);
        }
        assert!(c.poll_s < c.block_s);
    }
}
