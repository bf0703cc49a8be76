//! The closed instrument set of spec 04 §7.2, kept by the engine and
//! rendered in the Prometheus text exposition format for `GET /metrics` on
//! the admin port. Counters and histograms are fed at the points where the
//! engine already knows the fact (a turn ends, a provider call returns, a
//! tool result is recorded); gauges are computed from the engine's state
//! at scrape time; process and store figures come from the store thread
//! ([`RuntimeStats`]). Labels are low-cardinality enums only.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt::Write;

pub mod traffic;

/// Upper bounds (ms) of the latency histogram buckets.
const LATENCY_BUCKETS_MS: [u64; 14] = [
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 60_000,
];
/// Upper bounds (µs) of the commit latency histogram buckets.
const COMMIT_BUCKETS_US: [u64; 10] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000, 1_000_000,
];
/// Upper bounds of the group-commit batch size histogram (writes).
const BATCH_BUCKETS: [u64; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
/// Bounds of `bae_engine_step_microseconds`.
const STEP_BUCKETS_US: [u64; 11] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 50_000,
];

/// `bae.turns.completed` outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnOutcome {
    Completed,
    Paused,
    ProvidersFailed,
}

impl TurnOutcome {
    const ALL: [TurnOutcome; 3] = [
        TurnOutcome::Completed,
        TurnOutcome::Paused,
        TurnOutcome::ProvidersFailed,
    ];
    fn as_str(self) -> &'static str {
        match self {
            TurnOutcome::Completed => "completed",
            TurnOutcome::Paused => "paused",
            TurnOutcome::ProvidersFailed => "providers_failed",
        }
    }
}

/// A cumulative histogram with fixed buckets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations at or below each bound (not cumulative across bounds).
    pub buckets: Vec<u64>,
    pub sum: u64,
    pub count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[u64], value: u64) {
        if self.buckets.len() != bounds.len() {
            self.buckets = vec![0; bounds.len()];
        }
        if let Some(i) = bounds.iter().position(|b| value <= *b) {
            if let Some(slot) = self.buckets.get_mut(i) {
                *slot += 1;
            }
        }
        self.sum = self.sum.saturating_add(value);
        self.count += 1;
    }
}

/// Figures of the process and the store, measured by the store thread
/// (zeros where a runtime cannot tell, e.g. the in-memory store).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeStats {
    pub rss_bytes: u64,
    pub open_fds: u64,
    /// Commit transaction latency, microseconds.
    pub commit_latency_us: Histogram,
    /// Writes per group-commit batch.
    pub batch_writes: Histogram,
    /// Time the engine spent on each input (the driver's side).
    pub engine_steps: EngineSteps,
}

impl RuntimeStats {
    /// Records one committed batch (the store thread's side).
    pub fn committed(&mut self, writes: usize, micros: u64) {
        self.commit_latency_us.observe(&COMMIT_BUCKETS_US, micros);
        self.batch_writes.observe(&BATCH_BUCKETS, writes as u64);
    }
}

/// How long single engine steps (one `handle_input` or `handle_timeout`)
/// take, as the driver clocks them: nothing behind one step can be answered
/// sooner, so the longest step bounds every other request's latency.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineSteps {
    pub micros: Histogram,
    pub max_us: u64,
}

impl EngineSteps {
    pub fn observe(&mut self, micros: u64) {
        self.micros.observe(&STEP_BUCKETS_US, micros);
        self.max_us = self.max_us.max(micros);
    }
}

/// Gauges read from the engine's state at scrape time.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    pub sessions_open: u64,
    pub sessions_total: u64,
    pub events_total: u64,
    pub profiles: u64,
    pub client_keys: u64,
    pub mcp_sessions_live: u64,
    pub turns_pending: u64,
    pub sandboxes_live: u64,
    pub subagents_active: u64,
    pub drivers_registered: u64,
    pub connections: u64,
}

impl Gauges {
    /// The ten gauges of §7.2 as (instrument, help, value).
    fn named(&self) -> [(&'static str, &'static str, u64); 10] {
        let g = self;
        [
            ("bae.sessions.open", "Open sessions.", g.sessions_open),
            (
                "bae.sessions.total",
                "Sessions ever created.",
                g.sessions_total,
            ),
            ("bae.events.total", "Events in the log.", g.events_total),
            ("bae.profiles.count", "Active profiles.", g.profiles),
            ("bae.keys.count", "Active client keys.", g.client_keys),
            (
                "bae.mcp.sessions.live",
                "Sessions with live MCP connections.",
                g.mcp_sessions_live,
            ),
            ("bae.turns.pending", "Parked paused turns.", g.turns_pending),
            (
                "bae.sandboxes.live",
                "Running remote sandboxes.",
                g.sandboxes_live,
            ),
            (
                "bae.subagents.active",
                "Running remote subagents.",
                g.subagents_active,
            ),
            (
                "bae.drivers.registered",
                "Driver registrations over all sessions.",
                g.drivers_registered,
            ),
        ]
    }
}

