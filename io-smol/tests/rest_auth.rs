//! Client-port transport over the real binary (README checklist C-001,
//! C-002; spec 01 §1–§3): `/api/v1/meta` as the binary reports it, and
//! probes answered while the store is locked from outside. Bearer parsing,
//! key roles per route and RFC 7807 bodies (C-003–C-014) are tested
//! in-process in `engine/tests/rest_auth_flows.rs`.

mod rest_support;

use rest_support::*;
use serde_json::json;

/// Holds the store's write lock from outside (SQLite `BEGIN EXCLUSIVE`, or
/// a PostgreSQL table lock) until dropped, so the server's next commit
/// waits.
enum StoreLock {
    Sqlite(sqlite::Connection),
    Postgres(Box<postgres::Client>),
}

impl StoreLock {
    fn take(s: &testkit::Server) -> StoreLock {
        match s.database_url() {
            Some(url) => {
                let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                c.batch_execute("BEGIN; LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
                    .unwrap();
                StoreLock::Postgres(Box::new(c))
            }
            None => {
                let c = sqlite::open(s.db_path()).unwrap();
                c.execute("BEGIN EXCLUSIVE").unwrap();
                StoreLock::Sqlite(c)
            }
        }
    }

    fn release(self) {
        match self {
            StoreLock::Sqlite(c) => c.execute("ROLLBACK").unwrap(),
            StoreLock::Postgres(mut c) => c.batch_execute("ROLLBACK").unwrap(),
        }
    }
}

/// C-001, C-002: `/healthz` and `/api/v1/meta` reveal nothing stored, so
/// they are answered while another client's response still waits for its
/// commit (a liveness probe never queues behind the store).
#[test]
fn c001_healthz_and_meta_do_not_wait_for_other_clients_commits() {
    let s = start();
    let p = profile(&s, &[]);
    let (_, client_key) = key(&s, &p);
    let lock = StoreLock::take(&s);
    let client = s.client().bearer(client_key);
    let opened = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = opened.clone();
    let open = std::thread::spawn(move || {
        let r = client.post_json("/api/v1/sessions", &json!({}));
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        r
    });
    // The open's answer is held until its commit, which the lock blocks.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let probe = s.client().timeout(std::time::Duration::from_secs(5));
    assert_eq!(probe.get("/healthz").status, 200);
    assert_eq!(probe.get("/api/v1/meta").status, 200);
    assert!(
        !opened.load(std::sync::atomic::Ordering::SeqCst),
        "the session open was answered before its commit could happen"
    );
    lock.release();
    open.join().unwrap().assert_status(201);
}

#[test]
fn c002_meta_without_auth() {
    let s = start();
    let r = s.client().get("/api/v1/meta");
    r.assert_status(200);
    assert!(r
        .header("content-type")
        .unwrap_or("")
        .starts_with("application/json"));
    let v = r.json();
    assert_eq!(v["api_versions"], json!(["v1"]));
    assert!(v["version"].as_str().is_some_and(|x| !x.is_empty()), "{v}");
    assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
}
