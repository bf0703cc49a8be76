//! The request built from a [`HistoryText`] against the reference
//! [`prepare_request_with`] over random histories (caching off: byte for
//! byte), and the breakpoints and prefix stability of caching on.

use serde_json::{json, Value};

use super::*;
use crate::provider::prepare_request_with;

/// A small deterministic generator (xorshift64*).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn text(rng: &mut Rng) -> String {
    let words = [
        "a",
        "é\u{2028}",
        "\"q\"",
        "tool",
        "x\\y",
        "long text here",
        "",
    ];
    (0..=rng.below(4))
        .map(|_| words[rng.below(words.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

fn block(rng: &mut Rng, id: &mut u32) -> Value {
    *id += 1;
    match rng.below(7) {
        0 | 1 => json!({"type": "text", "text": text(rng)}),
        2 => {
            json!({"type": "tool_use", "id": format!("t{id}"), "name": "n", "input": {"q": text(rng)}, "dispatch": "client"})
        }
        3 => {
            json!({"type": "tool_use", "id": format!("t{id}"), "name": "n", "input": {}, "caller": {"x": 1}})
        }
        4 => {
            json!({"type": "tool_result", "tool_use_id": format!("t{id}"), "content": if rng.chance(50) { json!(text(rng)) } else { json!([{"type": "text", "text": text(rng)}]) }, "is_error": rng.chance(20)})
        }
        5 => json!({"type": "thinking", "thinking": text(rng), "signature": "s"}),
        _ => {
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}})
        }
    }
}

/// A random canonical message (mostly alternating roles, sometimes not).
pub(crate) fn message(rng: &mut Rng, i: usize, id: &mut u32) -> Value {
    let role = match rng.below(20) {
        0..=2 => json!("user"),
        3 => json!("assistant"),
        4 if rng.chance(30) => json!("system"),
        _ if i.is_multiple_of(2) => json!("user"),
        _ => json!("assistant"),
    };
    let content = match rng.below(10) {
        0..=3 => json!(text(rng)),
        4 if rng.chance(20) => Value::Null,
        _ => Value::Array((0..rng.below(4)).map(|_| block(rng, id)).collect()),
    };
    json!({"role": role, "content": content})
}

fn tools(rng: &mut Rng) -> Vec<Value> {
    (0..rng.below(3))
        .map(|i| {
            let description = if rng.chance(30) { Value::Null } else { json!("d") };
            json!({"name": format!("tool{i}"), "description": description, "input_schema": {"type": "object"}})
        })
        .collect()
}

/// One random request: the history, its text (pushed one by one, with
/// `prepare` at a random point), how much of it is sent, a tail, tools.
fn case(seed: u64, kind: Kind) -> (Vec<Value>, HistoryText, usize, Vec<Message>, Vec<Value>) {
    let mut rng = Rng::new(seed);
    let mut id = 0;
    let len = rng.below(12) as usize;
    let history: Vec<Value> = (0..len).map(|i| message(&mut rng, i, &mut id)).collect();
    let prepare_at = rng.below(len as u64 + 1) as usize;
    let mut text = HistoryText::new();
    for (i, m) in history.iter().enumerate() {
        if i == prepare_at {
            text.prepare(kind);
        }
        text.push(m);
    }
    text.prepare(kind);
    let upto = len - rng.below(3).min(len as u64) as usize;
    let tail: Vec<Message> = (0..rng.below(4))
        .map(|i| Message::new(message(&mut rng, upto + i as usize, &mut id)))
        .collect();
    (history, text, upto, tail, tools(&mut rng))
}

