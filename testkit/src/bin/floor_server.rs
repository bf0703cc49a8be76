//! `floor_server`: the sockets of `bench_kit`'s scenarios and nothing else,
//! to measure what the loopback traffic alone costs (never run by tests).
//!
//! ```text
//! cargo build --release -p testkit --bin floor_server --bin bench_kit
//! target/release/floor_server --addr 127.0.0.1:18080 --admin-addr 127.0.0.1:18081 \
//!     --mock 127.0.0.1:9999 &
//! target/release/bench_kit --url http://127.0.0.1:18080 --admin-url http://127.0.0.1:18081 \
//!     --admin-key floor --mock-addr 127.0.0.1:9999 --pid $! --only turns
//! ```
//!
//! It answers what the kit asks with bytes shaped and sized like `baesrv`'s
//! answers (the sizes of `baesrv`'s own writes, read with `strace`), in the
//! writes `baesrv` makes at 64 clients (a `sendMessage` stream's head with
//! its first frame, then the rest with the terminal frame once the provider
//! has answered), and makes the same provider call per `sendMessage` on a
//! keep-alive connection to the kit's mock. It runs no engine, keeps no log,
//! checks no key: its server CPU per unit is the floor that socket work puts
//! under any server of the protocol on this box, on the runtime `baesrv`
//! uses (smol, one thread, a reactor waiting in `block_on`).
//!
//! Requests are read with a bare scan for the head's end and its
//! `content-length`, not proto's decoder, so the floor counts no parsing.
//! Observers (`session.subscribe`) are not served: `--only opens|turns|paging`.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::rc::Rc;

use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::{Async, LocalExecutor};

/// `baesrv`'s answer sizes (bytes written, head included) for the kit's units.
mod sizes {
    pub const OPEN_BODY: usize = 305;
    pub const TEXT_FIRST_FRAME: usize = 478 - 5;
    pub const TEXT_LAST: usize = 2678;
    pub const TOOL_FIRST_FRAME: usize = 549 - 5;
    pub const TOOL_LAST: usize = 3660;
    pub const RESUME_FIRST_FRAME: usize = 735 - 5;
    pub const RESUME_LAST: usize = 3317;
    /// One event of the kit's 250-turn session, on average (its 11 pages
    /// of up to 100 average 314 KB), and the events the session has.
    pub const PAGE_ITEM: usize = 3_450;
    pub const LONG_EVENTS: usize = 1_002;
}

const NDJSON_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n";

struct Opts {
    addr: SocketAddr,
    admin_addr: SocketAddr,
    mock: SocketAddr,
}

