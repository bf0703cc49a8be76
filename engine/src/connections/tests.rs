//! The connection table in-process: pipelining, keep-alive, send
//! accounting and the two read timeouts, with virtual time.

use super::*;

const IDLE: u64 = 75_000;
const REQUEST: u64 = 30_000;

fn table() -> Table {
    Table::new(Settings {
        http: proto::http::Limits {
            max_head_bytes: 1024,
            max_body_bytes: 1024,
            ..Default::default()
        },
        idle_timeout_ms: IDLE,
        request_timeout_ms: REQUEST,
        max_import_bytes: 1 << 20,
    })
}

const GET: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";

fn path_of(p: Option<Polled>) -> String {
    match p {
        Some(Polled::Request(req, _)) => req.path().to_owned(),
        Some(Polled::Waiting) => "waiting".into(),
        Some(Polled::Continue) => "continue".into(),
        Some(Polled::Rejected(r)) => format!("rejected {}", r.status),
        None => "none".into(),
    }
}

#[test]
fn a_request_makes_the_connection_busy_until_finished() {
    let mut t = table();
    t.accept(ConnId(1), Listener::Client);
    assert!(t.receive(ConnId(1), GET));
    assert_eq!(path_of(t.poll(ConnId(1), MonoMs(0), true)), "/healthz");
    assert!(t.get(&ConnId(1)).unwrap().busy);
    assert!(
        t.poll(ConnId(1), MonoMs(0), true).is_none(),
        "busy: nothing more"
    );
    assert_eq!(t.finish(ConnId(1)), Finished::Next);
    assert_eq!(path_of(t.poll(ConnId(1), MonoMs(0), true)), "waiting");
}

#[test]
fn pipelined_requests_come_out_one_at_a_time_in_order() {
    let mut t = table();
    t.accept(ConnId(1), Listener::Client);
    let two = [GET, b"GET /api/v1/meta HTTP/1.1\r\nhost: x\r\n\r\n"].concat();
    t.receive(ConnId(1), &two);
    assert_eq!(path_of(t.poll(ConnId(1), MonoMs(0), true)), "/healthz");
    assert!(t.poll(ConnId(1), MonoMs(0), true).is_none());
    t.finish(ConnId(1));
    assert_eq!(path_of(t.poll(ConnId(1), MonoMs(0), true)), "/api/v1/meta");
}

#[test]
fn a_request_split_anywhere_arrives_whole() {
    let mut t = table();
    t.accept(ConnId(1), Listener::Admin);
    for b in GET.chunks(3) {
        assert!(matches!(
            t.poll(ConnId(1), MonoMs(0), true),
            Some(Polled::Waiting)
        ));
        t.receive(ConnId(1), b);
    }
    match t.poll(ConnId(1), MonoMs(0), true) {
        Some(Polled::Request(_, listener)) => assert_eq!(listener, Listener::Admin),
        _ => panic!("no request"),
    }
}

