//! Client-port REST session endpoints over the real binary: what needs the
//! binary (generated ids against the wall clock and `BAE_ID_ORDER`, the
//! audit row in SQLite, live subscribe streams closed on the socket). The
//! check orders and bodies of create, join, participants, events and close
//! (README checklist C-015–C-048; spec 01 §4) are tested in-process in
//! `engine/tests/rest_session_flows.rs` and `rest_session_route_flows.rs`.

mod rest_support;

use std::time::Duration;

use rest_support::*;
use serde_json::{json, Value};
use testkit::fixtures;
use testkit::Server;

fn create(s: &Server, ck: &str, body: Value) -> testkit::Response {
    s.client().bearer(ck).post_json("/api/v1/sessions", &body)
}

fn delete(s: &Server, sid: &str, skey: &str) -> testkit::Response {
    s.client()
        .bearer(skey)
        .delete(&format!("/api/v1/sessions/{sid}"))
}

// ---------------------------------------------------------------- create

#[test]
fn c015_create_returns_201_with_id_and_key_formats() {
    let s = start();
    let p = profile(&s, &[]);
    let (_, ck) = key(&s, &p);
    let r = create(&s, &ck, json!({"client_version": "1.2.3"}));
    r.assert_status(201);
    assert!(r
        .header("content-type")
        .unwrap_or("")
        .starts_with("application/json"));
    let v = r.json();
    let sid = v["session_id"].as_str().unwrap();
    let skey = v["session_key"].as_str().unwrap();
    assert!(is_prefixed_hex(sid, "ses_", 32), "{sid}");
    assert!(is_prefixed_hex(skey, "bae_ses_", 48), "{skey}");
    let row = admin_session(&s, sid);
    assert_eq!(row["state"], "open");
    assert_eq!(row["client_version"], "1.2.3");
    assert_eq!(row["profile_id"], p.as_str());
    assert!(row["closed_at"].is_null());
    // Two sessions never share ids or keys.
    let v2 = create(&s, &ck, json!({})).json();
    assert_ne!(v2["session_id"], v["session_id"]);
    assert_ne!(v2["session_key"], v["session_key"]);
}

/// Unix ms held by the first 12 hex digits of a generated id.
fn id_millis(id: &str) -> u64 {
    let hex = id.split_once('_').map_or("", |(_, h)| h);
    u64::from_str_radix(&hex[..12], 16).unwrap()
}

fn unix_ms_now() -> u64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    d.unwrap().as_millis() as u64
}

/// C-015 with `BAE_ID_ORDER` unset: session, session-key row and event ids
/// keep the format and start with their creation time (storage.md,
/// "Generated ids"); `BAE_ID_ORDER=random` makes them wholly random.
#[test]
fn c015_generated_ids_are_time_ordered_unless_random_is_configured() {
    for random in [false, true] {
        let mut o = opts().config(provider_config(DEAD_URL));
        if random {
            o = o.env("BAE_ID_ORDER", "random");
        }
        let s = Server::start(o);
        let p = profile(&s, &[]);
        let (_, ck) = key(&s, &p);
        let before = unix_ms_now();
        let mut ids = Vec::new();
        for _ in 0..8 {
            let v = create(&s, &ck, json!({})).json();
            let sid = v["session_id"].as_str().unwrap().to_string();
            let skey = v["session_key"].as_str().unwrap();
            for e in events(&s, &sid, skey) {
                let eid = e["id"].as_str().unwrap().to_string();
                assert!(is_prefixed_hex(&eid, "evt_", 32), "{eid}");
                ids.push(eid);
            }
            assert!(is_prefixed_hex(&sid, "ses_", 32), "{sid}");
            ids.push(sid);
        }
        let after = unix_ms_now();
        let timed = ids
            .iter()
            .filter(|id| (before..=after).contains(&id_millis(id)))
            .count();
        if random {
            assert_eq!(timed, 0, "random ids carry no clock: {ids:?}");
        } else {
            assert_eq!(timed, ids.len(), "{before}..={after}: {ids:?}");
            let sids: Vec<&String> = ids.iter().filter(|i| i.starts_with("ses_")).collect();
            let ms: Vec<u64> = sids.iter().map(|i| id_millis(i)).collect();
            assert!(ms.windows(2).all(|w| w[0] <= w[1]), "{sids:?}");
        }
        let distinct: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
    }
}

#[test]
fn c026_unresolvable_primary_is_422_with_an_audit_session() {
    let s = start();
    let p = fixtures::create_profile(
        &s,
        &fixtures::unique_name("np"),
        "no-such-provider",
        &[],
        &["t"],
    );
    let (kid, ck) = key(&s, &p);
    let before: Vec<String> = admin_sessions(&s)
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    let r = create(
        &s,
        &ck,
        json!({"tools": [tool("t")], "client_version": "9"}),
    );
    assert_problem(&r, 422, "primary_provider_unavailable");
    let after = admin_sessions(&s);
    let new: Vec<&Value> = after
        .iter()
        .filter(|r| !before.contains(&r["id"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(new.len(), 1, "exactly one audit row: {new:?}");
    let audit = new[0];
    assert_eq!(audit["state"], "error");
    assert_eq!(audit["profile_id"], p.as_str());
    assert!(audit["closed_at"].is_null(), "{audit}");
    assert!(is_prefixed_hex(audit["id"].as_str().unwrap(), "ses_", 32));
    let evts = admin_events(&s, audit["id"].as_str().unwrap());
    assert_eq!(evts.len(), 1, "{evts:?}");
    assert_eq!(evts[0]["event_type"], "session.error");
    assert_eq!(evts[0]["client_key_id"], kid.as_str());
    assert_eq!(
        evts[0]["payload"],
        json!({"reason": "primary_provider_unavailable", "profile_id": p, "primary_provider": "no-such-provider"})
    );
    // Every attempt is audited (never deduplicated) and logged.
    let r = create(&s, &ck, json!({}));
    assert_problem(&r, 422, "primary_provider_unavailable");
    assert_eq!(admin_sessions(&s).len(), after.len() + 1);
    // No session key was minted for audit rows.
    let conn = db(&s);
    for row in admin_sessions(&s).iter().filter(|r| r["state"] == "error") {
        let n = query(
            &conn,
            &format!(
                "SELECT COUNT(*) FROM keys WHERE role = 'session' AND name = '{}'",
                row["id"].as_str().unwrap()
            ),
        );
        assert_eq!(n[0][0].as_deref(), Some("0"));
    }
}

#[test]
fn c047_delete_ends_live_subscribe_streams() {
    let s = start();
    let f = fix(&s, &[]);
    let req = testkit::rpc_request("session.subscribe", json!({}), 1);
    let mut a = s.client().rpc_stream(&f.sid, &f.skey, &req);
    let mut b = s.client().rpc_stream(&f.sid, &f.skey, &req);
    assert_eq!(a.status(), 200);
    assert_eq!(b.status(), 200);
    assert!(
        !a.wait_closed(Duration::from_millis(200)),
        "subscribe ended early"
    );
    delete(&s, &f.sid, &f.skey).assert_status(200);
    assert!(a.wait_closed(Duration::from_secs(5)), "stream A still open");
    assert!(b.wait_closed(Duration::from_secs(5)), "stream B still open");
    // No terminal frame on a subscribe stream.
    while let Some(frame) = a.next_frame(Duration::from_millis(10)) {
        assert!(
            frame.get("id").is_none(),
            "terminal frame on subscribe: {frame}"
        );
    }
}
