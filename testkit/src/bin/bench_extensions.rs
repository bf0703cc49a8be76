//! `bench_extensions`: the cost of the opt-in extensions (never run by
//! tests).
//!
//! * **Stalled gapless observers**: 64 `subscribe.gapless` observers of one
//!   session; 8 of them stop reading for the event phase and then drain.
//!   A driver writes `--events` events of ~2 KiB (`reportLocalSubagent`) at
//!   `--rate` per second. Reported: delivery lag p50/p99 of the 56 healthy
//!   observers (driver call issued → frame read), events lost or repeated
//!   (any observer, stalled ones included), and the server's RSS growth over
//!   the phase, against the same run with nobody stalled.
//! * **Idempotent retry**: p50/p99 of a fresh `sendMessage` turn with an
//!   `idempotency_key`, and of a retry of a finished key (answered from the
//!   log, no provider call).
//!
//! ```text
//! cargo build --release -p io-smol -p testkit
//! BAESRV_BIN=$PWD/target/release/baesrv target/release/bench_extensions [--events 3000] [--rate 500]
//! ```

use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::bench::{ms, percentile as pct};
use testkit::fixtures::{self, provider_toml, unique_name};
use testkit::http::next_rpc_id;
use testkit::ndjson::RawStream;
use testkit::{MockProvider, Reply, Server, ServerOptions};

const OBSERVERS: usize = 64;
const STALLED: usize = 8;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib(pid: u32) -> u64 {
    testkit::bench::rss_kib(pid).map_or(0, |(rss, _)| rss)
}

struct Phase {
    healthy_lags: Vec<Duration>,
    bad_observers: usize,
    rss_growth_kib: i64,
}

