//! The engine's HTTP edge: answers (buffered responses, problems,
//! [`Reply`]s) go out through the connection table, which decides between
//! closing and the next pipelined request; the store reads in flight and
//! what each answer is for. (Connection inputs are routed in `lib.rs`.)

use proto::wire::problem::ProblemType;

use crate::connections::Finished;
use crate::history_load::HistoryLoader;
use crate::respond::Reply;
use crate::services::Services;
use crate::{ConnId, Listener, Output, ReadResult};

/// A store read in flight and what its answer is for, by its owner: the
/// services answer their own reads, the live loop its history and pause
/// reads, the endpoint its placement and admin reads.
pub enum PendingRead {
    /// Answered by [`Services`] alone (pages, listings).
    Answer(AnswerRead),
    /// A subscription's replay: its session's streams (`subscribe.rs`).
    Replay(ReplayRead),
    /// The live loop's (`crate::live::LiveCx`).
    Live(LiveRead),
    /// Where a session lives (`placement.rs`).
    Place(PlaceRead),
    /// The admin port's (`admin_api/mod.rs`).
    Admin(AdminRead),
}

/// A read of the live loop: rebuilding a session's history or its pause.
pub enum LiveRead {
    /// A turn rebuilding provider-facing history after a restart (one of
    /// the load's reads).
    TurnHistory {
        turn: crate::ids::TurnId,
        loader: HistoryLoader,
    },
    /// First gated arrival after a start: history (one of the load's
    /// reads), then a parked pause.
    Recover { loader: HistoryLoader },
    /// The events after a paused assistant message (owner, server results).
    RecoverPause {
        session_id: crate::ids::SessionId,
        paused_seq: u64,
    },
}

/// A read that brings a session here.
pub enum PlaceRead {
    /// Replica mode: a session lease claim.
    Claim {
        session_id: crate::ids::SessionId,
        then: crate::replicas::ClaimFor,
    },
    /// A request naming a session the catalogue does not hold.
    LoadSession {
        session_id: crate::ids::SessionId,
        conn: ConnId,
        req: Box<proto::http::Request>,
        then: LoadFor,
    },
}

/// A read of the admin port.
pub enum AdminRead {
    /// `GET /metrics` waiting for the store thread's figures.
    Metrics { conn: ConnId },
    /// A client key's revocation waiting for the stored sessions it
    /// reaches.
    Revoke { conn: ConnId, key_id: String },
    /// An export, import, fork or lineage answer (`crate::transfer`).
    Transfer { conn: ConnId },
    /// A quota's token budget: the store's usage since its window
    /// started (at start, or before a quota route answers `conn`).
    QuotaUsage {
        scope: crate::quotas::Scope,
        since_ms: u64,
        conn: Option<ConnId>,
    },
}

/// A `session.subscribe` stream's replay read.
pub enum ReplayRead {
    /// Resolving `since_event_id`.
    Start { conn: ConnId },
    /// One page of the replay.
    Page { conn: ConnId },
}

impl ReplayRead {
    pub fn conn(&self) -> ConnId {
        match self {
            ReplayRead::Start { conn } | ReplayRead::Page { conn } => *conn,
        }
    }
}

/// A read whose answer goes straight back to the connection that asked.
pub enum AnswerRead {
    /// `GET …/events` on either port.
    EventsPage { conn: ConnId },
    /// A retried idempotent `sendMessage` whose first answer is replayed.
    IdemReplay {
        conn: ConnId,
        message: serde_json::Value,
    },
    /// `GET /admin/v1/sessions` waiting for its rows.
    SessionList { conn: ConnId },
    /// A usage route waiting for its sums; `scope_json` leads the answer.
    Usage { conn: ConnId, scope_json: String },
}

/// Which port a loaded session's request goes back to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadFor {
    Client,
    Admin,
}

