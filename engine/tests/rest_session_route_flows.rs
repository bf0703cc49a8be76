//! Client-port session routes other than create and join in-process:
//! participants, events paging, close (checklist C-040–C-048; spec 01 §4).
//! Moved from `io-smol/tests/rest_sessions.rs`.

mod common;

use common::*;
use engine::Listener;
use serde_json::{json, Value};

fn join(h: &mut Harness, sid: &str, ck: &str, body: Value) -> Reply {
    let path = format!("/api/v1/sessions/{sid}/join");
    h.reply(Listener::Client, "POST", &path, Some(ck), Some(&body))
}

fn delete(h: &mut Harness, sid: &str, skey: &str) -> Reply {
    let path = format!("/api/v1/sessions/{sid}");
    h.reply(Listener::Client, "DELETE", &path, Some(skey), None)
}

fn session_of(r: &Reply) -> (String, String) {
    assert_eq!(r.status, 201, "{}", r.text);
    (
        r.json["session_id"].as_str().unwrap().into(),
        r.json["session_key"].as_str().unwrap().into(),
    )
}

// ------------------------------------------------- other session routes

#[test]
fn c040_participants_empty_then_sorted() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let path = format!("/api/v1/sessions/{}/participants", f.sid);
    assert_eq!(
        h.client("GET", &path, &f.skey, None),
        (200, json!({"drivers": []}))
    );
    let (kid2, ck2) = h.key(&f.profile);
    let (_, k2) = session_of(&join(&mut h, &f.sid, &ck2, json!({})));
    h.register_driver(&f.sid, &k2);
    h.register_driver(&f.sid, &f.skey);
    h.register_driver(&f.sid, &f.skey);
    let mut expected = vec![f.key_id.clone(), kid2];
    expected.sort();
    assert_eq!(
        h.client("GET", &path, &f.skey, None).1,
        json!({ "drivers": expected })
    );
}

#[test]
fn c041_events_default_50_clamp_200_and_null_cursor_on_last_page() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    // 1 open + 230 joins = 231 events.
    for _ in 0..230 {
        assert_eq!(join(&mut h, &f.sid, &f.client_key, json!({})).status, 201);
    }
    let base = format!("/api/v1/sessions/{}/events", f.sid);
    let get = |h: &mut Harness, q: &str| h.client("GET", &format!("{base}{q}"), &f.skey, None).1;
    let v = get(&mut h, "");
    assert_eq!(v["items"].as_array().unwrap().len(), 50);
    assert!(v["next_cursor"].is_string());
    let v = get(&mut h, "?limit=1000");
    assert_eq!(v["items"].as_array().unwrap().len(), 200);
    let cursor = v["next_cursor"].as_str().expect("more pages").to_string();
    let v2 = get(&mut h, &format!("?limit=1000&cursor={cursor}"));
    assert_eq!(v2["items"].as_array().unwrap().len(), 31);
    assert!(v2["next_cursor"].is_null());
    let v = get(&mut h, "?limit=99999999999999999999999");
    assert_eq!(v["items"].as_array().unwrap().len(), 200);
    let v = get(&mut h, "?limit=231");
    assert_eq!(v["items"].as_array().unwrap().len(), 200);
    // Small pages yield every event once, in order.
    let mut ids = Vec::new();
    let mut cursor = String::new();
    loop {
        let v = get(&mut h, &format!("?limit=7&cursor={cursor}"));
        for e in v["items"].as_array().unwrap() {
            ids.push(e["id"].as_str().unwrap().to_string());
        }
        match v["next_cursor"].as_str() {
            Some(n) => cursor = n.to_string(),
            None => break,
        }
    }
    assert_eq!(ids.len(), 231);
    let all: Vec<String> = h
        .events(&f.sid, &f.skey)
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, all);
    let mut dedup = ids.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), 231);
}

#[test]
fn c042_bad_limit_or_cursor_is_400() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let base = format!("/api/v1/sessions/{}/events", f.sid);
    for q in [
        "limit=0",
        "limit=-1",
        "limit=abc",
        "limit=1.5",
        "cursor=abc",
        "cursor=-5",
        "cursor=1e3",
        "cursor=%20",
    ] {
        let r = h.reply(
            Listener::Client,
            "GET",
            &format!("{base}?{q}"),
            Some(&f.skey),
            None,
        );
        assert_problem(&r, 400, "bad_request");
    }
    let admin = format!("/admin/v1/sessions/{}/events?limit=0", f.sid);
    let r = h.reply(Listener::Admin, "GET", &admin, Some(ADMIN_KEY), None);
    assert_problem(&r, 400, "bad_request");
    // An empty cursor means "from the start".
    let (_, v) = h.client("GET", &format!("{base}?cursor="), &f.skey, None);
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
}

