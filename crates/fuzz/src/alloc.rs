//! The global allocator of every program linking this crate: the system
//! allocator, plus a count of live bytes and a refusal of any single
//! allocation above [`MAX_ALLOCATION`] or any that would take the live total
//! above [`MAX_LIVE`]. A decoder that sizes a buffer from a length field it
//! has not checked against its input shows up here instead of as an
//! out-of-memory kill with nothing to replay.
//!
//! A refusal is reported (with the input being run, see [`Context`]) before
//! the allocator returns null: the caller then either handles the failure
//! (`try_reserve`, which the engine records as a failure of the input) or
//! the process aborts with Rust's "memory allocation failed" message. An
//! allocator may not unwind, so a refusal cannot be turned into a panic.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The largest single allocation a decoder may make: what no input of a
/// few kilobytes justifies.
pub const MAX_ALLOCATION: usize = 256 << 20;
/// The most the whole process may hold at once.
pub const MAX_LIVE: usize = 2 << 30;

struct Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// What the current thread is running, for reporting a refusal.
#[derive(Clone, Copy)]
pub struct Context {
    pub target: &'static str,
    pub seed: u64,
    pub iteration: u64,
    pub input: *const u8,
    pub len: usize,
}

thread_local! {
    static CONTEXT: Cell<Option<Context>> = const { Cell::new(None) };
    /// The largest allocation refused on this thread since the last
    /// [`take_refused`].
    static REFUSED: Cell<usize> = const { Cell::new(0) };
    /// Set while a refusal is reported, whose own allocations are small.
    static REPORTING: Cell<bool> = const { Cell::new(false) };
}

/// Names the input the current thread runs next; `None` once it is done.
pub fn set_context(context: Option<Context>) {
    CONTEXT.with(|c| c.set(context));
}

/// The largest allocation refused on this thread since the last call, if any.
pub fn take_refused() -> Option<usize> {
    Some(REFUSED.with(|r| r.replace(0))).filter(|&size| size > 0)
}

/// The most bytes live at once since the last call (which restarts the
/// count from what is live now).
pub fn take_peak() -> usize {
    PEAK.swap(LIVE.load(Ordering::Relaxed), Ordering::Relaxed)
}

/// Whether an allocation of `size` bytes, `growth` of them new to the live
/// total, may be made; records and reports a refusal otherwise.
fn admit(size: usize, growth: usize) -> bool {
    let live = LIVE.load(Ordering::Relaxed);
    if size <= MAX_ALLOCATION && live.saturating_add(growth) <= MAX_LIVE {
        return true;
    }
    let _ = REFUSED.try_with(|r| r.set(r.get().max(size)));
    let context = CONTEXT.try_with(Cell::get).ok().flatten();
    let reentered = REPORTING.try_with(|r| r.replace(true)).unwrap_or(true);
    if !reentered {
        let what = format!(
            "refused an allocation of {size} bytes ({live} bytes live; limits: {MAX_ALLOCATION} \
             per allocation, {MAX_LIVE} live)"
        );
        match context {
            Some(c) => {
                // SAFETY: the engine sets the context to the input it is
                // running on this thread and clears it before the input
                // is dropped.
                let input = unsafe { std::slice::from_raw_parts(c.input, c.len) };
                crate::engine::report(c.target, c.seed, c.iteration, input, &what);
            }
            None => eprintln!("labios-fuzz: outside any input: {what}"),
        }
        let _ = REPORTING.try_with(|r| r.set(false));
    }
    false
}

fn added(size: usize) {
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged, or
// answered with null, which the GlobalAlloc contract allows for any request.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !admit(layout.size(), layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, as the contract requires.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            added(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !admit(layout.size(), layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, as the contract requires.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            added(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, which got it from System.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() && !admit(new_size, new_size - layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's pointer, layout and size, as the contract
        // requires.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                added(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}
