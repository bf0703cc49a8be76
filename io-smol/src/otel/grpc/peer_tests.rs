//! The client against an in-process HTTP/2 server (h2's own server side)
//! that answers each stream as a test scripts it, and against raw bytes:
//! kept and replaced connections, refusals and retries, GOAWAY, bounds,
//! deadlines. The real collector (Python grpcio) is
//! `io-smol/tests/otlp_grpc_client.rs`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{mpsc, Arc, Mutex};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http::{Response as HttpResponse, StatusCode};
use smol::channel;

use super::status::MAX_MESSAGE;
use super::*;

/// How the server answers one stream.
#[derive(Clone)]
enum Reply {
    /// 200, the message, `grpc-status: 0` in the trailers.
    Ok(Vec<u8>),
    /// A trailers-only response with this status and message.
    Status(u8, &'static str),
    Reset(Reason),
    /// GOAWAY with this code right after the request, then the close.
    GoAway(Reason),
    /// 200 and a body one byte over the client's bound.
    Huge,
    /// 200, then nothing until the connection closes.
    Hang,
}

/// A command for the connection being served; answered once it is done.
enum Cmd {
    /// GOAWAY (NO_ERROR), then the close.
    GoAway(mpsc::Sender<()>),
    /// Close the TCP connection without a word.
    Close(mpsc::Sender<()>),
}

/// What the server saw of one stream.
struct Seen {
    conn: usize,
    path: String,
    headers: HeaderMap,
    body: Vec<u8>,
}

struct Peer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    cmd: channel::Sender<Cmd>,
}

impl Peer {
    /// Serves one connection at a time (the client keeps one), answering
    /// the n-th stream overall with `script[n]` (the last one after that).
    fn start(script: &[Reply]) -> Peer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (cmd, rx) = channel::unbounded();
        let script = script.to_vec();
        let state = seen.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .unwrap();
            rt.block_on(serve(listener, script, state, rx));
        });
        Peer { addr, seen, cmd }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Runs `cmd` on the connection being served and waits until it is done.
    fn command(&self, cmd: fn(mpsc::Sender<()>) -> Cmd) {
        let (tx, rx) = mpsc::channel();
        self.cmd.send_blocking(cmd(tx)).unwrap();
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
    }

    /// The connection index of each stream seen, in order.
    fn conns(&self) -> Vec<usize> {
        self.seen.lock().unwrap().iter().map(|s| s.conn).collect()
    }
}

/// What `accept` on a server connection yields.
type Accepted = Option<Result<(http::Request<RecvStream>, SendResponse<Bytes>), h2::Error>>;

async fn serve(
    listener: TcpListener,
    script: Vec<Reply>,
    seen: Arc<Mutex<Vec<Seen>>>,
    cmds: channel::Receiver<Cmd>,
) {
    listener.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let mut streams = 0;
    for conn_index in 0.. {
        let Ok((tcp, _)) = listener.accept().await else {
            return;
        };
        let Ok(mut conn) = h2::server::handshake(tcp).await else {
            continue;
        };
        let mut done: Option<mpsc::Sender<()>> = None;
        loop {
            enum Next {
                Stream(Accepted),
                Cmd(Option<Cmd>),
            }
            let next =
                futures_lite::future::or(async { Next::Stream(conn.accept().await) }, async {
                    Next::Cmd(cmds.recv().await.ok())
                })
                .await;
            match next {
                Next::Stream(Some(Ok((req, respond)))) => {
                    let reply = script[streams.min(script.len() - 1)].clone();
                    streams += 1;
                    if let Reply::GoAway(reason) = reply {
                        conn.abrupt_shutdown(reason);
                        tokio::spawn(async move {
                            let _held = respond;
                            tokio::time::sleep(Duration::from_secs(5)).await;
                        });
                        continue;
                    }
                    tokio::spawn(answer(req, respond, reply, conn_index, seen.clone()));
                }
                // The connection ended: closed, failed, or shut down.
                Next::Stream(_) => break,
                Next::Cmd(Some(Cmd::GoAway(tx))) => {
                    conn.abrupt_shutdown(Reason::NO_ERROR);
                    done = Some(tx);
                }
                Next::Cmd(Some(Cmd::Close(tx))) => {
                    drop(conn);
                    let _ = tx.send(());
                    break;
                }
                Next::Cmd(None) => return,
            }
        }
        if let Some(tx) = done {
            let _ = tx.send(());
        }
    }
}

