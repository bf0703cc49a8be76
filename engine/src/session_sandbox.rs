//! The engine's side of remote sandboxes and subagents (spec 06 §5–§6):
//! the RPCs' check orders, the lifecycle events recorded from the hub's
//! notices, teardown at session close, and image provisioning.

use proto::jsonrpc::{ExecRemoteSandboxParams, Parsed, RpcError, StartRemoteSandboxParams};
use proto::wire::json;
use serde_json::{json, Value};

use crate::ids::{KeyId, SessionId};
use crate::model::Catalog;
use crate::sandbox::SandboxHub;
use crate::sandbox::{
    CancelOutcome, ExecOutput, Handle, Requester, SandboxError, StartRefused, StopReason,
};
use crate::services::Services;
use crate::sessions::Sessions;
use crate::streams::Fanout;
use crate::ConnId;
use proto::jsonrpc::codes;
use proto::wire::EventType;

/// What the sandbox RPCs and lifecycle need: the sandbox hub (op routing,
/// deadlines, image status), the sessions (each holds its own sandbox and
/// subagents), the catalogue (profiles' images, sessions' state and
/// declarations) and the services. Built by
/// [`Engine::sandbox_cx`](crate::Engine); it reaches no gate or turn.
pub(crate) struct SandboxCx<'a> {
    pub sandbox: &'a mut SandboxHub,
    pub sessions: &'a mut Sessions,
    pub catalog: &'a Catalog,
    pub svc: &'a mut Services,
}

