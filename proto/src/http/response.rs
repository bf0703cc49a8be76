//! Client-side HTTP/1.1 response decoding, sans-IO.
//!
//! [`ResponseDecoder`] is fed the bytes a server wrote on one connection, in
//! any split, and yields [`ResponseEvent`]s: each response's head, its body
//! data as it arrives (one event per chunk, or per fed piece of a
//! `Content-Length` body, so a long-lived NDJSON stream can be followed
//! line by line), and its end. Pipelined responses follow one another on the
//! same decoder. It is the one response decoder of the workspace: testkit's
//! client, the benches, the engine's in-process test harness and the
//! simulator (which uses it as an oracle of the server's wire output) all
//! read responses with it.
//!
//! [`Mode::Strict`] (the default) accepts only what RFC 9112 lets a server
//! send, and what this server always sends:
//!
//! - the status line is `HTTP/1.1 SP 3DIGIT SP reason-phrase`, status
//!   100–599, no leading empty lines;
//! - every line of the head, every chunk-size line, the CRLF after each
//!   chunk's data and every trailer line ends in CRLF (a bare LF, a stray CR
//!   or any other byte there is an error);
//! - field lines are `token ":" OWS value OWS`: no whitespace before the
//!   colon, no obs-fold, no control characters in values;
//! - the body is framed exactly once: one `Content-Length` field of
//!   `1*DIGIT`, or `Transfer-Encoding: chunked` alone, never both; a
//!   response that could carry a body but has neither is an error (its end
//!   could not be told from a truncation); 1xx and 204 carry neither field;
//! - a chunk-size line is `1*HEXDIG` then nothing or chunk extensions
//!   (starting with `;`, no control characters).
//!
//! [`Mode::Lenient`] is for reading whatever a test peer produced: any
//! `HTTP/1.x` version and a missing reason phrase are accepted, a bare LF
//! ends a line, whitespace around names and chunk sizes is trimmed,
//! obs-fold is joined, duplicated equal `Content-Length`s are accepted,
//! `Transfer-Encoding` overrides `Content-Length`, and an unframed body runs
//! until [`ResponseDecoder::finish`].
//!
//! In both modes an oversized head or trailer section, a malformed status
//! line or field line, a bad `Content-Length`, a transfer coding other than
//! `chunked`, a non-hex or overflowing chunk size, `101 Switching Protocols`
//! and a connection closed inside a message are errors. After an error the
//! decoder stays failed: [`ResponseDecoder::poll`] returns the same error.
//! Interim (1xx) responses are skipped. Whether a response can have a body
//! depends on the request: call [`ResponseDecoder::set_head_request`] before
//! the head of a response to `HEAD` is decoded.

use std::fmt;

/// Default limit on a response head (and, separately, on a trailer
/// section), in bytes including the final empty line.
pub const DEFAULT_MAX_HEAD_BYTES: usize = 64 * 1024;

/// Longest chunk-size line (size and extensions), without its line ending.
const MAX_CHUNK_LINE: usize = 4096;

/// How much deviation from a well-formed response is tolerated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// See the module docs: malformed framing is an error.
    #[default]
    Strict,
    /// See the module docs: for reading arbitrary test peers.
    Lenient,
}

/// How a response's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body: a 204 or 304, or the answer to a `HEAD` request.
    Empty,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// No framing: the body runs until the connection closes (lenient only).
    UntilClose,
}

/// Status line and header fields of a (final) response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    pub reason: String,
    /// Lower-cased names, values without surrounding whitespace; order and
    /// duplicates preserved.
    pub headers: Vec<(String, String)>,
    pub framing: Framing,
}

impl ResponseHead {
    /// The first header with this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        super::peer::header(&self.headers, name)
    }
}

/// One item out of [`ResponseDecoder::poll`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseEvent {
    /// The head of the next final response.
    Head(ResponseHead),
    /// Body bytes (chunk framing removed), never empty.
    Data(Vec<u8>),
    /// The response is complete; `trailers` are a chunked body's trailer
    /// fields (names lower-cased). Bytes after it belong to the next one.
    End { trailers: Vec<(String, String)> },
}

