use serde_json::{json, Value};

use super::encode::{error, events, ping};
use super::*;

fn anthropic_body() -> Value {
    json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [
            {"type": "thinking", "thinking": "let me see", "signature": "sig=="},
            {"type": "text", "text": "Héllo \"there\"\n"},
            {"type": "tool_use", "id": "tu_1", "name": "get", "input": {"q": [1, {"a": null}], "s": "x"}},
            {"type": "redacted_thinking", "data": "abc"}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 12, "cache_read_input_tokens": 3, "output_tokens": 40}
    })
}

fn openai_body() -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Let me check.",
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "get", "arguments": "{\"q\": 1}"}},
                {"id": "call_b", "type": "function", "function": {"name": "put", "arguments": ""}}
            ]}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}
    })
}

fn run(kind: Kind, stream: &str) -> (Result<ProviderResponse, StreamError>, Vec<Fragment>) {
    let mut asm = Assembler::new(kind, StreamLimits::default());
    let mut out = Vec::new();
    for b in stream.as_bytes().chunks(7) {
        if let Err(e) = asm.feed(b, &mut out) {
            return (Err(e), out);
        }
    }
    (asm.finish(), out)
}

fn joined(events: &[String]) -> String {
    events.concat()
}

#[test]
fn an_anthropic_stream_assembles_to_the_unstreamed_reply() {
    let body = anthropic_body();
    let want = parse_response(Kind::Anthropic, body.to_string().as_bytes()).unwrap();
    let (got, frags) = run(Kind::Anthropic, &joined(&events(Kind::Anthropic, &body, 3)));
    let got = got.unwrap();
    assert_eq!(got, want);
    assert_eq!(got.body_json, body.to_string());
    let of = |i: usize, k: DeltaKind| -> String {
        (frags.iter().filter(|f| f.index == i && f.kind == k))
            .map(|f| f.text.as_str())
            .collect()
    };
    assert_eq!(of(0, DeltaKind::Thinking), "let me see");
    assert_eq!(of(1, DeltaKind::Text), "Héllo \"there\"\n");
    let input: Value = serde_json::from_str(&of(2, DeltaKind::InputJson)).unwrap();
    assert_eq!(input, body["content"][2]["input"]);
    assert!(frags.iter().all(|f| f.index != 3));
}

/// A reply billed through the prompt cache: `message_delta` repeats every
/// counter (the API's current shape), and the assembled usage is the
/// unstreamed reply's, cache counters included.
#[test]
fn cache_counters_survive_message_start_and_message_delta() {
    let mut body = anthropic_body();
    body["usage"] = json!({"input_tokens": 7, "cache_creation_input_tokens": 1500,
        "cache_read_input_tokens": 9000, "output_tokens": 40});
    let evs = events(Kind::Anthropic, &body, 3);
    let data = |name: &str| -> Value {
        let ev = evs
            .iter()
            .find(|e| e.starts_with(&format!("event: {name}\n")))
            .unwrap();
        serde_json::from_str(ev.lines().nth(1).unwrap().trim_start_matches("data: ")).unwrap()
    };
    let start = &data("message_start")["message"]["usage"];
    assert_eq!(start["cache_read_input_tokens"], 9000);
    assert_eq!(start["output_tokens"], 1);
    let delta = &data("message_delta")["usage"];
    assert_eq!(delta["cache_creation_input_tokens"], 1500);
    assert_eq!(delta["output_tokens"], 40);
    let want = parse_response(Kind::Anthropic, body.to_string().as_bytes()).unwrap();
    let (got, _) = run(Kind::Anthropic, &joined(&evs));
    let got = got.unwrap();
    assert_eq!(got.tokens, want.tokens);
    assert_eq!(got.body_json, body.to_string());
}

#[test]
fn an_openai_stream_assembles_to_the_unstreamed_reply() {
    let body = openai_body();
    let want = parse_response(Kind::Openai, body.to_string().as_bytes()).unwrap();
    let stream = joined(&events(Kind::Openai, &body, 2));
    let (got, frags) = run(Kind::Openai, &stream);
    let got = got.unwrap();
    assert_eq!(got, want);
    assert_eq!(got.body_json, body.to_string());
    let text: String = frags
        .iter()
        .filter(|f| f.index == 0)
        .map(|f| &*f.text)
        .collect();
    assert_eq!(text, "Let me check.");
    let args: String = frags
        .iter()
        .filter(|f| f.index == 1)
        .map(|f| &*f.text)
        .collect();
    assert_eq!(args, "{\"q\": 1}");
    assert!(
        frags.iter().all(|f| f.index != 2),
        "empty arguments send nothing"
    );
}

