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
//!   the last token it carries), p50/p99/max.
//!
//! ```text
//! cargo build --release -p io-smol -p testkit
//! BAESRV_BIN=$PWD/target/release/baesrv target/release/bench_stream [--turns 50] [--cpu-turns 200]
//! ```

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::bench::{cpu_time, ms, percentile as pct};
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

fn fanout(b: &Bench) {
    b.mock.set_stream_timing(paced());
    b.mock.set_default(Reply::text(answer()));
    let mut jobs = Vec::new();
    let start = Arc::new(Barrier::new(SESSIONS * (OBSERVERS + 1) + 1));
    for i in 0..SESSIONS {
        let (sid, skey) = session(b, &b.streamed_key);
        let marker = format!("fan-{i}-{}", unique_name("m"));
        for _ in 0..OBSERVERS {
            let (_, client) = fixtures::create_key(&b.server, &b.streamed_profile);
            let okey = fixtures::join_session(&b.server, &sid, &client, json!({}));
            let mut s = RawStream::open(
                &b.server,
                &sid,
                &okey,
                &json!({"jsonrpc": "2.0", "id": 1, "method": "session.subscribe",
                        "params": {"extensions": ["turn.deltas"]}}),
            );
            let (go, marker) = (start.clone(), marker.clone());
            jobs.push(thread::spawn(move || {
                go.wait();
                let mut out = Vec::new();
                let mut len = 0;
                while let Some(line) = s.next_line() {
                    let now = Instant::now();
                    let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                    if v["method"] == "session.delta" {
                        len += v["params"]["text"].as_str().map_or(0, str::len);
                        out.push((now, len));
                        if len >= TOKENS * TOKEN_CHARS {
                            break;
                        }
                    }
                }
                (marker, out)
            }));
        }
        let (go, addr) = (start.clone(), b.server.client().addr);
        jobs.push(thread::spawn(move || {
            go.wait();
            let request = json!({"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage",
                                 "params": {"message": {"role": "user", "content": marker}}});
            let _ = read_turn(&mut RawStream::open_at(addr, &sid, &skey, &request));
            (String::new(), Vec::new())
        }));
    }
    start.wait();
    let mut lags = Vec::new();
    for j in jobs {
        let (marker, deltas) = j.join().expect("reader");
        if marker.is_empty() {
            continue;
        }
        let writes = b.mock.stream_writes(seq_of(&b.mock, &marker));
        for (at, len) in deltas {
            if let Some(w) = token_written(&writes, len) {
                lags.push(at.saturating_duration_since(w));
            }
        }
    }
    lags.sort();
    println!(
        "## {SESSIONS} concurrent streaming turns × {OBSERVERS} observers ({} deltas read)",
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
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let b = boot();
    first_delta(&b, arg(&args, "--turns", 50));
    cpu(&b, arg(&args, "--cpu-turns", 200));
    fanout(&b);
}
