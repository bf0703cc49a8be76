//! Shared helpers of the end-to-end suites (`rest_*`, `admin_*`,
//! `security_*`, `restart_*`, `cli_*`) that drive the real `baesrv` binary
//! through `testkit`. Included with `mod rest_support;`; not every suite
//! uses every helper.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::fixtures::{self, unique_name};
use testkit::{HttpClient, MockProvider, Response, Server, ServerOptions};

/// Name of the provider entry every helper config declares.
pub const PROVIDER: &str = "mock";
/// The literal provider token of [`provider_config`] (must never leak).
pub const PROVIDER_TOKEN: &str = "sk-provider-secret-7f3a9c1e5b";
/// A base URL nothing listens on (connection refused at once).
pub const DEAD_URL: &str = "http://127.0.0.1:9";

/// Options for the binary under test: `baesrv`, or `baesrv-threads` when
/// `BAE_TEST_RUNTIME=threads` (the second runtime's e2e pass).
pub fn opts() -> ServerOptions {
    let bin = match std::env::var("BAE_TEST_RUNTIME").as_deref() {
        Ok("threads") => env!("CARGO_BIN_EXE_baesrv-threads"),
        _ => env!("CARGO_BIN_EXE_baesrv"),
    };
    ServerOptions::new().bin(bin)
}

/// A config with one Anthropic provider `mock` at `base_url`.
pub fn provider_config(base_url: &str) -> String {
    fixtures::provider_toml(&[(
        PROVIDER,
        "anthropic",
        base_url,
        "mock-model",
        PROVIDER_TOKEN,
    )])
}

/// A server whose `mock` provider points at a dead port (no turns needed).
pub fn start() -> Server {
    Server::start(opts().config(provider_config(DEAD_URL)))
}

/// A server whose `mock` provider is `mock`.
pub fn start_with_mock(mock: &MockProvider) -> Server {
    Server::start(opts().config(provider_config(&mock.base_url)))
}

/// A fresh profile on provider `mock` with these allowed tools.
pub fn profile(s: &Server, allowed_tools: &[&str]) -> String {
    fixtures::create_profile(s, &unique_name("profile"), PROVIDER, &[], allowed_tools)
}

/// A client key of `profile_id`: (key id, plaintext).
pub fn key(s: &Server, profile_id: &str) -> (String, String) {
    fixtures::create_key(s, profile_id)
}

/// Profile + key + session with an empty body: (profile, key id, client key, session id, session key).
pub struct Fix {
    pub profile: String,
    pub key_id: String,
    pub client_key: String,
    pub sid: String,
    pub skey: String,
}

pub fn fix(s: &Server, allowed_tools: &[&str]) -> Fix {
    let profile = profile(s, allowed_tools);
    let (key_id, client_key) = key(s, &profile);
    let (sid, skey) = fixtures::open_session(s, &client_key, json!({}));
    Fix {
        profile,
        key_id,
        client_key,
        sid,
        skey,
    }
}

/// `POST` with an explicit (or absent) content type and raw body bytes,
/// written byte for byte (no header added by the client).
pub fn post_raw(
    c: &HttpClient,
    path: &str,
    bearer: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Response {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {bearer}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    if let Some(ct) = content_type {
        head.push_str(&format!("content-type: {ct}\r\n"));
    }
    head.push_str("\r\n");
    let mut req = head.into_bytes();
    req.extend_from_slice(body);
    let (bytes, _) = raw_exchange(c.addr, &req, Duration::from_secs(10));
    Response::parse(&bytes)
        .unwrap_or_else(|| panic!("no HTTP response: {:?}", String::from_utf8_lossy(&bytes)))
}

/// Fixed RFC 7807 titles (spec 01 §3.1).
pub fn title_of(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        _ => "",
    }
}

/// Asserts an RFC 7807 error: status, `type`, exactly the four members,
/// the fixed title and `application/json` (C-014). Returns `detail`.
#[track_caller]
pub fn assert_problem(r: &Response, status: u16, ty: &str) -> String {
    assert_eq!(r.status, status, "status; body {}", r.text());
    let ct = r.header("content-type").unwrap_or("");
    assert!(
        ct.starts_with("application/json"),
        "problem content-type {ct:?}; body {}",
        r.text()
    );
    let v = r.json();
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"));
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["detail", "status", "title", "type"],
        "members of {v}"
    );
    assert_eq!(v["type"], ty, "type of {v}");
    assert_eq!(v["status"], status, "status member of {v}");
    let title = title_of(status);
    if !title.is_empty() {
        assert_eq!(v["title"], title, "title of {v}");
    }
    v["detail"]
        .as_str()
        .unwrap_or_else(|| panic!("detail not a string: {v}"))
        .to_string()
}

