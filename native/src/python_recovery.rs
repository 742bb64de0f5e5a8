//! Test classes of `a3m._native` for the Rust protocol engine's arithmetic: `PathRecoveryCore`
//! and `FirstProbePacerCore` wrap `exon::recovery::PathRecovery` and
//! `exon::pacer::FirstProbePacer` with the Python twins' interface (every field a read/write
//! attribute of the same name, every method, the underscore ones too, with the same
//! signature), so that `tests/native/test_native_recovery.py` can drive both twins with the
//! same calls and compare them after each. Where the Python twin raises, the same exception
//! class is raised, the state left as the twin leaves it (`exon::recovery::Raise`).
//!
//! Not used by the runtime (the Python `PathRecovery` runs there until the engine's port
//! lands); registered by `python::_native` through [`register`].

use pyo3::exceptions::{PyIndexError, PyOverflowError, PyValueError, PyZeroDivisionError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::exon::pacer::{FirstProbePacer, FIRST_PROBE_BURST_S, FIRST_PROBE_RATE};
use crate::exon::recovery::{PathRecovery, Raise, SnapValue};

/// The Python exception of a `Raise`.
fn raised(e: Raise) -> PyErr {
    let msg = e.message();
    match e {
        Raise::ZeroDivision(_) => PyZeroDivisionError::new_err(msg),
        Raise::Value(_) => PyValueError::new_err(msg),
        Raise::Overflow(_) => PyOverflowError::new_err(msg),
        Raise::Index(_) => PyIndexError::new_err(msg),
    }
}

/// One `#[pymethods]` block: a getter and a setter for each listed field of the wrapped
/// struct (`field / setter's Rust name: type`; the attribute is the field's name), then the
/// methods given.
macro_rules! core_class {
    ($cls:ident { $($field:ident / $set:ident : $ty:ty),* $(,)? } { $($methods:tt)* }) => {
        #[pymethods]
        impl $cls {
            $(
                #[getter]
                fn $field(&self) -> $ty {
                    self.inner.$field
                }
                #[setter($field)]
                fn $set(&mut self, value: $ty) {
                    self.inner.$field = value;
                }
            )*
            $($methods)*
        }
    };
}

/// The twin of `a3m.exon.recovery.PathRecovery` in Rust (`exon::recovery`).
#[pyclass(module = "a3m._native")]
pub struct PathRecoveryCore {
    inner: PathRecovery,
}

core_class!(PathRecoveryCore {
    srtt / set_srtt: f64,
    rttvar / set_rttvar: f64,
    min_rtt / set_min_rtt: f64,
    latest_rtt / set_latest_rtt: f64,
    sampled / set_sampled: bool,
    initial_pto / set_initial_pto: f64,
    peer_ack_delay / set_peer_ack_delay_attr: f64,
    pto_count / set_pto_count: i64,
    pto / set_pto: f64,
    backoff_cap / set_backoff_cap: f64,
    seq / set_seq: i64,
    largest_acked / set_largest_acked: i64,
    packet_threshold / set_packet_threshold: i64,
    reorder_quarters / set_reorder_quarters: i64,
    spurious / set_spurious: i64,
    losses_since_spurious / set_losses_since_spurious: i64,
    mds / set_mds: i64,
    cwnd / set_cwnd: i64,
    min_window / set_min_window: i64,
    inflight / set_inflight: i64,
    bw / set_bw: f64,
    round_start / set_round_start: f64,
    round_acked / set_round_acked: i64,
    round_lost / set_round_lost: i64,
    loss_rate / set_loss_rate: f64,
    congestion_events / set_congestion_events: i64,
    cwnd_tokens / set_cwnd_tokens: i64,
    token_bytes / set_token_bytes: f64,
    epoch_start / set_epoch_start: f64,
    epoch_acked / set_epoch_acked: i64,
    extra_acked / set_extra_acked: f64,
    loaded / set_loaded_attr: bool,
    pacing_allowed / set_pacing_allowed: bool,
    pacing / set_pacing: bool,
    pacing_rate / set_pacing_rate_attr: f64,
    pace_at / set_pace_at: f64,
    pace_burst_s / set_pace_burst_s: f64,
    phase / set_phase: i64,
    cycle / set_cycle: i64,
    full_bw / set_full_bw: f64,
    full_bw_rounds / set_full_bw_rounds: i64,
    app_limited / set_app_limited: bool,
    sent / set_sent: i64,
    round_sent / set_round_sent: i64,
    send_rate / set_send_rate: f64,
    pace_late_s / set_pace_late_s: f64,
    pace_wake_at / set_pace_wake_at: f64,
    pace_owed_s / set_pace_owed_s: f64,
} {
    #[new]
    #[pyo3(signature = (initial_pto, peer_ack_delay, backoff_cap, mds, pacing = true))]
    fn new(initial_pto: f64, peer_ack_delay: f64, backoff_cap: f64, mds: i64, pacing: bool) -> Self {
        PathRecoveryCore { inner: PathRecovery::new(initial_pto, peer_ack_delay, backoff_cap, mds, pacing) }
    }

    /// The names of the fields (the Python `__slots__`, in order).
    #[classattr]
    #[pyo3(name = "FIELDS")]
    fn fields() -> Vec<&'static str> {
        PathRecovery::FIELDS.to_vec()
    }

    #[getter]
    fn bw_samples(&self) -> Vec<f64> {
        self.inner.bw_samples.clone()
    }

    #[setter(bw_samples)]
    fn set_bw_samples(&mut self, value: Vec<f64>) {
        self.inner.bw_samples = value;
    }

    fn base_pto(&self) -> f64 {
        self.inner.base_pto()
    }

    #[pyo3(name = "_update_pto")]
    fn update_pto(&mut self) -> PyResult<()> {
        self.inner.try_update_pto().map_err(raised)
    }

    fn on_rtt_sample(&mut self, sample: f64) -> PyResult<()> {
        self.inner.try_on_rtt_sample(sample).map_err(raised)
    }

    // (the field `peer_ack_delay` has the setter `set_peer_ack_delay_attr`: this is the
    // method of the Python name)
    #[pyo3(name = "set_peer_ack_delay")]
    fn set_peer_ack_delay_method(&mut self, delay: f64) -> PyResult<()> {
        self.inner.try_set_peer_ack_delay(delay).map_err(raised)
    }

    fn on_progress(&mut self) {
        self.inner.on_progress();
    }

    fn seed_pto(&mut self, handshake_rtt: f64) -> PyResult<()> {
        self.inner.try_seed_pto(handshake_rtt).map_err(raised)
    }

    #[pyo3(name = "set_loaded")]
    fn set_loaded_method(&mut self) -> PyResult<()> {
        self.inner.try_set_loaded().map_err(raised)
    }

    fn on_pto(&mut self) -> PyResult<bool> {
        self.inner.try_on_pto().map_err(raised)
    }

    fn on_reordering(&mut self) {
        self.inner.on_reordering();
    }

    fn on_spurious(&mut self) {
        self.inner.on_spurious();
    }

    fn loss_delay(&self) -> f64 {
        self.inner.loss_delay()
    }

    fn on_removed_bytes(&mut self, nbytes: i64) {
        self.inner.on_removed_bytes(nbytes);
    }

    #[pyo3(signature = (nbytes, now, ntokens = 1))]
    fn on_acked(&mut self, nbytes: i64, now: f64, ntokens: i64) -> PyResult<()> {
        self.inner.try_on_acked(nbytes, now, ntokens).map_err(raised)
    }

    #[pyo3(name = "_end_round")]
    fn end_round(&mut self, span: f64, now: f64) -> PyResult<()> {
        self.inner.try_end_round(span, now).map_err(raised)
    }

    #[pyo3(name = "_next_phase")]
    fn next_phase(&mut self, app_limited: bool, heavy_loss: bool) {
        self.inner.next_phase(app_limited, heavy_loss);
    }

    #[pyo3(name = "_set_pacing_rate")]
    fn set_pacing_rate_method(&mut self) -> PyResult<()> {
        self.inner.try_set_pacing_rate().map_err(raised)
    }

    fn pace_allowance(&mut self, now: f64, unit: i64) -> PyResult<f64> {
        self.inner.try_pace_allowance(now, unit).map_err(raised)
    }

    fn paced(&mut self, nbytes: i64, now: f64) {
        self.inner.paced(nbytes, now);
    }

    fn pace_wake(&mut self) -> f64 {
        self.inner.pace_wake()
    }

    fn on_lost(&mut self, nbytes: i64) {
        self.inner.on_lost(nbytes);
    }

    /// The Python twin's dict: the same keys in the same order, values of the same types.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.inner.snapshot() {
            match v {
                SnapValue::Float(x) => d.set_item(k, x)?,
                SnapValue::Int(x) => d.set_item(k, x)?,
                SnapValue::Bool(x) => d.set_item(k, x)?,
            }
        }
        Ok(d)
    }
});