async fn answer(
    req: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    reply: Reply,
    conn: usize,
    seen: Arc<Mutex<Vec<Seen>>>,
) {
    let (head, mut recv) = req.into_parts();
    let mut body = Vec::new();
    while let Some(Ok(chunk)) = recv.data().await {
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    seen.lock().unwrap().push(Seen {
        conn,
        path: head.uri.path().to_string(),
        headers: head.headers,
        body,
    });
    let ok = || {
        HttpResponse::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/grpc")
    };
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    match reply {
        Reply::Ok(message) => {
            let mut s = respond
                .send_response(ok().body(()).unwrap(), false)
                .unwrap();
            s.send_data(framed(&message), false).unwrap();
            s.send_trailers(trailers).unwrap();
        }
        Reply::Status(code, message) => {
            let r = ok()
                .header("grpc-status", code.to_string())
                .header("grpc-message", message)
                .body(())
                .unwrap();
            respond.send_response(r, true).unwrap();
        }
        Reply::Reset(reason) => respond.send_reset(reason),
        Reply::Huge => {
            let mut s = respond
                .send_response(ok().body(()).unwrap(), false)
                .unwrap();
            s.send_data(Bytes::from(vec![0; MAX_MESSAGE + 6]), false)
                .unwrap();
            let _ = s.send_trailers(trailers);
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        Reply::Hang => {
            let _s = respond
                .send_response(ok().body(()).unwrap(), false)
                .unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        Reply::GoAway(_) => unreachable!("handled by the connection"),
    }
}

fn framed(message: &[u8]) -> Bytes {
    let mut b = vec![0];
    b.extend_from_slice(&(message.len() as u32).to_be_bytes());
    b.extend_from_slice(message);
    Bytes::from(b)
}

const T: Duration = Duration::from_secs(5);

#[test]
fn calls_share_one_connection_and_carry_large_messages_whole() {
    let peer = Peer::start(&[Reply::Ok(b"\x0a\x00".to_vec())]);
    let meta = vec![("X-Tenant".to_string(), "t1".to_string())];
    let mut client = Client::new(&peer.url(), &meta).unwrap();
    // Over the 64 KiB windows and 16 KiB frames: h2 paces it.
    let big: Vec<u8> = (0..100_005u32).map(|i| i as u8).collect();
    assert_eq!(client.call(TRACES, &big, T).unwrap(), b"\x0a\x00");
    assert_eq!(client.call(METRICS, b"m", T).unwrap(), b"\x0a\x00");
    assert_eq!(peer.conns(), [0, 0]);
    let seen = peer.seen.lock().unwrap();
    assert_eq!(seen[0].path, TRACES);
    assert_eq!(seen[0].body, framed(&big));
    assert_eq!(seen[1].path, METRICS);
    let h = &seen[1].headers;
    assert_eq!(h["content-type"], "application/grpc");
    assert_eq!(h["te"], "trailers");
    assert_eq!(h["x-tenant"], "t1");
    assert_eq!(h["user-agent"], AGENT);
    assert!(h["grpc-timeout"].to_str().unwrap().ends_with('m'));
}

#[test]
fn a_goaway_or_close_while_idle_costs_no_failed_call() {
    let peer = Peer::start(&[Reply::Ok(vec![])]);
    let mut client = Client::new(&peer.url(), &[]).unwrap();
    client.call(TRACES, b"1", T).unwrap();
    peer.command(Cmd::GoAway);
    client.call(TRACES, b"2", T).unwrap();
    peer.command(Cmd::Close);
    client.call(TRACES, b"3", T).unwrap();
    assert_eq!(peer.conns(), [0, 1, 2]);
}

#[test]
fn a_refused_stream_on_a_kept_connection_is_tried_once_more() {
    let refused = Reply::Reset(Reason::REFUSED_STREAM);
    let peer = Peer::start(&[Reply::Ok(vec![]), refused.clone(), Reply::Ok(b"x".to_vec())]);
    let mut client = Client::new(&peer.url(), &[]).unwrap();
    client.call(TRACES, b"1", T).unwrap();
    assert_eq!(client.call(TRACES, b"2", T).unwrap(), b"x");
    assert_eq!(peer.conns(), [0, 0, 1]);

    // On a new connection there is nothing to blame: reported.
    let peer = Peer::start(&[refused]);
    let mut client = Client::new(&peer.url(), &[]).unwrap();
    assert_eq!(
        client.call(TRACES, b"1", T).unwrap_err(),
        "gRPC Unavailable: stream reset by the collector (REFUSED_STREAM)"
    );
    assert_eq!(peer.conns(), [0]);
}

#[test]
fn a_goaway_with_an_error_fails_the_call_without_a_retry() {
    let calm = Reply::GoAway(Reason::ENHANCE_YOUR_CALM);
    let peer = Peer::start(&[Reply::Ok(vec![]), calm, Reply::Ok(vec![])]);
    let mut client = Client::new(&peer.url(), &[]).unwrap();
    client.call(TRACES, b"1", T).unwrap();
    assert_eq!(
        client.call(TRACES, b"2", T).unwrap_err(),
        "gRPC Unavailable: the collector closed the connection (GOAWAY ENHANCE_YOUR_CALM)"
    );
    // The collector may have acted on it: not sent again.
    client.call(TRACES, b"3", T).unwrap();
    let bodies: Vec<Vec<u8>> = peer
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.body.clone())
        .collect();
    assert_eq!(bodies, [framed(b"1"), framed(b"3")]);
}

#[test]
fn statuses_resets_and_oversize_bodies_become_log_texts() {
    let peer = Peer::start(&[
        Reply::Status(14, "down%20for%20now"),
        Reply::Reset(Reason::CANCEL),
        Reply::Huge,
        Reply::Ok(vec![]),
    ]);
    let mut client = Client::new(&peer.url(), &[]).unwrap();
    let mut call = || client.call(TRACES, b"x", T);
    assert_eq!(call().unwrap_err(), "gRPC Unavailable: down for now");
    assert_eq!(
        call().unwrap_err(),
        "gRPC Cancelled: stream reset by the collector (CANCEL)"
    );
    assert_eq!(
        call().unwrap_err(),
        "gRPC ResourceExhausted: response message over our limit"
    );
    assert!(call().is_ok());
}

#[test]
fn an_unfinished_response_ends_at_the_deadline() {
    let peer = Peer::start(&[Reply::Hang, Reply::Ok(vec![])]);
    let mut client = Client::new(&peer.url(), &[]).unwrap();
    let t = Duration::from_millis(300);
    let start = Instant::now();
    assert_eq!(
        client.call(TRACES, b"x", t).unwrap_err(),
        "no answer within 300 ms"
    );
    let took = start.elapsed();
    assert!(took >= t && took < Duration::from_secs(3), "{took:?}");
    // The timed-out connection was dropped; the next call makes its own.
    client.call(TRACES, b"y", T).unwrap();
    assert_eq!(peer.conns(), [0, 1]);
}

/// A raw TCP peer that answers each connection with `bytes` (after
/// reading the client's first bytes), then ends its side.
fn raw_peer(bytes: mpsc::Receiver<Vec<u8>>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for (mut c, reply) in l.incoming().flatten().zip(bytes) {
            let mut buf = [0; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(&reply);
            let _ = c.shutdown(std::net::Shutdown::Write);
            while c.read(&mut buf).is_ok_and(|n| n > 0) {}
        }
    });
    addr
}

#[test]
fn arbitrary_peer_frames_fail_calls_without_panics_or_hangs() {
    let (tx, rx) = mpsc::channel();
    let addr = raw_peer(rx);
    let mut client = Client::new(&format!("http://{addr}"), &[]).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..300 {
        let len = 9 + round % 40;
        let mut frame: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        // Plausible heads: small lengths, known types, streams 0 to 3.
        frame[0] = 0;
        frame[1] = 0;
        frame[2] = (len - 9) as u8;
        frame[3] %= 10;
        frame[5..9].copy_from_slice(&[0, 0, 0, (round % 4) as u8]);
        // An empty SETTINGS (the server preface) first.
        let mut bytes = vec![0, 0, 0, 4, 0, 0, 0, 0, 0];
        bytes.extend(frame);
        tx.send(bytes).unwrap();
        let start = Instant::now();
        // Whatever the frame, the call fails: on it, or on the close.
        let result = client.call(TRACES, b"x", T);
        assert!(result.is_err(), "round {round}: {result:?}");
        assert!(start.elapsed() < Duration::from_secs(2), "round {round}");
    }
}
