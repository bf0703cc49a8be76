//! A scriptable mock LLM provider speaking Anthropic Messages
//! (`POST /v1/messages`) and OpenAI Chat Completions
//! (`POST /v1/chat/completions`) over plain HTTP/1.1 on `127.0.0.1:0`
//! ([`MockProvider::start`]) or a given address ([`MockProvider::bind`],
//! used by the `bae-mock-provider` binary of the quickstart).
//!
//! Replies are taken from a FIFO script shared by every connection (in the
//! order requests finish arriving); when the script is empty the default
//! reply is used (initially the text `"ok"` with usage (10, 5) in the wire
//! format of the endpoint hit). Connections are kept alive, one thread each
//! (a streamed reply is paced on timers by a task, `stream.rs`).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use proto::http::peer::{self as wire, BodyDecoder};

mod limits;
pub use limits::{http_date_in, LimitStats, Limited};
pub mod cache;
mod render;
mod stream;

pub use cache::{CacheCall, CacheConfig};
use render::render;
pub use stream::{StreamClose, StreamFault, StreamTiming, Streamed};

/// Default usage reported by the convenience constructors.
pub const DEFAULT_USAGE: (u64, u64) = (10, 5);

/// One scripted answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Text answer rendered in the format of the endpoint hit. `truncated`
    /// selects `stop_reason: "max_tokens"` / `finish_reason: "length"`.
    Text {
        text: String,
        usage: Option<(u64, u64)>,
        truncated: bool,
    },
    /// Tool call(s) `(id, name, input)` rendered in the format of the
    /// endpoint hit (OpenAI: `arguments` is the serialized input), with an
    /// optional leading text.
    ToolUse {
        text: Option<String>,
        calls: Vec<(String, String, Value)>,
        usage: Option<(u64, u64)>,
    },
    /// Anthropic text answer with an explicit stop reason.
    AnthropicText {
        text: String,
        usage: Option<(u64, u64)>,
        stop_reason: String,
    },
    /// Anthropic answer with arbitrary content blocks, `stop_reason: "tool_use"`.
    AnthropicToolUse {
        blocks: Vec<Value>,
        usage: Option<(u64, u64)>,
    },
    /// OpenAI text answer (`content` may be `None` → JSON null).
    OpenaiText {
        text: Option<String>,
        usage: Option<(u64, u64)>,
        finish_reason: String,
    },
    /// OpenAI answer with raw `tool_calls` entries, `finish_reason: "tool_calls"`.
    OpenaiToolCalls {
        content: Option<String>,
        calls: Vec<Value>,
        usage: Option<(u64, u64)>,
    },
    /// Any JSON body with the given status.
    Json { status: u16, body: Value },
    /// Verbatim body.
    Raw {
        status: u16,
        body: String,
        content_type: String,
    },
    /// Wait, then answer with the inner reply.
    Delay(Duration, Box<Reply>),
    /// Never answer (the connection is held until the mock is dropped).
    Hang,
    /// Drop the connection without answering.
    Close,
    /// A rate-limit or overload status in the endpoint's error shape, with
    /// headers such as `retry-after` (`limits.rs`).
    Limited(Box<Limited>),
    /// The inner reply with its own stream pacing or fault, for a request
    /// that asks for a stream (`stream.rs`); unstreamed it is the inner
    /// reply.
    Stream(Box<Streamed>),
}

