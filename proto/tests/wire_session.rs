//! Session open/join bodies, tool declarations, compaction config and REST
//! responses (seed "Sessions"; spec 01 §4, 06 §3.1 and §6.2, 07 §1;
//! C-016..C-031, C-040, C-044).

use proto::wire::compaction::*;
use proto::wire::problem::ProblemType;
use proto::wire::session::*;
use serde_json::{json, Value};

const SEED_OPEN: &str = r#"{
  "client_version": "1.0.0",
  "tools": [
    {
      "name": "get_current_time",
      "description": "Return the current UTC time as a string",
      "input_schema": {
        "type": "object",
        "properties": {}
      }
    }
  ],
  "sandbox_tools": [
    {
      "name": "run_shell_command",
      "description": "Run an arbitrary shell command inside the configured sandbox.",
      "input_schema": { "type": "object", "properties": { "command": { "type": "string" } }, "required": ["command"] }
    }
  ],
  "subagent_tools": [
    {
      "name": "launch_subagent",
      "description": "Launch a CLI subagent (claude, codex) to work on a task in the background.",
      "input_schema": { "type": "object", "properties": { "harness": { "type": "string" }, "model": { "type": "string" }, "prompt": { "type": "string" } }, "required": ["harness", "model", "prompt"] },
      "image": "bae-subagents:latest",
      "subagents": [
        { "harness": "claude", "command_template": "claude --model {model} --print", "prompt_via": "stdin", "timeout_secs": 600 },
        { "harness": "codex", "command_template": "codex exec --model {model}", "prompt_via": "stdin", "timeout_secs": 600 }
      ]
    }
  ],
  "compaction": { "mode": "auto", "size": 128000 }
}"#;

#[test]
fn seed_open_body_parses() {
    let r = parse_open(SEED_OPEN.as_bytes()).unwrap();
    assert_eq!(r.client_version.as_deref(), Some("1.0.0"));
    assert_eq!(r.tools.len(), 1);
    assert_eq!(r.sandbox_tools[0].name, "run_shell_command");
    assert_eq!(r.subagent_tools[0].subagents.len(), 2);
    assert_eq!(r.subagent_tools[0].subagents[1].timeout_secs, Some(600));
    assert_eq!(r.compaction, CompactionConfig::Auto { size: 128000 });
    assert!(r.check_reserved_names().is_ok());
    assert!(r.validate_subagent_tools().is_ok());
    assert!(r.check_allowed(&["get_current_time".to_owned()]).is_ok());
    assert_eq!(
        serde_json::to_string(&r.event_payload()).unwrap(),
        r#"{"client_version":"1.0.0","tools":["get_current_time"],"sandbox_tools":["run_shell_command"],"subagent_tools":["launch_subagent"]}"#
    );
    // Provider-facing part of a subagent declaration.
    let pt = serde_json::to_value(r.subagent_tools[0].provider_tool()).unwrap();
    assert_eq!(
        pt.as_object().unwrap().keys().collect::<Vec<_>>(),
        vec!["name", "description", "input_schema"]
    );
}

