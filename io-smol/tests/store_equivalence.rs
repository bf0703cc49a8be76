//! The SQLite store, the PostgreSQL store and the engine's in-memory
//! reference store (`engine::mem_store`, used by the simulator) must agree
//! on every snapshot and read after the same sequence of batches.
//!
//! The PostgreSQL run starts a throwaway cluster (`testkit::pg`); it fails
//! loudly when the server binaries are missing.

use engine::history_load;
use engine::mem_store::MemStore;
use engine::store::{
    EventRow, EventType, KeyRole, KeyRow, LineageRow, Origin, ProfileRow, ReadResult, SessionRow,
    SessionState, Snapshot, SnapshotScope, StoreRead, StoreWrite,
};
use io_smol::store::pg::PgStore;
use io_smol::store::{Backend, Store, Synchronous};
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
            client_tools: json!({"key_1": []}).to_string(),
            sandbox_tools: json!({}).to_string(),
            subagent_tools: json!({}).to_string(),
            compaction: None,
            created_at: T.into(),
            closed_at: None,
        }));
    }
    // Session keys: every session one of key_1's, ses_b also one of key_2's.
    for (i, (s, client)) in [
        ("ses_a", "key_1"),
        ("ses_b", "key_1"),
        ("ses_b", "key_2"),
        ("ses_c", "key_1"),
    ]
    .into_iter()
    .enumerate()
    {
        w.push(StoreWrite::InsertKey(session_key(
            &format!("key_s{i}"),
            s,
            client,
        )));
    }
    w
}

fn session_key(id: &str, session: &str, client: &str) -> KeyRow {
    KeyRow {
        id: id.into(),
        name: session.into(),
        key_hash: "1".repeat(64),
        key_prefix: "bae_ses_".into(),
        role: KeyRole::Session,
        profile_id: Some("pro_1".into()),
        client_id: Some(client.into()),
        created_at: T.into(),
        last_used_at: None,
        deleted_at: None,
    }
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
            client_tools: json!({"key_1": [{"name": format!("t{}", rng.below(5))}]}).to_string(),
            sandbox_tools: json!({}).to_string(),
            subagent_tools: json!({"key_2": []}).to_string(),
        },
        3 => StoreWrite::UpdateProfile(profile(&format!("name{}", rng.below(3)))),
        // Session keys come and go (the revocation cascade's reads).
        4 => match rng.below(3) {
            0 => StoreWrite::RevokeKey {
                id: format!("key_s{}", rng.below(4)),
                at: T.into(),
            },
            1 => StoreWrite::RevokeSessionKeysOf {
                client_id: (*rng.pick(&KEYS)).into(),
                at: T.into(),
            },
            _ => {
                let client = KEYS[rng.below(2) as usize];
                let id = format!("key_n{:016x}", rng.next());
                StoreWrite::InsertKey(session_key(&id, &session, client))
            }
        },
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
    assert_eq!(a.stored_sessions, b.stored_sessions);
    assert_eq!(a.events_total, b.events_total);
    assert_eq!(a.quotas, b.quotas);
    assert_eq!(a.open_sessions, b.open_sessions);
}

/// `provider.request` payloads of growing, edited and reset histories
/// (stored with their histories shared by the SQLite store). Its own
/// random stream, so the rest of the workload is what it always was.
struct Requests {
    rng: Rng,
    history: Vec<Vec<Value>>,
    tools: Vec<Vec<Value>>,
}

