//! Gives freed heap back to the kernel once the server goes quiet, and
//! sets glibc's malloc up for the server's allocation pattern ([`tune`]).
//!
//! glibc's malloc keeps the pages of freed chunks mapped (its arenas grow
//! to the high-water mark of a burst: a big events page, a history load,
//! thousands of connections) and returns only what sits at the very top of
//! the main arena. `malloc_trim(0)` walks every arena and releases whole
//! free pages inside them. The driver calls it once the engine has been
//! idle for [`QUIET`], so the walk never competes with live work and RSS
//! comes back near its baseline after load (docs/performance.md).

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
                release_free_memory();
                true
            }
            _ => false,
        }
    }
}

/// Turns glibc's fastbins off (`M_MXFAST` = 0), before the server's threads
/// start.
///
/// A turn frees many small chunks (JSON value nodes) beyond what the
/// per-thread cache keeps; they sat in fastbins, and every later request of
/// 1 KiB or more (a body buffer, a frame) first walked and merged all of
/// them (`malloc_consolidate`): 8 % of the engine's instructions per text
/// turn under callgrind. Without fastbins those chunks go to the ordinary
/// bins, where they coalesce as they are freed. Engine instructions per unit
/// (`engine/benches/turn_cost.rs`): text turn 326,000 -> 287,000, client-tool
/// round trip 1,143,000 -> 1,037,000 (docs/performance.md).
///
/// It also fixes the sizes above which glibc maps a chunk of its own
/// ([`MMAP_THRESHOLD`]) and gives the top of the heap back on free
/// ([`TRIM_THRESHOLD`]). Left to itself glibc raises the first to the size
/// of the last mapped chunk freed, so a long session's buffers, each a
/// little larger than the last turn's (the request body, its
/// `provider.request` payload and frame), were each mapped, faulted in page
/// by page, zeroed and unmapped again, and the top of the heap was handed
/// back and faulted in again on every turn: about a quarter of the server's
/// CPU at 1,000 turns (docs/performance.md, "Long sessions"). Freed memory
/// now stays in the heap until the server goes quiet ([`QUIET`]), when
/// [`HeapTrim`] gives it back as before.
pub fn tune() {
    set_mallopts();
}

/// Chunks at least this large get a mapping of their own.
pub const MMAP_THRESHOLD: i32 = 32 * 1024 * 1024;
/// Free memory at the top of the heap beyond this is given back at once.
pub const TRIM_THRESHOLD: i32 = 64 * 1024 * 1024;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_mallopts() {
    extern "C" {
        fn mallopt(param: std::os::raw::c_int, value: std::os::raw::c_int) -> std::os::raw::c_int;
    }
    const M_MXFAST: std::os::raw::c_int = 1;
    const M_TRIM_THRESHOLD: std::os::raw::c_int = -1;
    const M_MMAP_THRESHOLD: std::os::raw::c_int = -3;
    // SAFETY: mallopt takes plain integers; it only changes glibc's own
    // allocator settings, and runs before any other thread exists.
    unsafe {
        mallopt(M_MXFAST, 0);
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_mallopts() {}

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