use proto::wire::content::Dispatch;

/// Provider kinds as label values, in a fixed order.
const PROVIDERS: [&str; 2] = ["anthropic", "openai"];

/// `bae.provider.tokens` kinds, in the order of [`Metrics::provider_tokens`].
const TOKEN_KINDS: [&str; 4] = ["input", "output", "cache_write", "cache_read"];

/// The engine's counters and histograms.
#[derive(Debug, Default)]
pub struct Metrics {
    disabled: BTreeSet<String>,
    turns: [u64; 3],
    /// `[provider][ok, error]`.
    provider_requests: [[u64; 2]; 2],
    provider_latency: [Histogram; 2],
    tool_calls: [u64; 4],
    tool_latency: [Histogram; 4],
    /// Tokens by provider entry (the registry's names: a handful, fixed
    /// at start) and [`TOKEN_KINDS`].
    provider_tokens: Vec<(String, [u64; 4])>,
}

fn provider_index(kind: proto::provider::Kind) -> usize {
    match kind {
        proto::provider::Kind::Anthropic => 0,
        proto::provider::Kind::Openai => 1,
    }
}

impl Metrics {
    /// `disabled`: instrument names (spec 04 §7.2) left out of the scrape.
    pub fn new(disabled: &[String]) -> Self {
        Metrics {
            disabled: disabled.iter().cloned().collect(),
            ..Metrics::default()
        }
    }

