//! A tiny blocking HTTP/1.1 client over `std::net::TcpStream`, plus an
//! incremental NDJSON reader for the `/rpc` endpoint.
//!
//! Every request uses a fresh connection with `Connection: close`, which keeps
//! behaviour deterministic. Responses are read with proto's
//! [`ResponseDecoder`] in lenient mode: framed by `Content-Length`, chunked
//! transfer encoding or connection close. [`next_event`] is the blocking
//! read loop around it that the bench binaries share.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use proto::http::peer::{self as wire, ResponseDecoder, ResponseError, ResponseEvent};

/// Default timeout for every blocking client operation.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Default overall deadline of [`HttpClient::raw`].
pub const RAW_TIMEOUT: Duration = Duration::from_secs(10);

/// A buffered HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub reason: String,
    /// Header names are lower-cased; order and duplicates are preserved.
    pub headers: Vec<(String, String)>,
    /// The decoded body (chunked framing removed).
    pub body: Vec<u8>,
}

impl Response {
    /// Case-insensitive lookup of the first header with this name.
    pub fn header(&self, name: &str) -> Option<&str> {
        wire::header(&self.headers, name)
    }

    /// The body as (lossy) UTF-8 text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON; panics with the body text if it is not JSON.
    pub fn json(&self) -> Value {
        self.try_json().unwrap_or_else(|e| {
            panic!(
                "response body is not JSON ({e}); status {} body {:?}",
                self.status,
                self.text()
            )
        })
    }

    pub fn try_json(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// Panics (showing the body) unless the status is `expected`.
    #[track_caller]
    pub fn assert_status(&self, expected: u16) -> &Self {
        assert_eq!(
            self.status,
            expected,
            "unexpected HTTP status; body: {}",
            self.text()
        );
        self
    }

    /// The RFC 7807 `type` member of an error body, if any.
    pub fn problem_type(&self) -> Option<String> {
        self.try_json()
            .ok()
            .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_string))
    }

    /// Parse the first response in raw bytes (e.g. the output of
    /// [`HttpClient::raw`]), skipping interim 1xx ones. A body without
    /// framing runs to the end of the bytes; a truncated framed body is
    /// returned as far as it goes. `None` without a complete head or when
    /// the bytes are malformed.
    pub fn parse(bytes: &[u8]) -> Option<Response> {
        let mut decoder = ResponseDecoder::lenient();
        decoder.feed(bytes);
        decoder.finish();
        let mut head = None;
        let mut body = Vec::new();
        loop {
            match decoder.poll() {
                Ok(Some(ResponseEvent::Head(h))) => head = Some(h),
                Ok(Some(ResponseEvent::Data(d))) => body.extend(d),
                Ok(Some(ResponseEvent::End { .. }) | None) => break,
                Err(ResponseError::Truncated(_)) if head.is_some() => break,
                Err(_) => return None,
            }
        }
        let head = head?;
        Some(Response {
            status: head.status,
            reason: head.reason,
            headers: head.headers,
            body,
        })
    }
}

/// Build a JSON-RPC 2.0 request object.
pub fn rpc_request(method: &str, params: Value, id: impl Into<Value>) -> Value {
    json!({"jsonrpc": "2.0", "id": id.into(), "method": method, "params": params})
}

static NEXT_RPC_ID: AtomicU64 = AtomicU64::new(1);

/// A process-wide unique integer for JSON-RPC ids.
pub fn next_rpc_id() -> u64 {
    NEXT_RPC_ID.fetch_add(1, Ordering::Relaxed)
}

/// Blocking HTTP/1.1 client bound to one address.
#[derive(Debug, Clone)]
pub struct HttpClient {
    pub addr: SocketAddr,
    bearer: Option<String>,
    timeout: Duration,
}

