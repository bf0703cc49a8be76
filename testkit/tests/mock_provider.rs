use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::http::HttpClient;
use testkit::mock_provider::{Endpoint, MockProvider, Reply};

fn anthropic_call(client: &HttpClient, body: &Value) -> testkit::Response {
    client.request(
        "POST",
        "/v1/messages",
        &[
            ("content-type", "application/json"),
            ("x-api-key", "sk-test-anthropic"),
            ("anthropic-version", "2023-06-01"),
        ],
        &serde_json::to_vec(body).unwrap(),
    )
}

fn openai_call(client: &HttpClient, body: &Value) -> testkit::Response {
    client.request(
        "POST",
        "/v1/chat/completions",
        &[
            ("content-type", "application/json"),
            ("authorization", "Bearer sk-test-openai"),
        ],
        &serde_json::to_vec(body).unwrap(),
    )
}

fn mock_client(mock: &MockProvider) -> HttpClient {
    HttpClient::new(mock.addr).timeout(Duration::from_secs(10))
}

#[test]
fn default_reply_in_both_wire_formats() {
    let mock = MockProvider::start();
    assert!(mock.base_url.starts_with("http://127.0.0.1:"));
    let c = mock_client(&mock);

    let a = anthropic_call(&c, &json!({"model": "m", "max_tokens": 10, "messages": []}));
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-type"), Some("application/json"));
    let a = a.json();
    assert_eq!(a["type"], "message");
    assert_eq!(a["role"], "assistant");
    assert_eq!(a["model"], "mock");
    assert!(a["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(a["content"], json!([{"type": "text", "text": "ok"}]));
    assert_eq!(a["stop_reason"], "end_turn");
    assert_eq!(a["usage"], json!({"input_tokens": 10, "output_tokens": 5}));

    let o = openai_call(&c, &json!({"model": "m", "messages": []})).json();
    assert!(o["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(o["object"], "chat.completion");
    assert_eq!(o["choices"][0]["index"], 0);
    assert_eq!(o["choices"][0]["message"]["role"], "assistant");
    assert_eq!(o["choices"][0]["message"]["content"], "ok");
    assert!(o["choices"][0]["message"].get("tool_calls").is_none());
    assert_eq!(o["choices"][0]["finish_reason"], "stop");
    assert_eq!(o["usage"]["prompt_tokens"], 10);
    assert_eq!(o["usage"]["completion_tokens"], 5);
}

#[test]
fn records_requests_in_order() {
    let mock = MockProvider::start();
    let c = mock_client(&mock);
    anthropic_call(
        &c,
        &json!({"n": 1, "messages": [{"role": "user", "content": "hi"}]}),
    );
    openai_call(&c, &json!({"n": 2}));
    c.request("POST", "/v1/messages", &[], b"not json");

    let reqs = mock.wait_requests(3, Duration::from_secs(5));
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].path, "/v1/messages");
    assert_eq!(reqs[0].endpoint(), Endpoint::Anthropic);
    assert_eq!(reqs[0].header("X-Api-Key"), Some("sk-test-anthropic"));
    assert_eq!(reqs[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(reqs[0].body["n"], 1);
    assert_eq!(reqs[0].messages()[0]["content"], "hi");
    assert_eq!(reqs[1].path, "/v1/chat/completions");
    assert_eq!(
        reqs[1].header("authorization"),
        Some("Bearer sk-test-openai")
    );
    assert_eq!(reqs[1].body["n"], 2);
    assert_eq!(reqs[2].body, Value::Null);
    assert_eq!(reqs[2].raw_body, b"not json");
    assert_eq!(mock.request_count(), 3);
    mock.clear_requests();
    assert!(mock.requests().is_empty());
}

#[test]
fn script_is_fifo_then_default() {
    let mock = MockProvider::start();
    let c = mock_client(&mock);
    mock.push(Reply::text("first"));
    mock.push(Reply::tool_use("tu_1", "get_time", json!({"tz": "UTC"})));
    mock.push(Reply::status(503, "overloaded"));
    mock.push(Reply::text("cut").truncated().with_usage(7, 3));
    mock.push(Reply::text("no usage").without_usage());
    assert_eq!(mock.pending_replies(), 5);

    let r = anthropic_call(&c, &json!({})).json();
    assert_eq!(r["content"][0]["text"], "first");

    // Adaptive tool use rendered for OpenAI.
    let r = openai_call(&c, &json!({})).json();
    let msg = &r["choices"][0]["message"];
    assert_eq!(r["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(msg["content"], Value::Null);
    assert_eq!(msg["tool_calls"][0]["id"], "tu_1");
    assert_eq!(msg["tool_calls"][0]["type"], "function");
    assert_eq!(msg["tool_calls"][0]["function"]["name"], "get_time");
    let args: Value = serde_json::from_str(
        msg["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(args, json!({"tz": "UTC"}));

    let r = anthropic_call(&c, &json!({}));
    assert_eq!(r.status, 503);
    assert_eq!(r.text(), "overloaded");

    let r = openai_call(&c, &json!({})).json();
    assert_eq!(r["choices"][0]["finish_reason"], "length");
    assert_eq!(r["usage"]["prompt_tokens"], 7);
    assert_eq!(r["usage"]["completion_tokens"], 3);

    let r = anthropic_call(&c, &json!({})).json();
    assert!(r.get("usage").is_none());

    // Script exhausted → built-in default; then a custom default.
    assert_eq!(
        anthropic_call(&c, &json!({})).json()["content"][0]["text"],
        "ok"
    );
    mock.set_default(Reply::status(500, "boom"));
    assert_eq!(openai_call(&c, &json!({})).status, 500);
    assert_eq!(mock.pending_replies(), 0);
}

#[test]
fn anthropic_tool_use_and_explicit_variants() {
    let mock = MockProvider::start();
    let c = mock_client(&mock);
    mock.push(Reply::tool_use("tu_9", "lookup", json!({"q": 1})));
    mock.push(Reply::anthropic_tool_use(vec![
        json!({"type": "text", "text": "let me check"}),
        json!({"type": "tool_use", "id": "tu_a", "name": "x", "input": {}}),
    ]));
    mock.push(Reply::anthropic_text("long").truncated());
    mock.push(Reply::openai_tool_call("call_1", "f", "{not json"));
    mock.push(Reply::json(json!({"choices": []})));
    mock.push(Reply::raw(200, "text/html", "<html>"));

    let r = anthropic_call(&c, &json!({})).json();
    assert_eq!(r["stop_reason"], "tool_use");
    assert_eq!(
        r["content"],
        json!([{"type": "tool_use", "id": "tu_9", "name": "lookup", "input": {"q": 1}}])
    );
    let r = anthropic_call(&c, &json!({})).json();
    assert_eq!(r["content"][0]["text"], "let me check");
    assert_eq!(r["content"][1]["id"], "tu_a");
    assert_eq!(r["stop_reason"], "tool_use");
    let r = anthropic_call(&c, &json!({})).json();
    assert_eq!(r["stop_reason"], "max_tokens");
    let r = openai_call(&c, &json!({})).json();
    assert_eq!(
        r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{not json"
    );
    assert_eq!(openai_call(&c, &json!({})).json(), json!({"choices": []}));
    let r = openai_call(&c, &json!({}));
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(r.text(), "<html>");
}

#[test]
fn unknown_path_is_404_and_does_not_consume_script() {
    let mock = MockProvider::start();
    let c = mock_client(&mock);
    mock.push(Reply::text("kept"));
    let r = c.request("POST", "/v2/other", &[], b"{}");
    assert_eq!(r.status, 404);
    assert_eq!(mock.pending_replies(), 1);
    assert_eq!(mock.requests()[0].endpoint(), Endpoint::Unknown);
}

#[test]
fn delay_close_and_hang() {
    let mock = MockProvider::start();
    let c = mock_client(&mock);

    mock.push(Reply::text("slow").delayed(Duration::from_millis(300)));
    let t = Instant::now();
    let r = anthropic_call(&c, &json!({})).json();
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert_eq!(r["content"][0]["text"], "slow");

    mock.push(Reply::Close);
    let err = c
        .try_request("POST", "/v1/messages", &[], b"{}")
        .expect_err("closed connection must fail");
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
        ),
        "{err:?}"
    );

    mock.push(Reply::Hang);
    let short = HttpClient::new(mock.addr).timeout(Duration::from_millis(300));
    let t = Instant::now();
    let err = short
        .try_request("POST", "/v1/chat/completions", &[], b"{}")
        .expect_err("hung request must time out");
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    assert!(t.elapsed() < Duration::from_secs(5));
    // The hung request was still recorded.
    assert_eq!(mock.wait_requests(3, Duration::from_secs(1)).len(), 3);
    // Dropping the mock releases hung connection threads promptly.
    let t = Instant::now();
    drop(mock);
    assert!(t.elapsed() < Duration::from_secs(3));
}

#[test]
fn keep_alive_connection_serves_several_requests() {
    let mock = MockProvider::start();
    mock.push(Reply::text("one"));
    mock.push(Reply::text("two"));
    let mut s = TcpStream::connect(mock.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";
    let mut all = Vec::new();
    // Two pipelined requests on one connection; the second is chunked.
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(
        b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n1\r\n{\r\n1\r\n}\r\n0\r\n\r\n",
    )
    .unwrap();
    s.read_to_end(&mut all).unwrap();
    let text = String::from_utf8(all).unwrap();
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
    assert!(text.contains("\"one\"") && text.contains("\"two\""));
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].body, json!({}));
}

#[test]
fn concurrent_requests_each_get_a_reply() {
    let mock = MockProvider::start();
    let c = mock_client(&mock);
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let c = c.clone();
            std::thread::spawn(move || anthropic_call(&c, &json!({"i": i})).status)
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 200);
    }
    assert_eq!(mock.requests().len(), 8);
}
