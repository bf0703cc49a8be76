//! Several replicas over one PostgreSQL database (docs/scaling.md, issue 16
//! item 4), with real components only: a throwaway PostgreSQL cluster
//! (`testkit::pg`), three `baesrv` replicas in replica mode on ephemeral
//! loopback ports, and Debian's `nginx` as a round-robin load balancer in
//! front of them (`testkit::nginx`); only the LLM provider is the mock.
//!
//! Requests land on whichever replica nginx picks; a replica that does not
//! hold a session's lease forwards the request to the one that does. The
//! tests check what a client sees through the balancer (turns, client-tool
//! pauses and their continuations, NDJSON streams), that the log stays one
//! ordered, gapless history per session whichever replica wrote it, that a
//! key revoked on one replica is refused by the others within the
//! documented bound (1 s), and that `kill -9` of a session's owner mid-pause
//! moves the session to another replica with the pause intact.
//!
//! Missing PostgreSQL or nginx fails these tests loudly (never a skip).

mod replica_support;
mod rest_support;

use std::time::{Duration, Instant};

use replica_support::*;
use rest_support::opts;
use serde_json::{json, Value};
use testkit::http::next_rpc_id;
use testkit::{HttpClient, MockProvider, Reply, Server};

/// The log of one session driven through a text turn, a client-tool pause
/// and its continuation: exactly this, in this order (one turn at a time,
/// the tool use answered once).
const DRIVEN: &[&str] = &[
    "session.open",
    "session.driver.register",
    "client.message.send",
    "provider.request",
    "provider.response",
    "server.message.send",
    "client.message.send",
    "provider.request",
    "provider.response",
    "tool.call",
    "server.message.send",
    "client.message.send",
    "tool.result",
    "provider.request",
    "provider.response",
    "server.message.send",
];

/// A session opened and registered through the balancer: its id and key,
/// the replica that took its lease, and another replica.
fn registered_on_the_balancer(
    r: &Replicas,
    lb: &HttpClient,
    client_key: &str,
) -> (String, String, usize, usize) {
    let (sid, skey) = open(lb, client_key);
    let reg = rpc(lb, &sid, &skey, "session.registerDriver", json!({}));
    assert_eq!(reg["result"]["registered"], true, "{reg}");
    let owner = r.owner(&sid).expect("registerDriver took the lease");
    let other = (owner + 1) % r.servers.len();
    (sid, skey, owner, other)
}

/// Drives one session through the balancer; returns its events.
fn drive(r: &Replicas, client_key: &str, n: usize) -> (String, String) {
    let lb = r.lb();
    let (sid, skey) = open(&lb, client_key);
    let reg = rpc(&lb, &sid, &skey, "session.registerDriver", json!({}));
    assert_eq!(reg["result"]["registered"], true, "{reg}");
    r.mock.push(Reply::anthropic_text(format!("hello {n}")));
    let t = send(&lb, &sid, &skey, json!("hi"));
    assert!(t.get("result").is_some(), "{t}");
    let tu = format!("tu_{n}");
    r.mock.push(Reply::anthropic_tool_use(vec![
        json!({"type": "tool_use", "id": tu, "name": "get_time", "input": {}}),
    ]));
    let t = send(&lb, &sid, &skey, json!("what time?"));
    assert_eq!(
        t["result"]["message"]["content"][0]["dispatch"], "client",
        "{t}"
    );
    r.mock.push(Reply::anthropic_text(format!("noon {n}")));
    let result = json!([{"type": "tool_result", "tool_use_id": tu, "content": [{"type": "text", "text": "12:00"}]}]);
    let t = send(&lb, &sid, &skey, result);
    assert!(t.get("result").is_some(), "{t}");
    (sid, skey)
}

