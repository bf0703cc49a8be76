//! Response encoding.
//!
//! All responses are HTTP/1.1. Header names and values supplied by the
//! caller are written as given, except that CR, LF and NUL bytes are dropped
//! so a value can never end the header line early (response splitting).

use super::Rejection;

/// The reason phrase for `status` (also the RFC 7807 `title`). Unknown
/// codes get a generic phrase for their class.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Payload Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        422 => "Unprocessable Entity",
        426 => "Upgrade Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => class_phrase(status),
    }
}

fn class_phrase(status: u16) -> &'static str {
    match status {
        100..=199 => "Informational",
        200..=299 => "Success",
        300..=399 => "Redirection",
        400..=499 => "Client Error",
        500..=599 => "Server Error",
        _ => "Unknown",
    }
}

/// Statuses whose responses never carry a body or a Content-Length
/// (RFC 9110 §8.6, §15.4.5).
fn is_bodyless(status: u16) -> bool {
    (100..200).contains(&status) || status == 204 || status == 304
}

/// A fixed-length response: status line, `Content-Type` (when given), the
/// `extra` headers in order, `Content-Length` (also for an empty body) and
/// `Connection: close` when `close`. For 1xx, 204 and 304 no
/// `Content-Length` and no body are written (they cannot have one).
pub fn encode_response(
    status: u16,
    content_type: Option<&str>,
    extra: &[(&str, &str)],
    body: &[u8],
    close: bool,
) -> Vec<u8> {
    let mut out = head_of(status, content_type, extra, body.len(), close, body.len());
    if !is_bodyless(status) {
        out.extend_from_slice(body);
    }
    out
}

/// The head [`encode_response`] writes for a body of `body_len` bytes, for
/// a body sent as a separate write (no copy of a large body).
pub fn encode_response_head(
    status: u16,
    content_type: Option<&str>,
    extra: &[(&str, &str)],
    body_len: usize,
    close: bool,
) -> Vec<u8> {
    head_of(status, content_type, extra, body_len, close, 0)
}

fn head_of(
    status: u16,
    content_type: Option<&str>,
    extra: &[(&str, &str)],
    body_len: usize,
    close: bool,
    reserve: usize,
) -> Vec<u8> {
    let extra_len: usize = extra.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
    let mut out = Vec::with_capacity(96 + extra_len + reserve);
    push_status_line(&mut out, status);
    if let Some(ct) = content_type {
        push_header(&mut out, "Content-Type", ct);
    }
    for (name, value) in extra {
        push_header(&mut out, name, value);
    }
    if !is_bodyless(status) {
        out.extend_from_slice(b"Content-Length: ");
        push_decimal(&mut out, body_len);
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The head of a streamed response with `Transfer-Encoding: chunked`.
/// Follow it with [`encode_chunk`]s and [`LAST_CHUNK`](super::LAST_CHUNK).
pub fn encode_stream_head(status: u16, content_type: &str, close: bool) -> Vec<u8> {
    encode_stream_head_with(status, content_type, &[], close)
}

/// [`encode_stream_head`] with `extra` headers after `Content-Type`.
pub fn encode_stream_head_with(
    status: u16,
    content_type: &str,
    extra: &[(&str, &str)],
    close: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    push_status_line(&mut out, status);
    push_header(&mut out, "Content-Type", content_type);
    for (name, value) in extra {
        push_header(&mut out, name, value);
    }
    out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The size line of a chunk of `len` bytes (`<hex>\r\n`), for a chunk
/// whose data follows in several writes; the caller ends it with `\r\n`.
pub fn encode_chunk_head(len: usize, out: &mut Vec<u8>) {
    push_hex(out, len);
    out.extend_from_slice(b"\r\n");
}

/// Appends one chunk (`hex-size CRLF data CRLF`) to `out`. Empty `data`
/// writes nothing: an empty chunk would end the body.
pub fn encode_chunk(data: &[u8], out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    out.reserve(data.len() + 20);
    push_hex(out, data.len());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The response for a decoder [`Rejection`]: an RFC 7807 body
/// `{"type","title","status","detail"}` (`application/json`) with
/// `Connection: close`.
pub fn encode_rejection(r: &Rejection) -> Vec<u8> {
    let body = serde_json::json!({
        "type": problem_slug(r.status),
        "title": reason_phrase(r.status),
        "status": r.status,
        "detail": r.reason,
    })
    .to_string();
    encode_response(
        r.status,
        Some("application/json"),
        &[],
        body.as_bytes(),
        true,
    )
}

/// The problem `type` slug for a status, matching the server's catalogue
/// for the statuses the HTTP layer produces.
fn problem_slug(status: u16) -> String {
    let known = match status {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "request_timeout",
        411 => "length_required",
        413 => "payload_too_large",
        431 => "request_header_fields_too_large",
        500 => "internal",
        501 => "not_implemented",
        505 => "http_version_not_supported",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_owned();
    }
    reason_phrase(status)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

fn push_status_line(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, usize::from(status));
    out.push(b' ');
    out.extend_from_slice(reason_phrase(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn push_header(out: &mut Vec<u8>, name: &str, value: &str) {
    push_sanitized(out, name);
    out.extend_from_slice(b": ");
    push_sanitized(out, value);
    out.extend_from_slice(b"\r\n");
}

fn push_sanitized(out: &mut Vec<u8>, s: &str) {
    if s.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
        out.extend(s.bytes().filter(|b| !matches!(b, b'\r' | b'\n' | 0)));
    } else {
        out.extend_from_slice(s.as_bytes());
    }
}

// `i` stays in bounds: a usize has at most 20 decimal digits.
#[allow(clippy::indexing_slicing)]
fn push_decimal(out: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

// `i` stays in bounds (at most 16 hex digits) and `n & 0xf < 16`.
#[allow(clippy::indexing_slicing)]
fn push_hex(out: &mut Vec<u8>, mut n: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}
