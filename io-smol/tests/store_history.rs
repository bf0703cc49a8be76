//! `provider.request` histories stored once (docs/storage.md, "History
//! stored once"), against SQLite: every read path answers the payload the
//! engine wrote, byte for byte; a growing session stores each message once;
//! old full rows, restarts, failed batches and odd payloads keep working.

use std::path::Path;

use engine::store::{
    EventRow, EventType, KeyRole, KeyRow, ProfileRow, ReadResult, SessionRow, SessionState,
    StoreRead, StoreWrite,
};
use io_smol::store::{Store, StoreConn, Synchronous};
use serde_json::{json, Value};
use testkit::TestPath;

/// Its directory is removed when the test is done (testkit::TestPath).
fn temp_db(tag: &str) -> TestPath {
    TestPath::new(&format!("baesrv-hist-{tag}"), "bae.db").unwrap()
}

const T: &str = "2026-01-01T00:00:00.000Z";

fn setup(sessions: &[&str]) -> Vec<StoreWrite> {
    let mut w = vec![
        StoreWrite::InsertProfile(ProfileRow {
            id: "pro_1".into(),
            name: "p".into(),
            primary_provider: "main".into(),
            fallback_providers: vec![],
            mcp_servers: vec![],
            allowed_tools: vec![],
            available_sandboxes: vec![],
            created_at: T.into(),
            updated_at: T.into(),
            deleted_at: None,
        }),
        StoreWrite::InsertKey(KeyRow {
            id: "key_1".into(),
            name: "k".into(),
            key_hash: "0".repeat(64),
            key_prefix: "bae_0000".into(),
            role: KeyRole::Client,
            profile_id: Some("pro_1".into()),
            client_id: None,
            created_at: T.into(),
            last_used_at: None,
            deleted_at: None,
        }),
    ];
    for s in sessions {
        w.push(StoreWrite::InsertSession(SessionRow {
            id: s.to_string(),
            client_key_id: "key_1".into(),
            profile_id: "pro_1".into(),
            state: SessionState::Open,
            client_version: None,
            client_tools: json!({}).to_string(),
            sandbox_tools: json!({}).to_string(),
            subagent_tools: json!({}).to_string(),
            compaction: None,
            created_at: T.into(),
            closed_at: None,
        }));
    }
    w
}

fn open(path: &Path) -> Store {
    let store = Store::open(path, Synchronous::Normal).unwrap();
    store.migrate().unwrap();
    store
}

/// A `provider.request` payload in the engine's member order.
fn request(messages: &[Value], tools: &[Value]) -> String {
    let mut p = serde_json::Map::new();
    p.insert("attempt".into(), json!(0));
    p.insert("kind".into(), json!("primary"));
    p.insert("provider".into(), json!("anthropic"));
    p.insert("base_url".into(), json!("http://127.0.0.1:9"));
    p.insert("model".into(), json!("mock-model"));
    p.insert("max_tokens".into(), json!(4096));
    p.insert("messages".into(), Value::Array(messages.to_vec()));
    p.insert("tools".into(), Value::Array(tools.to_vec()));
    Value::Object(p).to_string()
}

fn msg(role: &str, i: usize) -> Value {
    json!({"role": role, "content": [{"type": "text",
        "text": format!("{role} {i}: lorem ipsum dolor sit amet, \"quoted\" \\ é \u{2028}")}]})
}

fn event(seq: u64, session: &str, event_type: &str, payload: String) -> EventRow {
    EventRow {
        seq,
        id: format!("evt_{seq:032x}"),
        session_id: session.into(),
        client_key_id: Some("key_1".into()),
        event_type: event_type.into(),
        payload,
        created_at: T.into(),
    }
}

/// Writes text turns: a message, a request with the whole history, a
/// response, a reply. Returns every row written.
struct Turns {
    seq: u64,
    history: Vec<(String, Vec<Value>)>,
    rows: Vec<EventRow>,
}

impl Turns {
    fn new(sessions: &[&str]) -> Self {
        Turns {
            seq: 0,
            history: sessions.iter().map(|s| (s.to_string(), vec![])).collect(),
            rows: vec![],
        }
    }

    fn push(&mut self, session: &str, event_type: &str, payload: String) -> EventRow {
        self.seq += 1;
        let row = event(self.seq, session, event_type, payload);
        self.rows.push(row.clone());
        row
    }

