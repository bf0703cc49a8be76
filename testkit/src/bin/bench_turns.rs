//! `bench_turns`: load generator for the live session loop (never run by
//! tests). It boots the real `baesrv` next to this executable against a
//! built-in zero-latency mock provider on loopback and measures:
//!
//! * full text turns (`session.sendMessage` → final answer) at concurrency
//!   1, 8 and 64 (one session per client);
//! * client-tool round trips (`sendMessage` → paused `tool_use` →
//!   `sendMessage` with the `tool_result` → final answer);
//! * K observers (`session.subscribe`) of one session while a driver runs
//!   turns: events/s delivered and delivery lag.
//!
//! Latencies are client round trips against a mock that answers from a
//! precomputed body with no delay, i.e. the time the server (and the
//! loopback hops) add. Usage:
//!
//! ```text
//! cargo build --release -p io-smol -p testkit
//! target/release/bench_turns [--secs 3] [--turns 100] [--baesrv PATH]
//!     [--otlp URL [--otlp-protocol grpc|http/protobuf]] [--only CLIENTS]
//!     [--database-url postgres://…] [--session-per-unit]
//! ```
//!
//! `--session-per-unit` opens and registers a fresh session inside every
//! timed unit (open + registerDriver + sends), instead of rotating every
//! 20 units outside the timing. Every load row also reports the server's
//! CPU time (all threads, from `/proc`) per unit.
//!
//! `--database-url` runs the server on that (empty) PostgreSQL database
//! instead of a fresh SQLite file.
//!
//! Std-only blocking clients, one OS thread per simulated client, keep-alive
//! connections. Prints a Markdown table.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use proto::http::peer::{ResponseDecoder, ResponseEvent};
use serde_json::{json, Value};
use testkit::bench::{cpu_time, ms, percentile};
use testkit::http::next_event;

type Res<T> = Result<T, String>;

fn err<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

// ---------------------------------------------------------------------------
// Minimal keep-alive HTTP/1.1 client (responses read with proto's strict
// decoder).

struct Conn {
    sock: TcpStream,
    decoder: ResponseDecoder,
    buf: Vec<u8>,
    host: String,
}

struct Resp {
    status: u16,
    body: Vec<u8>,
}

impl Conn {
    fn open(addr: SocketAddr) -> Res<Conn> {
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

    fn send_head(
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

    fn next(&mut self) -> Res<ResponseEvent> {
        next_event(&mut self.sock, &mut self.decoder, &mut self.buf)
            .map_err(err("read"))?
            .ok_or_else(|| "connection closed".to_string())
    }

    /// Reads the status line and headers; returns the status.
    fn read_head(&mut self) -> Res<u16> {
        match self.next()? {
            ResponseEvent::Head(h) => Ok(h.status),
            other => Err(format!("expected a response head, got {other:?}")),
        }
    }

    /// Appends the next piece of the body (one chunk of a chunked one) to
    /// `out`; false at the end of the body.
    fn read_data(&mut self, out: &mut Vec<u8>) -> Res<bool> {
        match self.next()? {
            ResponseEvent::Data(d) => {
                out.extend(d);
                Ok(true)
            }
            ResponseEvent::End { .. } => Ok(false),
            other => Err(format!("expected body data, got {other:?}")),
        }
    }

    fn request(
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

    fn json(&mut self, method: &str, path: &str, bearer: Option<&str>, body: &Value) -> Res<Value> {
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
    fn rpc(&mut self, session: &str, key: &str, method: &str, params: Value) -> Res<Value> {
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

// ---------------------------------------------------------------------------
// Zero-latency mock provider (Anthropic Messages).

fn mock_provider() -> Res<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(err("bind mock"))?;
    let addr = listener.local_addr().map_err(err("mock addr"))?;
    thread::spawn(move || {
        let next_id = Arc::new(AtomicU64::new(0));
        for conn in listener.incoming().flatten() {
            let next_id = next_id.clone();
            thread::spawn(move || {
                let _ = serve_mock(conn, &next_id);
            });
        }
    });
    Ok(addr)
}

const TEXT_BODY: &str = r#"{"id":"msg_bench","type":"message","role":"assistant","model":"bench","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}}"#;

/// Answers `tool_use` (tool `get_time`) when tools are advertised and the
/// last message carries no `tool_result`; text otherwise.
fn mock_answer(body: &[u8], next_id: &AtomicU64) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let has_tools = v["tools"].as_array().is_some_and(|t| !t.is_empty());
    let last_has_result = v["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"));
    if has_tools && !last_has_result {
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        json!({"id": "msg_bench", "type": "message", "role": "assistant", "model": "bench",
               "content": [{"type": "tool_use", "id": format!("tu_{id}"), "name": "get_time", "input": {}}],
               "stop_reason": "tool_use", "stop_sequence": null,
               "usage": {"input_tokens": 10, "output_tokens": 5}})
        .to_string()
    } else {
        TEXT_BODY.to_string()
    }
}

fn serve_mock(conn: TcpStream, next_id: &AtomicU64) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut writer = conn.try_clone()?;
    let mut reader = BufReader::with_capacity(64 * 1024, conn);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut len = 0usize;
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; len];
        reader.read_exact(&mut body)?;
        let answer = mock_answer(&body, next_id);
        let resp = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        writer.write_all(resp.as_bytes())?;
    }
}

