//! `bench_kit`: every scenario of the performance table in one run, against
//! the `baesrv` next to this executable (booted fresh, the default) or any
//! BAE-compatible server already running (never run by tests).
//!
//! ```text
//! cargo build --release -p io-smol -p testkit
//! target/release/bench_kit [--secs 3] [--clients 64] [--sessions 10000]
//!     [--history-turns 250] [--page-limit 100] [--observer-turns 100]
//!     [--only opens|turns|paging|observers] [--pager scan|parse] [--bin PATH]
//! target/release/bench_kit --url http://127.0.0.1:8080 --admin-url http://127.0.0.1:8081 \
//!     --admin-key KEY [--pid PID] --mock-addr 127.0.0.1:9999 [--provider mock]
//! ```
//!
//! Against a running server, the kit's zero-latency mock provider listens on
//! `--mock-addr`; the server must have a provider entry (named `--provider`,
//! default `mock`) of kind `anthropic` whose `base_url` is
//! `http://<mock-addr>`. The kit creates its own profile and client key
//! through the admin API. Without `--pid` the server's CPU and RSS are not
//! read, and only rates and latencies are printed. "Fresh server" rows (idle
//! RSS, RSS after the opens) are only meaningful on a server just started.
//!
//! Pagers find each page's `next_cursor` by a byte search (`--pager scan`,
//! the default), so the generator costs little next to the server;
//! `--pager parse` skips every item through a JSON parser instead, as a
//! client that does not build them would.
//!
//! Each scenario also prints the CPU the server and this process (clients
//! and mock) used, and says when the generator, not the server, was the
//! limit.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use testkit::bench::boot::Baesrv;
use testkit::bench::turns::{self, Kind};
use testkit::bench::{
    self, err, llm, ms, open_session_on, percentile, rss_kib, Conn, HealthProbe, Meter, Pager, Res,
    Session, Usage,
};

struct Opts {
    secs: f64,
    clients: usize,
    sessions: usize,
    history_turns: usize,
    page_limit: usize,
    observer_turns: usize,
    bin: Option<PathBuf>,
    url: Option<SocketAddr>,
    admin_url: Option<SocketAddr>,
    admin_key: Option<String>,
    pid: Option<u32>,
    mock_addr: Option<String>,
    provider: String,
    only: Option<String>,
    pager: Pager,
}

const USAGE: &str = "usage: bench_kit [--secs S] [--clients C] [--sessions N] \
[--history-turns T] [--page-limit L] [--observer-turns T] [--only opens|turns|paging|observers] [--pager scan|parse] \
[--bin PATH | --url URL --admin-url URL --admin-key KEY --mock-addr IP:PORT [--pid PID] [--provider NAME]]";

/// `http://host:port[/]` (or a bare `host:port`) as a socket address.
fn parse_url(flag: &str, v: &str) -> Res<SocketAddr> {
    let rest = v.strip_prefix("http://").unwrap_or(v);
    if rest.starts_with("https://") || v.starts_with("https://") {
        return Err(format!(
            "{flag}: https is not supported by the kit's client"
        ));
    }
    let hostport = rest.trim_end_matches('/');
    hostport
        .to_socket_addrs()
        .map_err(err(flag))?
        .next()
        .ok_or_else(|| format!("{flag}: {v} resolves to nothing"))
}