#[test]
fn c043_events_readable_on_closed_and_error_sessions() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    assert_eq!(delete(&mut h, &f.sid, &f.skey).status, 200);
    assert_eq!(
        types_of(&h.events(&f.sid, &f.skey)),
        ["session.open", "session.close"]
    );
    let e = h.fix(&[]);
    make_error_session(&mut h, &e);
    let t = types_of(&h.events(&e.sid, &e.skey));
    assert_eq!(t.last().map(String::as_str), Some("session.error"), "{t:?}");
}

#[test]
fn c044_delete_closes_and_logs_client_close() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    // DELETE by a joiner: close is attributed to the creator (spec 01 §10.8).
    let (_, ck2) = h.key(&f.profile);
    let (_, k2) = session_of(&join(&mut h, &f.sid, &ck2, json!({})));
    let r = delete(&mut h, &f.sid, &k2);
    assert_eq!(r.status, 200);
    assert_eq!(r.json, json!({"session_id": f.sid, "state": "closed"}));
    let evts = h.events(&f.sid, &f.skey);
    let last = evts.last().unwrap();
    assert_eq!(last["event_type"], "session.close");
    assert_eq!(last["payload"], json!({"reason": "client_close"}));
    assert_eq!(last["client_key_id"], f.key_id.as_str());
    let row = h.admin_session(&f.sid);
    assert_eq!(row["state"], "closed");
    assert_eq!(row["closed_at"].as_str().map(str::len), Some(24), "{row}");
}

#[test]
fn c045_second_delete_is_409_without_event() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    assert_eq!(delete(&mut h, &f.sid, &f.skey).status, 200);
    let n = h.events(&f.sid, &f.skey).len();
    let r = delete(&mut h, &f.sid, &f.skey);
    assert_eq!(
        assert_problem(&r, 409, "session_closed"),
        "session is already closed"
    );
    assert_eq!(h.events(&f.sid, &f.skey).len(), n);
}

#[test]
fn c046_delete_on_error_session_is_409_without_close() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    make_error_session(&mut h, &f);
    let n = h.events(&f.sid, &f.skey).len();
    let r = delete(&mut h, &f.sid, &f.skey);
    assert_eq!(
        assert_problem(&r, 409, "session_closed"),
        "session is already error"
    );
    let evts = h.events(&f.sid, &f.skey);
    assert_eq!(evts.len(), n);
    assert!(!types_of(&evts).contains(&"session.close".to_string()));
    assert_eq!(h.admin_session(&f.sid)["state"], "error");
}

#[test]
fn c047_delete_ends_live_subscribe_streams_without_terminal_frame() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let sub = call(1, "session.subscribe", json!({}));
    let a = h.rpc_start(&f.sid, &f.skey, &sub);
    let b = h.rpc_start(&f.sid, &f.skey, &sub);
    h.advance(200);
    assert!(
        !h.closed.contains(&a) && !h.closed.contains(&b),
        "ended early"
    );
    assert_eq!(delete(&mut h, &f.sid, &f.skey).status, 200);
    assert!(h.closed.contains(&a), "stream A still open");
    assert!(h.closed.contains(&b), "stream B still open");
    for frame in h.frames(a) {
        assert!(
            frame.get("id").is_none(),
            "terminal frame on subscribe: {frame}"
        );
    }
}

#[test]
fn c048_after_delete_registered_driver_gets_32001() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    h.register_driver(&f.sid, &f.skey);
    assert_eq!(delete(&mut h, &f.sid, &f.skey).status, 200);
    let msg = json!({"message": {"role": "user", "content": "hi"}});
    let frames = h.rpc(&f.sid, &f.skey, &call(1, "session.sendMessage", msg));
    assert_eq!(
        frames.last().unwrap()["error"]["code"],
        -32001,
        "{frames:?}"
    );
    let path = format!("/api/v1/sessions/{}/participants", f.sid);
    assert_eq!(
        h.client("GET", &path, &f.skey, None).1,
        json!({"drivers": []})
    );
}
