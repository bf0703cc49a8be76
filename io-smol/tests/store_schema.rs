//! Schema, migrations and connection setup (spec 08 §1–§3, C-228, C-233).

use io_smol::store::{Store, StoreError, Synchronous, LATEST_VERSION};
use testkit::TestDir;

/// Removed when the test is done (testkit::TestDir).
fn temp_dir(tag: &str) -> TestDir {
    TestDir::new(&format!("baesrv-{tag}")).unwrap()
}

fn scalar(path: &std::path::Path, sql: &str) -> i64 {
    let conn = sqlite::open(path).unwrap();
    let mut st = conn.prepare(sql).unwrap();
    st.next().unwrap();
    st.read::<i64, _>(0).unwrap()
}

#[test]
fn fresh_database_migrates_to_9_with_index() {
    let dir = temp_dir("schema");
    let db = dir.join("bae.db");
    let store = Store::open(&db, Synchronous::Normal).unwrap();
    let report = store.migrate().unwrap();
    assert_eq!((report.from, report.to), (0, 9));
    assert_eq!(store.schema_version().unwrap(), LATEST_VERSION);
    drop(store);

    assert_eq!(scalar(&db, "SELECT MAX(version) FROM schema_version"), 9);
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM schema_version"), 9);
    assert_eq!(
        scalar(
            &db,
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' \
             AND name = 'idx_session_events_session_type'"
        ),
        1
    );
    // applied_at uses datetime('now'): YYYY-MM-DD HH:MM:SS.
    let conn = sqlite::open(&db).unwrap();
    let mut st = conn
        .prepare("SELECT applied_at FROM schema_version WHERE version = 9")
        .unwrap();
    st.next().unwrap();
    let at: String = st.read(0).unwrap();
    assert_eq!(at.len(), 19, "{at}");
    assert_eq!(&at[10..11], " ");
    // Columns added by 7–9 and the widened role CHECK of 6.
    conn.execute(
        "SELECT available_sandboxes FROM profiles; \
         SELECT sandbox_tools, subagent_tools, compaction FROM sessions;",
    )
    .unwrap();
    conn.execute(
        "INSERT INTO keys (id, name, key_hash, key_prefix, role, created_at) \
         VALUES ('key_a', 'n', 'h', 'bae_admi', 'admin', 't')",
    )
    .unwrap();
    assert!(conn
        .execute(
            "INSERT INTO keys (id, name, key_hash, key_prefix, role, created_at) \
             VALUES ('key_b', 'n', 'h', 'p', 'root', 't')",
        )
        .is_err());
    // WAL requested.
    let mut st = conn.prepare("PRAGMA journal_mode").unwrap();
    st.next().unwrap();
    assert_eq!(st.read::<String, _>(0).unwrap().to_lowercase(), "wal");
}

#[test]
fn reopening_is_idempotent() {
    let dir = temp_dir("reopen");
    let db = dir.join("bae.db");
    for round in 0..3 {
        let store = Store::open(&db, Synchronous::Full).unwrap();
        let r = store.migrate().unwrap();
        assert_eq!(r.from, if round == 0 { 0 } else { 9 });
        assert_eq!(store.schema_version().unwrap(), 9);
    }
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM schema_version"), 9);
    // The extra (unnumbered) indexes and tables exist exactly once, and
    // the retired one not at all.
    assert_eq!(
        scalar(
            &db,
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'bae_idx_%'"
        ),
        7,
        "bae_idx_keys_role_name, bae_idx_session_events_session, bae_idx_idempotency_created, \
         bae_idx_session_lineage_parent, bae_idx_usage_session, bae_idx_usage_key, \
         bae_idx_usage_profile"
    );
    assert_eq!(
        scalar(
            &db,
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'bae_idx_keys_role_prefix'"
        ),
        0
    );
    assert_eq!(
        scalar(
            &db,
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'bae_%'"
        ),
        5,
        "bae_idempotency_keys, bae_history_chunks, bae_session_lineage, bae_usage, bae_quotas"
    );
}

#[test]
fn partial_database_is_completed() {
    // A database stopped at version 5 (before the keys rebuild) keeps its
    // rows through migrations 6–9.
    let dir = temp_dir("partial");
    let db = dir.join("bae.db");
    {
        let conn = sqlite::open(&db).unwrap();
        for m in &io_smol::store::MIGRATIONS[..5] {
            conn.execute(m.sql).unwrap();
            conn.execute(format!(
                "INSERT INTO schema_version VALUES ({}, datetime('now'))",
                m.version
            ))
            .unwrap();
        }
        conn.execute(
            "INSERT INTO keys (id, name, key_hash, key_prefix, role, created_at) \
             VALUES ('key_old', 'label', 'h', 'bae_1234', 'client', 't')",
        )
        .unwrap();
    }
    let store = Store::open(&db, Synchronous::Normal).unwrap();
    assert_eq!(store.migrate().unwrap().from, 5);
    let snap = store.load_snapshot().unwrap();
    assert_eq!(snap.keys.len(), 1);
    assert_eq!(snap.keys[0].id, "key_old");
}

#[test]
fn newer_schema_is_refused() {
    let dir = temp_dir("newer");
    let db = dir.join("bae.db");
    Store::open(&db, Synchronous::Normal)
        .unwrap()
        .migrate()
        .unwrap();
    {
        let conn = sqlite::open(&db).unwrap();
        conn.execute("INSERT INTO schema_version VALUES (10, datetime('now'))")
            .unwrap();
    }
    let store = Store::open(&db, Synchronous::Normal).unwrap();
    let err = store.migrate().unwrap_err();
    assert_eq!(err, StoreError::NewerSchema { db: 10, max: 9 });
    assert_eq!(
        err.to_string(),
        "database schema version 10 is newer than this binary supports (max 9); \
         upgrade the server or restore a compatible snapshot"
    );
}