/// Why the bytes are not a valid response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseError {
    /// The head (or a trailer section) exceeds the limit without ending.
    HeadTooLarge { limit: usize },
    /// Malformed status line or field line.
    Head(String),
    /// Inconsistent or unsupported body framing.
    Framing(String),
    /// Malformed chunked body: size line, CRLF after data, trailers.
    Chunk(String),
    /// The connection closed inside a message.
    Truncated(String),
}

impl fmt::Display for ResponseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResponseError::HeadTooLarge { limit } => {
                write!(f, "response head larger than {limit} bytes")
            }
            ResponseError::Head(d) => write!(f, "malformed response head: {d}"),
            ResponseError::Framing(d) => write!(f, "bad response framing: {d}"),
            ResponseError::Chunk(d) => write!(f, "malformed chunked body: {d}"),
            ResponseError::Truncated(d) => write!(f, "truncated response: {d}"),
        }
    }
}

impl std::error::Error for ResponseError {}

#[derive(Debug, Clone)]
enum State {
    /// Before a head; `scanned` bytes after `pos` are complete lines already
    /// checked (none of them empty).
    Head {
        scanned: usize,
    },
    Length {
        remaining: u64,
    },
    Chunked(ChunkReader),
    UntilClose,
    /// The head or body is complete; `End` is due.
    Ending,
}

/// Incremental response decoder for one connection. See the module docs.
#[derive(Debug, Clone)]
pub struct ResponseDecoder {
    mode: Mode,
    max_head_bytes: usize,
    buf: Vec<u8>,
    /// Start of the bytes not yet consumed.
    pos: usize,
    state: State,
    head_request: bool,
    eof: bool,
    error: Option<ResponseError>,
}

impl Default for ResponseDecoder {
    fn default() -> Self {
        ResponseDecoder::new()
    }
}

impl ResponseDecoder {
    /// A strict decoder.
    pub fn new() -> Self {
        ResponseDecoder::with_mode(Mode::Strict)
    }

    /// A lenient decoder.
    pub fn lenient() -> Self {
        ResponseDecoder::with_mode(Mode::Lenient)
    }

    pub fn with_mode(mode: Mode) -> Self {
        ResponseDecoder {
            mode,
            max_head_bytes: DEFAULT_MAX_HEAD_BYTES,
            buf: Vec::new(),
            pos: 0,
            state: State::Head { scanned: 0 },
            head_request: false,
            eof: false,
            error: None,
        }
    }

