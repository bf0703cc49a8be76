//! Anthropic wire format, normaliser, shared helpers
//! (`05-profiles-and-providers.md` §2, §5.2, §6.1, §7, §8).

use proto::provider::{
    effective_base_url, endpoint_url, history_message, http_error_text, into_history_message,
    normalize_anthropic, parse_response, prepare_request, strip_internal, tool_uses, AuthHeader,
    Kind, ParseError, Usage, DEFAULT_ANTHROPIC_BASE, DEFAULT_OPENAI_BASE, PREAMBLE_TEXT,
};
use serde_json::{json, Value};

fn body_json(body: &[u8]) -> Value {
    serde_json::from_slice(body).expect("request body is JSON")
}

fn preamble() -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": PREAMBLE_TEXT}]})
}

// ---------------------------------------------------------------- kinds/URLs

#[test]
fn kind_round_trips() {
    assert_eq!(Kind::Anthropic.as_str(), "anthropic");
    assert_eq!(Kind::Openai.as_str(), "openai");
    assert_eq!(Kind::parse("anthropic"), Some(Kind::Anthropic));
    assert_eq!(Kind::parse("openai"), Some(Kind::Openai));
    assert_eq!(Kind::parse("OpenAI"), None);
    assert_eq!(Kind::parse(""), None);
    assert_eq!(Kind::Openai.to_string(), "openai");
}

#[test]
fn effective_base_url_defaults_and_verbatim() {
    assert_eq!(
        effective_base_url(Kind::Anthropic, None),
        "https://api.anthropic.com"
    );
    assert_eq!(
        effective_base_url(Kind::Openai, None),
        "https://api.openai.com"
    );
    assert_eq!(DEFAULT_ANTHROPIC_BASE, "https://api.anthropic.com");
    assert_eq!(DEFAULT_OPENAI_BASE, "https://api.openai.com");
    // Any host; the kind only picks the wire format.
    assert_eq!(
        effective_base_url(Kind::Openai, Some("http://127.0.0.1:9000/proxy")),
        "http://127.0.0.1:9000/proxy"
    );
    assert_eq!(
        effective_base_url(Kind::Anthropic, Some("")),
        DEFAULT_ANTHROPIC_BASE
    );
}

#[test]
fn c097_trailing_slash_base_url_has_no_double_slash() {
    let base = effective_base_url(Kind::Anthropic, Some("http://mock:8080/"));
    assert_eq!(base, "http://mock:8080");
    assert_eq!(
        endpoint_url(Kind::Anthropic, &base),
        "http://mock:8080/v1/messages"
    );
    // endpoint_url is itself robust to an untrimmed base.
    assert_eq!(
        endpoint_url(Kind::Openai, "http://mock:8080/"),
        "http://mock:8080/v1/chat/completions"
    );
    let req = prepare_request::<Value>(Kind::Openai, "http://mock:8080/gw/", "m", 1, &[], &[]);
    assert_eq!(req.url, "http://mock:8080/gw/v1/chat/completions");
    assert!(!req.url["http://".len()..].contains("//"));
}

#[test]
fn auth_header_placement() {
    assert_eq!(
        AuthHeader::XApiKey.header("sk-a"),
        ("x-api-key".to_string(), "sk-a".to_string())
    );
    assert_eq!(
        AuthHeader::Bearer.header("sk-o"),
        ("authorization".to_string(), "Bearer sk-o".to_string())
    );
}

// ---------------------------------------------------------------- C-093 strip

#[test]
fn c093_strip_removes_dispatch_and_caller_from_tool_use_only() {
    let history = vec![
        json!({"role": "user", "content": "hi"}),
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "calling", "dispatch": "keep-on-text"},
            {"type": "tool_use", "id": "tu_1", "dispatch": "client", "name": "t", "caller": {"x": 1}, "input": {}},
        ]}),
    ];
    let out = strip_internal(&history);
    assert_eq!(out[0], history[0]);
    assert_eq!(
        out[1]["content"][1],
        json!({"type": "tool_use", "id": "tu_1", "name": "t", "input": {}})
    );
    // Member order is preserved.
    let keys: Vec<&String> = out[1]["content"][1].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["type", "id", "name", "input"]);
    // Only tool_use blocks are touched.
    assert_eq!(out[1]["content"][0]["dispatch"], "keep-on-text");
}

#[test]
fn c093_dispatch_absent_from_logged_messages_and_wire_body() {
    let history = vec![
        json!({"role": "user", "content": "go"}),
        json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "tu_1", "name": "t", "input": {"a": 1}, "dispatch": "client"}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu_1", "content": "ok"}]}),
    ];
    for kind in [Kind::Anthropic, Kind::Openai] {
        let req = prepare_request(kind, "http://x", "m", 100, &history, &[]);
        let logged = serde_json::to_string(&req.logged_messages()).unwrap();
        assert!(!logged.contains("dispatch"), "{kind}: {logged}");
        let body = String::from_utf8(req.body.clone()).unwrap();
        assert!(!body.contains("dispatch"), "{kind}: {body}");
    }
    // The caller's history is untouched.
    assert_eq!(history[1]["content"][0]["dispatch"], "client");
}

