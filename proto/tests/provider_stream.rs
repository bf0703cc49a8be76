//! Property test of streamed replies: random Anthropic and OpenAI reply
//! bodies, rendered as their event streams (text cut into random runs,
//! pings and comments between events, LF, CRLF or CR line ends), fed to
//! the assembler split at random byte boundaries (inside UTF-8 characters
//! too), must give exactly the reply the unstreamed body gives (content,
//! usage, truncation and the logged body's bytes), and the fragments of
//! each block must add up to its final text or tool input. A seeded
//! xorshift keeps every failure reproducible: the message names the case.

use proto::provider::stream::encode::{self, events};
use proto::provider::stream::{Assembler, DeltaKind, Fragment, StreamLimits};
use proto::provider::{parse_response, Kind};
use serde_json::{json, Map, Value};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
    fn text(&mut self) -> String {
        const PARTS: [&str; 14] = [
            "",
            "a",
            "hello ",
            "wörld",
            "日本語",
            "🦀",
            "\"q\"",
            "\\",
            "\n",
            "\r\n",
            "\t",
            "\u{1}",
            "data: x",
            "[DONE]",
        ];
        let n = self.below(12);
        (0..n)
            .map(|_| PARTS[self.below(PARTS.len() as u64) as usize])
            .collect()
    }
    fn value(&mut self, depth: u32) -> Value {
        match self.below(if depth > 2 { 4 } else { 6 }) {
            0 => Value::Null,
            1 => json!(self.below(1_000_000)),
            2 => json!(self.text()),
            3 => json!(self.chance(2)),
            4 => Value::Array((0..self.below(4)).map(|_| self.value(depth + 1)).collect()),
            _ => Value::Object(self.object(depth + 1)),
        }
    }
    fn object(&mut self, depth: u32) -> Map<String, Value> {
        (0..self.below(4))
            .map(|i| (format!("k{i}{}", self.text()), self.value(depth)))
            .collect()
    }
}

fn anthropic_body(rng: &mut Rng) -> Value {
    let mut content = Vec::new();
    for i in 0..rng.below(5) {
        content.push(match rng.below(5) {
            0 | 1 => json!({"type": "text", "text": rng.text()}),
            2 => json!({"type": "tool_use", "id": format!("tu_{i}"), "name": rng.text(),
                        "input": Value::Object(rng.object(0))}),
            3 => json!({"type": "thinking", "thinking": rng.text(), "signature": rng.text()}),
            _ => json!({"type": "redacted_thinking", "data": rng.text()}),
        });
    }
    let mut body = json!({"id": format!("msg_{}", rng.below(999)), "type": "message",
                          "role": "assistant", "model": rng.text(), "content": content});
    let stop = ["end_turn", "tool_use", "max_tokens", "stop_sequence"][rng.below(4) as usize];
    body["stop_reason"] = json!(stop);
    body["stop_sequence"] = if rng.chance(3) {
        json!(rng.text())
    } else {
        Value::Null
    };
    if !rng.chance(4) {
        let mut usage = json!({"input_tokens": rng.below(9999), "output_tokens": rng.below(9999)});
        if rng.chance(2) {
            usage["cache_read_input_tokens"] = json!(rng.below(500));
        }
        body["usage"] = usage;
    }
    body
}

fn openai_body(rng: &mut Rng) -> Value {
    let content = match rng.below(3) {
        0 => Value::Null,
        _ => json!(rng.text()),
    };
    let mut message = json!({"role": "assistant", "content": content});
    if rng.chance(2) {
        let calls: Vec<Value> = (0..1 + rng.below(3))
            .map(|i| {
                let args = match rng.below(4) {
                    0 => String::new(),
                    _ => Value::Object(rng.object(0)).to_string(),
                };
                json!({"id": format!("call_{i}"), "type": "function",
                       "function": {"name": format!("f{}", rng.below(9)), "arguments": args}})
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    let finish = ["stop", "length", "tool_calls"][rng.below(3) as usize];
    let mut body = json!({"id": format!("chatcmpl-{}", rng.below(999)), "object": "chat.completion",
                          "created": rng.below(1 << 40), "model": rng.text()});
    if rng.chance(2) {
        body["system_fingerprint"] = json!(rng.text());
    }
    body["choices"] = json!([{"index": 0, "message": message, "finish_reason": finish}]);
    if !rng.chance(4) {
        let (p, c) = (rng.below(9999), rng.below(9999));
        body["usage"] = json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c});
    }
    body
}

/// The stream text of `body`: events, with pings and comments between
/// them, in one of the three line-end styles.
fn stream_text(rng: &mut Rng, kind: Kind, body: &Value) -> String {
    let max_chars = 1 + rng.below(8) as usize;
    let mut out = String::new();
    for ev in events(kind, body, max_chars) {
        if rng.chance(4) {
            out.push_str(&encode::ping(kind));
        }
        if rng.chance(6) {
            out.push_str(": comment\n\n");
        }
        out.push_str(&ev);
    }
    // Data lines hold compact JSON (no raw line breaks), so every line end
    // of the text is the framing's.
    match rng.below(3) {
        0 => out,
        1 => out.replace('\n', "\r\n"),
        _ => out.replace('\n', "\r"),
    }
}

/// Random chunk boundaries, anywhere in the bytes.
fn feed_split(rng: &mut Rng, asm: &mut Assembler, bytes: &[u8], out: &mut Vec<Fragment>) {
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = match rng.below(4) {
            0 => 1,
            1 => 1 + rng.below(8) as usize,
            _ => 1 + rng.below(300) as usize,
        }
        .min(rest.len());
        let (now, later) = rest.split_at(n);
        asm.feed(now, out).unwrap();
        rest = later;
    }
}

