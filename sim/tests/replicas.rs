//! Replicas in the simulator (`sim::replicas`, docs/simulation.md
//! "Replicas"): several engines with their pipelines on one simulated
//! PostgreSQL, with freezes longer and shorter than the lease, kills and
//! restarts. Every seed must keep the invariants (one writer per session
//! and lane at a time, seqs unique and ordered per session, nothing
//! acknowledged lost), run the same twice, and the fault mix must reach
//! the cases the fence is for. Each replica's engine runs inside the
//! driver core every runtime uses (`engine::driver::Core`).

use sim::{check_determinism_of, run_replicas, RunOpts};

const SEEDS: u64 = 16;

#[test]
fn replica_seeds_keep_every_invariant_and_reach_the_fence() {
    let opts = RunOpts {
        keep_trace: true,
        ..RunOpts::default()
    };
    let mut failures = Vec::new();
    let (mut fenced, mut watch, mut reveal, mut killed, mut drained) = (0, 0, 0, 0, 0);
    let mut acked = 0u64;
    for seed in 0..SEEDS {
        let r = run_replicas(seed, &opts);
        if !r.ok() {
            failures.push(format!(
                "seed {seed}: {:?}\n  swarm: {}\n  reproduce: cargo run -p sim -- --replicas --seed {seed}",
                r.violations.first(),
                r.swarm
            ));
        }
        let exits = |what: &str| {
            r.trace
                .iter()
                .filter(|l| l.contains("EXIT") && l.contains(what))
                .count()
        };
        fenced += exits("fenced:");
        watch += exits("lease watch");
        reveal += exits("before revealing");
        killed += exits("killed");
        drained += exits("shutdown complete");
        acked += r.stats.turns_completed;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The cases that matter were exercised: a commit in flight across a
    // freeze refused by the database's fence, a woken process stopped by
    // its lease watch, kills, and turns acknowledged throughout.
    assert!(fenced > 0, "no commit was ever fenced");
    assert!(watch > 0, "the lease watch never fired");
    // The driver core's own check (`Host::before_reveal`), not only the
    // store thread's and the renewer's.
    assert!(reveal > 0, "the lease watch never stopped a reveal");
    assert!(drained > 0, "no graceful stop ever completed its drain");
    assert!(
        killed > 0 && acked > 0,
        "killed {killed}, acknowledged {acked}"
    );
}

#[test]
fn a_replica_seed_runs_the_same_twice() {
    for seed in [0, 7, 19] {
        let r = check_determinism_of(seed, &RunOpts::default(), run_replicas)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(r.stats.steps > 0 && r.stats.turns_completed > 0);
    }
}
