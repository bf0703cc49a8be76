//! `baectl` end to end: the real `baectl` binary against the real `baesrv`
//! (spec 03 §4, §6; docs/baectl.md).
//!
//! Every run clears inherited `BAE_*` variables and points baectl at the
//! test server through `BAE_ADMIN_ADDR` / `BAE_ADMIN_KEY_FILE` unless a
//! test says otherwise.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};
use testkit::fixtures::{self, provider_toml, unique_name};
use testkit::{MockProvider, Server, ServerOptions};

mod live_support;

const MARK: &str = "\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}\u{2022}";

fn opts() -> ServerOptions {
    ServerOptions::new().bin(live_support::bin())
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    #[track_caller]
    fn ok(self) -> Run {
        assert_eq!(
            self.code,
            Some(0),
            "baectl failed\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    #[track_caller]
    fn fails(self, code: i32, stderr_prefix: &str) -> Run {
        assert_eq!(
            self.code,
            Some(code),
            "stdout {:?} stderr {:?}",
            self.stdout,
            self.stderr
        );
        assert!(
            self.stderr.starts_with(stderr_prefix),
            "stderr {:?} does not start with {stderr_prefix:?}",
            self.stderr
        );
        assert!(self.stdout.is_empty(), "stdout on error: {:?}", self.stdout);
        self
    }

    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }
}

/// Runs baectl with a clean `BAE_*` environment plus `env`.
fn baectl_env(env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_baectl"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("BAE_") {
            cmd.env_remove(&k);
        }
    }
    cmd.envs(env.iter().copied()).args(args);
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run baectl");
    Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// Runs baectl against `s`, authenticated through its key file.
fn baectl(s: &Server, args: &[&str]) -> Run {
    let addr = s.admin_addr.to_string();
    let key_file = s.admin_key_file().display().to_string();
    baectl_env(
        &[("BAE_ADMIN_ADDR", &addr), ("BAE_ADMIN_KEY_FILE", &key_file)],
        args,
    )
}

fn mock_server(mock: &MockProvider) -> Server {
    Server::start(opts().config(provider_toml(&[(
        "main",
        "anthropic",
        &mock.base_url,
        "mock-model",
        "tok-secret-value",
    )])))
}

fn dead_server() -> Server {
    Server::start(opts().config(provider_toml(&[(
        "main",
        "anthropic",
        "http://127.0.0.1:9",
        "mock-model",
        "tok-secret-value",
    )])))
}

fn admin_json(s: &Server, path: &str) -> Value {
    let r = s.admin().get(path);
    r.assert_status(200);
    r.json()
}

/// Every item of an admin list, following `next_cursor` directly.
fn admin_all(s: &Server, path: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    let sep = if path.contains('?') { '&' } else { '?' };
    loop {
        let page = admin_json(s, &format!("{path}{sep}limit=200&cursor={cursor}"));
        out.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => return out,
        }
    }
}

/// The data rows (after the header) of a table whose first column is `id`.
fn row_of<'a>(table: &'a str, id: &str) -> Option<&'a str> {
    table
        .lines()
        .skip(1)
        .find(|l| l.split_whitespace().next() == Some(id))
}

