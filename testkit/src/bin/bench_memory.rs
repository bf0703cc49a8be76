//! `bench_memory`: whether memory comes back (never run by tests; figures in
//! docs/performance.md, "Memory that comes back").
//!
//! * **Large turns, then the session deleted**: one session, `--turns`
//!   turns whose user messages carry `--bytes` bytes each (every
//!   `provider.request` repeats the whole history, so the last ones are
//!   `turns × bytes` large), then `DELETE /api/v1/sessions/{id}`. Reported:
//!   RSS idle (before), right after the last turn, and 1, 2, 5 and 10 s
//!   after the delete, against the target of twice the idle figure within
//!   10 s.
//! * **Stalled gapless subscribers**: `subscribe.gapless` observers of one
//!   session that read nothing while a driver writes `--events` events of
//!   `--event-bytes` each (`reportLocalSubagent`), for 0, 8 and 64 stalled
//!   observers; then every observer reads the whole stream and must get
//!   every event once, in order. Reported: RSS growth at the peak of the
//!   flood over the idle figure before it, and per stalled observer beyond
//!   the run with none, against docs/extensions.md's bound (the window,
//!   `BAE_SUBSCRIBER_WINDOW_BYTES`, plus one event); and the peak while the
//!   observers then catch up from the log one after another.
//!
//! ```text
//! cargo build --release -p io-smol -p testkit
//! BAESRV_BIN=$PWD/target/release/baesrv target/release/bench_memory [--turns 15] [--bytes 900000] \
//!     [--events 5000] [--event-bytes 2048] [--only turns|gapless]
//! ```

use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::fixtures::{self, provider_toml, unique_name};
use testkit::http::next_rpc_id;
use testkit::ndjson::RawStream;
use testkit::{MockProvider, Reply, Server, ServerOptions};

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib(server: &Server) -> u64 {
    let pid = server.pid().expect("server pid");
    testkit::bench::rss_kib(pid).map_or(0, |(rss, _)| rss)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MB", kib as f64 / 1024.0)
}

/// A fresh server (its own database), a profile and a client key.
fn boot(mock: &MockProvider) -> (Server, String) {
    let config = provider_toml(&[("main", "anthropic", &mock.base_url, "m", "tok")]);
    let server = Server::start(
        ServerOptions::new()
            .bin(Server::binary_path())
            .config(&config)
            .env("BAE_LOG", "warn"),
    );
    let profile = fixtures::create_profile_json(
        &server,
        &json!({"name": unique_name("bench"), "primary_provider": "main"}),
    );
    let (_, key) = fixtures::create_key(&server, &profile);
    (server, key)
}

/// RSS once the server has been quiet long enough to trim its heap.
fn settled_rss(server: &Server) -> u64 {
    thread::sleep(Duration::from_millis(2_500));
    rss_kib(server)
}

fn large_turns(mock: &MockProvider, turns: usize, bytes: usize) {
    let (server, key) = boot(mock);
    let idle = settled_rss(&server);
    let (sid, skey) = fixtures::open_session(&server, &key, json!({}));
    fixtures::register_driver(&server, &sid, &skey);
    let text = "x".repeat(bytes);
    let started = Instant::now();
    for _ in 0..turns {
        let (_, t) = fixtures::send_message(&server, &sid, &skey, json!(text));
        assert!(t.get("result").is_some(), "{t:.300}");
    }
    let turns_secs = started.elapsed().as_secs_f64();
    let after_turns = rss_kib(&server);
    let deleted = server
        .client()
        .bearer(skey.clone())
        .delete(&format!("/api/v1/sessions/{sid}"));
    assert!(deleted.status < 300, "delete: {}", deleted.status);
    let t0 = Instant::now();
    let mut at = Vec::new();
    for mark in [1u64, 2, 5, 10] {
        let due = Duration::from_secs(mark);
        if let Some(wait) = due.checked_sub(t0.elapsed()) {
            thread::sleep(wait);
        }
        at.push(rss_kib(&server));
    }
    println!(
        "| {turns} turns of {} KB, then the session deleted | idle {} | after the turns {} \
         ({turns_secs:.1} s) | 1 s: {} | 2 s: {} | 5 s: {} | 10 s: {} | {} |",
        bytes / 1000,
        mib(idle),
        mib(after_turns),
        mib(at[0]),
        mib(at[1]),
        mib(at[2]),
        mib(at[3]),
        if at[3] <= 2 * idle {
            "within 2× idle"
        } else {
            "ABOVE 2× idle"
        }
    );
}

