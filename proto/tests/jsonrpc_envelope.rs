//! JSON-RPC envelope decoding and NDJSON frames (spec 01 §5; C-051..C-063, C-132).

use proto::jsonrpc::*;
use serde_json::{json, Value};

fn err(body: &str) -> EnvelopeError {
    decode_call(body.as_bytes()).expect_err("expected envelope error")
}

fn frame_json(frame: &str) -> Value {
    assert!(
        frame.ends_with('\n'),
        "frame must end with a newline: {frame:?}"
    );
    assert_eq!(frame.matches('\n').count(), 1, "one line per frame");
    serde_json::from_str(frame.trim_end()).unwrap()
}

#[test]
fn methods_catalogue_has_twelve_names_matching_enum() {
    assert_eq!(METHODS.len(), 12);
    for (i, m) in Method::ALL.iter().enumerate() {
        assert_eq!(m.as_str(), METHODS[i]);
        assert_eq!(Method::parse(METHODS[i]), Some(*m));
    }
    assert_eq!(Method::parse("session.SendMessage"), None);
    assert_eq!(Method::parse("session.compaction"), None);
}

#[test]
fn method_matrix_matches_spec_6_1() {
    use Method::*;
    for m in Method::ALL {
        let driver = !matches!(m, RegisterDriver | Subscribe | Unsubscribe);
        assert_eq!(m.requires_driver(), driver, "{m}");
    }
    let open: Vec<_> = Method::ALL
        .into_iter()
        .filter(|m| m.checks_open_state())
        .collect();
    assert_eq!(
        open,
        vec![
            RegisterDriver,
            SendMessage,
            Compact,
            StartRemoteSandbox,
            UpdateClientTools
        ]
    );
    let streaming: Vec<_> = Method::ALL
        .into_iter()
        .filter(|m| m.is_streaming())
        .collect();
    assert_eq!(streaming, vec![SendMessage, Compact, Subscribe]);
    assert!(
        SendMessage.uses_turn_gate() && Compact.uses_turn_gate() && !Subscribe.uses_turn_gate()
    );
}

#[test]
fn c051_non_json_is_parse_error_with_null_id() {
    for body in [
        "",
        "not json",
        "{",
        "{\"jsonrpc\":\"2.0\",}",
        "\u{0}",
        "{} {}",
        "[1,",
    ] {
        let e = err(body);
        assert_eq!(e.code, -32700, "{body:?}");
        assert_eq!(e.message, "Parse error");
        assert!(e.always_answer);
        assert_eq!(
            e.frame().unwrap(),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error\"}}\n"
        );
    }
    // Invalid UTF-8 is not JSON either.
    assert_eq!(decode_call(b"{\"a\":\"\xff\"}").unwrap_err().code, -32700);
}

#[test]
fn c052_batch_array_rejected() {
    for body in [
        "[]",
        "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session.subscribe\"}]",
    ] {
        let e = err(body);
        assert_eq!(e.code, -32600);
        assert_eq!(
            e.message,
            "Invalid Request: batch requests are not supported"
        );
        assert_eq!(
            e.frame().unwrap(),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Invalid Request: batch requests are not supported\"}}\n"
        );
    }
}

#[test]
fn c053_non_object_is_invalid_request_id_null() {
    for body in ["42", "\"x\"", "null", "true", "1.5"] {
        let e = err(body);
        assert_eq!(
            (e.code, e.message.as_str()),
            (-32600, "Invalid Request"),
            "{body}"
        );
        assert_eq!(e.id, Some(Value::Null));
        let f = frame_json(&e.frame().unwrap());
        assert_eq!(
            f,
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}})
        );
    }
}