    fn turn(&mut self, session: usize, tools: &[Value]) -> Vec<StoreWrite> {
        let sid = self.history[session].0.clone();
        let n = self.history[session].1.len();
        self.history[session].1.push(msg("user", n));
        let req = request(&self.history[session].1, tools);
        let rows = [
            self.push(&sid, "client.message.send", msg("user", n).to_string()),
            self.push(&sid, "provider.request", req),
            self.push(&sid, "provider.response", json!({"ok": true}).to_string()),
            self.push(&sid, "server.message.send", msg("assistant", n).to_string()),
        ];
        self.history[session].1.push(msg("assistant", n));
        rows.into_iter().map(StoreWrite::InsertEvent).collect()
    }

    fn of(&self, session: &str) -> Vec<EventRow> {
        self.rows
            .iter()
            .filter(|r| r.session_id == session)
            .cloned()
            .collect()
    }
}

fn rows(r: ReadResult) -> Vec<EventRow> {
    match r {
        ReadResult::Events(rows) => rows,
        other => panic!("{other:?}"),
    }
}

/// Every read path answers exactly `expected` (all of one session's rows).
fn check_reads(conn: &mut StoreConn<'_>, session: &str, expected: &[EventRow]) {
    // Pages of 100, as the REST endpoints read them.
    let mut got = Vec::new();
    let mut after = 0;
    loop {
        let page = rows(
            conn.read(&StoreRead::Events {
                session_id: session.into(),
                after_seq: after,
                limit: 100,
            })
            .unwrap(),
        );
        let Some(last) = page.last() else { break };
        after = last.seq;
        got.extend(page);
    }
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(expected) {
        assert_eq!(g, e, "row {}", e.seq);
    }
    let requests: Vec<&EventRow> = expected
        .iter()
        .filter(|r| r.event_type == "provider.request")
        .collect();
    // One event in the middle of the chain, by id and by seq.
    if let Some(mid) = requests.get(requests.len() / 2) {
        let by_id = rows(
            conn.read(&StoreRead::EventById {
                session_id: session.into(),
                event_id: mid.id.clone(),
            })
            .unwrap(),
        );
        assert_eq!(by_id, vec![(*mid).clone()]);
        let at = rows(
            conn.read(&StoreRead::EventsAt {
                session_id: session.into(),
                seqs: vec![mid.seq, mid.seq + 1],
            })
            .unwrap(),
        );
        assert_eq!(at[0], **mid);
    }
    let latest = rows(
        conn.read(&StoreRead::LatestOfType {
            session_id: session.into(),
            event_type: EventType::ProviderRequest,
            before_seq: None,
            limit: 3,
        })
        .unwrap(),
    );
    let newest: Vec<EventRow> = requests
        .iter()
        .rev()
        .take(3)
        .map(|r| (*r).clone())
        .collect();
    assert_eq!(latest, newest);
    let of_types = rows(
        conn.read(&StoreRead::OfTypesFrom {
            session_id: session.into(),
            event_types: vec![EventType::ProviderRequest, EventType::ClientMessageSend],
            from_seq: 0,
        })
        .unwrap(),
    );
    assert_eq!(
        of_types,
        expected
            .iter()
            .filter(|r| matches!(
                r.event_type.as_str(),
                "provider.request" | "client.message.send"
            ))
            .cloned()
            .collect::<Vec<_>>()
    );
}

fn scalar(path: &Path, sql: &str) -> i64 {
    let conn = sqlite::open(path).unwrap();
    let mut st = conn.prepare(sql).unwrap();
    st.next().unwrap();
    st.read::<Option<i64>, _>(0).unwrap().unwrap_or(0)
}

fn column_texts(path: &Path, sql: &str) -> Vec<String> {
    let conn = sqlite::open(path).unwrap();
    let mut st = conn.prepare(sql).unwrap();
    let mut out = vec![];
    while let Ok(sqlite::State::Row) = st.next() {
        out.push(st.read(0).unwrap());
    }
    out
}

fn stored_payloads(path: &Path) -> Vec<(i64, String, String)> {
    let conn = sqlite::open(path).unwrap();
    let mut st = conn
        .prepare("SELECT rowid, event_type, payload FROM session_events ORDER BY rowid")
        .unwrap();
    let mut out = vec![];
    while let Ok(sqlite::State::Row) = st.next() {
        out.push((
            st.read(0).unwrap(),
            st.read(1).unwrap(),
            st.read(2).unwrap(),
        ));
    }
    out
}

