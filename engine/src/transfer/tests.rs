//! The transfer component driven in-process against a `MemStore`: the
//! export's pages and back-pressure, a document read back (and every way
//! one is refused), forks at each kind of point.

use proto::wire::problem::ProblemType;
use proto::wire::{CompactionConfig, EventType};
use serde_json::{json, Value};

use super::*;
use crate::mem_store::MemStore;
use crate::store::{EventRow, ReadResult, SessionRow, SessionState, StoreWrite};

const S: &str = "ses_00000000000000000000000000000001";
const KEY: &str = "key_00000000000000000000000000000001";

fn eid(n: usize) -> String {
    format!("evt_{n:032x}")
}

/// A store holding session [`S`] with `events` in order (seq = index + 1).
fn store(events: &[(EventType, Value)]) -> MemStore {
    let mut m = MemStore::default();
    m.apply(&StoreWrite::InsertSession(session_row()));
    for (i, (t, p)) in events.iter().enumerate() {
        m.apply(&StoreWrite::InsertEvent(EventRow {
            seq: i as u64 + 1,
            id: eid(i + 1),
            session_id: S.into(),
            client_key_id: Some(KEY.into()),
            event_type: t.as_str().into(),
            payload: p.to_string(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
        }));
    }
    m
}

fn session_row() -> SessionRow {
    SessionRow {
        id: S.into(),
        client_key_id: KEY.into(),
        profile_id: "pro_1".into(),
        state: SessionState::Open,
        client_version: Some("1.0".into()),
        client_tools: json!({KEY: [{"name": "get_time", "description": null, "input_schema": {}}]})
            .to_string(),
        sandbox_tools: "{}".into(),
        subagent_tools: "{}".into(),
        compaction: Some(r#"{"mode":"client"}"#.into()),
        created_at: "2026-01-01T00:00:00.000Z".into(),
        closed_at: None,
    }
}

fn open() -> (EventType, Value) {
    (
        EventType::SessionOpen,
        json!({"client_version": "1.0", "tools": ["get_time"]}),
    )
}

fn user(text: &str) -> (EventType, Value) {
    (
        EventType::ClientMessageSend,
        json!({"role": "user", "content": text}),
    )
}

fn answer(text: &str) -> (EventType, Value) {
    let content = json!([{"type": "text", "text": text}]);
    (
        EventType::ServerMessageSend,
        json!({"role": "assistant", "content": content}),
    )
}

fn pause() -> (EventType, Value) {
    let block = json!({"type": "tool_use", "id": "tu_1", "name": "get_time", "input": {}, "dispatch": "client"});
    (
        EventType::ServerMessageSend,
        json!({"role": "assistant", "content": [block]}),
    )
}

fn results() -> (EventType, Value) {
    let block = json!({"type": "tool_result", "tool_use_id": "tu_1", "content": "noon"});
    (
        EventType::ClientMessageSend,
        json!({"role": "user", "content": [block]}),
    )
}

fn plain(t: EventType) -> (EventType, Value) {
    (t, json!({"attempt": 0}))
}

fn turn(text: &str) -> Vec<(EventType, Value)> {
    vec![
        user(text),
        plain(EventType::ProviderRequest),
        plain(EventType::ProviderResponse),
        answer(text),
    ]
}

/// Runs outputs against the store until none asks for a read; `flush`
/// empties the connection after every chunk. Returns the outputs that are
/// not reads and the bytes sent.
fn drive(t: &mut Transfers, m: &MemStore, mut outs: Vec<Out>, flush: bool) -> (Vec<Out>, Vec<u8>) {
    let conn = crate::ConnId(1);
    let (mut done, mut bytes) = (Vec::new(), Vec::new());
    let mut unflushed = 0;
    while let Some(out) = (!outs.is_empty()).then(|| outs.remove(0)) {
        match out {
            Out::Read(r) => outs.extend(t.read_done(conn, Ok(m.read(&r)), unflushed)),
            Out::Chunk(c) => {
                bytes.extend(&c);
                unflushed += c.len();
                if flush {
                    unflushed = 0;
                    outs.extend(t.flushed(conn, 0));
                }
            }
            other => done.push(other),
        }
    }
    (done, bytes)
}

/// The JSON Lines of a chunked body.
fn dechunk(mut raw: &[u8]) -> String {
    let mut out = Vec::new();
    while !raw.is_empty() {
        let line = raw.iter().position(|b| *b == b'\n').unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..line - 1]).unwrap(), 16).unwrap();
        out.extend(&raw[line + 1..line + 1 + size]);
        raw = &raw[line + 1 + size + 2..];
    }
    String::from_utf8(out).unwrap()
}

