//! Prompt caching over the real binary (docs/extensions.md "Prompt
//! caching"), against testkit's mock billing like the providers'
//! (`testkit/src/mock_provider/cache.rs`):
//!
//! * with caching off the request bodies are the reference's, byte for
//!   byte, and carry no breakpoint or cache key;
//! * Anthropic breakpoints sit on the tools and at the end of the history
//!   and of the request, at most four, only past the minimum length;
//! * over a whole session (text turns, client and server tool rounds,
//!   pauses and resumes, a steer, a fallback to another entry and back, a
//!   restart, sessions and histories evicted and read back, a compaction)
//!   every call reads from the cache at least the prefix the calls before
//!   it made stable: a miss the session's shape does not explain fails.

mod live_support;

use std::time::Duration;

use live_support::*;
use serde_json::{json, Value};
use testkit::{CacheCall, CacheConfig, MockProvider, Reply, Server};

/// Cache settings small enough for a test's prompts.
fn small_cache() -> CacheConfig {
    CacheConfig {
        anthropic_min_tokens: 32,
        openai_min_tokens: 32,
        openai_step_tokens: 8,
        ..CacheConfig::default()
    }
}

/// `main` (primary) and `alt` (fallback) of `kind`, caching as given.
fn config(mock: &MockProvider, kind: &str, caching: bool) -> String {
    let mut out = String::new();
    for (name, model) in [("main", "main-model"), ("alt", "alt-model")] {
        out.push_str(&testkit::fixtures::provider_toml(&[(
            name,
            kind,
            &mock.base_url,
            model,
            "tok",
        )]));
        if caching {
            out.push_str("prompt_cache = true\nprompt_cache_min_tokens = 32\n\n");
        }
    }
    out
}

fn long_tool(name: &str) -> Value {
    json!({
        "name": name,
        "description": format!("{name}: a tool described at some length so that the tool list alone passes the minimum cacheable length"),
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    })
}

fn filler(turn: usize) -> String {
    format!("turn {turn}: {}", "some words of a user message ".repeat(6))
}

fn register_steer(server: &Server, f: &Fixture) {
    let (_, t) = rpc(
        server,
        &f.session_id,
        &f.a.session_key,
        "session.registerDriver",
        json!({"extensions": ["turn.steer"]}),
    );
    assert_eq!(t["result"]["registered"], true, "{t}");
}

/// A server-side tool round (a tool nobody declared: answered by the
/// server with an error result, and the turn goes round again).
fn server_round(kind: &str, id: &str) -> Reply {
    match kind {
        "anthropic" => Reply::anthropic_tool_use(vec![
            json!({"type": "tool_use", "id": id, "name": "lookup_db", "input": {"q": "x"}}),
        ]),
        _ => Reply::openai_tool_call(id, "lookup_db", "{\"q\":\"x\"}"),
    }
}

/// What a call is, for what it must read from the cache.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    /// A turn's first call: it must read the stable prefix of the last
    /// turn on its model (nothing before the first).
    First,
    /// A later call of the same turn: everything the previous call cached.
    Continue,
    /// The first call on a model after a compaction replaced the
    /// history: the tools only.
    AfterCompaction,
}

/// Per model, what the calls so far made stable.
#[derive(Default)]
struct Stable {
    /// Of the latest turn's first call (what later turns keep).
    turn: u64,
    /// Of the previous call (what the same turn keeps).
    last: u64,
}

struct Checker {
    kind: &'static str,
    seen: usize,
    models: std::collections::HashMap<String, Stable>,
    /// Every call, for the report.
    calls: Vec<(Role, CacheCall)>,
}

impl Checker {
    fn new(kind: &'static str) -> Self {
        Checker {
            kind,
            seen: 0,
            models: Default::default(),
            calls: Vec::new(),
        }
    }

    /// What a call keeps stable for those after it: up to its last
    /// message breakpoint (Anthropic), its whole prompt in 8-token steps
    /// (OpenAI, whose cache reads whole steps).
    fn keeps(&self, c: &CacheCall) -> u64 {
        match self.kind {
            "anthropic" => c.marks.last().copied().or(c.tools_mark).unwrap_or(0),
            // Steps of 8 tokens, 32 bytes; the token count is rounded up
            // from the bytes.
            _ => (c.prompt_tokens * 4).saturating_sub(3) / 32 * 8,
        }
    }

