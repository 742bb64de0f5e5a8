//! The bindings of the core message codec: a link's BATCHes made and split (`batch`) and a
//! sequenced message read (`sequenced`), twins of `a3m.core.message.batch_runs`,
//! `split_batch` and `decode_sequenced` (the specification; the core calls these where
//! `a3m.NATIVE`). One call per message or BATCH: no Python object per message beyond its
//! payload and its fields.

use std::collections::HashMap;
use std::sync::Mutex;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::batch;
use crate::python::guard;
use crate::sequenced;

static PROTOCOL_VIOLATION: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn violation(py: Python<'_>, why: &str) -> PyErr {
    match PROTOCOL_VIOLATION.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import("a3m.errors")?.getattr("ProtocolViolation")?.unbind())
    }) {
        // (the text of the twin's `_bad`)
        Ok(cls) => match cls.bind(py).call1((format!("bad middleware message: {why}"),)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// The payloads of a BATCH body (after its sequence number); raises
/// `a3m.errors.ProtocolViolation` (the twin's texts) unless the lengths account for every
/// byte exactly.
#[pyfunction]
fn split_batch<'py>(py: Python<'py>, body: &[u8]) -> PyResult<Bound<'py, PyList>> {
    guard("split_batch", || {
        let parts = batch::split(body).map_err(|why| violation(py, why))?;
        PyList::new(py, parts.into_iter().map(|p| PyBytes::new(py, p)))
    })
}

/// `_emit_runs`'s messages for `payloads` (two or more) numbered from `seq` (which may carry
/// the cookie bit): BATCHes of the longest runs whose bytes, 4 more a message, stay within
/// `limit`, a run of one as DATA.
#[pyfunction]
fn batch_runs<'py>(py: Python<'py>, head: &[u8], seq: u64, payloads: &Bound<'py, PyList>, limit: usize) -> PyResult<Bound<'py, PyList>> {
    guard("batch_runs", || {
        let items: Vec<Bound<'py, PyBytes>> = payloads
            .iter()
            .map(|p| p.cast_into::<PyBytes>().map_err(|_| PyTypeError::new_err("BATCH payloads must be bytes")))
            .collect::<PyResult<_>>()?;
        let slices: Vec<&[u8]> = items.iter().map(|b| b.as_bytes()).collect();
        let sizes: Vec<usize> = slices.iter().map(|s| s.len()).collect();
        let out = PyList::empty(py);
        for (start, end) in batch::runs(&sizes, limit) {
            let seq = seq.checked_add(start as u64).ok_or_else(|| PyValueError::new_err("sequence number overflow"))?;
            let msg = if end - start == 1 {
                let p = slices[start];
                let len = batch::data_len(head.len(), p.len()).map_err(PyValueError::new_err)?;
                PyBytes::new_with(py, len, |dst| {
                    batch::write_data(dst, head, seq, p);
                    Ok(())
                })?
            } else {
                let run = &slices[start..end];
                let total: usize = sizes[start..end].iter().sum();
                let len = batch::batch_len(head.len(), run.len(), total).map_err(PyValueError::new_err)?;
                PyBytes::new_with(py, len, |dst| {
                    batch::write_batch(dst, head, seq, run);
                    Ok(())
                })?
            };
            out.append(msg)?;
        }
        Ok(out)
    })
}

/// Tags seen, as the twin's `_TAGS` keeps them (its bound too: emptied past 4096): a message
/// of a known link makes no string.
static TAGS: PyOnceLock<Mutex<TagCache>> = PyOnceLock::new();
type TagCache = HashMap<Box<[u8]>, Py<PyString>>;
const TAG_CACHE: usize = 4096;

fn tag<'py>(py: Python<'py>, s: &str) -> Bound<'py, PyString> {
    let cache = TAGS.get_or_init(py, || Mutex::new(HashMap::new()));
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(t) = map.get(s.as_bytes()) {
        return t.bind(py).clone();
    }
    if map.len() > TAG_CACHE {
        map.clear();
    }
    let t = PyString::new(py, s);
    map.insert(s.as_bytes().into(), t.clone().unbind());
    t
}

/// `(type, src_tag, dst_tag, src_inc, dst_inc, seq, payload)` of a DATA, BATCH or pattern
/// message (BATCH: its body); raises `a3m.errors.ProtocolViolation` with the twin's texts.
#[pyfunction]
fn decode_sequenced<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyTuple>> {
    guard("decode_sequenced", || {
        let m = sequenced::decode(data).map_err(|why| violation(py, why))?;
        let payload = PyBytes::new(py, m.payload);
        (m.mtype, tag(py, m.src_tag), tag(py, m.dst_tag), m.src_inc, m.dst_inc, m.seq, payload).into_pyobject(py)
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_sequenced, m)?)?;
    m.add_function(wrap_pyfunction!(split_batch, m)?)?;
    m.add_function(wrap_pyfunction!(batch_runs, m)?)?;
    Ok(())
}