impl Services {
    /// Answers a read of its own: the page, replay or listing goes back
    /// to the connection that asked.
    pub(crate) fn on_answer_read(
        &mut self,
        read: AnswerRead,
        result: Result<ReadResult, crate::store::ReadError>,
    ) {
        match read {
            AnswerRead::EventsPage { conn } => match result {
                Ok(ReadResult::Page(body)) => {
                    self.respond_owned(conn, 200, "application/json", body)
                }
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
            AnswerRead::IdemReplay { conn, message } => self.on_idem_replay(conn, message, result),
            AnswerRead::SessionList { conn } => self.on_session_list(conn, result),
            AnswerRead::Usage { conn, scope_json } => self.on_usage(conn, &scope_json, result),
        }
    }

    /// Closes idle connections and answers stalled partial requests 408.
    pub(crate) fn expire_reads(&mut self) {
        for expired in self.conns.expire(self.now.mono) {
            if expired.partial {
                let timeout = proto::http::Rejection {
                    status: 408,
                    reason: "request not received in time",
                };
                self.send(expired.conn, proto::http::encode_rejection(&timeout));
            }
            self.close_conn(expired.conn);
        }
    }

    /// One log line per request: method, path, status, latency (spec 04 §6).
    pub(crate) fn log_request(&mut self, conn: ConnId, status: u16) {
        self.telemetry.http_status(conn, status);
        let Some((method, path, start, listener)) = self.conns.take_current(conn) else {
            return;
        };
        let ms = self.now.mono - start;
        if path == "/healthz" {
            tracing::debug!(%method, %path, status, ms, "request");
        } else if listener == Listener::Admin {
            tracing::info!(target: "baesrv::admin", %method, %path, status, ms, "request");
        } else {
            tracing::info!(target: "baesrv::client", %method, %path, status, ms, "request");
        }
    }

    pub(crate) fn send(&mut self, conn: ConnId, bytes: impl Into<crate::bytes::Bytes>) {
        let bytes = bytes.into();
        if self.conns.sending(conn, bytes.len()) {
            self.outputs.push_back(Output::Send { conn, bytes });
        }
    }

    /// [`Services::send`] for bytes that reveal no stored state
    /// ([`Output::SendUngated`]).
    pub(crate) fn send_ungated(&mut self, conn: ConnId, bytes: impl Into<crate::bytes::Bytes>) {
        let bytes = bytes.into();
        if self.conns.sending(conn, bytes.len()) {
            self.outputs.push_back(Output::SendUngated { conn, bytes });
        }
    }

    pub(crate) fn close_conn(&mut self, conn: ConnId) {
        if self.conns.close(conn) {
            self.outputs.push_back(Output::Close { conn });
        }
    }

    /// The current request of `conn` is fully answered: close, or leave the
    /// connection for [`Engine::settle`] to move on to its next pipelined
    /// request.
    pub(crate) fn finish_request(&mut self, conn: ConnId) {
        self.telemetry.http_end(conn);
        if self.conns.finish(conn) == Finished::Close {
            self.close_conn(conn);
        }
    }

    /// Whether responses on `conn` must carry `Connection: close`.
    pub(crate) fn closes_after(&self, conn: ConnId) -> bool {
        self.conns.closes_after(conn)
    }

    // ---- Buffered responses: JSON bodies, RFC 7807 problems, pages ----

    /// Sends a [`Reply`] and finishes the request.
    pub(crate) fn reply(&mut self, conn: ConnId, r: Reply) {
        let content_type = Some(r.content_type);
        self.respond_with(conn, r.status, content_type, r.headers, &r.body);
    }

    /// Writes a complete response and finishes the request.
    pub(crate) fn respond(
        &mut self,
        conn: ConnId,
        status: u16,
        content_type: Option<&str>,
        body: &[u8],
    ) {
        self.respond_with(conn, status, content_type, &[], body);
    }

    /// A complete response that reveals no stored state (`/healthz`,
    /// `/api/v1/meta`): never held behind other clients' commits.
    pub(crate) fn respond_ungated(
        &mut self,
        conn: ConnId,
        status: u16,
        content_type: Option<&str>,
        body: &[u8],
    ) {
        self.respond_gated(conn, status, content_type, &[], body, false);
    }

    /// [`Services::respond`] with `extra` headers after `Content-Type`.
    pub(crate) fn respond_with(
        &mut self,
        conn: ConnId,
        status: u16,
        content_type: Option<&str>,
        extra: &[(&str, &str)],
        body: &[u8],
    ) {
        self.respond_gated(conn, status, content_type, extra, body, true);
    }

    /// One complete response; `gated`: held until earlier writes commit.
    pub(crate) fn respond_gated(
        &mut self,
        conn: ConnId,
        status: u16,
        content_type: Option<&str>,
        extra: &[(&str, &str)],
        body: &[u8],
        gated: bool,
    ) {
        let close = self.closes_after(conn);
        self.log_request(conn, status);
        let bytes = proto::http::encode_response(status, content_type, extra, body, close);
        if gated {
            self.send(conn, bytes);
        } else {
            self.send_ungated(conn, bytes);
        }
        self.finish_request(conn);
    }

    pub(crate) fn respond_json(&mut self, conn: ConnId, status: u16, body: &[u8]) {
        self.respond(conn, status, Some("application/json"), body);
    }

    pub(crate) fn respond_value<T: serde::Serialize>(
        &mut self,
        conn: ConnId,
        status: u16,
        value: &T,
    ) {
        match serde_json::to_vec(value) {
            Ok(body) => self.respond_json(conn, status, &body),
            Err(_) => self.problem(conn, ProblemType::Internal, "internal error"),
        }
    }

    /// An RFC 7807 error body (`type`, `title`, `status`, `detail`).
    pub(crate) fn problem(&mut self, conn: ConnId, kind: ProblemType, detail: &str) {
        self.reply(conn, Reply::problem(kind, detail));
    }

    /// A complete response whose body is already built (an events page
    /// rendered by the store): a large body goes out as its own write
    /// instead of being copied behind the head.
    pub(crate) fn respond_owned(
        &mut self,
        conn: ConnId,
        status: u16,
        content_type: &str,
        body: crate::bytes::Bytes,
    ) {
        const COPY_BELOW: usize = 16 * 1024;
        if body.len() < COPY_BELOW {
            return self.respond(conn, status, Some(content_type), &body);
        }
        let close = self.closes_after(conn);
        self.log_request(conn, status);
        let head =
            proto::http::encode_response_head(status, Some(content_type), &[], body.len(), close);
        self.send(conn, head);
        self.send(conn, body);
        self.finish_request(conn);
    }
}
