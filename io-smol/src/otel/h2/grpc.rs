//! Unary gRPC over the HTTP/2 connection (the gRPC "PROTOCOL-HTTP2"
//! mapping): one length-prefixed, uncompressed message each way, the
//! status from `grpc-status`/`grpc-message` in the trailers or in a
//! trailers-only response. The connection is kept across calls; any error
//! drops it and the next call connects afresh.

use std::time::{Duration, Instant};

use rustls::RootCertStore;

use super::conn::{Conn, Response};
use super::hpack::{encode_field, Field};
use super::net::{self, Dialer, Endpoint};
use super::{Error, Reason};

pub const TRACES: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
pub const METRICS: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// Largest response message accepted (gRPC's customary default).
const MAX_MESSAGE: usize = 4 * 1024 * 1024;

const USER_AGENT: &str = concat!("baesrv/", env!("CARGO_PKG_VERSION"));

/// Header names the client sets itself; user metadata of these names is
/// dropped, as tonic did.
const RESERVED: &[&str] = &[
    "te",
    "content-type",
    "grpc-message",
    "grpc-message-type",
    "grpc-status",
    "grpc-timeout",
    "user-agent",
];

/// Connection-specific headers HTTP/2 forbids (RFC 9113 §8.2.2): every
/// request carrying one would fail, so they are refused at startup.
const FORBIDDEN: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// gRPC status code names (the codes are their indices).
const CODES: [&str; 17] = [
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
const INTERNAL: usize = 13;
const UNAVAILABLE: usize = 14;

pub struct Client {
    dialer: Dialer,
    /// Static request headers: user metadata, user-agent.
    extra: Vec<u8>,
    conn: Option<Conn<net::Stream>>,
}

impl Client {
    /// A client for `endpoint` (TLS against the webpki roots for
    /// `https://`). Nothing is connected yet; errors are configuration
    /// errors and never contain header values.
    pub fn new(endpoint: &str, metadata: &[(String, String)]) -> Result<Client, String> {
        Client::with_roots(endpoint, metadata, net::webpki_roots())
    }

    /// As [`Client::new`], trusting `roots` for `https://` endpoints.
    pub fn with_roots(
        endpoint: &str,
        metadata: &[(String, String)],
        roots: RootCertStore,
    ) -> Result<Client, String> {
        let endpoint = Endpoint::parse(endpoint).map_err(|e| format!("otlp_endpoint: {e}"))?;
        let tls = match endpoint.tls {
            true => Some(net::tls_config(roots).map_err(|e| format!("TLS: {e}"))?),
            false => None,
        };
        Ok(Client {
            dialer: Dialer::new(endpoint, tls),
            extra: metadata_block(metadata)?,
            conn: None,
        })
    }

    /// One unary call of `path` with an encoded protobuf `message`, within
    /// `timeout`. `Ok`: the response message; `Err`: a short text for the
    /// log (`gRPC <Code>: <message>`, or `no answer within N ms`).
    pub fn call(
        &mut self,
        path: &str,
        message: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, String> {
        let deadline = Instant::now() + timeout;
        let len = u32::try_from(message.len())
            .map_err(|_| "gRPC ResourceExhausted: request message over 4 GiB".to_string())?;
        let mut body = Vec::with_capacity(5 + message.len());
        body.push(0);
        body.extend_from_slice(&len.to_be_bytes());
        body.extend_from_slice(message);
        let block = self.request_block(path, timeout);
        let mut retried = false;
        loop {
            let reused = self.conn.as_mut().is_some_and(|c| c.check_idle(deadline));
            let conn = match self.conn.take().filter(|_| reused) {
                Some(c) => self.conn.insert(c),
                None => match self.dialer.connect(deadline) {
                    Ok(stream) => self.conn.insert(Conn::new(stream)),
                    Err(e) => return Err(describe(&e, timeout)),
                },
            };
            match conn.request(&block, &body, deadline) {
                Ok(response) => {
                    if !conn.is_open() {
                        self.conn = None;
                    }
                    return outcome(response)
                        .map_err(|(code, msg)| format!("gRPC {}: {msg}", CODES[code]));
                }
                Err(e) => {
                    self.conn = None;
                    // A kept connection the collector had already given up
                    // on: it did not act on the request, so once more.
                    if reused && !retried && e.unprocessed() {
                        retried = true;
                        continue;
                    }
                    return Err(describe(&e, timeout));
                }
            }
        }
    }

    fn request_block(&self, path: &str, timeout: Duration) -> Vec<u8> {
        let ep = self.dialer.endpoint();
        let mut b = Vec::new();
        encode_field(&mut b, b":method", b"POST", false);
        encode_field(
            &mut b,
            b":scheme",
            if ep.tls { b"https" } else { b"http" },
            false,
        );
        encode_field(&mut b, b":path", path.as_bytes(), false);
        encode_field(&mut b, b":authority", ep.authority.as_bytes(), false);
        encode_field(&mut b, b"content-type", b"application/grpc", false);
        encode_field(&mut b, b"te", b"trailers", false);
        encode_field(
            &mut b,
            b"grpc-timeout",
            grpc_timeout(timeout).as_bytes(),
            false,
        );
        b.extend_from_slice(&self.extra);
        b
    }
}

/// Validates and encodes the configured metadata once: names lowercased
/// (gRPC keys are lowercase), HTTP tokens, not binary (`-bin`) keys;
/// values visible ASCII or tab. Values are sent never-indexed.
fn metadata_block(metadata: &[(String, String)]) -> Result<Vec<u8>, String> {
    const TOKEN: &[u8] = b"!#$%&'*+-.^_`|~";
    let mut fields: Vec<(String, &str)> = Vec::new();
    let mut agent = USER_AGENT.to_string();
    for (name, value) in metadata {
        let key = name.to_ascii_lowercase();
        let token = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || TOKEN.contains(&b));
        if !token || key.ends_with("-bin") || FORBIDDEN.contains(&key.as_str()) {
            return Err(format!(
                "otlp_headers \"{name}\" is not a valid gRPC metadata name"
            ));
        }
        if !value
            .bytes()
            .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
        {
            return Err(format!(
                "otlp_headers \"{name}\" has a value gRPC cannot carry"
            ));
        }
        if key == "user-agent" {
            agent = format!("{value} {USER_AGENT}");
        } else if !RESERVED.contains(&key.as_str()) {
            // One value per name: a later spelling of a name replaces it.
            fields.retain(|(k, _)| *k != key);
            fields.push((key, value));
        }
    }
    let mut b = Vec::new();
    encode_field(&mut b, b"user-agent", agent.as_bytes(), false);
    for (k, v) in fields {
        encode_field(&mut b, k.as_bytes(), v.as_bytes(), true);
    }
    Ok(b)
}

/// `grpc-timeout`: at most 8 digits, milliseconds while they fit.
fn grpc_timeout(t: Duration) -> String {
    let ms = t.as_millis();
    if ms <= 99_999_999 {
        format!("{}m", ms.max(1))
    } else {
        format!("{}S", t.as_secs().min(99_999_999))
    }
}

fn field<'a>(fields: &'a [Field], name: &str) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|(n, _)| n == name.as_bytes())
        .map(|(_, v)| v.as_slice())
}