#[test]
fn a_long_session_stores_each_message_once_and_reads_back_exactly() {
    let path = temp_db("long");
    let store = open(&path);
    let mut conn = store.conn();
    conn.commit(&setup(&["ses_a"])).unwrap();
    let mut t = Turns::new(&["ses_a"]);
    let tools = [json!({"name": "get_time", "description": "d", "input_schema": {}})];
    for _ in 0..400 {
        let batch = t.turn(0, &tools);
        conn.commit(&batch).unwrap();
    }
    check_reads(&mut conn, "ses_a", &t.of("ses_a"));
    // Each request row holds the small members and two ranges.
    let widest = scalar(
        &path,
        "SELECT MAX(length(payload)) FROM session_events WHERE event_type = 'provider.request'",
    );
    assert!(widest < 300, "{widest}");
    // One chunk per request plus the tools'; the chunks hold each message
    // once (plus the brackets of each chunk).
    assert_eq!(
        scalar(&path, "SELECT COUNT(*) FROM bae_history_chunks"),
        401
    );
    let history_len = serde_json::to_string(&t.history[0].1[..799]).unwrap().len() as i64;
    let chunk_bytes = scalar(&path, "SELECT SUM(length(body)) FROM bae_history_chunks");
    assert!(
        chunk_bytes < history_len + 2 * 401 + 200,
        "{chunk_bytes} vs {history_len}"
    );
    // Stored payloads and chunk bodies stay JSON (parsed here: the server's
    // SQLite is built without its JSON functions).
    for sql in [
        "SELECT payload FROM session_events",
        "SELECT body FROM bae_history_chunks",
    ] {
        let texts = column_texts(&path, sql);
        assert!(!texts.is_empty(), "{sql}");
        for t in texts {
            assert!(
                serde_json::from_str::<serde_json::Value>(&t).is_ok(),
                "{sql}: {t}"
            );
        }
    }
}

#[test]
fn two_interleaved_sessions_keep_their_own_chunks() {
    let path = temp_db("two");
    let store = open(&path);
    let mut conn = store.conn();
    conn.commit(&setup(&["ses_a", "ses_b"])).unwrap();
    let mut t = Turns::new(&["ses_a", "ses_b"]);
    for i in 0..60 {
        // Both sessions in one batch, and batches of one.
        let mut batch = t.turn(i % 2, &[]);
        if i % 3 == 0 {
            batch.extend(t.turn((i + 1) % 2, &[]));
        }
        conn.commit(&batch).unwrap();
    }
    check_reads(&mut conn, "ses_a", &t.of("ses_a"));
    check_reads(&mut conn, "ses_b", &t.of("ses_b"));
    for s in ["ses_a", "ses_b"] {
        let requests = t
            .of(s)
            .iter()
            .filter(|r| r.event_type == "provider.request")
            .count();
        assert_eq!(
            scalar(
                &path,
                &format!("SELECT COUNT(*) FROM bae_history_chunks WHERE session_id = '{s}'")
            ),
            requests as i64
        );
    }
}

/// A database written by an older server holds whole payloads: they are
/// read as they are, never rewritten, and new rows only reuse chunks.
#[test]
fn rows_stored_whole_by_an_older_server_stay_as_they_are() {
    let path = temp_db("mixed");
    let store = open(&path);
    let mut t = Turns::new(&["ses_a"]);
    store.commit(&setup(&["ses_a"])).unwrap();
    // What an older binary wrote: the same rows, payloads verbatim.
    {
        let raw = sqlite::open(&path).unwrap();
        for _ in 0..20 {
            for w in t.turn(0, &[]) {
                let StoreWrite::InsertEvent(e) = w else {
                    unreachable!()
                };
                let mut st = raw
                    .prepare(
                        "INSERT INTO session_events (rowid, id, session_id, client_key_id, \
                         event_type, payload, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    )
                    .unwrap();
                st.bind((1, e.seq as i64)).unwrap();
                st.bind((2, e.id.as_str())).unwrap();
                st.bind((3, e.session_id.as_str())).unwrap();
                st.bind((4, e.client_key_id.as_deref())).unwrap();
                st.bind((5, e.event_type.as_str())).unwrap();
                st.bind((6, e.payload.as_str())).unwrap();
                st.bind((7, e.created_at.as_str())).unwrap();
                st.next().unwrap();
            }
        }
    }
    let before = stored_payloads(&path);
    let mut conn = store.conn();
    for _ in 0..20 {
        let batch = t.turn(0, &[]);
        conn.commit(&batch).unwrap();
    }
    check_reads(&mut conn, "ses_a", &t.of("ses_a"));
    let after = stored_payloads(&path);
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "old rows are untouched"
    );
    // The first new request starts the chunks with its whole history; the
    // next ones add one chunk each.
    assert_eq!(scalar(&path, "SELECT COUNT(*) FROM bae_history_chunks"), 20);
    assert!(after[before.len()..]
        .iter()
        .filter(|r| r.1 == "provider.request")
        .all(|r| r.2.starts_with("{\"bae_chunks\":")));
}

