//! `bench_mcp`: what MCP costs (never run by tests). Boots the real
//! `baesrv` against testkit's mock provider and real stdio MCP servers from
//! `testkit/fixtures/mcp`, and measures:
//!
//! * session open (`POST /api/v1/sessions` → `201`) with 0, 1 and 5 stdio
//!   servers (the raw fixture, and the official Python SDK fixture), p50/p99;
//! * one turn with an MCP round trip vs the same turn with a client tool
//!   (pause, then resume with the `tool_result`), p50/p99;
//! * server CPU added per MCP call: baesrv's own CPU time (`/proc`) over N
//!   MCP turns minus N text turns, divided by N (the MCP child's CPU is not
//!   baesrv's and is not counted).
//!
//! ```text
//! cargo build --release -p io-smol -p testkit
//! BAESRV_BIN=target/release/baesrv target/release/bench_mcp [--opens 40] [--turns 1000]
//! ```

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::fixtures::{self, provider_toml, unique_name};
use testkit::mcp::{fixture, stdio_toml};
use testkit::{MockProvider, Reply, Server, ServerOptions};

fn main() {
    let mut opens = 40usize;
    let mut turns = 1000usize;
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = || -> usize {
            pair.get(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{} needs a number", pair[0]))
        };
        match pair[0].as_str() {
            "--opens" => opens = value(),
            "--turns" => turns = value(),
            other => panic!("unknown argument {other}"),
        }
    }
    let bin = Server::binary_path();
    println!("baesrv: {}\n", bin.display());

    let raw = fixture("raw_server.py");
    let sdk = fixture("fixture_server.py");
    let raw_toml = |name: &str| stdio_toml(name, "python3", &[&raw, "normal"]);
    let mut registry = String::new();
    for i in 0..5 {
        registry.push_str(&raw_toml(&format!("raw{i}")));
    }
    registry.push_str(&stdio_toml(
        "sdk",
        "python3",
        &[&sdk, "--name", "sdk", "stdio"],
    ));
    let mock = MockProvider::start();
    let mut config = provider_toml(&[("main", "anthropic", &mock.base_url, "m", "tok")]);
    config.push_str(&registry);
    let server = Server::start(ServerOptions::new().bin(&bin).config(&config));

    println!("| session open | p50 | p99 |");
    println!("|---|---|---|");
    let cases: [(&str, Vec<&str>); 4] = [
        ("0 servers", vec![]),
        ("1 raw stdio server", vec!["raw0"]),
        (
            "5 raw stdio servers",
            vec!["raw0", "raw1", "raw2", "raw3", "raw4"],
        ),
        ("1 Python SDK stdio server", vec!["sdk"]),
    ];
    for (label, servers) in &cases {
        let profile = profile(&server, servers, &["client_tool"]);
        let (_, key) = fixtures::create_key(&server, &profile);
        let mut times = Vec::with_capacity(opens);
        for _ in 0..opens {
            let t = Instant::now();
            let (sid, skey) = fixtures::open_session(&server, &key, json!({}));
            times.push(t.elapsed());
            server
                .client()
                .bearer(&skey)
                .delete(&format!("/api/v1/sessions/{sid}"))
                .assert_status(200);
        }
        let (p50, p99) = percentiles(&mut times);
        println!("| {label} | {p50:.1} ms | {p99:.1} ms |");
    }

    // Turns: sessions of TURNS_PER_SESSION sequential turns (the history,
    // and with it every provider body, stays small); only the turns are
    // timed and only their CPU is counted.
    let plain = profile(&server, &[], &["client_tool"]);
    let with_mcp = profile(&server, &["raw0"], &["client_tool"]);
    let pid = server.pid().expect("server pid");
    let mut rows = Vec::new();
    for kind in [Kind::Text, Kind::Mcp, Kind::Client] {
        let profile_id = if kind == Kind::Mcp { &with_mcp } else { &plain };
        let (_, key) = fixtures::create_key(&server, profile_id);
        let tools = json!({"tools": [{"name": "client_tool", "input_schema": {"type": "object"}}]});
        let mut times = Vec::with_capacity(turns);
        let mut cpu_ns = 0u64;
        while times.len() < turns {
            let (sid, skey) = fixtures::open_session(&server, &key, tools.clone());
            fixtures::register_driver(&server, &sid, &skey);
            for _ in 0..TURNS_PER_SESSION.min(turns - times.len()) {
                let cpu = testkit::bench::cpu_ns(pid);
                let t = Instant::now();
                match kind {
                    Kind::Text => {
                        mock.push(Reply::text("done"));
                        turn(&server, &sid, &skey, json!("hi"));
                    }
                    Kind::Mcp => {
                        mock.push(Reply::tool_use("tu", "echo", json!({"text": "x"})));
                        mock.push(Reply::text("done"));
                        turn(&server, &sid, &skey, json!("hi"));
                    }
                    Kind::Client => {
                        mock.push(Reply::tool_use("tu", "client_tool", json!({})));
                        mock.push(Reply::text("done"));
                        turn(&server, &sid, &skey, json!("hi"));
                        let result =
                            json!([{"type": "tool_result", "tool_use_id": "tu", "content": "ok"}]);
                        turn(&server, &sid, &skey, result);
                    }
                }
                times.push(t.elapsed());
                cpu_ns += testkit::bench::cpu_ns(pid) - cpu;
            }
            server
                .client()
                .bearer(&skey)
                .delete(&format!("/api/v1/sessions/{sid}"))
                .assert_status(200);
            mock.clear_requests();
        }
        rows.push((kind, times, cpu_ns as f64 / 1e6 / turns as f64));
    }
    println!("\n| turn ({turns} sequential, {TURNS_PER_SESSION} per session) | p50 | p99 | baesrv CPU per turn |");
    println!("|---|---|---|---|");
    for (kind, times, cpu) in &mut rows {
        let (p50, p99) = percentiles(times);
        println!(
            "| {} | {p50:.2} ms | {p99:.2} ms | {cpu:.3} ms |",
            kind.label()
        );
    }
    let cpu = |k: Kind| rows.iter().find(|r| r.0 == k).map_or(0.0, |r| r.2);
    println!(
        "\nbaesrv CPU added by one MCP round trip (MCP turn − text turn): {:.3} ms",
        cpu(Kind::Mcp) - cpu(Kind::Text)
    );
}

const TURNS_PER_SESSION: usize = 10;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Mcp,
    Client,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Text => "text only (1 provider call)",
            Kind::Mcp => "one MCP round trip (2 provider calls)",
            Kind::Client => "one client-tool round trip (2 requests, 2 provider calls)",
        }
    }
}

fn profile(server: &Server, mcp: &[&str], allowed: &[&str]) -> String {
    fixtures::create_profile_json(
        server,
        &json!({
            "name": unique_name("bench"),
            "primary_provider": "main",
            "allowed_tools": allowed,
            "mcp_servers": mcp,
        }),
    )
}

fn turn(server: &Server, sid: &str, skey: &str, content: Value) {
    let (_, t) = fixtures::send_message(server, sid, skey, content);
    assert!(t.get("result").is_some(), "turn failed: {t}");
}

/// `(p50, p99)` in milliseconds.
fn percentiles(times: &mut [Duration]) -> (f64, f64) {
    times.sort();
    let at = |q: f64| testkit::bench::percentile(times, q).as_secs_f64() * 1e3;
    (at(0.50), at(0.99))
}
