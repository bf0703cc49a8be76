//! Where the child-process and MCP transports (`mcp.rs`, `sandbox.rs`)
//! report: each runtime's own event queue. The transports themselves are
//! shared by both runtimes; only this delivery differs.

use std::future::Future;

use engine::mcp::{McpConnId, McpEvent};
use engine::sandbox::{OpId, SandboxReply};

/// A runtime's event queue, as the transports' tasks see it.
pub trait Reports: Clone + Send + Sync + 'static {
    /// Delivers an MCP transport event; `false` once the runtime is gone.
    fn mcp(&self, conn: McpConnId, event: McpEvent) -> impl Future<Output = bool> + Send;
    /// Delivers a container engine command's reply; `false` as above.
    fn sandbox(&self, op: OpId, reply: SandboxReply) -> impl Future<Output = bool> + Send;
}

/// The smol runtime's bounded event channel: a full queue holds the
/// reporting task back instead of dropping the report.
impl Reports for smol::channel::Sender<super::Event> {
    async fn mcp(&self, conn: McpConnId, event: McpEvent) -> bool {
        self.send(super::Event::Mcp(conn, event)).await.is_ok()
    }

    async fn sandbox(&self, op: OpId, reply: SandboxReply) -> bool {
        self.send(super::Event::Sandbox(op, reply)).await.is_ok()
    }
}