#[test]
fn missing_directory_is_reported() {
    let dir = temp_dir("missing");
    let db = dir.join("nope").join("bae.db");
    let err = Store::open(&db, Synchronous::Normal).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(text.contains("must exist and be writable"), "{text}");
}

#[test]
fn permission_failures_suggest_a_writable_location() {
    let e = StoreError::Migrate {
        detail: "attempt to write a readonly database (code 8)".into(),
    };
    assert!(e.to_string().contains("must exist and be writable"), "{e}");
    let e = StoreError::Migrate {
        detail: "no such table: x".into(),
    };
    assert!(!e.to_string().contains("writable"), "{e}");
}

/// Issue 38: a database whose `bae_session_lineage` predates the
/// `copied_through` column (forward-only, outside the numbered migrations:
/// `schema_version` stays 9) gets it at start, once; a row written before
/// reads 0 (nothing known to be copied), a new one keeps its boundary, and
/// a registration up to the boundary is not a driver of the copy.
#[test]
fn the_lineage_table_gains_the_copied_boundary_once() {
    use engine::store::{
        EventRow, LineageRow, Origin, ReadResult, SessionRow, SessionState, StoreRead, StoreWrite,
    };
    let dir = temp_dir("lineage-col");
    let db = dir.join("bae.db");
    {
        let conn = sqlite::open(&db).unwrap();
        for m in io_smol::store::MIGRATIONS {
            conn.execute(m.sql).unwrap();
            conn.execute(format!(
                "INSERT INTO schema_version VALUES ({}, datetime('now'))",
                m.version
            ))
            .unwrap();
        }
        // The table as the previous version created it, with a row.
        conn.execute(
            "CREATE TABLE bae_session_lineage (
                 session_id        TEXT PRIMARY KEY,
                 kind              TEXT NOT NULL,
                 parent_id         TEXT,
                 parent_event_id   TEXT,
                 source_session_id TEXT,
                 created_at        TEXT NOT NULL
             );
             INSERT INTO bae_session_lineage VALUES
                 ('ses_old', 'fork', 'ses_p', 'evt_p', NULL, 't');",
        )
        .unwrap();
    }
    let columns = || {
        scalar(
            &db,
            "SELECT COUNT(*) FROM pragma_table_info('bae_session_lineage') \
             WHERE name = 'copied_through'",
        )
    };
    assert_eq!(columns(), 0);
    for _ in 0..2 {
        let store = Store::open(&db, Synchronous::Normal).unwrap();
        assert_eq!(store.migrate().unwrap().from, 9);
    }
    assert_eq!(columns(), 1);
    assert_eq!(scalar(&db, "SELECT MAX(version) FROM schema_version"), 9);
    let store = Store::open(&db, Synchronous::Normal).unwrap();
    store.migrate().unwrap();
    let lineage = |id: &str| match store
        .read(&StoreRead::Lineage {
            session_id: id.into(),
            children: false,
        })
        .unwrap()
    {
        ReadResult::Lineage { own: Some(l), .. } => l,
        other => panic!("{other:?}"),
    };
    assert_eq!(lineage("ses_old").copied_through, 0);
    // A copy whose log holds a registration (seq 1, copied) and one of
    // its own (seq 2).
    let t = "2026-01-01T00:00:00.000Z";
    let register = |seq: u64, key: &str| {
        StoreWrite::InsertEvent(EventRow {
            seq,
            id: format!("evt_{seq}"),
            session_id: "ses_new".into(),
            client_key_id: Some(key.into()),
            event_type: "session.driver.register".into(),
            payload: "{}".into(),
            created_at: t.into(),
        })
    };
    let keys = "INSERT INTO profiles (id, name, provider_config, created_at, updated_at) \
                VALUES ('pro_1', 'p', '{}', 't', 't'); \
                INSERT INTO keys (id, name, key_hash, key_prefix, role, profile_id, created_at) \
                VALUES ('key_a', 'a', 'h', 'p', 'client', 'pro_1', 't'), \
                       ('key_b', 'b', 'h', 'p', 'client', 'pro_1', 't');";
    sqlite::open(&db).unwrap().execute(keys).unwrap();
    store
        .commit(&[
            StoreWrite::InsertSession(SessionRow {
                id: "ses_new".into(),
                client_key_id: "key_a".into(),
                profile_id: "pro_1".into(),
                state: SessionState::Open,
                client_version: None,
                client_tools: "{}".into(),
                sandbox_tools: "{}".into(),
                subagent_tools: "{}".into(),
                compaction: None,
                created_at: t.into(),
                closed_at: None,
            }),
            StoreWrite::InsertLineage(LineageRow {
                session_id: "ses_new".into(),
                origin: Origin::Import {
                    source_session_id: "ses_src".into(),
                },
                created_at: t.into(),
                copied_through: 1,
            }),
            register(1, "key_b"),
            register(2, "key_a"),
        ])
        .unwrap();
    assert_eq!(lineage("ses_new").copied_through, 1);
    let load = StoreRead::LoadSession {
        session_id: "ses_new".into(),
        drivers_since: 0,
    };
    let ReadResult::Session(Some(s)) = store.read(&load).unwrap() else {
        panic!("no session")
    };
    assert_eq!(s.drivers, ["key_a"]);
    let snap = store.load_snapshot().unwrap();
    assert_eq!(snap.drivers, [("ses_new".to_string(), "key_a".to_string())]);
    assert_eq!(snap.stored_sessions.drivers, 1);
}
