//! `baesrv`'s provider calls: to a plain-HTTP endpoint as a task on the
//! driver thread (keep-alive pool, timeouts from [`super::deadlines`]),
//! to an HTTPS one on the `blocking` pool (ureq, or the streaming client
//! when `stream = true`). A streamed call gets a handle that closes its
//! connection the moment the engine gives up on it
//! ([`engine::Output::AbortProvider`]; the rule itself is the core's).

use std::time::Duration;

use engine::{ProviderCall, ProviderReply};
use futures_lite::future;
use smol::channel::{self, Sender};

use super::provider_http::{self, Chunks, HttpTarget};
use super::provider_stream::{perform_blocking, Abort};
use super::smol_rt::{spawn_local, Event, Smol};
use engine::driver::CallHandle;

impl Smol {
    pub(super) fn start_call(&mut self, call: ProviderCall) -> Option<StreamingCall> {
        let tx = self.events_tx.clone();
        let id = call.id;
        let Some(target) = HttpTarget::parse(&call.url) else {
            // HTTPS: a blocking thread that owns its socket.
            let abort = call.stream.then(Abort::default);
            let a = abort.clone();
            spawn_local(async move {
                let chunk_tx = tx.clone();
                let reply = blocking::unblock(move || {
                    perform_blocking(&call, a.as_ref(), |bytes| {
                        let _ = chunk_tx.send_blocking(Event::ProviderChunk(id, bytes));
                    })
                })
                .await;
                let _ = tx.send(Event::Provider(id, reply)).await;
            });
            return abort.map(StreamingCall::Tls);
        };
        // Plain HTTP, on this thread. A streamed call's closer: once it is
        // dropped, the exchange (and its socket) is dropped with the losing
        // branch.
        let (closer, closed) = call.stream.then(|| channel::bounded::<()>(1)).unzip();
        let chunks = call.stream.then(|| Chunks {
            tx: tx.clone(),
            call: id,
        });
        let (pool, deadlines) = (self.http_providers.clone(), self.deadlines.clone());
        spawn_local(async move {
            let expired = deadlines.after(Duration::from_millis(call.timeout_ms.max(1)));
            let done = provider_http::perform(&pool, &call, &target, expired, chunks);
            let reply = match closed {
                Some(closed) => {
                    let aborted = async {
                        let _ = closed.recv().await;
                        ProviderReply::Transport("Network Error: the call was abandoned".into())
                    };
                    future::or(done, aborted).await
                }
                None => done.await,
            };
            let _ = tx.send(Event::Provider(id, reply)).await;
        });
        closer.map(|c| StreamingCall::Plain(Some(c)))
    }
}

/// A streamed provider call in flight.
pub(super) enum StreamingCall {
    /// Over plain HTTP: its closer (dropped to close it).
    Plain(Option<Sender<()>>),
    /// Over HTTPS: its socket handle.
    Tls(Abort),
}

impl CallHandle for StreamingCall {
    fn abort(&mut self) {
        match self {
            // Dropping it ends the task's exchange, and so its socket: the
            // provider sees the close. The task still reports (and is
            // ignored).
            StreamingCall::Plain(closer) => drop(closer.take()),
            StreamingCall::Tls(abort) => abort.abort(),
        }
    }
}
