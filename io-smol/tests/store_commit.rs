//! The engine's write/read contract against SQLite: every `StoreWrite`
//! variant round-trips through `load_snapshot`/`read`, batches are atomic,
//! and History applies the compaction lower bound of spec 07 §6.

use engine::store::{
    EventRow, KeyRole, KeyRow, ProfileRow, ReadResult, SessionRow, SessionState, StoreRead,
    StoreWrite,
};
use io_smol::store::{Store, Synchronous};
use serde_json::json;
use testkit::TestPath;

/// Its directory is removed when the test is done (testkit::TestPath).
fn temp_db(tag: &str) -> TestPath {
    TestPath::new(&format!("baesrv-{tag}"), "bae.db").unwrap()
}

fn open(tag: &str) -> (Store, TestPath) {
    let path = temp_db(tag);
    let store = Store::open(&path, Synchronous::Normal).unwrap();
    store.migrate().unwrap();
    (store, path)
}

const T: &str = "2026-01-01T00:00:00.000Z";

fn profile() -> ProfileRow {
    ProfileRow {
        id: "pro_1".into(),
        name: "default".into(),
        primary_provider: "claude".into(),
        fallback_providers: vec!["gpt".into()],
        mcp_servers: vec!["fs".into()],
        allowed_tools: vec![json!("read_file"), json!(7)],
        available_sandboxes: vec!["python:3.12".into()],
        created_at: T.into(),
        updated_at: T.into(),
        deleted_at: None,
    }
}

fn client_key() -> KeyRow {
    KeyRow {
        id: "key_c".into(),
        name: "laptop".into(),
        key_hash: "a".repeat(64),
        key_prefix: "bae_1a2b".into(),
        role: KeyRole::Client,
        profile_id: Some("pro_1".into()),
        client_id: None,
        created_at: T.into(),
        last_used_at: None,
        deleted_at: None,
    }
}

fn session_key(id: &str, session: &str) -> KeyRow {
    KeyRow {
        id: id.into(),
        name: session.into(),
        key_hash: "b".repeat(64),
        key_prefix: "bae_ses_".into(),
        role: KeyRole::Session,
        profile_id: Some("pro_1".into()),
        client_id: Some("key_c".into()),
        created_at: T.into(),
        last_used_at: None,
        deleted_at: None,
    }
}

