//! A minimal linear-time NDJSON reader over a raw socket, for streams that
//! carry multi-megabyte frames or megabytes of backlog (`RpcStream` rescans
//! its pending buffer for every newline, which is quadratic in the backlog).

use std::time::Duration;

use serde_json::Value;

use crate::Server;

/// See the module docs.
pub struct RawStream {
    reader: std::io::BufReader<ChunkedBody>,
}

/// Decodes an HTTP/1.1 chunked body.
pub struct ChunkedBody {
    inner: std::io::BufReader<std::net::TcpStream>,
    remaining: usize,
    done: bool,
}

impl std::io::Read for ChunkedBody {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::BufRead;
        if self.remaining == 0 {
            if self.done {
                return Ok(0);
            }
            let mut line = String::new();
            if self.inner.read_line(&mut line)? == 0 {
                self.done = true;
                return Ok(0);
            }
            let hex = line.trim().split(';').next().unwrap_or("").to_string();
            let size = usize::from_str_radix(&hex, 16).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("chunk size {line:?}"),
                )
            })?;
            if size == 0 {
                self.done = true;
                return Ok(0);
            }
            self.remaining = size;
        }
        let want = buf.len().min(self.remaining);
        let n = std::io::Read::read(&mut self.inner, &mut buf[..want])?;
        if n == 0 {
            self.done = true;
            return Ok(0);
        }
        self.remaining -= n;
        if self.remaining == 0 {
            let mut crlf = [0u8; 2];
            std::io::Read::read_exact(&mut self.inner, &mut crlf)?;
        }
        Ok(n)
    }
}

impl RawStream {
    /// POSTs `request` to the session's `/rpc` and reads the response head
    /// (which must be 200 chunked NDJSON).
    #[track_caller]
    pub fn open(
        server: &Server,
        session_id: &str,
        session_key: &str,
        request: &Value,
    ) -> RawStream {
        use std::io::{BufRead, Write};
        let mut sock = server.client().connect().expect("connect");
        let body = serde_json::to_vec(request).unwrap();
        let head = format!(
            "POST /api/v1/sessions/{session_id}/rpc HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {session_key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        sock.write_all(head.as_bytes()).unwrap();
        sock.write_all(&body).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut inner = std::io::BufReader::with_capacity(1 << 16, sock);
        let mut status = String::new();
        inner.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
        let mut chunked = false;
        loop {
            let mut line = String::new();
            inner.read_line(&mut line).unwrap();
            if line.trim().is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                chunked = true;
            }
        }
        assert!(chunked, "rpc responses are chunked");
        RawStream {
            reader: std::io::BufReader::with_capacity(
                1 << 16,
                ChunkedBody {
                    inner,
                    remaining: 0,
                    done: false,
                },
            ),
        }
    }

    /// The next NDJSON line, or `None` at the end of the body.
    pub fn next_line(&mut self) -> Option<String> {
        use std::io::BufRead;
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim_end_matches('\n').to_string()),
        }
    }

    /// The next frame as JSON.
    pub fn next_frame(&mut self) -> Option<Value> {
        self.next_line().map(|l| {
            serde_json::from_str(&l).unwrap_or_else(|e| panic!("bad frame ({e}): {l:.200}"))
        })
    }
}
