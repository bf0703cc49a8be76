//! The simulator over a fixed seed range (debug build, both cores: the range
//! is split across test threads), plus the same-seed-twice determinism
//! check. A failure prints the seed, its swarm options, the violations and
//! the command that reproduces it.

use sim::{check_determinism, repro, run, RunOpts};

/// Seeds run by `cargo test -p sim` (see docs/simulation.md for timings).
const SEEDS: u64 = 1_000;
const PARTS: u64 = 4;

fn run_part(part: u64) {
    let per = SEEDS / PARTS;
    let mut failures = Vec::new();
    for seed in part * per..(part + 1) * per {
        let r = run(seed, &RunOpts::default());
        if !r.ok() {
            let mut text = format!("seed {seed}\n  swarm: {}\n", r.swarm);
            for v in r.violations.iter().take(5) {
                text.push_str(&format!(
                    "  {} at step {} (t={} ms): {}\n",
                    v.invariant, v.step, v.time_ms, v.detail
                ));
            }
            text.push_str(&format!("  reproduce: {}\n", repro(seed)));
            failures.push(text);
        }
    }
    assert!(
        failures.is_empty(),
        "{} seed(s) failed:\n{}",
        failures.len(),
        failures.join("")
    );
}

#[test]
fn seeds_part_0() {
    run_part(0);
}

#[test]
fn seeds_part_1() {
    run_part(1);
}

#[test]
fn seeds_part_2() {
    run_part(2);
}

#[test]
fn seeds_part_3() {
    run_part(3);
}

#[test]
fn same_seed_twice_is_byte_identical() {
    for seed in [0, 1, 2, 3, 5, 8, 13, 21] {
        let r = check_determinism(seed, &RunOpts::default()).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.stats.steps > 0);
    }
}

#[test]
fn different_seeds_differ() {
    let a = run(100, &RunOpts::default());
    let b = run(101, &RunOpts::default());
    assert_ne!(a.trace_hash, b.trace_hash);
    assert_ne!(a.swarm, b.swarm);
}
