//! Admin API over the real binary (README checklist C-187–C-207; spec 03
//! §1–§4).

mod rest_support;

use std::time::Duration;

use rest_support::*;
use serde_json::{json, Value};
use testkit::fixtures::{self, open_session, unique_name};
use testkit::{Server, ServerOptions};

const UNKNOWN_PRO: &str = "pro_0123456789abcdef0123456789abcdef";
const UNKNOWN_KEY: &str = "key_0123456789abcdef0123456789abcdef";
const UNKNOWN_SID: &str = "ses_0123456789abcdef0123456789abcdef";

/// Every admin route: (method, path, body). Ids are real where that matters.
fn admin_routes(pro: &str, key_id: &str, sid: &str) -> Vec<(&'static str, String, Value)> {
    vec![
        ("GET", "/admin/v1/profiles".into(), Value::Null),
        (
            "POST",
            "/admin/v1/profiles".into(),
            json!({"name": unique_name("x"), "primary_provider": PROVIDER}),
        ),
        ("GET", format!("/admin/v1/profiles/{pro}"), Value::Null),
        (
            "PUT",
            format!("/admin/v1/profiles/{pro}"),
            json!({"name": unique_name("y"), "primary_provider": PROVIDER}),
        ),
        ("DELETE", format!("/admin/v1/profiles/{pro}"), Value::Null),
        (
            "POST",
            "/admin/v1/keys".into(),
            json!({"name": "n", "profile_id": pro}),
        ),
        ("GET", "/admin/v1/keys".into(), Value::Null),
        ("DELETE", format!("/admin/v1/keys/{key_id}"), Value::Null),
        ("GET", "/admin/v1/sessions".into(), Value::Null),
        (
            "GET",
            format!("/admin/v1/sessions/{sid}/events"),
            Value::Null,
        ),
        ("GET", "/admin/v1/mcp-servers".into(), Value::Null),
        ("GET", "/admin/v1/providers".into(), Value::Null),
        ("GET", "/admin/v1/config".into(), Value::Null),
        ("GET", "/admin/v1/sandbox-status".into(), Value::Null),
    ]
}

fn send(c: &testkit::HttpClient, method: &str, path: &str, body: &Value) -> testkit::Response {
    if body.is_null() {
        c.request(method, path, &[], b"")
    } else {
        let bytes = serde_json::to_vec(body).unwrap();
        c.request(
            method,
            path,
            &[("content-type", "application/json")],
            &bytes,
        )
    }
}

fn profile_body(name: &str) -> Value {
    json!({"name": name, "primary_provider": PROVIDER})
}

#[test]
fn c187_admin_routes_need_the_admin_key_and_nothing_changes_without_it() {
    let s = start();
    let f = fix(&s, &[]);
    let before_profiles = all_pages(&s.admin(), "/admin/v1/profiles");
    let before_keys = all_pages(&s.admin(), "/admin/v1/keys");
    let anon = testkit::HttpClient::new(s.admin_addr);
    for (method, path, body) in admin_routes(&f.profile, &f.key_id, &f.sid) {
        let r = send(&anon, method, &path, &body);
        assert_problem(&r, 401, "unauthorized");
        let wrong = anon
            .clone()
            .bearer("bae_admin_000000000000000000000000000000000000000000000000");
        let r = send(&wrong, method, &path, &body);
        assert_problem(&r, 401, "unauthorized");
    }
    assert_eq!(all_pages(&s.admin(), "/admin/v1/profiles"), before_profiles);
    assert_eq!(all_pages(&s.admin(), "/admin/v1/keys"), before_keys);
    assert_eq!(admin_session(&s, &f.sid)["state"], "open");
}

#[test]
fn c187_c214_admin_auth_disabled_serves_without_header() {
    let s = Server::start(
        opts()
            .config(provider_config(DEAD_URL))
            .env("BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH", " True "),
    );
    assert!(s.admin_key.is_empty(), "no key file when auth is disabled");
    assert!(!s.admin_key_file().exists());
    let anon = s.admin();
    for path in [
        "/admin/v1/profiles",
        "/admin/v1/keys",
        "/admin/v1/sessions",
        "/admin/v1/mcp-servers",
        "/admin/v1/providers",
        "/admin/v1/config",
        "/admin/v1/sandbox-status",
    ] {
        anon.get(path).assert_status(200);
        // Any bearer is ignored too.
        anon.clone().bearer("whatever").get(path).assert_status(200);
    }
    let r = anon.post_json("/admin/v1/profiles", &profile_body(&unique_name("p")));
    r.assert_status(201);
    let log = s.stderr_log();
    assert!(
        log.contains("admin API authentication is DISABLED"),
        "warning missing:\n{log}"
    );
}

