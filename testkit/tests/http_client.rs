//! The HTTP client and NDJSON reader against tiny in-test servers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::http::{rpc_request, HttpClient, Response};

/// Accept one connection, read the request head (+ content-length body),
/// hand the stream and the request text to `f`.
fn one_shot<F>(f: F) -> (SocketAddr, JoinHandle<String>)
where
    F: FnOnce(&mut TcpStream) + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let h = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let req = read_request(&mut s);
        f(&mut s);
        req
    });
    (addr, h)
}

fn read_request(s: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).unwrap() == 0 {
            break;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    head + &String::from_utf8_lossy(&body)
}

/// Write `bytes` in pieces of the given sizes, pausing between them so the
/// client sees separate reads.
fn write_split(s: &mut TcpStream, bytes: &[u8], sizes: &[usize], pause: Duration) {
    let mut pos = 0;
    let mut i = 0;
    while pos < bytes.len() {
        let n = sizes[i % sizes.len()].min(bytes.len() - pos);
        s.write_all(&bytes[pos..pos + n]).unwrap();
        s.flush().unwrap();
        pos += n;
        i += 1;
        thread::sleep(pause);
    }
}

fn chunked(pieces: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces {
        out.extend_from_slice(format!("{:x}\r\n", p.len()).as_bytes());
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

const NDJSON_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n";

#[test]
fn content_length_response_and_request_shape() {
    let (addr, h) = one_shot(|s| {
        s.write_all(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"a\": true}")
            .unwrap();
    });
    let c = HttpClient::new(addr).bearer("tok");
    let r = c.post_json("/admin/v1/profiles", &json!({"name": "x"}));
    assert_eq!(r.status, 201);
    assert_eq!(r.reason, "Created");
    assert_eq!(r.header("CONTENT-TYPE"), Some("application/json"));
    assert_eq!(r.json(), json!({"a": true}));
    let req = h.join().unwrap();
    assert!(
        req.starts_with("POST /admin/v1/profiles HTTP/1.1\r\n"),
        "{req}"
    );
    assert!(req.contains("authorization: Bearer tok\r\n"), "{req}");
    assert!(req.contains("content-length: 12\r\n"), "{req}");
    assert!(req.ends_with("{\"name\":\"x\"}"), "{req}");
}

#[test]
fn chunked_and_until_close_responses() {
    let (addr, _h) = one_shot(|s| {
        let mut bytes = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        bytes.extend(chunked(&[b"hel", b"lo ", b"world"]));
        write_split(s, &bytes, &[3, 1, 7], Duration::from_millis(1));
    });
    assert_eq!(HttpClient::new(addr).get("/").text(), "hello world");

    let (addr, _h) = one_shot(|s| {
        s.write_all(b"HTTP/1.1 200 OK\r\n\r\nuntil close").unwrap();
    });
    assert_eq!(HttpClient::new(addr).get("/").text(), "until close");

    let (addr, _h) = one_shot(|s| {
        s.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap();
        thread::sleep(Duration::from_millis(200));
    });
    let r = HttpClient::new(addr).delete("/x");
    assert_eq!(r.status, 204);
    assert!(r.body.is_empty());
}

#[test]
fn truncated_body_and_refused_connection_are_errors() {
    let (addr, _h) = one_shot(|s| {
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
            .unwrap();
    });
    let err = HttpClient::new(addr)
        .try_request("GET", "/", &[], b"")
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);

    let free = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    assert!(HttpClient::new(free)
        .try_request("GET", "/", &[], b"")
        .is_err());
}

#[test]
fn raw_sends_bytes_and_reads_until_close() {
    let (addr, h) = one_shot(|s| {
        s.write_all(
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\nconnection: close\r\n\r\nno",
        )
        .unwrap();
    });
    let out = HttpClient::new(addr).raw(b"GARBAGE / HTTP/9.9\r\n\r\n");
    let r = Response::parse(&out).unwrap();
    assert_eq!(r.status, 400);
    assert_eq!(r.text(), "no");
    assert!(h.join().unwrap().starts_with("GARBAGE"));

    // A peer that never closes: raw returns at the deadline with what it got.
    let (addr, _h) = one_shot(|s| {
        s.write_all(b"partial").unwrap();
        thread::sleep(Duration::from_secs(2));
    });
    let t = Instant::now();
    let out =
        HttpClient::new(addr).raw_timeout(b"GET / HTTP/1.1\r\n\r\n", Duration::from_millis(300));
    assert_eq!(out, b"partial");
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[test]
fn ndjson_frames_reassembled_across_odd_chunk_and_tcp_splits() {
    let frames = [
        json!({"jsonrpc": "2.0", "method": "session.event", "params": {"event_type": "provider.request", "n": 1}}),
        json!({"jsonrpc": "2.0", "method": "session.event", "params": {"event_type": "provider.response", "text": "é ünïcode"}}),
        json!({"jsonrpc": "2.0", "id": 7, "result": {"message": {"role": "assistant", "content": "done"}}}),
    ];
    let body: Vec<u8> = frames
        .iter()
        .flat_map(|f| {
            let mut l = serde_json::to_vec(f).unwrap();
            l.push(b'\n');
            l
        })
        .collect();
    // Chunk boundaries deliberately cut through frames, newlines and a
    // multi-byte UTF-8 character.
    let mut pieces: Vec<&[u8]> = Vec::new();
    let cuts = [1usize, 5, 17, 2, 60, 3, 33, 1, 1, 90];
    let mut pos = 0;
    let mut i = 0;
    while pos < body.len() {
        let n = cuts[i % cuts.len()].min(body.len() - pos);
        pieces.push(&body[pos..pos + n]);
        pos += n;
        i += 1;
    }
    let mut wire = NDJSON_HEAD.to_vec();
    wire.extend(chunked(&pieces));

    let (addr, h) = one_shot(move |s| {
        // TCP writes split at yet other offsets (inside chunk-size lines and CRLFs).
        write_split(s, &wire, &[7, 2, 13, 1, 29], Duration::from_millis(2));
    });
    let c = HttpClient::new(addr);
    let request = rpc_request(
        "session.sendMessage",
        json!({"message": {"content": "hi"}}),
        7,
    );
    let mut stream = c.rpc_stream("ses_abc", "bae_ses_key", &request);
    assert_eq!(stream.status(), 200);
    assert_eq!(
        stream.header("content-type").as_deref(),
        Some("application/x-ndjson")
    );
    let (notes, terminal) = stream.collect_until_terminal(Duration::from_secs(10));
    assert_eq!(notes, frames[..2].to_vec());
    assert_eq!(terminal, Some(frames[2].clone()));
    assert!(stream.next_frame(Duration::from_secs(5)).is_none());
    assert!(stream.is_finished());
    assert_eq!(stream.body_bytes_received(), body.len());
    assert!(stream.framing_error().is_none());

    let req = h.join().unwrap();
    assert!(
        req.starts_with("POST /api/v1/sessions/ses_abc/rpc HTTP/1.1\r\n"),
        "{req}"
    );
    assert!(req.contains("authorization: Bearer bae_ses_key\r\n"));
    let sent: Value = serde_json::from_str(req.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(sent, request);
}

#[test]
fn every_single_byte_split_decodes() {
    let body = b"{\"a\":1}\n{\"b\":2}\n{\"id\":1,\"result\":{}}\n";
    let mut pieces: Vec<&[u8]> = Vec::new();
    for i in 0..body.len() {
        pieces.push(&body[i..i + 1]);
    }
    let mut wire = NDJSON_HEAD.to_vec();
    wire.extend(chunked(&pieces));
    let (addr, _h) = one_shot(move |s| write_split(s, &wire, &[1], Duration::ZERO));
    let mut stream = HttpClient::new(addr).rpc_stream("s", "k", &json!({}));
    assert_eq!(
        stream.next_frame(Duration::from_secs(5)),
        Some(json!({"a": 1}))
    );
    assert_eq!(
        stream.next_frame(Duration::from_secs(5)),
        Some(json!({"b": 2}))
    );
    let (notes, t) = stream.collect_until_terminal(Duration::from_secs(5));
    assert!(notes.is_empty());
    assert_eq!(t, Some(json!({"id": 1, "result": {}})));
}

#[test]
fn silent_stream_times_out_then_resumes() {
    let (addr, _h) = one_shot(|s| {
        // Queued: nothing at all for a while, then the head, then frames.
        thread::sleep(Duration::from_millis(400));
        s.write_all(NDJSON_HEAD).unwrap();
        thread::sleep(Duration::from_millis(300));
        let line = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}\n";
        s.write_all(format!("{:x}\r\n", line.len()).as_bytes())
            .unwrap();
        s.write_all(line).unwrap();
        s.write_all(b"\r\n0\r\n\r\n").unwrap();
    });
    let mut stream = HttpClient::new(addr).rpc_stream("s", "k", &json!({}));
    assert_eq!(stream.pump(Duration::from_millis(150)), 0);
    assert_eq!(stream.bytes_received(), 0);
    assert_eq!(stream.try_status(), None);
    assert!(stream.next_frame(Duration::from_millis(100)).is_none());

    assert!(stream.wait_head(Duration::from_secs(5)));
    assert_eq!(stream.try_status(), Some(200));
    assert!(stream.bytes_received() > 0);
    assert_eq!(stream.body_bytes_received(), 0);
    assert!(stream.next_frame(Duration::from_millis(50)).is_none());

    let (notes, t) = stream.collect_until_terminal(Duration::from_secs(5));
    assert!(notes.is_empty());
    assert_eq!(t.unwrap()["result"]["ok"], true);
    assert!(stream.wait_closed(Duration::from_secs(5)));
}

#[test]
fn non_ndjson_error_body_is_returned_as_last_frame() {
    let (addr, _h) = one_shot(|s| {
        let body = br#"{"type":"unauthorized","title":"Unauthorized","status":401,"detail":"invalid session key"}"#;
        s.write_all(
            format!(
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
        s.write_all(body).unwrap();
        thread::sleep(Duration::from_millis(500));
    });
    let mut stream = HttpClient::new(addr).rpc_stream("s", "bad", &json!({}));
    assert_eq!(stream.status(), 401);
    let (notes, terminal) = stream.collect_until_terminal(Duration::from_secs(5));
    assert!(terminal.is_none());
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0]["type"], "unauthorized");
}

#[test]
fn one_shot_rpc_helper() {
    let (addr, h) = one_shot(|s| {
        let mut wire = NDJSON_HEAD.to_vec();
        wire.extend(chunked(&[
            b"{\"jsonrpc\":\"2.0\",\"method\":\"session.event\",\"params\":{}}\n",
            b"{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":{\"registered\":true}}\n",
        ]));
        s.write_all(&wire).unwrap();
    });
    let (notes, terminal) =
        HttpClient::new(addr).rpc("ses_1", "key", "session.registerDriver", json!({}), "x");
    assert_eq!(notes.len(), 1);
    assert_eq!(terminal["id"], "x");
    assert_eq!(terminal["result"]["registered"], true);
    let req = h.join().unwrap();
    let sent: Value = serde_json::from_str(req.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(
        sent,
        json!({"jsonrpc": "2.0", "id": "x", "method": "session.registerDriver", "params": {}})
    );
}