/// Driver checks ran in the RPC dispatch (`-32001` before anything else,
/// spec 01 §6.1).
impl SandboxCx<'_> {
    /// Provisioning status of every active profile's images (spec 03 §4.7).
    pub(crate) fn sandbox_status(&mut self, conn: ConnId) {
        let mut items: Vec<(String, Value)> = self
            .catalog
            .profiles
            .values()
            .filter(|p| p.is_live() && !p.row.available_sandboxes.is_empty())
            .map(|p| {
                let mut names = p.row.available_sandboxes.clone();
                names.sort();
                names.dedup();
                let images: Vec<Value> = names
                    .iter()
                    .map(|n| self.sandbox.image_json(&p.row.id, n))
                    .collect();
                (
                    p.row.id.clone(),
                    json!({"profile_id": p.row.id, "images": images}),
                )
            })
            .collect();
        items.sort_by(|a, b| a.0.cmp(&b.0));
        let items: Vec<Value> = items.into_iter().map(|(_, v)| v).collect();
        self.svc
            .respond_value(conn, 200, &json!({ "items": items }));
    }

    /// `session.startRemoteSandbox` (spec 06 §5.3).
    pub(crate) fn start_remote_sandbox(
        &mut self,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        params: Parsed<StartRemoteSandboxParams>,
    ) {
        let image = match params {
            Ok(p) => p.image,
            Err(msg) => return self.svc.terminal_error(conn, codes::INVALID_PARAMS, &msg),
        };
        let profile_id = self
            .catalog
            .sessions
            .get(session_id)
            .map(|s| s.profile_id.clone());
        let Some(profile) = profile_id.and_then(|p| self.catalog.live_profile(&p)) else {
            return self.svc.terminal_error(
                conn,
                codes::APPLICATION_ERROR,
                "profile_unavailable: the profile bound to this session is no longer available",
            );
        };
        if !profile.row.available_sandboxes.contains(&image) {
            let e = RpcError::sandbox_image_not_allowed(&image);
            return self.svc.terminal_error(conn, e.code, &e.message);
        }
        let requester = Requester::Rpc {
            conn,
            key_id: key_id.to_string(),
        };
        let b = self.sessions.sandbox_or_new(session_id);
        if let Err(StartRefused::AlreadyRunning) = b.start(self.sandbox, &image, requester) {
            return self.svc.terminal_error(
                conn,
                codes::APPLICATION_ERROR,
                "a remote sandbox is already running for this session; call session.stopRemoteSandbox first",
            );
        }
        let start = json!({"image": image, "dispatch": "remote"});
        self.svc.append_event(
            self.sessions.streams_mut(session_id),
            session_id,
            Some(key_id),
            EventType::SessionSandboxStart,
            start,
        );
    }

    pub(crate) fn sandbox_started(
        &mut self,
        session_id: &SessionId,
        requester: Requester,
        image: &str,
        result: Result<Handle, SandboxError>,
    ) {
        let key = Services::requester_key(&requester).map(str::to_string);
        match result {
            Ok(handle) => {
                let payload = json!({
                    "image": image, "sandbox_id": handle.container, "dispatch": "remote", "unsandboxed": false,
                });
                self.svc.append_event(
                    self.sessions.streams_mut(session_id),
                    session_id,
                    key.as_deref(),
                    EventType::SessionSandboxRunning,
                    payload,
                );
                // The running event's `created_at` (same input, same stamp).
                let started_at = self.svc.timestamp();
                if let Some((conn, _)) = self.svc.rpc_alive(&requester) {
                    let body = json!({
                        "sandbox_id": handle.container, "image": image, "started_at": started_at,
                    });
                    self.svc.terminal_result(conn, &json::text(&body));
                }
            }
            Err(e) => {
                let detail = e.to_string();
                let payload = json!({
                    "image": image, "phase": "start", "detail": detail, "dispatch": "remote", "unsandboxed": false,
                });
                // A start still running when the session closed ends
                // silently: nothing is appended after the close's teardown.
                if !self.is_closed(session_id) {
                    self.svc.append_event(
                        self.sessions.streams_mut(session_id),
                        session_id,
                        key.as_deref(),
                        EventType::SessionSandboxError,
                        payload,
                    );
                }
                if let Some((conn, _)) = self.svc.rpc_alive(&requester) {
                    let e = RpcError::sandbox_start_failed(&detail);
                    self.svc.terminal_error(conn, e.code, &e.message);
                }
            }
        }
    }

    /// `session.stopRemoteSandbox` (spec 06 §5.4): the handle goes first.
    pub(crate) fn stop_remote_sandbox(
        &mut self,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
    ) {
        let requester = Requester::Rpc {
            conn,
            key_id: key_id.to_string(),
        };
        let hub = &mut *self.sandbox;
        let b = self.sessions.sandbox_mut(session_id);
        match b.and_then(|b| b.stop(hub, requester, StopReason::Explicit)) {
            Some(handle) => {
                let fanout = self.sessions.streams_mut(session_id);
                (self.svc).log_stop(fanout, session_id, key_id, &handle, StopReason::Explicit)
            }
            None => {
                let e = RpcError::sandbox_not_running();
                self.svc.terminal_error(conn, e.code, &e.message);
            }
        }
    }

    /// The session was closed (its teardown already ran).
    fn is_closed(&self, session_id: &SessionId) -> bool {
        !matches!(
            self.catalog.sessions.get(session_id),
            Some(s) if s.state != crate::store::SessionState::Closed
        )
    }

    /// `session.execRemoteSandbox` (spec 06 §5.6): no event on success.
    pub(crate) fn exec_remote_sandbox(
        &mut self,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        params: Parsed<ExecRemoteSandboxParams>,
    ) {
        let command = match params {
            Ok(p) => p.command,
            Err(msg) => return self.svc.terminal_error(conn, codes::INVALID_PARAMS, &msg),
        };
        let requester = Requester::Rpc {
            conn,
            key_id: key_id.to_string(),
        };
        let now = self.svc.now.mono;
        let hub = &mut *self.sandbox;
        let b = self.sessions.sandbox_mut(session_id);
        if b.and_then(|b| b.exec(hub, &command, requester, now))
            .is_none()
        {
            let e = RpcError::sandbox_not_running();
            self.svc.terminal_error(conn, e.code, &e.message);
        }
    }

    pub(crate) fn manual_exec_done(
        &mut self,
        conn: ConnId,
        key_id: &str,
        session_id: &SessionId,
        handle: &Handle,
        result: Result<ExecOutput, SandboxError>,
    ) {
        match result.map_err(|e| e.to_string()) {
            Ok(out) => {
                if self.svc.conns.contains_key(&conn) {
                    let (stdout, stderr) = crate::session_core::marked_streams(
                        &out,
                        self.svc.config.sandbox_max_output,
                    );
                    let body =
                        json!({"stdout": stdout, "stderr": stderr, "exit_code": out.exit_code});
                    self.svc.terminal_result(conn, &json::text(&body));
                }
            }
            Err(detail) => {
                if !self.is_closed(session_id) {
                    let fanout = self.sessions.streams_mut(session_id);
                    let key = Some(key_id);
                    (self.svc).log_sandbox_error(fanout, session_id, key, handle, "exec", &detail);
                }
                if self.svc.conns.contains_key(&conn) {
                    self.svc.terminal_error(
                        conn,
                        codes::APPLICATION_ERROR,
                        format_args!("sandbox exec failed: {detail}"),
                    );
                }
            }
        }
    }

    /// `session.cancelSubagent` (spec 06 §6.5).
    pub(crate) fn cancel_subagent(
        &mut self,
        conn: ConnId,
        session_id: &SessionId,
        key_id: &KeyId,
        params: Parsed<proto::jsonrpc::CancelSubagentParams>,
    ) {
        let id = match params {
            Ok(p) => p.subagent_id,
            Err(msg) => return self.svc.terminal_error(conn, codes::INVALID_PARAMS, &msg),
        };
        let outcome = (self.sessions.sandbox_mut(session_id))
            .map_or(CancelOutcome::NotFound, |b| b.cancel(self.sandbox, &id));
        match outcome {
            CancelOutcome::NotFound => {
                let e = RpcError::subagent_not_found(&id);
                self.svc.terminal_error(conn, e.code, &e.message);
            }
            CancelOutcome::Cancelled(status) => {
                self.svc.subagent_span_end(&status);
                if let Some((kind, payload)) = status.terminal_event() {
                    let fanout = self.sessions.streams_mut(session_id);
                    (self.svc).append_event(fanout, session_id, Some(key_id), kind, payload);
                }
                let body = json!({"cancelled": true, "subagent_id": id, "was_running": true});
                self.svc.terminal_result(conn, &json::text(&body));
            }
            CancelOutcome::AlreadyTerminal => {
                let body = json!({"cancelled": true, "subagent_id": id, "was_running": false});
                self.svc.terminal_result(conn, &json::text(&body));
            }
        }
    }

    /// Session close (spec 01 §4.3 step 2): running remote subagents are
    /// cancelled, then the sandbox stops; all attributed to the creator.
    pub(crate) fn teardown_sandbox(&mut self, session_id: &SessionId) {
        let Some(creator) = self
            .catalog
            .sessions
            .get(session_id)
            .map(|s| s.creator.clone())
        else {
            return;
        };
        let (cancelled, handle) = match self.sessions.take_sandbox(session_id) {
            Some(b) => b.close(self.sandbox, &creator),
            None => (Vec::new(), None),
        };
        for status in cancelled {
            self.svc.subagent_span_end(&status);
            if let Some((kind, payload)) = status.terminal_event() {
                let fanout = self.sessions.streams_mut(session_id);
                (self.svc).append_event(fanout, session_id, Some(&creator), kind, payload);
            }
        }
        if let Some(handle) = handle {
            let fanout = self.sessions.streams_mut(session_id);
            let reason = StopReason::SessionClose;
            (self.svc).log_stop(fanout, session_id, &creator, &handle, reason);
        }
    }

    /// `session.sandbox.available` images with their provisioning status.
    pub(crate) fn sandbox_images_json(&self, profile_id: &str, images: &[String]) -> Vec<Value> {
        images
            .iter()
            .map(|i| self.sandbox.image_json(profile_id, i))
            .collect()
    }

    /// A profile was created or replaced: (re)provision its images.
    pub(crate) fn provision_profile(&mut self, profile_id: &str) {
        let images = self
            .catalog
            .live_profile(profile_id)
            .map(|p| p.row.available_sandboxes.clone())
            .unwrap_or_default();
        self.sandbox.provision(profile_id, &images);
    }
}