fn export(m: &MemStore) -> String {
    let mut t = Transfers::new(1 << 20);
    let start = ExportStart {
        session: session_row(),
        profile: None,
        server_version: "0.1.0".into(),
        exported_at: "2026-01-02T00:00:00.000Z".into(),
    };
    let outs = t.export(crate::ConnId(1), start);
    let (done, bytes) = drive(&mut t, m, outs, true);
    assert!(matches!(done[0], Out::StreamHead(_)));
    assert!(matches!(done.last(), Some(Out::Finish)));
    dechunk(&bytes)
}

fn target(keep_id: bool) -> ImportTarget {
    ImportTarget {
        creator: "key_00000000000000000000000000000009".into(),
        profile_id: "pro_9".into(),
        keep_id,
    }
}

fn log(extra: &[(EventType, Value)]) -> Vec<(EventType, Value)> {
    let mut events = vec![open()];
    events.extend(turn("a"));
    events.extend(extra.iter().cloned());
    events
}

/// An export reads back as the same events, and carries the creator's
/// declarations to the importing key.
#[test]
fn an_export_reads_back_as_the_same_session() {
    let m = store(&log(&[user("b"), pause()]));
    let doc = export(&m);
    assert_eq!(doc.lines().count(), 1 + 7 + 1);
    let plan = import::read_document(doc.as_bytes(), &target(false)).unwrap();
    assert_eq!(plan.events.len(), 7);
    for (e, row) in plan.events.iter().zip(m.events.values()) {
        assert_eq!(e.source_id, row.id);
        assert_eq!(e.payload, row.payload);
        assert_eq!(e.event_type.as_str(), row.event_type);
        assert_eq!(e.client_key_id, row.client_key_id);
    }
    assert_eq!(plan.declarations.tools[0]["name"], "get_time");
    assert_eq!(plan.compaction, CompactionConfig::default());
    assert_eq!(plan.client_version.as_deref(), Some("1.0"));
    assert_eq!(plan.keep_id, None);
    let kept = import::read_document(doc.as_bytes(), &target(true)).unwrap();
    assert_eq!(kept.keep_id.as_deref(), Some(S));
}

/// Pages follow the connection: with nothing flushed, one page waits for
/// room; every page is taken in order once the bytes drain.
#[test]
fn export_pages_wait_for_the_connection() {
    let mut events = vec![open()];
    for i in 0..300 {
        events.extend(turn(&format!("{i}: {}", "x".repeat(400))));
    }
    let m = store(&events);
    let mut t = Transfers::new(1 << 20);
    let start = ExportStart {
        session: session_row(),
        profile: None,
        server_version: "0.1.0".into(),
        exported_at: "2026-01-02T00:00:00.000Z".into(),
    };
    let outs = t.export(crate::ConnId(1), start);
    let (_, first) = drive(&mut t, &m, outs, false);
    assert!(
        first.len() < export::PAGE_BYTES + 64 * 1024,
        "{}",
        first.len()
    );
    assert!(
        t.has(crate::ConnId(1)),
        "the export waits for the connection"
    );
    let outs = t.flushed(crate::ConnId(1), 0);
    assert!(matches!(outs[..], [Out::Read(_)]));
    let (done, rest) = drive(&mut t, &m, outs, true);
    assert!(matches!(done.last(), Some(Out::Finish)));
    let mut all = first;
    all.extend(rest);
    let doc = dechunk(&all);
    assert_eq!(doc.lines().count(), 1 + events.len() + 1);
    assert!(doc.ends_with(&format!(
        "{{\"kind\":\"end\",\"events\":{}}}\n",
        events.len()
    )));
}