#[test]
fn openai_tool_calls_without_text_start_at_block_zero() {
    let mut body = openai_body();
    body["choices"][0]["message"]["content"] = Value::Null;
    let (got, frags) = run(Kind::Openai, &joined(&events(Kind::Openai, &body, 4)));
    assert_eq!(got.unwrap().content[0]["id"], "call_a");
    assert!(frags
        .iter()
        .all(|f| f.index == 0 && f.kind == DeltaKind::InputJson));
}

/// A server that repeats `id` and `type` in every fragment (some compatible
/// servers do) gets them once; names and arguments are appended.
#[test]
fn repeated_ids_replace_and_arguments_append() {
    let chunk = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
        )
    };
    let stream = [
        chunk(json!({"role": "assistant", "content": null})),
        chunk(json!({"tool_calls": [{"index": 0, "id": "t1", "type": "function", "function": {"name": "ge", "arguments": "{\"a\""}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "id": "t1", "type": "function", "function": {"name": "t", "arguments": ":2}"}}]})),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let (got, _) = run(Kind::Openai, &stream);
    let got = got.unwrap();
    assert_eq!(
        got.content,
        vec![json!({"type": "tool_use", "id": "t1", "name": "get", "input": {"a": 2}})]
    );
    assert_eq!(got.usage, None, "no include_usage honoured: usage null");
}

#[test]
fn a_plain_json_body_is_read_whole() {
    for (kind, body) in [
        (Kind::Anthropic, anthropic_body()),
        (Kind::Openai, openai_body()),
    ] {
        let text = format!("\n  {}", serde_json::to_string_pretty(&body).unwrap());
        let (got, frags) = run(kind, &text);
        let want = parse_response(kind, text.as_bytes()).unwrap();
        assert_eq!(got.unwrap(), want);
        assert!(frags.is_empty());
    }
}

#[test]
fn pings_are_not_progress_and_comments_are_nothing() {
    let mut asm = Assembler::new(Kind::Anthropic, StreamLimits::default());
    let mut out = Vec::new();
    assert!(!asm
        .feed(ping(Kind::Anthropic).as_bytes(), &mut out)
        .unwrap());
    assert!(!asm.feed(b": keep-alive\n\n", &mut out).unwrap());
    let events = events(Kind::Anthropic, &anthropic_body(), 50);
    assert!(asm.feed(events[0].as_bytes(), &mut out).unwrap());
    assert!(!asm
        .feed(ping(Kind::Anthropic).as_bytes(), &mut out)
        .unwrap());
    assert!(!asm.is_complete());
}

/// Every way a stream can go wrong is one error with a stable text.
#[test]
fn faults_have_documented_errors() {
    let a = events(Kind::Anthropic, &anthropic_body(), 5);
    let o = events(Kind::Openai, &openai_body(), 5);
    let cut_a = joined(&a[..a.len() - 1]);
    let cut_o = joined(&o[..o.len() - 1]);
    let err = |kind, s: &str| run(kind, s).0.unwrap_err().to_string();
    assert_eq!(
        err(Kind::Anthropic, &cut_a),
        "provider stream ended before message_stop"
    );
    assert_eq!(
        err(Kind::Openai, &cut_o),
        "provider stream ended before [DONE]"
    );
    assert_eq!(
        err(Kind::Anthropic, ""),
        "provider returned non-JSON body: EOF while parsing a value at line 1 column 0"
    );

    let mid = format!(
        "{}{}{}",
        a[0],
        a[1],
        error(Kind::Anthropic, "overloaded_error", "Overloaded")
    );
    let (res, _) = run(Kind::Anthropic, &mid);
    let e = res.unwrap_err();
    assert_eq!(
        e.to_string(),
        "provider stream error: overloaded_error: Overloaded"
    );
    let body: Value = serde_json::from_str(e.body().unwrap()).unwrap();
    assert_eq!(body["error"]["type"], "overloaded_error");
    let mid = format!("{}{}", o[0], error(Kind::Openai, "server_error", "boom"));
    assert_eq!(err(Kind::Openai, &mid), "provider stream error: boom");

    let bad = format!("{}event: content_block_delta\ndata: {{nope\n\n", a[0]);
    assert!(err(Kind::Anthropic, &bad)
        .starts_with("provider stream event is not valid: data is not JSON"));
    let early = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{}}\n\n";
    assert_eq!(
        err(Kind::Anthropic, early),
        "provider stream event is not valid: content_block_start before message_start"
    );
    let skip = format!(
        "{}event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{{}}}}\n\n",
        a[0]
    );
    assert_eq!(
        err(Kind::Anthropic, &skip),
        "provider stream event is not valid: content block 1 out of order"
    );
    let bad_json = format!(
        "{}event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\",\"input\":{{}}}}}}\n\n\
         event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":\"{{oops\"}}}}\n\n\
         event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n",
        a[0]
    );
    assert!(err(Kind::Anthropic, &bad_json).starts_with(
        "provider stream event is not valid: the input of content block 0 is not JSON"
    ));

    let mut asm = Assembler::new(
        Kind::Anthropic,
        StreamLimits {
            max_bytes: 100,
            ..StreamLimits::default()
        },
    );
    let e = asm
        .feed(joined(&a).as_bytes(), &mut Vec::new())
        .unwrap_err();
    assert_eq!(e.to_string(), "provider stream larger than 100 bytes");

    // The assembled body is read by the unstreamed parser, errors included.
    let no_message = "data: {\"id\":\"x\",\"choices\":[]}\n\ndata: [DONE]\n\n";
    assert_eq!(
        err(Kind::Openai, no_message),
        "provider response is missing choices[0].message"
    );
}

