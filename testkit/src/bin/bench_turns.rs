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

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use testkit::bench::boot::{Baesrv, Otlp};
use testkit::bench::turns::{self, unit, FanoutResult, Kind, LoadResult};
use testkit::bench::{self, err, llm, ms, open_session_on, percentile, Conn, Res, Session};

/// A profile allowing `get_time` on the `mock` provider, and one client key.
fn client_key(srv: &Baesrv) -> Res<String> {
    bench::client_key(srv.admin_addr, &srv.admin_key, "mock")
}

fn open_session(srv: &Baesrv, key: &str, tools: bool) -> Res<Session> {
    open_session_on(&mut Conn::open(srv.addr)?, key, tools)
}

// ---------------------------------------------------------------------------
// Scenarios.

/// Units per session before a worker moves to a fresh one: keeps the
/// provider-facing history (re-sent in full on every provider call and
/// logged in every `provider.request`) at conversation-like sizes instead of
/// growing with the length of the run.
const UNITS_PER_SESSION: u64 = 20;

fn load(
    srv: &Baesrv,
    key: &str,
    kind: Kind,
    clients: usize,
    secs: f64,
    per_session: u64,
) -> Res<LoadResult> {
    turns::load(
        srv.addr,
        Some(srv.child.id()),
        key,
        kind,
        clients,
        secs,
        per_session,
    )
}

fn fanout(srv: &Baesrv, key: &str, observers: usize, turns: usize) -> Res<FanoutResult> {
    let addr = srv.addr;
    let count = |s: &Session| bench::count_events(addr, s);
    turns::fanout(addr, Some(srv.child.id()), key, observers, turns, &count)
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
    let mock = llm::start("127.0.0.1:0")?;
    let srv = Baesrv::start(&bin, mock, otlp.as_ref(), database_url.as_deref())?;
    let per_session = if session_per_unit {
        1
    } else {
        UNITS_PER_SESSION
    };
    let key = client_key(&srv)?;
    if let Some(clients) = only {
        // Load scenarios at one concurrency, nothing else (telemetry runs).
        println!("| scenario | clients | units | per second | p50 | p99 | server CPU/unit |");
        println!("|---|---|---|---|---|---|---|");
        for (kind, name) in [
            (Kind::Text, "full text turns"),
            (Kind::ToolRoundTrip, "client-tool round trips"),
        ] {
            let r = load(&srv, &key, kind, clients, secs, per_session)?;
            let (p50, p99) = (ms(r.p50), ms(r.p99));
            println!(
                "| {name} | {clients} | {} | {:.0} | {p50} | {p99} | {:.3} ms |",
                r.units,
                r.per_sec,
                r.cpu_per_unit().unwrap_or_default().as_secs_f64() * 1e3
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
            let r = load(&srv, &key, kind, clients, secs, per_session)?;
            println!(
                "| {name} | {clients} | {} | {:.0} | {} | {} | {:.3} ms |",
                r.units,
                r.per_sec,
                ms(r.p50),
                ms(r.p99),
                r.cpu_per_unit().unwrap_or_default().as_secs_f64() * 1e3
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