/// Caching off: body, logged messages and `normalized` are the
/// reference's, byte for byte (spec 05 §6.1/§6.2).
#[test]
fn without_caching_the_request_is_the_reference_one() {
    for kind in [Kind::Anthropic, Kind::Openai] {
        for seed in 0..1500 {
            let (history, text, upto, tail, tools) = case(seed, kind);
            let tools_json = to_json_text(&tools);
            let spec = Spec {
                kind,
                base_url: "http://h/",
                model: "m\"x",
                max_tokens: 77,
                history: &text,
                upto,
                tail: &tail,
                tools: &tools,
                tools_json: &tools_json,
                cache: None,
            };
            let built = build(&spec);
            let items: Vec<&Value> = history[..upto]
                .iter()
                .chain(tail.iter().map(|m| m.value()))
                .collect();
            let want = prepare_request_with(
                kind,
                "http://h/",
                "m\"x",
                77,
                items.iter().copied(),
                &tools,
                &tools_json,
            );
            let ctx = format!("{kind} seed {seed}");
            assert_eq!(
                String::from_utf8_lossy(&built.body),
                String::from_utf8_lossy(&want.body),
                "{ctx}"
            );
            assert_eq!(built.logged_text(), want.logged_messages_json, "{ctx}");
            assert_eq!(built.logged_len(), want.logged_messages_json.len(), "{ctx}");
            assert_eq!(built.normalized, want.normalized, "{ctx}");
            assert_eq!(built.headers, want.headers, "{ctx}");
            assert_eq!(built.url, want.url, "{ctx}");
            assert_eq!(built.breakpoints, 0);
        }
    }
}

fn cached(settings: Caching, inert: bool) -> Option<Cache<'static>> {
    Some(Cache {
        settings,
        key: "bae-key",
        tools_inert: inert,
    })
}

const MARKER: &str = ",\"cache_control\":{\"type\":\"ephemeral\"}";

/// Where each breakpoint marker starts in `body`.
fn marker_offsets(body: &[u8]) -> Vec<usize> {
    let b = String::from_utf8_lossy(body);
    b.match_indices(MARKER).map(|(i, _)| i).collect()
}

/// Caching on: valid JSON, at most four breakpoints, each on a block that
/// may carry one, and the body with them removed is the same request as
/// without caching (members reordered).
#[test]
fn breakpoints_are_few_well_placed_and_change_nothing_else() {
    let settings = Caching {
        ttl_1h: false,
        min_tokens: 0,
    };
    let mut placed = 0;
    for kind in [Kind::Anthropic, Kind::Openai] {
        for seed in 0..1000 {
            let (_, text, upto, tail, tools) = case(seed, kind);
            let tools_json = to_json_text(&tools);
            let mut spec = Spec {
                kind,
                base_url: "http://h",
                model: "m",
                max_tokens: 9,
                history: &text,
                upto,
                tail: &tail,
                tools: &tools,
                tools_json: &tools_json,
                cache: None,
            };
            let plain: Value = serde_json::from_slice(&build(&spec).body).unwrap();
            spec.cache = cached(settings, false);
            let built = build(&spec);
            let body: Value = serde_json::from_slice(&built.body).expect("valid JSON");
            let n = marker_offsets(&built.body).len();
            assert!(n <= 4 && n == built.breakpoints, "seed {seed}: {n}");
            placed += n;
            let mut stripped = body.clone();
            strip_markers(&mut stripped, &mut 0);
            if kind == Kind::Openai {
                assert_eq!(stripped["prompt_cache_key"], json!("bae-key"));
                stripped.as_object_mut().unwrap().remove("prompt_cache_key");
            }
            assert_eq!(stripped, plain, "seed {seed}");
            let mut on_blocks = 0;
            count_marked_blocks(&body["messages"], &mut on_blocks);
            let tool_marks = usize::from(
                body["tools"]
                    .as_array()
                    .and_then(|t| t.last())
                    .is_some_and(|t| t.get("cache_control").is_some()),
            );
            assert_eq!(on_blocks + tool_marks, n, "seed {seed}");
        }
    }
    assert!(placed > 500, "breakpoints were placed: {placed}");
}

fn strip_markers(v: &mut Value, n: &mut usize) {
    match v {
        Value::Object(o) => {
            if o.shift_remove("cache_control").is_some() {
                *n += 1;
            }
            o.values_mut().for_each(|x| strip_markers(x, n));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| strip_markers(x, n)),
        _ => {}
    }
}

/// Markers on message blocks, each checked to be on a block that may
/// carry one.
fn count_marked_blocks(messages: &Value, n: &mut usize) {
    for m in messages.as_array().into_iter().flatten() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b.get("cache_control").is_some() {
                let mut plain = b.clone();
                plain.as_object_mut().unwrap().remove("cache_control");
                assert!(super::super::history_text::markable(&plain), "{b}");
                *n += 1;
            }
        }
    }
}

