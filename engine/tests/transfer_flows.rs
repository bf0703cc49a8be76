//! Forks, rewinds, exports and imports through the whole engine, in
//! process (docs/extensions.md, "Forks, exports and imports"): who may
//! fork and where, what a fork's next provider request is, the family
//! tree, an export read back by an import, and imports refused whole.

mod common;

use common::*;
use engine::{Input, Listener};
use serde_json::{json, Value};

fn send(h: &mut Harness, sid: &str, key: &str, content: Value) -> Vec<Value> {
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "session.sendMessage", "params": {"message": {"role": "user", "content": content}}});
    h.rpc(sid, key, &call)
}

/// A session with one tool, a driver and one answered text turn.
fn session_with_a_turn(h: &mut Harness) -> (String, String, String) {
    let tools = json!({"tools": [{"name": "get_time", "input_schema": {"type": "object"}}]});
    let (key, sid, skey) = h.open_session(&["get_time"], tools);
    h.register_driver(&sid, &skey);
    h.replies.push_back(anthropic_text("hello"));
    send(h, &sid, &skey, json!("hi"));
    (key, sid, skey)
}

/// The body of the provider call the next text turn on `sid` makes.
fn next_request(h: &mut Harness, sid: &str, skey: &str) -> Vec<u8> {
    h.replies.push_back(anthropic_text("next answer"));
    let before = h.call_bodies.len();
    let frames = send(h, sid, skey, json!("and now?"));
    assert!(frames.last().unwrap()["result"].is_object(), "{frames:?}");
    assert_eq!(h.call_bodies.len(), before + 1);
    h.call_bodies.last().unwrap().clone()
}

fn events(h: &mut Harness, sid: &str) -> Vec<Value> {
    let (s, page) = h.admin(
        "GET",
        &format!("/admin/v1/sessions/{sid}/events?limit=200"),
        None,
    );
    assert_eq!(s, 200, "{page}");
    page["items"].as_array().unwrap().clone()
}

/// The parts of an event a copy keeps (not its id or session).
fn kept(e: &Value) -> Value {
    json!([
        e["event_type"],
        e["payload"],
        e["client_key_id"],
        e["created_at"]
    ])
}

#[test]
fn a_creators_fork_sends_the_parents_history_and_then_diverges() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = session_with_a_turn(&mut h);
    let path = format!("/api/v1/sessions/{sid}/fork");
    let (s, fork) = h.client("POST", &path, &skey, Some(&json!({})));
    assert_eq!(s, 201, "{fork}");
    let (fid, fkey) = (
        fork["session_id"].as_str().unwrap().to_string(),
        fork["session_key"].as_str().unwrap().to_string(),
    );
    assert_ne!(fid, sid);
    assert_eq!(fork["parent"]["session_id"], sid.as_str());
    assert_eq!(fork["profile"]["provider"]["provider"], "anthropic");
    let parent_events = events(&mut h, &sid);
    assert_eq!(
        fork["parent"]["event_id"],
        parent_events.last().unwrap()["id"]
    );
    // Every event copied, in order; only catalogue types.
    let copied = events(&mut h, &fid);
    assert_eq!(
        copied.iter().map(kept).collect::<Vec<_>>(),
        parent_events.iter().map(kept).collect::<Vec<_>>()
    );
    // No drivers: the fork's creator registers like on a new session.
    let (_, p) = h.client(
        "GET",
        &format!("/api/v1/sessions/{fid}/participants"),
        &fkey,
        None,
    );
    assert_eq!(p["drivers"], json!([]));
    h.register_driver(&fid, &fkey);
    let from_fork = next_request(&mut h, &fid, &fkey);
    let from_parent = next_request(&mut h, &sid, &skey);
    assert_eq!(
        String::from_utf8_lossy(&from_fork),
        String::from_utf8_lossy(&from_parent)
    );
    let sent: Value = serde_json::from_slice(&from_fork).unwrap();
    let texts = sent["messages"].to_string();
    assert!(texts.contains("\"hi\"") && texts.contains("hello") && texts.contains("and now?"));
    assert_eq!(
        sent["tools"][0]["name"], "get_time",
        "the creator's tools came along"
    );
    // They diverge: each log grows on its own.
    let (a, b) = (events(&mut h, &sid).len(), events(&mut h, &fid).len());
    h.replies.push_back(anthropic_text("only the fork"));
    send(&mut h, &fid, &fkey, json!("fork only"));
    assert_eq!(events(&mut h, &sid).len(), a);
    assert_eq!(events(&mut h, &fid).len(), b + 4);
}

