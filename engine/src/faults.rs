//! The one value through which a simulator's planted bug reaches the
//! component that hosts it. Every hook is a method here: production
//! modules call it and never name a planted bug, and in a production build
//! (no `planted-bugs` feature) the value is empty and every hook is a
//! no-op the compiler removes.

use crate::MonoMs;
use serde_json::Value;

/// The fault (if any) planted in this engine or pipeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    #[cfg(feature = "planted-bugs")]
    bug: Option<crate::planted::Bug>,
}

/// Boolean hooks: `name => Bug` is true when that bug is planted.
macro_rules! hooks {
    ($($(#[$doc:meta])* $name:ident => $bug:ident;)*) => {
        impl Faults {
            $(
                $(#[$doc])*
                #[inline]
                pub fn $name(self) -> bool {
                    #[cfg(feature = "planted-bugs")]
                    {
                        self.bug == Some(crate::planted::Bug::$bug)
                    }
                    #[cfg(not(feature = "planted-bugs"))]
                    {
                        false
                    }
                }
            )*
        }
    };
}

hooks! {
    /// A pausing turn releases the gate instead of parking it.
    release_gate_on_pause => GateReleasedOnPause;
    /// A released gate admits the newest waiter.
    admit_newest_waiter => AdmitNewestWaiter;
    /// Events reach streams before their write is emitted.
    deliver_before_commit => DeliverBeforeCommit;
    /// An idempotent retry of a queued key runs the key a second time.
    idem_queued_retry_runs => IdemQueuedRetryRuns;
    /// MCP request deadlines are left out of `poll_timeout`.
    mcp_timer_not_armed => McpTimerNotArmed;
    /// A replay starts one event after `since_event_id`.
    replay_skips_boundary => ReplaySkipsBoundary;
    /// The pipeline releases deliveries before their batch commits.
    pipeline_reveals_early => PipelineRevealsEarly;
    /// The restored rowid counter is one short after a restart.
    seq_reuse_after_restart => SeqReuseAfterRestart;
    /// Replica mode: commit jobs are sealed without their fence.
    skip_fence => FenceSkipped;
    /// A retry leaves without the wait its failure advised.
    retry_without_wait => RetryWithoutWait;
    /// The provider limits admit one call over `max_concurrent`.
    limiter_one_over => LimiterAdmitsOneOver;
    /// A provider entry's slot queue admits its newest waiter first.
    slot_queue_newest_first => SlotQueueNewestFirst;
}

impl Faults {
    /// The value for `bug` (simulator builds only).
    #[cfg(feature = "planted-bugs")]
    pub fn planted(bug: Option<crate::planted::Bug>) -> Self {
        Faults { bug }
    }

    /// A pause deadline, one millisecond early under `AbandonTimerOffByOne`.
    #[inline]
    pub fn pause_deadline(self, deadline: MonoMs) -> MonoMs {
        #[cfg(feature = "planted-bugs")]
        if self.bug == Some(crate::planted::Bug::AbandonTimerOffByOne) {
            return MonoMs(deadline.0.saturating_sub(1));
        }
        deadline
    }

    /// A merged continuation's content (`server_ids`: its server-side
    /// results), with its first client `tool_result` twice under
    /// `DuplicateToolResult`.
    #[inline]
    pub fn merged_content(self, content: &mut Value, server_ids: &[String]) {
        #[cfg(feature = "planted-bugs")]
        if self.bug == Some(crate::planted::Bug::DuplicateToolResult) {
            crate::planted::duplicate_first_client_result(content, server_ids);
        }
        #[cfg(not(feature = "planted-bugs"))]
        let _ = (content, server_ids);
    }
}