#[test]
fn c188_client_and_session_keys_are_401_on_the_admin_port() {
    let s = start();
    let f = fix(&s, &[]);
    for bearer in [&f.client_key, &f.skey] {
        let c = testkit::HttpClient::new(s.admin_addr).bearer(bearer.as_str());
        for (method, path, body) in admin_routes(&f.profile, &f.key_id, &f.sid) {
            let r = send(&c, method, &path, &body);
            assert_problem(&r, 401, "unauthorized");
        }
    }
    // The client key is still active (the DELETE above was refused).
    fixtures::open_session(&s, &f.client_key, json!({}));
}

#[test]
fn c189_create_profile_returns_201_id_name_created_at() {
    let s = start();
    let name = unique_name("main");
    let r = s.admin().post_json(
        "/admin/v1/profiles",
        &json!({
            "name": name,
            "primary_provider": PROVIDER,
            "fallback_providers": ["b", "c"],
            "mcp_servers": ["fs"],
            "allowed_tools": ["get_time"],
            "available_sandboxes": ["python:3.12"],
            "unknown_member": 5,
        }),
    );
    r.assert_status(201);
    let v = r.json();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["created_at", "id", "name"]);
    let id = v["id"].as_str().unwrap();
    assert!(is_prefixed_hex(id, "pro_", 32), "{id}");
    assert_eq!(v["name"], name.as_str());
    assert!(is_timestamp(v["created_at"].as_str().unwrap()));
    let p = s.admin().get(&format!("/admin/v1/profiles/{id}")).json();
    assert_eq!(
        p,
        json!({
            "id": id,
            "name": name,
            "primary_provider": PROVIDER,
            "fallback_providers": ["b", "c"],
            "mcp_servers": ["fs"],
            "allowed_tools": ["get_time"],
            "available_sandboxes": ["python:3.12"],
            "created_at": v["created_at"],
            "updated_at": v["created_at"],
        })
    );
    // Defaults: every array present and empty.
    let id2 = fixtures::create_profile_json(&s, &profile_body(&unique_name("d")));
    let p2 = s.admin().get(&format!("/admin/v1/profiles/{id2}")).json();
    for member in [
        "fallback_providers",
        "mcp_servers",
        "allowed_tools",
        "available_sandboxes",
    ] {
        assert_eq!(p2[member], json!([]), "{member}");
    }
}

#[test]
fn c190_duplicate_profile_name_is_409_even_if_deleted() {
    let s = start();
    let name = unique_name("dup");
    fixtures::create_profile_json(&s, &profile_body(&name));
    let r = s
        .admin()
        .post_json("/admin/v1/profiles", &profile_body(&name));
    let detail = assert_problem(&r, 409, "duplicate_name");
    assert_eq!(detail, "a profile with that name already exists");
    // Soft-deleted names stay taken.
    let gone = unique_name("gone");
    let id = fixtures::create_profile_json(&s, &profile_body(&gone));
    s.admin()
        .delete(&format!("/admin/v1/profiles/{id}"))
        .assert_status(204);
    let r = s
        .admin()
        .post_json("/admin/v1/profiles", &profile_body(&gone));
    assert_problem(&r, 409, "duplicate_name");
    // Renaming onto a taken name is 409 as well.
    let other = fixtures::create_profile_json(&s, &profile_body(&unique_name("o")));
    let r = s
        .admin()
        .put_json(&format!("/admin/v1/profiles/{other}"), &profile_body(&name));
    assert_problem(&r, 409, "duplicate_name");
}

