//! HTTP codec micro-benchmarks (no harness, std::time::Instant only).
//!
//! `cargo bench -p proto --bench http_decode` runs the full iteration
//! counts; any other invocation (e.g. `cargo test --benches`) runs a quick
//! smoke pass.

use std::hint::black_box;
use std::time::Instant;

use proto::http::{
    encode_chunk, encode_response, encode_stream_head, Decoded, Limits, RequestDecoder, LAST_CHUNK,
};

fn rpc_request() -> Vec<u8> {
    let body = br#"{"jsonrpc":"2.0","id":42,"method":"session.sendMessage","params":{"content":[{"type":"text","text":"Summarise the last three tool results and propose a next step, please."}],"metadata":{"client":"bae-py"}}}"#;
    let mut raw = format!(
        "POST /api/v1/sessions/ses_01J9ZK3Q8T4V6X2M7N5P0R1S3W/rpc HTTP/1.1\r\n\
         Host: bae.internal:8080\r\n\
         User-Agent: bae-py/0.9.2 python/3.12\r\n\
         Accept: application/x-ndjson\r\n\
         Accept-Encoding: identity\r\n\
         Authorization: Bearer bae_ses_4f9c2a7e1b8d3c6f0a5e9b2d7c4f1a8e3b6d9c2f\r\n\
         Content-Type: application/json\r\n\
         X-Request-Id: 7d1e0c9a-5b3f-4e2a-9c8d-1f6b2a4e7c3d\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw
}

fn frame() -> Vec<u8> {
    br#"{"jsonrpc":"2.0","method":"session.event","params":{"id":1234,"session_id":"ses_01J9ZK3Q8T4V6X2M7N5P0R1S3W","type":"message.delta","created_at":"2025-01-01T00:00:00.000Z","data":{"index":0,"delta":{"type":"text","text":"Here is the summary you asked for: the three tool calls returned"}}}}"#
        .iter()
        .copied()
        .chain(std::iter::once(b'\n'))
        .collect()
}

fn bench(name: &str, iters: u64, bytes: usize, mut f: impl FnMut()) {
    for _ in 0..iters / 10 + 1 {
        f();
    }
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    let ns = start.elapsed().as_nanos() as f64 / iters as f64;
    let mbps = if bytes > 0 {
        bytes as f64 / ns * 1e3
    } else {
        0.0
    };
    println!("{name:<48} {ns:>10.0} ns/op  {mbps:>8.0} MB/s  ({bytes} B)");
}

fn decode_all(d: &mut RequestDecoder) -> usize {
    let mut n = 0;
    while let Ok(Some(item)) = d.poll() {
        if let Decoded::Request(r) = item {
            n += r.body.len() + 1;
        }
    }
    n
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let scale: u64 = if full { 1 } else { 1000 };
    let limits = Limits::default();

    let req = rpc_request();
    bench(
        "decode POST …/rpc (one feed)",
        200_000 / scale,
        req.len(),
        || {
            let mut d = RequestDecoder::new(limits);
            d.feed(black_box(&req));
            black_box(decode_all(&mut d));
        },
    );
    bench(
        "decode POST …/rpc (3 feeds)",
        200_000 / scale,
        req.len(),
        || {
            let mut d = RequestDecoder::new(limits);
            let (a, rest) = req.split_at(100);
            let (b, c) = rest.split_at(250);
            for piece in [a, b, c] {
                d.feed(black_box(piece));
                black_box(decode_all(&mut d));
            }
        },
    );
    bench(
        "decode POST …/rpc (1 byte per feed)",
        20_000 / scale,
        req.len(),
        || {
            let mut d = RequestDecoder::new(limits);
            for b in &req {
                d.feed(std::slice::from_ref(b));
                black_box(decode_all(&mut d));
            }
        },
    );
    let pipelined: Vec<u8> = (0..16)
        .flat_map(|_| b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".to_vec())
        .collect();
    bench(
        "decode 16 pipelined GET /healthz",
        50_000 / scale,
        pipelined.len(),
        || {
            let mut d = RequestDecoder::new(limits);
            d.feed(black_box(&pipelined));
            black_box(decode_all(&mut d));
        },
    );
    let mut big = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..63 {
        big.extend_from_slice(format!("X-Header-{i:02}: {}\r\n", "v".repeat(230)).as_bytes());
    }
    big.extend_from_slice(b"\r\n");
    bench(
        "decode ~15 KiB/63-header head, 1 byte per feed",
        200 / scale.min(100),
        big.len(),
        || {
            let mut d = RequestDecoder::new(limits);
            for b in &big {
                d.feed(std::slice::from_ref(b));
                black_box(decode_all(&mut d));
            }
        },
    );

    let frame = frame();
    let mut out = Vec::with_capacity(4096);
    bench(
        "encode_chunk NDJSON frame",
        2_000_000 / scale,
        frame.len(),
        || {
            out.clear();
            encode_chunk(black_box(&frame), &mut out);
            black_box(&out);
        },
    );
    bench(
        "encode_stream_head + frame + LAST_CHUNK",
        1_000_000 / scale,
        frame.len(),
        || {
            let mut out = encode_stream_head(200, "application/x-ndjson", false);
            encode_chunk(black_box(&frame), &mut out);
            out.extend_from_slice(LAST_CHUNK);
            black_box(out);
        },
    );
    let json = br#"{"version":"0.1.0","api_versions":["v1"]}"#;
    bench(
        "encode_response 200 JSON",
        1_000_000 / scale,
        json.len(),
        || {
            black_box(encode_response(
                200,
                Some("application/json"),
                &[],
                black_box(json),
                false,
            ));
        },
    );
}
