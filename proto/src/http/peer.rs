//! The peer's side of HTTP/1.1, sans-IO, as a client or a test server reads
//! it. Responses: [`ResponseDecoder`] (from [`super::response`], re-exported
//! here), strict or lenient. Requests, for test servers such as testkit's
//! mock provider: [`parse_request_head`] and [`BodyDecoder`], lenient where
//! [`super::RequestDecoder`] is strict (they read what a trusted test client
//! sent; they do not serve untrusted clients).

pub use super::response::{
    Framing, Mode, ResponseDecoder, ResponseError, ResponseEvent, ResponseHead,
    DEFAULT_MAX_HEAD_BYTES,
};

use super::response::{ChunkReader, ChunkStep};

/// Index just past the `\r\n\r\n` that terminates an HTTP head, if present.
pub fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Split a head (without the terminating blank line) into its first line and
/// lower-cased header pairs.
fn split_head(head: &[u8]) -> Result<(String, Vec<(String, String)>), String> {
    let text = std::str::from_utf8(head).map_err(|e| format!("non-UTF-8 HTTP head: {e}"))?;
    let mut lines = text.split("\r\n").filter(|l| !l.is_empty());
    let first = lines.next().ok_or("empty HTTP head")?.to_string();
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("malformed header line {line:?}"))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok((first, headers))
}

pub struct RequestHead {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
}

/// Parse a request head from the start of `buf`. `Ok(None)` = incomplete.
pub fn parse_request_head(buf: &[u8]) -> Result<Option<(RequestHead, usize)>, String> {
    let Some(end) = find_head_end(buf) else {
        return Ok(None);
    };
    let (first, headers) = split_head(buf.get(..end.saturating_sub(4)).unwrap_or_default())?;
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("bad request line {first:?}"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("unsupported HTTP version in {first:?}"));
    }
    Ok(Some((
        RequestHead {
            method: method.to_string(),
            target: target.to_string(),
            headers,
        },
        end,
    )))
}

/// Case-insensitive header lookup over lower-cased pairs.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn is_chunked(headers: &[(String, String)]) -> bool {
    headers.iter().any(|(n, v)| {
        n == "transfer-encoding"
            && v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("chunked"))
    })
}

fn content_length(headers: &[(String, String)]) -> Result<Option<usize>, String> {
    match header(headers, "content-length") {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<usize>()
            .map(Some)
            .map_err(|_| format!("bad content-length {v:?}")),
    }
}

/// Incremental decoder for `Transfer-Encoding: chunked` (lenient: bare LF
/// line endings and padded sizes are accepted; trailers are skipped).
#[derive(Debug, Default)]
pub struct ChunkedDecoder {
    reader: ChunkReader,
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        ChunkedDecoder::default()
    }

    pub fn is_done(&self) -> bool {
        self.reader.is_done()
    }

    /// Consume as much of `input` as possible, appending payload to `out`.
    /// Consumed bytes are drained from `input`; an incomplete tail stays.
    pub fn feed(&mut self, input: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<(), String> {
        let mut pos = 0;
        let result = loop {
            let rest = input.get(pos..).unwrap_or_default();
            match self
                .reader
                .step(rest, Mode::Lenient, DEFAULT_MAX_HEAD_BYTES)
            {
                Ok(ChunkStep::Skip(n)) => pos += n,
                Ok(ChunkStep::Data(n)) => {
                    out.extend_from_slice(rest.get(..n).unwrap_or_default());
                    pos += n;
                }
                Ok(ChunkStep::Done(n)) => {
                    pos += n;
                    break Ok(());
                }
                Ok(ChunkStep::NeedMore) => break Ok(()),
                Err(e) => break Err(e.to_string()),
            }
        };
        input.drain(..pos);
        result
    }
}

/// How a request body is delimited.
#[derive(Debug)]
pub enum BodyDecoder {
    /// No body at all.
    Empty,
    Length(usize),
    Chunked(ChunkedDecoder),
}

impl BodyDecoder {
    /// Decoder for a request body (no body unless framed).
    pub fn for_request(headers: &[(String, String)]) -> Result<Self, String> {
        if is_chunked(headers) {
            return Ok(BodyDecoder::Chunked(ChunkedDecoder::new()));
        }
        match content_length(headers)? {
            Some(n) => Ok(BodyDecoder::Length(n)),
            None => Ok(BodyDecoder::Empty),
        }
    }

    pub fn is_done(&self) -> bool {
        match self {
            BodyDecoder::Empty => true,
            BodyDecoder::Length(n) => *n == 0,
            BodyDecoder::Chunked(c) => c.is_done(),
        }
    }

    /// Move decoded payload from `input` to `out`, draining what was used.
    pub fn feed(&mut self, input: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<(), String> {
        match self {
            BodyDecoder::Empty => Ok(()),
            BodyDecoder::Length(n) => {
                let take = (*n).min(input.len());
                out.extend(input.drain(..take));
                *n -= take;
                Ok(())
            }
            BodyDecoder::Chunked(c) => c.feed(input, out),
        }
    }
}

pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(encoded: &[u8], piece: usize) -> (Vec<u8>, bool) {
        let mut dec = ChunkedDecoder::new();
        let mut input = Vec::new();
        let mut out = Vec::new();
        for part in encoded.chunks(piece) {
            input.extend_from_slice(part);
            dec.feed(&mut input, &mut out).unwrap();
        }
        (out, dec.is_done())
    }

    #[test]
    fn chunked_any_split() {
        let encoded = b"5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nx-trailer: 1\r\n\r\n";
        for piece in 1..encoded.len() + 1 {
            let (out, done) = decode_in_pieces(encoded, piece);
            assert_eq!(out, b"hello 0123456789", "piece size {piece}");
            assert!(done, "piece size {piece}");
        }
    }

    #[test]
    fn chunked_rejects_garbage() {
        let mut dec = ChunkedDecoder::new();
        let mut input = b"zz\r\n".to_vec();
        assert!(dec.feed(&mut input, &mut Vec::new()).is_err());
        let mut dec = ChunkedDecoder::new();
        let mut input = b"2\r\nabXY".to_vec();
        assert!(dec.feed(&mut input, &mut Vec::new()).is_err());
    }
}
