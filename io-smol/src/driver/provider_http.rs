//! Provider calls to plain-HTTP endpoints (`http://host[:port]/…`: a local
//! inference server such as Ollama, llama.cpp or vLLM, or a mock), made by
//! a task on the driver thread with keep-alive connections of its own.
//!
//! Calls to HTTPS endpoints, and to URLs this client does not take (user
//! info in the authority), go to ureq on the `blocking` pool
//! (`provider.rs`): TLS would need an async TLS stack. On the driver thread
//! a plain-HTTP call costs no thread hand-off and no wake-up of a pool
//! thread, which on loopback is most of what a call costs.
//!
//! Behaviour matches the blocking path where a client can see it: one
//! attempt bounded by the call's timeout as a whole, no redirects followed,
//! at most [`provider::MAX_RESPONSE_BYTES`] of body, any status returned as
//! a response, transport failures as text without URLs, and at most
//! `BAE_PROVIDER_IDLE_CONNECTIONS` idle connections kept per host, none
//! reused after sitting idle for [`provider::POOL_MAX_AGE`]. A pooled
//! connection the provider already closed is noticed before it is used, and
//! one whose request cannot be written is replaced by a fresh connection
//! once (the provider never had the whole request). A request that was
//! written is never sent again, whatever happens to its response: a
//! provider call is not idempotent.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::time::Instant;

use engine::{AuthPlacement, ProviderCall, ProviderReply};
use futures_lite::{future, AsyncReadExt, AsyncWriteExt};
use proto::http::response::{Mode, ResponseDecoder, ResponseEvent};
use proto::provider::retry::RetryAdvice;
use smol::net::TcpStream;

use super::provider::{self, strip_urls};
use crate::config::{process_env, substitute};

/// Read buffer of one call.
const READ_CHUNK: usize = 16 * 1024;

/// The parts of an `http://` URL this client takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    /// `host[:port]` as written (the `Host` header).
    pub authority: String,
    /// What to connect to: the authority with the default port added.
    pub connect: String,
    /// Path and query, at least `/`.
    pub path: String,
}

impl HttpTarget {
    /// `None` for anything but a plain `http://` URL with a host and no
    /// user info (those keep the blocking path).
    pub fn parse(url: &str) -> Option<HttpTarget> {
        // The URL standard reads `http:///x` as `http://x/`; a URL with an
        // empty authority is not one this client guesses at.
        if url.strip_prefix("http://")?.starts_with('/') {
            return None;
        }
        let u = url::Url::parse(url).ok()?;
        Self::of_url(&u)
    }

    /// The target of a parsed URL of either scheme: the port written, or
    /// the scheme's default (`url` drops a written default port, so
    /// `authority` carries a port only when it differs from it).
    pub fn of_url(u: &url::Url) -> Option<HttpTarget> {
        if !u.username().is_empty() || u.password().is_some() {
            return None;
        }
        let host = u.host_str()?;
        let authority = match u.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        let connect = format!("{host}:{}", u.port_or_known_default()?);
        let path = match u.query() {
            Some(q) => format!("{}?{q}", u.path()),
            None => u.path().to_string(),
        };
        Some(HttpTarget {
            authority,
            connect,
            path,
        })
    }
}

/// An idle keep-alive connection and when it became idle.
struct Idle {
    stream: TcpStream,
    since: Instant,
}

/// Idle connections by `connect` address, shared by the driver thread's
/// call tasks.
pub struct Pool {
    idle: RefCell<HashMap<String, Vec<Idle>>>,
    per_host: usize,
}

impl Pool {
    pub fn new(per_host: usize) -> Self {
        Pool {
            idle: RefCell::new(HashMap::new()),
            per_host,
        }
    }

    /// The newest idle connection to `addr` that is still usable: not too
    /// old, and neither closed by the provider nor holding stray bytes.
    fn take(&self, addr: &str, now: Instant) -> Option<TcpStream> {
        loop {
            let c = self.idle.borrow_mut().get_mut(addr)?.pop()?;
            if now.saturating_duration_since(c.since) >= provider::POOL_MAX_AGE {
                continue;
            }
            // Would block: open and quiet. Anything else (EOF, data, an
            // error) means the connection cannot carry a new request. A
            // plain non-blocking peek, not the async one: that would
            // register read interest with the reactor only to drop it.
            let mut probe = [std::mem::MaybeUninit::<u8>::uninit()];
            match socket2::SockRef::from(&c.stream).peek(&mut probe) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(c.stream),
                _ => continue,
            }
        }
    }

    fn put(&self, addr: &str, stream: TcpStream, now: Instant) {
        let mut idle = self.idle.borrow_mut();
        let list = idle.entry(addr.to_string()).or_default();
        list.retain(|c| now.saturating_duration_since(c.since) < provider::POOL_MAX_AGE);
        if list.len() < self.per_host {
            list.push(Idle { stream, since: now });
        }
    }
}

