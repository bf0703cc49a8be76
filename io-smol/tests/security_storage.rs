//! What the real binary persists and logs: key digests, secrecy of
//! plaintexts and provider tokens, schema version and index, id and
//! timestamp formats, an append-only event table (README checklist
//! C-231–C-235; spec 08).

mod rest_support;

use std::time::Duration;

use rest_support::*;
use serde_json::{json, Value};
use testkit::fixtures;
use testkit::{MockProvider, Reply, Server};

fn one(conn: &Db, sql: &str) -> Option<String> {
    let rows = query(conn, sql);
    assert_eq!(rows.len(), 1, "{sql}: {rows:?}");
    rows[0][0].clone()
}

/// Every plaintext secret one scenario handed out.
struct Secrets {
    plain: Vec<String>,
}

/// Profile, two client keys, a shared session with a turn, a compaction,
/// a closed session and a revocation; returns every plaintext seen.
fn scenario(s: &Server, mock: &MockProvider) -> (Fix, Secrets) {
    let f = fix(s, &[]);
    let (_, ck2) = key(s, &f.profile);
    let k2 = fixtures::join_session(s, &f.sid, &ck2, json!({}));
    register(s, &f.sid, &f.skey);
    mock.push(Reply::text("first answer"));
    let (_, t) = fixtures::send_message(s, &f.sid, &f.skey, json!("hello there"));
    assert!(t.get("result").is_some(), "{t}");
    mock.push(Reply::text("a compact summary"));
    let (_, t) = rpc(s, &f.sid, &f.skey, "session.compact", json!({}));
    assert!(t.get("result").is_some(), "{t}");
    let (sid3, skey3) = fixtures::open_session(s, &f.client_key, json!({}));
    s.client()
        .bearer(&skey3)
        .delete(&format!("/api/v1/sessions/{sid3}"))
        .assert_status(200);
    let (kid4, ck4) = key(s, &f.profile);
    let (_, skey4) = fixtures::open_session(s, &ck4, json!({}));
    s.admin()
        .delete(&format!("/admin/v1/keys/{kid4}"))
        .assert_status(204);
    let plain = vec![
        s.admin_key.clone(),
        f.client_key.clone(),
        f.skey.clone(),
        ck2,
        k2,
        skey3,
        ck4,
        skey4,
        PROVIDER_TOKEN.to_string(),
    ];
    (f, Secrets { plain })
}

#[test]
fn c231_key_hash_is_sha256_hex_of_the_plaintext() {
    let s = start();
    let f = fix(&s, &[]);
    let (kid2, ck2) = key(&s, &f.profile);
    let k2 = fixtures::join_session(&s, &f.sid, &ck2, json!({}));
    let conn = db(&s);
    let row = |sql: String| query(&conn, &sql);
    let client = row(format!(
        "SELECT key_hash, key_prefix, role, profile_id, client_id FROM keys WHERE id = '{}'",
        f.key_id
    ));
    assert_eq!(
        client,
        [vec![
            Some(sha256_hex(&f.client_key)),
            Some(f.client_key[..8].to_string()),
            Some("client".to_string()),
            Some(f.profile.clone()),
            None,
        ]]
    );
    for (ck_id, plain) in [(&f.key_id, &f.skey), (&kid2, &k2)] {
        let r = row(format!(
            "SELECT key_hash, key_prefix, profile_id FROM keys WHERE role = 'session' \
             AND name = '{}' AND client_id = '{ck_id}'",
            f.sid
        ));
        assert_eq!(
            r,
            [vec![
                Some(sha256_hex(plain)),
                Some("bae_ses_".to_string()),
                Some(f.profile.clone()),
            ]]
        );
    }
    let admin = row(
        "SELECT key_hash, key_prefix FROM keys WHERE role = 'admin' AND deleted_at IS NULL".into(),
    );
    assert_eq!(
        admin,
        [vec![
            Some(sha256_hex(&s.admin_key)),
            Some("bae_admi".to_string())
        ]]
    );
    // Every stored digest is 64 lowercase hex characters.
    for r in row("SELECT key_hash FROM keys".into()) {
        assert!(is_prefixed_hex(r[0].as_deref().unwrap(), "", 64), "{r:?}");
    }
}

