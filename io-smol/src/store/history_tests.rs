//! The stored form of `provider.request` payloads, without SQLite: every
//! payload must come back byte for byte, and a growing history must add
//! only its new elements.
#![allow(clippy::single_range_in_vec_init)] // chunk ranges, not their ords

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::*;

/// An in-memory chunk table and the store's per-session state.
#[derive(Default)]
struct Sim {
    chunks: BTreeMap<i64, String>,
    known: SessionKnown,
    stored: Vec<(String, String)>,
}

impl Sim {
    /// Stores one payload; returns its stored form.
    fn store(&mut self, payload: &str) -> String {
        let next = self.chunks.keys().next_back().map_or(0, |o| o + 1);
        let stored = match compact(payload, &mut self.known, next) {
            Some(c) => {
                for (ord, ch) in (next..).zip(c.chunks) {
                    assert_eq!(ch.ord, ord, "chunks are numbered densely");
                    assert!(self.chunks.insert(ch.ord, ch.body).is_none());
                }
                c.payload
            }
            None => escape(payload).unwrap_or_else(|| payload.to_string()),
        };
        self.stored.push((payload.to_string(), stored.clone()));
        stored
    }

    fn read(&self, stored: &str) -> String {
        match header(stored).unwrap() {
            Some(h) => expand(stored, &h, |o| self.chunks.get(&o).map(String::as_str)).unwrap(),
            None => stored.to_string(),
        }
    }

    /// Every stored payload reads back as the original, and is JSON when
    /// the original is.
    fn check_all(&self) {
        for (original, stored) in &self.stored {
            assert_eq!(&self.read(stored), original, "stored as {stored}");
            if serde_json::from_str::<Value>(original).is_ok() {
                serde_json::from_str::<Value>(stored)
                    .unwrap_or_else(|e| panic!("stored form is not JSON ({e}): {stored}"));
            }
        }
        for body in self.chunks.values() {
            assert!(serde_json::from_str::<Value>(body).unwrap().is_array());
        }
    }

    /// What a restart rebuilds from the newest stored form.
    fn rebuilt(&self) -> SessionKnown {
        let mut known: SessionKnown = [None, None];
        let Some((_, stored)) = self.stored.last() else {
            return known;
        };
        if let Some(h) = header(stored).unwrap() {
            for (m, ranges) in h.refs {
                let bodies = ranges
                    .iter()
                    .cloned()
                    .flatten()
                    .map(|o| (o, self.chunks[&o].as_str()));
                known[m] = Known::from_chunks(bodies);
            }
        }
        known
    }

    fn chunk_bytes(&self) -> usize {
        self.chunks.values().map(String::len).sum()
    }
}

/// A payload in the engine's member order.
fn request(messages: &[Value], tools: &[Value], extra: Option<(&str, Value)>) -> String {
    let mut p = serde_json::Map::new();
    p.insert("attempt".into(), json!(0));
    p.insert("kind".into(), json!("primary"));
    p.insert("provider".into(), json!("anthropic"));
    p.insert("base_url".into(), json!("http://127.0.0.1:1"));
    p.insert("model".into(), json!("m"));
    p.insert("max_tokens".into(), json!(1024));
    p.insert("messages".into(), Value::Array(messages.to_vec()));
    p.insert("tools".into(), Value::Array(tools.to_vec()));
    if let Some((k, v)) = extra {
        p.insert(k.into(), v);
    }
    Value::Object(p).to_string()
}

fn msg(role: &str, i: usize) -> Value {
    json!({"role": role, "content": [{"type": "text", "text": format!("{role} message {i}: \"q\" \\ é \u{2028} ],[ {{}}")}]})
}

fn tool(name: &str) -> Value {
    json!({"name": name, "description": "d", "input_schema": {"type": "object"}})
}

fn ranges_of(stored: &str) -> Vec<(usize, Vec<Range<i64>>)> {
    header(stored).unwrap().map(|h| h.refs).unwrap_or_default()
}