/// Performs `call` (a plain-HTTP one: [`HttpTarget::parse`] took its URL).
/// `expired` resolves when the call's timeout (`call.timeout_ms`, from
/// when the call was made) has passed: the driver's
/// [`Deadlines`](super::deadlines::Deadlines), which cost no reactor
/// wake-up per call.
pub async fn perform(
    pool: &Pool,
    call: &ProviderCall,
    target: &HttpTarget,
    expired: impl Future<Output = ()>,
    chunks: Option<Chunks>,
) -> ProviderReply {
    perform_with_env(pool, call, target, process_env, expired, chunks).await
}

/// Where a streamed call's 2xx body goes as it arrives: the driver loop,
/// as [`engine::Input::ProviderChunk`]s.
pub struct Chunks {
    pub(super) tx: smol::channel::Sender<super::smol_rt::Event>,
    pub(super) call: engine::CallId,
}

impl Chunks {
    async fn put(&self, bytes: Vec<u8>) {
        let _ = self
            .tx
            .send(super::smol_rt::Event::ProviderChunk(self.call, bytes))
            .await;
    }
}

/// [`perform`] with an injectable environment (tests).
pub async fn perform_with_env(
    pool: &Pool,
    call: &ProviderCall,
    target: &HttpTarget,
    get_env: impl Fn(&str) -> Option<String>,
    expired: impl Future<Output = ()>,
    chunks: Option<Chunks>,
) -> ProviderReply {
    let token = match substitute(&call.auth_template, get_env) {
        Ok(t) => t,
        Err(e) => return ProviderReply::Credential(e.to_string()),
    };
    if token.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return ProviderReply::Credential(
            "the provider credential contains a line break or NUL".to_string(),
        );
    }
    let head = encode_head(call, target, &token);
    drop(token);
    let request = [head.as_slice(), call.body.as_slice()];
    let exchange = exchange(pool, target, &request, chunks.as_ref());
    let timed_out = async {
        expired.await;
        Err(format!(
            "Network Error: timed out after {} ms",
            call.timeout_ms.max(1)
        ))
    };
    match future::or(exchange, timed_out).await {
        Ok(r) if r.streamed => ProviderReply::Streamed,
        Ok(r) => ProviderReply::Http {
            status: r.status,
            body: r.body,
            advice: r.advice,
        },
        Err(e) => ProviderReply::Transport(strip_urls(&e)),
    }
}

/// The request: head, the credential header, then the body.
pub(super) fn encode(call: &ProviderCall, target: &HttpTarget, token: &str) -> Vec<u8> {
    let mut out = encode_head(call, target, token);
    out.extend_from_slice(&call.body);
    out
}

