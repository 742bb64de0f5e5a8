//! `PollChoiceCore`: the native poll choice (`poll_choice`) as a Python class, for the
//! differential test against `a3m/runtime/poll_choice.py`.

use pyo3::prelude::*;
use std::sync::Mutex;

use crate::poll_choice::PollChoice;

/// Twin of `a3m.runtime.poll_choice.PollChoice`.
#[pyclass(module = "a3m._native", name = "PollChoiceCore", frozen)]
pub struct PollChoiceCore {
    inner: Mutex<PollChoice>,
}

impl PollChoiceCore {
    fn get(&self) -> std::sync::MutexGuard<'_, PollChoice> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl PollChoiceCore {
    #[new]
    fn new(budget: f64) -> Self {
        PollChoiceCore { inner: Mutex::new(PollChoice::new(budget)) }
    }

    fn poll_next(&self) -> bool {
        self.get().poll_next()
    }

    #[pyo3(signature = (polled, waited_s, preempted = false))]
    fn record(&self, polled: bool, waited_s: f64, preempted: bool) {
        self.get().record(polled, waited_s, preempted)
    }

    #[getter]
    fn budget(&self) -> f64 {
        self.get().budget
    }

    #[getter]
    fn waits(&self) -> u64 {
        self.get().waits
    }

    #[getter]
    fn poll_s(&self) -> f64 {
        self.get().poll_s
    }

    #[getter]
    fn block_s(&self) -> f64 {
        self.get().block_s
    }

    #[getter]
    fn preempted(&self) -> f64 {
        self.get().preempted
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PollChoiceCore>()
}