impl Requests {
    fn new(seed: u64) -> Self {
        Requests {
            rng: Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1),
            history: vec![vec![]; SESSIONS.len()],
            tools: vec![vec![]; SESSIONS.len()],
        }
    }

    fn message(&mut self) -> Value {
        let n = self.rng.below(1000);
        let text = ["hi", "\"q\" \\ \u{2028}", "],[", "é"][self.rng.below(4) as usize];
        match self.rng.below(3) {
            0 => json!({"role": "user", "content": format!("{text} {n}")}),
            1 => json!({"role": "assistant", "content": [{"type": "text", "text": text}]}),
            _ => json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": n}]}),
        }
    }

    /// The next request of a random session; `keep` false: the session's
    /// history is left as it was (the row is for a batch that fails).
    fn next(&mut self, seq: u64, keep: bool) -> StoreWrite {
        let s = self.rng.below(SESSIONS.len() as u64) as usize;
        let (saved_h, saved_t) = (self.history[s].clone(), self.tools[s].clone());
        match self.rng.below(20) {
            0..=10 => {
                for _ in 0..1 + self.rng.below(3) {
                    let m = self.message();
                    self.history[s].push(m);
                }
            }
            11 | 12 if !self.history[s].is_empty() => {
                let i = self.rng.below(self.history[s].len() as u64) as usize;
                self.history[s][i] = self.message();
            }
            13 => self.history[s].truncate(self.rng.below(2) as usize),
            14 => self.tools[s].push(json!({"name": format!("t{}", self.rng.below(9))})),
            15 => self.tools[s].clear(),
            _ => {}
        }
        let payload = match self.rng.below(30) {
            0 => "{not json".to_string(),
            1 => json!({"attempt": 1, "messages": "x"}).to_string(),
            2 => format!(
                "{{\"messages\": {} }}",
                Value::Array(self.history[s].clone())
            ),
            _ => json!({
                "attempt": 0, "kind": "primary", "provider": "anthropic",
                "base_url": "http://127.0.0.1:1", "model": "m", "max_tokens": 64,
                "messages": self.history[s], "tools": self.tools[s],
            })
            .to_string(),
        };
        if !keep {
            (self.history[s], self.tools[s]) = (saved_h, saved_t);
        }
        StoreWrite::InsertEvent(EventRow {
            seq,
            id: format!("evt_req{seq:028x}"),
            session_id: SESSIONS[s].into(),
            client_key_id: Some(KEYS[0].into()),
            event_type: "provider.request".into(),
            payload,
            created_at: T.into(),
        })
    }
}

/// Types the random reads ask for (those the workload writes and one it
/// never does).
const READ_TYPES: [EventType; 8] = [
    EventType::ClientMessageSend,
    EventType::ServerMessageSend,
    EventType::ProviderResponse,
    EventType::SessionCompactionCompleted,
    EventType::SessionCompactionStarted,
    EventType::ToolCall,
    EventType::SessionClose,
    EventType::ProviderRequest,
];

#[test]
fn sqlite_store_matches_mem_store() {
    // Each seed's database, in a directory removed when the test is done.
    let dbs = std::cell::RefCell::new(std::collections::HashMap::new());
    store_matches_mem_store(
        |seed| {
            let db = testkit::TestPath::new("baesrv-equiv", "bae.db").unwrap();
            let store = Store::open(&db, Synchronous::Normal).unwrap();
            store.migrate().unwrap();
            dbs.borrow_mut().insert(seed, db);
            Backend::Sqlite(store)
        },
        |seed, _| {
            // The requests were stored with their histories shared.
            let raw = sqlite::open(&dbs.borrow()[&seed]).unwrap();
            let count = |sql: &str| {
                let mut st = raw.prepare(sql).unwrap();
                st.next().unwrap();
                st.read::<i64, _>(0).unwrap()
            };
            let shared = count(
                "SELECT COUNT(*) FROM session_events WHERE event_type = 'provider.request' \
                 AND payload LIKE '{\"bae_chunks\":{\"%'",
            );
            assert!(shared > 20, "seed {seed}: {shared} stored with chunks");
            assert!(count("SELECT COUNT(*) FROM bae_history_chunks") > 10);
        },
    );
}