// ---------------------------------------------------------------------------
// The server under test.

struct Baesrv {
    child: Child,
    addr: SocketAddr,
    admin_addr: SocketAddr,
    admin_key: String,
    dir: PathBuf,
    /// Units a load worker runs on one session before opening the next
    /// (`--session-per-unit` makes it 1).
    units_per_session: u64,
}

impl Drop for Baesrv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_addr() -> Res<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(err("bind probe"))?;
    l.local_addr().map_err(err("probe addr"))
}

/// `--otlp URL [--otlp-protocol P]`: the server exports telemetry there.
struct Otlp {
    endpoint: String,
    protocol: String,
}

fn start_baesrv(
    bin: &Path,
    mock: SocketAddr,
    otlp: Option<&Otlp>,
    database_url: Option<&str>,
) -> Res<Baesrv> {
    let dir = std::env::temp_dir().join(format!("bench-turns-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(err("temp dir"))?;
    let config = format!(
        "[[providers.entries]]\nname = \"mock\"\nprovider = \"anthropic\"\nbase_url = \"http://{mock}\"\nmodel = \"bench\"\nauth_token = \"t\"\n"
    );
    let telemetry = otlp.map_or(String::new(), |o| {
        format!(
            "\n[telemetry]\nenabled = true\notlp_endpoint = \"{}\"\notlp_protocol = \"{}\"\n",
            o.endpoint, o.protocol
        )
    });
    std::fs::write(dir.join("bae-config.toml"), config + &telemetry).map_err(err("config"))?;
    let (addr, admin_addr) = (free_addr()?, free_addr()?);
    let mut cmd = Command::new(bin);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("BAE_") {
            cmd.env_remove(k);
        }
    }
    let child = cmd
        .env("BAE_ADDR", addr.to_string())
        .env("BAE_ADMIN_ADDR", admin_addr.to_string())
        .env("BAE_DB_PATH", dir.join("bae.db"))
        .env("BAE_ADMIN_KEY_FILE", dir.join("admin-key"))
        .env("BAE_ADMIN_KEY_HASH_FILE", dir.join("admin-key-hash"))
        .env("BAE_CONFIG", dir.join("bae-config.toml"))
        .env("BAE_LOG", "warn")
        // Metrics are exported during a run too.
        .env("OTEL_METRIC_EXPORT_INTERVAL", "1000")
        .env("BAE_DATABASE_URL", database_url.unwrap_or(""))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("spawning {}: {e}", bin.display()))?;
    let mut srv = Baesrv {
        child,
        addr,
        admin_addr,
        admin_key: String::new(),
        dir,
        units_per_session: UNITS_PER_SESSION,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ok = Conn::open(addr)
            .and_then(|mut c| c.request("GET", "/healthz", None, b""))
            .is_ok_and(|r| r.status == 200);
        if ok {
            break;
        }
        if Instant::now() > deadline {
            return Err("baesrv did not become ready".into());
        }
        thread::sleep(Duration::from_millis(20));
    }
    srv.admin_key = std::fs::read_to_string(srv.dir.join("admin-key"))
        .map_err(err("admin key file"))?
        .trim()
        .to_string();
    Ok(srv)
}

struct Session {
    id: String,
    key: String,
}

/// A profile allowing `get_time` and one client key.
fn client_key(srv: &Baesrv) -> Res<String> {
    let mut admin = Conn::open(srv.admin_addr)?;
    let bearer = Some(srv.admin_key.as_str());
    let p = admin.json(
        "POST",
        "/admin/v1/profiles",
        bearer,
        &json!({"name": format!("bench-{}", std::process::id()), "primary_provider": "mock",
                "allowed_tools": ["get_time"]}),
    )?;
    let k = admin.json(
        "POST",
        "/admin/v1/keys",
        bearer,
        &json!({"name": "bench", "profile_id": p["id"]}),
    )?;
    Ok(k["key"].as_str().unwrap_or_default().to_string())
}