    /// The calls made since the last check, with their roles (one per
    /// call, in order).
    fn check(&mut self, mock: &MockProvider, roles: &[Role]) {
        let calls = mock.cache_calls();
        let new = &calls[self.seen..];
        assert_eq!(new.len(), roles.len(), "calls: {new:#?}");
        for (c, role) in new.iter().zip(roles) {
            let state = self.models.entry(c.model.clone()).or_default();
            let want = match role {
                Role::First => state.turn,
                Role::Continue => state.last,
                Role::AfterCompaction => c.tools_mark.unwrap_or(0),
            };
            assert!(
                c.cache_read_tokens >= want,
                "{} call {}: an unexpected miss: read {} of {} tokens, {} were stable ({role:?})\n{c:#?}",
                self.kind,
                self.calls.len() + 1,
                c.cache_read_tokens,
                c.prompt_tokens,
                want,
            );
            let keeps = self.keeps(c);
            let state = self.models.entry(c.model.clone()).or_default();
            if *role != Role::Continue {
                state.turn = keeps;
            }
            state.last = keeps;
            self.calls.push((*role, c.clone()));
        }
        self.seen = calls.len();
    }

    /// Input-token equivalents billed over the session, and the share of
    /// the prompt read from the cache.
    fn totals(&self) -> (f64, f64) {
        let billed = self.calls.iter().map(|(_, c)| c.billed()).sum();
        let read: u64 = self.calls.iter().map(|(_, c)| c.cache_read_tokens).sum();
        let prompt: u64 = self.calls.iter().map(|(_, c)| c.prompt_tokens).sum();
        (billed, read as f64 / prompt.max(1) as f64)
    }
}

/// One session through every shape, each call checked as it is made.
/// `evict`: every session and history is evicted whenever idle, so every
/// turn reads them back from the store.
fn whole_session(kind: &'static str, evict: bool) -> Checker {
    let mock = MockProvider::start();
    mock.enable_cache(small_cache());
    let mut o = opts(&config(&mock, kind, true));
    if evict {
        o = o
            .env("BAE_RESIDENT_SESSIONS", "0")
            .env("BAE_HISTORY_CACHE_BYTES", "0");
    }
    let mut server = Server::start(o);
    let f = open(
        &server,
        "main",
        &["alt"],
        &["get_time"],
        json!({"tools": [long_tool("get_time")]}),
    );
    register_steer(&server, &f);
    let mut check = Checker::new(kind);
    let text = |s: &str| match kind {
        "anthropic" => Reply::anthropic_text(s),
        _ => Reply::openai_text(s),
    };
    // Text turns.
    for turn in 0..3 {
        mock.push(text(&format!("answer {turn} {}", "with words ".repeat(8))));
        send(&server, &f.session_id, &f.a, json!(filler(turn)));
        check.check(&mock, &[Role::First]);
    }
    // A server-side tool round, then the answer.
    mock.push(server_round(kind, "tu_s1"));
    mock.push(text("after the server tool"));
    send(&server, &f.session_id, &f.a, json!(filler(3)));
    check.check(&mock, &[Role::First, Role::Continue]);
    // A client tool: the turn pauses, the results resume it.
    let call = match kind {
        "anthropic" => Reply::anthropic_tool_use(vec![
            json!({"type": "tool_use", "id": "tu_c1", "name": "get_time", "input": {}}),
        ]),
        _ => Reply::openai_tool_call("tu_c1", "get_time", "{}"),
    };
    mock.push(call);
    let (_, t) = send(&server, &f.session_id, &f.a, json!(filler(4)));
    assert!(t["result"]["message"].is_object(), "{t}");
    check.check(&mock, &[Role::First]);
    mock.push(text("it is noon"));
    send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_c1", "12:00")]),
    );
    check.check(&mock, &[Role::First]);
    // A steer during a server round: the second round carries it.
    mock.push(server_round(kind, "tu_s2").delayed(Duration::from_millis(500)));
    mock.push(text("steered"));
    let mut turn = send_stream(&server, &f.session_id, &f.a, json!(filler(5)));
    wait_until(WAIT, || mock.request_count() > check.seen);
    let (_, s) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.steerTurn",
        json!({"message": {"role": "user", "content": "prefer the cache"}}),
    );
    assert_eq!(s["result"]["steered"], true, "{s}");
    let (_, t) = turn.collect_until_terminal(WAIT);
    assert!(t.is_some());
    check.check(&mock, &[Role::First, Role::Continue]);
    mock.push(text("after the steer"));
    send(&server, &f.session_id, &f.a, json!(filler(6)));
    check.check(&mock, &[Role::First]);
    // The primary fails once: the fallback answers (its own cache), and
    // the next turn is back on the primary's.
    mock.push(Reply::status(500, "overloaded"));
    mock.push(text("from the fallback"));
    send(&server, &f.session_id, &f.a, json!(filler(7)));
    check.check(&mock, &[Role::First, Role::First]);
    mock.push(text("back on the primary"));
    send(&server, &f.session_id, &f.a, json!(filler(8)));
    check.check(&mock, &[Role::First]);
    // A restart rebuilds the history from the log: the same bytes.
    server.restart();
    fixtures_register(&server, &f);
    mock.push(text("after the restart"));
    send(&server, &f.session_id, &f.a, json!(filler(9)));
    check.check(&mock, &[Role::First]);
    // A compaction reads the history it summarises from the cache; the
    // history after it starts with the summary.
    mock.push(text(&format!("summary {}", "of the session ".repeat(10))));
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.compact",
        json!({}),
    );
    assert!(t["result"].is_object(), "{t}");
    check.check(&mock, &[Role::First]);
    mock.push(text("after the compaction"));
    send(&server, &f.session_id, &f.a, json!(filler(10)));
    check.check(&mock, &[Role::AfterCompaction]);
    for turn in 11..13 {
        mock.push(text(&format!("answer {turn}")));
        send(&server, &f.session_id, &f.a, json!(filler(turn)));
        check.check(&mock, &[Role::First]);
    }
    check
}

