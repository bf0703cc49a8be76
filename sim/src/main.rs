//! `cargo run -p sim -- [--replicas] --seed N | --seeds A..B | --minutes M
//!  [--check-determinism] [--verbose] [--max-steps K] [--shrink] [--bug NAME]`

use std::process::ExitCode;
use std::time::{Duration, Instant};

use sim::{check_determinism_of, repro, run, run_replicas, shrink, Report, RunOpts};

const USAGE: &str = "usage: sim [--replicas] [--seed N | --seeds A..B | --minutes M] \
[--check-determinism] [--verbose] [--max-steps K] [--shrink] [--no-liveness] [--bug NAME]";

struct Args {
    seeds: Option<(u64, u64)>,
    minutes: Option<f64>,
    check_determinism: bool,
    shrink: bool,
    /// The replica world (`sim::replicas`) instead of the single server.
    replicas: bool,
    opts: RunOpts,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        seeds: None,
        minutes: None,
        check_determinism: false,
        shrink: false,
        replicas: false,
        opts: RunOpts::default(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--seed" => {
                let n: u64 = val("--seed")?.parse().map_err(|e| format!("--seed: {e}"))?;
                a.seeds = Some((n, n + 1));
            }
            "--seeds" => {
                let v = val("--seeds")?;
                let (x, y) = v.split_once("..").ok_or("--seeds wants A..B")?;
                let x: u64 = x.parse().map_err(|e| format!("--seeds: {e}"))?;
                let y: u64 = y.parse().map_err(|e| format!("--seeds: {e}"))?;
                a.seeds = Some((x, y));
            }
            "--minutes" => {
                a.minutes = Some(
                    val("--minutes")?
                        .parse()
                        .map_err(|e| format!("--minutes: {e}"))?,
                )
            }
            "--max-steps" => {
                a.opts.max_steps = Some(
                    val("--max-steps")?
                        .parse()
                        .map_err(|e| format!("--max-steps: {e}"))?,
                )
            }
            "--check-determinism" => a.check_determinism = true,
            "--replicas" => a.replicas = true,
            "--verbose" => a.opts.verbose = true,
            "--shrink" => a.shrink = true,
            "--no-liveness" => a.opts.no_liveness = true,
            "--bug" => {
                let name = val("--bug")?;
                set_bug(&mut a.opts, &name)?;
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    if a.replicas && a.shrink {
        return Err("--shrink works on the single-server world only".into());
    }
    Ok(a)
}

#[cfg(feature = "planted-bugs")]
fn set_bug(opts: &mut RunOpts, name: &str) -> Result<(), String> {
    let bug = engine::planted::Bug::ALL
        .iter()
        .find(|b| format!("{b:?}") == name)
        .ok_or(format!(
            "unknown bug {name}; one of {:?}",
            engine::planted::Bug::ALL
        ))?;
    opts.bug = Some(*bug);
    Ok(())
}

#[cfg(not(feature = "planted-bugs"))]
fn set_bug(_: &mut RunOpts, _: &str) -> Result<(), String> {
    Err(
        "--bug needs the planted-bugs feature: cargo run -p sim --features planted-bugs -- …"
            .into(),
    )
}

fn print_failure(r: &Report) {
    println!("FAIL seed {}", r.seed);
    println!("  swarm: {}", r.swarm);
    for v in r.violations.iter().take(10) {
        println!(
            "  {} at step {} (t={} ms): {}",
            v.invariant, v.step, v.time_ms, v.detail
        );
    }
    if r.violations.len() > 10 {
        println!("  … {} more", r.violations.len() - 10);
    }
    println!("  reproduce: {}", repro(r.seed));
    print_bug_hint();
}

#[cfg(feature = "planted-bugs")]
fn print_bug_hint() {
    println!("  (planted bug: add `--features planted-bugs --bug NAME` to the command)");
}

#[cfg(not(feature = "planted-bugs"))]
fn print_bug_hint() {}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let deadline = args
        .minutes
        .map(|m| started + Duration::from_secs_f64(m * 60.0));
    let (first, end) = match (args.seeds, deadline) {
        (Some(r), None) => r,
        (Some((a, _)), Some(_)) => (a, u64::MAX),
        (None, Some(_)) => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            let start = t % 1_000_000_000;
            (start, u64::MAX)
        }
        (None, None) => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let single = end == first + 1;
    let (mut runs, mut failed) = (0u64, Vec::new());
    let mut sb = [0u64; 4];
    let mut ext = sim::ext::ExtStats::default();
    let mut transfer = sim::world::TransferStats::default();
    let mut streams = sim::stream::StreamStats::default();
    let mut traffic = sim::traffic::oracle::TrafficStats::default();
    let mut seed = first;
    while seed < end {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let world: fn(u64, &RunOpts) -> Report = match args.replicas {
            true => run_replicas,
            false => run,
        };
        let result = if args.check_determinism {
            check_determinism_of(seed, &args.opts, world)
        } else {
            Ok(world(seed, &args.opts))
        };
        runs += 1;
        if let Ok(r) = &result {
            sb[0] += r.stats.sandbox_starts;
            sb[1] += r.stats.sandbox_execs;
            sb[2] += r.stats.sandbox_kills;
            sb[3] += r.stats.subagents;
            ext.add(&r.stats.ext);
            transfer.add(&r.stats.transfer);
            streams.add(&r.stats.stream);
            traffic.add(&r.stats.traffic);
        }
        match result {
            Err(e) => {
                println!("FAIL {e}\n  reproduce: {} --check-determinism", repro(seed));
                failed.push(seed);
            }
            Ok(r) => {
                if single || !r.ok() {
                    if args.opts.verbose || single {
                        println!("seed {} swarm: {}", r.seed, r.swarm);
                    }
                    println!(
                        "seed {}: {} — steps={} events={} crashes={} graceful_restarts={} turns={} pauses={} provider_calls={} lagged={} mcp(transports={} calls={} timeouts={}) sandbox(starts={} execs={} kills={} subagents={}) trace={:016x} log={:016x}",
                        r.seed,
                        if r.ok() { "ok" } else { "FAIL" },
                        r.stats.steps,
                        r.stats.events,
                        r.stats.crashes,
                        r.stats.graceful_restarts,
                        r.stats.turns_completed,
                        r.stats.pauses,
                        r.stats.provider_calls,
                        r.stats.lagged,
                        r.stats.mcp_transports,
                        r.stats.mcp_calls,
                        r.stats.mcp_timeouts,
                        r.stats.sandbox_starts,
                        r.stats.sandbox_execs,
                        r.stats.sandbox_kills,
                        r.stats.subagents,
                        r.trace_hash,
                        r.log_hash
                    );
                }
                if !r.ok() {
                    print_failure(&r);
                    failed.push(seed);
                    if args.shrink {
                        let opts = RunOpts {
                            keep_trace: true,
                            ..args.opts.clone()
                        };
                        if let Some((k, best)) = shrink(seed, &opts) {
                            println!(
                                "shrunk: seed {seed} fails with --max-steps {k} ({}); trace:",
                                best.violations[0].invariant
                            );
                            for l in &best.trace {
                                println!("{l}");
                            }
                            print_failure(&best);
                            println!(
                                "  minimal prefix: {} --max-steps {k} --verbose",
                                repro(seed)
                            );
                        }
                    }
                }
            }
        }
        seed += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{runs} seeds in {secs:.1}s ({:.1} seeds/s), {} failed",
        runs as f64 / secs.max(1e-9),
        failed.len()
    );
    println!(
        "sandbox totals: starts={} execs={} kills={} subagents={}",
        sb[0], sb[1], sb[2], sb[3]
    );
    println!("extension totals: {ext}");
    println!("transfer totals: {transfer}");
    println!("stream totals: {streams}");
    println!("traffic totals: {traffic}");
    if !failed.is_empty() {
        println!("failing seeds: {failed:?}");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