#[test]
fn only_the_creator_and_the_admin_may_fork() {
    let mut h = Harness::new(config());
    let (key, sid, _skey) = session_with_a_turn(&mut h);
    let _ = key;
    let other = {
        let (_, keys) = h.admin("GET", "/admin/v1/keys", None);
        let profile_id = keys["items"][0]["profile_id"].clone();
        let (_, k) = h.admin(
            "POST",
            "/admin/v1/keys",
            Some(&json!({"name": "j", "profile_id": profile_id})),
        );
        k
    };
    let (s, j) = h.client(
        "POST",
        &format!("/api/v1/sessions/{sid}/join"),
        other["key"].as_str().unwrap(),
        Some(&json!({})),
    );
    assert_eq!(s, 201);
    let joiner = j["session_key"].as_str().unwrap();
    let (s, p) = h.client(
        "POST",
        &format!("/api/v1/sessions/{sid}/fork"),
        joiner,
        None,
    );
    assert_eq!((s, p["type"].as_str()), (403, Some("fork_not_allowed")));
    // The admin API forks for any client key of the profile.
    let body = json!({"client_key_id": other["id"]});
    let (s, f) = h.admin(
        "POST",
        &format!("/admin/v1/sessions/{sid}/fork"),
        Some(&body),
    );
    assert_eq!(s, 201, "{f}");
    assert_eq!(f["client_key_id"], other["id"]);
    assert_eq!(f["events"], events(&mut h, &sid).len());
    let (s, p) = h.admin(
        "POST",
        "/admin/v1/sessions/ses_00000000000000000000000000000000/fork",
        None,
    );
    assert_eq!((s, p["type"].as_str()), (404, Some("not_found")));
}

#[test]
fn no_fork_inside_a_paused_turn_but_after_the_turn_before_it() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = session_with_a_turn(&mut h);
    h.replies.push_back(anthropic_tool_use(json!([
        {"type": "tool_use", "id": "tu_1", "name": "get_time", "input": {}}
    ])));
    send(&mut h, &sid, &skey, json!("time?"));
    let before = h.store.events.len();
    let (s, p) = h.client("POST", &format!("/api/v1/sessions/{sid}/fork"), &skey, None);
    assert_eq!(
        (s, p["type"].as_str()),
        (409, Some("fork_point_incomplete")),
        "{p}"
    );
    assert!(p["detail"].as_str().unwrap().contains("paused"));
    assert_eq!(h.store.events.len(), before, "nothing written");
    let (s, f) = h.client(
        "POST",
        &format!("/api/v1/sessions/{sid}/rewind"),
        &skey,
        Some(&json!({"after_turn": 1})),
    );
    assert_eq!(s, 201, "{f}");
    let fid = f["session_id"].as_str().unwrap();
    let last = events(&mut h, fid).last().unwrap().clone();
    assert_eq!(last["event_type"], "server.message.send");
    assert_eq!(last["payload"]["content"][0]["text"], "hello");
}

#[test]
fn rewind_before_a_message_hands_it_back_to_edit() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = session_with_a_turn(&mut h);
    h.replies.push_back(anthropic_text("second"));
    send(&mut h, &sid, &skey, json!("second question"));
    let second = events(&mut h, &sid)
        .into_iter()
        .filter(|e| e["event_type"] == "client.message.send")
        .nth(1)
        .unwrap();
    let body = json!({"before_message": second["id"]});
    let (s, f) = h.client(
        "POST",
        &format!("/api/v1/sessions/{sid}/rewind"),
        &skey,
        Some(&body),
    );
    assert_eq!(s, 201, "{f}");
    assert_eq!(f["message"]["content"], "second question");
    let fid = f["session_id"].as_str().unwrap().to_string();
    let fkey = f["session_key"].as_str().unwrap().to_string();
    h.register_driver(&fid, &fkey);
    h.replies.push_back(anthropic_text("edited answer"));
    let frames = send(&mut h, &fid, &fkey, json!("second question, edited"));
    let req = &frames.last().unwrap()["result"]["events"][1]["payload"]["messages"];
    assert_eq!(req.as_array().unwrap().len(), 3, "{req}");
    assert_eq!(req[2]["content"], "second question, edited");
}

