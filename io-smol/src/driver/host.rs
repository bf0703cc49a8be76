//! What the process around the engine provides the driver core besides a
//! runtime ([`engine::driver::Host`]): the MCP and sandbox transports (child
//! processes and HTTP), the heap trim, the telemetry exporter and the
//! replica lease watch. Shared by both runtimes; only where the transports'
//! tasks report ([`Reports`]) differs.

use std::time::{Duration, Instant};

use engine::mcp::McpCommand;
use engine::sandbox::{OpId, SandboxCommand};
use engine::{Engine, MonoMs};

use super::mcp::McpTransports;
use super::reports::Reports;
use super::sandbox::Sandboxes;
use super::{Clock, DriverSettings};
use crate::heap_trim::HeapTrim;
use crate::store::pg::renewer::LeaseWatch;

/// The process side of the driver core.
pub struct ProcessHost<Q: Reports> {
    clock: Clock,
    mcp: McpTransports<Q>,
    sandboxes: Sandboxes<Q>,
    heap_trim: HeapTrim,
    otel: Option<crate::otel::Exporter>,
    /// Replica mode: when the leases were last renewed (docs/scaling.md).
    lease_watch: Option<LeaseWatch>,
}

impl<Q: Reports> ProcessHost<Q> {
    /// `reports` is where the MCP and sandbox transports' tasks report.
    pub fn new(
        clock: Clock,
        settings: &DriverSettings,
        telemetry: Option<crate::otel::Exporter>,
        lease_watch: Option<LeaseWatch>,
        reports: Q,
    ) -> Self {
        ProcessHost {
            clock,
            mcp: McpTransports::new(reports.clone()),
            sandboxes: Sandboxes::new(
                settings.sandbox_driver,
                settings.sandbox_run_args.clone(),
                reports,
            ),
            heap_trim: HeapTrim::default(),
            otel: telemetry,
            lease_watch,
        }
    }
}

impl<Q: Reports> engine::driver::Host for ProcessHost<Q> {
    fn mcp(&mut self, cmd: McpCommand) {
        self.mcp.perform(cmd);
    }

    fn sandbox(&mut self, cmd: SandboxCommand) {
        self.sandboxes.perform(cmd);
    }

    fn sandbox_done(&mut self, op: OpId) {
        self.sandboxes.finished(op);
    }

    fn busy(&mut self) {
        self.heap_trim.activity(Instant::now());
    }

    fn drained(&mut self, engine: &mut Engine) {
        if let Some(o) = &mut self.otel {
            o.pump(engine);
        }
    }

    /// A due heap trim or telemetry export, rounded up to the millisecond
    /// (waking a little late costs nothing; early would spin).
    fn next_due(&self) -> Option<MonoMs> {
        let otel = self.otel.as_ref().and_then(|o| o.next_due());
        [self.heap_trim.deadline(), otel]
            .into_iter()
            .flatten()
            .min()
            .map(|at| self.clock.mono_at(at))
    }

    fn fire(&mut self, engine: &mut Engine) {
        self.heap_trim.fire(Instant::now());
        if let Some(o) = &mut self.otel {
            o.pump(engine);
        }
    }

    fn before_reveal(&mut self) {
        if let Some(w) = &self.lease_watch {
            w.exit_if_stale("revealing an answer");
        }
    }

    fn close_mcp(&mut self) {
        self.mcp.close_all();
    }

    fn mcp_children(&self) -> usize {
        self.mcp.children()
    }

    fn finish(&mut self, engine: &mut Engine, budget: Duration) {
        if let Some(o) = self.otel.take() {
            o.shutdown(engine, budget);
        }
    }
}
