//! A sans-IO decoder of `text/event-stream` bodies (the WHATWG "server-sent
//! events" interpretation rules), as the streaming provider APIs send them.
//!
//! Bytes go in as they arrive, split anywhere ([`SseDecoder::feed`]);
//! complete events come out ([`SseDecoder::poll`]). Lines end with CRLF,
//! LF or CR (a CR at the end of one chunk and an LF at the start of the next
//! are one line end); a line starting with `:` is a comment; `data` lines
//! of one event are joined with `\n`; `id` and `retry` are read and
//! ignored (a provider call is never resumed); a leading byte-order mark is
//! skipped. An event still open when the body ends is not dispatched (the
//! standard's rule), so a stream cut mid-event reads as one cut before it.
//!
//! Every buffer is bounded: a line longer than [`SseLimits::max_line`] or
//! an event whose data outgrows [`SseLimits::max_event`] is an error, never
//! an allocation the peer controls.

use std::fmt;

/// The decoder's bounds, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseLimits {
    /// Longest line (field name, colon and value, without its line end).
    pub max_line: usize,
    /// Most data one event may carry (its `data` lines joined).
    pub max_event: usize,
}

/// Longest SSE line a provider stream may send: 8 MiB.
pub const DEFAULT_MAX_LINE: usize = 8 * 1024 * 1024;
/// Most data one SSE event may carry: 16 MiB.
pub const DEFAULT_MAX_EVENT: usize = 16 * 1024 * 1024;

impl Default for SseLimits {
    fn default() -> Self {
        SseLimits {
            max_line: DEFAULT_MAX_LINE,
            max_event: DEFAULT_MAX_EVENT,
        }
    }
}

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event` field's value; empty when the event had none (the
    /// standard's default type is then `message`).
    pub event: String,
    /// The `data` lines, joined with `\n`.
    pub data: String,
}

/// Why a stream cannot be read on. `Display` is the text a failed attempt
/// logs as its `provider.response.error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// A line ran past [`SseLimits::max_line`] without ending.
    LineTooLong { limit: usize },
    /// An event's data ran past [`SseLimits::max_event`].
    EventTooLarge { limit: usize },
    /// A line is not UTF-8 (the event-stream MIME type is UTF-8 only).
    NotUtf8,
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::LineTooLong { limit } => {
                write!(f, "provider stream line longer than {limit} bytes")
            }
            SseError::EventTooLarge { limit } => {
                write!(f, "provider stream event larger than {limit} bytes")
            }
            SseError::NotUtf8 => f.write_str("provider stream is not valid UTF-8"),
        }
    }
}

impl std::error::Error for SseError {}

/// The incremental decoder. Feed it bytes, then poll until `Ok(None)`.
#[derive(Debug, Default)]
pub struct SseDecoder {
    limits: SseLimits,
    /// Bytes not yet read as lines; `start` is where the unread part begins.
    buf: Vec<u8>,
    start: usize,
    /// The previous line ended with CR: a first LF belongs to it.
    after_cr: bool,
    /// Whether the stream's first bytes were looked at for a BOM.
    begun: bool,
    /// The event being read.
    event: String,
    data: String,
    has_data: bool,
    /// Set once an error was returned: every later poll returns it again.
    failed: Option<SseError>,
    /// Events dispatched so far (comments and empty events not counted).
    events: u64,
}

impl SseDecoder {
    pub fn new(limits: SseLimits) -> Self {
        SseDecoder {
            limits,
            ..SseDecoder::default()
        }
    }

    /// Appends bytes of the body, as they arrived.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Events dispatched so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The next complete event, `Ok(None)` when more bytes are needed.
    pub fn poll(&mut self) -> Result<Option<SseEvent>, SseError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.poll_inner() {
            Err(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
            ok => ok,
        }
    }

