//! The interpreter's allocations, counted: `alloc_counting(on)` and `allocations()`, the
//! allocation counter of the benchmarks' work per round trip (`a3m.benchmarks.work`).
//!
//! A hook over the allocators of the `PYMEM_DOMAIN_MEM` and `PYMEM_DOMAIN_OBJ` domains
//! (`PyMem_Malloc`, `PyObject_Malloc` and their kin) that counts each new block (`malloc`,
//! `calloc`, and `realloc` of a null pointer) and hands every call to the allocator it wraps.
//! The raw domain (`PyMem_RawMalloc`, called without the interpreter's lock) and whatever a
//! library allocates with the C library's `malloc` (libzmq, libnng) are not counted, nor the
//! objects an interpreter's free list serves without calling its allocator.
//!
//! The two domains are only ever called with the interpreter's lock held, as are the
//! functions here (they take the `Python` token); the counter and the hook's state are
//! atomics all the same. Switched off, the hook is taken out of the chain when it is still
//! on top of it (no cost left); when something hooked over it since (tracemalloc), it stays
//! in the chain and counts nothing until switched on again. A hook's copy of the allocator it
//! wraps (its `ctx`) is never freed, as a call already under way might read it: it is reused
//! while that allocator stays the same, so switching back and forth holds no more memory.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use pyo3::ffi::{PyMemAllocatorDomain, PyMemAllocatorEx, PyMem_GetAllocator, PyMem_SetAllocator};
use pyo3::prelude::*;

use crate::python::guard;

/// Blocks counted while counting was on, since the module loaded.
static COUNT: AtomicU64 = AtomicU64::new(0);
/// Whether the hooks count.
static COUNTING: AtomicBool = AtomicBool::new(false);

const DOMAINS: [PyMemAllocatorDomain; 2] = [PyMemAllocatorDomain::PYMEM_DOMAIN_MEM, PyMemAllocatorDomain::PYMEM_DOMAIN_OBJ];
/// Per domain: the hook's copy of the allocator it wraps (its `ctx`; null: never hooked).
static WRAPPED: [AtomicPtr<PyMemAllocatorEx>; 2] = [AtomicPtr::new(ptr::null_mut()), AtomicPtr::new(ptr::null_mut())];
/// Per domain: whether the hook is in the domain's chain.
static IN_CHAIN: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

#[inline]
fn count() {
    if COUNTING.load(Ordering::Relaxed) {
        COUNT.fetch_add(1, Ordering::Relaxed);
    }
}

/// The allocator a hook wraps.
///
/// # Safety
/// `ctx` is the context the interpreter passed to one of the hooks below: they are installed
/// (`hook`) only with a leaked `Box<PyMemAllocatorEx>` as their `ctx` (`WRAPPED`), never
/// freed nor written while it may be read, and the interpreter passes it back unchanged.
#[inline]
// SAFETY: an `unsafe fn` only because its caller must vouch for `ctx` (the contract above).
unsafe fn wrapped<'a>(ctx: *mut c_void) -> &'a PyMemAllocatorEx {
    // SAFETY: the caller's contract (above): a live, never-written PyMemAllocatorEx.
    unsafe { &*(ctx as *const PyMemAllocatorEx) }
}

extern "C" fn hook_malloc(ctx: *mut c_void, size: usize) -> *mut c_void {
    count();
    // SAFETY: `ctx` is the one the interpreter passes to this hook (see `wrapped`).
    let w = unsafe { wrapped(ctx) };
    match w.malloc {
        Some(f) => f(w.ctx, size),
        None => ptr::null_mut(),
    }
}

extern "C" fn hook_calloc(ctx: *mut c_void, nelem: usize, elsize: usize) -> *mut c_void {
    count();
    // SAFETY: `ctx` is the one the interpreter passes to this hook (see `wrapped`).
    let w = unsafe { wrapped(ctx) };
    match w.calloc {
        Some(f) => f(w.ctx, nelem, elsize),
        None => ptr::null_mut(),
    }
}

extern "C" fn hook_realloc(ctx: *mut c_void, block: *mut c_void, size: usize) -> *mut c_void {
    if block.is_null() {
        count(); // a new block (resizing one is not an allocation)
    }
    // SAFETY: `ctx` is the one the interpreter passes to this hook (see `wrapped`).
    let w = unsafe { wrapped(ctx) };
    match w.realloc {
        Some(f) => f(w.ctx, block, size),
        None => ptr::null_mut(),
    }
}

