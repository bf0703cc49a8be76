//! The streamed-reply assembler's cost per event (no harness,
//! std::time::Instant only; docs/performance.md, "Streaming").
//!
//! `cargo bench -p proto --bench stream_assemble` runs the full iteration
//! counts; any other invocation runs a quick smoke pass.

use std::hint::black_box;
use std::time::Instant;

use proto::provider::stream::{encode, Assembler, StreamLimits};
use proto::provider::Kind;

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (rounds, per_round) = if full { (7, 50) } else { (1, 1) };
    // 2,000 one-character text deltas, as bench_stream's CPU row.
    let body = serde_json::json!({"id": "m", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": "x".repeat(2000)}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 5}});
    let events = encode::events(Kind::Anthropic, &body, 1);
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..per_round {
            let mut a = Assembler::new(Kind::Anthropic, StreamLimits::default());
            let mut out = Vec::new();
            for ev in &events {
                a.feed(black_box(ev.as_bytes()), &mut out).expect("event");
                out.clear();
            }
            black_box(a.finish().expect("reply"));
        }
        best = best.min(t.elapsed().as_secs_f64() / per_round as f64);
    }
    println!(
        "anthropic stream, {} events: {:.3} ms per reply, {:.2} µs per event",
        events.len(),
        best * 1e3,
        best * 1e6 / events.len() as f64
    );
}