/// What a store remembers of the latest request is rebuilt from the
/// database: with restarts (and a fresh connection handle per batch) it
/// stores exactly what it stores without.
#[test]
fn a_restart_rebuilds_what_the_next_request_reuses() {
    let run = |restarts: bool| -> (TestPath, Vec<EventRow>) {
        let path = temp_db("restart");
        let mut store = open(&path);
        let mut t = Turns::new(&["ses_a", "ses_b"]);
        let mut batches = vec![setup(&["ses_a", "ses_b"])];
        for i in 0..50 {
            let mut b = t.turn(i % 2, &[]);
            if i % 5 == 0 {
                b.extend(t.turn(1 - i % 2, &[]));
            }
            batches.push(b);
        }
        let mut conn = store.conn();
        for (i, b) in batches.iter().enumerate() {
            if restarts {
                drop(conn);
                if i % 7 == 3 {
                    drop(store);
                    store = open(&path);
                }
                conn = store.conn();
            }
            conn.commit(b).unwrap();
        }
        drop(conn);
        (path, t.rows)
    };
    let (a, rows) = run(false);
    let (b, _) = run(true);
    let all = |p: &Path| -> Vec<(String, i64, String)> {
        let conn = sqlite::open(p).unwrap();
        let mut st = conn
            .prepare(
                "SELECT session_id, ord, body FROM bae_history_chunks ORDER BY session_id, ord",
            )
            .unwrap();
        let mut out = vec![];
        while let Ok(sqlite::State::Row) = st.next() {
            out.push((
                st.read(0).unwrap(),
                st.read(1).unwrap(),
                st.read(2).unwrap(),
            ));
        }
        out
    };
    assert_eq!(all(&a), all(&b), "same chunks");
    assert_eq!(stored_payloads(&a), stored_payloads(&b), "same stored rows");
    let requests = rows
        .iter()
        .filter(|r| r.event_type == "provider.request")
        .count();
    assert_eq!(all(&b).len(), requests, "one chunk per request");
    let store = open(&b);
    let mut conn = store.conn();
    for s in ["ses_a", "ses_b"] {
        let exp: Vec<EventRow> = rows.iter().filter(|r| r.session_id == s).cloned().collect();
        check_reads(&mut conn, s, &exp);
    }
}

/// A failed batch leaves no chunk behind, and what the store remembered
/// from it is forgotten: the next request reuses only committed chunks.
#[test]
fn a_failed_batch_leaves_nothing_the_next_request_relies_on() {
    let path = temp_db("rollback");
    let store = open(&path);
    let mut conn = store.conn();
    conn.commit(&setup(&["ses_a"])).unwrap();
    let mut t = Turns::new(&["ses_a"]);
    for _ in 0..5 {
        let batch = t.turn(0, &[]);
        conn.commit(&batch).unwrap();
    }
    let chunks_before = scalar(&path, "SELECT COUNT(*) FROM bae_history_chunks");
    // A turn whose batch fails at its end (a duplicate rowid).
    let mut failing = t.turn(0, &[]);
    failing.push(StoreWrite::InsertEvent(event(
        1,
        "ses_a",
        "tool.call",
        "{}".into(),
    )));
    assert!(conn.commit(&failing).is_err());
    assert_eq!(
        scalar(&path, "SELECT COUNT(*) FROM bae_history_chunks"),
        chunks_before
    );
    // Forget the failed turn's rows and history, then go on.
    t.rows.truncate(t.rows.len() - 4);
    let h = &mut t.history[0].1;
    h.truncate(h.len() - 2);
    for _ in 0..3 {
        let batch = t.turn(0, &[]);
        conn.commit(&batch).unwrap();
    }
    check_reads(&mut conn, "ses_a", &t.of("ses_a"));
}