#[test]
fn c232_no_plaintext_key_or_provider_token_in_db_logs_or_events() {
    let mock = MockProvider::start();
    // Trace logging: the most verbose the server gets.
    let mut s = Server::start(
        opts()
            .config(provider_config(&mock.base_url))
            .env("BAE_LOG", "trace"),
    );
    let (f, secrets) = scenario(&s, &mock);
    // The provider did receive the token (so it was really used)…
    let reqs = provider_requests(&mock);
    assert!(!reqs.is_empty());
    assert_eq!(reqs[0].header("x-api-key"), Some(PROVIDER_TOKEN));
    // …and no API response or event ever carries a secret.
    let mut api_text = String::new();
    for sid in admin_sessions(&s)
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
    {
        api_text.push_str(&serde_json::to_string(&admin_events(&s, &sid)).unwrap());
    }
    for path in [
        "/admin/v1/keys",
        "/admin/v1/sessions",
        "/admin/v1/profiles",
        "/admin/v1/config",
        "/admin/v1/providers",
    ] {
        api_text.push_str(&s.admin().get(path).text());
    }
    api_text.push_str(
        &s.client()
            .bearer(&f.skey)
            .get(&format!("/api/v1/sessions/{}/participants", f.sid))
            .text(),
    );
    assert!(api_text.contains("provider.request"), "scenario ran");
    for secret in &secrets.plain {
        assert!(
            !api_text.contains(secret.as_str()),
            "{secret} in an API response/event"
        );
    }
    // No digest is ever returned either.
    let conn = db(&s);
    for r in query(&conn, "SELECT key_hash FROM keys") {
        assert!(
            !api_text.contains(r[0].as_deref().unwrap()),
            "key_hash returned"
        );
    }
    drop(conn);
    let live_bytes = db_bytes(&s.db_path());
    s.stop();
    let mut files = db_bytes(&s.db_path());
    files.extend_from_slice(&live_bytes);
    let log = s.stderr_log() + &s.stdout_log();
    assert!(log.len() > 1000, "trace logging produced output");
    for secret in &secrets.plain {
        assert!(
            !contains_bytes(&files, secret.as_bytes()),
            "{secret} found in the database files"
        );
        assert!(!log.contains(secret.as_str()), "{secret} found in the log");
    }
    // The admin key file is the one sanctioned place for the admin key.
    assert_eq!(
        std::fs::read_to_string(s.admin_key_file()).unwrap().trim(),
        secrets.plain[0]
    );
}

#[test]
fn c233_schema_version_9_and_the_event_index() {
    let s = start();
    let conn = db(&s);
    assert_eq!(
        one(&conn, "SELECT MAX(version) FROM schema_version").as_deref(),
        Some("9")
    );
    assert_eq!(
        one(&conn, "SELECT COUNT(*) FROM schema_version").as_deref(),
        Some("9")
    );
    assert_eq!(
        one(
            &conn,
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'idx_session_events_session_type'"
        )
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" ")),
        Some("CREATE INDEX idx_session_events_session_type ON session_events(session_id, event_type)".into())
    );
    assert_eq!(one(&conn, "PRAGMA journal_mode").as_deref(), Some("wal"));
    // The tables and columns of spec 08 §3 are there.
    for (table, cols) in [
        ("keys", "id, name, key_hash, key_prefix, role, profile_id, client_id, created_at, last_used_at, deleted_at"),
        ("profiles", "id, name, provider_config, fallback_configs, mcp_servers, allowed_tools, created_at, updated_at, deleted_at, available_sandboxes"),
        ("sessions", "id, client_key_id, profile_id, state, client_version, client_tools, created_at, closed_at, sandbox_tools, subagent_tools, compaction"),
        ("session_events", "id, session_id, client_key_id, event_type, payload, created_at"),
    ] {
        let Db::Sqlite(conn) = &conn else {
            panic!("a SQLite suite")
        };
        conn.prepare(format!("SELECT {cols} FROM {table} LIMIT 1"))
            .unwrap_or_else(|e| panic!("{table}: {e}"));
    }
}

