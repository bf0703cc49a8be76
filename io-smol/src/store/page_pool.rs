//! Buffers of rendered events pages, kept for the next page once written.
//!
//! A page of a long session is a few hundred KiB. Above the mmap threshold
//! `heap_trim.rs` fixed at 128 KiB when this pool was written, each new
//! buffer was a fresh mapping the store thread faulted in page by page and
//! the driver thread unmapped after the write: about a quarter of the store
//! thread's time while 64 clients paged (`perf record`, docs/performance.md).
//! The threshold is now 4 MiB, so malloc keeps such buffers on its heap
//! too; what the pool still saves on top of that has not been re-measured.
//! A body leaves as a shared [`Bytes::Text`]; the pool keeps a handle, and
//! once the writer has dropped its own the store renders the next page
//! into the same memory. At most [`BUFFERS`] buffers of at most
//! [`MAX_CAPACITY`] bytes are kept, and the heap trim after an idle second
//! drops them all ([`clear`]).

use std::sync::{Arc, Mutex};

use engine::bytes::Bytes;

/// Buffers kept (pages being written at once, under load, are fewer).
pub const BUFFERS: usize = 8;
/// A larger buffer (a page of unusually large events) is not kept.
pub const MAX_CAPACITY: usize = 1024 * 1024;

/// The store thread's pool (one store thread per process).
static PAGES: Pool = Pool::new();

/// A buffer to render a page into ([`Pool::take`] of the process's pool).
pub fn take(capacity: usize) -> String {
    PAGES.take(capacity)
}

/// A rendered page as sent ([`Pool::give`]).
pub fn give(page: String) -> Bytes {
    PAGES.give(page)
}

/// Drops every kept buffer (the idle heap trim): those still being
/// written are freed by their writer.
pub fn clear() {
    PAGES.clear()
}

/// Kept page buffers, each with a handle the pool holds.
#[derive(Default)]
pub struct Pool(Mutex<Vec<Arc<String>>>);

impl Pool {
    pub const fn new() -> Pool {
        Pool(Mutex::new(Vec::new()))
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Vec<Arc<String>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An emptied kept buffer nobody else holds any more, or a new one of
    /// `capacity`.
    pub fn take(&self, capacity: usize) -> String {
        let mut kept = self.kept();
        // Handles of kept buffers are cloned only by `give`, under the
        // lock: one held by the pool alone stays so until taken.
        if let Some(i) = kept.iter().position(|b| Arc::strong_count(b) == 1) {
            if let Ok(mut page) = Arc::try_unwrap(kept.swap_remove(i)) {
                page.clear();
                return page;
            }
        }
        String::with_capacity(capacity)
    }

    /// `page` as sent; the pool keeps a handle when it has room and the
    /// buffer is not too large.
    pub fn give(&self, page: String) -> Bytes {
        let page = Arc::new(page);
        if page.capacity() <= MAX_CAPACITY {
            let mut kept = self.kept();
            if kept.len() < BUFFERS {
                kept.push(page.clone());
            }
        }
        Bytes::Text(page)
    }

    pub fn clear(&self) {
        self.kept().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_reused_only_once_its_page_is_written() {
        let pool = Pool::new();
        let mut first = pool.take(4096);
        first.push_str("page one");
        let at = first.as_ptr();
        let sent = pool.give(first);
        // Still being written: a new buffer.
        let other = pool.take(16);
        assert_ne!(other.as_ptr(), at);
        assert_eq!(&*sent, b"page one");
        drop(sent);
        let again = pool.take(16);
        assert_eq!(again.as_ptr(), at, "the written page's memory");
        assert!(again.is_empty() && again.capacity() >= 4096);
        // Too large to keep.
        drop(pool.give(String::with_capacity(MAX_CAPACITY + 1)));
        assert!(pool.take(16).capacity() < MAX_CAPACITY);
    }

    #[test]
    fn the_pool_is_bounded_and_cleared() {
        let pool = Pool::new();
        let sent: Vec<Bytes> = (0..BUFFERS + 3).map(|_| pool.give(pool.take(64))).collect();
        assert_eq!(pool.kept().len(), BUFFERS);
        drop(sent);
        pool.clear();
        assert!(pool.kept().is_empty());
    }
}
