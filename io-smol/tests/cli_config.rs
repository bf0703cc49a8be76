//! `baesrv` command line, environment and `bae-config.toml` outcomes over
//! the real binary (README checklist C-216–C-230; spec 04 §1–§5).

mod rest_support;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use rest_support::*;
use serde_json::json;
use testkit::{RunOutput, Server, ServerOptions, TestDir};

const RUN: Duration = Duration::from_secs(10);

fn run(o: ServerOptions) -> RunOutput {
    Server::run(o, RUN)
}

#[track_caller]
fn assert_exit(out: &RunOutput, code: i32, needle: &str) {
    assert_eq!(
        out.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stderr.contains(needle),
        "stderr lacks {needle:?}: {}",
        out.stderr
    );
}

/// Starts (and so passes the whole startup sequence) or panics.
#[track_caller]
fn assert_starts(o: ServerOptions) -> Server {
    match Server::try_start(o) {
        Ok(s) => s,
        Err(e) => panic!("expected a successful start: {e}"),
    }
}

#[test]
fn c216_non_loopback_admin_address_exits_2() {
    for addr in ["0.0.0.0:8081", "[::]:8081"] {
        let out = run(opts().env("BAE_ADMIN_ADDR", addr));
        assert_exit(&out, 2, "is not a loopback address");
        assert!(
            out.stderr.contains("baesrv: configuration error: "),
            "{}",
            out.stderr
        );
        assert!(
            !out.dir.join("bae.db").exists(),
            "env errors precede the DB"
        );
    }
    // Host names do not parse (exit 2 as well).
    let out = run(opts().env("BAE_ADMIN_ADDR", "localhost:8081"));
    assert_exit(&out, 2, "BAE_ADMIN_ADDR");
    let out = run(opts().env("BAE_ADDR", "nonsense"));
    assert_exit(&out, 2, "BAE_ADDR");
}

#[test]
fn c216_loopback_admin_addresses_are_accepted() {
    // 127.0.0.0/8 other than .1 is loopback too.
    let probe = TcpListener::bind("127.0.0.2:0");
    if let Ok(l) = probe {
        let port = l.local_addr().unwrap().port();
        drop(l);
        let s = assert_starts(opts().env("BAE_ADMIN_ADDR", format!("127.0.0.2:{port}")));
        assert_eq!(s.admin_addr.to_string(), format!("127.0.0.2:{port}"));
        s.admin().get("/admin/v1/profiles").assert_status(200);
    }
}

#[test]
fn c217_bad_durations_exit_2() {
    for (var, value) in [
        ("BAE_TURN_TIMEOUT", "soon"),
        ("BAE_TURN_TIMEOUT", "-1"),
        ("BAE_TURN_TIMEOUT", ""),
        ("BAE_SHUTDOWN_TIMEOUT", "1.5"),
        ("BAE_SUBAGENT_TIMEOUT", "10s"),
        ("BAE_MAX_SUBAGENTS_PER_SESSION", "x"),
    ] {
        let out = run(opts().env(var, value));
        assert_exit(&out, 2, var);
    }
    // Surrounding whitespace is trimmed.
    assert_starts(opts().env("BAE_TURN_TIMEOUT", " 7 "));
}

#[test]
fn c218_unknown_sandbox_driver_exits_2() {
    let out = run(opts().env("BAE_SANDBOX_DRIVER", "podman"));
    assert_exit(&out, 2, "BAE_SANDBOX_DRIVER");
    assert_starts(opts().env("BAE_SANDBOX_DRIVER", " docker "));
}

/// Extension `BAE_ID_ORDER` (docs/configuration.md): `time` or `random`
/// in any case; anything else is refused at start with exit 2.
#[test]
fn unknown_id_order_exits_2() {
    let out = run(opts().env("BAE_ID_ORDER", "sequential"));
    assert_exit(&out, 2, "BAE_ID_ORDER");
    assert_starts(opts().env("BAE_ID_ORDER", " Random "));
}

