//! Streamed provider replies over the real binary (`stream = true` on a
//! `[[providers.entries]]` entry; extension `turn.deltas`, docs/extensions.md),
//! against testkit's mock provider streaming both wire formats. Runs under
//! both runtimes (`BAE_TEST_RUNTIME=threads` for `baesrv-threads`). The
//! faults of a streamed primary (cut, malformed, in-stream error, pings
//! only, silence, size limit) are tested in-process in
//! `engine/tests/streaming_flows.rs`.

mod live_support;

use std::time::{Duration, Instant};

use live_support::*;
use serde_json::{json, Value};
use testkit::mock_provider::StreamTiming;
use testkit::{MockProvider, Reply, RpcStream, Server};

/// One registry entry: `(name, kind, extra TOML lines)`.
fn config(mock: &MockProvider, entries: &[(&str, &str, &str)]) -> String {
    let mut out = String::new();
    for (name, kind, extra) in entries {
        out.push_str(&format!(
            "[[providers.entries]]\nname = \"{name}\"\nprovider = \"{kind}\"\nbase_url = \"{}\"\n\
             model = \"mock-model\"\nauth_token = \"tok\"\n{extra}\n\n",
            mock.base_url
        ));
    }
    out
}

const STREAM: &str = "stream = true";

fn server(mock: &MockProvider, entries: &[(&str, &str, &str)]) -> Server {
    Server::start(opts(&config(mock, entries)))
}

/// `registerDriver` with `extensions`.
fn register(server: &Server, f: &Fixture, c: &Client, extensions: &[&str]) {
    let (_, t) = rpc(
        server,
        &f.session_id,
        &c.session_key,
        "session.registerDriver",
        json!({"extensions": extensions}),
    );
    assert_eq!(t["result"]["registered"], true, "{t}");
}

/// A session on a profile whose chain is `chain`, its creator registered
/// with `extensions`, declaring the client tool `get_time`.
fn session(server: &Server, chain: &[&str], extensions: &[&str]) -> Fixture {
    let f = open(
        server,
        chain[0],
        &chain[1..],
        &["get_time"],
        json!({"tools": [tool("get_time")]}),
    );
    register(server, &f, &f.a, extensions);
    f
}

/// Every frame of a stream until its terminal one: (notifications,
/// terminal).
fn drain(s: &mut RpcStream) -> (Vec<Value>, Value) {
    let mut notes: Vec<Value> = Vec::new();
    let t0 = Instant::now();
    loop {
        let Some(f) = s.next_frame(WAIT) else {
            let tail: Vec<String> = notes
                .iter()
                .rev()
                .take(3)
                .map(|n| n.to_string().chars().take(200).collect())
                .collect();
            panic!(
                "stream ended without a terminal frame after {:?}, {} frames; last: {tail:?}",
                t0.elapsed(),
                notes.len()
            );
        };
        if f.get("id").is_some() {
            return (notes, f);
        }
        notes.push(f);
    }
}

fn deltas(notes: &[Value]) -> Vec<Value> {
    (notes.iter())
        .filter(|n| n["method"] == "session.delta")
        .map(|n| n["params"].clone())
        .collect()
}

fn discards(notes: &[Value]) -> Vec<Value> {
    (notes.iter())
        .filter(|n| n["method"] == "session.delta_discard")
        .map(|n| n["params"].clone())
        .collect()
}

/// The text of the deltas of block `index` of kind `kind` of `request`.
fn joined(deltas: &[Value], request: &str, index: u64, kind: &str) -> String {
    (deltas.iter())
        .filter(|d| d["request"] == request && d["index"] == index && d["kind"] == kind)
        .map(|d| d["text"].as_str().unwrap().to_string())
        .collect()
}

/// The log with what differs between two runs of the same turns removed
/// (ids, times, keys, the mock's per-request message id).
fn comparable(events: &[Value]) -> Vec<Value> {
    (events.iter())
        .map(|e| {
            let mut p = e["payload"].clone();
            if let Some(body) = p.get_mut("body").and_then(Value::as_object_mut) {
                body.remove("id");
            }
            if let Some(base) = p.get_mut("base_url") {
                *base = Value::Null;
            }
            json!({"event_type": e["event_type"], "payload": p})
        })
        .collect()
}

