//! Self-test of the simulator: every planted engine bug must be caught by
//! the invariant that describes it within a bounded number of seeds, and
//! with no bug planted the seeds pass. Needs the feature:
//! `cargo test -p sim --features planted-bugs`.

use engine::planted::Bug;
use sim::{repro, run, RunOpts};

/// Seeds tried per bug before giving up.
const MAX_SEEDS: u64 = 64;

fn opts(bug: Option<Bug>) -> RunOpts {
    RunOpts {
        bug,
        ..RunOpts::default()
    }
}

/// The first seed at which `bug` trips one of `invariants`.
fn caught(bug: Bug, invariants: &[&str]) -> u64 {
    for seed in 0..MAX_SEEDS {
        let r = run(seed, &opts(Some(bug)));
        if r.violations
            .iter()
            .any(|v| invariants.contains(&v.invariant))
        {
            println!(
                "{bug:?} caught at seed {seed} by {}",
                r.violations[0].invariant
            );
            return seed;
        }
    }
    panic!("{bug:?} was not caught by {invariants:?} within {MAX_SEEDS} seeds");
}

#[test]
fn gate_released_on_pause() {
    caught(
        Bug::GateReleasedOnPause,
        &["inv_paused_owner_only", "inv_tool_use_answered"],
    );
}

#[test]
fn abandon_timer_off_by_one() {
    caught(Bug::AbandonTimerOffByOne, &["inv_abandon_after_deadline"]);
}

#[test]
fn replay_skips_boundary() {
    caught(Bug::ReplaySkipsBoundary, &["inv_stream_exactly_once"]);
}

#[test]
fn deliver_before_commit() {
    caught(Bug::DeliverBeforeCommit, &["inv_committed_before_wire"]);
}

#[test]
fn duplicate_tool_result() {
    caught(Bug::DuplicateToolResult, &["inv_tool_use_answered"]);
}

#[test]
fn admit_newest_waiter() {
    caught(Bug::AdmitNewestWaiter, &["inv_fifo_admission"]);
}

#[test]
fn seq_reuse_after_restart() {
    caught(Bug::SeqReuseAfterRestart, &["inv_store_seq_gapless"]);
}

/// `Bug::McpTimerNotArmed`: MCP request deadlines left out of
/// `Engine::poll_timeout`, so a slow server holds the turn past
/// `mcp_timeout_ms`. Its engine hook is not in the tree yet (see
/// docs/simulation.md, "Planted bugs"); until it is, this test only checks
/// that the name is free.
#[test]
fn mcp_timer_not_armed() {
    match bug_named("McpTimerNotArmed") {
        Some(bug) => {
            caught(bug, &["inv_mcp_call_bounded"]);
        }
        None => println!("McpTimerNotArmed is not planted in this engine: skipped"),
    }
}

/// `Bug::IdemQueuedRetryRuns`: a retry of a queued keyed send runs a
/// second turn for the key.
#[test]
fn idem_queued_retry_runs() {
    caught(Bug::IdemQueuedRetryRuns, &["inv_idempotency_one_turn"]);
}

/// `Bug::PipelineRevealsEarly`: the shared pipeline itself releases bytes
/// before the batch they depend on commits.
#[test]
fn pipeline_reveals_early() {
    caught(Bug::PipelineRevealsEarly, &["inv_committed_before_wire"]);
}

/// `Bug::FenceSkipped`: replica mode's pipeline seals commit jobs without
/// their fence; a replica that wakes from a freeze past its lease then
/// writes into a lane or a session it no longer holds (the replica world,
/// `sim::replicas`).
#[test]
fn fence_skipped() {
    let invariants = [
        sim::replicas::db::INV_SINGLE_WRITER,
        sim::replicas::db::INV_LANE_OWNER,
        sim::replicas::db::INV_SEQ_UNIQUE,
    ];
    for seed in 0..MAX_SEEDS {
        let r = sim::run_replicas(seed, &opts(Some(Bug::FenceSkipped)));
        if r.violations
            .iter()
            .any(|v| invariants.contains(&v.invariant))
        {
            println!(
                "FenceSkipped caught at seed {seed} by {}",
                r.violations[0].invariant
            );
            return;
        }
    }
    panic!("FenceSkipped was not caught by {invariants:?} within {MAX_SEEDS} seeds");
}

/// `Bug::RetryWithoutWait`: a retry leaves at once instead of after the
/// wait its failure advised.
#[test]
fn retry_without_wait() {
    caught(Bug::RetryWithoutWait, &["inv_retry_not_early"]);
}

/// `Bug::LimiterAdmitsOneOver`: the provider limits admit one call over
/// the entry's `max_concurrent`.
#[test]
fn limiter_admits_one_over() {
    caught(Bug::LimiterAdmitsOneOver, &["inv_provider_concurrency"]);
}

/// `Bug::SlotQueueNewestFirst`: an entry's slot queue admits its newest
/// waiter first (the oldest then expire, or wait behind later askers).
#[test]
fn slot_queue_newest_first() {
    caught(Bug::SlotQueueNewestFirst, &["inv_slot_fifo"]);
}

fn bug_named(name: &str) -> Option<Bug> {
    Bug::ALL.iter().copied().find(|b| format!("{b:?}") == name)
}

/// Every planted bug has a test above.
const TESTED: [&str; 14] = [
    "GateReleasedOnPause",
    "AbandonTimerOffByOne",
    "ReplaySkipsBoundary",
    "DeliverBeforeCommit",
    "DuplicateToolResult",
    "AdmitNewestWaiter",
    "SeqReuseAfterRestart",
    "McpTimerNotArmed",
    "IdemQueuedRetryRuns",
    "PipelineRevealsEarly",
    "FenceSkipped",
    "RetryWithoutWait",
    "LimiterAdmitsOneOver",
    "SlotQueueNewestFirst",
];

#[test]
fn every_bug_has_a_test() {
    for bug in Bug::ALL {
        let name = format!("{bug:?}");
        assert!(
            TESTED.contains(&name.as_str()),
            "add a test for the new planted bug {name}"
        );
    }
}

fn clean(range: std::ops::Range<u64>) {
    for seed in range {
        let r = run(seed, &opts(None));
        assert!(
            r.ok(),
            "seed {seed} failed with no bug planted: {:?}\n  reproduce: {}",
            r.violations.first(),
            repro(seed)
        );
    }
}

#[test]
fn no_bug_seeds_0_100_pass() {
    clean(0..100);
}

#[test]
fn no_bug_seeds_100_200_pass() {
    clean(100..200);
}