/// Extension `BAE_RESIDENT_SESSIONS` (docs/configuration.md): a whole
/// number or `all`; anything else is refused at start with exit 2.
#[test]
fn resident_sessions_takes_a_count_or_all() {
    for bad in ["-1", "many", "1.5"] {
        let out = run(opts().env("BAE_RESIDENT_SESSIONS", bad));
        assert_exit(&out, 2, "BAE_RESIDENT_SESSIONS");
    }
    assert_starts(opts().env("BAE_RESIDENT_SESSIONS", "0"));
    assert_starts(opts().env("BAE_RESIDENT_SESSIONS", " ALL "));
}

#[test]
fn c219_missing_config_file_starts_with_empty_registries() {
    let s = assert_starts(opts().arg("--config").arg("/nonexistent/bae-config.toml"));
    let v = s.admin().get("/admin/v1/config").json();
    assert_eq!(v["mcp"]["servers"], json!([]));
    assert_eq!(v["providers"]["entries"], json!([]));
    let s = assert_starts(opts().env("BAE_CONFIG", "/nonexistent/other.toml"));
    s.admin().get("/admin/v1/providers").assert_status(200);
}

#[test]
fn c220_invalid_mcp_registry_exits_2() {
    let dup = r#"
[[mcp.servers]]
name = "a"
transport = "stdio"
command = "x"
[[mcp.servers]]
name = "a"
transport = "http"
url = "http://127.0.0.1:9/"
"#;
    assert_exit(&run(opts().config(dup)), 2, "duplicate MCP server name");
    let no_command = r#"
[[mcp.servers]]
name = "a"
transport = "stdio"
"#;
    assert_exit(&run(opts().config(no_command)), 2, "command");
    let no_url = r#"
[[mcp.servers]]
name = "a"
transport = "sse"
"#;
    assert_exit(&run(opts().config(no_url)), 2, "url");
    let bad_transport = r#"
[[mcp.servers]]
name = "a"
transport = "carrier-pigeon"
command = "x"
"#;
    assert_exit(&run(opts().config(bad_transport)), 2, "bae-config.toml");
    assert_exit(
        &run(opts().config("this is = = not toml")),
        2,
        "bae-config.toml",
    );
}

#[test]
fn c221_invalid_provider_registry_exits_2() {
    let kind = r#"
[[providers.entries]]
name = "a"
provider = "gemini"
model = "m"
auth_token = "t"
"#;
    assert_exit(&run(opts().config(kind)), 2, "bae-config.toml");
    let dup = format!("{}{}", provider_config(DEAD_URL), provider_config(DEAD_URL));
    assert_exit(&run(opts().config(dup)), 2, "duplicate provider name");
    let no_model = r#"
[[providers.entries]]
name = "a"
provider = "openai"
auth_token = "t"
"#;
    assert_exit(&run(opts().config(no_model)), 2, "bae-config.toml");
}

#[test]
fn c222_mcp_server_and_provider_may_share_a_name() {
    let toml = format!(
        "{}\n[[mcp.servers]]\nname = \"{PROVIDER}\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\n",
        provider_config(DEAD_URL)
    );
    let s = assert_starts(opts().config(toml));
    assert_eq!(
        s.admin().get("/admin/v1/mcp-servers").json()["items"][0]["name"],
        PROVIDER
    );
    assert_eq!(
        s.admin().get("/admin/v1/providers").json()["items"][0]["name"],
        PROVIDER
    );
}

#[test]
fn c223_telemetry_validation_only_when_enabled() {
    assert_exit(
        &run(opts().config("[telemetry]\nenabled = true\n")),
        2,
        "otlp_endpoint",
    );
    assert_exit(
        &run(opts().config("[telemetry]\nenabled = true\notlp_endpoint = \"ftp://x\"\n")),
        2,
        "otlp_endpoint",
    );
    assert_starts(opts().config("[telemetry]\nenabled = false\nsample_ratio = 7.5\n"));
    // Unknown keys fail even in a disabled table.
    assert_exit(
        &run(opts().config("[telemetry]\nenabled = false\nbogus_key = 1\n")),
        2,
        "bae-config.toml",
    );
}

