//! Measuring helpers shared by the bench binaries (`testkit/src/bin/`).

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;

pub mod boot;
pub mod client;
pub mod llm;
pub mod probe;
pub mod turns;

pub use client::{err, Conn, Res, Resp};
pub use probe::{HealthProbe, Meter, PageScan, ProbeResult, Usage};

/// An open, registered session.
pub struct Session {
    pub id: String,
    pub key: String,
}

/// Creates a profile on `provider` allowing `get_time`, and one client key
/// of it; returns the key's plaintext.
pub fn client_key(admin_addr: SocketAddr, admin_key: &str, provider: &str) -> Res<String> {
    let mut admin = Conn::open(admin_addr)?;
    let bearer = Some(admin_key);
    let p = admin.json(
        "POST",
        "/admin/v1/profiles",
        bearer,
        &json!({"name": format!("bench-{}-{provider}", std::process::id()),
                "primary_provider": provider, "allowed_tools": ["get_time"]}),
    )?;
    let k = admin.json(
        "POST",
        "/admin/v1/keys",
        bearer,
        &json!({"name": "bench", "profile_id": p["id"]}),
    )?;
    k["key"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("POST /admin/v1/keys answered no key: {k}"))
}

/// Opens a session (advertising the client tool `get_time` when `tools`)
/// and registers as its driver, over an existing connection.
pub fn open_session_on(c: &mut Conn, key: &str, tools: bool) -> Res<Session> {
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
    c.rpc(
        &s.id,
        &s.key,
        "session.registerDriver",
        serde_json::json!({}),
    )?;
    Ok(s)
}

/// How a pager reads each events page.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Pager {
    /// Through a JSON parser that skips every item without building it, as
    /// a client that does not need them would.
    Parse,
    /// `next_cursor` found by a byte search ([`scan_cursor`]): costs the
    /// generator next to nothing, for measuring the server's side; items
    /// are not counted.
    Scan,
}

/// One walk over a session's whole event log.
pub struct Walk {
    /// Items seen (`None` for [`Pager::Scan`]).
    pub events: Option<usize>,
    pub pages: usize,
    pub bytes: usize,
}

/// Walks a session's whole event log in pages of `limit`, with its session
/// key, until a page names no cursor (or repeats the one it was asked for).
pub fn walk_events(c: &mut Conn, s: &Session, limit: usize, pager: Pager) -> Res<Walk> {
    let mut walk = Walk {
        events: (pager == Pager::Parse).then_some(0),
        pages: 0,
        bytes: 0,
    };
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/v1/sessions/{}/events?limit={limit}", s.id);
        if let Some(c) = &cursor {
            path.push_str("&cursor=");
            path.push_str(c);
        }
        let r = c.request("GET", &path, Some(&s.key), b"")?;
        if r.status != 200 {
            return Err(format!("GET {path}: {}", r.status));
        }
        walk.pages += 1;
        walk.bytes += r.body.len();
        let next = match pager {
            Pager::Scan => scan_cursor(&r.body)?,
            Pager::Parse => {
                let page = PageScan::parse(&r.body)?;
                walk.events = walk.events.map(|n| n + page.items);
                page.next_cursor.filter(|_| page.items > 0)
            }
        };
        match next {
            Some(next) if cursor.as_deref() != Some(next.as_str()) => cursor = Some(next),
            _ => return Ok(walk),
        }
    }
}

/// How many events a session has logged (a parsing walk).
pub fn count_events(addr: SocketAddr, s: &Session) -> Res<usize> {
    let walk = walk_events(&mut Conn::open(addr)?, s, 200, Pager::Parse)?;
    Ok(walk.events.unwrap_or(0))
}

/// The `next_cursor` of a page body, looked for in its last and first
/// 256 bytes (wherever a server puts the key, it is outside the items only
/// there); `Err` when neither holds it.
pub fn scan_cursor(body: &[u8]) -> Res<Option<String>> {
    const KEY: &[u8] = b"\"next_cursor\"";
    let tail = body.len().saturating_sub(256);
    let at = [tail, 0].into_iter().find_map(|from| {
        let end = (from + 256).min(body.len());
        let window = &body[from..end];
        window
            .windows(KEY.len())
            .rposition(|w| w == KEY)
            .map(|p| from + p + KEY.len())
    });
    let Some(at) = at else {
        return Err("no next_cursor near either end of the page".into());
    };
    let rest = &body[at..];
    let rest = rest
        .trim_ascii_start()
        .strip_prefix(b":")
        .unwrap_or(rest)
        .trim_ascii_start();
    if rest.starts_with(b"null") {
        return Ok(None);
    }
    let Some(rest) = rest.strip_prefix(b"\"") else {
        return Err("next_cursor is neither a string nor null".into());
    };
    let len = rest
        .iter()
        .position(|&b| b == b'"')
        .ok_or("unterminated next_cursor")?;
    Ok(Some(String::from_utf8_lossy(&rest[..len]).into_owned()))
}

