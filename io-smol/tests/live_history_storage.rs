//! `provider.request` histories stored once (docs/storage.md, "History
//! stored once"), over the real binary: a long session with client-tool
//! rounds, a compaction, an idempotent turn and a `kill -9` in the middle.
//! Every way of reading events back (REST pages, `session.subscribe`
//! replays, an idempotent retry) answers byte for byte what the live
//! streams delivered, and the database grows by about the same number of
//! bytes every turn.

mod live_support;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use live_support::*;
use serde_json::{json, Value};
use testkit::http::next_rpc_id;
use testkit::{rpc_request, HttpClient, Reply, RpcStream, Server};

const NOTE_HEAD: &str = r#"{"jsonrpc":"2.0","method":"session.event","params":"#;

/// The EventView inside a `session.event` notification line.
fn view_of(line: &str) -> &str {
    line.strip_prefix(NOTE_HEAD)
        .and_then(|l| l.strip_suffix('}'))
        .unwrap_or_else(|| panic!("not a session.event line: {line}"))
}

/// One request's raw lines: (notifications, terminal).
fn rpc_lines(s: &mut RpcStream) -> (Vec<String>, String) {
    let mut notes = Vec::new();
    loop {
        let line = s.next_line(WAIT).expect("terminal frame");
        let v: Value = serde_json::from_str(&line).expect("JSON line");
        if v.get("id").is_some() {
            return (notes, line);
        }
        notes.push(line);
    }
}

fn call(server: &Server, sid: &str, key: &str, request: &Value) -> (Vec<String>, String) {
    let mut s = server.client().rpc_stream(sid, key, request);
    rpc_lines(&mut s)
}

/// An observer collecting the raw lines of a subscription until it has
/// `target` event lines (or its stream ends).
struct Observer {
    lines: Arc<Mutex<Vec<String>>>,
    target: Arc<AtomicUsize>,
    thread: JoinHandle<()>,
}

impl Observer {
    fn start(server: &Server, sid: &str, key: &str, params: Value) -> Observer {
        let mut s = subscribe(server, sid, key, params);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let target = Arc::new(AtomicUsize::new(usize::MAX));
        let (l, t) = (lines.clone(), target.clone());
        let thread = thread::spawn(move || loop {
            if l.lock().unwrap().len() >= t.load(Ordering::SeqCst) {
                return;
            }
            match s.next_line(Duration::from_millis(100)) {
                Some(line) => {
                    assert!(line.starts_with(NOTE_HEAD), "observer got {line}");
                    l.lock().unwrap().push(line);
                }
                None if s.is_finished() || s.framing_error().is_some() => return,
                None => {}
            }
        });
        Observer {
            lines,
            target,
            thread,
        }
    }

    /// Waits for `n` lines (all lines when the stream ended first).
    fn finish(self, n: usize) -> Vec<String> {
        self.target.store(n, Ordering::SeqCst);
        let deadline = Instant::now() + WAIT;
        while !self.thread.is_finished() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        assert!(
            self.thread.is_finished(),
            "observer stuck at {} of {n} lines",
            self.lines.lock().unwrap().len()
        );
        self.thread.join().unwrap();
        let lines = self.lines.lock().unwrap().clone();
        lines
    }
}

/// Stored bytes of the log: payloads plus history chunks, and the
/// database's size in pages.
fn db_bytes(path: &Path) -> (i64, i64) {
    let mut conn = sqlite::open(path).unwrap();
    conn.set_busy_timeout(5000).unwrap();
    let one = |sql: &str| {
        let mut st = conn.prepare(sql).unwrap();
        st.next().unwrap();
        st.read::<i64, _>(0).unwrap()
    };
    let logical = one(
        "SELECT (SELECT COALESCE(SUM(length(payload)), 0) FROM session_events) \
         + (SELECT COALESCE(SUM(length(body)), 0) FROM bae_history_chunks)",
    );
    let pages = one("PRAGMA page_count") * one("PRAGMA page_size");
    (logical, pages)
}

/// Every event of the session through pages of `limit` of `path` (the
/// client or the admin port's): the raw bodies.
fn pages(client: &HttpClient, path: &str, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let resp = client.get(&format!("{path}?limit={limit}&cursor={cursor}"));
        resp.assert_status(200);
        let body = resp.text();
        let page: Value = serde_json::from_str(&body).unwrap();
        out.push(body);
        match page["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => return out,
        }
    }
}

/// The page bodies the server must answer, from the live EventViews.
fn expected_pages(views: &[&str], limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let chunks: Vec<&[&str]> = views.chunks(limit).collect();
    for (i, c) in chunks.iter().enumerate() {
        let next = if i + 1 < chunks.len() {
            "CURSOR".to_string()
        } else {
            "null".to_string()
        };
        out.push(format!(
            r#"{{"items":[{}],"next_cursor":{next}}}"#,
            c.join(",")
        ));
    }
    out
}

