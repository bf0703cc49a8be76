//! OpenAI Chat Completions translation (`05-profiles-and-providers.md`
//! §5.2, §6.2, §7).

use proto::provider::{parse_response, prepare_request, AuthHeader, Kind, ParseError, Usage};
use serde_json::{json, Value};

/// Translated wire messages for `history`.
fn wire_messages(history: &[Value]) -> Value {
    let req = prepare_request(Kind::Openai, "http://h", "gpt", 64, history, &[]);
    let body: Value = serde_json::from_slice(&req.body).unwrap();
    body["messages"].clone()
}

fn parse(body: Value) -> Result<proto::provider::ProviderResponse, ParseError> {
    parse_response(Kind::Openai, body.to_string().as_bytes())
}

// ---------------------------------------------------------------- request

#[test]
fn c089_openai_url_headers_bearer_and_no_tools_when_empty() {
    let history = vec![json!({"role": "user", "content": "hi"})];
    let req = prepare_request(
        Kind::Openai,
        "https://api.openai.com",
        "gpt-4o",
        4096,
        &history,
        &[],
    );
    assert_eq!(req.url, "https://api.openai.com/v1/chat/completions");
    assert_eq!(req.auth, AuthHeader::Bearer);
    assert_eq!(
        req.headers,
        vec![("content-type".to_string(), "application/json".to_string())]
    );
    let body: Value = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(
        body,
        json!({"model": "gpt-4o", "max_tokens": 4096, "messages": [{"role": "user", "content": "hi"}]})
    );
    assert!(body.get("tools").is_none());
    assert_eq!(req.normalized, None);
}

#[test]
fn openai_logs_canonical_stripped_list_not_translation_and_no_normalization() {
    // Would be normalised for Anthropic (assistant first, consecutive users).
    let history = vec![
        json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "n", "input": {}, "dispatch": "client"}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}),
        json!({"role": "user", "content": "u"}),
    ];
    let req = prepare_request(Kind::Openai, "http://h", "m", 1, &history, &[]);
    assert_eq!(req.normalized, None);
    assert_eq!(
        req.logged_messages(),
        vec![
            json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": "t", "name": "n", "input": {}}]}),
            history[1].clone(),
            history[2].clone(),
        ]
    );
}

#[test]
fn translate_string_content_keeps_role() {
    assert_eq!(
        wire_messages(&[
            json!({"role": "user", "content": "a"}),
            json!({"role": "assistant", "content": "b"}),
            json!({"role": "system", "content": "c"}),
        ]),
        json!([
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "system", "content": "c"},
        ])
    );
}

#[test]
fn translate_assistant_blocks_to_tool_calls_with_serialized_arguments() {
    let history = [json!({"role": "assistant", "content": [
        {"type": "text", "text": "first"},
        {"type": "tool_use", "id": "tu_1", "name": "list_directory", "input": {"path": "/data", "n": [1, 2]}},
        {"type": "thinking", "thinking": "dropped"},
        {"type": "text", "text": "second"},
        {"type": "tool_use", "id": "tu_2", "name": "get_current_time"},
        {"type": "tool_use", "id": "tu_3", "name": "nul", "input": null},
    ]})];
    assert_eq!(
        wire_messages(&history),
        json!([{
            "role": "assistant",
            "content": "first\nsecond",
            "tool_calls": [
                {"id": "tu_1", "type": "function", "function": {
                    "name": "list_directory", "arguments": "{\"path\":\"/data\",\"n\":[1,2]}"}},
                {"id": "tu_2", "type": "function", "function": {
                    "name": "get_current_time", "arguments": "{}"}},
                {"id": "tu_3", "type": "function", "function": {
                    "name": "nul", "arguments": "{}"}},
            ]
        }])
    );
}

#[test]
fn translate_assistant_without_text_has_null_content_and_without_tools_no_tool_calls() {
    assert_eq!(
        wire_messages(&[json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "n", "input": {}}]})]),
        json!([{"role": "assistant", "content": null, "tool_calls": [
            {"id": "t", "type": "function", "function": {"name": "n", "arguments": "{}"}}]}])
    );
    let msgs = wire_messages(&[json!({"role": "assistant", "content": [
        {"type": "text", "text": "just text"}]})]);
    assert_eq!(msgs, json!([{"role": "assistant", "content": "just text"}]));
    assert!(msgs[0].get("tool_calls").is_none());
    assert_eq!(
        wire_messages(&[json!({"role": "assistant", "content": []})]),
        json!([{"role": "assistant", "content": null}])
    );
}

