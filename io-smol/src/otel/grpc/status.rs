//! What a call's outcome means in gRPC terms: the status of a response
//! (`grpc-status`/`grpc-message` in the trailers or in a trailers-only
//! response, gRPC's mapping of HTTP statuses), the single length-prefixed
//! response message, and the log text of a failure. No text here carries
//! a header value, so any of it may be logged.

use std::time::Duration;

use h2::Reason;
use http::HeaderMap;

/// gRPC status code names (the codes are their indices).
pub const CODES: [&str; 17] = [
    "Ok",
    "Cancelled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];
const UNKNOWN: usize = 2;
const RESOURCE_EXHAUSTED: usize = 8;
const INTERNAL: usize = 13;
const UNAVAILABLE: usize = 14;

/// Largest response message accepted (gRPC's customary default).
pub const MAX_MESSAGE: usize = 4 * 1024 * 1024;

/// Why a call failed. Built from socket and `h2` errors; no variant
/// carries header values or peer bytes beyond error codes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The call's deadline passed.
    Timeout,
    /// Resolving, connecting, TLS or socket I/O failed.
    Transport(String),
    /// The peer closed the connection.
    Closed,
    /// The peer broke the protocol, as `h2` found (it answered with
    /// GOAWAY or RST_STREAM and this code).
    Protocol(Reason, String),
    /// The peer is closing the connection; `unprocessed`: it guarantees
    /// it never acted on our request.
    GoAway { reason: Reason, unprocessed: bool },
    /// The peer reset our stream.
    Reset(Reason),
    /// A response went past one of our bounds.
    TooLarge(&'static str),
    /// A misuse `h2` refused (a bug of ours, not the collector's).
    Internal(String),
}

impl Error {
    /// The peer did not act on the request (RFC 9113 §6.8, §8.7): trying
    /// again on a new connection is safe. A GOAWAY with an error code is
    /// not counted: `h2` reports it to every open stream, also those the
    /// peer may have processed.
    pub fn unprocessed(&self) -> bool {
        matches!(
            self,
            Error::GoAway {
                unprocessed: true,
                ..
            } | Error::Reset(Reason::REFUSED_STREAM)
        )
    }

    /// An `h2` error of a request that was sent (or being sent).
    pub fn from_h2(e: h2::Error) -> Error {
        if let Some(io) = e.get_io() {
            return Error::io(io);
        }
        let Some(reason) = e.reason() else {
            return Error::Internal(e.to_string());
        };
        if e.is_remote() && e.is_go_away() {
            // h2 gives a stream this error when it is beyond the GOAWAY's
            // last stream id, or when the connection ends on an error
            // GOAWAY (then the stream may have been processed).
            let unprocessed = reason == Reason::NO_ERROR;
            Error::GoAway {
                reason,
                unprocessed,
            }
        } else if e.is_remote() && e.is_reset() {
            Error::Reset(reason)
        } else {
            Error::Protocol(reason, detected(reason))
        }
    }

    /// Socket errors as text; a TLS failure names itself, a close is
    /// [`Error::Closed`].
    pub fn io(e: &std::io::Error) -> Error {
        use std::io::ErrorKind::*;
        let tls = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        match (tls, e.kind()) {
            (Some(t), _) => Error::Transport(format!("TLS: {t}")),
            (None, TimedOut | WouldBlock) => Error::Timeout,
            (None, BrokenPipe | UnexpectedEof | ConnectionReset | ConnectionAborted) => {
                Error::Closed
            }
            (None, _) => Error::Transport(format!("transport: {e}")),
        }
    }
}

/// What `h2` found wrong with the peer's bytes, by the code it answered
/// with. Its only FRAME_SIZE_ERROR of its own is a frame over our
/// SETTINGS_MAX_FRAME_SIZE; an HTTP/1.x answer is one (its status line
/// read as a frame header announces megabytes).
fn detected(reason: Reason) -> String {
    match reason {
        Reason::FRAME_SIZE_ERROR => "frame longer than our SETTINGS_MAX_FRAME_SIZE".into(),
        other => other.to_string(),
    }
}

/// An HTTP/2 error code by its RFC 9113 name.
pub fn reason_name(reason: Reason) -> String {
    match u32::from(reason) {
        // h2's Debug spells the codes it knows by their names.
        0..=13 => format!("{reason:?}"),
        code => format!("error code 0x{code:x}"),
    }
}

/// A response: final status and headers, body bytes, trailers.
#[derive(Debug, Default)]
pub struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub trailers: HeaderMap,
}

