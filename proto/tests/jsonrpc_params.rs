//! Method-specific params (seed examples; spec 01 §6.5, 06 §3.2, §5, §6.5, §6.6; 07).

use proto::jsonrpc::*;
use proto::wire::event::EventType;
use serde_json::{json, Value};

#[test]
fn send_message_seed_example() {
    let p =
        SendMessageParams::parse(&json!({"message":{"role":"user","content":"What time is it?"}}))
            .unwrap();
    assert_eq!(
        p,
        SendMessageParams {
            role: "user".into(),
            content: json!("What time is it?")
        }
    );
}

#[test]
fn c070_send_message_missing_message() {
    for params in [
        json!({}),
        json!({"message":null}),
        json!({"msg":{}}),
        json!([]),
    ] {
        assert_eq!(
            SendMessageParams::parse(&params).unwrap_err().to_string(),
            "Invalid params: missing \"message\""
        );
    }
}

#[test]
fn c076_send_message_role_defaults_to_user() {
    let p = SendMessageParams::parse(&json!({"message":{"content":[{"type":"text","text":"hi"}]}}))
        .unwrap();
    assert_eq!(p.role, "user");
    let p = SendMessageParams::parse(&json!({"message":{"role":null,"content":"x"}})).unwrap();
    assert_eq!(p.role, "user");
    let p =
        SendMessageParams::parse(&json!({"message":{"role":"assistant","content":"x"}})).unwrap();
    assert_eq!(p.role, "assistant");
}

#[test]
fn send_message_detail_errors() {
    assert_eq!(
        SendMessageParams::parse(&json!({"message":{"role":"user"}}))
            .unwrap_err()
            .to_string(),
        "Invalid params: missing field `content`"
    );
    assert_eq!(
        SendMessageParams::parse(&json!({"message":"hi"}))
            .unwrap_err()
            .to_string(),
        "Invalid params: invalid type: string \"hi\", expected struct Message"
    );
    assert_eq!(
        SendMessageParams::parse(&json!({"message":{"role":5,"content":"x"}}))
            .unwrap_err()
            .to_string(),
        "Invalid params: invalid type: integer `5`, expected a string"
    );
    // Other content values are kept verbatim (classification is the engine's job).
    for content in [json!(null), json!(5), json!({"a":1}), json!(""), json!([])] {
        let p = SendMessageParams::parse(&json!({"message":{"content":content.clone()}})).unwrap();
        assert_eq!(p.content, content);
    }
}

#[test]
fn compact_params_c167() {
    assert_eq!(CompactParams::parse(&json!({})).unwrap().prompt, None);
    assert_eq!(
        CompactParams::parse(&json!({"prompt":null}))
            .unwrap()
            .prompt,
        None
    );
    assert_eq!(
        CompactParams::parse(
            &json!({"prompt":"Summarize focusing on the open TODOs and their file paths."})
        )
        .unwrap()
        .prompt
        .as_deref(),
        Some("Summarize focusing on the open TODOs and their file paths.")
    );
    assert_eq!(
        CompactParams::parse(&json!({"prompt":5}))
            .unwrap_err()
            .to_string(),
        "Invalid params: invalid type: integer `5`, expected a string"
    );
    assert_eq!(
        CompactParams::parse(&json!({"prompt":["a"]}))
            .unwrap_err()
            .to_string(),
        "Invalid params: invalid type: sequence, expected a string"
    );
    // Same text serde itself would produce for Option<String>.
    let serde_msg = serde_json::from_value::<Option<String>>(json!(5))
        .unwrap_err()
        .to_string();
    assert_eq!(
        CompactParams::parse(&json!({"prompt":5}))
            .unwrap_err()
            .to_string(),
        format!("Invalid params: {serde_msg}")
    );
}

#[test]
fn subscribe_params() {
    assert_eq!(
        SubscribeParams::parse(&json!({})).unwrap().since_event_id,
        None
    );
    assert_eq!(
        SubscribeParams::parse(&json!({"since_event_id":"evt_1"}))
            .unwrap()
            .since_event_id
            .as_deref(),
        Some("evt_1")
    );
    assert_eq!(
        SubscribeParams::parse(&json!({"since_event_id":null}))
            .unwrap()
            .since_event_id,
        None
    );
    assert!(SubscribeParams::parse(&json!({"since_event_id":1}))
        .unwrap_err()
        .to_string()
        .starts_with("Invalid params: "));
}