extern "C" fn hook_free(ctx: *mut c_void, block: *mut c_void) {
    // SAFETY: `ctx` is the one the interpreter passes to this hook (see `wrapped`).
    let w = unsafe { wrapped(ctx) };
    if let Some(f) = w.free {
        f(w.ctx, block)
    }
}

fn empty() -> PyMemAllocatorEx {
    PyMemAllocatorEx { ctx: ptr::null_mut(), malloc: None, calloc: None, realloc: None, free: None }
}

fn hook(ctx: *mut PyMemAllocatorEx) -> PyMemAllocatorEx {
    PyMemAllocatorEx {
        ctx: ctx.cast(),
        malloc: Some(hook_malloc),
        calloc: Some(hook_calloc),
        realloc: Some(hook_realloc),
        free: Some(hook_free),
    }
}

/// Two allocators are the same functions on the same context.
fn same(a: &PyMemAllocatorEx, b: &PyMemAllocatorEx) -> bool {
    a.ctx == b.ctx
        && a.malloc.map(|f| f as usize) == b.malloc.map(|f| f as usize)
        && a.calloc.map(|f| f as usize) == b.calloc.map(|f| f as usize)
        && a.realloc.map(|f| f as usize) == b.realloc.map(|f| f as usize)
        && a.free.map(|f| f as usize) == b.free.map(|f| f as usize)
}

fn current(domain: PyMemAllocatorDomain) -> PyMemAllocatorEx {
    let mut cur = empty();
    // (the caller holds the interpreter's lock: the `Python` token of `set_counting`)
    // SAFETY: PyMem_GetAllocator only writes the struct it is given, alive across the call.
    unsafe { PyMem_GetAllocator(domain, &mut cur) };
    cur
}

/// Switch counting on (the hook put in each domain's chain where it is not) or off (the hook
/// taken out where it is still on top).
fn set_counting(_py: Python<'_>, on: bool) {
    if !on {
        COUNTING.store(false, Ordering::Relaxed);
    }
    for (i, &domain) in DOMAINS.iter().enumerate() {
        let mine = WRAPPED[i].load(Ordering::Relaxed);
        let in_chain = IN_CHAIN[i].load(Ordering::Relaxed);
        let cur = current(domain);
        if on && !in_chain {
            let reuse = !mine.is_null() && {
                // (`mine` is out of every chain, not in_chain: nothing writes it)
                // SAFETY: `mine` is a leaked box of ours, never freed, read under the GIL.
                let kept = unsafe { &*mine };
                same(kept, &cur)
            };
            let ctx = if reuse { mine } else { Box::into_raw(Box::new(cur)) };
            WRAPPED[i].store(ctx, Ordering::Relaxed);
            let mut h = hook(ctx);
            // (the C API allows a hook that calls the allocator it wraps to be set at any time
            // with the interpreter's lock held; the struct is copied by the call)
            // SAFETY: GIL held, a wrapping hook, and its `ctx` is never freed.
            unsafe { PyMem_SetAllocator(domain, &mut h) };
            IN_CHAIN[i].store(true, Ordering::Relaxed);
        } else if !on && in_chain && cur.ctx == mine.cast::<c_void>() {
            // SAFETY: `mine` is our hook's ctx (a leaked box, never freed), read under the GIL.
            let mut prev = unsafe { *mine };
            // (the allocator our hook wrapped goes back on top: every block, allocated through
            // the hook or not, belongs to it; the struct is copied by the call)
            // SAFETY: GIL held, and `prev` is the allocator below our hook in the chain.
            unsafe { PyMem_SetAllocator(domain, &mut prev) };
            IN_CHAIN[i].store(false, Ordering::Relaxed);
        }
    }
    if on {
        COUNTING.store(true, Ordering::Relaxed);
    }
}

/// Count the interpreter's allocations (``on``) or stop counting them; the count itself
/// (:func:`allocations`) goes on from where it was.
#[pyfunction]
fn alloc_counting(py: Python<'_>, on: bool) -> PyResult<()> {
    guard("alloc_counting", || {
        set_counting(py, on);
        Ok(())
    })
}

/// The allocations counted so far (new blocks of the `mem` and `obj` domains while counting
/// was on), since the module loaded.
#[pyfunction]
fn allocations() -> u64 {
    COUNT.load(Ordering::Relaxed)
}

/// Whether the allocations are being counted.
#[pyfunction]
fn alloc_counting_on() -> bool {
    COUNTING.load(Ordering::Relaxed)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(alloc_counting, m)?)?;
    m.add_function(wrap_pyfunction!(allocations, m)?)?;
    m.add_function(wrap_pyfunction!(alloc_counting_on, m)?)?;
    Ok(())
}
