//! The provider attempt walk and both wire formats over the real binary and
//! the loopback mock provider (spec 05 §3–§9; checklist C-083…C-097):
//! fallback across formats, credentials from the environment, the wire
//! requests, tool calls, the HTTP client (pooling, timeouts, closed
//! connections) and transport failures. Exhaustion, skipped fallbacks, the
//! normaliser, the loop limit, a primary gone after a restart and what is
//! stripped before the provider (C-084, C-085, C-087, C-093…C-096, C-101)
//! are tested in-process in `engine/tests/provider_flows.rs`.

mod live_support;

use live_support::*;
use serde_json::{json, Value};
use testkit::fixtures::provider_toml;
use testkit::{Endpoint, MockProvider, Reply, Server};

/// Registry: `anth` (Anthropic, token from `$LIVE_ANTH_TOKEN`), `oai`
/// (OpenAI, literal token), `unset` (Anthropic whose token variable is not
/// set), `slash` (Anthropic with a trailing-slash base URL).
fn server() -> (MockProvider, Server) {
    let mock = MockProvider::start();
    let slash = format!("{}/", mock.base_url);
    let config = provider_toml(&[
        (
            "anth",
            "anthropic",
            &mock.base_url,
            "claude-mock",
            "${LIVE_ANTH_TOKEN}",
        ),
        (
            "oai",
            "openai",
            &mock.base_url,
            "gpt-mock",
            "sk-oai-literal",
        ),
        (
            "unset",
            "anthropic",
            &mock.base_url,
            "claude-mock",
            "${LIVE_UNSET_TOKEN_VAR}",
        ),
        ("slash", "anthropic", &slash, "claude-mock", "tok-slash"),
    ]);
    // The harness strips only `BAE_*` from the child's environment.
    assert!(
        std::env::var_os("LIVE_UNSET_TOKEN_VAR").is_none(),
        "LIVE_UNSET_TOKEN_VAR must not be set for these tests"
    );
    let server = Server::start(opts(&config).env("LIVE_ANTH_TOKEN", "anth-secret-123"));
    (mock, server)
}

fn payloads(evs: &[Value], event_type: &str) -> Vec<Value> {
    of_type(evs, event_type)
        .into_iter()
        .map(|e| e["payload"].clone())
        .collect()
}

#[test]
fn c083_failing_anthropic_primary_falls_back_to_openai() {
    let (mock, server) = server();
    let f = open_registered(&server, "anth", &["oai"], &[], json!({}));
    mock.push_all([
        Reply::status(500, "upstream exploded"),
        Reply::openai_text("from openai"),
    ]);
    let (notes, t) = send(&server, &f.session_id, &f.a, json!("hi"));
    let evs = result_events(&t);
    assert_eq!(
        types(&evs),
        vec![
            "client.message.send",
            "provider.request",
            "provider.response",
            "session.error",
            "provider.request",
            "provider.response",
            "server.message.send"
        ]
    );
    assert_eq!(types(&note_events(&notes)), types(&evs[1..]));
    let reqs = payloads(&evs, "provider.request");
    assert_eq!(
        (reqs[0]["attempt"].clone(), reqs[0]["kind"].clone()),
        (json!(0), json!("primary"))
    );
    assert_eq!(reqs[0]["provider"], "anthropic");
    assert_eq!(
        (reqs[1]["attempt"].clone(), reqs[1]["kind"].clone()),
        (json!(1), json!("fallback"))
    );
    assert_eq!(reqs[1]["provider"], "openai");
    assert_eq!(reqs[1]["model"], "gpt-mock");
    assert!(reqs[1].get("normalized").is_none());
    let resps = payloads(&evs, "provider.response");
    assert_eq!(
        resps[0],
        json!({"attempt": 0, "kind": "primary", "provider": "anthropic", "ok": false,
               "status": 500, "error": "provider returned HTTP 500",
               "body": "upstream exploded"})
    );
    assert_eq!(resps[1]["ok"], true);
    assert_eq!(resps[1]["kind"], "fallback");
    assert_eq!(
        resps[1]["body"]["object"], "chat.completion",
        "raw OpenAI body"
    );
    assert_eq!(
        resps[1]["usage"],
        json!({"input_tokens": 10, "output_tokens": 5})
    );
    assert_eq!(
        evs[3]["payload"],
        json!({"reason": "provider_call_failed", "provider": "anthropic",
               "detail": "provider returned HTTP 500"})
    );
    assert_eq!(
        t["result"]["message"],
        json!({"role": "assistant", "content": [{"type": "text", "text": "from openai"}]})
    );
    let sent = mock.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].endpoint(), Endpoint::Anthropic);
    assert_eq!(sent[1].endpoint(), Endpoint::Openai);
    assert_eq!(admin_state(&server, &f.session_id), "open");
}

