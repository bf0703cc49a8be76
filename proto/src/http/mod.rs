//! HTTP/1.1 server codec.
//!
//! Sans-IO: [`RequestDecoder`] turns bytes (fed in any split) into
//! [`Decoded`] items or a [`Rejection`]; the `encode_*` functions turn
//! responses into bytes. Nothing here reads a socket, a clock or randomness.
//!
//! Head syntax is checked by `httparse`; framing (Content-Length, chunked
//! bodies, trailers), limits and the smuggling-relevant rules are enforced
//! here. Every malformed or oversized input becomes a [`Rejection`] value —
//! the decoder never panics on input — and after a rejection the caller
//! answers with the rejection's status (see [`encode_rejection`]) and closes
//! the connection. See `docs/http-codec.md` for the full rejection table.

mod decoder;
mod encoder;
mod request;

pub mod peer;
pub mod response;

pub use decoder::RequestDecoder;
pub use encoder::{
    encode_chunk, encode_chunk_head, encode_rejection, encode_response, encode_response_head,
    encode_stream_head, encode_stream_head_with, reason_phrase,
};
pub use request::{Headers, Method, Request};

/// Size and count limits enforced by [`RequestDecoder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head (request line + header fields + final CRLF,
    /// including any empty lines skipped before the request line). Also the
    /// budget for a chunked body's trailer section. Over it: `431`.
    pub max_head_bytes: usize,
    /// Most header fields in one head. Over it: `431`.
    pub max_headers: usize,
    /// Largest request body (Content-Length, or the sum of chunk sizes).
    /// Over it: `413`, reported as soon as the size is known.
    pub max_body_bytes: usize,
    /// Longest NDJSON line the engine accepts in a request body. Not
    /// enforced by the decoder (bodies are framed, not line-split); carried
    /// here so all wire limits live in one place.
    pub max_line_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: 16 * 1024,
            max_headers: 64,
            max_body_bytes: 1024 * 1024,
            max_line_bytes: 1024 * 1024,
        }
    }
}

/// One item out of [`RequestDecoder::poll`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A complete request, body included.
    Request(Request),
    /// The head carried `Expect: 100-continue` (HTTP/1.1) and the non-empty
    /// body is not complete yet: the caller should write [`CONTINUE_100`]
    /// once. Yielded at most once per request, always before its
    /// [`Decoded::Request`]. Whether it appears depends on how much of the
    /// body had arrived when the head was decoded; it is the only
    /// split-dependent output of the decoder.
    ContinueExpected,
}

/// A request the server refuses. The caller answers `status` (e.g. with
/// [`encode_rejection`]) and closes the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rejection {
    /// 400, 413, 431, 501 or 505.
    pub status: u16,
    /// Short human-readable cause; becomes the problem `detail`.
    pub reason: &'static str,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status,
            reason_phrase(self.status),
            self.reason
        )
    }
}

impl std::error::Error for Rejection {}

/// The interim response for `Expect: 100-continue`.
pub const CONTINUE_100: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The terminating chunk of a chunked response (no trailers).
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";
