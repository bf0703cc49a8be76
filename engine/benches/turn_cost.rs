//! Engine work per text turn and per client-tool round trip, for
//! instruction counts under callgrind (repeatable on a shared box, unlike
//! times). It drives the engine in process with the engine tests' harness
//! (`MemStore`, scripted provider replies, no sockets) through the units
//! `bench_turns` times over the wire:
//!
//! - **text**: `session.sendMessage` → final answer, on a session rotated
//!   every 20 units (open + `registerDriver` outside the unit);
//! - **tool**: `sendMessage` → paused `tool_use` → `sendMessage` with the
//!   `tool_result` → final answer;
//! - **kit-text** and **kit-tool**: the same units as `bench_kit` runs
//!   them, each on a fresh session it opens and registers as driver of
//!   (`POST /api/v1/sessions` and `registerDriver` inside the unit).
//!
//! The bench profile strips symbols (`strip = true` in the release
//! profile), so `--toggle-collect` would find no function and collect
//! nothing: build it with symbols, in a target dir of its own so the
//! stripped build is not overwritten.
//!
//! ```text
//! CARGO_TARGET_DIR=target/cg CARGO_PROFILE_BENCH_STRIP=none CARGO_PROFILE_BENCH_DEBUG=1 \
//!     cargo bench -p engine --bench turn_cost --no-run
//! TURN_COST_PHASE=text TURN_COST_UNITS=400 valgrind --tool=callgrind \
//!     --toggle-collect='engine::Engine::handle_input' target/cg/release/deps/turn_cost-<hash>
//! ```
//!
//! Instructions per unit = collected Ir ÷ units, minus the same run with
//! `TURN_COST_UNITS=0` (session setup) divided likewise. With
//! `TURN_COST_LIMITS=1` the provider entry has a `retry` table and a
//! `limits` table with all three limits (never reached): the limiter's
//! cost per call is the difference. Without valgrind
//! it prints wall time per unit, for orientation only.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use common::{anthropic_text, anthropic_tool_use, config, Harness};
use serde_json::json;

const UNITS_PER_SESSION: usize = 20;

fn main() {
    let units: usize = std::env::var("TURN_COST_UNITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let phase = std::env::var("TURN_COST_PHASE").unwrap_or_else(|_| "both".into());
    let mut cfg = config();
    if std::env::var_os("TURN_COST_LIMITS").is_some() {
        // The provider-traffic tables at their costliest: every call asks
        // for a slot through all three buckets (never full here).
        cfg.providers[0].limits = Some(engine::provider_limits::EntryLimits {
            max_concurrent: Some(64),
            requests_per_minute: Some(1_000_000),
            input_tokens_per_minute: Some(1_000_000_000),
            max_wait_ms: 60_000,
        });
        cfg.providers[0].retry = Some(engine::RetryPolicy::default());
    }
    let mut h = Harness::new(cfg);
    if phase == "text" || phase == "both" {
        let t0 = Instant::now();
        run(&mut h, units, false);
        report("text turn", units, t0);
    }
    if phase == "tool" || phase == "both" {
        let t0 = Instant::now();
        run(&mut h, units, true);
        report("client-tool round trip", units, t0);
    }
    if let Some(tools) = match phase.as_str() {
        "kit-text" => Some(false),
        "kit-tool" => Some(true),
        _ => None,
    } {
        let t0 = Instant::now();
        run_kit(&mut h, units, tools);
        report("kit unit", units, t0);
    }
}

/// `units` kit units on one client key: each opens a session, registers
/// as its driver and runs one text turn or client-tool round trip.
fn run_kit(h: &mut Harness, units: usize, tools: bool) {
    let body = if tools {
        json!({"tools": [{"name": "get_time", "input_schema": {"type": "object"}}]})
    } else {
        json!({})
    };
    // The profile and client key are made once, outside every unit.
    let (key, _, _) = h.open_session(&["get_time"], body.clone());
    for i in 0..units {
        let (s, o) = h.client("POST", "/api/v1/sessions", &key, Some(&body));
        assert_eq!(s, 201, "{o}");
        let sid = o["session_id"].as_str().unwrap().to_string();
        let skey = o["session_key"].as_str().unwrap().to_string();
        let reg = json!({"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver"});
        let f = h.rpc(&sid, &skey, &reg);
        assert_eq!(f[0]["result"]["registered"], true);
        unit(h, &sid, &skey, i, tools);
    }
}

fn report(what: &str, units: usize, t0: Instant) {
    let per = t0.elapsed().as_secs_f64() * 1e6 / units.max(1) as f64;
    println!("{what}: {units} units, {per:.1} us per unit (harness included)");
}

/// `units` units; sessions are opened up front so that a run with
/// `units = 0` measures exactly the setup the others share.
fn run(h: &mut Harness, units: usize, tools: bool) {
    let sessions = units.div_ceil(UNITS_PER_SESSION).max(1);
    let body = if tools {
        json!({"tools": [{"name": "get_time", "input_schema": {"type": "object"}}]})
    } else {
        json!({})
    };
    let opened: Vec<(String, String)> = (0..sessions)
        .map(|_| {
            let (_key, sid, skey) = h.open_session(&["get_time"], body.clone());
            let reg = json!({"jsonrpc": "2.0", "id": 1, "method": "session.registerDriver"});
            let f = h.rpc(&sid, &skey, &reg);
            assert_eq!(f[0]["result"]["registered"], true);
            (sid, skey)
        })
        .collect();
    for i in 0..units {
        let (sid, skey) = &opened[i / UNITS_PER_SESSION];
        unit(h, sid, skey, i, tools);
    }
}

/// One text turn, or one client-tool round trip, on an open session.
fn unit(h: &mut Harness, sid: &str, skey: &str, i: usize, tools: bool) {
    let send = |content: serde_json::Value| {
        json!({"jsonrpc": "2.0", "id": 2, "method": "session.sendMessage",
               "params": {"message": {"role": "user", "content": content}}})
    };
    if !tools {
        h.replies.push_back(anthropic_text("the answer"));
        let f = h.rpc(sid, skey, &send(json!(format!("hello {i}"))));
        assert_eq!(f.last().unwrap()["result"]["message"]["role"], "assistant");
        return;
    }
    let id = format!("tu_{i}");
    h.replies.push_back(anthropic_tool_use(json!([
        {"type": "tool_use", "id": id, "name": "get_time", "input": {}}
    ])));
    let f = h.rpc(sid, skey, &send(json!(format!("time {i}?"))));
    let blocks = &f.last().unwrap()["result"]["message"]["content"];
    assert_eq!(blocks[0]["type"], "tool_use", "the turn pauses");
    h.replies.push_back(anthropic_text("it is noon"));
    let result = json!([{"type": "tool_result", "tool_use_id": id, "content": "12:00"}]);
    let f = h.rpc(sid, skey, &send(result));
    let text = &f.last().unwrap()["result"]["message"]["content"][0]["type"];
    assert_eq!(text, "text", "the resume completes");
}