/// The call's result from its response: the message, or `(code,
/// message)` on failure.
pub fn outcome(r: Response) -> Result<Vec<u8>, (usize, String)> {
    // Trailers, or the headers of a trailers-only response.
    let status_fields = if r.trailers.is_empty() {
        &r.headers
    } else {
        &r.trailers
    };
    let Some(status) = status_fields.get("grpc-status") else {
        if r.status != 200 {
            return Err(from_http(r.status));
        }
        return Err((UNKNOWN, "response without grpc-status".into()));
    };
    let code = std::str::from_utf8(status.as_bytes())
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|&c| c < CODES.len());
    let Some(code) = code else {
        return Err((UNKNOWN, "invalid grpc-status".into()));
    };
    if code != 0 {
        let msg = status_fields
            .get("grpc-message")
            .map(|v| grpc_message(v.as_bytes()))
            .unwrap_or_default();
        return Err((code, msg));
    }
    if r.status != 200 {
        return Err(from_http(r.status));
    }
    // Exactly one uncompressed message (none was asked to be compressed).
    let Some((head, rest)) = r.body.split_first_chunk::<5>() else {
        return Err((INTERNAL, "missing response message".into()));
    };
    if head[0] != 0 {
        return Err((INTERNAL, "compressed response message".into()));
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_MESSAGE {
        return Err((
            RESOURCE_EXHAUSTED,
            "response message larger than 4 MiB".into(),
        ));
    }
    if rest.len() != len {
        return Err((INTERNAL, "malformed response message".into()));
    }
    Ok(rest.to_vec())
}

/// gRPC's mapping of an HTTP status without `grpc-status`.
fn from_http(status: u16) -> (usize, String) {
    let code = match status {
        400 => INTERNAL,
        401 => 16,
        403 => 7,
        404 => 12,
        429 | 502 | 503 | 504 => UNAVAILABLE,
        _ => UNKNOWN,
    };
    (code, format!("HTTP status {status}"))
}

/// `grpc-message` is percent-encoded UTF-8; bad escapes stay as they are.
/// Control characters become spaces so a collector cannot forge log lines.
pub fn grpc_message(v: &[u8]) -> String {
    percent_encoding::percent_decode(v)
        .decode_utf8_lossy()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The log text of a failed call (`gRPC <Code>: <message>`, or `no answer
/// within N ms`).
pub fn describe(e: &Error, timeout: Duration) -> String {
    let unavailable = CODES[UNAVAILABLE];
    match e {
        Error::Timeout => format!("no answer within {} ms", timeout.as_millis()),
        Error::Transport(what) => format!("gRPC {unavailable}: {what}"),
        Error::Closed => format!("gRPC {unavailable}: connection closed by the collector"),
        Error::Protocol(reason, what) => {
            format!("gRPC Internal: HTTP/2 {}: {what}", reason_name(*reason))
        }
        Error::GoAway { reason, .. } => format!(
            "gRPC {unavailable}: the collector closed the connection (GOAWAY {})",
            reason_name(*reason)
        ),
        Error::Reset(reason) => {
            // gRPC's mapping of HTTP/2 error codes.
            let code = match *reason {
                Reason::REFUSED_STREAM => UNAVAILABLE,
                Reason::CANCEL => 1,
                Reason::ENHANCE_YOUR_CALM => RESOURCE_EXHAUSTED,
                Reason::INADEQUATE_SECURITY => 7,
                _ => INTERNAL,
            };
            format!(
                "gRPC {}: stream reset by the collector ({})",
                CODES[code],
                reason_name(*reason)
            )
        }
        Error::TooLarge(what) => format!("gRPC ResourceExhausted: {what} over our limit"),
        Error::Internal(what) => format!("gRPC Internal: {what}"),
    }
}
