//! The simulated clients' side of HTTP/1.1: request bytes built by hand and
//! an incremental response parser that copes with arbitrary byte splits,
//! `Content-Length` bodies and chunked NDJSON streams.

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

/// What the parser produced from newly read bytes.
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

#[derive(Debug, Clone, PartialEq)]
enum State {
    Head,
    Fixed { remaining: usize },
    ChunkSize,
    ChunkData { remaining: usize },
    ChunkDataEnd,
    Trailer,
    Done,
    Broken,
}

/// Incremental response parser for one connection.
#[derive(Debug, Clone)]
pub struct ResponseParser {
    buf: Vec<u8>,
    state: State,
    line: Vec<u8>,
    body: Vec<u8>,
    pub status: Option<u16>,
    /// Only track message boundaries (no NDJSON/JSON decoding).
    framing_only: bool,
}

impl Default for ResponseParser {
    fn default() -> Self {
        ResponseParser {
            buf: Vec::new(),
            state: State::Head,
            line: Vec::new(),
            body: Vec::new(),
            status: None,
            framing_only: false,
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl ResponseParser {
    /// A parser that only finds where responses end (cheap).
    pub fn framing_only() -> Self {
        ResponseParser {
            framing_only: true,
            ..Default::default()
        }
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Bytes received after the complete response (a pipelined next one).
    pub fn take_rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Feeds bytes and returns everything that became complete.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<Parsed>) {
        self.buf.extend_from_slice(bytes);
        loop {
            match self.state.clone() {
                State::Head => {
                    let Some(end) = find(&self.buf, b"\r\n\r\n") else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                    self.buf.drain(..end + 4);
                    let mut lines = head.split("\r\n");
                    let status_line = lines.next().unwrap_or("");
                    let status: Option<u16> = status_line
                        .strip_prefix("HTTP/1.1 ")
                        .and_then(|r| r.get(..3))
                        .and_then(|s| s.parse().ok());
                    let Some(status) = status else {
                        self.state = State::Broken;
                        out.push(Parsed::Garbage(format!("bad status line {status_line:?}")));
                        return;
                    };
                    if status == 100 {
                        continue;
                    }
                    let mut chunked = false;
                    let mut length = 0usize;
                    for l in lines {
                        let Some((name, value)) = l.split_once(':') else {
                            continue;
                        };
                        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
                        if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                            chunked = true;
                        } else if name == "content-length" {
                            length = value.parse().unwrap_or(0);
                        }
                    }
                    self.status = Some(status);
                    out.push(Parsed::Head { status });
                    self.state = if chunked {
                        State::ChunkSize
                    } else {
                        State::Fixed { remaining: length }
                    };
                }
                State::Fixed { remaining } => {
                    let take = remaining.min(self.buf.len());
                    if !self.framing_only {
                        self.body.extend_from_slice(&self.buf[..take]);
                    }
                    self.buf.drain(..take);
                    if remaining - take > 0 {
                        self.state = State::Fixed {
                            remaining: remaining - take,
                        };
                        return;
                    }
                    out.push(Parsed::Body(std::mem::take(&mut self.body)));
                    out.push(Parsed::End);
                    self.state = State::Done;
                }
                State::ChunkSize => {
                    let Some(end) = find(&self.buf, b"\r\n") else {
                        return;
                    };
                    let text = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                    self.buf.drain(..end + 2);
                    let size = text.split(';').next().unwrap_or("").trim();
                    match usize::from_str_radix(size, 16) {
                        Ok(0) => self.state = State::Trailer,
                        Ok(n) => self.state = State::ChunkData { remaining: n },
                        Err(_) => {
                            self.state = State::Broken;
                            out.push(Parsed::Garbage(format!("bad chunk size {text:?}")));
                            return;
                        }
                    }
                }
                State::ChunkData { remaining } => {
                    if self.buf.is_empty() {
                        return;
                    }
                    let take = remaining.min(self.buf.len());
                    if self.framing_only {
                        self.buf.drain(..take);
                        self.state = if remaining - take == 0 {
                            State::ChunkDataEnd
                        } else {
                            State::ChunkData {
                                remaining: remaining - take,
                            }
                        };
                        continue;
                    }
                    let mut data = &self.buf[..take];
                    while let Some(i) = data.iter().position(|b| *b == b'\n') {
                        self.line.extend_from_slice(&data[..i]);
                        data = &data[i + 1..];
                        let line = std::mem::take(&mut self.line);
                        let v = serde_json::from_slice(&line).unwrap_or_else(|_| {
                            Value::String(String::from_utf8_lossy(&line).into_owned())
                        });
                        out.push(Parsed::Frame(v));
                    }
                    self.line.extend_from_slice(data);
                    self.buf.drain(..take);
                    self.state = if remaining - take == 0 {
                        State::ChunkDataEnd
                    } else {
                        State::ChunkData {
                            remaining: remaining - take,
                        }
                    };
                }
                State::ChunkDataEnd => {
                    if self.buf.len() < 2 {
                        return;
                    }
                    if &self.buf[..2] != b"\r\n" {
                        self.state = State::Broken;
                        out.push(Parsed::Garbage("chunk not followed by CRLF".into()));
                        return;
                    }
                    self.buf.drain(..2);
                    self.state = State::ChunkSize;
                }
                State::Trailer => {
                    let Some(end) = find(&self.buf, b"\r\n") else {
                        return;
                    };
                    self.buf.drain(..end + 2);
                    if end == 0 {
                        if !self.line.is_empty() {
                            out.push(Parsed::Garbage("unterminated NDJSON line".into()));
                        }
                        out.push(Parsed::End);
                        self.state = State::Done;
                    }
                }
                // Anything after a complete response belongs to the next one.
                State::Done => return,
                State::Broken => return,
            }
        }
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
            let mut p = ResponseParser::default();
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
        let mut p = ResponseParser::default();
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
}
