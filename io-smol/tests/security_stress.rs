//! Hostile clients over the real wire: stalled heads and bodies
//! (slowloris), oversized bodies and heads, 10,000 connections opened and
//! dropped, malformed UTF-8 and deeply nested JSON. After each, the server
//! is alive, serving, and stored nothing it should not have
//! (docs/http-codec.md limits; spec 01 §3–§5, 03 §3.1).

mod rest_support;

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use rest_support::*;
use serde_json::{json, Value};
use testkit::{HttpClient, Response, Server};

/// Connect and write `bytes` without reading anything.
fn stall(addr: std::net::SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.write_all(bytes).expect("write partial request");
    s
}

fn parse(bytes: &[u8]) -> Response {
    Response::parse(bytes)
        .unwrap_or_else(|| panic!("no HTTP response in {:?}", String::from_utf8_lossy(bytes)))
}

fn session_count(s: &Server) -> usize {
    admin_sessions(s).len()
}

#[test]
fn slowloris_heads_and_bodies_do_not_block_other_clients() {
    let mut s = start();
    let f = fix(&s, &[]);
    let mut stalled = Vec::new();
    for i in 0..40 {
        let (addr, bytes): (_, &[u8]) = match i % 4 {
            // A partial head on each port.
            0 => (s.client_addr, b"GET /healthz HTTP/1.1\r\nhost: x\r\n"),
            1 => (s.admin_addr, b"GET /admin/v1/profiles HTTP/1.1\r\nhost"),
            // A complete head announcing a body that never fully arrives.
            2 => (
                s.client_addr,
                b"POST /api/v1/sessions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"cli",
            ),
            // Just the start of a request line.
            _ => (s.client_addr, b"PO"),
        };
        stalled.push(stall(addr, bytes));
    }
    // A byte-at-a-time sender, running alongside.
    let addr = s.client_addr;
    let dribbler = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        for b in b"GET /healthz HTTP/1.1\r\nhost: slow\r\nx-pad: aaaaaaaaaaaaaaaaaaaa\r\n" {
            if c.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        c
    });
    // Meanwhile everybody else is served promptly.
    let t = Instant::now();
    for _ in 0..30 {
        assert_healthy(&s, Duration::from_secs(2));
        s.client()
            .bearer(&f.skey)
            .timeout(Duration::from_secs(2))
            .get(&format!("/api/v1/sessions/{}/events", f.sid))
            .assert_status(200);
        s.admin()
            .timeout(Duration::from_secs(2))
            .get("/admin/v1/keys")
            .assert_status(200);
    }
    let p = profile(&s, &[]);
    let (_, ck) = key(&s, &p);
    testkit::fixtures::open_session(&s, &ck, json!({}));
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    let slow = dribbler.join().unwrap();
    // The stalled body never created a session.
    let n = session_count(&s);
    drop(stalled);
    drop(slow);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(session_count(&s), n);
    assert_serving(&mut s);
}

#[test]
fn oversized_bodies_get_413_then_close() {
    let mut s = start();
    let f = fix(&s, &[]);
    let before = session_count(&s);
    let big = 2 * 1024 * 1024;
    let cases: Vec<(std::net::SocketAddr, String)> = vec![
        (
            s.client_addr,
            format!(
                "POST /api/v1/sessions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: {big}\r\n\r\n{{\"client_version\":\"",
                f.client_key
            ),
        ),
        (
            s.client_addr,
            format!(
                "POST /api/v1/sessions/{}/rpc HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-length: {big}\r\n\r\n{{",
                f.sid, f.skey
            ),
        ),
        (
            s.admin_addr,
            format!(
                "POST /admin/v1/profiles HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-length: {big}\r\n\r\n{{",
                s.admin_key
            ),
        ),
        // Chunked: the running total crosses the limit.
        (
            s.client_addr,
            format!(
                "POST /api/v1/sessions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n200000\r\n",
                f.client_key
            ),
        ),
        // Keep-alive does not keep a rejected connection.
        (
            s.client_addr,
            format!("GET /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: {big}\r\nconnection: keep-alive\r\n\r\n"),
        ),
    ];
    for (addr, head) in cases {
        let t = Instant::now();
        let (bytes, closed) = raw_exchange(addr, head.as_bytes(), Duration::from_secs(5));
        let r = parse(&bytes);
        assert_problem(&r, 413, "payload_too_large");
        assert!(closed, "connection left open after 413: {head:.60}");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    }
    // Just under the limit is parsed (and rejected only as a bad body).
    let mut body = b"{\"client_version\":\"".to_vec();
    body.resize(1024 * 1024 - 2, b'a');
    body.extend_from_slice(b"\"}");
    assert_eq!(body.len(), 1024 * 1024);
    let r = s.client().bearer(&f.client_key).request(
        "POST",
        "/api/v1/sessions",
        &[("content-type", "application/json")],
        &body,
    );
    r.assert_status(201);
    assert_eq!(session_count(&s), before + 1);
    assert_serving(&mut s);
}

