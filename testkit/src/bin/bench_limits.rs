//! `bench_limits`: provider rate limits under load (never run by tests;
//! docs/performance.md, "Provider traffic").
//!
//! `--sessions` sessions (64), each a driver sending `--turns` text turns
//! (10) one after another, all at once, against a mock provider that takes
//! `--delay-ms` (100) per reply and answers `429` with `Retry-After: 1` to
//! any call arriving while `--max` (8) others are in flight: its own limit
//! is `max / delay` calls per second. Three servers in turn, each fresh:
//!
//! * **limits + retry**: the entry has `[providers.entries.limits]
//!   max_concurrent = max` and `[providers.entries.retry] max_retries = 3`;
//! * **retry only**: the retry table alone;
//! * **off**: neither (the reference: every `429` fails its turn, there is
//!   no fallback).
//!
//! A turn whose providers all failed puts its session in `error` (the
//! reference): that client opens a new session for its next turn.
//! Per run: turns completed and failed, wall time, turns per second against
//! the mock's limit, the mock's calls served and refused and its most in
//! flight at once, turn latency p50/p99, and the server's CPU per completed
//! turn (utime + stime from /proc).
//!
//! ```text
//! cargo build --release -p io-smol -p testkit
//! BAESRV_BIN=$PWD/target/release/baesrv target/release/bench_limits [--sessions 64] [--turns 10]
//! ```

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::bench::{cpu_time, ms, percentile as pct};
use testkit::fixtures::{self, unique_name};
use testkit::http::{next_rpc_id, HttpClient};
use testkit::{MockProvider, Reply, Server, ServerOptions};

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Setup {
    sessions: usize,
    turns: usize,
    delay: Duration,
    max: usize,
}

/// One turn's outcome: its latency, or the error it ended with.
type Outcome = Result<Duration, String>;

/// A new session with its driver registered: (id, session key).
fn session(client: &HttpClient, key: &str) -> (String, String) {
    let resp = client
        .clone()
        .bearer(key)
        .post_json("/api/v1/sessions", &json!({}));
    resp.assert_status(201);
    let v = resp.json();
    let field = |k: &str| v[k].as_str().expect("session field").to_string();
    let (sid, skey) = (field("session_id"), field("session_key"));
    let (_, t) = client.rpc(
        &sid,
        &skey,
        "session.registerDriver",
        json!({}),
        next_rpc_id(),
    );
    assert_eq!(t["result"]["registered"], true, "{t}");
    (sid, skey)
}

/// A turn whose providers all failed still ends in a result (spec: the
/// session moves to `error`); its events carry the reason.
fn outcome(terminal: &Value, t0: Instant) -> Outcome {
    if let Some(e) = terminal.get("error") {
        return Err(format!("{} {}", e["code"], e["message"]));
    }
    let events = terminal["result"]["events"].as_array();
    let failed = events.into_iter().flatten().any(|e| {
        e["event_type"] == "session.error" && e["payload"]["reason"] == "all_providers_failed"
    });
    if failed {
        return Err("all providers failed (the session is in error)".into());
    }
    Ok(t0.elapsed())
}