/// The `p` quantile (0..=1, nearest rank) of ascending `sorted`; zero when
/// empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// CPU time of every live thread of `pid` in nanoseconds (the first field
/// of `/proc/<pid>/task/<tid>/schedstat`): fine enough to read around one
/// request, where the tick-based [`cpu_time`] is not. Threads that exited
/// are not counted.
pub fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// A duration as milliseconds with two decimals (`1.23 ms`).
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// `(VmRSS, VmHWM)` of process `pid` in KiB, from `/proc/<pid>/status`.
pub fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// CPU time (user + system, all threads) process `pid` has used so far,
/// from `/proc/<pid>/stat`. Linux reports it in clock ticks of
/// `USER_HZ`, which is 100 on every mainstream architecture (the kernel ABI
/// fixes it regardless of `CONFIG_HZ`), so the resolution is 10 ms: take it
/// over a whole scenario, not per request.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it are plain.
    let after = &stat[stat.rfind(')')? + 2..];
    let mut fields = after.split_whitespace();
    // `after` starts at field 3 (state); utime and stime are fields 14, 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// `engine steps: n, p50 ≤ …, p99 ≤ …, max …` from a `GET /metrics` text
/// (baesrv's `bae_engine_step_microseconds` histogram: quantiles are bucket
/// upper bounds); `None` when the server exports no such histogram.
pub fn engine_steps_summary(metrics: &str) -> Option<String> {
    let prefix = "bae_engine_step_microseconds_bucket{le=\"";
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(prefix) else {
            continue;
        };
        let (le, count) = rest.split_once("\"} ")?;
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().ok()?
        };
        buckets.push((le, count.trim().parse().ok()?));
    }
    let total = buckets.last()?.1;
    if total == 0 {
        return None;
    }
    let max = metrics
        .lines()
        .find_map(|l| l.strip_prefix("bae_engine_step_max_microseconds "))
        .and_then(|v| v.trim().parse::<u64>().ok())?;
    let quantile = |p: f64| {
        let rank = (total as f64 * p).ceil() as u64;
        match buckets.iter().find(|(_, c)| *c >= rank) {
            Some((le, _)) if le.is_finite() => format!("≤ {le} µs"),
            _ => format!("> {} µs", buckets.iter().rev().nth(1).map_or(0.0, |b| b.0)),
        }
    };
    Some(format!(
        "engine steps: {total}, p50 {}, p99 {}, p99.9 {}, max {max} µs",
        quantile(0.5),
        quantile(0.99),
        quantile(0.999)
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn scan_cursor_finds_the_cursor_at_either_end() {
        let items = format!("[{}]", "{\"x\":1},".repeat(100) + "{}");
        let last = format!("{{\"items\":{items},\"next_cursor\":\"42\"}}");
        assert_eq!(
            super::scan_cursor(last.as_bytes()).unwrap(),
            Some("42".into())
        );
        let first = format!("{{\"next_cursor\": null, \"items\": {items}}}");
        assert_eq!(super::scan_cursor(first.as_bytes()).unwrap(), None);
        let spaced = format!("{{\"items\": {items}, \"next_cursor\": \"7\"}}");
        assert_eq!(
            super::scan_cursor(spaced.as_bytes()).unwrap(),
            Some("7".into())
        );
        assert!(super::scan_cursor(items.as_bytes()).is_err());
    }

    #[test]
    fn engine_steps_summary_reads_the_histogram() {
        let text = "bae_engine_step_microseconds_bucket{le=\"10\"} 50\n\
                    bae_engine_step_microseconds_bucket{le=\"100\"} 99\n\
                    bae_engine_step_microseconds_bucket{le=\"+Inf\"} 100\n\
                    bae_engine_step_max_microseconds 4200\n";
        assert_eq!(
            super::engine_steps_summary(text).as_deref(),
            Some("engine steps: 100, p50 ≤ 10 µs, p99 ≤ 100 µs, p99.9 > 100 µs, max 4200 µs")
        );
        assert_eq!(super::engine_steps_summary("nothing"), None);
    }

    #[test]
    fn cpu_time_grows_with_work_done() {
        // Spins until the reading moves (at most 10 s of wall time): a
        // parser reading the wrong fields sees a constant or no value.
        let pid = std::process::id();
        let before = super::cpu_time(pid).expect("own /proc stat");
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        let mut after = before;
        while after < before + std::time::Duration::from_millis(30)
            && t0.elapsed() < std::time::Duration::from_secs(10)
        {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            after = super::cpu_time(pid).expect("own /proc stat");
        }
        assert!(
            after >= before + std::time::Duration::from_millis(30),
            "{before:?} → {after:?}"
        );
    }
}