/// Growth of RSS during a flood with `stalled` gapless observers reading
/// nothing (KiB), after checking every observer then gets every event.
fn gapless(mock: &MockProvider, stalled: usize, events: usize, event_bytes: usize) -> i64 {
    let (server, key) = boot(mock);
    let (sid, skey) = fixtures::open_session(&server, &key, json!({}));
    fixtures::register_driver(&server, &sid, &skey);
    let mut observers: Vec<RawStream> = (0..stalled)
        .map(|_| {
            RawStream::open(
                &server,
                &sid,
                &skey,
                &json!({"jsonrpc": "2.0", "id": 1, "method": "session.subscribe",
                        "params": {"extensions": ["subscribe.gapless"]}}),
            )
        })
        .collect();
    let before = settled_rss(&server);
    let mut peak = before;
    let detail = "d".repeat(event_bytes);
    let c = server.client();
    for n in 0..events {
        let (_, t) = c.rpc(
            &sid,
            &skey,
            "session.reportLocalSubagent",
            json!({"state": "running", "subagent_id": format!("sba_{n}"), "harness": "h",
                   "model": "m", "detail": detail}),
            next_rpc_id(),
        );
        assert!(t.get("result").is_some(), "{t}");
        if n.is_multiple_of(50) {
            peak = peak.max(rss_kib(&server));
        }
    }
    thread::sleep(Duration::from_millis(300));
    peak = peak.max(rss_kib(&server));
    // Every stalled observer now reads everything, in order, once; while
    // they catch up from the log, RSS is sampled again.
    let mut catch_up_peak = rss_kib(&server);
    for (i, o) in observers.iter_mut().enumerate() {
        let mut next = 0usize;
        while next < events {
            if next.is_multiple_of(500) {
                catch_up_peak = catch_up_peak.max(rss_kib(&server));
            }
            let line = o
                .next_line()
                .unwrap_or_else(|| panic!("observer {i} ended after {next} of {events} events"));
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            let n: Option<usize> = v["params"]["payload"]["subagent_id"]
                .as_str()
                .and_then(|t| t.strip_prefix("sba_"))
                .and_then(|t| t.parse().ok());
            let Some(n) = n else { continue };
            assert_eq!(n, next, "observer {i}: event {n} where {next} was due");
            next += 1;
        }
    }
    let growth = peak as i64 - before as i64;
    println!(
        "| {stalled} stalled | {events} events of {} KB ({} MB) | before {} | peak {} | growth {} KiB \
         | peak while they catch up {} |",
        event_bytes / 1024,
        events * event_bytes / 1_000_000,
        mib(before),
        mib(peak),
        growth,
        mib(catch_up_peak)
    );
    growth
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let mock = MockProvider::start();
    mock.set_default(Reply::text("ok"));
    if only.as_deref().is_none_or(|o| o == "turns") {
        let turns = arg(&args, "--turns", 15);
        let bytes = arg(&args, "--bytes", 900_000);
        large_turns(&mock, turns, bytes);
    }
    if only.as_deref().is_none_or(|o| o == "gapless") {
        let events = arg(&args, "--events", 5_000);
        let event_bytes = arg(&args, "--event-bytes", 2_048);
        let none = gapless(&mock, 0, events, event_bytes);
        for stalled in [8usize, 64] {
            let g = gapless(&mock, stalled, events, event_bytes);
            println!(
                "  {stalled} stalled: {} KiB per stalled observer beyond the run with none",
                (g - none) / stalled as i64
            );
        }
    }
}
