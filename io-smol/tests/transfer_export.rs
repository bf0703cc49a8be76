//! Exports and imports over the real binary (docs/extensions.md, "Forks,
//! exports and imports"): a session exported from a SQLite server,
//! imported into a PostgreSQL server and back keeps every event, and a new
//! turn on each copy sends the provider the same request; every malformed
//! document is refused and leaves the database as it was; importing twice
//! gives two sessions, keeping the id is refused; a 10,000-event export is
//! streamed in bounded server memory; an imported session reads like any
//! other to a reference-SDK-style reader.

mod live_support;
mod transfer_support;

use live_support::*;
use serde_json::{json, Value};
use testkit::fixtures::{self, provider_toml};
use testkit::{MockProvider, Reply, Server};
use transfer_support::*;

fn config(mock: &MockProvider) -> String {
    provider_toml(&[("main", "anthropic", &mock.base_url, "claude-x", "t1")])
}

/// A SQLite server (even in the PostgreSQL pass: an empty URL is unset).
fn sqlite_server(mock: &MockProvider) -> Server {
    Server::start(opts(&config(mock)).env("BAE_DATABASE_URL", ""))
}

/// A profile allowing `get_time` and a client key of it: (profile, key id,
/// key).
fn target(server: &Server) -> (String, String, String) {
    let profile = fixtures::create_profile_json(
        server,
        &json!({"name": fixtures::unique_name("p"), "primary_provider": "main", "allowed_tools": ["get_time"]}),
    );
    let (key_id, key) = fixtures::create_key(server, &profile);
    (profile, key_id, key)
}

