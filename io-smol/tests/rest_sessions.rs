//! Client-port REST session endpoints over the real binary: create, join,
//! participants, events, close, with their normative check orders
//! (README checklist C-015–C-048; spec 01 §4, seed "Sessions").

mod rest_support;

use std::time::Duration;

use rest_support::*;
use serde_json::{json, Value};
use testkit::fixtures::{self, open_session};
use testkit::Server;

const UNKNOWN_SID: &str = "ses_0123456789abcdef0123456789abcdef";

fn create(s: &Server, ck: &str, body: Value) -> testkit::Response {
    s.client().bearer(ck).post_json("/api/v1/sessions", &body)
}

fn join(s: &Server, sid: &str, ck: &str, body: Value) -> testkit::Response {
    s.client()
        .bearer(ck)
        .post_json(&format!("/api/v1/sessions/{sid}/join"), &body)
}

fn delete(s: &Server, sid: &str, skey: &str) -> testkit::Response {
    s.client()
        .bearer(skey)
        .delete(&format!("/api/v1/sessions/{sid}"))
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

/// Moves a session to `error` through provider exhaustion (the provider
/// base URL refuses connections).
fn make_error_session(s: &Server, f: &Fix) {
    register(s, &f.sid, &f.skey);
    let (_, t) = fixtures::send_message(s, &f.sid, &f.skey, json!("hello"));
    assert!(t.get("result").is_some(), "{t}");
    assert_eq!(admin_session(s, &f.sid)["state"], "error");
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
fn c016_create_response_profile_is_sanitized() {
    let s = start();
    let p = fixtures::create_profile_json(
        &s,
        &json!({
            "name": fixtures::unique_name("san"),
            "primary_provider": PROVIDER,
            "allowed_tools": ["get_time"],
            "mcp_servers": [],
        }),
    );
    let (_, ck) = key(&s, &p);
    let r = create(&s, &ck, json!({}));
    r.assert_status(201);
    let profile = &r.json()["profile"];
    assert_eq!(profile["id"], p.as_str());
    assert!(profile["name"].as_str().is_some());
    assert_eq!(profile["allowed_tools"], json!(["get_time"]));
    assert_eq!(profile["mcp_servers"], json!([]));
    assert_eq!(
        profile["provider"],
        json!({"provider": "anthropic", "model": "mock-model"})
    );
    let text = r.text();
    assert!(!text.contains("auth_token"), "{text}");
    assert!(!text.contains(PROVIDER_TOKEN), "{text}");
    assert!(!text.contains("base_url"), "{text}");
}

#[test]
fn c017_non_json_create_body_is_400() {
    let s = start();
    let f = fix(&s, &[]);
    let before = admin_sessions(&s).len();
    let c = s.client();
    for body in [&b"not json"[..], b"{", b"", b"[]", b"42", b"\"str\""] {
        let r = post_raw(
            &c,
            "/api/v1/sessions",
            &f.client_key,
            Some("application/json"),
            body,
        );
        assert_problem(&r, 400, "bad_request");
    }
    // Missing or wrong Content-Type with an otherwise valid body.
    for ct in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let r = post_raw(&c, "/api/v1/sessions", &f.client_key, ct, b"{}");
        assert_problem(&r, 400, "bad_request");
    }
    assert_eq!(
        admin_sessions(&s).len(),
        before,
        "no row for a rejected body"
    );
}

#[test]
fn c018_auto_compaction_below_1000_is_400_and_creates_no_row() {
    let s = start();
    let p = profile(&s, &[]);
    let (_, ck) = key(&s, &p);
    let before = admin_sessions(&s);
    for size in [999, 0, 1] {
        let r = create(
            &s,
            &ck,
            json!({"compaction": {"mode": "auto", "size": size}}),
        );
        assert_problem(&r, 400, "bad_request");
    }
    assert_eq!(admin_sessions(&s), before, "admin session list unchanged");
    // Checked before the profile/provider: a profile whose primary is not
    // configured still answers 400 and records no audit row.
    let bad = fixtures::create_profile(&s, &fixtures::unique_name("np"), "nope", &[], &[]);
    let (_, bk) = key(&s, &bad);
    let r = create(
        &s,
        &bk,
        json!({"compaction": {"mode": "auto", "size": 999}}),
    );
    assert_problem(&r, 400, "bad_request");
    assert_eq!(admin_sessions(&s), before);
    // 1000 is accepted.
    create(
        &s,
        &ck,
        json!({"compaction": {"mode": "auto", "size": 1000}}),
    )
    .assert_status(201);
}

#[test]
fn c019_auto_compaction_without_size_names_the_compaction_config() {
    let s = start();
    let f = fix(&s, &[]);
    for compaction in [
        json!({"mode": "auto"}),
        json!({"mode": "sometimes"}),
        json!({"mode": "auto", "size": "big"}),
        json!("auto"),
    ] {
        let r = create(&s, &f.client_key, json!({ "compaction": compaction }));
        let detail = assert_problem(&r, 400, "bad_request");
        assert!(
            detail.starts_with("invalid compaction config: "),
            "{compaction}: {detail}"
        );
    }
}

#[test]
fn c020_wrongly_typed_field_is_invalid_request_body() {
    let s = start();
    let f = fix(&s, &[]);
    for body in [
        json!({"tools": "get_time"}),
        json!({"client_version": 5}),
        json!({"tools": [{"name": 7}]}),
        json!({"sandbox_tools": {}}),
        json!({"subagent_tools": 1}),
    ] {
        let r = create(&s, &f.client_key, body.clone());
        let detail = assert_problem(&r, 400, "bad_request");
        assert!(
            detail.starts_with("invalid request body: "),
            "{body}: {detail}"
        );
    }
}

#[test]
fn c021_null_compaction_on_create_succeeds() {
    let s = start();
    let f = fix(&s, &[]);
    create(&s, &f.client_key, json!({"compaction": null})).assert_status(201);
    create(&s, &f.client_key, json!({"compaction": {"mode": "client"}})).assert_status(201);
    create(
        &s,
        &f.client_key,
        json!({"compaction": {"mode": "client", "prompt": "be brief"}}),
    )
    .assert_status(201);
}

#[test]
fn c022_tool_missing_from_allowlist_is_403() {
    let s = start();
    let p = profile(&s, &["get_time"]);
    let (_, ck) = key(&s, &p);
    let before = admin_sessions(&s).len();
    let r = create(&s, &ck, json!({"tools": [tool("get_time"), tool("rm_rf")]}));
    let detail = assert_problem(&r, 403, "tool_not_allowed");
    assert!(detail.contains("rm_rf"), "{detail}");
    assert_eq!(admin_sessions(&s).len(), before, "no session row on 403");
    create(&s, &ck, json!({"tools": [tool("get_time")]})).assert_status(201);
}

#[test]
fn c023_empty_allowlist_rejects_any_tool() {
    let s = start();
    let f = fix(&s, &[]);
    let r = create(&s, &f.client_key, json!({"tools": [tool("get_time")]}));
    assert_problem(&r, 403, "tool_not_allowed");
    create(&s, &f.client_key, json!({"tools": []})).assert_status(201);
}

#[test]
fn c024_sandbox_tools_are_not_checked_against_allowed_tools() {
    let s = start();
    let f = fix(&s, &[]);
    let sandbox_tool = json!({
        "name": "run_shell_command",
        "description": "run",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    });
    let r = create(&s, &f.client_key, json!({"sandbox_tools": [sandbox_tool]}));
    r.assert_status(201);
    let sid = r.json()["session_id"].as_str().unwrap().to_string();
    let evts = admin_events(&s, &sid);
    assert_eq!(
        evts[0]["payload"]["sandbox_tools"],
        json!(["run_shell_command"])
    );
}

#[test]
fn c025_reserved_tool_name_is_422() {
    let s = start();
    let f = fix(&s, &["remote_subagent_status"]);
    let before = admin_sessions(&s).len();
    for body in [
        json!({"tools": [tool("remote_subagent_status")]}),
        json!({"sandbox_tools": [tool("remote_subagent_status")]}),
    ] {
        let r = create(&s, &f.client_key, body);
        assert_problem(&r, 422, "reserved_tool_name");
    }
    assert_eq!(admin_sessions(&s).len(), before);
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
fn c026_join_with_unresolvable_primary_audits_and_leaves_the_session_alone() {
    let s = start();
    let f = fix(&s, &[]);
    let name = fixtures::unique_name("renamed");
    s.admin()
        .put_json(
            &format!("/admin/v1/profiles/{}", f.profile),
            &json!({"name": name, "primary_provider": "gone"}),
        )
        .assert_status(200);
    let before = admin_sessions(&s).len();
    let (kid2, ck2) = key(&s, &f.profile);
    let r = join(&s, &f.sid, &ck2, json!({}));
    assert_problem(&r, 422, "primary_provider_unavailable");
    let rows = admin_sessions(&s);
    assert_eq!(rows.len(), before + 1);
    let audit = rows.last().unwrap();
    assert_ne!(audit["id"], f.sid.as_str());
    assert_eq!(audit["state"], "error");
    let ev = admin_events(&s, audit["id"].as_str().unwrap());
    assert_eq!(ev[0]["payload"]["reason"], "primary_provider_unavailable");
    assert_eq!(ev[0]["client_key_id"], kid2.as_str());
    // The joined session is untouched.
    assert_eq!(admin_session(&s, &f.sid)["state"], "open");
    assert_eq!(types(&events(&s, &f.sid, &f.skey)), ["session.open"]);
}

#[test]
fn c027_session_open_payload_names_only() {
    let s = start();
    let f = fix(&s, &["a", "b"]);
    let (sid, skey) = open_session(
        &s,
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
    let evts = events(&s, &sid, &skey);
    assert_eq!(types(&evts), ["session.open"]);
    assert_eq!(
        evts[0]["payload"],
        json!({"client_version": "2.0", "tools": ["a", "b"], "sandbox_tools": ["sb"], "subagent_tools": ["launch_subagent"]})
    );
    assert_eq!(evts[0]["client_key_id"], f.key_id.as_str());
    // client_version is null when omitted.
    let evts = events(&s, &f.sid, &f.skey);
    assert_eq!(
        evts[0]["payload"],
        json!({"client_version": null, "tools": [], "sandbox_tools": [], "subagent_tools": []})
    );
}

#[test]
fn c028_duplicate_subagent_harness_is_422() {
    let s = start();
    let f = fix(&s, &[]);
    let decl = subagent_decl(json!([
        {"harness": "claude", "command_template": "claude {prompt}", "prompt_via": "arg", "timeout_secs": 60},
        {"harness": "claude", "command_template": "claude2 --print", "prompt_via": "stdin", "timeout_secs": 60}
    ]));
    let r = create(&s, &f.client_key, json!({ "subagent_tools": decl }));
    assert_problem(&r, 422, "invalid_subagent_tools");
}

#[test]
fn c029_prompt_placeholder_must_match_prompt_via() {
    let s = start();
    let f = fix(&s, &[]);
    for sub in [
        json!({"harness": "claude", "command_template": "claude --print", "prompt_via": "arg", "timeout_secs": 60}),
        json!({"harness": "claude", "command_template": "claude {prompt}", "prompt_via": "stdin", "timeout_secs": 60}),
    ] {
        let r = create(
            &s,
            &f.client_key,
            json!({ "subagent_tools": subagent_decl(json!([sub])) }),
        );
        assert_problem(&r, 422, "invalid_subagent_tools");
        // Same validation on join.
        let r = join(
            &s,
            &f.sid,
            &f.client_key,
            json!({ "subagent_tools": subagent_decl(json!([sub])) }),
        );
        assert_problem(&r, 422, "invalid_subagent_tools");
    }
}

#[test]
fn c030_unknown_top_level_fields_are_ignored() {
    let s = start();
    let f = fix(&s, &[]);
    let r = create(
        &s,
        &f.client_key,
        json!({"future_field": {"x": [1, 2]}, "another": null, "client_version": "1"}),
    );
    r.assert_status(201);
    let v = r.json();
    let evts = events(
        &s,
        v["session_id"].as_str().unwrap(),
        v["session_key"].as_str().unwrap(),
    );
    assert_eq!(evts[0]["payload"]["client_version"], "1");
    assert!(!evts[0]["payload"].to_string().contains("future_field"));
}

#[test]
fn create_check_order_is_normative() {
    // spec 01 §4.1: 401 > 400 (body) > 400 (compaction size) > 422 profile/
    // provider > 422 reserved > 403 allowlist > 422 subagent declarations.
    let s = start();
    let p = profile(&s, &[]);
    let (_, ck) = key(&s, &p);
    let bad_sub = subagent_decl(json!([
        {"harness": "x", "command_template": "x", "prompt_via": "arg", "timeout_secs": 1}
    ]));
    // compaction size (step 3) beats the allowlist (step 7).
    let r = create(
        &s,
        &ck,
        json!({"tools": [tool("nope")], "compaction": {"mode": "auto", "size": 5}}),
    );
    assert_problem(&r, 400, "bad_request");
    // reserved name (step 6) beats the allowlist (step 7).
    let r = create(
        &s,
        &ck,
        json!({"tools": [tool("nope"), tool("remote_subagent_status")]}),
    );
    assert_problem(&r, 422, "reserved_tool_name");
    // allowlist (step 7) beats subagent validation (step 8).
    let r = create(
        &s,
        &ck,
        json!({"tools": [tool("nope")], "subagent_tools": bad_sub}),
    );
    assert_problem(&r, 403, "tool_not_allowed");
    // primary provider (step 5) beats reserved names and the allowlist.
    let np = fixtures::create_profile(&s, &fixtures::unique_name("np"), "missing", &[], &[]);
    let (_, nk) = key(&s, &np);
    let r = create(
        &s,
        &nk,
        json!({"tools": [tool("remote_subagent_status"), tool("nope")]}),
    );
    assert_problem(&r, 422, "primary_provider_unavailable");
}

// ------------------------------------------------------------------ join

#[test]
fn c031_compaction_on_join_is_400_even_null() {
    let s = start();
    let f = fix(&s, &[]);
    for compaction in [
        Value::Null,
        json!({"mode": "client"}),
        json!({"mode": "auto", "size": 5000}),
    ] {
        let r = join(
            &s,
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
    assert_eq!(types(&events(&s, &f.sid, &f.skey)), ["session.open"]);
}

#[test]
fn c032_join_compaction_rejection_precedes_session_lookup() {
    let s = start();
    let f = fix(&s, &[]);
    let r = join(&s, UNKNOWN_SID, &f.client_key, json!({"compaction": null}));
    let detail = assert_problem(&r, 400, "bad_request");
    assert!(detail.starts_with("compaction is a session-level setting"));
    // Also before the state and profile checks.
    let other = fix(&s, &[]);
    let r = join(&s, &f.sid, &other.client_key, json!({"compaction": null}));
    assert_problem(&r, 400, "bad_request");
}

#[test]
fn c033_join_with_invalid_key_is_401_before_compaction_check() {
    let s = start();
    let f = fix(&s, &[]);
    for bearer in [
        "bae_000000000000000000000000000000000000000000000000",
        f.skey.as_str(),
    ] {
        let r = join(&s, &f.sid, bearer, json!({"compaction": null}));
        assert_problem(&r, 401, "unauthorized");
    }
    let r = s.client().post_json(
        &format!("/api/v1/sessions/{}/join", f.sid),
        &json!({"compaction": null}),
    );
    assert_problem(&r, 401, "unauthorized");
}

#[test]
fn c034_join_unknown_session_is_404() {
    let s = start();
    let f = fix(&s, &[]);
    for sid in [UNKNOWN_SID, "garbage", "ses_XYZ"] {
        let r = join(&s, sid, &f.client_key, json!({}));
        assert_problem(&r, 404, "not_found");
    }
}

#[test]
fn c035_join_closed_or_error_session_is_409() {
    let s = start();
    let f = fix(&s, &[]);
    delete(&s, &f.sid, &f.skey).assert_status(200);
    let r = join(&s, &f.sid, &f.client_key, json!({}));
    let detail = assert_problem(&r, 409, "session_closed");
    assert_eq!(detail, "session is already closed");
    // State (step 5) precedes the profile check (step 6).
    let other = fix(&s, &[]);
    let r = join(&s, &f.sid, &other.client_key, json!({}));
    assert_problem(&r, 409, "session_closed");
    // An error session.
    let e = fix(&s, &[]);
    make_error_session(&s, &e);
    let r = join(&s, &e.sid, &e.client_key, json!({}));
    let detail = assert_problem(&r, 409, "session_closed");
    assert_eq!(detail, "session is already error");
}

#[test]
fn c036_join_with_another_profiles_key_is_403_and_logs_nothing() {
    let s = start();
    let f = fix(&s, &[]);
    let other = fix(&s, &["t"]);
    let conn = db(&s);
    let keys_before = query(&conn, "SELECT COUNT(*) FROM keys");
    // Mismatch (step 6) precedes the tool checks (step 9).
    for body in [json!({}), json!({"tools": [tool("nope")]})] {
        let r = join(&s, &f.sid, &other.client_key, body);
        assert_problem(&r, 403, "profile_mismatch");
    }
    assert_eq!(types(&events(&s, &f.sid, &f.skey)), ["session.open"]);
    assert_eq!(query(&conn, "SELECT COUNT(*) FROM keys"), keys_before);
}

#[test]
fn c037_join_mints_a_distinct_working_key() {
    let s = start();
    let f = fix(&s, &[]);
    let (_, ck2) = key(&s, &f.profile);
    let r = join(&s, &f.sid, &ck2, json!({}));
    r.assert_status(201);
    let v = r.json();
    assert_eq!(v["session_id"], f.sid.as_str());
    let k2 = v["session_key"].as_str().unwrap().to_string();
    assert!(is_prefixed_hex(&k2, "bae_ses_", 48));
    assert_ne!(k2, f.skey);
    assert_eq!(v["profile"]["id"], f.profile.as_str());
    // The creator may join its own session too: yet another key.
    let k3 = fixtures::join_session(&s, &f.sid, &f.client_key, json!({}));
    assert_ne!(k3, f.skey);
    assert_ne!(k3, k2);
    for k in [&f.skey, &k2, &k3] {
        s.client()
            .bearer(k)
            .get(&format!("/api/v1/sessions/{}/participants", f.sid))
            .assert_status(200);
    }
}

#[test]
fn c038_join_event_is_attributed_to_the_joiner_with_its_tools() {
    let s = start();
    let f = fix(&s, &["a", "b"]);
    let (sid, _) = open_session(&s, &f.client_key, json!({"tools": [tool("a")]}));
    let (kid2, ck2) = key(&s, &f.profile);
    let k2 = fixtures::join_session(
        &s,
        &sid,
        &ck2,
        json!({"client_version": "j1", "tools": [tool("b")]}),
    );
    let evts = events(&s, &sid, &k2);
    assert_eq!(types(&evts), ["session.open", "session.join"]);
    assert_eq!(evts[1]["client_key_id"], kid2.as_str());
    assert_eq!(
        evts[1]["payload"],
        json!({"client_version": "j1", "tools": ["b"], "sandbox_tools": [], "subagent_tools": []})
    );
    assert_eq!(evts[0]["payload"]["tools"], json!(["a"]));
}

#[test]
fn c039_joiner_tools_are_checked_independently() {
    let s = start();
    let f = fix(&s, &["a"]);
    let r = create(&s, &f.client_key, json!({"tools": [tool("a")]}));
    let sid = r.json()["session_id"].as_str().unwrap().to_string();
    let (_, ck2) = key(&s, &f.profile);
    let r = join(&s, &sid, &ck2, json!({"tools": [tool("a"), tool("b")]}));
    assert_problem(&r, 403, "tool_not_allowed");
    let r = join(
        &s,
        &sid,
        &ck2,
        json!({"tools": [tool("remote_subagent_status")]}),
    );
    assert_problem(&r, 422, "reserved_tool_name");
    join(&s, &sid, &ck2, json!({"tools": [tool("a")]})).assert_status(201);
}

#[test]
fn join_check_order_is_normative() {
    // 401 > 400 body > 400 compaction > 404 > 409 > 403 mismatch > 422 > 403 tools.
    let s = start();
    let f = fix(&s, &[]);
    let r = post_raw(
        &s.client(),
        &format!("/api/v1/sessions/{}/join", f.sid),
        &f.client_key,
        Some("application/json"),
        b"{bad",
    );
    assert_problem(&r, 400, "bad_request");
    let r = post_raw(
        &s.client(),
        &format!("/api/v1/sessions/{UNKNOWN_SID}/join"),
        &f.client_key,
        Some("text/plain"),
        b"{}",
    );
    assert_problem(&r, 400, "bad_request");
    let r = join(
        &s,
        UNKNOWN_SID,
        &f.client_key,
        json!({"tools": [tool("x")]}),
    );
    assert_problem(&r, 404, "not_found");
}

// ------------------------------------------------- other session routes

#[test]
fn c040_participants_empty_then_sorted() {
    let s = start();
    let f = fix(&s, &[]);
    let c = s.client().bearer(&f.skey);
    let path = format!("/api/v1/sessions/{}/participants", f.sid);
    let r = c.get(&path);
    r.assert_status(200);
    assert_eq!(r.json(), json!({"drivers": []}));
    let (kid2, ck2) = key(&s, &f.profile);
    let k2 = fixtures::join_session(&s, &f.sid, &ck2, json!({}));
    register(&s, &f.sid, &k2);
    register(&s, &f.sid, &f.skey);
    register(&s, &f.sid, &f.skey);
    let mut expected = vec![f.key_id.clone(), kid2];
    expected.sort();
    assert_eq!(c.get(&path).json(), json!({ "drivers": expected }));
}

#[test]
fn c041_events_default_50_clamp_200_and_null_cursor_on_last_page() {
    let s = start();
    let f = fix(&s, &[]);
    // 1 open + 230 joins = 231 events.
    for _ in 0..230 {
        join(&s, &f.sid, &f.client_key, json!({})).assert_status(201);
    }
    let c = s.client().bearer(&f.skey);
    let base = format!("/api/v1/sessions/{}/events", f.sid);
    let v = c.get(&base).json();
    assert_eq!(v["items"].as_array().unwrap().len(), 50);
    assert!(v["next_cursor"].is_string());
    let v = c.get(&format!("{base}?limit=1000")).json();
    assert_eq!(v["items"].as_array().unwrap().len(), 200);
    let cursor = v["next_cursor"].as_str().expect("more pages").to_string();
    let v2 = c.get(&format!("{base}?limit=1000&cursor={cursor}")).json();
    assert_eq!(v2["items"].as_array().unwrap().len(), 31);
    assert!(v2["next_cursor"].is_null());
    // A huge limit also clamps.
    let v = c
        .get(&format!("{base}?limit=99999999999999999999999"))
        .json();
    assert_eq!(v["items"].as_array().unwrap().len(), 200);
    // Exactly one full page: next_cursor null when nothing is left.
    let v = c.get(&format!("{base}?limit=231")).json();
    assert_eq!(v["items"].as_array().unwrap().len(), 200);
    // Paging with small pages yields every event once, in order.
    let mut ids = Vec::new();
    let mut cursor = String::new();
    loop {
        let v = c.get(&format!("{base}?limit=7&cursor={cursor}")).json();
        for e in v["items"].as_array().unwrap() {
            ids.push(e["id"].as_str().unwrap().to_string());
        }
        match v["next_cursor"].as_str() {
            Some(n) => cursor = n.to_string(),
            None => break,
        }
    }
    assert_eq!(ids.len(), 231);
    let all: Vec<String> = events(&s, &f.sid, &f.skey)
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
    let s = start();
    let f = fix(&s, &[]);
    let c = s.client().bearer(&f.skey);
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
        let r = c.get(&format!("{base}?{q}"));
        assert_problem(&r, 400, "bad_request");
    }
    // Admin port: same rules.
    let r = s
        .admin()
        .get(&format!("/admin/v1/sessions/{}/events?limit=0", f.sid));
    assert_problem(&r, 400, "bad_request");
    // An empty cursor means "from the start".
    let v = c.get(&format!("{base}?cursor=")).json();
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
}

#[test]
fn c043_events_readable_on_closed_and_error_sessions() {
    let s = start();
    let f = fix(&s, &[]);
    delete(&s, &f.sid, &f.skey).assert_status(200);
    assert_eq!(
        types(&events(&s, &f.sid, &f.skey)),
        ["session.open", "session.close"]
    );
    let e = fix(&s, &[]);
    make_error_session(&s, &e);
    let t = types(&events(&s, &e.sid, &e.skey));
    assert_eq!(t.last().map(String::as_str), Some("session.error"), "{t:?}");
}

#[test]
fn c044_delete_closes_and_logs_client_close() {
    let s = start();
    let f = fix(&s, &[]);
    // DELETE by a joiner: close is attributed to the creator (spec 01 §10.8).
    let (_, ck2) = key(&s, &f.profile);
    let k2 = fixtures::join_session(&s, &f.sid, &ck2, json!({}));
    let r = delete(&s, &f.sid, &k2);
    r.assert_status(200);
    assert_eq!(r.json(), json!({"session_id": f.sid, "state": "closed"}));
    let evts = events(&s, &f.sid, &f.skey);
    let last = evts.last().unwrap();
    assert_eq!(last["event_type"], "session.close");
    assert_eq!(last["payload"], json!({"reason": "client_close"}));
    assert_eq!(last["client_key_id"], f.key_id.as_str());
    let row = admin_session(&s, &f.sid);
    assert_eq!(row["state"], "closed");
    assert!(is_timestamp(row["closed_at"].as_str().unwrap()));
}

#[test]
fn c045_second_delete_is_409_without_event() {
    let s = start();
    let f = fix(&s, &[]);
    delete(&s, &f.sid, &f.skey).assert_status(200);
    let n = events(&s, &f.sid, &f.skey).len();
    let r = delete(&s, &f.sid, &f.skey);
    let detail = assert_problem(&r, 409, "session_closed");
    assert_eq!(detail, "session is already closed");
    assert_eq!(events(&s, &f.sid, &f.skey).len(), n);
}

#[test]
fn c046_delete_on_error_session_is_409_without_close() {
    let s = start();
    let f = fix(&s, &[]);
    make_error_session(&s, &f);
    let n = events(&s, &f.sid, &f.skey).len();
    let r = delete(&s, &f.sid, &f.skey);
    let detail = assert_problem(&r, 409, "session_closed");
    assert_eq!(detail, "session is already error");
    let evts = events(&s, &f.sid, &f.skey);
    assert_eq!(evts.len(), n);
    assert!(!types(&evts).contains(&"session.close".to_string()));
    assert_eq!(admin_session(&s, &f.sid)["state"], "error");
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

#[test]
fn c048_after_delete_registered_driver_gets_32001() {
    let s = start();
    let f = fix(&s, &[]);
    register(&s, &f.sid, &f.skey);
    delete(&s, &f.sid, &f.skey).assert_status(200);
    let (_, t) = rpc(
        &s,
        &f.sid,
        &f.skey,
        "session.sendMessage",
        json!({"message": {"role": "user", "content": "hi"}}),
    );
    assert_eq!(t["error"]["code"], -32001, "{t}");
    // Participants are cleared too.
    let r = s
        .client()
        .bearer(&f.skey)
        .get(&format!("/api/v1/sessions/{}/participants", f.sid));
    assert_eq!(r.json(), json!({"drivers": []}));
}