/// The call's result from its response: `(code, message)` on failure.
fn outcome(r: Response) -> Result<Vec<u8>, (usize, String)> {
    // Trailers, or the headers of a trailers-only response.
    let status_fields = if r.trailers.is_empty() {
        &r.headers
    } else {
        &r.trailers
    };
    let Some(status) = field(status_fields, "grpc-status") else {
        if r.status != 200 {
            return Err(from_http(r.status));
        }
        return Err((UNKNOWN, "response without grpc-status".into()));
    };
    let code = std::str::from_utf8(status)
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|&c| c < CODES.len());
    let Some(code) = code else {
        return Err((UNKNOWN, "invalid grpc-status".into()));
    };
    if code != 0 {
        let msg = field(status_fields, "grpc-message")
            .map(percent_decode)
            .unwrap_or_default();
        return Err((code, msg));
    }
    if r.status != 200 {
        return Err(from_http(r.status));
    }
    // Exactly one uncompressed message (none was asked to be compressed).
    let body = &r.body;
    let Some((head, rest)) = body.split_first_chunk::<5>() else {
        return Err((INTERNAL, "missing response message".into()));
    };
    if head[0] != 0 {
        return Err((INTERNAL, "compressed response message".into()));
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_MESSAGE {
        return Err((8, "response message larger than 4 MiB".into()));
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
fn percent_decode(v: &[u8]) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        let escaped = match (
            v[i],
            v.get(i + 1).copied().and_then(hex),
            v.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => Some(h << 4 | l),
            _ => None,
        };
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(v[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The log text of a failed call (no header values: none reach [`Error`]).
fn describe(e: &Error, timeout: Duration) -> String {
    let unavailable = CODES[UNAVAILABLE];
    match e {
        Error::Timeout => format!("no answer within {} ms", timeout.as_millis()),
        Error::Transport(what) => format!("gRPC {unavailable}: {what}"),
        Error::Closed => format!("gRPC {unavailable}: connection closed by the collector"),
        Error::Protocol(reason, what) => format!("gRPC Internal: HTTP/2 {reason}: {what}"),
        Error::GoAway { reason, .. } => {
            format!("gRPC {unavailable}: the collector closed the connection (GOAWAY {reason})")
        }
        Error::Reset(reason) => {
            // gRPC's mapping of HTTP/2 error codes.
            let code = match *reason {
                Reason::REFUSED_STREAM => UNAVAILABLE,
                Reason::CANCEL => 1,
                Reason::ENHANCE_YOUR_CALM => 8,
                Reason::INADEQUATE_SECURITY => 7,
                _ => INTERNAL,
            };
            format!(
                "gRPC {}: stream reset by the collector ({reason})",
                CODES[code]
            )
        }
        Error::TooLarge(what) => format!("gRPC ResourceExhausted: {what} over our limit"),
    }
}

#[cfg(test)]
#[path = "grpc_tests.rs"]
mod tests;
