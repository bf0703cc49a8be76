//! The sandbox and subagent RPCs (spec 06 §5–§6). This server has no
//! container engine driver yet, so a remote sandbox can never be running:
//! start fails with `-32012` after the documented events, stop/exec answer
//! `sandbox_not_running`, and no remote subagent is ever tracked. The local
//! telemetry reports are fully supported.

use proto::jsonrpc::{
    CancelSubagentParams, ExecRemoteSandboxParams, ReportLocalSandboxParams,
    ReportLocalSubagentParams, RpcError, StartRemoteSandboxParams,
};
use serde_json::{json, Value};

use crate::{ConnId, Engine};

/// Why a remote start cannot succeed here (a driver error text, spec 06 §5.8).
const NO_DRIVER: &str =
    "sandbox driver unsupported: this server build has no container engine driver";

impl Engine {
    fn answer(&mut self, conn: ConnId, e: RpcError) {
        self.terminal_error(conn, e.code, &e.message);
    }

    /// The first check of every gated method: `-32001` unless the caller
    /// registered as a driver.
    pub(crate) fn require_driver(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        method: &str,
    ) -> bool {
        if self.is_driver(session_id, key_id) {
            return true;
        }
        self.terminal_error(
            conn,
            -32001,
            &format!("call session.registerDriver before {method}"),
        );
        false
    }

    /// `-32001`, then `-32000` unless the session is open (the pre-checks of
    /// the methods with an open-state check, spec 01 §6.1).
    pub(crate) fn require_open_driver(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        method: &str,
    ) -> bool {
        if !self.require_driver(conn, session_id, key_id, method) {
            return false;
        }
        match self.open_state_error(session_id) {
            Some(msg) => {
                self.terminal_error(conn, -32000, &msg);
                false
            }
            None => true,
        }
    }

    pub(crate) fn start_remote_sandbox(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        params: &Value,
    ) {
        if !self.require_open_driver(conn, session_id, key_id, "session.startRemoteSandbox") {
            return;
        }
        let image = match StartRemoteSandboxParams::parse(params) {
            Ok(p) => p.image,
            Err(msg) => return self.terminal_error(conn, -32602, &msg),
        };
        let profile_id = self.catalog.sessions[session_id].profile_id.clone();
        let Some(profile) = self.catalog.live_profile(&profile_id) else {
            return self.terminal_error(
                conn,
                -32000,
                "profile_unavailable: the profile bound to this session is no longer available",
            );
        };
        if !profile.row.available_sandboxes.contains(&image) {
            return self.answer(conn, RpcError::sandbox_image_not_allowed(&image));
        }
        let start = json!({"image": image, "dispatch": "remote"});
        self.append_event(session_id, Some(key_id), "session.sandbox.start", start);
        let error = json!({
            "image": image, "phase": "start", "detail": NO_DRIVER, "dispatch": "remote", "unsandboxed": false,
        });
        self.append_event(session_id, Some(key_id), "session.sandbox.error", error);
        self.answer(conn, RpcError::sandbox_start_failed(NO_DRIVER));
    }

    pub(crate) fn stop_remote_sandbox(&mut self, conn: ConnId, session_id: &str, key_id: &str) {
        if self.require_driver(conn, session_id, key_id, "session.stopRemoteSandbox") {
            self.answer(conn, RpcError::sandbox_not_running());
        }
    }

    pub(crate) fn exec_remote_sandbox(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        params: &Value,
    ) {
        if !self.require_driver(conn, session_id, key_id, "session.execRemoteSandbox") {
            return;
        }
        if let Err(msg) = ExecRemoteSandboxParams::parse(params) {
            return self.terminal_error(conn, -32602, &msg);
        }
        self.answer(conn, RpcError::sandbox_not_running());
    }

    pub(crate) fn report_local_sandbox(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        params: &Value,
    ) {
        let report = ReportLocalSandboxParams::parse(params).map(|r| (r.event_type(), r.payload()));
        self.record_report(
            conn,
            session_id,
            key_id,
            "session.reportLocalSandbox",
            report,
        );
    }

    pub(crate) fn report_local_subagent(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        params: &Value,
    ) {
        let report =
            ReportLocalSubagentParams::parse(params).map(|r| (r.event_type(), r.payload()));
        self.record_report(
            conn,
            session_id,
            key_id,
            "session.reportLocalSubagent",
            report,
        );
    }

    /// A client-reported lifecycle claim: driver check, params, one event.
    fn record_report(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        method: &str,
        report: Result<(proto::wire::EventType, Value), String>,
    ) {
        if !self.require_driver(conn, session_id, key_id, method) {
            return;
        }
        match report {
            Ok((event_type, payload)) => {
                self.append_event(session_id, Some(key_id), event_type.as_str(), payload);
                self.terminal_result(conn, r#"{"reported":true}"#);
            }
            Err(msg) => self.terminal_error(conn, -32602, &msg),
        }
    }

    pub(crate) fn cancel_subagent(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        params: &Value,
    ) {
        if !self.require_driver(conn, session_id, key_id, "session.cancelSubagent") {
            return;
        }
        match CancelSubagentParams::parse(params) {
            Ok(p) => self.answer(conn, RpcError::subagent_not_found(&p.subagent_id)),
            Err(msg) => self.terminal_error(conn, -32602, &msg),
        }
    }
}
