//! Incremental request decoder.
//!
//! Determinism: every answer `poll` gives is a function of the bytes fed so
//! far (not of how they were split), and once a rejection or a complete
//! head is determined by a prefix, no later byte changes it. So any split
//! of the same stream yields the same items and the same rejection; the
//! only exception is [`Decoded::ContinueExpected`], which by definition
//! depends on how much body had arrived when the head was decoded.
//!
//! `httparse` is not resumable, so a partial head is re-parsed from its
//! start — but only when a new complete line arrived (bounded by the header
//! count limit), when an impossible byte shows up, or when the head limit is
//! reached. A byte-at-a-time sender therefore cannot cause quadratic work.

use std::mem;

use super::request::Headers;
use super::{Decoded, Limits, Method, Rejection, Request};

/// Longest chunk-size line (size, extensions and CRLF) accepted.
const MAX_CHUNK_LINE: usize = 4096;

const fn reject(status: u16, reason: &'static str) -> Rejection {
    Rejection { status, reason }
}

const BAD_REQUEST_LINE: Rejection = reject(400, "malformed request line");
const BAD_VERSION: Rejection = reject(400, "malformed HTTP version");
const BAD_HEADER_NAME: Rejection = reject(
    400,
    "invalid header name (obs-fold or whitespace before colon?)",
);
const BAD_HEADER_VALUE: Rejection = reject(400, "invalid byte in header value");
const BAD_LINE_ENDING: Rejection = reject(400, "request head lines must end with CRLF");
const BAD_HEAD_BYTE: Rejection = reject(400, "invalid byte in request head");
const TE_IN_HTTP10: Rejection = reject(400, "Transfer-Encoding in an HTTP/1.0 request");
const CL_AND_TE: Rejection = reject(400, "both Content-Length and Transfer-Encoding present");
const BAD_CONTENT_LENGTH: Rejection = reject(400, "invalid Content-Length");
const CONFLICTING_CONTENT_LENGTH: Rejection = reject(400, "conflicting Content-Length headers");
const BAD_CHUNK_SIZE: Rejection = reject(400, "invalid chunk-size line");
const CHUNK_SIZE_OVERFLOW: Rejection = reject(400, "chunk size overflows");
const CHUNK_LINE_TOO_LONG: Rejection = reject(400, "chunk-size line too long");
const BAD_CHUNK_END: Rejection = reject(400, "missing CRLF after chunk data");
const BAD_TRAILER: Rejection = reject(400, "invalid trailer field line");
const BODY_TOO_LARGE: Rejection = reject(413, "request body exceeds the configured limit");
const HEAD_TOO_LARGE: Rejection = reject(431, "request head exceeds the configured limit");
const TOO_MANY_HEADERS: Rejection = reject(431, "too many header fields");
const TRAILERS_TOO_LARGE: Rejection =
    reject(431, "trailer section exceeds the configured head limit");
const UNSUPPORTED_TE: Rejection = reject(501, "unsupported Transfer-Encoding (only chunked)");
const UNSUPPORTED_VERSION: Rejection = reject(505, "only HTTP/1.0 and HTTP/1.1 are supported");