#[test]
fn a_growing_history_stores_each_message_once() {
    let mut sim = Sim::default();
    let tools = [tool("get_time"), tool("search")];
    let mut history = vec![msg("user", 0)];
    for turn in 0..300 {
        let stored = sim.store(&request(&history, &tools, None));
        // The row is the small members plus one range per shared member.
        assert!(
            stored.len() < 260,
            "turn {turn}: {} bytes: {stored}",
            stored.len()
        );
        let refs = ranges_of(&stored);
        assert_eq!(refs.len(), 2, "{stored}");
        // The tools' chunk (ord 1) sits between the first two of the messages.
        let expected = if turn == 0 {
            vec![0..1]
        } else {
            vec![0..1, 2..turn as i64 + 2]
        };
        assert_eq!(refs[0], (0, expected), "{stored}");
        assert_eq!(
            refs[1],
            (1, vec![1..2]),
            "tools stay in their first chunk: {stored}"
        );
        history.push(msg("assistant", turn));
        history.push(msg("user", turn + 1));
    }
    sim.check_all();
    // Messages (and the tools) are stored once: the chunks add only the
    // brackets and commas of the chunk arrays.
    let last = serde_json::to_string(&history[..history.len() - 2]).unwrap();
    let tools_len = serde_json::to_string(&tools).unwrap().len();
    assert!(
        sim.chunk_bytes() <= last.len() + tools_len + 2 * 301,
        "{}",
        sim.chunk_bytes()
    );
    assert_eq!(
        sim.known,
        sim.rebuilt(),
        "a restart rebuilds the same state"
    );
}