#[test]
fn profile_lifecycle_with_tables_and_json() {
    let s = dead_server();
    let name = unique_name("ops");
    let run = baectl(
        &s,
        &[
            "profiles",
            "create",
            "--name",
            &name,
            "--primary-provider",
            "main",
            "--fallback-provider",
            "backup",
            "--mcp-server",
            "fs",
            "--allowed-tool",
            "get_time",
            "--available-sandbox",
            "python:3.12",
        ],
    )
    .ok();
    assert!(
        run.stdout
            .starts_with("created profile\n  id:         pro_"),
        "{}",
        run.stdout
    );
    let id = run
        .stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("id:"))
        .unwrap()
        .trim()
        .to_string();
    assert!(run.stdout.contains(&format!("  name:       {name}\n")));
    let stored = admin_json(&s, &format!("/admin/v1/profiles/{id}"));
    assert_eq!(stored["primary_provider"], "main");
    assert_eq!(stored["fallback_providers"], json!(["backup"]));
    assert_eq!(stored["mcp_servers"], json!(["fs"]));
    assert_eq!(stored["allowed_tools"], json!(["get_time"]));
    assert_eq!(stored["available_sandboxes"], json!(["python:3.12"]));

    // get: human block and raw JSON.
    let get = baectl(&s, &["profiles", "get", &id]).ok();
    assert_eq!(
        get.stdout,
        format!(
            "id:               {id}\nname:             {name}\nprimary_provider: main\n\
             fallback_providers: backup\nmcp_servers: fs\nallowed_tools: get_time\n\
             available_sandboxes: python:3.12\ncreated_at:       {c}\nupdated_at:       {u}\n",
            c = stored["created_at"].as_str().unwrap(),
            u = stored["updated_at"].as_str().unwrap(),
        )
    );
    assert_eq!(
        baectl(&s, &["profiles", "get", &id, "--json"]).ok().json(),
        stored
    );
    // The reference spelling reaches the same command.
    assert_eq!(
        baectl(&s, &["get", "profile", &id, "--json"]).ok().json(),
        stored
    );

    // list: table row.
    let list = baectl(&s, &["profiles", "list"]).ok();
    assert!(list.stdout.starts_with("ID "), "{}", list.stdout);
    let row = row_of(&list.stdout, &id).expect("row");
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        [id.as_str(), name.as_str(), "main"]
    );

    // Resource-first update changes only what is given.
    let renamed = unique_name("renamed");
    let up = baectl(
        &s,
        &[
            "profiles",
            "update",
            &id,
            "--name",
            &renamed,
            "--clear-fallback-providers",
            "--allowed-tool",
            "a",
            "--allowed-tool",
            "b",
        ],
    )
    .ok();
    assert!(up
        .stdout
        .contains(&format!("name:             {renamed}\n")));
    let after = admin_json(&s, &format!("/admin/v1/profiles/{id}"));
    assert_eq!(after["name"], renamed.as_str());
    assert_eq!(after["primary_provider"], "main");
    assert_eq!(after["fallback_providers"], json!([]));
    assert_eq!(after["mcp_servers"], json!(["fs"]));
    assert_eq!(after["allowed_tools"], json!(["a", "b"]));
    assert_eq!(after["available_sandboxes"], json!(["python:3.12"]));

    // Reference update: its three lists are replaced, the name and the
    // sandbox list it does not know about are kept.
    let v = baectl(
        &s,
        &[
            "update",
            "profile",
            &id,
            "other",
            "--fallback",
            "x",
            "--json",
        ],
    )
    .ok()
    .json();
    assert_eq!(v["name"], renamed.as_str());
    assert_eq!(v["primary_provider"], "other");
    assert_eq!(v["fallback_providers"], json!(["x"]));
    assert_eq!(v["mcp_servers"], json!([]));
    assert_eq!(v["allowed_tools"], json!([]));
    assert_eq!(v["available_sandboxes"], json!(["python:3.12"]));
    assert_eq!(v, admin_json(&s, &format!("/admin/v1/profiles/{id}")));

    // Duplicate name: RFC 7807 type and detail on stderr, exit 1.
    baectl(
        &s,
        &[
            "profiles",
            "create",
            "--name",
            &renamed,
            "--primary-provider",
            "main",
        ],
    )
    .fails(1, "baectl: a profile with that name already exists\n");

    // Delete, then it is gone.
    let del = baectl(&s, &["profiles", "delete", &id]).ok();
    assert_eq!(del.stdout, format!("deleted profile {id}\n"));
    baectl(&s, &["profiles", "get", &id]).fails(1, &format!("baectl: no profile {id}\n"));
    baectl(&s, &["delete", "profile", &id]).fails(1, "baectl: ");
    s.admin()
        .get(&format!("/admin/v1/profiles/{id}"))
        .assert_status(404);
}