impl Services {
    pub(crate) fn rpc_alive(&self, requester: &Requester) -> Option<(ConnId, String)> {
        match requester {
            Requester::Rpc { conn, key_id } if self.conns.contains_key(conn) => {
                Some((*conn, key_id.clone()))
            }
            _ => None,
        }
    }

    pub(crate) fn requester_key(requester: &Requester) -> Option<&str> {
        match requester {
            Requester::Rpc { key_id, .. } | Requester::Teardown { key_id } => Some(key_id),
            Requester::Turn { .. } => None,
        }
    }

    pub(crate) fn log_stop(
        &mut self,
        fanout: Fanout<'_>,
        session_id: &SessionId,
        key_id: &str,
        handle: &Handle,
        reason: StopReason,
    ) {
        let payload = json!({
            "image": handle.image, "sandbox_id": handle.container, "reason": reason.as_str(), "dispatch": "remote",
        });
        self.append_event(
            fanout,
            session_id,
            Some(key_id),
            EventType::SessionSandboxStop,
            payload,
        );
    }

    pub(crate) fn sandbox_stopped(
        &mut self,
        fanout: Fanout<'_>,
        session_id: &SessionId,
        requester: Requester,
        handle: &Handle,
        reason: StopReason,
        result: Result<(), SandboxError>,
    ) {
        let key = Services::requester_key(&requester).map(str::to_string);
        match result.map_err(|e| e.to_string()) {
            Ok(()) => {
                let payload = json!({
                    "image": handle.image, "sandbox_id": handle.container, "reason": reason.as_str(),
                    "dispatch": "remote", "unsandboxed": false,
                });
                self.append_event(
                    fanout,
                    session_id,
                    key.as_deref(),
                    EventType::SessionSandboxStopped,
                    payload,
                );
                if let Some((conn, _)) = self.rpc_alive(&requester) {
                    let body = json!({"stopped": true, "image": handle.image, "sandbox_id": handle.container});
                    self.terminal_result(conn, &json::text(&body));
                }
            }
            Err(detail) => {
                let key = key.as_deref();
                self.log_sandbox_error(fanout, session_id, key, handle, "stop", &detail);
                if let Some((conn, _)) = self.rpc_alive(&requester) {
                    self.terminal_error(
                        conn,
                        codes::APPLICATION_ERROR,
                        format_args!("sandbox stop failed: {detail}"),
                    );
                }
            }
        }
    }

    pub(crate) fn log_sandbox_error(
        &mut self,
        fanout: Fanout<'_>,
        session_id: &SessionId,
        key_id: Option<&str>,
        handle: &Handle,
        phase: &str,
        detail: &str,
    ) {
        let payload = json!({
            "image": handle.image, "sandbox_id": handle.container, "phase": phase, "detail": detail,
            "dispatch": "remote", "unsandboxed": false,
        });
        self.append_event(
            fanout,
            session_id,
            key_id,
            EventType::SessionSandboxError,
            payload,
        );
    }
}

impl Services {
    /// Ends a subagent's `bae.subagent` span at its terminal state.
    pub(crate) fn subagent_span_end(&mut self, status: &crate::sandbox::SubagentStatus) {
        use crate::sandbox::SubagentState as S;
        use crate::telemetry::SubagentEnd;
        let end = match status.state {
            S::Running => return,
            S::Completed => SubagentEnd::Completed,
            S::Failed | S::TimedOut => SubagentEnd::Failed,
            S::Cancelled => SubagentEnd::Cancelled,
        };
        self.telemetry.subagent_ended(&status.id, end);
    }
}