#[test]
fn c092_tool_results_become_role_tool_messages_then_text() {
    let history = [json!({"role": "user", "content": [
        {"type": "text", "text": "here you go"},
        {"type": "tool_result", "tool_use_id": "tu_1", "content": "12:00"},
        {"type": "image", "source": {}},
        {"type": "tool_result", "tool_use_id": "tu_2", "is_error": true,
         "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]},
        {"type": "text", "text": "thanks"},
    ]})];
    assert_eq!(
        wire_messages(&history),
        json!([
            {"role": "tool", "tool_call_id": "tu_1", "content": "12:00"},
            // is_error is not conveyed; array content → joined text.
            {"role": "tool", "tool_call_id": "tu_2", "content": "a\nb"},
            {"role": "user", "content": "here you go\nthanks"},
        ])
    );
}

#[test]
fn c092_tool_result_flattening_rules() {
    let cases = [
        (json!("plain"), "plain"),
        (
            json!([{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]),
            "x\ny",
        ),
        (
            json!([{"type": "image", "source": {"d": 1}}]),
            r#"[{"type":"image","source":{"d":1}}]"#,
        ),
        (json!([]), ""),
        (json!(null), ""),
        (json!(42), "42"),
        (json!({"k": "v"}), r#"{"k":"v"}"#),
        (json!(true), "true"),
    ];
    for (content, want) in cases {
        let h = [json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": content.clone()}]})];
        assert_eq!(
            wire_messages(&h),
            json!([{"role": "tool", "tool_call_id": "t", "content": want}]),
            "content {content}"
        );
    }
    // Missing content member.
    let h = [json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]})];
    assert_eq!(
        wire_messages(&h),
        json!([{"role": "tool", "tool_call_id": "t", "content": ""}])
    );
}

#[test]
fn user_blocks_without_text_or_results_produce_nothing() {
    let h = [
        json!({"role": "user", "content": [{"type": "image", "source": {}}]}),
        json!({"role": "user", "content": "after"}),
    ];
    assert_eq!(
        wire_messages(&h),
        json!([{"role": "user", "content": "after"}])
    );
}

#[test]
fn missing_or_odd_content_and_missing_role() {
    assert_eq!(
        wire_messages(&[
            json!({"role": "assistant"}),
            json!({"role": "user", "content": null}),
            json!({"content": 7}),
            json!({"content": "no role"}),
            json!({"content": [{"type": "text", "text": "blocks, no role"}]}),
        ]),
        json!([
            {"role": "assistant", "content": ""},
            {"role": "user", "content": ""},
            {"role": "user", "content": ""},
            {"role": "user", "content": "no role"},
            {"role": "user", "content": "blocks, no role"},
        ])
    );
}

#[test]
fn tools_translation_and_description_hygiene() {
    let tools = vec![
        json!({"name": "get_current_time", "description": null, "input_schema": {}}),
        json!({"name": "list_directory", "description": "", "input_schema": {
            "type": "object", "properties": {"path": {"type": "string"}}}}),
        json!({"name": "bare"}),
        json!({"name": "described", "description": "does it"}),
    ];
    let req = prepare_request::<Value>(Kind::Openai, "http://h", "m", 1, &[], &tools);
    let body: Value = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(
        body["tools"],
        json!([
            {"type": "function", "function": {"name": "get_current_time", "parameters": {}}},
            {"type": "function", "function": {"name": "list_directory", "description": "",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "bare", "parameters": {}}},
            {"type": "function", "function": {"name": "described", "description": "does it",
                "parameters": {}}},
        ])
    );
    let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["model", "max_tokens", "messages", "tools"]);
}

// ---------------------------------------------------------------- response

#[test]
fn c090_tool_calls_become_tool_use_blocks_raw_body_kept() {
    let raw = json!({
        "id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "checking",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {
                    "name": "list_directory", "arguments": "{\"path\":\"/data\"}"}},
                {"id": "call_2", "type": "function", "function": {
                    "name": "get_current_time", "arguments": ""}},
                {"id": "call_3", "type": "function", "function": {
                    "name": "ws", "arguments": "  \n\t"}},
                {"id": "call_4", "type": "function", "function": {"name": "absent"}},
            ]}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}
    });
    let r = parse(raw.clone()).unwrap();
    assert_eq!(r.body_json, raw.to_string());
    assert_eq!(
        r.content,
        vec![
            json!({"type": "text", "text": "checking"}),
            json!({"type": "tool_use", "id": "call_1", "name": "list_directory", "input": {"path": "/data"}}),
            json!({"type": "tool_use", "id": "call_2", "name": "get_current_time", "input": {}}),
            json!({"type": "tool_use", "id": "call_3", "name": "ws", "input": {}}),
            json!({"type": "tool_use", "id": "call_4", "name": "absent", "input": {}}),
        ]
    );
    assert_eq!(
        r.usage,
        Some(Usage {
            input_tokens: 11,
            output_tokens: 4
        })
    );
    assert_eq!(r.truncated, None);
}