#[test]
fn keys_create_list_revoke_and_profile_in_use() {
    let mock = MockProvider::start();
    let s = mock_server(&mock);
    let pro = fixtures::create_profile(&s, &unique_name("p"), "main", &[], &[]);

    // An unknown profile: the server's detail first (as the reference
    // baectl prints it), then a hint (issue 14 item 4).
    let r = baectl(
        &s,
        &[
            "create",
            "key",
            "agent-0",
            "pro_00000000000000000000000000000000",
        ],
    )
    .fails(1, "baectl: ");
    let first = r.stderr.lines().next().unwrap();
    assert!(
        first.contains("pro_00000000000000000000000000000000"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("hint: no live profile has that id"),
        "{}",
        r.stderr
    );
    let created = baectl(
        &s,
        &["keys", "create", "--name", "agent-1", "--profile-id", &pro],
    )
    .ok();
    assert!(created
        .stdout
        .starts_with("created key\n  id:         key_"));
    assert!(
        created.stderr.contains("cannot be retrieved again"),
        "{}",
        created.stderr
    );
    let field = |name: &str| {
        created
            .stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
            .unwrap()
            .trim()
            .to_string()
    };
    let (key_id, plaintext, prefix) = (field("id"), field("key"), field("prefix"));
    assert!(
        plaintext.starts_with("bae_") && plaintext.len() == 52,
        "{plaintext}"
    );
    assert_eq!(prefix, &plaintext[..8]);
    assert_eq!(field("profile_id"), pro);
    // The printed key works on the client port.
    let (sid, _skey) = fixtures::open_session(&s, &plaintext, json!({}));

    // The reference spelling, JSON output.
    let v = baectl(&s, &["create", "key", "agent-2", &pro, "--json"])
        .ok()
        .json();
    assert_eq!(v["name"], "agent-2");
    assert_eq!(v["profile_id"], pro.as_str());
    let key2 = v["id"].as_str().unwrap().to_string();

    let list = baectl(&s, &["keys", "list"]).ok();
    let row: Vec<&str> = row_of(&list.stdout, &key_id)
        .unwrap()
        .split_whitespace()
        .collect();
    // The reference baectl's four columns, nothing after them.
    assert_eq!(
        row,
        [key_id.as_str(), "agent-1", prefix.as_str(), pro.as_str()]
    );
    let header: Vec<&str> = list
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["ID", "NAME", "PREFIX", "PROFILE_ID"]);
    let json = baectl(&s, &["keys", "list", "--json"]).ok().json();
    let listed = json
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == key_id.as_str())
        .unwrap();
    assert!(
        listed["last_used_at"].is_string(),
        "last_used_at set after the session open"
    );
    assert!(row_of(&list.stdout, &key2).is_some());
    let listed = baectl(&s, &["list", "keys", "--json"]).ok().json();
    assert_eq!(listed, Value::Array(admin_all(&s, "/admin/v1/keys")));
    assert!(!list.stdout.contains(&plaintext), "plaintext listed");

    // A profile with keys cannot be deleted.
    let r = baectl(&s, &["profiles", "delete", &pro]).fails(
        1,
        "baectl: profile has 2 active client key(s); revoke them before deleting\n",
    );
    assert!(
        r.stderr.contains("hint: revoke the profile's client keys"),
        "{}",
        r.stderr
    );

    // Revoke: the cascade closes the session.
    let rev = baectl(&s, &["keys", "revoke", &key_id]).ok();
    assert_eq!(rev.stdout, format!("revoked key {key_id}\n"));
    assert_eq!(
        baectl(&s, &["delete", "key", &key2]).ok().stdout,
        format!("revoked key {key2}\n")
    );
    baectl(&s, &["keys", "revoke", &key_id])
        .fails(1, &format!("baectl: no active client key {key_id}\n"));
    assert_eq!(baectl(&s, &["keys", "list"]).ok().stdout, "no keys found\n");
    let closed = baectl(&s, &["sessions", "list", "--state", "closed", "--json"])
        .ok()
        .json();
    assert!(closed
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["id"] == sid.as_str()));
    assert_eq!(
        baectl(&s, &["profiles", "delete", &pro]).ok().stdout,
        format!("deleted profile {pro}\n")
    );
}

