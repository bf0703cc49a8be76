use super::*;

fn parse(text: &str) -> Result<FileConfig, ConfigError> {
    parse_file_str(text, Path::new("/etc/bae-config.toml"))
}

fn invalid_detail(text: &str) -> String {
    match parse(text).unwrap_err() {
        ConfigError::InvalidFile { path, detail } => {
            assert_eq!(path, PathBuf::from("/etc/bae-config.toml"));
            detail
        }
        other => panic!("expected InvalidFile, got {other:?}"),
    }
}

const FULL: &str = r#"
[mcp]
[[mcp.servers]]
name      = "filesystem"
transport = "stdio"
command   = "npx"
args      = ["-y", "@modelcontextprotocol/server-filesystem", "/data"]

[[mcp.servers]]
name      = "remote-search"
transport = "http"
url       = "https://mcp.example.com/mcp"
headers   = { Authorization = "Bearer ${SEARCH_MCP_TOKEN}" }

[providers]
[[providers.entries]]
name       = "anthropic-sonnet"
provider   = "anthropic"
model      = "claude-sonnet-4-6"
auth_token = "${ANTHROPIC_API_KEY}"

[[providers.entries]]
name       = "local"
provider   = "openai"
base_url   = "http://localhost:11434/"
model      = "llama3"
auth_token = "literal-token"
max_tokens = 1024
future_key = "ignored"

[telemetry]
enabled = true
otlp_endpoint = "http://collector:4317"
otlp_headers = { "x-api-key" = "${OTEL_KEY}" }
sample_ratio = 0.25
service_name = "bae-prod"
[telemetry.traces]
enabled = false
[telemetry.metrics]
enabled = true
disabled = ["bae.events.total", "bae.tool.latency"]
"#;

#[test]
fn parses_full_file() {
    let cfg = parse(FULL).unwrap();
    assert_eq!(cfg.mcp.servers.len(), 2);
    let fs = cfg.mcp_server("filesystem").unwrap();
    assert_eq!(fs.transport, Transport::Stdio);
    assert_eq!(fs.command.as_deref(), Some("npx"));
    assert_eq!(fs.args.len(), 3);
    assert!(fs.headers.is_empty());
    let rs = cfg.mcp_server("remote-search").unwrap();
    assert_eq!(rs.transport, Transport::Http);
    assert_eq!(rs.url.as_deref(), Some("https://mcp.example.com/mcp"));
    assert_eq!(rs.headers["Authorization"], "Bearer ${SEARCH_MCP_TOKEN}");

    let a = cfg.provider("anthropic-sonnet").unwrap();
    assert_eq!(a.kind, ProviderKind::Anthropic);
    assert_eq!(a.base_url, None);
    assert_eq!(a.effective_base_url(), "https://api.anthropic.com");
    assert_eq!(a.api_base_url(), "https://api.anthropic.com");
    assert_eq!(a.auth_token, "${ANTHROPIC_API_KEY}");
    assert_eq!(a.max_tokens, 4096);
    let l = cfg.provider("local").unwrap();
    assert_eq!(l.kind, ProviderKind::Openai);
    assert_eq!(l.effective_base_url(), "http://localhost:11434/");
    assert_eq!(l.api_base_url(), "http://localhost:11434");
    assert_eq!(l.max_tokens, 1024);

    let t = &cfg.telemetry;
    assert!(t.enabled);
    assert_eq!(t.otlp_endpoint.as_deref(), Some("http://collector:4317"));
    assert_eq!(t.sample_ratio, 0.25);
    assert_eq!(t.service_name, "bae-prod");
    assert!(!t.traces_enabled);
    assert!(t.metrics_enabled);
    assert_eq!(t.metrics_disabled, ["bae.events.total", "bae.tool.latency"]);
}

#[test]
fn debug_output_redacts_secrets() {
    let cfg = parse(FULL).unwrap();
    let dbg = format!("{cfg:?}");
    assert!(!dbg.contains("literal-token"), "{dbg}");
    assert!(!dbg.contains("SEARCH_MCP_TOKEN"), "{dbg}");
    assert!(!dbg.contains("OTEL_KEY"), "{dbg}");
    assert!(dbg.contains("Authorization"));
}