/// Incremental HTTP/1.x request decoder for one connection.
///
/// Feed bytes as they arrive with [`feed`](Self::feed) and drain items with
/// [`poll`](Self::poll) until it returns `Ok(None)`. Pipelined requests come
/// out one per `poll`, in order; bytes after a request stay buffered. The
/// decoder buffers whatever it is fed: callers should stop reading while
/// [`buffered`](Self::buffered) is large and a request is being served.
#[derive(Debug)]
pub struct RequestDecoder {
    limits: Limits,
    /// One path whose requests may carry a larger body (see
    /// [`RequestDecoder::with_large_body`]).
    large_body: Option<(&'static str, usize)>,
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    pos: usize,
    state: State,
    head: HeadProgress,
    failed: Option<Rejection>,
}

/// Bookkeeping for a partially received head (offsets relative to `pos`).
#[derive(Debug, Default)]
struct HeadProgress {
    /// Bytes of empty lines skipped before the request line (count toward
    /// the head limit).
    skipped: usize,
    /// Head bytes scanned for line ends and impossible bytes so far.
    scanned: usize,
    /// Length of the complete (CRLF-terminated) lines among them.
    lines: usize,
    /// Head bytes given to the last `httparse` attempt (which was partial).
    parsed: usize,
}

#[derive(Debug)]
enum State {
    Head,
    Body {
        request: Request,
        framing: Framing,
        continue_pending: bool,
        /// This request's body limit.
        max_body: usize,
    },
}

#[derive(Debug)]
enum Framing {
    /// Body bytes still to come.
    Length(usize),
    Chunked(Chunk),
}

/// Header slots [`RequestDecoder`] keeps on the stack: the default
/// `max_headers`.
const STACK_SLOTS: usize = 64;

#[derive(Debug)]
enum Chunk {
    /// Expecting a chunk-size line; `scanned` bytes are known to hold no LF.
    Size { scanned: usize },
    /// Inside chunk data.
    Data(usize),
    /// Expecting the CRLF after chunk data.
    DataEnd,
    /// Inside the trailer section; `used` bytes consumed so far.
    Trailers { used: usize, scanned: usize },
}

impl RequestDecoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        RequestDecoder {
            limits,
            large_body: None,
            buf: Vec::new(),
            pos: 0,
            state: State::Head,
            head: HeadProgress::default(),
            failed: None,
        }
    }

    /// Requests whose target path (the part before any `?`) is exactly
    /// `path` may carry a body of up to `max_body_bytes` instead of
    /// [`Limits::max_body_bytes`] (a session import on the admin port is
    /// larger than any other body).
    pub fn with_large_body(mut self, path: &'static str, max_body_bytes: usize) -> Self {
        self.large_body = Some((path, max_body_bytes));
        self
    }

    /// Appends bytes (any split of the stream). Ignored after a rejection.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.failed.is_some() || bytes.is_empty() {
            return;
        }
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 0 && self.pos >= self.buf.len() / 2 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete item: `Ok(None)` means more bytes are needed.
    /// After an `Err` the decoder is dead and keeps returning that error.
    pub fn poll(&mut self) -> Result<Option<Decoded>, Rejection> {
        if let Some(r) = self.failed {
            return Err(r);
        }
        let result = self.step();
        if let Err(r) = result {
            self.failed = Some(r);
            self.buf = Vec::new();
            self.pos = 0;
            self.state = State::Head;
        }
        result
    }

    /// Bytes held: undecoded input plus the body of a request in progress.
    pub fn buffered(&self) -> usize {
        let body = match &self.state {
            State::Head => 0,
            State::Body { request, .. } => request.body.len(),
        };
        self.buf.len() - self.pos + body
    }

    /// Whether no part of a request is buffered (a clean point to close an
    /// idle connection). A dead decoder is never idle.
    pub fn is_idle(&self) -> bool {
        self.failed.is_none() && matches!(self.state, State::Head) && self.pos == self.buf.len()
    }

    fn step(&mut self) -> Result<Option<Decoded>, Rejection> {
        if let State::Head = self.state {
            match self.parse_head()? {
                None => return Ok(None),
                Some((request, framing, expect_continue, max_body)) => {
                    self.state = State::Body {
                        request,
                        framing,
                        continue_pending: expect_continue,
                        max_body,
                    };
                }
            }
        }
        self.step_body()
    }

    /// Tries to complete the head; on success consumes it and returns the
    /// request (empty body), its framing and whether to offer 100-continue.
    ///
    /// The answer is a function of the buffered bytes only: `httparse` runs
    /// on the complete lines buffered so far (re-run only when a new line
    /// arrived, so a slow sender costs at most one parse per line), or up to
    /// the first byte that can never occur in a valid head (a control byte,
    /// a CR not followed by LF, a bare LF), or on the whole window once the
    /// head limit is reached.
    fn parse_head(&mut self) -> Result<Option<(Request, Framing, bool, usize)>, Rejection> {
        let max = self.limits.max_head_bytes;
        // Empty lines before a request line are ignored (RFC 9112 §2.2) but
        // still count toward the head limit.
        while tail(&self.buf, self.pos).starts_with(b"\r\n") {
            self.pos += 2;
            self.head.skipped += 2;
            self.head.scanned = self.head.scanned.saturating_sub(2);
            self.head.lines = self.head.lines.saturating_sub(2);
            self.head.parsed = self.head.parsed.saturating_sub(2);
        }
        if self.head.skipped > max {
            return Err(HEAD_TOO_LARGE);
        }
        let avail = self.buf.len() - self.pos;
        if avail == 0 {
            return Ok(None);
        }
        let budget = max - self.head.skipped;
        let full = avail >= budget;
        let window = head(tail(&self.buf, self.pos), avail.min(budget));

        // Scan the bytes not seen before for line ends and impossible bytes.
        let mut stop = None;
        let mut i = self.head.scanned;
        while let Some(&b) = window.get(i) {
            let after_cr = i > 0 && window.get(i - 1) == Some(&b'\r');
            if b == b'\n' {
                if !after_cr {
                    // httparse accepts bare LF; we require CRLF so that no
                    // two parsers disagree about where a field ends.
                    stop = Some((head(window, i), BAD_LINE_ENDING));
                    break;
                }
                self.head.lines = i + 1;
                if i >= 2 && window.get(i - 2) == Some(&b'\n') {
                    // The empty line: the head ends here, and what follows
                    // is body or the next request, never scanned as head.
                    i += 1;
                    break;
                }
            } else if after_cr || is_forbidden_in_head(b) {
                stop = Some((head(window, i + 1), BAD_HEAD_BYTE));
                break;
            }
            i += 1;
        }
        self.head.scanned = i;

        let (piece, if_partial) = if let Some((piece, rejection)) = stop {
            (piece, Some(rejection))
        } else if full {
            (window, Some(HEAD_TOO_LARGE))
        } else if self.head.lines > self.head.parsed {
            (head(window, self.head.lines), None)
        } else {
            return Ok(None);
        };

        // Each header line takes at least 3 bytes, so more slots than this
        // can never be filled within the window.
        let slots = self.limits.max_headers.min(max / 3 + 1);
        // The default limit's slots fit on the stack; a 2 KiB zeroed
        // allocation per request was the decoder's costliest step.
        let mut on_stack = [httparse::EMPTY_HEADER; STACK_SLOTS];
        let mut on_heap = Vec::new();
        let slots = match on_stack.get_mut(..slots) {
            Some(s) => s,
            None => {
                on_heap.resize(slots, httparse::EMPTY_HEADER);
                &mut on_heap[..]
            }
        };
        let mut parsed = httparse::Request::new(slots);
        let head_len = match parsed.parse(piece) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                if let Some(rejection) = if_partial {
                    return Err(rejection);
                }
                self.head.parsed = piece.len();
                return Ok(None);
            }
            Err(e) => return Err(classify(e, piece)),
        };
        let (Some(method), Some(target), Some(minor_version)) =
            (parsed.method, parsed.path, parsed.version)
        else {
            return Err(BAD_REQUEST_LINE);
        };

        let mut content_length: Option<&[u8]> = None;
        let mut transfer_encoding: Option<&[u8]> = None;
        let mut te_fields = 0usize;
        let mut conn_close = false;
        let mut conn_keep_alive = false;
        let mut expect_continue = false;
        for h in parsed.headers.iter() {
            let name = h.name;
            if name.eq_ignore_ascii_case("content-length") {
                parse_content_length(h.value).ok_or(BAD_CONTENT_LENGTH)?;
                match content_length {
                    Some(prev) if prev != h.value => return Err(CONFLICTING_CONTENT_LENGTH),
                    _ => content_length = Some(h.value),
                }
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                te_fields += 1;
                transfer_encoding = Some(h.value);
            } else if name.eq_ignore_ascii_case("connection") {
                for token in h.value.split(|&b| b == b',') {
                    let token = trim_ows(token);
                    conn_close |= token.eq_ignore_ascii_case(b"close");
                    conn_keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            } else if name.eq_ignore_ascii_case("expect") {
                expect_continue |= h.value.eq_ignore_ascii_case(b"100-continue");
            }
        }

        let path = target.split('?').next().unwrap_or(target);
        let max_body = match self.large_body {
            Some((large, max)) if large == path => max,
            _ => self.limits.max_body_bytes,
        };
        let framing = match (transfer_encoding, content_length) {
            (Some(_), _) if minor_version == 0 => return Err(TE_IN_HTTP10),
            (Some(_), Some(_)) => return Err(CL_AND_TE),
            (Some(te), None) => {
                if te_fields != 1 || !te.eq_ignore_ascii_case(b"chunked") {
                    return Err(UNSUPPORTED_TE);
                }
                Framing::Chunked(Chunk::Size { scanned: 0 })
            }
            (None, Some(cl)) => {
                let n = parse_content_length(cl).ok_or(BAD_CONTENT_LENGTH)?;
                if n > max_body as u64 {
                    return Err(BODY_TOO_LARGE);
                }
                Framing::Length(n as usize)
            }
            (None, None) => Framing::Length(0),
        };
        let has_body = !matches!(framing, Framing::Length(0));

        let keep_alive = if minor_version == 1 {
            !conn_close
        } else {
            conn_keep_alive && !conn_close
        };
        let body_capacity = match framing {
            Framing::Length(n) => n.min(64 * 1024),
            Framing::Chunked(_) => 0,
        };
        let mut headers = Headers::with_capacity(parsed.headers.len(), head_len);
        for h in parsed.headers.iter() {
            headers.push(h.name, h.value);
        }
        let request = Request::new(
            Method::from_token(method),
            target.to_owned(),
            minor_version,
            headers,
            Vec::with_capacity(body_capacity),
            keep_alive,
        );

        self.pos += head_len;
        self.head = HeadProgress::default();
        Ok(Some((
            request,
            framing,
            expect_continue && minor_version == 1 && has_body,
            max_body,
        )))
    }

    fn step_body(&mut self) -> Result<Option<Decoded>, Rejection> {
        let State::Body {
            request,
            framing,
            continue_pending,
            max_body,
        } = &mut self.state
        else {
            return Ok(None);
        };
        let done = match framing {
            Framing::Length(remaining) => {
                let avail = tail(&self.buf, self.pos);
                let take = avail.len().min(*remaining);
                request.body.extend_from_slice(head(avail, take));
                self.pos += take;
                *remaining -= take;
                *remaining == 0
            }
            Framing::Chunked(chunk) => decode_chunked(
                &self.buf,
                &mut self.pos,
                chunk,
                &mut request.body,
                *max_body,
                self.limits.max_head_bytes,
            )?,
        };
        if done {
            return match mem::replace(&mut self.state, State::Head) {
                State::Body { request, .. } => Ok(Some(Decoded::Request(request))),
                State::Head => Ok(None),
            };
        }
        if mem::take(continue_pending) {
            return Ok(Some(Decoded::ContinueExpected));
        }
        Ok(None)
    }
}