#[test]
fn lists_follow_next_cursor_and_single_pages() {
    let s = dead_server();
    // More than one 200-item page.
    let mut ids = Vec::new();
    for i in 0..205 {
        ids.push(fixtures::create_profile(
            &s,
            &format!("bulk-{i:03}"),
            "main",
            &[],
            &[],
        ));
    }
    let all = baectl(&s, &["profiles", "list", "--json"]).ok().json();
    let got: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, ids, "every profile, in insertion order");
    let table = baectl(&s, &["list", "profiles"]).ok().stdout;
    assert_eq!(table.lines().count(), 206, "header + 205 rows");

    // --limit/--cursor: one raw page.
    let page = baectl(&s, &["profiles", "list", "--limit", "2", "--json"])
        .ok()
        .json();
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let cursor = page["next_cursor"]
        .as_str()
        .expect("more pages")
        .to_string();
    let next = baectl(
        &s,
        &[
            "profiles",
            "list",
            "--limit=2",
            "--cursor",
            &cursor,
            "--json",
        ],
    )
    .ok()
    .json();
    assert_eq!(next["items"][0]["id"], ids[2].as_str());
    let human = baectl(&s, &["profiles", "list", "--limit", "2"])
        .ok()
        .stdout;
    assert!(
        human.ends_with(&format!("next cursor: {cursor}\n")),
        "{human}"
    );
    // A bad cursor is the server's 400.
    baectl(&s, &["profiles", "list", "--cursor", "zz"]).fails(1, "baectl: invalid cursor: \"zz\"");
}

#[test]
fn sessions_and_events() {
    let mock = MockProvider::start();
    let s = mock_server(&mock);
    let ready = fixtures::ready_session(&s, "main", &[], &[]);
    fixtures::send_message(&s, &ready.session_id, &ready.session_key, json!("hi"));
    fixtures::send_message(&s, &ready.session_id, &ready.session_key, json!("again"));
    let sid = ready.session_id.as_str();

    let open = baectl(&s, &["sessions", "list", "--state", "open"])
        .ok()
        .stdout;
    let row: Vec<&str> = row_of(&open, sid)
        .expect("open row")
        .split_whitespace()
        .collect();
    assert_eq!(row[..4], [sid, ready.profile_id.as_str(), "open", "-"]);
    assert_eq!(
        baectl(&s, &["sessions", "list", "--state", "closed"])
            .ok()
            .stdout,
        "no sessions found\n"
    );
    assert_eq!(
        baectl(&s, &["sessions", "list", "--json"]).ok().json(),
        Value::Array(admin_all(&s, "/admin/v1/sessions"))
    );
    baectl(&s, &["sessions", "list", "--state", "bogus"]).fails(
        1,
        "baectl: invalid state filter \"bogus\"; expected one of open, closed, error\n",
    );

    let api = admin_all(&s, &format!("/admin/v1/sessions/{sid}/events"));
    let evs = baectl(&s, &["sessions", "events", sid, "--json"])
        .ok()
        .json();
    assert_eq!(evs, Value::Array(api.clone()));
    let table = baectl(&s, &["sessions", "events", sid]).ok().stdout;
    let types: Vec<&str> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    let api_types: Vec<&str> = api
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, api_types);
    assert_eq!(types[0], "session.open");
    assert!(types.contains(&"server.message.send"));
    // Single pages through the cursor reproduce the whole log.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut args = vec!["sessions", "events", sid, "--limit", "3", "--json"];
        if let Some(c) = &cursor {
            args.extend(["--cursor", c.as_str()]);
        }
        let page = baectl(&s, &args).ok().json();
        paged.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(paged, api);
    baectl(
        &s,
        &["sessions", "events", "ses_00000000000000000000000000000000"],
    )
    .fails(1, "baectl: ");
}

