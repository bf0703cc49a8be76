//! `BAE_LOG`: the stderr log filter.
//!
//! A per-target filter (`info`, `baesrv=debug,ureq=warn`, …), the syntax of
//! `tracing_subscriber::filter::Targets`. Span and field directives
//! (`[span]`, `{field}`) are not supported: they need a regex engine that
//! costs the binary 0.37 MB for a feature operators of this
//! server do not need (docs/performance.md, "Binary size").

use tracing::Level;
use tracing_subscriber::filter::{LevelFilter, Targets};

/// Crates whose log targets make up "baesrv".
const LOG_CRATES: [&str; 3] = ["io_smol", "engine", "proto"];

/// Crates that log secrets at verbose levels, with the most verbose level
/// they may log at whatever `BAE_LOG` says. The HTTP client logs whole
/// request heads (credential headers included) at debug level; the
/// PostgreSQL client logs every statement's parameters (key hashes among
/// them) at debug level.
const CAPPED: [(&str, LevelFilter); 4] = [
    ("ureq", LevelFilter::WARN),
    ("rustls", LevelFilter::WARN),
    ("tokio_postgres", LevelFilter::INFO),
    ("postgres", LevelFilter::INFO),
];

/// The filter of `directive`, and whether it was unparsable (then the
/// filter is `info` and the caller warns).
pub fn stderr_filter(directive: &str) -> (Targets, bool) {
    let parsed = match plain_targets(directive) {
        true => expand_log_directive(directive).parse::<Targets>().ok(),
        false => None,
    };
    let (parsed, bad) = match parsed {
        Some(t) => (t, false),
        None => (Targets::new().with_default(Level::INFO), true),
    };
    (cap_secret_bearing(parsed), bad)
}

/// Whether every directive's target is a plain module path: the parser
/// takes `foo[span]` or `foo{field}` as a target that matches nothing, and
/// an operator who wrote one should hear so.
fn plain_targets(directive: &str) -> bool {
    directive.split(',').all(|d| {
        let target = d.split('=').next().unwrap_or_default().trim();
        target
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-' | b'.'))
    })
}

/// Operators write `BAE_LOG=baesrv=debug` (the binary's name, as for the
/// reference); our events carry crate-path targets. Every directive whose
/// target is `baesrv` (or `baesrv::…`) is kept and duplicated for each of
/// our crates.
fn expand_log_directive(directive: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for d in directive.split(',') {
        out.push(d.to_string());
        let t = d.trim_start();
        let rest = match t.strip_prefix("baesrv") {
            Some(r) if r.is_empty() || r.starts_with(['=', ':']) => r,
            _ => continue,
        };
        for c in LOG_CRATES {
            out.push(format!("{c}{rest}"));
        }
    }
    out.join(",")
}

/// `filter` with every capped crate (and each of its modules named in the
/// filter) held at or below its cap.
fn cap_secret_bearing(filter: Targets) -> Targets {
    let cap_of = |target: &str| {
        CAPPED.iter().find_map(|(c, cap)| {
            let inside =
                target == *c || target.strip_prefix(c).is_some_and(|r| r.starts_with("::"));
            inside.then_some(*cap)
        })
    };
    let mut out = Targets::new();
    if let Some(d) = filter.default_level() {
        out = out.with_default(d);
    }
    for (target, level) in filter.iter() {
        let level = cap_of(target).map_or(level, |cap| level.min(cap));
        out = out.with_target(target, level);
    }
    for (c, cap) in CAPPED {
        out = out.with_target(c, effective(&filter, c).min(cap));
    }
    out
}

/// The most verbose level `filter` enables for `target`.
fn effective(filter: &Targets, target: &str) -> LevelFilter {
    [
        Level::TRACE,
        Level::DEBUG,
        Level::INFO,
        Level::WARN,
        Level::ERROR,
    ]
    .into_iter()
    .find(|l| filter.would_enable(target, l))
    .map_or(LevelFilter::OFF, LevelFilter::from_level)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baesrv_target_covers_our_crates() {
        assert_eq!(expand_log_directive("info"), "info");
        assert_eq!(
            expand_log_directive("baesrv=debug,tower=warn"),
            "baesrv=debug,io_smol=debug,engine=debug,proto=debug,tower=warn"
        );
        assert_eq!(
            expand_log_directive("warn,baesrv"),
            "warn,baesrv,io_smol,engine,proto"
        );
        assert_eq!(expand_log_directive("baesrvx=debug"), "baesrvx=debug");
        for (d, target) in [
            ("baesrv=debug,tower=warn", "io_smol::http"),
            ("warn,baesrv", "engine"),
            ("baesrv::x=trace", "proto::x::y"),
        ] {
            let (f, bad) = stderr_filter(d);
            assert!(!bad, "{d}");
            assert!(f.would_enable(target, &Level::DEBUG), "{d}");
        }
        let (f, _) = stderr_filter("warn,baesrv=debug");
        assert!(f.would_enable("engine::session", &Level::DEBUG));
        assert!(!f.would_enable("other_crate", &Level::INFO));
    }

    #[test]
    fn secret_bearing_crates_stay_capped_whatever_the_directive() {
        for d in ["trace", "ureq=trace,rustls::conn=debug", "ureq::pool=trace"] {
            let (f, _) = stderr_filter(d);
            assert!(!f.would_enable("ureq", &Level::INFO), "{d}");
            assert!(!f.would_enable("ureq::pool", &Level::DEBUG), "{d}");
            assert!(!f.would_enable("rustls::conn", &Level::INFO), "{d}");
            assert!(
                !f.would_enable("tokio_postgres::query", &Level::DEBUG),
                "{d}"
            );
            assert!(!f.would_enable("postgres", &Level::DEBUG), "{d}");
        }
        let (f, _) = stderr_filter("trace");
        assert!(f.would_enable("ureq", &Level::WARN));
        assert!(f.would_enable("postgres", &Level::INFO));
        assert!(f.would_enable("io_smol", &Level::TRACE));
    }

    #[test]
    fn a_cap_never_raises_a_quieter_level() {
        let (f, _) = stderr_filter("error");
        assert!(!f.would_enable("ureq", &Level::WARN));
        assert!(!f.would_enable("postgres", &Level::INFO));
        assert!(f.would_enable("ureq", &Level::ERROR));
        let (f, _) = stderr_filter("info,ureq=off");
        assert!(!f.would_enable("ureq", &Level::ERROR));
    }

    #[test]
    fn unsupported_or_garbled_directives_fall_back_to_info() {
        for d in [
            "baesrv[span]=debug",
            "io_smol[{id}]=trace",
            "info,x{y}",
            "==",
        ] {
            let (f, bad) = stderr_filter(d);
            assert!(bad, "{d}");
            assert!(f.would_enable("io_smol", &Level::INFO), "{d}");
            assert!(!f.would_enable("io_smol", &Level::DEBUG), "{d}");
        }
    }
}
