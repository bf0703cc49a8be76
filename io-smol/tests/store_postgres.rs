//! The PostgreSQL store's faults and its secrets, against a throwaway
//! cluster of the test's own (`testkit::pg`): unreachable or unusable at
//! start (clear error, exit 1 as spec 04 §4 for a database that cannot be
//! opened; a malformed URL is a configuration error, exit 2), a database
//! migrated by a newer binary, missing privileges, PostgreSQL killed and
//! restarted under load (crash-only exit, nothing acknowledged lost), and
//! the URL's password never in logs or admin views (spec 08 secrets).

mod rest_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rest_support::*;
use serde_json::json;
use testkit::fixtures;
use testkit::pg::{PgCluster, APP_PASSWORD, APP_ROLE};
use testkit::{HttpClient, Server};

const RUN: Duration = Duration::from_secs(30);

fn pg_opts(url: &str) -> testkit::ServerOptions {
    opts()
        .config(provider_config(DEAD_URL))
        .env("BAE_DATABASE_URL", url)
}

#[test]
fn unreachable_at_start_is_a_clear_error_with_exit_1_and_no_password() {
    // Nothing listens on port 9 of loopback.
    let url = format!("postgres://{APP_ROLE}:{APP_PASSWORD}@127.0.0.1:9/bae");
    let out = Server::run(pg_opts(&url), RUN);
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("cannot connect to PostgreSQL at")
            && out.stderr.contains("127.0.0.1:9"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains(APP_PASSWORD), "{}", out.stderr);
    // `migrate` reports the same.
    let out = Server::run(pg_opts(&url).arg("migrate"), RUN);
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(!out.stderr.contains(APP_PASSWORD), "{}", out.stderr);
}

#[test]
fn a_malformed_url_is_a_configuration_error_without_the_password() {
    for url in [
        "mysql://u:pw-7781@127.0.0.1/db",
        "postgres://u:pw-7781@127.0.0.1:notaport/db",
    ] {
        let out = Server::run(pg_opts(url), RUN);
        assert_eq!(out.code(), Some(2), "{url}: {}", out.stderr);
        assert!(out.stderr.contains("BAE_DATABASE_URL"), "{}", out.stderr);
        assert!(!out.stderr.contains("pw-7781"), "{}", out.stderr);
    }
    let out = Server::run(
        pg_opts("postgres://u@127.0.0.1/db").env("BAE_SHARED_HISTORY", "1"),
        RUN,
    );
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("BAE_SHARED_HISTORY"), "{}", out.stderr);
}

#[test]
fn wrong_credentials_and_a_missing_database_are_clear_errors() {
    let cluster = PgCluster::start();
    let bad_pw = format!(
        "postgres://{APP_ROLE}:wrong-pw-5512@127.0.0.1:{}/postgres",
        cluster.port()
    );
    let out = Server::run(pg_opts(&bad_pw), RUN);
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("password authentication failed"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("wrong-pw-5512"), "{}", out.stderr);
    let out = Server::run(pg_opts(&cluster.app_url("no_such_db")), RUN);
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("does not exist"), "{}", out.stderr);
}

#[test]
fn migrate_then_serve_and_a_newer_schema_is_refused() {
    let cluster = PgCluster::start();
    let db = cluster.create_database();
    let url = cluster.app_url(&db);
    let out = Server::run(pg_opts(&url).arg("migrate"), RUN);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("migrations up to date at postgres://bae:"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains(APP_PASSWORD), "{}", out.stdout);
    // Migrating again is a no-op; a server starts on the migrated database.
    let out = Server::run(pg_opts(&url).arg("migrate"), RUN);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let versions = cluster
        .admin_client(&db)
        .query("SELECT version FROM schema_version ORDER BY version", &[])
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i64>(0))
        .collect::<Vec<_>>();
    assert_eq!(versions, vec![1, 2, 3, 4, 5, 6, 7, 8, 9]);
    let mut s = Server::start(pg_opts(&url));
    let f = fix(&s, &[]);
    s.stop();
    // A newer binary migrated the database: refused, nothing touched.
    cluster.admin_execute(
        &db,
        "INSERT INTO schema_version (version, applied_at) VALUES (99, 'later')",
    );
    let out = Server::run(pg_opts(&url), RUN);
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("database schema version 99 is newer than this binary supports (max 9)"),
        "{}",
        out.stderr
    );
    cluster.admin_execute(&db, "DELETE FROM schema_version WHERE version = 99");
    let s = Server::start(pg_opts(&url));
    let r = s
        .client()
        .bearer(&f.skey)
        .get(&format!("/api/v1/sessions/{}/events", f.sid));
    r.assert_status(200);
}