    /// The provider entries whose token series start at 0 (the registry).
    pub fn with_provider_entries<'a>(mut self, names: impl IntoIterator<Item = &'a str>) -> Self {
        for n in names {
            self.entry_tokens(n);
        }
        self
    }

    fn entry_tokens(&mut self, entry: &str) -> Option<&mut [u64; 4]> {
        if !self.provider_tokens.iter().any(|(n, _)| n == entry) {
            self.provider_tokens.push((entry.to_string(), [0; 4]));
        }
        (self.provider_tokens.iter_mut())
            .find(|(n, _)| n == entry)
            .map(|(_, t)| t)
    }

    /// A successful attempt of provider entry `entry` used `t`.
    pub fn provider_tokens(&mut self, entry: &str, t: &proto::provider::Tokens) {
        let Some(counts) = self.entry_tokens(entry) else {
            return;
        };
        for (c, n) in counts
            .iter_mut()
            .zip([t.input, t.output, t.cache_write, t.cache_read])
        {
            *c = c.saturating_add(n);
        }
    }

    pub fn turn_ended(&mut self, outcome: TurnOutcome) {
        if let Some(n) = self.turns.get_mut(outcome as usize) {
            *n += 1;
        }
    }

    pub fn provider_returned(&mut self, kind: proto::provider::Kind, ok: bool, latency_ms: u64) {
        let p = provider_index(kind);
        if let Some(n) = self
            .provider_requests
            .get_mut(p)
            .and_then(|r| r.get_mut(!ok as usize))
        {
            *n += 1;
        }
        if let Some(h) = self.provider_latency.get_mut(p) {
            h.observe(&LATENCY_BUCKETS_MS, latency_ms);
        }
    }

    /// One `tool_use` dispatched.
    pub fn tool_called(&mut self, dispatch: Dispatch) {
        if let Some(n) = self.tool_calls.get_mut(dispatch as usize) {
            *n += 1;
        }
    }

    /// A server-executed tool finished after `latency_ms`.
    pub fn tool_finished(&mut self, dispatch: Dispatch, latency_ms: u64) {
        if let Some(h) = self.tool_latency.get_mut(dispatch as usize) {
            h.observe(&LATENCY_BUCKETS_MS, latency_ms);
        }
    }

    /// The text exposition (format 0.0.4) of every enabled instrument,
    /// then the process and store figures.
    pub fn render(&self, g: &Gauges, rt: &RuntimeStats) -> String {
        let mut out = String::with_capacity(4096);
        let gauges = g.named();
        for (name, help, value) in gauges {
            if self.enabled(name) {
                let m = prom_name(name);
                let _ = writeln!(out, "# HELP {m} {help}\n# TYPE {m} gauge\n{m} {value}");
            }
        }
        if self.enabled("bae.turns.completed") {
            out.push_str("# HELP bae_turns_completed_total Turns ended, by outcome.\n");
            out.push_str("# TYPE bae_turns_completed_total counter\n");
            for o in TurnOutcome::ALL {
                let n = self.turns.get(o as usize).copied().unwrap_or(0);
                let _ = writeln!(
                    out,
                    "bae_turns_completed_total{{outcome=\"{}\"}} {n}",
                    o.as_str()
                );
            }
        }
        if self.enabled("bae.provider.requests") {
            out.push_str(
                "# HELP bae_provider_requests_total Provider attempts, by kind and outcome.\n",
            );
            out.push_str("# TYPE bae_provider_requests_total counter\n");
            for (p, counts) in PROVIDERS.iter().zip(self.provider_requests.iter()) {
                for (outcome, n) in ["ok", "error"].iter().zip(counts.iter()) {
                    let _ = writeln!(
                        out,
                        "bae_provider_requests_total{{provider=\"{p}\",outcome=\"{outcome}\"}} {n}"
                    );
                }
            }
        }
        if self.enabled("bae.provider.latency") {
            let name = "bae_provider_latency_milliseconds";
            header(&mut out, name, "Provider attempt latency.", "histogram");
            for (p, h) in PROVIDERS.iter().zip(self.provider_latency.iter()) {
                histogram(
                    &mut out,
                    name,
                    &format!("provider=\"{p}\""),
                    &LATENCY_BUCKETS_MS,
                    h,
                );
            }
        }
        if self.enabled("bae.provider.tokens") {
            out.push_str(
                "# HELP bae_provider_tokens_total Tokens of successful provider attempts, by provider entry and kind.\n",
            );
            out.push_str("# TYPE bae_provider_tokens_total counter\n");
            for (entry, counts) in &self.provider_tokens {
                let mut label = String::new();
                label_value(&mut label, entry);
                for (kind, n) in TOKEN_KINDS.iter().zip(counts) {
                    let _ = writeln!(
                        out,
                        "bae_provider_tokens_total{{provider=\"{label}\",kind=\"{kind}\"}} {n}"
                    );
                }
            }
        }
        if self.enabled("bae.tool.calls") {
            out.push_str("# HELP bae_tool_calls_total Tool uses dispatched, by dispatch.\n");
            out.push_str("# TYPE bae_tool_calls_total counter\n");
            for (d, n) in Dispatch::ALL.iter().zip(self.tool_calls.iter()) {
                let d = d.as_str();
                let _ = writeln!(out, "bae_tool_calls_total{{dispatch=\"{d}\"}} {n}");
            }
        }
        if self.enabled("bae.tool.latency") {
            let name = "bae_tool_latency_milliseconds";
            header(&mut out, name, "Server-executed tool latency.", "histogram");
            // Client tools run in the client: no server latency series.
            for (d, h) in Dispatch::ALL.iter().zip(self.tool_latency.iter()).skip(1) {
                histogram(
                    &mut out,
                    name,
                    &format!("dispatch=\"{}\"", d.as_str()),
                    &LATENCY_BUCKETS_MS,
                    h,
                );
            }
        }
        let process: [(&str, &str, u64); 3] = [
            (
                "process_resident_memory_bytes",
                "Resident memory.",
                rt.rss_bytes,
            ),
            ("process_open_fds", "Open file descriptors.", rt.open_fds),
            (
                "bae_connections_open",
                "Open client and admin connections.",
                g.connections,
            ),
        ];
        for (m, help, value) in process {
            let _ = writeln!(out, "# HELP {m} {help}\n# TYPE {m} gauge\n{m} {value}");
        }
        let name = "bae_store_commit_latency_microseconds";
        header(
            &mut out,
            name,
            "Group-commit transaction latency.",
            "histogram",
        );
        histogram(
            &mut out,
            name,
            "",
            &COMMIT_BUCKETS_US,
            &rt.commit_latency_us,
        );
        let name = "bae_store_commit_batch_writes";
        header(
            &mut out,
            name,
            "Writes per group-commit batch.",
            "histogram",
        );
        histogram(&mut out, name, "", &BATCH_BUCKETS, &rt.batch_writes);
        let name = "bae_engine_step_microseconds";
        header(
            &mut out,
            name,
            "Time the engine spent on one input.",
            "histogram",
        );
        let steps = &rt.engine_steps;
        histogram(&mut out, name, "", &STEP_BUCKETS_US, &steps.micros);
        let name = "bae_engine_step_max_microseconds";
        header(&mut out, name, "Longest single engine step.", "gauge");
        let _ = writeln!(out, "{name} {}", steps.max_us);
        out
    }

    /// Every enabled instrument of §7.2 as typed points, for an exporter
    /// (OTLP) that is not the Prometheus scrape.
    pub fn instruments(&self, g: &Gauges) -> Vec<Instrument> {
        let mut out = Vec::with_capacity(15);
        let gauges = g.named();
        for (name, description, v) in gauges {
            out.push(Instrument {
                name,
                description,
                unit: "1",
                points: Points::Gauge(v),
            });
        }
        let turns = TurnOutcome::ALL
            .iter()
            .map(|o| {
                (
                    vec![("outcome", Cow::Borrowed(o.as_str()))],
                    self.turns.get(*o as usize).copied().unwrap_or(0),
                )
            })
            .collect();
        out.push(Instrument {
            name: "bae.turns.completed",
            description: "Turns ended, by outcome.",
            unit: "1",
            points: Points::Sum(turns),
        });
        let mut requests = Vec::new();
        for (p, counts) in PROVIDERS.iter().zip(self.provider_requests.iter()) {
            for (outcome, n) in ["ok", "error"].iter().zip(counts.iter()) {
                requests.push((
                    vec![
                        ("provider", Cow::Borrowed(*p)),
                        ("outcome", Cow::Borrowed(*outcome)),
                    ],
                    *n,
                ));
            }
        }
        out.push(Instrument {
            name: "bae.provider.requests",
            description: "Provider attempts, by kind and outcome.",
            unit: "1",
            points: Points::Sum(requests),
        });
        let series = PROVIDERS
            .iter()
            .zip(self.provider_latency.iter())
            .map(|(p, h)| (vec![("provider", Cow::Borrowed(*p))], h.clone()))
            .collect();
        out.push(Instrument {
            name: "bae.provider.latency",
            description: "Provider attempt latency.",
            unit: "ms",
            points: Points::Histogram {
                bounds: &LATENCY_BUCKETS_MS,
                series,
            },
        });
        let mut tokens = Vec::new();
        for (entry, counts) in &self.provider_tokens {
            for (kind, n) in TOKEN_KINDS.iter().zip(counts) {
                let labels = vec![
                    ("provider", Cow::Owned(entry.clone())),
                    ("kind", Cow::Borrowed(*kind)),
                ];
                tokens.push((labels, *n));
            }
        }
        out.push(Instrument {
            name: "bae.provider.tokens",
            description: "Tokens of successful provider attempts, by provider entry and kind.",
            unit: "1",
            points: Points::Sum(tokens),
        });
        let calls = Dispatch::ALL
            .iter()
            .zip(self.tool_calls.iter())
            .map(|(d, n)| (vec![("dispatch", Cow::Borrowed(d.as_str()))], *n))
            .collect();
        out.push(Instrument {
            name: "bae.tool.calls",
            description: "Tool uses dispatched, by dispatch.",
            unit: "1",
            points: Points::Sum(calls),
        });
        let series = Dispatch::ALL
            .iter()
            .zip(self.tool_latency.iter())
            .skip(1)
            .map(|(d, h)| (vec![("dispatch", Cow::Borrowed(d.as_str()))], h.clone()))
            .collect();
        out.push(Instrument {
            name: "bae.tool.latency",
            description: "Server-executed tool latency.",
            unit: "ms",
            points: Points::Histogram {
                bounds: &LATENCY_BUCKETS_MS,
                series,
            },
        });
        out.retain(|i| self.enabled(i.name));
        out
    }

    fn enabled(&self, instrument: &str) -> bool {
        !self.disabled.contains(instrument)
    }
}

