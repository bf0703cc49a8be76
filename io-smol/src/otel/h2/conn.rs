//! The client side of one HTTP/2 connection (RFC 9113), blocking, one
//! request stream at a time. Generic over [`Io`] so the tests drive it with
//! scripted peer bytes, no sockets.
//!
//! Whatever the peer sends, memory stays bounded: one frame of at most
//! our SETTINGS_MAX_FRAME_SIZE is buffered, a header block is capped in
//! compressed and decoded size, a response body at [`MAX_BODY`]. Time is
//! bounded by the caller's deadline, checked before every read and write.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use super::frame::{self, Frame, DEFAULT_MAX_FRAME, MAX_STREAM_ID};
use super::hpack::{self, Field};
use super::{Error, Reason};

mod inbound;

/// A byte stream whose blocking reads and writes can be bounded in time.
pub trait Io: Read + Write {
    /// Bounds each following read and write to `t` (never zero).
    fn set_timeout(&mut self, t: Duration) -> io::Result<()>;
}

/// Largest response header list we accept, decoded (RFC 9113 §6.5.2
/// SETTINGS_MAX_HEADER_LIST_SIZE, advertised) and compressed.
pub const MAX_HEADER_LIST: usize = 64 * 1024;
/// Largest response body (gRPC messages and their prefixes).
pub const MAX_BODY: usize = 4 * 1024 * 1024 + 5;
/// Our SETTINGS_HEADER_TABLE_SIZE (the default).
const TABLE_SIZE: usize = 4096;
/// Our receive windows (the default); replenished as DATA arrives.
const RECV_WINDOW: i64 = 65_535;
const READ_CHUNK: usize = 16 * 1024;
/// How long a kept connection is given to show pending frames, and the
/// most its check may take.
const IDLE_POLL: Duration = Duration::from_millis(1);
const IDLE_BUDGET: Duration = Duration::from_millis(50);

/// A response: final status and headers, body bytes, trailers.
#[derive(Debug, Default)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<Field>,
    pub body: Vec<u8>,
    pub trailers: Vec<Field>,
}

/// Our one open stream (`id` 0: none).
#[derive(Default)]
struct Stream {
    id: u32,
    send_window: i64,
    recv_window: i64,
    head: bool,
    done: bool,
    response: Response,
}

pub struct Conn<S> {
    io: S,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    decoder: hpack::Decoder,
    peer_max_frame: u32,
    peer_initial_window: u32,
    peer_max_streams: u32,
    send_window: i64,
    recv_window: i64,
    next_stream: u32,
    /// The peer sent GOAWAY (with this code): no new streams.
    going_away: Option<Reason>,
    /// A failed request left the connection in an unknown state.
    broken: bool,
}

impl<S: Io> Conn<S> {
    /// Queues the preface and our SETTINGS; they go out with the first
    /// request, without waiting for the peer's SETTINGS (§3.4).
    pub fn new(io: S) -> Conn<S> {
        let mut wbuf = frame::PREFACE.to_vec();
        frame::settings(
            &mut wbuf,
            &[
                (frame::ENABLE_PUSH, 0),
                (frame::MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST as u32),
            ],
        );
        Conn {
            io,
            rbuf: Vec::new(),
            wbuf,
            decoder: hpack::Decoder::new(TABLE_SIZE, MAX_HEADER_LIST),
            peer_max_frame: DEFAULT_MAX_FRAME,
            peer_initial_window: RECV_WINDOW as u32,
            peer_max_streams: u32::MAX,
            send_window: RECV_WINDOW,
            recv_window: RECV_WINDOW,
            next_stream: 1,
            going_away: None,
            broken: false,
        }
    }

    /// Whether another request may be sent on this connection.
    pub fn is_open(&self) -> bool {
        self.going_away.is_none() && !self.broken && self.next_stream <= MAX_STREAM_ID
    }

    /// Handles what the peer sent since the last request (SETTINGS, PING,
    /// GOAWAY, a close) without waiting for more, and for no longer than
    /// [`IDLE_BUDGET`] or `deadline`; `false` when the connection can no
    /// longer carry a request.
    pub fn check_idle(&mut self, deadline: Instant) -> bool {
        let limit = deadline.min(Instant::now() + IDLE_BUDGET);
        let mut idle = Stream::default();
        let result = (|| loop {
            while let Some(f) = self.parse()? {
                self.handle(f, &mut idle, limit)?;
            }
            self.flush(limit)?;
            // A peer that never stops sending costs the budget, no more.
            if Instant::now() >= limit {
                return Err(Error::Timeout);
            }
            if !self.fill(IDLE_POLL)? {
                return Ok::<(), Error>(());
            }
        })();
        if result.is_err() {
            self.broken = true;
        }
        self.is_open()
    }