#[test]
fn the_family_tree_lists_parent_and_children() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = session_with_a_turn(&mut h);
    let fork = |h: &mut Harness, id: &str, key: &str| {
        let (s, f) = h.client("POST", &format!("/api/v1/sessions/{id}/fork"), key, None);
        assert_eq!(s, 201, "{f}");
        (
            f["session_id"].as_str().unwrap().to_string(),
            f["session_key"].as_str().unwrap().to_string(),
        )
    };
    let (a, akey) = fork(&mut h, &sid, &skey);
    let (b, _) = fork(&mut h, &sid, &skey);
    let (c, _) = fork(&mut h, &a, &akey);
    let (s, tree) = h.admin("GET", &format!("/admin/v1/sessions/{c}/lineage"), None);
    assert_eq!(s, 200, "{tree}");
    assert_eq!(tree["ancestors"], json!([a, sid]));
    assert_eq!(tree["origin"]["kind"], "fork");
    let (_, tree) = h.admin("GET", &format!("/admin/v1/sessions/{sid}/lineage"), None);
    assert_eq!(tree["origin"], Value::Null);
    let children: Vec<&str> = (tree["children"].as_array().unwrap().iter())
        .map(|c| c["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(children, [a.as_str(), b.as_str()]);
    // Plain readers see none of it: the events page has catalogue types.
    for e in events(&mut h, &c) {
        let t = e["event_type"].as_str().unwrap();
        assert!(proto::wire::EventType::parse(t).is_some(), "{t}");
    }
}

/// `GET …/export` with the connection flushed as it goes: the body.
fn export(h: &mut Harness, sid: &str) -> String {
    let conn = h.connect(Listener::Admin);
    let path = format!("/admin/v1/sessions/{sid}/export");
    h.send_bytes(conn, &build_request("GET", &path, Some(ADMIN_KEY), None));
    for _ in 0..10_000 {
        let raw = h.sent.get(&conn).cloned().unwrap_or_default();
        if raw.ends_with(b"0\r\n\r\n") {
            break;
        }
        h.input(Input::Flushed {
            conn,
            bytes: usize::MAX / 2,
        });
    }
    let (status, body) = parse_response(&h.take(conn));
    assert_eq!(status, 200);
    String::from_utf8(body).unwrap()
}

fn import(h: &mut Harness, query: &str, doc: &[u8]) -> (u16, Value) {
    let conn = h.connect(Listener::Admin);
    let mut req = format!(
        "POST /admin/v1/sessions/import?{query} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
         Authorization: Bearer {ADMIN_KEY}\r\nContent-Length: {}\r\n\r\n",
        doc.len()
    )
    .into_bytes();
    req.extend_from_slice(doc);
    h.send_bytes(conn, &req);
    let (status, body) = parse_response(&h.take(conn));
    (status, serde_json::from_slice(&body).unwrap())
}

#[test]
fn an_exported_session_imports_as_the_same_history() {
    let mut h = Harness::new(config());
    let (_key, sid, skey) = session_with_a_turn(&mut h);
    let doc = export(&mut h, &sid);
    let lines: Vec<Value> = doc
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["kind"], "header");
    assert_eq!(lines[0]["session"]["id"], sid.as_str());
    assert_eq!(lines.last().unwrap()["kind"], "end");
    assert!(!doc.contains("bae_"), "no secret of any kind");
    let (_, keys) = h.admin("GET", "/admin/v1/keys", None);
    let key_id = keys["items"][0]["id"].as_str().unwrap().to_string();
    let (s, imported) = import(&mut h, &format!("client_key_id={key_id}"), doc.as_bytes());
    assert_eq!(s, 201, "{imported}");
    assert_eq!(imported["source_session_id"], sid.as_str());
    let (iid, ikey) = (
        imported["session_id"].as_str().unwrap().to_string(),
        imported["session_key"].as_str().unwrap().to_string(),
    );
    let (a, b) = (events(&mut h, &sid), events(&mut h, &iid));
    assert_eq!(
        a.iter().map(kept).collect::<Vec<_>>(),
        b.iter().map(kept).collect::<Vec<_>>()
    );
    // Twice: two sessions. Keeping the id: refused, it is taken here.
    let (s, again) = import(&mut h, &format!("client_key_id={key_id}"), doc.as_bytes());
    assert_eq!(s, 201);
    assert_ne!(again["session_id"], imported["session_id"]);
    let (s, p) = import(
        &mut h,
        &format!("client_key_id={key_id}&keep_id=true"),
        doc.as_bytes(),
    );
    assert_eq!((s, p["type"].as_str()), (409, Some("session_exists")));
    h.register_driver(&iid, &ikey);
    let from_import = next_request(&mut h, &iid, &ikey);
    let from_source = next_request(&mut h, &sid, &skey);
    assert_eq!(from_import, from_source);
}

