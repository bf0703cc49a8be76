//! `GET /metrics` on the admin port over the real binary: admin auth (or
//! the `BAE_METRICS_NO_AUTH` opt-out), the Prometheus text format, and the
//! instruments of spec 04 §7.2 moving with real turns and tool rounds.

mod live_support;

use live_support::*;
use serde_json::json;
use testkit::Reply;

/// The value of the sample line named exactly `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `text` as the official Prometheus client library's parser reads it
/// (testkit/fixtures/prometheus/parse.py): its metric families, or a panic
/// with the parser's complaint.
fn parse_with_prometheus_client(text: &str) -> Vec<serde_json::Value> {
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

fn scrape(server: &testkit::Server) -> String {
    let resp = server.admin().get("/metrics");
    resp.assert_status(200);
    let ct = resp.header("content-type").unwrap_or_default().to_string();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    resp.text()
}

#[test]
fn metrics_need_the_admin_key_by_default() {
    let (_mock, server) = anthropic_server(&[]);
    let anonymous = testkit::http::HttpClient::new(server.admin_addr).get("/metrics");
    anonymous.assert_status(401);
    let wrong = testkit::http::HttpClient::new(server.admin_addr)
        .bearer("bae_admin_nope".to_string())
        .get("/metrics");
    assert!(matches!(wrong.status, 401 | 403), "{}", wrong.status);
    let text = scrape(&server);
    assert!(text.contains("# TYPE bae_sessions_open gauge"), "{text}");
    // Not on the client port.
    server.client().get("/metrics").assert_status(404);
}

#[test]
fn the_opt_out_lets_a_local_scraper_in_without_a_key() {
    let (_mock, server) = anthropic_server(&[("BAE_METRICS_NO_AUTH", "1")]);
    let resp = testkit::http::HttpClient::new(server.admin_addr).get("/metrics");
    resp.assert_status(200);
    assert!(resp.text().contains("bae_turns_completed_total"));
}

#[test]
fn turns_providers_tools_and_gauges_move_with_real_work() {
    let (mock, server) = anthropic_server(&[]);
    let before = scrape(&server);
    assert_eq!(sample(&before, "bae_sessions_open"), Some(0.0));
    assert!(sample(&before, "process_resident_memory_bytes").unwrap_or(0.0) > 1e6);
    assert!(sample(&before, "process_open_fds").unwrap_or(0.0) >= 3.0);

    let f = open_registered(
        &server,
        "main",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    mock.push(Reply::text("hello"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("hi"));
    assert!(t.get("result").is_some(), "{t}");
    // A client tool pauses the next turn: one parked pause.
    mock.push(Reply::tool_use("tu_1", "get_time", json!({})));
    send(&server, &f.session_id, &f.a, json!("what time is it?"));

    let text = scrape(&server);
    let v = |s: &str| sample(&text, s).unwrap_or_else(|| panic!("no {s}:\n{text}"));
    assert_eq!(v("bae_sessions_open"), 1.0);
    assert_eq!(v("bae_sessions_total"), 1.0);
    assert_eq!(v("bae_drivers_registered"), 1.0);
    assert_eq!(v("bae_turns_pending"), 1.0);
    assert_eq!(v("bae_profiles_count"), 1.0);
    assert_eq!(v("bae_keys_count"), 1.0);
    assert_eq!(v("bae_turns_completed_total{outcome=\"completed\"}"), 1.0);
    assert_eq!(v("bae_turns_completed_total{outcome=\"paused\"}"), 1.0);
    assert_eq!(
        v("bae_provider_requests_total{provider=\"anthropic\",outcome=\"ok\"}"),
        2.0
    );
    assert_eq!(
        v("bae_provider_latency_milliseconds_count{provider=\"anthropic\"}"),
        2.0
    );
    assert_eq!(v("bae_tool_calls_total{dispatch=\"client\"}"), 1.0);
    let events = events(&server, &f.session_id, &f.a.session_key).len() as f64;
    assert_eq!(v("bae_events_total"), events);
    assert!(v("bae_store_commit_batch_writes_count") >= 1.0);
    assert!(v("bae_store_commit_latency_microseconds_count") >= 1.0);
    assert!(v("bae_connections_open") >= 1.0);
    // Engine steps are clocked by the driver core (issue 15), so under
    // both runtimes.
    let steps = v("bae_engine_step_microseconds_count");
    assert!(steps >= 10.0, "{steps}");
    assert!(v("bae_engine_step_max_microseconds") > 0.0);
    assert_eq!(v("bae_engine_step_microseconds_bucket{le=\"+Inf\"}"), steps);
}

#[test]
fn a_failing_provider_counts_as_an_error() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    mock.push(Reply::status(500, "{}"));
    send(&server, &f.session_id, &f.a, json!("hi"));
    let text = scrape(&server);
    assert_eq!(
        sample(
            &text,
            "bae_provider_requests_total{provider=\"anthropic\",outcome=\"error\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "bae_turns_completed_total{outcome=\"providers_failed\"}"
        ),
        Some(1.0)
    );
}

#[test]
fn disabled_instruments_are_left_out_when_telemetry_is_on() {
    let mock = testkit::MockProvider::start();
    let mut config = testkit::fixtures::provider_toml(&[(
        "main",
        "anthropic",
        &mock.base_url,
        "mock-model",
        "tok-main",
    )]);
    config.push_str(
        "\n[telemetry]\nenabled = true\notlp_endpoint = \"http://127.0.0.1:9\"\n\
         [telemetry.metrics]\ndisabled = [\"bae.sessions.open\", \"bae.tool.calls\"]\n",
    );
    let server = testkit::Server::start(opts(&config));
    let text = scrape(&server);
    assert!(!text.contains("bae_sessions_open"), "{text}");
    assert!(!text.contains("bae_tool_calls_total"), "{text}");
    assert!(text.contains("bae_sessions_total"), "{text}");
}

/// Spec 04 §7.2 through a real scraper's parser: every instrument of the
/// closed set is a family of the right type, the labels are only the
/// low-cardinality ones, and the values match the plain-text reading.
#[test]
fn a_real_prometheus_parser_reads_every_instrument() {
    let (mock, server) = anthropic_server(&[]);
    let f = open_registered(
        &server,
        "main",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    mock.push(Reply::text("hello"));
    send(&server, &f.session_id, &f.a, json!("hi"));
    let text = scrape(&server);
    let families = parse_with_prometheus_client(&text);
    let family = |name: &str| {
        families
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no family {name} in {families:?}"))
    };
    let gauges = [
        "bae_sessions_open",
        "bae_sessions_total",
        "bae_events_total",
        "bae_profiles_count",
        "bae_keys_count",
        "bae_mcp_sessions_live",
        "bae_turns_pending",
        "bae_sandboxes_live",
        "bae_subagents_active",
        "bae_drivers_registered",
    ];
    for g in gauges {
        assert_eq!(family(g)["type"], "gauge", "{g}");
    }
    // The parser names counter families without their `_total` suffix.
    for (c, label) in [
        ("bae_turns_completed", "outcome"),
        ("bae_provider_requests", "provider"),
        ("bae_tool_calls", "dispatch"),
    ] {
        let fam = family(c);
        assert_eq!(fam["type"], "counter", "{c}");
        for s in fam["samples"].as_array().unwrap() {
            assert!(s["labels"].get(label).is_some(), "{c}: {s}");
        }
    }
    for h in [
        "bae_provider_latency_milliseconds",
        "bae_tool_latency_milliseconds",
    ] {
        assert_eq!(family(h)["type"], "histogram", "{h}");
    }
    // Tokens by provider entry (a configured name) and kind.
    let tokens = family("bae_provider_tokens");
    assert_eq!(tokens["type"], "counter");
    let kinds: Vec<&str> = (tokens["samples"].as_array().unwrap().iter())
        .filter(|s| s["labels"]["provider"] == "main")
        .map(|s| s["labels"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["input", "output", "cache_write", "cache_read"]);
    // No label may carry a session id, tool name or anything unbounded.
    let allowed = ["outcome", "provider", "dispatch", "le", "kind"];
    for fam in &families {
        for s in fam["samples"].as_array().unwrap() {
            for k in s["labels"].as_object().unwrap().keys() {
                assert!(allowed.contains(&k.as_str()), "label {k} on {s}");
            }
        }
    }
    let completed = family("bae_turns_completed")["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "bae_turns_completed_total" && s["labels"]["outcome"] == "completed")
        .map(|s| s["value"].as_f64().unwrap());
    assert_eq!(completed, Some(1.0), "{text}");
    assert!(
        !text.contains(&f.session_id),
        "session id leaked into /metrics"
    );
    assert!(!text.contains("get_time"), "tool name leaked into /metrics");
}