/// Advances a chunked body as far as the buffered bytes allow; `Ok(true)`
/// once the last chunk and the trailer section are consumed.
fn decode_chunked(
    buf: &[u8],
    pos: &mut usize,
    chunk: &mut Chunk,
    body: &mut Vec<u8>,
    max_body: usize,
    max_head: usize,
) -> Result<bool, Rejection> {
    loop {
        let avail = tail(buf, *pos);
        match chunk {
            Chunk::Size { scanned } => {
                let Some(len) =
                    find_line(avail, scanned, MAX_CHUNK_LINE).map_err(|()| CHUNK_LINE_TOO_LONG)?
                else {
                    return Ok(false);
                };
                let size = parse_chunk_size(head(avail, len))?;
                *pos += len;
                *chunk = if size == 0 {
                    Chunk::Trailers {
                        used: 0,
                        scanned: 0,
                    }
                } else {
                    let room = max_body.saturating_sub(body.len()) as u64;
                    if size > room {
                        return Err(BODY_TOO_LARGE);
                    }
                    Chunk::Data(size as usize)
                };
            }
            Chunk::Data(remaining) => {
                let take = avail.len().min(*remaining);
                body.extend_from_slice(head(avail, take));
                *pos += take;
                *remaining -= take;
                if *remaining > 0 {
                    return Ok(false);
                }
                *chunk = Chunk::DataEnd;
            }
            Chunk::DataEnd => match avail {
                [] | [b'\r'] => return Ok(false),
                [b'\r', b'\n', ..] => {
                    *pos += 2;
                    *chunk = Chunk::Size { scanned: 0 };
                }
                _ => return Err(BAD_CHUNK_END),
            },
            Chunk::Trailers { used, scanned } => {
                let budget = max_head.saturating_sub(*used);
                let Some(len) =
                    find_line(avail, scanned, budget).map_err(|()| TRAILERS_TOO_LARGE)?
                else {
                    return Ok(false);
                };
                let line = head(avail, len);
                *pos += len;
                *used += len;
                *scanned = 0;
                if line == b"\r\n" {
                    return Ok(true);
                }
                if !valid_trailer_line(line) {
                    return Err(BAD_TRAILER);
                }
            }
        }
    }
}

