//! `bench_replicas`: text turns per second and their latency through nginx
//! in front of 1, 2 and 3 `baesrv` replicas on one PostgreSQL database
//! (docs/scaling.md, docs/performance.md; never run by tests).
//!
//! Starts a throwaway PostgreSQL cluster with `fsync` on (`testkit::pg`),
//! a fresh database per replica count, the replicas (replica mode), nginx
//! round robin in front (also for one replica, so every figure pays the same
//! balancer hop) and testkit's mock provider answering every call with a
//! short text at once. Each client opens its session through the balancer
//! (the replica that creates it owns it) and then sends text turns, one
//! connection per request as nginx round-robins them: with N replicas,
//! about (N − 1)/N of the turns are forwarded to the owner.
//!
//! ```text
//! cargo build --release -p io-smol -p testkit
//! target/release/bench_replicas [--secs 5] [--clients 8,64] [--baesrv PATH]
//! ```

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::bench::{ms, percentile};
use testkit::http::next_rpc_id;
use testkit::nginx::Nginx;
use testkit::pg::PgCluster;
use testkit::{HttpClient, MockProvider, Reply, Server, ServerOptions, TestDir};

fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("probe port");
    l.local_addr().expect("probe addr")
}

struct Setup {
    servers: Vec<Server>,
    nginx: Nginx,
    _keys: TestDir,
}

fn start(bin: &Path, pg: &PgCluster, mock: &MockProvider, n: usize) -> Setup {
    let db = pg.create_database();
    let url = pg.app_url(&db);
    let keys = TestDir::new("bench-replica-keys").expect("key dir");
    let config = format!(
        "[[providers.entries]]\nname = \"mock\"\nprovider = \"anthropic\"\nbase_url = \"{}\"\n\
         model = \"bench\"\nauth_token = \"t\"\n",
        mock.base_url
    );
    let mut servers = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..n {
        let addr = free_addr();
        let opts = ServerOptions::new()
            .bin(bin)
            .config(config.clone())
            .env("BAE_DATABASE_URL", &url)
            .env("BAE_ADDR", addr.to_string())
            .env("BAE_REPLICA_ADVERTISE", addr.to_string())
            .env(
                "BAE_ADMIN_KEY_FILE",
                keys.path().join("admin-key.pem").display().to_string(),
            )
            .env(
                "BAE_ADMIN_KEY_HASH_FILE",
                keys.path().join("admin-key-hash.pem").display().to_string(),
            );
        servers.push(Server::start(opts));
        addrs.push(addr);
    }
    let nginx = Nginx::start(&addrs);
    Setup {
        servers,
        nginx,
        _keys: keys,
    }
}

/// A profile and client key made on replica 0, once every replica knows it.
fn client_key(s: &Setup) -> String {
    let admin = s.servers[0].admin();
    let p = admin.post_json(
        "/admin/v1/profiles",
        &json!({"name": format!("bench-{}", next_rpc_id()), "primary_provider": "mock"}),
    );
    p.assert_status(201);
    let k = admin.post_json(
        "/admin/v1/keys",
        &json!({"name": "bench", "profile_id": p.json()["id"]}),
    );
    k.assert_status(201);
    let (kid, key) = (k.json()["id"].clone(), k.json()["key"].clone());
    let kid = kid.as_str().unwrap_or_default().to_string();
    for srv in &s.servers {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !srv
            .admin()
            .get("/admin/v1/keys?limit=200")
            .text()
            .contains(&kid)
        {
            assert!(Instant::now() < deadline, "the key never reached a replica");
            thread::sleep(Duration::from_millis(20));
        }
    }
    key.as_str().unwrap_or_default().to_string()
}

fn turn(lb: &HttpClient, sid: &str, skey: &str, i: u64) -> bool {
    let params = json!({"message": {"role": "user", "content": format!("hello {i}")}});
    let (_, t): (Vec<Value>, Value) =
        lb.rpc(sid, skey, "session.sendMessage", params, next_rpc_id());
    t.get("result").is_some()
}

struct Load {
    per_sec: f64,
    p50: Duration,
    p99: Duration,
    units: usize,
    failed: usize,
}

fn load(s: &Setup, key: &str, clients: usize, secs: f64) -> Load {
    let barrier = Arc::new(Barrier::new(clients + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let lb = HttpClient::new(s.nginx.addr).timeout(Duration::from_secs(60));
    let mut handles = Vec::new();
    for _ in 0..clients {
        let created = lb
            .clone()
            .bearer(key)
            .post_json("/api/v1/sessions", &json!({}));
        created.assert_status(201);
        let v = created.json();
        let sid = v["session_id"].as_str().unwrap_or_default().to_string();
        let skey = v["session_key"].as_str().unwrap_or_default().to_string();
        let (barrier, stop, lb) = (barrier.clone(), stop.clone(), lb.clone());
        handles.push(thread::spawn(move || {
            let (_, reg) = lb.rpc(&sid, &skey, "session.registerDriver", json!({}), 1);
            assert_eq!(reg["result"]["registered"], true, "{reg}");
            for i in 0..3 {
                turn(&lb, &sid, &skey, i); // warm-up
            }
            barrier.wait();
            let (mut lat, mut failed, mut i) = (Vec::new(), 0, 3);
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                if turn(&lb, &sid, &skey, i) {
                    lat.push(t0.elapsed());
                } else {
                    failed += 1;
                }
                i += 1;
            }
            (lat, failed)
        }));
    }
    barrier.wait();
    let t0 = Instant::now();
    thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let (mut all, mut failed) = (Vec::new(), 0);
    for h in handles {
        let (lat, f) = h.join().expect("client thread");
        all.extend(lat);
        failed += f;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    all.sort();
    Load {
        per_sec: all.len() as f64 / elapsed,
        p50: percentile(&all, 0.50),
        p99: percentile(&all, 0.99),
        units: all.len(),
        failed,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut secs = 5.0;
    let mut clients = vec![8usize, 64];
    let mut bin = std::env::current_exe()
        .expect("current exe")
        .with_file_name(format!("baesrv{}", std::env::consts::EXE_SUFFIX));
    while let Some(a) = args.next() {
        let val = args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--secs" => secs = val.parse().expect("--secs"),
            "--clients" => {
                clients = val
                    .split(',')
                    .map(|c| c.parse().expect("--clients"))
                    .collect()
            }
            "--baesrv" => bin = PathBuf::from(val),
            other => panic!("unknown argument {other}"),
        }
    }
    let pg = PgCluster::start_durable();
    let mock = MockProvider::start();
    mock.set_default(Reply::anthropic_text("ok"));
    println!("| replicas | clients | turns | per second | p50 | p99 | failed |");
    println!("|---|---|---|---|---|---|---|");
    for n in [1, 2, 3] {
        let setup = start(&bin, &pg, &mock, n);
        let key = client_key(&setup);
        for &c in &clients {
            let r = load(&setup, &key, c, secs);
            println!(
                "| {n} | {c} | {} | {:.0} | {} | {} | {} |",
                r.units,
                r.per_sec,
                ms(r.p50),
                ms(r.p99),
                r.failed
            );
        }
    }
}