/// The twin of `a3m.exon.pacer.FirstProbePacer` in Rust (`exon::pacer`).
#[pyclass(module = "a3m._native")]
pub struct FirstProbePacerCore {
    inner: FirstProbePacer,
}

core_class!(FirstProbePacerCore {
    interval / set_interval: f64,
    burst_s / set_burst_s: f64,
    free_at / set_free_at: f64,
    deferred / set_deferred: i64,
} {
    #[new]
    #[pyo3(signature = (rate = FIRST_PROBE_RATE, burst_s = FIRST_PROBE_BURST_S))]
    fn new(rate: f64, burst_s: f64) -> Self {
        FirstProbePacerCore { inner: FirstProbePacer::new(rate, burst_s) }
    }

    /// The names of the fields (the Python `__slots__`, in order).
    #[classattr]
    #[pyo3(name = "FIELDS")]
    fn fields() -> Vec<&'static str> {
        FirstProbePacer::FIELDS.to_vec()
    }

    fn slot(&mut self, now: f64) -> f64 {
        self.inner.slot(now)
    }

    fn admit(&mut self, reserved: f64, now: f64, grace: f64) -> f64 {
        self.inner.admit(reserved, now, grace)
    }
});

/// Add the classes to the module (`a3m._native`).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PathRecoveryCore>()?;
    m.add_class::<FirstProbePacerCore>()?;
    Ok(())
}
