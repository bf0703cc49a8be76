//! Replica mode: relaying a request to its session's owner
//! ([`engine::Output::Forward`], docs/scaling.md "Forwarding"), on
//! smol's global executor (`baesrv` only: `baesrv-threads` refuses replica
//! mode).
//!
//! The engine re-encoded the request with `Connection: close`, so the
//! owner's response ends when it closes. The relay waits for the owner's
//! response head within `BAE_FORWARD_TIMEOUT_MS` (an owner that sends none
//! in time is frozen or cut off: the client gets the `503` instead, and
//! retries), then copies the bytes to the client as they arrive (NDJSON
//! frames leave at once, nothing is parsed), at most [`MAX_QUEUED_CHUNKS`]
//! reads ahead of the client, and closes the client connection. Nothing
//! here looks inside the bytes but for the end of the head.

use std::time::{Duration, Instant};

use engine::replicas::Forward;
use futures_lite::{future, AsyncReadExt, AsyncWriteExt};
use smol::channel::{Receiver, Sender};
use smol::net::TcpStream;
use smol::Timer;

use super::smol_rt::READ_CHUNK;
use engine::driver::WriterMsg;

/// How long connecting to the owner may take (within the head timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Response chunks the relay lets wait on the client's writer before it
/// stops reading from the owner. The writer's queue is unbounded (the
/// engine's sends must never block), so this is the relay's own bound: a
/// slow client then backs up into the owner's socket, and the owner's
/// flow accounting (`lagged`, the gapless window) sees it as it would a
/// direct client, instead of this replica buffering the stream.
const MAX_QUEUED_CHUNKS: usize = 8;

/// How often a relay held back by a slow client looks at its queue again.
const DRAIN_POLL: Duration = Duration::from_millis(2);

/// The end of a response head.
const HEAD_END: &[u8] = b"\r\n\r\n";
/// A head that has not ended within this many bytes is passed on as it
/// is (the client's decoder judges it); the wait is what is bounded.
const MAX_HEAD: usize = 64 * 1024;

/// Relays `f` until the owner closes, or until `cancel` closes (the client
/// went away: dropping the upstream socket tells the owner). When no
/// response head arrives within `head_timeout` the client gets
/// `f.unreachable` (a `503`) instead.
pub(super) async fn relay(
    f: Forward,
    writer: Sender<WriterMsg>,
    cancel: Receiver<()>,
    head_timeout: Duration,
) {
    let work = async {
        let relayed = copy(&f, &writer, head_timeout).await;
        if !relayed {
            let _ = writer
                .send(WriterMsg::Data(f.unreachable.clone().into()))
                .await;
        }
        let _ = writer.send(WriterMsg::Close).await;
    };
    future::or(work, async {
        let _ = cancel.recv().await;
    })
    .await;
}

/// `work`, or `None` once `deadline` passes.
async fn before<T>(
    deadline: Instant,
    work: impl std::future::Future<Output = Option<T>>,
) -> Option<T> {
    future::or(work, async {
        Timer::at(deadline).await;
        None
    })
    .await
}

/// The owner's response head (and whatever came with it), read within
/// `deadline`; `None` when it did not come (closed, failed or too late).
async fn read_head(f: &Forward, upstream: &mut TcpStream, deadline: Instant) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = before(deadline, async { upstream.read(&mut buf).await.ok() }).await;
        match n {
            Some(0) => return (!head.is_empty()).then_some(head),
            Some(n) => {
                head.extend_from_slice(buf.get(..n).unwrap_or_default());
                let ended = head.windows(HEAD_END.len()).any(|w| w == HEAD_END);
                if ended || head.len() >= MAX_HEAD {
                    return Some(head);
                }
            }
            None if Instant::now() >= deadline => {
                tracing::warn!(
                    conn = f.conn.0,
                    to = %f.to,
                    "session owner sent no response head in time; answering 503"
                );
                return None;
            }
            None => return None,
        }
    }
}