#[test]
fn oversized_and_malformed_heads_are_rejected_cleanly() {
    let mut s = start();
    let long_path = format!("GET /{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(20_000));
    let mut many = String::from("GET /healthz HTTP/1.1\r\nhost: x\r\n");
    for i in 0..100 {
        many.push_str(&format!("x-h{i}: v\r\n"));
    }
    many.push_str("\r\n");
    let big_header = format!(
        "GET /healthz HTTP/1.1\r\nauthorization: Bearer {}\r\n\r\n",
        "b".repeat(17_000)
    );
    for (req, status) in [
        (long_path.as_str(), 431),
        (many.as_str(), 431),
        (big_header.as_str(), 431),
        ("GARBAGE\r\n\r\n", 400),
        ("GET /healthz HTTP/9.9\r\n\r\n", 505),
        ("GET /healthz HTTP/1.1\nhost: x\n\n", 400),
        (
            "POST /api/v1/sessions HTTP/1.1\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n",
            400,
        ),
        ("POST /api/v1/sessions HTTP/1.1\r\ncontent-length: -1\r\n\r\n", 400),
    ] {
        let (bytes, closed) = raw_exchange(s.client_addr, req.as_bytes(), Duration::from_secs(5));
        let r = parse(&bytes);
        assert_eq!(r.status, status, "{req:.60}: {}", r.text());
        assert!(closed, "{req:.60}: connection left open");
        assert_healthy(&s, Duration::from_secs(2));
    }
    assert_serving(&mut s);
}

#[test]
fn ten_thousand_connections_opened_and_dropped_while_healthz_answers() {
    let mut s = start();
    let f = fix(&s, &[]);
    let t = Instant::now();
    let mut worst = Duration::ZERO;
    let batch = 500;
    for round in 0..(10_000 / batch) {
        let mut conns = Vec::with_capacity(batch);
        for i in 0..batch {
            let addr = if i % 10 == 0 {
                s.admin_addr
            } else {
                s.client_addr
            };
            let Ok(mut c) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
                panic!("connect failed in round {round}");
            };
            match i % 5 {
                // Half a request, then gone.
                0 => {
                    let _ = c.write_all(b"GET /api/v1/sessions/x/events HTTP/1.1\r\nhost");
                }
                // A full request whose answer nobody reads.
                1 => {
                    let _ = c.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n");
                }
                // Reset instead of FIN.
                2 => {
                    let _ = c.set_linger_zero();
                }
                _ => {}
            }
            conns.push(c);
        }
        // Health during the batch (connections still open).
        let h = Instant::now();
        assert_healthy(&s, Duration::from_secs(2));
        worst = worst.max(h.elapsed());
        for c in conns.drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        drop(conns);
        let h = Instant::now();
        assert_healthy(&s, Duration::from_secs(2));
        worst = worst.max(h.elapsed());
    }
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(90),
        "10k connections took {took:?}"
    );
    eprintln!("10,000 connections in {took:?}; worst /healthz {worst:?}");
    // Authenticated work still flows.
    s.client()
        .bearer(&f.skey)
        .get(&format!("/api/v1/sessions/{}/events", f.sid))
        .assert_status(200);
    assert_serving(&mut s);
}

/// `set_linger(Some(0))` without the unstable std API: a tiny shim.
trait LingerZero {
    fn set_linger_zero(&self) -> std::io::Result<()>;
}

impl LingerZero for TcpStream {
    fn set_linger_zero(&self) -> std::io::Result<()> {
        // Not available on stable std; fall back to an abortive shutdown of
        // the write half only, which still exercises an early close.
        self.shutdown(Shutdown::Write)
    }
}

fn rpc_frames(s: &Server, sid: &str, skey: &str, body: &[u8]) -> (u16, Option<String>, Vec<Value>) {
    let r = post_raw(
        &s.client(),
        &format!("/api/v1/sessions/{sid}/rpc"),
        skey,
        Some("application/json"),
        body,
    );
    let frames = r
        .text()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad frame {l:?}: {e}")))
        .collect();
    (
        r.status,
        r.header("content-type").map(str::to_string),
        frames,
    )
}