#[test]
fn c086_unset_token_variable_fails_that_attempt_only() {
    let (mock, server) = server();
    let f = open_registered(&server, "unset", &["anth"], &[], json!({}));
    mock.push(Reply::text("fallback answered"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("hi"));
    let evs = result_events(&t);
    let resps = payloads(&evs, "provider.response");
    assert_eq!(
        resps[0],
        json!({"attempt": 0, "kind": "primary", "provider": "anthropic", "ok": false,
               "status": null,
               "error": "environment variable LIVE_UNSET_TOKEN_VAR referenced by provider config is not set",
               "body": null})
    );
    assert_eq!(resps[1]["ok"], true);
    assert_eq!(text_of(&t["result"]["message"]), "fallback answered");
    // Only the fallback reached the wire.
    let sent = mock.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].header("x-api-key"), Some("anth-secret-123"));
}

#[test]
fn c088_c097_anthropic_wire_request() {
    let (mock, server) = server();
    for (primary, base) in [
        ("anth", mock.base_url.clone()),
        ("slash", mock.base_url.clone()),
    ] {
        mock.clear_requests();
        let f = open_registered(
            &server,
            primary,
            &[],
            &["get_time"],
            json!({"tools": [tool("get_time")]}),
        );
        mock.push(Reply::text("done"));
        let (_, t) = send(&server, &f.session_id, &f.a, json!("hi"));
        let req_ev = &payloads(&result_events(&t), "provider.request")[0];
        // C-097: effective base URL without the trailing slash.
        assert_eq!(req_ev["base_url"], json!(base));
        let sent = mock.requests();
        assert_eq!(sent.len(), 1);
        let r = &sent[0];
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/v1/messages", "C-097 no double slash");
        let token = if primary == "anth" {
            "anth-secret-123"
        } else {
            "tok-slash"
        };
        assert_eq!(r.header("x-api-key"), Some(token));
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
        assert!(r.header("authorization").is_none());
        assert!(r
            .header("content-type")
            .unwrap_or("")
            .starts_with("application/json"));
        assert_eq!(r.body["model"], "claude-mock");
        assert_eq!(r.body["max_tokens"], 4096);
        assert_eq!(r.body["messages"], req_ev["messages"]);
        assert_eq!(r.body["tools"][0]["name"], "get_time");
        assert_eq!(
            r.body["tools"][0]["input_schema"],
            json!({"type": "object"})
        );
        for absent in ["system", "temperature", "stream", "metadata", "tool_choice"] {
            assert!(r.body.get(absent).is_none(), "{absent} sent: {}", r.body);
        }
        let log = serde_json::to_string(&events(&server, &f.session_id, &f.a.session_key)).unwrap();
        assert!(!log.contains(token), "token leaked into the log");
    }
}