    /// Limit for a head and for a trailer section (default
    /// [`DEFAULT_MAX_HEAD_BYTES`]).
    pub fn max_head_bytes(mut self, limit: usize) -> Self {
        self.max_head_bytes = limit;
        self
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether the next response head to be decoded answers a `HEAD`
    /// request (then it has no body whatever its headers say). Reset after
    /// that head.
    pub fn set_head_request(&mut self, head: bool) {
        self.head_request = head;
    }

    /// Append bytes read from the connection.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos >= 4096 && self.pos * 2 >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The peer closed the connection: ends a body framed by close, and
    /// makes an unfinished message an error.
    pub fn finish(&mut self) {
        self.eof = true;
    }

    /// Whether [`ResponseDecoder::finish`] was called.
    pub fn is_finished(&self) -> bool {
        self.eof
    }

    /// Bytes fed but not consumed yet (the start of the next response after
    /// an `End`).
    pub fn buffered(&self) -> &[u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// Removes and returns [`ResponseDecoder::buffered`]; meant for between
    /// responses, when the rest belongs to something else.
    pub fn take_buffered(&mut self) -> Vec<u8> {
        let rest = self.buffered().to_vec();
        self.buf.clear();
        self.pos = 0;
        if let State::Head { scanned } = &mut self.state {
            *scanned = 0;
        }
        rest
    }

    /// The next event, `Ok(None)` when more bytes (or [`finish`]) are
    /// needed.
    ///
    /// [`finish`]: ResponseDecoder::finish
    pub fn poll(&mut self) -> Result<Option<ResponseEvent>, ResponseError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let result = self.step();
        if let Err(e) = &result {
            self.error = Some(e.clone());
        }
        result
    }

    fn step(&mut self) -> Result<Option<ResponseEvent>, ResponseError> {
        loop {
            let avail = self.buf.len() - self.pos;
            match &mut self.state {
                State::Head { .. } => match self.head()? {
                    Some(head) => return Ok(Some(ResponseEvent::Head(head))),
                    None if self.eof && self.pos < self.buf.len() => {
                        return Err(truncated("inside a response head"))
                    }
                    None => return Ok(None),
                },
                State::Ending => {
                    self.state = State::Head { scanned: 0 };
                    return Ok(Some(ResponseEvent::End {
                        trailers: Vec::new(),
                    }));
                }
                State::Length { remaining } => {
                    if avail == 0 {
                        if self.eof {
                            return Err(truncated(&format!(
                                "{remaining} bytes of the body missing"
                            )));
                        }
                        return Ok(None);
                    }
                    let take = usize::try_from(*remaining).unwrap_or(usize::MAX).min(avail);
                    *remaining -= take as u64;
                    if *remaining == 0 {
                        self.state = State::Ending;
                    }
                    return Ok(Some(ResponseEvent::Data(self.take(take))));
                }
                State::UntilClose => {
                    if avail > 0 {
                        return Ok(Some(ResponseEvent::Data(self.take(avail))));
                    }
                    if self.eof {
                        self.state = State::Ending;
                        continue;
                    }
                    return Ok(None);
                }
                State::Chunked(reader) => {
                    let input = self.buf.get(self.pos..).unwrap_or_default();
                    match reader.step(input, self.mode, self.max_head_bytes)? {
                        ChunkStep::Skip(n) => self.pos += n,
                        ChunkStep::Data(n) => return Ok(Some(ResponseEvent::Data(self.take(n)))),
                        ChunkStep::Done(n) => {
                            let trailers = std::mem::take(&mut reader.trailers);
                            self.pos += n;
                            self.state = State::Head { scanned: 0 };
                            return Ok(Some(ResponseEvent::End { trailers }));
                        }
                        ChunkStep::NeedMore if self.eof => {
                            return Err(truncated("inside a chunked body"))
                        }
                        ChunkStep::NeedMore => return Ok(None),
                    }
                }
            }
        }
    }

    /// `n` bytes from `pos`, consumed.
    fn take(&mut self, n: usize) -> Vec<u8> {
        let end = self.pos + n;
        let out = self.buf.get(self.pos..end).unwrap_or_default().to_vec();
        self.pos = end;
        out
    }

    /// Looks for a complete head; skips interim responses.
    fn head(&mut self) -> Result<Option<ResponseHead>, ResponseError> {
        let strict = self.mode == Mode::Strict;
        loop {
            let State::Head { scanned } = &mut self.state else {
                return Ok(None);
            };
            let input = self.buf.get(self.pos..).unwrap_or_default();
            let from = input.get(*scanned..).unwrap_or_default();
            let Some(nl) = from.iter().position(|&b| b == b'\n') else {
                if input.len() > self.max_head_bytes {
                    return Err(ResponseError::HeadTooLarge {
                        limit: self.max_head_bytes,
                    });
                }
                return Ok(None);
            };
            let line = from.get(..nl).unwrap_or_default();
            let end = *scanned + nl + 1;
            if end > self.max_head_bytes {
                return Err(ResponseError::HeadTooLarge {
                    limit: self.max_head_bytes,
                });
            }
            let content = strip_cr(line, strict).map_err(ResponseError::Head)?;
            if !content.is_empty() {
                *scanned = end;
                continue;
            }
            if *scanned == 0 {
                if strict {
                    return Err(ResponseError::Head(
                        "empty line before the status line".into(),
                    ));
                }
                self.pos += end;
                continue;
            }
            let head_bytes = input.get(..*scanned).unwrap_or_default();
            let head = parse_head(head_bytes, self.mode, self.head_request)?;
            self.pos += end;
            self.state = State::Head { scanned: 0 };
            if (100..200).contains(&head.status) {
                continue;
            }
            self.head_request = false;
            self.state = match head.framing {
                Framing::Empty | Framing::Length(0) => State::Ending,
                Framing::Length(n) => State::Length { remaining: n },
                Framing::Chunked => State::Chunked(ChunkReader::default()),
                Framing::UntilClose => State::UntilClose,
            };
            return Ok(Some(head));
        }
    }
}

fn truncated(what: &str) -> ResponseError {
    ResponseError::Truncated(format!("connection closed {what}"))
}

/// A line without its line ending (`line` excludes the LF). Strict: it must
/// end in CR and hold no other CR.
fn strip_cr(line: &[u8], strict: bool) -> Result<&[u8], String> {
    match line.strip_suffix(b"\r") {
        Some(content) if strict && content.contains(&b'\r') => Err("stray CR in a line".into()),
        Some(content) => Ok(content),
        None if strict => Err("line ends in a bare LF".into()),
        None => Ok(line),
    }
}

/// Splits complete lines (each ending in LF) and strips their endings.
fn lines(block: &[u8], strict: bool) -> Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    let mut rest = block;
    while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
        out.push(strip_cr(rest.get(..nl).unwrap_or_default(), strict)?);
        rest = rest.get(nl + 1..).unwrap_or_default();
    }
    Ok(out)
}

