//! The replica suites' harness (`replicas_nginx`, `replicas_freeze`): a
//! throwaway PostgreSQL cluster (`testkit::pg`), `baesrv` replicas in
//! replica mode on ephemeral loopback ports, Debian's `nginx` as a
//! round-robin balancer in front of them (`testkit::nginx`), and the
//! client helpers both suites use. Missing PostgreSQL or nginx fails
//! loudly (never a skip). Included with `mod replica_support;`.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use crate::rest_support::{opts, provider_config, PROVIDER};
use serde_json::{json, Value};
use testkit::fixtures::unique_name;
use testkit::http::next_rpc_id;
use testkit::nginx::Nginx;
use testkit::pg::PgCluster;
use testkit::{HttpClient, MockProvider, Server, TestDir};

/// Lease time of the test replicas: failover waits for one expiry.
pub const LEASE_MS: &str = "1500";

pub struct Replicas {
    pub servers: Vec<Server>,
    pub nginx: Nginx,
    pub mock: MockProvider,
    /// Providers `mock1`, `mock2`, …: one per session of the concurrent
    /// workload, so that each session's scripted replies are its own.
    pub mocks: Vec<MockProvider>,
    pub pg: PgCluster,
    pub db: String,
    pub keys: TestDir,
    /// What every replica is started with: its config file, database URL
    /// and the suite's extra environment.
    pub config: String,
    pub url: String,
    pub env: Vec<(String, String)>,
}

/// Starts one replica (see [`Replicas::start_env`]).
fn spawn_replica(config: &str, url: &str, keys: &TestDir, env: &[(String, String)]) -> Server {
    // The probed port may be taken by another process before the
    // replica binds it: probe again then.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let addr = free_addr().to_string();
        let mut o = opts()
            .config(config.to_string())
            .env("BAE_DATABASE_URL", url)
            .env("BAE_ADDR", &addr)
            .env("BAE_REPLICA_ADVERTISE", &addr)
            .env("BAE_LEASE_MS", LEASE_MS)
            .env("BAE_LOG", "info")
            .env(
                "BAE_ADMIN_KEY_FILE",
                keys.path().join("admin-key.pem").display().to_string(),
            )
            .env(
                "BAE_ADMIN_KEY_HASH_FILE",
                keys.path().join("admin-key-hash.pem").display().to_string(),
            );
        // Later settings win: the suite's own come last.
        for (k, v) in env {
            o = o.env(k, v);
        }
        match Server::try_start(o) {
            Ok(s) => return s,
            Err(e) if attempt < 5 && format!("{e:?}").contains("Address already in use") => {}
            Err(e) => panic!("replica failed to start: {e:?}"),
        }
    }
}

pub fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("probe port");
    l.local_addr().expect("probe addr")
}

impl Replicas {
    /// PostgreSQL, three replicas sharing one admin key file, nginx.
    pub fn start(n: usize) -> Replicas {
        Replicas::start_with(n, 0)
    }

    pub fn start_with(n: usize, extra_mocks: usize) -> Replicas {
        Replicas::start_env(n, extra_mocks, &[])
    }

    /// [`Replicas::start_with`], each replica with `env` as well.
    pub fn start_env(n: usize, extra_mocks: usize, env: &[(&str, &str)]) -> Replicas {
        let pg = PgCluster::start();
        let db = pg.create_database();
        let url = pg.app_url(&db);
        let mock = MockProvider::start();
        let mocks: Vec<MockProvider> = (0..extra_mocks).map(|_| MockProvider::start()).collect();
        let mut config = provider_config(&mock.base_url);
        for (i, m) in mocks.iter().enumerate() {
            let name = format!("mock{}", i + 1);
            config.push_str(&testkit::fixtures::provider_toml(&[(
                &name,
                "anthropic",
                &m.base_url,
                "mock-model",
                "sk-test",
            )]));
        }
        let keys = TestDir::new("baesrv-replica-keys").expect("key dir");
        let env: Vec<(String, String)> = (env.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let servers = (0..n)
            .map(|_| spawn_replica(&config, &url, &keys, &env))
            .collect::<Vec<_>>();
        let upstreams: Vec<SocketAddr> = servers.iter().map(client_addr).collect();
        let nginx = Nginx::start(&upstreams);
        Replicas {
            servers,
            nginx,
            mock,
            mocks,
            pg,
            db,
            keys,
            config,
            url,
            env,
        }
    }

    /// One more replica on the same database and key files, with the
    /// suite's `env` and `extra` as well (not behind the balancer); its
    /// index in `servers`.
    pub fn add(&mut self, extra: &[(&str, &str)]) -> usize {
        let mut env = self.env.clone();
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let s = spawn_replica(&self.config, &self.url, &self.keys, &env);
        self.servers.push(s);
        self.servers.len() - 1
    }

    pub fn lb(&self) -> HttpClient {
        HttpClient::new(self.nginx.addr).timeout(Duration::from_secs(30))
    }

    /// The replica whose advertised address holds the session's lease.
    pub fn owner(&self, sid: &str) -> Option<usize> {
        let mut c = self.pg.admin_client(&self.db);
        let row = c
            .query_opt(
                "SELECT addr FROM session_leases WHERE session_id = $1",
                &[&sid],
            )
            .expect("lease query")?;
        let addr: String = row.get(0);
        self.servers
            .iter()
            .position(|s| client_addr(s).to_string() == addr)
    }

    pub fn forwards_logged(&self) -> usize {
        self.servers
            .iter()
            .map(|s| {
                s.stderr_log()
                    .matches("forwarded to the session's owner")
                    .count()
            })
            .sum()
    }
}

pub fn client_addr(s: &Server) -> SocketAddr {
    let v = s
        .options()
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "BAE_ADDR")
        .map(|(_, v)| v.clone())
        .expect("BAE_ADDR set");
    v.parse().expect("BAE_ADDR parses")
}

