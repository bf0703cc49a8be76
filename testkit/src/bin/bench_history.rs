//! `bench_history`: what a long session costs the database (never run by
//! tests). Boots the real `baesrv` against testkit's mock provider and runs
//! one session of `--turns` sequential text turns (user message of
//! `--text` bytes, reply of `--reply` bytes, no compaction). At each
//! checkpoint (`--at`, comma-separated turn counts) it reports:
//!
//! * paging the whole session with `GET …/events?limit=100`: total time,
//!   slowest page, and one page from the middle of the log;
//! * after a graceful stop (which checkpoints the WAL into the main file),
//!   the size of the database file (and of the WAL, if one is left);
//!
//! then restarts the server on the same database and goes on. Every
//! `provider.request` event carries the whole provider-facing history, so
//! what the server stores per turn is what this measures.
//!
//! ```text
//! cargo build --release -p io-smol -p testkit
//! BAESRV_BIN=$PWD/target/release/baesrv target/release/bench_history [--turns 1000] [--at 250,1000] [--storage shared|whole]
//!     [--page-limit 100] [--max-page-bytes N]
//! ```
//!
//! Each row also gives the largest page body and the server's peak RSS
//! (`VmHWM`) after paging: with large messages, what one page answer
//! holds in memory (`--max-page-bytes` sets `BAE_MAX_PAGE_BYTES`).
//!
//! `--cpu` measures the long-session curve instead (no paging, no
//! restarts): at each checkpoint of `--at`, the server's CPU per turn (all
//! its threads, from `/proc/<pid>/task/*/schedstat` read around each turn;
//! median and mean of the `--window` turns centred on it, so that turn 10
//! is not only the first, cold turns), the server's page faults per turn,
//! this process's CPU per turn (the client parsing the answers and the
//! mock parsing the requests: it must not starve the server), the turn's
//! round trip, the provider request's size, and the time this process
//! takes to copy that many bytes once (the floor item 5 of the
//! prompt-caching issue compares against). `--cache` turns prompt caching
//! on for the provider entry.
//!
//! ```text
//! BAESRV_BIN=$PWD/target/release/baesrv target/release/bench_history --cpu \
//!     --turns 2000 --at 10,100,500,1000,2000 [--window 20] [--storage shared|whole] [--cache]
//! ```

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::bench::{ms, percentile};
use testkit::fixtures::{self, provider_toml, unique_name};
use testkit::{MockProvider, Reply, Server, ServerOptions};

struct Args {
    turns: usize,
    at: Vec<usize>,
    text: usize,
    reply: usize,
    /// `--storage shared` (default, `BAE_SHARED_HISTORY=1`) or `whole`.
    shared: bool,
    page_limit: usize,
    max_page_bytes: Option<usize>,
    /// `--cpu`: the CPU-per-turn curve instead of paging.
    cpu: bool,
    window: usize,
    cache: bool,
    /// `--env K=V`: extra server environment.
    env: Vec<(String, String)>,
}

fn args() -> Args {
    let mut a = Args {
        turns: 1000,
        at: vec![250, 1000],
        text: 100,
        reply: 200,
        shared: true,
        page_limit: 100,
        max_page_bytes: None,
        cpu: false,
        window: 20,
        cache: false,
        env: Vec::new(),
    };
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    // Flags without a value.
    argv.retain(|f| match f.as_str() {
        "--cpu" => {
            a.cpu = true;
            false
        }
        "--cache" => {
            a.cache = true;
            false
        }
        _ => true,
    });
    for pair in argv.chunks(2) {
        let val = pair
            .get(1)
            .unwrap_or_else(|| panic!("{} needs a value", pair[0]));
        let num = || -> usize {
            val.parse()
                .unwrap_or_else(|_| panic!("{} needs a number", pair[0]))
        };
        match pair[0].as_str() {
            "--turns" => a.turns = num(),
            "--at" => {
                a.at = val
                    .split(',')
                    .map(|s| s.trim().parse().expect("--at: turn counts"))
                    .collect()
            }
            "--text" => a.text = num(),
            "--reply" => a.reply = num(),
            "--storage" => a.shared = val == "shared",
            "--page-limit" => a.page_limit = num(),
            "--max-page-bytes" => a.max_page_bytes = Some(num()),
            "--window" => a.window = num().max(1),
            "--env" => {
                let (k, v) = val.split_once('=').expect("--env K=V");
                a.env.push((k.to_string(), v.to_string()));
            }
            other => panic!("unknown argument {other}"),
        }
    }
    if !a.at.contains(&a.turns) {
        a.at.push(a.turns);
    }
    a.at.sort_unstable();
    a.at.retain(|&n| n > 0 && n <= a.turns);
    a
}