/// A growing session's requests: each starts with the previous one's
/// bytes up to that one's last breakpoint inside the history, and, while
/// the turn's own messages only grow, up to its last breakpoint.
#[test]
fn a_growing_history_keeps_its_prefix() {
    let settings = Caching {
        ttl_1h: false,
        min_tokens: 0,
    };
    for seed in 0..150 {
        let mut rng = Rng::new(seed);
        let mut id = 0;
        let mut text = HistoryText::new();
        let tools = tools(&mut rng);
        let tools_json = to_json_text(&tools);
        // The previous body, how much of it the next must start with, and
        // its stable prefix.
        let mut prev: Option<(Vec<u8>, usize, usize)> = None;
        for i in 0..30 {
            text.push(&message(&mut rng, i, &mut id));
            text.prepare(Kind::Anthropic);
            let mut tail = Vec::new();
            for round in 0..rng.below(3) {
                let spec = Spec {
                    kind: Kind::Anthropic,
                    base_url: "http://h",
                    model: "m",
                    max_tokens: 9 + round as u32,
                    history: &text,
                    upto: text.len(),
                    tail: &tail,
                    tools: &tools,
                    tools_json: &tools_json,
                    cache: cached(settings, false),
                };
                let built = build(&spec);
                if let Some((body, keep, _)) = &prev {
                    let at = body.iter().zip(&built.body).position(|(a, b)| a != b);
                    assert!(
                        built.body.starts_with(&body[..*keep]),
                        "seed {seed} message {i} round {round}: keep {keep}, differ at {at:?}\n{}\n{}",
                        String::from_utf8_lossy(&body[at.unwrap_or(0).saturating_sub(200)..*keep]),
                        String::from_utf8_lossy(&built.body[at.unwrap_or(0).saturating_sub(200)..]),
                    );
                }
                assert!(built.stable_prefix <= built.cached_prefix);
                if built.stable_prefix > 0 {
                    assert!(built.body[built.stable_prefix..].starts_with(MARKER.as_bytes()));
                }
                // While the turn's own messages only grow, the next call
                // keeps everything up to the last breakpoint.
                let (cached, stable) = (built.cached_prefix, built.stable_prefix);
                prev = Some((built.body.clone(), cached, stable));
                tail.push(Message::new(message(&mut rng, i + 1, &mut id)));
                if rng.chance(20) {
                    break;
                }
            }
            // A new message replaces the turn's own: only the history's
            // breakpoint must hold.
            if let Some((body, _, stable)) = prev.take() {
                prev = Some((body, stable, stable));
            }
        }
    }
}

/// No breakpoint closes a prefix shorter than the minimum; 1-hour ones
/// carry their TTL and the beta header.
#[test]
fn the_minimum_and_the_ttl() {
    let mut text = HistoryText::new();
    text.push(&json!({"role": "user", "content": [{"type": "text", "text": "short"}]}));
    text.prepare(Kind::Anthropic);
    let tools = [json!({"name": "t", "description": "d", "input_schema": {}})];
    let tools_json = to_json_text(&tools);
    let spec = |cache| Spec {
        kind: Kind::Anthropic,
        base_url: "http://h",
        model: "m",
        max_tokens: 9,
        history: &text,
        upto: 1,
        tail: &[],
        tools: &tools,
        tools_json: &tools_json,
        cache,
    };
    let short = build(&spec(cached(Caching::default(), false)));
    assert_eq!(short.breakpoints, 0);
    assert!(!String::from_utf8_lossy(&short.body).contains("cache_control"));
    let long = Caching {
        ttl_1h: true,
        min_tokens: 1,
    };
    let b = build(&spec(cached(long, true)));
    assert_eq!(b.breakpoints, 2);
    let body: Value = serde_json::from_slice(&b.body).unwrap();
    assert_eq!(
        body["tools"][0]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"})
    );
    assert_eq!(
        body["messages"][0]["content"][0]["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"})
    );
    assert_eq!(body["tool_choice"], json!({"type": "none"}));
    assert!(b
        .headers
        .contains(&("anthropic-beta".to_string(), EXTENDED_TTL_BETA.to_string())));
    let keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        ["model", "tools", "messages", "max_tokens", "tool_choice"]
    );
}
