//! Live-loop scenarios shared by `bench_turns` and `bench_kit`: timed turn
//! units at a concurrency, and observers of one session.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use super::client::{Conn, Res};
use super::{open_session_on, percentile, Meter, Session, Usage};

/// What one timed unit does.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One `sendMessage` answered with text.
    Text,
    /// A `sendMessage` that pauses on a `tool_use`, then the `sendMessage`
    /// carrying its `tool_result`.
    ToolRoundTrip,
}

/// One unit of work on `s`: a text turn, or a paused turn plus its resume.
pub fn unit(c: &mut Conn, s: &Session, kind: Kind, i: u64) -> Res<()> {
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

/// Figures of one [`load`] run.
pub struct LoadResult {
    pub per_sec: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub units: usize,
    /// CPU of the server and of this process over the timed window.
    pub usage: Usage,
}

impl LoadResult {
    /// Server CPU per unit, when the server's pid is known.
    pub fn cpu_per_unit(&self) -> Option<Duration> {
        self.usage.server_per(self.units)
    }
}

/// `clients` threads, each on its own keep-alive connection, run units of
/// `kind` for `secs`. Each moves to a freshly opened and registered session
/// every `per_session` units; with `per_session == 1` the open and the
/// registration are inside the timed unit (the "open + registerDriver +
/// sends" unit), otherwise outside it.
pub fn load(
    addr: SocketAddr,
    pid: Option<u32>,
    key: &str,
    kind: Kind,
    clients: usize,
    secs: f64,
    per_session: u64,
) -> Res<LoadResult> {
    let tools = kind == Kind::ToolRoundTrip;
    let barrier = Arc::new(Barrier::new(clients + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for _ in 0..clients {
        let (barrier, stop, key) = (barrier.clone(), stop.clone(), key.to_string());
        handles.push(thread::spawn(move || -> Res<Vec<Duration>> {
            let mut c = Conn::open(addr)?;
            let run = (|| {
                let s = open_session_on(&mut c, &key, tools)?;
                for i in 0..3 {
                    unit(&mut c, &s, kind, i)?; // warm-up
                }
                Ok::<_, String>(s)
            })();
            // Every thread reaches the barrier, so one failure cannot hang
            // the others.
            barrier.wait();
            let mut s = run?;
            let mut lat = Vec::new();
            let mut i = 3;
            while !stop.load(Ordering::Relaxed) {
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
    let meter = Meter::start(pid);
    thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let usage = meter.finish();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.join().map_err(|_| "worker panicked")??);
    }
    let elapsed = t0.elapsed().as_secs_f64();
    all.sort();
    Ok(LoadResult {
        per_sec: all.len() as f64 / elapsed,
        p50: percentile(&all, 0.50),
        p99: percentile(&all, 0.99),
        units: all.len(),
        usage,
    })
}

/// Figures of one [`fanout`] run.
pub struct FanoutResult {
    pub events_per_sec: f64,
    pub lag_p50: Duration,
    pub lag_p99: Duration,
    /// Events logged during the run that some observer did not receive
    /// (summed over observers).
    pub lost: usize,
    pub usage: Usage,
}

/// The `N` of a `client.message.send` frame whose content is `hello N`;
/// `None` for any other frame. Scans bytes instead of parsing, so that 64
/// observer threads do not spend the box's CPU building every
/// `provider.request` payload (whitespace after `:` is allowed, as some
/// servers write it).
pub fn hello_index(line: &[u8]) -> Option<usize> {
    find(line, b"\"client.message.send\"")?;
    let at = find(line, b"\"hello ")? + b"\"hello ".len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `observers` subscribers (`session.subscribe`) on one fresh session while
/// a driver runs `turns` text turns. Lag = time from the driver issuing
/// turn i to an observer receiving that turn's `client.message.send`.
/// `count_events` answers how many events the session has logged; the
/// difference before and after the turns is what every observer must get.
pub fn fanout(
    addr: SocketAddr,
    pid: Option<u32>,
    key: &str,
    observers: usize,
    turns: usize,
    count_events: &dyn Fn(&Session) -> Res<usize>,
) -> Res<FanoutResult> {
    let s = open_session_on(&mut Conn::open(addr)?, key, false)?;
    let issued: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; turns]));
    let ready = Arc::new(Barrier::new(observers + 1));
    let mut handles = Vec::new();
    for _ in 0..observers {
        let (id, skey) = (s.id.clone(), s.key.clone());
        let (issued, ready) = (issued.clone(), ready.clone());
        handles.push(thread::spawn(
            move || -> Res<(usize, Vec<Duration>, Instant)> {
                let subscribed = (|| {
                    let mut c = Conn::open(addr)?;
                    let body = json!({"jsonrpc": "2.0", "id": 1,
                                      "method": "session.subscribe", "params": {}});
                    let path = format!("/api/v1/sessions/{id}/rpc");
                    c.send_head("POST", &path, Some(&skey), body.to_string().as_bytes())?;
                    match c.read_head()? {
                        200 => Ok(c),
                        st => Err(format!("session.subscribe answered {st}")),
                    }
                })();
                ready.wait();
                let mut c = subscribed?;
                let (mut n, mut lags, mut last) = (0usize, Vec::new(), Instant::now());
                let mut buf = Vec::new();
                while c.read_data(&mut buf)? {
                    let mut start = 0;
                    while let Some(pos) = buf[start..].iter().position(|&b| b == b'\n') {
                        let line = &buf[start..start + pos];
                        start += pos + 1;
                        if line.iter().all(u8::is_ascii_whitespace) {
                            continue; // keepalive
                        }
                        let now = Instant::now();
                        last = now;
                        if find(line, b"\"session.event\"").is_some() {
                            n += 1;
                        }
                        if let Some(i) = hello_index(line) {
                            if let Some(Some(t0)) = issued.lock().unwrap().get(i).copied() {
                                lags.push(now.duration_since(t0));
                            }
                        }
                    }
                    buf.drain(..start);
                }
                Ok((n, lags, last))
            },
        ));
    }
    ready.wait();
    // Give every subscription time to attach before the first event.
    thread::sleep(Duration::from_millis(200));
    let before = count_events(&s)?;
    let mut driver = Conn::open(addr)?;
    let t0 = Instant::now();
    let meter = Meter::start(pid);
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
    thread::sleep(Duration::from_millis(300));
    let usage = meter.finish();
    let expected = count_events(&s)?.saturating_sub(before);
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
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::hello_index;

    #[test]
    fn hello_index_reads_only_client_message_frames() {
        let frame = br#"{"jsonrpc":"2.0","method":"session.event","params":{"event_type":"client.message.send","payload":{"role":"user","content":"hello 42"}}}"#;
        assert_eq!(hello_index(frame), Some(42));
        let spaced = br#"{"event_type": "client.message.send", "payload": {"content": "hello 7"}}"#;
        assert_eq!(hello_index(spaced), Some(7));
        let request =
            br#"{"event_type":"provider.request","payload":{"messages":[{"content":"hello 3"}]}}"#;
        assert_eq!(hello_index(request), None);
    }
}