#[track_caller]
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Profile (allowing `get_time`) and a client key, made on replica `on`;
/// returns once every replica lists the key (catalogue notices).
pub fn profile_and_key(r: &Replicas, on: usize) -> (String, String, String) {
    profile_and_key_on(r, on, PROVIDER)
}

pub fn profile_and_key_on(r: &Replicas, on: usize, provider: &str) -> (String, String, String) {
    let s = &r.servers[on];
    let p = s.admin().post_json(
        "/admin/v1/profiles",
        &json!({"name": unique_name("p"), "primary_provider": provider, "allowed_tools": ["get_time"]}),
    );
    p.assert_status(201);
    let profile = p.json()["id"].as_str().unwrap().to_string();
    let (kid, key) = key_of(r, on, &profile);
    (profile, kid, key)
}

/// A client key of `profile`, made on replica `on`, once every replica
/// lists it: (key id, plaintext).
pub fn key_of(r: &Replicas, on: usize, profile: &str) -> (String, String) {
    let s = &r.servers[on];
    let k = s.admin().post_json(
        "/admin/v1/keys",
        &json!({"name": unique_name("k"), "profile_id": profile}),
    );
    k.assert_status(201);
    let (kid, key) = (
        k.json()["id"].as_str().unwrap().to_string(),
        k.json()["key"].as_str().unwrap().to_string(),
    );
    for (i, other) in r.servers.iter().enumerate() {
        let listed = wait_until(Duration::from_secs(1), || {
            other
                .admin()
                .get("/admin/v1/keys?limit=200")
                .text()
                .contains(&kid)
        });
        assert!(
            listed,
            "key {kid} made on replica {on} never reached replica {i}"
        );
    }
    (kid, key)
}

pub fn tool(name: &str) -> Value {
    json!({"name": name, "description": "d", "input_schema": {"type": "object"}})
}

/// `POST /api/v1/sessions` through `c`: (session id, session key).
pub fn open(c: &HttpClient, client_key: &str) -> (String, String) {
    let resp = c
        .clone()
        .bearer(client_key)
        .post_json("/api/v1/sessions", &json!({"tools": [tool("get_time")]}));
    resp.assert_status(201);
    let v = resp.json();
    (
        v["session_id"].as_str().unwrap().to_string(),
        v["session_key"].as_str().unwrap().to_string(),
    )
}

pub fn rpc(c: &HttpClient, sid: &str, skey: &str, method: &str, params: Value) -> Value {
    c.rpc(sid, skey, method, params, next_rpc_id()).1
}

/// One JSON-RPC call that may meet a `503` (no NDJSON answer): its
/// terminal frame, if any.
pub fn try_rpc(
    c: &HttpClient,
    sid: &str,
    skey: &str,
    method: &str,
    params: Value,
) -> Option<Value> {
    let request = testkit::rpc_request(method, params, next_rpc_id());
    let body = serde_json::to_vec(&request).unwrap();
    let mut s = c.try_rpc_stream_bytes(sid, skey, &body).ok()?;
    if !s.wait_head(Duration::from_secs(10)) || s.try_status() != Some(200) {
        return None;
    }
    s.collect_until_terminal(Duration::from_secs(10)).1
}

pub fn send(c: &HttpClient, sid: &str, skey: &str, content: Value) -> Value {
    let params = json!({"message": {"role": "user", "content": content}});
    rpc(c, sid, skey, "session.sendMessage", params)
}

/// Every event of a session, read through `c` (all pages).
pub fn events(c: &HttpClient, sid: &str, skey: &str) -> Vec<Value> {
    let c = c.clone().bearer(skey);
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(after) => format!("/api/v1/sessions/{sid}/events?limit=200&cursor={after}"),
            None => format!("/api/v1/sessions/{sid}/events?limit=200"),
        };
        let page = c.get(&path);
        page.assert_status(200);
        let v = page.json();
        out.extend(v["items"].as_array().unwrap().iter().cloned());
        match v["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return out,
        }
    }
}

pub fn types(evs: &[Value]) -> Vec<String> {
    evs.iter()
        .map(|e| e["event_type"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// The simulator's gate model (`sim::check`: one gate holder, a paused
/// turn resumed by its owner only, every tool use answered, roles
/// alternating in each provider request, nothing after a close) over every
/// event the replicas stored, in seq order.
#[track_caller]
pub fn assert_oracle_holds(r: &Replicas) {
    let mut c = r.pg.admin_client(&r.db);
    let rows = c
        .query(
            "SELECT seq, id, session_id, client_key_id, event_type, payload, created_at \
             FROM session_events ORDER BY seq",
            &[],
        )
        .expect("events");
    let mut checker = sim::check::Checker {
        turn_timeout_ms: 120_000,
        ..Default::default()
    };
    for row in &rows {
        let seq: i64 = row.get(0);
        checker.on_emit(&engine::store::EventRow {
            seq: seq as u64,
            id: row.get(1),
            session_id: row.get(2),
            client_key_id: row.get(3),
            event_type: row.get(4),
            payload: row.get(5),
            created_at: row.get(6),
        });
    }
    assert!(
        checker.violations.is_empty(),
        "{} events checked: {:?}",
        rows.len(),
        checker.violations
    );
}