fn parse_opts() -> Res<Opts> {
    let mut o = Opts {
        secs: 3.0,
        clients: 64,
        sessions: 10_000,
        history_turns: 250,
        page_limit: 100,
        observer_turns: 100,
        bin: None,
        url: None,
        admin_url: None,
        admin_key: None,
        pid: None,
        mock_addr: None,
        provider: "mock".into(),
        only: None,
        pager: Pager::Scan,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--secs" => o.secs = val()?.parse().map_err(err("--secs"))?,
            "--clients" => o.clients = val()?.parse().map_err(err("--clients"))?,
            "--sessions" => o.sessions = val()?.parse().map_err(err("--sessions"))?,
            "--history-turns" => {
                o.history_turns = val()?.parse().map_err(err("--history-turns"))?
            }
            "--page-limit" => o.page_limit = val()?.parse().map_err(err("--page-limit"))?,
            "--observer-turns" => {
                o.observer_turns = val()?.parse().map_err(err("--observer-turns"))?
            }
            "--bin" => o.bin = Some(PathBuf::from(val()?)),
            "--url" => o.url = Some(parse_url("--url", &val()?)?),
            "--admin-url" => o.admin_url = Some(parse_url("--admin-url", &val()?)?),
            "--admin-key" => o.admin_key = Some(val()?.trim().to_string()),
            "--pid" => o.pid = Some(val()?.parse().map_err(err("--pid"))?),
            "--mock-addr" => o.mock_addr = Some(val()?),
            "--provider" => o.provider = val()?,
            "--pager" => {
                o.pager = match val()?.as_str() {
                    "scan" => Pager::Scan,
                    "parse" => Pager::Parse,
                    other => return Err(format!("--pager: scan or parse, not {other:?}")),
                }
            }
            "--only" => {
                let v = val()?;
                if !["opens", "turns", "paging", "observers"].contains(&v.as_str()) {
                    return Err(format!(
                        "--only: one of opens, turns, paging, observers, not {v:?}"
                    ));
                }
                o.only = Some(v);
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if o.clients == 0 || o.sessions == 0 || o.page_limit == 0 || o.secs <= 0.0 {
        return Err("--clients, --sessions, --page-limit and --secs must be positive".into());
    }
    let external = [
        o.url.is_some(),
        o.admin_url.is_some(),
        o.admin_key.is_some(),
    ];
    if external.iter().any(|&x| x) && !external.iter().all(|&x| x) {
        return Err("--url, --admin-url and --admin-key go together".into());
    }
    if o.url.is_some() && o.mock_addr.is_none() {
        return Err("a running server needs --mock-addr (where its provider points)".into());
    }
    Ok(o)
}

/// The server under test.
struct Target {
    addr: SocketAddr,
    admin_addr: SocketAddr,
    admin_key: String,
    pid: Option<u32>,
    /// Kept alive for the run when the kit booted it.
    _booted: Option<Baesrv>,
}

impl Target {
    fn rss(&self) -> String {
        match self.pid.and_then(rss_kib) {
            Some((rss, hwm)) => format!("{:.1} MB (peak {:.1} MB)", mb(rss), mb(hwm)),
            None => "unknown (no --pid)".into(),
        }
    }

    fn rss_mb(&self) -> Option<f64> {
        self.pid.and_then(rss_kib).map(|(rss, _)| mb(rss))
    }
}

fn mb(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn cpu_ms(d: Option<Duration>) -> String {
    d.map_or("n/a".into(), |d| format!("{:.3} ms", d.as_secs_f64() * 1e3))
}

/// One line of the summary table.
struct Row {
    figure: &'static str,
    value: String,
    target: &'static str,
}

/// Session opens at `clients` until `total` are open: rate, latency, CPU.
fn opens(t: &Target, key: &str, clients: usize, total: usize) -> Res<(f64, Vec<Duration>, Usage)> {
    let left = Arc::new(AtomicUsize::new(total));
    let meter = Meter::start(t.pid);
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..clients {
        let (left, addr, key) = (left.clone(), t.addr, key.to_string());
        handles.push(thread::spawn(move || -> Res<Vec<Duration>> {
            let mut c = Conn::open(addr)?;
            let mut lat = Vec::new();
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                let t0 = Instant::now();
                c.json("POST", "/api/v1/sessions", Some(&key), &json!({}))?;
                lat.push(t0.elapsed());
            }
            Ok(lat)
        }));
    }
    let mut lat = Vec::new();
    for h in handles {
        lat.extend(h.join().map_err(|_| "client panicked")??);
    }
    let usage = meter.finish();
    lat.sort();
    Ok((lat.len() as f64 / t0.elapsed().as_secs_f64(), lat, usage))
}

/// What `clients` pagers saw walking one session's log for `secs`.
struct Paging {
    events: usize,
    pages: usize,
    bytes: usize,
    elapsed: Duration,
    usage: Usage,
}

/// `clients` pagers walk `s` for `secs`; a walk that counts no items
/// ([`Pager::Scan`]) counts as the `events_per_walk` the parsed first walk
/// found (the session does not change meanwhile).
fn paging(
    t: &Target,
    s: &Session,
    clients: usize,
    limit: usize,
    secs: f64,
    pager: Pager,
    events_per_walk: usize,
) -> Res<Paging> {
    let stop = Arc::new(AtomicBool::new(false));
    let meter = Meter::start(t.pid);
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..clients {
        let (stop, addr) = (stop.clone(), t.addr);
        let s = Session {
            id: s.id.clone(),
            key: s.key.clone(),
        };
        handles.push(thread::spawn(move || -> Res<(usize, usize, usize)> {
            let mut c = Conn::open(addr)?;
            let (mut e, mut p, mut b) = (0, 0, 0);
            while !stop.load(Ordering::Relaxed) {
                let w = bench::walk_events(&mut c, &s, limit, pager)?;
                let de = w.events.unwrap_or(events_per_walk);
                (e, p, b) = (e + de, p + w.pages, b + w.bytes);
            }
            Ok((e, p, b))
        }));
    }
    thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let (mut events, mut pages, mut bytes) = (0, 0, 0);
    for h in handles {
        let (e, p, b) = h.join().map_err(|_| "pager panicked")??;
        (events, pages, bytes) = (events + e, pages + p, bytes + b);
    }
    // Walks finish after the stop: count their whole time.
    let (elapsed, usage) = (t0.elapsed(), meter.finish());
    Ok(Paging {
        events,
        pages,
        bytes,
        elapsed,
        usage,
    })
}

fn run(o: Opts) -> Res<()> {
    let mock_bind = o.mock_addr.clone().unwrap_or_else(|| "127.0.0.1:0".into());
    let mock = llm::start(&mock_bind)?;
    let t = match (o.url, o.admin_url, o.admin_key.clone()) {
        (Some(addr), Some(admin_addr), Some(admin_key)) => Target {
            addr,
            admin_addr,
            admin_key,
            pid: o.pid,
            _booted: None,
        },
        _ => {
            let bin = match o.bin.clone() {
                Some(b) => b,
                None => std::env::current_exe()
                    .map_err(err("current exe"))?
                    .with_file_name(format!("baesrv{}", std::env::consts::EXE_SUFFIX)),
            };
            let srv = Baesrv::start(&bin, mock, None, None)?;
            Target {
                addr: srv.addr,
                admin_addr: srv.admin_addr,
                admin_key: srv.admin_key.clone(),
                pid: Some(srv.child.id()),
                _booted: Some(srv),
            }
        }
    };
    let c = o.clients;
    let mut rows = Vec::new();
    println!(
        "server {} (admin {}), mock provider {mock}, {} CPUs",
        t.addr,
        t.admin_addr,
        thread::available_parallelism().map_or(1, |n| n.get())
    );

    let want = |name: &str| o.only.as_deref().is_none_or(|only| only == name);
    let mbs = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.1} MB"));
    let row = |figure, value, target| Row {
        figure,
        value,
        target,
    };

    // 1. Idle.
    thread::sleep(Duration::from_secs(1));
    println!("RSS idle: {}", t.rss());
    let idle = t.rss_mb();
    let key = bench::client_key(t.admin_addr, &t.admin_key, &o.provider)?;

    // 2. Session opens on the fresh server.
    if want("opens") {
        let (rate, lat, usage) = opens(&t, &key, c, o.sessions)?;
        let per_open = usage.server_per(lat.len());
        println!(
            "session opens @{c}: {rate:.0}/s ({} opens), p50 {} p99 {}, server CPU/open {}; {usage}",
            lat.len(),
            ms(percentile(&lat, 0.5)),
            ms(percentile(&lat, 0.99)),
            cpu_ms(per_open),
        );
        println!("RSS after {} opens: {}", lat.len(), t.rss());
        rows.push(row(
            "server CPU per session open",
            cpu_ms(per_open),
            "≤ 0.05 ms",
        ));
        rows.push(row(
            "RSS after the session opens on a fresh server",
            mbs(t.rss_mb()),
            "≤ 10 MB",
        ));
    }

    // 3–4. Turn units, each opening its own session, with a /healthz probe.
    for (kind, name, cpu_target, rate_target) in [
        (
            Kind::Text,
            "text turn (open + registerDriver + sendMessage)",
            "≤ 0.15 ms",
            "≥ 5,000",
        ),
        (
            Kind::ToolRoundTrip,
            "client-tool round trip (open + register + two sends)",
            "≤ 0.3 ms",
            "≥ 2,500",
        ),
    ] {
        if !want("turns") {
            break;
        }
        let probe = HealthProbe::start(t.addr);
        let r = turns::load(t.addr, t.pid, &key, kind, c, o.secs, 1)?;
        let health = probe.finish()?;
        println!(
            "{name} @{c}: {:.0}/s ({} units), p50 {} p99 {}, server CPU/unit {}; {health}; {}",
            r.per_sec,
            r.units,
            ms(r.p50),
            ms(r.p99),
            cpu_ms(r.cpu_per_unit()),
            r.usage
        );
        rows.push(row(
            if kind == Kind::Text {
                "server CPU per text turn (open + registerDriver + sendMessage)"
            } else {
                "server CPU per client-tool round trip (open + register + two sends)"
            },
            cpu_ms(r.cpu_per_unit()),
            cpu_target,
        ));
        rows.push(row(
            if kind == Kind::Text {
                "text turns/s"
            } else {
                "tool round trips/s"
            },
            format!("{:.0}", r.per_sec),
            rate_target,
        ));
        rows.push(row(
            if kind == Kind::Text {
                "`GET /healthz` p99 during text turns"
            } else {
                "`GET /healthz` p99 during tool round trips"
            },
            ms(health.p99),
            "≤ 5 ms",
        ));
    }

    // 5–6. One long session with a growing history, paged by `clients`.
    if want("paging") {
        let mut driver = Conn::open(t.addr)?;
        let long = open_session_on(&mut driver, &key, false)?;
        let t0 = Instant::now();
        for i in 0..o.history_turns {
            turns::unit(&mut driver, &long, Kind::Text, i as u64)?;
        }
        let first = bench::walk_events(&mut driver, &long, o.page_limit, Pager::Parse)?;
        let (events, pages, bytes) = (first.events.unwrap_or(0), first.pages, first.bytes);
        println!(
            "history: {} turns in {:.1} s; {events} events in {pages} pages of {}, {:.0} KB per page",
            o.history_turns,
            t0.elapsed().as_secs_f64(),
            o.page_limit,
            bytes as f64 / pages.max(1) as f64 / 1e3
        );
        let probe = HealthProbe::start(t.addr);
        let p = paging(&t, &long, c, o.page_limit, o.secs, o.pager, events)?;
        let health = probe.finish()?;
        let secs = p.elapsed.as_secs_f64();
        let per_page = p.usage.server_per(p.pages);
        println!(
            "paging @{c} ({} pager): {:.0} events/s, {:.0} pages/s, {:.0} MB/s of page bytes, server CPU/page {}; {health}; {}",
            if o.pager == Pager::Scan { "scanning" } else { "parsing" },
            p.events as f64 / secs,
            p.pages as f64 / secs,
            p.bytes as f64 / secs / 1e6,
            cpu_ms(per_page),
            p.usage
        );
        rows.push(row(
            "server CPU per events page of the long session",
            cpu_ms(per_page),
            "≤ 0.25 ms",
        ));
        rows.push(row(
            "events paged/s, same session",
            format!("{:.0}", p.events as f64 / secs),
            "≥ 400,000",
        ));
        rows.push(row(
            "`GET /healthz` p99 while the clients page that session",
            ms(health.p99),
            "≤ 5 ms",
        ));
    }

    // 7. Observers of one session.
    if want("observers") {
        let addr = t.addr;
        let count = |s: &Session| bench::count_events(addr, s);
        let f = turns::fanout(t.addr, t.pid, &key, c, o.observer_turns, &count)?;
        println!(
            "{c} observers, {} turns: {:.0} events/s delivered, lag p50 {} p99 {}, lost {}; {}",
            o.observer_turns,
            f.events_per_sec,
            ms(f.lag_p50),
            ms(f.lag_p99),
            f.lost,
            f.usage
        );
        rows.push(row(
            "observers of one session, delivery lag p99",
            format!("{} ({} lost)", ms(f.lag_p99), f.lost),
            "≤ 2 ms, nothing lost",
        ));
    }

    // 8. After everything.
    println!("RSS after the run: {}", t.rss());
    rows.push(row("RSS after the whole run", mbs(t.rss_mb()), "≤ 15 MB"));
    // A server may hand memory back once quiet (baesrv trims its heap after
    // an idle second): the same figure a little later says whether it does.
    thread::sleep(Duration::from_secs(3));
    println!("RSS 3 s after the run: {}", t.rss());
    rows.push(row(
        "RSS 3 s after the whole run",
        mbs(t.rss_mb()),
        "≤ 15 MB",
    ));
    rows.push(row("RSS idle", mbs(idle), "≤ 4 MB"));
    println!();
    println!("| figure, {c} clients | measured | target |");
    println!("|---|---|---|");
    for r in rows {
        println!("| {} | {} | {} |", r.figure, r.value, r.target);
    }
    Ok(())
}

fn main() {
    let result = parse_opts().and_then(run);
    if let Err(e) = result {
        eprintln!("bench_kit: {e}");
        std::process::exit(1);
    }
}