#[test]
fn c089_openai_wire_request_omits_empty_tools() {
    let (mock, server) = server();
    let f = open_registered(&server, "oai", &[], &[], json!({}));
    mock.push(Reply::openai_text("hello"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("hi there"));
    let sent = mock.requests();
    assert_eq!(sent.len(), 1);
    let r = &sent[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some("Bearer sk-oai-literal"));
    assert!(r.header("x-api-key").is_none());
    assert!(
        r.body.get("tools").is_none(),
        "tools omitted when empty: {}",
        r.body
    );
    assert_eq!(r.body["model"], "gpt-mock");
    assert_eq!(r.body["max_tokens"], 4096);
    assert_eq!(
        r.body["messages"],
        json!([{"role": "user", "content": "hi there"}])
    );
    // The logged request keeps the canonical list and `tools: []`.
    let req_ev = &payloads(&result_events(&t), "provider.request")[0];
    assert_eq!(req_ev["tools"], json!([]));
    assert_eq!(
        req_ev["messages"],
        json!([{"role": "user", "content": "hi there"}])
    );
    assert_eq!(text_of(&t["result"]["message"]), "hello");
}

#[test]
fn c090_c092_c093_openai_tool_calls_round_trip() {
    let (mock, server) = server();
    let f = open_registered(
        &server,
        "oai",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    mock.push(Reply::openai_tool_calls(
        Some("checking"),
        vec![json!({"id": "call_1", "type": "function",
                    "function": {"name": "get_time", "arguments": "{\"tz\":\"UTC\"}"}})],
    ));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("time?"));
    let evs = result_events(&t);
    // C-090: canonical tool_use downstream, raw Chat Completions in the log.
    let raw = &payloads(&evs, "provider.response")[0]["body"];
    assert_eq!(
        raw["choices"][0]["message"]["tool_calls"][0]["id"],
        "call_1"
    );
    assert_eq!(
        t["result"]["message"],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "checking"},
            {"type": "tool_use", "id": "call_1", "name": "get_time", "input": {"tz": "UTC"}, "dispatch": "client"}
        ]})
    );
    let call = &payloads(&evs, "tool.call")[0];
    assert_eq!(call["id"], "call_1");
    assert_eq!(call["input"], json!({"tz": "UTC"}));
    // OpenAI tool advertisement.
    let first = &mock.requests()[0];
    assert_eq!(
        first.body["tools"],
        json!([{"type": "function", "function": {"name": "get_time",
               "description": "get_time tool", "parameters": {"type": "object"}}}])
    );

    mock.push(Reply::openai_text("It is noon UTC"));
    let (_, t) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("call_1", "12:00")]),
    );
    assert_eq!(text_of(&t["result"]["message"]), "It is noon UTC");
    let req_ev = &payloads(&result_events(&t), "provider.request")[0];
    // C-093: no dispatch in the logged canonical messages...
    assert_eq!(
        req_ev["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "checking"},
            {"type": "tool_use", "id": "call_1", "name": "get_time", "input": {"tz": "UTC"}}
        ]})
    );
    // ...nor on the wire; C-092 tool results become role "tool".
    let second = &mock.requests()[1];
    assert!(!second.raw_body.windows(8).any(|w| w == b"dispatch"));
    assert_eq!(
        second.body["messages"],
        json!([
            {"role": "user", "content": "time?"},
            {"role": "assistant", "content": "checking", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_time", "arguments": "{\"tz\":\"UTC\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}
        ])
    );
}

#[test]
fn c091_non_json_openai_arguments_fail_the_attempt() {
    let (mock, server) = server();
    let f = open_registered(
        &server,
        "oai",
        &["anth"],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    mock.push_all([
        Reply::openai_tool_call("call_9", "get_time", "{not json"),
        Reply::text("anthropic fallback"),
    ]);
    let (_, t) = send(&server, &f.session_id, &f.a, json!("time?"));
    let evs = result_events(&t);
    let failed = &payloads(&evs, "provider.response")[0];
    assert_eq!(failed["ok"], false);
    assert_eq!(failed["status"], Value::Null);
    assert_eq!(failed["body"], Value::Null);
    let err = failed["error"].as_str().unwrap();
    assert!(
        err.starts_with("tool_calls entry \"get_time\" has non-JSON function.arguments: "),
        "{err}"
    );
    assert_eq!(text_of(&t["result"]["message"]), "anthropic fallback");
}

/// Spec 05 §5.2 failure table: unusable 2xx bodies and transport errors
/// fail the attempt with `status: null`, `body: null`, and never leak the
/// URL.
#[test]
fn unusable_bodies_and_transport_errors_fail_the_attempt() {
    let mock = MockProvider::start();
    // A closed port for a transport failure.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let config = provider_toml(&[
        ("anth", "anthropic", &mock.base_url, "claude-mock", "k"),
        ("oai", "openai", &mock.base_url, "gpt-mock", "k"),
        ("dead", "anthropic", &dead_url, "claude-mock", "k"),
    ]);
    let server = Server::start(opts(&config));
    let cases: Vec<(&str, Reply, &str)> = vec![
        (
            "anth",
            Reply::raw(200, "application/json", "this is not json"),
            "provider returned non-JSON body: ",
        ),
        (
            "oai",
            Reply::json(json!({"id": "x", "choices": []})),
            "provider response is missing choices[0].message",
        ),
        (
            "oai",
            Reply::openai_tool_calls(
                None,
                vec![json!({"id": "c", "type": "function", "function": {"arguments": "{}"}})],
            ),
            "tool_calls entry is missing function.name",
        ),
        ("dead", Reply::text("unused"), ""),
    ];
    for (primary, reply, prefix) in cases {
        let f = open_registered(&server, primary, &["anth"], &[], json!({}));
        if primary != "dead" {
            mock.push(reply);
        }
        mock.push(Reply::text("fallback"));
        let (_, t) = send(&server, &f.session_id, &f.a, json!("hi"));
        let failed = &payloads(&result_events(&t), "provider.response")[0];
        assert_eq!(failed["ok"], false, "{primary}: {failed}");
        assert_eq!(failed["status"], Value::Null, "{primary}");
        assert_eq!(failed["body"], Value::Null, "{primary}");
        let err = failed["error"].as_str().unwrap();
        assert!(err.starts_with(prefix), "{primary}: {err}");
        assert!(!err.contains("http://"), "no URL in error text: {err}");
        assert_eq!(text_of(&t["result"]["message"]), "fallback");
    }
}

