//! Connection lifecycle: bytes in, decoded requests dispatched one at a time
//! (pipelined requests wait their turn), responses out, close rules.

use proto::http::{Decoded, RequestDecoder};

use crate::turn::history_load::HistoryLoader;
use crate::{ConnId, Engine, Listener, Output, ReadResult};

/// What a connection is doing.
pub struct Conn {
    pub listener: Listener,
    pub decoder: RequestDecoder,
    /// A request is being answered; later pipelined requests wait.
    pub busy: bool,
    /// The current request's keep-alive verdict.
    pub keep_alive: bool,
    /// A `Close` was emitted; ignore further input.
    pub closing: bool,
    /// Bytes emitted but not yet reported flushed (back-pressure measure).
    pub unflushed: usize,
    /// An open NDJSON response (`/rpc`).
    pub stream: Option<crate::rpc::Stream>,
    /// Method, path and start time of the request being answered (logged
    /// once with its status).
    pub current: Option<(String, String, crate::MonoMs)>,
    /// When the first bytes of a still-incomplete request arrived.
    pub partial_since: Option<crate::MonoMs>,
    /// Armed while waiting for request bytes (indexed in `read_deadlines`).
    pub read_deadline: Option<crate::MonoMs>,
}

/// A request waiting for a store read.
pub enum PendingRead {
    /// `GET …/events` on either port.
    EventsPage { conn: ConnId, limit: usize },
    /// `session.subscribe` resolving `since_event_id`.
    ReplayStart { conn: ConnId },
    /// `session.subscribe` replaying one page.
    ReplayPage { conn: ConnId },
    /// A retried idempotent `sendMessage` whose first answer is replayed.
    IdemReplay {
        conn: ConnId,
        message: serde_json::Value,
    },
    /// A turn rebuilding provider-facing history after a restart (one of
    /// the load's reads).
    TurnHistory {
        turn: crate::turn::TurnId,
        loader: HistoryLoader,
    },
    /// First gated arrival after a start: history (one of the load's
    /// reads), then a parked pause.
    Recover { loader: HistoryLoader },
    /// The events after a paused assistant message (owner, server results).
    RecoverPause { session_id: String, paused_seq: u64 },
}

impl Engine {
    pub(crate) fn on_accepted(&mut self, conn: ConnId, listener: Listener) {
        let limits = proto::http::Limits {
            max_head_bytes: self.config.max_head_bytes,
            max_headers: self.config.max_headers,
            max_body_bytes: self.config.max_body_bytes,
            ..Default::default()
        };
        self.conns.insert(
            conn,
            Conn {
                listener,
                decoder: RequestDecoder::new(limits),
                busy: false,
                keep_alive: true,
                closing: false,
                unflushed: 0,
                stream: None,
                current: None,
                partial_since: None,
                read_deadline: None,
            },
        );
        if self.shutting_down {
            self.close_conn(conn);
        } else {
            self.arm_read_deadline(conn);
        }
    }

    pub(crate) fn on_received(&mut self, conn: ConnId, bytes: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.closing {
            return;
        }
        c.decoder.feed(bytes);
        // A client that keeps pipelining while a request is being answered
        // must not grow the buffer without bound.
        let cap = 2 * (self.config.max_head_bytes + self.config.max_body_bytes);
        if c.busy && c.decoder.buffered() > cap {
            tracing::debug!(conn, "pipelined input over the buffer cap; closing");
            return self.close_conn(conn);
        }
        self.pump(conn);
    }

