//! Replicas that fence themselves after a pause (docs/scaling.md,
//! "Fencing"): a replica frozen with `SIGSTOP` (as a VM pause, a swap storm
//! or a debugger would) while the others take its lane and its sessions
//! over, then resumed with `SIGCONT`, exits without writing anything; the
//! healthy replicas never crash, no unique key is ever violated, and the
//! sessions go on where they are now served. Real PostgreSQL, real
//! replicas, nginx in front (`replica_support`); only the provider is the
//! mock.

mod replica_support;
mod rest_support;

use std::time::{Duration, Instant};

use replica_support::*;
use serde_json::{json, Value};
use testkit::http::next_rpc_id;
use testkit::{Reply, Server};

/// The seq lane a replica took at start (its `replica mode` log line).
fn lane_of(s: &Server) -> i32 {
    let log = s.stderr_log();
    let line = (log.lines())
        .find(|l| l.contains("replica mode"))
        .unwrap_or_else(|| panic!("no replica mode line in {log}"));
    let lane = line
        .split("lane=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok());
    lane.unwrap_or_else(|| panic!("no lane in {line}"))
}

/// Everything replicas wrote that fencing protects, for comparison: every
/// event (seq, id, session), every lane and every lease (without expiry
/// times, which renewals move).
fn written(r: &Replicas) -> (Vec<(i64, String, String)>, Vec<Value>) {
    let mut c = r.pg.admin_client(&r.db);
    let events = (c.query(
        "SELECT seq, id, session_id FROM session_events ORDER BY seq",
        &[],
    ))
    .expect("events")
    .iter()
    .map(|row| (row.get(0), row.get(1), row.get(2)))
    .collect();
    let mut rows = Vec::new();
    for row in c
        .query(
            "SELECT lane, owner, token FROM replica_lanes ORDER BY lane",
            &[],
        )
        .expect("lanes")
    {
        let (lane, owner, token): (i32, String, i64) = (row.get(0), row.get(1), row.get(2));
        rows.push(json!({"lane": lane, "owner": owner, "token": token}));
    }
    for row in c
        .query(
            "SELECT session_id, owner, token FROM session_leases ORDER BY session_id",
            &[],
        )
        .expect("leases")
    {
        let (sid, owner, token): (String, String, i64) = (row.get(0), row.get(1), row.get(2));
        rows.push(json!({"session": sid, "owner": owner, "token": token}));
    }
    (events, rows)
}

/// Whether nothing of replica `s` (its lane and leases, by its advertised
/// address) is unexpired by the database's clock any more.
fn all_expired(r: &Replicas, s: &Server, lane: i32) -> bool {
    let mut c = r.pg.admin_client(&r.db);
    let addr = client_addr(s).to_string();
    let held: i64 = c
        .query_one(
            "SELECT (SELECT COUNT(*) FROM replica_lanes WHERE lane = $1 AND expires_at > now()) \
             + (SELECT COUNT(*) FROM session_leases WHERE addr = $2 AND expires_at > now())",
            &[&lane, &addr],
        )
        .expect("expiry query")
        .get(0);
    held == 0
}

/// Sessions opened, registered and served one text turn on `s` (which
/// thus holds their leases).
fn sessions_on(r: &Replicas, on: usize, key: &str, n: usize) -> Vec<(String, String)> {
    let c = r.servers[on].client();
    (0..n)
        .map(|i| {
            let (sid, skey) = open(&c, key);
            let reg = rpc(&c, &sid, &skey, "session.registerDriver", json!({}));
            assert_eq!(reg["result"]["registered"], true, "{reg}");
            r.mock.push(Reply::anthropic_text(format!("before {i}")));
            let t = send(&c, &sid, &skey, json!("hi"));
            assert!(t.get("result").is_some(), "{t}");
            assert_eq!(r.owner(&sid), Some(on));
            (sid, skey)
        })
        .collect()
}

/// A turn whose provider answers `delay` later, started on replica `on`;
/// returns once the provider has the call.
fn turn_in_flight(
    r: &Replicas,
    on: usize,
    (sid, skey): &(String, String),
    delay: Duration,
) -> testkit::http::RpcStream {
    let calls = r.mock.requests().len();
    r.mock
        .push(Reply::anthropic_text("answered while frozen").delayed(delay));
    let msg = json!({"jsonrpc": "2.0", "id": next_rpc_id(), "method": "session.sendMessage",
                     "params": {"message": {"role": "user", "content": "in flight"}}});
    let stream = r.servers[on].client().rpc_stream(sid, skey, &msg);
    let seen = r.mock.wait_requests(calls + 1, Duration::from_secs(10));
    assert!(seen.len() > calls, "the provider call never left");
    stream
}

/// No replica logged a unique-key violation or a failed commit, and the
/// healthy ones still run.
#[track_caller]
fn healthy(r: &mut Replicas, frozen: usize) {
    for (i, s) in r.servers.iter_mut().enumerate() {
        let log = s.stderr_log();
        for bad in ["duplicate key", "unique constraint", "violates"] {
            assert!(!log.contains(bad), "replica {i} logged {bad:?}:\n{log}");
        }
        if i != frozen {
            assert!(s.is_running(), "healthy replica {i} exited:\n{log}");
            assert!(!log.contains("exiting"), "replica {i}:\n{log}");
        }
    }
}

/// The scenario: the owner of three sessions, one of them mid-turn,
/// is frozen past its lease; a restarted replica takes its seq lane and
/// writes in it, another takes its sessions and writes in them; resumed,
/// the frozen replica exits 1 and the database is exactly as it was.
#[test]
fn a_replica_frozen_past_its_lease_exits_on_waking_and_writes_nothing() {
    let mut r = Replicas::start(3);
    let (_, _, key) = profile_and_key(&r, 0);
    let (a, b) = (0, 1);
    let lane_a = lane_of(&r.servers[a]);
    let sessions = sessions_on(&r, a, &key, 3);
    // The provider answers while the owner is frozen.
    let mut inflight = turn_in_flight(&r, a, &sessions[0], Duration::from_secs(3));
    r.servers[a].signal("STOP");
    assert!(
        wait_until(Duration::from_secs(15), || all_expired(
            &r,
            &r.servers[a],
            lane_a
        )),
        "the frozen replica's lane and leases never expired"
    );
    // A restarted replica takes the frozen one's lane (the lowest free one)
    // and writes in it.
    let d = r.add(&[]);
    assert_eq!(
        lane_of(&r.servers[d]),
        lane_a,
        "the new replica took the lane"
    );
    let own = sessions_on(&r, d, &key, 1);
    let mut c = r.pg.admin_client(&r.db);
    for row in c
        .query(
            "SELECT seq FROM session_events WHERE session_id = $1",
            &[&own[0].0],
        )
        .unwrap()
    {
        let seq: i64 = row.get(0);
        assert_eq!(seq % 64, i64::from(lane_a), "{seq} is in the taken lane");
    }
    // Another replica takes the sessions over (their history rebuilt from
    // the log) and writes in them.
    for (sid, skey) in &sessions {
        let reg = rpc(
            &r.servers[b].client(),
            sid,
            skey,
            "session.registerDriver",
            json!({}),
        );
        assert_eq!(reg["result"]["registered"], true, "{reg}");
        assert_eq!(r.owner(sid), Some(b), "{sid} moved");
    }
    r.mock.push(Reply::anthropic_text("on the new owner"));
    let (sid, skey) = &sessions[1];
    let t = send(&r.servers[b].client(), sid, skey, json!("after the move"));
    assert!(t.get("result").is_some(), "{t}");
    let before = written(&r);

    r.servers[a].signal("CONT");
    let status = r.servers[a].wait_exit(Duration::from_secs(10));
    let log = r.servers[a].stderr_log();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "the woken replica exits 1:\n{log}"
    );
    assert!(
        log.contains("could not be renewed in time") || log.contains("fenced"),
        "{log}"
    );
    assert_eq!(written(&r), before, "the woken replica wrote nothing");
    let (_, terminal) = inflight.collect_until_terminal(Duration::from_secs(5));
    assert!(terminal.is_none(), "no answer from it: {terminal:?}");
    healthy(&mut r, a);
    // The sessions go on where they are served now, through the balancer
    // (which skips the replica that exited), and the new lane holder too.
    for (i, (sid, skey)) in sessions.iter().enumerate() {
        r.mock.push(Reply::anthropic_text(format!("after {i}")));
        let t = send(&r.lb(), sid, skey, json!("still there?"));
        assert!(t.get("result").is_some(), "{sid}: {t}");
    }
    r.mock.push(Reply::anthropic_text("lane holder"));
    let t = send(&r.servers[d].client(), &own[0].0, &own[0].1, json!("more"));
    assert!(t.get("result").is_some(), "{t}");
    healthy(&mut r, a);
    assert_oracle_holds(&r);
}