#[test]
fn c115_update_client_tools_params() {
    let seed = json!({"tools":[{"name":"get_current_time","description":"Return the current UTC time as a string","input_schema":{"type":"object","properties":{}}}]});
    let p = UpdateClientToolsParams::parse(&seed).unwrap();
    assert_eq!(p.tools.len(), 1);
    assert_eq!(p.tools[0].name, "get_current_time");
    assert_eq!(
        UpdateClientToolsParams::parse(&json!({"tools":[]}))
            .unwrap()
            .tools
            .len(),
        0
    );
    assert_eq!(
        UpdateClientToolsParams::parse(&json!({}))
            .unwrap_err()
            .to_string(),
        "Invalid params: missing \"tools\""
    );
    assert_eq!(
        UpdateClientToolsParams::parse(&json!({"tools":null}))
            .unwrap_err()
            .to_string(),
        "Invalid params: missing \"tools\""
    );
    for bad in [
        json!({"tools":[{"name":""}]}),
        json!({"tools":[{"name":"a"},{"name":"  "}]}),
    ] {
        assert_eq!(
            UpdateClientToolsParams::parse(&bad)
                .unwrap_err()
                .to_string(),
            "Invalid params: every tool requires a non-empty \"name\""
        );
    }
    assert_eq!(
        UpdateClientToolsParams::parse(&json!({"tools":[{}]}))
            .unwrap_err()
            .to_string(),
        "Invalid params: missing field `name`"
    );
    assert_eq!(
        UpdateClientToolsParams::parse(&json!({"tools":[{"name":3}]}))
            .unwrap_err()
            .to_string(),
        "Invalid params: invalid type: integer `3`, expected a string"
    );
    assert_eq!(
        UpdateClientToolsParams::parse(&json!({"tools":"x"}))
            .unwrap_err()
            .to_string(),
        "Invalid params: invalid type: string \"x\", expected a sequence"
    );
    assert_eq!(
        UpdateClientToolsParams::parse(&json!({"tools":[5]}))
            .unwrap_err()
            .to_string(),
        "Invalid params: invalid type: integer `5`, expected struct ClientToolDef"
    );
    // Stored form normalizes missing description / schema.
    let p = UpdateClientToolsParams::parse(&json!({"tools":[{"name":"local_subagent_status"}]}))
        .unwrap();
    assert_eq!(
        serde_json::to_string(&p.tools).unwrap(),
        r#"[{"name":"local_subagent_status","description":null,"input_schema":{}}]"#
    );
}

#[test]
fn c113_c114_update_client_tools_allowlist() {
    let allowed = vec!["get_current_time".to_owned(), "launch_subagent".to_owned()];
    let p =
        UpdateClientToolsParams::parse(&json!({"tools":[{"name":"get_current_time"}]})).unwrap();
    assert!(p.check_allowed(&allowed).is_ok());
    let p = UpdateClientToolsParams::parse(
        &json!({"tools":[{"name":"get_current_time"},{"name":"rm_rf"},{"name":"x"}]}),
    )
    .unwrap();
    let e = p.check_allowed(&allowed).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            -32015,
            "tool_not_allowed: tool \"rm_rf\" is not in the profile's allowlist"
        )
    );
    // The reserved name wins even when listed after a disallowed one and even when allowlisted.
    let mut allowed2 = allowed.clone();
    allowed2.push("remote_subagent_status".into());
    let p = UpdateClientToolsParams::parse(
        &json!({"tools":[{"name":"nope"},{"name":"remote_subagent_status"}]}),
    )
    .unwrap();
    let e = p.check_allowed(&allowed2).unwrap_err();
    assert_eq!(
        e.message,
        "tool_not_allowed: tool \"remote_subagent_status\" is not in the profile's allowlist"
    );
    // Empty allowlist allows nothing, but an empty list is fine.
    let p = UpdateClientToolsParams::parse(&json!({"tools":[{"name":"a"}]})).unwrap();
    assert!(p.check_allowed(&[]).is_err());
    assert!(UpdateClientToolsParams::parse(&json!({"tools":[]}))
        .unwrap()
        .check_allowed(&[])
        .is_ok());
}

#[test]
fn c138_start_remote_sandbox_image() {
    assert_eq!(
        StartRemoteSandboxParams::parse(&json!({"image":"python:3.12"}))
            .unwrap()
            .image,
        "python:3.12"
    );
    for bad in [
        json!({}),
        json!({"image":""}),
        json!({"image":"   "}),
        json!({"image":null}),
        json!({"image":3}),
    ] {
        assert_eq!(
            StartRemoteSandboxParams::parse(&bad)
                .unwrap_err()
                .to_string(),
            "Invalid params: missing \"image\"",
            "{bad}"
        );
    }
}

