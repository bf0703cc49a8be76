//! The admin API in-process (checklist C-187–C-194; spec 03 §1–§2):
//! authentication, profiles and the sandbox and subagent gauges of
//! `/metrics`; keys, revocation and session lists are in
//! `admin_key_flows.rs`. Moved from `io-smol/tests/admin_api.rs`, which
//! keeps what needs the binary (the config file's registries and their
//! redaction, disabled auth from the environment, sandbox pre-pulls, a
//! live stream ended by a revocation).

mod common;

use common::admin::*;
use common::*;
use engine::Listener;
use serde_json::{json, Value};

/// Every admin route: (method, path, body). Ids are real where that matters.
fn admin_routes(pro: &str, key_id: &str, sid: &str) -> Vec<(&'static str, String, Value)> {
    vec![
        ("GET", "/admin/v1/profiles".into(), Value::Null),
        ("POST", "/admin/v1/profiles".into(), profile_body("x")),
        ("GET", format!("/admin/v1/profiles/{pro}"), Value::Null),
        (
            "PUT",
            format!("/admin/v1/profiles/{pro}"),
            profile_body("y"),
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

#[test]
fn c187_admin_routes_need_the_admin_key_and_nothing_changes_without_it() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let before_profiles = admin_list(&mut h, "/admin/v1/profiles");
    let before_keys = admin_list(&mut h, "/admin/v1/keys");
    let wrong = "bae_admin_000000000000000000000000000000000000000000000001";
    for (method, path, body) in admin_routes(&f.profile, &f.key_id, &f.sid) {
        for token in [None, Some(wrong)] {
            let r = send(&mut h, token, method, &path, &body);
            assert_problem(&r, 401, "unauthorized");
        }
    }
    assert_eq!(admin_list(&mut h, "/admin/v1/profiles"), before_profiles);
    assert_eq!(admin_list(&mut h, "/admin/v1/keys"), before_keys);
    assert_eq!(h.admin_session(&f.sid)["state"], "open");
}

#[test]
fn c188_client_and_session_keys_are_401_on_the_admin_port() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    for bearer in [&f.client_key, &f.skey] {
        for (method, path, body) in admin_routes(&f.profile, &f.key_id, &f.sid) {
            let r = send(&mut h, Some(bearer), method, &path, &body);
            assert_problem(&r, 401, "unauthorized");
        }
    }
    // The client key is still active (the DELETE above was refused).
    open(&mut h, &f.client_key);
}

#[test]
fn c189_create_profile_returns_201_id_name_created_at() {
    let mut h = Harness::new(config());
    let r = adm(
        &mut h,
        "POST",
        "/admin/v1/profiles",
        json!({
            "name": "main-profile",
            "primary_provider": "main",
            "fallback_providers": ["b", "c"],
            "mcp_servers": ["fs"],
            "allowed_tools": ["get_time"],
            "available_sandboxes": ["python:3.12"],
            "unknown_member": 5,
        }),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let v = r.json;
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["created_at", "id", "name"]);
    let id = v["id"].as_str().unwrap();
    assert!(is_prefixed_hex(id, "pro_", 32), "{id}");
    assert_eq!(v["name"], "main-profile");
    assert!(is_timestamp(v["created_at"].as_str().unwrap()));
    let p = adm(
        &mut h,
        "GET",
        &format!("/admin/v1/profiles/{id}"),
        Value::Null,
    )
    .json;
    assert_eq!(
        p,
        json!({
            "id": id,
            "name": "main-profile",
            "primary_provider": "main",
            "fallback_providers": ["b", "c"],
            "mcp_servers": ["fs"],
            "allowed_tools": ["get_time"],
            "available_sandboxes": ["python:3.12"],
            "created_at": v["created_at"],
            "updated_at": v["created_at"],
        })
    );
    let id2 = create_profile(&mut h, profile_body("d"));
    let p2 = adm(
        &mut h,
        "GET",
        &format!("/admin/v1/profiles/{id2}"),
        Value::Null,
    )
    .json;
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
    let mut h = Harness::new(config());
    create_profile(&mut h, profile_body("dup"));
    let r = adm(&mut h, "POST", "/admin/v1/profiles", profile_body("dup"));
    let detail = assert_problem(&r, 409, "duplicate_name");
    assert_eq!(detail, "a profile with that name already exists");
    // Soft-deleted names stay taken.
    let id = create_profile(&mut h, profile_body("gone"));
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
    let r = adm(&mut h, "POST", "/admin/v1/profiles", profile_body("gone"));
    assert_problem(&r, 409, "duplicate_name");
    // Renaming onto a taken name is 409 as well.
    let other = create_profile(&mut h, profile_body("o"));
    let r = adm(
        &mut h,
        "PUT",
        &format!("/admin/v1/profiles/{other}"),
        profile_body("dup"),
    );
    assert_problem(&r, 409, "duplicate_name");
}

#[test]
fn c191_invalid_profile_bodies_are_400() {
    let mut h = Harness::new(config());
    let before = admin_list(&mut h, "/admin/v1/profiles").len();
    let cases = [
        (json!({"name": "  ", "primary_provider": "p"}), None),
        (json!({"name": "", "primary_provider": "p"}), None),
        (json!({"primary_provider": "p"}), None),
        (json!({"name": 5, "primary_provider": "p"}), None),
        (json!({"name": "n1"}), None),
        (json!({"name": "n2", "primary_provider": " "}), None),
        (
            json!({"name": "n3", "primary_provider": "p", "fallback_providers": "x"}),
            Some("fallback_providers must be an array"),
        ),
        (
            json!({"name": "n4", "primary_provider": "p", "fallback_providers": ["ok", 1]}),
            Some("fallback_providers[1] must be a string (a bae-config.toml registry name)"),
        ),
        (
            json!({"name": "n5", "primary_provider": "p", "mcp_servers": [null]}),
            Some("mcp_servers[0] must be a string (a bae-config.toml registry name)"),
        ),
        (
            json!({"name": "n6", "primary_provider": "p", "available_sandboxes": {}}),
            Some("available_sandboxes must be an array"),
        ),
        (
            json!({"name": "n7", "primary_provider": "p", "allowed_tools": "t"}),
            None,
        ),
        (json!([1, 2]), None),
        (json!("profile"), None),
    ];
    for (body, detail) in cases {
        let r = adm(&mut h, "POST", "/admin/v1/profiles", body.clone());
        let got = assert_problem(&r, 400, "bad_request");
        if let Some(d) = detail {
            assert_eq!(got, d, "{body}");
        }
    }
    for raw in [&b"{nope"[..], b"", b"\xff\xfe\xfd"] {
        let r = h.post_raw(
            Listener::Admin,
            "/admin/v1/profiles",
            ADMIN_KEY,
            Some("application/json"),
            raw,
        );
        assert_problem(&r, 400, "bad_request");
    }
    assert_eq!(admin_list(&mut h, "/admin/v1/profiles").len(), before);
}

#[test]
fn c192_deleted_profile_is_404() {
    let mut h = Harness::new(config());
    let id = create_profile(&mut h, profile_body("d"));
    let path = format!("/admin/v1/profiles/{id}");
    assert_eq!(adm(&mut h, "DELETE", &path, Value::Null).status, 204);
    let r = adm(&mut h, "GET", &path, Value::Null);
    assert_eq!(
        assert_problem(&r, 404, "not_found"),
        format!("no profile {id}")
    );
    let r = adm(&mut h, "PUT", &path, profile_body("e"));
    assert_problem(&r, 404, "not_found");
    let r = adm(&mut h, "DELETE", &path, Value::Null);
    assert_problem(&r, 404, "not_found");
    assert!(!admin_list(&mut h, "/admin/v1/profiles")
        .iter()
        .any(|p| p["id"] == id.as_str()));
    for id in [UNKNOWN_PRO, "garbage"] {
        let r = adm(
            &mut h,
            "GET",
            &format!("/admin/v1/profiles/{id}"),
            Value::Null,
        );
        assert_problem(&r, 404, "not_found");
    }
}

#[test]
fn c193_put_replaces_everything_and_bumps_updated_at() {
    let mut h = Harness::new(config());
    let id = create_profile(
        &mut h,
        json!({
            "name": "full",
            "primary_provider": "a",
            "fallback_providers": ["b"],
            "mcp_servers": ["m"],
            "allowed_tools": ["t"],
            "available_sandboxes": ["img"],
        }),
    );
    let path = format!("/admin/v1/profiles/{id}");
    let before = adm(&mut h, "GET", &path, Value::Null).json;
    h.advance(20);
    let r = adm(
        &mut h,
        "PUT",
        &path,
        json!({"name": "renamed", "primary_provider": "z"}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let after = r.json;
    assert_eq!(after["id"], id.as_str());
    assert_eq!(after["name"], "renamed");
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
    assert_eq!(adm(&mut h, "GET", &path, Value::Null).json, after);
    // Keeping the same name on PUT is fine.
    let r = adm(
        &mut h,
        "PUT",
        &path,
        json!({"name": "renamed", "primary_provider": "z", "allowed_tools": ["t2"]}),
    );
    assert_eq!(r.status, 200);
    let r = adm(
        &mut h,
        "PUT",
        &path,
        json!({"name": "", "primary_provider": "z"}),
    );
    assert_problem(&r, 400, "bad_request");
}

#[test]
fn c193_put_allowed_tools_applies_to_later_opens() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let body = json!({"tools": [tool("t")]});
    let r = h.reply(
        Listener::Client,
        "POST",
        "/api/v1/sessions",
        Some(&f.client_key),
        Some(&body),
    );
    assert_problem(&r, 403, "tool_not_allowed");
    let path = format!("/admin/v1/profiles/{}", f.profile);
    let name = adm(&mut h, "GET", &path, Value::Null).json["name"].clone();
    let r = adm(
        &mut h,
        "PUT",
        &path,
        json!({"name": name, "primary_provider": "main", "allowed_tools": ["t"]}),
    );
    assert_eq!(r.status, 200);
    let (s, o) = h.client("POST", "/api/v1/sessions", &f.client_key, Some(&body));
    assert_eq!(s, 201, "{o}");
}

#[test]
fn c194_profile_in_use_until_keys_are_revoked() {
    let mut h = Harness::new(config());
    let p = h.profile(&[]);
    let (k1, _) = h.key(&p);
    let (k2, _) = h.key(&p);
    let path = format!("/admin/v1/profiles/{p}");
    let r = adm(&mut h, "DELETE", &path, Value::Null);
    assert_eq!(
        assert_problem(&r, 409, "profile_in_use"),
        "profile has 2 active client key(s); revoke them before deleting"
    );
    assert_eq!(
        adm(
            &mut h,
            "DELETE",
            &format!("/admin/v1/keys/{k1}"),
            Value::Null
        )
        .status,
        204
    );
    let r = adm(&mut h, "DELETE", &path, Value::Null);
    assert_problem(&r, 409, "profile_in_use");
    assert_eq!(
        adm(
            &mut h,
            "DELETE",
            &format!("/admin/v1/keys/{k2}"),
            Value::Null
        )
        .status,
        204
    );
    let r = adm(&mut h, "DELETE", &path, Value::Null);
    assert_eq!(r.status, 204);
    assert!(r.text.is_empty());
    assert_problem(&adm(&mut h, "GET", &path, Value::Null), 404, "not_found");
}

/// A gauge's value in `GET /metrics` (spec 04 §7.2).
fn gauge(h: &mut Harness, name: &str) -> u64 {
    let (status, body) = h.admin("GET", "/metrics", None);
    assert_eq!(status, 200);
    let text = body.as_str().unwrap_or_default().to_string();
    (text.lines())
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// Answers every queued container command the way a healthy engine would,
/// except subagent execs, which keep running; returns how many were left
/// running.
fn answer_sandbox(h: &mut Harness) -> usize {
    use engine::sandbox::{SandboxCommand as C, SandboxReply as R};
    let mut running = 0;
    while let Some(c) = h.sandbox.pop_front() {
        let (op, reply) = match c {
            C::EnsureImage { op, .. } => (op, R::Ensured(Ok(()))),
            C::Start { op, .. } => (op, R::Started(Ok("c0ffee".into()))),
            C::Stop { op, .. } => (op, R::Stopped(Ok(()))),
            C::Exec { .. } => {
                running += 1;
                continue;
            }
            C::Kill { .. } => continue,
        };
        h.input(engine::Input::Sandbox { op, reply });
    }
    running
}

#[test]
fn sandbox_and_subagent_gauges_follow_a_session_until_it_closes() {
    let mut h = Harness::new(config());
    let profile = json!({"name": "sb", "primary_provider": "main", "available_sandboxes": ["img"]});
    let subagents = json!({"subagent_tools": [{
        "name": "launch_subagent",
        "description": "Launch a CLI subagent.",
        "input_schema": {"type": "object"},
        "image": "img",
        "subagents": [{"harness": "claude", "command_template": "claude --model {model}", "prompt_via": "stdin"}]
    }]});
    let live = h.open_driver_with(&profile, subagents);
    answer_sandbox(&mut h);
    assert_eq!(gauge(&mut h, "bae_sandboxes_live"), 0);

    let start = call(2, "session.startRemoteSandbox", json!({"image": "img"}));
    let conn = h.rpc_start(&live.sid, &live.a.session_key, &start);
    answer_sandbox(&mut h);
    let frames = h.frames(conn);
    assert!(
        frames.last().is_some_and(|f| f.get("result").is_some()),
        "{frames:?}"
    );
    assert_eq!(gauge(&mut h, "bae_sandboxes_live"), 1);
    assert_eq!(gauge(&mut h, "bae_subagents_active"), 0);

    // The model launches a subagent; its exec keeps running past the turn.
    let input = json!({"harness": "claude", "model": "m", "prompt": "p"});
    h.replies.push_back(anthropic_tool_use(json!([
        {"type": "tool_use", "id": "tu_1", "name": "launch_subagent", "input": input}
    ])));
    h.replies.push_back(anthropic_text("launched"));
    let (_, terminal) = h.send(&live.sid, &live.a.session_key, json!("go"));
    let evs = result_events(&terminal);
    assert_eq!(of_type(&evs, "tool.result").len(), 1, "{evs:?}");
    assert_eq!(answer_sandbox(&mut h), 1);
    assert_eq!(gauge(&mut h, "bae_sandboxes_live"), 1);
    assert_eq!(gauge(&mut h, "bae_subagents_active"), 1);

    // Closing cancels the subagent and stops the container (C-148, C-164).
    let path = format!("/api/v1/sessions/{}", live.sid);
    let (s, b) = h.client("DELETE", &path, &live.a.session_key, None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(gauge(&mut h, "bae_subagents_active"), 0);
    assert_eq!(gauge(&mut h, "bae_sandboxes_live"), 0);
    answer_sandbox(&mut h);
    assert_eq!(gauge(&mut h, "bae_sandboxes_live"), 0);
}