fn paced() -> StreamTiming {
    StreamTiming {
        first_token: Duration::from_millis(20),
        per_token: Duration::from_millis(2),
        token_chars: 3,
        ping_every: Some(Duration::from_millis(5)),
    }
}

/// A text turn and a tool turn with its pause and resume, once unstreamed
/// and once streamed: the logs are the same event for event, and the
/// deltas add up to the final text and tool input.
fn same_log_streamed_or_not(kind: &str) {
    let mock = MockProvider::start();
    mock.set_stream_timing(paced());
    let server = server(&mock, &[("plain", kind, ""), ("streamed", kind, STREAM)]);
    let input = json!({"zone": "Europe/Paris", "precise": true, "n": [1, 2]});
    let script = [
        Reply::text("Hello from a stream: \"quoted\", 日本語, 🦀.\nDone."),
        Reply::ToolUse {
            text: Some("Checking the clock.".into()),
            calls: vec![("toolu_1".into(), "get_time".into(), input.clone())],
            usage: Some((40, 12)),
        },
        Reply::text("It is noon."),
    ];
    let mut logs = Vec::new();
    for (entry, ext) in [("plain", &[][..]), ("streamed", &["turn.deltas"][..])] {
        mock.push_all(script.clone());
        let f = session(&server, &[entry], ext);
        let mut s = send_stream(&server, &f.session_id, &f.a, json!("hi"));
        let (notes, t) = drain(&mut s);
        let message = &t["result"]["message"];
        let evs = result_events(&t);
        let request = of_type(&evs, "provider.request")[0]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let d = deltas(&notes);
        if entry == "plain" {
            assert!(d.is_empty(), "no deltas from an unstreamed entry");
        } else {
            assert!(d.len() > 3, "{d:?}");
            assert_eq!(joined(&d, &request, 0, "text"), text_of(message));
            assert!(d
                .iter()
                .all(|x| x["turn"] == evs[0]["id"] && x["attempt"] == 0));
        }

        let mut s = send_stream(&server, &f.session_id, &f.a, json!("what time is it?"));
        let (notes, t) = drain(&mut s);
        let message = &t["result"]["message"];
        assert_eq!(message["content"][1]["input"], input, "{t}");
        assert_eq!(message["content"][1]["dispatch"], "client");
        if entry == "streamed" {
            let request = of_type(&result_events(&t), "provider.request")[0]["id"].clone();
            let d = deltas(&notes);
            assert_eq!(
                joined(&d, request.as_str().unwrap(), 0, "text"),
                "Checking the clock."
            );
            let args = joined(&d, request.as_str().unwrap(), 1, "input_json");
            assert_eq!(serde_json::from_str::<Value>(&args).unwrap(), input);
        }
        let results = json!([tool_result("toolu_1", "12:00")]);
        let (_, t) = send(&server, &f.session_id, &f.a, results);
        assert_eq!(text_of(&t["result"]["message"]), "It is noon.", "{t}");
        logs.push(comparable(&events(
            &server,
            &f.session_id,
            &f.a.session_key,
        )));
    }
    assert_eq!(
        logs[0], logs[1],
        "the streamed session logged what the unstreamed one did"
    );
    let streamed = mock
        .requests()
        .into_iter()
        .filter(|r| r.body["stream"] == true)
        .count();
    assert_eq!(streamed, 3);
}

#[test]
fn anthropic_streams_log_what_unstreamed_calls_log() {
    same_log_streamed_or_not("anthropic");
}

#[test]
fn openai_streams_log_what_unstreamed_calls_log() {
    same_log_streamed_or_not("openai");
}

