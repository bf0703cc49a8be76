//! Usage accounting over the real binary (docs/extensions.md "Usage
//! accounting"): the admin API's sums for a session, a key and a profile
//! equal the sums of the log's `provider.response` usage, by kind, after a
//! restart, on PostgreSQL (read by a second process on the same database)
//! and with the replies streamed; `/metrics` counts the same tokens, as the
//! official Prometheus parser reads them; bad windows are `400`.

mod live_support;

use live_support::*;
use serde_json::{json, Value};
use testkit::{CacheConfig, MockProvider, Reply, Server};

/// `main` (caching, priced) and `alt` (no prices) of `kind`.
fn config(mock: &MockProvider, kind: &str) -> String {
    config_streamed(mock, kind, false)
}

/// [`config`], both entries with `stream = true` when `stream`.
fn config_streamed(mock: &MockProvider, kind: &str, stream: bool) -> String {
    let streamed = if stream { "stream = true\n" } else { "" };
    let mut out =
        testkit::fixtures::provider_toml(&[("main", kind, &mock.base_url, "main-model", "tok")]);
    out.push_str("prompt_cache = true\nprompt_cache_min_tokens = 16\n");
    out.push_str(streamed);
    out.push_str(
        "prices = { input = 3.0, output = 15.0, cache_write = 3.75, cache_read = 0.3 }\n\n",
    );
    out.push_str(&testkit::fixtures::provider_toml(&[(
        "alt",
        kind,
        &mock.base_url,
        "alt-model",
        "tok",
    )]));
    out.push_str(streamed);
    out
}

fn small_cache() -> CacheConfig {
    CacheConfig {
        anthropic_min_tokens: 16,
        openai_min_tokens: 16,
        openai_step_tokens: 8,
        ..CacheConfig::default()
    }
}

