//! The PostgreSQL store's fence in replica mode (docs/scaling.md,
//! "Fencing"), driven in-process against a throwaway cluster: a commit
//! checks, inside its own transaction, that this replica's seq lane and the
//! lease of every session it writes still carry its fencing token and have
//! not expired by the database's clock; otherwise nothing of it is stored.
//! Expiry is simulated by moving `expires_at` into the past, as if the
//! replica had slept through its lease.

use std::time::{Duration, Instant};

use engine::replicas::Fence;
use engine::store::{
    EventRow, KeyRole, KeyRow, Lease, ProfileRow, ReadResult, SessionRow, SessionState, StoreRead,
    StoreWrite,
};
use io_smol::config::{parse_env, Database};
use io_smol::store::pg::replica::ReplicaIdentity;
use io_smol::store::pg::PgStore;
use io_smol::store::StoreError;
use serde_json::json;
use testkit::pg::PgCluster;

const T: &str = "2026-01-01T00:00:00.000Z";
const SID: &str = "ses_1";

fn url(cluster: &PgCluster, db: &str) -> io_smol::config::DatabaseUrl {
    let env = parse_env(|k| (k == "BAE_DATABASE_URL").then(|| cluster.app_url(db))).unwrap();
    let Database::Postgres { url, .. } = env.database else {
        panic!("not postgres")
    };
    url
}

/// A replica's store on `db`: migrated, in replica mode as `owner`, with a
/// lane; returns it and its lane.
fn replica(cluster: &PgCluster, db: &str, owner: &str, lease_ms: i64) -> (PgStore, u64) {
    let mut pg = PgStore::connect(&url(cluster, db)).unwrap();
    pg.migrate().unwrap();
    pg.set_replica(ReplicaIdentity::new(
        owner.into(),
        format!("{owner}:1"),
        lease_ms,
    ))
    .unwrap();
    let lane = pg.claim_lane().unwrap();
    (pg, lane)
}

