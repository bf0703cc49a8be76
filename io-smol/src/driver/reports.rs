//! Where the child-process and MCP transports (`mcp.rs`, `sandbox.rs`) and
//! the signal listener report: each runtime's own event queue. They are
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
    /// Delivers a shutdown signal; `false` as above.
    fn signal(&self) -> impl Future<Output = bool> + Send;
}

/// A bounded smol channel of core events (`baesrv`'s): a full queue holds
/// the reporting task back instead of dropping the report.
impl<S: Send + 'static> Reports for smol::channel::Sender<engine::driver::Event<S>> {
    async fn mcp(&self, conn: McpConnId, event: McpEvent) -> bool {
        self.send(engine::driver::Event::Mcp(conn, event))
            .await
            .is_ok()
    }

    async fn sandbox(&self, op: OpId, reply: SandboxReply) -> bool {
        self.send(engine::driver::Event::Sandbox(op, reply))
            .await
            .is_ok()
    }

    async fn signal(&self) -> bool {
        self.send(engine::driver::Event::Signal).await.is_ok()
    }
}

/// Forwards SIGTERM and SIGINT to a runtime's queue (a task on smol's
/// global executor, in every runtime).
pub fn listen_signals(mut signals: async_signal::Signals, events: impl Reports) {
    use futures_lite::StreamExt;
    smol::spawn(async move {
        while signals.next().await.is_some() {
            if !events.signal().await {
                break;
            }
        }
    })
    .detach();
}
