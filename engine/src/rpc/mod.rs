//! `POST /api/v1/sessions/{id}/rpc`: authentication before the stream
//! opens, the JSON-RPC envelope (spec 01 §5), NDJSON framing, and the
//! methods that do not take the turn gate (the local sandbox and subagent
//! reports among them); the driver checks every gated method starts
//! with, and `front`'s checks of the gated ones' params before they are
//! routed to their session. The remote sandbox and subagent methods live
//! in `session_sandbox.rs`.

use proto::http::Request;
use proto::jsonrpc::{self, Call, Extension, Parsed};
use proto::wire::json;
use serde_json::{json, Value};

mod drivers;
mod front;

use crate::conn::PendingRead;
use crate::ids::{KeyId, SessionId};
use crate::live::LiveCx;
use crate::services::Services;
use crate::session_core::{Op, SteerRefusal};
use crate::ConnId;
use proto::jsonrpc::codes;
use proto::wire::EventType;

use crate::streams::{Stream, StreamKind};

impl LiveCx<'_> {
    pub(crate) fn rpc_request(&mut self, conn: ConnId, req: Request, session_id: &str) {
        let scope = crate::model::KeyScope::Session(session_id);
        let Some(key) = self.catalog.auth_bearer(self.svc, conn, &req, scope) else {
            return;
        };
        let session_id = &self.catalog.session_id(session_id);
        // From here on the answer is always 200 NDJSON (C-050).
        let close = self.svc.closes_after(conn);
        self.svc.log_request(conn, 200);
        self.svc.send(
            conn,
            proto::http::encode_stream_head(200, "application/x-ndjson", close),
        );
        self.svc.open_stream(conn, session_id, None);
        if self.svc.streams.is_open_on(conn, session_id) {
            (self.sessions).stream_opened(session_id.clone(), conn);
        }
        let call = match jsonrpc::decode_call(&req.body) {
            Ok(call) => call,
            Err(e) => {
                if let Some(frame) = e.frame() {
                    self.svc.frame(conn, &frame);
                }
                return self.svc.end_stream(conn);
            }
        };
        if let Some(s) = self.svc.stream_mut(conn) {
            s.id = call.id.clone();
        }
        // The acting client key is the one the session key was minted for.
        let acting = key.client_id.clone().unwrap_or(key.id);
        let ext = self.sessions.driver_extensions(session_id, &acting);
        if let Some(s) = self.svc.stream_mut(conn) {
            s.ext = ext;
        }
        // Quotas: past the key's rate, a documented error on the stream.
        if let Some(r) = self.catalog.quota_rate(self.svc, &acting) {
            return self.svc.quota_error(conn, &r);
        }
        self.dispatch_rpc(conn, session_id, &acting, call);
    }

    fn dispatch_rpc(&mut self, conn: ConnId, session_id: &SessionId, key_id: &KeyId, call: Call) {
        use proto::jsonrpc::MethodParams as P;
        // Extension methods answer as unknown to a client that did not opt
        // in (the reference wire).
        let opted = match call.method {
            jsonrpc::Method::CancelTurn => self.svc.stream_has(conn, Extension::TurnCancel),
            jsonrpc::Method::SteerTurn => self.svc.stream_has(conn, Extension::TurnSteer),
            _ => true,
        };
        if !opted {
            let msg = format!("Method not found: {}", call.method);
            return self
                .svc
                .terminal_error(conn, jsonrpc::codes::METHOD_NOT_FOUND, &msg);
        }
        // Typed params; each handler answers a parse error only after its
        // own checks (spec 01 §6).
        match call.typed_params() {
            P::RegisterDriver(p) => self.register_driver(conn, session_id, key_id, p),
            P::CancelTurn => self.cancel_turn(conn, session_id, key_id),
            P::SteerTurn(p) => {
                if self.catalog.require_open_driver(
                    self.svc,
                    conn,
                    session_id,
                    key_id,
                    "session.steerTurn",
                ) {
                    let steered = front::steer_content(p).and_then(|content| {
                        (self.sessions.core_mut(session_id))
                            .map_or(Err(SteerRefusal::NotRunning), |core| {
                                core.steer(conn, key_id, content)
                            })
                            .map_err(front::steer_rejected)
                    });
                    if let Err(e) = steered {
                        self.svc.terminal_error(conn, e.code, &e.message);
                    }
                }
            }
            P::SendMessage(p) => self.send_message(conn, session_id, key_id, p),
            P::Compact(p) => {
                if self.catalog.require_open_driver(
                    self.svc,
                    conn,
                    session_id,
                    key_id,
                    "session.compact",
                ) {
                    match front::compact_prompt(p) {
                        Ok(prompt) => self.arrive(conn, session_id, key_id, Op::Compact(prompt)),
                        Err(e) => self.svc.terminal_error(conn, e.code, &e.message),
                    }
                }
            }
            P::UpdateClientTools(p) => self
                .catalog
                .update_client_tools(self.svc, conn, session_id, key_id, p),
            P::StartRemoteSandbox(p) => {
                if self.catalog.require_open_driver(
                    self.svc,
                    conn,
                    session_id,
                    key_id,
                    "session.startRemoteSandbox",
                ) {
                    (self.sandbox_cx()).start_remote_sandbox(conn, session_id, key_id, p)
                }
            }
            P::StopRemoteSandbox => {
                if self.catalog.require_driver(
                    self.svc,
                    conn,
                    session_id,
                    key_id,
                    "session.stopRemoteSandbox",
                ) {
                    (self.sandbox_cx()).stop_remote_sandbox(conn, session_id, key_id)
                }
            }
            P::ExecRemoteSandbox(p) => {
                if self.catalog.require_driver(
                    self.svc,
                    conn,
                    session_id,
                    key_id,
                    "session.execRemoteSandbox",
                ) {
                    (self.sandbox_cx()).exec_remote_sandbox(conn, session_id, key_id, p)
                }
            }
            P::ReportLocalSandbox(p) => {
                let report = p.map(|r| (r.event_type(), r.payload()));
                let method = "session.reportLocalSandbox";
                self.record_report(conn, session_id, key_id, method, report);
            }
            P::ReportLocalSubagent(p) => {
                let report = p.map(|r| (r.event_type(), r.payload()));
                let method = "session.reportLocalSubagent";
                self.record_report(conn, session_id, key_id, method, report);
            }
            P::CancelSubagent(p) => {
                if self.catalog.require_driver(
                    self.svc,
                    conn,
                    session_id,
                    key_id,
                    "session.cancelSubagent",
                ) {
                    (self.sandbox_cx()).cancel_subagent(conn, session_id, key_id, p)
                }
            }
            P::Subscribe(p) => {
                // The part exists: this request's stream was opened on it.
                if let Some(streams) = self.sessions.streams_mut(session_id) {
                    streams.subscribe(self.svc, conn, session_id, p);
                }
            }
            P::Unsubscribe => {
                if let Some(streams) = self.sessions.streams_mut(session_id) {
                    streams.unsubscribe_all(self.svc, session_id);
                }
                self.svc.terminal_result(conn, r#"{"unsubscribed":true}"#);
            }
        }
    }

    /// The local sandbox and subagent telemetry reports (spec 06 §5.7,
    /// §6.6): a client-reported lifecycle claim: driver check, params, one
    /// event.
    fn record_report(
        &mut self,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        method: &str,
        report: Parsed<(EventType, Value)>,
    ) {
        let svc = &mut *self.svc;
        if !(self.catalog).require_driver(svc, conn, session_id, key_id, method) {
            return;
        }
        match report {
            Ok((event_type, payload)) => {
                let fanout = self.sessions.streams_mut(session_id);
                svc.append_event(fanout, session_id, Some(key_id), event_type, payload);
                svc.terminal_result(conn, r#"{"reported":true}"#);
            }
            Err(msg) => svc.terminal_error(conn, codes::INVALID_PARAMS, &msg),
        }
    }

    fn register_driver(
        &mut self,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        params: Parsed<jsonrpc::RegisterDriverParams>,
    ) {
        if let Some(msg) = self.catalog.open_state_error(session_id) {
            return self
                .svc
                .terminal_error(conn, codes::APPLICATION_ERROR, &msg);
        }
        // Extension opt-in (docs/extensions.md); without the param the
        // reference behaviour and answer are unchanged.
        let asked = match params {
            Ok(p) => p.extensions,
            Err(msg) => return self.svc.terminal_error(conn, codes::INVALID_PARAMS, &msg),
        };
        let (sid, kid) = (session_id.clone(), key_id.clone());
        let newly = self.catalog.drivers.entry(sid).or_default().insert(kid);
        if newly {
            self.svc.append_event(
                self.sessions.streams_mut(session_id),
                session_id,
                Some(key_id),
                EventType::SessionDriverRegister,
                json!({}),
            );
            let profile_id = self.catalog.profile_of(session_id);
            let images = self
                .catalog
                .live_profile(&profile_id)
                .map(|p| p.row.available_sandboxes.clone())
                .unwrap_or_default();
            if !images.is_empty() {
                let list = self.sandbox_cx().sandbox_images_json(&profile_id, &images);
                self.svc.append_event(
                    self.sessions.streams_mut(session_id),
                    session_id,
                    Some(key_id),
                    EventType::SessionSandboxAvailable,
                    json!({ "images": list }),
                );
            }
        }
        match asked {
            None => self.svc.terminal_result(conn, r#"{"registered":true}"#),
            Some(ext) => {
                let (sid, kid) = (session_id.clone(), key_id.clone());
                self.sessions.register_driver(sid, kid, ext);
                let body = json!({"registered": true, "extensions": ext.names()});
                self.svc.terminal_result(conn, &json::text(&body));
            }
        }
    }
}

impl Services {
    /// Whether the stream on `conn` opted into `e`.
    pub(crate) fn stream_has(&self, conn: ConnId, e: Extension) -> bool {
        self.streams.has(conn, e)
    }

    // ---- NDJSON stream plumbing -------------------------------------------

    pub(crate) fn open_stream(&mut self, conn: ConnId, session_id: &SessionId, id: Option<Value>) {
        let Some(unflushed) = self.conns.get(&conn).map(|c| c.unflushed) else {
            return;
        };
        self.streams
            .open(conn, session_id, unflushed, self.now.mono);
        if let Some(s) = self.streams.get_mut(conn) {
            s.id = id;
        }
    }

    pub(crate) fn stream_mut(&mut self, conn: ConnId) -> Option<&mut Stream> {
        self.streams.get_mut(conn)
    }

    /// One NDJSON line as one HTTP chunk.
    pub(crate) fn frame(&mut self, conn: ConnId, line: &str) {
        self.encoded_frame(conn, crate::store::encode_frame(line));
    }

    /// A frame already chunk-encoded (rendered by the store, or one live
    /// event's frame shared by all its streams).
    pub(crate) fn encoded_frame(&mut self, conn: ConnId, bytes: impl Into<crate::bytes::Bytes>) {
        let bytes = bytes.into();
        self.streams.sent(conn, bytes.len(), self.now.mono);
        self.send(conn, bytes);
    }

    /// Terminal `result` frame (omitted for notifications), then the end.
    pub(crate) fn terminal_result(&mut self, conn: ConnId, result_json: &str) {
        if let Some(id) = self.stream_mut(conn).and_then(|s| s.id.clone()) {
            let frame = jsonrpc::result_frame(&id, result_json);
            self.frame(conn, &frame);
        }
        self.end_stream(conn);
    }

    /// [`Services::terminal_result`] for a result in parts (already
    /// escaped): one chunk whose size line is computed up front, the parts
    /// sent as they are (shared ones without a copy).
    pub(crate) fn terminal_result_parts(&mut self, conn: ConnId, parts: &[crate::bytes::Bytes]) {
        if let Some(id) = self.stream_mut(conn).and_then(|s| s.id.clone()) {
            let head = jsonrpc::result_frame_head(&id, 0);
            let head = jsonrpc::escape_line_separators(&head);
            let tail = jsonrpc::RESULT_FRAME_TAIL;
            let len = head.len() + parts.iter().map(|p| p.len()).sum::<usize>() + tail.len();
            let mut first = Vec::with_capacity(head.len() + 20);
            proto::http::encode_chunk_head(len, &mut first);
            first.extend_from_slice(head.as_bytes());
            let mut last = Vec::with_capacity(tail.len() + 2);
            last.extend_from_slice(tail.as_bytes());
            last.extend_from_slice(b"\r\n");
            self.streams
                .sent(conn, first.len() + len - head.len() + 2, self.now.mono);
            self.send(conn, first);
            for p in parts {
                self.send(conn, p.clone());
            }
            self.send(conn, last);
        }
        self.end_stream(conn);
    }

    /// The terminal `quota_exceeded` error of a refused request, with the
    /// refusal's `data` (omitted for notifications), then the end.
    pub(crate) fn quota_error(&mut self, conn: ConnId, r: &crate::quotas::Refusal) {
        if let Some(id) = self.stream_mut(conn).and_then(|s| s.id.clone()) {
            let data = json::text(&r.data());
            let code = codes::QUOTA_EXCEEDED;
            let frame = jsonrpc::error_frame_with_data(Some(&id), code, &r.detail(), &data);
            self.frame(conn, &frame);
        }
        self.end_stream(conn);
    }

    /// Terminal `error` frame (omitted for notifications), then the end.
    pub(crate) fn terminal_error(
        &mut self,
        conn: ConnId,
        code: i64,
        message: impl std::fmt::Display,
    ) {
        if let Some(id) = self.stream_mut(conn).and_then(|s| s.id.clone()) {
            let frame = jsonrpc::error_frame(Some(&id), code, &message.to_string());
            self.frame(conn, &frame);
        }
        self.end_stream(conn);
    }

    /// Closes the chunked body and frees the connection for its next request.
    pub(crate) fn end_stream(&mut self, conn: ConnId) {
        let Some(stream) = self.streams.end(conn) else {
            return;
        };
        if matches!(stream.kind, StreamKind::Subscribe) {
            // A replay read still in flight belongs to this stream: a later
            // request on the same keep-alive connection must not get its rows.
            self.reads
                .retain(|p| !matches!(p, PendingRead::Replay(r) if r.conn() == conn));
        }
        self.send(conn, proto::http::LAST_CHUNK.to_vec());
        self.finish_request(conn);
    }

    /// Earliest keepalive deadline over open streams (opt-in).
    pub(crate) fn next_keepalive(&self) -> Option<crate::MonoMs> {
        let every = self.config.ndjson_keepalive_ms;
        if every == 0 {
            return None;
        }
        self.streams.next_keepalive(every)
    }

    /// A blank line (which NDJSON readers skip) on every stream silent for
    /// the keepalive interval.
    pub(crate) fn send_keepalives(&mut self) {
        let every = self.config.ndjson_keepalive_ms;
        if every == 0 {
            return;
        }
        for conn in self.streams.keepalives_due(every, self.now.mono) {
            self.frame(conn, "\n");
        }
    }

    /// Accounts flushed bytes against in-flight frames.
    /// (Between the two, a stalled subscription may read on:
    /// [`crate::sessions::Sessions::stream_flushed`].)
    pub(crate) fn stream_flushed(&mut self, conn: ConnId, bytes: usize) {
        self.streams.flushed(conn, bytes);
    }

    /// Deltas held for a slow reader (extension `turn.deltas`) that its
    /// flush progress lets out.
    pub(crate) fn send_drained_deltas(&mut self, conn: ConnId) {
        let (limits, now) = (self.delta_limits(), self.now.mono);
        for b in self.streams.deltas_drained(conn, limits, now) {
            self.send_ungated(conn, b);
        }
    }
}