#[test]
fn empty_object_is_all_defaults_and_c027_client_version_null() {
    let r = parse_open(b"{}").unwrap();
    assert_eq!(r.client_version, None);
    assert!(r.tools.is_empty() && r.sandbox_tools.is_empty() && r.subagent_tools.is_empty());
    assert_eq!(r.compaction, CompactionConfig::Client { prompt: None });
    assert_eq!(
        serde_json::to_string(&r.event_payload()).unwrap(),
        r#"{"client_version":null,"tools":[],"sandbox_tools":[],"subagent_tools":[]}"#
    );
    let r = parse_open(br#"{"tools":null,"client_version":null}"#).unwrap();
    assert!(r.tools.is_empty());
}

#[test]
fn c017_non_json_body_is_raw_parser_text() {
    let e = parse_open(b"not json").unwrap_err();
    assert_eq!(
        e,
        serde_json::from_slice::<Value>(b"not json")
            .unwrap_err()
            .to_string()
    );
    assert!(e.starts_with("expected "), "{e}");
    assert!(!parse_open(b"").unwrap_err().is_empty());
    assert!(!parse_join(b"{")
        .unwrap_err()
        .starts_with("invalid request body"));
}

#[test]
fn c018_auto_size_below_minimum() {
    let e = parse_open(br#"{"compaction":{"mode":"auto","size":999}}"#).unwrap_err();
    assert_eq!(
        e,
        "invalid compaction config: size must be at least 1000 tokens"
    );
    assert_eq!(e, SIZE_TOO_SMALL_DETAIL);
    assert!(parse_open(br#"{"compaction":{"mode":"auto","size":1000}}"#).is_ok());
    assert!(parse_open(br#"{"compaction":{"mode":"auto","size":0}}"#).is_err());
}

#[test]
fn c019_malformed_compaction_details() {
    let cases = [
        (
            r#"{"compaction":{"mode":"auto"}}"#,
            "invalid compaction config: missing field `size`",
        ),
        (
            r#"{"compaction":{"mode":"manual"}}"#,
            "invalid compaction config: unknown variant `manual`, expected `auto` or `client`",
        ),
        (
            r#"{"compaction":{"size":5000}}"#,
            "invalid compaction config: missing field `mode`",
        ),
        (
            r#"{"compaction":{"mode":"auto","size":"big"}}"#,
            "invalid compaction config: invalid type: string \"big\", expected u64",
        ),
        (
            r#"{"compaction":{"mode":"auto","size":-1}}"#,
            "invalid compaction config: invalid value: integer `-1`, expected u64",
        ),
        (
            r#"{"compaction":{"mode":"auto","size":1500.5}}"#,
            "invalid compaction config: invalid type: floating point `1500.5`, expected u64",
        ),
        (
            r#"{"compaction":{"mode":"client","prompt":5}}"#,
            "invalid compaction config: invalid type: integer `5`, expected a string",
        ),
        (
            r#"{"compaction":{"mode":"AUTO","size":5000}}"#,
            "invalid compaction config: unknown variant `AUTO`, expected `auto` or `client`",
        ),
    ];
    for (body, detail) in cases {
        assert_eq!(parse_open(body.as_bytes()).unwrap_err(), detail, "{body}");
    }
    for body in [
        r#"{"compaction":5}"#,
        r#"{"compaction":"auto"}"#,
        r#"{"compaction":[]}"#,
    ] {
        let e = parse_open(body.as_bytes()).unwrap_err();
        assert!(e.starts_with("invalid compaction config: "), "{e}");
    }
}

#[test]
fn c020_other_malformed_fields_are_invalid_request_body() {
    let cases = [
        r#"{"tools":"x"}"#,
        r#"{"tools":[{"description":"no name"}]}"#,
        r#"{"tools":[{"name":1}]}"#,
        r#"{"client_version":5}"#,
        r#"{"sandbox_tools":{}}"#,
        r#"{"subagent_tools":[{"name":"launch_subagent"}]}"#,
        r#"{"subagent_tools":[{"name":"l","image":"i","subagents":[{"harness":"claude"}]}]}"#,
        r#"{"subagent_tools":[{"name":"l","image":"i","subagents":[{"harness":"c","command_template":"c","timeout_secs":-1}]}]}"#,
        r#"[]"#,
        r#"42"#,
    ];
    for body in cases {
        let e = parse_open(body.as_bytes()).unwrap_err();
        assert!(e.starts_with("invalid request body: "), "{body}: {e}");
        let e = parse_join(body.as_bytes()).unwrap_err();
        assert!(e.starts_with("invalid request body: "), "{body}: {e}");
    }
    assert_eq!(
        parse_open(br#"{"tools":[{"description":"no name"}]}"#).unwrap_err(),
        "invalid request body: missing field `name`"
    );
    assert_eq!(
        parse_open(b"[1]").unwrap_err(),
        "invalid request body: invalid type: sequence, expected a JSON object"
    );
    // A body error wins over a compaction error.
    let e = parse_open(br#"{"compaction":{"mode":"auto"},"tools":5}"#).unwrap_err();
    assert!(e.starts_with("invalid request body: "), "{e}");
}

#[test]
fn c021_null_compaction_is_client_mode() {
    let r = parse_open(br#"{"compaction":null}"#).unwrap();
    assert_eq!(r.compaction, CompactionConfig::Client { prompt: None });
    assert_eq!(r.compaction.to_json(), r#"{"mode":"client"}"#);
}

#[test]
fn compaction_normalized_json_and_storage() {
    let c = |body: &str| parse_open(body.as_bytes()).unwrap().compaction;
    assert_eq!(
        c(r#"{"compaction":{"mode":"auto","size":128000,"prompt":"ignored"}}"#).to_json(),
        r#"{"mode":"auto","size":128000}"#
    );
    assert_eq!(
        c(r#"{"compaction":{"mode":"client","size":5}}"#).to_json(),
        r#"{"mode":"client"}"#
    );
    let with_prompt =
        c(r#"{"compaction":{"mode":"client","prompt":"Keep every file path and open TODO."}}"#);
    assert_eq!(
        with_prompt.to_json(),
        r#"{"mode":"client","prompt":"Keep every file path and open TODO."}"#
    );
    assert_eq!(
        with_prompt.client_prompt(),
        Some("Keep every file path and open TODO.")
    );
    assert_eq!(
        c(r#"{"compaction":{"mode":"client","prompt":null}}"#).to_json(),
        r#"{"mode":"client"}"#
    );
    for cfg in [
        CompactionConfig::Auto { size: 1000 },
        CompactionConfig::Client { prompt: None },
        CompactionConfig::Client {
            prompt: Some("q\"\n".into()),
        },
    ] {
        assert_eq!(cfg.to_json(), serde_json::to_string(&cfg).unwrap());
        assert_eq!(CompactionConfig::from_stored(Some(&cfg.to_json())), cfg);
    }
    assert_eq!(
        CompactionConfig::from_stored(None),
        CompactionConfig::default()
    );
    assert_eq!(
        CompactionConfig::Auto { size: 2000 }.auto_size(),
        Some(2000)
    );
    assert_eq!(CompactionConfig::default().auto_size(), None);
    assert_eq!(CompactionConfig::Auto { size: 2000 }.client_prompt(), None);
    assert_eq!(
        CompactionConfig::from_value(&json!({"mode":"auto"})).unwrap_err(),
        "invalid compaction config: missing field `size`"
    );
}

#[test]
fn c030_unknown_top_level_fields_ignored() {
    let r = parse_open(br#"{"client_version":"2","future_field":{"x":[1,2]},"tools":[]}"#).unwrap();
    assert_eq!(r.client_version.as_deref(), Some("2"));
    // Unknown members inside tool declarations are ignored too.
    assert!(parse_open(br#"{"tools":[{"name":"a","extra":1}]}"#).is_ok());
}

#[test]
fn c031_join_reports_compaction_presence() {
    let seed_join = r#"{
  "client_version": "1.0.0",
  "tools": [
    { "name": "get_current_time", "description": "…", "input_schema": {} }
  ],
  "subagent_tools": []
}"#;
    let j = parse_join(seed_join.as_bytes()).unwrap();
    assert!(!j.compaction_present);
    assert!(j.check_no_compaction().is_ok());
    assert_eq!(j.tools[0].input_schema, Some(json!({})));
    for body in [
        r#"{"compaction":null}"#,
        r#"{"compaction":{"mode":"client"}}"#,
        r#"{"compaction":{"mode":"bogus"}}"#,
        r#"{"compaction":5}"#,
    ] {
        let j = parse_join(body.as_bytes()).unwrap();
        assert!(j.compaction_present, "{body}");
        assert_eq!(
            j.check_no_compaction().unwrap_err(),
            "compaction is a session-level setting fixed at creation and cannot be set on join"
        );
    }
    assert_eq!(
        JOIN_COMPACTION_DETAIL,
        "compaction is a session-level setting fixed at creation and cannot be set on join"
    );
    let p = parse_join(br#"{"client_version":"9","tools":[{"name":"a"}]}"#)
        .unwrap()
        .event_payload();
    assert_eq!(
        p,
        json!({"client_version":"9","tools":["a"],"sandbox_tools":[],"subagent_tools":[]})
    );
}

#[test]
fn client_tool_def_stored_form() {
    let r = parse_open(br#"{"tools":[{"name":"a"},{"name":"b","description":null,"input_schema":null},{"name":"c","description":"d","input_schema":{"type":"object"}}]}"#).unwrap();
    assert_eq!(
        serde_json::to_string(&r.tools).unwrap(),
        r#"[{"name":"a","description":null,"input_schema":{}},{"name":"b","description":null,"input_schema":{}},{"name":"c","description":"d","input_schema":{"type":"object"}}]"#
    );
    for t in &r.tools {
        assert_eq!(t.to_value(), serde_json::to_value(t).unwrap());
    }
    // The stored form round-trips.
    let back: Vec<ClientToolDef> =
        serde_json::from_str(&serde_json::to_string(&r.tools).unwrap()).unwrap();
    assert_eq!(
        serde_json::to_string(&back).unwrap(),
        serde_json::to_string(&r.tools).unwrap()
    );
    assert_eq!(
        ClientToolDef::named("x").to_value(),
        json!({"name":"x","description":null,"input_schema":{}})
    );
}

#[test]
fn c022_c023_allowlist() {
    let r = parse_open(br#"{"tools":[{"name":"get_current_time"},{"name":"rm"}],"sandbox_tools":[{"name":"run_shell_command"}]}"#).unwrap();
    let allowed = vec!["get_current_time".to_owned()];
    let p = r.check_allowed(&allowed).unwrap_err();
    assert_eq!(p.kind(), Some(ProblemType::ToolNotAllowed));
    assert_eq!(p.status, 403);
    assert_eq!(p.detail, "tool \"rm\" is not in the profile's allowlist");
    // C-023: empty allowlist rejects any non-empty tools.
    assert!(r.check_allowed(&[]).is_err());
    // C-024: sandbox tools are not checked.
    let r = parse_open(br#"{"sandbox_tools":[{"name":"run_shell_command"}]}"#).unwrap();
    assert!(r.check_allowed(&[]).is_ok());
    assert_eq!(first_disallowed(&r.tools, &[]), None);
}

#[test]
fn c025_reserved_tool_name() {
    for body in [
        r#"{"tools":[{"name":"remote_subagent_status"}]}"#,
        r#"{"sandbox_tools":[{"name":"remote_subagent_status"}]}"#,
    ] {
        let r = parse_open(body.as_bytes()).unwrap();
        let p = r.check_reserved_names().unwrap_err();
        assert_eq!(
            (p.type_.as_str(), p.status, p.detail.as_str()),
            (
                "reserved_tool_name",
                422,
                "remote_subagent_status is reserved"
            )
        );
        let j = parse_join(body.as_bytes()).unwrap();
        assert!(j.check_reserved_names().is_err());
    }
    let r = parse_open(br#"{"subagent_tools":[{"name":"remote_subagent_status","image":"i","subagents":[{"harness":"h","command_template":"c"}]}]}"#).unwrap();
    let p = r.validate_subagent_tools().unwrap_err();
    assert_eq!(
        (p.type_.as_str(), p.detail.as_str()),
        ("reserved_tool_name", "remote_subagent_status is reserved")
    );
}

fn decl(subagents: Value) -> SubagentToolDef {
    serde_json::from_value(
        json!({"name":"launch_subagent","image":"bae-subagents:latest","subagents":subagents}),
    )
    .unwrap()
}

fn decl_err(d: &SubagentToolDef) -> (String, String) {
    let p = d.validate().unwrap_err();
    (p.type_, p.detail)
}

#[test]
fn c028_duplicate_or_blank_harness() {
    let d = decl(json!([
        {"harness":"claude","command_template":"claude --model {model}"},
        {"harness":"claude","command_template":"claude2 --model {model}"}
    ]));
    assert_eq!(
        decl_err(&d),
        (
            "invalid_subagent_tools".into(),
            "harness must be non-empty and unique".into()
        )
    );
    let d = decl(json!([{"harness":" ","command_template":"x"}]));
    assert_eq!(decl_err(&d).1, "harness must be non-empty and unique");
}

#[test]
fn c029_prompt_via_placeholders() {
    let arg_without = decl(
        json!([{"harness":"codex","command_template":"codex exec --model {model}","prompt_via":"arg"}]),
    );
    assert_eq!(
        decl_err(&arg_without),
        (
            "invalid_subagent_tools".into(),
            "invalid command_template placeholders".into()
        )
    );
    let stdin_with = decl(
        json!([{"harness":"claude","command_template":"claude {prompt}","prompt_via":"stdin"}]),
    );
    assert_eq!(
        decl_err(&stdin_with).1,
        "invalid command_template placeholders"
    );
    let default_stdin_with =
        decl(json!([{"harness":"claude","command_template":"claude {prompt}"}]));
    assert_eq!(
        decl_err(&default_stdin_with).1,
        "invalid command_template placeholders"
    );
    let arg_twice = decl(
        json!([{"harness":"codex","command_template":"x {prompt} {prompt}","prompt_via":"arg"}]),
    );
    assert_eq!(
        decl_err(&arg_twice).1,
        "invalid command_template placeholders"
    );
    let ok = decl(json!([
        {"harness":"codex","command_template":"codex exec --model {model} {prompt}","prompt_via":"arg"},
        {"harness":"claude","command_template":"claude --model {model} --print {model}","prompt_via":"stdin","timeout_secs":600}
    ]));
    assert!(ok.validate().is_ok());
    // Unknown prompt_via: the template check fails first.
    let bad_via = decl(json!([{"harness":"h","command_template":"x","prompt_via":"file"}]));
    assert_eq!(
        decl_err(&bad_via).1,
        "invalid command_template placeholders"
    );
}

#[test]
fn subagent_declaration_other_rules() {
    let blank_name: SubagentToolDef = serde_json::from_value(
        json!({"name":" ","image":"i","subagents":[{"harness":"h","command_template":"c"}]}),
    )
    .unwrap();
    assert_eq!(
        decl_err(&blank_name),
        (
            "invalid_subagent_tools".into(),
            "tool name must be a non-empty string".into()
        )
    );
    let blank_image: SubagentToolDef = serde_json::from_value(
        json!({"name":"l","image":"","subagents":[{"harness":"h","command_template":"c"}]}),
    )
    .unwrap();
    assert_eq!(
        decl_err(&blank_image).1,
        "image and non-empty subagents are required"
    );
    assert_eq!(
        decl_err(&decl(json!([]))).1,
        "image and non-empty subagents are required"
    );
    assert_eq!(
        decl_err(&decl(json!([{"harness":"h","command_template":"  "}]))).1,
        "invalid command_template placeholders"
    );
    assert_eq!(
        decl_err(&decl(
            json!([{"harness":"h","command_template":"c","timeout_secs":0}])
        )),
        (
            "invalid_subagent_tools".into(),
            "timeout_secs must be a positive integer".into()
        )
    );
    let d = decl(json!([{"harness":"h","command_template":"c"}]));
    assert_eq!(d.subagents[0].prompt_via, "stdin");
    assert_eq!(d.subagents[0].prompt_via_kind(), Some(PromptVia::Stdin));
    assert!(d.entry("h").is_some() && d.entry("x").is_none());
    // Validation over a list stops at the first failing declaration.
    let list = vec![d.clone(), decl(json!([]))];
    assert_eq!(
        validate_subagent_tools(&list).unwrap_err().detail,
        "image and non-empty subagents are required"
    );
    // Parsed through the open body too.
    let r = parse_open(br#"{"subagent_tools":[{"name":"l","image":"i","subagents":[{"harness":"a","command_template":"a"},{"harness":"a","command_template":"b"}]}]}"#).unwrap();
    assert_eq!(
        r.validate_subagent_tools().unwrap_err().kind(),
        Some(ProblemType::InvalidSubagentTools)
    );
}

#[test]
fn template_grammar_and_interpolation() {
    assert_eq!(
        template_placeholders("claude --model {model} --print"),
        Some((1, 0))
    );
    assert_eq!(
        template_placeholders("{model}{model}{prompt}"),
        Some((2, 1))
    );
    assert_eq!(template_placeholders("no placeholders"), Some((0, 0)));
    for bad in [
        "{",
        "}",
        "a } b",
        "{other}",
        "{model",
        "{mo{model}",
        "{}",
        "x {prompt} }",
    ] {
        assert_eq!(template_placeholders(bad), None, "{bad}");
    }
    assert_eq!(shell_quote("it's"), r#"'it'\''s'"#);
    assert_eq!(shell_quote(""), "''");
    assert_eq!(
        interpolate_command(
            "codex exec --model {model} {prompt}",
            "gpt-5",
            Some("say 'hi' {model}")
        ),
        r#"codex exec --model 'gpt-5' 'say '\''hi'\'' {model}'"#
    );
    assert_eq!(
        interpolate_command("claude --model {model} --print", "m", None),
        "claude --model 'm' --print"
    );
    assert_eq!(
        interpolate_command("a {x} {prompt}", "m", None),
        "a {x} {prompt}"
    );
}

#[test]
fn session_state_and_responses() {
    for s in SessionState::ALL {
        assert_eq!(SessionState::parse(s.as_str()), Some(s));
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            format!("\"{}\"", s.as_str())
        );
    }
    assert_eq!(SessionState::parse("Open"), None);
    assert_eq!(session_closed_detail("closed"), "session is already closed");

    let resp = OpenSessionResponse {
        session_id: "ses_a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4".into(),
        session_key: "bae_ses_1a2b3c4d5e6f1a2b3c4d5e6f1a2b3c4d5e6f1a2b3c4d5e6f".into(),
        profile: SanitizedProfile {
            id: "pro_x".into(),
            name: "main".into(),
            allowed_tools: vec!["get_current_time".into()],
            mcp_servers: vec!["filesystem".into()],
            provider: ProviderSummary {
                provider: Some("anthropic".into()),
                model: Some("claude-sonnet-4-6".into()),
            },
        },
    };
    // C-016: exact members, no auth_token.
    assert_eq!(
        serde_json::to_string(&resp).unwrap(),
        r#"{"session_id":"ses_a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4","session_key":"bae_ses_1a2b3c4d5e6f1a2b3c4d5e6f1a2b3c4d5e6f1a2b3c4d5e6f","profile":{"id":"pro_x","name":"main","allowed_tools":["get_current_time"],"mcp_servers":["filesystem"],"provider":{"provider":"anthropic","model":"claude-sonnet-4-6"}}}"#
    );
    // C-044.
    let close = CloseResponse {
        session_id: "ses_1".into(),
        state: SessionState::Closed,
    };
    assert_eq!(
        serde_json::to_string(&close).unwrap(),
        r#"{"session_id":"ses_1","state":"closed"}"#
    );
    // C-040.
    assert_eq!(
        serde_json::to_string(&Participants { drivers: vec![] }).unwrap(),
        r#"{"drivers":[]}"#
    );
    // C-002.
    assert_eq!(
        serde_json::to_string(&Meta::new("0.1.0")).unwrap(),
        r#"{"version":"0.1.0","api_versions":["v1"]}"#
    );
}
