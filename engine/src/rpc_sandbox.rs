//! The driver checks shared by the gated methods, and the local sandbox and
//! subagent telemetry reports (spec 06 §5.7, §6.6). The remote sandbox and
//! subagent RPCs live in `session_sandbox.rs`.

use proto::jsonrpc::{Parsed, ReportLocalSandboxParams, ReportLocalSubagentParams};
use serde_json::Value;

use crate::{ConnId, Engine};
use proto::jsonrpc::codes;

impl Engine {
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
            codes::DRIVER_NOT_REGISTERED,
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
                self.terminal_error(conn, codes::APPLICATION_ERROR, &msg);
                false
            }
            None => true,
        }
    }

    pub(crate) fn report_local_sandbox(
        &mut self,
        conn: ConnId,
        session_id: &str,
        key_id: &str,
        params: Parsed<ReportLocalSandboxParams>,
    ) {
        let report = params.map(|r| (r.event_type(), r.payload()));
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
        params: Parsed<ReportLocalSubagentParams>,
    ) {
        let report = params.map(|r| (r.event_type(), r.payload()));
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
                self.append_event(session_id, Some(key_id), event_type, payload);
                self.terminal_result(conn, r#"{"reported":true}"#);
            }
            Err(msg) => self.terminal_error(conn, codes::INVALID_PARAMS, &msg),
        }
    }
}
