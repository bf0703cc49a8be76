//! `sim`: a deterministic simulator for the BAE engine in the tradition of
//! FoundationDB's simulator and TigerBeetle's VOPR. It runs the real
//! [`engine::Engine`] inside a simulated world (clock, network, store,
//! provider, clients, crashes) driven by one seed. See docs/simulation.md.

pub mod check;
pub mod driver;
pub mod ext;
pub mod hash;
pub mod http;
pub mod mcp;
pub mod provider;
pub mod replicas;
pub mod rng;
pub mod sandbox;
pub mod stream;
pub mod swarm;
pub mod traffic;
pub mod world;

pub use check::Violation;
pub use replicas::run_replicas;
pub use world::{run, Report, RunOpts, Stats};

/// The command that reproduces a seed.
pub fn repro(seed: u64) -> String {
    format!("cargo run -p sim -- --seed {seed}")
}

/// Runs `seed` twice and compares the fingerprints.
pub fn check_determinism(seed: u64, opts: &RunOpts) -> Result<Report, String> {
    check_determinism_of(seed, opts, run)
}

/// [`check_determinism`] of another world (`run_replicas`).
pub fn check_determinism_of(
    seed: u64,
    opts: &RunOpts,
    run: fn(u64, &RunOpts) -> Report,
) -> Result<Report, String> {
    let a = run(seed, opts);
    let b = run(seed, opts);
    if a.trace_hash != b.trace_hash || a.log_hash != b.log_hash {
        return Err(format!(
            "seed {seed} is not deterministic: trace {:016x} vs {:016x}, log {:016x} vs {:016x}",
            a.trace_hash, b.trace_hash, a.log_hash, b.log_hash
        ));
    }
    Ok(a)
}

/// Finds the smallest main-phase step count at which `seed` still fails
/// (binary search over `--max-steps`). Returns `None` if the full run passes.
pub fn shrink(seed: u64, opts: &RunOpts) -> Option<(u64, Report)> {
    let full = run(seed, opts);
    if full.ok() {
        return None;
    }
    let want = full.violations[0].invariant;
    let fails = |k: u64| {
        let o = RunOpts {
            max_steps: Some(k),
            ..opts.clone()
        };
        let r = run(seed, &o);
        let hit = r.violations.iter().any(|v| v.invariant == want);
        (hit, r)
    };
    let (mut lo, mut hi) = (0u64, full.stats.main_steps.max(1));
    let mut best = full;
    // Invariant: `hi` fails (or is the full run). Search the smallest.
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        let (hit, r) = fails(mid);
        if hit {
            hi = mid;
            best = r;
        } else {
            lo = mid;
        }
    }
    Some((hi, best))
}