/// Low-cardinality label pairs of one series: closed enums, or the name of
/// a configured provider entry.
pub type Labels = Vec<(&'static str, Cow<'static, str>)>;

/// A label value as the text format escapes it (`\\`, `\"`, `\n`).
fn label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// The value of an instrument at one collection.
#[derive(Debug, Clone, PartialEq)]
pub enum Points {
    Gauge(u64),
    /// Monotonic cumulative counters, one per label set.
    Sum(Vec<(Labels, u64)>),
    /// Cumulative histograms; `bounds` are the explicit upper bounds (a
    /// series' observations above the last bound are `count` minus its
    /// buckets).
    Histogram {
        bounds: &'static [u64],
        series: Vec<(Labels, Histogram)>,
    },
}

/// One instrument of §7.2 with its points.
#[derive(Debug, Clone, PartialEq)]
pub struct Instrument {
    pub name: &'static str,
    pub description: &'static str,
    pub unit: &'static str,
    pub points: Points,
}

/// `bae.sessions.open` → `bae_sessions_open`.
fn prom_name(instrument: &str) -> String {
    instrument.replace('.', "_")
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn histogram(out: &mut String, name: &str, labels: &str, bounds: &[u64], h: &Histogram) {
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cumulative = 0;
    for (i, b) in bounds.iter().enumerate() {
        cumulative += h.buckets.get(i).copied().unwrap_or(0);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", h.count);
    let braces = |s: &str| {
        if s.is_empty() {
            String::new()
        } else {
            format!("{{{s}}}")
        }
    };
    let _ = writeln!(out, "{name}_sum{} {}", braces(labels), h.sum);
    let _ = writeln!(out, "{name}_count{} {}", braces(labels), h.count);
}

#[cfg(test)]
mod tests;
