//! Client-port session create and join in-process, with their normative
//! check orders (checklist C-015–C-039; spec 01 §4, seed "Sessions");
//! participants, events and close are in `rest_session_route_flows.rs`.
//! Moved from `io-smol/tests/rest_sessions.rs`, which keeps the cases that
//! need the real binary (id clock, the audit row in SQLite, live streams).

mod common;

use common::*;
use engine::Listener;
use serde_json::{json, Value};

const UNKNOWN_SID: &str = "ses_0123456789abcdef0123456789abcdef";

fn create(h: &mut Harness, ck: &str, body: Value) -> Reply {
    h.reply(
        Listener::Client,
        "POST",
        "/api/v1/sessions",
        Some(ck),
        Some(&body),
    )
}

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

fn subagent_decl(subagents: Value) -> Value {
    json!([{
        "name": "launch_subagent",
        "description": "launch",
        "input_schema": {"type": "object", "properties": {"harness": {"type": "string"}}},
        "image": "bae-subagents:latest",
        "subagents": subagents,
    }])
}

// ---------------------------------------------------------------- create

#[test]
fn c015_create_ids_keys_and_row() {
    let mut h = Harness::new(config());
    let p = h.profile(&[]);
    let (_, ck) = h.key(&p);
    let r = create(&mut h, &ck, json!({"client_version": "1.2.3"}));
    let (sid, skey) = session_of(&r);
    assert!(is_prefixed_hex(&sid, "ses_", 32), "{sid}");
    assert!(is_prefixed_hex(&skey, "bae_ses_", 48), "{skey}");
    let row = h.admin_session(&sid);
    assert_eq!(row["state"], "open");
    assert_eq!(row["client_version"], "1.2.3");
    assert_eq!(row["profile_id"], p.as_str());
    assert!(row["closed_at"].is_null());
    let (sid2, skey2) = session_of(&create(&mut h, &ck, json!({})));
    assert_ne!(sid2, sid);
    assert_ne!(skey2, skey);
}

#[test]
fn c016_create_response_profile_is_sanitized() {
    let mut h = Harness::new(config());
    let p = h.profile(&["get_time"]);
    let (_, ck) = h.key(&p);
    let r = create(&mut h, &ck, json!({}));
    assert_eq!(r.status, 201);
    let profile = &r.json["profile"];
    assert_eq!(profile["id"], p.as_str());
    assert!(profile["name"].as_str().is_some());
    assert_eq!(profile["allowed_tools"], json!(["get_time"]));
    assert_eq!(profile["mcp_servers"], json!([]));
    assert_eq!(
        profile["provider"],
        json!({"provider": "anthropic", "model": "claude-test"})
    );
    assert!(!r.text.contains("auth_token"), "{}", r.text);
    assert!(!r.text.contains("TOKEN"), "{}", r.text);
    assert!(!r.text.contains("base_url"), "{}", r.text);
}

#[test]
fn c017_non_json_create_body_is_400() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let before = h.admin_sessions().len();
    for body in [&b"not json"[..], b"{", b"", b"[]", b"42", b"\"str\""] {
        let r = h.post_raw(
            Listener::Client,
            "/api/v1/sessions",
            &f.client_key,
            Some("application/json"),
            body,
        );
        assert_problem(&r, 400, "bad_request");
    }
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let r = h.post_raw(
            Listener::Client,
            "/api/v1/sessions",
            &f.client_key,
            ct,
            b"{}",
        );
        assert_problem(&r, 400, "bad_request");
    }
    assert_eq!(
        h.admin_sessions().len(),
        before,
        "no row for a rejected body"
    );
}