/// With a fixed `BAE_REPLICA_ID`, a restarted process takes its
/// predecessor's lane and leases at once, without waiting for them to
/// expire. The predecessor, frozen meanwhile and resumed well within its
/// lease (so its own clock sees nothing wrong), is stopped by the
/// database's fence alone: its next commit finds a newer fencing token on
/// its lane and is rolled back, and it exits.
#[test]
fn a_restart_with_the_same_id_fences_its_frozen_predecessor_by_token() {
    let mut r = Replicas::start_env(2, 0, &[("BAE_LEASE_MS", "30000")]);
    let (_, _, key) = profile_and_key(&r, 0);
    let a = r.add(&[("BAE_REPLICA_ID", "fixed-replica")]);
    let lane_a = lane_of(&r.servers[a]);
    let sessions = sessions_on(&r, a, &key, 2);
    let mut inflight = turn_in_flight(&r, a, &sessions[0], Duration::from_secs(2));
    r.servers[a].signal("STOP");
    let a2 = r.add(&[("BAE_REPLICA_ID", "fixed-replica")]);
    assert_eq!(lane_of(&r.servers[a2]), lane_a, "the same lane, at once");
    for (sid, skey) in &sessions {
        let reg = rpc(
            &r.servers[a2].client(),
            sid,
            skey,
            "session.registerDriver",
            json!({}),
        );
        assert_eq!(reg["result"]["registered"], true, "{reg}");
        assert_eq!(r.owner(sid), Some(a2), "{sid} moved at once");
    }
    r.mock
        .push(Reply::anthropic_text("written by the successor"));
    let (sid, skey) = &sessions[1];
    let t = send(&r.servers[a2].client(), sid, skey, json!("hello"));
    assert!(t.get("result").is_some(), "{t}");
    // The provider's answer is waiting in the frozen replica's socket.
    std::thread::sleep(Duration::from_secs(2));
    let before = written(&r);

    r.servers[a].signal("CONT");
    let status = r.servers[a].wait_exit(Duration::from_secs(20));
    let log = r.servers[a].stderr_log();
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{log}");
    assert!(
        log.contains("fenced") || log.contains("lane was taken over"),
        "{log}"
    );
    assert!(!log.contains("could not be renewed in time"), "{log}");
    assert_eq!(written(&r), before, "the predecessor wrote nothing");
    let (_, terminal) = inflight.collect_until_terminal(Duration::from_secs(5));
    assert!(terminal.is_none(), "{terminal:?}");
    healthy(&mut r, a);
    r.mock.push(Reply::anthropic_text("on"));
    let (sid, skey) = &sessions[0];
    let t = send(&r.servers[a2].client(), sid, skey, json!("go on"));
    assert!(t.get("result").is_some(), "{t}");
    assert_oracle_holds(&r);
}