#[test]
fn c234_event_ids_and_created_at_formats() {
    let mock = MockProvider::start();
    let s = start_with_mock(&mock);
    let (f, _) = scenario(&s, &mock);
    let mut n = 0;
    for row in admin_sessions(&s) {
        let sid = row["id"].as_str().unwrap();
        assert!(is_prefixed_hex(sid, "ses_", 32));
        assert!(is_timestamp(row["created_at"].as_str().unwrap()), "{row}");
        for e in admin_events(&s, sid) {
            n += 1;
            let id = e["id"].as_str().unwrap();
            assert!(is_prefixed_hex(id, "evt_", 32), "{id}");
            let at = e["created_at"].as_str().unwrap();
            assert!(is_timestamp(at), "{at}");
            assert_eq!(e["session_id"], sid);
            let mut members: Vec<&str> =
                e.as_object().unwrap().keys().map(String::as_str).collect();
            members.sort_unstable();
            assert_eq!(
                members,
                [
                    "client_key_id",
                    "created_at",
                    "event_type",
                    "id",
                    "payload",
                    "session_id"
                ]
            );
        }
    }
    assert!(n > 10, "{n} events");
    // Stored rows have the same format.
    let conn = db(&s);
    for r in query(
        &conn,
        &format!(
            "SELECT id, created_at FROM session_events WHERE session_id = '{}'",
            f.sid
        ),
    ) {
        assert!(is_prefixed_hex(r[0].as_deref().unwrap(), "evt_", 32));
        assert!(is_timestamp(r[1].as_deref().unwrap()));
    }
}

#[test]
fn c235_event_rows_are_never_updated_or_deleted() {
    let mock = MockProvider::start();
    let mut s = start_with_mock(&mock);
    let snapshot = |s: &Server| -> Vec<Vec<Option<String>>> {
        query(
            &db(s),
            "SELECT CAST(rowid AS TEXT), id, session_id, client_key_id, event_type, payload, created_at \
             FROM session_events ORDER BY rowid",
        )
    };
    let f = fix(&s, &[]);
    register(&s, &f.sid, &f.skey);
    for i in 0..3 {
        let (_, t) = fixtures::send_message(&s, &f.sid, &f.skey, json!(format!("turn {i}")));
        assert!(t.get("result").is_some(), "{t}");
    }
    let before = snapshot(&s);
    assert!(before.len() >= 13, "{}", before.len());
    // Compaction, more turns, close, revocation, restart.
    mock.push(Reply::text("summary of the turns"));
    let (_, t) = rpc(&s, &f.sid, &f.skey, "session.compact", json!({}));
    assert!(t.get("result").is_some(), "{t}");
    let (_, t) = fixtures::send_message(&s, &f.sid, &f.skey, json!("after compaction"));
    assert!(t.get("result").is_some(), "{t}");
    let g = fix(&s, &[]);
    s.client()
        .bearer(&g.skey)
        .delete(&format!("/api/v1/sessions/{}", g.sid))
        .assert_status(200);
    s.admin()
        .delete(&format!("/admin/v1/keys/{}", f.key_id))
        .assert_status(204);
    s.kill9();
    s.restart();
    let after = snapshot(&s);
    assert!(after.len() > before.len() + 5);
    assert_eq!(&after[..before.len()], &before[..], "an event row changed");
    // Rowids are dense and increasing: nothing was ever deleted.
    for (i, r) in after.iter().enumerate() {
        assert_eq!(r[0].as_deref(), Some((i + 1).to_string().as_str()));
    }
    // The compaction record is there and pre-compaction events are still
    // served (C-172 via the same data).
    let evts: Vec<Value> = admin_events(&s, &f.sid);
    assert!(types(&evts).contains(&"session.compaction.completed".to_string()));
    assert_eq!(
        evts.len(),
        after
            .iter()
            .filter(|r| r[2].as_deref() == Some(f.sid.as_str()))
            .count()
    );
    let _ = Duration::ZERO;
}

/// Even an operator filter that names the HTTP client's targets explicitly
/// never gets a provider credential into the log (spec 08 §6).
#[test]
fn c232_provider_token_never_logged_even_with_explicit_http_client_tracing() {
    let mock = MockProvider::start();
    let mut s = Server::start(
        opts()
            .config(provider_config(&mock.base_url))
            .env("BAE_LOG", "trace,ureq=trace,rustls=trace,baesrv=trace"),
    );
    let f = fix(&s, &[]);
    register(&s, &f.sid, &f.skey);
    let (_, t) = fixtures::send_message(&s, &f.sid, &f.skey, json!("hello"));
    assert!(t.get("result").is_some(), "{t}");
    assert_eq!(
        provider_requests(&mock)[0].header("x-api-key"),
        Some(PROVIDER_TOKEN)
    );
    s.stop();
    let log = s.stderr_log();
    for secret in [PROVIDER_TOKEN, &f.client_key, &f.skey, &s.admin_key] {
        assert!(!log.contains(secret), "{secret} in the log");
    }
}