#[test]
fn empty_inputs_are_empty_config() {
    assert_eq!(parse("").unwrap(), FileConfig::default());
    assert_eq!(parse("# only a comment\n").unwrap(), FileConfig::default());
    assert_eq!(
        parse("[mcp]\n[providers]\n").unwrap(),
        FileConfig::default()
    );
    let t = Telemetry::default();
    assert!(!t.enabled);
    assert_eq!(t.sample_ratio, 1.0);
    assert_eq!(t.service_name, "baesrv");
    assert!(t.traces_enabled && t.metrics_enabled);
}

#[test]
fn missing_file_is_empty_c219() {
    assert_eq!(load_file(None).unwrap(), FileConfig::default());
    let p = std::env::temp_dir().join(format!("bae-no-such-{}.toml", std::process::id()));
    assert_eq!(load_file(Some(&p)).unwrap(), FileConfig::default());
}

#[test]
fn unreadable_and_invalid_files() {
    let dir = std::env::temp_dir().join(format!("bae-cfg-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A directory exists but cannot be read as a file.
    let err = load_file(Some(&dir)).unwrap_err();
    assert!(matches!(err, ConfigError::CannotReadFile { .. }), "{err:?}");
    assert!(err
        .to_string()
        .starts_with(&format!("cannot read config file \"{}\": ", dir.display())));
    assert_eq!(err.exit_code(), 2);

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[mcp\n").unwrap();
    let err = load_file(Some(&bad)).unwrap_err();
    assert!(err.to_string().starts_with(&format!(
        "invalid config file \"{}\": TOML parse error at line 1",
        bad.display()
    )));
    assert!(!err.to_string().contains('\n'));

    let bin = dir.join("bin.toml");
    std::fs::write(&bin, b"x = \"\xff\"").unwrap();
    assert!(matches!(
        load_file(Some(&bin)).unwrap_err(),
        ConfigError::InvalidFile { .. }
    ));

    let good = dir.join("good.toml");
    std::fs::write(&good, FULL).unwrap();
    assert_eq!(load_file(Some(&good)).unwrap().providers.len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn mcp_duplicates_and_missing_command_c220() {
    let err = parse(
        r#"
[[mcp.servers]]
name = "a"
transport = "stdio"
command = "x"
[[mcp.servers]]
name = "a"
transport = "sse"
url = "http://h/sse"
"#,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "duplicate MCP server name \"a\" in [mcp.servers]"
    );
    assert_eq!(err.exit_code(), 2);

    let err = parse("[[mcp.servers]]\nname = \"fs\"\ntransport = \"stdio\"\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "MCP server \"fs\" uses transport \"stdio\" but is missing required field \"command\""
    );
    let err = parse("[[mcp.servers]]\nname = \"fs\"\ntransport = \"stdio\"\ncommand = \"  \"\n")
        .unwrap_err();
    assert!(matches!(
        err,
        ConfigError::McpMissingField {
            field: "command",
            ..
        }
    ));
    for t in ["sse", "http"] {
        let err = parse(&format!(
            "[[mcp.servers]]\nname = \"r\"\ntransport = \"{t}\"\nurl = \"\"\n"
        ))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "MCP server \"r\" uses transport \"{t}\" but is missing required field \"url\""
            )
        );
    }
    let err = parse("[[mcp.servers]]\nname = \" \"\ntransport = \"stdio\"\ncommand = \"x\"\n")
        .unwrap_err();
    assert_eq!(err, ConfigError::BlankMcpServerName);
}

#[test]
fn mcp_schema_errors() {
    let d = invalid_detail("[[mcp.servers]]\nname = \"x\"\ntransport = \"ws\"\n");
    assert_eq!(
        d,
        "mcp.servers[0].transport: unsupported transport \"ws\" (expected \"stdio\", \"sse\" or \"http\")"
    );
    let d = invalid_detail("[[mcp.servers]]\nname = \"x\"\n");
    assert_eq!(d, "mcp.servers[0]: missing required field \"transport\"");
    let d = invalid_detail(
        "[[mcp.servers]]\nname = \"x\"\ntransport = \"stdio\"\ncommand = \"c\"\nargs = [1]\n",
    );
    assert_eq!(
        d,
        "mcp.servers[0].args[0]: expected a string, found integer"
    );
    let d = invalid_detail(
        "[[mcp.servers]]\nname = \"x\"\ntransport = \"http\"\nurl = \"u\"\nheaders = { A = 1 }\n",
    );
    assert_eq!(
        d,
        "mcp.servers[0].headers.A: expected a string, found integer"
    );
    let d = invalid_detail("[mcp]\nservers = 3\n");
    assert_eq!(d, "mcp.servers: expected an array of tables, found integer");
    let d = invalid_detail("mcp = \"x\"\n");
    assert_eq!(d, "mcp: expected a table, found string");
}

#[test]
fn unknown_keys_c224() {
    // Unknown top-level tables and keys are ignored.
    let cfg = parse("future = 1\n[sandbox]\nimage = \"x\"\n[compaction.x]\ny = 2\n").unwrap();
    assert_eq!(cfg, FileConfig::default());
    // Unknown key in an mcp.servers entry is an error.
    let d = invalid_detail(
        "[[mcp.servers]]\nname = \"x\"\ntransport = \"stdio\"\ncommand = \"c\"\nenv = {}\n",
    );
    assert_eq!(d, "unknown key \"env\" in mcp.servers[0]");
    assert_eq!(
        invalid_detail("[mcp]\nextra = true\n"),
        "unknown key \"extra\" in [mcp]"
    );
    assert_eq!(
        invalid_detail("[providers]\nextra = true\n"),
        "unknown key \"extra\" in [providers]"
    );
    assert_eq!(
        invalid_detail("[telemetry]\nendpoint = \"x\"\n"),
        "unknown key \"endpoint\" in [telemetry]"
    );
    // Unknown telemetry keys fail even when telemetry is disabled.
    assert_eq!(
        invalid_detail("[telemetry]\nenabled = false\n[telemetry.traces]\nratio = 1\n"),
        "unknown key \"ratio\" in [telemetry.traces]"
    );
    assert_eq!(
        invalid_detail("[telemetry.metrics]\nexclude = []\n"),
        "unknown key \"exclude\" in [telemetry.metrics]"
    );
    // Unknown keys inside providers.entries are ignored.
    let cfg = parse(
        "[[providers.entries]]\nname = \"p\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\ntemperature = 0.5\n",
    )
    .unwrap();
    assert_eq!(cfg.providers.len(), 1);
}

#[test]
fn provider_errors_c221() {
    let d = invalid_detail(
        "[[providers.entries]]\nname = \"p\"\nprovider = \"gemini\"\nmodel = \"m\"\nauth_token = \"t\"\n",
    );
    assert_eq!(
        d,
        "providers.entries[0].provider: unknown provider kind \"gemini\" (expected \"anthropic\" or \"openai\")"
    );
    let entry = "[[providers.entries]]\nname = \"p\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\n";
    let err = parse(&format!("{entry}{entry}")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "duplicate provider name \"p\" in [providers.entries]"
    );
    assert_eq!(err.exit_code(), 2);
    let d = invalid_detail(
        "[[providers.entries]]\nname = \"p\"\nprovider = \"openai\"\nauth_token = \"t\"\n",
    );
    assert_eq!(d, "providers.entries[0]: missing required field \"model\"");
    let d = invalid_detail(
        "[[providers.entries]]\nname = \"p\"\nprovider = \"openai\"\nmodel = \"m\"\n",
    );
    assert_eq!(
        d,
        "providers.entries[0]: missing required field \"auth_token\""
    );
    let d = invalid_detail(&format!("{entry}max_tokens = -1\n"));
    assert_eq!(
        d,
        "providers.entries[0].max_tokens: -1 is out of range for an unsigned 32-bit integer"
    );
    assert!(parse(&format!("{entry}max_tokens = 4294967296\n")).is_err());
    assert_eq!(
        parse(&format!("{entry}max_tokens = 4294967295\n"))
            .unwrap()
            .providers[0]
            .max_tokens,
        u32::MAX
    );
    let d = invalid_detail(&format!("{entry}max_tokens = \"10\"\n"));
    assert_eq!(
        d,
        "providers.entries[0].max_tokens: expected an integer, found string"
    );
    let err = parse(
        "[[providers.entries]]\nname = \"\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\n",
    )
    .unwrap_err();
    assert_eq!(err, ConfigError::BlankProviderName);
}

#[test]
fn mcp_and_provider_may_share_a_name_c222() {
    let cfg = parse(
        r#"
[[mcp.servers]]
name = "shared"
transport = "stdio"
command = "x"
[[providers.entries]]
name = "shared"
provider = "anthropic"
model = "m"
auth_token = "t"
"#,
    )
    .unwrap();
    assert!(cfg.mcp_server("shared").is_some());
    assert!(cfg.provider("shared").is_some());
}

#[test]
fn telemetry_validation_c223() {
    let err = parse("[telemetry]\nenabled = true\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "[telemetry] enabled = true requires a non-empty otlp_endpoint"
    );
    assert_eq!(err.exit_code(), 2);
    let err = parse("[telemetry]\nenabled = true\notlp_endpoint = \"\"\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "[telemetry] enabled = true requires a non-empty otlp_endpoint"
    );
    for bad in [
        "collector:4317",
        "grpc://c:4317",
        "http://",
        "http://:4317",
        "http://h:port",
        "http://h:99999",
        "http://a b",
    ] {
        let err = parse(&format!(
            "[telemetry]\nenabled = true\notlp_endpoint = \"{bad}\"\n"
        ))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("[telemetry] otlp_endpoint \"{bad}\" must be a valid http:// or https:// URL")
        );
    }
    for good in [
        "http://c:4317",
        "HTTPS://otel.example.com",
        "https://u:p@[::1]:4317/v1",
        "http://10.0.0.1",
    ] {
        parse(&format!(
            "[telemetry]\nenabled = true\notlp_endpoint = \"{good}\"\n"
        ))
        .unwrap_or_else(|e| panic!("{good}: {e}"));
    }
    let base = "[telemetry]\nenabled = true\notlp_endpoint = \"http://c:4317\"\n";
    // `otlp_protocol`: an addition beyond spec 04 (docs/configuration.md).
    let err = parse(&format!("{base}otlp_protocol = \"http/json\"\n")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "[telemetry] otlp_protocol \"http/json\" must be \"grpc\" or \"http/protobuf\""
    );
    let t = parse(&format!("{base}otlp_protocol = \"http/protobuf\"\n")).unwrap();
    assert_eq!(
        t.telemetry.protocol(),
        Some(crate::config::OtlpProtocol::HttpProtobuf)
    );
    let t = parse(base).unwrap();
    assert_eq!(
        t.telemetry.protocol(),
        Some(crate::config::OtlpProtocol::Grpc)
    );
    // Not validated while telemetry is off.
    assert!(parse("[telemetry]\notlp_protocol = \"x\"\n").is_ok());
    let err = parse(&format!("{base}sample_ratio = 1.5\n")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "[telemetry] sample_ratio 1.5 must be between 0.0 and 1.0"
    );
    assert!(parse(&format!("{base}sample_ratio = -0.1\n")).is_err());
    assert!(parse(&format!("{base}sample_ratio = nan\n")).is_err());
    assert!(parse(&format!("{base}sample_ratio = inf\n")).is_err());
    assert_eq!(
        parse(&format!("{base}sample_ratio = 0\n"))
            .unwrap()
            .telemetry
            .sample_ratio,
        0.0
    );
    let err = parse(&format!(
        "{base}[telemetry.metrics]\ndisabled = [\"bae.nope\"]\n"
    ))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "[telemetry.metrics] disabled contains unknown metric \"bae.nope\""
    );
    let err = parse(&format!(
        "{base}otlp_headers = {{ \"bad name\" = \"v\" }}\n"
    ))
    .unwrap_err();
    assert!(matches!(err, ConfigError::Telemetry(_)));

    // Disabled: values are not validated.
    let cfg = parse(
        "[telemetry]\nenabled = false\nsample_ratio = 7.0\notlp_endpoint = \"nope\"\n\
         [telemetry.metrics]\ndisabled = [\"whatever\"]\n",
    )
    .unwrap();
    assert!(!cfg.telemetry.enabled);
    assert_eq!(cfg.telemetry.sample_ratio, 7.0);
    // Absent `enabled` means disabled.
    assert!(parse("[telemetry]\nsample_ratio = 2.0\n").is_ok());
    // Types are still checked when disabled.
    assert_eq!(
        invalid_detail("[telemetry]\nsample_ratio = \"x\"\n"),
        "telemetry.sample_ratio: expected a float, found string"
    );
    assert_eq!(
        invalid_detail("[telemetry]\nenabled = \"yes\"\n"),
        "telemetry.enabled: expected a boolean, found string"
    );
}

#[test]
fn all_metric_names_accepted() {
    let list: Vec<String> = METRIC_NAMES.iter().map(|n| format!("\"{n}\"")).collect();
    let cfg = parse(&format!(
        "[telemetry]\nenabled = true\notlp_endpoint = \"http://c:4317\"\n\
         [telemetry.metrics]\ndisabled = [{}]\n",
        list.join(", ")
    ))
    .unwrap();
    assert_eq!(cfg.telemetry.metrics_disabled.len(), 16);
}

#[test]
fn error_phase_order() {
    // Schema error beats telemetry error beats registry error.
    let dup = "[[providers.entries]]\nname = \"p\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\n";
    let tel = "[telemetry]\nenabled = true\n";
    let err = parse(&format!("{dup}{dup}{tel}")).unwrap_err();
    assert!(matches!(err, ConfigError::Telemetry(_)));
    let err = parse(&format!("{dup}{dup}{tel}[mcp]\nx = 1\n")).unwrap_err();
    assert!(matches!(err, ConfigError::InvalidFile { .. }));
    // MCP registry errors come before provider registry errors.
    let mcp = "[[mcp.servers]]\nname = \"s\"\ntransport = \"stdio\"\n";
    let err = parse(&format!("{dup}{dup}{mcp}")).unwrap_err();
    assert!(matches!(err, ConfigError::McpMissingField { .. }));
}

#[test]
fn otlp_header_resolution() {
    let tel = parse(
        "[telemetry]\nenabled = true\notlp_endpoint = \"http://c:4317\"\n\
         otlp_headers = { \"x-api-key\" = \"k-${KEY}\", Tenant = \"t1\" }\n",
    )
    .unwrap()
    .telemetry;
    let get = |n: &str| (n == "KEY").then(|| "secret".to_string());
    let hs = resolve_otlp_headers(&tel, get).unwrap();
    assert_eq!(
        hs,
        vec![
            ("Tenant".to_string(), "t1".to_string()),
            ("x-api-key".to_string(), "k-secret".to_string())
        ]
    );
    let err = resolve_otlp_headers(&tel, |_| None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "[telemetry] otlp_headers \"x-api-key\": environment variable KEY is not set"
    );
    assert_eq!(err.exit_code(), 2);
    let err = resolve_otlp_headers(&tel, |_| Some("bad\nvalue".into())).unwrap_err();
    assert!(!err.to_string().contains("bad"), "{err}");

    let mut off = tel.clone();
    off.enabled = false;
    assert!(resolve_otlp_headers(&off, |_| None).unwrap().is_empty());

    let mut unterminated = tel;
    unterminated
        .otlp_headers
        .insert("a".into(), "${OOPS".into());
    assert_eq!(
        resolve_otlp_headers(&unterminated, get)
            .unwrap_err()
            .to_string(),
        "[telemetry] otlp_headers \"a\": unterminated ${...} token"
    );
}

/// Found by the `config_inputs` fuzz target: a non-ASCII host in a URL that
/// is invalid for another reason too (a port that is not a number), or
/// percent-encoded bytes that are not UTF-8, were not recognised as such and went to the URL parser's IDNA step, whose ASCII
/// fast path it misses; with uppercase letters in the host the IDNA adapter
/// then trips a debug assertion, so a debug build panicked on the file. It
/// is the non-ASCII host error whatever else is wrong with the URL.
#[test]
fn a_non_ascii_host_is_named_even_when_the_port_is_bad() {
    let cases = [
        (
            "[telemetry]\nenabled = true\notlp_endpoint = \"http://127.0.0.1FFFF\u{fffd}FFFF:431\u{fffd}8\"\n",
            "[telemetry] otlp_endpoint",
            "127.0.0.1FFFF\u{fffd}FFFF",
        ),
        (
            "[[mcp.servers]]\nname = \"m\"\ntransport = \"http\"\nurl = \"http://u@B\u{fc}CHER.example:80x/mcp\"\n",
            "[[mcp.servers]] \"m\" url",
            "B\u{fc}CHER.example",
        ),
        (
            "[[providers.entries]]\nname = \"p\"\nprovider = \"anthropic\"\nmodel = \"m\"\nauth_token = \"t\"\nbase_url = \"https:\\\\%C3%89X.example:99999999/v1\"\n",
            "[[providers.entries]] \"p\" base_url",
            "\u{c9}X.example",
        ),
        // Percent-encoded bytes that are not UTF-8: the parser decodes
        // them to U+FFFD, so they are not ASCII either.
        (
            "[telemetry]\nenabled = true\notlp_endpoint = \"http://EX%FFAMPLE.com:4317\"\n",
            "[telemetry] otlp_endpoint",
            "EX\u{fffd}AMPLE.com",
        ),
        (
            "[telemetry]\nenabled = true\notlp_endpoint = \"http://EX%FFAMPLE.com:43x\"\n",
            "[telemetry] otlp_endpoint",
            "EX\u{fffd}AMPLE.com",
        ),
    ];
    for (text, at, host) in cases {
        let err = parse(text).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{at}: host \"{host}\" is not ASCII; write it in its ASCII form (xn--…, as idn2 prints it)"),
            "{text}"
        );
    }
}

