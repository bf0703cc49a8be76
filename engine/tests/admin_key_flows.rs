//! The admin API's keys, revocation cascade, session lists and events in
//! process (checklist C-195–C-202; spec 03 §2–§4), and list pagination.
//! Moved from `io-smol/tests/admin_api.rs`.

mod common;

use common::admin::*;
use common::*;
use engine::store::KeyRole;
use engine::Listener;
use serde_json::{json, Value};

const UNKNOWN_KEY: &str = "key_0123456789abcdef0123456789abcdef";
const UNKNOWN_SID: &str = "ses_0123456789abcdef0123456789abcdef";

fn join_key(h: &mut Harness, sid: &str, ck: &str) -> String {
    let (s, j) = h.client(
        "POST",
        &format!("/api/v1/sessions/{sid}/join"),
        ck,
        Some(&json!({})),
    );
    assert_eq!(s, 201, "{j}");
    j["session_key"].as_str().unwrap().to_string()
}

#[test]
fn c195_create_key_returns_plaintext_once_with_prefix() {
    let mut h = Harness::new(config());
    let p = h.profile(&[]);
    let r = adm(
        &mut h,
        "POST",
        "/admin/v1/keys",
        json!({"name": "my-agent", "profile_id": p}),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let v = r.json;
    let mut members: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    members.sort_unstable();
    assert_eq!(
        members,
        ["created_at", "id", "key", "name", "prefix", "profile_id"]
    );
    let plain = v["key"].as_str().unwrap();
    assert!(is_prefixed_hex(plain, "bae_", 48), "{plain}");
    assert_eq!(v["prefix"], &plain[..8]);
    assert!(is_prefixed_hex(v["id"].as_str().unwrap(), "key_", 32));
    assert_eq!(v["name"], "my-agent");
    assert_eq!(v["profile_id"], p.as_str());
    assert!(is_timestamp(v["created_at"].as_str().unwrap()));
    let list = adm(&mut h, "GET", "/admin/v1/keys", Value::Null).text;
    assert!(!list.contains(plain));
}

#[test]
fn c196_create_key_for_missing_or_deleted_profile_is_422() {
    let mut h = Harness::new(config());
    for pid in [UNKNOWN_PRO, "garbage"] {
        let r = adm(
            &mut h,
            "POST",
            "/admin/v1/keys",
            json!({"name": "k", "profile_id": pid}),
        );
        let detail = assert_problem(&r, 422, "profile_unavailable");
        assert_eq!(detail, format!("no active profile {pid}"));
    }
    let id = create_profile(&mut h, profile_body("d"));
    assert_eq!(
        adm(
            &mut h,
            "DELETE",
            &format!("/admin/v1/profiles/{id}"),
            Value::Null
        )
        .status,
        204
    );
    let r = adm(
        &mut h,
        "POST",
        "/admin/v1/keys",
        json!({"name": "k", "profile_id": id}),
    );
    assert_problem(&r, 422, "profile_unavailable");
    // Body errors come first (400 before 422).
    for body in [
        json!({"name": " ", "profile_id": UNKNOWN_PRO}),
        json!({"profile_id": UNKNOWN_PRO}),
        json!({"name": "k"}),
        json!({"name": "k", "profile_id": 5}),
    ] {
        let r = adm(&mut h, "POST", "/admin/v1/keys", body);
        assert_problem(&r, 400, "bad_request");
    }
    let r = adm(
        &mut h,
        "POST",
        "/admin/v1/keys",
        json!({"name": "", "profile_id": UNKNOWN_PRO}),
    );
    assert_eq!(
        assert_problem(&r, 400, "bad_request"),
        "name must not be empty"
    );
}

#[test]
fn c197_key_list_shows_active_client_keys_only() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let (k2, _) = h.key(&f.profile);
    let (k3, _) = h.key(&f.profile);
    join_key(&mut h, &f.sid, &f.client_key);
    assert_eq!(
        adm(
            &mut h,
            "DELETE",
            &format!("/admin/v1/keys/{k3}"),
            Value::Null
        )
        .status,
        204
    );
    let list = admin_list(&mut h, "/admin/v1/keys");
    let ids: Vec<&str> = list.iter().map(|k| k["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&f.key_id.as_str()));
    assert!(ids.contains(&k2.as_str()));
    assert!(!ids.contains(&k3.as_str()), "revoked key listed");
    let others: Vec<&String> = h
        .store
        .keys
        .iter()
        .filter(|k| k.role != KeyRole::Client)
        .map(|k| &k.id)
        .collect();
    assert!(others.len() >= 3, "admin + two session keys: {others:?}");
    for id in others {
        assert!(!ids.contains(&id.as_str()), "non-client key {id} listed");
    }
    for item in &list {
        let mut members: Vec<&str> = item
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        members.sort_unstable();
        assert_eq!(
            members,
            [
                "created_at",
                "id",
                "last_used_at",
                "name",
                "prefix",
                "profile_id"
            ]
        );
    }
    let k2_row = list.iter().find(|k| k["id"] == k2.as_str()).unwrap();
    assert!(k2_row["last_used_at"].is_null());
    let used = list.iter().find(|k| k["id"] == f.key_id.as_str()).unwrap();
    assert!(used["last_used_at"].is_string());
    let text = adm(&mut h, "GET", "/admin/v1/keys?limit=200", Value::Null).text;
    assert!(!text.contains("key_hash"));
    let page = adm(&mut h, "GET", "/admin/v1/keys?limit=1", Value::Null).json;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert!(page["next_cursor"].is_string());
}

#[test]
fn c198_revocation_cascade_closes_orphaned_sessions() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let (sid2, skey2) = open(&mut h, &f.client_key);
    h.register_driver(&f.sid, &f.skey);
    let sub = h.rpc_start(&f.sid, &f.skey, &call(1, "session.subscribe", json!({})));
    // A session already closed before the revocation gets no second close.
    let (s, _) = h.client("DELETE", &format!("/api/v1/sessions/{sid2}"), &skey2, None);
    assert_eq!(s, 200);
    let r = adm(
        &mut h,
        "DELETE",
        &format!("/admin/v1/keys/{}", f.key_id),
        Value::Null,
    );
    assert_eq!(r.status, 204);
    assert!(r.text.is_empty());
    assert!(h.closed.contains(&sub), "subscribe stream not ended");
    // Session keys of the revoked client key: 401 on every route.
    for (sid, skey) in [(&f.sid, &f.skey), (&sid2, &skey2)] {
        let path = format!("/api/v1/sessions/{sid}/events");
        let r = h.reply(Listener::Client, "GET", &path, Some(skey), None);
        assert_problem(&r, 401, "unauthorized");
        let rpc = format!("/api/v1/sessions/{sid}/rpc");
        let body = call(1, "session.registerDriver", json!({}));
        let r = h.reply(Listener::Client, "POST", &rpc, Some(skey), Some(&body));
        assert_problem(&r, 401, "unauthorized");
    }
    let r = h.reply(
        Listener::Client,
        "POST",
        "/api/v1/sessions",
        Some(&f.client_key),
        Some(&json!({})),
    );
    assert_problem(&r, 401, "unauthorized");
    // The orphaned open session is closed, attributed to the revoked key.
    let row = h.admin_session(&f.sid);
    assert_eq!(row["state"], "closed");
    assert!(is_timestamp(row["closed_at"].as_str().unwrap()));
    let evts = h.admin_events(&f.sid);
    let last = evts.last().unwrap();
    assert_eq!(last["event_type"], "session.close");
    assert_eq!(last["payload"], json!({"reason": "client_key_revoked"}));
    assert_eq!(last["client_key_id"], f.key_id.as_str());
    for sid in [&sid2, &f.sid] {
        let closes = types_of(&h.admin_events(sid))
            .iter()
            .filter(|t| *t == "session.close")
            .count();
        assert_eq!(closes, 1, "{sid} closed {closes} times");
    }
    let keys = adm(&mut h, "GET", "/admin/v1/keys", Value::Null).text;
    assert!(!keys.contains(&f.key_id));
    let r = adm(
        &mut h,
        "DELETE",
        &format!("/admin/v1/profiles/{}", f.profile),
        Value::Null,
    );
    assert_eq!(r.status, 204);
}

#[test]
fn c199_revoking_one_participant_keeps_a_shared_session_open() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let (kid2, ck2) = h.key(&f.profile);
    let k2 = join_key(&mut h, &f.sid, &ck2);
    assert_eq!(
        adm(
            &mut h,
            "DELETE",
            &format!("/admin/v1/keys/{kid2}"),
            Value::Null
        )
        .status,
        204
    );
    assert_eq!(h.admin_session(&f.sid)["state"], "open");
    let path = format!("/api/v1/sessions/{}/events", f.sid);
    let r = h.reply(Listener::Client, "GET", &path, Some(&k2), None);
    assert_problem(&r, 401, "unauthorized");
    assert_eq!(
        types_of(&h.events(&f.sid, &f.skey)),
        ["session.open", "session.join"]
    );
    // Revoking the creator now orphans it.
    let r = adm(
        &mut h,
        "DELETE",
        &format!("/admin/v1/keys/{}", f.key_id),
        Value::Null,
    );
    assert_eq!(r.status, 204);
    assert_eq!(h.admin_session(&f.sid)["state"], "closed");
    let evts = h.admin_events(&f.sid);
    assert_eq!(
        types_of(&evts),
        ["session.open", "session.join", "session.close"]
    );
    assert_eq!(evts[2]["client_key_id"], f.key_id.as_str());
}