fn fixtures_register(server: &Server, f: &Fixture) {
    testkit::fixtures::register_driver(server, &f.session_id, &f.a.session_key);
    register_steer(server, f);
}

#[test]
fn the_prefix_holds_over_every_session_shape_anthropic() {
    let c = whole_session("anthropic", false);
    let (_, hit) = c.totals();
    assert!(hit > 0.5, "hit rate {hit}");
}

#[test]
fn the_prefix_holds_over_every_session_shape_openai() {
    let c = whole_session("openai", false);
    let (_, hit) = c.totals();
    assert!(hit > 0.5, "hit rate {hit}");
}

#[test]
fn the_prefix_holds_when_sessions_and_histories_are_evicted_and_read_back() {
    for kind in ["anthropic", "openai"] {
        let c = whole_session(kind, true);
        let (_, hit) = c.totals();
        assert!(hit > 0.5, "{kind}: hit rate {hit}");
    }
}

/// Breakpoints (Anthropic): the last tool, the end of the history and of
/// the request, no more than four, on blocks that may carry one; the
/// body's members in the order that keeps its prefix; the mock writes the
/// first call's prefix and reads it on the next.
#[test]
fn anthropic_breakpoints_are_present_and_well_placed() {
    let mock = MockProvider::start();
    mock.enable_cache(small_cache());
    let server = Server::start(opts(&config(&mock, "anthropic", true)));
    let f = open(
        &server,
        "main",
        &[],
        &["get_time"],
        json!({"tools": [long_tool("get_time")]}),
    );
    testkit::fixtures::register_driver(&server, &f.session_id, &f.a.session_key);
    mock.push(Reply::anthropic_text("first answer with some words in it"));
    send(&server, &f.session_id, &f.a, json!(filler(0)));
    mock.push(server_round("anthropic", "tu_1"));
    mock.push(Reply::anthropic_text("second"));
    send(
        &server,
        &f.session_id,
        &f.a,
        json!([{"type": "text", "text": filler(1)}]),
    );
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    for (i, r) in reqs.iter().enumerate() {
        let keys: Vec<&str> = r
            .body
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            ["model", "tools", "messages", "max_tokens"],
            "call {i}"
        );
        let tools = r.body["tools"].as_array().unwrap();
        assert_eq!(
            tools.last().unwrap()["cache_control"],
            json!({"type": "ephemeral"}),
            "call {i}"
        );
        let text = String::from_utf8_lossy(&r.raw_body);
        let n = text.matches("\"cache_control\"").count();
        assert!((1..=4).contains(&n), "call {i}: {n} breakpoints");
        // Message breakpoints: each on the last block of its message that
        // may carry one.
        let msgs = r.body["messages"].as_array().unwrap();
        let marked: Vec<usize> = msgs
            .iter()
            .enumerate()
            .filter(|(_, m)| m.to_string().contains("cache_control"))
            .map(|(j, _)| j)
            .collect();
        for &j in &marked {
            let blocks = msgs[j]["content"].as_array().unwrap();
            let at = blocks
                .iter()
                .rposition(|b| b.get("cache_control").is_some());
            assert_eq!(
                at,
                Some(blocks.len() - 1),
                "call {i} message {j}: {}",
                msgs[j]
            );
        }
        match i {
            // The first request's history is one user message in string
            // form: it carries none (its text would change).
            0 => assert!(marked.is_empty(), "{marked:?}"),
            // The history's last markable block (the user's text) and the
            // request's (the tool result after the server round).
            2 => assert_eq!(marked, [msgs.len() - 3, msgs.len() - 1], "{}", r.body),
            _ => assert_eq!(marked, [msgs.len() - 1], "{}", r.body),
        }
    }
    let calls = mock.cache_calls();
    assert!(calls[0].cache_write_tokens > 0 && calls[0].cache_read_tokens == 0);
    assert!(calls[1].cache_read_tokens >= calls[0].tools_mark.unwrap());
    assert!(calls[2].cache_read_tokens >= *calls[1].marks.last().unwrap());
    // OpenAI: the key, derived from the session and the same every call,
    // never the session's id itself.
    let mock = MockProvider::start();
    let server = Server::start(opts(&config(&mock, "openai", true)));
    let f = open_registered(&server, "main", &[], &[], json!({}));
    send(&server, &f.session_id, &f.a, json!("one"));
    send(&server, &f.session_id, &f.a, json!("two"));
    let reqs = mock.requests();
    let key = reqs[0].body["prompt_cache_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        key.starts_with("bae-") && !key.contains(&f.session_id),
        "{key}"
    );
    assert_eq!(reqs[1].body["prompt_cache_key"], key.as_str());
}