#[test]
fn c018_auto_compaction_below_1000_is_400_and_creates_no_row() {
    let mut h = Harness::new(config());
    let p = h.profile(&[]);
    let (_, ck) = h.key(&p);
    let before = h.admin_sessions();
    for size in [999, 0, 1] {
        let r = create(
            &mut h,
            &ck,
            json!({"compaction": {"mode": "auto", "size": size}}),
        );
        assert_problem(&r, 400, "bad_request");
    }
    assert_eq!(h.admin_sessions(), before);
    // Checked before the profile/provider: no audit row either.
    let bad = h.profile_on("nope", &[]);
    let (_, bk) = h.key(&bad);
    let r = create(
        &mut h,
        &bk,
        json!({"compaction": {"mode": "auto", "size": 999}}),
    );
    assert_problem(&r, 400, "bad_request");
    assert_eq!(h.admin_sessions(), before);
    let r = create(
        &mut h,
        &ck,
        json!({"compaction": {"mode": "auto", "size": 1000}}),
    );
    assert_eq!(r.status, 201, "{}", r.text);
}

#[test]
fn c019_auto_compaction_without_size_names_the_compaction_config() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    for compaction in [
        json!({"mode": "auto"}),
        json!({"mode": "sometimes"}),
        json!({"mode": "auto", "size": "big"}),
        json!("auto"),
    ] {
        let r = create(&mut h, &f.client_key, json!({ "compaction": compaction }));
        let detail = assert_problem(&r, 400, "bad_request");
        assert!(
            detail.starts_with("invalid compaction config: "),
            "{compaction}: {detail}"
        );
    }
}

#[test]
fn c020_wrongly_typed_field_is_invalid_request_body() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    for body in [
        json!({"tools": "get_time"}),
        json!({"client_version": 5}),
        json!({"tools": [{"name": 7}]}),
        json!({"sandbox_tools": {}}),
        json!({"subagent_tools": 1}),
    ] {
        let r = create(&mut h, &f.client_key, body.clone());
        let detail = assert_problem(&r, 400, "bad_request");
        assert!(
            detail.starts_with("invalid request body: "),
            "{body}: {detail}"
        );
    }
}

#[test]
fn c021_null_compaction_on_create_succeeds() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    for body in [
        json!({"compaction": null}),
        json!({"compaction": {"mode": "client"}}),
        json!({"compaction": {"mode": "client", "prompt": "be brief"}}),
    ] {
        let r = create(&mut h, &f.client_key, body);
        assert_eq!(r.status, 201, "{}", r.text);
    }
}

#[test]
fn c022_tool_missing_from_allowlist_is_403() {
    let mut h = Harness::new(config());
    let p = h.profile(&["get_time"]);
    let (_, ck) = h.key(&p);
    let before = h.admin_sessions().len();
    let r = create(
        &mut h,
        &ck,
        json!({"tools": [tool("get_time"), tool("rm_rf")]}),
    );
    let detail = assert_problem(&r, 403, "tool_not_allowed");
    assert!(detail.contains("rm_rf"), "{detail}");
    assert_eq!(h.admin_sessions().len(), before, "no session row on 403");
    let r = create(&mut h, &ck, json!({"tools": [tool("get_time")]}));
    assert_eq!(r.status, 201);
}

#[test]
fn c023_empty_allowlist_rejects_any_tool() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let r = create(&mut h, &f.client_key, json!({"tools": [tool("get_time")]}));
    assert_problem(&r, 403, "tool_not_allowed");
    let r = create(&mut h, &f.client_key, json!({"tools": []}));
    assert_eq!(r.status, 201);
}

#[test]
fn c024_sandbox_tools_are_not_checked_against_allowed_tools() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let sandbox_tool = json!({
        "name": "run_shell_command",
        "description": "run",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    });
    let r = create(
        &mut h,
        &f.client_key,
        json!({"sandbox_tools": [sandbox_tool]}),
    );
    let (sid, _) = session_of(&r);
    let evts = h.admin_events(&sid);
    assert_eq!(
        evts[0]["payload"]["sandbox_tools"],
        json!(["run_shell_command"])
    );
}

