//! `bench_stream`: streamed provider replies and `turn.deltas` (never run
//! by tests; docs/performance.md, "Streaming").
//!
//! * **first delta**: `--turns` streamed text turns, one at a time, against
//!   a mock that answers 200 tokens (4 characters each) after 300 ms to the
//!   first token at 10 ms per token. Reported: the first delta at the client
//!   minus the moment the mock wrote its first token (p50/p99), time to the
//!   first delta and to the terminal frame from the request.
//! * **cpu**: the same turns with no pacing and one character per delta
//!   (2,000 deltas a turn), streamed with `turn.deltas` and then unstreamed
//!   on the same server: server CPU (utime + stime from /proc) per turn of
//!   each, and the difference per 1,000 deltas.
//! * **fanout**: 64 sessions, each a driver and 4 opted-in observers, all
//!   sending at once, the mock paced as in the first part. Reported: delta
//!   delivery lag at the observers (frame read minus the mock's write of
//!   the last token it carries: both instants of this process's monotonic
//!   clock), p50/p99/max; the server's and this generator's CPU over the
//!   run, and the server's engine steps. Every reader is a task of one
//!   single-threaded event loop and the mock paces its streams on timers
//!   (one thread), so the generator's own cost stays small and shows.
//!   The turns start together, so their tokens come in lockstep (each
//!   10 ms, 64 chunks at once); `--stagger-ms` spreads the starts evenly
//!   over that span instead.
//!
//! ```text
//! cargo build --release -p io-smol -p testkit
//! BAESRV_BIN=$PWD/target/release/baesrv target/release/bench_stream [--turns 50] [--cpu-turns 200] \
//!     [--sessions 64] [--observers 4] [--stagger-ms 0] [--parts first,cpu,fanout]
//! ```

use std::borrow::Cow;
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use proto::http::peer::{ResponseDecoder, ResponseEvent};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Value};
use smol::io::AsyncWriteExt;
use smol::{Async, Timer};
use testkit::bench::{cpu_time, engine_steps_summary, ms, percentile as pct, Meter};
use testkit::fixtures::{self, unique_name};
use testkit::http::next_rpc_id;
use testkit::mock_provider::StreamTiming;
use testkit::ndjson::RawStream;
use testkit::{MockProvider, Reply, Server, ServerOptions};

const TOKENS: usize = 200;
const TOKEN_CHARS: usize = 4;
const OBSERVERS: usize = 4;
const SESSIONS: usize = 64;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn paced() -> StreamTiming {
    StreamTiming {
        first_token: Duration::from_millis(300),
        per_token: Duration::from_millis(10),
        token_chars: TOKEN_CHARS,
        ping_every: None,
    }
}

/// A reply of `TOKENS` tokens of `TOKEN_CHARS` ASCII characters.
fn answer() -> String {
    "abcd".repeat(TOKENS)
}

struct Bench {
    mock: MockProvider,
    server: Server,
    streamed_profile: String,
    streamed_key: String,
    plain_key: String,
}

fn boot() -> Bench {
    let mock = MockProvider::start();
    let mut config = String::new();
    for (name, extra) in [("streamed", "stream = true\n"), ("plain", "")] {
        config.push_str(&format!(
            "[[providers.entries]]\nname = \"{name}\"\nprovider = \"anthropic\"\nbase_url = \"{}\"\n\
             model = \"m\"\nauth_token = \"tok\"\nmax_tokens = 4096\n{extra}\n",
            mock.base_url
        ));
    }
    let server = Server::start(
        ServerOptions::new()
            .bin(Server::binary_path())
            .config(&config)
            .env("RUST_LOG", "warn")
            .env("BAE_MAX_CONNECTIONS", "2048"),
    );
    let profile = |primary: &str| {
        fixtures::create_profile_json(
            &server,
            &json!({"name": unique_name("bench"), "primary_provider": primary}),
        )
    };
    let (streamed_profile, plain_profile) = (profile("streamed"), profile("plain"));
    let streamed_key = fixtures::create_key(&server, &streamed_profile).1;
    let plain_key = fixtures::create_key(&server, &plain_profile).1;
    Bench {
        mock,
        server,
        streamed_profile,
        streamed_key,
        plain_key,
    }
}

/// A session with its creator registered (`turn.deltas`), and its key.
fn session(b: &Bench, key: &str) -> (String, String) {
    let (sid, skey) = fixtures::open_session(&b.server, key, json!({}));
    let (_, t) = b.server.client().rpc(
        &sid,
        &skey,
        "session.registerDriver",
        json!({"extensions": ["turn.deltas"]}),
        next_rpc_id(),
    );
    assert_eq!(t["result"]["registered"], true, "{t}");
    (sid, skey)
}

