//! Deterministic randomized checks of the provider codecs (C-093, C-094,
//! C-089..C-092). A tiny xorshift PRNG with fixed seeds keeps runs
//! reproducible without extra crates.

use proto::provider::{
    normalize_anthropic, parse_response, prepare_request, strip_internal, Kind, Message,
    PreparedRequest, PREAMBLE_TEXT,
};
use serde_json::{json, Value};

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
    fn word(&mut self) -> String {
        const WORDS: [&str; 8] = ["", " ", "a", "hello", "\n", "é\"q", "{", "x y"];
        WORDS[self.below(WORDS.len() as u64) as usize].to_string()
    }
}

fn random_block(rng: &mut XorShift) -> Value {
    match rng.below(7) {
        0 | 1 => json!({"type": "text", "text": rng.word()}),
        2 => {
            let mut b = json!({"type": "tool_use", "id": format!("tu_{}", rng.below(100)), "name": rng.word()});
            if !rng.chance(3) {
                b["input"] = json!({"k": rng.word()});
            }
            if rng.chance(2) {
                b["dispatch"] = json!("client");
            }
            if rng.chance(3) {
                b["caller"] = json!({"id": 1});
            }
            b
        }
        3 => {
            let content = match rng.below(5) {
                0 => json!(rng.word()),
                1 => json!([{"type": "text", "text": rng.word()}, {"type": "image"}]),
                2 => json!([{"type": "image"}]),
                3 => Value::Null,
                _ => json!({"n": rng.below(9)}),
            };
            json!({"type": "tool_result", "tool_use_id": format!("tu_{}", rng.below(100)), "content": content})
        }
        4 => json!({"type": "image", "source": {"data": rng.word()}}),
        5 => json!({"type": "mystery", "payload": [rng.below(5), null]}),
        _ => json!({"type": "thinking", "thinking": rng.word()}),
    }
}

fn random_content(rng: &mut XorShift) -> Value {
    if rng.chance(3) {
        json!(rng.word())
    } else {
        let n = rng.below(4);
        Value::Array((0..n).map(|_| random_block(rng)).collect())
    }
}

/// A well-formed canonical history: user/assistant roles only.
fn random_history(rng: &mut XorShift) -> Vec<Value> {
    let n = rng.below(9);
    (0..n)
        .map(|_| {
            let role = if rng.chance(2) { "user" } else { "assistant" };
            json!({"role": role, "content": random_content(rng)})
        })
        .collect()
}

/// Arbitrary (possibly malformed) messages for no-panic checks.
fn random_junk_message(rng: &mut XorShift) -> Value {
    match rng.below(8) {
        0 => Value::Null,
        1 => json!(rng.below(10)),
        2 => json!({"content": random_content(rng)}),
        3 => json!({"role": rng.below(3), "content": random_content(rng)}),
        4 => json!({"role": "assistant", "content": {"type": "text"}}),
        5 => json!({"role": "assistant", "content": [1, null, "s", [], {"type": 5}]}),
        6 => json!({"role": "tool", "content": [{"type": "tool_result"}]}),
        _ => json!({"role": "user", "content": random_content(rng)}),
    }
}

/// Content as blocks, the way the normaliser folds it.
fn as_blocks(content: &Value) -> Vec<Value> {
    match content {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(a) => a.clone(),
        Value::Null => vec![],
        other => vec![other.clone()],
    }
}