const REGISTRY: &str = r#"
[[mcp.servers]]
name = "zeta"
transport = "http"
url = "http://127.0.0.1:9/mcp"
headers = { Authorization = "Bearer mcp-secret-header-value" }

[[mcp.servers]]
name = "alpha"
transport = "stdio"
command = "/bin/false"
args = ["--flag"]

[[providers.entries]]
name = "b-openai"
provider = "openai"
model = "gpt-test"
auth_token = "sk-secret-openai"

[[providers.entries]]
name = "a-anthropic"
provider = "anthropic"
model = "claude-test"
base_url = "http://127.0.0.1:9"
auth_token = "sk-secret-anthropic"

[telemetry]
enabled = false
otlp_headers = { "x-otlp-key" = "otlp-secret-value" }
"#;

#[test]
fn providers_mcp_servers_config_and_sandbox_status() {
    let s = Server::start(opts().config(REGISTRY));
    let providers = baectl(&s, &["providers", "list"]).ok().stdout;
    assert_eq!(
        providers,
        "NAME         PROVIDER   MODEL        BASE_URL\n\
         a-anthropic  anthropic  claude-test  http://127.0.0.1:9\n\
         b-openai     openai     gpt-test     https://api.openai.com\n"
    );
    assert_eq!(
        baectl(&s, &["list", "providers", "--json"]).ok().json(),
        admin_json(&s, "/admin/v1/providers")
    );
    // The table comes from the redacted config view: target, header
    // names (values redacted by the server), the reconnect switch.
    let listed = baectl(&s, &["mcp-servers", "list"]).ok().stdout;
    assert_eq!(
        listed,
        format!(
            "NAME   TRANSPORT  TARGET                  HEADERS                 RECONNECT\n\
             alpha  stdio      /bin/false --flag       -                       no\n\
             zeta   http       http://127.0.0.1:9/mcp  Authorization={MARK}  no\n"
        )
    );
    assert_eq!(baectl(&s, &["mcp", "list"]).ok().stdout, listed);
    assert!(!listed.contains("mcp-secret-header-value"));
    assert_eq!(
        baectl(&s, &["mcp-servers", "list", "--json"]).ok().json(),
        admin_json(&s, "/admin/v1/mcp-servers")
    );

    let cfg = baectl(&s, &["config", "show"]).ok().stdout;
    for secret in [
        "sk-secret-openai",
        "sk-secret-anthropic",
        "mcp-secret-header-value",
        "otlp-secret-value",
    ] {
        assert!(!cfg.contains(secret), "{secret} leaked:\n{cfg}");
    }
    assert!(cfg.starts_with("providers:\n  NAME "), "{cfg}");
    assert!(
        cfg.contains(&format!(
            "a-anthropic  anthropic  claude-test  http://127.0.0.1:9      {MARK}"
        )),
        "{cfg}"
    );
    assert!(cfg.contains("mcp servers:\n"), "{cfg}");
    assert!(cfg.contains(&format!("Authorization={MARK}")), "{cfg}");
    assert!(cfg.contains("/bin/false --flag"), "{cfg}");
    assert!(cfg.contains("telemetry:\n  enabled: "), "{cfg}");
    assert!(cfg.contains(&format!("x-otlp-key={MARK}")), "{cfg}");
    assert_eq!(
        baectl(&s, &["config", "show", "--json"]).ok().json(),
        admin_json(&s, "/admin/v1/config")
    );

    assert_eq!(
        baectl(&s, &["sandbox-status"]).ok().stdout,
        "no sandbox status entries\n"
    );
    let pro = fixtures::create_profile_json(
        &s,
        &json!({"name": "sb", "primary_provider": "a-anthropic",
                "available_sandboxes": ["python:3.12", "node:22"]}),
    );
    let status = baectl(&s, &["sandbox-status"]).ok().stdout;
    let rows: Vec<Vec<&str>> = status
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{status}");
    assert_eq!(rows[0][..2], [pro.as_str(), "node:22"]);
    assert_eq!(rows[1][..2], [pro.as_str(), "python:3.12"]);
    let v = baectl(&s, &["sandbox-status", "--json"]).ok().json();
    assert_eq!(v["items"][0]["profile_id"], pro.as_str());
}