#[test]
fn c144_exec_remote_sandbox_command() {
    assert_eq!(
        ExecRemoteSandboxParams::parse(&json!({"command":"python --version"}))
            .unwrap()
            .command,
        "python --version"
    );
    for bad in [
        json!({}),
        json!({"command":null}),
        json!({"command":["ls"]}),
    ] {
        assert_eq!(
            ExecRemoteSandboxParams::parse(&bad)
                .unwrap_err()
                .to_string(),
            "Invalid params: missing \"command\""
        );
    }
}

#[test]
fn c149_report_local_sandbox_states() {
    let seed = json!({"state":"running","image":"python:3.12","container_id":"abc","detail":null});
    let p = ReportLocalSandboxParams::parse(&seed).unwrap();
    assert_eq!(p.state, LocalSandboxState::Running);
    assert_eq!(p.event_type(), EventType::SessionSandboxRunning);
    assert_eq!(
        serde_json::to_string(&p.payload()).unwrap(),
        r#"{"dispatch":"local","image":"python:3.12","unsandboxed":false,"container_id":"abc","detail":null}"#
    );
    for (s, et) in [
        ("stopped", EventType::SessionSandboxStopped),
        ("error", EventType::SessionSandboxError),
    ] {
        let p =
            ReportLocalSandboxParams::parse(&json!({"state":s,"image":"i","detail":"d"})).unwrap();
        assert_eq!(p.event_type(), et);
        assert_eq!(p.payload()["container_id"], Value::Null);
        assert_eq!(p.payload()["detail"], "d");
    }
    for bad in [
        json!({"image":"i"}),
        json!({"state":"start","image":"i"}),
        json!({"state":1,"image":"i"}),
        json!({"state":"Running","image":"i"}),
    ] {
        assert_eq!(
            ReportLocalSandboxParams::parse(&bad)
                .unwrap_err()
                .to_string(),
            "Invalid params: \"state\" must be \"running\", \"stopped\", or \"error\""
        );
    }
}

#[test]
fn c150_report_local_sandbox_unsandboxed_and_image_rules() {
    assert_eq!(
        ReportLocalSandboxParams::parse(
            &json!({"state":"running","image":"python:3.12","unsandboxed":true})
        )
        .unwrap_err()
        .to_string(),
        "Invalid params: \"image\" must be null when \"unsandboxed\" is true"
    );
    for ok in [
        json!({"state":"running","image":null,"unsandboxed":true}),
        json!({"state":"running","unsandboxed":true}),
    ] {
        let p = ReportLocalSandboxParams::parse(&ok).unwrap();
        assert!(p.unsandboxed);
        assert_eq!(p.image, None);
        assert_eq!(
            serde_json::to_string(&p.payload()).unwrap(),
            r#"{"dispatch":"local","image":null,"unsandboxed":true,"container_id":null,"detail":null}"#
        );
    }
    assert_eq!(
        ReportLocalSandboxParams::parse(
            &json!({"state":"running","image":"i","unsandboxed":"yes"})
        )
        .unwrap_err()
        .to_string(),
        "Invalid params: \"unsandboxed\" must be a boolean"
    );
    for missing in [
        json!({"state":"running"}),
        json!({"state":"running","image":null}),
        json!({"state":"running","unsandboxed":false}),
    ] {
        assert_eq!(
            ReportLocalSandboxParams::parse(&missing)
                .unwrap_err()
                .to_string(),
            "Invalid params: missing \"image\""
        );
    }
    assert_eq!(
        ReportLocalSandboxParams::parse(&json!({"state":"running","image":5}))
            .unwrap_err()
            .to_string(),
        "Invalid params: \"image\" must be a string or null"
    );
    // C-151: arbitrary images are accepted here (no allowlist at this layer).
    assert!(ReportLocalSandboxParams::parse(
        &json!({"state":"stopped","image":"my/unregistered:dev"})
    )
    .is_ok());
}