/// The request's head, up to the blank line. The body is written after it
/// as it is ([`write_parts`]): joining them copied the body, as large as a
/// session's history, into one more buffer on every call.
fn encode_head(call: &ProviderCall, target: &HttpTarget, token: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(target.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(target.authority.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &call.headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match call.auth {
        AuthPlacement::XApiKey => out.extend_from_slice(b"x-api-key: "),
        AuthPlacement::Bearer => out.extend_from_slice(b"authorization: Bearer "),
    }
    out.extend_from_slice(token.as_bytes());
    out.extend_from_slice(b"\r\ncontent-length: ");
    out.extend_from_slice(call.body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out
}

/// Writes `parts` in order, as few writes as the socket allows.
async fn write_parts<W>(stream: &mut W, parts: &[&[u8]]) -> io::Result<()>
where
    W: futures_lite::AsyncWrite + Unpin,
{
    let (mut part, mut at) = (0, 0);
    while part < parts.len() {
        let slices: Vec<io::IoSlice<'_>> = std::iter::once(&parts[part][at..])
            .chain(parts[part + 1..].iter().copied())
            .map(io::IoSlice::new)
            .collect();
        let mut n = stream.write_vectored(&slices).await?;
        if n == 0 && slices.iter().any(|s| !s.is_empty()) {
            return Err(io::ErrorKind::WriteZero.into());
        }
        while part < parts.len() && n >= parts[part].len() - at {
            n -= parts[part].len() - at;
            (part, at) = (part + 1, 0);
        }
        at += n;
    }
    Ok(())
}

/// One request and its response on a pooled connection (or a fresh one,
/// and a fresh one again when the request could not be written on a pooled
/// one).
async fn exchange(
    pool: &Pool,
    target: &HttpTarget,
    request: &[&[u8]],
    chunks: Option<&Chunks>,
) -> Result<Response, String> {
    if let Some(stream) = pool.take(&target.connect, Instant::now()) {
        match round_trip(stream, request, chunks).await {
            Ok((response, keep)) => {
                if let Some(stream) = keep {
                    pool.put(&target.connect, stream, Instant::now());
                }
                return Ok(response);
            }
            Err(Failure::BeforeResponse(_)) => {}
            Err(Failure::During(e)) => return Err(e),
        }
    }
    let stream = TcpStream::connect(target.connect.as_str())
        .await
        .map_err(|e| format!("Connection Failed: Connect error: {e}"))?;
    let _ = stream.set_nodelay(true);
    match round_trip(stream, request, chunks).await {
        Ok((response, keep)) => {
            if let Some(stream) = keep {
                pool.put(&target.connect, stream, Instant::now());
            }
            Ok(response)
        }
        Err(Failure::BeforeResponse(e) | Failure::During(e)) => Err(e),
    }
}

/// How a round trip failed.
enum Failure {
    /// The request could not be written: the provider never had all of it,
    /// so it can be sent again on a fresh connection.
    BeforeResponse(String),
    /// The request was written; it must not be sent again.
    During(String),
}

/// One response, read.
struct Response {
    status: u16,
    body: Vec<u8>,
    /// What a non-2xx response's headers advised about calling again.
    advice: RetryAdvice,
    /// A streamed call's 2xx body went to its chunks, not `body`.
    streamed: bool,
}

/// Writes the request and reads one response (a streamed call's 2xx body
/// goes to `chunks` instead), and the
/// connection when it may carry another request.
async fn round_trip(
    mut stream: TcpStream,
    request: &[&[u8]],
    chunks: Option<&Chunks>,
) -> Result<(Response, Option<TcpStream>), Failure> {
    if let Err(e) = write_parts(&mut stream, request).await {
        return Err(Failure::BeforeResponse(io_text("sending the request", &e)));
    }
    let mut decoder = ResponseDecoder::with_mode(Mode::Lenient);
    let mut buf = vec![0u8; READ_CHUNK];
    let mut status = None;
    let mut advice = RetryAdvice::None;
    let mut close = false;
    let mut body = Vec::new();
    let mut streamed = false;
    let mut received = false;
    // A streamed body's bytes of one read, handed on as one chunk (one
    // engine input and one delta batch however many events they hold).
    let mut pending: Vec<u8> = Vec::new();
    loop {
        loop {
            match decoder.poll() {
                Ok(Some(ResponseEvent::Head(head))) => {
                    close = head
                        .header("connection")
                        .is_some_and(|v| v.eq_ignore_ascii_case("close"))
                        || matches!(head.framing, proto::http::response::Framing::UntilClose);
                    status = Some(head.status);
                    if !(200..300).contains(&head.status) {
                        let headers = head.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
                        advice = RetryAdvice::from_headers(headers);
                    }
                }
                Ok(Some(ResponseEvent::Data(d))) => {
                    if chunks.is_some() && status.is_some_and(|s| (200..300).contains(&s)) {
                        streamed = true;
                        pending.extend_from_slice(&d);
                        continue;
                    }
                    if (body.len() + d.len()) as u64 > provider::MAX_RESPONSE_BYTES {
                        return Err(Failure::During(format!(
                            "Network Error: response body larger than {} bytes",
                            provider::MAX_RESPONSE_BYTES
                        )));
                    }
                    body.extend_from_slice(&d);
                }
                Ok(Some(ResponseEvent::End { .. })) => {
                    if let (Some(chunks), false) = (chunks, pending.is_empty()) {
                        chunks.put(std::mem::take(&mut pending)).await;
                    }
                    let status = status.unwrap_or(0);
                    let keep = (!close && decoder.buffered().is_empty()).then_some(stream);
                    let response = Response {
                        status,
                        body,
                        advice,
                        streamed,
                    };
                    return Ok((response, keep));
                }
                Ok(None) => break,
                Err(e) => return Err(Failure::During(format!("Network Error: {e}"))),
            }
        }
        if let (Some(chunks), false) = (chunks, pending.is_empty()) {
            chunks.put(std::mem::take(&mut pending)).await;
        }
        // Read again at once even after a short read: a provider that
        // streams faster than this loop runs has more by now, and waiting
        // for readiness instead costs a reactor round trip (measured: more
        // CPU per streamed turn).
        match stream.read(&mut buf).await {
            Ok(0) if !received => {
                return Err(Failure::During(
                    "Network Error: the provider closed the connection without responding"
                        .to_string(),
                ))
            }
            Ok(0) => decoder.finish(),
            Ok(n) => {
                received = true;
                decoder.feed(&buf[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Failure::During(io_text("reading the response", &e))),
        }
    }
}

fn io_text(what: &str, e: &io::Error) -> String {
    format!("Network Error: error {what}: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_urls_are_taken() {
        let t = HttpTarget::parse("http://127.0.0.1:9999/v1/messages").unwrap();
        assert_eq!(t.authority, "127.0.0.1:9999");
        assert_eq!(t.connect, "127.0.0.1:9999");
        assert_eq!(t.path, "/v1/messages");
        let t = HttpTarget::parse("http://localhost/v1/chat/completions?x=1#frag").unwrap();
        assert_eq!(t.connect, "localhost:80");
        assert_eq!(t.path, "/v1/chat/completions?x=1");
        let t = HttpTarget::parse("http://[::1]:8080").unwrap();
        assert_eq!((t.connect.as_str(), t.path.as_str()), ("[::1]:8080", "/"));
        assert_eq!(
            HttpTarget::parse("http://[::1]/x").unwrap().connect,
            "[::1]:80"
        );
        for url in [
            "https://api.anthropic.com/v1/messages",
            "http://user:pw@host/x",
            "http:///x",
            "ftp://h/x",
            "http://h st/x",
        ] {
            assert_eq!(HttpTarget::parse(url), None, "{url}");
        }
    }

    #[test]
    fn the_request_carries_the_credential_and_the_body() {
        let call = ProviderCall {
            id: engine::CallId(1),
            url: "http://h:1/v1/messages".into(),
            headers: vec![("content-type".into(), "application/json".into())],
            auth_template: "t".into(),
            auth: AuthPlacement::Bearer,
            body: b"{}".to_vec(),
            timeout_ms: 1,
            stream: false,
        };
        let target = HttpTarget::parse(&call.url).unwrap();
        let text = String::from_utf8(encode(&call, &target, "sk-1")).unwrap();
        assert_eq!(
            text,
            "POST /v1/messages HTTP/1.1\r\nhost: h:1\r\ncontent-type: application/json\r\n\
             authorization: Bearer sk-1\r\ncontent-length: 2\r\n\r\n{}"
        );
    }

    /// A writer that takes at most three bytes of its first non-empty
    /// buffer per write.
    struct Trickle(Vec<u8>);

    impl futures_lite::AsyncWrite for Trickle {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            let n = buf.len().min(3);
            self.0.extend_from_slice(&buf[..n]);
            std::task::Poll::Ready(Ok(n))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_close(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn parts_are_written_whole_and_in_order_through_short_writes() {
        for parts in [
            &[&b"POST / HTTP/1.1\r\n\r\n"[..], b"{\"a\":1}"][..],
            &[b"head", b""],
            &[b"", b"x", b"", b"yz"],
        ] {
            let mut w = Trickle(Vec::new());
            future::block_on(write_parts(&mut w, parts)).unwrap();
            assert_eq!(w.0, parts.concat());
        }
    }

    #[test]
    fn a_credential_with_a_line_break_is_refused_before_any_connection() {
        let call = ProviderCall {
            id: engine::CallId(1),
            url: "http://127.0.0.1:1/v1/messages".into(),
            headers: vec![],
            auth_template: "${T}".into(),
            auth: AuthPlacement::XApiKey,
            body: b"{}".to_vec(),
            timeout_ms: 1000,
            stream: false,
        };
        let target = HttpTarget::parse(&call.url).unwrap();
        let pool = Pool::new(4);
        let expired = future::pending();
        let reply = future::block_on(perform_with_env(
            &pool,
            &call,
            &target,
            |_| Some("a\r\nx-evil: 1".into()),
            expired,
            None,
        ));
        assert!(matches!(reply, ProviderReply::Credential(_)), "{reply:?}");
    }
}
