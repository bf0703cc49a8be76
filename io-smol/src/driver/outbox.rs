//! `baesrv`'s connection writers as the driver loop sees them.
//!
//! What the core hands a writer during a turn of the loop waits in its
//! connection's outbox; at the top of the next turn ([`Outbox::write_all`])
//! each connection's buffers go out together: one vectored write from the
//! driver loop itself when they are small (at most [`writes::DIRECT_MAX`])
//! and the connection's writer task holds nothing, with no task wake-up;
//! otherwise (a page, a busy writer, what a full socket did not take) in
//! order through the writer task's queue, which writes them in 64 KiB
//! pieces. Frames of one connection routed in one turn share one write,
//! and a response's head leaves with its body as before (issue 36).

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::sync::Arc;

use engine::bytes::Bytes;
use engine::ConnId;
use smol::channel::Sender;

use super::writes::{self, Flushes};
use engine::driver::WriterMsg;

/// The connections with buffers waiting, and what was written.
#[derive(Default)]
pub(super) struct Outbox {
    waiting: RefCell<Vec<Rc<Link>>>,
    /// Bytes written and not yet reported to the engine.
    pub(super) flushes: Rc<Flushes>,
    /// Shutting down: buffers go straight to the writer tasks.
    straight: Cell<bool>,
}

/// One connection's side of the outbox.
struct Link {
    conn: ConnId,
    queue: Sender<WriterMsg>,
    socket: Arc<async_io::Async<std::net::TcpStream>>,
    /// The writer task holds bytes it has not written yet.
    busy: Rc<Cell<bool>>,
    pending: RefCell<Vec<WriterMsg>>,
}

/// A connection's writer, as the core holds it.
pub(super) struct ConnWriter {
    link: Rc<Link>,
    outbox: Rc<Outbox>,
}

impl Outbox {
    /// The writer of a new connection whose writer task reads `queue`.
    pub(super) fn writer(
        self: &Rc<Self>,
        conn: ConnId,
        queue: Sender<WriterMsg>,
        socket: Arc<async_io::Async<std::net::TcpStream>>,
        busy: Rc<Cell<bool>>,
    ) -> ConnWriter {
        let link = Rc::new(Link {
            conn,
            queue,
            socket,
            busy,
            pending: RefCell::default(),
        });
        ConnWriter {
            link,
            outbox: self.clone(),
        }
    }

    /// Writes what every connection was handed since the last call.
    pub(super) fn write_all(&self) {
        let waiting = std::mem::take(&mut *self.waiting.borrow_mut());
        for link in waiting {
            link.write_pending(&self.flushes);
        }
    }

    /// From now on every buffer goes straight to its writer task (the
    /// graceful shutdown, whose loop does not call [`Outbox::write_all`]).
    pub(super) fn write_straight(&self) {
        self.write_all();
        self.straight.set(true);
    }
}

impl engine::driver::Writer for ConnWriter {
    fn put(&self, msg: WriterMsg) {
        if self.outbox.straight.get() {
            return self.link.enqueue(msg);
        }
        let mut pending = self.link.pending.borrow_mut();
        if pending.is_empty() {
            self.outbox.waiting.borrow_mut().push(self.link.clone());
        }
        pending.push(msg);
    }
}

impl ConnWriter {
    /// The writer task's queue, for a relay to write to from now on, with
    /// whatever was handed to this writer before already in it.
    pub(super) fn queue(&self) -> Sender<WriterMsg> {
        for msg in self.link.pending.take() {
            self.link.enqueue(msg);
        }
        self.link.queue.clone()
    }
}

impl Link {
    fn enqueue(&self, msg: WriterMsg) {
        // Unbounded: never fails while the writer task is alive.
        let _ = self.queue.try_send(msg);
    }

    fn idle(&self) -> bool {
        !self.busy.get() && self.queue.is_empty() && !self.queue.is_closed()
    }

    fn write_pending(&self, flushes: &Flushes) {
        let msgs = self.pending.take();
        // The buffers before a close, if they are few and small.
        let data = msgs
            .iter()
            .take_while(|m| matches!(m, WriterMsg::Data(_)))
            .count()
            .min(writes::MAX_SLICES);
        let bufs: Vec<&[u8]> = (msgs.iter().take(data))
            .filter_map(|m| match m {
                WriterMsg::Data(b) => Some(&b[..]),
                WriterMsg::Close => None,
            })
            .collect();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut written = 0;
        if total > 0 && total <= writes::DIRECT_MAX && self.idle() {
            let slices: Vec<io::IoSlice<'_>> = bufs.iter().map(|b| io::IoSlice::new(b)).collect();
            written = writes::write_now(&mut self.socket.get_ref(), &slices);
            flushes.add(self.conn, written);
        }
        // What was not written goes to the writer task, in order.
        for msg in msgs {
            match msg {
                WriterMsg::Data(b) if written >= b.len() => written -= b.len(),
                WriterMsg::Data(b) if written > 0 => {
                    // Rare (a full socket buffer): the rest is copied.
                    let rest: Bytes = b.get(written..).unwrap_or_default().to_vec().into();
                    written = 0;
                    self.enqueue(WriterMsg::Data(rest));
                }
                msg => self.enqueue(msg),
            }
        }
    }
}