/// Every item of a paginated list (following `next_cursor`).
#[track_caller]
pub fn all_pages(c: &HttpClient, path: &str) -> Vec<Value> {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10_000 {
        let url = match &cursor {
            Some(cur) => format!("{path}{sep}limit=200&cursor={cur}"),
            None => format!("{path}{sep}limit=200"),
        };
        let r = c.get(&url);
        r.assert_status(200);
        let v = r.json();
        out.extend(v["items"].as_array().expect("items").iter().cloned());
        match v["next_cursor"].as_str() {
            Some(n) => cursor = Some(n.to_string()),
            None => return out,
        }
    }
    panic!("pagination of {path} did not end");
}

/// All events of a session through the client port.
pub fn events(s: &Server, sid: &str, skey: &str) -> Vec<Value> {
    all_pages(
        &s.client().bearer(skey),
        &format!("/api/v1/sessions/{sid}/events"),
    )
}

/// All events of a session through the admin port.
pub fn admin_events(s: &Server, sid: &str) -> Vec<Value> {
    all_pages(&s.admin(), &format!("/admin/v1/sessions/{sid}/events"))
}

/// Event types of a list of EventViews.
pub fn types(evts: &[Value]) -> Vec<String> {
    evts.iter()
        .map(|e| e["event_type"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// All admin session rows.
pub fn admin_sessions(s: &Server) -> Vec<Value> {
    all_pages(&s.admin(), "/admin/v1/sessions")
}

/// The admin session row of `sid`.
#[track_caller]
pub fn admin_session(s: &Server, sid: &str) -> Value {
    admin_sessions(s)
        .into_iter()
        .find(|r| r["id"] == sid)
        .unwrap_or_else(|| panic!("session {sid} not in the admin list"))
}

/// True if `s` is `prefix` followed by exactly `n` lowercase hex digits.
pub fn is_prefixed_hex(s: &str, prefix: &str, n: usize) -> bool {
    s.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() == n
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// `YYYY-MM-DDTHH:MM:SS.sssZ`.
pub fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 24 {
        return false;
    }
    let digits = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22];
    digits.iter().all(|&i| b[i].is_ascii_digit())
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && b[23] == b'Z'
}

/// `session.registerDriver` for this session key.
pub fn register(s: &Server, sid: &str, skey: &str) {
    fixtures::register_driver(s, sid, skey);
}

/// One JSON-RPC call: (notifications, terminal frame).
pub fn rpc(s: &Server, sid: &str, skey: &str, method: &str, params: Value) -> (Vec<Value>, Value) {
    s.client().rpc(sid, skey, method, params, 1)
}

/// `/healthz` answers 200 within `within`.
#[track_caller]
pub fn assert_healthy(s: &Server, within: Duration) {
    let t = Instant::now();
    let r = s
        .client()
        .timeout(within)
        .try_request("GET", "/healthz", &[], b"")
        .unwrap_or_else(|e| panic!("/healthz failed: {e}"));
    assert_eq!(r.status, 200);
    assert!(
        t.elapsed() <= within,
        "/healthz took {:?} (limit {within:?})",
        t.elapsed()
    );
}

/// Asserts the server is alive and fully serving: health, an authenticated
/// admin read and a session create through the client port.
#[track_caller]
pub fn assert_serving(s: &mut Server) {
    assert!(s.is_running(), "baesrv exited:\n{}", s.stderr_log());
    assert_healthy(s, Duration::from_secs(5));
    s.admin()
        .get("/admin/v1/profiles?limit=1")
        .assert_status(200);
    let f = fix(s, &[]);
    s.client()
        .bearer(&f.skey)
        .get(&format!("/api/v1/sessions/{}/events", f.sid))
        .assert_status(200);
}

/// SHA-256 of `s`, lowercase hex.
pub fn sha256_hex(s: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(s.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every file of the database (main file, WAL, shared memory, journal).
pub fn db_bytes(db: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let p = format!("{}{suffix}", db.display());
        if let Ok(b) = std::fs::read(&p) {
            out.extend_from_slice(&b);
        }
    }
    out
}

pub fn contains_bytes(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// A connection to the server's database: the SQLite file read-only (WAL
/// allows concurrent readers while the server runs), or the server's
/// PostgreSQL database when it runs on one (`BAE_TEST_STORE=postgres`).
pub enum Db {
    Sqlite(sqlite::Connection),
    Postgres(Box<std::cell::RefCell<postgres::Client>>),
}

pub fn db(s: &Server) -> Db {
    if let Some(url) = s.database_url() {
        let mut c =
            postgres::Client::connect(&url, postgres::NoTls).expect("connect to PostgreSQL");
        // BYTEA name columns read as their (ASCII) text, like SQLite's.
        c.batch_execute("SET bytea_output = 'escape'")
            .expect("set bytea_output");
        return Db::Postgres(Box::new(std::cell::RefCell::new(c)));
    }
    Db::Sqlite(
        sqlite::Connection::open_with_flags(s.db_path(), sqlite::OpenFlags::new().with_read_only())
            .expect("open database read-only"),
    )
}

/// Runs one plain SQL statement against the server's database (stopped
/// server: the SQLite file is opened read-write).
pub fn execute(s: &Server, sql: &str) {
    match s.database_url() {
        Some(url) => {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
            c.batch_execute(sql).expect("execute");
        }
        None => sqlite::open(s.db_path())
            .expect("open database")
            .execute(sql)
            .expect("execute"),
    }
}

/// The newest schema version of the server's store (SQLite: spec 08's 9).
pub fn latest_schema_version(s: &Server) -> String {
    match s.database_url() {
        Some(_) => io_smol::store::pg::PG_LATEST_VERSION.to_string(),
        None => io_smol::store::LATEST_VERSION.to_string(),
    }
}

/// Rows of a query as strings (NULL as `None`). On PostgreSQL the query
/// runs as given (the queries the suites use are plain SQL both accept;
/// `BYTEA` name columns compare with text literals as in SQLite).
pub fn query(conn: &Db, sql: &str) -> Vec<Vec<Option<String>>> {
    let conn = match conn {
        Db::Sqlite(c) => c,
        Db::Postgres(c) => {
            let mut rows = Vec::new();
            for m in c.borrow_mut().simple_query(sql).expect("query") {
                if let postgres::SimpleQueryMessage::Row(r) = m {
                    rows.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect());
                }
            }
            return rows;
        }
    };
    let mut st = conn.prepare(sql).expect("prepare");
    let n = st.column_count();
    let mut rows = Vec::new();
    while let Ok(sqlite::State::Row) = st.next() {
        let mut row = Vec::new();
        for i in 0..n {
            row.push(st.read::<Option<String>, _>(i).expect("read column"));
        }
        rows.push(row);
    }
    rows
}

/// Raw bytes exchange on a fresh connection: write `req`, read until close
/// or `timeout`; returns (bytes, closed_by_server).
pub fn raw_exchange(addr: std::net::SocketAddr, req: &[u8], timeout: Duration) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    let _ = s.set_nodelay(true);
    let _ = s.set_write_timeout(Some(timeout));
    let _ = s.write_all(req);
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let now = Instant::now();
        if now >= deadline {
            return (out, false);
        }
        let _ = s.set_read_timeout(Some(deadline - now));
        match s.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (out, false)
            }
            // A reset after the answer also means "closed".
            Err(_) => return (out, true),
        }
    }
}

/// A `{"name": …}` tool declaration.
pub fn tool(name: &str) -> Value {
    json!({"name": name, "description": "d", "input_schema": {"type": "object", "properties": {}}})
}

/// Requests the mock provider received on its Anthropic endpoint. (Other
/// traffic can reach a mock's port: a concurrently starting test server
/// that was handed the same ephemeral port probes `/healthz` on it.)
pub fn provider_requests(mock: &MockProvider) -> Vec<testkit::RecordedRequest> {
    mock.requests()
        .into_iter()
        .filter(|r| r.endpoint() == testkit::Endpoint::Anthropic)
        .collect()
}
