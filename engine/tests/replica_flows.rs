//! Replica mode in the engine (docs/scaling.md), in-process: lease claims
//! before session requests, forwarding to the owner, rebuilding a claimed
//! session from the store, seq lanes, catalogue notices and the revocation
//! cascade. The harness answers `ClaimLease` from its `MemStore` (the
//! session as stored: ours) unless the test says another replica holds it.
//! End to end, over PostgreSQL and nginx: `io-smol/tests/replicas_nginx.rs`.

mod common;

use common::*;
use engine::replicas::ReplicaSettings;
use engine::store::{CatalogUpdate, KeyRole};
use engine::{Config, Input, Listener, StoreRead};
use serde_json::json;

fn replica_config() -> Config {
    Config {
        replica: Some(ReplicaSettings { slot: 3, lanes: 8 }),
        ..config()
    }
}

fn register() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver", "params": {}})
}

fn claims(h: &Harness) -> usize {
    h.reads_seen
        .iter()
        .filter(|r| matches!(r, StoreRead::ClaimLease { .. }))
        .count()
}

#[test]
fn a_lone_server_never_claims_or_forwards() {
    let mut h = Harness::new(config());
    let (_, sid, skey) = h.open_session(&[], json!({}));
    let frames = h.rpc(&sid, &skey, &register());
    assert_eq!(frames.last().unwrap()["result"]["registered"], true);
    h.restart(config());
    let frames = h.rpc(&sid, &skey, &register());
    assert_eq!(frames.last().unwrap()["result"]["registered"], true);
    assert_eq!(claims(&h), 0);
    assert!(h.forwards.is_empty());
    let seqs: Vec<u64> = h.store.events.keys().copied().collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

#[test]
fn a_session_created_here_is_served_here_with_seqs_in_this_replicas_lane() {
    let mut h = Harness::new(replica_config());
    let (_, sid, skey) = h.open_session(&[], json!({}));
    let frames = h.rpc(&sid, &skey, &register());
    assert_eq!(frames.last().unwrap()["result"]["registered"], true);
    assert_eq!(claims(&h), 0, "the creator holds the lease");
    let seqs: Vec<u64> = h.store.events.keys().copied().collect();
    assert!(seqs.len() >= 2);
    assert!(seqs.iter().all(|s| s % 8 == 3), "{seqs:?}");
}

#[test]
fn a_request_for_a_session_leased_elsewhere_is_handed_to_the_owner() {
    let mut h = Harness::new(replica_config());
    let (_, sid, skey) = h.open_session(&[], json!({}));
    // As another replica sees it: a fresh process that holds no lease.
    h.restart(replica_config());
    h.leased_elsewhere
        .insert(sid.clone(), "10.0.0.2:8080".to_string());
    let conn = h.rpc_start(&sid, &skey, &register());
    assert_eq!(claims(&h), 1);
    assert!(h.take(conn).is_empty(), "nothing is answered here");
    let f = h.forwards.pop().expect("forwarded");
    assert_eq!((f.conn, f.to.as_str()), (conn, "10.0.0.2:8080"));
    let text = String::from_utf8(f.request.clone()).unwrap();
    let lower = text.to_ascii_lowercase();
    assert!(
        text.starts_with(&format!("POST /api/v1/sessions/{sid}/rpc HTTP/1.1\r\n")),
        "{text}"
    );
    assert!(lower.contains(&format!(
        "authorization: bearer {}",
        skey.to_ascii_lowercase()
    )));
    assert!(lower.contains("connection: close") && lower.contains("bae-forwarded: "));
    assert!(text.ends_with(&register().to_string()), "{text}");
    let unreachable = String::from_utf8(f.unreachable).unwrap();
    assert!(unreachable.starts_with("HTTP/1.1 503 "), "{unreachable}");
    // The engine forgot the connection: later input on it is ignored.
    h.send_bytes(conn, b"GET /healthz HTTP/1.1\r\n\r\n");
    assert!(h.take(conn).is_empty());
    // A request another replica already forwarded is never forwarded again.
    let again = h.connect(Listener::Client);
    let body = register().to_string();
    let raw = format!(
        "POST /api/v1/sessions/{sid}/rpc HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
         Authorization: Bearer {skey}\r\nContent-Type: application/json\r\n\
         bae-forwarded: 0.1.0\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    h.send_bytes(again, raw.as_bytes());
    let (status, answer) = parse_response(&h.take(again));
    assert_eq!(status, 503);
    let problem: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(problem["type"], "replica_unavailable");
    assert!(h.forwards.is_empty());
}

#[test]
fn taking_a_free_lease_rebuilds_the_session_from_the_log() {
    let mut h = Harness::new(replica_config());
    let (_, sid, skey) = h.open_session(&[], json!({}));
    h.rpc(&sid, &skey, &register());
    h.replies.push_back(anthropic_text("first"));
    let send = |text: &str| {
        json!({"jsonrpc": "2.0", "id": 2, "method": "session.sendMessage",
               "params": {"message": {"role": "user", "content": text}}})
    };
    let frames = h.rpc(&sid, &skey, &send("one"));
    assert!(frames.last().unwrap().get("result").is_some(), "{frames:?}");
    let last_seq = *h.store.events.keys().next_back().unwrap();
    // Another replica (lane 5) takes the lease: the stored session, not a
    // fresh one, and seqs after the session's log.
    let other = Config {
        replica: Some(ReplicaSettings { slot: 5, lanes: 8 }),
        ..config()
    };
    h.restart(other);
    let frames = h.rpc(&sid, &skey, &register());
    assert_eq!(frames.last().unwrap()["result"]["registered"], true);
    assert_eq!(claims(&h), 1);
    h.replies.push_back(anthropic_text("second"));
    let frames = h.rpc(&sid, &skey, &send("two"));
    assert!(frames.last().unwrap().get("result").is_some(), "{frames:?}");
    let new: Vec<u64> = h
        .store
        .events
        .range(last_seq + 1..)
        .map(|(s, _)| *s)
        .collect();
    assert!(!new.is_empty() && new.iter().all(|s| s % 8 == 5), "{new:?}");
    // The provider saw the history rebuilt from the log.
    let reqs: Vec<_> = h
        .store
        .events
        .values()
        .filter(|e| e.event_type == "provider.request")
        .collect();
    let body: serde_json::Value = serde_json::from_str(&reqs.last().unwrap().payload).unwrap();
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    assert_eq!(msgs[0]["content"], "one");
}

#[test]
fn a_revocation_notice_closes_the_orphaned_session_of_a_free_lease() {
    let mut h = Harness::new(replica_config());
    let (_, sid, _) = h.open_session(&[], json!({}));
    h.restart(replica_config());
    // Another replica revoked the client key and its session keys.
    let at = "2026-12-01T00:00:00.000Z".to_string();
    let mut revoked = Vec::new();
    for k in h.store.keys.iter_mut() {
        if k.role != KeyRole::Admin {
            k.deleted_at = Some(at.clone());
            revoked.push(k.clone());
        }
    }
    let update = CatalogUpdate {
        revoked,
        ..CatalogUpdate::default()
    };
    h.input(Input::Catalog(Box::new(update)));
    assert_eq!(claims(&h), 1, "the session's free lease is taken");
    let session = h.store.sessions.iter().find(|s| s.id == sid).unwrap();
    assert_eq!(session.state, engine::store::SessionState::Closed);
    let close = h
        .store
        .events
        .values()
        .find(|e| e.session_id == sid && e.event_type == "session.close")
        .expect("closed");
    assert!(
        close.payload.contains("client_key_revoked"),
        "{}",
        close.payload
    );
}

#[test]
fn catalogue_notices_add_and_remove_rows_without_a_restart() {
    let mut a = Harness::new(replica_config());
    let (key, _, _) = a.open_session(&[], json!({}));
    // Replica B (lane 5) started before the key existed.
    let mut b = Harness::new(Config {
        replica: Some(ReplicaSettings { slot: 5, lanes: 8 }),
        ..config()
    });
    b.store = a.store.clone();
    let (s, _) = b.client("POST", "/api/v1/sessions", &key, Some(&json!({})));
    assert_eq!(s, 401, "unknown before the notice");
    let update = CatalogUpdate {
        profiles: a.store.profiles.clone(),
        keys: a.store.keys.clone(),
        ..CatalogUpdate::default()
    };
    b.input(Input::Catalog(Box::new(update)));
    let (s, _) = b.client("POST", "/api/v1/sessions", &key, Some(&json!({})));
    assert_eq!(s, 201);
    let client = (b.store.keys.iter())
        .find(|k| k.role == KeyRole::Client)
        .cloned()
        .unwrap();
    let update = CatalogUpdate {
        revoked: vec![client],
        ..CatalogUpdate::default()
    };
    b.input(Input::Catalog(Box::new(update)));
    let (s, _) = b.client("POST", "/api/v1/sessions", &key, Some(&json!({})));
    assert_eq!(s, 401, "revoked by the notice");
}

/// With durable drivers (`BAE_DURABLE_DRIVERS`), the registrations follow a
/// session to its new owner: the claim reads them from the log, as a
/// restart does, and the driver keeps driving without registering again.
/// Without, the new owner knows none (the driver registers again, as
/// after a restart).
#[test]
fn durable_registrations_follow_a_session_to_its_new_owner() {
    for durable in [true, false] {
        let mut a = Harness::new(Config {
            durable_drivers: durable,
            ..replica_config()
        });
        // The new owner (lane 5) started before the registration.
        let mut b = Harness::new(Config {
            replica: Some(ReplicaSettings { slot: 5, lanes: 8 }),
            durable_drivers: durable,
            ..config()
        });
        let (_, sid, skey) = a.open_session(&[], json!({}));
        let frames = a.rpc(&sid, &skey, &register());
        assert_eq!(frames.last().unwrap()["result"]["registered"], true);
        b.store = a.store.clone();
        // The profile and keys, as the catalogue notices bring them.
        let update = CatalogUpdate {
            profiles: a.store.profiles.clone(),
            keys: a.store.keys.clone(),
            ..CatalogUpdate::default()
        };
        b.input(Input::Catalog(Box::new(update)));
        let (status, parts) = b.client(
            "GET",
            &format!("/api/v1/sessions/{sid}/participants"),
            &skey,
            None,
        );
        assert_eq!(status, 200, "{parts}");
        assert_eq!(claims(&b), 1);
        let drivers = parts["drivers"].as_array().unwrap().len();
        assert_eq!(drivers, usize::from(durable), "durable {durable}: {parts}");
        b.replies
            .push_back(anthropic_text("driven on the new owner"));
        let send = json!({"jsonrpc": "2.0", "id": 2, "method": "session.sendMessage",
                          "params": {"message": {"role": "user", "content": "hi"}}});
        let frames = b.rpc(&sid, &skey, &send);
        let last = frames.last().unwrap();
        if durable {
            assert_eq!(
                last["result"]["message"]["content"][0]["text"], "driven on the new owner",
                "{frames:?}"
            );
        } else {
            assert_eq!(last["error"]["code"], -32001, "{frames:?}");
        }
    }
}