/// Provider calls reuse keep-alive connections (`BAE_PROVIDER_IDLE_CONNECTIONS`,
/// default 64 per host): concurrent calls each get a pooled connection back
/// for the next round, instead of one new TCP (and, for `https`, TLS)
/// handshake per call.
#[test]
fn provider_connections_are_reused_across_turns_and_concurrent_calls() {
    let (mock, server) = anthropic_server(&[]);
    let fixtures: Vec<_> = (0..4)
        .map(|_| open_registered(&server, "main", &[], &[], json!({})))
        .collect();
    // Sequential turns of one session: one connection.
    for _ in 0..3 {
        let (_, t) = send(
            &server,
            &fixtures[0].session_id,
            &fixtures[0].a,
            json!("hi"),
        );
        assert!(t.get("result").is_some(), "{t}");
    }
    let conns = |reqs: &[testkit::RecordedRequest]| {
        let mut c: Vec<u64> = reqs.iter().map(|r| r.connection).collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    assert_eq!(
        conns(&mock.requests()).len(),
        1,
        "{:?}",
        conns(&mock.requests())
    );
    // Two rounds of 4 concurrent calls (held open together by a delay):
    // the second round runs on the first round's connections.
    mock.set_default(Reply::text("slow").delayed(std::time::Duration::from_millis(300)));
    for _round in 0..2 {
        std::thread::scope(|s| {
            for f in &fixtures {
                let server = &server;
                s.spawn(move || {
                    let (_, t) = send(server, &f.session_id, &f.a, json!("go"));
                    assert!(t.get("result").is_some(), "{t}");
                });
            }
        });
    }
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 11);
    assert!(conns(&reqs).len() <= 4, "connections {:?}", conns(&reqs));
}

