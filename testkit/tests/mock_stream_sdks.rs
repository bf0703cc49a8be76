//! The mock provider's streamed replies, read by the official SDKs' own
//! stream parsers (PyPI `anthropic` and `openai`, pinned in
//! testkit/scripts/install-test-deps.sh): the mock speaks the providers'
//! real streaming wire, not only our reading of it. Fails loudly when the
//! SDKs are missing.

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use testkit::mock_provider::StreamTiming;
use testkit::{MockProvider, Reply};

#[test]
fn the_official_sdks_read_the_mocks_streams_as_the_unstreamed_replies() {
    let check = Command::new("python3")
        .args(["-c", "import anthropic, openai"])
        .output()
        .expect("python3 must be on PATH");
    assert!(
        check.status.success(),
        "the anthropic and openai Python SDKs are missing: run testkit/scripts/install-test-deps.sh\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let mock = MockProvider::start();
    // Pings while waiting, several characters per delta.
    mock.set_stream_timing(StreamTiming {
        first_token: Duration::from_millis(30),
        per_token: Duration::from_millis(1),
        token_chars: 3,
        ping_every: Some(Duration::from_millis(10)),
    });
    // Even cases are read as Anthropic, odd ones as OpenAI; each reply is
    // asked for twice (unstreamed, then streamed).
    let cases = [
        Reply::text("Héllo, \"streaming\" world!\nSecond line 🦀."),
        Reply::text("Bonjour 日本語 \\ tab\t."),
        Reply::ToolUse {
            text: Some("Let me look.".into()),
            calls: vec![
                (
                    "toolu_1".into(),
                    "get_weather".into(),
                    json!({"city": "Paris", "days": [1, 2]}),
                ),
                ("toolu_2".into(), "get_time".into(), json!({})),
            ],
            usage: Some((31, 17)),
        },
        Reply::ToolUse {
            text: None,
            calls: vec![(
                "call_1".into(),
                "lookup".into(),
                json!({"q": "a \"quoted\" term", "n": 3}),
            )],
            usage: Some((12, 9)),
        },
        Reply::text("cut short").truncated(),
        Reply::text("no usage reported").without_usage(),
        Reply::anthropic_tool_use(vec![
            json!({"type": "thinking", "thinking": "step one, step two", "signature": "c2ln"}),
            json!({"type": "text", "text": "answer"}),
        ]),
        Reply::openai_text(""),
    ];
    for reply in &cases {
        mock.push(reply.clone());
        mock.push(reply.clone());
    }
    let out = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/sdk/stream_check.py"
        ))
        .arg(&mock.base_url)
        .arg(cases.len().to_string())
        .output()
        .expect("run stream_check.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok case")).count(),
        cases.len(),
        "{stdout}"
    );
    // The streamed requests really asked for a stream.
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2 * cases.len());
    for (i, r) in reqs.iter().enumerate() {
        assert_eq!(
            r.body
                .get("stream")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            i % 2 == 1,
            "{i}"
        );
    }
}
