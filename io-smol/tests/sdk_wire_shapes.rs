//! Wire shapes that SDK line readers depend on (found by running the
//! reference Python SDK as a black-box client against this server).
//!
//! Spec 01 §5.3: every `/rpc` NDJSON frame is one complete JSON object on
//! one line. JSON allows U+2028, U+2029 and U+0085 unescaped inside strings,
//! but line readers that follow Unicode line boundaries (Python
//! `str.splitlines`, and so the `aiter_lines()` of httpx, the transport of
//! bae-py) treat them as line breaks, so a raw one splits a frame in two and
//! the client fails with a malformed-frame error. Writing them as `\u2028`,
//! `\u2029`, `\u0085` decodes to the same value and keeps every frame on one
//! line for every reader.

mod live_support;

use live_support::*;
use serde_json::{json, Value};
use testkit::Reply;

/// Code points that a Unicode-aware line reader splits on but that JSON does
/// not force a serializer to escape.
const UNICODE_BREAKS: [char; 3] = ['\u{2028}', '\u{2029}', '\u{0085}'];

#[track_caller]
fn assert_single_unicode_line(line: &str) {
    for c in UNICODE_BREAKS {
        assert!(
            !line.contains(c),
            "NDJSON frame carries a raw U+{:04X}; a Unicode-aware line reader splits it: {line:?}",
            c as u32
        );
    }
    let parsed: Value = serde_json::from_str(line).expect("each line is one JSON object");
    assert!(parsed.is_object());
}

#[test]

fn ndjson_frames_never_contain_raw_unicode_line_separators() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    let observer = f.join(&server, json!({}));
    let mut sub = subscribe(&server, &f.session_id, &observer.session_key, json!({}));
    // The subscription is attached before the turn starts.
    std::thread::sleep(std::time::Duration::from_millis(200));

    let user_text = "in\u{2028}put\u{2029}and\u{0085}more";
    let model_text = "out\u{2028}put\u{2029}and\u{0085}more";
    mock.push(Reply::text(model_text));

    let mut s = send_stream(&server, &f.session_id, &f.a, json!(user_text));
    let mut terminal = None;
    while let Some(line) = s.next_line(WAIT) {
        assert_single_unicode_line(&line);
        let frame: Value = serde_json::from_str(&line).unwrap();
        if frame.get("id").is_some() {
            terminal = Some(frame);
            break;
        }
    }
    let terminal = terminal.expect("terminal frame");
    // Escaping must not change the decoded values.
    assert_eq!(text_of(&terminal["result"]["message"]), model_text);
    let evs = result_events(&terminal);
    let cms = of_type(&evs, "client.message.send");
    assert_eq!(cms[0]["payload"]["content"], json!(user_text));

    // The observer's stream: the client turn and the assistant reply.
    let mut seen_reply = false;
    while let Some(line) = sub.next_line(WAIT) {
        assert_single_unicode_line(&line);
        let frame: Value = serde_json::from_str(&line).unwrap();
        if frame["params"]["event_type"] == "server.message.send" {
            seen_reply = true;
            break;
        }
    }
    assert!(seen_reply, "observer saw the reply");
}
