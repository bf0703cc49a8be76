//! A minimal linear-time NDJSON reader over a raw socket, for streams that
//! carry multi-megabyte frames or megabytes of backlog (`RpcStream` rescans
//! its pending buffer for every newline, which is quadratic in the backlog).
//! Responses are decoded by proto's [`ResponseDecoder`] (lenient, like the
//! rest of testkit); lines are split here without rescanning.

use std::time::Duration;

use proto::http::peer::{Framing, ResponseDecoder, ResponseEvent};
use serde_json::Value;

use crate::http::next_event;
use crate::Server;

/// See the module docs.
pub struct RawStream {
    sock: std::net::TcpStream,
    decoder: ResponseDecoder,
    buf: Vec<u8>,
    /// Decoded body bytes: `lines[start..]` not yet returned, no newline in
    /// `lines[start..scanned]`.
    lines: Vec<u8>,
    start: usize,
    scanned: usize,
    /// The body ended (or the connection failed).
    done: bool,
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
        RawStream::open_at(server.client().addr, session_id, session_key, request)
    }

    /// [`RawStream::open`] against a client listener's address (from
    /// another thread than the server's owner).
    #[track_caller]
    pub fn open_at(
        addr: std::net::SocketAddr,
        session_id: &str,
        session_key: &str,
        request: &Value,
    ) -> RawStream {
        use std::io::Write;
        let mut sock = std::net::TcpStream::connect(addr).expect("connect");
        let _ = sock.set_nodelay(true);
        let body = serde_json::to_vec(request).unwrap();
        let head = format!(
            "POST /api/v1/sessions/{session_id}/rpc HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {session_key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        sock.write_all(head.as_bytes()).unwrap();
        sock.write_all(&body).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut s = RawStream {
            sock,
            decoder: ResponseDecoder::lenient(),
            buf: vec![0; 1 << 16],
            lines: Vec::new(),
            start: 0,
            scanned: 0,
            done: false,
        };
        match next_event(&mut s.sock, &mut s.decoder, &mut s.buf) {
            Ok(Some(ResponseEvent::Head(h))) => {
                assert_eq!(h.status, 200, "{h:?}");
                assert_eq!(h.framing, Framing::Chunked, "rpc responses are chunked");
            }
            other => panic!("no response head: {other:?}"),
        }
        s
    }

    /// The next NDJSON line, or `None` at the end of the body (a last line
    /// without a newline is returned first).
    pub fn next_line(&mut self) -> Option<String> {
        loop {
            let unseen = &self.lines[self.scanned..];
            if let Some(i) = unseen.iter().position(|&b| b == b'\n') {
                let end = self.scanned + i;
                let line = String::from_utf8_lossy(&self.lines[self.start..end]).into_owned();
                self.start = end + 1;
                self.scanned = self.start;
                return Some(line);
            }
            self.scanned = self.lines.len();
            if self.done {
                if self.start == self.lines.len() {
                    return None;
                }
                let line = String::from_utf8_lossy(&self.lines[self.start..]).into_owned();
                self.start = self.lines.len();
                return Some(line);
            }
            match next_event(&mut self.sock, &mut self.decoder, &mut self.buf) {
                Ok(Some(ResponseEvent::Data(d))) => {
                    if self.start > 0 && self.start * 2 >= self.lines.len() {
                        self.lines.drain(..self.start);
                        self.scanned -= self.start;
                        self.start = 0;
                    }
                    self.lines.extend_from_slice(&d);
                }
                Ok(Some(_)) | Ok(None) | Err(_) => self.done = true,
            }
        }
    }

    /// The next frame as JSON.
    pub fn next_frame(&mut self) -> Option<Value> {
        self.next_line().map(|l| {
            serde_json::from_str(&l).unwrap_or_else(|e| panic!("bad frame ({e}): {l:.200}"))
        })
    }
}