#[test]
fn empty_registries_print_empty_states() {
    let s = Server::start(opts());
    assert_eq!(
        baectl(&s, &["providers", "list"]).ok().stdout,
        "no providers configured\n"
    );
    assert_eq!(
        baectl(&s, &["mcp-servers", "list"]).ok().stdout,
        "no MCP servers configured\n"
    );
    assert_eq!(
        baectl(&s, &["profiles", "list"]).ok().stdout,
        "no profiles found\n"
    );
    assert_eq!(
        baectl(&s, &["profiles", "list", "--json"]).ok().json(),
        json!([])
    );
    let cfg = baectl(&s, &["config", "show"]).ok().stdout;
    assert!(
        cfg.contains("providers:\n  (none)\nmcp servers:\n  (none)\n"),
        "{cfg}"
    );
    assert!(cfg.contains("  service_name:     baesrv\n"), "{cfg}");
}

#[test]
fn target_and_token_resolution() {
    let s = dead_server();
    let addr = s.admin_addr.to_string();
    let url = format!("http://{addr}/");
    let key_file = s.admin_key_file().display().to_string();
    let token = s.admin_key.clone();

    // Flag beats env for the address; a URL with a scheme works.
    baectl_env(
        &[
            ("BAE_ADMIN_ADDR", "127.0.0.1:9"),
            ("BAE_ADMIN_TOKEN", &token),
        ],
        &["--admin-addr", &url, "profiles", "list"],
    )
    .ok();
    // The env token beats the key file; a wrong one is 401 with a hint.
    let r = baectl_env(
        &[
            ("BAE_ADMIN_ADDR", &addr),
            ("BAE_ADMIN_TOKEN", "bae_admin_wrong"),
            ("BAE_ADMIN_KEY_FILE", &key_file),
        ],
        &["profiles", "list"],
    )
    .fails(
        1,
        "baectl: admin API rejected the request (401 unauthorized): invalid admin key\n",
    );
    assert!(r.stderr.contains("hint: "), "{}", r.stderr);
    // The flag token beats the env token.
    baectl_env(
        &[
            ("BAE_ADMIN_ADDR", &addr),
            ("BAE_ADMIN_TOKEN", "bae_admin_wrong"),
        ],
        &["--admin-token", &token, "profiles", "list"],
    )
    .ok();
    // --admin-key-file beats BAE_ADMIN_KEY_FILE; whitespace is trimmed.
    let dir = testkit::TestDir::new("baectl-keyfile").unwrap();
    let padded = dir.join("padded.pem");
    std::fs::write(&padded, format!("\n  {token}  \n\n")).unwrap();
    baectl_env(
        &[
            ("BAE_ADMIN_ADDR", &addr),
            ("BAE_ADMIN_KEY_FILE", "/nonexistent/admin-key.pem"),
        ],
        &["--admin-key-file", padded.to_str().unwrap(), "keys", "list"],
    )
    .ok();
    // An explicitly named key file that is missing is an io error.
    baectl_env(
        &[("BAE_ADMIN_ADDR", &addr)],
        &[
            "--admin-key-file",
            "/nonexistent/admin-key.pem",
            "keys",
            "list",
        ],
    )
    .fails(
        1,
        "baectl: cannot read admin key file /nonexistent/admin-key.pem",
    );
    // No token at all (no env, default file absent on a test host) → the
    // server's 401, unless the default file exists on this machine.
    if !Path::new("/var/lib/bae/admin-key.pem").exists() {
        baectl_env(&[("BAE_ADMIN_ADDR", &addr)], &["keys", "list"])
            .fails(1, "baectl: admin API rejected the request (401 unauthorized): missing Authorization header\n");
    }
    // Nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    baectl_env(
        &[("BAE_ADMIN_TOKEN", &token)],
        &[
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
            "providers",
            "list",
        ],
    )
    .fails(
        1,
        "baectl: could not reach the admin API at http://127.0.0.1:",
    );
}