#[test]
fn c162_c163_report_local_subagent() {
    // The seed example sends exit_code null: accepted (README divergence 3).
    let seed = json!({"state":"start","subagent_id":"sba_1","harness":"claude","model":"claude-sonnet-5","detail":null,"reason":null,"exit_code":null});
    let p = ReportLocalSubagentParams::parse(&seed).unwrap();
    assert_eq!(p.state, LocalSubagentState::Start);
    assert_eq!(p.event_type(), EventType::SessionSubagentStart);
    assert_eq!(
        serde_json::to_string(&p.payload()).unwrap(),
        r#"{"dispatch":"local","subagent_id":"sba_1","harness":"claude","model":"claude-sonnet-5","detail":null}"#
    );
    let failed = json!({"state":"failed","subagent_id":"sba_1","harness":"claude","model":"m","reason":"timeout"});
    let p = ReportLocalSubagentParams::parse(&failed).unwrap();
    assert_eq!(p.event_type(), EventType::SessionSubagentFailed);
    assert_eq!(
        serde_json::to_string(&p.payload()).unwrap(),
        r#"{"dispatch":"local","subagent_id":"sba_1","harness":"claude","model":"m","detail":null,"reason":"timeout","exit_code":null}"#
    );
    let done = json!({"state":"completed","subagent_id":"sba_1","harness":"codex","model":"m","exit_code":0,"reason":"ignored"});
    let p = ReportLocalSubagentParams::parse(&done).unwrap();
    assert_eq!(
        serde_json::to_string(&p.payload()).unwrap(),
        r#"{"dispatch":"local","subagent_id":"sba_1","harness":"codex","model":"m","detail":null,"exit_code":0}"#
    );
    let cancelled = json!({"state":"cancelled","subagent_id":"s","harness":"h","model":"m","reason":"explicit","exit_code":-9});
    let p = ReportLocalSubagentParams::parse(&cancelled).unwrap();
    assert_eq!(p.payload()["reason"], "explicit");
    assert_eq!(p.payload()["exit_code"], -9);
    let running = ReportLocalSubagentParams::parse(
        &json!({"state":"running","subagent_id":"s","harness":"h","model":"m"}),
    )
    .unwrap();
    assert_eq!(running.event_type(), EventType::SessionSubagentRunning);
    assert!(running.payload().get("exit_code").is_none());

    let base = |k: &str, v: Value| {
        let mut o = json!({"state":"failed","subagent_id":"sba_1","harness":"claude","model":"m"});
        o[k] = v;
        ReportLocalSubagentParams::parse(&o)
    };
    assert_eq!(
        base("state", json!("done")).unwrap_err().to_string(),
        "Invalid params: \"state\" must be \"start\", \"running\", \"completed\", \"failed\", or \"cancelled\""
    );
    let ids_msg =
        "Invalid params: \"subagent_id\", \"harness\", and \"model\" must be non-empty strings";
    assert_eq!(base("harness", json!("")).unwrap_err().to_string(), ids_msg);
    assert_eq!(
        base("harness", json!(" ")).unwrap_err().to_string(),
        ids_msg
    );
    assert_eq!(base("model", json!(null)).unwrap_err().to_string(), ids_msg);
    assert_eq!(
        base("subagent_id", json!(1)).unwrap_err().to_string(),
        ids_msg
    );
    assert_eq!(
        base("detail", json!(1)).unwrap_err().to_string(),
        "Invalid params: \"detail\" must be a string or null"
    );
    assert_eq!(
        base("reason", json!({})).unwrap_err().to_string(),
        "Invalid params: \"reason\" must be a string or null"
    );
    assert_eq!(
        base("exit_code", json!("1")).unwrap_err().to_string(),
        "Invalid params: \"exit_code\" must be an integer"
    );
    assert_eq!(
        base("exit_code", json!(1.5)).unwrap_err().to_string(),
        "Invalid params: \"exit_code\" must be an integer"
    );
    assert_eq!(base("exit_code", json!(127)).unwrap().exit_code, Some(127));
    assert_eq!(base("exit_code", json!(null)).unwrap().exit_code, None);
}

#[test]
fn cancel_subagent_params() {
    assert_eq!(
        CancelSubagentParams::parse(&json!({"subagent_id":"sba_1"}))
            .unwrap()
            .subagent_id,
        "sba_1"
    );
    for bad in [
        json!({}),
        json!({"subagent_id":""}),
        json!({"subagent_id":" "}),
        json!({"subagent_id":7}),
    ] {
        assert_eq!(
            CancelSubagentParams::parse(&bad).unwrap_err().to_string(),
            "Invalid params: missing \"subagent_id\""
        );
    }
}

/// The serde derives read an object's members only: an array where an
/// object belongs is serde's type error (the derive alone would take the
/// array's items by position), and positional params have no members.
#[test]
fn objects_only_and_positional_params_have_no_members() {
    assert_eq!(
        SendMessageParams::parse(&json!({"message":["user","hi"]}))
            .unwrap_err()
            .to_string(),
        "Invalid params: invalid type: sequence, expected struct Message"
    );
    assert_eq!(
        UpdateClientToolsParams::parse(&json!({"tools":[["a"]]}))
            .unwrap_err()
            .to_string(),
        "Invalid params: invalid type: sequence, expected struct ClientToolDef"
    );
    assert_eq!(
        CompactParams::parse(&json!(["a prompt"])).unwrap(),
        CompactParams::default()
    );
    assert_eq!(
        StartRemoteSandboxParams::parse(&json!(["python:3.12"]))
            .unwrap_err()
            .to_string(),
        "Invalid params: missing \"image\""
    );
    // Unknown members are ignored.
    assert_eq!(
        CompactParams::parse(&json!({"prompt":"p","future":1}))
            .unwrap()
            .prompt
            .as_deref(),
        Some("p")
    );
}