#[test]
fn c191_invalid_profile_bodies_are_400() {
    let s = start();
    let before = all_pages(&s.admin(), "/admin/v1/profiles").len();
    let cases = [
        (json!({"name": "  ", "primary_provider": "p"}), None),
        (json!({"name": "", "primary_provider": "p"}), None),
        (json!({"primary_provider": "p"}), None),
        (json!({"name": 5, "primary_provider": "p"}), None),
        (json!({"name": unique_name("n")}), None),
        (
            json!({"name": unique_name("n"), "primary_provider": " "}),
            None,
        ),
        (
            json!({"name": unique_name("n"), "primary_provider": "p", "fallback_providers": "x"}),
            Some("fallback_providers must be an array"),
        ),
        (
            json!({"name": unique_name("n"), "primary_provider": "p", "fallback_providers": ["ok", 1]}),
            Some("fallback_providers[1] must be a string (a bae-config.toml registry name)"),
        ),
        (
            json!({"name": unique_name("n"), "primary_provider": "p", "mcp_servers": [null]}),
            Some("mcp_servers[0] must be a string (a bae-config.toml registry name)"),
        ),
        (
            json!({"name": unique_name("n"), "primary_provider": "p", "available_sandboxes": {}}),
            Some("available_sandboxes must be an array"),
        ),
        (
            json!({"name": unique_name("n"), "primary_provider": "p", "allowed_tools": "t"}),
            None,
        ),
        (json!([1, 2]), None),
        (json!("profile"), None),
    ];
    for (body, detail) in cases {
        let r = s.admin().post_json("/admin/v1/profiles", &body);
        let got = assert_problem(&r, 400, "bad_request");
        if let Some(d) = detail {
            assert_eq!(got, d, "{body}");
        }
    }
    for raw in [&b"{nope"[..], b"", b"\xff\xfe\xfd"] {
        let r = s.admin().request(
            "POST",
            "/admin/v1/profiles",
            &[("content-type", "application/json")],
            raw,
        );
        assert_problem(&r, 400, "bad_request");
    }
    assert_eq!(all_pages(&s.admin(), "/admin/v1/profiles").len(), before);
}

#[test]
fn c192_deleted_profile_is_404() {
    let s = start();
    let id = fixtures::create_profile_json(&s, &profile_body(&unique_name("d")));
    s.admin()
        .delete(&format!("/admin/v1/profiles/{id}"))
        .assert_status(204);
    let r = s.admin().get(&format!("/admin/v1/profiles/{id}"));
    let detail = assert_problem(&r, 404, "not_found");
    assert_eq!(detail, format!("no profile {id}"));
    let r = s.admin().put_json(
        &format!("/admin/v1/profiles/{id}"),
        &profile_body(&unique_name("e")),
    );
    assert_problem(&r, 404, "not_found");
    let r = s.admin().delete(&format!("/admin/v1/profiles/{id}"));
    assert_problem(&r, 404, "not_found");
    assert!(!all_pages(&s.admin(), "/admin/v1/profiles")
        .iter()
        .any(|p| p["id"] == id.as_str()));
    for id in [UNKNOWN_PRO, "garbage"] {
        let r = s.admin().get(&format!("/admin/v1/profiles/{id}"));
        assert_problem(&r, 404, "not_found");
    }
}

#[test]
fn c193_put_replaces_everything_and_bumps_updated_at() {
    let s = start();
    let id = fixtures::create_profile_json(
        &s,
        &json!({
            "name": unique_name("full"),
            "primary_provider": "a",
            "fallback_providers": ["b"],
            "mcp_servers": ["m"],
            "allowed_tools": ["t"],
            "available_sandboxes": ["img"],
        }),
    );
    let before = s.admin().get(&format!("/admin/v1/profiles/{id}")).json();
    std::thread::sleep(Duration::from_millis(20));
    let name = unique_name("renamed");
    let r = s.admin().put_json(
        &format!("/admin/v1/profiles/{id}"),
        &json!({"name": name, "primary_provider": "z"}),
    );
    r.assert_status(200);
    let after = r.json();
    assert_eq!(after["id"], id.as_str());
    assert_eq!(after["name"], name.as_str());
    assert_eq!(after["primary_provider"], "z");
    for member in [
        "fallback_providers",
        "mcp_servers",
        "allowed_tools",
        "available_sandboxes",
    ] {
        assert_eq!(after[member], json!([]), "{member} reset");
    }
    assert_eq!(after["created_at"], before["created_at"]);
    assert!(
        after["updated_at"].as_str().unwrap() > before["updated_at"].as_str().unwrap(),
        "{after}"
    );
    assert_eq!(
        s.admin().get(&format!("/admin/v1/profiles/{id}")).json(),
        after
    );
    // The old name is free again only if nothing else holds it; keeping the
    // same name on PUT is fine.
    s.admin()
        .put_json(
            &format!("/admin/v1/profiles/{id}"),
            &json!({"name": name, "primary_provider": "z", "allowed_tools": ["t2"]}),
        )
        .assert_status(200);
    let r = s.admin().put_json(
        &format!("/admin/v1/profiles/{id}"),
        &json!({"name": "", "primary_provider": "z"}),
    );
    assert_problem(&r, 400, "bad_request");
}