fn session(id: &str) -> SessionRow {
    SessionRow {
        id: id.into(),
        client_key_id: "key_c".into(),
        profile_id: "pro_1".into(),
        state: SessionState::Open,
        client_version: Some("bae-py/1.0".into()),
        client_tools: json!({"key_c": [{"name": "t", "description": "d", "input_schema": {}}]})
            .to_string(),
        sandbox_tools: json!({}).to_string(),
        subagent_tools: json!({"key_c": []}).to_string(),
        compaction: Some(r#"{"mode":"auto","size":128000}"#.to_string()),
        created_at: T.into(),
        closed_at: None,
    }
}

fn event(seq: u64, session: &str, ty: &str, payload: serde_json::Value) -> EventRow {
    EventRow {
        seq,
        id: format!("evt_{seq:032x}"),
        session_id: session.into(),
        client_key_id: Some("key_c".into()),
        event_type: ty.into(),
        payload: payload.to_string(),
        created_at: T.into(),
    }
}

fn base_batch() -> Vec<StoreWrite> {
    vec![
        StoreWrite::InsertProfile(profile()),
        StoreWrite::InsertKey(client_key()),
        StoreWrite::InsertSession(session("ses_1")),
        StoreWrite::InsertKey(session_key("key_s1", "ses_1")),
        StoreWrite::InsertEvent(event(1, "ses_1", "session.open", json!({"x": 1}))),
    ]
}

#[test]
fn every_write_variant_round_trips() {
    let (store, path) = open("roundtrip");
    store.commit(&base_batch()).unwrap();

    let mut updated = profile();
    updated.name = "renamed".into();
    updated.fallback_providers = vec![];
    updated.updated_at = "2026-01-02T00:00:00.000Z".into();
    updated.deleted_at = Some("2026-01-03T00:00:00.000Z".into());
    let mut s2 = session("ses_2");
    s2.compaction = None;
    s2.client_version = None;
    store
        .commit(&[
            StoreWrite::UpdateProfile(updated.clone()),
            StoreWrite::InsertSession(s2.clone()),
            StoreWrite::InsertKey(session_key("key_s2", "ses_2")),
            StoreWrite::InsertKey(session_key("key_gone", "ses_2")),
            StoreWrite::RevokeKey {
                id: "key_gone".into(),
                at: T.into(),
            },
            StoreWrite::SetKeyHash {
                id: "key_c".into(),
                key_hash: "c".repeat(64),
            },
            StoreWrite::TouchKey {
                id: "key_c".into(),
                at: "2026-01-04T00:00:00.000Z".into(),
            },
            StoreWrite::SetSessionState {
                id: "ses_2".into(),
                state: SessionState::Closed,
                closed_at: Some("2026-01-05T00:00:00.000Z".into()),
            },
            StoreWrite::SetSessionTools {
                id: "ses_1".into(),
                client_tools: json!({"key_c": [], "key_d": [{"name": "u"}]}).to_string(),
                sandbox_tools: json!({"key_c": [{"image": "python"}]}).to_string(),
                subagent_tools: json!({}).to_string(),
            },
            StoreWrite::InsertEvent(event(2, "ses_1", "session.driver.register", json!({}))),
            StoreWrite::InsertEvent(event(3, "ses_2", "session.driver.register", json!({}))),
            StoreWrite::InsertEvent(event(7, "ses_1", "session.driver.register", json!({}))),
        ])
        .unwrap();

    // Reopen: the snapshot must come from disk.
    drop(store);
    let store = Store::open(&path, Synchronous::Normal).unwrap();
    store.migrate().unwrap();
    let snap = store.load_snapshot().unwrap();

    assert_eq!(snap.profiles, vec![updated]);
    let ids: Vec<_> = snap.keys.iter().map(|k| k.id.as_str()).collect();
    assert_eq!(ids, ["key_c", "key_s1", "key_s2"], "revoked key excluded");
    let c = &snap.keys[0];
    assert_eq!(c.key_hash, "c".repeat(64));
    assert_eq!(c.last_used_at.as_deref(), Some("2026-01-04T00:00:00.000Z"));
    assert_eq!(snap.keys[1], session_key("key_s1", "ses_1"));

    assert_eq!(snap.sessions.len(), 2);
    let s1 = &snap.sessions[0];
    let parsed = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap();
    assert_eq!(
        parsed(&s1.client_tools),
        json!({"key_c": [], "key_d": [{"name": "u"}]})
    );
    assert_eq!(
        parsed(&s1.sandbox_tools),
        json!({"key_c": [{"image": "python"}]})
    );
    assert_eq!(parsed(&s1.subagent_tools), json!({}));
    assert_eq!(
        s1.compaction.as_deref(),
        Some(r#"{"mode":"auto","size":128000}"#)
    );
    let mut want2 = s2;
    want2.state = SessionState::Closed;
    want2.closed_at = Some("2026-01-05T00:00:00.000Z".into());
    assert_eq!(snap.sessions[1], want2);

    assert_eq!(snap.max_event_seq, 7);
    assert_eq!(
        store.conn().activity().unwrap(),
        io_smol::store::Activity {
            profiles: 0, // the only profile is soft-deleted
            client_keys: 1,
            open_sessions: 1,
            total_sessions: 2,
            events: 4,
        }
    );
    // Only the open session's registration, deduplicated, in log order.
    assert_eq!(snap.drivers, vec![("ses_1".into(), "key_c".into())]);
    assert_eq!(snap.events_total, 4);
    let counts = engine::store::SessionCounts {
        total: 2,
        open: 1,
        drivers: 1,
    };
    assert_eq!(snap.stored_sessions, counts);
    // A lazy snapshot leaves sessions and their keys in the store.
    let lazy = store
        .load_snapshot_of(engine::store::SnapshotScope::Lazy)
        .unwrap();
    assert!(lazy.sessions.is_empty() && lazy.drivers.is_empty());
    assert!(lazy.keys.iter().all(|k| k.role != KeyRole::Session));
    assert_eq!((lazy.stored_sessions, lazy.events_total), (counts, 4));

    // Raw column formats (reference compatibility).
    let conn = sqlite::open(&path).unwrap();
    let mut st = conn
        .prepare("SELECT provider_config, fallback_configs, allowed_tools FROM profiles")
        .unwrap();
    st.next().unwrap();
    assert_eq!(st.read::<String, _>(0).unwrap(), "\"claude\"");
    assert_eq!(st.read::<String, _>(1).unwrap(), "[]");
    assert_eq!(st.read::<String, _>(2).unwrap(), "[\"read_file\",7]");
    let mut st = conn
        .prepare("SELECT compaction FROM sessions WHERE id = 'ses_2'")
        .unwrap();
    st.next().unwrap();
    assert_eq!(st.read::<Option<String>, _>(0).unwrap(), None);
}

/// Texts are read back by length: a name with an embedded NUL (JSON's
/// `\u0000`, which a client may send) and non-ASCII text survive whole.
#[test]
fn texts_with_nul_and_non_ascii_round_trip_whole() {
    let (store, path) = open("nul-text");
    let mut key = client_key();
    key.name = "lap\u{0}top ✓".into();
    let mut p = profile();
    p.name = "pro\u{0}file".into();
    store
        .commit(&[StoreWrite::InsertProfile(p), StoreWrite::InsertKey(key)])
        .unwrap();
    drop(store);
    let store = Store::open(&path, Synchronous::Normal).unwrap();
    let snap = store.load_snapshot().unwrap();
    assert_eq!(snap.keys[0].name, "lap\u{0}top ✓");
    assert_eq!(snap.profiles[0].name, "pro\u{0}file");
}

/// Events pages are rendered straight from SQLite's column bytes; they
/// must be the bytes a page rendered from rows gives, cut at the same row,
/// for texts with NULs and non-ASCII, a NULL client key, and a payload that
/// is not UTF-8 (read back lossily, as every other read of it).
#[test]
fn events_pages_from_columns_match_pages_from_rows() {
    let (store, path) = open("pages");
    let mut batch = base_batch();
    for seq in 2..=30 {
        let mut e = event(
            seq,
            "ses_1",
            if seq % 4 == 0 {
                "server.message.send"
            } else {
                "client.message.send"
            },
            json!({"text": format!("n\u{0}{seq} ✓ {}", "x".repeat((seq * 37 % 300) as usize))}),
        );
        if seq % 5 == 0 {
            e.client_key_id = None;
        }
        batch.push(StoreWrite::InsertEvent(e));
    }
    store.commit(&batch).unwrap();
    let raw = sqlite::open(&path).unwrap();
    raw.execute("UPDATE session_events SET payload = CAST(X'7B2278223A2280FF227D' AS TEXT) WHERE rowid = 17")
        .unwrap();
    let mut conn = store.conn();
    let mut checked = 0;
    for after_seq in [0, 1, 7, 16, 17, 29, 30] {
        for limit in [1, 3, 10, 100] {
            let plain = StoreRead::Events {
                session_id: "ses_1".into(),
                after_seq,
                limit: limit + 1,
            };
            let ReadResult::Events(rows) = conn.read(&plain).unwrap() else {
                panic!("not rows")
            };
            // Bounds that fall between rows and exactly on their ends.
            let weight = |n: usize| {
                rows.iter()
                    .take(n)
                    .map(engine::store::page::row_bytes)
                    .sum()
            };
            for max_bytes in [0, 200, 1_000, usize::MAX, weight(1), weight(2)] {
                let page = StoreRead::EventsPage {
                    session_id: "ses_1".into(),
                    after_seq,
                    limit,
                    max_bytes,
                };
                let want = engine::store::page::render_from_rows(&page, rows.clone()).unwrap();
                assert_eq!(conn.read(&page).unwrap(), want, "{page:?}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 7 * 4 * 6);
    let ReadResult::Page(body) = conn
        .read(&StoreRead::EventsPage {
            session_id: "ses_1".into(),
            after_seq: 16,
            limit: 1,
            max_bytes: usize::MAX,
        })
        .unwrap()
    else {
        panic!("not a page")
    };
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert!(body.contains("\u{FFFD}"), "{body}");
}

#[test]
fn events_and_event_seq_reads() {
    let (store, _path) = open("reads");
    let mut batch = base_batch();
    batch.push(StoreWrite::InsertSession(session("ses_2")));
    for seq in 2..=10 {
        let sid = if seq % 3 == 0 { "ses_2" } else { "ses_1" };
        batch.push(StoreWrite::InsertEvent(event(
            seq,
            sid,
            "client.message.send",
            json!({"n": seq}),
        )));
    }
    store.commit(&batch).unwrap();
    let mut conn = store.conn();
    let r = conn
        .read(&StoreRead::Events {
            session_id: "ses_1".into(),
            after_seq: 2,
            limit: 3,
        })
        .unwrap();
    let ReadResult::Events(rows) = r else {
        panic!("{r:?}")
    };
    let seqs: Vec<u64> = rows.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [4, 5, 7]);
    assert_eq!(
        rows[0],
        event(4, "ses_1", "client.message.send", json!({"n": 4}))
    );
    // Cached statements are reusable.
    let r = conn
        .read(&StoreRead::Events {
            session_id: "ses_1".into(),
            after_seq: 7,
            limit: 100,
        })
        .unwrap();
    assert!(matches!(r, ReadResult::Events(ref v) if v.iter().map(|e| e.seq).eq([8, 10])));

    let seq = |sid: &str, eid: &str| {
        store
            .read(&StoreRead::EventSeq {
                session_id: sid.into(),
                event_id: eid.into(),
            })
            .unwrap()
    };
    assert_eq!(
        seq("ses_2", &format!("evt_{:032x}", 6)),
        ReadResult::EventSeq(Some(6))
    );
    assert_eq!(
        seq("ses_1", &format!("evt_{:032x}", 6)),
        ReadResult::EventSeq(None)
    );
    assert_eq!(seq("ses_1", "evt_nope"), ReadResult::EventSeq(None));
}

#[test]
fn failing_batch_leaves_nothing() {
    let (store, _path) = open("atomic");
    store.commit(&base_batch()).unwrap();
    let before = store.load_snapshot().unwrap();
    let err = store.commit(&[
        StoreWrite::InsertSession(session("ses_9")),
        StoreWrite::InsertEvent(event(2, "ses_9", "session.open", json!({}))),
        StoreWrite::TouchKey {
            id: "key_c".into(),
            at: "2030-01-01T00:00:00.000Z".into(),
        },
        // Duplicate rowid: fails midway.
        StoreWrite::InsertEvent(event(1, "ses_9", "x", json!({}))),
        StoreWrite::InsertEvent(event(3, "ses_9", "y", json!({}))),
    ]);
    assert!(err.is_err());
    let after = store.load_snapshot().unwrap();
    assert_eq!(after.sessions, before.sessions);
    assert_eq!(after.keys, before.keys);
    assert_eq!(after.max_event_seq, 1);
    // Foreign keys are enforced outside migrations.
    assert!(store
        .commit(&[StoreWrite::InsertEvent(event(
            5,
            "ses_missing",
            "x",
            json!({})
        ))])
        .is_err());
    // The connection is still usable afterwards.
    store
        .commit(&[StoreWrite::InsertEvent(event(2, "ses_1", "x", json!({})))])
        .unwrap();
    assert_eq!(store.load_snapshot().unwrap().max_event_seq, 2);
}

/// The engine's history rules (`engine::history_load`) over the SQLite
/// store's plain reads.
fn history(store: &Store, sid: &str) -> engine::history_load::HistoryLoad {
    engine::history_load::load(sid, |r| {
        store
            .read(r)
            .map_err(|e| engine::ReadError::Store(e.to_string()))
    })
    .unwrap()
}

fn eid(seq: u64) -> String {
    format!("evt_{seq:032x}")
}

/// Session with messages at seq 2..=9 (alternating user/assistant), plus
/// provider responses.
fn history_fixture(tag: &str) -> (Store, TestPath) {
    let (store, db) = open(tag);
    let mut b = base_batch();
    b.push(StoreWrite::InsertSession(session("ses_other")));
    for seq in 2..=9u64 {
        let ty = if seq % 2 == 0 {
            "client.message.send"
        } else {
            "server.message.send"
        };
        b.push(StoreWrite::InsertEvent(event(
            seq,
            "ses_1",
            ty,
            json!({"n": seq}),
        )));
    }
    b.push(StoreWrite::InsertEvent(event(
        10,
        "ses_other",
        "server.message.send",
        json!({"other": true}),
    )));
    store.commit(&b).unwrap();
    (store, db)
}

fn seqs(h: &engine::history_load::HistoryLoad) -> Vec<u64> {
    h.messages.iter().map(|m| m.0).collect()
}

#[test]
fn history_without_compaction_is_full() {
    let (store, _db) = history_fixture("hist-full");
    let h = history(&store, "ses_1");
    assert_eq!(seqs(&h), [2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(h.messages[0].1, "client.message.send");
    assert_eq!(h.messages[0].2, json!({"n": 2}));
    assert_eq!(h.newest_usage, None);
}

#[test]
fn history_bound_from_preamble() {
    let (store, _db) = history_fixture("hist-pre");
    store
        .commit(&[
            // An older completed compaction is superseded by the newest one.
            StoreWrite::InsertEvent(event(
                11,
                "ses_1",
                "session.compaction.completed",
                json!({"preamble_event_id": eid(3), "summary_event_id": eid(4)}),
            )),
            StoreWrite::InsertEvent(event(
                12,
                "ses_1",
                "session.compaction.completed",
                json!({"preamble_event_id": eid(7), "summary_event_id": eid(8)}),
            )),
            // started without completed is ignored.
            StoreWrite::InsertEvent(event(13, "ses_1", "session.compaction.started", json!({}))),
        ])
        .unwrap();
    assert_eq!(seqs(&history(&store, "ses_1")), [7, 8, 9]);
}

#[test]
fn history_bound_from_legacy_summary() {
    let (store, _db) = history_fixture("hist-sum");
    store
        .commit(&[StoreWrite::InsertEvent(event(
            11,
            "ses_1",
            "session.compaction.completed",
            json!({"summary_event_id": eid(6)}),
        ))])
        .unwrap();
    assert_eq!(seqs(&history(&store, "ses_1")), [6, 7, 8, 9]);

    // A preamble that is not a server message falls back to the summary.
    store
        .commit(&[StoreWrite::InsertEvent(event(
            12,
            "ses_1",
            "session.compaction.completed",
            json!({"preamble_event_id": eid(4), "summary_event_id": eid(5)}),
        ))])
        .unwrap();
    assert_eq!(seqs(&history(&store, "ses_1")), [5, 6, 7, 8, 9]);
}

#[test]
fn history_broken_reference_means_full_history() {
    let (store, _db) = history_fixture("hist-broken");
    store
        .commit(&[StoreWrite::InsertEvent(event(
            11,
            "ses_1",
            "session.compaction.completed",
            // Ids of another session and of nothing at all.
            json!({"preamble_event_id": eid(10), "summary_event_id": "evt_missing"}),
        ))])
        .unwrap();
    assert_eq!(seqs(&history(&store, "ses_1")), [2, 3, 4, 5, 6, 7, 8, 9]);
    // Non-string ids are broken references too.
    store
        .commit(&[StoreWrite::InsertEvent(event(
            12,
            "ses_1",
            "session.compaction.completed",
            json!({"preamble_event_id": 7, "summary_event_id": null}),
        ))])
        .unwrap();
    assert_eq!(seqs(&history(&store, "ses_1")).len(), 8);
}

#[test]
fn history_newest_usage() {
    let (store, _db) = history_fixture("hist-usage");
    let resp = |seq: u64, payload: serde_json::Value| {
        StoreWrite::InsertEvent(event(seq, "ses_1", "provider.response", payload))
    };
    store
        .commit(&[resp(
            11,
            json!({"ok": true, "status": 200, "usage": {"input_tokens": 100, "output_tokens": 20}}),
        )])
        .unwrap();
    assert_eq!(history(&store, "ses_1").newest_usage, Some(Some((100, 20))));
    // Failures and compaction calls are skipped.
    store
        .commit(&[
            resp(12, json!({"ok": false, "status": 500})),
            resp(
                13,
                json!({"ok": true, "purpose": "compaction", "usage": {"input_tokens": 1, "output_tokens": 1}}),
            ),
        ])
        .unwrap();
    assert_eq!(history(&store, "ses_1").newest_usage, Some(Some((100, 20))));
    // The newest successful one without usable usage wins (older ones are
    // not searched).
    store
        .commit(&[resp(14, json!({"ok": true, "status": 200, "usage": null}))])
        .unwrap();
    assert_eq!(history(&store, "ses_1").newest_usage, Some(None));
    store
        .commit(&[resp(
            15,
            json!({"ok": true, "usage": {"input_tokens": 5, "output_tokens": 1.5}}),
        )])
        .unwrap();
    assert_eq!(history(&store, "ses_1").newest_usage, Some(None));
    // A malformed payload does not break the query.
    store
        .commit(&[StoreWrite::InsertEvent(EventRow {
            payload: "{not json".into(),
            ..event(16, "ses_1", "provider.response", json!({}))
        })])
        .unwrap();
    assert_eq!(history(&store, "ses_1").newest_usage, Some(None));
    assert_eq!(history(&store, "ses_other").newest_usage, None);
}

/// Throughput sanity check of group commit (run with `--ignored --nocapture`
/// in release mode to see the number).
#[test]
#[ignore]
fn group_commit_throughput() {
    let (store, _db) = open("throughput");
    store.commit(&base_batch()).unwrap();
    let mut conn = store.conn();
    let payload =
        json!({"role": "assistant", "content": [{"type": "text", "text": "x".repeat(200)}]});
    let n = 200_000u64;
    let batch_size = 500u64;
    let start = std::time::Instant::now();
    let mut seq = 2;
    while seq < n {
        let batch: Vec<_> = (seq..seq + batch_size)
            .map(|s| {
                StoreWrite::InsertEvent(event(s, "ses_1", "server.message.send", payload.clone()))
            })
            .collect();
        conn.commit(&batch).unwrap();
        seq += batch_size;
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!("{:.0} events/s", (seq - 2) as f64 / secs);
}

/// The server's store connection leaves WAL checkpoints to a thread of its
/// own: commits far below the automatic threshold it keeps as a backstop
/// still reach the database file soon after, without any commit running a
/// checkpoint itself.
#[test]
fn a_background_thread_checkpoints_the_wal_after_commits() {
    let (store, path) = open("checkpoint");
    store.commit(&base_batch()).unwrap();
    let db_len = || std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let mut backend = io_smol::store::Backend::Sqlite(store);
    let mut worker = backend.worker();
    let before = db_len();
    // About 2 MB of events: some 500 pages, far below the 10,000-page
    // backstop, so only the checkpoint thread can copy them.
    let text = "x".repeat(20_000);
    for seq in 2..100u64 {
        let e = event(seq, "ses_1", "client.message.send", json!({"t": text}));
        worker.commit(&[StoreWrite::InsertEvent(e)]).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while db_len() < before + 1_500_000 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        db_len() >= before + 1_500_000,
        "database file {} bytes (was {before}): the WAL was not checkpointed",
        db_len()
    );
}