/// The same workload on PostgreSQL, each seed on a fresh database, with
/// three reader connections answering the runs of reads in parallel.
#[test]
fn postgres_store_matches_mem_store() {
    let cluster = testkit::pg::PgCluster::start();
    store_matches_mem_store(
        |_| {
            let db = cluster.create_database();
            let url = io_smol::config::parse_env(|k| match k {
                "BAE_DATABASE_URL" => Some(cluster.app_url(&db)),
                _ => None,
            })
            .unwrap()
            .database;
            let io_smol::config::Database::Postgres { url, .. } = url else {
                panic!("not postgres")
            };
            let mut pg = PgStore::connect(&url).unwrap();
            pg.migrate().unwrap();
            pg.start_readers(4).unwrap();
            Backend::Postgres(Box::new(pg))
        },
        |_, _| {},
    );
}

fn store_matches_mem_store(mut open: impl FnMut(u64) -> Backend, after: impl Fn(u64, &Backend)) {
    let mut max_pages = 0;
    let mut bounded = 0;
    let mut usage_kinds = [0usize; 3];
    let mut copies_made = 0;
    for seed in 1..=6u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut store = open(seed);
        let mut conn = store.worker();
        let mut mem = MemStore::default();
        let batch = setup();
        conn.commit(&batch).unwrap();
        mem.commit(&batch);

        let mut seq = 0;
        let mut ids = Vec::new();
        let mut requests = Requests::new(seed);
        let mut lrng = Rng(seed.wrapping_mul(0xA24B_AED4_963E_E407) | 1);
        let mut copies: Vec<&str> = Vec::new();
        for round in 0..60 {
            let n = 1 + rng.below(12);
            let mut batch: Vec<_> = (0..n)
                .map(|_| random_write(&mut rng, &mut seq, &mut ids, seed > 3))
                .collect();
            for _ in 0..requests.rng.below(4) {
                seq += 1;
                batch.push(requests.next(seq, true));
            }
            // Forks of the sessions and imports (the lineage side table),
            // from a random stream of their own (the rest of the workload
            // is what it always was).
            if lrng.below(3) == 0 {
                let origin = match lrng.below(3) {
                    0 => Origin::Import {
                        source_session_id: format!("ses_src{round}"),
                    },
                    _ => Origin::Fork {
                        parent_id: (*lrng.pick(&SESSIONS)).into(),
                        parent_event_id: format!("evt_{round}"),
                    },
                };
                // Now and then one of the read sessions becomes a copy of
                // everything so far: the registrations up to here are its
                // parent's, and no store recovers them (issue 38).
                let copy = SESSIONS.iter().find(|s| !copies.contains(*s));
                let (session_id, copied_through) = match copy {
                    Some(s) if lrng.below(4) == 0 => {
                        copies.push(s);
                        (s.to_string(), seq)
                    }
                    _ => (format!("ses_f{round}"), lrng.below(seq + 1)),
                };
                batch.push(StoreWrite::InsertLineage(LineageRow {
                    session_id,
                    origin,
                    created_at: T.into(),
                    copied_through,
                }));
            }
            // Quotas set, replaced and removed (a stream of their own).
            let mut qrng = Rng((seed * 1000 + round).wrapping_mul(0x94D0_49BB_1331_11EB) | 1);
            if qrng.below(4) == 0 {
                let id = format!("key_{}", qrng.below(3));
                let scope = match qrng.below(2) {
                    0 => engine::store::QuotaScope::Key(id),
                    _ => engine::store::QuotaScope::Profile(id),
                };
                batch.push(match qrng.below(3) {
                    0 => StoreWrite::DeleteQuota(scope),
                    n => StoreWrite::PutQuota(engine::store::QuotaRow {
                        scope,
                        quota: format!("{{\"max_open_sessions\":{n}}}"),
                        updated_at: T.into(),
                    }),
                });
            }
            conn.commit(&batch).unwrap();
            mem.commit(&batch);
            // Now and then a batch that fails in SQLite (a rowid already
            // taken) after storing a request, or a new connection handle
            // (nothing remembered): neither may change what is read.
            match requests.rng.below(6) {
                0 if seq > 0 => {
                    let failing = vec![
                        requests.next(seq + 1, false),
                        StoreWrite::InsertEvent(EventRow {
                            seq, // the newest committed event
                            id: "evt_dup".into(),
                            session_id: SESSIONS[0].into(),
                            client_key_id: None,
                            event_type: "tool.call".into(),
                            payload: "{}".into(),
                            created_at: T.into(),
                        }),
                    ];
                    assert!(conn.commit(&failing).is_err());
                }
                1 => {
                    drop(conn);
                    conn = store.worker();
                }
                _ => {}
            }

            if round % 10 == 9 {
                for scope in [SnapshotScope::Full, SnapshotScope::Lazy] {
                    let got = conn.load_snapshot(scope).unwrap();
                    same_snapshot(&got, &mem.snapshot_of(scope));
                }
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
                    StoreRead::EventsPage {
                        session_id: s.into(),
                        after_seq: rng.below(seq + 1),
                        limit: 1 + rng.below(20) as usize,
                        // Byte bounds that cut pages of these events.
                        max_bytes: match rng.below(3) {
                            0 => usize::MAX,
                            _ => rng.below(4000) as usize,
                        },
                    },
                    StoreRead::ReplayPage {
                        session_id: s.into(),
                        after_seq: rng.below(seq + 1),
                        limit: 1 + rng.below(20) as usize,
                        // Byte bounds that cut pages of these events.
                        max_bytes: match rng.below(3) {
                            0 => usize::MAX,
                            _ => rng.below(4000) as usize,
                        },
                    },
                    StoreRead::EventSeq {
                        session_id: s.into(),
                        event_id: if ids.is_empty() {
                            "evt_none".into()
                        } else {
                            rng.pick(&ids).clone()
                        },
                    },
                    StoreRead::LoadSession {
                        session_id: if rng.below(6) == 0 { "ses_none" } else { s }.into(),
                        drivers_since: rng.below(seq + 2),
                    },
                    StoreRead::SessionsOfClient {
                        client_id: (*rng.pick(&KEYS)).into(),
                        drivers_since: rng.below(seq + 2),
                    },
                    StoreRead::SessionList {
                        after: rng.below(4),
                        limit: rng.below(4) as usize,
                        state: match rng.below(4) {
                            0 => Some(SessionState::Open),
                            1 => Some(SessionState::Closed),
                            _ => None,
                        },
                    },
                ];
                let extra = [
                    StoreRead::ExportPage {
                        session_id: s.into(),
                        after_seq: lrng.below(seq + 1),
                        limit: 1 + lrng.below(20) as usize,
                        max_bytes: match lrng.below(3) {
                            0 => usize::MAX,
                            _ => lrng.below(4000) as usize,
                        },
                    },
                    StoreRead::Lineage {
                        session_id: match lrng.below(4) {
                            0 => format!("ses_f{}", lrng.below(round + 1)),
                            _ => s.into(),
                        },
                        children: lrng.below(2) == 0,
                    },
                ];
                for r in reads.iter().chain(&extra) {
                    assert_eq!(conn.read(r).unwrap(), mem.read(r), "seed {seed}: {r:?}");
                }
                // The same reads as one run (PostgreSQL: on the readers).
                for (r, got) in reads.iter().zip(conn.read_many(reads.to_vec())) {
                    assert_eq!(got.unwrap(), mem.read(r), "seed {seed}: run {r:?}");
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
                    conn.read(r)
                        .map_err(|e| engine::ReadError::Store(e.to_string()))
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
        copies_made += copies.len();
        drop(conn);
        for scope in [SnapshotScope::Full, SnapshotScope::Lazy] {
            same_snapshot(
                &store.load_snapshot(scope).unwrap(),
                &mem.snapshot_of(scope),
            );
        }
        after(seed, &store);
    }
    // The workload reaches the paths it is meant to compare.
    assert!(
        max_pages >= 3,
        "usage paging seen: {max_pages} pages at most"
    );
    assert!(bounded > 0, "no history was cut by a compaction");
    assert!(
        copies_made >= 6,
        "{copies_made} read sessions became copies"
    );
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