#[test]
fn c193_put_allowed_tools_applies_to_later_opens() {
    let s = start();
    let f = fix(&s, &[]);
    let r = s
        .client()
        .bearer(&f.client_key)
        .post_json("/api/v1/sessions", &json!({"tools": [tool("t")]}));
    assert_problem(&r, 403, "tool_not_allowed");
    let name = s
        .admin()
        .get(&format!("/admin/v1/profiles/{}", f.profile))
        .json()["name"]
        .clone();
    s.admin()
        .put_json(
            &format!("/admin/v1/profiles/{}", f.profile),
            &json!({"name": name, "primary_provider": PROVIDER, "allowed_tools": ["t"]}),
        )
        .assert_status(200);
    open_session(&s, &f.client_key, json!({"tools": [tool("t")]}));
}

#[test]
fn c194_profile_in_use_until_keys_are_revoked() {
    let s = start();
    let p = profile(&s, &[]);
    let (k1, _) = key(&s, &p);
    let (k2, _) = key(&s, &p);
    let r = s.admin().delete(&format!("/admin/v1/profiles/{p}"));
    let detail = assert_problem(&r, 409, "profile_in_use");
    assert_eq!(
        detail,
        "profile has 2 active client key(s); revoke them before deleting"
    );
    s.admin()
        .delete(&format!("/admin/v1/keys/{k1}"))
        .assert_status(204);
    let r = s.admin().delete(&format!("/admin/v1/profiles/{p}"));
    assert_problem(&r, 409, "profile_in_use");
    s.admin()
        .delete(&format!("/admin/v1/keys/{k2}"))
        .assert_status(204);
    let r = s.admin().delete(&format!("/admin/v1/profiles/{p}"));
    assert_eq!(r.status, 204);
    assert!(r.body.is_empty());
    assert_problem(
        &s.admin().get(&format!("/admin/v1/profiles/{p}")),
        404,
        "not_found",
    );
}

#[test]
fn c195_create_key_returns_plaintext_once_with_prefix() {
    let s = start();
    let p = profile(&s, &[]);
    let r = s.admin().post_json(
        "/admin/v1/keys",
        &json!({"name": "my-agent", "profile_id": p}),
    );
    r.assert_status(201);
    let v = r.json();
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
    // The list never shows it again.
    let list = s.admin().get("/admin/v1/keys").text();
    assert!(!list.contains(plain));
}

#[test]
fn c196_create_key_for_missing_or_deleted_profile_is_422() {
    let s = start();
    for pid in [UNKNOWN_PRO, "garbage"] {
        let r = s
            .admin()
            .post_json("/admin/v1/keys", &json!({"name": "k", "profile_id": pid}));
        let detail = assert_problem(&r, 422, "profile_unavailable");
        assert_eq!(detail, format!("no active profile {pid}"));
    }
    let id = fixtures::create_profile_json(&s, &profile_body(&unique_name("d")));
    s.admin()
        .delete(&format!("/admin/v1/profiles/{id}"))
        .assert_status(204);
    let r = s
        .admin()
        .post_json("/admin/v1/keys", &json!({"name": "k", "profile_id": id}));
    assert_problem(&r, 422, "profile_unavailable");
    // Body errors come first (400 before 422).
    for body in [
        json!({"name": " ", "profile_id": UNKNOWN_PRO}),
        json!({"profile_id": UNKNOWN_PRO}),
        json!({"name": "k"}),
        json!({"name": "k", "profile_id": 5}),
    ] {
        let r = s.admin().post_json("/admin/v1/keys", &body);
        assert_problem(&r, 400, "bad_request");
    }
    let r = s.admin().post_json(
        "/admin/v1/keys",
        &json!({"name": "", "profile_id": UNKNOWN_PRO}),
    );
    assert_eq!(
        assert_problem(&r, 400, "bad_request"),
        "name must not be empty"
    );
}

