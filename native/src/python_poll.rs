//! The native poll choice (`poll_choice`) as a Python class, `PollChoiceCore`, for the
//! differential test against `a3m/runtime/poll_choice.py`.

use pyo3::prelude::*;

use crate::poll_choice::PollChoice;

#[pymethods]
impl PollChoice {
    #[new]
    fn py_new(budget: f64) -> Self {
        PollChoice::new(budget)
    }

    #[pyo3(name = "poll_next")]
    fn py_poll_next(&mut self) -> bool {
        self.poll_next()
    }

    #[pyo3(name = "record", signature = (polled, waited_s, preempted = false))]
    fn py_record(&mut self, polled: bool, waited_s: f64, preempted: bool) {
        self.record(polled, waited_s, preempted)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PollChoice>()
}