fn refusal(doc: &str) -> (ProblemType, String) {
    import::read_document(doc.as_bytes(), &target(false)).unwrap_err()
}

/// Every malformed document is refused with a problem naming why.
#[test]
fn malformed_documents_are_refused() {
    let good = export(&store(&log(&[])));
    let lines: Vec<&str> = good.lines().collect();
    let join = |ls: &[&str]| ls.join("\n");
    let cases: Vec<(String, ProblemType, &str)> = vec![
        (
            join(&lines[..lines.len() - 1]),
            ProblemType::InvalidDocument,
            "no end line",
        ),
        (
            join(&lines[..3]),
            ProblemType::InvalidDocument,
            "no end line",
        ),
        (
            join(&[&lines[..3], &lines[lines.len() - 1..]].concat()),
            ProblemType::InvalidDocument,
            "announces 5 events",
        ),
        (
            good[..good.len() - 10].to_string(),
            ProblemType::InvalidDocument,
            "line 7",
        ),
        (
            good.replacen("\"format_version\":1", "\"format_version\":2", 1),
            ProblemType::UnsupportedFormatVersion,
            "format_version 2",
        ),
        (
            good.replacen("provider.request", "provider.prompt", 1),
            ProblemType::InvalidDocument,
            "unknown event type \"provider.prompt\"",
        ),
        (String::new(), ProblemType::InvalidDocument, "empty"),
        (
            format!("{}\n{}", lines[0], lines[2]),
            ProblemType::InvalidDocument,
            "session.open",
        ),
        (
            format!("{good}{}", lines[1]),
            ProblemType::InvalidDocument,
            "after the end line",
        ),
    ];
    for (doc, kind, needle) in cases {
        let (k, detail) = refusal(&doc);
        assert_eq!(k, kind, "{detail}");
        assert!(detail.contains(needle), "{needle:?} not in {detail:?}");
    }
}

/// The log's rules: an orphan tool_use or tool_result, a pause with no
/// owner.
#[test]
fn documents_breaking_the_log_rules_are_refused() {
    let orphan_use = export(&store(&log(&[user("b"), pause(), user("no results")])));
    assert!(refusal(&orphan_use).1.contains("has no tool_result"));
    let orphan_result = export(&store(&log(&[results()])));
    assert!(refusal(&orphan_result).1.contains("answers no tool_use"));
    let paused = export(&store(&log(&[user("b"), pause()])));
    let ownerless = paused.replace(
        &format!("\"client_key_id\":\"{KEY}\",\"event_type\":\"server.message.send\""),
        "\"client_key_id\":null,\"event_type\":\"server.message.send\"",
    );
    assert!(refusal(&ownerless).1.contains("owner"), "{ownerless}");
    let answered = export(&store(&log(&[user("b"), pause(), results(), answer("x")])));
    assert!(import::read_document(answered.as_bytes(), &target(false)).is_ok());
}

fn fork(m: &MemStore, at: At) -> Out {
    let mut t = Transfers::new(1 << 20);
    let start = ForkStart {
        parent_id: S.into(),
        at,
        declarations: Declarations::default(),
        client_version: None,
        compaction: CompactionConfig::default(),
        creator: KEY.into(),
        profile_id: "pro_1".into(),
        admin: true,
    };
    let outs = t.fork(crate::ConnId(1), start);
    let (mut done, _) = drive(&mut t, m, outs, true);
    assert_eq!(done.len(), 1);
    assert!(!t.has(crate::ConnId(1)));
    done.remove(0)
}