#[test]
fn c025_reserved_tool_name_is_422() {
    let mut h = Harness::new(config());
    let f = h.fix(&["remote_subagent_status"]);
    let before = h.admin_sessions().len();
    for body in [
        json!({"tools": [tool("remote_subagent_status")]}),
        json!({"sandbox_tools": [tool("remote_subagent_status")]}),
    ] {
        let r = create(&mut h, &f.client_key, body);
        assert_problem(&r, 422, "reserved_tool_name");
    }
    assert_eq!(h.admin_sessions().len(), before);
}

#[test]
fn c026_unresolvable_primary_is_422_with_an_audit_session() {
    let mut h = Harness::new(config());
    let p = h.profile_on("no-such-provider", &["t"]);
    let (kid, ck) = h.key(&p);
    let before: Vec<Value> = h.admin_sessions().iter().map(|r| r["id"].clone()).collect();
    let r = create(
        &mut h,
        &ck,
        json!({"tools": [tool("t")], "client_version": "9"}),
    );
    assert_problem(&r, 422, "primary_provider_unavailable");
    let after = h.admin_sessions();
    let new: Vec<&Value> = after
        .iter()
        .filter(|r| !before.contains(&r["id"]))
        .collect();
    assert_eq!(new.len(), 1, "exactly one audit row: {new:?}");
    let audit = new[0].clone();
    assert_eq!(audit["state"], "error");
    assert_eq!(audit["profile_id"], p.as_str());
    assert!(audit["closed_at"].is_null(), "{audit}");
    let audit_id = audit["id"].as_str().unwrap();
    assert!(is_prefixed_hex(audit_id, "ses_", 32));
    let evts = h.admin_events(audit_id);
    assert_eq!(evts.len(), 1, "{evts:?}");
    assert_eq!(evts[0]["event_type"], "session.error");
    assert_eq!(evts[0]["client_key_id"], kid.as_str());
    assert_eq!(
        evts[0]["payload"],
        json!({"reason": "primary_provider_unavailable", "profile_id": p, "primary_provider": "no-such-provider"})
    );
    // Every attempt is audited (never deduplicated).
    let r = create(&mut h, &ck, json!({}));
    assert_problem(&r, 422, "primary_provider_unavailable");
    let rows = h.admin_sessions();
    assert_eq!(rows.len(), after.len() + 1);
    // No session key was minted for audit rows (keys written to the store).
    for row in rows.iter().filter(|r| r["state"] == "error") {
        let minted = h
            .store
            .keys
            .iter()
            .filter(|k| k.role == engine::store::KeyRole::Session && k.name == row["id"])
            .count();
        assert_eq!(minted, 0, "{row}");
    }
}

#[test]
fn c026_join_with_unresolvable_primary_audits_and_leaves_the_session_alone() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let path = format!("/admin/v1/profiles/{}", f.profile);
    let (s, b) = h.admin(
        "PUT",
        &path,
        Some(&json!({"name": "renamed", "primary_provider": "gone"})),
    );
    assert_eq!(s, 200, "{b}");
    let before = h.admin_sessions().len();
    let (kid2, ck2) = h.key(&f.profile);
    let r = join(&mut h, &f.sid, &ck2, json!({}));
    assert_problem(&r, 422, "primary_provider_unavailable");
    let rows = h.admin_sessions();
    assert_eq!(rows.len(), before + 1);
    let audit = rows.iter().find(|r| r["state"] == "error").unwrap();
    assert_ne!(audit["id"], f.sid.as_str());
    let ev = h.admin_events(audit["id"].as_str().unwrap());
    assert_eq!(ev[0]["payload"]["reason"], "primary_provider_unavailable");
    assert_eq!(ev[0]["client_key_id"], kid2.as_str());
    assert_eq!(h.admin_session(&f.sid)["state"], "open");
    assert_eq!(types_of(&h.events(&f.sid, &f.skey)), ["session.open"]);
}