impl HttpClient {
    pub fn new(addr: SocketAddr) -> Self {
        HttpClient {
            addr,
            bearer: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Send `Authorization: Bearer <token>` on every request (unless the call
    /// passes its own `authorization` header).
    pub fn bearer(mut self, token: impl Into<String>) -> Self {
        self.bearer = Some(token.into());
        self
    }

    /// Drop any preset bearer token.
    pub fn without_auth(mut self) -> Self {
        self.bearer = None;
        self
    }

    /// Overall timeout for connect + request + full response (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn get_timeout(&self) -> Duration {
        self.timeout
    }

    /// Open a plain TCP connection to the target (no request written).
    pub fn connect(&self) -> io::Result<TcpStream> {
        let stream =
            TcpStream::connect_timeout(&self.addr, self.timeout.min(Duration::from_secs(10)))?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    fn build_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        bearer: Option<&str>,
    ) -> Vec<u8> {
        let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        let mut req = format!("{method} {path} HTTP/1.1\r\n");
        if !has("host") {
            req.push_str(&format!("host: {}\r\n", self.addr));
        }
        if let Some(token) = bearer {
            if !has("authorization") {
                req.push_str(&format!("authorization: Bearer {token}\r\n"));
            }
        }
        if !body.is_empty() && !has("content-type") {
            req.push_str("content-type: application/json\r\n");
        }
        let needs_length = !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH");
        if needs_length && !has("content-length") && !has("transfer-encoding") {
            req.push_str(&format!("content-length: {}\r\n", body.len()));
        }
        if !has("connection") {
            req.push_str("connection: close\r\n");
        }
        for (name, value) in headers {
            req.push_str(&format!("{name}: {value}\r\n"));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        bytes
    }

    /// Perform one request; panics on transport errors or timeout.
    #[track_caller]
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        self.try_request(method, path, headers, body)
            .unwrap_or_else(|e| panic!("{method} {path} on {} failed: {e}", self.addr))
    }

    /// Perform one request, reporting transport errors (connection refused,
    /// reset, timeout, malformed response) as `Err`.
    pub fn try_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<Response> {
        let deadline = Instant::now() + self.timeout;
        let mut stream = self.connect()?;
        stream.set_write_timeout(Some(self.timeout))?;
        let bytes = self.build_request(method, path, headers, body, self.bearer.as_deref());
        stream.write_all(&bytes)?;
        stream.flush()?;
        read_response(&mut stream, deadline, method == "HEAD")
    }

    #[track_caller]
    pub fn get(&self, path: &str) -> Response {
        self.request("GET", path, &[], b"")
    }

    #[track_caller]
    pub fn delete(&self, path: &str) -> Response {
        self.request("DELETE", path, &[], b"")
    }

    #[track_caller]
    pub fn post_json(&self, path: &str, body: &Value) -> Response {
        let bytes = serde_json::to_vec(body).expect("serialize body");
        self.request(
            "POST",
            path,
            &[("content-type", "application/json")],
            &bytes,
        )
    }

    #[track_caller]
    pub fn put_json(&self, path: &str, body: &Value) -> Response {
        let bytes = serde_json::to_vec(body).expect("serialize body");
        self.request("PUT", path, &[("content-type", "application/json")], &bytes)
    }

    /// Send arbitrary bytes and read until the peer closes or [`RAW_TIMEOUT`]
    /// elapses; returns whatever was received.
    pub fn raw(&self, bytes: &[u8]) -> Vec<u8> {
        self.raw_timeout(bytes, RAW_TIMEOUT)
    }

    /// [`HttpClient::raw`] with an explicit overall deadline.
    pub fn raw_timeout(&self, bytes: &[u8], timeout: Duration) -> Vec<u8> {
        let deadline = Instant::now() + timeout;
        let mut stream = self
            .connect()
            .unwrap_or_else(|e| panic!("connect to {} failed: {e}", self.addr));
        // The server may reject and close before reading everything: ignore
        // write errors and still collect whatever it answered.
        let _ = stream.set_write_timeout(Some(timeout));
        let _ = stream.write_all(bytes);
        let _ = stream.flush();
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let _ = stream.set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))));
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        out
    }

    /// Open `POST /api/v1/sessions/{id}/rpc` with a JSON-RPC request and
    /// return the live NDJSON stream. Does not wait for any response bytes.
    #[track_caller]
    pub fn rpc_stream(&self, session_id: &str, session_key: &str, request: &Value) -> RpcStream {
        let body = serde_json::to_vec(request).expect("serialize rpc request");
        self.rpc_stream_bytes(session_id, session_key, &body)
    }

    /// Like [`HttpClient::rpc_stream`] with an arbitrary request body (for
    /// parse-error tests).
    #[track_caller]
    pub fn rpc_stream_bytes(&self, session_id: &str, session_key: &str, body: &[u8]) -> RpcStream {
        self.try_rpc_stream_bytes(session_id, session_key, body)
            .unwrap_or_else(|e| panic!("opening rpc stream on {} failed: {e}", self.addr))
    }

    pub fn try_rpc_stream_bytes(
        &self,
        session_id: &str,
        session_key: &str,
        body: &[u8],
    ) -> io::Result<RpcStream> {
        let mut stream = self.connect()?;
        stream.set_write_timeout(Some(self.timeout))?;
        let path = format!("/api/v1/sessions/{session_id}/rpc");
        let bytes = self.build_request(
            "POST",
            &path,
            &[("content-type", "application/json")],
            body,
            Some(session_key),
        );
        stream.write_all(&bytes)?;
        stream.flush()?;
        Ok(RpcStream::from_stream(stream, self.timeout))
    }

    /// One-shot JSON-RPC call: returns (notifications, terminal frame).
    /// Panics if no terminal frame arrives within the client timeout.
    #[track_caller]
    pub fn rpc(
        &self,
        session_id: &str,
        session_key: &str,
        method: &str,
        params: Value,
        id: impl Into<Value>,
    ) -> (Vec<Value>, Value) {
        let request = rpc_request(method, params, id);
        let mut stream = self.rpc_stream(session_id, session_key, &request);
        let (notes, terminal) = stream.collect_until_terminal(self.timeout);
        match terminal {
            Some(t) => (notes, t),
            None => panic!(
                "{method}: no terminal frame within {:?} (status {:?}, notifications {notes:?})",
                self.timeout,
                stream.try_status()
            ),
        }
    }
}

