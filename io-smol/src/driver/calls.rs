//! Provider calls from the driver thread: unstreamed ones as before
//! (plain HTTP on this thread, HTTPS on ureq in the blocking pool), and
//! streamed ones (`stream = true`) with a handle that closes their
//! connection the moment the engine gives up on them
//! ([`engine::Output::AbortProvider`]).

use std::time::Duration;

use engine::{CallId, ProviderReply};
use futures_lite::future;
use smol::channel::{self, Sender};

use super::{provider, provider_http, provider_stream, spawn_local, Driver, Event};

impl Driver {
    pub(super) fn call_provider(&mut self, call: engine::ProviderCall) {
        self.provider_inflight += 1;
        let tx = self.events_tx.clone();
        let pool = self.http_providers.clone();
        let deadlines = self.deadlines.clone();
        let id = call.id;
        tracing::debug!(call = id.0, stream = call.stream, "provider call started");
        let target = provider_http::HttpTarget::parse(&call.url);
        let (closer, abort) = match (call.stream, target) {
            // Streamed over plain HTTP: on this thread; dropping the task
            // closes its connection.
            (true, Some(target)) => {
                let chunks = provider_http::Chunks {
                    tx: tx.clone(),
                    call: id,
                };
                let (closer, closed) = channel::bounded::<()>(1);
                spawn_local(async move {
                    let expired = deadlines.after(Duration::from_millis(call.timeout_ms.max(1)));
                    let call_done =
                        provider_http::perform(&pool, &call, &target, expired, Some(chunks));
                    // The closer dropped: the exchange (and its socket) is
                    // dropped with the losing branch.
                    let aborted = async {
                        let _ = closed.recv().await;
                        ProviderReply::Transport("Network Error: the call was abandoned".into())
                    };
                    let reply = future::or(call_done, aborted).await;
                    log_reply(id, &reply);
                    let _ = tx.send(Event::Provider(id, reply)).await;
                });
                (Some(closer), None)
            }
            // Streamed over HTTPS: a blocking thread that owns its socket.
            (true, None) => {
                let abort = provider_stream::Abort::default();
                let a = abort.clone();
                spawn_local(async move {
                    let chunk_tx = tx.clone();
                    let reply = blocking::unblock(move || {
                        provider_stream::perform(&call, &a, |bytes| {
                            let _ = chunk_tx.send_blocking(Event::ProviderChunk(id, bytes));
                        })
                    })
                    .await;
                    log_reply(id, &reply);
                    let _ = tx.send(Event::Provider(id, reply)).await;
                });
                (None, Some(abort))
            }
            (false, target) => {
                spawn_local(async move {
                    let reply = match target {
                        Some(target) => {
                            let expired =
                                deadlines.after(Duration::from_millis(call.timeout_ms.max(1)));
                            provider_http::perform(&pool, &call, &target, expired, None).await
                        }
                        None => blocking::unblock(move || provider::perform(&call)).await,
                    };
                    log_reply(id, &reply);
                    let _ = tx.send(Event::Provider(id, reply)).await;
                });
                return;
            }
        };
        self.streaming.insert(
            id,
            StreamingCall {
                closer,
                abort,
                aborted: false,
            },
        );
    }

    /// The engine closed a provider call (a cancel, a stream fault): a
    /// streamed one's connection closes now. An unstreamed one is left to
    /// finish, as before streaming existed (a close handle would cost every
    /// call); the engine ignores its reply.
    pub(super) fn abort_provider(&mut self, call: CallId) {
        tracing::debug!(call = call.0, "provider call aborted");
        let Some(s) = self.streaming.get_mut(&call) else {
            return;
        };
        s.aborted = true;
        if let Some(a) = &s.abort {
            a.abort();
        }
        // Dropping it ends the task's exchange, and so its socket: the
        // provider sees the close. The task still reports (and is ignored).
        drop(s.closer.take());
    }
}

/// A streamed provider call in flight.
pub(super) struct StreamingCall {
    /// The plain-HTTP call's closer (dropped to close it).
    closer: Option<Sender<()>>,
    /// The HTTPS call's socket handle.
    abort: Option<provider_stream::Abort>,
    /// The engine gave up on it: nothing more of it reaches the engine.
    pub(super) aborted: bool,
}

fn log_reply(id: CallId, reply: &ProviderReply) {
    match reply {
        ProviderReply::Http { status, body, .. } => {
            tracing::debug!(
                call = id.0,
                status,
                bytes = body.len(),
                "provider call done"
            )
        }
        ProviderReply::Transport(e) => {
            tracing::debug!(call = id.0, error = %e, "provider call failed")
        }
        ProviderReply::Credential(e) => {
            tracing::debug!(call = id.0, error = %e, "provider credential unresolved")
        }
        ProviderReply::Streamed => tracing::debug!(call = id.0, "provider stream done"),
    }
}