#[test]
fn c200_revoking_unknown_or_revoked_key_is_404() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    for id in [UNKNOWN_KEY, "garbage"] {
        let r = adm(
            &mut h,
            "DELETE",
            &format!("/admin/v1/keys/{id}"),
            Value::Null,
        );
        let detail = assert_problem(&r, 404, "not_found");
        assert_eq!(detail, format!("no active client key {id}"));
    }
    // Session-key and admin-key ids are not client keys.
    let others: Vec<String> = h
        .store
        .keys
        .iter()
        .filter(|k| matches!(k.role, KeyRole::Session | KeyRole::Admin))
        .map(|k| k.id.clone())
        .collect();
    assert_eq!(others.len(), 2, "{others:?}");
    for id in others {
        let r = adm(
            &mut h,
            "DELETE",
            &format!("/admin/v1/keys/{id}"),
            Value::Null,
        );
        assert_problem(&r, 404, "not_found");
    }
    let events = format!("/api/v1/sessions/{}/events", f.sid);
    assert_eq!(h.client("GET", &events, &f.skey, None).0, 200);
    let path = format!("/admin/v1/keys/{}", f.key_id);
    assert_eq!(adm(&mut h, "DELETE", &path, Value::Null).status, 204);
    assert_problem(&adm(&mut h, "DELETE", &path, Value::Null), 404, "not_found");
    assert_eq!(
        adm(&mut h, "GET", "/admin/v1/keys", Value::Null).status,
        200
    );
}

