//! Streamed replies of the mock provider: a request whose body asks for
//! `"stream": true` gets its scripted reply as the provider's event stream
//! (`text/event-stream`, chunked): Anthropic Messages events or OpenAI
//! Chat Completions chunks and `[DONE]`, rendered by
//! `proto::provider::stream::encode` from the very body the unstreamed
//! answer would have had, so a client that assembles the stream correctly
//! gets exactly that body. The official `anthropic` and `openai` Python
//! SDKs read this output in `testkit/tests/mock_stream_sdks.rs`.
//!
//! Timing ([`StreamTiming`], per mock or per reply): the latency to the
//! first content event, the delay between events ("tokens"), pings while
//! waiting. Faults ([`StreamFault`]): the stream cut, a malformed event,
//! an in-stream error, pings forever or silence after some events. The
//! mock notices a client that closes the connection mid-stream
//! ([`MockProvider::stream_closes`]).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use proto::provider::stream::encode;
use proto::provider::Kind;
use serde_json::Value;

use super::{Endpoint, MockProvider, Reply, Shared};

/// How a streamed reply is paced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamTiming {
    /// From the request to the first event after the opening one
    /// (`message_start` / the role chunk goes out at once, as providers do).
    pub first_token: Duration,
    /// Between two later events.
    pub per_token: Duration,
    /// Characters of text per delta event.
    pub token_chars: usize,
    /// A ping (Anthropic `ping`, an SSE comment for OpenAI) at this period
    /// while the mock waits (`None`: never).
    pub ping_every: Option<Duration>,
}

impl Default for StreamTiming {
    fn default() -> Self {
        StreamTiming {
            first_token: Duration::ZERO,
            per_token: Duration::ZERO,
            token_chars: 4,
            ping_every: None,
        }
    }
}

/// What goes wrong with a streamed reply, after `after` events of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFault {
    /// The connection closes (a clean end of the chunked body).
    Cut { after: usize },
    /// An event whose data is not JSON, then the rest as usual.
    Malformed { after: usize },
    /// The provider's in-stream error event, then the end.
    Error { after: usize },
    /// Pings forever (every `ping_every`, or 100 ms), nothing else.
    PingsForever { after: usize },
    /// Nothing more, the connection held open.
    Silence { after: usize },
}

/// A streamed reply with its own timing or fault ([`Reply::Stream`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Streamed {
    pub reply: Reply,
    pub timing: Option<StreamTiming>,
    pub fault: Option<StreamFault>,
}

/// A client that closed its connection while the mock streamed to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamClose {
    /// The request's position among all the mock received (1-based).
    pub seq: u64,
    /// Events written before the close was seen.
    pub events_sent: usize,
    pub at: Instant,
}

impl Reply {
    /// `self` streamed (when asked for) with `timing`.
    pub fn paced(self, timing: StreamTiming) -> Reply {
        let (reply, fault) = self.unwrap_stream();
        Reply::Stream(Box::new(Streamed {
            reply,
            timing: Some(timing),
            fault,
        }))
    }

    /// `self` streamed (when asked for) with `fault`.
    pub fn faulty(self, fault: StreamFault) -> Reply {
        let (reply, timing) = match self {
            Reply::Stream(s) => (s.reply, s.timing),
            other => (other, None),
        };
        Reply::Stream(Box::new(Streamed {
            reply,
            timing,
            fault: Some(fault),
        }))
    }

    /// Whether it answers with a scripted assistant reply (what a stream
    /// carries), not a raw body, a delay or a fault of the connection.
    pub(super) fn renders_body(&self) -> bool {
        matches!(
            self,
            Reply::Text { .. }
                | Reply::ToolUse { .. }
                | Reply::AnthropicText { .. }
                | Reply::AnthropicToolUse { .. }
                | Reply::OpenaiText { .. }
                | Reply::OpenaiToolCalls { .. }
        )
    }

    fn unwrap_stream(self) -> (Reply, Option<StreamFault>) {
        match self {
            Reply::Stream(s) => (s.reply, s.fault),
            other => (other, None),
        }
    }
}

impl MockProvider {
    /// The pacing of every streamed reply without its own.
    pub fn set_stream_timing(&self, timing: StreamTiming) {
        self.shared.lock().timing = timing;
    }

    /// When each event of the streamed reply to request `seq` (1-based,
    /// in arrival order) was written: `[0]` is `message_start` / the role
    /// chunk, content events follow (benches time deltas against them).
    pub fn stream_writes(&self, seq: u64) -> Vec<Instant> {
        self.shared
            .lock()
            .writes
            .get(&seq)
            .cloned()
            .unwrap_or_default()
    }

    /// Every mid-stream close seen so far.
    pub fn stream_closes(&self) -> Vec<StreamClose> {
        self.shared.lock().closes.clone()
    }