#[test]
fn sessions_driven_through_nginx_keep_one_ordered_log_whichever_replica_serves() {
    let r = Replicas::start(3);
    let (_, _, key) = profile_and_key(&r, 0);
    let mut sessions = Vec::new();
    for n in 0..6 {
        sessions.push(drive(&r, &key, n));
    }
    assert!(
        r.forwards_logged() > 0,
        "round robin over three replicas never forwarded a request"
    );
    for (sid, skey) in &sessions {
        // The same log through the balancer and from every replica.
        let via_lb = events(&r.lb(), sid, skey);
        assert_eq!(types(&via_lb), DRIVEN, "session {sid}");
        for s in &r.servers {
            assert_eq!(events(&s.client(), sid, skey), via_lb, "session {sid}");
        }
        let tool_results = via_lb
            .iter()
            .filter(|e| e["event_type"] == "tool.result")
            .count();
        assert_eq!(tool_results, 1, "the tool use is answered once");
    }
    // Gapless and unique: page cursors are seqs; every session's are
    // strictly increasing and no seq is shared between sessions.
    let mut c = r.pg.admin_client(&r.db);
    let rows = c
        .query(
            "SELECT session_id, seq FROM session_events ORDER BY session_id, seq",
            &[],
        )
        .unwrap();
    let total = rows.len();
    let seqs: std::collections::BTreeSet<i64> = rows.iter().map(|row| row.get(1)).collect();
    assert_eq!(seqs.len(), total, "event seqs are unique across replicas");
    for (sid, skey) in &sessions {
        let stored: i64 = c
            .query_one(
                "SELECT COUNT(*) FROM session_events WHERE session_id = $1",
                &[sid],
            )
            .unwrap()
            .get(0);
        assert_eq!(stored as usize, events(&r.lb(), sid, skey).len(), "{sid}");
    }
    assert_oracle_holds(&r);
}