#[test]
fn stream_members_are_appended_to_the_request_body() {
    let mut a = br#"{"model":"m","messages":[]}"#.to_vec();
    with_stream(Kind::Anthropic, &mut a);
    assert_eq!(a, br#"{"model":"m","messages":[],"stream":true}"#);
    let mut o = br#"{"model":"m"}"#.to_vec();
    with_stream(Kind::Openai, &mut o);
    let v: Value = serde_json::from_slice(&o).unwrap();
    assert_eq!(v["stream_options"]["include_usage"], true);
}

#[test]
fn events_after_the_end_change_nothing() {
    let a = events(Kind::Anthropic, &anthropic_body(), 5);
    let extra = format!("{}{}", joined(&a), a[1]);
    let (got, _) = run(Kind::Anthropic, &extra);
    assert_eq!(got.unwrap().body_json, anthropic_body().to_string());
}

/// Text deltas are read without a JSON tree when well formed; any other
/// shape goes through the tree reader and keeps its own error.
#[test]
fn odd_text_deltas_read_as_the_tree_reader_reads_them() {
    let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n\
                 event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
    let end = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
               event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n\
               event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let delta = |data: &str| format!("event: content_block_delta\ndata: {data}\n\n");
    let text = |deltas: &[&str]| {
        let s = format!(
            "{start}{}{end}",
            deltas.iter().map(|d| delta(d)).collect::<String>()
        );
        let (res, frags) = run(Kind::Anthropic, &s);
        let joined: String = frags.iter().map(|f| f.text.as_str()).collect();
        res.map(|r| (r.body_json, joined))
            .map_err(|e| e.to_string())
    };
    let (body, frags) = text(&[
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\"\u00e9\n"}}"#,
        // Members the reader does not use, duplicates, a non-string type:
        // read by the tree reader, to the same text.
        r#"{"index":0,"type":"content_block_delta","delta":{"text":"b","type":"text_delta","extra":[1]}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x","text":"c"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"d","thinking":7}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}}"#,
    ])
    .unwrap();
    assert_eq!(frags, "a\"é\nbcd");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["content"][0]["text"], "a\"é\nbcd");
    assert_eq!(body["content"][0]["signature"], "s");
    let err = |d: &str| text(&[d]).unwrap_err();
    assert_eq!(
        err(r#"["content_block_delta",0,{"type":"text_delta","text":"a"}]"#),
        "provider stream event is not valid: data is not a JSON object"
    );
    assert_eq!(
        err(r#"{"type":"content_block_delta","index":0,"delta":["text_delta","a"]}"#),
        "provider stream event is not valid: content_block_delta without a delta"
    );
    assert_eq!(
        err(
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":null}}"#
        ),
        "provider stream event is not valid: a delta without its text"
    );
    assert_eq!(
        err(r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"a"}}"#),
        "provider stream event is not valid: content block 1 was never started"
    );
}
