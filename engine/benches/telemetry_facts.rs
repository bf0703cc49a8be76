//! Engine-thread cost of telemetry (spec 04 §7.1) per text turn: the facts
//! one `sendMessage` turn records (its request span with status, the turn
//! with its session link, one provider attempt) plus the driver's drain,
//! on the telemetry component alone, against the same calls with telemetry
//! off. The engine's whole turn costs ~100 µs (history_growth), so this is
//! the share telemetry adds to it.
//!
//! Run: `cargo bench -p engine --bench telemetry_facts`.

use std::hint::black_box;
use std::time::Instant;

use engine::ids::{CallId, ConnId, TurnId};
use engine::telemetry::{Fact, Telemetry, TurnEnd};
use engine::{Listener, ProviderEntry};

const TURNS: u64 = 200_000;

fn one_run(enabled: bool, entry: &ProviderEntry) -> f64 {
    let mut t = Telemetry::new(enabled);
    let mut out: Vec<Fact> = Vec::new();
    let session = "ses_0123456789abcdef0123456789abcdef";
    let path = format!("/api/v1/sessions/{session}/rpc");
    t.session_open(session, "prof_0123456789abcdef0123456789abcdef", "key_1");
    let start = Instant::now();
    for i in 0..TURNS {
        let conn = ConnId(1 + i % 64);
        t.http_begin(conn, Listener::Client, "POST", &path, None);
        t.turn_begin(TurnId(i), Some(conn), (session, "prof_x", "key_1"), false);
        t.attempt_begin(CallId(i), TurnId(i), Some(conn), entry, 0);
        t.drain_into(&mut out);
        black_box(&out);
        out.clear();
        t.attempt_end(CallId(i), true);
        t.turn_end(TurnId(i), session, TurnEnd::Completed);
        t.http_status(conn, 200);
        t.http_end(conn);
        t.drain_into(&mut out);
        black_box(&out);
        out.clear();
    }
    start.elapsed().as_nanos() as f64 / TURNS as f64
}

fn main() {
    let entry = ProviderEntry {
        name: "main".into(),
        kind: proto::provider::Kind::Anthropic,
        base_url: "http://127.0.0.1:9".into(),
        model: "claude-bench".into(),
        auth_template: "${TOKEN}".into(),
        max_tokens: 1024,
        retry: None,
        limits: None,
        cache: None,
        prices: None,
        stream: None,
    };
    // The minimum of several runs: the box is shared, and descheduling
    // only ever adds time.
    let best = |on| (0..7).map(|_| one_run(on, &entry)).fold(f64::MAX, f64::min);
    let (off, on) = (best(false), best(true));
    println!("telemetry facts of one text turn: off {off:.1} ns, on {on:.1} ns (min of 7 runs of {TURNS} turns)");
}