/// One turn at a time, every tool use answered once, in a session's log:
/// a turn runs from its `client.message.send` to its
/// `server.message.send`; a continuation (`client.message.send` with a
/// `tool.result`) only follows a paused turn's `tool.call`.
#[track_caller]
fn assert_turns_serialised(sid: &str, log: &[Value]) {
    let mut in_turn = false;
    let mut pending_tool_uses: Vec<String> = Vec::new();
    let mut answered: Vec<String> = Vec::new();
    for (i, e) in log.iter().enumerate() {
        let t = e["event_type"].as_str().unwrap_or("?");
        match t {
            "client.message.send" => {
                assert!(
                    !in_turn,
                    "{sid}: a turn started inside another at {i}: {log:?}"
                );
                in_turn = true;
            }
            "server.message.send" => {
                assert!(in_turn, "{sid}: an answer outside a turn at {i}");
                in_turn = false;
            }
            "tool.call" => {
                if let Some(id) = e["payload"]["id"].as_str() {
                    pending_tool_uses.push(id.to_string());
                }
            }
            "tool.result" => {
                let id = e["payload"]["tool_use_id"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string();
                assert!(
                    !answered.contains(&id),
                    "{sid}: tool use {id} answered twice"
                );
                answered.push(id);
            }
            _ => {}
        }
    }
    assert!(!in_turn, "{sid}: a turn never ended");
    pending_tool_uses.retain(|id| !answered.contains(id));
    assert!(
        pending_tool_uses.is_empty(),
        "{sid}: unanswered {pending_tool_uses:?}"
    );
}

/// Creator A and joiner B drive session `n` (its own provider `mock<n>`)
/// through the balancer: A and B send at once (FIFO: one waits for the
/// other), A pauses on a client tool, B sends while A's pause holds the
/// gate, A answers the tool (first, as the pause's owner), then B's turn.
fn contend(
    lb: &HttpClient,
    mock: &MockProvider,
    key_a: &str,
    key_b: &str,
    n: usize,
) -> (String, String) {
    let (sid, ska) = open(lb, key_a);
    let join = lb
        .clone()
        .bearer(key_b)
        .post_json(&format!("/api/v1/sessions/{sid}/join"), &json!({}));
    join.assert_status(201);
    let skb = join.json()["session_key"].as_str().unwrap().to_string();
    for k in [&ska, &skb] {
        let reg = rpc(lb, &sid, k, "session.registerDriver", json!({}));
        assert_eq!(reg["result"]["registered"], true, "{reg}");
    }
    mock.push_all([
        Reply::anthropic_text("first"),
        Reply::anthropic_text("second"),
    ]);
    let msg = |text: &str| {
        json!({"jsonrpc": "2.0", "id": next_rpc_id(), "method": "session.sendMessage",
                                   "params": {"message": {"role": "user", "content": text}}})
    };
    let mut sa = lb.rpc_stream(&sid, &ska, &msg("from A"));
    let mut sb = lb.rpc_stream(&sid, &skb, &msg("from B"));
    for s in [&mut sa, &mut sb] {
        let (_, t) = s.collect_until_terminal(Duration::from_secs(30));
        assert!(
            t.as_ref().is_some_and(|t| t.get("result").is_some()),
            "{n}: {t:?}"
        );
    }
    let tu = format!("tu_c{n}");
    mock.push_all([
        Reply::anthropic_tool_use(vec![
            json!({"type": "tool_use", "id": tu, "name": "get_time", "input": {}}),
        ]),
        Reply::anthropic_text("for A"),
        Reply::anthropic_text("for B"),
    ]);
    let t = rpc(
        lb,
        &sid,
        &ska,
        "session.sendMessage",
        json!({"message": {"role": "user", "content": "time?"}}),
    );
    assert_eq!(
        t["result"]["message"]["content"][0]["dispatch"], "client",
        "{t}"
    );
    let mut waiting = lb.rpc_stream(&sid, &skb, &msg("B waits"));
    let result = json!([{"type": "tool_result", "tool_use_id": tu, "content": [{"type": "text", "text": "12:00"}]}]);
    let t = send(lb, &sid, &ska, result);
    assert_eq!(t["result"]["message"]["content"][0]["text"], "for A", "{t}");
    let (_, tb) = waiting.collect_until_terminal(Duration::from_secs(30));
    let tb = tb.expect("B's turn ran");
    assert_eq!(
        tb["result"]["message"]["content"][0]["text"], "for B",
        "{tb}"
    );
    (sid, ska)
}

#[test]
fn concurrent_sessions_with_fifo_contention_and_pauses_keep_every_invariant() {
    const SESSIONS: usize = 50;
    let r = Replicas::start_with(3, SESSIONS);
    let mut keys = Vec::new();
    for n in 0..SESSIONS {
        let provider = format!("mock{}", n + 1);
        let (profile, _, key_a) = profile_and_key_on(&r, n % 3, &provider);
        let (_, key_b) = key_of(&r, (n + 1) % 3, &profile);
        keys.push((key_a, key_b));
    }
    let sessions: Vec<(String, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(n, (a, b))| {
                let (lb, mock) = (r.lb(), &r.mocks[n]);
                scope.spawn(move || contend(&lb, mock, a, b, n))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("session thread"))
            .collect()
    });
    for (sid, skey) in &sessions {
        let log = events(&r.lb(), sid, skey);
        assert_turns_serialised(sid, &log);
        let sends = log
            .iter()
            .filter(|e| e["event_type"] == "client.message.send")
            .count();
        assert_eq!(sends, 5, "{sid}: every request ran once: {:?}", types(&log));
        for s in &r.servers {
            assert_eq!(
                events(&s.client(), sid, skey),
                log,
                "{sid}: one log on every replica"
            );
        }
    }
    assert!(r.forwards_logged() > 0);
    assert_oracle_holds(&r);
}