/// Read one full response from `stream`.
fn read_response(
    stream: &mut TcpStream,
    deadline: Instant,
    head_request: bool,
) -> io::Result<Response> {
    let mut decoder = ResponseDecoder::lenient();
    decoder.set_head_request(head_request);
    let mut buf = [0u8; 16384];
    let mut head = None;
    let mut body = Vec::new();
    loop {
        match decoder.poll() {
            Ok(Some(ResponseEvent::Head(h))) => head = Some(h),
            Ok(Some(ResponseEvent::Data(d))) => body.extend(d),
            Ok(Some(ResponseEvent::End { .. })) => break,
            Ok(None) if decoder.is_finished() => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before any response",
                ))
            }
            Ok(None) => {
                if read_some(stream, &mut decoder, &mut buf, deadline)? {
                    decoder.finish();
                }
            }
            Err(ResponseError::Truncated(_)) if head.is_none() => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "connection closed before a complete response head ({} bytes: {:?})",
                        decoder.buffered().len(),
                        String::from_utf8_lossy(decoder.buffered())
                    ),
                ))
            }
            Err(ResponseError::Truncated(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed in the middle of the response body",
                ))
            }
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }
    let Some(head) = head else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no response head",
        ));
    };
    Ok(Response {
        status: head.status,
        reason: head.reason,
        headers: head.headers,
        body,
    })
}

/// The next event of `decoder`, reading from `stream` as needed (blocking,
/// under the stream's own read timeout, which surfaces as an error). A
/// close is passed to the decoder: inside a response it is an
/// `UnexpectedEof` error, between responses `Ok(None)`. Malformed bytes are
/// `InvalidData`.
pub fn next_event(
    stream: &mut impl Read,
    decoder: &mut ResponseDecoder,
    buf: &mut [u8],
) -> io::Result<Option<ResponseEvent>> {
    loop {
        match decoder.poll() {
            Ok(Some(ev)) => return Ok(Some(ev)),
            Ok(None) if decoder.is_finished() => return Ok(None),
            Ok(None) => match stream.read(buf) {
                Ok(0) => decoder.finish(),
                Ok(n) => decoder.feed(buf.get(..n).unwrap_or_default()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            },
            Err(e @ ResponseError::Truncated(_)) => {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, e))
            }
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }
}