#[test]
fn c027_session_open_payload_names_only() {
    let mut h = Harness::new(config());
    let f = h.fix(&["a", "b"]);
    let r = create(
        &mut h,
        &f.client_key,
        json!({
            "client_version": "2.0",
            "tools": [tool("a"), {"name": "b"}],
            "sandbox_tools": [tool("sb")],
            "subagent_tools": subagent_decl(json!([
                {"harness": "claude", "command_template": "claude --model {model} --print", "prompt_via": "stdin", "timeout_secs": 60}
            ])),
        }),
    );
    let (sid, skey) = session_of(&r);
    let evts = h.events(&sid, &skey);
    assert_eq!(types_of(&evts), ["session.open"]);
    assert_eq!(
        evts[0]["payload"],
        json!({"client_version": "2.0", "tools": ["a", "b"], "sandbox_tools": ["sb"], "subagent_tools": ["launch_subagent"]})
    );
    assert_eq!(evts[0]["client_key_id"], f.key_id.as_str());
    // client_version is null when omitted.
    let evts = h.events(&f.sid, &f.skey);
    assert_eq!(
        evts[0]["payload"],
        json!({"client_version": null, "tools": [], "sandbox_tools": [], "subagent_tools": []})
    );
}

#[test]
fn c028_duplicate_subagent_harness_is_422() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let decl = subagent_decl(json!([
        {"harness": "claude", "command_template": "claude {prompt}", "prompt_via": "arg", "timeout_secs": 60},
        {"harness": "claude", "command_template": "claude2 --print", "prompt_via": "stdin", "timeout_secs": 60}
    ]));
    let r = create(&mut h, &f.client_key, json!({ "subagent_tools": decl }));
    assert_problem(&r, 422, "invalid_subagent_tools");
}

#[test]
fn c029_prompt_placeholder_must_match_prompt_via() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    for sub in [
        json!({"harness": "claude", "command_template": "claude --print", "prompt_via": "arg", "timeout_secs": 60}),
        json!({"harness": "claude", "command_template": "claude {prompt}", "prompt_via": "stdin", "timeout_secs": 60}),
    ] {
        let body = json!({ "subagent_tools": subagent_decl(json!([sub])) });
        let r = create(&mut h, &f.client_key, body.clone());
        assert_problem(&r, 422, "invalid_subagent_tools");
        let r = join(&mut h, &f.sid, &f.client_key, body);
        assert_problem(&r, 422, "invalid_subagent_tools");
    }
}

#[test]
fn c030_unknown_top_level_fields_are_ignored() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let r = create(
        &mut h,
        &f.client_key,
        json!({"future_field": {"x": [1, 2]}, "another": null, "client_version": "1"}),
    );
    let (sid, skey) = session_of(&r);
    let evts = h.events(&sid, &skey);
    assert_eq!(evts[0]["payload"]["client_version"], "1");
    assert!(!evts[0]["payload"].to_string().contains("future_field"));
}

#[test]
fn create_check_order_is_normative() {
    // spec 01 §4.1: 401 > 400 (body) > 400 (compaction size) > 422 profile/
    // provider > 422 reserved > 403 allowlist > 422 subagent declarations.
    let mut h = Harness::new(config());
    let p = h.profile(&[]);
    let (_, ck) = h.key(&p);
    let bad_sub = subagent_decl(json!([
        {"harness": "x", "command_template": "x", "prompt_via": "arg", "timeout_secs": 1}
    ]));
    let r = create(
        &mut h,
        &ck,
        json!({"tools": [tool("nope")], "compaction": {"mode": "auto", "size": 5}}),
    );
    assert_problem(&r, 400, "bad_request");
    let r = create(
        &mut h,
        &ck,
        json!({"tools": [tool("nope"), tool("remote_subagent_status")]}),
    );
    assert_problem(&r, 422, "reserved_tool_name");
    let r = create(
        &mut h,
        &ck,
        json!({"tools": [tool("nope")], "subagent_tools": bad_sub}),
    );
    assert_problem(&r, 403, "tool_not_allowed");
    let np = h.profile_on("missing", &[]);
    let (_, nk) = h.key(&np);
    let r = create(
        &mut h,
        &nk,
        json!({"tools": [tool("remote_subagent_status"), tool("nope")]}),
    );
    assert_problem(&r, 422, "primary_provider_unavailable");
}