/// Finds the end (index after LF) of the line at the start of `data`,
/// looking at most `max` bytes in. `*scanned` remembers how far a previous
/// call already looked; it is reset when a line is found.
fn find_line(data: &[u8], scanned: &mut usize, max: usize) -> Result<Option<usize>, ()> {
    let window = head(data, data.len().min(max));
    let from = (*scanned).min(window.len());
    match tail(window, from).iter().position(|&b| b == b'\n') {
        Some(i) => {
            *scanned = 0;
            Ok(Some(from + i + 1))
        }
        None if data.len() >= max => Err(()),
        None => {
            *scanned = window.len();
            Ok(None)
        }
    }
}

/// `buf[from..]`, empty past the end: offsets here are bounded by earlier
/// checks, and a slip must reject the request, never panic the server.
fn tail(buf: &[u8], from: usize) -> &[u8] {
    buf.get(from..).unwrap_or_default()
}

/// `buf[..to]`, clamped to the buffer (see [`tail`]).
fn head(buf: &[u8], to: usize) -> &[u8] {
    buf.get(..to).unwrap_or(buf)
}

/// `1*HEXDIG [ BWS ";" chunk-ext ] CRLF`; extensions are ignored but must
/// not hold control bytes.
fn parse_chunk_size(line: &[u8]) -> Result<u64, Rejection> {
    let line = line.strip_suffix(b"\r\n").ok_or(BAD_CHUNK_SIZE)?;
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(BAD_CHUNK_SIZE);
    }
    let mut size: u64 = 0;
    for &b in head(line, digits) {
        let d = (b as char).to_digit(16).unwrap_or(0) as u64;
        size = size
            .checked_mul(16)
            .and_then(|s| s.checked_add(d))
            .ok_or(CHUNK_SIZE_OVERFLOW)?;
    }
    let rest = tail(line, digits);
    if !rest.is_empty() {
        let ext = trim_start_ows(rest);
        if ext.first() != Some(&b';') || !ext.iter().all(|&b| is_field_byte(b)) {
            return Err(BAD_CHUNK_SIZE);
        }
    }
    Ok(size)
}