#[test]
fn missing_privileges_are_a_clear_error() {
    let cluster = PgCluster::start();
    // A database the application role does not own: no CREATE on its
    // public schema (PostgreSQL 15 default).
    cluster.admin_execute("postgres", "CREATE DATABASE foreign_db");
    let out = Server::run(pg_opts(&cluster.app_url("foreign_db")), RUN);
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("insufficient database privileges")
            && out.stderr.contains("permission denied for schema public"),
        "{}",
        out.stderr
    );
    // Migrated by an owner, but the role may not write a table.
    cluster.admin_execute(
        "foreign_db",
        &format!("GRANT CREATE, USAGE ON SCHEMA public TO {APP_ROLE}"),
    );
    let out = Server::run(pg_opts(&cluster.app_url("foreign_db")).arg("migrate"), RUN);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    cluster.admin_execute(
        "foreign_db",
        &format!(
            "ALTER TABLE keys OWNER TO postgres; REVOKE ALL ON keys FROM {APP_ROLE}; \
             GRANT SELECT ON keys TO {APP_ROLE}"
        ),
    );
    let out = Server::run(pg_opts(&cluster.app_url("foreign_db")), RUN);
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("lacks SELECT, INSERT, UPDATE or DELETE on keys"),
        "{}",
        out.stderr
    );
}

#[test]
fn the_password_never_reaches_logs_or_admin_views() {
    let cluster = PgCluster::start();
    let url = cluster.app_url(&cluster.create_database());
    let mock = testkit::MockProvider::start();
    let s = Server::start(
        opts()
            .config(provider_config(&mock.base_url))
            .env("BAE_DATABASE_URL", &url)
            .env("BAE_LOG", "trace"),
    );
    let f = fix(&s, &[]);
    register(&s, &f.sid, &f.skey);
    let _ = fixtures::send_message(&s, &f.sid, &f.skey, json!("hello"));
    for path in [
        "/admin/v1/config",
        "/admin/v1/providers",
        "/admin/v1/sessions",
        "/metrics",
    ] {
        let r = s.admin().get(path);
        assert!(
            !r.text().contains(APP_PASSWORD),
            "{path} shows the password"
        );
    }
    let events = admin_events(&s, &f.sid);
    assert!(!events.is_empty());
    assert!(!serde_json::to_string(&events)
        .unwrap()
        .contains(APP_PASSWORD));
    let log = s.stderr_log();
    assert!(
        log.contains("using the PostgreSQL store"),
        "trace log: {}",
        &log[..log.len().min(2000)]
    );
    assert!(!log.contains(APP_PASSWORD), "the log shows the password");
}

/// PostgreSQL dies under load: the server exits (code 1, crash-only) at
/// its next store access, revealing nothing of the batch that failed;
/// after PostgreSQL and the server restart, every acknowledged session and
/// key is there.
#[test]
fn postgres_killed_under_load_loses_nothing_acknowledged() {
    let mut cluster = PgCluster::start();
    let url = cluster.app_url(&cluster.create_database());
    let mut s = Server::start(pg_opts(&url));
    let profile = profile(&s, &[]);
    let (_, client_key) = key(&s, &profile);
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (acked, stop) = (acked.clone(), stop.clone());
        let client = HttpClient::new(s.client_addr)
            .timeout(Duration::from_secs(5))
            .bearer(client_key.clone());
        workers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let body = serde_json::to_vec(&json!({})).unwrap();
                match client.try_request(
                    "POST",
                    "/api/v1/sessions",
                    &[("content-type", "application/json")],
                    &body,
                ) {
                    Ok(r) if r.status == 201 => {
                        let v = r.json();
                        let sid = v["session_id"].as_str().unwrap().to_string();
                        let skey = v["session_key"].as_str().unwrap().to_string();
                        acked.lock().unwrap().push((sid, skey));
                    }
                    // 5xx or a dropped connection: not acknowledged.
                    Ok(_) | Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        }));
    }
    while acked.lock().unwrap().len() < 40 {
        std::thread::sleep(Duration::from_millis(10));
    }
    cluster.kill();
    let status = s.wait_exit(Duration::from_secs(30));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(
        status.and_then(|st| st.code()),
        Some(1),
        "{}",
        s.stderr_log()
    );
    let log = s.stderr_log();
    assert!(
        log.contains("exiting (crash-only"),
        "no crash-only exit logged: {log}"
    );
    assert!(!log.contains(APP_PASSWORD), "{log}");
    // Unreachable while PostgreSQL is down: the restart fails cleanly.
    let out = s.try_wait();
    assert!(out.is_some());
    cluster.restart();
    assert!(testkit::pg::wait_ready(&cluster, Duration::from_secs(30)));
    s.restart();
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 40);
    for (sid, skey) in &acked {
        let r = s
            .client()
            .bearer(skey)
            .get(&format!("/api/v1/sessions/{sid}/events"));
        assert_eq!(
            r.status,
            200,
            "acknowledged session {sid} lost: {}",
            r.text()
        );
    }
    // And the restarted server keeps serving writes.
    let (sid, skey) = fixtures::open_session(&s, &client_key, json!({}));
    s.client()
        .bearer(&skey)
        .get(&format!("/api/v1/sessions/{sid}/events"))
        .assert_status(200);
}