/// A session with a text turn, a tool round trip, a join and a compaction.
fn rich_session(mock: &MockProvider, server: &Server) -> Fixture {
    let f = open_registered(
        server,
        "main",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    mock.push(Reply::text("hello"));
    send(server, &f.session_id, &f.a, json!("hi"));
    mock.push(Reply::tool_use("tu_1", "get_time", json!({})));
    send(server, &f.session_id, &f.a, json!("time?"));
    mock.push(Reply::text("noon"));
    send(
        server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_1", "12:00")]),
    );
    f.join(server, json!({}));
    mock.push(Reply::text("the summary"));
    let (_, done) = rpc(
        server,
        &f.session_id,
        &f.a.session_key,
        "session.compact",
        json!({}),
    );
    assert_eq!(done["result"]["event_type"], "session.compaction.completed");
    mock.push(Reply::text("after"));
    send(server, &f.session_id, &f.a, json!("after the summary"));
    f
}

/// Imports `doc` for a new client key of `server`: the session's client.
#[track_caller]
fn import_as(server: &Server, doc: &str) -> (String, Client) {
    let (_, key_id, key) = target(server);
    let (s, answer) = import(server, &format!("client_key_id={key_id}"), doc.as_bytes());
    assert_eq!(s, 201, "{answer}");
    let c = Client {
        key_id,
        client_key: key,
        session_key: answer["session_key"].as_str().unwrap().into(),
    };
    let sid = answer["session_id"].as_str().unwrap().to_string();
    fixtures::register_driver(server, &sid, &c.session_key);
    (sid, c)
}

/// The next text turn's provider request body.
#[track_caller]
fn next_request(mock: &MockProvider, server: &Server, sid: &str, c: &Client) -> Vec<u8> {
    mock.push(Reply::text("next"));
    let (_, t) = send(server, sid, c, json!("what next?"));
    assert!(t["result"].is_object(), "{t}");
    last_request(mock)
}

#[test]
fn sqlite_to_postgres_and_back_keeps_every_event_and_the_next_request() {
    let mock = MockProvider::start();
    let lite = sqlite_server(&mock);
    let cluster = testkit::pg::PgCluster::start();
    let db = cluster.create_database();
    let pg = Server::start(opts(&config(&mock)).env("BAE_DATABASE_URL", cluster.app_url(&db)));
    let f = rich_session(&mock, &lite);
    let source = admin_events(&lite, &f.session_id);
    let doc = export(&lite, &f.session_id);
    let (on_pg, pc) = import_as(&pg, &doc);
    let back_doc = export(&pg, &on_pg);
    let (back, bc) = import_as(&lite, &back_doc);
    let kept_of = |evs: &[Value]| evs.iter().map(kept).collect::<Vec<_>>();
    // Every event, then each copy's own registration (import_as).
    let copy = admin_events(&pg, &on_pg);
    assert_eq!(kept_of(&copy[..source.len()]), kept_of(&source));
    let again = admin_events(&lite, &back);
    assert_eq!(kept_of(&again[..source.len()]), kept_of(&source));
    // The compaction names the copy's own preamble and summary.
    let done = of_type(&copy, "session.compaction.completed")[0]["payload"].clone();
    let named = ids(&copy);
    assert!(named.contains(&done["preamble_event_id"].as_str().unwrap().to_string()));
    assert!(named.contains(&done["summary_event_id"].as_str().unwrap().to_string()));
    // The documents say where each came from.
    let header: Value = serde_json::from_str(back_doc.lines().next().unwrap()).unwrap();
    assert_eq!(header["session"]["origin"]["kind"], "import");
    assert_eq!(
        header["session"]["origin"]["source_session_id"],
        f.session_id.as_str()
    );
    let a = next_request(&mock, &lite, &f.session_id, &f.a);
    let b = next_request(&mock, &pg, &on_pg, &pc);
    let c = next_request(&mock, &lite, &back, &bc);
    assert_eq!(String::from_utf8_lossy(&a), String::from_utf8_lossy(&b));
    assert_eq!(a, c);
    assert!(String::from_utf8_lossy(&a).contains("the summary"));
}

/// Rows of every table a refused import could have touched.
fn counts(server: &Server) -> Vec<i64> {
    let conn = sqlite::open(server.db_path()).unwrap();
    [
        "SELECT COUNT(*) FROM sessions",
        "SELECT COUNT(*) FROM session_events",
        "SELECT COUNT(*) FROM keys",
        "SELECT COUNT(*) FROM bae_session_lineage",
    ]
    .iter()
    .map(|sql| {
        let mut st = conn.prepare(*sql).unwrap();
        st.next().unwrap();
        st.read::<i64, _>(0).unwrap()
    })
    .collect()
}

#[test]
fn every_malformed_document_is_refused_and_leaves_the_database_unchanged() {
    let mock = MockProvider::start();
    let server = sqlite_server(&mock);
    let f = open_registered(
        &server,
        "main",
        &[],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    mock.push(Reply::tool_use("tu_1", "get_time", json!({})));
    send(&server, &f.session_id, &f.a, json!("time?"));
    let paused = export(&server, &f.session_id);
    mock.push(Reply::text("noon"));
    send(
        &server,
        &f.session_id,
        &f.a,
        json!([tool_result("tu_1", "12:00")]),
    );
    let good = export(&server, &f.session_id);
    let lines: Vec<&str> = good.lines().collect();
    let (_, key_id, _) = target(&server);
    let q = format!("client_key_id={key_id}");
    let without = |pred: &dyn Fn(&str) -> bool| {
        let kept: Vec<&str> = lines.iter().copied().filter(|l| !pred(l)).collect();
        let n = kept.len() - 2;
        let mut doc = kept[..kept.len() - 1].join("\n");
        doc.push_str(&format!("\n{{\"kind\":\"end\",\"events\":{n}}}\n"));
        doc
    };
    let orphan_use =
        without(&|l| l.contains("\"tool_result\"") && l.contains("client.message.send"));
    let ownerless = paused.replacen(
        &format!(
            "\"client_key_id\":\"{}\",\"event_type\":\"server.message.send\"",
            f.a.key_id
        ),
        "\"client_key_id\":null,\"event_type\":\"server.message.send\"",
        1,
    );
    assert_ne!(ownerless, paused);
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "cut at a line",
            lines[..lines.len() - 3].join("\n"),
            "invalid_document",
        ),
        (
            "cut inside a line",
            good[..good.len() / 2].to_string(),
            "invalid_document",
        ),
        (
            "unknown format version",
            good.replacen("\"format_version\":1", "\"format_version\":2", 1),
            "unsupported_format_version",
        ),
        ("orphan tool_use", orphan_use, "invalid_document"),
        ("pause with no owner", ownerless, "invalid_document"),
        (
            "unknown event type",
            good.replacen(
                "\"event_type\":\"tool.call\"",
                "\"event_type\":\"tool.invoke\"",
                1,
            ),
            "invalid_document",
        ),
        ("not JSON Lines", "hello\n".into(), "invalid_document"),
    ];
    let before = counts(&server);
    for (what, doc, kind) in cases {
        let (s, p) = import(&server, &q, doc.as_bytes());
        assert_eq!((s, p["type"].as_str()), (422, Some(kind)), "{what}: {p}");
        assert!(
            p["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{what}"
        );
        assert_eq!(counts(&server), before, "{what} left something behind");
    }
    // The paused document itself is fine: its pause has an owner.
    let (s, p) = import(&server, &q, paused.as_bytes());
    assert_eq!(s, 201, "{p}");
    // Twice: two sessions; keeping the id: refused, it is taken here.
    let (s1, a) = import(&server, &q, good.as_bytes());
    let (s2, b) = import(&server, &q, good.as_bytes());
    assert_eq!((s1, s2), (201, 201));
    assert_ne!(a["session_id"], b["session_id"]);
    let before = counts(&server);
    let (s, p) = import(&server, &format!("{q}&keep_id=true"), good.as_bytes());
    assert_eq!(
        (s, p["type"].as_str()),
        (409, Some("session_exists")),
        "{p}"
    );
    assert_eq!(counts(&server), before);
}

#[test]
fn a_kept_id_moves_a_session_to_another_server() {
    let mock = MockProvider::start();
    let a = sqlite_server(&mock);
    let b = sqlite_server(&mock);
    let f = open_registered(&a, "main", &[], &[], json!({}));
    mock.push(Reply::text("hello"));
    send(&a, &f.session_id, &f.a, json!("hi"));
    let doc = export(&a, &f.session_id);
    let (_, key_id, _) = target(&b);
    let q = format!("client_key_id={key_id}&keep_id=true");
    let (s, answer) = import(&b, &q, doc.as_bytes());
    assert_eq!(s, 201, "{answer}");
    assert_eq!(answer["session_id"], f.session_id.as_str());
    let (s, p) = import(&b, &q, doc.as_bytes());
    assert_eq!((s, p["type"].as_str()), (409, Some("session_exists")));
    assert_eq!(admin_state(&b, &f.session_id), "open");
    // A closed session moves as a closed one.
    let r = a
        .client()
        .bearer(&f.a.session_key)
        .delete(&format!("/api/v1/sessions/{}", f.session_id));
    r.assert_status(200);
    let closed = export(&a, &f.session_id);
    let (s, answer) = import(&b, &format!("client_key_id={key_id}"), closed.as_bytes());
    assert_eq!(s, 201, "{answer}");
    assert_eq!(
        admin_state(&b, answer["session_id"].as_str().unwrap()),
        "closed"
    );
    let (s, p) = admin_fork(&a, &f.session_id, "fork", json!({}));
    assert_eq!(
        (s, p["type"].as_str()),
        (409, Some("fork_point_incomplete")),
        "{p}"
    );
    let (s, _) = admin_fork(&a, &f.session_id, "rewind", json!({"after_turn": 1}));
    assert_eq!(s, 201, "a closed session forks before its close");
}

/// `VmRSS` or `VmHWM` of a process, in KiB.
fn vm(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The server's memory while it streams a 10,000-event export: its peak
/// resident set grows by no more than 8 MB over what it held before. (A
/// bound on memory, not on time; the figures are printed on stderr.)
#[test]
fn a_10000_event_export_is_streamed_in_bounded_memory() {
    let mock = MockProvider::start();
    let mut server = sqlite_server(&mock);
    let shape = testkit::export_doc::Shape {
        turns: 2_500,
        text: 200,
        window: 40,
    };
    let doc = testkit::export_doc::session(shape);
    let (_, key_id, _) = target(&server);
    let (s, answer) = import(&server, &format!("client_key_id={key_id}"), doc.as_bytes());
    assert_eq!(s, 201, "{answer}");
    assert_eq!(answer["events"], 10_002);
    let sid = answer["session_id"].as_str().unwrap().to_string();
    // A fresh process: nothing of the import left in its heap.
    server.restart();
    let pid = server.pid().unwrap();
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset the peak RSS");
    let before = vm(pid, "VmRSS:");
    let out = export(&server, &sid);
    let peak = vm(pid, "VmHWM:");
    assert_eq!(out.lines().count(), 10_002 + 2);
    assert_eq!(
        out.len(),
        doc.len() + out.lines().next().unwrap().len() - doc.lines().next().unwrap().len()
    );
    let growth = peak.saturating_sub(before);
    eprintln!(
        "export of {} bytes: RSS {before} KiB before, peak {peak} KiB (+{growth} KiB)",
        out.len()
    );
    assert!(growth <= 8 * 1024, "RSS grew by {growth} KiB");
}

#[test]
fn a_reference_sdk_style_reader_reads_an_imported_session() {
    let mock = MockProvider::start();
    let server = sqlite_server(&mock);
    let f = rich_session(&mock, &server);
    let doc = export(&server, &f.session_id);
    let (sid, c) = import_as(&server, &doc);
    mock.push(Reply::tool_use("tu_2", "get_time", json!({})));
    let mut s = send_stream(&server, &sid, &c, json!("time again?"));
    let (_, terminal) = sdk_read_stream(&mut s);
    let terminal = terminal.expect("terminal frame");
    assert_eq!(
        terminal["result"]["message"]["content"][0]["dispatch"],
        "client"
    );
    mock.push(Reply::text("still noon"));
    let mut s = send_stream(&server, &sid, &c, json!([tool_result("tu_2", "12:01")]));
    let (_, terminal) = sdk_read_stream(&mut s);
    assert_eq!(
        text_of(&terminal.unwrap()["result"]["message"]),
        "still noon"
    );
    let all = sdk_read_session(&server, &sid, &c.session_key);
    assert!(all.iter().all(|e| e["session_id"] == sid.as_str()));
    let tree = server
        .admin()
        .get(&format!("/admin/v1/sessions/{sid}/lineage"))
        .json();
    assert_eq!(tree["origin"]["kind"], "import");
    assert_eq!(tree["origin"]["source_session_id"], f.session_id.as_str());
}