#[test]
fn ndjson_streams_pass_frame_by_frame_through_a_forwarding_replica() {
    let r = Replicas::start(3);
    let (_, _, key) = profile_and_key(&r, 1);
    let lb = r.lb();
    let (sid, skey, _, other) = registered_on_the_balancer(&r, &lb, &key);
    // A subscription opened on a replica that does not own the session.
    // Replaying after the first event: nothing of the turn can be missed
    // however fast it runs.
    let first = events(&lb, &sid, &skey)[0]["id"].clone();
    let sub = json!({"jsonrpc": "2.0", "id": 1, "method": "session.subscribe",
                     "params": {"since_event_id": first}});
    let mut stream = r.servers[other].client().rpc_stream(&sid, &skey, &sub);
    assert_eq!(stream.status(), 200);
    // A turn sent through the balancer: its events reach the forwarded
    // stream one frame at a time, before the subscription ends.
    r.mock.push(Reply::anthropic_text("streamed"));
    let t = send(&lb, &sid, &skey, json!("hi"));
    assert!(t.get("result").is_some(), "{t}");
    let mut live = Vec::new();
    while live.len() < 4 {
        let f = stream
            .next_frame(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("live frame missing after {live:?}"));
        match f["params"]["event_type"].as_str() {
            // What the subscription replays before the turn.
            Some("session.open" | "session.driver.register") | None => {}
            Some(t) => live.push(t.to_string()),
        }
    }
    assert_eq!(
        live,
        vec![
            "client.message.send",
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    assert!(!stream.is_finished(), "the subscription stays open");
    assert!(r.servers[other]
        .stderr_log()
        .contains("forwarded to the session's owner"));
}

/// A client that reads nothing of a forwarded stream backs up into the
/// owner, which drops it with the reference's `lagged` error as it would a
/// direct consumer (C-132): the forwarding replica reads only a few chunks
/// ahead of its client instead of buffering the owner's stream for it.
#[test]
fn a_slow_client_of_a_forwarded_stream_is_lagged_by_the_owner() {
    let r = Replicas::start_env(2, 0, &[("BAE_SUBSCRIBER_LAG_LIMIT", "16")]);
    let (_, _, key) = profile_and_key(&r, 1);
    let lb = r.lb();
    let (sid, skey, owner, other) = registered_on_the_balancer(&r, &lb, &key);
    let sub = json!({"jsonrpc": "2.0", "id": 1, "method": "session.subscribe", "params": {}});
    let mut stream = r.servers[other].client().rpc_stream(&sid, &skey, &sub);
    assert_eq!(stream.status(), 200);
    // Turns with 100 KB replies on the owner while the subscriber reads
    // nothing: each `provider.request` repeats the growing history, tens
    // of MB in all, far more than the sockets on the way hold.
    let direct = r.servers[owner].client();
    let turns = 25;
    for _ in 0..turns {
        r.mock.push(Reply::anthropic_text("y".repeat(100_000)));
        let t = send(&direct, &sid, &skey, json!("more"));
        assert!(t.get("result").is_some(), "{t}");
    }
    // Reading now: some live frames, then the owner's lagged error.
    let mut frames = Vec::new();
    while let Some(f) = stream.next_frame(Duration::from_secs(10)) {
        frames.push(f);
    }
    let last = frames.last().expect("frames");
    assert_eq!(
        last,
        &json!({"jsonrpc": "2.0", "error": {"code": -32000, "message": "lagged; reconnect with since_event_id"}}),
        "after {} frames",
        frames.len()
    );
    assert!(frames.len() < turns * 4, "{} frames", frames.len());
}

#[test]
fn a_key_revoked_on_one_replica_is_refused_by_the_others_within_a_second() {
    let r = Replicas::start(3);
    let (_, kid, key) = profile_and_key(&r, 0);
    // A session opened on replica 1 with the key, never used since.
    let (sid, _) = open(&r.servers[1].client(), &key);
    let revoked = r.servers[0]
        .admin()
        .delete(&format!("/admin/v1/keys/{kid}"));
    revoked.assert_status(204);
    let started = Instant::now();
    for i in [1, 2] {
        let c = r.servers[i].client().bearer(key.clone());
        let refused = wait_until(
            Duration::from_secs(1).saturating_sub(started.elapsed()),
            || c.post_json("/api/v1/sessions", &json!({})).status == 401,
        );
        assert!(
            refused,
            "replica {i} still accepts the revoked key after 1 s"
        );
    }
    // The cascade closed the key's session (spec 03 §4.2), whichever
    // replica did it; every replica reports it closed.
    for (i, s) in r.servers.iter().enumerate() {
        let closed = wait_until(Duration::from_secs(5), || {
            s.admin()
                .get("/admin/v1/sessions?state=closed&limit=200")
                .text()
                .contains(&sid)
        });
        assert!(closed, "replica {i} does not list {sid} as closed");
    }
}

#[test]
fn kill9_of_the_owner_mid_pause_moves_the_session_with_its_pause() {
    let mut r = Replicas::start(3);
    let (_, _, key) = profile_and_key(&r, 2);
    let lb = r.lb();
    let (sid, skey) = open(&lb, &key);
    let reg = rpc(&lb, &sid, &skey, "session.registerDriver", json!({}));
    assert_eq!(reg["result"]["registered"], true, "{reg}");
    r.mock.push(Reply::anthropic_tool_use(vec![
        json!({"type": "tool_use", "id": "tu_k", "name": "get_time", "input": {}}),
    ]));
    let t = send(&lb, &sid, &skey, json!("what time?"));
    assert_eq!(
        t["result"]["message"]["content"][0]["dispatch"], "client",
        "{t}"
    );
    let before = events(&lb, &sid, &skey);
    let owner = r.owner(&sid).expect("the session has an owner");
    r.servers[owner].kill9();
    // Until the lease expires the survivors answer 503 (owner unreachable);
    // then one of them takes the session over. Drivers register again, as
    // after a restart (the registry is in memory).
    let mut reg = None;
    let moved = wait_until(Duration::from_secs(20), || {
        reg = try_rpc(&lb, &sid, &skey, "session.registerDriver", json!({}));
        reg.as_ref()
            .is_some_and(|t| t["result"]["registered"] == true)
    });
    assert!(moved, "the session never moved: {reg:?}");
    let new_owner = r.owner(&sid).expect("taken over");
    assert_ne!(new_owner, owner);
    let after = events(&lb, &sid, &skey);
    assert_eq!(
        after[..before.len()],
        before[..],
        "nothing acknowledged lost"
    );
    // The pause was rebuilt from the log: the owner answers it.
    r.mock.push(Reply::anthropic_text("It is noon."));
    let result = json!([{"type": "tool_result", "tool_use_id": "tu_k", "content": [{"type": "text", "text": "12:00"}]}]);
    let t = send(&lb, &sid, &skey, result);
    assert!(t.get("result").is_some(), "{t}");
    let log = events(&lb, &sid, &skey);
    let tail = types(&log[before.len()..]);
    assert_eq!(
        tail,
        vec![
            "session.driver.register",
            "client.message.send",
            "tool.result",
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    // The provider saw the whole history, the paused tool use included.
    let last = r.mock.requests().pop().expect("a provider call");
    let messages = last.messages().clone();
    assert_eq!(messages.as_array().map(Vec::len), Some(3), "{messages}");
    assert_eq!(messages[1]["content"][0]["id"], "tu_k", "{messages}");
    assert_oracle_holds(&r);
}

#[test]
fn kill9_of_the_owner_mid_turn_loses_nothing_acknowledged() {
    let mut r = Replicas::start(3);
    let (_, _, key) = profile_and_key(&r, 1);
    let lb = r.lb();
    let (sid, skey) = open(&lb, &key);
    let reg = rpc(&lb, &sid, &skey, "session.registerDriver", json!({}));
    assert_eq!(reg["result"]["registered"], true, "{reg}");
    r.mock.push(Reply::anthropic_text("before"));
    let t = send(&lb, &sid, &skey, json!("one"));
    assert!(t.get("result").is_some(), "{t}");
    let acknowledged = events(&lb, &sid, &skey);
    // A turn in flight (its provider answers late) when the owner dies.
    r.mock
        .push(Reply::anthropic_text("never seen").delayed(Duration::from_secs(30)));
    let msg = json!({"jsonrpc": "2.0", "id": 9, "method": "session.sendMessage",
                     "params": {"message": {"role": "user", "content": "two"}}});
    let mut inflight = lb.rpc_stream(&sid, &skey, &msg);
    assert!(
        r.mock.wait_requests(2, Duration::from_secs(10)).len() >= 2,
        "the call left"
    );
    let owner = r.owner(&sid).expect("owned");
    r.servers[owner].kill9();
    let (_, terminal) = inflight.collect_until_terminal(Duration::from_secs(10));
    assert!(
        terminal.is_none(),
        "no answer from a dead owner: {terminal:?}"
    );
    // Another replica takes the session; the next turn runs there.
    let mut reg = None;
    let moved = wait_until(Duration::from_secs(20), || {
        reg = try_rpc(&lb, &sid, &skey, "session.registerDriver", json!({}));
        reg.as_ref()
            .is_some_and(|t| t["result"]["registered"] == true)
    });
    assert!(moved, "the session never moved: {reg:?}");
    r.mock.push(Reply::anthropic_text("after"));
    let t = send(&lb, &sid, &skey, json!("three"));
    assert!(t.get("result").is_some(), "{t}");
    let log = events(&lb, &sid, &skey);
    assert_eq!(
        log[..acknowledged.len()],
        acknowledged[..],
        "nothing acknowledged lost"
    );
    let last = log.last().unwrap();
    assert_eq!(last["event_type"], "server.message.send");
    assert!(last["payload"].to_string().contains("after"), "{last}");
}

#[test]
fn a_graceful_stop_hands_the_sessions_over_at_once() {
    let mut r = Replicas::start(3);
    let (_, _, key) = profile_and_key(&r, 0);
    let lb = r.lb();
    let (sid, skey) = open(&lb, &key);
    let owner = r.owner(&sid).expect("the creator holds the lease");
    let status = r.servers[owner].stop();
    assert!(status.success(), "{status:?}");
    assert_eq!(r.owner(&sid), None, "the lease was given back");
    // The first request after the stop is served: no lease to wait for.
    let reg = try_rpc(&lb, &sid, &skey, "session.registerDriver", json!({}));
    let reg = reg.expect("served at once");
    assert_eq!(reg["result"]["registered"], true, "{reg}");
    let new_owner = r.owner(&sid).expect("taken");
    assert_ne!(new_owner, owner);
}

#[test]
fn replica_mode_needs_postgresql_and_valid_settings() {
    let out = Server::run(
        opts().env("BAE_REPLICA_ADVERTISE", "127.0.0.1:8080"),
        Duration::from_secs(30),
    );
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("BAE_DATABASE_URL"), "{}", out.stderr);
    let out = Server::run(
        opts()
            .env("BAE_DATABASE_URL", "postgres://u@127.0.0.1:9/db")
            .env("BAE_REPLICA_ADVERTISE", "127.0.0.1:8080")
            .env("BAE_LEASE_MS", "10"),
        Duration::from_secs(30),
    );
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("BAE_LEASE_MS"), "{}", out.stderr);
}

/// With `BAE_DURABLE_DRIVERS=1`, registrations follow a session to its new
/// owner after a failover (`kill -9` of the owner): the driver goes on
/// sending without registering again, and the participants list it.
#[test]
fn durable_registrations_follow_the_session_after_a_failover() {
    let mut r = Replicas::start_env(3, 0, &[("BAE_DURABLE_DRIVERS", "1")]);
    let (_, _, key) = profile_and_key(&r, 0);
    let lb = r.lb();
    let (sid, skey, owner, other) = registered_on_the_balancer(&r, &lb, &key);
    r.mock.push(Reply::anthropic_text("before"));
    let t = send(&lb, &sid, &skey, json!("one"));
    assert!(t.get("result").is_some(), "{t}");
    r.servers[owner].kill9();
    // The first request after the lease expired moves the session; it is a
    // turn, which needs a registered driver.
    let mut answer = None;
    let moved = wait_until(Duration::from_secs(20), || {
        r.mock.push(Reply::anthropic_text("after the failover"));
        answer = try_rpc(
            &r.servers[other].client(),
            &sid,
            &skey,
            "session.sendMessage",
            json!({"message": {"role": "user", "content": "two"}}),
        );
        answer.as_ref().is_some_and(|t| t.get("result").is_some())
    });
    assert!(moved, "never served after the failover: {answer:?}");
    let t = answer.unwrap();
    assert_eq!(
        t["result"]["message"]["content"][0]["text"], "after the failover",
        "{t}"
    );
    let new_owner = r.owner(&sid).expect("taken over");
    assert_ne!(new_owner, owner);
    let parts = r.servers[other]
        .client()
        .bearer(skey.clone())
        .get(&format!("/api/v1/sessions/{sid}/participants"));
    parts.assert_status(200);
    assert_eq!(parts.json()["drivers"].as_array().map(Vec::len), Some(1));
    let log = events(&lb, &sid, &skey);
    let registrations = types(&log)
        .iter()
        .filter(|t| *t == "session.driver.register")
        .count();
    assert_eq!(
        registrations,
        1,
        "no second registration: {:?}",
        types(&log)
    );
}
