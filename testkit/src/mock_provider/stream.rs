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
//! ([`MockProvider::stream_closes`]). Streams are paced by tasks on smol's
//! executor, on timers, not by their connections' threads.

use std::io::{self, Read};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use smol::io::AsyncWriteExt;
use smol::{future, Async, Timer};

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
///
/// The pacing runs as a task on smol's global executor, so one thread
/// paces every stream on timers and watches every socket for the client's
/// close; this connection's thread only waits for the task (a thread per
/// paced stream, woken per token, would load the box a bench measures).
pub(super) fn answer(
    conn: &mut TcpStream,
    shared: &Arc<Shared>,
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
    let pacer = Pacer {
        sock: Async::new(conn.try_clone()?)?,
        shared: shared.clone(),
        seq,
        sent: 0,
        kind,
        ping_every: timing.ping_every,
    };
    let done = smol::future::block_on(smol::spawn(pacer.run(events, timing, fault)));
    // The task's handle made the socket non-blocking (one file
    // description); this thread reads the next request blocking.
    conn.set_nonblocking(false)?;
    // A cut ends the body early; the connection closes too.
    Ok(done? && cut_at.is_none())
}

/// One streamed reply being paced.
struct Pacer {
    sock: Async<TcpStream>,
    shared: Arc<Shared>,
    seq: u64,
    sent: usize,
    kind: Kind,
    ping_every: Option<Duration>,
}

impl Pacer {
    /// The whole reply; `Ok(false)` once the client has gone.
    async fn run(
        mut self,
        events: Vec<String>,
        timing: StreamTiming,
        fault: Option<StreamFault>,
    ) -> io::Result<bool> {
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
                    transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n";
        self.sock.write_all(head.as_bytes()).await?;
        let started = Instant::now();
        for (i, ev) in events.iter().enumerate() {
            let wait = match i {
                0 => Duration::ZERO,
                1 => timing.first_token.saturating_sub(started.elapsed()),
                _ => timing.per_token,
            };
            if !self.wait(wait).await? || !self.event(ev).await? {
                return Ok(false);
            }
        }
        match fault {
            Some(StreamFault::PingsForever { .. }) => {
                let every = timing.ping_every.unwrap_or(Duration::from_millis(100));
                loop {
                    if !self.wait_quiet(every).await?
                        || !self.event(&encode::ping(self.kind)).await?
                    {
                        return Ok(false);
                    }
                }
            }
            Some(StreamFault::Silence { .. }) => loop {
                if !self.wait_quiet(Duration::from_millis(100)).await? {
                    return Ok(false);
                }
            },
            _ => {}
        }
        self.sock.write_all(b"0\r\n\r\n").await?;
        self.sock.flush().await?;
        Ok(true)
    }

    /// One event as one chunk; `false` once the client has gone.
    async fn event(&mut self, ev: &str) -> io::Result<bool> {
        let chunk = format!("{:x}\r\n{ev}\r\n", ev.len());
        if self.sock.write_all(chunk.as_bytes()).await.is_err() {
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
    async fn wait(&mut self, d: Duration) -> io::Result<bool> {
        let Some(every) = self.ping_every else {
            return self.wait_quiet(d).await;
        };
        let deadline = Instant::now() + d;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(true);
            }
            if !self.wait_quiet(left.min(every)).await? {
                return Ok(false);
            }
            if Instant::now() < deadline && !self.event(&encode::ping(self.kind)).await? {
                return Ok(false);
            }
        }
    }

    /// Waits `d` without writing, watching for the client's close.
    async fn wait_quiet(&mut self, d: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + d;
        let mut buf = [0u8; 256];
        loop {
            if self.shared.lock().shutdown {
                return Ok(false);
            }
            if deadline <= Instant::now() {
                return Ok(true);
            }
            let sock = &self.sock;
            let readable = future::or(
                async {
                    Timer::at(deadline).await;
                    false
                },
                async {
                    // An error shows in the read below.
                    let _ = sock.readable().await;
                    true
                },
            )
            .await;
            if !readable {
                return Ok(true);
            }
            match self.sock.get_ref().read(&mut buf) {
                Ok(0) => {
                    if !self.shared.lock().shutdown {
                        self.closed();
                    }
                    return Ok(false);
                }
                // A client sends nothing while it reads a response.
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
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