#[test]
fn c197_key_list_shows_active_client_keys_only() {
    let s = start();
    let f = fix(&s, &[]);
    let (k2, _) = key(&s, &f.profile);
    let (k3, _) = key(&s, &f.profile);
    fixtures::join_session(&s, &f.sid, &f.client_key, json!({}));
    s.admin()
        .delete(&format!("/admin/v1/keys/{k3}"))
        .assert_status(204);
    let list = all_pages(&s.admin(), "/admin/v1/keys");
    let ids: Vec<&str> = list.iter().map(|k| k["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&f.key_id.as_str()));
    assert!(ids.contains(&k2.as_str()));
    assert!(!ids.contains(&k3.as_str()), "revoked key listed");
    let conn = db(&s);
    let sess_ids = query(&conn, "SELECT id FROM keys WHERE role <> 'client'");
    for row in sess_ids {
        let id = row[0].clone().unwrap();
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
    let text = s.admin().get("/admin/v1/keys?limit=200").text();
    assert!(!text.contains("key_hash"));
    // Pagination of the key list.
    let page = s.admin().get("/admin/v1/keys?limit=1").json();
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert!(page["next_cursor"].is_string());
}

#[test]
fn c198_revocation_cascade_closes_orphaned_sessions() {
    let s = start();
    let f = fix(&s, &[]);
    let (sid2, skey2) = open_session(&s, &f.client_key, json!({}));
    register(&s, &f.sid, &f.skey);
    // A live subscriber of the revoked session.
    let req = testkit::rpc_request("session.subscribe", json!({}), 1);
    let mut sub = s.client().rpc_stream(&f.sid, &f.skey, &req);
    assert_eq!(sub.status(), 200);
    // A session already closed before the revocation gets no second close.
    s.client()
        .bearer(&skey2)
        .delete(&format!("/api/v1/sessions/{sid2}"))
        .assert_status(200);
    let r = s.admin().delete(&format!("/admin/v1/keys/{}", f.key_id));
    assert_eq!(r.status, 204);
    assert!(r.body.is_empty());
    assert!(
        sub.wait_closed(Duration::from_secs(5)),
        "subscribe stream not ended"
    );
    // Session keys of the revoked client key: 401 on every route.
    for (sid, skey) in [(&f.sid, &f.skey), (&sid2, &skey2)] {
        let c = s.client().bearer(skey.as_str());
        assert_problem(
            &c.get(&format!("/api/v1/sessions/{sid}/events")),
            401,
            "unauthorized",
        );
        assert_problem(
            &c.get(&format!("/api/v1/sessions/{sid}/participants")),
            401,
            "unauthorized",
        );
        assert_problem(
            &c.delete(&format!("/api/v1/sessions/{sid}")),
            401,
            "unauthorized",
        );
        let r = post_raw(
            &s.client(),
            &format!("/api/v1/sessions/{sid}/rpc"),
            skey,
            Some("application/json"),
            br#"{"jsonrpc":"2.0","id":1,"method":"session.registerDriver"}"#,
        );
        assert_problem(&r, 401, "unauthorized");
    }
    // The client key itself is dead.
    let r = s
        .client()
        .bearer(&f.client_key)
        .post_json("/api/v1/sessions", &json!({}));
    assert_problem(&r, 401, "unauthorized");
    // The orphaned open session is closed, attributed to the revoked key.
    let row = admin_session(&s, &f.sid);
    assert_eq!(row["state"], "closed");
    assert!(is_timestamp(row["closed_at"].as_str().unwrap()));
    let evts = admin_events(&s, &f.sid);
    let last = evts.last().unwrap();
    assert_eq!(last["event_type"], "session.close");
    assert_eq!(last["payload"], json!({"reason": "client_key_revoked"}));
    assert_eq!(last["client_key_id"], f.key_id.as_str());
    let closes = |sid: &str| {
        types(&admin_events(&s, sid))
            .iter()
            .filter(|t| *t == "session.close")
            .count()
    };
    assert_eq!(closes(&sid2), 1, "already-closed session closed twice");
    assert_eq!(closes(&f.sid), 1);
    // The key list no longer shows it; the profile can now be deleted.
    assert!(!s.admin().get("/admin/v1/keys").text().contains(&f.key_id));
    s.admin()
        .delete(&format!("/admin/v1/profiles/{}", f.profile))
        .assert_status(204);
}

#[test]
fn c199_revoking_one_participant_keeps_a_shared_session_open() {
    let s = start();
    let f = fix(&s, &[]);
    let (kid2, ck2) = key(&s, &f.profile);
    let k2 = fixtures::join_session(&s, &f.sid, &ck2, json!({}));
    s.admin()
        .delete(&format!("/admin/v1/keys/{kid2}"))
        .assert_status(204);
    assert_eq!(admin_session(&s, &f.sid)["state"], "open");
    assert_problem(
        &s.client()
            .bearer(&k2)
            .get(&format!("/api/v1/sessions/{}/events", f.sid)),
        401,
        "unauthorized",
    );
    let evts = events(&s, &f.sid, &f.skey);
    assert_eq!(types(&evts), ["session.open", "session.join"]);
    // Revoking the creator now orphans it.
    s.admin()
        .delete(&format!("/admin/v1/keys/{}", f.key_id))
        .assert_status(204);
    assert_eq!(admin_session(&s, &f.sid)["state"], "closed");
    let evts = admin_events(&s, &f.sid);
    assert_eq!(
        types(&evts),
        ["session.open", "session.join", "session.close"]
    );
    assert_eq!(evts[2]["client_key_id"], f.key_id.as_str());
}

#[test]
fn c200_revoking_unknown_or_revoked_key_is_404() {
    let s = start();
    let f = fix(&s, &[]);
    for id in [UNKNOWN_KEY, "garbage"] {
        let r = s.admin().delete(&format!("/admin/v1/keys/{id}"));
        let detail = assert_problem(&r, 404, "not_found");
        assert_eq!(detail, format!("no active client key {id}"));
    }
    // Session-key and admin-key ids are not client keys.
    let conn = db(&s);
    for row in query(
        &conn,
        "SELECT id FROM keys WHERE role IN ('session', 'admin')",
    ) {
        let id = row[0].clone().unwrap();
        let r = s.admin().delete(&format!("/admin/v1/keys/{id}"));
        assert_problem(&r, 404, "not_found");
    }
    s.client()
        .bearer(&f.skey)
        .get(&format!("/api/v1/sessions/{}/events", f.sid))
        .assert_status(200);
    s.admin()
        .delete(&format!("/admin/v1/keys/{}", f.key_id))
        .assert_status(204);
    let r = s.admin().delete(&format!("/admin/v1/keys/{}", f.key_id));
    assert_problem(&r, 404, "not_found");
    // The admin key still works after all that.
    s.admin().get("/admin/v1/keys").assert_status(200);
}

#[test]
fn c201_session_list_filters_and_audit_rows() {
    let s = start();
    let open = fix(&s, &[]);
    let closed = fix(&s, &[]);
    s.client()
        .bearer(&closed.skey)
        .delete(&format!("/api/v1/sessions/{}", closed.sid))
        .assert_status(200);
    let np = fixtures::create_profile(&s, &unique_name("np"), "absent", &[], &[]);
    let (_, nk) = key(&s, &np);
    let r = s
        .client()
        .bearer(&nk)
        .post_json("/api/v1/sessions", &json!({}));
    assert_problem(&r, 422, "primary_provider_unavailable");
    for bad in ["bogus", "OPEN", "closed,open"] {
        let r = s.admin().get(&format!("/admin/v1/sessions?state={bad}"));
        let detail = assert_problem(&r, 400, "bad_request");
        assert_eq!(
            detail,
            format!("invalid state filter \"{bad}\"; expected one of open, closed, error")
        );
    }
    let ids = |state: &str| -> Vec<String> {
        all_pages(&s.admin(), &format!("/admin/v1/sessions?state={state}"))
            .iter()
            .map(|r| {
                if !state.is_empty() {
                    assert_eq!(r["state"], state);
                }
                r["id"].as_str().unwrap().to_string()
            })
            .collect()
    };
    assert_eq!(ids("open"), vec![open.sid.as_str()]);
    assert_eq!(ids("closed"), vec![closed.sid.as_str()]);
    let errors = ids("error");
    assert_eq!(errors.len(), 1, "the audit row");
    let all = ids("");
    assert_eq!(all.len(), 3);
    assert_eq!(all[0], open.sid, "insertion order");
    let row = admin_session(&s, &errors[0]);
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
    let r = s.admin().get("/admin/v1/sessions?limit=0");
    assert_problem(&r, 400, "bad_request");
    let page = s.admin().get("/admin/v1/sessions?limit=2").json();
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let cur = page["next_cursor"].as_str().unwrap();
    let page2 = s
        .admin()
        .get(&format!("/admin/v1/sessions?limit=2&cursor={cur}"))
        .json();
    assert_eq!(page2["items"].as_array().unwrap().len(), 1);
    assert!(page2["next_cursor"].is_null());
}

#[test]
fn c202_admin_session_events_match_the_client_port() {
    let s = start();
    let f = fix(&s, &[]);
    for _ in 0..4 {
        fixtures::join_session(&s, &f.sid, &f.client_key, json!({}));
    }
    let client = s.client().bearer(&f.skey);
    for q in ["", "?limit=2", "?limit=2&cursor=", "?limit=1000"] {
        let a = client.get(&format!("/api/v1/sessions/{}/events{q}", f.sid));
        let b = s
            .admin()
            .get(&format!("/admin/v1/sessions/{}/events{q}", f.sid));
        a.assert_status(200);
        b.assert_status(200);
        assert_eq!(a.body, b.body, "query {q:?}");
    }
    let first = client
        .get(&format!("/api/v1/sessions/{}/events?limit=2", f.sid))
        .json();
    let cur = first["next_cursor"].as_str().unwrap();
    let a = client.get(&format!("/api/v1/sessions/{}/events?cursor={cur}", f.sid));
    let b = s
        .admin()
        .get(&format!("/admin/v1/sessions/{}/events?cursor={cur}", f.sid));
    assert_eq!(a.body, b.body);
    // Unknown session: 404, even with a bad cursor (lookup first).
    for q in ["", "?cursor=abc", "?limit=0"] {
        let r = s
            .admin()
            .get(&format!("/admin/v1/sessions/{UNKNOWN_SID}/events{q}"));
        assert_problem(&r, 404, "not_found");
    }
    // Known session, bad cursor: 400.
    let r = s
        .admin()
        .get(&format!("/admin/v1/sessions/{}/events?cursor=abc", f.sid));
    assert_problem(&r, 400, "bad_request");
}

fn registry_config() -> String {
    format!(
        r#"
[[mcp.servers]]
name = "zeta"
transport = "http"
url = "http://127.0.0.1:9/mcp"
headers = {{ Authorization = "Bearer mcp-secret-header-value", "X-Empty" = "", "A-Template" = "${{MCP_TOKEN_VAR}}" }}

[[mcp.servers]]
name = "alpha"
transport = "stdio"
command = "/bin/false"
args = ["--flag", "${{SOME_ARG}}"]

[[mcp.servers]]
name = "mock"
transport = "sse"
url = "http://127.0.0.1:9/sse"

{}
[[providers.entries]]
name = "b-openai"
provider = "openai"
model = "gpt-test"
auth_token = "${{OPENAI_TOKEN_VAR}}"
max_tokens = 1234

[[providers.entries]]
name = "a-anthropic"
provider = "anthropic"
model = "claude-test"
auth_token = ""

[telemetry]
enabled = false
otlp_headers = {{ "x-otlp-key" = "otlp-secret-value", "b" = "" }}
"#,
        provider_config(DEAD_URL)
    )
}

fn registry_server() -> Server {
    Server::start(opts().config(registry_config()))
}

#[test]
fn c203_mcp_servers_sorted_name_and_transport_only() {
    let s = registry_server();
    let r = s.admin().get("/admin/v1/mcp-servers");
    r.assert_status(200);
    assert_eq!(
        r.json(),
        json!({"items": [
            {"name": "alpha", "transport": "stdio"},
            {"name": "mock", "transport": "sse"},
            {"name": "zeta", "transport": "http"},
        ]})
    );
}

#[test]
fn c204_providers_sorted_with_effective_base_url() {
    let s = registry_server();
    let r = s.admin().get("/admin/v1/providers");
    r.assert_status(200);
    assert_eq!(
        r.json(),
        json!({"items": [
            {"name": "a-anthropic", "provider": "anthropic", "model": "claude-test", "base_url": "https://api.anthropic.com"},
            {"name": "b-openai", "provider": "openai", "model": "gpt-test", "base_url": "https://api.openai.com"},
            {"name": "mock", "provider": "anthropic", "model": "mock-model", "base_url": DEAD_URL},
        ]})
    );
    assert!(!r.text().contains("max_tokens"));
    assert!(!r.text().contains("auth_token"));
}

#[test]
fn c205_config_snapshot_redacts_every_secret() {
    let s = registry_server();
    let r = s.admin().get("/admin/v1/config");
    r.assert_status(200);
    let text = r.text();
    for secret in [
        PROVIDER_TOKEN,
        "mcp-secret-header-value",
        "otlp-secret-value",
        "OPENAI_TOKEN_VAR",
        "MCP_TOKEN_VAR",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    let v = r.json();
    const MARK: &str = "\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}";
    let entries = v["providers"]["entries"].as_array().unwrap();
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a-anthropic", "b-openai", "mock"]);
    for e in entries {
        assert_eq!(e["auth_token"], MARK, "{e}");
    }
    let servers = v["mcp"]["servers"].as_array().unwrap();
    let names: Vec<&str> = servers
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "mock", "zeta"]);
    let zeta = &servers[2];
    assert_eq!(
        zeta["headers"],
        json!({"A-Template": MARK, "Authorization": MARK, "X-Empty": MARK})
    );
    let header_keys: Vec<&String> = zeta["headers"].as_object().unwrap().keys().collect();
    assert_eq!(
        header_keys,
        ["A-Template", "Authorization", "X-Empty"],
        "sorted"
    );
    assert_eq!(zeta["url"], "http://127.0.0.1:9/mcp");
    let alpha = &servers[0];
    assert_eq!(alpha["command"], "/bin/false");
    assert_eq!(alpha["args"], json!(["--flag", "${SOME_ARG}"]));
    assert_eq!(
        v["telemetry"]["otlp_headers"],
        json!({"b": MARK, "x-otlp-key": MARK})
    );
    assert_eq!(v["telemetry"]["enabled"], false);
}

#[test]
fn c206_config_without_file_is_empty_and_disabled() {
    let s = Server::start(opts());
    let v = s.admin().get("/admin/v1/config").json();
    assert_eq!(v["mcp"], json!({"servers": []}));
    assert_eq!(v["providers"], json!({"entries": []}));
    assert_eq!(
        v["telemetry"],
        json!({
            "enabled": false,
            "otlp_endpoint": null,
            "otlp_headers": {},
            "sample_ratio": 1.0,
            "service_name": "baesrv",
            "traces": {"enabled": true},
            "metrics": {"enabled": true, "disabled": []},
        })
    );
    assert_eq!(
        s.admin().get("/admin/v1/mcp-servers").json(),
        json!({"items": []})
    );
    assert_eq!(
        s.admin().get("/admin/v1/providers").json(),
        json!({"items": []})
    );
}

#[test]
fn c207_sandbox_status_pending_right_after_creation() {
    let s = Server::start(
        ServerOptions::new()
            .bin(env!("CARGO_BIN_EXE_baesrv"))
            .config(provider_config(DEAD_URL)),
    );
    let id = fixtures::create_profile_json(
        &s,
        &json!({
            "name": unique_name("sbx"),
            "primary_provider": PROVIDER,
            "available_sandboxes": ["python:3.12", "node:22"],
        }),
    );
    let v = s.admin().get("/admin/v1/sandbox-status").json();
    let item = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["profile_id"] == id.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("no status for {id}: {v}"));
    assert_eq!(
        item,
        json!({"profile_id": id, "images": [
            {"name": "node:22", "status": "pending"},
            {"name": "python:3.12", "status": "pending"},
        ]})
    );
    // A profile without images has no entry.
    let bare = profile(&s, &[]);
    let v = s.admin().get("/admin/v1/sandbox-status").json();
    assert!(!v.to_string().contains(&bare));
}

#[test]
fn admin_lists_paginate_and_reject_bad_parameters() {
    let s = start();
    for _ in 0..5 {
        profile(&s, &[]);
    }
    let page = s.admin().get("/admin/v1/profiles?limit=2").json();
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(all_pages(&s.admin(), "/admin/v1/profiles").len(), 5);
    let mut walked = Vec::new();
    let mut cursor = String::new();
    loop {
        let v = s
            .admin()
            .get(&format!("/admin/v1/profiles?limit=2&cursor={cursor}"))
            .json();
        walked.extend(v["items"].as_array().unwrap().iter().cloned());
        match v["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => break,
        }
    }
    assert_eq!(walked, all_pages(&s.admin(), "/admin/v1/profiles"));
    for path in ["/admin/v1/profiles", "/admin/v1/keys", "/admin/v1/sessions"] {
        for q in ["limit=0", "limit=x", "cursor=zz"] {
            let r = s.admin().get(&format!("{path}?{q}"));
            assert_problem(&r, 400, "bad_request");
        }
    }
    // Unknown admin routes are RFC 7807 404s; admin routes are absent from
    // the client port and client routes from the admin port.
    let r = s.admin().get("/admin/v1/nope");
    assert_problem(&r, 404, "not_found");
    let r = s.admin().get("/api/v1/meta");
    assert_ne!(r.status, 200);
    let r = s.admin().get("/healthz");
    assert_ne!(r.status, 200);
}