fn send(b: &Bench, sid: &str, skey: &str, text: &str) -> RawStream {
    RawStream::open(
        &b.server,
        sid,
        skey,
        &json!({"jsonrpc": "2.0", "id": next_rpc_id(), "method": "session.sendMessage",
                "params": {"message": {"role": "user", "content": text}}}),
    )
}

/// Reads a stream to its terminal frame: (each delta's arrival and the
/// text length so far, the terminal's arrival).
fn read_turn(s: &mut RawStream) -> (Vec<(Instant, usize)>, Instant) {
    let mut deltas = Vec::new();
    let mut len = 0;
    loop {
        let line = s.next_line().expect("stream ended early");
        let now = Instant::now();
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if v.get("id").is_some() {
            return (deltas, now);
        }
        if v["method"] == "session.delta" {
            len += v["params"]["text"].as_str().map_or(0, str::len);
            deltas.push((now, len));
        }
    }
}

/// The mock's request whose messages hold `marker`: its seq (1-based).
fn seq_of(mock: &MockProvider, marker: &str) -> u64 {
    let reqs = mock.requests();
    let i = (reqs.iter())
        .rposition(|r| r.messages().to_string().contains(marker))
        .expect("request of the marker");
    i as u64 + 1
}

/// When the mock wrote the token completing `len` characters of text.
fn token_written(writes: &[Instant], len: usize) -> Option<Instant> {
    // Events: message_start, content_block_start, then one per token.
    let token = len.div_ceil(TOKEN_CHARS).checked_sub(1)?;
    writes.get(token + 2).copied()
}

fn first_delta(b: &Bench, turns: usize) {
    b.mock.set_stream_timing(paced());
    b.mock.set_default(Reply::text(answer()));
    let (sid, skey) = session(b, &b.streamed_key);
    let (mut lag, mut first, mut last) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..=turns {
        let marker = format!("turn-{i}-{}", unique_name("m"));
        let t0 = Instant::now();
        let (deltas, end) = read_turn(&mut send(b, &sid, &skey, &marker));
        if i == 0 {
            continue; // warm-up
        }
        let writes = b.mock.stream_writes(seq_of(&b.mock, &marker));
        let (at, len) = deltas[0];
        let token = token_written(&writes, len).expect("mock write time");
        lag.push(at.saturating_duration_since(token));
        first.push(at - t0);
        last.push(end - t0);
    }
    for v in [&mut lag, &mut first, &mut last] {
        v.sort();
    }
    println!("## first delta ({turns} turns, 200 tokens, 300 ms to the first, 10 ms per token)");
    println!("| figure | p50 | p99 |");
    println!("|---|---|---|");
    println!(
        "| first delta at the client − mock's first token | {} | {} |",
        ms(pct(&lag, 0.5)),
        ms(pct(&lag, 0.99))
    );
    println!(
        "| request → first delta | {} | {} |",
        ms(pct(&first, 0.5)),
        ms(pct(&first, 0.99))
    );
    println!(
        "| request → terminal frame | {} | {} |",
        ms(pct(&last, 0.5)),
        ms(pct(&last, 0.99))
    );
}

fn cpu(b: &Bench, turns: usize) {
    b.mock.set_stream_timing(StreamTiming {
        first_token: Duration::ZERO,
        per_token: Duration::ZERO,
        token_chars: 1,
        ping_every: None,
    });
    let text = "x".repeat(2000);
    b.mock.set_default(Reply::text(text.clone()));
    let pid = b.server.pid().expect("server pid");
    let mut per_turn = Vec::new();
    let mut delta_count = 0;
    for key in [&b.streamed_key, &b.plain_key] {
        let (sid, skey) = session(b, key);
        read_turn(&mut send(b, &sid, &skey, "warm-up"));
        let before = cpu_time(pid).expect("cpu");
        let mut deltas = 0;
        for i in 0..turns {
            let (d, _) = read_turn(&mut send(b, &sid, &skey, &format!("cpu-{i}")));
            deltas += d.len();
        }
        let used = cpu_time(pid).expect("cpu") - before;
        per_turn.push(used / turns as u32);
        delta_count = delta_count.max(deltas);
    }
    let extra = per_turn[0].saturating_sub(per_turn[1]);
    let deltas_per_turn = delta_count as f64 / turns as f64;
    let per_1000 = extra.as_secs_f64() * 1000.0 / deltas_per_turn.max(1.0);
    println!("## server CPU ({turns} turns of 2,000 one-character tokens)");
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| streamed turn, deltas to its driver ({deltas_per_turn:.0} delta frames) | {} |",
        ms(per_turn[0])
    );
    println!("| the same turn unstreamed | {} |", ms(per_turn[1]));
    println!(
        "| streaming cost per 1,000 deltas | {:.3} ms |",
        per_1000 * 1000.0
    );
}