/// Token sums by kind from the log's successful `provider.response`s.
#[derive(Debug, Default, PartialEq)]
struct Sums {
    calls: u64,
    input: u64,
    output: u64,
    cache_write: u64,
    cache_read: u64,
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn from_log(server: &Server, f: &Fixture) -> Sums {
    let mut s = Sums::default();
    for e in of_type(
        &events(server, &f.session_id, &f.a.session_key),
        "provider.response",
    ) {
        let p = &e["payload"];
        if p["ok"] != true || p["usage"].is_null() {
            continue;
        }
        let u = &p["body"]["usage"];
        let (write, read) = match p["provider"].as_str() {
            Some("openai") => (0, n(&u["prompt_tokens_details"]["cached_tokens"])),
            _ => (
                n(&u["cache_creation_input_tokens"]),
                n(&u["cache_read_input_tokens"]),
            ),
        };
        s.calls += 1;
        // The logged usage counts the whole prompt (spec 05 §7.1).
        s.input += n(&p["usage"]["input_tokens"]) - write - read;
        s.output += n(&p["usage"]["output_tokens"]);
        s.cache_write += write;
        s.cache_read += read;
    }
    s
}

fn of(counters: &Value) -> Sums {
    Sums {
        calls: n(&counters["calls"]),
        input: n(&counters["input_tokens"]),
        output: n(&counters["output_tokens"]),
        cache_write: n(&counters["cache_write_tokens"]),
        cache_read: n(&counters["cache_read_tokens"]),
    }
}

fn usage(server: &Server, path: &str) -> Value {
    let r = server.admin().get(path);
    r.assert_status(200);
    r.json()
}

/// A session with text turns, a server tool round, a fallback (to an
/// unpriced entry) and a manual compaction.
fn run_session(server: &Server, mock: &MockProvider, kind: &str) -> Fixture {
    let f = open_registered(server, "main", &["alt"], &[], json!({}));
    let text = |s: &str| match kind {
        "anthropic" => Reply::anthropic_text(s),
        _ => Reply::openai_text(s),
    };
    for i in 0..3 {
        mock.push(text(&format!("answer {i} {}", "words ".repeat(20))));
        send(
            server,
            &f.session_id,
            &f.a,
            json!(format!("question {i} {}", "more ".repeat(30))),
        );
    }
    mock.push(match kind {
        "anthropic" => Reply::anthropic_tool_use(vec![
            json!({"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {}}),
        ]),
        _ => Reply::openai_tool_call("tu_1", "lookup", "{}"),
    });
    mock.push(text("after the tool"));
    send(server, &f.session_id, &f.a, json!("use a tool"));
    mock.push(Reply::status(500, "down"));
    mock.push(text("from the fallback"));
    send(server, &f.session_id, &f.a, json!("again"));
    mock.push(text("the summary"));
    let (_, t) = rpc(
        server,
        &f.session_id,
        &f.a.session_key,
        "session.compact",
        json!({}),
    );
    assert!(t["result"].is_object(), "{t}");
    send(server, &f.session_id, &f.a, json!("after"));
    f
}

/// Checks every route against the log; returns the session's answer.
fn check_routes(server: &Server, f: &Fixture) -> Value {
    let want = from_log(server, f);
    assert!(
        want.calls >= 8 && want.cache_read > 0 && want.cache_write + want.cache_read > 0,
        "{want:?}"
    );
    let s = usage(
        server,
        &format!("/admin/v1/sessions/{}/usage", f.session_id),
    );
    assert_eq!(of(&s["total"]), want, "{s}");
    assert_eq!(s["session_id"], f.session_id.as_str());
    // By provider and by turn, the same totals.
    let sum = |items: &Value| {
        let mut t = Sums::default();
        for i in items.as_array().unwrap() {
            let x = of(i);
            t.calls += x.calls;
            t.input += x.input;
            t.output += x.output;
            t.cache_write += x.cache_write;
            t.cache_read += x.cache_read;
        }
        t
    };
    assert_eq!(sum(&s["by_provider"]), want);
    assert_eq!(sum(&s["by_turn"]), want);
    let providers: Vec<&str> = (s["by_provider"].as_array().unwrap().iter())
        .map(|p| p["provider"].as_str().unwrap())
        .collect();
    assert_eq!(providers, ["alt", "main"]);
    // `alt` has no prices: no total cost; `main`'s is its tokens priced.
    assert_eq!(s["total"]["cost"], Value::Null);
    assert_eq!(s["by_provider"][0]["cost"], Value::Null);
    let m = of(&s["by_provider"][1]);
    let cost = (m.input as f64 * 3.0
        + m.output as f64 * 15.0
        + m.cache_write as f64 * 3.75
        + m.cache_read as f64 * 0.3)
        / 1e6;
    let got = s["by_provider"][1]["cost"].as_f64().unwrap();
    assert!((got - cost).abs() < 1e-6, "{got} vs {cost}");
    // Turns are named by their first event: the user messages (and the
    // manual compaction's `started`).
    let evs = events(server, &f.session_id, &f.a.session_key);
    for t in s["by_turn"].as_array().unwrap() {
        let ev = evs
            .iter()
            .find(|e| e["id"] == t["turn_event_id"])
            .expect("a logged event");
        assert!(
            ["client.message.send", "session.compaction.started"]
                .contains(&ev["event_type"].as_str().unwrap()),
            "{ev}"
        );
    }
    // The key's and the profile's usage over every time, and over windows
    // that hold nothing.
    for path in [
        format!("/admin/v1/keys/{}/usage", f.a.key_id),
        format!("/admin/v1/profiles/{}/usage", f.profile_id),
    ] {
        let all = usage(server, &path);
        assert_eq!(of(&all["total"]), want, "{path}: {all}");
        assert!(all.get("by_turn").is_none());
        let later = usage(server, &format!("{path}?since=2999-01-01"));
        assert_eq!(of(&later["total"]), Sums::default());
        assert_eq!(later["since"], "2999-01-01T00:00:00.000Z");
        let earlier = usage(server, &format!("{path}?until=2000-01-01T00:00:00Z"));
        assert_eq!(of(&earlier["total"]), Sums::default());
        let both = usage(
            server,
            &format!("{path}?since=2000-01-01&until=2999-01-01T00:00:00.000Z"),
        );
        assert_eq!(of(&both["total"]), want);
        let bad = server.admin().get(&format!("{path}?since=yesterday"));
        bad.assert_status(400);
        assert!(
            bad.text().contains("since: expected a UTC time"),
            "{}",
            bad.text()
        );
    }
    let missing = server.admin().get("/admin/v1/sessions/ses_nope/usage");
    missing.assert_status(404);
    check_baectl(server, f, &s);
    s
}

/// Runs `baectl` against `server` (authenticated by its key file).
fn baectl(server: &Server, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_baectl"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("BAE_") {
            cmd.env_remove(&k);
        }
    }
    cmd.env("BAE_ADMIN_ADDR", server.admin_addr.to_string())
        .env("BAE_ADMIN_KEY_FILE", server.admin_key_file())
        .args(args)
        .output()
        .expect("run baectl")
}

/// `baectl usage`: `--json` is the route's answer; the table shows the
/// same totals; a window and a bad time reach the server.
fn check_baectl(server: &Server, f: &Fixture, session: &Value) {
    let out = baectl(server, &["--json", "usage", "session", &f.session_id]);
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(&v, session);
    let out = baectl(server, &["usage", "session", &f.session_id]);
    let text = String::from_utf8(out.stdout).unwrap();
    let t = &session["total"];
    let total_row = format!("{}", t["calls"]);
    let line = text
        .lines()
        .find(|l| l.starts_with("total "))
        .unwrap_or_else(|| panic!("{text}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        cells[1..6],
        [
            total_row,
            t["input_tokens"].to_string(),
            t["output_tokens"].to_string(),
            t["cache_write_tokens"].to_string(),
            t["cache_read_tokens"].to_string()
        ],
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("provider main ")),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("turn ")), "{text}");
    for (of, id) in [("key", &f.a.key_id), ("profile", &f.profile_id)] {
        let out = baectl(
            server,
            &["--json", "usage", of, id, "--since", "2000-01-01T00:00:00Z"],
        );
        assert!(out.status.success(), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["total"], session["total"], "{of}");
        assert_eq!(v["since"], "2000-01-01T00:00:00.000Z");
        let later = baectl(
            server,
            &["--json", "usage", of, id, "--since", "2999-01-01"],
        );
        let v: Value = serde_json::from_slice(&later.stdout).unwrap();
        assert_eq!(v["total"]["calls"], 0, "{of}");
        let bad = baectl(server, &["usage", of, id, "--until", "soon"]);
        assert_eq!(bad.status.code(), Some(1), "{bad:?}");
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(err.contains("until: expected a UTC time"), "{err}");
    }
}

