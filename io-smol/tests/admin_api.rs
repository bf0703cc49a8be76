//! Admin API over the real binary (README checklist C-187–C-207; spec 03
//! §1–§4): what needs the binary (the config file's registries and their
//! redaction, auth disabled from the environment, sandbox pre-pulls, a
//! live subscribe stream ended by a key revocation). Authentication,
//! profiles, keys, session lists and events are tested in-process in
//! `engine/tests/admin_flows.rs` and `admin_key_flows.rs`.

mod rest_support;

use std::time::Duration;

use rest_support::*;
use serde_json::{json, Value};
use testkit::fixtures::{self, open_session, unique_name};
use testkit::{Server, ServerOptions};

fn profile_body(name: &str) -> Value {
    json!({"name": name, "primary_provider": PROVIDER})
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