/// `len` bytes of filler text that differs per turn.
fn filler(turn: usize, what: &str, len: usize) -> String {
    let mut s = format!("{what} {turn}:");
    while s.len() < len {
        s.push_str(" lorem ipsum dolor sit amet");
    }
    s.truncate(len);
    s
}

struct Paging {
    pages: usize,
    events: usize,
    bytes: usize,
    total: Duration,
    slowest: Duration,
    p50: Duration,
    middle: Duration,
    largest: usize,
}

/// Walks every page of the session's events (`limit=100`), then fetches
/// the page that starts at the middle of the log once more.
fn page_all(server: &Server, sid: &str, skey: &str, limit: usize) -> Paging {
    let client = server.client().bearer(skey);
    let mut cursor = String::new();
    let mut cursors = Vec::new();
    let mut times = Vec::new();
    let (mut events, mut bytes, mut largest) = (0, 0, 0);
    let start = Instant::now();
    loop {
        let t = Instant::now();
        let resp = client.get(&format!(
            "/api/v1/sessions/{sid}/events?limit={limit}&cursor={cursor}"
        ));
        times.push(t.elapsed());
        resp.assert_status(200);
        bytes += resp.body.len();
        largest = largest.max(resp.body.len());
        let page: Value = resp.json();
        events += page["items"].as_array().map_or(0, Vec::len);
        cursors.push(cursor.clone());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => break,
        }
    }
    let total = start.elapsed();
    let mid = &cursors[cursors.len() / 2];
    let t = Instant::now();
    client
        .get(&format!(
            "/api/v1/sessions/{sid}/events?limit={limit}&cursor={mid}"
        ))
        .assert_status(200);
    let middle = t.elapsed();
    let pages = times.len();
    times.sort_unstable();
    Paging {
        pages,
        events,
        bytes,
        total,
        slowest: *times.last().unwrap_or(&Duration::ZERO),
        p50: percentile(&times, 0.5),
        middle,
        largest,
    }
}

