//! A small blocking HTTP/2 client (RFC 9113) with its HPACK codec
//! (RFC 7541): just what unary gRPC calls from the exporter thread need.
//! One request stream at a time, every read and write bounded by the call's
//! deadline, every buffer bounded, no panics on what the peer sends. It
//! replaced tonic, tokio, hyper and h2 to keep the binary small.
//!
//! Layers: [`frame`] (bytes ↔ frames), [`hpack`] (header blocks ↔ fields),
//! [`conn`] (the connection state machine over any [`conn::Io`]),
//! [`net`] (TCP and TLS sockets), [`grpc`] (the unary call).

pub mod conn;
pub mod frame;
pub mod grpc;
pub mod hpack;
mod huffman;
pub mod net;

pub use grpc::Client;

use std::fmt;

/// An HTTP/2 error code (RFC 9113 §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reason(pub u32);

impl Reason {
    pub const NO_ERROR: Reason = Reason(0x0);
    pub const PROTOCOL_ERROR: Reason = Reason(0x1);
    pub const INTERNAL_ERROR: Reason = Reason(0x2);
    pub const FLOW_CONTROL_ERROR: Reason = Reason(0x3);
    pub const FRAME_SIZE_ERROR: Reason = Reason(0x6);
    pub const REFUSED_STREAM: Reason = Reason(0x7);
    pub const CANCEL: Reason = Reason(0x8);
    pub const COMPRESSION_ERROR: Reason = Reason(0x9);
    pub const ENHANCE_YOUR_CALM: Reason = Reason(0xb);
    pub const INADEQUATE_SECURITY: Reason = Reason(0xc);

    fn name(self) -> Option<&'static str> {
        const NAMES: [&str; 14] = [
            "NO_ERROR",
            "PROTOCOL_ERROR",
            "INTERNAL_ERROR",
            "FLOW_CONTROL_ERROR",
            "SETTINGS_TIMEOUT",
            "STREAM_CLOSED",
            "FRAME_SIZE_ERROR",
            "REFUSED_STREAM",
            "CANCEL",
            "COMPRESSION_ERROR",
            "CONNECT_ERROR",
            "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY",
            "HTTP_1_1_REQUIRED",
        ];
        NAMES.get(self.0 as usize).copied()
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "error code 0x{:x}", self.0),
        }
    }
}

/// Why a request failed. No variant carries header values or peer bytes
/// beyond error codes, so any of them may be logged.
#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    /// The call's deadline passed.
    Timeout,
    /// Resolving, connecting, TLS or socket I/O failed.
    Transport(String),
    /// The peer closed the connection.
    Closed,
    /// The peer broke the protocol (we answer with GOAWAY and this code).
    Protocol(Reason, &'static str),
    /// The peer is closing the connection; `unprocessed`: our stream was
    /// beyond its last stream id, so it never acted on the request.
    GoAway { reason: Reason, unprocessed: bool },
    /// The peer reset our stream.
    Reset(Reason),
    /// A response went past one of our bounds.
    TooLarge(&'static str),
}

impl Error {
    /// The peer guarantees it did not act on the request (RFC 9113 §6.8,
    /// §8.7): trying again on a new connection is safe.
    pub fn unprocessed(&self) -> bool {
        matches!(
            self,
            Error::GoAway {
                unprocessed: true,
                ..
            } | Error::Reset(Reason::REFUSED_STREAM)
        )
    }
}
