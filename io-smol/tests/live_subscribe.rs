//! `session.subscribe` over the real binary (spec 01 §5.4, §6.3, §7;
//! checklist C-127, C-132): a replay racing turns on other connections,
//! and a subscriber whose socket never drains. Live-only subscriptions,
//! replays, unsubscribe, closed sessions and byte-bounded pages
//! (C-126…C-133, C-047) are tested in-process in
//! `engine/tests/subscribe_flows.rs`.

mod live_support;

use std::time::{Duration, Instant};

use live_support::*;
use serde_json::{json, Value};
use testkit::fixtures::provider_toml;
use testkit::http::next_rpc_id;
use testkit::{MockProvider, Reply, RpcStream, Server};

const LAGGED: &str = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"lagged; reconnect with since_event_id"}}"#;

/// Runs `n` plain turns as `c` through a cloned client (usable from a
/// thread).
fn turns(client: &testkit::HttpClient, sid: &str, key: &str, n: usize) {
    for i in 0..n {
        let (_, t) = client.rpc(
            sid,
            key,
            "session.sendMessage",
            json!({"message": {"content": format!("turn {i}")}}),
            next_rpc_id(),
        );
        assert!(t.get("result").is_some(), "{t}");
    }
}

/// Asserts the stream has written nothing for `d` and is still open.
#[track_caller]
fn assert_idle(s: &mut RpcStream, d: Duration) {
    let before = s.body_bytes_received();
    s.pump(d);
    assert_eq!(s.body_bytes_received(), before, "no frames expected");
    assert!(!s.is_finished(), "the stream stays open");
}

#[test]
fn c127_since_event_id_replays_then_goes_live_without_gap_or_duplicate() {
    let (_mock, server) = anthropic_server(&[]);
    let f = open_registered(&server, "main", &[], &[], json!({}));
    // > 1 replay page (200) of history first.
    turns(&server.client(), &f.session_id, &f.a.session_key, 55);
    let history = events(&server, &f.session_id, &f.a.session_key);
    assert!(history.len() > 220);
    let since = history[5]["id"].clone();

    // Turns keep running while the subscriber replays.
    let client = server.client();
    let (sid, key) = (f.session_id.clone(), f.a.session_key.clone());
    let writer = std::thread::spawn(move || turns(&client, &sid, &key, 25));
    std::thread::sleep(Duration::from_millis(20));
    let mut s = subscribe(
        &server,
        &f.session_id,
        &f.a.session_key,
        json!({"since_event_id": since}),
    );
    writer.join().unwrap();
    let all = events(&server, &f.session_id, &f.a.session_key);
    let expected = &all[6..];
    let got = read_events(&mut s, expected.len());
    assert_eq!(ids(&got), ids(expected), "replay + live, in log order");
    assert_eq!(got, expected, "byte-identical EventViews");
    assert_idle(&mut s, Duration::from_millis(150));
}