// ------------------------------------------------------------------ join

#[test]
fn c031_compaction_on_join_is_400_even_null() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    for compaction in [
        Value::Null,
        json!({"mode": "client"}),
        json!({"mode": "auto", "size": 5000}),
    ] {
        let r = join(
            &mut h,
            &f.sid,
            &f.client_key,
            json!({ "compaction": compaction }),
        );
        let detail = assert_problem(&r, 400, "bad_request");
        assert_eq!(
            detail,
            "compaction is a session-level setting fixed at creation and cannot be set on join"
        );
    }
    assert_eq!(types_of(&h.events(&f.sid, &f.skey)), ["session.open"]);
}

#[test]
fn c032_join_compaction_rejection_precedes_session_lookup() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let r = join(
        &mut h,
        UNKNOWN_SID,
        &f.client_key,
        json!({"compaction": null}),
    );
    let detail = assert_problem(&r, 400, "bad_request");
    assert!(detail.starts_with("compaction is a session-level setting"));
    let other = h.fix(&[]);
    let r = join(
        &mut h,
        &f.sid,
        &other.client_key,
        json!({"compaction": null}),
    );
    assert_problem(&r, 400, "bad_request");
}

#[test]
fn c033_join_with_invalid_key_is_401_before_compaction_check() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    for bearer in [
        "bae_000000000000000000000000000000000000000000000000",
        f.skey.as_str(),
    ] {
        let r = join(&mut h, &f.sid, bearer, json!({"compaction": null}));
        assert_problem(&r, 401, "unauthorized");
    }
    let path = format!("/api/v1/sessions/{}/join", f.sid);
    let r = h.reply(
        Listener::Client,
        "POST",
        &path,
        None,
        Some(&json!({"compaction": null})),
    );
    assert_problem(&r, 401, "unauthorized");
}

#[test]
fn c034_join_unknown_session_is_404() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    for sid in [UNKNOWN_SID, "garbage", "ses_XYZ"] {
        let r = join(&mut h, sid, &f.client_key, json!({}));
        assert_problem(&r, 404, "not_found");
    }
}

#[test]
fn c035_join_closed_or_error_session_is_409() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    assert_eq!(delete(&mut h, &f.sid, &f.skey).status, 200);
    let r = join(&mut h, &f.sid, &f.client_key, json!({}));
    assert_eq!(
        assert_problem(&r, 409, "session_closed"),
        "session is already closed"
    );
    // State (step 5) precedes the profile check (step 6).
    let other = h.fix(&[]);
    let r = join(&mut h, &f.sid, &other.client_key, json!({}));
    assert_problem(&r, 409, "session_closed");
    let e = h.fix(&[]);
    make_error_session(&mut h, &e);
    let r = join(&mut h, &e.sid, &e.client_key, json!({}));
    assert_eq!(
        assert_problem(&r, 409, "session_closed"),
        "session is already error"
    );
}

#[test]
fn c036_join_with_another_profiles_key_is_403_and_logs_nothing() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let other = h.fix(&["t"]);
    let keys_before = h.store.keys.len();
    // Mismatch (step 6) precedes the tool checks (step 9).
    for body in [json!({}), json!({"tools": [tool("nope")]})] {
        let r = join(&mut h, &f.sid, &other.client_key, body);
        assert_problem(&r, 403, "profile_mismatch");
    }
    assert_eq!(types_of(&h.events(&f.sid, &f.skey)), ["session.open"]);
    assert_eq!(h.store.keys.len(), keys_before);
}