fn open_session(srv: &Baesrv, key: &str, tools: bool) -> Res<Session> {
    open_session_on(&mut Conn::open(srv.addr)?, key, tools)
}

/// Opens and registers a session over an existing connection.
fn open_session_on(c: &mut Conn, key: &str, tools: bool) -> Res<Session> {
    let body = if tools {
        json!({"tools": [{"name": "get_time", "input_schema": {"type": "object"}}]})
    } else {
        json!({})
    };
    let v = c.json("POST", "/api/v1/sessions", Some(key), &body)?;
    let s = Session {
        id: v["session_id"].as_str().unwrap_or_default().to_string(),
        key: v["session_key"].as_str().unwrap_or_default().to_string(),
    };
    c.rpc(&s.id, &s.key, "session.registerDriver", json!({}))?;
    Ok(s)
}

// ---------------------------------------------------------------------------
// Scenarios.

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Text,
    ToolRoundTrip,
}

/// One unit of work: a text turn, or a paused turn plus its resume.
fn unit(c: &mut Conn, s: &Session, kind: Kind, i: u64) -> Res<()> {
    let t = c.rpc(
        &s.id,
        &s.key,
        "session.sendMessage",
        json!({"message": {"role": "user", "content": format!("hello {i}")}}),
    )?;
    if kind == Kind::Text {
        return Ok(());
    }
    let id = t["result"]["message"]["content"]
        .as_array()
        .and_then(|c| c.iter().find(|b| b["type"] == "tool_use"))
        .and_then(|b| b["id"].as_str())
        .ok_or("the turn did not pause on a tool_use")?
        .to_string();
    let t = c.rpc(
        &s.id,
        &s.key,
        "session.sendMessage",
        json!({"message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": "12:00"}
        ]}}),
    )?;
    if t["result"]["message"]["content"][0]["type"] != "text" {
        return Err(format!("resume did not complete: {t}"));
    }
    Ok(())
}

struct LoadResult {
    per_sec: f64,
    /// Server CPU time (all threads) per unit over the timed window.
    cpu_per_unit: Duration,
    p50: Duration,
    p99: Duration,
    units: usize,
}

/// Units per session before a worker moves to a fresh one: keeps the
/// provider-facing history (re-sent in full on every provider call and
/// logged in every `provider.request`) at conversation-like sizes instead of
/// growing with the length of the run.
const UNITS_PER_SESSION: u64 = 20;

fn load(srv: &Baesrv, key: &str, kind: Kind, clients: usize, secs: f64) -> Res<LoadResult> {
    let per_session = srv.units_per_session;
    let tools = kind == Kind::ToolRoundTrip;
    let barrier = Arc::new(Barrier::new(clients + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for _ in 0..clients {
        let first = open_session(srv, key, tools)?;
        let (barrier, stop, addr) = (barrier.clone(), stop.clone(), srv.addr);
        let key = key.to_string();
        handles.push(thread::spawn(move || -> Res<Vec<Duration>> {
            let mut c = Conn::open(addr)?;
            let mut s = first;
            for i in 0..3 {
                unit(&mut c, &s, kind, i)?; // warm-up
            }
            barrier.wait();
            let mut lat = Vec::new();
            let mut i = 3;
            while !stop.load(Ordering::Relaxed) {
                // A session per unit (the issue's "open + register +
                // sends" unit) times its open; rotation otherwise does not.
                if i % per_session == 0 && per_session > 1 {
                    s = open_session_on(&mut c, &key, tools)?;
                }
                let t0 = Instant::now();
                if per_session == 1 {
                    s = open_session_on(&mut c, &key, tools)?;
                }
                unit(&mut c, &s, kind, i)?;
                lat.push(t0.elapsed());
                i += 1;
            }
            Ok(lat)
        }));
    }
    barrier.wait();
    let t0 = Instant::now();
    let cpu0 = cpu_time(srv.child.id()).ok_or("reading the server's CPU time")?;
    thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let cpu = cpu_time(srv.child.id()).ok_or("reading the server's CPU time")? - cpu0;
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.join().map_err(|_| "worker panicked")??);
    }
    let elapsed = t0.elapsed().as_secs_f64();
    all.sort();
    Ok(LoadResult {
        per_sec: all.len() as f64 / elapsed,
        cpu_per_unit: cpu / (all.len().max(1) as u32),
        p50: percentile(&all, 0.50),
        p99: percentile(&all, 0.99),
        units: all.len(),
    })
}