    /// Sends one request (`block`: its encoded header block) and reads its
    /// response, all before `deadline`. After an error the connection is
    /// not open any more.
    pub fn request(
        &mut self,
        block: &[u8],
        body: &[u8],
        deadline: Instant,
    ) -> Result<Response, Error> {
        let mut result = self.exchange(block, body, deadline);
        if let (Err(Error::Closed), Some(reason)) = (&result, self.going_away) {
            // Announced: the close is the GOAWAY's, say so.
            result = Err(Error::GoAway {
                reason,
                unprocessed: false,
            });
        }
        if let Err(e) = &result {
            self.broken = true;
            if let Error::Protocol(reason, _) = e {
                // Best effort, within what remains of the deadline.
                frame::goaway(&mut self.wbuf, 0, *reason);
                let _ = self.flush(deadline.min(Instant::now() + IDLE_BUDGET));
            }
        }
        result
    }

    fn exchange(
        &mut self,
        block: &[u8],
        body: &[u8],
        deadline: Instant,
    ) -> Result<Response, Error> {
        if let Some(reason) = self.going_away {
            return Err(Error::GoAway {
                reason,
                unprocessed: true,
            });
        }
        if !self.is_open() {
            return Err(Error::Closed);
        }
        if self.peer_max_streams == 0 {
            return Err(Error::Reset(Reason::REFUSED_STREAM));
        }
        let mut s = Stream {
            id: self.next_stream,
            send_window: i64::from(self.peer_initial_window),
            recv_window: RECV_WINDOW,
            ..Stream::default()
        };
        self.next_stream += 2;
        frame::headers(
            &mut self.wbuf,
            s.id,
            block,
            self.peer_max_frame,
            body.is_empty(),
        );
        let mut sent = 0;
        while sent < body.len() && !s.done {
            let room = self
                .send_window
                .min(s.send_window)
                .min(i64::from(self.peer_max_frame))
                .min((body.len() - sent) as i64);
            if room <= 0 {
                // Blocked by flow control: wait for WINDOW_UPDATE (or for
                // a response that makes the rest moot).
                let f = self.read_frame(deadline)?;
                self.handle(f, &mut s, deadline)?;
                continue;
            }
            let end = sent + room as usize;
            frame::data(&mut self.wbuf, s.id, &body[sent..end], end == body.len());
            self.send_window -= room;
            s.send_window -= room;
            sent = end;
            if self.wbuf.len() >= 4 * READ_CHUNK {
                self.flush(deadline)?;
            }
        }
        self.flush(deadline)?;
        while !s.done {
            let f = self.read_frame(deadline)?;
            self.handle(f, &mut s, deadline)?;
        }
        // Acknowledgements owed for what came with the response.
        self.flush(deadline)?;
        if sent < body.len() {
            // The peer answered before taking the whole request (§8.1):
            // close our half so the stream ends cleanly.
            frame::rst_stream(&mut self.wbuf, s.id, Reason::CANCEL);
            self.flush(deadline)?;
        }
        Ok(std::mem::take(&mut s.response))
    }

    /// One whole frame from the read buffer, if there is one.
    fn parse(&mut self) -> Result<Option<Frame>, Error> {
        match frame::parse(&self.rbuf, DEFAULT_MAX_FRAME)? {
            Some((f, n)) => {
                self.rbuf.drain(..n);
                Ok(Some(f))
            }
            None => Ok(None),
        }
    }

    fn read_frame(&mut self, deadline: Instant) -> Result<Frame, Error> {
        loop {
            if let Some(f) = self.parse()? {
                return Ok(f);
            }
            // Acknowledgements and window updates must not wait behind us.
            self.flush(deadline)?;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.fill(left)? {
                return Err(Error::Timeout);
            }
        }
    }

    /// Reads what arrives within `wait`: `false` if nothing did.
    fn fill(&mut self, wait: Duration) -> Result<bool, Error> {
        self.io.set_timeout(wait).map_err(transport)?;
        let old = self.rbuf.len();
        self.rbuf.resize(old + READ_CHUNK, 0);
        let result = loop {
            match self.io.read(&mut self.rbuf[old..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        let n = *result.as_ref().unwrap_or(&0);
        self.rbuf.truncate(old + n);
        match result {
            Ok(0) => Err(Error::Closed),
            Ok(_) => Ok(true),
            Err(e) if timed_out(&e) => Ok(false),
            Err(e) => Err(transport(e)),
        }
    }

    fn flush(&mut self, deadline: Instant) -> Result<(), Error> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout);
        }
        self.io.set_timeout(left).map_err(transport)?;
        let result = self.io.write_all(&self.wbuf).and_then(|()| self.io.flush());
        self.wbuf.clear();
        result.map_err(|e| {
            if timed_out(&e) {
                Error::Timeout
            } else {
                transport(e)
            }
        })
    }
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Socket errors as text; a TLS failure names itself.
pub fn transport(e: io::Error) -> Error {
    let tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    Error::Transport(match tls {
        Some(t) => format!("TLS: {t}"),
        None => format!("transport: {e}"),
    })
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
