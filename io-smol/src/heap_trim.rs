//! Gives freed heap back to the kernel once the server goes quiet, and
//! sets glibc's malloc up for the server's allocation pattern ([`tune`]).
//!
//! glibc's malloc keeps the pages of freed chunks mapped (its arenas grow
//! to the high-water mark of a burst: a big events page, a history load,
//! thousands of connections) and returns only what sits at the very top of
//! the main arena. `malloc_trim(0)` walks every arena and releases whole
//! free pages inside them. The driver calls it once the engine has been
//! idle for [`QUIET`], so the walk never competes with live work and RSS
//! comes back near its baseline after load (docs/performance.md). The
//! store's kept page buffers are dropped first (`store/page_pool.rs`).

use std::time::{Duration, Instant};

/// Quiet time after the last input before the heap is trimmed.
pub const QUIET: Duration = Duration::from_secs(1);

/// When the next trim is due: armed by activity, fired once per quiet spell.
#[derive(Debug, Default)]
pub struct HeapTrim {
    due: Option<Instant>,
}

impl HeapTrim {
    /// Work happened at `now`: the trim moves to `now + QUIET`.
    pub fn activity(&mut self, now: Instant) {
        self.due = Some(now + QUIET);
    }

    /// The instant the driver must wake for (nothing when disarmed).
    pub fn deadline(&self) -> Option<Instant> {
        self.due
    }

    /// Trims when due; returns whether it did.
    pub fn fire(&mut self, now: Instant) -> bool {
        match self.due {
            Some(due) if now >= due => {
                self.due = None;
                crate::store::page_pool::clear();
                release_free_memory();
                true
            }
            _ => false,
        }
    }
}

/// Sets glibc's malloc up before the server's threads start: fastbins off
/// (`M_MXFAST` = 0) and a fixed mmap threshold ([`MMAP_THRESHOLD`]).
///
/// **Fixed mmap threshold.** glibc serves an allocation of 128 KiB or more
/// with its own mapping, but each time such a mapping is freed it raises the
/// threshold to that size (up to 32 MiB) and the trim threshold to twice it.
/// After one turn carrying a large message (a 13 MB provider request), every
/// later large buffer then came from a thread's arena, and a thread arena's
/// free top is never given back: neither `free` (under the raised trim
/// threshold) nor `malloc_trim` (which trims only the main arena's top)
/// returns it. RSS stayed at 2.5 times idle after the session was deleted.
/// With the threshold fixed, large buffers are mapped and unmapped as they
/// come and go (docs/performance.md, "Memory that comes back"). An operator
/// who sets `glibc.malloc.mmap_threshold` in `GLIBC_TUNABLES` (or
/// `MALLOC_MMAP_THRESHOLD_`) keeps that value.
///
/// **No fastbins.** A turn frees many small chunks (JSON value nodes) beyond what the
/// per-thread cache keeps; they sat in fastbins, and every later request of
/// 1 KiB or more (a body buffer, a frame) first walked and merged all of
/// them (`malloc_consolidate`): 8 % of the engine's instructions per text
/// turn under callgrind. Without fastbins those chunks go to the ordinary
/// bins, where they coalesce as they are freed. Engine instructions per unit
/// (`engine/benches/turn_cost.rs`): text turn 326,000 -> 287,000, client-tool
/// round trip 1,143,000 -> 1,037,000 (docs/performance.md).
pub fn tune() {
    set_no_fastbins();
    let operator_set = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("mmap_threshold"))
        || std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some();
    if !operator_set {
        set_mmap_threshold(MMAP_THRESHOLD);
    }
}

/// Allocations at least this large get a mapping of their own, returned to
/// the kernel when freed: glibc's starting value, kept fixed ([`tune`]).
pub const MMAP_THRESHOLD: usize = 128 * 1024;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_mmap_threshold(bytes: usize) {
    extern "C" {
        fn mallopt(param: std::os::raw::c_int, value: std::os::raw::c_int) -> std::os::raw::c_int;
    }
    const M_MMAP_THRESHOLD: std::os::raw::c_int = -3;
    let value = std::os::raw::c_int::try_from(bytes).unwrap_or(std::os::raw::c_int::MAX);
    // SAFETY: mallopt takes plain integers; it only changes glibc's own
    // allocator settings (and turns its dynamic threshold off), and runs
    // before any other thread exists.
    unsafe {
        mallopt(M_MMAP_THRESHOLD, value);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_mmap_threshold(_bytes: usize) {}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_no_fastbins() {
    extern "C" {
        fn mallopt(param: std::os::raw::c_int, value: std::os::raw::c_int) -> std::os::raw::c_int;
    }
    const M_MXFAST: std::os::raw::c_int = 1;
    // SAFETY: mallopt takes plain integers; it only changes glibc's own
    // allocator settings, and runs before any other thread exists.
    unsafe {
        mallopt(M_MXFAST, 0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_no_fastbins() {}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_memory() {
    extern "C" {
        fn malloc_trim(pad: usize) -> std::os::raw::c_int;
    }
    // SAFETY: malloc_trim takes no pointers; it locks and walks glibc's own
    // arenas and is safe to call from any thread at any time.
    unsafe {
        malloc_trim(0);
    }
}

/// Other allocators (musl, macOS) return memory on their own terms.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_memory() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_per_quiet_spell() {
        let t0 = Instant::now();
        let mut trim = HeapTrim::default();
        assert!(!trim.fire(t0 + QUIET * 10), "disarmed: nothing to do");
        trim.activity(t0);
        assert_eq!(trim.deadline(), Some(t0 + QUIET));
        assert!(!trim.fire(t0 + QUIET / 2), "not quiet long enough");
        trim.activity(t0 + QUIET / 2);
        assert!(!trim.fire(t0 + QUIET), "activity pushed it back");
        assert!(trim.fire(t0 + QUIET / 2 + QUIET));
        assert_eq!(trim.deadline(), None);
        assert!(!trim.fire(t0 + QUIET * 10), "once per spell");
    }
}