#[test]
fn c054_bad_version_echoes_id() {
    let e = err(r#"{"jsonrpc":"1.0","id":7,"method":"session.subscribe"}"#);
    assert_eq!(e.code, -32600);
    assert_eq!(
        e.message,
        "Invalid Request: missing or wrong \"jsonrpc\" version"
    );
    assert_eq!(e.id, Some(json!(7)));
    assert!(!e.always_answer);
    assert_eq!(
        e.frame().unwrap(),
        "{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32600,\"message\":\"Invalid Request: missing or wrong \\\"jsonrpc\\\" version\"}}\n"
    );
    // Missing, numeric 2.0 and absent id.
    assert_eq!(
        err(r#"{"id":"a","method":"session.subscribe"}"#).id,
        Some(json!("a"))
    );
    assert_eq!(
        err(r#"{"jsonrpc":2.0,"id":1,"method":"session.subscribe"}"#).code,
        -32600
    );
    let notif = err(r#"{"jsonrpc":"1.0","method":"session.subscribe"}"#);
    assert_eq!(notif.id, None);
    assert_eq!(notif.frame(), None);
}

#[test]
fn c055_missing_method() {
    for body in [
        r#"{"jsonrpc":"2.0","id":3}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":5}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":null}"#,
    ] {
        let e = err(body);
        assert_eq!(
            (e.code, e.message.as_str()),
            (-32600, "Invalid Request: missing \"method\"")
        );
        assert_eq!(e.id, Some(json!(3)));
    }
}

#[test]
fn c056_unknown_method_echoes_id() {
    let e = err(r#"{"jsonrpc":"2.0","id":"abc","method":"session.nope"}"#);
    assert_eq!(e.code, -32601);
    assert_eq!(e.message, "Method not found: session.nope");
    assert_eq!(
        e.frame().unwrap(),
        "{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"error\":{\"code\":-32601,\"message\":\"Method not found: session.nope\"}}\n"
    );
}

#[test]
fn c057_notification_with_unknown_method_writes_nothing() {
    let e = err(r#"{"jsonrpc":"2.0","method":"session.nope"}"#);
    assert_eq!(e.code, -32601);
    assert_eq!(e.frame(), None);
}

#[test]
fn c058_notification_register_driver_decodes_without_id() {
    let c = decode_call(br#"{"jsonrpc":"2.0","method":"session.registerDriver"}"#).unwrap();
    assert!(c.is_notification());
    assert_eq!(c.method, Method::RegisterDriver);
    assert_eq!(c.result_frame(results::REGISTERED), None);
    assert_eq!(c.error_frame(-32000, "x"), None);
}

#[test]
fn c059_null_id_is_a_request_echoed_as_null() {
    let c = decode_call(br#"{"jsonrpc":"2.0","id":null,"method":"session.unsubscribe"}"#).unwrap();
    assert_eq!(c.id, Some(Value::Null));
    assert!(!c.is_notification());
    assert_eq!(
        c.result_frame(results::UNSUBSCRIBED).unwrap(),
        "{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":{\"unsubscribed\":true}}\n"
    );
    // Also for envelope errors after step 3.
    let e = err(r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#);
    assert_eq!(e.frame().unwrap(), "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32601,\"message\":\"Method not found: x\"}}\n");
}

#[test]
fn c060_string_integer_and_odd_ids_echo_verbatim() {
    for (id_json, expect) in [
        ("1", "1"),
        ("-5", "-5"),
        ("\"req-1\"", "\"req-1\""),
        ("\"q\\\"uote\"", "\"q\\\"uote\""),
        ("1.5", "1.5"),
        ("{\"b\":1,\"a\":2}", "{\"b\":1,\"a\":2}"),
        ("[1,\"x\"]", "[1,\"x\"]"),
        ("18446744073709551615", "18446744073709551615"),
    ] {
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":{id_json},"method":"session.registerDriver"}}"#);
        let c = decode_call(body.as_bytes()).unwrap();
        let f = c.result_frame(results::REGISTERED).unwrap();
        assert_eq!(
            f,
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{expect},\"result\":{{\"registered\":true}}}}\n")
        );
    }
}

#[test]
fn c061_frames_are_single_lines() {
    let ev = r#"{"id":"evt_1","session_id":"ses_1","client_key_id":null,"event_type":"session.open","payload":{"t":"a\nb"},"created_at":"x"}"#;
    let f = event_frame(ev);
    assert_eq!(
        f,
        format!("{{\"jsonrpc\":\"2.0\",\"method\":\"session.event\",\"params\":{ev}}}\n")
    );
    let v = frame_json(&f);
    assert!(v.get("id").is_none(), "notifications carry no id");
    let e = error_frame(Some(&json!(1)), -32000, "multi\nline\tmsg");
    let v = frame_json(&e);
    assert_eq!(v["error"]["message"], "multi\nline\tmsg");
}

#[test]
fn c062_params_default_to_empty_object() {
    let c = decode_call(br#"{"jsonrpc":"2.0","id":1,"method":"session.subscribe"}"#).unwrap();
    assert_eq!(c.params, json!({}));
    let c = decode_call(br#"{"jsonrpc":"2.0","id":1,"method":"session.subscribe","params":null}"#)
        .unwrap();
    assert_eq!(c.params, json!({}));
    let c = decode_call(br#"{"params":{"since_event_id":"evt_x"},"method":"session.subscribe","jsonrpc":"2.0","id":2}"#).unwrap();
    assert_eq!(c.params, json!({"since_event_id":"evt_x"}));
    assert_eq!(c.method, Method::Subscribe);
    // Unknown envelope members are ignored.
    assert!(
        decode_call(br#"{"jsonrpc":"2.0","id":1,"method":"session.subscribe","extra":true}"#)
            .is_ok()
    );
}

#[test]
fn c063_error_objects_have_only_code_and_message() {
    let f = frame_json(&error_frame(
        Some(&json!(4)),
        -32013,
        "sandbox_not_running: x",
    ));
    let err = f["error"].as_object().unwrap();
    assert_eq!(err.keys().collect::<Vec<_>>(), vec!["code", "message"]);
    assert_eq!(
        f.as_object().unwrap().keys().collect::<Vec<_>>(),
        vec!["jsonrpc", "id", "error"]
    );
}

#[test]
fn c132_lagged_frame_shape() {
    assert_eq!(
        LAGGED_FRAME,
        "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32000,\"message\":\"lagged; reconnect with since_event_id\"}}\n"
    );
    assert_eq!(
        error_frame(None, -32000, "lagged; reconnect with since_event_id"),
        LAGGED_FRAME
    );
    assert_eq!(
        REPLAY_FAILED_FRAME,
        error_frame(Some(&Value::Null), -32000, "replay failed")
    );
}

#[test]
fn frames_equal_serde_output() {
    let id = json!({"k":[1,2,{"z":null}]});
    let result = json!({"message":{"role":"assistant","content":[{"type":"text","text":"hi \u{1} \u{2028}"}]}});
    let f = result_frame(&id, &serde_json::to_string(&result).unwrap());
    let expected =
        serde_json::to_string(&json!({"jsonrpc":"2.0","id":id,"result":result})).unwrap() + "\n";
    assert_eq!(f, expected);
    let msg = "weird \"msg\" \\ \u{7f} \u{1f}";
    let f = error_frame(Some(&json!("i")), -32602, msg);
    let expected = serde_json::to_string(
        &json!({"jsonrpc":"2.0","id":"i","error":{"code":-32602,"message":msg}}),
    )
    .unwrap()
        + "\n";
    assert_eq!(f, expected);
}

#[test]
fn invalid_params_helper() {
    assert_eq!(
        invalid_params("missing \"message\""),
        (-32602, "Invalid params: missing \"message\"".to_owned())
    );
    let e = RpcError::invalid_params(42);
    assert_eq!(e.message, "Invalid params: 42");
    assert_eq!(
        RpcError::from(invalid_params("x")).code,
        codes::INVALID_PARAMS
    );
}

#[test]
fn rpc_error_messages_match_spec() {
    let cases: Vec<(RpcError, i64, &str)> = vec![
        (RpcError::internal(), -32603, "Internal error"),
        (RpcError::driver_not_registered("session.sendMessage"), -32001, "call session.registerDriver before session.sendMessage"),
        (RpcError::driver_not_registered("session.compact"), -32001, "call session.registerDriver before session.compact"),
        (RpcError::not_open("closed"), -32000, "session is closed, not open"),
        (RpcError::not_open("error"), -32000, "session is error, not open"),
        (RpcError::session_gone(), -32000, "session no longer exists"),
        (RpcError::profile_unavailable(), -32000, "profile_unavailable: the profile bound to this session is no longer available"),
        (RpcError::merge_invalid(NO_PAUSED_TURN_REASON), -32000, "tool result merge invalid: no paused turn is awaiting tool results (it may have timed out and been retired)"),
        (RpcError::loop_failed(), -32000, "session loop failed"),
        (RpcError::compaction_failed("all 2 providers failed"), -32000, "compaction failed: all 2 providers failed"),
        (RpcError::turn_in_progress(), -32020, "turn in progress: resolve the paused turn before compacting"),
        (RpcError::sandbox_image_not_allowed("python:3.12"), -32011, "sandbox_image_not_allowed: image \"python:3.12\" is not in this session profile's available_sandboxes"),
        (RpcError::sandbox_already_running(), -32000, "a remote sandbox is already running for this session; call session.stopRemoteSandbox first"),
        (RpcError::sandbox_start_failed("boom"), -32012, "sandbox_start_failed: boom"),
        (RpcError::sandbox_not_running(), -32013, "sandbox_not_running: no remote sandbox is running for this session"),
        (RpcError::sandbox_stop_failed("x"), -32000, "sandbox stop failed: x"),
        (RpcError::sandbox_exec_failed("y"), -32000, "sandbox exec failed: y"),
        (RpcError::subagent_not_found("sba_1"), -32014, "subagent_not_found: no tracked subagent \"sba_1\" for this session"),
        (RpcError::tool_not_allowed("rm"), -32015, "tool_not_allowed: tool \"rm\" is not in the profile's allowlist"),
    ];
    for (e, code, msg) in cases {
        assert_eq!((e.code, e.message.as_str()), (code, msg));
    }
    assert_eq!(RpcError::internal().frame(None), None);
    assert_eq!(
        RpcError::internal().frame(Some(&json!(9))).unwrap(),
        "{\"jsonrpc\":\"2.0\",\"id\":9,\"error\":{\"code\":-32603,\"message\":\"Internal error\"}}\n"
    );
}

#[test]
fn result_bodies() {
    assert_eq!(results::REGISTERED, r#"{"registered":true}"#);
    assert_eq!(results::UNSUBSCRIBED, r#"{"unsubscribed":true}"#);
    assert_eq!(results::UPDATED, r#"{"updated":true}"#);
    assert_eq!(results::REPORTED, r#"{"reported":true}"#);
    assert_eq!(
        results::send_message(
            r#"{"role":"assistant","content":[]}"#,
            &[r#"{"a":1}"#, r#"{"b":2}"#]
        ),
        r#"{"message":{"role":"assistant","content":[]},"events":[{"a":1},{"b":2}]}"#
    );
    assert_eq!(
        results::send_message::<&str>("{}", &[]),
        r#"{"message":{},"events":[]}"#
    );
    assert_eq!(
        results::sandbox_started("abc", "python:3.12", Some("2026-07-06T18:26:10.000Z")),
        r#"{"sandbox_id":"abc","image":"python:3.12","started_at":"2026-07-06T18:26:10.000Z"}"#
    );
    assert_eq!(
        results::sandbox_started("a", "b", None),
        r#"{"sandbox_id":"a","image":"b","started_at":null}"#
    );
    assert_eq!(
        results::sandbox_stopped("python:3.12", "c1"),
        r#"{"stopped":true,"image":"python:3.12","sandbox_id":"c1"}"#
    );
    assert_eq!(
        results::exec("Python 3.12.3\n", "", 0),
        r#"{"stdout":"Python 3.12.3\n","stderr":"","exit_code":0}"#
    );
    assert_eq!(
        results::exec("", "x", -1),
        r#"{"stdout":"","stderr":"x","exit_code":-1}"#
    );
    assert_eq!(
        results::subagent_cancelled("sba_1", true),
        r#"{"cancelled":true,"subagent_id":"sba_1","was_running":true}"#
    );
}

#[test]
fn seed_request_example_decodes() {
    let body = r#"{
  "jsonrpc": "2.0",
  "id": 2,
  "method": "session.sendMessage",
  "params": {
    "message": {
      "role": "user",
      "content": [
        {
          "type": "tool_result",
          "tool_use_id": "tu_abc123",
          "content": "2026-07-06T18:26:10Z"
        }
      ]
    }
  }
}"#;
    let c = decode_call(body.as_bytes()).unwrap();
    assert_eq!(c.id, Some(json!(2)));
    assert_eq!(c.method, Method::SendMessage);
    let p = SendMessageParams::parse(&c.params).unwrap();
    assert_eq!(p.role, "user");
    assert_eq!(p.content[0]["tool_use_id"], "tu_abc123");
}

#[test]
fn depth_guard() {
    assert!(check_depth(b"{}", 1));
    assert!(!check_depth(b"{}", 0));
    assert!(check_depth(b"42", 0));
    assert!(check_depth(br#"{"a":[1,{"b":[]}]}"#, 4));
    assert!(!check_depth(br#"{"a":[1,{"b":[]}]}"#, 3));
    // Brackets inside strings, with escaped quotes and backslashes, do not count.
    assert!(check_depth(br#"{"a":"[[[[{{{{\"[[[[\\"}"#, 1));
    assert!(!check_depth(br#"{"a":"\\","b":[[]]}"#, 2));
    // Sequential (not nested) containers do not accumulate.
    assert!(check_depth(b"[[],[],[],[],[]]", 2));
    let deep = "[".repeat(100_000);
    assert!(!check_depth(deep.as_bytes(), 64));
    let e = decode_call_limited(deep.as_bytes(), 64).unwrap_err();
    assert_eq!(e.code, -32600);
    assert_eq!(
        e.message,
        "Invalid Request: JSON nested deeper than 64 levels"
    );
    assert!(e.frame().is_some());
    // serde_json's own limit also yields a clean parse error, not a crash.
    let deep_closed = format!("{}{}", "[".repeat(200), "]".repeat(200));
    assert_eq!(
        decode_call(deep_closed.as_bytes()).unwrap_err().code,
        -32700
    );
    let ok = decode_call_limited(
        br#"{"jsonrpc":"2.0","id":1,"method":"session.subscribe"}"#,
        DEFAULT_MAX_DEPTH,
    );
    assert!(ok.is_ok());
}