/// `session.cancelTurn` while the reply streams: the terminal error at
/// once, the provider's connection closed (the mock sees it), a discard
/// marker for an opted-in observer.
#[test]
fn cancel_mid_stream_closes_the_provider_connection() {
    let mock = MockProvider::start();
    mock.set_stream_timing(StreamTiming {
        first_token: Duration::from_millis(10),
        per_token: Duration::from_millis(100),
        token_chars: 2,
        ping_every: None,
    });
    let server = server(&mock, &[("main", "anthropic", STREAM)]);
    let f = session(&server, &["main"], &["turn.deltas", "turn.cancel"]);
    let observer = f.join(&server, json!({}));
    let mut sub = subscribe(
        &server,
        &f.session_id,
        &observer.session_key,
        json!({"extensions": ["turn.deltas"]}),
    );
    mock.push(Reply::text(
        "a very long answer that will never be read to its end",
    ));
    let mut s = send_stream(&server, &f.session_id, &f.a, json!("hi"));
    // Its provider.request event, then the first delta.
    loop {
        let f = s.next_frame(WAIT).expect("a delta before the end");
        if f["method"] == "session.delta" {
            break;
        }
        assert_eq!(f["method"], "session.event", "{f}");
    }
    let cancelled_at = Instant::now();
    let (_, t) = rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.cancelTurn",
        json!({}),
    );
    assert_eq!(t["result"], json!({"cancelled": true, "state": "running"}));
    let (notes, t) = drain(&mut s);
    assert_rpc_error(&t, -32021, "turn_cancelled: the turn was cancelled");
    assert_eq!(discards(&notes).len(), 1, "{notes:?}");
    let closes = mock.wait_stream_closes(1, WAIT);
    assert_eq!(closes.len(), 1, "the mock never saw the connection close");
    let took = closes[0].at.saturating_duration_since(cancelled_at);
    assert!(
        took < Duration::from_millis(500),
        "closed {took:?} after the cancel"
    );
    assert!(closes[0].events_sent < 20, "{closes:?}");
    // The observer saw the deltas, then the marker.
    let mut seen = Vec::new();
    while let Some(f) = sub.next_frame(Duration::from_millis(500)) {
        seen.push(f);
    }
    let marks = discards(&seen);
    assert_eq!(marks.len(), 1, "{seen:?}");
    assert_eq!(marks[0]["reason"], "cancelled");
    assert!(!deltas(&seen).is_empty());
    // Nothing of the cancelled reply was logged.
    let log = events(&server, &f.session_id, &f.a.session_key);
    assert!(
        of_type(&log, "provider.response").is_empty(),
        "{:?}",
        types(&log)
    );
}