/// The text of block `index` of `kind` in the fragments.
fn joined(frags: &[Fragment], index: usize, kind: DeltaKind) -> String {
    (frags.iter().filter(|f| f.index == index && f.kind == kind))
        .map(|f| f.text.as_str())
        .collect()
}

fn check_fragments(kind: Kind, body: &Value, frags: &[Fragment], case: &str) {
    match kind {
        Kind::Anthropic => {
            for (i, block) in body["content"].as_array().unwrap().iter().enumerate() {
                match block["type"].as_str().unwrap() {
                    "text" => {
                        assert_eq!(joined(frags, i, DeltaKind::Text), block["text"], "{case}")
                    }
                    "thinking" => {
                        assert_eq!(
                            joined(frags, i, DeltaKind::Thinking),
                            block["thinking"],
                            "{case}"
                        )
                    }
                    "tool_use" => {
                        let text = joined(frags, i, DeltaKind::InputJson);
                        let input: Value = match text.as_str() {
                            "" => json!({}),
                            t => serde_json::from_str(t).unwrap(),
                        };
                        assert_eq!(input, block["input"], "{case}");
                    }
                    _ => assert!(frags.iter().all(|f| f.index != i), "{case}"),
                }
            }
        }
        Kind::Openai => {
            let message = &body["choices"][0]["message"];
            let text = message["content"].as_str().unwrap_or("");
            assert_eq!(joined(frags, 0, DeltaKind::Text), text, "{case}");
            let first_tool = usize::from(!text.is_empty());
            for (k, call) in message["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let args = joined(frags, first_tool + k, DeltaKind::InputJson);
                assert_eq!(args, call["function"]["arguments"], "{case}");
            }
        }
    }
}

#[test]
fn random_replies_split_anywhere_assemble_to_the_unstreamed_reply() {
    for seed in 1..=3000u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let kind = if seed % 2 == 0 {
            Kind::Anthropic
        } else {
            Kind::Openai
        };
        let body = match kind {
            Kind::Anthropic => anthropic_body(&mut rng),
            Kind::Openai => openai_body(&mut rng),
        };
        let case = format!("seed {seed} ({kind}): {body}");
        let text = stream_text(&mut rng, kind, &body);
        let mut asm = Assembler::new(kind, StreamLimits::default());
        let mut frags = Vec::new();
        feed_split(&mut rng, &mut asm, text.as_bytes(), &mut frags);
        assert!(asm.is_complete(), "{case}");
        let got = asm.finish();
        let want = parse_response(kind, body.to_string().as_bytes());
        assert_eq!(got.as_ref().ok(), want.as_ref().ok(), "{case}");
        if let Ok(got) = got {
            assert_eq!(got.body_json, body.to_string(), "{case}");
        }
        check_fragments(kind, &body, &frags, &case);
    }
}

/// Cutting the same streams anywhere before their last event never yields
/// a reply: a half-assembled message is never taken for a whole one.
#[test]
fn random_replies_cut_anywhere_fail() {
    for seed in 1..=600u64 {
        let mut rng = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
        let kind = if seed % 2 == 0 {
            Kind::Anthropic
        } else {
            Kind::Openai
        };
        let body = match kind {
            Kind::Anthropic => anthropic_body(&mut rng),
            Kind::Openai => openai_body(&mut rng),
        };
        let text = events(kind, &body, 1 + rng.below(5) as usize).concat();
        // The last event starts at its own boundary; cut anywhere before
        // its blank line ends.
        let cut = rng.below(text.len() as u64 - 1) as usize;
        let mut asm = Assembler::new(kind, StreamLimits::default());
        let mut frags = Vec::new();
        let fed = asm.feed(&text.as_bytes()[..cut], &mut frags);
        assert!(
            fed.is_err() || asm.finish().is_err(),
            "seed {seed}: cut at {cut} of {text}"
        );
    }
}
