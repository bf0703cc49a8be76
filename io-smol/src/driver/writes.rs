//! A connection writer's batching, shared by any runtime whose writer is a
//! queue of [`WriterMsg`]s in front of a socket: gather what is already
//! queued into one batch, then write it with as few vectored writes as the
//! socket takes (no copy: a page's head and its body, a burst of frames, a
//! live event shared by many streams go out as they are). Also the flush
//! ledger ([`Flushes`]) and the direct write of small buffers to an idle
//! connection ([`write_now`]) of `baesrv`'s writers (`outbox.rs`); the
//! same batching on a blocking socket for `baesrv-threads` ([`write_blocking`]).

use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use engine::bytes::Bytes;
use engine::ConnId;
use futures_lite::{AsyncWrite, AsyncWriteExt};

use engine::driver::WriterMsg;

/// Bytes after which a writer stops gathering queued buffers into one write.
const MAX_WRITE: usize = 256 * 1024;
/// Most buffers in one vectored write (well under `IOV_MAX`).
pub(super) const MAX_SLICES: usize = 64;

/// The buffers of one write, and whether the socket closes after them.
#[derive(Debug)]
pub(crate) struct Batch {
    pub(crate) bufs: Vec<Bytes>,
    /// Their total length (what the write reports as flushed).
    pub(crate) total: usize,
    /// A `Close` was queued right after them.
    pub(crate) close_after: bool,
}

/// Gathers `first` and what `try_next` yields without waiting, up to
/// [`MAX_WRITE`] bytes or [`MAX_SLICES`] buffers, stopping at a `Close`.
pub(crate) fn gather(first: Bytes, mut try_next: impl FnMut() -> Option<WriterMsg>) -> Batch {
    let mut batch = Batch {
        total: first.len(),
        bufs: vec![first],
        close_after: false,
    };
    while batch.total < MAX_WRITE && batch.bufs.len() < MAX_SLICES {
        match try_next() {
            Some(WriterMsg::Data(more)) => {
                batch.total += more.len();
                batch.bufs.push(more);
            }
            Some(WriterMsg::Close) => {
                batch.close_after = true;
                break;
            }
            None => break,
        }
    }
    batch
}

/// Bytes one write system call takes at most: a page of several hundred
/// KiB leaves in pieces, one per turn of the driver thread's executor, so
/// the tasks queued behind this writer (a liveness probe's reader or
/// writer) wait for one piece, not for the whole page.
pub(super) const WRITE_SLICE: usize = 64 * 1024;

/// Writes every buffer of `bufs`, in order, with vectored writes of at
/// most [`WRITE_SLICE`] bytes, yielding to the executor between them.
pub(super) async fn write_all_vectored(
    out: &mut (impl AsyncWrite + Unpin),
    bufs: &[Bytes],
) -> io::Result<()> {
    // Position of the next byte to write: buffer index and offset in it.
    let (mut i, mut off) = (0usize, 0usize);
    let mut slices: Vec<io::IoSlice<'_>> = Vec::with_capacity(bufs.len().min(MAX_SLICES));
    loop {
        slices.clear();
        let mut room = WRITE_SLICE;
        let (mut j, mut at) = (i, off);
        while room > 0 && slices.len() < MAX_SLICES {
            let Some(rest) = bufs.get(j).and_then(|b| b.get(at..)) else {
                break;
            };
            let take = rest.len().min(room);
            if take > 0 {
                slices.push(io::IoSlice::new(rest.get(..take).unwrap_or_default()));
            }
            room -= take;
            if take == rest.len() {
                (j, at) = (j + 1, 0);
            } else {
                at += take;
            }
        }
        if slices.is_empty() {
            return Ok(());
        }
        let mut n = out.write_vectored(&slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        // Move the position past the `n` bytes written.
        while n > 0 && i < bufs.len() {
            let left = bufs.get(i).map_or(0, |b| b.len() - off);
            if n < left {
                off += n;
                n = 0;
            } else {
                n -= left;
                (i, off) = (i + 1, 0);
            }
        }
        // Skip empty buffers, then let other tasks run before the next piece.
        while bufs.get(i).is_some_and(|b| b.len() == off) {
            (i, off) = (i + 1, 0);
        }
        if i < bufs.len() {
            futures_lite::future::yield_now().await;
        }
    }
}

/// [`write_all_vectored`] on a blocking socket (`baesrv-threads`' writer
/// threads): the same pieces, each write waiting for the socket.
pub(crate) fn write_blocking(out: &mut impl io::Write, bufs: &[Bytes]) -> io::Result<()> {
    futures_lite::future::block_on(write_all_vectored(&mut Blocking(out), bufs))
}

/// A blocking writer as an [`AsyncWrite`] that is always ready.
struct Blocking<'a, W>(&'a mut W);

