//! [`LiveCx`]: what the live session loop may touch. A JSON-RPC request on
//! a session's stream (`rpc/`), the FIFO turn gate it passes and the turn it
//! drives (`turn/`) run as methods of this view, which the engine builds per
//! input from the parts it owns. The view leaves out what the live loop has
//! no business with (residency, replicas, transfers, overload bounds), so
//! the type system keeps those decisions at the endpoint.

use crate::conn::{LiveRead, PendingRead};
use crate::mcp::McpHub;
use crate::model::Catalog;
use crate::provider_limits::ProviderLimits;
use crate::routes::Routes;
use crate::sandbox::SandboxHub;
use crate::services::Services;
use crate::session_sandbox::SandboxCx;
use crate::sessions::Sessions;
use crate::store::{ReadError, ReadResult};

pub(crate) struct LiveCx<'a> {
    pub svc: &'a mut Services,
    pub catalog: &'a mut Catalog,
    /// Every session's runtime parts (core, pending create, drivers'
    /// extensions, MCP restore, idempotency keys…).
    pub sessions: &'a mut Sessions,
    /// Turns, provider calls and MCP calls in flight.
    pub routes: &'a mut Routes,
    pub provider_limits: &'a mut ProviderLimits,
    pub mcp: &'a mut McpHub,
    pub sandbox: &'a mut SandboxHub,
    /// The server is draining: the gate refuses new arrivals.
    pub shutting_down: bool,
}

impl LiveCx<'_> {
    /// The sandbox RPCs and lifecycle, over this view's parts.
    pub(crate) fn sandbox_cx(&mut self) -> SandboxCx<'_> {
        SandboxCx {
            sandbox: self.sandbox,
            sessions: self.sessions,
            catalog: self.catalog,
            svc: self.svc,
        }
    }

    /// The answer to one of the live loop's reads: the next read of a
    /// history load, or its outcome to the turn or the recovery.
    pub(crate) fn on_read_done(&mut self, read: LiveRead, result: Result<ReadResult, ReadError>) {
        match read {
            LiveRead::TurnHistory { turn, loader } => {
                // A turn that ended meanwhile needs no more reads.
                if self.routes.turn_session(turn).is_none() {
                    return;
                }
                let again = |loader| PendingRead::Live(LiveRead::TurnHistory { turn, loader });
                if let Some(done) = self.svc.continue_history_load(loader, result, again) {
                    self.on_turn_history(turn, done);
                }
            }
            LiveRead::Recover { loader } => {
                let session_id = loader.session_id().clone();
                let again = |loader| PendingRead::Live(LiveRead::Recover { loader });
                if let Some(done) = self.svc.continue_history_load(loader, result, again) {
                    self.on_recover(&session_id, done);
                }
            }
            LiveRead::RecoverPause {
                session_id,
                paused_seq,
            } => self.on_recover_pause(&session_id, paused_seq, result),
        }
    }
}
