//! Numeric handles that cross module or crate boundaries, each its own
//! type so a connection can never be passed where a provider call or a
//! store read is meant. Drivers choose connection ids; the engine chooses
//! the rest. None is ever reused within a process.

macro_rules! handle {
    ($($(#[$doc:meta])* $name:ident;)*) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
            pub struct $name(pub u64);

            /// Counters that hand out ids: `let id = next; next += 1;`.
            impl std::ops::AddAssign<u64> for $name {
                fn add_assign(&mut self, n: u64) {
                    self.0 += n;
                }
            }

            impl std::fmt::Display for $name {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    self.0.fmt(f)
                }
            }
        )*
    };
}

handle! {
    /// One accepted TCP connection (chosen by the driver).
    ConnId;
    /// One outstanding provider HTTP call.
    CallId;
    /// One store read, answered by `Input::ReadDone`.
    ReadId;
    /// One MCP transport opened by `Output::Mcp`.
    McpConnId;
    /// One MCP `tools/call` a turn waits on.
    CallToken;
    /// One container engine command.
    OpId;
    /// One turn (chat or compaction) holding a session's gate.
    TurnId;
}