#[test]
fn c094_randomized_normalizer_alternates_and_preserves_blocks() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for case in 0..3000 {
        let history = random_history(&mut rng);
        let stripped = strip_internal(&history);
        let n = normalize_anthropic(stripped.clone());

        if stripped.is_empty() {
            assert!(n.messages.is_empty() && n.record.is_none());
            continue;
        }
        // Strict alternation starting with user.
        for (i, m) in n.messages.iter().enumerate() {
            let want = if i % 2 == 0 { "user" } else { "assistant" };
            assert_eq!(m["role"], want, "case {case}: {:?}", n.messages);
        }

        // All blocks preserved in order (plus the preamble when prepended).
        let prepended = stripped[0]["role"] != "user";
        let mut want: Vec<Value> = Vec::new();
        if prepended {
            want.push(json!({"type": "text", "text": PREAMBLE_TEXT}));
        }
        want.extend(stripped.iter().flat_map(|m| as_blocks(&m["content"])));
        let got: Vec<Value> = n
            .messages
            .iter()
            .flat_map(|m| as_blocks(&m["content"]))
            .collect();
        assert_eq!(got, want, "case {case}");

        // The record is exact: present iff something changed, indices are
        // ascending consecutive runs over the post-prepend list.
        let post_len = stripped.len() + usize::from(prepended);
        let mut expected_runs: Vec<Vec<usize>> = Vec::new();
        let mut roles: Vec<Value> = Vec::new();
        if prepended {
            roles.push(json!("user"));
        }
        roles.extend(stripped.iter().map(|m| m["role"].clone()));
        assert_eq!(roles.len(), post_len);
        let mut i = 0;
        while i < roles.len() {
            let mut j = i + 1;
            while j < roles.len() && roles[j] == roles[i] {
                j += 1;
            }
            if j - i > 1 {
                expected_runs.push((i..j).collect());
            }
            i = j;
        }
        match &n.record {
            None => {
                assert!(!prepended && expected_runs.is_empty(), "case {case}");
                assert_eq!(n.messages, stripped);
            }
            Some(rec) => {
                assert_eq!(rec.get("prepended_user").is_some(), prepended);
                if prepended {
                    assert_eq!(rec["prepended_user"], true);
                }
                let merged: Vec<Vec<usize>> = match rec.get("merged") {
                    None => vec![],
                    Some(v) => serde_json::from_value(v.clone()).unwrap(),
                };
                assert!(rec.get("merged").is_none() || !merged.is_empty());
                assert_eq!(merged, expected_runs, "case {case}");
            }
        }

        // No internal members survive, and the request body agrees with the
        // logged list.
        let req = prepare_request(Kind::Anthropic, "http://h/", "m", 9, &history, &[]);
        same_from_messages(&req, Kind::Anthropic, &history, &[]);
        assert_eq!(req.logged_messages(), n.messages);
        assert_eq!(req.normalized, n.record);
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(body["messages"], Value::Array(n.messages.clone()));
        let text = String::from_utf8(req.body).unwrap();
        assert!(!text.contains("\"dispatch\"") && !text.contains("\"caller\""));
        // The spliced body is byte for byte the serialised body object.
        let whole = json!({"model": "m", "max_tokens": 9, "messages": n.messages}).to_string();
        assert_eq!(text, whole, "case {case}");
    }
}