#[test]
fn c201_session_list_filters_and_audit_rows() {
    let mut h = Harness::new(config());
    let open = h.fix(&[]);
    let closed = h.fix(&[]);
    let (s, _) = h.client(
        "DELETE",
        &format!("/api/v1/sessions/{}", closed.sid),
        &closed.skey,
        None,
    );
    assert_eq!(s, 200);
    let np = h.profile_on("absent", &[]);
    let (_, nk) = h.key(&np);
    let r = h.reply(
        Listener::Client,
        "POST",
        "/api/v1/sessions",
        Some(&nk),
        Some(&json!({})),
    );
    assert_problem(&r, 422, "primary_provider_unavailable");
    for bad in ["bogus", "OPEN", "closed,open"] {
        let r = adm(
            &mut h,
            "GET",
            &format!("/admin/v1/sessions?state={bad}"),
            Value::Null,
        );
        assert_eq!(
            assert_problem(&r, 400, "bad_request"),
            format!("invalid state filter \"{bad}\"; expected one of open, closed, error")
        );
    }
    let ids = |h: &mut Harness, state: &str| -> Vec<String> {
        admin_list(h, &format!("/admin/v1/sessions?state={state}"))
            .iter()
            .map(|r| {
                if !state.is_empty() {
                    assert_eq!(r["state"], state);
                }
                r["id"].as_str().unwrap().to_string()
            })
            .collect()
    };
    assert_eq!(ids(&mut h, "open"), vec![open.sid.as_str()]);
    assert_eq!(ids(&mut h, "closed"), vec![closed.sid.as_str()]);
    let errors = ids(&mut h, "error");
    assert_eq!(errors.len(), 1, "the audit row");
    let all = ids(&mut h, "");
    assert_eq!(all.len(), 3);
    assert_eq!(all[0], open.sid, "insertion order");
    let row = h.admin_session(&errors[0]);
    let mut members: Vec<&str> = row
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    members.sort_unstable();
    assert_eq!(
        members,
        [
            "client_version",
            "closed_at",
            "created_at",
            "id",
            "profile_id",
            "state"
        ]
    );
    assert_eq!(row["profile_id"], np.as_str());
    let r = adm(&mut h, "GET", "/admin/v1/sessions?limit=0", Value::Null);
    assert_problem(&r, 400, "bad_request");
    let page = adm(&mut h, "GET", "/admin/v1/sessions?limit=2", Value::Null).json;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let cur = page["next_cursor"].as_str().unwrap();
    let page2 = adm(
        &mut h,
        "GET",
        &format!("/admin/v1/sessions?limit=2&cursor={cur}"),
        Value::Null,
    )
    .json;
    assert_eq!(page2["items"].as_array().unwrap().len(), 1);
    assert!(page2["next_cursor"].is_null());
}