/// Page bodies with their cursor values blanked (cursors are rowids, not
/// part of the events).
fn blank_cursor(page: &str) -> String {
    match page.rfind(r#","next_cursor":""#) {
        Some(i) => format!("{},\"next_cursor\":CURSOR}}", &page[..i]),
        None => page.to_string(),
    }
}

fn register(server: &Server, sid: &str, key: &str) {
    let req = rpc_request(
        "session.registerDriver",
        json!({"extensions": ["send.idempotent"]}),
        next_rpc_id(),
    );
    let (_, t) = call(server, sid, key, &req);
    assert!(t.contains(r#""registered":true"#), "{t}");
}

fn user_text(turn: usize) -> String {
    format!("turn {turn}: \"quoted\" \\ back-slashed, é, lorem ipsum dolor sit amet {turn}")
}

#[test]
fn events_read_back_are_the_live_events_and_storage_grows_linearly() {
    let (mock, mut server) = anthropic_server(&[("BAE_SHARED_HISTORY", "1")]);
    mock.set_default(Reply::text(
        "a reply of some length: lorem ipsum dolor sit amet, consectetur adipiscing elit",
    ));
    let f = open(
        &server,
        "main",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    let (sid, key) = (f.session_id.clone(), f.a.session_key.clone());
    register(&server, &sid, &key);
    // From the start: the two events before it (session.open, the driver's
    // registration) are replayed, every later one is live.
    let mut observer = Observer::start(&server, &sid, &key, json!({"since_event_id": "evt_none"}));
    let mut views: Vec<String> = Vec::new(); // every event, as delivered live
    let mut turn_views: Vec<(Vec<String>, String)> = Vec::new();
    let mut idempotent: Option<(Value, String)> = None;
    let mut sizes = Vec::new();
    const TURNS: usize = 120;
    for turn in 1..=TURNS {
        match turn {
            // A client-tool round: the turn pauses, the next one resumes.
            25 => mock.push(Reply::tool_use("tu_25", "get_time", json!({}))),
            60 => {
                mock.push(Reply::text("summary of everything so far"));
                let req = rpc_request("session.compact", json!({}), next_rpc_id());
                let (notes, t) = call(&server, &sid, &key, &req);
                assert!(t.contains(r#""result""#), "{t}");
                // Its result carries no events.
                turn_views.push((notes, String::new()));
            }
            80 => {
                // kill -9 between turns: the first observer's stream ends.
                server.kill9();
                let seen =
                    std::mem::replace(&mut observer, Observer::start_later()).finish(usize::MAX);
                views.extend(seen.iter().map(|l| view_of(l).to_string()));
                server.restart();
                register(&server, &sid, &key);
                let last: Value = serde_json::from_str(views.last().unwrap()).unwrap();
                observer =
                    Observer::start(&server, &sid, &key, json!({"since_event_id": last["id"]}));
            }
            _ => {}
        }
        let content = if turn == 26 {
            json!([tool_result("tu_25", "12:00"), {"type": "text", "text": user_text(turn)}])
        } else {
            json!(user_text(turn))
        };
        let mut params = json!({"message": {"role": "user", "content": content}});
        if turn == 30 {
            params["idempotency_key"] = json!("key-30");
        }
        let req = rpc_request("session.sendMessage", params, next_rpc_id());
        let (notes, t) = call(&server, &sid, &key, &req);
        assert!(t.contains(r#""result""#), "turn {turn}: {t}");
        if turn == 30 {
            idempotent = Some((req, t.clone()));
        }
        turn_views.push((notes, t));
        mock.clear_requests();
        if [10, 30, 50].contains(&turn) {
            sizes.push(db_bytes(&server.db_path()));
        }
    }

    // The REST pages are the live events, byte for byte.
    let client = server.client().bearer(&key);
    let path = format!("/api/v1/sessions/{sid}/events");
    let first = pages(&client, &path, 100);
    let total: usize = first
        .iter()
        .map(|p| {
            serde_json::from_str::<Value>(p).unwrap()["items"]
                .as_array()
                .unwrap()
                .len()
        })
        .sum();
    let seen = observer.finish(total - views.len());
    views.extend(seen.iter().map(|l| view_of(l).to_string()));
    assert_eq!(views.len(), total, "every event was delivered live once");
    let refs: Vec<&str> = views.iter().map(String::as_str).collect();
    let admin_path = format!("/admin/v1/sessions/{sid}/events");
    for (client, path, limit) in [
        (&client, &path, 100),
        (&client, &path, 7),
        (&client, &path, 200),
        (&server.admin(), &admin_path, 200),
        (&server.admin(), &admin_path, 33),
    ] {
        let got: Vec<String> = pages(client, path, limit)
            .iter()
            .map(|p| blank_cursor(p))
            .collect();
        assert_eq!(
            got,
            expected_pages(&refs, limit),
            "pages of {limit} of {path}"
        );
    }

    // Each request's own stream and its result.events carry the same bytes.
    let mut streamed_requests = 0;
    for (notes, terminal) in &turn_views {
        for n in notes.iter().filter(|n| n.starts_with(NOTE_HEAD)) {
            let v = view_of(n);
            streamed_requests += usize::from(v.contains(r#""event_type":"provider.request""#));
            assert!(
                refs.contains(&v),
                "a turn's event differs from the log: {v}"
            );
            assert!(
                terminal.is_empty() || terminal.contains(v),
                "result.events lacks {v}"
            );
        }
    }

    assert!(
        streamed_requests > TURNS,
        "{streamed_requests} requests streamed"
    );

    // A replay from the first event: every later event, from the store.
    let first_id: Value = serde_json::from_str::<Value>(refs[0]).unwrap()["id"].clone();
    let replay = Observer::start(&server, &sid, &key, json!({"since_event_id": first_id}));
    let replayed = replay.finish(total - 1);
    let replayed: Vec<&str> = replayed.iter().map(|l| view_of(l)).collect();
    assert_eq!(replayed, refs[1..], "a replay is the live events");

    // An idempotent retry of a finished turn (after the restart) answers
    // the same bytes, rebuilt from the log.
    let (req, original) = idempotent.unwrap();
    let (_, again) = call(&server, &sid, &key, &req);
    assert_eq!(again, original, "idempotent replay");

    // Storage per turn stays flat: the history is not stored again with
    // every request (it was: the second 20 turns then cost about twice the
    // first 20).
    eprintln!("stored bytes, database bytes at turns 10, 30, 50: {sizes:?}");
    let [(l10, p10), (l30, p30), (l50, p50)] = sizes[..] else {
        panic!("{sizes:?}")
    };
    let (early, late) = (l30 - l10, l50 - l30);
    assert!(
        (late as f64) < 1.25 * early as f64,
        "stored bytes over turns 10-30: {early}, 30-50: {late}"
    );
    let (early, late) = (p30 - p10, p50 - p30);
    assert!(
        (late as f64) < 1.5 * early as f64 + 8192.0,
        "database bytes over turns 10-30: {early}, 30-50: {late}"
    );
}

impl Observer {
    /// A placeholder that has already ended (swapped in while restarting).
    fn start_later() -> Observer {
        Observer {
            lines: Arc::new(Mutex::new(Vec::new())),
            target: Arc::new(AtomicUsize::new(0)),
            thread: thread::spawn(|| {}),
        }
    }
}

/// By default `provider.request` rows are stored whole, as spec 08
/// persists them (the shared form is the `BAE_SHARED_HISTORY` opt-in).
#[test]
fn by_default_requests_are_stored_whole_as_the_spec_persists_them() {
    let (mock, server) = anthropic_server(&[]);
    mock.set_default(Reply::text("fine"));
    let f = open(&server, "main", &[], &[], json!({}));
    let (sid, key) = (f.session_id.clone(), f.a.session_key.clone());
    register(&server, &sid, &key);
    for turn in 0..3 {
        let params = json!({"message": {"role": "user", "content": user_text(turn)}});
        let request = rpc_request("session.sendMessage", params, next_rpc_id());
        call(&server, &sid, &key, &request);
    }
    let mut conn = sqlite::open(server.db_path()).unwrap();
    conn.set_busy_timeout(5000).unwrap();
    let mut st = conn
        .prepare("SELECT payload FROM session_events WHERE event_type = 'provider.request' ORDER BY rowid")
        .unwrap();
    let mut payloads = Vec::new();
    while let Ok(sqlite::State::Row) = st.next() {
        payloads.push(st.read::<String, _>(0).unwrap());
    }
    assert_eq!(payloads.len(), 3);
    for (i, p) in payloads.iter().enumerate() {
        let v: Value = serde_json::from_str(p).unwrap();
        let messages = v["messages"].as_array().expect("whole messages");
        assert_eq!(messages.len(), 2 * i + 1, "{p}");
        assert!(!p.starts_with("{\"bae_chunks\""), "{p}");
    }
    let mut st = conn
        .prepare("SELECT COUNT(*) FROM bae_history_chunks")
        .unwrap();
    st.next().unwrap();
    assert_eq!(st.read::<i64, _>(0).unwrap(), 0);
}