// ---------------------------------------------------------------- C-094 normaliser

#[test]
fn c094_unchanged_list_has_no_record() {
    let msgs = vec![
        json!({"role": "user", "content": "a"}),
        json!({"role": "assistant", "content": [{"type": "text", "text": "b"}]}),
        json!({"role": "user", "content": "c"}),
    ];
    let n = normalize_anthropic(msgs.clone());
    assert_eq!(n.messages, msgs);
    assert_eq!(n.record, None);
    let empty = normalize_anthropic(vec![]);
    assert!(empty.messages.is_empty());
    assert_eq!(empty.record, None);
}

#[test]
fn c094_prepend_user_when_first_is_not_user() {
    let msgs = vec![
        json!({"role": "assistant", "content": [{"type": "text", "text": "summary"}]}),
        json!({"role": "user", "content": "next"}),
    ];
    let n = normalize_anthropic(msgs.clone());
    assert_eq!(
        n.messages,
        vec![preamble(), msgs[0].clone(), msgs[1].clone()]
    );
    assert_eq!(n.record, Some(json!({"prepended_user": true})));
}

#[test]
fn c094_merge_consecutive_same_role_with_exact_indices() {
    let msgs = vec![
        json!({"role": "user", "content": "a"}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r"}]}),
        json!({"role": "assistant", "content": "b"}),
        json!({"role": "user", "content": "c"}),
        json!({"role": "user", "content": "d"}),
        json!({"role": "user", "content": [{"type": "image", "source": {"k": 1}}]}),
    ];
    let n = normalize_anthropic(msgs);
    assert_eq!(
        n.messages,
        vec![
            json!({"role": "user", "content": [
                {"type": "text", "text": "a"},
                {"type": "tool_result", "tool_use_id": "t1", "content": "r"}]}),
            json!({"role": "assistant", "content": "b"}),
            json!({"role": "user", "content": [
                {"type": "text", "text": "c"},
                {"type": "text", "text": "d"},
                {"type": "image", "source": {"k": 1}}]}),
        ]
    );
    assert_eq!(n.record, Some(json!({"merged": [[0, 1], [3, 4, 5]]})));
}

#[test]
fn c094_prepend_and_merge_indices_count_after_prepend() {
    // assistant, assistant, user → [preamble, a, a, u]; run at 1..=2.
    let msgs = vec![
        json!({"role": "assistant", "content": "x"}),
        json!({"role": "assistant", "content": [{"type": "text", "text": "y"}]}),
        json!({"role": "user", "content": "z"}),
    ];
    let n = normalize_anthropic(msgs);
    assert_eq!(
        n.messages,
        vec![
            preamble(),
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}),
            json!({"role": "user", "content": "z"}),
        ]
    );
    let rec = n.record.unwrap();
    assert_eq!(rec, json!({"prepended_user": true, "merged": [[1, 2]]}));
    // Member order matches the spec example.
    let keys: Vec<&String> = rec.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["prepended_user", "merged"]);
}

#[test]
fn c094_compaction_shape_preamble_then_summary_is_unchanged() {
    // The stored preamble is itself a user message: no prepend needed.
    let msgs = vec![
        preamble(),
        json!({"role": "assistant", "content": [{"type": "text", "text": "sum"}]}),
        json!({"role": "user", "content": "q"}),
    ];
    assert_eq!(normalize_anthropic(msgs).record, None);
}

#[test]
fn c094_unknown_blocks_pass_through_verbatim() {
    let odd = json!({"type": "future_block", "payload": [1, {"z": null}]});
    let msgs = vec![
        json!({"role": "user", "content": [odd.clone()]}),
        json!({"role": "user", "content": "t"}),
    ];
    let n = normalize_anthropic(msgs);
    assert_eq!(n.messages[0]["content"][0], odd);
}

// ---------------------------------------------------------------- request

