//! Streamed provider replies (`"stream": true`): the request members that
//! ask for one, and an incremental [`Assembler`] that turns the event
//! stream, fed in any chunks, into exactly the [`ProviderResponse`] the
//! same reply would have given unstreamed, plus the text fragments
//! (deltas) as they arrive.
//!
//! The assembled body is the object the stream describes (Anthropic: the
//! `message_start` message with its content blocks, stop reason and usage
//! filled in; OpenAI: the first chunk as a `chat.completion` with every
//! choice's deltas merged into its `message`, by the official SDKs'
//! rules), serialised once and read by [`super::parse_response`], the
//! unstreamed path's own parser: usage, truncation, content and every
//! error text are the unstreamed path's by construction.
//!
//! A 2xx body that is a plain JSON object rather than an event stream (a
//! server that ignores `stream`) is read whole, as if unstreamed.

mod anthropic;
pub mod encode;
mod openai;

use std::fmt;

use super::sse::{SseDecoder, SseError, SseEvent, SseLimits};
use super::{parse_response, Kind, ParseError, ProviderResponse};

/// Largest streamed reply read: 64 MiB, as for an unstreamed body.
pub const DEFAULT_MAX_STREAM_BYTES: usize = 64 * 1024 * 1024;

/// The assembler's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    pub sse: SseLimits,
    /// Body bytes of one reply, events and whitespace included.
    pub max_bytes: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            sse: SseLimits::default(),
            max_bytes: DEFAULT_MAX_STREAM_BYTES,
        }
    }
}

/// Appends the members that ask for a streamed reply to a request body
/// built by [`super::prepare_request`] (a JSON object): `"stream":true`,
/// and for OpenAI `"stream_options":{"include_usage":true}` so that the
/// last chunk carries the usage an unstreamed reply has.
pub fn with_stream(kind: Kind, body: &mut Vec<u8>) {
    if body.last() != Some(&b'}') {
        return;
    }
    body.pop();
    body.extend_from_slice(b",\"stream\":true");
    if kind == Kind::Openai {
        body.extend_from_slice(b",\"stream_options\":{\"include_usage\":true}");
    }
    body.push(b'}');
}

/// What a text fragment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeltaKind {
    /// Assistant text.
    Text,
    /// A piece of a tool call's input, as JSON text.
    InputJson,
    /// Extended thinking (Anthropic `thinking` blocks).
    Thinking,
}

impl DeltaKind {
    /// The wire name (docs/extensions.md, `turn.deltas`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeltaKind::Text => "text",
            DeltaKind::InputJson => "input_json",
            DeltaKind::Thinking => "thinking",
        }
    }
}

/// A piece of text of content block `index`, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    /// The block's position in the final content (Anthropic: the event's
    /// `index`; OpenAI: 0 for the text, a tool call's position after it).
    pub index: usize,
    pub kind: DeltaKind,
    pub text: String,
}