struct FanoutResult {
    events_per_sec: f64,
    lag_p50: Duration,
    lag_p99: Duration,
    lost: usize,
}

/// `observers` subscribers on one session; a driver runs `turns` text
/// turns. Lag = time from the driver issuing turn i to an observer
/// receiving that turn's `client.message.send`.
fn fanout(srv: &Baesrv, key: &str, observers: usize, turns: usize) -> Res<FanoutResult> {
    let s = open_session(srv, key, false)?;
    let issued: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; turns]));
    let ready = Arc::new(Barrier::new(observers + 1));
    let mut handles = Vec::new();
    for _ in 0..observers {
        let (addr, id, skey) = (srv.addr, s.id.clone(), s.key.clone());
        let (issued, ready) = (issued.clone(), ready.clone());
        handles.push(thread::spawn(
            move || -> Res<(usize, Vec<Duration>, Instant)> {
                let mut c = Conn::open(addr)?;
                let body =
                    json!({"jsonrpc": "2.0", "id": 1, "method": "session.subscribe", "params": {}});
                c.send_head(
                    "POST",
                    &format!("/api/v1/sessions/{id}/rpc"),
                    Some(&skey),
                    body.to_string().as_bytes(),
                )?;
                c.read_head()?;
                ready.wait();
                let (mut n, mut lags, mut last) = (0usize, Vec::new(), Instant::now());
                let mut buf = Vec::new();
                while c.read_data(&mut buf)? {
                    while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = buf.drain(..=pos).collect();
                        let now = Instant::now();
                        let v: Value = serde_json::from_slice(&line).map_err(err("frame"))?;
                        n += 1;
                        last = now;
                        let ev = &v["params"];
                        if ev["event_type"] == "client.message.send" {
                            let i: usize = ev["payload"]["content"]
                                .as_str()
                                .and_then(|t| t.strip_prefix("hello "))
                                .and_then(|t| t.parse().ok())
                                .unwrap_or(usize::MAX);
                            if let Some(Some(t0)) = issued.lock().unwrap().get(i).copied() {
                                lags.push(now.duration_since(t0));
                            }
                        }
                    }
                }
                Ok((n, lags, last))
            },
        ));
    }
    ready.wait();
    // Give every subscription time to attach before the first event.
    thread::sleep(Duration::from_millis(200));
    let mut driver = Conn::open(srv.addr)?;
    let t0 = Instant::now();
    for i in 0..turns {
        issued.lock().unwrap()[i] = Some(Instant::now());
        driver.rpc(
            &s.id,
            &s.key,
            "session.sendMessage",
            json!({"message": {"role": "user", "content": format!("hello {i}")}}),
        )?;
    }
    // Let the fan-out drain, then end every subscription.
    let expected = turns * 4;
    thread::sleep(Duration::from_millis(300));
    driver.rpc(&s.id, &s.key, "session.unsubscribe", json!({}))?;
    let (mut delivered, mut lags, mut last) = (0usize, Vec::new(), t0);
    let mut lost = 0;
    for h in handles {
        let (n, l, at) = h.join().map_err(|_| "observer panicked")??;
        lost += expected.saturating_sub(n);
        delivered += n;
        lags.extend(l);
        last = last.max(at);
    }
    lags.sort();
    Ok(FanoutResult {
        events_per_sec: delivered as f64 / last.duration_since(t0).as_secs_f64(),
        lag_p50: percentile(&lags, 0.50),
        lag_p99: percentile(&lags, 0.99),
        lost,
    })
}

