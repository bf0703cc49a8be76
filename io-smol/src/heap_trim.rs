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
/// (`M_MXFAST` = 0), one arena, and fixed mmap and trim thresholds
/// ([`MMAP_THRESHOLD`], [`TRIM_THRESHOLD`]).
///
/// **Large buffers reused, given back when quiet.** A long session's turn
/// makes several buffers as large as its history (the provider body, the
/// `provider.request` payload, its EventView; in whole storage, SQLite's
/// copies). With glibc's defaults each one of 128 KiB or more was a fresh
/// mapping, faulted in page by page and unmapped after the turn: ~40 % of
/// the server's CPU per turn at 1,000 turns (docs/performance.md, "Per-turn
/// cost vs history length"). Served from the heap and kept there (the trim
/// threshold above them), the next turn reuses their pages instead.
/// Memory still comes back once the server is quiet: [`HeapTrim`] calls
/// `malloc_trim`, which returns the free pages of every arena but the top
/// of the main arena only; a thread arena keeps its top (up to the trim
/// threshold: 15.8 MB after load instead of 9.7 MB in `bench_memory`). One
/// arena for every thread keeps all of it trimmable; the per-thread caches
/// still serve small blocks without its lock.
///
/// **Thresholds fixed.** glibc raises its mmap threshold each time a
/// mapped block is freed (up to 32 MiB) and the trim threshold to twice
/// it, so after one 13 MB request nothing was ever mapped or trimmed again
/// and RSS stayed at 2.5 times idle after the session was deleted. Setting
/// them turns that off; a buffer beyond [`MMAP_THRESHOLD`] still gets a
/// mapping of its own and is unmapped when freed.
///
/// **No fastbins.** A turn frees many small chunks (JSON value nodes) beyond what the
/// per-thread cache keeps; they sat in fastbins, and every later request of
/// 1 KiB or more (a body buffer, a frame) first walked and merged all of
/// them (`malloc_consolidate`): 8 % of the engine's instructions per text
/// turn under callgrind. Without fastbins those chunks go to the ordinary
/// bins, where they coalesce as they are freed. Engine instructions per unit
/// (`engine/benches/turn_cost.rs`): text turn 326,000 -> 287,000, client-tool
/// round trip 1,143,000 -> 1,037,000 (docs/performance.md).
///
/// A value an operator sets (`GLIBC_TUNABLES`, or `MALLOC_ARENA_MAX`,
/// `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`) is kept.
pub fn tune() {
    const M_MXFAST: i32 = 1;
    mallopt(M_MXFAST, 0);
    let operator_set = |tunable: &str, var: &str| {
        std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains(tunable))
            || std::env::var_os(var).is_some()
    };
    if !operator_set("arena_max", "MALLOC_ARENA_MAX") {
        mallopt(M_ARENA_MAX, 1);
    }
    if !operator_set("mmap_threshold", "MALLOC_MMAP_THRESHOLD_") {
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
    if !operator_set("trim_threshold", "MALLOC_TRIM_THRESHOLD_") {
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Allocations at least this large get a mapping of their own, returned to
/// the kernel when freed ([`tune`]).
pub const MMAP_THRESHOLD: usize = 4 << 20;

/// Free memory at the top of the heap beyond this goes back to the kernel
/// as soon as it is freed; up to it, it waits for the quiet-time trim
/// ([`tune`]).
pub const TRIM_THRESHOLD: usize = 8 << 20;

const M_TRIM_THRESHOLD: i32 = -1;
const M_MMAP_THRESHOLD: i32 = -3;
const M_ARENA_MAX: i32 = -8;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn mallopt(param: i32, value: usize) {
    extern "C" {
        fn mallopt(param: std::os::raw::c_int, value: std::os::raw::c_int) -> std::os::raw::c_int;
    }
    let value = std::os::raw::c_int::try_from(value).unwrap_or(std::os::raw::c_int::MAX);
    // SAFETY: mallopt takes plain integers; it only changes glibc's own
    // allocator settings, and runs before any other thread exists.
    unsafe {
        mallopt(param, value);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn mallopt(_param: i32, _value: usize) {}

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