#[test]
fn usage_matches_the_log_and_survives_a_restart() {
    for kind in ["anthropic", "openai"] {
        let mock = MockProvider::start();
        mock.enable_cache(small_cache());
        let mut server = Server::start(opts(&config(&mock, kind)));
        let f = run_session(&server, &mock, kind);
        let before = check_routes(&server, &f);
        // `/metrics`: the same tokens by entry and kind, as the official
        // parser reads them.
        let text = server.admin().get("/metrics").text();
        let families = parse_with_prometheus_client(&text);
        let fam = families
            .iter()
            .find(|f| f["name"] == "bae_provider_tokens")
            .unwrap_or_else(|| panic!("no bae_provider_tokens family: {families:?}"));
        assert_eq!(fam["type"], "counter");
        let sample = |provider: &str, kind: &str| {
            fam["samples"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| {
                    s["name"] == "bae_provider_tokens_total"
                        && s["labels"]["provider"] == provider
                        && s["labels"]["kind"] == kind
                })
                .map(|s| s["value"].as_f64().unwrap() as u64)
                .unwrap_or_else(|| panic!("no sample {provider} {kind}: {fam}"))
        };
        let total = of(&before["total"]);
        let sum = |k: &str| sample("main", k) + sample("alt", k);
        assert_eq!(
            (
                sum("input"),
                sum("output"),
                sum("cache_write"),
                sum("cache_read")
            ),
            (
                total.input,
                total.output,
                total.cache_write,
                total.cache_read
            ),
            "{kind}"
        );
        // A restart reads the same sums back from the store.
        server.restart();
        let after = usage(
            &server,
            &format!("/admin/v1/sessions/{}/usage", f.session_id),
        );
        assert_eq!(after, before, "{kind}");
        check_routes(&server, &f);
    }
}

/// `"prompt_cache_key":"bae-…"` with its session-derived value blanked.
fn without_cache_key(body: &[u8]) -> String {
    let text = String::from_utf8(body.to_vec()).expect("a UTF-8 body");
    const KEY: &str = "\"prompt_cache_key\":\"";
    match text.find(KEY) {
        Some(at) => {
            let from = at + KEY.len();
            let len = text[from..].find('"').expect("a closed string");
            format!("{}{}", &text[..from], &text[from + len..])
        }
        None => text,
    }
}