    fn poll_inner(&mut self) -> Result<Option<SseEvent>, SseError> {
        if !self.begun {
            let rest = self.buf.get(self.start..).unwrap_or_default();
            if rest.len() < 3 && b"\xEF\xBB\xBF".starts_with(rest) {
                return Ok(None);
            }
            self.begun = true;
            if rest.starts_with(b"\xEF\xBB\xBF") {
                self.start += 3;
            }
        }
        loop {
            if self.after_cr {
                match self.buf.get(self.start) {
                    None => return Ok(None),
                    Some(b'\n') => self.start += 1,
                    Some(_) => {}
                }
                self.after_cr = false;
            }
            let rest = self.buf.get(self.start..).unwrap_or_default();
            let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') else {
                if rest.len() > self.limits.max_line {
                    return Err(SseError::LineTooLong {
                        limit: self.limits.max_line,
                    });
                }
                return Ok(None);
            };
            if end > self.limits.max_line {
                return Err(SseError::LineTooLong {
                    limit: self.limits.max_line,
                });
            }
            self.after_cr = rest.get(end) == Some(&b'\r');
            let line = std::str::from_utf8(rest.get(..end).unwrap_or_default())
                .map_err(|_| SseError::NotUtf8)?
                .to_owned();
            self.start += end + 1;
            if line.is_empty() {
                if let Some(ev) = self.dispatch() {
                    return Ok(Some(ev));
                }
                continue;
            }
            self.field(&line)?;
        }
    }

    /// A blank line: the event read so far, if it has data.
    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        self.events += 1;
        Some(SseEvent { event, data })
    }

    /// One non-blank line.
    fn field(&mut self, line: &str) -> Result<(), SseError> {
        if line.starts_with(':') {
            return Ok(());
        }
        let (name, value) = match line.split_once(':') {
            Some((n, v)) => (n, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match name {
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            "data" => {
                if self.data.len() + value.len() + 1 > self.limits.max_event {
                    return Err(SseError::EventTooLarge {
                        limit: self.limits.max_event,
                    });
                }
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            // `id` (a resumable stream's cursor) and `retry` (a reconnect
            // delay) mean nothing to a call that is never resumed; other
            // names are ignored by the standard.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(dec: &mut SseDecoder) -> Vec<SseEvent> {
        let mut out = Vec::new();
        while let Some(ev) = dec.poll().unwrap() {
            out.push(ev);
        }
        out
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    const SAMPLE: &str = "\u{feff}: comment\r\nevent: a\r\ndata: one\r\ndata:two\r\n\r\nid: 7\nretry: 10\ndata\n\nevent: b\rdata:  three \r\r:only a comment\n\nevent: lost\n\ndata: {\"x\":\"é\"}\n\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            ev("a", "one\ntwo"),
            ev("", ""),
            ev("b", " three "),
            ev("", "{\"x\":\"é\"}"),
        ]
    }

    #[test]
    fn line_ends_comments_fields_and_multi_line_data() {
        let mut dec = SseDecoder::new(SseLimits::default());
        dec.feed(SAMPLE.as_bytes());
        assert_eq!(all(&mut dec), expected());
        assert_eq!(dec.events(), 4);
    }

    #[test]
    fn any_split_gives_the_same_events() {
        let bytes = SAMPLE.as_bytes();
        for a in 0..=bytes.len() {
            for b in a..=bytes.len() {
                let mut dec = SseDecoder::new(SseLimits::default());
                let mut got = Vec::new();
                for part in [&bytes[..a], &bytes[a..b], &bytes[b..]] {
                    dec.feed(part);
                    got.extend(all(&mut dec));
                }
                assert_eq!(got, expected(), "split at {a}, {b}");
            }
        }
    }

    #[test]
    fn an_event_without_its_blank_line_is_not_dispatched() {
        let mut dec = SseDecoder::new(SseLimits::default());
        dec.feed(b"data: cut");
        assert_eq!(all(&mut dec), vec![]);
        dec.feed(b"\n");
        assert_eq!(all(&mut dec), vec![]);
    }

    #[test]
    fn limits_fail_with_a_clear_error_and_stay_failed() {
        let limits = SseLimits {
            max_line: 8,
            max_event: 12,
        };
        let mut dec = SseDecoder::new(limits);
        dec.feed(b"data: 123");
        let err = dec.poll().unwrap_err();
        assert_eq!(err, SseError::LineTooLong { limit: 8 });
        assert_eq!(err.to_string(), "provider stream line longer than 8 bytes");
        assert_eq!(dec.poll().unwrap_err(), err);

        let mut dec = SseDecoder::new(limits);
        dec.feed(b"data:123\ndata:123\ndata:123\ndata:123\n");
        let err = dec.poll().unwrap_err();
        assert_eq!(
            err.to_string(),
            "provider stream event larger than 12 bytes"
        );

        // A complete but over-long line is refused as well.
        let mut dec = SseDecoder::new(limits);
        dec.feed(b"data: 12345678\n\n");
        assert!(dec.poll().is_err());

        let mut dec = SseDecoder::new(limits);
        dec.feed(b"data:\xff\n\n");
        assert_eq!(dec.poll().unwrap_err(), SseError::NotUtf8);
    }

    #[test]
    fn the_buffer_is_reused_as_lines_are_read() {
        let mut dec = SseDecoder::new(SseLimits::default());
        for i in 0..10_000 {
            dec.feed(format!("data: {i}\n\n").as_bytes());
            assert_eq!(dec.poll().unwrap().unwrap().data, i.to_string());
        }
        assert!(dec.buf.len() < 64, "{}", dec.buf.len());
    }
}