#[test]
fn c092_randomized_openai_translation_never_panics() {
    let mut rng = XorShift(0xDEAD_BEEF_CAFE_F00D);
    let tools = [
        json!({"name": "a", "description": null, "input_schema": {}}),
        json!({"name": "b"}),
        json!(null),
        json!(3),
    ];
    for _ in 0..3000 {
        let n = rng.below(8);
        let history: Vec<Value> = (0..n)
            .map(|_| {
                if rng.chance(2) {
                    random_junk_message(&mut rng)
                } else {
                    json!({"role": "assistant", "content": random_content(&mut rng)})
                }
            })
            .collect();
        let t = &tools[..rng.below(tools.len() as u64 + 1) as usize];
        for kind in [Kind::Openai, Kind::Anthropic] {
            let req = prepare_request(kind, "http://h", "m", 1, &history, t);
            same_from_messages(&req, kind, &history, t);
            let body: Value = serde_json::from_slice(&req.body).unwrap();
            let msgs = body["messages"].as_array().unwrap();
            if kind == Kind::Openai {
                assert_eq!(req.logged_messages(), strip_internal(&history));
                assert_eq!(body.get("tools").is_some(), !t.is_empty());
                for m in msgs {
                    let role = m["role"].as_str().unwrap();
                    assert!(m.get("content").is_some());
                    if role == "tool" {
                        assert!(m["content"].is_string());
                    }
                    if let Some(calls) = m.get("tool_calls") {
                        for c in calls.as_array().unwrap() {
                            let args = c["function"]["arguments"].as_str().unwrap();
                            serde_json::from_str::<Value>(args).unwrap();
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn randomized_response_parsing_never_panics() {
    let mut rng = XorShift(0x0123_4567_89AB_CDEF);
    let pieces: [&[u8]; 12] = [
        b"{",
        b"}",
        b"[",
        b"]",
        b"\"choices\":",
        b"\"message\":",
        b"\"tool_calls\":",
        b"\"function\":{\"name\":\"n\",\"arguments\":\"{\\\"a\\\"\"}",
        b"null",
        b",",
        b"\"usage\":{\"prompt_tokens\":1}",
        b"\"content\":\"x\"",
    ];
    for _ in 0..5000 {
        let mut body = Vec::new();
        for _ in 0..rng.below(12) {
            body.extend_from_slice(pieces[rng.below(pieces.len() as u64) as usize]);
        }
        for kind in [Kind::Anthropic, Kind::Openai] {
            match parse_response(kind, &body) {
                Ok(r) => {
                    if let Some(u) = r.usage {
                        let _ = u.to_json();
                    }
                }
                Err(e) => assert!(!e.to_string().is_empty()),
            }
        }
    }
    // Structured random Chat Completions bodies.
    for _ in 0..3000 {
        let calls: Vec<Value> = (0..rng.below(4))
            .map(|_| {
                let args = match rng.below(5) {
                    0 => json!("{\"k\":1}"),
                    1 => json!(""),
                    2 => json!("not json"),
                    3 => json!({"already": "decoded"}),
                    _ => Value::Null,
                };
                json!({"id": rng.below(50), "function": {"name": rng.word(), "arguments": args}})
            })
            .collect();
        let body = json!({"choices": [{"finish_reason": if rng.chance(2) {"length"} else {"stop"},
            "message": {"content": rng.word(), "tool_calls": calls}}]});
        match parse_response(Kind::Openai, body.to_string().as_bytes()) {
            Ok(r) => {
                for b in &r.content {
                    assert!(b["type"] == "text" || b["type"] == "tool_use");
                }
            }
            Err(e) => assert!(e.to_string().contains("has non-JSON function.arguments: ")),
        }
    }
}

/// A history of [`Message`]s (texts rendered on first use, then reused)
/// prepares byte for byte the request its plain values prepare.
fn same_from_messages(req: &PreparedRequest, kind: Kind, history: &[Value], tools: &[Value]) {
    let msgs: Vec<Message> = history.iter().cloned().map(Message::new).collect();
    for _ in 0..2 {
        let again = prepare_request(kind, "http://h/", "m", 9, &msgs, tools);
        assert_eq!(again.logged_messages_json, req.logged_messages_json);
        assert_eq!(again.normalized, req.normalized);
        let body = |b: &[u8]| serde_json::from_slice::<Value>(b).unwrap()["messages"].clone();
        assert_eq!(body(&again.body), body(&req.body));
    }
}

#[test]
fn messages_render_their_text_once_for_every_request() {
    let history: Vec<Message> = (0..6)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            let content = json!([{"type": "tool_use", "id": format!("t{i}"), "name": "x",
                                  "input": {}, "dispatch": "client"}]);
            Message::new(json!({"role": role, "content": content}))
        })
        .collect();
    let first = prepare_request(Kind::Anthropic, "http://h/", "m", 9, &history, &[]);
    let rendered: Vec<usize> = history.iter().map(Message::text_len).collect();
    assert!(rendered.iter().all(|n| *n > 0), "{rendered:?}");
    assert!(!first.logged_messages_json.contains("dispatch"));
    let second = prepare_request(Kind::Anthropic, "http://h/", "m", 9, &history, &[]);
    assert_eq!(second.body, first.body);
    let plain: Vec<Value> = history.iter().map(|m| m.value().clone()).collect();
    let from_values = prepare_request(Kind::Anthropic, "http://h/", "m", 9, &plain, &[]);
    assert_eq!(from_values.body, first.body);
}
