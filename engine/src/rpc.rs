//! `POST /api/v1/sessions/{id}/rpc`: authentication before the stream
//! opens, the JSON-RPC envelope (spec 01 §5), NDJSON framing, and the
//! methods that do not take the turn gate.

use std::collections::VecDeque;

use proto::http::Request;
use proto::jsonrpc::{self, Call, Extension, Extensions};
use serde_json::{json, Value};

use crate::conn::PendingRead;
use crate::log::Appended;
use crate::store::{EventRow, ReadResult, SessionState, StoreRead};
use crate::{ConnId, Engine};

/// Rows per replay read (spec 01 §6.3).
const REPLAY_PAGE: usize = 200;

/// An open NDJSON response on a connection.
pub struct Stream {
    pub session_id: String,
    /// The request id (`None` = notification: no terminal frame).
    pub id: Option<Value>,
    pub kind: StreamKind,
    /// Byte sizes of frames emitted but not yet flushed: the consumer's lag.
    pub in_flight: VecDeque<usize>,
    /// Bytes of the oldest in-flight frame already flushed.
    pub flushed_partial: usize,
    /// Bytes emitted on the connection before this stream's first frame
    /// (earlier responses, the head) and not yet flushed: flush reports
    /// cover them first, so they never count as this consumer's progress.
    pub unflushed_before: usize,
    /// When the last bytes went out (keepalive timing).
    pub last_write_ms: u64,
    /// Extensions the stream's client opted into (docs/extensions.md).
    pub ext: proto::jsonrpc::Extensions,
}

pub enum StreamKind {
    /// A single-answer method: nothing is forwarded.
    Single,
    /// `session.subscribe`.
    Subscribe(Subscription),
    /// A gated request waiting in the FIFO: silent until admitted.
    Queued,
    /// The gate holder's stream: every event except its own input.
    Turn,
}

pub struct Subscription {
    /// Replay still running: live events wait here (deduplicated by seq).
    pub replaying: bool,
    pub buffered: Vec<Appended>,
    /// Highest seq delivered so far.
    pub delivered: u64,
    /// Id of the last replayed event (the `replay_complete` marker).
    pub last_id: Option<String>,
}

impl Engine {
    pub(crate) fn rpc_request(&mut self, conn: ConnId, req: Request, session_id: &str) {
        let Some(key) = self.auth_session(conn, &req, session_id) else {
            return;
        };
        // From here on the answer is always 200 NDJSON (C-050).
        let close = self.closes_after(conn);
        self.log_request(conn, 200);
        self.send(
            conn,
            proto::http::encode_stream_head(200, "application/x-ndjson", close),
        );
        self.open_stream(conn, session_id, None);
        let call = match jsonrpc::decode_call(&req.body) {
            Ok(call) => call,
            Err(e) => {
                if let Some(frame) = e.frame() {
                    self.frame(conn, &frame);
                }
                return self.end_stream(conn);
            }
        };
        if let Some(s) = self.stream_mut(conn) {
            s.id = call.id.clone();
        }
        // The acting client key is the one the session key was minted for.
        let acting = key.client_id.clone().unwrap_or(key.id);
        let ext = self.driver_extensions(session_id, &acting);
        if let Some(s) = self.stream_mut(conn) {
            s.ext = ext;
        }
        self.dispatch_rpc(conn, session_id, &acting, call);
    }

