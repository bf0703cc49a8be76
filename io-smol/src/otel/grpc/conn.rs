//! One HTTP/2 connection to the collector, on the `h2` crate: its
//! request handle and its connection task, which this module drives
//! itself (no spawned task): whatever a call awaits, the connection
//! progresses beside it, and dropping a [`Conn`] closes the socket.

use std::time::Duration;

use bytes::Bytes;
use futures_lite::future;
use h2::client::{Connection, SendRequest};
use http::Request;

use super::net::Stream;
use super::status::{Error, Response, MAX_MESSAGE};

/// Largest response header list accepted (SETTINGS_MAX_HEADER_LIST_SIZE,
/// advertised; `h2` also bounds the compressed block by it).
const MAX_HEADER_LIST: u32 = 64 * 1024;
/// Largest response body: one gRPC message and its prefix.
const MAX_BODY: usize = MAX_MESSAGE + 5;
/// How long a kept connection is given to handle what arrived while it
/// was idle before it carries the next request.
const IDLE_POLL: Duration = Duration::from_millis(1);

pub struct Conn {
    send: SendRequest<Bytes>,
    connection: Connection<Stream, Bytes>,
    /// The connection future finished: closed, or failed.
    ended: bool,
}

impl Conn {
    /// The HTTP/2 preface and our SETTINGS over a fresh stream: no push,
    /// a bounded header list; the rest are RFC 9113's defaults (16 KiB
    /// frames, 64 KiB windows, returned as the body is read).
    pub async fn open(io: Stream) -> Result<Conn, Error> {
        let (send, connection) = h2::client::Builder::new()
            .enable_push(false)
            .max_header_list_size(MAX_HEADER_LIST)
            .handshake(io)
            .await
            .map_err(Error::from_h2)?;
        Ok(Conn {
            send,
            connection,
            ended: false,
        })
    }

    /// Lets a kept connection handle what the peer sent while it was idle
    /// (SETTINGS, PING, GOAWAY, a close); `false` when it can no longer
    /// carry a request.
    pub async fn settle(&mut self) -> bool {
        let Conn {
            send,
            connection,
            ended,
        } = self;
        if *ended {
            return false;
        }
        // Timeout polls its timer even when the connection used up the
        // task's budget: a peer that never stops sending costs IDLE_POLL.
        let drive = async {
            let _ = connection.await;
        };
        if tokio::time::timeout(IDLE_POLL, drive).await.is_ok() {
            *ended = true;
            return false;
        }
        // h2 refuses new streams after a GOAWAY or a connection error.
        matches!(
            future::poll_once(send.clone().ready()).await,
            Some(Ok(_)) | None
        )
    }

    /// Sends one request with its whole body and reads the response, its
    /// body bounded by [`MAX_BODY`]. The caller bounds it in time.
    pub async fn exchange(&mut self, request: Request<()>, body: Bytes) -> Result<Response, Error> {
        let Conn {
            send,
            connection,
            ended,
        } = self;
        let call = async {
            let mut send = send.clone().ready().await.map_err(Error::from_h2)?;
            let (response, mut upload) =
                send.send_request(request, false).map_err(Error::from_h2)?;
            // h2 holds the body and sends it as the peer's windows allow.
            upload.send_data(body, true).map_err(Error::from_h2)?;
            let (head, mut recv) = response.await.map_err(Error::from_h2)?.into_parts();
            let mut data = Vec::new();
            while let Some(chunk) = recv.data().await {
                let chunk = chunk.map_err(Error::from_h2)?;
                if data.len() + chunk.len() > MAX_BODY {
                    return Err(Error::TooLarge("response message"));
                }
                data.extend_from_slice(&chunk);
                let _ = recv.flow_control().release_capacity(chunk.len());
            }
            let trailers = recv.trailers().await.map_err(Error::from_h2)?;
            Ok(Response {
                status: head.status.as_u16(),
                headers: head.headers,
                body: data,
                trailers: trailers.unwrap_or_default(),
            })
        };
        // Why the connection ended, if it did during the call.
        let mut end = None;
        let drive = async {
            if !*ended {
                end = Some(finish((&mut *connection).await));
                *ended = true;
            }
            // h2 has failed the stream too: let the call report it
            // (polled first), else the connection's end is the error.
            future::yield_now().await;
            Err(end.clone().unwrap_or(Error::Closed))
        };
        let result = future::or(call, drive).await;
        if let Err(Error::Closed) = result {
            // A close after a GOAWAY with an error: say so, it is why.
            if !*ended {
                if let Some(r) = future::poll_once(&mut *connection).await {
                    end = Some(finish(r));
                    *ended = true;
                }
            }
            if let Some(e @ Error::GoAway { .. }) = end {
                return Err(e);
            }
        }
        result
    }
}

/// The error of a connection future that finished.
fn finish(result: Result<(), h2::Error>) -> Error {
    result.map_or_else(Error::from_h2, |()| Error::Closed)
}
