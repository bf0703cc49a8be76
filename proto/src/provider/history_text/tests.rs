use serde_json::json;

use super::*;
use crate::provider::Kind;

/// A history's text weighs about its bytes, not its value tree's.
#[test]
fn a_history_weighs_about_its_text() {
    let mut h = HistoryText::new();
    for i in 0..1000u32 {
        let role = if i.is_multiple_of(2) {
            "user"
        } else {
            "assistant"
        };
        h.push(&json!({"role": role, "content": [{"type": "text", "text": "x".repeat(150)}]}));
    }
    h.prepare(Kind::Anthropic);
    let text: usize = (0..h.len()).map(|i| h.text(i).unwrap().len()).sum();
    let bound = text + chunks::CHUNK + 40 * h.len();
    assert!(h.weight() < bound, "{} vs {text}", h.weight());
    assert_eq!(h.values().len(), 1000);
}

/// Stripping happens on the way in; the values read back are stripped.
#[test]
fn messages_are_stripped_once() {
    let mut h = HistoryText::new();
    let m = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}, "dispatch": "client", "caller": {}}]});
    h.push(&m);
    assert_eq!(
        h.value(0).unwrap(),
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}]})
    );
}

/// A breakpoint place is the closing brace of the last markable block.
#[test]
fn the_mark_is_the_last_markable_blocks_brace() {
    for (m, want) in [
        (json!({"role": "user", "content": "s"}), None),
        (json!({"role": "user", "content": []}), None),
        (
            json!({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "thinking", "thinking": "t"}]}),
            Some(r#"{"type":"text","text":"a"}"#),
        ),
        (
            json!({"role": "user", "content": [{"type": "text", "text": ""}, {"type": "tool_result", "tool_use_id": "x", "content": "r"}]}),
            Some(r#"{"type":"tool_result","tool_use_id":"x","content":"r"}"#),
        ),
        (
            json!({"content": [{"type": "text", "text": "a"}], "role": "user"}),
            None,
        ),
    ] {
        let text = to_json_text(&m);
        let got = mark_in(&m, text.len()).map(|at| {
            assert_eq!(&text[at..=at], "}");
            let start = text[..at].rfind("{\"type\"").unwrap();
            text[start..=at].to_string()
        });
        assert_eq!(got.as_deref(), want, "{m}");
    }
}