/// One event phase with `stalled` observers not reading until it ends.
fn phase(server: &Server, key: &str, stalled: usize, events: usize, rate: usize) -> Phase {
    let (sid, skey) = fixtures::open_session(server, key, json!({}));
    fixtures::register_driver(server, &sid, &skey);
    let issued: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; events]));
    let phase_over = Arc::new(Barrier::new(stalled + 1));
    let ready = Arc::new(Barrier::new(OBSERVERS + 1));
    let mut handles = Vec::new();
    for o in 0..OBSERVERS {
        let stall = o < stalled;
        let (issued, ready, phase_over) = (issued.clone(), ready.clone(), phase_over.clone());
        let mut s = RawStream::open(
            server,
            &sid,
            &skey,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "session.subscribe",
                    "params": {"extensions": ["subscribe.gapless"]}}),
        );
        handles.push(thread::spawn(move || -> (Vec<Duration>, bool) {
            ready.wait();
            if stall {
                phase_over.wait();
            }
            let mut lags = Vec::new();
            let mut next = 0usize;
            let mut ok = true;
            while next < events {
                let Some(line) = s.next_line() else {
                    ok = false;
                    break;
                };
                let now = Instant::now();
                let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                let n: Option<usize> = v["params"]["payload"]["subagent_id"]
                    .as_str()
                    .and_then(|t| t.strip_prefix("sba_"))
                    .and_then(|t| t.parse().ok());
                let Some(n) = n else { continue };
                if n != next {
                    ok = false;
                    break;
                }
                next += 1;
                if !stall {
                    if let Some(t0) = issued.lock().unwrap()[n] {
                        lags.push(now.duration_since(t0));
                    }
                }
            }
            (lags, ok)
        }));
    }
    ready.wait();
    thread::sleep(Duration::from_millis(300));
    let pid = server.pid().expect("server pid");
    let before = rss_kib(pid);
    let mut peak = before;
    let detail = "x".repeat(2048);
    let gap = Duration::from_secs_f64(1.0 / rate as f64);
    let start = Instant::now();
    for n in 0..events {
        let due = start + gap * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        issued.lock().unwrap()[n] = Some(Instant::now());
        let (_, t) = server.client().rpc(
            &sid,
            &skey,
            "session.reportLocalSubagent",
            json!({"state": "running", "subagent_id": format!("sba_{n}"), "harness": "h",
                   "model": "m", "detail": detail}),
            next_rpc_id(),
        );
        assert!(t.get("result").is_some(), "{t}");
        if n % 100 == 0 {
            peak = peak.max(rss_kib(pid));
        }
    }
    thread::sleep(Duration::from_millis(300));
    peak = peak.max(rss_kib(pid));
    phase_over.wait();
    let mut healthy_lags = Vec::new();
    let mut bad = 0;
    for h in handles {
        let (lags, ok) = h.join().expect("observer");
        bad += usize::from(!ok);
        healthy_lags.extend(lags);
    }
    healthy_lags.sort();
    Phase {
        healthy_lags,
        bad_observers: bad,
        rss_growth_kib: peak as i64 - before as i64,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let events = arg(&args, "--events", 3000);
    let rate = arg(&args, "--rate", 500);
    let n = arg(&args, "--n", 200);
    let mock = MockProvider::start();
    mock.set_default(Reply::text("ok"));
    let config = provider_toml(&[("main", "anthropic", &mock.base_url, "m", "tok")]);
    let server = Server::start(
        ServerOptions::new()
            .bin(Server::binary_path())
            .config(&config)
            .env("RUST_LOG", "warn"),
    );
    let profile = fixtures::create_profile_json(
        &server,
        &json!({"name": unique_name("bench"), "primary_provider": "main"}),
    );
    let (_, key) = fixtures::create_key(&server, &profile);

    println!("| stalled observers | healthy lag p50 | healthy lag p99 | observers with loss or repeats | RSS growth |");
    println!("|---|---|---|---|---|");
    // A discarded warm-up phase first: the allocator's first growth would
    // otherwise be charged to whichever phase runs first.
    phase(&server, &key, 0, events, rate);
    let mut growth = Vec::new();
    for stalled in [0, STALLED] {
        let p = phase(&server, &key, stalled, events, rate);
        println!(
            "| {stalled} of {OBSERVERS} | {} | {} | {} | {} KiB |",
            ms(pct(&p.healthy_lags, 0.50)),
            ms(pct(&p.healthy_lags, 0.99)),
            p.bad_observers,
            p.rss_growth_kib
        );
        growth.push(p.rss_growth_kib);
    }
    println!(
        "RSS growth per stalled observer (vs nobody stalled): {} KiB",
        (growth[1] - growth[0]) / STALLED as i64
    );

    // Idempotent retry vs fresh turn.
    let (sid, skey) = fixtures::open_session(&server, &key, json!({}));
    let (_, t) = server.client().rpc(
        &sid,
        &skey,
        "session.registerDriver",
        json!({"extensions": ["send.idempotent"]}),
        next_rpc_id(),
    );
    assert_eq!(t["result"]["registered"], true);
    let send = |k: usize| {
        let t0 = Instant::now();
        let (_, t) = server.client().rpc(
            &sid,
            &skey,
            "session.sendMessage",
            json!({"message": {"content": format!("m{k}")}, "idempotency_key": format!("k{k}")}),
            next_rpc_id(),
        );
        assert!(t.get("result").is_some(), "{t}");
        t0.elapsed()
    };
    let mut fresh: Vec<Duration> = (0..n).map(send).collect();
    let mut retry: Vec<Duration> = (0..n).map(send).collect();
    fresh.sort();
    retry.sort();
    println!();
    println!("| sendMessage with idempotency_key (n={n}, one session) | p50 | p99 |");
    println!("|---|---|---|");
    println!(
        "| fresh turn | {} | {} |",
        ms(pct(&fresh, 0.5)),
        ms(pct(&fresh, 0.99))
    );
    println!(
        "| retry of a finished key | {} | {} |",
        ms(pct(&retry, 0.5)),
        ms(pct(&retry, 0.99))
    );
    assert_eq!(mock.request_count(), n, "retries never reach the provider");
}