#[test]
fn c202_admin_session_events_match_the_client_port() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    for _ in 0..4 {
        join_key(&mut h, &f.sid, &f.client_key);
    }
    let client = format!("/api/v1/sessions/{}/events", f.sid);
    let admin = format!("/admin/v1/sessions/{}/events", f.sid);
    let first = h
        .client("GET", &format!("{client}?limit=2"), &f.skey, None)
        .1;
    let cur = first["next_cursor"].as_str().unwrap().to_string();
    for q in [
        "",
        "?limit=2",
        "?limit=2&cursor=",
        "?limit=1000",
        &format!("?cursor={cur}"),
    ] {
        let a = h.reply(
            Listener::Client,
            "GET",
            &format!("{client}{q}"),
            Some(&f.skey),
            None,
        );
        let b = adm(&mut h, "GET", &format!("{admin}{q}"), Value::Null);
        assert_eq!((a.status, b.status), (200, 200), "query {q:?}");
        assert_eq!(a.text, b.text, "query {q:?}");
    }
    // Unknown session: 404, even with a bad cursor (lookup first).
    for q in ["", "?cursor=abc", "?limit=0"] {
        let r = adm(
            &mut h,
            "GET",
            &format!("/admin/v1/sessions/{UNKNOWN_SID}/events{q}"),
            Value::Null,
        );
        assert_problem(&r, 404, "not_found");
    }
    let r = adm(&mut h, "GET", &format!("{admin}?cursor=abc"), Value::Null);
    assert_problem(&r, 400, "bad_request");
}

#[test]
fn admin_lists_paginate_and_reject_bad_parameters() {
    let mut h = Harness::new(config());
    for _ in 0..5 {
        h.profile(&[]);
    }
    let page = adm(&mut h, "GET", "/admin/v1/profiles?limit=2", Value::Null).json;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let all = admin_list(&mut h, "/admin/v1/profiles");
    assert_eq!(all.len(), 5);
    let mut walked = Vec::new();
    let mut cursor = String::new();
    loop {
        let path = format!("/admin/v1/profiles?limit=2&cursor={cursor}");
        let v = adm(&mut h, "GET", &path, Value::Null).json;
        walked.extend(v["items"].as_array().unwrap().iter().cloned());
        match v["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => break,
        }
    }
    assert_eq!(walked, all);
    for path in ["/admin/v1/profiles", "/admin/v1/keys", "/admin/v1/sessions"] {
        for q in ["limit=0", "limit=x", "cursor=zz"] {
            let r = adm(&mut h, "GET", &format!("{path}?{q}"), Value::Null);
            assert_problem(&r, 400, "bad_request");
        }
    }
    // Unknown admin routes are RFC 7807 404s; client routes are absent
    // from the admin port.
    let r = adm(&mut h, "GET", "/admin/v1/nope", Value::Null);
    assert_problem(&r, 404, "not_found");
    assert_ne!(adm(&mut h, "GET", "/api/v1/meta", Value::Null).status, 200);
    assert_ne!(adm(&mut h, "GET", "/healthz", Value::Null).status, 200);
}