/// Why a stream is unusable. `Display` is the `provider.response.error`
/// text of the failed attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamError {
    /// The event stream itself (a line or an event over its limit, bytes
    /// that are not UTF-8).
    Sse(SseError),
    /// The reply outgrew [`StreamLimits::max_bytes`].
    TooLarge { limit: usize },
    /// An event that is not what its type says (not JSON, out of order…).
    Malformed(String),
    /// The provider reported an error in the stream (Anthropic `error`
    /// event, an OpenAI-compatible chunk with `error`); `body` is the
    /// event's data as sent.
    Provider { message: String, body: String },
    /// The body ended before the stream's last event (`message_stop`,
    /// `[DONE]`).
    Cut(&'static str),
    /// The assembled reply is unusable, as its unstreamed body would be.
    Parse(ParseError),
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::Sse(e) => e.fmt(f),
            StreamError::TooLarge { limit } => {
                write!(f, "provider stream larger than {limit} bytes")
            }
            StreamError::Malformed(why) => write!(f, "provider stream event is not valid: {why}"),
            StreamError::Provider { message, .. } => write!(f, "provider stream error: {message}"),
            StreamError::Cut(last) => write!(f, "provider stream ended before {last}"),
            StreamError::Parse(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for StreamError {}

impl StreamError {
    /// What the failed attempt logs as `provider.response.body`: the error
    /// event's data (as a JSON string, like an HTTP error body), else none.
    pub fn body(&self) -> Option<&str> {
        match self {
            StreamError::Provider { body, .. } => Some(body),
            _ => None,
        }
    }
}

/// Reads one streamed reply.
#[derive(Debug)]
pub struct Assembler {
    kind: Kind,
    limits: StreamLimits,
    /// Body bytes fed so far.
    total: usize,
    mode: Mode,
}

#[derive(Debug)]
enum Mode {
    /// Only whitespace so far: an event stream or a JSON body?
    Sniffing(Vec<u8>),
    Events(Box<(SseDecoder, Reader)>),
    /// A plain JSON body, read whole.
    Whole(Vec<u8>),
}

#[derive(Debug)]
enum Reader {
    Anthropic(anthropic::Reader),
    Openai(openai::Reader),
}

impl Assembler {
    pub fn new(kind: Kind, limits: StreamLimits) -> Self {
        Assembler {
            kind,
            limits,
            total: 0,
            mode: Mode::Sniffing(Vec::new()),
        }
    }

    /// Feeds body bytes as they arrived; the text they complete goes to
    /// `out` (adjacent pieces of one block joined). `Ok(true)` when they
    /// carried progress: an event other than a ping (or JSON body bytes),
    /// which is what the idle timeout watches.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<Fragment>) -> Result<bool, StreamError> {
        self.total = self.total.saturating_add(bytes.len());
        if self.total > self.limits.max_bytes {
            return Err(StreamError::TooLarge {
                limit: self.limits.max_bytes,
            });
        }
        if let Mode::Sniffing(seen) = &mut self.mode {
            seen.extend_from_slice(bytes);
            let Some(first) = seen.iter().copied().find(|b| !b.is_ascii_whitespace()) else {
                return Ok(false);
            };
            let seen = std::mem::take(seen);
            self.mode = if first == b'{' {
                Mode::Whole(Vec::new())
            } else {
                let reader = match self.kind {
                    Kind::Anthropic => Reader::Anthropic(anthropic::Reader::default()),
                    Kind::Openai => Reader::Openai(openai::Reader::default()),
                };
                Mode::Events(Box::new((SseDecoder::new(self.limits.sse), reader)))
            };
            return self.feed_mode(&seen, out);
        }
        self.feed_mode(bytes, out)
    }

    fn feed_mode(&mut self, bytes: &[u8], out: &mut Vec<Fragment>) -> Result<bool, StreamError> {
        match &mut self.mode {
            Mode::Sniffing(_) => Ok(false),
            Mode::Whole(body) => {
                body.extend_from_slice(bytes);
                Ok(!bytes.is_empty())
            }
            Mode::Events(events) => {
                let (sse, reader) = &mut **events;
                sse.feed(bytes);
                let mut progress = false;
                while let Some(ev) = sse.poll().map_err(StreamError::Sse)? {
                    progress |= reader.event(&ev, out)?;
                }
                Ok(progress)
            }
        }
    }

    /// Whether the stream's last event (`message_stop`, `[DONE]`) arrived:
    /// the reply is whole even if the body has not ended yet.
    pub fn is_complete(&self) -> bool {
        match &self.mode {
            Mode::Events(events) => match &events.1 {
                Reader::Anthropic(r) => r.is_complete(),
                Reader::Openai(r) => r.is_complete(),
            },
            Mode::Sniffing(_) | Mode::Whole(_) => false,
        }
    }

    /// Body bytes fed so far.
    pub fn bytes(&self) -> usize {
        self.total
    }

    /// The body ended: the reply, or why it is unusable.
    pub fn finish(self) -> Result<ProviderResponse, StreamError> {
        let body = match self.mode {
            Mode::Sniffing(seen) | Mode::Whole(seen) => seen,
            Mode::Events(events) => match events.1 {
                Reader::Anthropic(r) => r.finish()?.into_bytes(),
                Reader::Openai(r) => r.finish()?.into_bytes(),
            },
        };
        parse_response(self.kind, &body).map_err(StreamError::Parse)
    }
}

impl Reader {
    fn event(&mut self, ev: &SseEvent, out: &mut Vec<Fragment>) -> Result<bool, StreamError> {
        match self {
            Reader::Anthropic(r) => r.event(ev, out),
            Reader::Openai(r) => r.event(ev, out),
        }
    }
}

/// Appends a fragment, joined to the last one when it continues the same
/// block (one delta per block per chunk, not one per event).
fn push_fragment(out: &mut Vec<Fragment>, index: usize, kind: DeltaKind, text: &str) {
    if text.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(last) if last.index == index && last.kind == kind => last.text.push_str(text),
        _ => out.push(Fragment {
            index,
            kind,
            text: text.to_string(),
        }),
    }
}

/// An event's data as a JSON object.
fn data_object(ev: &SseEvent) -> Result<serde_json::Map<String, serde_json::Value>, StreamError> {
    match serde_json::from_str(&ev.data) {
        Ok(serde_json::Value::Object(o)) => Ok(o),
        Ok(_) => Err(StreamError::Malformed(
            "data is not a JSON object".to_string(),
        )),
        Err(e) => Err(StreamError::Malformed(format!("data is not JSON: {e}"))),
    }
}

#[cfg(test)]
mod tests;