/// A `delta` frame as far as the bench needs it (borrowed where it can).
#[derive(Deserialize)]
struct Frame<'a> {
    #[serde(borrow)]
    method: Option<&'a str>,
    #[serde(borrow)]
    params: Option<FrameParams<'a>>,
    id: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct FrameParams<'a> {
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
}

/// What one NDJSON line is to a reader.
enum Line {
    /// A `session.delta` with this many bytes of text.
    Delta(usize),
    /// A `session.delta_discard`.
    Discard,
    /// The request's terminal frame.
    Terminal,
    Other,
}

fn classify(line: &[u8]) -> Line {
    let Ok(f) = serde_json::from_slice::<Frame>(line) else {
        return Line::Other;
    };
    match f.method {
        Some("session.delta") => Line::Delta(f.params.and_then(|p| p.text).map_or(0, |t| t.len())),
        Some("session.delta_discard") => Line::Discard,
        None if f.id.is_some() => Line::Terminal,
        _ => Line::Other,
    }
}

/// An NDJSON response read by a task of the generator's event loop.
struct Reader {
    sock: Async<TcpStream>,
    /// The last read emptied the socket: wait for readiness before the
    /// next (a read that would only say EAGAIN costs a system call).
    drained: bool,
    decoder: ResponseDecoder,
    buf: Vec<u8>,
    body: Vec<u8>,
    start: usize,
    /// When the read that brought the bytes being consumed returned.
    at: Instant,
}