/// Two opted-in drivers and a plain reference reader on one session: the
/// plain reader sees the reference wire only; the opted-in ones see the
/// deltas of every turn, in order, never after their request's terminal.
#[test]
fn only_opted_in_streams_see_deltas() {
    let mock = MockProvider::start();
    mock.set_stream_timing(paced());
    let server = server(&mock, &[("main", "openai", STREAM)]);
    let f = session(&server, &["main"], &["turn.deltas"]);
    let b = f.join(&server, json!({}));
    register(&server, &f, &b, &["turn.deltas"]);
    let plain = f.join(&server, json!({}));
    let mut plain_sub = subscribe(&server, &f.session_id, &plain.session_key, json!({}));
    let mut b_sub = subscribe(&server, &f.session_id, &b.session_key, json!({}));
    mock.push(Reply::text("first answer, streamed"));
    mock.push(Reply::text("second answer, streamed"));
    let (a_notes, a_t) = drain(&mut send_stream(&server, &f.session_id, &f.a, json!("one")));
    let (b_notes, b_t) = drain(&mut send_stream(&server, &f.session_id, &b, json!("two")));
    for (notes, t) in [(&a_notes, &a_t), (&b_notes, &b_t)] {
        let request = of_type(&result_events(t), "provider.request")[0]["id"].clone();
        assert_eq!(
            joined(&deltas(notes), request.as_str().unwrap(), 0, "text"),
            text_of(&t["result"]["message"])
        );
    }
    let mut plain_seen = Vec::new();
    while let Some(f) = plain_sub.next_frame(Duration::from_millis(500)) {
        plain_seen.push(f);
    }
    assert!(
        plain_seen.iter().all(|n| n["method"] == "session.event"),
        "{plain_seen:?}"
    );
    let log = events(&server, &f.session_id, &f.a.session_key);
    let tail: Vec<Value> = log[log.len() - plain_seen.len()..].to_vec();
    assert_eq!(
        note_events(&plain_seen),
        tail,
        "the plain reader saw the log, nothing else"
    );
    // B's subscription (its key opted in at registration) saw both turns'
    // deltas, each turn's before its answer's event.
    let mut b_seen = Vec::new();
    while let Some(f) = b_sub.next_frame(Duration::from_millis(500)) {
        b_seen.push(f);
    }
    let d = deltas(&b_seen);
    let turns: std::collections::BTreeSet<String> = d
        .iter()
        .map(|x| x["turn"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(turns.len(), 2, "{d:?}");
}

/// An opted-in observer that stops reading: the turn runs at the
/// provider's pace and its own driver gets every delta; the observer's are
/// held, then dropped with a `lagged` marker, and every event still
/// reaches it once it reads again.
#[test]
fn a_stalled_opted_in_observer_slows_nothing() {
    let mock = MockProvider::start();
    mock.set_stream_timing(StreamTiming {
        first_token: Duration::ZERO,
        per_token: Duration::ZERO,
        token_chars: 4000,
        ping_every: None,
    });
    let config = config(&mock, &[("main", "anthropic", STREAM)]);
    // A small window: the observer's held deltas pass 16 windows (256 KiB).
    let server = Server::start(opts(&config).env("BAE_DELTA_WINDOW_BYTES", "16384"));
    let f = session(&server, &["main"], &["turn.deltas"]);
    let observer = f.join(&server, json!({}));
    let mut sub = small_window_subscribe(&server, &f.session_id, &observer.session_key);
    assert!(sub.wait_head(WAIT));
    // Far more than the socket buffers hold.
    let big = "lorem ipsum ".repeat(90_000);
    mock.push(Reply::text(big.clone()));
    let started = Instant::now();
    let (notes, t) = drain(&mut send_stream(&server, &f.session_id, &f.a, json!("hi")));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(text_of(&t["result"]["message"]).len(), big.len());
    let request = of_type(&result_events(&t), "provider.request")[0]["id"].clone();
    assert_eq!(
        joined(&deltas(&notes), request.as_str().unwrap(), 0, "text").len(),
        big.len()
    );
    // Now the observer reads: a lagged marker instead of the rest of the
    // deltas, and the final events, whole.
    let mut seen = Vec::new();
    while let Some(f) = sub.next_frame(WAIT) {
        let done = f["params"]["event_type"] == "server.message.send";
        seen.push(f);
        if done {
            break;
        }
    }
    let marks = discards(&seen);
    assert_eq!(marks.len(), 1, "{:?}", marks);
    assert_eq!(marks[0]["reason"], "lagged");
    // What it got of the deltas is a prefix of the answer, cut short.
    let got = joined(&deltas(&seen), request.as_str().unwrap(), 0, "text");
    assert!(
        got.len() < big.len() && big.starts_with(&got),
        "{}",
        got.len()
    );
    let answer = note_events(&seen)
        .into_iter()
        .find(|e| e["event_type"] == "server.message.send")
        .expect("the answer reached the observer");
    assert_eq!(text_of(&answer["payload"]).len(), big.len());
}

/// A `turn.deltas` gapless subscription on a socket with a tiny receive
/// buffer: the server's writes to it back up after a few KiB, as to a
/// reader that stopped reading a long time ago.
fn small_window_subscribe(server: &Server, session_id: &str, key: &str) -> RpcStream {
    use std::io::Write;
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&server.client().addr.into()).unwrap();
    let mut stream: std::net::TcpStream = sock.into();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "session.subscribe",
                      "params": {"extensions": ["turn.deltas", "subscribe.gapless"]}})
    .to_string();
    let head = format!(
        "POST /api/v1/sessions/{session_id}/rpc HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    RpcStream::from_stream(stream, WAIT)
}