fn run(label: &str, tables: &str, s: &Setup) {
    let mock = MockProvider::start();
    mock.limit_concurrency(s.max, "1");
    mock.set_default(Reply::text("done").delayed(s.delay));
    let config = format!(
        "[[providers.entries]]\nname = \"main\"\nprovider = \"anthropic\"\nbase_url = \"{}\"\n\
         model = \"m\"\nauth_token = \"tok\"\nmax_tokens = 64\n{tables}",
        mock.base_url
    );
    let server = Server::start(
        ServerOptions::new()
            .bin(Server::binary_path())
            .config(&config)
            .env("RUST_LOG", "warn")
            .env("BAE_MAX_CONNECTIONS", "2048"),
    );
    let profile = fixtures::create_profile_json(
        &server,
        &json!({"name": unique_name("bench"), "primary_provider": "main"}),
    );
    let key = fixtures::create_key(&server, &profile).1;
    let client = server.client().timeout(Duration::from_secs(120));
    let ready: Vec<(String, String)> = (0..s.sessions).map(|_| session(&client, &key)).collect();
    let pid = server.pid().expect("server pid");
    let start = Arc::new(Barrier::new(s.sessions + 1));
    let handles: Vec<_> = ready
        .into_iter()
        .map(|(sid, skey)| {
            let (start, client, key, turns) = (start.clone(), client.clone(), key.clone(), s.turns);
            thread::spawn(move || {
                start.wait();
                let (mut sid, mut skey) = (sid, skey);
                let mut out: Vec<Outcome> = Vec::with_capacity(turns);
                for i in 0..turns {
                    let t0 = Instant::now();
                    let (_, t) = client.rpc(
                        &sid,
                        &skey,
                        "session.sendMessage",
                        json!({"message": {"role": "user", "content": format!("turn {i}")}}),
                        next_rpc_id(),
                    );
                    let outcome = outcome(&t, t0);
                    if outcome.is_err() {
                        // The session is in `error` now: a client starts
                        // a new one for its next turn.
                        (sid, skey) = session(&client, &key);
                    }
                    out.push(outcome);
                }
                out
            })
        })
        .collect();
    let cpu0 = cpu_time(pid).unwrap_or_default();
    start.wait();
    let t0 = Instant::now();
    let outcomes: Vec<Outcome> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("client thread"))
        .collect();
    let wall = t0.elapsed();
    let cpu = cpu_time(pid).unwrap_or_default().saturating_sub(cpu0);
    let mut lat: Vec<Duration> = outcomes.iter().filter_map(|o| o.clone().ok()).collect();
    lat.sort();
    let ok = lat.len();
    let mut errors: Vec<String> = outcomes.into_iter().filter_map(Result::err).collect();
    errors.sort();
    errors.dedup();
    let failed = s.sessions * s.turns - ok;
    let stats = mock.limit_stats();
    let limit_rate = s.max as f64 / s.delay.as_secs_f64();
    let rate = ok as f64 / wall.as_secs_f64();
    let per_turn = if ok > 0 { cpu / ok as u32 } else { cpu };
    println!(
        "| {label} | {ok} | {failed} | {:.2} s | {rate:.1} ({:.0} % of {limit_rate:.0}) | {} / {} / {} | {} / {} | {} |",
        wall.as_secs_f64(),
        100.0 * rate / limit_rate,
        stats.served,
        stats.refused,
        stats.max_in_flight,
        ms(pct(&lat, 0.5)),
        ms(pct(&lat, 0.99)),
        ms(per_turn),
    );
    for e in errors {
        println!("  {label}: turns failed with: {e}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let s = Setup {
        sessions: arg(&args, "--sessions", 64) as usize,
        turns: arg(&args, "--turns", 10) as usize,
        delay: Duration::from_millis(arg(&args, "--delay-ms", 100)),
        max: arg(&args, "--max", 8) as usize,
    };
    let retry = "\n[providers.entries.retry]\nmax_retries = 3\nmax_wait_ms = 5000\n";
    let limits = format!("\n[providers.entries.limits]\nmax_concurrent = {}\n", s.max);
    println!(
        "{} sessions × {} turns; mock: {} ms per reply, 429 + Retry-After: 1 above {} in flight",
        s.sessions,
        s.turns,
        s.delay.as_millis(),
        s.max
    );
    println!("| entry tables | turns completed | failed | wall | turns/s (of the mock's limit) | mock served / refused / most in flight | latency p50 / p99 | server CPU per completed turn |");
    println!("|---|---|---|---|---|---|---|---|");
    run("limits + retry", &format!("{limits}{retry}"), &s);
    run("retry only", retry, &s);
    run("off (reference)", "", &s);
}
