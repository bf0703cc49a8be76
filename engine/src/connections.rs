//! The connection table: every accepted connection's HTTP/1.1 codec,
//! keep-alive verdict, one-request-at-a-time pipelining, send accounting
//! and read deadlines (idle and slowloris timeouts). It owns that state and
//! speaks small typed answers ([`Polled`], [`Finished`], [`Expired`]); what
//! a request means is the front layers' business; an open NDJSON response
//! on a connection is the stream hub's (`streams.rs`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use proto::http::{Decoded, Method, Rejection, Request, RequestDecoder};

use crate::{ConnId, Listener, MonoMs};

/// What a connection is doing.
pub struct Conn {
    pub listener: Listener,
    decoder: RequestDecoder,
    /// A request is being answered; later pipelined requests wait.
    pub busy: bool,
    /// The current request's keep-alive verdict.
    pub keep_alive: bool,
    /// A `Close` was emitted; further input is ignored.
    pub closing: bool,
    /// Bytes emitted but not yet reported flushed (back-pressure measure).
    pub unflushed: usize,
    /// Method, path and start of the request being answered (logged once,
    /// with its status).
    current: Option<(Method, String, MonoMs)>,
    /// When the first bytes of a still-incomplete request arrived.
    partial_since: Option<MonoMs>,
    /// Armed while waiting for request bytes (indexed in the table).
    read_deadline: Option<MonoMs>,
}

/// Limits and timeouts of every connection, fixed at start.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub http: proto::http::Limits,
    /// Between requests on a keep-alive connection.
    pub idle_timeout_ms: u64,
    /// From a request's first byte to its last (slowloris guard).
    pub request_timeout_ms: u64,
    /// The body limit of a session import on the admin port.
    pub max_import_bytes: usize,
}

/// The one request with a body larger than the general limit.
pub const IMPORT_PATH: &str = "/admin/v1/sessions/import";

/// What [`Table::poll`] found in a connection's buffer.
pub enum Polled {
    /// Nothing complete yet; the read deadline is armed.
    Waiting,
    /// The client asked for `100 Continue` before sending its body.
    Continue,
    /// A whole request; the connection is busy until [`Table::finish`].
    Request(Box<Request>, Listener),
    /// The bytes are not acceptable HTTP: answer and close.
    Rejected(Rejection),
}

/// What to do once a request has been answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Finished {
    Close,
    /// Look for the next pipelined request.
    Next,
    Gone,
}

/// A read deadline that passed.
#[derive(Debug, PartialEq, Eq)]
pub struct Expired {
    pub conn: ConnId,
    /// A request had started arriving (answered 408) rather than the
    /// connection sitting idle (closed quietly).
    pub partial: bool,
}

/// Every open connection.
pub struct Table {
    settings: Settings,
    conns: BTreeMap<ConnId, Conn>,
    /// `(deadline, conn)` of connections waiting for request bytes.
    deadlines: BTreeSet<(MonoMs, ConnId)>,
    /// Connections whose request was answered and that may hold the next
    /// pipelined one: the engine dispatches it once the input that
    /// answered is handled, never from inside another handler.
    ready: VecDeque<ConnId>,
}

impl Table {
    pub fn new(settings: Settings) -> Self {
        Table {
            settings,
            conns: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            ready: VecDeque::new(),
        }
    }

    pub fn accept(&mut self, conn: ConnId, listener: Listener) {
        let mut decoder = RequestDecoder::new(self.settings.http);
        if listener == Listener::Admin {
            decoder = decoder.with_large_body(IMPORT_PATH, self.settings.max_import_bytes);
        }
        self.conns.insert(
            conn,
            Conn {
                listener,
                decoder,
                busy: false,
                keep_alive: true,
                closing: false,
                unflushed: 0,
                current: None,
                partial_since: None,
                read_deadline: None,
            },
        );
    }

    /// Buffers bytes. `false` when the client keeps pipelining past the
    /// buffer cap while a request is answered: the caller closes it.
    pub fn receive(&mut self, conn: ConnId, bytes: &[u8]) -> bool {
        let Some(c) = self.conns.get_mut(&conn) else {
            return true;
        };
        if c.closing {
            return true;
        }
        c.decoder.feed(bytes);
        let cap = 2 * (self.settings.http.max_head_bytes + self.settings.http.max_body_bytes);
        !(c.busy && c.decoder.buffered() > cap)
    }