mod in_process {
    //! The PostgreSQL store driven directly (no server process).

    use engine::store::{
        EventRow, IdempotencyRow, KeyRole, KeyRow, ProfileRow, ReadResult, SessionRow,
        SessionState, StoreRead, StoreWrite,
    };
    use io_smol::config::{parse_env, Database};
    use io_smol::store::pg::PgStore;
    use serde_json::json;
    use testkit::pg::PgCluster;

    const T: &str = "2026-01-01T00:00:00.000Z";

    fn connect(cluster: &PgCluster) -> PgStore {
        let db = cluster.create_database();
        let env = parse_env(|k| (k == "BAE_DATABASE_URL").then(|| cluster.app_url(&db))).unwrap();
        let Database::Postgres { url, .. } = env.database else {
            panic!("not postgres")
        };
        let mut pg = PgStore::connect(&url).unwrap();
        pg.migrate().unwrap();
        pg
    }

    fn base(name: &str, client_version: Option<&str>) -> Vec<StoreWrite> {
        vec![
            StoreWrite::InsertProfile(ProfileRow {
                id: "pro_1".into(),
                name: name.into(),
                primary_provider: "p".into(),
                fallback_providers: vec![],
                mcp_servers: vec![],
                allowed_tools: vec![],
                available_sandboxes: vec![],
                created_at: T.into(),
                updated_at: T.into(),
                deleted_at: None,
            }),
            StoreWrite::InsertKey(KeyRow {
                id: "key_c".into(),
                name: name.into(),
                key_hash: "0".repeat(64),
                key_prefix: "bae_0000".into(),
                role: KeyRole::Client,
                profile_id: Some("pro_1".into()),
                client_id: None,
                created_at: T.into(),
                last_used_at: None,
                deleted_at: None,
            }),
            StoreWrite::InsertSession(SessionRow {
                id: "ses_1".into(),
                client_key_id: "key_c".into(),
                profile_id: "pro_1".into(),
                state: SessionState::Open,
                client_version: client_version.map(String::from),
                client_tools: json!({}).to_string(),
                sandbox_tools: json!({}).to_string(),
                subagent_tools: json!({}).to_string(),
                compaction: None,
                created_at: T.into(),
                closed_at: None,
            }),
        ]
    }

    fn event(seq: u64, payload: &str) -> StoreWrite {
        StoreWrite::InsertEvent(EventRow {
            seq,
            id: format!("evt_{seq:032x}"),
            session_id: "ses_1".into(),
            client_key_id: Some("key_c".into()),
            event_type: "server.message.send".into(),
            payload: payload.into(),
            created_at: T.into(),
        })
    }

