//! Deliberately planted bugs, compiled only with the `planted-bugs` feature
//! (never in production builds). `sim/tests/planted_bugs.rs` selects one at
//! a time through [`crate::Config::planted`] and asserts that the
//! simulator's invariants catch it within a bounded number of seeds. A bug
//! reaches the component that hosts it only through [`crate::faults::Faults`],
//! whose hook methods name the place each bug lives.

/// One planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// A turn that pauses for client tools releases the gate instead of
    /// parking it (turn/exec.rs `end_turn`).
    GateReleasedOnPause,
    /// The pause deadline is one millisecond early (session_core/tools.rs,
    /// where a turn pauses).
    AbandonTimerOffByOne,
    /// `session.subscribe` replay starts one event after `since_event_id`
    /// (subscribe.rs).
    ReplaySkipsBoundary,
    /// Events are published to streams before their write is emitted, so the
    /// driver can deliver them before they are committed
    /// (`Services::append_event_text`, services.rs).
    DeliverBeforeCommit,
    /// A resumed turn records the first tool_result twice (session_core/turn.rs,
    /// where a continuation is merged).
    DuplicateToolResult,
    /// A released gate admits the newest waiter instead of the oldest
    /// (session_core/gate.rs `admit_next`).
    AdmitNewestWaiter,
    /// After a restart the next event reuses the last committed rowid
    /// (lib.rs `Engine::new`).
    SeqReuseAfterRestart,
    /// MCP request deadlines are left out of `poll_timeout`, so a silent
    /// server holds the turn (lib.rs `Engine::poll_timeout`).
    McpTimerNotArmed,
    /// An idempotent retry of a key whose request still waits in the queue
    /// is not attached to it but queued as a second run of the key
    /// (idempotency.rs `attach_retry`).
    IdemQueuedRetryRuns,
    /// The pipeline releases a delivery at once even when the batch it
    /// depends on has not committed (pipeline.rs `Pipeline::deliver`).
    PipelineRevealsEarly,
    /// Replica mode: the pipeline seals commit jobs without their fence,
    /// so the store writes them without checking the replica's lane and
    /// leases (pipeline.rs `Pipeline::seal`).
    FenceSkipped,
    /// A retry leaves at once instead of after the wait its failure
    /// advised (turn/exec.rs `perform_admit`).
    RetryWithoutWait,
    /// The provider limits admit one call more than `max_concurrent`
    /// (provider_limits/mod.rs `Entry::max_in_flight`).
    LimiterAdmitsOneOver,
    /// An entry's slot queue admits its newest waiter first
    /// (provider_limits/mod.rs `ProviderLimits::pump`).
    SlotQueueNewestFirst,
}

impl Bug {
    pub const ALL: [Bug; 14] = [
        Bug::GateReleasedOnPause,
        Bug::AbandonTimerOffByOne,
        Bug::ReplaySkipsBoundary,
        Bug::DeliverBeforeCommit,
        Bug::DuplicateToolResult,
        Bug::AdmitNewestWaiter,
        Bug::SeqReuseAfterRestart,
        Bug::McpTimerNotArmed,
        Bug::IdemQueuedRetryRuns,
        Bug::PipelineRevealsEarly,
        Bug::FenceSkipped,
        Bug::RetryWithoutWait,
        Bug::LimiterAdmitsOneOver,
        Bug::SlotQueueNewestFirst,
    ];
}

/// [`Bug::DuplicateToolResult`]: the first client tool_result twice.
pub(crate) fn duplicate_first_client_result(
    content: &mut serde_json::Value,
    server_ids: &[String],
) {
    if let serde_json::Value::Array(blocks) = content {
        let first = blocks.iter().position(|b| {
            b["type"] == "tool_result" && !server_ids.iter().any(|s| b["tool_use_id"] == s.as_str())
        });
        if let Some((i, dup)) = first.and_then(|i| Some((i, blocks.get(i)?.clone()))) {
            blocks.insert(i + 1, dup);
        }
    }
}