/// Caching off (the default): the bodies are the reference's for what
/// the log says was sent, byte for byte, with no breakpoint or key, and
/// the logged `provider.request` payloads have the reference's members.
#[test]
fn with_caching_off_the_bodies_are_the_reference_ones() {
    for kind in ["anthropic", "openai"] {
        let mock = MockProvider::start();
        let server = Server::start(opts(&config(&mock, kind, false)));
        let f = open(
            &server,
            "main",
            &[],
            &["get_time"],
            json!({"tools": [long_tool("get_time")]}),
        );
        testkit::fixtures::register_driver(&server, &f.session_id, &f.a.session_key);
        send(&server, &f.session_id, &f.a, json!("hello"));
        mock.push(server_round(kind, "tu_1"));
        send(&server, &f.session_id, &f.a, json!("use a tool"));
        let (_, t) = rpc(
            &server,
            &f.session_id,
            &f.a.session_key,
            "session.compact",
            json!({}),
        );
        assert!(t["result"].is_object(), "{t}");
        send(&server, &f.session_id, &f.a, json!("after"));
        let reqs = mock.requests();
        let logged: Vec<Value> = of_type(
            &events(&server, &f.session_id, &f.a.session_key),
            "provider.request",
        )
        .into_iter()
        .map(|e| e["payload"].clone())
        .collect();
        assert_eq!(reqs.len(), logged.len());
        assert_eq!(reqs.len(), 5);
        for (r, p) in reqs.iter().zip(&logged) {
            let keys: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
            let mut want = vec![
                "attempt",
                "kind",
                "provider",
                "base_url",
                "model",
                "max_tokens",
                "messages",
                "tools",
            ];
            if p.get("normalized").is_some() {
                want.push("normalized");
            }
            if p.get("purpose").is_some() {
                want.push("purpose");
            }
            assert_eq!(keys, want);
            let messages = p["messages"].as_array().unwrap();
            let tools = p["tools"].as_array().unwrap();
            let reference = proto::provider::prepare_request(
                proto::provider::Kind::parse(kind).unwrap(),
                p["base_url"].as_str().unwrap(),
                p["model"].as_str().unwrap(),
                p["max_tokens"].as_u64().unwrap() as u32,
                messages.iter(),
                tools,
            );
            assert_eq!(
                String::from_utf8_lossy(&r.raw_body),
                String::from_utf8_lossy(&reference.body),
                "{kind}"
            );
            let raw = String::from_utf8_lossy(&r.raw_body);
            assert!(!raw.contains("cache_control") && !raw.contains("prompt_cache_key"));
            assert!(r.header("anthropic-beta").is_none());
        }
    }
}