/// The server's peak RSS so far (`VmHWM`), in MB.
fn peak_rss_mb(server: &Server) -> f64 {
    let status = server
        .pid()
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn file_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

fn main() {
    let a = args();
    let bin = Server::binary_path();
    println!("baesrv: {}", bin.display());
    let mock = MockProvider::start();
    mock.set_default(Reply::text(filler(0, "reply", a.reply)));
    let mut config = provider_toml(&[("main", "anthropic", &mock.base_url, "mock-model", "tok")]);
    if a.cache {
        config.push_str("prompt_cache = true\n");
    }
    let mut opts = ServerOptions::new().bin(&bin).config(&config);
    println!("storage: {}", if a.shared { "shared" } else { "whole" });
    if a.shared {
        opts = opts.env("BAE_SHARED_HISTORY", "1");
    }
    // Large user messages need a larger request body limit.
    let body_limit = (a.text * 2 + 65536).max(1_048_576);
    opts = opts.env("BAE_MAX_BODY_BYTES", body_limit.to_string());
    if let Some(n) = a.max_page_bytes {
        opts = opts.env("BAE_MAX_PAGE_BYTES", n.to_string());
    }
    for (k, v) in &a.env {
        opts = opts.env(k, v);
    }
    let mut server = Server::start(opts);
    let profile = fixtures::create_profile(&server, &unique_name("hist"), "main", &[], &[]);
    let (_, key) = fixtures::create_key(&server, &profile);
    let (sid, skey) =
        fixtures::open_session(&server, &key, json!({"compaction": {"mode": "client"}}));
    fixtures::register_driver(&server, &sid, &skey);

    println!(
        "one session, {} text turns ({} B user text, {} B reply)\n",
        a.turns, a.text, a.reply
    );
    if a.cpu {
        return cpu_curve(&a, &server, &mock, &sid, &skey);
    }
    println!(
        "| turns | events | db file | wal | db bytes/turn since last | turn p50 / p99 (last 50) | \
         page all (limit={}) | page p50 / max | middle page | page bytes | largest page | peak RSS |",
        a.page_limit
    );
    println!("|---:|---:|---:|---:|---:|---|---|---|---|---:|---:|---:|");
    let mut turn_times: Vec<Duration> = Vec::new();
    let (mut last_turns, mut last_db) = (0usize, 0u64);
    for turn in 1..=a.turns {
        let t = Instant::now();
        let (_, terminal) =
            fixtures::send_message(&server, &sid, &skey, json!(filler(turn, "user", a.text)));
        turn_times.push(t.elapsed());
        assert!(terminal.get("result").is_some(), "turn {turn}: {terminal}");
        mock.clear_requests();
        if !a.at.contains(&turn) {
            continue;
        }
        let mut recent: Vec<Duration> = turn_times[turn_times.len().saturating_sub(50)..].to_vec();
        recent.sort_unstable();
        let p = page_all(&server, &sid, &skey, a.page_limit);
        let peak = peak_rss_mb(&server);
        server.stop();
        let db = server.db_path();
        let mut wal = db.clone().into_os_string();
        wal.push("-wal");
        let (db_len, wal_len) = (file_len(&db), file_len(std::path::Path::new(&wal)));
        let per_turn = (db_len.saturating_sub(last_db)) / (turn - last_turns) as u64;
        println!(
            "| {turn} | {} | {:.2} MB | {} B | {per_turn} B | {} / {} | {} ({} pages) | {} / {} | {} | {:.2} MB | {:.2} MB | {peak:.1} MB |",
            p.events,
            db_len as f64 / 1e6,
            wal_len,
            ms(percentile(&recent, 0.5)),
            ms(percentile(&recent, 0.99)),
            ms(p.total),
            p.pages,
            ms(p.p50),
            ms(p.slowest),
            ms(p.middle),
            p.bytes as f64 / 1e6,
            p.largest as f64 / 1e6,
        );
        (last_turns, last_db) = (turn, db_len);
        server.restart();
        fixtures::register_driver(&server, &sid, &skey);
    }
}

/// `--cpu`: the server's CPU per text turn at each checkpoint.
fn cpu_curve(a: &Args, server: &Server, mock: &MockProvider, sid: &str, skey: &str) {
    let pid = server.pid().expect("server pid");
    let me = std::process::id();
    println!(
        "| turn | request body | server CPU/turn p50 ({w} turns) | mean | server page faults/turn | \
         bench CPU/turn (client + mock) | copy of the body once | turn p50 |",
        w = a.window
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut cpu: Vec<Duration> = Vec::new();
    let mut own: Vec<Duration> = Vec::new();
    let mut faults: Vec<u64> = Vec::new();
    let mut lat: Vec<Duration> = Vec::new();
    let mut bodies: Vec<(usize, Vec<u8>)> = Vec::new();
    let half = a.window / 2;
    // Runs past the last checkpoint far enough to centre its window.
    let last = a.turns + half;
    for turn in 1..=last {
        let (c0, o0, f0) = (cpu_ns(pid), cpu_ns(me), minor_faults(pid));
        let t = Instant::now();
        let (_, terminal) =
            fixtures::send_message(server, sid, skey, json!(filler(turn, "user", a.text)));
        lat.push(t.elapsed());
        cpu.push(Duration::from_nanos(cpu_ns(pid).saturating_sub(c0)));
        own.push(Duration::from_nanos(cpu_ns(me).saturating_sub(o0)));
        faults.push(minor_faults(pid).saturating_sub(f0));
        assert!(terminal.get("result").is_some(), "turn {turn}: {terminal}");
        let body = mock
            .requests()
            .pop()
            .map(|r| r.raw_body)
            .unwrap_or_default();
        mock.clear_requests();
        if a.at.contains(&turn) {
            bodies.push((turn, body));
        }
    }
    for (turn, body) in bodies {
        // Turns `turn - half ..= turn + half - 1` (1-based), clipped.
        let from = turn.saturating_sub(half + 1).min(cpu.len() - 1);
        let to = (from + a.window).min(cpu.len());
        let p50 = |v: &[Duration]| {
            let mut v = v.to_vec();
            v.sort_unstable();
            percentile(&v, 0.5)
        };
        let recent = &cpu[from..to];
        let mean = recent.iter().sum::<Duration>() / recent.len() as u32;
        let mut f = faults[from..to].to_vec();
        f.sort_unstable();
        println!(
            "| {turn} | {} B | {:.3} ms | {:.3} ms | {} | {:.3} ms | {:.3} ms | {} |",
            body.len(),
            ms_f(p50(recent)),
            ms_f(mean),
            f[f.len() / 2],
            ms_f(p50(&own[from..to])),
            ms_f(copy_time(&body)),
            ms(p50(&lat[from..to])),
        );
    }
}

fn cpu_ns(pid: u32) -> u64 {
    testkit::bench::cpu_ns(pid)
}

/// Minor page faults of process `pid` so far (`/proc/<pid>/stat` field 10;
/// exited threads included).
fn minor_faults(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which ends at the last `)`.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    rest.split_whitespace()
        .nth(7)
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

fn ms_f(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Median time to copy `bytes` once into a fresh buffer (as a request is).
fn copy_time(bytes: &[u8]) -> Duration {
    let mut times: Vec<Duration> = (0..21)
        .map(|_| {
            let t = Instant::now();
            let copy = std::hint::black_box(bytes).to_vec();
            let e = t.elapsed();
            drop(std::hint::black_box(copy));
            e
        })
        .collect();
    times.sort_unstable();
    percentile(&times, 0.5)
}