#[test]
fn a_refused_import_leaves_nothing_behind() {
    let mut h = Harness::new(config());
    let (_key, sid, _skey) = session_with_a_turn(&mut h);
    let doc = export(&mut h, &sid);
    let (_, keys) = h.admin("GET", "/admin/v1/keys", None);
    let key_id = keys["items"][0]["id"].as_str().unwrap().to_string();
    let q = format!("client_key_id={key_id}");
    let snapshot = |h: &Harness| {
        (
            h.store.sessions.len(),
            h.store.events.len(),
            h.store.keys.len(),
            h.store.lineage.len(),
        )
    };
    let before = snapshot(&h);
    let cut = &doc[..doc.len() - 20];
    let bad_version = doc.replacen("\"format_version\":1", "\"format_version\":9", 1);
    let unknown = doc.replacen("provider.response", "provider.reply", 1);
    for (doc, kind) in [
        (cut.to_string(), "invalid_document"),
        (bad_version, "unsupported_format_version"),
        (unknown, "invalid_document"),
    ] {
        let (s, p) = import(&mut h, &q, doc.as_bytes());
        assert_eq!((s, p["type"].as_str()), (422, Some(kind)), "{p}");
        assert_eq!(p["title"], "Unprocessable Entity");
    }
    let (s, p) = import(&mut h, "", doc.as_bytes());
    assert_eq!((s, p["type"].as_str()), (400, Some("bad_request")));
    let (s, _) = import(
        &mut h,
        "client_key_id=key_00000000000000000000000000000000",
        doc.as_bytes(),
    );
    assert_eq!(s, 404);
    assert_eq!(snapshot(&h), before);
}

#[test]
fn an_import_over_the_body_limit_is_413() {
    let mut cfg = config();
    cfg.max_import_bytes = 100;
    cfg.max_body_bytes = 10;
    let mut h = Harness::new(cfg);
    let (s, _) = import(&mut h, "client_key_id=key_x", &[b'x'; 50]);
    assert_ne!(s, 413, "under the import limit");
    let conn = h.connect(Listener::Admin);
    h.send_bytes(
        conn,
        b"POST /admin/v1/sessions/import HTTP/1.1\r\nHost: t\r\nContent-Length: 101\r\n\r\n",
    );
    let (s, _) = parse_response(&h.take(conn));
    assert_eq!(s, 413);
}

/// Issue 38, C-040/C-069: an imported session starts with no drivers,
/// although its log holds the source's registrations and the key that gets
/// it is the very key that registered there: not while it stays in memory,
/// not once evicted and read back, not after a restart that rebuilds
/// durable registrations from the log.
#[test]
fn an_import_brings_no_drivers_back() {
    let mut h = Harness::as_configured(engine::Config {
        resident_sessions: Some(0),
        ..config()
    });
    let (_key, sid, _skey) = session_with_a_turn(&mut h);
    let doc = export(&mut h, &sid);
    let (_, keys) = h.admin("GET", "/admin/v1/keys", None);
    let key_id = keys["items"][0]["id"].as_str().unwrap().to_string();
    let registered_in_source = (events(&mut h, &sid).iter())
        .filter(|e| e["event_type"] == "session.driver.register")
        .map(|e| e["client_key_id"].clone())
        .collect::<Vec<_>>();
    assert_eq!(registered_in_source, [json!(key_id)]);
    let (s, imported) = import(&mut h, &format!("client_key_id={key_id}"), doc.as_bytes());
    assert_eq!(s, 201, "{imported}");
    let iid = imported["session_id"].as_str().unwrap().to_string();
    let ikey = imported["session_key"].as_str().unwrap().to_string();
    let drivers = |h: &mut Harness| {
        let path = format!("/api/v1/sessions/{iid}/participants");
        let (status, p) = h.client("GET", &path, &ikey, None);
        assert_eq!(status, 200, "{p}");
        p["drivers"].clone()
    };
    assert_eq!(drivers(&mut h), json!([]));
    let refused = send(&mut h, &iid, &ikey, json!("not registered here"));
    assert_eq!(refused.last().unwrap()["error"]["code"], -32001);
    h.restart_from(
        engine::Config {
            durable_drivers: true,
            ..config()
        },
        engine::store::SnapshotScope::Full,
    );
    assert_eq!(drivers(&mut h), json!([]));
    h.register_driver(&iid, &ikey);
    assert_eq!(drivers(&mut h), json!([key_id]));
}