    /// Waits until at least `n` mid-stream closes were seen (or `timeout`).
    pub fn wait_stream_closes(&self, n: usize, timeout: Duration) -> Vec<StreamClose> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        loop {
            let now = Instant::now();
            if st.closes.len() >= n || now >= deadline {
                return st.closes.clone();
            }
            st = (self.shared.cond.wait_timeout(st, deadline - now))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// Whether a request body asks for a streamed reply.
pub(super) fn wants_stream(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool) == Some(true)
}

/// The stream's events for the unstreamed `body` of `endpoint`.
fn events(endpoint: Endpoint, body: &Value, token_chars: usize) -> (Kind, Vec<String>) {
    let kind = match endpoint {
        Endpoint::Openai => Kind::Openai,
        _ => Kind::Anthropic,
    };
    (kind, encode::events(kind, body, token_chars))
}

/// Writes the streamed reply; `Ok(false)` when the connection must close.
pub(super) fn answer(
    conn: &mut TcpStream,
    shared: &Shared,
    streamed: Streamed,
    body: Value,
    endpoint: Endpoint,
    seq: u64,
) -> io::Result<bool> {
    let timing = streamed.timing.unwrap_or_else(|| shared.lock().timing);
    let (kind, mut events) = events(endpoint, &body, timing.token_chars);
    let fault = streamed.fault;
    let cut_at = match fault {
        Some(StreamFault::Cut { after })
        | Some(StreamFault::Error { after })
        | Some(StreamFault::PingsForever { after })
        | Some(StreamFault::Silence { after }) => Some(after.min(events.len())),
        _ => None,
    };
    if let Some(StreamFault::Malformed { after }) = fault {
        let bad = "event: content_block_delta\ndata: {\"type\": oops}\n\n".to_string();
        events.insert(after.min(events.len()), bad);
    }
    if let Some(at) = cut_at {
        events.truncate(at);
        if let Some(StreamFault::Error { .. }) = fault {
            events.push(encode::error(kind, "overloaded_error", "Overloaded"));
        }
    }
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
                transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n";
    conn.write_all(head.as_bytes())?;
    let mut w = Writer {
        conn,
        shared,
        seq,
        sent: 0,
        kind,
        ping_every: timing.ping_every,
    };
    let started = Instant::now();
    for (i, ev) in events.iter().enumerate() {
        let wait = match i {
            0 => Duration::ZERO,
            1 => timing.first_token.saturating_sub(started.elapsed()),
            _ => timing.per_token,
        };
        if !w.wait(wait)? || !w.event(ev)? {
            return Ok(false);
        }
    }
    match fault {
        Some(StreamFault::PingsForever { .. }) => {
            let every = timing.ping_every.unwrap_or(Duration::from_millis(100));
            loop {
                if !w.wait_quiet(every)? || !w.event(&encode::ping(kind))? {
                    return Ok(false);
                }
            }
        }
        Some(StreamFault::Silence { .. }) => loop {
            if !w.wait_quiet(Duration::from_millis(100))? {
                return Ok(false);
            }
        },
        _ => {}
    }
    w.conn.write_all(b"0\r\n\r\n")?;
    w.conn.flush()?;
    // A cut ends the body early; the connection closes too.
    Ok(cut_at.is_none())
}

struct Writer<'a> {
    conn: &'a mut TcpStream,
    shared: &'a Shared,
    seq: u64,
    sent: usize,
    kind: Kind,
    ping_every: Option<Duration>,
}

impl Writer<'_> {
    /// One event as one chunk; `false` once the client has gone.
    fn event(&mut self, ev: &str) -> io::Result<bool> {
        let chunk = format!("{:x}\r\n{ev}\r\n", ev.len());
        if self
            .conn
            .write_all(chunk.as_bytes())
            .and_then(|_| self.conn.flush())
            .is_err()
        {
            self.closed();
            return Ok(false);
        }
        self.sent += 1;
        let now = Instant::now();
        self.shared
            .lock()
            .writes
            .entry(self.seq)
            .or_default()
            .push(now);
        Ok(true)
    }

    /// Waits `d`, pinging at the configured period; `false` once the client
    /// has gone (or the mock stops).
    fn wait(&mut self, d: Duration) -> io::Result<bool> {
        let Some(every) = self.ping_every else {
            return self.wait_quiet(d);
        };
        let deadline = Instant::now() + d;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(true);
            }
            if !self.wait_quiet(left.min(every))? {
                return Ok(false);
            }
            if Instant::now() < deadline && !self.event(&encode::ping(self.kind))? {
                return Ok(false);
            }
        }
    }

    /// Waits `d` without writing, watching for the client's close.
    fn wait_quiet(&mut self, d: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + d;
        let mut buf = [0u8; 256];
        loop {
            if self.shared.lock().shutdown {
                return Ok(false);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(true);
            }
            self.conn
                .set_read_timeout(Some(left.min(Duration::from_millis(5))))?;
            let read = self.conn.read(&mut buf);
            self.conn.set_read_timeout(None)?;
            match read {
                Ok(0) => {
                    self.closed();
                    return Ok(false);
                }
                // A client sends nothing while it reads a response.
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.closed();
                    return Ok(false);
                }
            }
        }
    }

    fn closed(&mut self) {
        let close = StreamClose {
            seq: self.seq,
            events_sent: self.sent,
            at: Instant::now(),
        };
        self.shared.lock().closes.push(close);
        self.shared.cond.notify_all();
    }
}