fn parse_opts() -> Result<Opts, String> {
    let (mut addr, mut admin, mut mock) = (None, None, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().ok_or_else(|| format!("{a} needs a value"))?;
        let parsed: SocketAddr = v.parse().map_err(|e| format!("{a}: {e}"))?;
        match a.as_str() {
            "--addr" => addr = Some(parsed),
            "--admin-addr" => admin = Some(parsed),
            "--mock" => mock = Some(parsed),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    match (addr, admin, mock) {
        (Some(addr), Some(admin_addr), Some(mock)) => Ok(Opts {
            addr,
            admin_addr,
            mock,
        }),
        _ => Err("usage: floor_server --addr IP:PORT --admin-addr IP:PORT --mock IP:PORT".into()),
    }
}

/// What every connection shares: the provider connections kept alive and a
/// counter for session ids.
struct Shared {
    mock: SocketAddr,
    idle: RefCell<Vec<Conn>>,
    next: Cell<u64>,
    /// Pages by target, built once: serving one is a write, as a server
    /// that renders from stored bytes comes closest to.
    pages: RefCell<HashMap<String, Rc<Vec<u8>>>>,
}

/// A socket with its read buffer (bytes read but not yet used).
struct Conn {
    sock: Async<TcpStream>,
    buf: Vec<u8>,
}

/// One request: method, target, body.
struct Request {
    method: String,
    target: String,
    body: Vec<u8>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The `content-length` of a head (zero when absent).
fn content_length(head: &[u8]) -> usize {
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    text.lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

impl Conn {
    fn new(sock: TcpStream) -> std::io::Result<Conn> {
        sock.set_nodelay(true)?;
        Ok(Conn {
            sock: Async::new(sock)?,
            buf: Vec::with_capacity(4096),
        })
    }

    /// Reads until `buf` holds a whole head and `content-length` bytes of
    /// body; returns (head, body) and keeps what follows. `None` at EOF.
    async fn message(&mut self) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let len = content_length(&self.buf[..end]);
                if self.buf.len() >= end + 4 + len {
                    let head = self.buf[..end].to_vec();
                    let body = self.buf[end + 4..end + 4 + len].to_vec();
                    self.buf.drain(..end + 4 + len);
                    return Ok(Some((head, body)));
                }
            }
            let n = self.sock.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    async fn request(&mut self) -> std::io::Result<Option<Request>> {
        let Some((head, body)) = self.message().await? else {
            return Ok(None);
        };
        let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        let mut parts = line.split(' ');
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        Ok(Some(Request {
            method,
            target,
            body,
        }))
    }
}

/// `{"jsonrpc":"2.0","method":"session.event","params":{…"pad":"xxx…"}}\n`
/// as one chunk of `size` bytes (chunk framing included).
fn event_chunk(out: &mut Vec<u8>, size: usize) {
    let frame_len = size.saturating_sub(9).max(80);
    let start =
        r#"{"jsonrpc":"2.0","method":"session.event","params":{"event_type":"floor","pad":""#;
    let end = "\"}}\n";
    let pad = frame_len.saturating_sub(start.len() + end.len());
    out.extend_from_slice(format!("{frame_len:x}\r\n").as_bytes());
    out.extend_from_slice(start.as_bytes());
    out.resize(out.len() + pad, b'x');
    out.extend_from_slice(end.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The terminal frame, `result.message.content` holding `block`, padded
/// (as `result.events` pads `baesrv`'s) to `size` bytes with the end chunk.
fn terminal_chunk(out: &mut Vec<u8>, block: &str, size: usize) {
    let start = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"message":{{"role":"assistant","content":[{block}]}},"pad":""#
    );
    let end = "\"}}\n";
    let frame_len = size.saturating_sub(16).max(start.len() + end.len());
    let pad = frame_len - start.len() - end.len();
    out.extend_from_slice(format!("{frame_len:x}\r\n").as_bytes());
    out.extend_from_slice(start.as_bytes());
    out.resize(out.len() + pad, b'x');
    out.extend_from_slice(end.as_bytes());
    out.extend_from_slice(b"\r\n0\r\n\r\n");
}

fn json_answer(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl Shared {
    /// One provider round trip to the mock on a kept-alive connection;
    /// returns the reply body. A pooled connection the mock has closed (a
    /// new kit run starts a new mock) is dropped and the call made on a
    /// new one.
    async fn provider_call(&self, body: &str) -> std::io::Result<Vec<u8>> {
        let req = format!(
            "POST /v1/messages HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             anthropic-version: 2023-06-01\r\nx-api-key: t\r\ncontent-length: {}\r\n\r\n{body}",
            self.mock,
            body.len()
        );
        loop {
            let pooled = self.idle.borrow_mut().pop();
            let fresh = pooled.is_none();
            let mut conn = match pooled {
                Some(c) => c,
                None => Conn::new(Async::<TcpStream>::connect(self.mock).await?.into_inner()?)?,
            };
            let reply = match conn.sock.write_all(req.as_bytes()).await {
                Ok(()) => conn.message().await,
                Err(e) => Err(e),
            };
            match reply {
                Ok(Some((_, reply))) => {
                    self.idle.borrow_mut().push(conn);
                    return Ok(reply);
                }
                Ok(None) if !fresh => continue,
                Err(_) if !fresh => continue,
                Ok(None) => return Err(std::io::Error::other("the mock closed the connection")),
                Err(e) => return Err(e),
            }
        }
    }

    /// A `sendMessage` stream: the head and first frame in one write, the
    /// provider call, the rest in a second write.
    async fn send_message(
        &self,
        conn: &mut Conn,
        session: &str,
        rpc: &[u8],
    ) -> std::io::Result<()> {
        let resume = find(rpc, b"tool_result").is_some();
        let tools = session.starts_with("ses_t");
        let (first, last, provider_body) = if resume {
            (
                sizes::RESUME_FIRST_FRAME,
                sizes::RESUME_LAST,
                r#"{"model":"bench","max_tokens":4096,"messages":[{"role":"user","content":"hello 1"},{"role":"assistant","content":[{"type":"tool_use","id":"tu_1","name":"get_time","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":"12:00"}]}],"tools":[{"name":"get_time","input_schema":{"type":"object"}}]}"#,
            )
        } else if tools {
            (
                sizes::TOOL_FIRST_FRAME,
                sizes::TOOL_LAST,
                r#"{"model":"bench","max_tokens":4096,"messages":[{"role":"user","content":"hello 1"}],"tools":[{"name":"get_time","input_schema":{"type":"object"}}]}"#,
            )
        } else {
            (
                sizes::TEXT_FIRST_FRAME,
                sizes::TEXT_LAST,
                r#"{"model":"bench","max_tokens":4096,"messages":[{"role":"user","content":"hello 1"}]}"#,
            )
        };
        let mut out = NDJSON_HEAD.to_vec();
        event_chunk(&mut out, first);
        conn.sock.write_all(&out).await?;
        let reply = self.provider_call(provider_body).await?;
        let block = match find(&reply, b"\"tu_") {
            Some(at) => {
                let id: Vec<u8> = reply[at + 1..]
                    .iter()
                    .take_while(|&&b| b != b'"')
                    .copied()
                    .collect();
                format!(
                    r#"{{"type":"tool_use","id":"{}","name":"get_time","input":{{}}}}"#,
                    String::from_utf8_lossy(&id)
                )
            }
            None => r#"{"type":"text","text":"ok"}"#.to_string(),
        };
        out.clear();
        terminal_chunk(&mut out, &block, last);
        conn.sock.write_all(&out).await
    }

    /// A page of the long session: `limit` items after `cursor`.
    fn events_page(target: &str) -> Vec<u8> {
        let query = target.split_once('?').map_or("", |(_, q)| q);
        let param = |name: &str| {
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse::<usize>().ok())
        };
        let limit = param("limit").unwrap_or(100).max(1);
        let from = param("cursor").unwrap_or(0);
        let to = (from + limit).min(sizes::LONG_EVENTS);
        let mut body = b"{\"items\":[".to_vec();
        for i in from..to {
            if i > from {
                body.push(b',');
            }
            let start = format!(r#"{{"id":"evt_{i}","event_type":"floor","payload":{{"pad":""#);
            body.extend_from_slice(start.as_bytes());
            let pad = sizes::PAGE_ITEM.saturating_sub(start.len() + 3);
            body.resize(body.len() + pad, b'x');
            body.extend_from_slice(b"\"}}");
        }
        body.extend_from_slice(b"],\"next_cursor\":");
        if to < sizes::LONG_EVENTS {
            body.extend_from_slice(format!("\"{to}\"}}").as_bytes());
        } else {
            body.extend_from_slice(b"null}");
        }
        let mut out = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        out
    }

    async fn answer(&self, conn: &mut Conn, req: Request) -> std::io::Result<()> {
        let path = req.target.split('?').next().unwrap_or_default();
        let out = match (req.method.as_str(), path) {
            ("GET", "/healthz") => b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec(),
            ("POST", "/admin/v1/profiles") => json_answer("201 Created", r#"{"id":"pro_floor"}"#),
            ("POST", "/admin/v1/keys") => json_answer("201 Created", r#"{"key":"bae_floor"}"#),
            ("POST", "/api/v1/sessions") => {
                let n = self.next.get();
                self.next.set(n + 1);
                let kind = if find(&req.body, b"\"tools\"").is_some() {
                    't'
                } else {
                    'n'
                };
                let start = format!(
                    r#"{{"session_id":"ses_{kind}{n:031}","session_key":"bae_ses_floor","pad":""#
                );
                let pad = sizes::OPEN_BODY.saturating_sub(start.len() + 2);
                let body = format!("{start}{}\"}}", "x".repeat(pad));
                json_answer("201 Created", &body)
            }
            ("POST", p) if p.ends_with("/rpc") => {
                let session = p.split('/').nth(4).unwrap_or_default().to_string();
                if find(&req.body, b"session.sendMessage").is_some() {
                    return self.send_message(conn, &session, &req.body).await;
                }
                if find(&req.body, b"session.registerDriver").is_none() {
                    let frame = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"not served by floor_server"}}"#;
                    json_answer("200 OK", frame)
                } else {
                    let mut out = NDJSON_HEAD.to_vec();
                    let frame = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"registered\":true}}\n";
                    out.extend_from_slice(
                        format!("{:x}\r\n{frame}\r\n0\r\n\r\n", frame.len()).as_bytes(),
                    );
                    out
                }
            }
            ("GET", p) if p.ends_with("/events") => {
                let page = self
                    .pages
                    .borrow_mut()
                    .entry(req.target.clone())
                    .or_insert_with(|| Rc::new(Self::events_page(&req.target)))
                    .clone();
                return conn.sock.write_all(&page).await;
            }
            _ => json_answer("404 Not Found", r#"{"title":"not served by floor_server"}"#),
        };
        conn.sock.write_all(&out).await
    }
}

async fn serve(shared: Rc<Shared>, sock: TcpStream) {
    let Ok(mut conn) = Conn::new(sock) else {
        return;
    };
    while let Ok(Some(req)) = conn.request().await {
        if shared.answer(&mut conn, req).await.is_err() {
            return;
        }
    }
}

fn main() {
    let o = match parse_opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("floor_server: {e}");
            std::process::exit(2);
        }
    };
    let shared = Rc::new(Shared {
        mock: o.mock,
        idle: RefCell::new(Vec::new()),
        next: Cell::new(0),
        pages: RefCell::new(HashMap::new()),
    });
    let ex = LocalExecutor::new();
    let listen = |addr: SocketAddr| {
        let l = TcpListener::bind(addr).unwrap_or_else(|e| {
            eprintln!("floor_server: bind {addr}: {e}");
            std::process::exit(1);
        });
        Async::new(l).expect("non-blocking listener")
    };
    let (client, admin) = (listen(o.addr), listen(o.admin_addr));
    let accept = |l: Async<TcpListener>| {
        let (ex, shared) = (&ex, shared.clone());
        async move {
            loop {
                if let Ok((sock, _)) = l.accept().await {
                    let sock = sock.into_inner().expect("a std socket");
                    ex.spawn(serve(shared.clone(), sock)).detach();
                }
            }
        }
    };
    smol::block_on(ex.run(smol::future::zip(accept(client), accept(admin))));
}