#[test]
fn c224_unknown_top_level_table_ignored_unknown_mcp_key_exits_2() {
    let s = assert_starts(opts().config(format!(
        "[future]\nanything = 1\n\n{}",
        provider_config(DEAD_URL)
    )));
    s.admin().get("/admin/v1/providers").assert_status(200);
    let bad = r#"
[[mcp.servers]]
name = "a"
transport = "stdio"
command = "x"
colour = "blue"
"#;
    assert_exit(&run(opts().config(bad)), 2, "bae-config.toml");
    // Unknown keys inside [[providers.entries]] are ignored.
    assert_starts(opts().config(format!("{}colour = \"blue\"\n", provider_config(DEAD_URL))));
}

#[test]
fn c225_config_flag_wins_over_env() {
    let dir = TestDir::new("baesrv-cfg").unwrap();
    let good = dir.join("good.toml");
    let bad = dir.join("bad.toml");
    std::fs::write(&good, provider_config(DEAD_URL)).unwrap();
    std::fs::write(&bad, "[[[ not toml").unwrap();
    let s = assert_starts(
        opts()
            .env("BAE_CONFIG", bad.display().to_string())
            .arg(format!("--config={}", good.display())),
    );
    assert_eq!(
        s.admin().get("/admin/v1/providers").json()["items"][0]["name"],
        PROVIDER
    );
    drop(s);
    let out = run(opts()
        .env("BAE_CONFIG", good.display().to_string())
        .arg("--config")
        .arg(bad.display().to_string()));
    assert_exit(&out, 2, "bad.toml");
    // `--config` after the subcommand works too.
    assert_starts(
        opts()
            .arg("serve")
            .arg("--config")
            .arg(good.display().to_string()),
    );
}

#[test]
fn c226_unknown_subcommand_exits_2_version_prints() {
    for arg in ["frobnicate", "--bogus-flag"] {
        let out = run(opts().arg(arg));
        assert_exit(&out, 2, "unknown command");
    }
    let out = run(opts().arg("--config"));
    assert_exit(&out, 2, "--config requires a path argument");
    for arg in ["version", "--version", "-V"] {
        let out = run(opts().arg(arg));
        assert_eq!(out.code(), Some(0), "{arg}: {}", out.stderr);
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{:?}", out.stdout);
        assert!(lines[0].starts_with("baesrv "), "{:?}", out.stdout);
        assert!(lines[0].len() > "baesrv ".len());
        assert_eq!(lines[1], "api versions: v1");
    }
    for arg in ["help", "--help", "-h"] {
        let out = run(opts().arg(arg));
        assert_eq!(out.code(), Some(0), "{arg}: {}", out.stderr);
        assert!(!out.stderr.is_empty(), "usage goes to stderr");
    }
}

#[test]
fn c227_migrate_prints_up_to_date_and_exits_0() {
    let out = run(opts().arg("migrate"));
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let db = out.dir.join("bae.db");
    assert_eq!(
        out.stdout.trim_end(),
        format!("migrations up to date at {}", db.display())
    );
    assert!(db.exists());
    // migrate ignores --config (even a broken one).
    let out = run(opts()
        .arg("migrate")
        .arg("--config=/nonexistent/broken.toml"));
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    // …but not the environment.
    let out = run(opts().arg("migrate").env("BAE_TURN_TIMEOUT", "soon"));
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    // A database directory that does not exist is a runtime failure.
    let out = run(opts()
        .arg("migrate")
        .env("BAE_DB_PATH", "/nonexistent/dir/bae.db"));
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
}

#[test]
fn c228_newer_schema_version_exits_1() {
    let dir = TestDir::new("baesrv-newer").unwrap();
    let out = run(opts().arg("migrate").db_dir(dir.path()));
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    {
        let conn = sqlite::open(dir.join("bae.db")).unwrap();
        conn.execute(
            "INSERT INTO schema_version (version, applied_at) VALUES (10, datetime('now'))",
        )
        .unwrap();
    }
    let out = run(opts().db_dir(dir.path()));
    assert_exit(&out, 1, "newer than this binary supports");
    let out = run(opts().arg("migrate").db_dir(dir.path()));
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
}