fn parse_head(block: &[u8], mode: Mode, head_request: bool) -> Result<ResponseHead, ResponseError> {
    let strict = mode == Mode::Strict;
    let lines = lines(block, strict).map_err(ResponseError::Head)?;
    let mut it = lines.into_iter();
    let first = it.next().unwrap_or_default();
    let (status, reason) = parse_status_line(first, strict).ok_or_else(|| {
        ResponseError::Head(format!(
            "bad status line {:?}",
            String::from_utf8_lossy(first)
        ))
    })?;
    if status == 101 {
        return Err(ResponseError::Framing(
            "101 Switching Protocols is not supported".into(),
        ));
    }
    let mut headers = Vec::new();
    for line in it {
        push_field(&mut headers, line, strict).map_err(ResponseError::Head)?;
    }
    let framing = framing(status, &headers, head_request, strict)?;
    Ok(ResponseHead {
        status,
        reason,
        headers,
        framing,
    })
}

fn parse_status_line(line: &[u8], strict: bool) -> Option<(u16, String)> {
    let (code, reason) = if strict {
        let rest = line.strip_prefix(b"HTTP/1.1 ")?;
        let (code, reason) = (rest.get(..3)?, rest.get(3..)?);
        let reason = reason.strip_prefix(b" ")?;
        if reason.iter().any(|&b| is_ctl(b)) {
            return None;
        }
        (code, reason)
    } else {
        let rest = line.strip_prefix(b"HTTP/1.")?;
        let rest = rest.get(1..)?.trim_ascii_start();
        let (code, reason) = (rest.get(..3)?, rest.get(3..)?);
        if reason.first().is_some_and(|b| !b.is_ascii_whitespace()) {
            return None;
        }
        (code, reason.trim_ascii())
    };
    if !code.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let status = std::str::from_utf8(code).ok()?.parse::<u16>().ok()?;
    let top = if strict { 599 } else { 999 };
    if !(100..=top).contains(&status) {
        return None;
    }
    Some((status, String::from_utf8_lossy(reason).into_owned()))
}