/// Whether any response byte reached the client's writer.
async fn copy(f: &Forward, writer: &Sender<WriterMsg>, head_timeout: Duration) -> bool {
    let started = Instant::now();
    let deadline = started + head_timeout;
    let connect = async { TcpStream::connect(f.to.as_str()).await.ok() };
    let Some(mut upstream) = before(deadline.min(started + CONNECT_TIMEOUT), connect).await else {
        tracing::warn!(conn = f.conn.0, to = %f.to, "session owner unreachable");
        return false;
    };
    let _ = upstream.set_nodelay(true);
    let sent = before(deadline, async {
        upstream.write_all(&f.request).await.ok()
    })
    .await;
    if sent.is_none() {
        return false;
    }
    let Some(head) = read_head(f, &mut upstream, deadline).await else {
        return false;
    };
    if writer.send(WriterMsg::Data(head.into())).await.is_err() {
        return true;
    }
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        while writer.len() >= MAX_QUEUED_CHUNKS && !writer.is_closed() {
            Timer::after(DRAIN_POLL).await;
        }
        match upstream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let chunk = buf.get(..n).unwrap_or_default().to_vec();
                if writer.send(WriterMsg::Data(chunk.into())).await.is_err() {
                    break;
                }
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use engine::ConnId;

    use super::*;

    fn forward_to(addr: std::net::SocketAddr) -> Forward {
        Forward {
            conn: ConnId(1),
            to: addr.to_string(),
            request: b"GET /x HTTP/1.1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_vec(),
            unreachable: b"HTTP/1.1 503 Service Unavailable\r\n\r\n".to_vec(),
        }
    }

    /// Every message the relay queued for the client, in order.
    fn drain(rx: &Receiver<WriterMsg>) -> Vec<Option<Vec<u8>>> {
        let mut out = Vec::new();
        while let Ok(m) = rx.try_recv() {
            out.push(match m {
                WriterMsg::Data(b) => Some(b.to_vec()),
                WriterMsg::Close => None,
            });
        }
        out
    }

    /// An owner that takes the request and never answers (frozen) costs
    /// the client the head timeout, then the `503`; so does one that
    /// closes before a complete head.
    #[test]
    fn an_owner_without_a_response_head_gets_the_client_a_503() {
        let owner = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = owner.local_addr().unwrap();
        let silent = std::thread::spawn(move || {
            let (mut s, _) = owner.accept().unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf);
            std::thread::sleep(Duration::from_secs(2));
            drop(s);
            // A second one answers half a head and closes.
            let (mut s, _) = owner.accept().unwrap();
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\n");
        });
        let (tx, rx) = smol::channel::unbounded();
        let (_cancel_tx, cancel) = smol::channel::bounded(1);
        let started = Instant::now();
        let timeout = Duration::from_millis(300);
        smol::block_on(relay(forward_to(addr), tx, cancel.clone(), timeout));
        assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
        assert!(started.elapsed() < Duration::from_secs(2), "bounded");
        let f = forward_to(addr);
        assert_eq!(drain(&rx), [Some(f.unreachable.clone()), None]);
        let (tx, rx) = smol::channel::unbounded();
        smol::block_on(relay(forward_to(addr), tx, cancel, Duration::from_secs(5)));
        // Half a head passed on as it is: the owner's bytes, no 503 after.
        assert_eq!(drain(&rx), [Some(b"HTTP/1.1 200 OK\r\n".to_vec()), None]);
        silent.join().unwrap();
    }

    /// docs/scaling.md's bound: a client that reads nothing holds at most
    /// `MAX_QUEUED_CHUNKS` chunks on its writer; the owner's writes then
    /// block in its socket instead of the relay buffering its stream, and
    /// once the client reads again every byte arrives, in order.
    #[test]
    fn a_stalled_client_backs_the_relay_up_into_the_owners_socket() {
        const TOTAL: usize = 48 << 20;
        let owner = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = owner.local_addr().unwrap();
        let written = Arc::new(AtomicUsize::new(0));
        let owner_thread = std::thread::spawn({
            let written = written.clone();
            move || {
                let (mut s, _) = owner.accept().unwrap();
                let mut buf = [0u8; 256];
                let _ = s.read(&mut buf);
                s.write_all(b"HTTP/1.1 200 OK\r\n\r\n").unwrap();
                let block: Vec<u8> = (0..16 * 1024).map(|i| (i % 251) as u8).collect();
                while written.load(Ordering::SeqCst) < TOTAL {
                    s.write_all(&block).unwrap();
                    written.fetch_add(block.len(), Ordering::SeqCst);
                }
            }
        });
        let (tx, rx) = smol::channel::unbounded();
        let (_cancel_tx, cancel) = smol::channel::bounded(1);
        let task = smol::spawn(relay(forward_to(addr), tx, cancel, Duration::from_secs(5)));
        // Until the owner's writes stop moving: it is blocked.
        let mut last = usize::MAX;
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let now = written.load(Ordering::SeqCst);
            if now == last {
                break;
            }
            last = now;
        }
        assert!(last < TOTAL, "the owner was never held back ({last} bytes)");
        assert!(
            rx.len() <= MAX_QUEUED_CHUNKS,
            "{} chunks queued for a client that reads nothing",
            rx.len()
        );
        // The client reads again: everything arrives, in order.
        const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\n\r\n";
        let mut received = 0usize;
        let mut in_order = true;
        smol::block_on(async {
            while let Ok(WriterMsg::Data(b)) = rx.recv().await {
                for &byte in b.iter() {
                    let want = match HEAD.get(received) {
                        Some(&h) => h,
                        None => (((received - HEAD.len()) % (16 * 1024)) % 251) as u8,
                    };
                    in_order &= byte == want;
                    received += 1;
                }
            }
        });
        assert!(in_order, "the bytes arrived out of order");
        smol::block_on(task);
        owner_thread.join().unwrap();
        assert_eq!(received, HEAD.len() + written.load(Ordering::SeqCst));
    }
}