impl Reply {
    /// Endpoint-adaptive text answer with usage (10, 5).
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Text {
            text: text.into(),
            usage: Some(DEFAULT_USAGE),
            truncated: false,
        }
    }

    /// Endpoint-adaptive single tool call with usage (10, 5).
    pub fn tool_use(id: impl Into<String>, name: impl Into<String>, input: Value) -> Reply {
        Reply::ToolUse {
            text: None,
            calls: vec![(id.into(), name.into(), input)],
            usage: Some(DEFAULT_USAGE),
        }
    }

    /// Endpoint-adaptive multiple tool calls `(id, name, input)`.
    pub fn tool_uses(calls: Vec<(&str, &str, Value)>) -> Reply {
        Reply::ToolUse {
            text: None,
            calls: calls
                .into_iter()
                .map(|(i, n, v)| (i.to_string(), n.to_string(), v))
                .collect(),
            usage: Some(DEFAULT_USAGE),
        }
    }

    pub fn anthropic_text(text: impl Into<String>) -> Reply {
        Reply::AnthropicText {
            text: text.into(),
            usage: Some(DEFAULT_USAGE),
            stop_reason: "end_turn".into(),
        }
    }

    pub fn anthropic_tool_use(blocks: Vec<Value>) -> Reply {
        Reply::AnthropicToolUse {
            blocks,
            usage: Some(DEFAULT_USAGE),
        }
    }

    pub fn openai_text(text: impl Into<String>) -> Reply {
        Reply::OpenaiText {
            text: Some(text.into()),
            usage: Some(DEFAULT_USAGE),
            finish_reason: "stop".into(),
        }
    }

    /// OpenAI answer with raw `tool_calls` entries.
    pub fn openai_tool_calls(content: Option<&str>, calls: Vec<Value>) -> Reply {
        Reply::OpenaiToolCalls {
            content: content.map(str::to_string),
            calls,
            usage: Some(DEFAULT_USAGE),
        }
    }

    /// OpenAI single tool call with a verbatim `arguments` string.
    pub fn openai_tool_call(id: &str, name: &str, arguments: &str) -> Reply {
        Reply::openai_tool_calls(
            None,
            vec![
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}),
            ],
        )
    }

    /// Non-2xx (or any) status with a plain-text body.
    pub fn status(status: u16, body: impl Into<String>) -> Reply {
        Reply::Raw {
            status,
            body: body.into(),
            content_type: "text/plain".into(),
        }
    }

    /// 200 with an arbitrary JSON body.
    pub fn json(body: Value) -> Reply {
        Reply::Json { status: 200, body }
    }

    pub fn raw(status: u16, content_type: &str, body: impl Into<String>) -> Reply {
        Reply::Raw {
            status,
            body: body.into(),
            content_type: content_type.into(),
        }
    }

    /// Answer with `self` after `delay`.
    pub fn delayed(self, delay: Duration) -> Reply {
        Reply::Delay(delay, Box::new(self))
    }

    /// Replace the usage of a text/tool reply (no-op for other variants).
    pub fn with_usage(self, input: u64, output: u64) -> Reply {
        self.set_usage(Some((input, output)))
    }

    /// Omit `usage` from the response body.
    pub fn without_usage(self) -> Reply {
        self.set_usage(None)
    }

    fn set_usage(self, new: Option<(u64, u64)>) -> Reply {
        match self {
            Reply::Text {
                text, truncated, ..
            } => Reply::Text {
                text,
                usage: new,
                truncated,
            },
            Reply::ToolUse { text, calls, .. } => Reply::ToolUse {
                text,
                calls,
                usage: new,
            },
            Reply::AnthropicText {
                text, stop_reason, ..
            } => Reply::AnthropicText {
                text,
                usage: new,
                stop_reason,
            },
            Reply::AnthropicToolUse { blocks, .. } => {
                Reply::AnthropicToolUse { blocks, usage: new }
            }
            Reply::OpenaiText {
                text,
                finish_reason,
                ..
            } => Reply::OpenaiText {
                text,
                usage: new,
                finish_reason,
            },
            Reply::OpenaiToolCalls { content, calls, .. } => Reply::OpenaiToolCalls {
                content,
                calls,
                usage: new,
            },
            Reply::Delay(d, inner) => Reply::Delay(d, Box::new(inner.set_usage(new))),
            other => other,
        }
    }

    /// Mark a text reply as cut off by the output budget
    /// (`max_tokens` / `length`).
    pub fn truncated(self) -> Reply {
        match self {
            Reply::Text { text, usage, .. } => Reply::Text {
                text,
                usage,
                truncated: true,
            },
            Reply::AnthropicText { text, usage, .. } => Reply::AnthropicText {
                text,
                usage,
                stop_reason: "max_tokens".into(),
            },
            Reply::OpenaiText { text, usage, .. } => Reply::OpenaiText {
                text,
                usage,
                finish_reason: "length".into(),
            },
            Reply::Delay(d, inner) => Reply::Delay(d, Box::new(inner.truncated())),
            other => other,
        }
    }
}