#[test]
fn malformed_utf8_bodies_get_clear_errors() {
    let mut s = start();
    let f = fix(&s, &[]);
    let before = session_count(&s);
    let n_events = events(&s, &f.sid, &f.skey).len();
    let bodies: [&[u8]; 4] = [
        b"{\"client_version\":\"\xff\xfe\"}",
        b"\xc3\x28",
        b"{\"tools\":[{\"name\":\"\xed\xa0\x80\"}]}",
        b"\x80\x80\x80\x80",
    ];
    for body in bodies {
        let r = post_raw(
            &s.client(),
            "/api/v1/sessions",
            &f.client_key,
            Some("application/json"),
            body,
        );
        assert_problem(&r, 400, "bad_request");
        let r = post_raw(
            &s.client(),
            &format!("/api/v1/sessions/{}/join", f.sid),
            &f.client_key,
            Some("application/json"),
            body,
        );
        assert_problem(&r, 400, "bad_request");
        let r = s.admin().request(
            "POST",
            "/admin/v1/profiles",
            &[("content-type", "application/json")],
            body,
        );
        assert_problem(&r, 400, "bad_request");
        let (status, ct, frames) = rpc_frames(&s, &f.sid, &f.skey, body);
        assert_eq!(status, 200);
        assert!(ct.unwrap_or_default().starts_with("application/x-ndjson"));
        assert_eq!(
            frames,
            [
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}})
            ]
        );
    }
    // Invalid UTF-8 in a header value and in the path.
    let (bytes, _) = raw_exchange(
        s.client_addr,
        b"GET /api/v1/sessions/ses_x/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer \xff\xfe\r\nconnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    assert_problem(&parse(&bytes), 401, "unauthorized");
    let (bytes, _) = raw_exchange(
        s.client_addr,
        b"GET /api/v1/sessions/%FF%FE/events HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    assert_problem(&parse(&bytes), 401, "unauthorized");
    assert_eq!(session_count(&s), before);
    assert_eq!(events(&s, &f.sid, &f.skey).len(), n_events);
    assert_serving(&mut s);
}

#[test]
fn deeply_nested_json_gets_clear_errors_without_a_crash() {
    let mut s = start();
    let f = fix(&s, &[]);
    let before = session_count(&s);
    let n_events = events(&s, &f.sid, &f.skey).len();
    // Deep, but under the 1 MiB body limit (objects: 5 bytes per level).
    let depth = 100_000;
    let arrays = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let objects = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
    let in_field = format!("{{\"client_version\":\"x\",\"tools\":{arrays}}}");
    let unclosed = "[".repeat(depth);
    for body in [&arrays, &objects, &in_field, &unclosed] {
        let r = post_raw(
            &s.client(),
            "/api/v1/sessions",
            &f.client_key,
            Some("application/json"),
            body.as_bytes(),
        );
        assert_problem(&r, 400, "bad_request");
        let r = s.admin().request(
            "POST",
            "/admin/v1/profiles",
            &[("content-type", "application/json")],
            body.as_bytes(),
        );
        assert_problem(&r, 400, "bad_request");
        assert!(s.is_running(), "crashed:\n{}", s.stderr_log());
    }
    // JSON-RPC: a clear error frame with id null, HTTP 200 NDJSON.
    let nested_params = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session.registerDriver\",\"params\":{objects}}}"
    );
    for body in [&arrays, &objects, &nested_params, &unclosed] {
        let (status, _, frames) = rpc_frames(&s, &f.sid, &f.skey, body.as_bytes());
        assert_eq!(status, 200);
        assert_eq!(frames.len(), 1, "{frames:?}");
        let code = frames[0]["error"]["code"].as_i64();
        assert!(
            matches!(code, Some(-32700) | Some(-32600)),
            "{:?}",
            frames[0]
        );
        assert!(frames[0]["id"].is_null(), "{:?}", frames[0]);
        assert!(s.is_running(), "crashed:\n{}", s.stderr_log());
    }
    // Nothing registered, nothing stored.
    let parts = s
        .client()
        .bearer(&f.skey)
        .get(&format!("/api/v1/sessions/{}/participants", f.sid))
        .json();
    assert_eq!(parts, json!({"drivers": []}));
    assert_eq!(session_count(&s), before);
    assert_eq!(events(&s, &f.sid, &f.skey).len(), n_events);
    assert_serving(&mut s);
}

#[test]
fn keep_alive_pipelining_and_garbage_after_a_request() {
    let mut s = start();
    // Several pipelined requests on one connection, then garbage.
    let mut req = Vec::new();
    for _ in 0..20 {
        req.extend_from_slice(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n");
    }
    req.extend_from_slice(
        b"GET /api/v1/meta HTTP/1.1\r\nhost: x\r\n\r\n\x00\x01\x02 garbage\r\n\r\n",
    );
    let (bytes, closed) = raw_exchange(s.client_addr, &req, Duration::from_secs(5));
    let text = String::from_utf8_lossy(&bytes);
    assert_eq!(text.matches("HTTP/1.1 200").count(), 21, "{text}");
    assert!(text.contains("\"api_versions\""));
    assert!(text.contains("HTTP/1.1 400"), "{text}");
    assert!(closed);
    // A keep-alive client gets many answers on one connection.
    let c = HttpClient::new(s.client_addr);
    let mut conn = c.connect().unwrap();
    for _ in 0..50 {
        conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .unwrap();
    }
    conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = std::io::Read::read_to_end(&mut conn, &mut out);
    assert_eq!(
        String::from_utf8_lossy(&out)
            .matches("HTTP/1.1 200")
            .count(),
        51
    );
    assert_serving(&mut s);
}