    /// Issue 38: migration 8 adds `bae_session_lineage.copied_through` to
    /// a database of version 7; a row written before reads 0 (nothing
    /// known to be copied), a new one keeps its boundary.
    #[test]
    fn migration_8_gives_lineage_rows_a_copied_boundary() {
        use engine::store::{LineageRow, Origin};
        let cluster = PgCluster::start();
        let db = cluster.create_database();
        let env = parse_env(|k| (k == "BAE_DATABASE_URL").then(|| cluster.app_url(&db))).unwrap();
        let Database::Postgres { url, .. } = env.database else {
            panic!("not postgres")
        };
        let mut c = postgres::Client::connect(&cluster.app_url(&db), postgres::NoTls).unwrap();
        for m in &io_smol::store::pg::PG_MIGRATIONS[..7] {
            c.batch_execute(m.sql).unwrap();
            c.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES ($1, 'then')",
                &[&m.version],
            )
            .unwrap();
        }
        c.batch_execute(
            "INSERT INTO bae_session_lineage (session_id, kind, parent_id, parent_event_id, \
             created_at) VALUES ('ses_old', 'fork', 'ses_p', 'evt_p', 't')",
        )
        .unwrap();
        drop(c);
        let mut pg = PgStore::connect(&url).unwrap();
        let report = pg.migrate().unwrap();
        assert_eq!(
            (report.from, report.to),
            (7, 9),
            "8 (this test) and 9 (quotas)"
        );
        pg.commit(&[StoreWrite::InsertLineage(LineageRow {
            session_id: "ses_new".into(),
            origin: Origin::Import {
                source_session_id: "ses_src".into(),
            },
            created_at: T.into(),
            copied_through: 41,
        })])
        .unwrap();
        let mut lineage = |id: &str| match pg
            .read(&StoreRead::Lineage {
                session_id: id.into(),
                children: false,
            })
            .unwrap()
        {
            ReadResult::Lineage { own: Some(l), .. } => l.copied_through,
            other => panic!("{other:?}"),
        };
        assert_eq!((lineage("ses_old"), lineage("ses_new")), (0, 41));
    }

    /// Client-chosen texts with a NUL (valid in JSON strings, not in a
    /// PostgreSQL TEXT) are stored and read back exactly: a client can
    /// never make a commit fail.
    #[test]
    fn client_texts_with_nul_round_trip() {
        let cluster = PgCluster::start();
        let mut pg = connect(&cluster);
        let odd = "na\u{0}me \u{e9}\u{1F600}";
        let mut batch = base(odd, Some("v\u{0}1"));
        batch.push(StoreWrite::PutIdempotency(IdempotencyRow {
            session_id: "ses_1".into(),
            client_key_id: "key_c".into(),
            key: "k\u{0}ey".into(),
            digest: "d".into(),
            created_ms: 5,
            outcome: None,
        }));
        batch.push(event(1, r#"{"text":"a\u0000b"}"#));
        pg.commit(&batch).unwrap();
        let snap = pg.load_snapshot().unwrap();
        assert_eq!(snap.profiles[0].name, odd);
        assert_eq!(snap.keys[0].name, odd);
        assert_eq!(snap.sessions[0].client_version.as_deref(), Some("v\u{0}1"));
        assert_eq!(snap.idempotency[0].key, "k\u{0}ey");
        let read = StoreRead::Events {
            session_id: "ses_1".into(),
            after_seq: 0,
            limit: 10,
        };
        let ReadResult::Events(rows) = pg.read(&read).unwrap() else {
            panic!()
        };
        assert_eq!(rows[0].payload, r#"{"text":"a\u0000b"}"#);
        // A batch that fails is not applied at all.
        assert!(pg.commit(&[event(2, "{}"), event(1, "{}")]).is_err());
        let ReadResult::Events(rows) = pg.read(&read).unwrap() else {
            panic!()
        };
        assert_eq!(rows.len(), 1);
    }

    /// Group-commit throughput and single-event commit latency of the
    /// PostgreSQL store (docs/performance.md; run with `--ignored
    /// --nocapture` in release mode).
    #[test]
    #[ignore]
    fn group_commit_throughput() {
        let cluster = PgCluster::start_durable();
        let mut pg = connect(&cluster);
        pg.commit(&base("one", None)).unwrap();
        let payload = json!({"role": "assistant", "content": [{"type": "text",
            "text": "x".repeat(200)}]})
        .to_string();
        let mut seq = 1u64;
        for batch_size in [500u64, 1] {
            let n = if batch_size == 1 { 2_000 } else { 200_000 };
            let start = std::time::Instant::now();
            let end = seq + n;
            while seq < end {
                let batch: Vec<_> = (seq..seq + batch_size)
                    .map(|s| event(s, &payload))
                    .collect();
                pg.commit(&batch).unwrap();
                seq += batch_size;
            }
            let secs = start.elapsed().as_secs_f64();
            eprintln!(
                "batches of {batch_size}: {:.0} events/s, {:.0} commits/s",
                n as f64 / secs,
                (n / batch_size) as f64 / secs
            );
        }
    }
}