/// The URL parser links no Unicode tables (idna_adapter 1.0), so a host
/// name must be written in ASCII: a non-ASCII one is refused at load with
/// the entry named, and its `xn--` form is accepted.
#[test]
fn non_ascii_host_names_are_refused_at_load() {
    let cases = [
        (
            "[[providers.entries]]\nname = \"p\"\nprovider = \"anthropic\"\nmodel = \"m\"\nauth_token = \"t\"\nbase_url = \"https://bücher.example/v1\"\n",
            "[[providers.entries]] \"p\" base_url",
        ),
        (
            "[[mcp.servers]]\nname = \"m\"\ntransport = \"http\"\nurl = \"http://u@bücher.example:8080/mcp\"\n",
            "[[mcp.servers]] \"m\" url",
        ),
        (
            "[telemetry]\nenabled = true\notlp_endpoint = \"http://bücher.example:4317\"\n",
            "[telemetry] otlp_endpoint",
        ),
    ];
    for (text, at) in cases {
        let err = parse(text).unwrap_err();
        assert!(matches!(err, ConfigError::NonAsciiHost { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "{at}: host \"bücher.example\" is not ASCII; write it in its ASCII form (xn--…, as idn2 prints it)"
            )
        );
        assert_eq!(err.exit_code(), 2);
    }
    // Non-ASCII outside the host (a path, a user name) is the parser's
    // business, not a host name.
    for url in [
        "https://xn--bcher-kva.example/v1",
        "https://api.example.com/bücher",
        "http://[::1]:8080/",
    ] {
        parse(&format!(
            "[[providers.entries]]\nname = \"p\"\nprovider = \"anthropic\"\nmodel = \"m\"\nauth_token = \"t\"\nbase_url = \"{url}\"\n"
        ))
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

/// What the load-time check stands for: ureq's URL parser takes the ASCII
/// form of an internationalised name and refuses the Unicode one.
#[test]
fn the_url_parser_takes_ascii_host_names_only() {
    let agent = ureq::AgentBuilder::new().build();
    assert!(agent
        .get("https://xn--bcher-kva.example/v1")
        .request_url()
        .is_ok());
    assert!(agent
        .get("https://bücher.example/v1")
        .request_url()
        .is_err());
}

/// The serde schema names TOML types and the place of the mistake for
/// every shape it reads, not only the ones tested above.
#[test]
fn schema_errors_name_toml_types_and_places() {
    let server = "[[mcp.servers]]\nname = \"x\"\ntransport = \"stdio\"\ncommand = \"c\"\n";
    for (extra, want) in [
        (
            "headers = 3\n",
            "mcp.servers[0].headers: expected a table of strings, found integer",
        ),
        (
            "args = \"a b\"\n",
            "mcp.servers[0].args: expected an array of strings, found string",
        ),
        (
            "reconnect = 1979-05-27\n",
            "mcp.servers[0].reconnect: expected a boolean, found datetime",
        ),
        (
            "url = [\"u\"]\n",
            "mcp.servers[0].url: expected a string, found array",
        ),
    ] {
        assert_eq!(invalid_detail(&format!("{server}{extra}")), want);
    }
    assert_eq!(
        invalid_detail("[mcp]\nservers = [1]\n"),
        "mcp.servers[0]: expected a table, found integer"
    );
    let entry = "[[providers.entries]]\nname = \"p\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\n";
    assert_eq!(
        invalid_detail(&format!("{entry}max_tokens = 1.5\n")),
        "providers.entries[0].max_tokens: expected an integer, found float"
    );
    assert_eq!(
        invalid_detail(&format!("{entry}[[providers.entries]]\nname = 1\n")),
        "providers.entries[1].name: expected a string, found integer"
    );
    assert_eq!(
        invalid_detail("[telemetry.metrics]\ndisabled = \"bae.events.total\"\n"),
        "telemetry.metrics.disabled: expected an array of strings, found string"
    );
    assert_eq!(
        invalid_detail("[telemetry]\ntraces = true\n"),
        "telemetry.traces: expected a table, found boolean"
    );
    assert_eq!(
        invalid_detail("[telemetry]\notlp_headers = { a = { b = \"c\" } }\n"),
        "telemetry.otlp_headers.a: expected a string, found table"
    );
}

/// Extension `stream` (docs/configuration.md): off by default, the
/// settings default when on, and checked whether on or off.
#[test]
fn provider_stream_settings() {
    let entry = "[[providers.entries]]\nname = \"p\"\nprovider = \"openai\"\nmodel = \"m\"\nauth_token = \"t\"\n";
    assert_eq!(parse(entry).unwrap().providers[0].stream, None);
    assert_eq!(
        parse(&format!("{entry}stream = false\nstream_idle_timeout = 5\n"))
            .unwrap()
            .providers[0]
            .stream,
        None
    );
    assert_eq!(
        parse(&format!("{entry}stream = true\n")).unwrap().providers[0].stream,
        Some(ProviderStream::default())
    );
    let on = parse(&format!(
        "{entry}stream = true\nstream_first_byte_timeout = 7\nstream_idle_timeout = 3\nstream_max_bytes = 4096\n"
    ))
    .unwrap();
    assert_eq!(
        on.providers[0].stream,
        Some(ProviderStream {
            first_byte_timeout_secs: 7,
            idle_timeout_secs: 3,
            max_bytes: 4096,
        })
    );
    for (bad, found) in [("0", "integer"), ("-2", "integer"), ("\"5\"", "string")] {
        let d = invalid_detail(&format!("{entry}stream_idle_timeout = {bad}\n"));
        assert_eq!(
            d,
            format!("providers.entries[0].stream_idle_timeout: expected a positive integer, found {found}")
        );
    }
    let d = invalid_detail(&format!("{entry}stream = 1\n"));
    assert_eq!(
        d,
        "providers.entries[0].stream: expected a boolean, found integer"
    );
}