/// Which wire format a request path selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Anthropic,
    Openai,
    Unknown,
}

impl Endpoint {
    pub fn of_path(path: &str) -> Endpoint {
        let path = path.split('?').next().unwrap_or("");
        if path.ends_with("/v1/messages") {
            Endpoint::Anthropic
        } else if path.ends_with("/v1/chat/completions") {
            Endpoint::Openai
        } else {
            Endpoint::Unknown
        }
    }
}

/// A request the mock received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    pub method: String,
    /// Request target as sent (path plus any query).
    pub path: String,
    /// Lower-cased header names, in order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Value::Null` if it is not JSON).
    pub body: Value,
    pub raw_body: Vec<u8>,
    /// Which TCP connection it came on: 1 for the first one accepted, and
    /// so on (shows whether a client reused its connections).
    pub connection: u64,
}

impl RecordedRequest {
    /// Case-insensitive header lookup.
    pub fn header(&self, name: &str) -> Option<&str> {
        wire::header(&self.headers, name)
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::of_path(&self.path)
    }

    /// `body.messages` (or `Null`).
    pub fn messages(&self) -> &Value {
        self.body.get("messages").unwrap_or(&Value::Null)
    }
}

struct State {
    script: VecDeque<Reply>,
    default: Option<Reply>,
    requests: Vec<RecordedRequest>,
    conns: Vec<TcpStream>,
    /// Connections accepted so far.
    accepted: u64,
    shutdown: bool,
    seq: u64,
    /// The concurrency limit, when one is set (`limits.rs`).
    limits: limits::Limits,
    /// Prompt caching as the providers bill it, once enabled.
    cache: Option<cache::Cache>,
    /// Pacing of streamed replies without their own.
    timing: StreamTiming,
    /// Clients that closed their connection mid-stream.
    closes: Vec<StreamClose>,
    /// When each event of each streamed reply was written, by request seq.
    writes: std::collections::BTreeMap<u64, Vec<Instant>>,
}