/// A frozen owner whose lease still runs holds a request relayed to it for
/// `BAE_FORWARD_TIMEOUT_MS` only: then the client gets the `503
/// replica_unavailable` with `Retry-After`, as for an unreachable owner,
/// and retries (through the balancer, until the lease moves).
#[test]
fn a_request_relayed_to_a_frozen_owner_gets_a_503_after_the_forward_timeout() {
    let mut r = Replicas::start_env(
        2,
        0,
        &[
            ("BAE_LEASE_MS", "30000"),
            ("BAE_FORWARD_TIMEOUT_MS", "1000"),
        ],
    );
    let (_, _, key) = profile_and_key(&r, 0);
    let sessions = sessions_on(&r, 0, &key, 1);
    let (sid, skey) = &sessions[0];
    r.servers[0].signal("STOP");
    let started = Instant::now();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver", "params": {}});
    let resp = r.servers[1]
        .client()
        .timeout(Duration::from_secs(30))
        .bearer(skey.clone())
        .post_json(&format!("/api/v1/sessions/{sid}/rpc"), &body);
    let waited = started.elapsed();
    r.servers[0].signal("CONT");
    assert_eq!(resp.status, 503, "{}", String::from_utf8_lossy(&resp.body));
    assert_eq!(resp.header("retry-after"), Some("1"));
    assert_eq!(resp.json()["type"], "replica_unavailable");
    assert!(waited >= Duration::from_millis(1000), "{waited:?}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert!(r.servers[1]
        .stderr_log()
        .contains("session owner sent no response head in time"));
    // Awake again, the owner (well within its lease) serves as before.
    let reg = rpc(
        &r.servers[1].client(),
        sid,
        skey,
        "session.registerDriver",
        json!({}),
    );
    assert_eq!(reg["result"]["registered"], true, "{reg}");
    healthy(&mut r, usize::MAX);
}