fn catalogue() -> Vec<StoreWrite> {
    vec![
        StoreWrite::InsertProfile(ProfileRow {
            id: "pro_1".into(),
            name: "p".into(),
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
    ]
}

fn event(seq: u64) -> StoreWrite {
    StoreWrite::InsertEvent(EventRow {
        seq,
        id: format!("evt_{seq:032x}"),
        session_id: SID.into(),
        client_key_id: Some("key_c".into()),
        event_type: "server.message.send".into(),
        payload: "{}".into(),
        created_at: T.into(),
    })
}

/// The session created by the replica of `pg`, with its first event:
/// its lease is taken in the same transaction.
fn create_session(pg: &mut PgStore, seq: u64) {
    let mut batch = vec![
        StoreWrite::InsertSession(SessionRow {
            id: SID.into(),
            client_key_id: "key_c".into(),
            profile_id: "pro_1".into(),
            state: SessionState::Open,
            client_version: None,
            client_tools: json!({}).to_string(),
            sandbox_tools: json!({}).to_string(),
            subagent_tools: json!({}).to_string(),
            compaction: None,
            created_at: T.into(),
            closed_at: None,
        }),
        StoreWrite::LeaseNewSession {
            session_id: SID.into(),
        },
        event(seq),
    ];
    batch.splice(0..0, catalogue());
    commit(pg, &batch).unwrap();
}

/// A commit as the driver makes it: with the batch's fence.
fn commit(pg: &mut PgStore, batch: &[StoreWrite]) -> Result<(), StoreError> {
    pg.commit_fenced(batch, Some(&Fence::of(batch)))
}

fn seqs(cluster: &PgCluster, db: &str) -> Vec<i64> {
    let mut c = cluster.admin_client(db);
    c.query("SELECT seq FROM session_events ORDER BY seq", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Every lane and lease expired, as after a freeze longer than the lease.
fn expire_everything(cluster: &PgCluster, db: &str) {
    cluster.admin_execute(
        db,
        "UPDATE replica_lanes SET expires_at = now() - interval '1 second'; \
         UPDATE session_leases SET expires_at = now() - interval '1 second'",
    );
}

fn claim(pg: &mut PgStore) -> Lease {
    match pg.read(&StoreRead::ClaimLease {
        session_id: SID.into(),
        drivers_since: u64::MAX,
    }) {
        Ok(ReadResult::Lease(l)) => l,
        other => panic!("{other:?}"),
    }
}

#[track_caller]
fn assert_fenced(r: Result<(), StoreError>, what: &str) {
    match r {
        Err(StoreError::Fenced(w)) => assert!(w.contains(what), "{w}"),
        other => panic!("expected a fence on {what}, got {other:?}"),
    }
}

/// A replica whose lane expired and was taken over while it slept: its
/// next commit (into a session whose lease nobody took) is rolled back,
/// and the new lane holder's seqs never collide with it.
#[test]
fn a_commit_after_the_lane_was_taken_over_is_rolled_back() {
    let cluster = PgCluster::start();
    let db = cluster.create_database();
    let (mut a, lane_a) = replica(&cluster, &db, "a", 60_000);
    assert_eq!(lane_a, 0);
    create_session(&mut a, 64);
    expire_everything(&cluster, &db);
    let (mut b, lane_b) = replica(&cluster, &db, "b", 60_000);
    assert_eq!(lane_b, lane_a, "the expired lane is taken over");
    assert_fenced(commit(&mut a, &[event(128)]), "seq lane 0");
    // The same batch without its session still needs the lane.
    assert_fenced(
        commit(
            &mut a,
            &[StoreWrite::TouchKey {
                id: "key_c".into(),
                at: T.into(),
            }],
        ),
        "seq lane 0",
    );
    assert_eq!(seqs(&cluster, &db), [64], "nothing of A's batch stored");
    // B takes the session (expired) and writes in the lane.
    assert!(matches!(claim(&mut b), Lease::Mine(_)));
    commit(&mut b, &[event(128)]).unwrap();
    assert_eq!(seqs(&cluster, &db), [64, 128]);
}

/// The lane is still ours, but a session's lease expired and another
/// replica took it: a commit into that session is rolled back, one into
/// another session of ours goes through.
#[test]
fn a_commit_into_a_session_another_replica_took_is_rolled_back() {
    let cluster = PgCluster::start();
    let db = cluster.create_database();
    let (mut a, lane_a) = replica(&cluster, &db, "a", 60_000);
    let (mut b, lane_b) = replica(&cluster, &db, "b", 60_000);
    assert_ne!(lane_a, lane_b);
    create_session(&mut a, 64 + lane_a);
    // B sees the lease held.
    assert!(matches!(claim(&mut b), Lease::Elsewhere { .. }));
    cluster.admin_execute(
        &db,
        "UPDATE session_leases SET expires_at = now() - interval '1 second'",
    );
    let Lease::Mine(claimed) = claim(&mut b) else {
        panic!("the expired lease is taken")
    };
    assert_eq!(claimed.max_seq, 64 + lane_a);
    assert_fenced(
        commit(&mut a, &[event(128 + lane_a)]),
        "the lease of session ses_1",
    );
    commit(&mut b, &[event(128 + lane_b)]).unwrap();
    assert_eq!(
        seqs(&cluster, &db),
        [(64 + lane_a) as i64, (128 + lane_b) as i64]
    );
    // A write that names no session only needs the lane.
    commit(
        &mut a,
        &[StoreWrite::TouchKey {
            id: "key_c".into(),
            at: T.into(),
        }],
    )
    .unwrap();
}

/// A process restarted with the same fixed replica id takes its
/// predecessor's lane and leases at once (nothing expired): the
/// predecessor's rows now carry another token, so its commits and its
/// lease claims are fenced.
#[test]
fn a_restart_with_the_same_id_fences_the_old_process_at_once() {
    let cluster = PgCluster::start();
    let db = cluster.create_database();
    let (mut old, lane) = replica(&cluster, &db, "fixed", 60_000);
    create_session(&mut old, 64 + lane);
    let (mut new, lane_new) = replica(&cluster, &db, "fixed", 60_000);
    assert_eq!(lane_new, lane);
    assert!(matches!(claim(&mut new), Lease::Mine(_)));
    assert_fenced(commit(&mut old, &[event(128 + lane)]), "seq lane");
    match old.read(&StoreRead::ClaimLease {
        session_id: SID.into(),
        drivers_since: u64::MAX,
    }) {
        Err(e @ StoreError::Fenced(_)) => assert!(e.is_fatal()),
        other => panic!("{other:?}"),
    }
    commit(&mut new, &[event(128 + lane)]).unwrap();
    assert_eq!(
        seqs(&cluster, &db),
        [(64 + lane) as i64, (128 + lane) as i64]
    );
}

/// Without a renewal for 3/4 of the lease (no renewer runs here), the
/// store refuses to commit or claim before it even asks the database.
#[test]
fn a_replica_whose_renewals_stopped_refuses_to_write() {
    let cluster = PgCluster::start();
    let db = cluster.create_database();
    let (mut a, lane) = replica(&cluster, &db, "a", 400);
    create_session(&mut a, 64 + lane);
    std::thread::sleep(Duration::from_millis(300));
    assert_fenced(commit(&mut a, &[event(128 + lane)]), "a renewed lease");
    assert!(matches!(
        a.read(&StoreRead::ClaimLease {
            session_id: SID.into(),
            drivers_since: u64::MAX,
        }),
        Err(StoreError::Fenced(_))
    ));
    assert_eq!(seqs(&cluster, &db), [(64 + lane) as i64]);
}

/// What makes a lane collision impossible rather than unlikely: while a
/// transaction holds the fence's lane check (`FOR SHARE`, the statement
/// the fence runs), another replica's takeover of that lane, expired
/// meanwhile, waits until the transaction ends, and so reads (its
/// snapshot, after the claim) everything such a commit stored.
#[test]
fn a_lane_takeover_waits_for_the_fenced_transaction_in_flight() {
    let cluster = PgCluster::start();
    let db = cluster.create_database();
    let (_a, lane) = replica(&cluster, &db, "a", 1_000);
    let token: i64 = cluster
        .admin_client(&db)
        .query_one(
            "SELECT token FROM replica_lanes WHERE lane = $1",
            &[&(lane as i32)],
        )
        .unwrap()
        .get(0);
    let mut holder = cluster.admin_client(&db);
    let mut tx = holder.transaction().unwrap();
    let locked = tx
        .query(
            io_smol::store::pg::replica::LANE_HELD,
            &[&(lane as i32), &token],
        )
        .unwrap();
    assert_eq!(locked.len(), 1, "the lane check passes while unexpired");
    // The lease runs out while the transaction is still open.
    std::thread::sleep(Duration::from_millis(1_200));
    let mut b = PgStore::connect(&url(&cluster, &db)).unwrap();
    b.set_replica(ReplicaIdentity::new("b".into(), "b:1".into(), 60_000))
        .unwrap();
    let taker = std::thread::spawn(move || {
        let started = Instant::now();
        let lane = b.claim_lane().unwrap();
        (lane, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(600));
    assert!(!taker.is_finished(), "the takeover did not wait");
    tx.commit().unwrap();
    let (taken, waited) = taker.join().unwrap();
    assert_eq!(taken, lane, "then it takes the expired lane");
    assert!(waited >= Duration::from_millis(500), "{waited:?}");
}

/// Issue 38 (docs/extensions.md, "Forks and rewinds"): with durable
/// drivers a replica taking a session's lease rebuilds its registrations
/// from the log, but not those a fork or an import copied into it (up to
/// its lineage row's `copied_through`): only the session's own.
#[test]
fn a_claim_brings_back_a_copys_own_registrations_only() {
    use engine::store::{LineageRow, Origin};
    let cluster = PgCluster::start();
    let db = cluster.create_database();
    let (mut a, lane_a) = replica(&cluster, &db, "a", 60_000);
    let (mut b, _) = replica(&cluster, &db, "b", 60_000);
    create_session(&mut a, 64 + lane_a);
    let register = |seq: u64, key: &str| {
        StoreWrite::InsertEvent(EventRow {
            seq,
            id: format!("evt_{seq:032x}"),
            session_id: SID.into(),
            client_key_id: Some(key.into()),
            event_type: "session.driver.register".into(),
            payload: "{}".into(),
            created_at: T.into(),
        })
    };
    let copied_through = 128 + lane_a;
    let batch = [
        StoreWrite::InsertLineage(LineageRow {
            session_id: SID.into(),
            origin: Origin::Fork {
                parent_id: "ses_0".into(),
                parent_event_id: "evt_0".into(),
            },
            created_at: T.into(),
            copied_through,
        }),
        register(copied_through, "key_parent"),
        register(192 + lane_a, "key_c"),
    ];
    commit(&mut a, &batch).unwrap();
    cluster.admin_execute(
        &db,
        "UPDATE session_leases SET expires_at = now() - interval '1 second'",
    );
    let durable = StoreRead::ClaimLease {
        session_id: SID.into(),
        drivers_since: 0,
    };
    let claimed = match b.read(&durable) {
        Ok(ReadResult::Lease(Lease::Mine(claimed))) => claimed,
        other => panic!("the expired lease is taken: {other:?}"),
    };
    assert_eq!(claimed.drivers, ["key_c"]);
}