struct Shared {
    state: Mutex<State>,
    cond: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleep up to `d`, returning early (true) on shutdown.
    fn sleep_or_shutdown(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut st = self.lock();
        loop {
            if st.shutdown {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .cond
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// The mock provider server; stops (and releases hung connections) on drop.
pub struct MockProvider {
    /// `http://127.0.0.1:<port>` — use as a provider entry's `base_url`.
    pub base_url: String,
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl MockProvider {
    #[track_caller]
    pub fn start() -> Self {
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        Self::bind(addr).expect("bind mock provider")
    }

    /// Like [`MockProvider::start`], on a given address (the
    /// `bae-mock-provider` binary serves a fixed loopback port this way).
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                script: VecDeque::new(),
                default: None,
                requests: Vec::new(),
                conns: Vec::new(),
                accepted: 0,
                shutdown: false,
                seq: 0,
                limits: limits::Limits::default(),
                cache: None,
                timing: StreamTiming::default(),
                closes: Vec::new(),
                writes: Default::default(),
            }),
            cond: Condvar::new(),
        });
        let sh = shared.clone();
        let accept = thread::Builder::new()
            .name("mock-provider-accept".into())
            .spawn(move || accept_loop(listener, sh))?;
        Ok(MockProvider {
            base_url: format!("http://{addr}"),
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// Append a reply to the FIFO script.
    pub fn push(&self, reply: Reply) {
        self.shared.lock().script.push_back(reply);
    }

    /// Append several replies.
    pub fn push_all(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.lock().script.extend(replies);
    }

    /// Reply used when the script is empty (instead of the built-in "ok").
    pub fn set_default(&self, reply: Reply) {
        self.shared.lock().default = Some(reply);
    }

    /// Scripted replies not yet consumed.
    pub fn pending_replies(&self) -> usize {
        self.shared.lock().script.len()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared.lock().requests.len()
    }

    /// Forget recorded requests (the script is kept).
    pub fn clear_requests(&self) {
        self.shared.lock().requests.clear();
    }

    /// From now on, bill every request through a prompt cache that behaves
    /// like the provider's (`cache.rs`): replies report the cache's usage
    /// (the script's output tokens kept).
    pub fn enable_cache(&self, config: CacheConfig) {
        self.shared.lock().cache = Some(cache::Cache::new(config));
    }

    /// What the cache made of each request so far, in order.
    pub fn cache_calls(&self) -> Vec<CacheCall> {
        (self.shared.lock().cache.as_ref()).map_or_else(Vec::new, |c| c.calls.clone())
    }

    /// Wait until at least `n` requests were received (or `timeout`), then
    /// return all recorded requests — possibly fewer than `n` on timeout.
    pub fn wait_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        loop {
            let now = Instant::now();
            if st.requests.len() >= n || now >= deadline {
                return st.requests.clone();
            }
            st = self
                .shared
                .cond
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Drop for MockProvider {
    fn drop(&mut self) {
        let conns = {
            let mut st = self.shared.lock();
            st.shutdown = true;
            std::mem::take(&mut st.conns)
        };
        self.shared.cond.notify_all();
        for c in conns {
            let _ = c.shutdown(Shutdown::Both);
        }
        // Unblock accept().
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.lock().shutdown {
            return;
        }
        let Ok(conn) = conn else { continue };
        let _ = conn.set_nodelay(true);
        let ordinal = {
            let mut st = shared.lock();
            if let Ok(clone) = conn.try_clone() {
                st.conns.push(clone);
            }
            st.accepted += 1;
            st.accepted
        };
        let sh = shared.clone();
        let _ = thread::Builder::new()
            .name("mock-provider-conn".into())
            .spawn(move || {
                let _ = serve_conn(conn, ordinal, &sh);
            });
    }
}

struct Incoming {
    head: wire::RequestHead,
    body: Vec<u8>,
}

/// Read one request; `Ok(None)` on a clean close between requests.
fn read_request(conn: &mut TcpStream, input: &mut Vec<u8>) -> io::Result<Option<Incoming>> {
    let bad = |e: String| io::Error::new(io::ErrorKind::InvalidData, e);
    let mut buf = [0u8; 16384];
    let head = loop {
        if let Some((head, used)) = wire::parse_request_head(input).map_err(bad)? {
            input.drain(..used);
            break head;
        }
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        input.extend_from_slice(&buf[..n]);
    };
    if wire::header(&head.headers, "expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        conn.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let mut decoder = BodyDecoder::for_request(&head.headers).map_err(bad)?;
    let mut body = Vec::new();
    loop {
        decoder.feed(input, &mut body).map_err(bad)?;
        if decoder.is_done() {
            break;
        }
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "eof in request body",
            ));
        }
        input.extend_from_slice(&buf[..n]);
    }
    Ok(Some(Incoming { head, body }))
}

fn serve_conn(mut conn: TcpStream, ordinal: u64, shared: &Arc<Shared>) -> io::Result<()> {
    let mut input = Vec::new();
    loop {
        let Some(req) = read_request(&mut conn, &mut input)? else {
            return Ok(());
        };
        let wants_close = wire::header(&req.head.headers, "connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let endpoint = Endpoint::of_path(&req.head.target);
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let stream = stream::wants_stream(&body);
        let (reply, seq, billed, counted) = {
            let mut st = shared.lock();
            st.seq += 1;
            let seq = st.seq;
            let billed = match st.cache.as_mut() {
                Some(c) if endpoint != Endpoint::Unknown => {
                    Some(c.bill(endpoint, &body, Instant::now()))
                }
                _ => None,
            };
            st.requests.push(RecordedRequest {
                method: req.head.method.clone(),
                path: req.head.target.clone(),
                headers: req.head.headers.clone(),
                body,
                raw_body: req.body,
                connection: ordinal,
            });
            let refused = limits::enter(&mut st);
            let reply = if let Some(refusal) = refused.clone() {
                refusal
            } else if let Some(Err(cache::Refused(body))) = &billed {
                Reply::Json {
                    status: 400,
                    body: body.clone(),
                }
            } else if endpoint == Endpoint::Unknown {
                Reply::Json {
                    status: 404,
                    body: json!({"error": format!("mock provider: no route {}", req.head.target)}),
                }
            } else {
                st.script
                    .pop_front()
                    .or_else(|| st.default.clone())
                    .unwrap_or_else(|| Reply::text("ok"))
            };
            (reply, seq, billed.and_then(Result::ok), refused.is_none())
        };
        shared.cond.notify_all();
        let to = Answer {
            endpoint,
            seq,
            close: wants_close,
            stream,
            billed: billed.as_ref(),
        };
        let answered = answer(&mut conn, shared, reply, to);
        if counted {
            limits::leave(&mut shared.lock());
        }
        if !answered? || wants_close {
            let _ = conn.shutdown(Shutdown::Both);
            return Ok(());
        }
    }
}

/// Who a reply goes to.
#[derive(Clone, Copy)]
struct Answer<'a> {
    endpoint: Endpoint,
    seq: u64,
    close: bool,
    /// The request asked for `"stream": true`.
    stream: bool,
    /// What the prompt cache billed it, when enabled.
    billed: Option<&'a CacheCall>,
}

/// Write the reply; Ok(false) means the connection must be dropped.
fn answer(
    conn: &mut TcpStream,
    shared: &Arc<Shared>,
    reply: Reply,
    to: Answer,
) -> io::Result<bool> {
    let Answer {
        endpoint,
        seq,
        close,
        stream,
        billed,
    } = to;
    // A reply's usage is what the cache billed, streamed or not (a
    // streamed reply's events are encoded from this very body).
    let billed_body = |reply: Reply| {
        let mut body = render(reply, endpoint, seq);
        if let Some(call) = billed {
            cache::apply(&mut body, call);
        }
        body
    };
    let (status, content_type, body) = match reply {
        Reply::Delay(d, inner) => {
            if shared.sleep_or_shutdown(d) {
                return Ok(false);
            }
            return answer(conn, shared, *inner, to);
        }
        Reply::Hang => {
            let mut st = shared.lock();
            while !st.shutdown {
                st = shared.cond.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            return Ok(false);
        }
        Reply::Close => return Ok(false),
        Reply::Limited(l) => return limits::answer(conn, &l, endpoint, close),
        Reply::Stream(s) if !stream || !s.reply.renders_body() => {
            return answer(conn, shared, s.reply, to)
        }
        Reply::Stream(s) => {
            let body = billed_body(s.reply.clone());
            return stream::answer(conn, shared, *s, body, endpoint, seq);
        }
        reply if stream && reply.renders_body() => {
            let body = billed_body(reply.clone());
            let s = Streamed {
                reply,
                timing: None,
                fault: None,
            };
            return stream::answer(conn, shared, s, body, endpoint, seq);
        }
        Reply::Raw {
            status,
            body,
            content_type,
        } => (status, content_type, body.into_bytes()),
        Reply::Json { status, body } => (
            status,
            "application/json".to_string(),
            body.to_string().into_bytes(),
        ),
        other => {
            let body = billed_body(other);
            (
                200,
                "application/json".to_string(),
                body.to_string().into_bytes(),
            )
        }
    };
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: {}\r\n\r\n",
        wire::reason_phrase(status),
        body.len(),
        if close { "close" } else { "keep-alive" },
    );
    let mut out = head.into_bytes();
    out.extend_from_slice(&body);
    conn.write_all(&out)?;
    conn.flush()?;
    Ok(true)
}
