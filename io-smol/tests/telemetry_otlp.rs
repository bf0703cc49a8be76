//! OpenTelemetry export over the real binary (spec 04 §3.3, §7), against a
//! real OTLP receiver (testkit/fixtures/otlp/otlp_receiver.py: grpcio and
//! opentelemetry-proto, installed by testkit/scripts/install-test-deps.sh),
//! over OTLP/gRPC and OTLP/HTTP-protobuf: the §7.1 span tree of a paused and
//! resumed client-tool turn with its links and attributes, an inbound
//! `traceparent`, the privacy rule checked on the received protobuf bytes,
//! the §7.2 metrics with `disabled` honoured, and a collector that is down
//! or never answers costing no turn and no shutdown.

mod live_support;
mod sandbox_support;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use live_support::*;
use serde_json::{json, Value};
use testkit::fixtures::provider_toml;
use testkit::{MockProvider, Reply, RpcStream, Server};

/// The receiver process; killed on drop.
struct Receiver {
    child: Child,
    _stdin: ChildStdin,
    grpc: u16,
    http: u16,
    out: testkit::TestDir,
}

impl Receiver {
    fn start() -> Receiver {
        let out = testkit::TestDir::new("otlp").unwrap();
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testkit/fixtures/otlp/otlp_receiver.py"
        );
        let mut child = Command::new("python3")
            .arg(script)
            .arg("--out")
            .arg(out.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 must be on PATH (testkit/scripts/install-test-deps.sh)");
        let stdin = child.stdin.take().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ports: Value = serde_json::from_str(&line).unwrap_or_else(|_| {
            panic!(
                "the OTLP receiver did not start (are grpcio and opentelemetry-proto installed? \
                 run testkit/scripts/install-test-deps.sh): {line:?}"
            )
        });
        Receiver {
            child,
            _stdin: stdin,
            grpc: ports["grpc"].as_u64().unwrap() as u16,
            http: ports["http"].as_u64().unwrap() as u16,
            out,
        }
    }

    fn endpoint(&self, protocol: &str) -> String {
        match protocol {
            "grpc" => format!("http://127.0.0.1:{}", self.grpc),
            _ => format!("http://127.0.0.1:{}", self.http),
        }
    }

