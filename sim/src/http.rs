//! The simulated clients' side of HTTP/1.1: request bytes built by hand,
//! and responses read with proto's strict [`ResponseDecoder`] (any byte
//! split, `Content-Length` bodies, chunked NDJSON streams) and split into
//! NDJSON frames.

use proto::http::response::{Framing, ResponseDecoder, ResponseEvent};
use serde_json::Value;

/// One HTTP/1.1 request as bytes. Every simulated request asks for
/// `Connection: close` (one exchange per connection).
pub fn request(method: &str, path: &str, token: Option<&str>, body: Option<&[u8]>) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n");
    if let Some(t) = token {
        head.push_str("Authorization: Bearer ");
        head.push_str(t);
        head.push_str("\r\n");
    }
    let body = body.unwrap_or(b"");
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    head.push_str("Content-Length: ");
    head.push_str(&body.len().to_string());
    head.push_str("\r\n\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

/// What a [`ResponseReader`] produced from newly read bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// Status line and headers of the final response.
    Head { status: u16 },
    /// One complete NDJSON line of a chunked body (parsed JSON, or the raw
    /// text wrapped in a string when it is not JSON).
    Frame(Value),
    /// The whole body of a non-chunked response.
    Body(Vec<u8>),
    /// The response is complete.
    End,
    /// The bytes do not form a valid response.
    Garbage(String),
}

/// Reads one response of a connection with the strict
/// [`ResponseDecoder`] (the oracle of the engine's wire output) and turns
/// a chunked body into NDJSON frames. Bytes after the end stay buffered for
/// the next response ([`ResponseReader::take_rest`]).
#[derive(Debug, Clone, Default)]
pub struct ResponseReader {
    decoder: ResponseDecoder,
    chunked: bool,
    /// The partial NDJSON line of a chunked body.
    line: Vec<u8>,
    /// A non-chunked body so far.
    body: Vec<u8>,
    done: bool,
    broken: bool,
    /// Only track message boundaries (no NDJSON/JSON decoding).
    framing_only: bool,
}

impl ResponseReader {
    /// A reader that only finds where responses end (cheap).
    pub fn framing_only() -> Self {
        ResponseReader {
            framing_only: true,
            ..Default::default()
        }
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Bytes received after the complete response (a pipelined next one).
    pub fn take_rest(&mut self) -> Vec<u8> {
        self.decoder.take_buffered()
    }

    /// Feeds bytes and returns everything that became complete.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<Parsed>) {
        self.decoder.feed(bytes);
        while !self.done && !self.broken {
            match self.decoder.poll() {
                Ok(None) => return,
                Ok(Some(ResponseEvent::Head(head))) => {
                    self.chunked = head.framing == Framing::Chunked;
                    out.push(Parsed::Head {
                        status: head.status,
                    });
                }
                Ok(Some(ResponseEvent::Data(data))) => self.data(&data, out),
                Ok(Some(ResponseEvent::End { .. })) => {
                    if !self.chunked {
                        out.push(Parsed::Body(std::mem::take(&mut self.body)));
                    } else if !self.line.is_empty() {
                        out.push(Parsed::Garbage("unterminated NDJSON line".into()));
                    }
                    out.push(Parsed::End);
                    self.done = true;
                }
                Err(e) => {
                    self.broken = true;
                    out.push(Parsed::Garbage(e.to_string()));
                }
            }
        }
    }

    fn data(&mut self, mut data: &[u8], out: &mut Vec<Parsed>) {
        if self.framing_only {
            return;
        }
        if !self.chunked {
            self.body.extend_from_slice(data);
            return;
        }
        while let Some(i) = data.iter().position(|b| *b == b'\n') {
            self.line.extend_from_slice(&data[..i]);
            data = &data[i + 1..];
            let line = std::mem::take(&mut self.line);
            let v = serde_json::from_slice(&line)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&line).into_owned()));
            out.push(Parsed::Frame(v));
        }
        self.line.extend_from_slice(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(lines: &[&str]) -> Vec<u8> {
        let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for l in lines {
            let data = format!("{l}\n");
            out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
            out.extend_from_slice(data.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    #[test]
    fn chunked_stream_survives_every_split() {
        let bytes = chunked(&[r#"{"a":1}"#, r#"{"b":[2,3]}"#]);
        for split in 0..bytes.len() {
            let mut p = ResponseReader::default();
            let mut out = Vec::new();
            p.feed(&bytes[..split], &mut out);
            p.feed(&bytes[split..], &mut out);
            assert_eq!(
                out,
                vec![
                    Parsed::Head { status: 200 },
                    Parsed::Frame(serde_json::json!({"a":1})),
                    Parsed::Frame(serde_json::json!({"b":[2,3]})),
                    Parsed::End
                ],
                "split at {split}"
            );
        }
    }

    #[test]
    fn fixed_body_byte_by_byte() {
        let bytes = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}";
        let mut p = ResponseReader::default();
        let mut out = Vec::new();
        for b in bytes.iter() {
            p.feed(&[*b], &mut out);
        }
        assert_eq!(
            out,
            vec![
                Parsed::Head { status: 201 },
                Parsed::Body(b"{}".to_vec()),
                Parsed::End
            ]
        );
        assert!(p.is_done());
    }

    /// The reader is an oracle: framing the engine must never produce is
    /// reported, not skipped over.
    #[test]
    fn malformed_framing_is_garbage() {
        let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
        for bad in [
            format!("{head}8\r\n{{\"a\":1}}\nXY"),
            format!("{head}8\n{{\"a\":1}}\n\r\n0\r\n\r\n"),
            format!("{head}zz\r\n"),
            "HTTP/1.1 200 OK\r\n\r\n{}".to_string(),
            "HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n".to_string(),
            "HTTP/1.1 200 OK\ncontent-length: 0\r\n\r\n".to_string(),
            "HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n".to_string(),
        ] {
            let mut p = ResponseReader::default();
            let mut out = Vec::new();
            p.feed(bad.as_bytes(), &mut out);
            assert!(
                matches!(out.last(), Some(Parsed::Garbage(_))),
                "{bad:?}: {out:?}"
            );
            assert!(!p.is_done());
            // Nothing more is read after the first error.
            let mut more = Vec::new();
            p.feed(b"HTTP/1.1 204 No Content\r\n\r\n", &mut more);
            assert!(more.is_empty());
        }
    }

    #[test]
    fn pipelined_rest_is_kept() {
        let mut bytes = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec();
        bytes.extend_from_slice(&chunked(&["{}"]));
        let mut p = ResponseReader::framing_only();
        let mut out = Vec::new();
        p.feed(&bytes, &mut out);
        assert!(p.is_done());
        assert_eq!(p.take_rest(), chunked(&["{}"]));
    }
}
