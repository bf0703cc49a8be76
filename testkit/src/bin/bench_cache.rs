//! `bench_cache`: what prompt caching saves on a coding-agent-like session
//! (never run by tests). Boots the real `baesrv` twice, with the provider
//! entry's `prompt_cache` off then on, against testkit's mock billing
//! through a prompt cache like the provider's (`mock_provider/cache.rs`,
//! Anthropic's documented semantics by default: 1,024-token minimum,
//! 20-block lookback, 5-minute TTL; tokens from bytes), and runs the same
//! session on each:
//!
//! * `--turns` turns (default 60); in each the model calls a client tool
//!   (`read_file`, `run_tests`, … in turn) whose result grows with the
//!   session (`--result` bytes times the turn number, capped at
//!   `--max-result`), then answers; every `--rounds`-th turn it calls a
//!   second tool before answering;
//! * one manual compaction after turn `--compact-at` (default half way).
//!
//! It prints, for both runs, the billed input-token equivalents (input +
//! 1.25 × cache write + 0.1 × cache read, Anthropic's 5-minute prices)
//! with and without the compaction's call, the cache hit rate of every
//! call, and the server's CPU per turn (all threads, schedstat).
//!
//! ```text
//! cargo build --release -p io-smol -p testkit
//! BAESRV_BIN=$PWD/target/release/baesrv target/release/bench_cache [--turns 60] [--kind anthropic|openai]
//! ```

use std::time::Duration;

use serde_json::{json, Value};
use testkit::fixtures::{self, provider_toml, unique_name};
use testkit::{CacheCall, CacheConfig, MockProvider, Reply, Server, ServerOptions};

struct Args {
    turns: usize,
    result: usize,
    max_result: usize,
    rounds: usize,
    compact_at: usize,
    kind: String,
}

fn args() -> Args {
    let mut a = Args {
        turns: 60,
        result: 600,
        max_result: 24_000,
        rounds: 3,
        compact_at: 0,
        kind: "anthropic".into(),
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let val = pair
            .get(1)
            .unwrap_or_else(|| panic!("{} needs a value", pair[0]));
        let num = || -> usize {
            val.parse()
                .unwrap_or_else(|_| panic!("{} needs a number", pair[0]))
        };
        match pair[0].as_str() {
            "--turns" => a.turns = num(),
            "--result" => a.result = num(),
            "--max-result" => a.max_result = num(),
            "--rounds" => a.rounds = num().max(1),
            "--compact-at" => a.compact_at = num(),
            "--kind" => a.kind = val.clone(),
            other => panic!("unknown argument {other}"),
        }
    }
    if a.compact_at == 0 {
        a.compact_at = a.turns / 2;
    }
    a
}

const TOOLS: [&str; 4] = ["read_file", "run_tests", "grep", "edit_file"];

fn tool(name: &str) -> Value {
    json!({
        "name": name,
        "description": format!(
            "{name}: part of a coding agent's tool set. {}",
            "It takes a path or a pattern and returns what the workspace holds for it, as text. ".repeat(6)
        ),
        "input_schema": {"type": "object", "properties": {
            "path": {"type": "string", "description": "A path relative to the workspace root."},
            "pattern": {"type": "string", "description": "A regular expression."},
        }},
    })
}

/// `len` bytes of source-like text, different per turn.
fn output(turn: usize, len: usize) -> String {
    let mut s = String::with_capacity(len + 64);
    let mut line = 0;
    while s.len() < len {
        line += 1;
        s.push_str(&format!("{turn:>4}:{line:>5} | fn handler_{line}(req: &Request) -> Response {{ respond(req, {line}) }}\n"));
    }
    s.truncate(len);
    s
}

struct Run {
    calls: Vec<CacheCall>,
    /// Index of the compaction's call in `calls`.
    compaction: Option<usize>,
    cpu_per_turn: Duration,
}