#[test]
fn disabled_admin_auth_needs_no_token() {
    let s = Server::start(opts().arg("--dangerously-disable-admin-auth"));
    let addr = s.admin_addr.to_string();
    baectl_env(
        &[
            ("BAE_ADMIN_ADDR", &addr),
            ("BAE_ADMIN_KEY_FILE", "/nonexistent-but-unused"),
            ("BAE_ADMIN_TOKEN", "anything"),
        ],
        &["profiles", "list"],
    )
    .ok();
}

#[test]
fn usage_help_and_version() {
    let help = baectl_env(&[], &["--help"]).ok();
    for needle in [
        "profiles create --name NAME --primary-provider NAME",
        "keys revoke ID",
        "sessions events ID",
        "auth create key",
        "--admin-addr",
    ] {
        assert!(help.stdout.contains(needle), "{needle}: {}", help.stdout);
    }
    assert_eq!(
        baectl_env(&[], &["--version"]).ok().stdout,
        format!("baectl {}\n", env!("CARGO_PKG_VERSION"))
    );
    baectl_env(&[], &[]).fails(2, "error: usage: no command given\n");
    baectl_env(&[], &["frob"]).fails(2, "error: usage: unknown command \"frob\"\n");
    baectl_env(&[], &["profiles", "create", "--name", "x"]).fails(
        2,
        "error: usage: profiles create requires --primary-provider\n",
    );
    baectl_env(&[], &["keys", "list", "--bogus"])
        .fails(2, "error: usage: --bogus requires a value\n");
    baectl_env(&[], &["keys", "list", "--bogus", "1"]).fails(
        2,
        "error: usage: unknown option \"--bogus\" for \"keys list\"\n",
    );
}

/// The reference baectl's wording for the three answers its own tests
/// check, which a script may match, is printed after our first line and
/// before our hints (issue 39).
#[test]
fn reference_wording_for_the_three_checked_errors() {
    let s = dead_server();
    let pro = fixtures::create_profile(&s, &unique_name("p"), "main", &[], &[]);
    let (key_id, _) = fixtures::create_key(&s, &pro);

    // Deleting a profile that still has active keys.
    let r = baectl(&s, &["delete", "profile", &pro]).fails(1, "baectl: ");
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert!(lines[0].contains("active client key"), "{}", r.stderr);
    assert_eq!(lines[1], "Revoke the profile's active keys first.");
    assert!(lines[2].starts_with("hint: revoke the profile's client keys"));

    // A key for a deleted profile, and for one that never existed.
    s.admin()
        .delete(&format!("/admin/v1/keys/{key_id}"))
        .assert_status(204);
    baectl(&s, &["delete", "profile", &pro]).ok();
    for profile in [pro.as_str(), "pro_00000000000000000000000000000000"] {
        let r = baectl(&s, &["create", "key", "agent", profile]).fails(1, "baectl: ");
        let lines: Vec<&str> = r.stderr.lines().collect();
        assert!(lines[0].contains(profile), "{}", r.stderr);
        assert!(
            lines[0].ends_with(" (the referenced profile does not exist or was deleted)"),
            "{}",
            r.stderr
        );
        assert!(lines[1].starts_with("hint: no live profile has that id"));
    }

    // A rejected admin token.
    let addr = s.admin_addr.to_string();
    let r = baectl_env(
        &[
            ("BAE_ADMIN_ADDR", &addr),
            ("BAE_ADMIN_TOKEN", "bae_admin_wrong"),
        ],
        &["list", "profiles"],
    )
    .fails(
        1,
        "baectl: admin API rejected the request (401 unauthorized)",
    );
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(
        lines[1],
        "baectl: no valid admin token was supplied (401 unauthorized)"
    );
    assert!(
        lines[2].starts_with("hint: give an admin key"),
        "{}",
        r.stderr
    );
}
