//! Store work per kit unit, for instruction counts under callgrind
//! (repeatable on a shared box, unlike times). It commits, through the
//! server's own store thread handle (`Backend::worker`: cached statements,
//! the checkpoint thread beside it), the rows a `bench_kit` text unit writes:
//! a `sessions` row, its session key, and the unit's six events
//! (`session.open`, `session.driver.register`, `client.message.send`,
//! `provider.request`, `provider.response`, `server.message.send`), with
//! the payload sizes `baesrv` writes for them; `STORE_COST_GROUP` units per
//! transaction (8 by default, about what 64 kit clients give a group
//! commit).
//!
//! ```text
//! cargo bench -p io-smol --bench store_cost --no-run
//! STORE_COST_UNITS=4000 valgrind --tool=callgrind \
//!     --toggle-collect='io_smol::store::StoreConn::commit' target/release/deps/store_cost-<hash>
//! ```
//!
//! Instructions per unit = collected Ir ÷ units, minus the same run with
//! `STORE_COST_UNITS=0` (the database's setup) divided likewise. Without
//! valgrind it prints wall time per unit, for orientation only.

use std::time::Instant;

use engine::store::{EventRow, KeyRole, KeyRow, SessionRow, SessionState, StoreWrite};
use io_smol::store::{Backend, Store, Synchronous};

const T: &str = "2026-12-05T09:13:17.609Z";

/// The same pseudo-random hex every run (key hashes and prefixes are
/// random in the server: their index positions are too).
struct Lcg(u64);

impl Lcg {
    fn hex(&mut self, n: usize) -> String {
        let mut s = String::with_capacity(n);
        while s.len() < n {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s.push_str(&format!("{:016x}", self.0));
        }
        s.truncate(n);
        s
    }
}

/// The writes of kit text unit `i` (ids time-ordered, as `baesrv` mints
/// them), with event rowids from `seq`.
fn unit(i: u64, seq: &mut u64, rng: &mut Lcg) -> Vec<StoreWrite> {
    let sid = format!("ses_01a2457a{i:024x}");
    let kid = format!("key_01a2457a{i:024x}");
    let secret = rng.hex(48);
    let mut w = vec![
        StoreWrite::InsertSession(SessionRow {
            id: sid.clone(),
            client_key_id: "key_01a2457aad7a6c0a5a7363590e63f575".into(),
            profile_id: "pro_01a2457aad78ea9221e3611084431747".into(),
            state: SessionState::Open,
            client_version: None,
            client_tools: "{}".into(),
            sandbox_tools: "{}".into(),
            subagent_tools: "{}".into(),
            compaction: None,
            created_at: T.into(),
            closed_at: None,
        }),
        StoreWrite::InsertKey(KeyRow {
            id: kid,
            name: sid.clone(),
            key_hash: rng.hex(64),
            key_prefix: format!("bae_ses_{}", &secret[..8]),
            role: KeyRole::Session,
            profile_id: Some("pro_01a2457aad78ea9221e3611084431747".into()),
            client_id: Some("key_01a2457aad7a6c0a5a7363590e63f575".into()),
            created_at: T.into(),
            last_used_at: None,
            deleted_at: None,
        }),
    ];
    let events: [(&str, usize); 6] = [
        ("session.open", 76),
        ("session.driver.register", 2),
        ("client.message.send", 50),
        ("provider.request", 271),
        ("provider.response", 341),
        ("server.message.send", 74),
    ];
    for (event_type, size) in events {
        *seq += 1;
        let payload = format!("{{\"t\":\"{}\"}}", "x".repeat(size.saturating_sub(8)));
        w.push(StoreWrite::InsertEvent(EventRow {
            seq: *seq,
            id: format!("evt_01a2457a{:024x}", *seq),
            session_id: sid.clone(),
            client_key_id: Some("key_01a2457aad7a6c0a5a7363590e63f575".into()),
            event_type: event_type.into(),
            payload,
            created_at: T.into(),
        }));
    }
    w
}

fn main() {
    let units: u64 = std::env::var("STORE_COST_UNITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000);
    let group: u64 = std::env::var("STORE_COST_GROUP")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&g| g > 0)
        .unwrap_or(8);
    let dir = std::env::temp_dir().join(format!("store-cost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let store = Store::open(dir.join("bae.db"), Synchronous::Normal).expect("open");
    // The server's default page cache (BAE_SQLITE_CACHE_KIB).
    store.set_cache_kib(512).expect("cache size");
    store.migrate().expect("migrate");
    let mut backend = Backend::Sqlite(store);
    let mut worker = backend.worker();
    let (mut seq, mut rng) = (0u64, Lcg(7));
    // The profile and client key the sessions name, outside the units.
    worker
        .commit(&[StoreWrite::InsertProfile(engine::store::ProfileRow {
            id: "pro_01a2457aad78ea9221e3611084431747".into(),
            name: "bench".into(),
            primary_provider: "mock".into(),
            fallback_providers: vec![],
            mcp_servers: vec![],
            allowed_tools: vec![],
            available_sandboxes: vec![],
            created_at: T.into(),
            updated_at: T.into(),
            deleted_at: None,
        })])
        .expect("profile");
    worker
        .commit(&[StoreWrite::InsertKey(KeyRow {
            id: "key_01a2457aad7a6c0a5a7363590e63f575".into(),
            name: "bench".into(),
            key_hash: rng.hex(64),
            key_prefix: "bae_682f".into(),
            role: KeyRole::Client,
            profile_id: Some("pro_01a2457aad78ea9221e3611084431747".into()),
            client_id: None,
            created_at: T.into(),
            last_used_at: None,
            deleted_at: None,
        })])
        .expect("client key");
    let t0 = Instant::now();
    let mut i = 0;
    while i < units {
        let mut batch = Vec::new();
        for _ in 0..group.min(units - i) {
            batch.extend(unit(i, &mut seq, &mut rng));
            i += 1;
        }
        worker.commit(&batch).expect("commit");
    }
    let per = t0.elapsed().as_secs_f64() * 1e6 / units.max(1) as f64;
    eprintln!("{units} text units in groups of {group}: {per:.1} µs per unit (wall time)");
    drop(worker);
    drop(backend);
    let _ = std::fs::remove_dir_all(&dir);
}