    /// The next complete request of an idle connection (`None` when it is
    /// busy, closing or gone). `keep_alive` is the server's own verdict (no
    /// keep-alive once shutting down).
    pub fn poll(&mut self, conn: ConnId, now: MonoMs, keep_alive: bool) -> Option<Polled> {
        let c = self.conns.get_mut(&conn)?;
        if c.busy || c.closing {
            return None;
        }
        match c.decoder.poll() {
            Ok(None) => {
                self.arm_read_deadline(conn, now);
                Some(Polled::Waiting)
            }
            Ok(Some(Decoded::ContinueExpected)) => Some(Polled::Continue),
            Ok(Some(Decoded::Request(req))) => {
                c.busy = true;
                c.partial_since = None;
                c.keep_alive = req.keep_alive && keep_alive;
                c.current = Some((req.method.clone(), req.path().to_owned(), now));
                if let Some(d) = c.read_deadline.take() {
                    self.deadlines.remove(&(d, conn));
                }
                let listener = c.listener;
                Some(Polled::Request(Box::new(req), listener))
            }
            Err(rejection) => Some(Polled::Rejected(rejection)),
        }
    }

    /// Waiting for request bytes: an idle connection gets the idle timeout,
    /// a partial request the request timeout from its first byte.
    pub fn arm_read_deadline(&mut self, conn: ConnId, now: MonoMs) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let deadline = if c.decoder.is_idle() {
            c.partial_since = None;
            now + self.settings.idle_timeout_ms
        } else {
            *c.partial_since.get_or_insert(now) + self.settings.request_timeout_ms
        };
        if let Some(old) = c.read_deadline.replace(deadline) {
            self.deadlines.remove(&(old, conn));
        }
        self.deadlines.insert((deadline, conn));
    }

    pub fn next_deadline(&self) -> Option<MonoMs> {
        self.deadlines.first().map(|(d, _)| *d)
    }

    /// Read deadlines passed by `now`, of connections not answering a
    /// request; each is disarmed.
    pub fn expire(&mut self, now: MonoMs) -> Vec<Expired> {
        let mut out = Vec::new();
        while let Some(&(deadline, conn)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.remove(&(deadline, conn));
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            c.read_deadline = None;
            if c.busy || c.closing {
                continue;
            }
            out.push(Expired {
                conn,
                partial: !c.decoder.is_idle(),
            });
        }
        out
    }

    /// Accounts `len` bytes about to be sent; `false` once the connection
    /// is closing or gone (nothing more may be written).
    pub fn sending(&mut self, conn: ConnId, len: usize) -> bool {
        match self.conns.get_mut(&conn) {
            Some(c) if !c.closing => {
                c.unflushed += len;
                true
            }
            _ => false,
        }
    }

    pub fn flushed(&mut self, conn: ConnId, bytes: usize) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.unflushed = c.unflushed.saturating_sub(bytes);
        }
    }

    /// Marks the connection closing; `true` the first time (the caller
    /// emits the one `Close`).
    pub fn close(&mut self, conn: ConnId) -> bool {
        match self.conns.get_mut(&conn) {
            Some(c) if !c.closing => {
                c.closing = true;
                true
            }
            _ => false,
        }
    }

    /// The current request is fully answered.
    pub fn finish(&mut self, conn: ConnId) -> Finished {
        let Some(c) = self.conns.get_mut(&conn) else {
            return Finished::Gone;
        };
        c.busy = false;
        if c.keep_alive {
            self.ready.push_back(conn);
            Finished::Next
        } else {
            Finished::Close
        }
    }

    /// The next connection to look at for a pipelined request (see
    /// [`Table::finish`]).
    pub fn take_ready(&mut self) -> Option<ConnId> {
        self.ready.pop_front()
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The peer is gone: forgets the connection and its deadline.
    pub fn remove(&mut self, conn: ConnId) -> Option<Conn> {
        let c = self.conns.remove(&conn)?;
        if let Some(d) = c.read_deadline {
            self.deadlines.remove(&(d, conn));
        }
        Some(c)
    }

    /// Method, path and start of the request being answered, once.
    pub fn take_current(&mut self, conn: ConnId) -> Option<(Method, String, MonoMs, Listener)> {
        let c = self.conns.get_mut(&conn)?;
        let (method, path, start) = c.current.take()?;
        Some((method, path, start, c.listener))
    }

    /// Whether responses on `conn` must carry `Connection: close`.
    pub fn closes_after(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).map(|c| !c.keep_alive).unwrap_or(true)
    }

    pub fn get(&self, conn: &ConnId) -> Option<&Conn> {
        self.conns.get(conn)
    }

    pub fn get_mut(&mut self, conn: &ConnId) -> Option<&mut Conn> {
        self.conns.get_mut(conn)
    }

    pub fn contains_key(&self, conn: &ConnId) -> bool {
        self.conns.contains_key(conn)
    }

    pub fn keys(&self) -> impl Iterator<Item = &ConnId> {
        self.conns.keys()
    }

    pub fn len(&self) -> usize {
        self.conns.len()
    }
}

#[cfg(test)]
mod tests;