#[test]
fn c037_join_mints_a_distinct_working_key() {
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let (_, ck2) = h.key(&f.profile);
    let r = join(&mut h, &f.sid, &ck2, json!({}));
    let (sid, k2) = session_of(&r);
    assert_eq!(sid, f.sid);
    assert!(is_prefixed_hex(&k2, "bae_ses_", 48));
    assert_ne!(k2, f.skey);
    assert_eq!(r.json["profile"]["id"], f.profile.as_str());
    // The creator may join its own session too: yet another key.
    let (_, k3) = session_of(&join(&mut h, &f.sid, &f.client_key, json!({})));
    assert_ne!(k3, f.skey);
    assert_ne!(k3, k2);
    let path = format!("/api/v1/sessions/{}/participants", f.sid);
    for k in [&f.skey, &k2, &k3] {
        assert_eq!(h.client("GET", &path, k, None).0, 200);
    }
}

#[test]
fn c038_join_event_is_attributed_to_the_joiner_with_its_tools() {
    let mut h = Harness::new(config());
    let f = h.fix(&["a", "b"]);
    let (sid, _) = session_of(&create(
        &mut h,
        &f.client_key,
        json!({"tools": [tool("a")]}),
    ));
    let (kid2, ck2) = h.key(&f.profile);
    let r = join(
        &mut h,
        &sid,
        &ck2,
        json!({"client_version": "j1", "tools": [tool("b")]}),
    );
    let (_, k2) = session_of(&r);
    let evts = h.events(&sid, &k2);
    assert_eq!(types_of(&evts), ["session.open", "session.join"]);
    assert_eq!(evts[1]["client_key_id"], kid2.as_str());
    assert_eq!(
        evts[1]["payload"],
        json!({"client_version": "j1", "tools": ["b"], "sandbox_tools": [], "subagent_tools": []})
    );
    assert_eq!(evts[0]["payload"]["tools"], json!(["a"]));
}

#[test]
fn c039_joiner_tools_are_checked_independently() {
    let mut h = Harness::new(config());
    let f = h.fix(&["a"]);
    let (sid, _) = session_of(&create(
        &mut h,
        &f.client_key,
        json!({"tools": [tool("a")]}),
    ));
    let (_, ck2) = h.key(&f.profile);
    let r = join(&mut h, &sid, &ck2, json!({"tools": [tool("a"), tool("b")]}));
    assert_problem(&r, 403, "tool_not_allowed");
    let r = join(
        &mut h,
        &sid,
        &ck2,
        json!({"tools": [tool("remote_subagent_status")]}),
    );
    assert_problem(&r, 422, "reserved_tool_name");
    let r = join(&mut h, &sid, &ck2, json!({"tools": [tool("a")]}));
    assert_eq!(r.status, 201);
}

#[test]
fn join_check_order_is_normative() {
    // 401 > 400 body > 400 compaction > 404 > 409 > 403 mismatch > 422 > 403 tools.
    let mut h = Harness::new(config());
    let f = h.fix(&[]);
    let path = format!("/api/v1/sessions/{}/join", f.sid);
    let r = h.post_raw(
        Listener::Client,
        &path,
        &f.client_key,
        Some("application/json"),
        b"{bad",
    );
    assert_problem(&r, 400, "bad_request");
    let unknown = format!("/api/v1/sessions/{UNKNOWN_SID}/join");
    let r = h.post_raw(
        Listener::Client,
        &unknown,
        &f.client_key,
        Some("text/plain"),
        b"{}",
    );
    assert_problem(&r, 400, "bad_request");
    let r = join(
        &mut h,
        UNKNOWN_SID,
        &f.client_key,
        json!({"tools": [tool("x")]}),
    );
    assert_problem(&r, 404, "not_found");
}
