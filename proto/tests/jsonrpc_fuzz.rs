//! Deterministic randomized robustness test: decode_call, check_depth and the
//! params parsers never panic on arbitrary bytes or arbitrary JSON.

use proto::jsonrpc::*;
use serde_json::{json, Map, Value};

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

const KEYS: &[&str] = &[
    "jsonrpc",
    "id",
    "method",
    "params",
    "message",
    "role",
    "content",
    "prompt",
    "since_event_id",
    "tools",
    "name",
    "image",
    "command",
    "state",
    "unsandboxed",
    "container_id",
    "detail",
    "subagent_id",
    "harness",
    "model",
    "reason",
    "exit_code",
    "type",
    "text",
];

fn random_value(rng: &mut XorShift, depth: u32) -> Value {
    let choice = if depth > 4 {
        rng.below(6)
    } else {
        rng.below(9)
    };
    match choice {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => json!(rng.next() as i64),
        3 => json!((rng.next() % 1000) as f64 / 7.0),
        4 => Value::String(
            rng.pick(&["", " ", "2.0", "1.0", "running", "start", "x\"y", "é"])
                .to_string(),
        ),
        5 => Value::String(rng.pick(&METHODS).to_string()),
        6 | 7 => {
            let n = rng.below(5);
            let mut m = Map::new();
            for _ in 0..n {
                m.insert(rng.pick(KEYS).to_string(), random_value(rng, depth + 1));
            }
            Value::Object(m)
        }
        _ => Value::Array(
            (0..rng.below(4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
    }
}

fn exercise(body: &[u8]) {
    let _ = check_depth(body, 8);
    match decode_call_limited(body, 32) {
        Ok(call) => {
            assert_eq!(Method::parse(call.method.as_str()), Some(call.method));
            let _ = call.result_frame("{}");
            let p = &call.params;
            let _ = SendMessageParams::parse(p);
            let _ = CompactParams::parse(p);
            let _ = SubscribeParams::parse(p);
            if let Ok(u) = UpdateClientToolsParams::parse(p) {
                let _ = u.check_allowed(&["a".to_owned()]);
            }
            let _ = StartRemoteSandboxParams::parse(p);
            let _ = ExecRemoteSandboxParams::parse(p);
            if let Ok(r) = ReportLocalSandboxParams::parse(p) {
                let _ = r.payload();
            }
            if let Ok(r) = ReportLocalSubagentParams::parse(p) {
                let _ = r.payload();
            }
            let _ = CancelSubagentParams::parse(p);
        }
        Err(e) => {
            assert!([-32700, -32600, -32601].contains(&e.code));
            if let Some(f) = e.frame() {
                assert!(f.ends_with('\n'));
                let v: Value = serde_json::from_str(f.trim_end()).unwrap();
                assert_eq!(v["jsonrpc"], "2.0");
            } else {
                assert!(!e.always_answer && e.id.is_none());
            }
        }
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let alphabet = b"{}[]\":,\\ 0123456789.-+eEtruefalsnl\n\tabcxyz\xff\xc3\xa9";
    for _ in 0..20_000 {
        let len = rng.below(64) as usize;
        let body: Vec<u8> = (0..len).map(|_| *rng.pick(alphabet)).collect();
        exercise(&body);
    }
}

#[test]
fn random_json_envelopes_never_panic() {
    let mut rng = XorShift(0xDEAD_BEEF_CAFE_F00D);
    for _ in 0..20_000 {
        let mut env = Map::new();
        if rng.below(8) != 0 {
            env.insert(
                "jsonrpc".into(),
                if rng.below(6) == 0 {
                    random_value(&mut rng, 3)
                } else {
                    json!("2.0")
                },
            );
        }
        if rng.below(3) != 0 {
            env.insert("id".into(), random_value(&mut rng, 4));
        }
        if rng.below(10) != 0 {
            env.insert(
                "method".into(),
                if rng.below(8) == 0 {
                    random_value(&mut rng, 3)
                } else {
                    json!(rng.pick(&METHODS))
                },
            );
        }
        if rng.below(4) != 0 {
            env.insert("params".into(), random_value(&mut rng, 0));
        }
        let body = serde_json::to_vec(&Value::Object(env)).unwrap();
        exercise(&body);
        // Also mutate a byte of valid JSON.
        let mut mutated = body.clone();
        if !mutated.is_empty() {
            let i = rng.below(mutated.len() as u64) as usize;
            mutated[i] = rng.next() as u8;
            exercise(&mutated);
        }
    }
}
