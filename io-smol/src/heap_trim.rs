//! Gives freed heap back to the kernel once the server goes quiet.
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
