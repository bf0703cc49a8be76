//! The SQLite store and the engine's in-memory reference store
//! (`engine::mem_store`, used by the simulator) must agree on every
//! snapshot and read after the same sequence of batches.

use std::path::PathBuf;

use engine::history_load;
use engine::mem_store::MemStore;
use engine::store::{
    EventRow, EventType, KeyRole, KeyRow, ProfileRow, ReadResult, SessionRow, SessionState,
    Snapshot, StoreRead, StoreWrite,
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

/// `sparse_usage`: responses that count are rare (the newest one is then
/// often several pages back).
fn random_write(
    rng: &mut Rng,
    seq: &mut u64,
    ids: &mut Vec<String>,
    sparse_usage: bool,
) -> StoreWrite {
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
            let (event_type, payload) = match rng.below(12) {
                0 | 1 => ("client.message.send", json!({"content": rng.below(100)})),
                2 | 3 => ("server.message.send", json!({"role": "assistant"})),
                // Mostly responses that do not count, so that finding the
                // newest usage often takes more than one page.
                4 | 9 | 10 | 11 => (
                    "provider.response",
                    match rng.below(if sparse_usage { 80 } else { 12 }) {
                        0..=3 | 12.. => json!({"ok": false, "status": 500}),
                        4..=7 => json!({"ok": true, "purpose": "compaction",
                                    "usage": {"input_tokens": 1, "output_tokens": 2}}),
                        8 => json!({"ok": true, "purpose": null, "usage": null}),
                        9 => {
                            json!({"ok": true, "usage": {"input_tokens": 1.5, "output_tokens": 2}})
                        }
                        10 => json!({"ok": true, "usage": {
                            "input_tokens": u64::MAX, "output_tokens": -1}}),
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
            // Now and then a payload that is not JSON at all.
            let payload = if rng.below(25) == 0 {
                "{not json".to_string()
            } else {
                payload.to_string()
            };
            StoreWrite::InsertEvent(EventRow {
                seq: *seq,
                id,
                session_id: session,
                client_key_id: Some((*rng.pick(&KEYS)).into()),
                event_type: event_type.into(),
                payload,
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

/// Types the random reads ask for (those the workload writes and one it
/// never does).
const READ_TYPES: [EventType; 7] = [
    EventType::ClientMessageSend,
    EventType::ServerMessageSend,
    EventType::ProviderResponse,
    EventType::SessionCompactionCompleted,
    EventType::SessionCompactionStarted,
    EventType::ToolCall,
    EventType::SessionClose,
];

#[test]
fn sqlite_store_matches_mem_store() {
    let mut max_pages = 0;
    let mut bounded = 0;
    let mut usage_kinds = [0usize; 3];
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
                .map(|_| random_write(&mut rng, &mut seq, &mut ids, seed > 3))
                .collect();
            conn.commit(&batch).unwrap();
            mem.commit(&batch);

            if round % 10 == 9 {
                same_snapshot(&conn.load_snapshot().unwrap(), &mem.snapshot());
            }
            for s in SESSIONS {
                let any_id = |rng: &mut Rng| {
                    if ids.is_empty() || rng.below(8) == 0 {
                        "evt_none".to_string()
                    } else {
                        rng.pick(&ids).clone()
                    }
                };
                let reads = [
                    StoreRead::LatestOfType {
                        session_id: s.into(),
                        event_type: *rng.pick(&READ_TYPES),
                        before_seq: match rng.below(3) {
                            0 => None,
                            _ => Some(rng.below(seq + 2)),
                        },
                        limit: rng.below(20) as usize,
                    },
                    StoreRead::EventById {
                        session_id: s.into(),
                        event_id: any_id(&mut rng),
                    },
                    StoreRead::OfTypesFrom {
                        session_id: s.into(),
                        event_types: (0..rng.below(4)).map(|_| *rng.pick(&READ_TYPES)).collect(),
                        from_seq: rng.below(seq + 2),
                    },
                    StoreRead::EventsAt {
                        session_id: s.into(),
                        seqs: {
                            let mut v: Vec<u64> =
                                (0..rng.below(5)).map(|_| rng.below(seq + 2)).collect();
                            v.sort_unstable();
                            v.dedup();
                            v
                        },
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
                // The engine's history rules over either store.
                let mut pages = 0;
                let from_sqlite = history_load::load(s, |r| {
                    if matches!(
                        r,
                        StoreRead::LatestOfType {
                            event_type: EventType::ProviderResponse,
                            ..
                        }
                    ) {
                        pages += 1;
                    }
                    conn.read(r).map_err(|e| e.to_string())
                });
                let from_mem = history_load::load(s, |r| Ok(mem.read(r)));
                assert_eq!(from_sqlite, from_mem, "seed {seed}: history of {s}");
                let h = from_mem.unwrap();
                max_pages = max_pages.max(pages);
                // A compaction bound cut the history.
                bounded += usize::from(h.messages.first().map(|m| m.0) != first_message(&mem, s));
                usage_kinds[match h.newest_usage {
                    None => 0,
                    Some(None) => 1,
                    Some(Some(_)) => 2,
                }] += 1;
            }
        }
        same_snapshot(&store.load_snapshot().unwrap(), &mem.snapshot());
    }
    // The workload reaches the paths it is meant to compare.
    assert!(
        max_pages >= 3,
        "usage paging seen: {max_pages} pages at most"
    );
    assert!(bounded > 0, "no history was cut by a compaction");
    assert!(
        usage_kinds.iter().all(|&n| n > 0),
        "usage outcomes {usage_kinds:?}"
    );
}

/// Seq of the session's first message event.
fn first_message(mem: &MemStore, s: &str) -> Option<u64> {
    let read = StoreRead::OfTypesFrom {
        session_id: s.into(),
        event_types: vec![EventType::ClientMessageSend, EventType::ServerMessageSend],
        from_seq: 0,
    };
    match mem.read(&read) {
        ReadResult::Events(rows) => rows.first().map(|r| r.seq),
        other => panic!("{other:?}"),
    }
}
