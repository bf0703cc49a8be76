//! The mock provider's rate limiting (`mock_provider/limits.rs`): scripted
//! rate-limit answers with `Retry-After`, the concurrency limit, and the
//! official SDKs' own reading of those answers (PyPI `anthropic` and
//! `openai`: the mock speaks the providers' real wire). Fails loudly when
//! the SDKs are missing.

use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use serde_json::{json, Value};
use testkit::http::HttpClient;
use testkit::mock_provider::{http_date_in, MockProvider, Reply};

fn call(client: &HttpClient, path: &str) -> testkit::Response {
    client.request(
        "POST",
        path,
        &[("content-type", "application/json"), ("x-api-key", "k")],
        &serde_json::to_vec(&json!({"model": "m", "messages": []})).unwrap(),
    )
}

#[test]
fn scripted_rate_limits_carry_retry_after_in_the_endpoints_error_shape() {
    let mock = MockProvider::start();
    let c = HttpClient::new(mock.addr).timeout(Duration::from_secs(10));
    mock.push(Reply::rate_limited("1"));
    mock.push(Reply::limited(529, &[("retry-after", "2")]));
    mock.push(Reply::rate_limited("3"));
    let r = call(&c, "/v1/messages");
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");
    let r = call(&c, "/v1/messages");
    assert_eq!(r.status, 529);
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["error"]["type"], "overloaded_error");
    let r = call(&c, "/v1/chat/completions");
    assert_eq!(r.status, 429);
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    // An HTTP date a few seconds ahead parses back within them.
    let date = http_date_in(Duration::from_secs(5));
    let at = httpdate_secs(&date);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!((now + 4..=now + 7).contains(&at), "{date}");
    assert_eq!(
        call(&c, "/v1/messages").status,
        200,
        "then the script's default"
    );
}

fn httpdate_secs(s: &str) -> u64 {
    let advice = proto::provider::retry::RetryAdvice::from_headers([("retry-after", s)]);
    match advice {
        proto::provider::retry::RetryAdvice::AtUnixMs(ms) => ms / 1000,
        other => panic!("{other:?}"),
    }
}

#[test]
fn over_the_concurrency_limit_requests_get_429_and_the_script_is_kept() {
    let mock = MockProvider::start();
    mock.limit_concurrency(2, "1");
    mock.set_default(Reply::text("slow").delayed(Duration::from_millis(300)));
    let c = HttpClient::new(mock.addr).timeout(Duration::from_secs(10));
    let start = Arc::new(Barrier::new(5));
    let handles: Vec<_> = (0..5)
        .map(|i| {
            let (c, start) = (c.clone(), start.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20 * i));
                start.wait();
                std::thread::sleep(Duration::from_millis(20 * i));
                call(&c, "/v1/messages")
            })
        })
        .collect();
    let statuses: Vec<u16> = handles
        .into_iter()
        .map(|h| h.join().unwrap().status)
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        2,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        3,
        "{statuses:?}"
    );
    let stats = mock.limit_stats();
    assert_eq!(
        (stats.max_in_flight, stats.served, stats.refused),
        (2, 2, 3)
    );
    // Once they are done, there is room again.
    assert_eq!(call(&c, "/v1/messages").status, 200);
}

/// The official SDKs raise their rate-limit error for the mock's answer
/// and read its `Retry-After` (seconds and HTTP date) as they would a
/// provider's.
#[test]
fn the_official_sdks_read_the_mocks_rate_limit_answers() {
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
    mock.push(Reply::rate_limited("2"));
    mock.push(Reply::rate_limited(&http_date_in(Duration::from_secs(30))));
    mock.push(Reply::limited(529, &[("retry-after", "1")]));
    let script = r#"
import sys, anthropic, openai
base = sys.argv[1]
a = anthropic.Anthropic(base_url=base, api_key="k", max_retries=0)
o = openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0)
def anth():
    return a.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}])
try:
    anth(); print("no error")
except anthropic.RateLimitError as e:
    print("anthropic 429", a._parse_retry_after_header(e.response.headers))
try:
    o.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
except openai.RateLimitError as e:
    d = o._parse_retry_after_header(e.response.headers)
    print("openai 429 date", 20 < d <= 31)
try:
    anth()
except anthropic.APIStatusError as e:
    print("anthropic", e.status_code, type(e).__name__, e.body["error"]["type"])
"#;
    let out = Command::new("python3")
        .args(["-c", script, &mock.base_url])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "anthropic 429 2.0",
            "openai 429 date True",
            "anthropic 529 OverloadedError overloaded_error"
        ]
    );
}