    pub(crate) fn on_flushed(&mut self, conn: ConnId, bytes: usize) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.unflushed = c.unflushed.saturating_sub(bytes);
        }
        self.stream_flushed(conn, bytes);
    }

    pub(crate) fn on_closed(&mut self, conn: ConnId) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        if let Some(d) = c.read_deadline {
            self.read_deadlines.remove(&(d, conn));
        }
        if let Some(stream) = c.stream {
            self.unindex_stream(conn, &stream.session_id);
        }
        self.forget_conn_in_turns(conn);
    }

    /// Decodes and dispatches requests until one goes asynchronous or the
    /// buffer runs dry.
    pub(crate) fn pump(&mut self, conn: ConnId) {
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            if c.busy || c.closing {
                return;
            }
            match c.decoder.poll() {
                Ok(None) => return self.arm_read_deadline(conn),
                Ok(Some(Decoded::ContinueExpected)) => {
                    self.send(conn, proto::http::CONTINUE_100.to_vec());
                }
                Ok(Some(Decoded::Request(req))) => {
                    c.busy = true;
                    c.partial_since = None;
                    if let Some(d) = c.read_deadline.take() {
                        self.read_deadlines.remove(&(d, conn));
                    }
                    let Some(c) = self.conns.get_mut(&conn) else {
                        return;
                    };
                    c.keep_alive = req.keep_alive && !self.shutting_down;
                    c.current = Some((
                        req.method.as_str().to_string(),
                        req.path.clone(),
                        self.now.mono,
                    ));
                    let listener = c.listener;
                    match listener {
                        Listener::Client => self.route_client(conn, req),
                        Listener::Admin => self.route_admin(conn, req),
                    }
                }
                Err(rejection) => {
                    tracing::debug!(
                        conn,
                        status = rejection.status,
                        reason = rejection.reason,
                        "rejected request"
                    );
                    self.send(conn, proto::http::encode_rejection(&rejection));
                    self.close_conn(conn);
                    return;
                }
            }
        }
    }

    /// Waiting for request bytes: an idle connection gets the idle timeout,
    /// a partial request the request timeout from its first byte (slowloris).
    fn arm_read_deadline(&mut self, conn: ConnId) {
        let now = self.now.mono;
        let (idle_ms, request_ms) = (self.config.idle_timeout_ms, self.config.request_timeout_ms);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let deadline = if c.decoder.is_idle() {
            c.partial_since = None;
            now + idle_ms
        } else {
            *c.partial_since.get_or_insert(now) + request_ms
        };
        if let Some(old) = c.read_deadline.replace(deadline) {
            self.read_deadlines.remove(&(old, conn));
        }
        self.read_deadlines.insert((deadline, conn));
    }

    /// Earliest read deadline.
    pub(crate) fn next_read_deadline(&self) -> Option<crate::MonoMs> {
        self.read_deadlines.first().map(|(d, _)| *d)
    }

    /// Closes idle connections and answers stalled partial requests 408.
    pub(crate) fn expire_reads(&mut self) {
        let now = self.now.mono;
        while let Some(&(deadline, conn)) = self.read_deadlines.first() {
            if deadline > now {
                return;
            }
            self.read_deadlines.remove(&(deadline, conn));
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            c.read_deadline = None;
            if c.busy || c.closing {
                continue;
            }
            if !c.decoder.is_idle() {
                let timeout = proto::http::Rejection {
                    status: 408,
                    reason: "request not received in time",
                };
                self.send(conn, proto::http::encode_rejection(&timeout));
            }
            self.close_conn(conn);
        }
    }

    /// One log line per request: method, path, status, latency (spec 04 §6).
    pub(crate) fn log_request(&mut self, conn: ConnId, status: u16) {
        let Some((method, path, start)) = self.conns.get_mut(&conn).and_then(|c| c.current.take())
        else {
            return;
        };
        let ms = self.now.mono - start;
        let listener = self.conns.get(&conn).map(|c| c.listener);
        if path == "/healthz" {
            tracing::debug!(%method, %path, status, ms, "request");
        } else if listener == Some(Listener::Admin) {
            tracing::info!(target: "baesrv::admin", %method, %path, status, ms, "request");
        } else {
            tracing::info!(target: "baesrv::client", %method, %path, status, ms, "request");
        }
    }

    pub(crate) fn send(&mut self, conn: ConnId, bytes: Vec<u8>) {
        if let Some(c) = self.conns.get_mut(&conn) {
            if c.closing {
                return;
            }
            c.unflushed += bytes.len();
            self.outputs.push_back(Output::Send { conn, bytes });
        }
    }

    pub(crate) fn close_conn(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            if !c.closing {
                c.closing = true;
                self.outputs.push_back(Output::Close { conn });
            }
        }
    }

    /// The current request of `conn` is fully answered: close or move on to
    /// the next pipelined request.
    pub(crate) fn finish_request(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.busy = false;
        if !c.keep_alive {
            self.close_conn(conn);
        } else {
            self.pump(conn);
        }
    }

    /// Whether responses on `conn` must carry `Connection: close`.
    pub(crate) fn closes_after(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).map(|c| !c.keep_alive).unwrap_or(true)
    }

    pub(crate) fn on_read_done(&mut self, id: u64, result: Result<ReadResult, String>) {
        let Some(pending) = self.pending_reads.remove(&id) else {
            return;
        };
        match pending {
            PendingRead::EventsPage { conn, limit } => match result {
                Ok(ReadResult::Events(rows)) => self.answer_events_page(conn, limit, rows),
                Ok(_) | Err(_) => {
                    if let Err(e) = &result {
                        tracing::error!(error = %e, "event page read failed");
                    }
                    self.problem(
                        conn,
                        proto::wire::problem::ProblemType::Internal,
                        "internal error",
                    );
                }
            },
            PendingRead::ReplayStart { conn } => self.on_replay_start(conn, result),
            PendingRead::ReplayPage { conn } => self.on_replay_page(conn, result),
            PendingRead::IdemReplay { conn, message } => self.on_idem_replay(conn, message, result),
            PendingRead::TurnHistory { turn, loader } => {
                // A turn that ended meanwhile needs no more reads.
                if !self.turns.contains_key(&turn) {
                    return;
                }
                let again = |loader| PendingRead::TurnHistory { turn, loader };
                if let Some(done) = self.continue_history_load(loader, result, again) {
                    self.on_turn_history(turn, done);
                }
            }
            PendingRead::Recover { loader } => {
                let session_id = loader.session_id().to_string();
                let again = |loader| PendingRead::Recover { loader };
                if let Some(done) = self.continue_history_load(loader, result, again) {
                    self.on_recover(&session_id, done);
                }
            }
            PendingRead::RecoverPause {
                session_id,
                paused_seq,
            } => self.on_recover_pause(&session_id, paused_seq, result),
        }
    }
}
