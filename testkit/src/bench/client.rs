//! A minimal keep-alive HTTP/1.1 client for the benches: requests written
//! by hand, responses read with proto's strict decoder, one blocking socket
//! per simulated client.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use proto::http::peer::{ResponseDecoder, ResponseEvent};
use serde_json::{json, Value};

use crate::http::next_event;

/// Bench errors are reported, not handled: a message is enough.
pub type Res<T> = Result<T, String>;

/// Maps an error to `"{what}: {e}"`.
pub fn err<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}
// decoder).

pub struct Conn {
    sock: TcpStream,
    decoder: ResponseDecoder,
    buf: Vec<u8>,
    host: String,
}

pub struct Resp {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Conn {
    pub fn open(addr: SocketAddr) -> Res<Conn> {
        let s = TcpStream::connect(addr).map_err(err("connect"))?;
        s.set_nodelay(true).map_err(err("nodelay"))?;
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(err("timeout"))?;
        Ok(Conn {
            sock: s,
            decoder: ResponseDecoder::new(),
            buf: vec![0; 64 * 1024],
            host: addr.to_string(),
        })
    }

    pub fn send_head(
        &mut self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        body: &[u8],
    ) -> Res<()> {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            self.host,
            body.len()
        );
        if let Some(b) = bearer {
            req.push_str(&format!("authorization: Bearer {b}\r\n"));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        self.sock.write_all(&bytes).map_err(err("write"))
    }

    pub fn next_event(&mut self) -> Res<ResponseEvent> {
        next_event(&mut self.sock, &mut self.decoder, &mut self.buf)
            .map_err(err("read"))?
            .ok_or_else(|| "connection closed".to_string())
    }

    /// Reads the status line and headers; returns the status.
    pub fn read_head(&mut self) -> Res<u16> {
        match self.next_event()? {
            ResponseEvent::Head(h) => Ok(h.status),
            other => Err(format!("expected a response head, got {other:?}")),
        }
    }

    /// Appends the next piece of the body (one chunk of a chunked one) to
    /// `out`; false at the end of the body.
    pub fn read_data(&mut self, out: &mut Vec<u8>) -> Res<bool> {
        match self.next_event()? {
            ResponseEvent::Data(d) => {
                out.extend(d);
                Ok(true)
            }
            ResponseEvent::End { .. } => Ok(false),
            other => Err(format!("expected body data, got {other:?}")),
        }
    }

    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        body: &[u8],
    ) -> Res<Resp> {
        self.send_head(method, path, bearer, body)?;
        let status = self.read_head()?;
        let mut out = Vec::new();
        while self.read_data(&mut out)? {}
        Ok(Resp { status, body: out })
    }

    pub fn json(
        &mut self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        body: &Value,
    ) -> Res<Value> {
        let r = self.request(method, path, bearer, body.to_string().as_bytes())?;
        if !(200..300).contains(&r.status) {
            return Err(format!(
                "{method} {path}: {} {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
        serde_json::from_slice(&r.body).map_err(err("json"))
    }

    /// A complete JSON-RPC call; returns the terminal frame.
    pub fn rpc(&mut self, session: &str, key: &str, method: &str, params: Value) -> Res<Value> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let r = self.request(
            "POST",
            &format!("/api/v1/sessions/{session}/rpc"),
            Some(key),
            body.to_string().as_bytes(),
        )?;
        let text = String::from_utf8_lossy(&r.body);
        let last = text.trim_end().rsplit('\n').next().unwrap_or("");
        let v: Value = serde_json::from_str(last).map_err(err("terminal frame"))?;
        if v.get("result").is_none() {
            return Err(format!("{method} failed: {last}"));
        }
        Ok(v)
    }
}