/// `BAE_PROVIDER_IDLE_CONNECTIONS=0` keeps nothing: every call opens its own
/// connection.
#[test]
fn provider_idle_connections_zero_opens_a_connection_per_call() {
    let (mock, server) = anthropic_server(&[("BAE_PROVIDER_IDLE_CONNECTIONS", "0")]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    for _ in 0..3 {
        let (_, t) = send(&server, &f.session_id, &f.a, json!("hi"));
        assert!(t.get("result").is_some(), "{t}");
    }
    let mut c: Vec<u64> = mock.requests().iter().map(|r| r.connection).collect();
    c.dedup();
    assert_eq!(c, vec![1, 2, 3]);
}

/// A mock behind two entries, `main` (Anthropic) and `backup` (OpenAI), a
/// server with `env`, and a session on `main` falling back to `backup`.
fn main_with_backup(env: &[(&str, &str)]) -> (MockProvider, Server, Fixture) {
    let mock = MockProvider::start();
    let config = provider_toml(&[
        ("main", "anthropic", &mock.base_url, "mock-model", "k"),
        ("backup", "openai", &mock.base_url, "gpt-mock", "k"),
    ]);
    let mut o = opts(&config);
    for (k, v) in env {
        o = o.env(*k, *v);
    }
    let server = Server::start(o);
    let f = open_registered(&server, "main", &["backup"], &[], json!({}));
    (mock, server, f)
}

/// `BAE_PROVIDER_TIMEOUT` bounds an attempt as a whole: a provider that
/// never answers fails the attempt as a transport failure (no status, no
/// URL in the text) and the fallback answers.
#[test]
fn a_hung_provider_times_out_and_the_fallback_answers() {
    let (mock, server, f) = main_with_backup(&[("BAE_PROVIDER_TIMEOUT", "1")]);
    mock.push_all([Reply::Hang, Reply::openai_text("from backup")]);
    let started = std::time::Instant::now();
    let (_, t) = send(&server, &f.session_id, &f.a, json!("hi"));
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let failed = &payloads(&result_events(&t), "provider.response")[0];
    assert_eq!(failed["ok"], false, "{failed}");
    assert_eq!(failed["status"], Value::Null);
    let err = failed["error"].as_str().unwrap();
    assert!(!err.contains("http://"), "no URL in error text: {err}");
    assert_eq!(text_of(&t["result"]["message"]), "from backup");
}

/// A provider that closes the connection without answering fails the
/// attempt, and the request is not sent again: a provider call is not
/// idempotent, so the primary saw it exactly once.
#[test]
fn a_provider_closing_without_an_answer_fails_the_attempt_without_a_resend() {
    let (mock, server, f) = main_with_backup(&[]);
    // A first turn leaves a pooled connection behind.
    mock.push(Reply::text("warm"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("one"));
    assert_eq!(text_of(&t["result"]["message"]), "warm");
    mock.push_all([Reply::Close, Reply::openai_text("from backup")]);
    let (_, t) = send(&server, &f.session_id, &f.a, json!("two"));
    let failed = &payloads(&result_events(&t), "provider.response")[0];
    assert_eq!(failed["ok"], false, "{failed}");
    assert_eq!(failed["status"], Value::Null);
    assert_eq!(text_of(&t["result"]["message"]), "from backup");
    let paths: Vec<String> = mock.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        paths,
        ["/v1/messages", "/v1/messages", "/v1/chat/completions"],
        "the closed attempt was sent once"
    );
}

/// A kept-alive connection the provider closed while it sat idle is not
/// used again: each turn still gets its answer. The provider here answers
/// one request per connection with `connection: keep-alive`, then closes.
#[test]
fn connections_the_provider_closed_while_idle_are_not_reused() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            // Read the head and a body of the length it declares.
            while let Ok(n) = conn.read(&mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text[..end]
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if got.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            let body = json!({"id": "m", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": "fresh"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 1, "output_tokens": 1}})
            .to_string();
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: keep-alive\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(reply.as_bytes());
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
    });
    let config = provider_toml(&[("main", "anthropic", &base_url, "mock-model", "k")]);
    let server = Server::start(opts(&config));
    let f = open_registered(&server, "main", &[], &[], json!({}));
    for i in 0..3 {
        // Give the provider's close time to arrive before the next call.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (_, t) = send(&server, &f.session_id, &f.a, json!(format!("turn {i}")));
        assert_eq!(text_of(&t["result"]["message"]), "fresh", "turn {i}: {t}");
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
}