/// Payloads the store cannot share anything of are stored as they are; one
/// that looks like a stored form is kept apart from them.
#[test]
fn odd_payloads_are_stored_as_they_are() {
    let path = temp_db("odd");
    let store = open(&path);
    let mut conn = store.conn();
    conn.commit(&setup(&["ses_a"])).unwrap();
    let payloads = [
        "{not json".to_string(),
        json!({"attempt": 0, "model": "m"}).to_string(),
        json!({"messages": "text"}).to_string(),
        json!({"messages": []}).to_string(),
        r#"{"messages": [ {"role":"user"} ]}"#.to_string(),
        r#"{"bae_chunks":{"messages":[[0,1]]},"messages":null}"#.to_string(),
        request(&[msg("user", 0)], &[]),
        r#"{"bae_chunks":{"messages":[[0,1]]},"messages":null}"#.to_string(),
    ];
    let rows: Vec<EventRow> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| event(i as u64 + 1, "ses_a", "provider.request", p.clone()))
        .collect();
    // The same texts as other event types are never touched either.
    let mut all = rows.clone();
    all.push(event(20, "ses_a", "tool.call", payloads[5].clone()));
    let batch: Vec<StoreWrite> = all.iter().cloned().map(StoreWrite::InsertEvent).collect();
    conn.commit(&batch).unwrap();
    check_reads(&mut conn, "ses_a", &all);
    let stored = stored_payloads(&path);
    for i in [0, 1, 2, 3, 4] {
        assert_eq!(stored[i].2, payloads[i], "stored verbatim");
    }
    assert_eq!(stored[8].2, payloads[5], "other event types verbatim");
    assert_ne!(stored[5].2, payloads[5], "a look-alike is escaped");
}

/// What storing histories once costs and saves, in-process (no sockets):
/// 1,000 text turns of one session committed one turn per batch, once as
/// `provider.request` rows (shared histories) and once under another event
/// type (stored whole, as before). Prints commit time per turn, the time
/// to read pages of 100 events, and the database size.
///
/// `cargo test --release -p io-smol --test store_history -- --ignored --nocapture`
#[test]
#[ignore]
fn cost_of_a_long_session() {
    use std::time::{Duration, Instant};
    println!("| rows | turns | commit µs/turn (last 50) | read all, pages of 100 | read the last page | db bytes |");
    println!("|---|---:|---:|---:|---:|---:|");
    for whole in [true, false] {
        let path = temp_db("cost");
        let store = open(&path);
        let mut conn = store.conn();
        conn.commit(&setup(&["ses_a"])).unwrap();
        let mut t = Turns::new(&["ses_a"]);
        let mut times = Vec::new();
        for turn in 1..=1000 {
            let mut batch = t.turn(0, &[]);
            if whole {
                for w in &mut batch {
                    if let StoreWrite::InsertEvent(e) = w {
                        if e.event_type == "provider.request" {
                            e.event_type = "provider.request.whole".into();
                        }
                    }
                }
            }
            let start = Instant::now();
            conn.commit(&batch).unwrap();
            times.push(start.elapsed());
            if turn == 250 || turn == 1000 {
                let recent = &times[times.len() - 50..];
                let per_turn = recent.iter().sum::<Duration>() / 50;
                let start = Instant::now();
                let mut after = 0;
                let mut last = Duration::ZERO;
                loop {
                    let s = Instant::now();
                    let page = rows(
                        conn.read(&StoreRead::Events {
                            session_id: "ses_a".into(),
                            after_seq: after,
                            limit: 100,
                        })
                        .unwrap(),
                    );
                    let Some(l) = page.last() else { break };
                    last = s.elapsed();
                    after = l.seq;
                }
                let all = start.elapsed();
                let bytes = scalar(&path, "PRAGMA page_count") * scalar(&path, "PRAGMA page_size");
                println!(
                    "| {} | {turn} | {:.0} | {:.1} ms | {:.2} ms | {:.2} MB |",
                    if whole { "whole (as before)" } else { "shared" },
                    per_turn.as_secs_f64() * 1e6,
                    all.as_secs_f64() * 1e3,
                    last.as_secs_f64() * 1e3,
                    bytes as f64 / 1e6
                );
            }
        }
    }
}