#[test]
fn connection_close_or_shutdown_means_close_after_the_answer() {
    let mut t = table();
    t.accept(ConnId(1), Listener::Client);
    t.receive(
        ConnId(1),
        b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    t.poll(ConnId(1), MonoMs(0), true);
    assert!(t.closes_after(ConnId(1)));
    assert_eq!(t.finish(ConnId(1)), Finished::Close);
    t.accept(ConnId(2), Listener::Client);
    t.receive(ConnId(2), GET);
    t.poll(ConnId(2), MonoMs(0), false);
    assert!(t.closes_after(ConnId(2)), "the server's own verdict wins");
    assert_eq!(t.finish(ConnId(2)), Finished::Close);
}

#[test]
fn pipelining_past_the_cap_while_busy_is_refused() {
    let mut t = table();
    t.accept(ConnId(1), Listener::Client);
    t.receive(ConnId(1), GET);
    t.poll(ConnId(1), MonoMs(0), true);
    assert!(
        !t.receive(ConnId(1), &[b'x'; 4097]),
        "over 2 x (head + body) limits"
    );
}

#[test]
fn expect_continue_is_reported_before_the_body() {
    let mut t = table();
    t.accept(ConnId(1), Listener::Client);
    t.receive(
        ConnId(1),
        b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n",
    );
    assert_eq!(path_of(t.poll(ConnId(1), MonoMs(0), true)), "continue");
    t.receive(ConnId(1), b"{}");
    assert_eq!(path_of(t.poll(ConnId(1), MonoMs(0), true)), "/x");
}

#[test]
fn bad_bytes_are_rejected() {
    let mut t = table();
    t.accept(ConnId(1), Listener::Client);
    t.receive(
        ConnId(1),
        b"GET / HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
    );
    assert!(path_of(t.poll(ConnId(1), MonoMs(0), true)).starts_with("rejected 4"));
}

#[test]
fn idle_connection_expires_quietly_at_the_idle_timeout() {
    let mut t = table();
    t.accept(ConnId(1), Listener::Client);
    t.arm_read_deadline(ConnId(1), MonoMs(100));
    assert_eq!(t.next_deadline(), Some(MonoMs(100 + IDLE)));
    assert!(t.expire(MonoMs(100 + IDLE - 1)).is_empty());
    assert_eq!(
        t.expire(MonoMs(100 + IDLE)),
        vec![Expired {
            conn: ConnId(1),
            partial: false
        }]
    );
    assert_eq!(t.next_deadline(), None, "disarmed");
}

#[test]
fn partial_request_expires_at_the_request_timeout_from_its_first_byte() {
    let mut t = table();
    t.accept(ConnId(1), Listener::Client);
    t.receive(ConnId(1), b"GET / HT");
    t.poll(ConnId(1), MonoMs(1_000), true);
    // More bytes later do not push the deadline (slowloris).
    t.receive(ConnId(1), b"TP/1.1\r\n");
    t.poll(ConnId(1), MonoMs(20_000), true);
    assert_eq!(t.next_deadline(), Some(MonoMs(1_000 + REQUEST)));
    assert_eq!(
        t.expire(MonoMs(1_000 + REQUEST)),
        vec![Expired {
            conn: ConnId(1),
            partial: true
        }]
    );
}

#[test]
fn a_busy_connection_does_not_expire() {
    let mut t = table();
    t.accept(ConnId(1), Listener::Client);
    t.arm_read_deadline(ConnId(1), MonoMs(0));
    t.receive(ConnId(1), GET);
    t.poll(ConnId(1), MonoMs(1), true);
    assert_eq!(t.next_deadline(), None, "a whole request disarms it");
    assert!(t.expire(MonoMs(10 * IDLE)).is_empty());
}

#[test]
fn sends_are_accounted_until_flushed_and_stop_once_closing() {
    let mut t = table();
    t.accept(ConnId(1), Listener::Client);
    assert!(t.sending(ConnId(1), 10));
    assert!(t.sending(ConnId(1), 5));
    t.flushed(ConnId(1), 12);
    assert_eq!(t.get(&ConnId(1)).unwrap().unflushed, 3);
    assert!(t.close(ConnId(1)));
    assert!(!t.close(ConnId(1)), "one Close only");
    assert!(!t.sending(ConnId(1), 1));
    assert!(!t.sending(ConnId(9), 1), "unknown connection");
}

#[test]
fn removal_forgets_the_connection_and_its_deadline() {
    let mut t = table();
    t.accept(ConnId(1), Listener::Client);
    t.arm_read_deadline(ConnId(1), MonoMs(0));
    assert!(t.remove(ConnId(1)).is_some());
    assert_eq!(t.next_deadline(), None);
    assert!(t.remove(ConnId(1)).is_none());
    assert_eq!(t.finish(ConnId(1)), Finished::Gone);
    assert!(t.poll(ConnId(1), MonoMs(0), true).is_none());
}

#[test]
fn the_current_request_is_logged_once() {
    let mut t = table();
    t.accept(ConnId(1), Listener::Admin);
    t.receive(ConnId(1), GET);
    t.poll(ConnId(1), MonoMs(7), true);
    let (method, path, start, listener) = t.take_current(ConnId(1)).unwrap();
    assert_eq!((method.as_str(), path.as_str()), ("GET", "/healthz"));
    assert_eq!((start, listener), (MonoMs(7), Listener::Admin));
    assert!(t.take_current(ConnId(1)).is_none());
}

/// A finished keep-alive request leaves its connection for the engine's
/// `settle` to pump later (never from inside the answering handler); a
/// closing one does not.
#[test]
fn a_finished_keep_alive_request_queues_the_connection_once_for_its_next() {
    let mut t = table();
    for c in [ConnId(1), ConnId(2)] {
        t.accept(c, Listener::Client);
        assert!(t.receive(c, GET));
        assert_eq!(path_of(t.poll(c, MonoMs(0), true)), "/healthz");
    }
    assert!(!t.has_ready());
    assert_eq!(t.finish(ConnId(2)), Finished::Next);
    assert_eq!(t.finish(ConnId(1)), Finished::Next);
    assert!(t.has_ready());
    assert_eq!(t.take_ready(), Some(ConnId(2)), "in finishing order");
    assert_eq!(t.take_ready(), Some(ConnId(1)));
    assert_eq!(t.take_ready(), None);
    let close = b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    t.accept(ConnId(3), Listener::Client);
    assert!(t.receive(ConnId(3), close));
    assert_eq!(path_of(t.poll(ConnId(3), MonoMs(0), true)), "/healthz");
    assert_eq!(t.finish(ConnId(3)), Finished::Close);
    assert!(!t.has_ready(), "a closing connection has no next request");
    assert_eq!(t.finish(ConnId(9)), Finished::Gone);
    assert!(!t.has_ready());
}