#[test]
fn c088_anthropic_request_url_headers_body() {
    let history = vec![json!({"role": "user", "content": "What time is it?"})];
    let tools = vec![json!({"name": "get_current_time", "description": null, "input_schema": {}})];
    let req = prepare_request(
        Kind::Anthropic,
        "https://api.anthropic.com",
        "claude-sonnet-4-6",
        8096,
        &history,
        &tools,
    );
    assert_eq!(req.url, "https://api.anthropic.com/v1/messages");
    assert_eq!(req.auth, AuthHeader::XApiKey);
    assert_eq!(
        req.headers,
        vec![
            ("content-type".to_string(), "application/json".to_string()),
            ("anthropic-version".to_string(), "2023-06-01".to_string()),
        ]
    );
    // No credential header is ever prepared (C-077).
    assert!(req
        .headers
        .iter()
        .all(|(k, _)| k != "x-api-key" && k != "authorization"));
    let body = body_json(&req.body);
    assert_eq!(
        body,
        json!({
            "model": "claude-sonnet-4-6",
            "max_tokens": 8096,
            "messages": [{"role": "user", "content": "What time is it?"}],
            // §10.1: null description omitted on the wire.
            "tools": [{"name": "get_current_time", "input_schema": {}}],
        })
    );
    let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["model", "max_tokens", "messages", "tools"]);
    assert_eq!(req.logged_messages(), history);
    assert_eq!(req.normalized, None);
    // Caller's tool list (which is what gets logged) is unchanged.
    assert!(tools[0]["description"].is_null());
}

#[test]
fn anthropic_tools_keep_non_null_description_and_omit_when_empty() {
    let tools = vec![
        json!({"name": "a", "description": "", "input_schema": {"type": "object"}}),
        json!({"name": "b", "input_schema": {}}),
    ];
    let h = [json!({"role": "user", "content": "x"})];
    let body = body_json(&prepare_request(Kind::Anthropic, "http://h", "m", 1, &h, &tools).body);
    assert_eq!(body["tools"], json!(tools));
    // §10.3: empty tools omitted.
    let body = body_json(&prepare_request(Kind::Anthropic, "http://h", "m", 1, &h, &[]).body);
    assert!(body.get("tools").is_none());
}

#[test]
fn c094_anthropic_request_logs_exactly_the_body_messages_and_record() {
    let history = vec![
        json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "tu", "name": "n", "input": {}, "dispatch": "mcp"}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu", "content": "r"}]}),
        json!({"role": "user", "content": "more"}),
    ];
    let req = prepare_request(Kind::Anthropic, "http://h", "m", 5, &history, &[]);
    let body = body_json(&req.body);
    assert_eq!(body["messages"], Value::Array(req.logged_messages()));
    assert_eq!(
        req.normalized,
        Some(json!({"prepended_user": true, "merged": [[2, 3]]}))
    );
    assert_eq!(req.logged_messages().len(), 3);
    assert_eq!(req.logged_messages()[0], preamble());
    assert!(req.logged_messages()[1]["content"][0]
        .get("dispatch")
        .is_none());
}

// ---------------------------------------------------------------- response

#[test]
fn anthropic_response_is_canonical_as_is() {
    let raw = json!({
        "id": "msg_1", "role": "assistant", "stop_reason": "tool_use",
        "content": [
            {"type": "text", "text": "let me check"},
            {"type": "tool_use", "id": "tu_1", "name": "get_current_time", "input": {}},
            {"type": "thinking", "thinking": "…"}
        ],
        "usage": {"input_tokens": 10, "output_tokens": 5}
    });
    let r = parse_response(Kind::Anthropic, raw.to_string().as_bytes()).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&r.body_json).unwrap(), raw);
    assert_eq!(r.body_json, raw.to_string());
    assert_eq!(r.content, raw["content"].as_array().unwrap().clone());
    assert_eq!(
        r.usage,
        Some(Usage {
            input_tokens: 10,
            output_tokens: 5
        })
    );
    assert_eq!(r.truncated, None);
    let tu = tool_uses(&r.content);
    assert_eq!(tu.len(), 1);
    assert_eq!(tu[0]["id"], "tu_1");
}