/// Adds one field line to `fields` (an obs-fold continues the last one,
/// lenient only).
fn push_field(fields: &mut Vec<(String, String)>, line: &[u8], strict: bool) -> Result<(), String> {
    let shown = || String::from_utf8_lossy(line).into_owned();
    if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
        if strict {
            return Err(format!("obs-fold in field line {:?}", shown()));
        }
        let Some((_, value)) = fields.last_mut() else {
            return Err(format!("continuation line first {:?}", shown()));
        };
        value.push(' ');
        value.push_str(&String::from_utf8_lossy(line.trim_ascii()));
        return Ok(());
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or_else(|| format!("field line without a colon {:?}", shown()))?;
    let (name, value) = (
        line.get(..colon).unwrap_or_default(),
        line.get(colon + 1..).unwrap_or_default(),
    );
    let name = if strict { name } else { name.trim_ascii() };
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(format!("bad field name in {:?}", shown()));
    }
    let value = trim_ows(value);
    if strict && value.iter().any(|&b| is_ctl(b)) {
        return Err(format!("control character in field {:?}", shown()));
    }
    fields.push((
        String::from_utf8_lossy(name).to_ascii_lowercase(),
        String::from_utf8_lossy(value).into_owned(),
    ));
    Ok(())
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// A control character other than HTAB (not allowed in values).
fn is_ctl(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// RFC 9112 §6.3, plus the strict rules of the module docs.
fn framing(
    status: u16,
    headers: &[(String, String)],
    head_request: bool,
    strict: bool,
) -> Result<Framing, ResponseError> {
    let bad = |d: String| Err(ResponseError::Framing(d));
    let codings: Vec<&str> = values(headers, "transfer-encoding")
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let lengths: Vec<&str> = values(headers, "content-length").collect();
    let informational_or_204 = (100..200).contains(&status) || status == 204;
    if strict && informational_or_204 && (!codings.is_empty() || !lengths.is_empty()) {
        return bad(format!("{status} with Content-Length or Transfer-Encoding"));
    }
    let length = content_length(&lengths, strict).map_err(ResponseError::Framing)?;
    if !codings.is_empty() {
        if !matches!(codings.as_slice(), [c] if c.eq_ignore_ascii_case("chunked")) {
            return bad(format!(
                "unsupported transfer-coding {:?}",
                codings.join(", ")
            ));
        }
        if strict && length.is_some() {
            return bad("both Content-Length and Transfer-Encoding".into());
        }
    }
    if head_request || informational_or_204 || status == 304 {
        return Ok(Framing::Empty);
    }
    if !codings.is_empty() {
        return Ok(Framing::Chunked);
    }
    match length {
        Some(n) => Ok(Framing::Length(n)),
        None if strict => bad(format!(
            "{status} response with neither Content-Length nor chunked"
        )),
        None => Ok(Framing::UntilClose),
    }
}

/// The values of every field named `name` (already lower-cased).
fn values<'a>(headers: &'a [(String, String)], name: &'a str) -> impl Iterator<Item = &'a str> {
    headers
        .iter()
        .filter(move |(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn content_length(values: &[&str], strict: bool) -> Result<Option<u64>, String> {
    if strict && values.len() > 1 {
        return Err("more than one Content-Length".into());
    }
    let mut found: Option<u64> = None;
    for v in values {
        let parts: Vec<&str> = if strict {
            vec![*v]
        } else {
            v.split(',').map(str::trim).collect()
        };
        for p in parts {
            let n = parse_decimal(p).ok_or_else(|| format!("bad Content-Length {v:?}"))?;
            if found.is_some_and(|f| f != n) {
                return Err("conflicting Content-Length values".into());
            }
            found = Some(n);
        }
    }
    Ok(found)
}

fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// What [`ChunkReader::step`] did with the start of its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkStep {
    /// Nothing complete yet.
    NeedMore,
    /// This many framing bytes were consumed.
    Skip(usize),
    /// The first this many bytes are payload (consume them).
    Data(usize),
    /// The last chunk and trailer section end after this many bytes.
    Done(usize),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailer,
    Done,
}

/// The chunked-body state machine shared by [`ResponseDecoder`] and
/// [`super::peer::ChunkedDecoder`].
#[derive(Debug, Clone, Default)]
pub(crate) struct ChunkReader {
    state: ChunkState,
    trailer_bytes: usize,
    pub(crate) trailers: Vec<(String, String)>,
}

impl ChunkReader {
    pub(crate) fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// One step over `input` (the unconsumed bytes).
    pub(crate) fn step(
        &mut self,
        input: &[u8],
        mode: Mode,
        max_trailer_bytes: usize,
    ) -> Result<ChunkStep, ResponseError> {
        let strict = mode == Mode::Strict;
        let bad = |d: String| ResponseError::Chunk(d);
        match self.state {
            ChunkState::Size => {
                let Some(nl) = input.iter().position(|&b| b == b'\n') else {
                    if input.len() > MAX_CHUNK_LINE + 1 {
                        return Err(bad("chunk-size line too long".into()));
                    }
                    return Ok(ChunkStep::NeedMore);
                };
                let line = strip_cr(input.get(..nl).unwrap_or_default(), strict).map_err(bad)?;
                if line.len() > MAX_CHUNK_LINE {
                    return Err(bad("chunk-size line too long".into()));
                }
                let size = parse_chunk_size(line, strict).ok_or_else(|| {
                    bad(format!(
                        "bad chunk-size line {:?}",
                        String::from_utf8_lossy(line)
                    ))
                })?;
                self.state = if size == 0 {
                    ChunkState::Trailer
                } else {
                    ChunkState::Data(size)
                };
                Ok(ChunkStep::Skip(nl + 1))
            }
            ChunkState::Data(left) => {
                if input.is_empty() {
                    return Ok(ChunkStep::NeedMore);
                }
                let take = usize::try_from(left).unwrap_or(usize::MAX).min(input.len());
                let left = left - take as u64;
                self.state = if left == 0 {
                    ChunkState::DataEnd
                } else {
                    ChunkState::Data(left)
                };
                Ok(ChunkStep::Data(take))
            }
            ChunkState::DataEnd => {
                let n = match input {
                    [b'\r', b'\n', ..] => 2,
                    [b'\n', ..] if !strict => 1,
                    [] | [b'\r'] => return Ok(ChunkStep::NeedMore),
                    _ => return Err(bad("chunk data not followed by CRLF".into())),
                };
                self.state = ChunkState::Size;
                Ok(ChunkStep::Skip(n))
            }
            ChunkState::Trailer => {
                let Some(nl) = input.iter().position(|&b| b == b'\n') else {
                    if self.trailer_bytes + input.len() > max_trailer_bytes {
                        return Err(ResponseError::HeadTooLarge {
                            limit: max_trailer_bytes,
                        });
                    }
                    return Ok(ChunkStep::NeedMore);
                };
                self.trailer_bytes += nl + 1;
                if self.trailer_bytes > max_trailer_bytes {
                    return Err(ResponseError::HeadTooLarge {
                        limit: max_trailer_bytes,
                    });
                }
                let line = strip_cr(input.get(..nl).unwrap_or_default(), strict).map_err(bad)?;
                if line.is_empty() {
                    self.state = ChunkState::Done;
                    return Ok(ChunkStep::Done(nl + 1));
                }
                push_field(&mut self.trailers, line, strict).map_err(bad)?;
                Ok(ChunkStep::Skip(nl + 1))
            }
            ChunkState::Done => Ok(ChunkStep::NeedMore),
        }
    }
}

/// `1*HEXDIG [ chunk-ext ]`; the size must fit in 64 bits.
fn parse_chunk_size(line: &[u8], strict: bool) -> Option<u64> {
    let line = if strict { line } else { line.trim_ascii() };
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let (hex, rest) = (line.get(..digits)?, line.get(digits..)?);
    if hex.is_empty() || hex.len() > 16 {
        return None;
    }
    let ext = trim_ows(rest);
    if !ext.is_empty() && (ext.first() != Some(&b';') || (strict && ext.iter().any(|&b| is_ctl(b))))
    {
        return None;
    }
    if strict && ext.is_empty() && !rest.is_empty() {
        return None;
    }
    hex.iter().try_fold(0u64, |acc, &b| {
        let d = char::from(b).to_digit(16)?;
        acc.checked_mul(16)?.checked_add(u64::from(d))
    })
}

#[cfg(test)]
#[path = "response_tests.rs"]
mod tests;
