//! Replica mode: relaying a request to its session's owner
//! ([`engine::Output::Forward`], docs/scaling.md "Forwarding").
//!
//! The engine re-encoded the request with `Connection: close`, so the
//! owner's response ends when it closes: its bytes are copied to the client
//! as they arrive (NDJSON frames leave at once, nothing is parsed), at most
//! [`MAX_QUEUED_CHUNKS`] reads ahead of the client, then the client
//! connection is closed. Nothing
//! here looks inside the bytes.

use std::time::Duration;

use engine::replicas::Forward;
use futures_lite::{future, AsyncReadExt, AsyncWriteExt};
use smol::channel::{Receiver, Sender};
use smol::net::TcpStream;
use smol::Timer;

use super::{Driver, WriterMsg, READ_CHUNK};

/// How long connecting to the owner may take.
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

impl Driver {
    /// Hands the connection to the relay; later reports of its reader are
    /// not fed to the engine, which has forgotten it.
    pub(super) fn forward(&mut self, f: Forward) {
        let Some(c) = self.conns.get_mut(&f.conn) else {
            return;
        };
        let (cancel_tx, cancel_rx) = smol::channel::bounded(1);
        c.forwarding = Some(cancel_tx);
        smol::spawn(relay(f, c.writer.clone(), cancel_rx)).detach();
    }
}

/// Relays `f` until the owner closes, or until `cancel` closes (the client
/// went away: dropping the upstream socket tells the owner).
pub(super) async fn relay(f: Forward, writer: Sender<WriterMsg>, cancel: Receiver<()>) {
    let work = async {
        let relayed = copy(&f, &writer).await;
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

/// Whether any response byte reached the client's writer.
async fn copy(f: &Forward, writer: &Sender<WriterMsg>) -> bool {
    let connect = async { TcpStream::connect(f.to.as_str()).await.ok() };
    let timeout = async {
        Timer::after(CONNECT_TIMEOUT).await;
        None
    };
    let Some(mut upstream) = future::or(connect, timeout).await else {
        tracing::warn!(conn = f.conn.0, to = %f.to, "session owner unreachable");
        return false;
    };
    let _ = upstream.set_nodelay(true);
    if upstream.write_all(&f.request).await.is_err() {
        return false;
    }
    let mut any = false;
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        while writer.len() >= MAX_QUEUED_CHUNKS && !writer.is_closed() {
            Timer::after(DRAIN_POLL).await;
        }
        match upstream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                any = true;
                let chunk = buf.get(..n).unwrap_or_default().to_vec();
                if writer.send(WriterMsg::Data(chunk.into())).await.is_err() {
                    break;
                }
            }
        }
    }
    any
}