/// The copied events of a fork, and the event it was made after.
fn forked(out: Out) -> (Vec<String>, String, Option<Value>) {
    let Out::Create(plan) = out else {
        panic!("not created: {out:?}");
    };
    let Answer::Fork {
        event_id, message, ..
    } = plan.answer
    else {
        panic!("a fork answer");
    };
    (
        plan.events.into_iter().map(|e| e.source_id).collect(),
        event_id,
        message,
    )
}

fn refused(out: Out) -> (ProblemType, String) {
    match out {
        Out::Problem(k, d) => (k, d),
        other => panic!("not refused: {other:?}"),
    }
}

/// Forks copy the log up to their point; the point must be complete.
#[test]
fn forks_stop_at_complete_points() {
    // 1 open, 2-5 turn a, 6-9 turn b, 10 user c, 11 pause, 12 results.
    let mut events = log(&turn("b"));
    events.extend([user("c"), pause(), results()]);
    let m = store(&events);
    let (ids, at, _) = forked(fork(&m, At::Event(eid(5))));
    assert_eq!((ids.len(), at), (5, eid(5)));
    let (ids, at, _) = forked(fork(&m, At::AfterTurn(2)));
    assert_eq!((ids.len(), at), (9, eid(9)));
    let (ids, _, _) = forked(fork(&m, At::AfterTurn(0)));
    assert_eq!(ids, [eid(1)]);
    let (ids, at, message) = forked(fork(&m, At::BeforeMessage(eid(6))));
    assert_eq!((ids.len(), at), (5, eid(5)));
    assert_eq!(message.unwrap()["content"], "b");
    // Inside turn b, and at the paused end: refused.
    let (k, d) = refused(fork(&m, At::Event(eid(7))));
    assert_eq!(k, ProblemType::ForkPointIncomplete, "{d}");
    assert!(d.contains("running turn"), "{d}");
    let (k, d) = refused(fork(&m, At::Event(eid(11))));
    assert_eq!(k, ProblemType::ForkPointIncomplete);
    assert!(d.contains("paused"), "{d}");
    assert_eq!(
        refused(fork(&m, At::Last)).0,
        ProblemType::ForkPointIncomplete
    );
    assert_eq!(
        refused(fork(&m, At::AfterTurn(3))).0,
        ProblemType::ForkPointIncomplete
    );
    assert_eq!(refused(fork(&m, At::AfterTurn(4))).0, ProblemType::NotFound);
    assert_eq!(
        refused(fork(&m, At::Event(eid(99)))).0,
        ProblemType::NotFound
    );
    assert_eq!(
        refused(fork(&m, At::BeforeMessage(eid(5)))).0,
        ProblemType::BadRequest
    );
    let (ids, _, message) = forked(fork(&m, At::BeforeMessage(eid(10))));
    assert_eq!(
        (ids.len(), message.unwrap()["content"].as_str()),
        (9, Some("c"))
    );
    let (k, d) = refused(fork(&m, At::BeforeMessage(eid(12))));
    assert_eq!(
        k,
        ProblemType::ForkPointIncomplete,
        "a continuation starts no turn"
    );
    assert!(d.contains("does not start a turn"), "{d}");
}