impl<W: io::Write> Blocking<'_, W> {
    fn write_with(&mut self, f: impl Fn(&mut W) -> io::Result<usize>) -> Poll<io::Result<usize>> {
        loop {
            match f(self.0) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return Poll::Ready(r),
            }
        }
    }
}

impl<W: io::Write> AsyncWrite for Blocking<'_, W> {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().write_with(|w| w.write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().write_with(|w| w.write_vectored(bufs))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.get_mut().0.flush())
    }

    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Most bytes written straight to an idle connection's socket from the
/// driver loop: one write of at most one [`WRITE_SLICE`], like one piece of
/// a writer task's batch, so a probe waits no longer behind it.
pub(super) const DIRECT_MAX: usize = WRITE_SLICE;

/// Writes what the socket takes of `bufs` now, in one vectored write,
/// without waiting: the bytes written (0 when it is full or failed: the
/// writer task then writes the rest, and meets the error itself).
pub(super) fn write_now(out: &mut impl io::Write, bufs: &[io::IoSlice<'_>]) -> usize {
    loop {
        match out.write_vectored(bufs) {
            Ok(n) => return n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return 0,
        }
    }
}

/// Bytes the connections' writers wrote and the engine has not been told
/// of yet. The driver loop takes them once per turn, one
/// `Input::Flushed` per connection, instead of an event and an engine step
/// per write (issue 36): the engine sees the same bytes, no later than the
/// next turn of the loop, as before.
#[derive(Default)]
pub(super) struct Flushes {
    pending: RefCell<Vec<(ConnId, usize)>>,
    /// The driver loop, waiting for work.
    waiting: Cell<Option<Waker>>,
}

impl Flushes {
    /// `bytes` of `conn` reached its socket.
    pub(super) fn add(&self, conn: ConnId, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let mut pending = self.pending.borrow_mut();
        match pending.last_mut() {
            Some((c, n)) if *c == conn => *n += bytes,
            _ => pending.push((conn, bytes)),
        }
        drop(pending);
        if let Some(w) = self.waiting.take() {
            w.wake();
        }
    }

    /// Resolves once a report is pending.
    pub(super) async fn ready(&self) {
        std::future::poll_fn(|cx| {
            if self.pending.borrow().is_empty() {
                self.waiting.set(Some(cx.waker().clone()));
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await
    }

    /// Takes the pending reports into `out` (with what it already holds):
    /// one per connection, its bytes summed.
    pub(super) fn take_into(&self, out: &mut Vec<(ConnId, usize)>) {
        out.append(&mut self.pending.borrow_mut());
        out.sort_by_key(|&(c, _)| c);
        out.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                earlier.1 += later.1;
            }
            same
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use super::*;

    fn queue(msgs: Vec<WriterMsg>) -> impl FnMut() -> Option<WriterMsg> {
        let mut q = VecDeque::from(msgs);
        move || q.pop_front()
    }

    fn bytes(b: &[u8]) -> Bytes {
        Bytes::from(b.to_vec())
    }

    fn data(n: usize) -> WriterMsg {
        WriterMsg::Data(Bytes::from(vec![b'x'; n]))
    }

    #[test]
    fn gather_takes_what_is_queued_and_stops_at_a_close() {
        let mut next = queue(vec![data(2), data(3), WriterMsg::Close, data(4)]);
        let b = gather(bytes(b"a"), &mut next);
        assert_eq!(b.bufs.len(), 3);
        assert_eq!(b.total, 6);
        assert!(b.close_after);
        // What follows the close stays queued.
        assert!(matches!(next(), Some(WriterMsg::Data(d)) if d.len() == 4));
    }

    #[test]
    fn gather_stops_at_the_slice_and_byte_limits() {
        let mut next = queue((0..100).map(|_| data(1)).collect());
        let b = gather(bytes(b"a"), &mut next);
        assert_eq!(
            (b.bufs.len(), b.total, b.close_after),
            (MAX_SLICES, MAX_SLICES, false)
        );

        let mut next = queue(vec![data(MAX_WRITE), data(1)]);
        let b = gather(bytes(b"a"), &mut next);
        assert_eq!(b.total, MAX_WRITE + 1);
        assert!(matches!(next(), Some(WriterMsg::Data(d)) if d.len() == 1));
    }

    /// A socket that takes at most `per_call` bytes per write (or none),
    /// recording how much each call carried. A `vectored` one takes from
    /// every slice it is offered; otherwise it keeps the trait's default
    /// (the first non-empty slice only).
    struct Socket {
        got: Vec<u8>,
        per_call: usize,
        vectored: bool,
        calls: Vec<usize>,
    }

    impl Socket {
        fn trickle(per_call: usize) -> Self {
            Socket {
                got: Vec::new(),
                per_call,
                vectored: false,
                calls: Vec::new(),
            }
        }
        fn wide() -> Self {
            Socket {
                vectored: true,
                ..Socket::trickle(usize::MAX)
            }
        }
    }

    impl AsyncWrite for Socket {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.per_call);
            self.calls.push(n);
            self.got.extend_from_slice(buf.get(..n).unwrap_or_default());
            Poll::Ready(Ok(n))
        }
        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            if !self.vectored {
                let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| b);
                return self.poll_write(cx, first);
            }
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.per_call - n);
                self.got
                    .extend_from_slice(b.get(..take).unwrap_or_default());
                n += take;
            }
            self.calls.push(n);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn vectored_write_resumes_after_short_writes_in_order() {
        let bufs = [bytes(b"head\r\n"), bytes(b""), bytes(b"body")];
        let mut out = Socket::trickle(3);
        futures_lite::future::block_on(write_all_vectored(&mut out, &bufs)).unwrap();
        assert_eq!(out.got, b"head\r\nbody");
        // The default `poll_write_vectored` writes the first non-empty
        // slice: 3 + 3, then 3 + 1.
        assert_eq!(out.calls.len(), 4);
    }

    #[test]
    fn vectored_write_fails_on_a_socket_that_takes_nothing() {
        let mut out = Socket::trickle(0);
        let err = futures_lite::future::block_on(write_all_vectored(&mut out, &[bytes(b"x")]))
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WriteZero);
    }

    #[test]
    fn a_large_page_leaves_in_bounded_pieces_with_its_bytes_unchanged() {
        let page: Vec<u8> = (0..5 * WRITE_SLICE + 123)
            .map(|i| (i % 251) as u8)
            .collect();
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 327803\r\n\r\n";
        let bufs = [
            bytes(head),
            bytes(b""),
            Bytes::from(page.clone()),
            bytes(b"tail"),
        ];
        let mut out = Socket::wide();
        let mut write = Box::pin(write_all_vectored(&mut out, &bufs));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // Each `Pending` is one yield to the executor between pieces.
        let mut yields = 0;
        while write.as_mut().poll(&mut cx).is_pending() {
            yields += 1;
        }
        drop(write);
        let whole = [&head[..], &page, b"tail"].concat();
        assert_eq!(out.got, whole, "the bytes on the wire are unchanged");
        assert_eq!(out.calls.len(), whole.len().div_ceil(WRITE_SLICE));
        assert!(
            out.calls.iter().all(|&n| n <= WRITE_SLICE),
            "{:?}",
            out.calls
        );
        assert_eq!(yields, out.calls.len() - 1, "a yield between pieces");
    }

    #[test]
    fn small_buffers_share_one_write_without_yielding() {
        let bufs = [bytes(b"a"), bytes(b"bc"), bytes(b"def")];
        let mut out = Socket::wide();
        let mut write = Box::pin(write_all_vectored(&mut out, &bufs));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(write.as_mut().poll(&mut cx).is_ready());
        drop(write);
        assert_eq!((out.got.as_slice(), out.calls), (&b"abcdef"[..], vec![6]));
    }

    #[test]
    fn flush_reports_are_summed_per_connection() {
        let f = Flushes::default();
        for (c, n) in [(2, 10), (2, 5), (1, 7), (2, 1), (3, 0)] {
            f.add(ConnId(c), n);
        }
        let mut out = vec![(ConnId(1), 1)];
        f.take_into(&mut out);
        assert_eq!(out, vec![(ConnId(1), 8), (ConnId(2), 16)]);
        // A write of nothing reports nothing.
        let mut again = Vec::new();
        f.take_into(&mut again);
        assert!(again.is_empty());
    }

    #[test]
    fn the_loop_waiting_for_reports_is_woken_by_the_first() {
        let f = Flushes::default();
        let mut ready = Box::pin(f.ready());
        let woken = std::sync::Arc::new(Woken::default());
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(ready.as_mut().poll(&mut cx).is_pending());
        f.add(ConnId(4), 3);
        assert!(woken.0.load(std::sync::atomic::Ordering::SeqCst));
        assert!(ready.as_mut().poll(&mut cx).is_ready());
    }

    #[derive(Default)]
    struct Woken(std::sync::atomic::AtomicBool);

    impl std::task::Wake for Woken {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A non-blocking socket: a signal interrupts the first call, then it
    /// takes `room` bytes and would block after that.
    struct Full {
        room: usize,
        interrupted: bool,
        got: Vec<u8>,
    }

    impl io::Write for Full {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if !self.interrupted {
                self.interrupted = true;
                return Err(io::ErrorKind::Interrupted.into());
            }
            if self.room == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            self.got.extend_from_slice(buf.get(..n).unwrap_or_default());
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_direct_write_takes_what_the_socket_takes_now() {
        let mut out = Full {
            room: 4,
            interrupted: false,
            got: Vec::new(),
        };
        let frame = [io::IoSlice::new(b"fra"), io::IoSlice::new(b"me")];
        // The default vectored write takes the first slice only.
        assert_eq!(write_now(&mut out, &frame), 3, "retried after the signal");
        assert_eq!(write_now(&mut out, &frame[1..]), 1);
        assert_eq!(out.got, b"fram");
        let e = [io::IoSlice::new(b"e")];
        assert_eq!(write_now(&mut out, &e), 0, "full: nothing, no error");
    }

    #[test]
    fn a_blocking_write_resumes_after_a_signal_and_short_writes() {
        let full = |room| Full {
            room,
            interrupted: false,
            got: Vec::new(),
        };
        let bufs = [bytes(b"fra"), bytes(b""), bytes(b"me")];
        let mut out = full(5);
        write_blocking(&mut out, &bufs).unwrap();
        assert_eq!(out.got, b"frame");
        // A socket error ends the batch (the writer then closes).
        let mut out = full(3);
        let e = write_blocking(&mut out, &bufs).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }
}