/// The documented check order holds whatever order the members come in.
#[test]
fn checks_run_in_documented_order_not_member_order() {
    assert_eq!(
        ReportLocalSandboxParams::parse(&json!({"unsandboxed":"yes","image":5,"state":"x"}))
            .unwrap_err()
            .to_string(),
        "Invalid params: \"state\" must be \"running\", \"stopped\", or \"error\""
    );
    assert_eq!(
        ReportLocalSubagentParams::parse(
            &json!({"exit_code":"x","detail":1,"model":"m","harness":"h","subagent_id":"s","state":"failed"})
        )
        .unwrap_err().to_string(),
        "Invalid params: \"detail\" must be a string or null"
    );
    assert_eq!(
        SubscribeParams::parse(&json!({"extensions":5,"since_event_id":1}))
            .unwrap_err()
            .to_string(),
        "Invalid params: since_event_id must be a string"
    );
}

#[test]
fn subscribe_and_register_driver_extensions() {
    let p = SubscribeParams::parse(
        &json!({"since_event_id":"evt_1","extensions":["subscribe.gapless","x"]}),
    )
    .unwrap();
    assert_eq!(p.since_event_id.as_deref(), Some("evt_1"));
    assert_eq!(p.extensions.names(), ["subscribe.gapless"]);
    assert!(SubscribeParams::parse(&json!({}))
        .unwrap()
        .extensions
        .is_empty());
    assert_eq!(
        RegisterDriverParams::parse(&json!({})).unwrap().extensions,
        None
    );
    assert_eq!(
        RegisterDriverParams::parse(&json!({"extensions":[]}))
            .unwrap()
            .extensions,
        Some(Extensions::default())
    );
    for bad in [
        json!({"extensions":null}),
        json!({"extensions":"turn.cancel"}),
        json!({"extensions":["turn.cancel",1]}),
    ] {
        assert_eq!(
            RegisterDriverParams::parse(&bad).unwrap_err().to_string(),
            "Invalid params: \"extensions\" must be an array of strings",
            "{bad}"
        );
        assert_eq!(
            SubscribeParams::parse(&bad).unwrap_err().to_string(),
            "Invalid params: \"extensions\" must be an array of strings"
        );
    }
}

/// `Call::typed_params`: each method's params, parsed by its own parser,
/// the parse error kept for the engine to answer after its own checks.
#[test]
fn typed_params_by_method() {
    let call = |body: &str| decode_call(body.as_bytes()).unwrap();
    let send = call(
        r#"{"jsonrpc":"2.0","id":1,"method":"session.sendMessage","params":{"message":{"content":"hi"},"idempotency_key":""}}"#,
    );
    let MethodParams::SendMessage(p) = send.typed_params() else {
        panic!("not sendMessage");
    };
    assert_eq!(p.message.unwrap().content, json!("hi"));
    assert!(p
        .idempotency_key
        .unwrap_err()
        .to_string()
        .contains("idempotency_key"));
    let compact =
        call(r#"{"jsonrpc":"2.0","id":1,"method":"session.compact","params":{"prompt":5}}"#);
    assert_eq!(
        compact.typed_params(),
        MethodParams::Compact(Err(ParamsError::Serde(
            "invalid type: integer `5`, expected a string".into()
        )))
    );
    let steer = call(r#"{"jsonrpc":"2.0","id":1,"method":"session.steerTurn"}"#);
    assert_eq!(
        steer.typed_params(),
        MethodParams::SteerTurn(Err(ParamsError::Missing("message")))
    );
    for (method, want) in [
        ("session.unsubscribe", MethodParams::Unsubscribe),
        ("session.stopRemoteSandbox", MethodParams::StopRemoteSandbox),
        ("session.cancelTurn", MethodParams::CancelTurn),
    ] {
        let c = call(&format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#
        ));
        assert_eq!(c.typed_params(), want);
    }
    let exec =
        call(r#"{"jsonrpc":"2.0","method":"session.execRemoteSandbox","params":{"command":"ls"}}"#);
    assert_eq!(
        exec.typed_params(),
        MethodParams::ExecRemoteSandbox(Ok(ExecRemoteSandboxParams {
            command: "ls".into()
        }))
    );
}