    fn lines(&self, file: &str) -> Vec<Value> {
        std::fs::read_to_string(self.out.path().join(file))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn spans(&self) -> Vec<Value> {
        self.lines("traces.jsonl")
    }

    fn raw(&self) -> Vec<u8> {
        std::fs::read(self.out.path().join("raw.bin")).unwrap_or_default()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const TEXT: &str = "user-text-7f3a9 please tell me the time";
const INPUT: &str = "tool-input-c41d2";
const OUTPUT: &str = "tool-output-9be07";
const REPLY: &str = "assistant-reply-5d1e8";
const PROVIDER_TOKEN: &str = "sk-provider-secret-0a6c3";
const OTLP_TOKEN: &str = "otlp-header-secret-e92b4";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

fn telemetry_toml(endpoint: &str, protocol: &str, extra: &str) -> String {
    format!(
        "[telemetry]\nenabled = true\notlp_endpoint = \"{endpoint}\"\notlp_protocol = \"{protocol}\"\n\
         service_name = \"bae-test\"\n{extra}"
    )
}

fn server_with(mock: &MockProvider, telemetry: &str, env: &[(&str, &str)]) -> Server {
    let config = provider_toml(&[(
        "main",
        "anthropic",
        &mock.base_url,
        "mock-model",
        "${OTEL_TEST_PROVIDER_TOKEN}",
    )]) + telemetry;
    let mut o = opts(&config)
        .env("OTEL_TEST_PROVIDER_TOKEN", PROVIDER_TOKEN)
        .env("OTEL_TEST_HEADER", OTLP_TOKEN)
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "100");
    for (k, v) in env {
        o = o.env(*k, *v);
    }
    Server::start(o)
}

/// `sendMessage` with a `traceparent` header on the request.
fn send_traced(server: &Server, session_id: &str, key: &str, content: Value, tp: &str) -> Value {
    let body = serde_json::to_vec(&testkit::rpc_request(
        "session.sendMessage",
        json!({"message": {"role": "user", "content": content}}),
        testkit::http::next_rpc_id(),
    ))
    .unwrap();
    let mut s = TcpStream::connect(server.client_addr).unwrap();
    let head = format!(
        "POST /api/v1/sessions/{session_id}/rpc HTTP/1.1\r\nhost: t\r\nauthorization: Bearer {key}\r\n\
         content-type: application/json\r\ntraceparent: {tp}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let mut stream = RpcStream::from_stream(s, WAIT);
    stream
        .collect_until_terminal(WAIT)
        .1
        .expect("terminal frame")
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn link_kinds(span: &Value) -> Vec<(String, String)> {
    span["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["span_id"].as_str().unwrap().to_string(),
                l["attributes"]["bae.link.kind"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// C-§7.1: the span tree, links and attributes of a turn that pauses for a
/// client tool and a turn that resumes it; §7 privacy on the wire bytes;
/// §7.2 metrics with `disabled`.
fn span_tree_and_privacy(protocol: &str) {
    let receiver = Receiver::start();
    let mock = MockProvider::start();
    let extra = "otlp_headers = { \"x-otel-token\" = \"${OTEL_TEST_HEADER}\" }\n\
                 [telemetry.metrics]\ndisabled = [\"bae.keys.count\"]\n";
    let mut server = server_with(
        &mock,
        &telemetry_toml(&receiver.endpoint(protocol), protocol, extra),
        &[],
    );
    let f = open_registered(
        &server,
        "main",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    server.client().get("/healthz").assert_status(200);

    mock.push(Reply::tool_use("tu_1", "get_time", json!({"zone": INPUT})));
    let tp = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let paused = send_traced(&server, &f.session_id, &f.a.session_key, json!(TEXT), &tp);
    assert!(paused.get("result").is_some(), "{paused}");
    mock.push(Reply::text(REPLY));
    let (_, done) = send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_1", OUTPUT)]),
    );
    assert_eq!(text_of(&done["result"]["message"]), REPLY, "{done}");
    // Metrics are exported periodically while the server runs.
    assert!(
        wait_until(WAIT, || receiver.lines("metrics.jsonl").iter().any(|m| {
            m["name"] == "bae.turns.completed"
                && m["points"].as_array().unwrap().iter().any(|p| {
                    p["attributes"]["outcome"] == "completed" && p["value"].as_i64() == Some(1)
                })
        })),
        "no bae.turns.completed{{outcome=completed}} = 1: {:?}",
        receiver.lines("metrics.jsonl")
    );
    // Shutdown flushes the rest (the session anchor is ended then).
    assert!(server.stop().success(), "{}", server.stderr_log());
    let spans = receiver.spans();
    let transport = if protocol == "grpc" { "grpc" } else { "http" };
    assert!(spans.iter().all(|s| s["transport"] == transport));
    assert!(spans
        .iter()
        .all(|s| s["resource"]["service.name"] == "bae-test"
            && s["resource"]["service.version"] == env!("CARGO_PKG_VERSION")));

    // http.request: one per request but /healthz, with the HTTP attributes.
    let http = named(&spans, "http.request");
    assert!(
        http.iter()
            .all(|s| s["attributes"]["url.path"] != "/healthz"),
        "{http:?}"
    );
    assert!(http.iter().all(|s| s["kind"] == 2), "server kind");
    let rpc_path = format!("/api/v1/sessions/{}/rpc", f.session_id);
    let rpcs: Vec<&&Value> = http
        .iter()
        .filter(|s| s["attributes"]["url.path"] == rpc_path.as_str())
        .collect();
    for s in &rpcs {
        assert_eq!(s["attributes"]["http.request.method"], "POST");
        assert_eq!(
            s["attributes"]["http.route"],
            "/api/v1/sessions/{session_id}/rpc"
        );
        assert_eq!(s["attributes"]["http.response.status_code"], 200);
    }
    let create = http
        .iter()
        .find(|s| s["attributes"]["http.route"] == "/api/v1/sessions")
        .expect("the create request's span");
    assert_eq!(create["attributes"]["http.response.status_code"], 201);
    // The traced sendMessage joined the caller's trace.
    let traced = rpcs
        .iter()
        .find(|s| s["trace_id"] == TRACE_ID)
        .expect("a request span in the inbound trace");
    assert_eq!(traced["parent_span_id"], PARENT_ID);
    // Others are roots of their own traces.
    assert!(create["parent_span_id"] == "" && create["trace_id"] != TRACE_ID);

    let session = named(&spans, "bae.session");
    assert_eq!(session.len(), 1, "{session:?}");
    let session = session[0];
    assert_eq!(
        session["attributes"]["bae.session.id"],
        f.session_id.as_str()
    );
    assert_eq!(
        session["attributes"]["bae.profile.id"],
        f.profile_id.as_str()
    );
    assert_eq!(session["parent_span_id"], "");

    let turns = named(&spans, "bae.turn");
    assert_eq!(turns.len(), 2, "{turns:?}");
    let first = turns
        .iter()
        .find(|t| t["attributes"]["bae.turn.outcome"] == "paused")
        .unwrap();
    let second = turns
        .iter()
        .find(|t| t["attributes"]["bae.turn.outcome"] == "completed")
        .unwrap();
    assert_eq!(first["parent_span_id"], traced["span_id"]);
    assert_eq!(first["trace_id"], TRACE_ID);
    assert_eq!(first["attributes"]["bae.turn.resumed"], false);
    assert_eq!(
        link_kinds(first),
        vec![(
            session["span_id"].as_str().unwrap().into(),
            "session".into()
        )]
    );
    let second_req = rpcs
        .iter()
        .find(|s| s["span_id"] == second["parent_span_id"])
        .expect("the resuming turn hangs on its sendMessage request");
    assert_ne!(second_req["trace_id"], TRACE_ID);
    assert_eq!(second["attributes"]["bae.turn.resumed"], true);
    assert_eq!(
        link_kinds(second),
        vec![
            (
                session["span_id"].as_str().unwrap().into(),
                "session".into()
            ),
            (first["span_id"].as_str().unwrap().into(), "resume".into()),
        ]
    );

    let attempts = named(&spans, "bae.provider.attempt");
    assert_eq!(attempts.len(), 2);
    for (a, turn) in attempts.iter().zip([first, second]) {
        assert_eq!(a["parent_span_id"], turn["span_id"]);
        assert_eq!(a["kind"], 3, "client kind");
        assert_eq!(a["attributes"]["bae.provider.name"], "main");
        assert_eq!(a["attributes"]["bae.provider.kind"], "anthropic");
        assert_eq!(a["attributes"]["bae.provider.model"], "mock-model");
        assert_eq!(a["attributes"]["bae.provider.attempt"], 0);
        assert_eq!(a["attributes"]["bae.provider.attempt_kind"], "primary");
        assert_eq!(a["status"]["code"], 1, "ok");
    }
    let dispatch = named(&spans, "bae.tool.dispatch");
    assert_eq!(dispatch.len(), 1);
    assert_eq!(dispatch[0]["parent_span_id"], first["span_id"]);
    assert_eq!(dispatch[0]["attributes"]["bae.tool.name"], "get_time");
    assert_eq!(dispatch[0]["attributes"]["bae.tool.dispatch"], "client");
    let input_len = json!({"zone": INPUT}).to_string().len() as i64;
    assert_eq!(dispatch[0]["attributes"]["bae.tool.input.bytes"], input_len);

    // Privacy (spec 04 §7): none of the secrets or texts in what arrived.
    let raw = receiver.raw();
    assert!(raw.len() > 1000, "{} bytes received", raw.len());
    let admin_key = std::fs::read_to_string(server.admin_key_file()).unwrap();
    for secret in [
        TEXT,
        INPUT,
        OUTPUT,
        REPLY,
        PROVIDER_TOKEN,
        OTLP_TOKEN,
        f.a.client_key.as_str(),
        f.a.session_key.as_str(),
        admin_key.trim(),
    ] {
        assert!(!contains(&raw, secret), "{secret:?} reached the collector");
    }
    // The resolved header went to the collector as a header, not as data.
    let headers = receiver.lines("headers.jsonl");
    assert!(
        headers.iter().all(|h| h["x-otel-token"] == OTLP_TOKEN),
        "{headers:?}"
    );

    // §7.2: the closed set, `disabled` left out.
    let names: std::collections::BTreeSet<String> = receiver
        .lines("metrics.jsonl")
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect();
    let expected: std::collections::BTreeSet<String> = [
        "bae.sessions.open",
        "bae.sessions.total",
        "bae.events.total",
        "bae.profiles.count",
        "bae.mcp.sessions.live",
        "bae.turns.pending",
        "bae.sandboxes.live",
        "bae.subagents.active",
        "bae.drivers.registered",
        "bae.turns.completed",
        "bae.provider.requests",
        "bae.provider.latency",
        "bae.provider.tokens",
        "bae.tool.calls",
        "bae.tool.latency",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(names, expected);
    let latency = receiver
        .lines("metrics.jsonl")
        .into_iter()
        .rfind(|m| m["name"] == "bae.provider.latency")
        .unwrap();
    let anthropic = latency["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["attributes"]["provider"] == "anthropic")
        .unwrap()
        .clone();
    assert_eq!(anthropic["count"], 2, "{latency}");
    assert_eq!(
        anthropic["bucket_counts"].as_array().unwrap().len(),
        anthropic["explicit_bounds"].as_array().unwrap().len() + 1
    );
    // Tokens by provider entry (its configured name) and kind; the mock's
    // replies report (10, 5) each.
    let tokens = receiver
        .lines("metrics.jsonl")
        .into_iter()
        .rfind(|m| m["name"] == "bae.provider.tokens")
        .unwrap();
    let value = |kind: &str| {
        tokens["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["attributes"]["provider"] == "main" && p["attributes"]["kind"] == kind)
            .map(|p| p["value"].clone())
            .unwrap_or_else(|| panic!("no {kind} point: {tokens}"))
    };
    assert_eq!(
        value("input"),
        anthropic["count"].as_u64().unwrap() * 10,
        "{tokens}"
    );
    assert_eq!(
        value("output"),
        anthropic["count"].as_u64().unwrap() * 5,
        "{tokens}"
    );
    assert_eq!(value("cache_read"), 0, "{tokens}");
}

#[test]
fn c_7_1_span_tree_links_and_privacy_over_grpc() {
    span_tree_and_privacy("grpc");
}

#[test]
fn c_7_1_span_tree_links_and_privacy_over_http_protobuf() {
    span_tree_and_privacy("http/protobuf");
}

/// `sample_ratio` applies only when the server is the trace root: 0.0
/// exports no trace the server starts, yet a sampled inbound trace is
/// followed.
#[test]
fn sample_ratio_applies_to_root_traces_only() {
    let receiver = Receiver::start();
    let mock = MockProvider::start();
    let tel = telemetry_toml(&receiver.endpoint("grpc"), "grpc", "sample_ratio = 0.0\n");
    let mut server = server_with(&mock, &tel, &[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    mock.push(Reply::text("one"));
    send(&server, &f.session_id, &f.a, json!("untraced"));
    mock.push(Reply::text("two"));
    let tp = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    send_traced(
        &server,
        &f.session_id,
        &f.a.session_key,
        json!("traced"),
        &tp,
    );
    assert!(server.stop().success());
    let spans = receiver.spans();
    assert!(!spans.is_empty());
    assert!(spans.iter().all(|s| s["trace_id"] == TRACE_ID), "{spans:?}");
    let names: Vec<&str> = spans.iter().map(|s| s["name"].as_str().unwrap()).collect();
    for n in ["http.request", "bae.turn", "bae.provider.attempt"] {
        assert!(names.contains(&n), "{names:?}");
    }
}

/// A listener that accepts connections and never answers (a hung
/// collector); connections are held until the test ends.
fn hanging_collector() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            held.push(c);
        }
    });
    addr
}

fn dead_collector() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// §7: an unreachable or hanging collector never fails a request, and the
/// flush stays within `BAE_SHUTDOWN_TIMEOUT`.
/// `logged`: what the server's log must say about it (rate-limited).
fn bad_collector(protocol: &str, addr: SocketAddr, logged: &[&str]) {
    let mock = MockProvider::start();
    let tel = telemetry_toml(&format!("http://{addr}"), protocol, "");
    let mut server = server_with(
        &mock,
        &tel,
        &[
            ("BAE_SHUTDOWN_TIMEOUT", "2"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "30000"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "20"),
        ],
    );
    let f = open_registered(
        &server,
        "main",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    for i in 0..5 {
        mock.push(Reply::tool_use(format!("tu_{i}"), "get_time", json!({})));
        let (_, t) = send(&server, &f.session_id, &f.a, json!("time?"));
        assert!(t.get("result").is_some(), "{t}");
        mock.push(Reply::text("ok"));
        let (_, t) = send(
            &server,
            &f.session_id,
            &f.a,
            json!([tool_result(&format!("tu_{i}"), "1")]),
        );
        assert_eq!(text_of(&t["result"]["message"]), "ok", "{t}");
    }
    // The 2 s budget bounds the flush even with a 30 s export timeout; the
    // bound here only catches a hang.
    let status = server.stop_timeout(Duration::from_secs(20));
    let log = server.stderr_log();
    assert!(status.success(), "{log}");
    for line in logged {
        assert!(log.contains(line), "no {line:?} in\n{log}");
    }
    assert!(!log.contains(OTLP_TOKEN) && !log.contains(PROVIDER_TOKEN));
}

/// A hung export holds the exporter thread: the small queue fills and
/// drops, and the shutdown flush gives up at the budget.
const HUNG: &[&str] = &[
    "span facts dropped",
    "telemetry flush did not finish within the shutdown budget",
];

#[test]
fn a_dead_collector_fails_nothing_over_grpc() {
    bad_collector("grpc", dead_collector(), &["OTLP export failed"]);
}

#[test]
fn a_dead_collector_fails_nothing_over_http_protobuf() {
    bad_collector("http/protobuf", dead_collector(), &["OTLP export failed"]);
}

#[test]
fn a_hanging_collector_fails_nothing_over_grpc() {
    bad_collector("grpc", hanging_collector(), HUNG);
}

#[test]
fn a_hanging_collector_fails_nothing_over_http_protobuf() {
    bad_collector("http/protobuf", hanging_collector(), HUNG);
}

/// §3.3: a bad `otlp_protocol` or tuning variable is a startup error (2).
#[test]
fn bad_telemetry_settings_exit_2() {
    let mock = MockProvider::start();
    let base = provider_toml(&[("main", "anthropic", &mock.base_url, "m", "t")]);
    let bad_protocol = base.clone() + &telemetry_toml("http://127.0.0.1:4317", "thrift", "");
    let out = Server::run(opts(&bad_protocol), WAIT);
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("[telemetry] otlp_protocol \"thrift\" must be \"grpc\" or \"http/protobuf\""),
        "{}",
        out.stderr
    );
    let ok = base + &telemetry_toml("http://127.0.0.1:4317", "grpc", "");
    let out = Server::run(opts(&ok).env("OTEL_BSP_MAX_QUEUE_SIZE", "lots"), WAIT);
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("OTEL_BSP_MAX_QUEUE_SIZE"),
        "{}",
        out.stderr
    );
}

/// §7.1: an MCP tool's `bae.mcp.call` (client kind) under its dispatch,
/// sizes but not the input or the server's output.
#[test]
fn c_7_1_mcp_call_under_its_dispatch() {
    let receiver = Receiver::start();
    let mock = MockProvider::start();
    let config = testkit::mcp::sdk_stdio_toml("fx", &[])
        + &telemetry_toml(&receiver.endpoint("grpc"), "grpc", "");
    let mut server = server_with(&mock, &config, &[]);
    let profile = json!({
        "name": testkit::fixtures::unique_name("profile"),
        "primary_provider": "main",
        "mcp_servers": ["fx"],
    });
    let f = open_with_profile(&server, &profile, json!({}));
    testkit::fixtures::register_driver(&server, &f.session_id, &f.a.session_key);
    mock.push(Reply::tool_use("tu_1", "echo", json!({"text": INPUT})));
    mock.push(Reply::text("done"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("go"));
    assert!(t.get("result").is_some(), "{t}");
    assert!(server.stop().success());
    let spans = receiver.spans();
    let dispatch = named(&spans, "bae.tool.dispatch");
    assert_eq!(dispatch.len(), 1, "{spans:?}");
    let d = dispatch[0];
    assert_eq!(d["attributes"]["bae.tool.name"], "echo");
    assert_eq!(d["attributes"]["bae.tool.dispatch"], "mcp");
    assert_eq!(d["attributes"]["bae.tool.is_error"], false);
    let output = json!([{"type": "text", "text": format!("fx: {INPUT}")}]);
    assert_eq!(
        d["attributes"]["bae.tool.output.bytes"],
        output.to_string().len() as i64
    );
    let call = named(&spans, "bae.mcp.call");
    assert_eq!(call.len(), 1);
    assert_eq!(call[0]["parent_span_id"], d["span_id"]);
    assert_eq!(call[0]["kind"], 3, "client kind");
    assert_eq!(call[0]["attributes"]["bae.mcp.server"], "fx");
    assert_eq!(call[0]["status"]["code"], 1);
    assert!(!contains(&receiver.raw(), INPUT));
}

/// `BAE_OTEL_LOG` filters the exported spans by target (`baesrv::http`
/// for `http.request`, …); the rest of the tree is still exported.
#[test]
fn bae_otel_log_filters_span_targets() {
    let receiver = Receiver::start();
    let mock = MockProvider::start();
    let tel = telemetry_toml(&receiver.endpoint("http/protobuf"), "http/protobuf", "");
    let mut server = server_with(&mock, &tel, &[("BAE_OTEL_LOG", "info,baesrv::http=off")]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    mock.push(Reply::text("one"));
    send(&server, &f.session_id, &f.a, json!("hi"));
    assert!(server.stop().success());
    let spans = receiver.spans();
    assert!(named(&spans, "http.request").is_empty(), "{spans:?}");
    assert_eq!(named(&spans, "bae.turn").len(), 1, "{spans:?}");
    assert_eq!(named(&spans, "bae.provider.attempt").len(), 1);
}

/// §7.1: an Auto sandbox tool's `bae.sandbox.exec` under its dispatch with
/// the exit code, and a subagent's own `bae.subagent` root linked to the
/// dispatch that launched it, against the real container engine; neither
/// the command nor the prompt reaches the collector.
#[test]
fn c_7_1_sandbox_exec_and_subagent_spans() {
    use testkit::containers::{DOCKER_HOST, SUBAGENT};
    if !testkit::containers::require_engine() {
        return;
    }
    const COMMAND: &str = "echo sandbox-secret-3c9d1; exit 3";
    const PROMPT: &str = "subagent-prompt-77ab2";
    let receiver = Receiver::start();
    let mock = MockProvider::start();
    let tel = telemetry_toml(&receiver.endpoint("grpc"), "grpc", "");
    let mut server = server_with(&mock, &tel, &[("DOCKER_HOST", DOCKER_HOST)]);
    let launch = json!({
        "name": "launch_subagent",
        "description": "Launch a CLI subagent.",
        "input_schema": {"type": "object"},
        "image": SUBAGENT,
        "subagents": [{"harness": "claude", "command_template": "claude --model {model} --print", "prompt_via": "stdin"}]
    });
    let body =
        json!({"sandbox_tools": [sandbox_support::shell_tool("sh")], "subagent_tools": [launch]});
    let f = sandbox_support::open_sandboxed(&server, &[SUBAGENT], &[], body);
    sandbox_support::started(&server, &f, SUBAGENT);
    mock.push(Reply::tool_use("tu_s", "sh", json!({"command": COMMAND})));
    mock.push(Reply::text("ran"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("run it"));
    assert!(t.get("result").is_some(), "{t}");
    let input = json!({"harness": "claude", "model": "m-1", "prompt": PROMPT});
    mock.push(Reply::tool_use("tu_l", "launch_subagent", input));
    mock.push(Reply::text("launched"));
    let (_, t) = send(&server, &f.session_id, &f.a, json!("launch"));
    assert!(t.get("result").is_some(), "{t}");
    assert!(
        wait_until(Duration::from_secs(20), || {
            events(&server, &f.session_id, &f.a.session_key)
                .iter()
                .any(|e| e["event_type"] == "session.subagent.completed")
        }),
        "the subagent did not complete"
    );
    server
        .client()
        .bearer(f.a.session_key.clone())
        .delete(&format!("/api/v1/sessions/{}", f.session_id))
        .assert_status(200);
    assert!(server.stop().success());
    let spans = receiver.spans();
    let dispatch = |name: &str| {
        named(&spans, "bae.tool.dispatch")
            .into_iter()
            .find(|d| d["attributes"]["bae.tool.name"] == name)
            .unwrap_or_else(|| panic!("no dispatch of {name}: {spans:?}"))
            .clone()
    };
    let sh = dispatch("sh");
    assert_eq!(sh["attributes"]["bae.tool.dispatch"], "sandbox");
    assert_eq!(sh["attributes"]["bae.tool.is_error"], true);
    let exec = named(&spans, "bae.sandbox.exec");
    assert_eq!(exec.len(), 1, "{spans:?}");
    assert_eq!(exec[0]["parent_span_id"], sh["span_id"]);
    assert_eq!(exec[0]["attributes"]["bae.sandbox.exit_code"], 3);
    let launcher = dispatch("launch_subagent");
    assert_eq!(launcher["attributes"]["bae.tool.dispatch"], "subagent");
    let sub = named(&spans, "bae.subagent");
    assert_eq!(sub.len(), 1, "{spans:?}");
    assert_eq!(sub[0]["parent_span_id"], "");
    assert_ne!(sub[0]["trace_id"], launcher["trace_id"]);
    assert_eq!(
        link_kinds(sub[0]),
        vec![(
            launcher["span_id"].as_str().unwrap().into(),
            "subagent".into()
        )]
    );
    assert_eq!(sub[0]["attributes"]["bae.subagent.outcome"], "completed");
    assert!(sub[0]["attributes"]["bae.subagent.id"]
        .as_str()
        .is_some_and(|id| id.starts_with("sba_")));
    let session = named(&spans, "bae.session");
    assert_eq!(session.len(), 1);
    assert_eq!(session[0]["status"]["code"], 1, "closed: ok");
    let raw = receiver.raw();
    assert!(!contains(&raw, "sandbox-secret-3c9d1") && !contains(&raw, PROMPT));
}