#[test]
fn a_repeated_request_adds_no_chunk() {
    let mut sim = Sim::default();
    let history = [msg("user", 0), msg("assistant", 0), msg("user", 1)];
    let a = sim.store(&request(&history, &[], None));
    let n = sim.chunks.len();
    // A fallback attempt: same messages, other small members.
    let fallback = request(&history, &[], Some(("purpose", json!("compaction"))));
    let b = sim.store(&fallback);
    assert_eq!(sim.chunks.len(), n);
    assert_eq!(ranges_of(&a), ranges_of(&b));
    // Empty tools stay inline.
    assert!(b.contains(r#""tools":[]"#), "{b}");
    sim.check_all();
}

#[test]
fn a_changed_message_reuses_the_whole_chunks_before_it() {
    let mut sim = Sim::default();
    let mut history = vec![msg("user", 0)];
    for turn in 0..5 {
        sim.store(&request(&history, &[], None));
        history.push(msg("assistant", turn));
        history.push(msg("user", turn + 1));
    }
    // Chunks: [u0], [a0,u1], [a1,u2], [a2,u3], [a3,u4]. Change u3 (the
    // Anthropic normaliser merging a steer into it, say).
    history[6] = json!({"role": "user", "content": "merged"});
    let stored = sim.store(&request(&history, &[], None));
    // [u0] [a0,u1] [a1,u2] kept; the new chunk holds a2, merged u3, a3, u4
    // and the two new messages.
    assert_eq!(ranges_of(&stored)[0], (0, vec![0..3, 5..6]), "{stored}");
    let body: Value = serde_json::from_str(&sim.chunks[&5]).unwrap();
    assert_eq!(body.as_array().unwrap().len(), 6);
    // The next one extends that.
    history.push(msg("assistant", 9));
    let stored = sim.store(&request(&history, &[], None));
    assert_eq!(ranges_of(&stored)[0], (0, vec![0..3, 5..7]), "{stored}");
    sim.check_all();
    assert_eq!(sim.known, sim.rebuilt());
}

#[test]
fn too_many_ranges_start_a_snapshot() {
    let mut sim = Sim::default();
    let mut history = vec![msg("user", 0)];
    let mut snapshots = 0;
    for turn in 0..100 {
        // Every other turn rewrites the newest message already sent, which
        // drops the newest chunk: the chunk before it stays in use, so the
        // ranges fragment.
        if turn % 2 == 1 {
            let n = history.len();
            history[n - 3] = json!({"role": "user", "content": format!("rewritten {turn}")});
        }
        let stored = sim.store(&request(&history, &[], None));
        let ranges = &ranges_of(&stored)[0].1;
        assert!(ranges.len() <= MAX_RANGES, "{stored}");
        if ranges.len() == 1 && turn > 0 && ranges[0].end - ranges[0].start == 1 {
            snapshots += 1;
        }
        history.push(msg("assistant", turn));
        history.push(msg("user", turn + 1));
    }
    assert!(snapshots >= 4, "{snapshots} snapshots");
    sim.check_all();
    assert_eq!(sim.known, sim.rebuilt());
}

#[test]
fn a_compacted_history_starts_over() {
    let mut sim = Sim::default();
    let mut history = vec![msg("user", 0)];
    for turn in 0..10 {
        sim.store(&request(&history, &[], None));
        history.push(msg("assistant", turn));
        history.push(msg("user", turn + 1));
    }
    let summary = vec![
        json!({"role": "user", "content": "summary"}),
        msg("user", 99),
    ];
    let stored = sim.store(&request(&summary, &[], None));
    assert_eq!(ranges_of(&stored)[0], (0, vec![10..11]), "{stored}");
    sim.check_all();
}

#[test]
fn changed_tools_get_a_new_chunk() {
    let mut sim = Sim::default();
    let history = vec![msg("user", 0)];
    sim.store(&request(&history, &[tool("a")], None));
    let stored = sim.store(&request(&history, &[tool("a"), tool("b")], None));
    // Tool `a` is reused (whole chunk), `b` is new.
    assert_eq!(ranges_of(&stored)[1], (1, vec![1..3]), "{stored}");
    let stored = sim.store(&request(&history, &[tool("b")], None));
    assert_eq!(ranges_of(&stored)[1], (1, vec![3..4]), "{stored}");
    sim.check_all();
}

#[test]
fn payloads_that_are_not_requests_are_stored_as_they_are() {
    let mut sim = Sim::default();
    let msgs = r#"[{"role":"user","content":"x"}]"#;
    for payload in [
        "{not json".to_string(),
        "".to_string(),
        "[1,2]".to_string(),
        "{}".to_string(),
        r#"{"attempt":0}"#.to_string(),
        r#"{"messages":"text"}"#.to_string(),
        r#"{"messages":[]}"#.to_string(),
        r#"{"messages":null,"tools":{}}"#.to_string(),
        format!(r#"{{"messages":{msgs},"messages":{msgs}}}"#),
        format!(r#"{{"messages":{msgs}}} trailing"#),
        format!(r#"{{"messages":{msgs}"#),
        format!(r#" {{"messages":{msgs}}}"#),
        r#"{"messages":[ {"role":"user"} ]}"#.to_string(),
        r#"{"messages":[{"role":"user"}, {"role":"user"}]}"#.to_string(),
        r#"{"messages":[{"role":"user"},]}"#.to_string(),
        r#"{"messages":[{"role":"user"}],"tools":[01]}"#.to_string(),
    ] {
        let stored = sim.store(&payload);
        assert_eq!(stored, payload, "stored verbatim");
    }
    assert!(sim.chunks.is_empty());
    sim.check_all();
}

#[test]
fn odd_but_valid_objects_round_trip() {
    let mut sim = Sim::default();
    for payload in [
        r#"{"messages":[1]}"#,
        r#"{ "messages" : [1,2] , "tools":[3] }"#,
        "{\"messages\":[{\"a\":\"\\u00e9\\/\"}],\"tools\":[ 1 ]}\n",
        r#"{"x":{"messages":[1]},"messages":[[],{},"",0,-1.5e3,true,false,null]}"#,
        // A payload that looks like a stored form.
        r#"{"bae_chunks":{"messages":[[0,1]]},"messages":null}"#,
        r#"{"bae_chunks":{},"messages":[9]}"#,
        r#"{"bae_chunks":1}"#,
        r#"{"bae_chunks":"#,
    ] {
        sim.store(payload);
    }
    sim.check_all();
    // Only members in canonical form became chunks.
    let (_, s) = &sim.stored[2];
    assert!(s.contains(r#""tools":[ 1 ]"#), "{s}");
}

#[test]
fn a_broken_stored_form_is_an_error() {
    let mut sim = Sim::default();
    let stored = sim.store(&request(&[msg("user", 0)], &[], None));
    let h = header(&stored).unwrap().unwrap();
    let err = expand(&stored, &h, |_| None).unwrap_err();
    assert!(err.contains("chunk 0 is missing"), "{err}");
    let err = expand(&stored, &h, |_| Some("[]")).unwrap_err();
    assert!(err.contains("malformed"), "{err}");
    for bad in [
        r#"{"bae_chunks":{"messages":[[1,0]]},"messages":null}"#,
        r#"{"bae_chunks":{"other":[[0,1]]},"messages":null}"#,
        r#"{"bae_chunks":{"messages":[]},"messages":null}"#,
        r#"{"bae_chunks":[],"messages":null}"#,
        r#"{"bae_chunks":{}"#,
    ] {
        assert!(header(bad).is_err(), "{bad}");
    }
    // A header naming a member the payload does not have.
    let bad = r#"{"bae_chunks":{"tools":[[0,1]]},"messages":null}"#;
    let h = header(bad).unwrap().unwrap();
    assert!(expand(bad, &h, |o| sim.chunks.get(&o).map(String::as_str)).is_err());
}

/// xorshift64*: deterministic pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

fn random_value(rng: &mut Rng, depth: u32) -> Value {
    const TEXTS: [&str; 8] = [
        "",
        "a",
        "\"",
        "\\",
        "],[",
        "é\u{1}\u{2028}",
        "null",
        "{\"k\":1}",
    ];
    match rng.below(if depth > 2 { 4 } else { 7 }) {
        0 => json!(TEXTS[rng.below(8) as usize]),
        1 => json!(rng.below(1000) as i64 - 500),
        2 => json!(rng.below(3) == 0),
        3 => json!(rng.below(1_000_000) as f64 / 7.0),
        4 => Value::Null,
        5 => Value::Array(
            (0..rng.below(3))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut m = serde_json::Map::new();
            for i in 0..rng.below(3) {
                m.insert(
                    format!("k{i}{}", TEXTS[rng.below(8) as usize]),
                    random_value(rng, depth + 1),
                );
            }
            Value::Object(m)
        }
    }
}

/// Random histories, edits, tools and restarts: every stored form reads
/// back exactly, and a state rebuilt from the chunks stores like the kept
/// one.
#[test]
fn random_sessions_round_trip() {
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut sim = Sim::default();
        let mut history: Vec<Value> = vec![random_value(&mut rng, 0)];
        let mut tools: Vec<Value> = vec![];
        for _ in 0..120 {
            match rng.below(10) {
                0 if !history.is_empty() => {
                    let i = rng.below(history.len() as u64) as usize;
                    history[i] = random_value(&mut rng, 0);
                }
                1 => history.truncate(rng.below(3) as usize),
                2 => tools.push(random_value(&mut rng, 1)),
                3 => tools.clear(),
                4 => {}
                _ => {
                    for _ in 0..1 + rng.below(3) {
                        history.push(random_value(&mut rng, 0));
                    }
                }
            }
            if rng.below(8) == 0 {
                sim.known = sim.rebuilt();
            }
            let extra = (rng.below(4) == 0).then(|| ("normalized", random_value(&mut rng, 1)));
            sim.store(&request(&history, &tools, extra));
            for (m, k) in sim.known.iter().enumerate() {
                if let Some(k) = k {
                    assert_eq!(
                        k.chunks.iter().map(|c| c.1).sum::<usize>(),
                        k.ends.len(),
                        "{m}"
                    );
                }
            }
        }
        sim.check_all();
        assert_eq!(sim.known, sim.rebuilt(), "seed {seed}");
    }
}

#[test]
fn the_cache_forgets_least_recently_used_sessions() {
    let mut sim = Sim::default();
    sim.store(&request(&[msg("user", 0)], &[], None));
    let entry = sim.known.clone();
    let mut cache = HistoryCache::new(10_000);
    for i in 0..100 {
        cache.put(&format!("ses_{i}"), entry.clone());
    }
    assert!(cache.len() < 100 && cache.len() > 10, "{}", cache.len());
    assert!(cache.bytes <= 10_000);
    // The newest are kept.
    assert!(cache.take("ses_99").is_some());
    assert!(cache.take("ses_0").is_none());
    cache.forget("ses_98");
    assert!(cache.take("ses_98").is_none());
}