/// `field-name ":" OWS field-value OWS CRLF` with a token name.
fn valid_trailer_line(line: &[u8]) -> bool {
    let Some(line) = line.strip_suffix(b"\r\n") else {
        return false;
    };
    let name_len = line.iter().take_while(|&&b| is_token_byte(b)).count();
    name_len > 0
        && line.get(name_len) == Some(&b':')
        && tail(line, name_len + 1).iter().all(|&b| is_field_byte(b))
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Bytes allowed inside a field value or chunk extension: HTAB, visible
/// ASCII, SP and obs-text.
fn is_field_byte(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

fn parse_content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

fn trim_start_ows(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    tail(s, n)
}

fn trim_ows(s: &[u8]) -> &[u8] {
    let s = trim_start_ows(s);
    let n = s
        .iter()
        .rev()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    head(s, s.len().saturating_sub(n))
}

/// Control bytes other than HTAB, CR and LF, and DEL: invalid anywhere in
/// a request head, so `httparse` is certain to reject a head holding one.
fn is_forbidden_in_head(b: u8) -> bool {
    (b < 0x20 && b != b'\t' && b != b'\r' && b != b'\n') || b == 0x7f
}

/// Maps an `httparse` error on `window` (the head bytes parsed) to a status.
fn classify(e: httparse::Error, window: &[u8]) -> Rejection {
    match e {
        httparse::Error::Version => classify_version(window),
        httparse::Error::TooManyHeaders => TOO_MANY_HEADERS,
        httparse::Error::HeaderName => BAD_HEADER_NAME,
        httparse::Error::HeaderValue => BAD_HEADER_VALUE,
        httparse::Error::NewLine => BAD_LINE_ENDING,
        httparse::Error::Token | httparse::Error::Status => BAD_REQUEST_LINE,
    }
}

/// `httparse` reports any version other than `HTTP/1.0` / `HTTP/1.1` as the
/// same error; a well-formed but unsupported `HTTP/x.y` is 505, anything
/// else 400. Only bytes `httparse` has necessarily seen when it failed are
/// inspected (it stops at the first mismatch of `HTTP/1.` and compares all
/// eight bytes at once when available), so the answer does not depend on
/// how the stream was split.
fn classify_version(window: &[u8]) -> Rejection {
    let start = window
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(window.len());
    let mut parts = tail(window, start).splitn(3, |&b| b == b' ');
    let (Some(_method), Some(_target), Some(v)) = (parts.next(), parts.next(), parts.next()) else {
        return BAD_VERSION;
    };
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    if v.len() < 6 || !v.starts_with(b"HTTP/") || !at(5).is_ascii_digit() {
        return BAD_VERSION;
    }
    if at(5) != b'1' {
        return UNSUPPORTED_VERSION;
    }
    if v.len() >= 8 && at(6) == b'.' && at(7).is_ascii_digit() {
        return UNSUPPORTED_VERSION;
    }
    BAD_VERSION
}