impl Reader {
    /// Posts `request` to the session's rpc route; back once the head came.
    async fn open(addr: SocketAddr, sid: &str, key: &str, request: &Value) -> Reader {
        let mut sock = Async::<TcpStream>::connect(addr).await.expect("connect");
        sock.get_ref().set_nodelay(true).expect("nodelay");
        let body = serde_json::to_vec(request).expect("json");
        let mut req = format!(
            "POST /api/v1/sessions/{sid}/rpc HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(&body);
        sock.write_all(&req).await.expect("write request");
        let mut r = Reader {
            sock,
            drained: false,
            decoder: ResponseDecoder::new(),
            buf: vec![0; 64 * 1024],
            body: Vec::new(),
            start: 0,
            at: Instant::now(),
        };
        loop {
            match r.decoder.poll().expect("decode") {
                Some(ResponseEvent::Head(h)) => {
                    assert_eq!(h.status, 200, "{h:?}");
                    return r;
                }
                Some(_) => panic!("body before the head"),
                None => r.fill().await,
            }
        }
    }

    async fn fill(&mut self) {
        loop {
            if self.drained {
                self.sock.readable().await.expect("readable");
            }
            match self.sock.get_ref().read(&mut self.buf) {
                Ok(n) => {
                    assert!(n > 0, "stream closed early");
                    self.at = Instant::now();
                    self.drained = n < self.buf.len();
                    self.decoder.feed(&self.buf[..n]);
                    return;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => self.drained = true,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// The next line and when it arrived; `None` at the end of the body.
    async fn next(&mut self) -> Option<(Line, Instant)> {
        loop {
            if let Some(i) = self.body[self.start..].iter().position(|&b| b == b'\n') {
                let line = &self.body[self.start..self.start + i];
                self.start += i + 1;
                return Some((classify(line), self.at));
            }
            match self.decoder.poll().expect("decode") {
                Some(ResponseEvent::Data(d)) => {
                    self.body.drain(..self.start);
                    self.start = 0;
                    self.body.extend_from_slice(&d);
                }
                Some(ResponseEvent::End { .. }) => return None,
                Some(ResponseEvent::Head(_)) => {}
                None => self.fill().await,
            }
        }
    }
}

/// An observer: (each delta's arrival, text length so far), discards seen.
async fn observe(mut r: Reader) -> (Vec<(Instant, usize)>, usize) {
    let (mut out, mut len, mut discards) = (Vec::new(), 0, 0);
    while let Some((line, at)) = r.next().await {
        match line {
            Line::Delta(n) => {
                len += n;
                out.push((at, len));
                if len >= TOKENS * TOKEN_CHARS {
                    break;
                }
            }
            Line::Discard => discards += 1,
            _ => {}
        }
    }
    (out, discards)
}

/// `sessions` sessions streaming at once, each read by its driver and
/// `observers` opted-in subscribers; every reader a task of one
/// single-threaded event loop (the generator's CPU is printed), the mock's
/// streams paced by timers on one other thread.
fn fanout(b: &Bench, sessions: usize, observers: usize, stagger: Duration) {
    b.mock.set_stream_timing(paced());
    b.mock.set_default(Reply::text(answer()));
    let addr = b.server.client().addr;
    let mut plan = Vec::new();
    for i in 0..sessions {
        let (sid, skey) = session(b, &b.streamed_key);
        let marker = format!("fan-{i}-{}", unique_name("m"));
        let keys: Vec<String> = (0..observers)
            .map(|_| {
                let (_, client) = fixtures::create_key(&b.server, &b.streamed_profile);
                fixtures::join_session(&b.server, &sid, &client, json!({}))
            })
            .collect();
        plan.push((sid, skey, marker, keys));
    }
    let subscribe = json!({"jsonrpc": "2.0", "id": 1, "method": "session.subscribe",
                           "params": {"extensions": ["turn.deltas"]}});
    let ex = smol::LocalExecutor::new();
    let pid = b.server.pid();
    let (results, usage, frames) = smol::block_on(ex.run(async {
        // Every subscription is in place before any turn starts.
        let mut readers = Vec::new();
        for (sid, _, marker, keys) in &plan {
            for k in keys {
                readers.push((marker.clone(), Reader::open(addr, sid, k, &subscribe).await));
            }
        }
        let meter = Meter::start(pid);
        let watching: Vec<_> = (readers.into_iter())
            .map(|(marker, r)| (marker, ex.spawn(observe(r))))
            .collect();
        let t0 = Instant::now();
        let drivers: Vec<_> = (plan.iter().enumerate())
            .map(|(i, (sid, skey, marker, _))| {
                // Spread evenly over `stagger`: the streams' tokens then
                // come out of phase instead of all in the same instant.
                let at = t0 + stagger * i as u32 / sessions.max(1) as u32;
                let request = json!({"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage",
                                     "params": {"message": {"role": "user", "content": marker}}});
                let (sid, skey) = (sid.clone(), skey.clone());
                ex.spawn(async move {
                    Timer::at(at).await;
                    let mut r = Reader::open(addr, &sid, &skey, &request).await;
                    let mut deltas = 0;
                    while let Some((line, _)) = r.next().await {
                        match line {
                            Line::Delta(_) => deltas += 1,
                            Line::Terminal => break,
                            _ => {}
                        }
                    }
                    deltas
                })
            })
            .collect();
        let mut results = Vec::new();
        let mut frames = 0;
        for (marker, w) in watching {
            let (deltas, discards) = w.await;
            frames += deltas.len();
            results.push((marker, deltas, discards));
        }
        for d in drivers {
            frames += d.await;
        }
        (results, meter.finish(), frames)
    }));
    let (mut lags, mut discards) = (Vec::new(), 0);
    for (marker, deltas, d) in results {
        discards += d;
        let writes = b.mock.stream_writes(seq_of(&b.mock, &marker));
        for (at, len) in deltas {
            if let Some(w) = token_written(&writes, len) {
                lags.push(at.saturating_duration_since(w));
            }
        }
    }
    lags.sort();
    println!(
        "## {sessions} concurrent streaming turns × {observers} observers, starts spread over {} ({} deltas read, {discards} discards)",
        ms(stagger),
        lags.len()
    );
    println!("| delta lag p50 | p99 | max |");
    println!("|---|---|---|");
    println!(
        "| {} | {} | {} |",
        ms(pct(&lags, 0.5)),
        ms(pct(&lags, 0.99)),
        ms(*lags.last().unwrap_or(&Duration::ZERO))
    );
    let per_1000 = usage.server_per(frames).map(|d| d * 1000);
    println!(
        "{usage}; {frames} delta frames delivered, server CPU per 1,000: {}",
        per_1000.map_or("?".into(), ms)
    );
    let metrics = b.server.admin().get("/metrics");
    if let Some(steps) = engine_steps_summary(&String::from_utf8_lossy(&metrics.body)) {
        println!("{steps} (the whole run)");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let b = boot();
    let parts = (args.iter().position(|a| a == "--parts"))
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "first,cpu,fanout".into());
    if parts.contains("first") {
        first_delta(&b, arg(&args, "--turns", 50));
    }
    if parts.contains("cpu") {
        cpu(&b, arg(&args, "--cpu-turns", 200));
    }
    if parts.contains("fanout") {
        let sessions = arg(&args, "--sessions", SESSIONS);
        let observers = arg(&args, "--observers", OBSERVERS);
        let stagger = Duration::from_millis(arg(&args, "--stagger-ms", 0) as u64);
        fanout(&b, sessions, observers, stagger);
    }
}