/// The same session with both entries streamed records exactly the usage
/// it records unstreamed (extensions.md, "Usage accounting"): the mock
/// bills streamed replies through the same prompt cache, their usage in
/// `message_start`/`message_delta` or the `include_usage` chunk. Each
/// streamed body is the unstreamed one with `"stream":true` (and
/// `stream_options`) last, after everything the cache reads, so the
/// byte-stable prefix is the same.
#[test]
fn streamed_and_unstreamed_sessions_record_the_same_usage() {
    for kind in ["anthropic", "openai"] {
        let run = |stream: bool| {
            let mock = MockProvider::start();
            mock.enable_cache(small_cache());
            let server = Server::start(opts(&config_streamed(&mock, kind, stream)));
            let f = run_session(&server, &mock, kind);
            let mut s = check_routes(&server, &f);
            // What differs between two sessions: their ids.
            s["session_id"] = Value::Null;
            for t in s["by_turn"].as_array_mut().unwrap() {
                t["turn_event_id"] = Value::Null;
            }
            let requests = mock.requests();
            let streamed = (1..=requests.len() as u64)
                .filter(|seq| !mock.stream_writes(*seq).is_empty())
                .count() as u64;
            (s, requests, streamed)
        };
        let (plain, plain_requests, none) = run(false);
        let (streamed, streamed_requests, replies) = run(true);
        assert_eq!(none, 0, "{kind}");
        assert_eq!(
            replies,
            n(&streamed["total"]["calls"]),
            "{kind}: every reply streamed"
        );
        assert!(n(&streamed["total"]["cache_read_tokens"]) > 0, "{streamed}");
        assert_eq!(streamed, plain, "{kind}");
        let suffix = match kind {
            "openai" => ",\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
            _ => ",\"stream\":true}",
        };
        assert_eq!(streamed_requests.len(), plain_requests.len(), "{kind}");
        for (s, p) in streamed_requests.iter().zip(&plain_requests) {
            let s = without_cache_key(&s.raw_body);
            let base = s
                .strip_suffix(suffix)
                .unwrap_or_else(|| panic!("{kind}: {s}"));
            assert_eq!(
                format!("{base}}}"),
                without_cache_key(&p.raw_body),
                "{kind}"
            );
        }
    }
}

#[test]
fn usage_on_postgresql_is_read_by_another_process_too() {
    let cluster = testkit::pg::PgCluster::start();
    let url = cluster.app_url(&cluster.create_database());
    let mock = MockProvider::start();
    mock.enable_cache(CacheConfig {
        anthropic_min_tokens: 16,
        ..CacheConfig::default()
    });
    let server = Server::start(opts(&config(&mock, "anthropic")).env("BAE_DATABASE_URL", &url));
    let f = run_session(&server, &mock, "anthropic");
    let before = check_routes(&server, &f);
    // A second process on the same database (the admin key is the
    // database's) answers the same sums.
    let other = Server::start(opts(&config(&mock, "anthropic")).env("BAE_DATABASE_URL", &url));
    let admin = testkit::HttpClient::new(other.admin_addr).bearer(server.admin_key.clone());
    let get = |path: String| {
        let r = admin.get(&path);
        r.assert_status(200);
        r.json()
    };
    let there = get(format!("/admin/v1/sessions/{}/usage", f.session_id));
    assert_eq!(there, before);
    let key = get(format!("/admin/v1/keys/{}/usage", f.a.key_id));
    assert_eq!(of(&key["total"]), of(&before["total"]));
}

/// `text` as the official Prometheus client library's parser reads it
/// (testkit/fixtures/prometheus/parse.py).
fn parse_with_prometheus_client(text: &str) -> Vec<Value> {
    use std::io::Write;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testkit/fixtures/prometheus/parse.py");
    let mut child = std::process::Command::new("python3")
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 (installed by testkit/scripts/install-test-deps.sh)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write exposition");
    let out = child.wait_with_output().expect("parser ran");
    assert!(
        out.status.success(),
        "prometheus_client rejected /metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("parser output is JSON")
}