/// No fork after the session ended; an import keeps the ended state.
#[test]
fn an_ended_session_is_forked_before_its_end_and_imported_as_ended() {
    let close = (EventType::SessionClose, json!({"reason": "client_close"}));
    let m = store(&log(&[close]));
    let (k, d) = refused(fork(&m, At::Last));
    assert_eq!(k, ProblemType::ForkPointIncomplete);
    assert!(d.contains("ended"), "{d}");
    let (ids, _, _) = forked(fork(&m, At::AfterTurn(1)));
    assert_eq!(ids.len(), 5);
    let plan = import::read_document(export(&m).as_bytes(), &target(false)).unwrap();
    assert_eq!(plan.state, SessionState::Closed);
    assert_eq!(plan.closed_at.as_deref(), Some("2026-01-01T00:00:00.000Z"));
    let failed = (
        EventType::SessionError,
        json!({"reason": "all_providers_failed", "attempts": 1}),
    );
    let m = store(&log(&[user("b"), failed]));
    assert_eq!(
        refused(fork(&m, At::AfterTurn(2))).0,
        ProblemType::ForkPointIncomplete
    );
    let plan = import::read_document(export(&m).as_bytes(), &target(false)).unwrap();
    assert_eq!(plan.state, SessionState::Error);
}

/// A log longer than a page, and the copy limit.
#[test]
fn forks_read_every_page_and_keep_to_the_copy_limit() {
    let mut events = vec![open()];
    for i in 0..120 {
        events.extend(turn(&i.to_string()));
    }
    let m = store(&events);
    let (ids, at, _) = forked(fork(&m, At::Last));
    assert_eq!((ids.len(), at), (481, eid(481)));
    let mut t = Transfers::new(1000);
    let start = ForkStart {
        parent_id: S.into(),
        at: At::Last,
        declarations: Declarations::default(),
        client_version: None,
        compaction: CompactionConfig::default(),
        creator: KEY.into(),
        profile_id: "pro_1".into(),
        admin: false,
    };
    let outs = t.fork(crate::ConnId(1), start);
    let (done, _) = drive(&mut t, &m, outs, true);
    assert!(matches!(
        &done[..],
        [Out::Problem(ProblemType::PayloadTooLarge, _)]
    ));
}

/// The lineage walk lists ancestors parent first and the children.
#[test]
fn lineage_lists_ancestors_and_children() {
    use crate::store::{LineageRow, Origin};
    let mut m = MemStore::default();
    let fork = |child: &str, parent: &str| {
        StoreWrite::InsertLineage(LineageRow {
            session_id: child.into(),
            origin: Origin::Fork {
                parent_id: parent.into(),
                parent_event_id: "evt_x".into(),
            },
            created_at: "t".into(),
            copied_through: 0,
        })
    };
    m.apply(&fork("ses_b", "ses_a"));
    m.apply(&fork("ses_c", "ses_b"));
    m.apply(&fork("ses_d", "ses_c"));
    m.apply(&fork("ses_e", "ses_c"));
    let mut t = Transfers::new(1);
    let outs = t.lineage(crate::ConnId(1), "ses_c");
    let (done, _) = drive(&mut t, &m, outs, true);
    let [Out::Json(200, body)] = &done[..] else {
        panic!("{done:?}");
    };
    let v: Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["ancestors"], json!(["ses_b", "ses_a"]));
    assert_eq!(v["origin"]["parent_session_id"], "ses_b");
    let children: Vec<&str> = (v["children"].as_array().unwrap().iter())
        .map(|c| c["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(children, ["ses_d", "ses_e"]);
}

/// Keeping an id asks the store first; a taken one is refused.
#[test]
fn a_kept_id_must_be_free() {
    let m = store(&log(&[]));
    let doc = export(&m);
    let mut t = Transfers::new(1 << 20);
    let outs = t.import(crate::ConnId(1), doc.as_bytes(), &target(true));
    let (done, _) = drive(&mut t, &m, outs, true);
    assert!(
        matches!(&done[..], [Out::Problem(ProblemType::SessionExists, _)]),
        "{done:?}"
    );
    let outs = t.import(crate::ConnId(1), doc.as_bytes(), &target(true));
    let (done, _) = drive(&mut t, &MemStore::default(), outs, true);
    assert!(matches!(&done[..], [Out::Create(_)]));
    let outs = t.import(crate::ConnId(1), doc.as_bytes(), &target(false));
    assert!(matches!(&outs[..], [Out::Create(_)]));
    let _ = ReadResult::Events(Vec::new());
}