/// p50 round trips of simpler requests at concurrency 1, to attribute the
/// turn latency: no store write (`/healthz`, repeated `registerDriver`),
/// one durable write (`updateClientTools`), a full text turn (two group
/// commits around one provider call).
fn breakdown(srv: &Baesrv, key: &str, n: usize) -> Res<Vec<(&'static str, Duration)>> {
    let s = open_session(srv, key, false)?;
    let mut c = Conn::open(srv.addr)?;
    let mut out = Vec::new();
    let mut time = |name: &'static str, f: &mut dyn FnMut(&mut Conn) -> Res<()>| -> Res<()> {
        let mut lat = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            f(&mut c)?;
            lat.push(t0.elapsed());
        }
        lat.sort();
        out.push((name, percentile(&lat, 0.5)));
        Ok(())
    };
    time("GET /healthz", &mut |c| {
        c.request("GET", "/healthz", None, b"").map(|_| ())
    })?;
    time("registerDriver (repeat: no write)", &mut |c| {
        c.rpc(&s.id, &s.key, "session.registerDriver", json!({}))
            .map(|_| ())
    })?;
    time("updateClientTools (one durable write)", &mut |c| {
        c.rpc(
            &s.id,
            &s.key,
            "session.updateClientTools",
            json!({"tools": []}),
        )
        .map(|_| ())
    })?;
    let (mut i, mut turn_session) = (0, None);
    time("sendMessage text turn", &mut |c| {
        if i % UNITS_PER_SESSION == 0 {
            turn_session = Some(open_session_on(c, key, false)?);
        }
        i += 1;
        unit(c, turn_session.as_ref().expect("session"), Kind::Text, i)
    })?;
    Ok(out)
}

fn run() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let mut secs = 3.0;
    let mut turns = 100;
    let mut otlp: Option<Otlp> = None;
    let mut protocol = "grpc".to_string();
    let mut only: Option<usize> = None;
    let mut database_url = None;
    let mut session_per_unit = false;
    let mut bin = std::env::current_exe()
        .map_err(err("current exe"))?
        .with_file_name(format!("baesrv{}", std::env::consts::EXE_SUFFIX));
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--secs" => secs = val()?.parse().map_err(err("--secs"))?,
            "--turns" => turns = val()?.parse().map_err(err("--turns"))?,
            "--baesrv" => bin = PathBuf::from(val()?),
            "--otlp" => {
                otlp = Some(Otlp {
                    endpoint: val()?,
                    protocol: String::new(),
                })
            }
            "--otlp-protocol" => protocol = val()?,
            "--only" => only = Some(val()?.parse().map_err(err("--only"))?),
            "--database-url" => database_url = Some(val()?),
            "--session-per-unit" => session_per_unit = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if let Some(o) = otlp.as_mut() {
        o.protocol = protocol;
    }
    let mock = mock_provider()?;
    let mut srv = start_baesrv(&bin, mock, otlp.as_ref(), database_url.as_deref())?;
    if session_per_unit {
        srv.units_per_session = 1;
    }
    let key = client_key(&srv)?;
    if let Some(clients) = only {
        // Load scenarios at one concurrency, nothing else (telemetry runs).
        println!("| scenario | clients | units | per second | p50 | p99 | server CPU/unit |");
        println!("|---|---|---|---|---|---|---|");
        for (kind, name) in [
            (Kind::Text, "full text turns"),
            (Kind::ToolRoundTrip, "client-tool round trips"),
        ] {
            let r = load(&srv, &key, kind, clients, secs)?;
            let (p50, p99) = (ms(r.p50), ms(r.p99));
            println!(
                "| {name} | {clients} | {} | {:.0} | {p50} | {p99} | {:.3} ms |",
                r.units,
                r.per_sec,
                r.cpu_per_unit.as_secs_f64() * 1e3
            );
        }
        return Ok(());
    }
    println!("| request at concurrency 1 | p50 |");
    println!("|---|---|");
    for (name, p50) in breakdown(&srv, &key, 300)? {
        println!("| {name} | {} |", ms(p50));
    }
    println!();
    println!("| scenario | clients | units | per second | p50 | p99 | server CPU/unit |");
    println!("|---|---|---|---|---|---|---|");
    for (kind, name) in [
        (Kind::Text, "full text turns"),
        (Kind::ToolRoundTrip, "client-tool round trips"),
    ] {
        for clients in [1, 8, 64] {
            let r = load(&srv, &key, kind, clients, secs)?;
            println!(
                "| {name} | {clients} | {} | {:.0} | {} | {} | {:.3} ms |",
                r.units,
                r.per_sec,
                ms(r.p50),
                ms(r.p99),
                r.cpu_per_unit.as_secs_f64() * 1e3
            );
        }
    }
    println!();
    println!(
        "| observers of one session | turns | events/s delivered | lag p50 | lag p99 | lost |"
    );
    println!("|---|---|---|---|---|---|");
    for observers in [1, 8, 64] {
        let r = fanout(&srv, &key, observers, turns)?;
        println!(
            "| {observers} | {turns} | {:.0} | {} | {} | {} |",
            r.events_per_sec,
            ms(r.lag_p50),
            ms(r.lag_p99),
            r.lost
        );
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench_turns: {e}");
        std::process::exit(1);
    }
}