fn run(a: &Args, caching: bool) -> Run {
    let mock = MockProvider::start();
    mock.enable_cache(CacheConfig::default());
    let mut config = provider_toml(&[("main", &a.kind, &mock.base_url, "mock-model", "tok")]);
    if caching {
        config.push_str("prompt_cache = true\n");
    }
    let server = Server::start(
        ServerOptions::new()
            .bin(Server::binary_path())
            .config(&config)
            .env("BAE_MAX_BODY_BYTES", "16777216"),
    );
    let profile = fixtures::create_profile(&server, &unique_name("agent"), "main", &[], &TOOLS);
    let (_, key) = fixtures::create_key(&server, &profile);
    let tools: Vec<Value> = TOOLS.iter().map(|t| tool(t)).collect();
    let (sid, skey) = fixtures::open_session(&server, &key, json!({"tools": tools}));
    fixtures::register_driver(&server, &sid, &skey);
    let pid = server.pid().expect("server pid");
    let text = |s: String| match a.kind.as_str() {
        "openai" => Reply::openai_text(s),
        _ => Reply::anthropic_text(s),
    };
    let call = |id: String, name: &str| match a.kind.as_str() {
        "openai" => Reply::openai_tool_call(&id, name, "{\"path\":\"src/lib.rs\"}"),
        _ => Reply::anthropic_tool_use(vec![json!({
            "type": "tool_use", "id": id, "name": name, "input": {"path": "src/lib.rs"},
        })]),
    };
    let mut compaction = None;
    let mut cpu = Duration::ZERO;
    for turn in 1..=a.turns {
        let cpu0 = testkit::bench::cpu_ns(pid);
        let rounds = if turn.is_multiple_of(a.rounds) { 2 } else { 1 };
        let mut content = json!(format!(
            "Step {turn}: look at the failing test and fix it. {}",
            "Keep the change small. ".repeat(4)
        ));
        for round in 0..rounds {
            let id = format!("tu_{turn}_{round}");
            mock.push(call(id.clone(), TOOLS[(turn + round) % TOOLS.len()]));
            let (_, t) = fixtures::send_message(&server, &sid, &skey, content);
            assert!(t["result"].is_object(), "turn {turn}: {t}");
            let len = (a.result * turn).min(a.max_result);
            content =
                json!([{"type": "tool_result", "tool_use_id": id, "content": output(turn, len)}]);
        }
        mock.push(text(format!(
            "Done with step {turn}: {}",
            "the change is in place and the tests pass. ".repeat(3)
        )));
        let (_, t) = fixtures::send_message(&server, &sid, &skey, content);
        assert!(t["result"].is_object(), "turn {turn}: {t}");
        cpu += Duration::from_nanos(testkit::bench::cpu_ns(pid).saturating_sub(cpu0));
        if turn == a.compact_at {
            mock.push(text(format!(
                "Summary: {}",
                "the agent fixed the failing tests step by step. ".repeat(20)
            )));
            let (_, t) = server.client().rpc(
                &sid,
                &skey,
                "session.compact",
                json!({}),
                testkit::http::next_rpc_id(),
            );
            assert!(t.get("result").is_some(), "{t}");
            compaction = Some(mock.cache_calls().len() - 1);
        }
    }
    Run {
        calls: mock.cache_calls(),
        compaction,
        cpu_per_turn: cpu / a.turns as u32,
    }
}

fn billed(calls: &[CacheCall], skip: Option<usize>) -> f64 {
    calls
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != skip)
        .map(|(_, c)| c.billed())
        .sum()
}

fn main() {
    let a = args();
    println!("baesrv: {}", Server::binary_path().display());
    println!(
        "{} turns, {} provider kind, tool results {} B × turn (at most {} B), a second round every {} turns, compaction after turn {}\n",
        a.turns, a.kind, a.result, a.max_result, a.rounds, a.compact_at
    );
    let off = run(&a, false);
    let on = run(&a, true);
    let prompt: u64 = off.calls.iter().map(|c| c.prompt_tokens).sum();
    println!("| | caching off | caching on | less |");
    println!("|---|---:|---:|---:|");
    let row = |what: &str, x: f64, y: f64| {
        println!(
            "| {what} | {x:.0} | {y:.0} | {:.1} % |",
            100.0 * (1.0 - y / x)
        );
    };
    row(
        "billed input-token equivalents, all calls",
        billed(&off.calls, None),
        billed(&on.calls, None),
    );
    row(
        "the same without the compaction's call",
        billed(&off.calls, off.compaction),
        billed(&on.calls, on.compaction),
    );
    let read = |r: &Run| r.calls.iter().map(|c| c.cache_read_tokens).sum::<u64>() as f64;
    println!(
        "| prompt tokens (both runs) | {prompt} | {} | |",
        on.calls.iter().map(|c| c.prompt_tokens).sum::<u64>()
    );
    println!(
        "| cache hit rate (read / prompt) | {:.1} % | {:.1} % | |",
        100.0 * read(&off) / prompt as f64,
        100.0 * read(&on) / prompt as f64
    );
    println!(
        "| server CPU per turn | {:.3} ms | {:.3} ms | |",
        off.cpu_per_turn.as_secs_f64() * 1e3,
        on.cpu_per_turn.as_secs_f64() * 1e3
    );
    if let Some(i) = on.compaction {
        let c = &on.calls[i];
        println!(
            "\ncompaction call (caching on): {} prompt tokens, {} read ({:.1} %), {} written",
            c.prompt_tokens,
            c.cache_read_tokens,
            100.0 * c.hit_rate(),
            c.cache_write_tokens
        );
    }
    println!("\nhit rate per call, caching on (call: read/prompt; C = the compaction):");
    let cells: Vec<String> = on
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mark = if Some(i) == on.compaction { "C" } else { "" };
            format!("{}{mark}:{:.0}%", i + 1, 100.0 * c.hit_rate())
        })
        .collect();
    for line in cells.chunks(12) {
        println!("  {}", line.join("  "));
    }
}