#[test]
fn response_empty_or_null_content_yields_no_text_block() {
    for content in [json!(""), json!(null)] {
        let r = parse(json!({"choices": [{"message": {"role": "assistant", "content": content}}]}))
            .unwrap();
        assert!(r.content.is_empty());
    }
    let r = parse(json!({"choices": [{"message": {"content": "hello"}}]})).unwrap();
    assert_eq!(r.content, vec![json!({"type": "text", "text": "hello"})]);
}

#[test]
fn missing_choices_message_error_text() {
    for body in [
        json!({}),
        json!({"choices": []}),
        json!({"choices": [{}]}),
        json!({"choices": [{"message": null}]}),
        json!({"choices": {"message": {}}}),
        json!([1]),
    ] {
        let err = parse(body.clone()).unwrap_err();
        assert_eq!(err, ParseError::MissingMessage, "{body}");
        assert_eq!(
            err.to_string(),
            "provider response is missing choices[0].message"
        );
    }
}

#[test]
fn missing_function_name_error_text() {
    for call in [
        json!({"id": "c", "function": {"arguments": "{}"}}),
        json!({"id": "c"}),
        json!({"id": "c", "function": {"name": 5}}),
    ] {
        let err = parse(json!({"choices": [{"message": {"tool_calls": [call]}}]})).unwrap_err();
        assert_eq!(err, ParseError::MissingFunctionName);
        assert_eq!(err.to_string(), "tool_calls entry is missing function.name");
    }
}

#[test]
fn c091_non_json_arguments_error_text() {
    let err = parse(json!({"choices": [{"message": {"tool_calls": [
        {"id": "c", "function": {"name": "get_weather", "arguments": "{city: Paris"}}]}}]}))
    .unwrap_err();
    assert!(matches!(err, ParseError::NonJsonArguments { ref name, .. } if name == "get_weather"));
    let text = err.to_string();
    let prefix = "tool_calls entry \"get_weather\" has non-JSON function.arguments: ";
    assert!(text.starts_with(prefix), "{text}");
    assert!(text.len() > prefix.len());
}

#[test]
fn c079_openai_usage_variants() {
    let with_usage = |u: Value| {
        parse(json!({"choices": [{"message": {"content": "x"}}], "usage": u}))
            .unwrap()
            .usage
    };
    assert_eq!(
        with_usage(json!({"prompt_tokens": 0, "completion_tokens": 0})),
        Some(Usage {
            input_tokens: 0,
            output_tokens: 0
        })
    );
    assert_eq!(with_usage(json!({"prompt_tokens": 3})), None);
    assert_eq!(with_usage(json!({"completion_tokens": 3})), None);
    assert_eq!(
        with_usage(json!({"prompt_tokens": -3, "completion_tokens": 1})),
        None
    );
    assert_eq!(with_usage(json!(null)), None);
    // Anthropic-named members do not count for OpenAI.
    assert_eq!(
        with_usage(json!({"input_tokens": 1, "output_tokens": 1})),
        None
    );
    let r = parse(json!({"choices": [{"message": {"content": "x"}}]})).unwrap();
    assert_eq!(r.usage, None);
}

#[test]
fn openai_finish_reason_length_is_truncation() {
    let r = parse(json!({"choices": [{"finish_reason": "length", "message": {"content": "cut"}}]}))
        .unwrap();
    assert_eq!(r.truncated, Some("finish_reason length"));
    let r = parse(json!({"choices": [{"finish_reason": "stop", "message": {"content": "ok"}}]}))
        .unwrap();
    assert_eq!(r.truncated, None);
}

#[test]
fn mixed_kind_round_trip_canonical_tool_use_back_to_openai() {
    // A canonical response parsed from OpenAI feeds the next OpenAI request.
    let r = parse(json!({"choices": [{"message": {"content": null, "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "t", "arguments": "{\"a\":1}"}}]}}]}))
    .unwrap();
    let history = vec![
        json!({"role": "user", "content": "go"}),
        json!({"role": "assistant", "content": r.content}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_9", "content": "done"}]}),
    ];
    assert_eq!(
        wire_messages(&history),
        json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_9", "type": "function", "function": {"name": "t", "arguments": "{\"a\":1}"}}]},
            {"role": "tool", "tool_call_id": "call_9", "content": "done"},
        ])
    );
}
