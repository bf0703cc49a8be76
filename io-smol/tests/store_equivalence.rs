//! The SQLite store and the engine's in-memory reference store
//! (`engine::mem_store`, used by the simulator) must agree on every
//! snapshot and read after the same sequence of batches.

use std::path::PathBuf;

use engine::mem_store::MemStore;
use engine::store::{
    EventRow, KeyRole, KeyRow, ProfileRow, SessionRow, SessionState, Snapshot, StoreRead,
    StoreWrite,
};
use io_smol::store::{Store, Synchronous};
use serde_json::{json, Value};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

fn temp_db(seed: u64) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("baesrv-equiv-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("bae.db")
}

const T: &str = "2026-01-01T00:00:00.000Z";
const SESSIONS: [&str; 3] = ["ses_a", "ses_b", "ses_c"];
const KEYS: [&str; 2] = ["key_1", "key_2"];

fn profile(name: &str) -> ProfileRow {
    ProfileRow {
        id: "pro_1".into(),
        name: name.into(),
        primary_provider: "p".into(),
        fallback_providers: vec!["q".into()],
        mcp_servers: vec![],
        allowed_tools: vec![json!("x")],
        available_sandboxes: vec![],
        created_at: T.into(),
        updated_at: T.into(),
        deleted_at: None,
    }
}

fn setup() -> Vec<StoreWrite> {
    let mut w = vec![StoreWrite::InsertProfile(profile("one"))];
    for k in KEYS {
        w.push(StoreWrite::InsertKey(KeyRow {
            id: k.into(),
            name: format!("label-{k}"),
            key_hash: "0".repeat(64),
            key_prefix: "bae_0000".into(),
            role: KeyRole::Client,
            profile_id: Some("pro_1".into()),
            client_id: None,
            created_at: T.into(),
            last_used_at: None,
            deleted_at: None,
        }));
    }
    for s in SESSIONS {
        w.push(StoreWrite::InsertSession(SessionRow {
            id: s.into(),
            client_key_id: "key_1".into(),
            profile_id: "pro_1".into(),
            state: SessionState::Open,
            client_version: None,
            client_tools: json!({"key_1": []}),
            sandbox_tools: json!({}),
            subagent_tools: json!({}),
            compaction: None,
            created_at: T.into(),
            closed_at: None,
        }));
    }
    w
}

fn random_write(rng: &mut Rng, seq: &mut u64, ids: &mut Vec<String>) -> StoreWrite {
    let session = (*rng.pick(&SESSIONS)).to_string();
    match rng.below(20) {
        0 => StoreWrite::SetSessionState {
            id: session,
            state: *rng.pick(&[
                SessionState::Open,
                SessionState::Closed,
                SessionState::Error,
            ]),
            closed_at: if rng.below(2) == 0 {
                Some(T.into())
            } else {
                None
            },
        },
        1 => StoreWrite::TouchKey {
            id: (*rng.pick(&KEYS)).into(),
            at: format!("2026-01-01T00:00:{:02}.000Z", rng.below(60)),
        },
        2 => StoreWrite::SetSessionTools {
            id: session,
            client_tools: json!({"key_1": [{"name": format!("t{}", rng.below(5))}]}),
            sandbox_tools: json!({}),
            subagent_tools: json!({"key_2": []}),
        },
        3 => StoreWrite::UpdateProfile(profile(&format!("name{}", rng.below(3)))),
        _ => {
            *seq += 1 + rng.below(3);
            let id = format!("evt_{:032x}", rng.next());
            let any_id = |rng: &mut Rng, ids: &Vec<String>| -> Value {
                match rng.below(4) {
                    0 => json!("evt_broken"),
                    1 => json!(42),
                    _ if ids.is_empty() => Value::Null,
                    _ => json!(rng.pick(ids)),
                }
            };
            let (event_type, payload) = match rng.below(9) {
                0 | 1 => ("client.message.send", json!({"content": rng.below(100)})),
                2 | 3 => ("server.message.send", json!({"role": "assistant"})),
                4 => (
                    "provider.response",
                    match rng.below(5) {
                        0 => json!({"ok": false, "status": 500}),
                        1 => json!({"ok": true, "purpose": "compaction",
                                    "usage": {"input_tokens": 1, "output_tokens": 2}}),
                        2 => json!({"ok": true, "usage": null}),
                        3 => {
                            json!({"ok": true, "usage": {"input_tokens": 1.5, "output_tokens": 2}})
                        }
                        _ => json!({"ok": true, "usage": {
                            "input_tokens": rng.below(1000), "output_tokens": rng.below(100)}}),
                    },
                ),
                5 => (
                    "session.compaction.completed",
                    json!({"preamble_event_id": any_id(rng, ids),
                           "summary_event_id": any_id(rng, ids)}),
                ),
                6 => ("session.driver.register", json!({})),
                7 => ("session.compaction.started", json!({})),
                _ => ("tool.call", json!({"id": "tu_1"})),
            };
            ids.push(id.clone());
            StoreWrite::InsertEvent(EventRow {
                seq: *seq,
                id,
                session_id: session,
                client_key_id: Some((*rng.pick(&KEYS)).into()),
                event_type: event_type.into(),
                payload: payload.to_string(),
                created_at: T.into(),
            })
        }
    }
}

fn same_snapshot(a: &Snapshot, b: &Snapshot) {
    assert_eq!(a.profiles, b.profiles);
    assert_eq!(a.keys, b.keys);
    assert_eq!(a.sessions, b.sessions);
    assert_eq!(a.max_event_seq, b.max_event_seq);
    assert_eq!(a.drivers, b.drivers);
    assert_eq!(a.event_counts, b.event_counts);
}

#[test]
fn sqlite_store_matches_mem_store() {
    for seed in 1..=6u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let store = Store::open(temp_db(seed), Synchronous::Normal).unwrap();
        store.migrate().unwrap();
        let mut conn = store.conn();
        let mut mem = MemStore::default();
        let batch = setup();
        conn.commit(&batch).unwrap();
        mem.commit(&batch);

        let mut seq = 0;
        let mut ids = Vec::new();
        for round in 0..60 {
            let n = 1 + rng.below(12);
            let batch: Vec<_> = (0..n)
                .map(|_| random_write(&mut rng, &mut seq, &mut ids))
                .collect();
            conn.commit(&batch).unwrap();
            mem.commit(&batch);

            if round % 10 == 9 {
                same_snapshot(&conn.load_snapshot().unwrap(), &mem.snapshot());
            }
            for s in SESSIONS {
                let reads = [
                    StoreRead::History {
                        session_id: s.into(),
                    },
                    StoreRead::Events {
                        session_id: s.into(),
                        after_seq: rng.below(seq + 1),
                        limit: 1 + rng.below(20) as usize,
                    },
                    StoreRead::EventSeq {
                        session_id: s.into(),
                        event_id: if ids.is_empty() {
                            "evt_none".into()
                        } else {
                            rng.pick(&ids).clone()
                        },
                    },
                ];
                for r in &reads {
                    assert_eq!(conn.read(r).unwrap(), mem.read(r), "seed {seed}: {r:?}");
                }
            }
        }
        same_snapshot(&store.load_snapshot().unwrap(), &mem.snapshot());
    }
}