#[test]
fn anthropic_response_without_content_is_success_with_empty_content() {
    let r = parse_response(Kind::Anthropic, br#"{"type":"message"}"#).unwrap();
    assert!(r.content.is_empty());
    assert_eq!(r.usage, None);
    let r = parse_response(Kind::Anthropic, b"[1,2]").unwrap();
    assert!(r.content.is_empty());
}

#[test]
fn c080_anthropic_usage_includes_cache_tokens() {
    let body = json!({"content": [], "usage": {
        "input_tokens": 100, "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 20, "output_tokens": 7}});
    let r = parse_response(Kind::Anthropic, body.to_string().as_bytes()).unwrap();
    let u = r.usage.unwrap();
    assert_eq!(u.input_tokens, 1120);
    assert_eq!(u.output_tokens, 7);
    assert_eq!(u.total(), 1127);
    assert_eq!(
        u.to_json(),
        json!({"input_tokens": 1120, "output_tokens": 7})
    );
    // Only one cache counter, the other null.
    let body = json!({"usage": {"input_tokens": 1, "cache_read_input_tokens": 2,
        "cache_creation_input_tokens": null, "output_tokens": 3}});
    let u = parse_response(Kind::Anthropic, body.to_string().as_bytes())
        .unwrap()
        .usage
        .unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (3, 3));
}

#[test]
fn c079_anthropic_partial_or_missing_usage_is_none() {
    for usage in [
        json!(null),
        json!({}),
        json!({"input_tokens": 5}),
        json!({"output_tokens": 5}),
        json!({"input_tokens": -1, "output_tokens": 5}),
        json!({"input_tokens": 1.5, "output_tokens": 5}),
        json!({"input_tokens": "5", "output_tokens": 5}),
        json!({"cache_read_input_tokens": 5, "output_tokens": 5}),
    ] {
        let body = json!({"content": [], "usage": usage});
        let r = parse_response(Kind::Anthropic, body.to_string().as_bytes()).unwrap();
        assert_eq!(r.usage, None, "usage {usage}");
    }
    let r = parse_response(Kind::Anthropic, br#"{"content":[]}"#).unwrap();
    assert_eq!(r.usage, None);
}

#[test]
fn anthropic_max_tokens_stop_reason_is_truncation_not_failure() {
    let body = br#"{"content":[{"type":"text","text":"partial"}],"stop_reason":"max_tokens"}"#;
    let r = parse_response(Kind::Anthropic, body).unwrap();
    assert_eq!(r.truncated, Some("stop_reason max_tokens"));
    assert_eq!(r.content.len(), 1);
    let r = parse_response(Kind::Anthropic, br#"{"stop_reason":"end_turn"}"#).unwrap();
    assert_eq!(r.truncated, None);
}

#[test]
fn non_json_body_error_text() {
    for kind in [Kind::Anthropic, Kind::Openai] {
        let err = parse_response(kind, b"<html>oops</html>").unwrap_err();
        assert!(matches!(err, ParseError::NonJson(_)));
        let text = err.to_string();
        assert!(
            text.starts_with("provider returned non-JSON body: "),
            "{text}"
        );
        assert!(text.len() > "provider returned non-JSON body: ".len());
    }
    let err = parse_response(Kind::Anthropic, b"").unwrap_err();
    assert!(err
        .to_string()
        .starts_with("provider returned non-JSON body: "));
}

#[test]
fn http_error_text_format() {
    assert_eq!(http_error_text(500), "provider returned HTTP 500");
    assert_eq!(http_error_text(429), "provider returned HTTP 429");
}

#[test]
fn tool_uses_requires_type_and_string_name() {
    let content = vec![
        json!({"type": "text", "text": "x"}),
        json!({"type": "tool_use", "id": "a", "name": "n1"}),
        json!({"type": "tool_use", "id": "b", "name": 3}),
        json!({"type": "tool_use", "id": "c"}),
        json!("tool_use"),
        json!({"type": "tool_use", "id": "d", "name": "n2", "input": {"q": 1}}),
    ];
    let ids: Vec<&Value> = tool_uses(&content).iter().map(|b| &b["id"]).collect();
    assert_eq!(ids, [&json!("a"), &json!("d")]);
}

// ---------------------------------------------------------------- §8 history

#[test]
fn history_message_role_defaults_and_only_role_content() {
    assert_eq!(
        history_message("client.message.send", &json!({"content": "hi"})),
        json!({"role": "user", "content": "hi"})
    );
    assert_eq!(
        history_message(
            "server.message.send",
            &json!({"content": [{"type": "text", "text": "yo"}]})
        ),
        json!({"role": "assistant", "content": [{"type": "text", "text": "yo"}]})
    );
    // Explicit role wins; `synthetic` is not carried; dispatch tags are.
    assert_eq!(
        history_message(
            "server.message.send",
            &json!({"role": "user", "content": [{"type": "text", "text": PREAMBLE_TEXT}],
                    "synthetic": "compaction_preamble"})
        ),
        preamble()
    );
    let paused = json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "n", "input": {}, "dispatch": "client"}]});
    assert_eq!(history_message("server.message.send", &paused), paused);
    // Member order: role then content.
    let m = history_message(
        "client.message.send",
        &json!({"content": "x", "role": "user"}),
    );
    let keys: Vec<&String> = m.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["role", "content"]);
    // The owning form builds the same entry for every payload shape.
    for (event, payload) in [
        ("client.message.send", json!({"content": "hi"})),
        (
            "server.message.send",
            json!({"content": [{"type": "text", "text": "yo"}]}),
        ),
        (
            "server.message.send",
            json!({"role": "user", "content": "x", "synthetic": "s"}),
        ),
        ("client.message.send", json!({"role": 7})),
        ("server.message.send", json!("not an object")),
        ("server.message.send", paused.clone()),
    ] {
        assert_eq!(
            into_history_message(event, payload.clone()),
            history_message(event, &payload),
            "{payload}"
        );
    }
}