/// C-132. How the bound is hit: a subscriber opens its stream and then
/// never reads its socket. Each "big" turn fails its primary with a 1 MiB
/// error body, which `provider.response.body` carries verbatim (then the
/// fallback answers), so every big turn pushes > 1 MiB of frames at the
/// stuck subscriber without growing the provider-facing history. Enough of
/// them to exceed what the kernel can buffer for that socket (see
/// [`big_turns_needed`]; about 3 MiB were accepted on the development box,
/// as the receiver never reads its window never grows) stall the server's
/// writes to it; every further frame stays unflushed, and 80 small turns
/// (4 events each) push it past 256 unflushed events, so the server drops
/// it with the `lagged` notification. Meanwhile a reading observer and the
/// driver are served normally, and the stuck client recovers with
/// `since_event_id`.
#[test]
fn c132_a_subscriber_that_never_reads_gets_lagged_and_others_are_served() {
    let mock = MockProvider::start();
    let config = provider_toml(&[
        ("bad", "anthropic", &mock.base_url, "m", "t"),
        ("main", "anthropic", &mock.base_url, "m", "t"),
    ]);
    let server = Server::start(opts(&config));
    let f = open_registered(&server, "bad", &["main"], &[], json!({}));
    let sub =
        |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "session.subscribe", "params": {}});

    let mut stuck = RawStream::open(&server, &f.session_id, &f.a.session_key, &sub(1));
    let mut fast = RawStream::open(&server, &f.session_id, &f.a.session_key, &sub(2));
    let observer = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while let Some(frame) = fast.next_frame() {
            assert!(frame.get("error").is_none(), "the reading observer lagged");
            assert!(frame.get("id").is_none(), "no terminal frame on subscribe");
            seen.push(frame["params"]["id"].as_str().unwrap().to_string());
        }
        seen
    });

    let big = "x".repeat(1 << 20);
    let started = Instant::now();
    let rpc_path = format!("/api/v1/sessions/{}/rpc", f.session_id);
    for i in 0..big_turns_needed() {
        mock.push_all([Reply::status(500, big.clone()), Reply::text("ok")]);
        let body = json!({"jsonrpc": "2.0", "id": i, "method": "session.sendMessage",
                          "params": {"message": {"content": format!("big {i}")}}});
        let resp = server.client().bearer(&f.a.session_key).request(
            "POST",
            &rpc_path,
            &[],
            body.to_string().as_bytes(),
        );
        resp.assert_status(200);
        let text = resp.text();
        let last = text.trim_end().rsplit('\n').next().unwrap();
        assert!(
            last.contains("\"result\""),
            "big turn {i} failed: {:.300}",
            last
        );
    }
    for i in 0..80 {
        // The primary answers (default reply): 4 events per turn.
        let (_, t) = send(&server, &f.session_id, &f.a, json!(format!("small {i}")));
        assert_eq!(result_events(&t).len(), 4);
    }
    // The server kept serving everybody else.
    server.client().get("/healthz").assert_status(200);
    let served_in = started.elapsed();

    let all = events(&server, &f.session_id, &f.a.session_key);
    // Now read the stuck stream: some events, then exactly the lagged
    // notification, then the end of the body.
    let mut lines = Vec::new();
    while let Some(line) = stuck.next_line() {
        lines.push(line);
    }
    let last = lines.last().expect("some frames");
    assert_eq!(last, LAGGED);
    let got: Vec<String> = lines[..lines.len() - 1]
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["method"], "session.event");
            v["params"]["id"].as_str().unwrap().to_string()
        })
        .collect();
    // It was cut off before the end of the log, after receiving at least
    // the frames that were queued (unflushed) when the bound was hit.
    assert!(
        got.len() < all.len(),
        "the stuck subscriber was cut off early"
    );
    assert!(got.len() >= 256, "got only {} events", got.len());
    // What it did get is an exact slice of the log from its subscription.
    let start = all.iter().position(|e| e["id"] == got[0].as_str()).unwrap();
    assert_eq!(got, ids(&all[start..start + got.len()]));
    // Recovery per spec: re-subscribe from the last id seen.
    let mut again = subscribe(
        &server,
        &f.session_id,
        &f.a.session_key,
        json!({"since_event_id": got.last().unwrap()}),
    );
    let rest = read_events(&mut again, all.len() - start - got.len());
    assert_eq!(ids(&rest), ids(&all[start + got.len()..]));

    // The reading observer got everything, in order.
    rpc(
        &server,
        &f.session_id,
        &f.a.session_key,
        "session.unsubscribe",
        json!({}),
    );
    let seen = observer.join().unwrap();
    assert_eq!(seen, ids(&all[start..]));
    eprintln!(
        "c132: {} events in {served_in:?}; stuck subscriber got {} before lagging",
        all.len(),
        got.len()
    );
}

/// Big (> 1 MiB) turns that surely exceed the kernel buffering of one
/// loopback connection whose reader never reads: the sender's buffer can
/// grow to `tcp_wmem` max, the receiver's stays near its `tcp_rmem`
/// default; plus 1 MiB of the server's own write buffering, plus margin.
fn big_turns_needed() -> usize {
    let field = |path: &str, i: usize, default: usize| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.split_whitespace().nth(i)?.parse().ok())
            .unwrap_or(default)
    };
    let wmem_max = field("/proc/sys/net/ipv4/tcp_wmem", 2, 4 << 20);
    let rmem_default = field("/proc/sys/net/ipv4/tcp_rmem", 1, 128 << 10);
    ((wmem_max + rmem_default + (1 << 20)).div_ceil(1 << 20) + 2).min(40)
}
