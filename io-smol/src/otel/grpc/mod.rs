//! Unary gRPC calls for the OTLP exporter (the gRPC "PROTOCOL-HTTP2"
//! mapping): one length-prefixed, uncompressed message each way, the
//! status from the trailers. HTTP/2 itself is the `h2` crate, over tokio
//! TCP and tokio-rustls, on a current-thread tokio runtime that lives on
//! the exporter thread and runs only while a call does. tokio (with
//! `rt`, `net`, `time`) is linked anyway by the PostgreSQL client, and h2
//! is written against it: no compatibility layer, no task of our own.
//!
//! Every step of a call (resolving, connecting, TLS, each read and write)
//! is bounded by the call's deadline, every buffer by a fixed size, so a
//! hostile collector costs one export timeout. The connection is kept
//! across calls; any error drops it and the next call connects afresh.

mod conn;
pub mod net;
mod status;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, TE, USER_AGENT};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Method, Request, Uri};
use rustls::RootCertStore;

use conn::Conn;
use net::{Dialer, Endpoint};
pub use status::Error;
use status::{describe, outcome, Response, CODES};

pub const TRACES: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
pub const METRICS: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

const AGENT: &str = concat!("baesrv/", env!("CARGO_PKG_VERSION"));

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

pub struct Client {
    /// Declared first: dropped before the runtime its socket is registered
    /// with.
    conn: Option<Conn>,
    dialer: Dialer,
    scheme: Scheme,
    authority: Authority,
    /// user-agent and the configured metadata, values marked sensitive
    /// (HPACK never-indexed).
    metadata: HeaderMap,
    rt: tokio::runtime::Runtime,
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
        let authority = Authority::try_from(endpoint.authority.as_str())
            .map_err(|_| "otlp_endpoint: not a valid http:// or https:// URL".to_string())?;
        let (scheme, tls) = match endpoint.tls {
            true => (
                Scheme::HTTPS,
                Some(net::tls_config(roots).map_err(|e| format!("TLS: {e}"))?),
            ),
            false => (Scheme::HTTP, None),
        };
        let metadata = metadata_map(metadata)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("gRPC runtime: {e}"))?;
        Ok(Client {
            conn: None,
            dialer: Dialer::new(endpoint, tls),
            scheme,
            authority,
            metadata,
            rt,
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
        let body = Bytes::from(body);
        let mut retried = false;
        loop {
            let (result, reused) = self.attempt(path, body.clone(), timeout, deadline);
            match result {
                Ok(response) => {
                    return outcome(response)
                        .map_err(|(code, msg)| format!("gRPC {}: {msg}", CODES[code]))
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

    /// One try on the kept connection or a new one; `true` with the
    /// result when the connection was a kept one.
    fn attempt(
        &mut self,
        path: &str,
        body: Bytes,
        timeout: Duration,
        deadline: Instant,
    ) -> (Result<Response, Error>, bool) {
        let until = tokio::time::Instant::from_std(deadline);
        let mut reused = false;
        if let Some(conn) = self.conn.as_mut() {
            let settled = self
                .rt
                .block_on(async { tokio::time::timeout_at(until, conn.settle()).await });
            reused = settled.unwrap_or(false);
        }
        if !reused {
            self.conn = None;
            let addrs = match self.dialer.resolve(deadline) {
                Ok(addrs) => addrs,
                Err(e) => return (Err(e), false),
            };
            let dialer = &self.dialer;
            let opened = self.rt.block_on(async {
                let open = async { Conn::open(dialer.connect(addrs).await?).await };
                tokio::time::timeout_at(until, open).await
            });
            match opened {
                Ok(Ok(conn)) => self.conn = Some(conn),
                Ok(Err(e)) => return (Err(e), false),
                Err(_) => return (Err(Error::Timeout), false),
            }
        }
        let request = match self.request(path, timeout) {
            Ok(r) => r,
            Err(e) => return (Err(e), reused),
        };
        let Some(conn) = self.conn.as_mut() else {
            return (Err(Error::Closed), reused);
        };
        let result = self
            .rt
            .block_on(async { tokio::time::timeout_at(until, conn.exchange(request, body)).await });
        (result.unwrap_or(Err(Error::Timeout)), reused)
    }

    /// The request head: pseudo-headers from the URI, the gRPC headers,
    /// then the metadata.
    fn request(&self, path: &str, timeout: Duration) -> Result<Request<()>, Error> {
        let uri = Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(
                PathAndQuery::try_from(path).map_err(|e| Error::Internal(e.to_string()))?,
            )
            .build()
            .map_err(|e| Error::Internal(e.to_string()))?;
        let mut req = Request::new(());
        *req.method_mut() = Method::POST;
        *req.uri_mut() = uri;
        let h = req.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        h.insert(TE, HeaderValue::from_static("trailers"));
        let t = HeaderValue::try_from(grpc_timeout(timeout))
            .map_err(|e| Error::Internal(e.to_string()))?;
        h.insert("grpc-timeout", t);
        for (name, value) in &self.metadata {
            h.append(name, value.clone());
        }
        Ok(req)
    }
}

/// Validates the configured metadata once: names lowercased (gRPC keys
/// are lowercase), HTTP tokens, not binary (`-bin`) keys; values visible
/// ASCII or tab. Values are marked sensitive (never indexed).
fn metadata_map(metadata: &[(String, String)]) -> Result<HeaderMap, String> {
    const TOKEN: &[u8] = b"!#$%&'*+-.^_`|~";
    let mut map = HeaderMap::new();
    let mut agent = AGENT.to_string();
    let mut fields: Vec<(HeaderName, HeaderValue)> = Vec::new();
    for (name, value) in metadata {
        let bad_name = || format!("otlp_headers \"{name}\" is not a valid gRPC metadata name");
        let bad_value = || format!("otlp_headers \"{name}\" has a value gRPC cannot carry");
        let key = name.to_ascii_lowercase();
        let token = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || TOKEN.contains(&b));
        if !token || key.ends_with("-bin") || FORBIDDEN.contains(&key.as_str()) {
            return Err(bad_name());
        }
        if !value
            .bytes()
            .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
        {
            return Err(bad_value());
        }
        if key == "user-agent" {
            agent = format!("{value} {AGENT}");
        } else if !RESERVED.contains(&key.as_str()) {
            let name = HeaderName::try_from(key).map_err(|_| bad_name())?;
            let mut value = HeaderValue::try_from(value.as_str()).map_err(|_| bad_value())?;
            value.set_sensitive(true);
            // One value per name: a later spelling of a name replaces it.
            fields.retain(|(k, _)| *k != name);
            fields.push((name, value));
        }
    }
    let agent = HeaderValue::try_from(agent)
        .map_err(|_| "otlp_headers \"user-agent\" has a value gRPC cannot carry".to_string())?;
    map.insert(USER_AGENT, agent);
    for (k, v) in fields {
        map.insert(k, v);
    }
    Ok(map)
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

#[cfg(test)]
mod peer_tests;
#[cfg(test)]
mod tests;