/// One read before `deadline` into `decoder`; returns Ok(true) on EOF.
fn read_some(
    stream: &mut TcpStream,
    decoder: &mut ResponseDecoder,
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<bool> {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "HTTP response timed out",
            ));
        }
        stream.set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))?;
        match stream.read(buf) {
            Ok(0) => return Ok(true),
            Ok(n) => {
                decoder.feed(&buf[..n]);
                return Ok(false);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if is_timeout(&e) => continue,
            Err(e) => return Err(e),
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A live NDJSON response being read incrementally.
///
/// Nothing is read until a method asks for data, so a queued (silent) stream
/// can be observed with [`RpcStream::pump`] + [`RpcStream::bytes_received`].
#[derive(Debug)]
pub struct RpcStream {
    stream: TcpStream,
    decoder: ResponseDecoder,
    head: Option<wire::ResponseHead>,
    /// The body ended.
    ended: bool,
    /// Decoded body bytes not yet split into lines.
    pending: Vec<u8>,
    /// Bytes of `pending` already searched for a newline: a frame of
    /// several MB arrives in thousands of reads, and searching it from its
    /// start after each one made reading it quadratic (seconds per frame).
    scanned: usize,
    eof: bool,
    error: Option<String>,
    raw_bytes: usize,
    body_bytes: usize,
    timeout: Duration,
}

impl RpcStream {
    /// Wrap a connection on which an HTTP request was already written.
    pub fn from_stream(stream: TcpStream, timeout: Duration) -> Self {
        RpcStream {
            stream,
            decoder: ResponseDecoder::lenient(),
            head: None,
            ended: false,
            pending: Vec::new(),
            scanned: 0,
            eof: false,
            error: None,
            raw_bytes: 0,
            body_bytes: 0,
            timeout,
        }
    }

    /// Total bytes received from the socket so far (head included).
    pub fn bytes_received(&self) -> usize {
        self.raw_bytes
    }

    /// Decoded body bytes received so far (chunk framing excluded).
    pub fn body_bytes_received(&self) -> usize {
        self.body_bytes
    }

    /// True once the peer closed the connection or the body ended.
    pub fn is_finished(&self) -> bool {
        self.eof || self.ended
    }

    /// A framing error seen while decoding, if any.
    pub fn framing_error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Status if the head has already been received (never blocks).
    pub fn try_status(&self) -> Option<u16> {
        self.head.as_ref().map(|h| h.status)
    }

    /// Wait (up to `timeout`) for the response head; true if it arrived.
    pub fn wait_head(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.head.is_none() && !self.eof && self.error.is_none() {
            if !self.fill(deadline) {
                break;
            }
        }
        self.head.is_some()
    }

    /// HTTP status; waits for the head up to the client timeout, panics if
    /// none arrives.
    #[track_caller]
    pub fn status(&mut self) -> u16 {
        assert!(
            self.wait_head(self.timeout),
            "no response head within {:?}",
            self.timeout
        );
        self.head.as_ref().map(|h| h.status).unwrap_or_default()
    }

    /// Response headers (lower-cased names); waits like [`RpcStream::status`].
    #[track_caller]
    pub fn headers(&mut self) -> Vec<(String, String)> {
        self.status();
        self.head
            .as_ref()
            .map(|h| h.headers.clone())
            .unwrap_or_default()
    }

    /// Case-insensitive header lookup; waits like [`RpcStream::status`].
    #[track_caller]
    pub fn header(&mut self, name: &str) -> Option<String> {
        self.headers()
            .into_iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Read whatever arrives during `duration` (or until EOF) into the
    /// internal buffers without consuming frames. Returns new socket bytes.
    pub fn pump(&mut self, duration: Duration) -> usize {
        let before = self.raw_bytes;
        let deadline = Instant::now() + duration;
        while !self.eof && self.error.is_none() && self.fill(deadline) {}
        self.raw_bytes - before
    }

    /// Wait until the server closes the connection (buffering any data);
    /// true if it closed within `timeout`.
    pub fn wait_closed(&mut self, timeout: Duration) -> bool {
        self.pump(timeout);
        self.eof
    }

    /// The next non-empty NDJSON line (without the newline), or `None` on
    /// timeout or end of body. A final line without `\n` is returned too.
    pub fn next_line(&mut self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            while let Some(pos) = (self.pending.get(self.scanned..).unwrap_or_default())
                .iter()
                .position(|&b| b == b'\n')
                .map(|p| self.scanned + p)
            {
                self.scanned = 0;
                let line: Vec<u8> = self.pending.drain(..=pos).collect();
                let text = String::from_utf8_lossy(&line[..line.len() - 1]);
                let text = text.trim_end_matches('\r');
                if !text.trim().is_empty() {
                    return Some(text.to_string());
                }
            }
            self.scanned = self.pending.len();
            if self.is_finished() || self.error.is_some() {
                self.scanned = 0;
                if self.pending.iter().all(u8::is_ascii_whitespace) {
                    self.pending.clear();
                    return None;
                }
                let rest = std::mem::take(&mut self.pending);
                return Some(String::from_utf8_lossy(&rest).trim().to_string());
            }
            if !self.fill(deadline) {
                return None;
            }
        }
    }

    /// The next frame parsed as JSON, or `None` on timeout / end of body.
    /// Panics if a line is not valid JSON.
    #[track_caller]
    pub fn next_frame(&mut self, timeout: Duration) -> Option<Value> {
        let line = self.next_line(timeout)?;
        match serde_json::from_str(&line) {
            Ok(v) => Some(v),
            Err(e) => panic!("NDJSON line is not JSON ({e}): {line:?}"),
        }
    }

    /// Read frames until one carrying an `id` member (the terminal frame).
    /// Returns the notifications seen and the terminal frame, or `None` for
    /// the terminal on timeout / end of stream.
    #[track_caller]
    pub fn collect_until_terminal(&mut self, timeout: Duration) -> (Vec<Value>, Option<Value>) {
        let deadline = Instant::now() + timeout;
        let mut notes = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_frame(left) {
                None => return (notes, None),
                Some(frame) => {
                    if frame.get("id").is_some() {
                        return (notes, Some(frame));
                    }
                    notes.push(frame);
                }
            }
        }
    }

    /// Close the connection (client disconnect).
    pub fn disconnect(self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    /// One socket read before `deadline`, then process buffers. Returns false
    /// when nothing more can be obtained (timeout, EOF, error).
    fn fill(&mut self, deadline: Instant) -> bool {
        if self.eof {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        let mut buf = [0u8; 8192];
        let _ = self
            .stream
            .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))));
        let got = match self.stream.read(&mut buf) {
            Ok(0) => {
                self.eof = true;
                self.decoder.finish();
                0
            }
            Ok(n) => {
                self.raw_bytes += n;
                self.decoder.feed(&buf[..n]);
                n
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) if is_timeout(&e) => return false,
            Err(_) => {
                self.eof = true;
                self.decoder.finish();
                0
            }
        };
        self.process();
        got > 0 || !self.eof
    }

    /// Drain the decoder: the head, then body bytes into `pending`. A close
    /// inside the body is not a framing error (it shows as EOF).
    fn process(&mut self) {
        while self.error.is_none() && !self.ended {
            match self.decoder.poll() {
                Ok(Some(ResponseEvent::Head(head))) => self.head = Some(head),
                Ok(Some(ResponseEvent::Data(data))) => {
                    self.body_bytes += data.len();
                    self.pending.extend(data);
                }
                Ok(Some(ResponseEvent::End { .. })) => self.ended = true,
                Ok(None) | Err(ResponseError::Truncated(_)) => return,
                Err(e) => self.error = Some(e.to_string()),
            }
        }
    }
}