#[test]
fn c229_occupied_ports_exit_1() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let out = run(opts().env("BAE_ADMIN_ADDR", &addr));
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    let out = run(opts().env("BAE_ADDR", &addr));
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    drop(busy);
}

#[test]
fn c230_sigterm_exits_0_within_the_shutdown_timeout() {
    let mut s = assert_starts(
        opts()
            .config(provider_config(DEAD_URL))
            .env("BAE_SHUTDOWN_TIMEOUT", "2"),
    );
    let f = fix(&s, &[]);
    // A live subscription would hold the drain for the whole budget.
    let req = testkit::rpc_request("session.subscribe", json!({}), 1);
    let mut sub = s.client().rpc_stream(&f.sid, &f.skey, &req);
    assert_eq!(sub.status(), 200);
    let t = Instant::now();
    let status = s.stop_timeout(Duration::from_secs(10));
    let took = t.elapsed();
    assert_eq!(status.code(), Some(0), "{}", s.stderr_log());
    assert!(took < Duration::from_secs(4), "shutdown took {took:?}");
    assert!(sub.wait_closed(Duration::from_secs(2)));
    // SIGINT too, on an idle server (restart on the same data first).
    s.restart();
    let t = Instant::now();
    s.signal("INT");
    let status = s.wait_exit(Duration::from_secs(10)).expect("exited");
    assert_eq!(status.code(), Some(0));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

/// Extensions `prompt_cache*` and `prices` (docs/configuration.md): every
/// mistake is a configuration error naming the entry and the key (exit 2,
/// spec 04 §5 `invalid config file "<path>": <detail>`); good values start.
#[test]
fn bad_prompt_cache_settings_and_price_tables_are_config_errors() {
    let entry = |kind: &str, extra: &str| {
        format!(
            "[[providers.entries]]\nname = \"main\"\nprovider = \"{kind}\"\nmodel = \"m\"\nauth_token = \"t\"\n{extra}\n"
        )
    };
    for (kind, extra, needle) in [
        ("anthropic", "prompt_cache = 1", "providers.entries[0].prompt_cache: expected a boolean, found integer"),
        ("anthropic", "prompt_cache = true\nprompt_cache_ttl = \"2h\"", "providers.entries[0].prompt_cache_ttl: unsupported value \"2h\" (expected \"5m\" or \"1h\")"),
        ("openai", "prompt_cache = true\nprompt_cache_ttl = \"1h\"", "\"1h\" applies to anthropic entries only"),
        ("anthropic", "prompt_cache_min_tokens = 2048", "providers.entries[0].prompt_cache_min_tokens: set, but prompt_cache is not true"),
        ("anthropic", "prompt_cache = true\nprompt_cache_min_tokens = 0", "prompt_cache_min_tokens: 0 is out of range"),
        ("anthropic", "prices = { input = 3, output = 15, cache_write = 3.75 }", "providers.entries[0].prices: missing \"cache_read\""),
        ("anthropic", "prices = { input = 3, output = -15, cache_write = 3.75, cache_read = 0.3 }", "providers.entries[0].prices.output: -15 is not a price"),
        ("anthropic", "prices = { input = 3, output = 15, cache_write = 3.75, cache_read = 0.3, thinking = 1 }", "providers.entries[0].prices: unknown key \"thinking\""),
        ("openai", "prices = \"cheap\"", "providers.entries[0].prices: expected a table, found string"),
    ] {
        let out = run(opts().config(entry(kind, extra)));
        assert_exit(&out, 2, "invalid config file");
        assert_exit(&out, 2, needle);
    }
    let good = entry(
        "anthropic",
        "prompt_cache = true\nprompt_cache_ttl = \"1h\"\nprompt_cache_min_tokens = 4096\n\
         prices = { input = 3, output = 15.0, cache_write = 6, cache_read = 0.3 }",
    );
    assert_starts(opts().config(good));
}