    fn dispatch_rpc(&mut self, conn: ConnId, session_id: &str, key_id: &str, call: Call) {
        match call.method.as_str() {
            "session.registerDriver" => {
                self.register_driver(conn, session_id, key_id, &call.params)
            }
            // Extension methods answer as unknown to a client that did not
            // opt in (the reference wire).
            "session.cancelTurn" if self.stream_has(conn, Extension::TurnCancel) => {
                self.cancel_turn(conn, session_id, key_id)
            }
            "session.sendMessage" => self.send_message(conn, session_id, key_id, &call.params),
            "session.compact" => self.compact(conn, session_id, key_id, &call.params),
            "session.updateClientTools" => {
                self.update_client_tools(conn, session_id, key_id, &call.params)
            }
            "session.startRemoteSandbox" => {
                self.start_remote_sandbox(conn, session_id, key_id, &call.params)
            }
            "session.stopRemoteSandbox" => self.stop_remote_sandbox(conn, session_id, key_id),
            "session.execRemoteSandbox" => {
                self.exec_remote_sandbox(conn, session_id, key_id, &call.params)
            }
            "session.reportLocalSandbox" => {
                self.report_local_sandbox(conn, session_id, key_id, &call.params)
            }
            "session.reportLocalSubagent" => {
                self.report_local_subagent(conn, session_id, key_id, &call.params)
            }
            "session.cancelSubagent" => {
                self.cancel_subagent(conn, session_id, key_id, &call.params)
            }
            "session.subscribe" => self.subscribe(conn, session_id, &call.params),
            "session.unsubscribe" => {
                self.unsubscribe_all(session_id);
                self.terminal_result(conn, r#"{"unsubscribed":true}"#);
            }
            other => {
                let msg = format!("Method not found: {other}");
                self.terminal_error(conn, -32601, &msg);
            }
        }
    }

    /// `session.updateClientTools` (spec 06 §3.2): full replacement of the
    /// caller's own client tools, used from its next provider call.
    fn update_client_tools(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        params: &Value,
    ) {
        if !self.require_open_driver(conn, session_id, key_id, "session.updateClientTools") {
            return;
        }
        let parsed = match jsonrpc::UpdateClientToolsParams::parse(params) {
            Ok(p) => p,
            Err(msg) => return self.terminal_error(conn, -32602, &msg),
        };
        let profile_id = self.catalog.sessions[session_id].profile_id.clone();
        let Some(allowed) = self.catalog.live_profile(&profile_id).map(|p| {
            p.row
                .allowed_tools
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect::<Vec<_>>()
        }) else {
            return self.terminal_error(conn, -32603, "Internal error");
        };
        if let Err(e) = parsed.check_allowed(&allowed) {
            return self.terminal_error(conn, e.code, &e.message);
        }
        let session = self
            .catalog
            .sessions
            .get_mut(session_id)
            .expect("open session");
        let tools: Vec<Value> = parsed.tools.iter().map(|t| t.to_value()).collect();
        session.client_tools.set(key_id, tools);
        let row = session.to_row();
        self.write(crate::store::StoreWrite::SetSessionTools {
            id: row.id,
            client_tools: row.client_tools,
            sandbox_tools: row.sandbox_tools,
            subagent_tools: row.subagent_tools,
        });
        self.terminal_result(conn, r#"{"updated":true}"#);
    }

    /// `"session is <state>, not open"` unless the session is open.
    pub(crate) fn open_state_error(&self, session_id: &str) -> Option<String> {
        match self.catalog.sessions.get(session_id).map(|s| s.state) {
            Some(SessionState::Open) => None,
            Some(state) => Some(format!("session is {}, not open", state.as_str())),
            None => Some("session no longer exists".to_string()),
        }
    }

    fn register_driver(&mut self, conn: ConnId, session_id: &str, key_id: &str, params: &Value) {
        if let Some(msg) = self.open_state_error(session_id) {
            return self.terminal_error(conn, -32000, &msg);
        }
        // Extension opt-in (docs/extensions.md); without the param the
        // reference behaviour and answer are unchanged.
        let asked = match Extensions::from_params(params) {
            Ok(a) => a,
            Err(msg) => return self.terminal_error(conn, -32602, &msg),
        };
        let newly = self
            .catalog
            .drivers
            .entry(session_id.to_string())
            .or_default()
            .insert(key_id.to_string());
        if newly {
            self.append_event(
                session_id,
                Some(key_id),
                "session.driver.register",
                json!({}),
            );
            let profile_id = self.catalog.sessions[session_id].profile_id.clone();
            let images = self
                .catalog
                .live_profile(&profile_id)
                .map(|p| p.row.available_sandboxes.clone())
                .unwrap_or_default();
            if !images.is_empty() {
                let list = self.sandbox_images_json(&profile_id, &images);
                self.append_event(
                    session_id,
                    Some(key_id),
                    "session.sandbox.available",
                    json!({ "images": list }),
                );
            }
        }
        match asked {
            None => self.terminal_result(conn, r#"{"registered":true}"#),
            Some(ext) => {
                self.driver_ext
                    .insert((session_id.to_string(), key_id.to_string()), ext);
                let body = json!({"registered": true, "extensions": ext.names()});
                self.terminal_result(conn, &body.to_string());
            }
        }
    }

    fn subscribe(&mut self, conn: ConnId, session_id: &str, params: &Value) {
        let since = match params.get("since_event_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                return self.terminal_error(
                    conn,
                    -32602,
                    "Invalid params: since_event_id must be a string",
                );
            }
        };
        let asked = match Extensions::from_params(params) {
            Ok(a) => a.unwrap_or_default(),
            Err(msg) => return self.terminal_error(conn, -32602, &msg),
        };
        // Attach first, then replay, so nothing committed meanwhile is lost.
        let replaying = since.is_some();
        if let Some(s) = self.stream_mut(conn) {
            s.ext = s.ext.union(asked);
            s.kind = StreamKind::Subscribe(Subscription {
                replaying,
                buffered: Vec::new(),
                delivered: 0,
                last_id: None,
            });
        }
        match since {
            Some(event_id) => self.read(
                StoreRead::EventSeq {
                    session_id: session_id.to_string(),
                    event_id,
                },
                PendingRead::ReplayStart { conn },
            ),
            None => self.replay_complete(conn, None),
        }
    }

    /// Extension `subscribe.replay_complete`: the marker between replayed
    /// and live events.
    fn replay_complete(&mut self, conn: ConnId, last_id: Option<&str>) {
        if !self.stream_has(conn, Extension::ReplayComplete) {
            return;
        }
        let frame = jsonrpc::replay_complete_frame(last_id);
        self.frame(conn, &frame);
    }

    /// Whether the stream on `conn` opted into `e`.
    pub(crate) fn stream_has(&self, conn: ConnId, e: Extension) -> bool {
        self.conns
            .get(&conn)
            .and_then(|c| c.stream.as_ref())
            .is_some_and(|s| s.ext.has(e))
    }

    /// What `key_id` opted into when it registered on the session.
    pub(crate) fn driver_extensions(&self, session_id: &str, key_id: &str) -> Extensions {
        self.driver_ext
            .get(&(session_id.to_string(), key_id.to_string()))
            .copied()
            .unwrap_or_default()
    }

    pub(crate) fn on_replay_start(&mut self, conn: ConnId, result: Result<ReadResult, String>) {
        match result {
            // An unknown or foreign id replays from the very first event.
            Ok(ReadResult::EventSeq(seq)) => {
                #[cfg(feature = "planted-bugs")]
                let seq =
                    seq.map(|s| s + self.planted(crate::planted::Bug::ReplaySkipsBoundary) as u64);
                self.replay_page(conn, seq.unwrap_or(0))
            }
            _ => self.replay_failed(conn),
        }
    }

    fn replay_page(&mut self, conn: ConnId, after_seq: u64) {
        let Some(s) = self.stream_mut(conn) else {
            return;
        };
        let session_id = s.session_id.clone();
        self.read(
            StoreRead::Events {
                session_id,
                after_seq,
                limit: REPLAY_PAGE,
            },
            PendingRead::ReplayPage { conn },
        );
    }

    pub(crate) fn on_replay_page(&mut self, conn: ConnId, result: Result<ReadResult, String>) {
        let rows: Vec<EventRow> = match result {
            Ok(ReadResult::Events(rows)) => rows,
            _ => return self.replay_failed(conn),
        };
        if self.stream_mut(conn).is_none() {
            return;
        }
        let full = rows.len() == REPLAY_PAGE;
        let mut last = None;
        for row in &rows {
            let frame = jsonrpc::event_frame(&crate::respond::event_json(row));
            self.frame(conn, &frame);
            last = Some(row.seq);
        }
        if let Some(StreamKind::Subscribe(sub)) = self.stream_mut(conn).map(|s| &mut s.kind) {
            if let Some(l) = last {
                sub.delivered = l;
            }
            if let Some(row) = rows.last() {
                sub.last_id = Some(row.id.clone());
            }
        }
        if full {
            return self.replay_page(conn, last.unwrap_or(0));
        }
        // Replay done: deliver what arrived meanwhile, skipping duplicates.
        let (pending, last_id) = match self.stream_mut(conn).map(|s| &mut s.kind) {
            Some(StreamKind::Subscribe(sub)) => {
                sub.replaying = false;
                (std::mem::take(&mut sub.buffered), sub.last_id.take())
            }
            _ => return,
        };
        self.replay_complete(conn, last_id.as_deref());
        for ev in pending {
            self.deliver(conn, &ev);
        }
    }

    fn replay_failed(&mut self, conn: ConnId) {
        let frame = jsonrpc::error_frame(Some(&Value::Null), -32000, "replay failed");
        self.frame(conn, &frame);
        self.end_stream(conn);
    }

    /// Ends every `session.subscribe` stream of the session (level-triggered:
    /// also those still replaying).
    pub(crate) fn unsubscribe_all(&mut self, session_id: &str) {
        let subs: Vec<ConnId> = self
            .session_streams(session_id)
            .into_iter()
            .filter(|c| {
                matches!(
                    self.conns
                        .get(c)
                        .and_then(|c| c.stream.as_ref())
                        .map(|s| &s.kind),
                    Some(StreamKind::Subscribe(_))
                )
            })
            .collect();
        for conn in subs {
            self.end_stream(conn);
        }
    }

    /// Session closed: every stream of it ends cleanly.
    pub(crate) fn end_live_session(&mut self, session_id: &str) {
        self.unsubscribe_all(session_id);
        self.drop_live(session_id);
    }

    /// Fans a committed event out to the session's live streams.
    pub(crate) fn publish(&mut self, session_id: &str, ev: &Appended) {
        let targets = self.session_streams(session_id);
        let quiet = self.quiet;
        for conn in targets {
            let Some(s) = self.stream_mut(conn) else {
                continue;
            };
            match &mut s.kind {
                StreamKind::Single | StreamKind::Queued => {}
                StreamKind::Turn if quiet == Some(conn) => {}
                StreamKind::Turn => self.deliver(conn, ev),
                StreamKind::Subscribe(sub) if sub.replaying => {
                    sub.buffered.push(ev.clone());
                    if sub.buffered.len() > self.config.subscriber_lag_limit {
                        self.lagged(conn);
                    }
                }
                StreamKind::Subscribe(_) => self.deliver(conn, ev),
            }
        }
    }

    /// Writes one live event to a subscriber unless already delivered; a
    /// consumer too far behind gets the `lagged` error and is dropped.
    fn deliver(&mut self, conn: ConnId, ev: &Appended) {
        let lag_limit = self.config.subscriber_lag_limit;
        let Some(s) = self.stream_mut(conn) else {
            return;
        };
        if let StreamKind::Subscribe(sub) = &mut s.kind {
            if ev.seq <= sub.delivered {
                return;
            }
            sub.delivered = ev.seq;
        }
        if s.in_flight.len() >= lag_limit {
            return self.lagged(conn);
        }
        self.frame(conn, &jsonrpc::event_frame(&ev.json));
    }

    fn lagged(&mut self, conn: ConnId) {
        self.frame(conn, jsonrpc::LAGGED_FRAME);
        self.end_stream(conn);
    }

    // ---- NDJSON stream plumbing -------------------------------------------

    fn open_stream(&mut self, conn: ConnId, session_id: &str, id: Option<Value>) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.stream = Some(Stream {
                session_id: session_id.to_string(),
                id,
                kind: StreamKind::Single,
                in_flight: VecDeque::new(),
                flushed_partial: 0,
                unflushed_before: c.unflushed,
                last_write_ms: self.now.mono_ms,
                ext: Default::default(),
            });
            self.streams
                .entry(session_id.to_string())
                .or_default()
                .insert(conn);
        }
    }

    /// Connections with an open stream on `session_id`, in id order.
    fn session_streams(&self, session_id: &str) -> Vec<ConnId> {
        self.streams
            .get(session_id)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Forgets `conn` in the per-session stream index.
    pub(crate) fn unindex_stream(&mut self, conn: ConnId, session_id: &str) {
        if let Some(set) = self.streams.get_mut(session_id) {
            set.remove(&conn);
            if set.is_empty() {
                self.streams.remove(session_id);
            }
        }
    }

    pub(crate) fn stream_mut(&mut self, conn: ConnId) -> Option<&mut Stream> {
        self.conns.get_mut(&conn).and_then(|c| c.stream.as_mut())
    }

    /// One NDJSON line as one HTTP chunk.
    pub(crate) fn frame(&mut self, conn: ConnId, line: &str) {
        let line = proto::jsonrpc::escape_line_separators(line);
        let mut bytes = Vec::with_capacity(line.len() + 12);
        proto::http::encode_chunk(line.as_bytes(), &mut bytes);
        let len = bytes.len();
        let now = self.now.mono_ms;
        if let Some(s) = self.stream_mut(conn) {
            s.in_flight.push_back(len);
            s.last_write_ms = now;
        }
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

    /// Terminal `error` frame (omitted for notifications), then the end.
    pub(crate) fn terminal_error(&mut self, conn: ConnId, code: i64, message: &str) {
        if let Some(id) = self.stream_mut(conn).and_then(|s| s.id.clone()) {
            let frame = jsonrpc::error_frame(Some(&id), code, message);
            self.frame(conn, &frame);
        }
        self.end_stream(conn);
    }

    /// Closes the chunked body and frees the connection for its next request.
    pub(crate) fn end_stream(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let Some(stream) = c.stream.take() else {
            return;
        };
        self.unindex_stream(conn, &stream.session_id);
        if matches!(stream.kind, StreamKind::Turn) {
            // The turn runs on without a consumer.
            self.forget_conn_in_turns(conn);
        }
        if matches!(stream.kind, StreamKind::Subscribe(_)) {
            // A replay read still in flight belongs to this stream: a later
            // request on the same keep-alive connection must not get its rows.
            self.pending_reads.retain(|_, p| {
                !matches!(p, PendingRead::ReplayStart { conn: c } | PendingRead::ReplayPage { conn: c } if *c == conn)
            });
        }
        self.send(conn, proto::http::LAST_CHUNK.to_vec());
        self.finish_request(conn);
    }

    /// Earliest keepalive deadline over open streams (opt-in).
    pub(crate) fn next_keepalive(&self) -> Option<u64> {
        let every = self.config.ndjson_keepalive_ms;
        if every == 0 {
            return None;
        }
        self.conns
            .values()
            .filter_map(|c| c.stream.as_ref())
            .map(|s| s.last_write_ms + every)
            .min()
    }

    /// A blank line (which NDJSON readers skip) on every stream silent for
    /// the keepalive interval.
    pub(crate) fn send_keepalives(&mut self) {
        let every = self.config.ndjson_keepalive_ms;
        if every == 0 {
            return;
        }
        let now = self.now.mono_ms;
        let due: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.stream
                    .as_ref()
                    .is_some_and(|s| s.last_write_ms + every <= now)
            })
            .map(|(id, _)| *id)
            .collect();
        for conn in due {
            self.frame(conn, "\n");
        }
    }

    /// Accounts flushed bytes against in-flight frames.
    pub(crate) fn stream_flushed(&mut self, conn: ConnId, mut bytes: usize) {
        let Some(s) = self.stream_mut(conn) else {
            return;
        };
        let earlier = bytes.min(s.unflushed_before);
        s.unflushed_before -= earlier;
        bytes -= earlier;
        bytes += s.flushed_partial;
        while let Some(&front) = s.in_flight.front() {
            if bytes >= front {
                bytes -= front;
                s.in_flight.pop_front();
            } else {
                break;
            }
        }
        s.flushed_partial = if s.in_flight.is_empty() { 0 } else { bytes };
    }
}
