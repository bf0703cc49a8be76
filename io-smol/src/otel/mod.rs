//! OpenTelemetry export (spec 04 §7): the engine's telemetry facts become
//! OTLP spans, its §7.2 instruments OTLP metrics, on an exporter thread of
//! their own.
//!
//! The engine thread only drains facts, stamps them with the wall clock and
//! hands them over a queue bounded in facts: when the exporter falls behind
//! (a slow or dead collector) new facts are dropped and counted, never
//! waited for. The exporter thread draws trace and span ids, samples,
//! filters with `BAE_OTEL_LOG`, batches and sends; a failed export is
//! logged rate-limited and forgotten. At shutdown the rest is flushed within
//! what remains of `BAE_SHUTDOWN_TIMEOUT`.

pub mod grpc;
mod metrics;
mod spans;
mod transport;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use engine::telemetry::Fact;
use engine::Engine;

use crate::config::{ConfigError, OtlpProtocol, Telemetry};

/// Everything the exporter needs, fixed at startup.
#[derive(Clone)]
pub struct Settings {
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// Resolved `otlp_headers` (secrets: held by the exporter only).
    pub headers: Vec<(String, String)>,
    pub service_name: String,
    pub sample_ratio: f64,
    pub traces: bool,
    pub metrics: bool,
    /// `BAE_OTEL_LOG`: which span targets are exported.
    pub filter: tracing_subscriber::filter::Targets,
    /// `OTEL_METRIC_EXPORT_INTERVAL` (default 60 s).
    pub metric_interval: Duration,
    /// `OTEL_BSP_SCHEDULE_DELAY` (default 1 s): longest a finished span
    /// waits for its batch.
    pub batch_delay: Duration,
    /// `OTEL_BSP_MAX_QUEUE_SIZE` (default 65536): facts waiting for the
    /// exporter; beyond it new facts are dropped.
    pub max_queue: usize,
    /// `OTEL_EXPORTER_OTLP_TIMEOUT` (default 10 s): one export request.
    pub timeout: Duration,
}

impl Settings {
    /// The settings of an enabled `[telemetry]` table; `env` reads the
    /// standard `OTEL_*` tuning variables.
    pub fn new(
        tel: &Telemetry,
        headers: Vec<(String, String)>,
        otel_log: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Settings, ConfigError> {
        let ms = |name: &str, default: u64| -> Result<u64, ConfigError> {
            match env(name) {
                None => Ok(default),
                Some(v) => v.trim().parse::<u64>().map_err(|_| {
                    ConfigError::Telemetry(format!(
                        "{name}: \"{v}\" is not a whole number of milliseconds"
                    ))
                }),
            }
        };
        let metric_interval =
            Duration::from_millis(ms("OTEL_METRIC_EXPORT_INTERVAL", 60_000)?.max(1));
        let batch_delay = Duration::from_millis(ms("OTEL_BSP_SCHEDULE_DELAY", 1_000)?.max(1));
        let timeout = Duration::from_millis(ms("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000)?.max(1));
        let max_queue = match env("OTEL_BSP_MAX_QUEUE_SIZE") {
            None => 65_536,
            Some(v) => v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    ConfigError::Telemetry(format!(
                        "OTEL_BSP_MAX_QUEUE_SIZE: \"{v}\" is not a positive whole number"
                    ))
                })?,
        };
        Ok(Settings {
            endpoint: tel.otlp_endpoint.clone().unwrap_or_default(),
            protocol: tel.protocol().unwrap_or(OtlpProtocol::Grpc),
            headers,
            service_name: tel.service_name.clone(),
            sample_ratio: tel.sample_ratio,
            traces: tel.traces_enabled,
            metrics: tel.metrics_enabled,
            filter: span_filter(otel_log),
            metric_interval,
            batch_delay,
            max_queue,
            timeout,
        })
    }
}

/// Step 4 of spec 04 §5: the exporter of an enabled `[telemetry]` table
/// (`None` when disabled); an error exits 2.
pub fn init(
    tel: &Telemetry,
    headers: Vec<(String, String)>,
    otel_log: &str,
) -> Result<Option<Exporter>, ConfigError> {
    if !tel.enabled || !(tel.traces_enabled || tel.metrics_enabled) {
        return Ok(None);
    }
    let settings = Settings::new(tel, headers, otel_log, crate::config::process_env)?;
    Exporter::start(settings).map(Some)
}

/// `BAE_OTEL_LOG` as a per-target filter of the exported spans (each span
/// name has a target, e.g. `baesrv::http`); unparsable → `info`.
pub fn span_filter(directive: &str) -> tracing_subscriber::filter::Targets {
    directive.parse().unwrap_or_else(|_| {
        tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO)
    })
}

/// What the engine thread sends the exporter thread.
enum Msg {
    /// Facts in drain order; `(index, at)` marks where the facts drained
    /// at wall-clock instant `at` (unix nanoseconds) begin.
    Facts(Vec<Fact>, Vec<(usize, u64)>),
    Metrics(u64, Vec<engine::metrics::Instrument>),
    /// Export everything now, within `deadline`, then answer.
    Flush(Instant, mpsc::Sender<()>),
}

/// The engine thread's handle on the exporter.
pub struct Exporter {
    tx: mpsc::Sender<Msg>,
    /// Facts sent and not yet taken by the exporter thread.
    queued: Arc<AtomicUsize>,
    max_queue: usize,
    /// Facts not handed over yet, with their drain instants (sent in
    /// batches: one wake-up of the exporter thread per batch, not per input).
    buf: Vec<Fact>,
    marks: Vec<(usize, u64)>,
    /// When the oldest fact in `buf` was drained.
    buf_since: Option<Instant>,
    metrics_every: Option<Duration>,
    next_metrics: Instant,
    dropped: u64,
    drop_log: RateLimit,
}

impl Exporter {
    /// Starts the exporter thread and its transport; an error is the
    /// startup failure of spec 04 §3.3 (exit 2).
    pub fn start(settings: Settings) -> Result<Exporter, ConfigError> {
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let worker = Worker::new(settings.clone(), queued.clone());
        std::thread::Builder::new()
            .name("bae-otel".into())
            .spawn(move || match transport::Transport::new(&worker.settings) {
                Ok(t) => {
                    let _ = ready_tx.send(Ok(()));
                    worker.run(t, rx);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| ConfigError::Telemetry(format!("[telemetry] exporter thread: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(ConfigError::Telemetry(format!(
                    "[telemetry] exporter initialisation failed: {e}"
                )))
            }
            Err(_) => {
                return Err(ConfigError::Telemetry(
                    "[telemetry] exporter initialisation failed".into(),
                ))
            }
        }
        let metrics_every = settings.metrics.then_some(settings.metric_interval);
        Ok(Exporter {
            tx,
            queued,
            max_queue: settings.max_queue,
            buf: Vec::new(),
            marks: Vec::new(),
            buf_since: None,
            next_metrics: Instant::now() + settings.metric_interval,
            metrics_every,
            dropped: 0,
            drop_log: RateLimit::default(),
        })
    }

    /// After every input: collect the engine's new facts; hand a batch
    /// over (or drop it when the queue is full) once it is big or old
    /// enough; send a metrics snapshot when due.
    pub fn pump(&mut self, engine: &mut Engine) {
        let before = self.buf.len();
        engine.drain_telemetry(&mut self.buf);
        let now = Instant::now();
        if self.buf.len() > before {
            self.marks.push((before, unix_nanos()));
            self.buf_since.get_or_insert(now);
        }
        let due = self
            .buf_since
            .is_some_and(|t| self.buf.len() >= SEND_FACTS || now >= t + SEND_AFTER);
        if due {
            self.hand_over();
        }
        if let Some(every) = self.metrics_every {
            if now >= self.next_metrics {
                self.next_metrics = now + every;
                let _ = self
                    .tx
                    .send(Msg::Metrics(unix_nanos(), engine.metrics_snapshot()));
            }
        }
    }

    fn hand_over(&mut self) {
        self.buf_since = None;
        let n = self.buf.len();
        if n == 0 {
            return;
        }
        if self.queued.load(Ordering::Relaxed) + n > self.max_queue {
            self.buf.clear();
            self.marks.clear();
            self.dropped += n as u64;
            if self.drop_log.ready() {
                tracing::warn!(
                    dropped_total = self.dropped,
                    "telemetry queue full; span facts dropped"
                );
            }
            return;
        }
        self.queued.fetch_add(n, Ordering::Relaxed);
        let facts = std::mem::replace(&mut self.buf, Vec::with_capacity(n));
        let marks = std::mem::take(&mut self.marks);
        let _ = self.tx.send(Msg::Facts(facts, marks));
    }

    /// When the driver must wake: the next metrics snapshot, or handing
    /// over facts that are waiting.
    pub fn next_due(&self) -> Option<Instant> {
        let metrics = self.metrics_every.map(|_| self.next_metrics);
        let facts = self.buf_since.map(|t| t + SEND_AFTER);
        metrics.into_iter().chain(facts).min()
    }

    /// Graceful shutdown: the last facts and metrics, then a flush bounded
    /// by `budget` (what remains of `BAE_SHUTDOWN_TIMEOUT`).
    pub fn shutdown(mut self, engine: &mut Engine, budget: Duration) {
        if self.metrics_every.is_some() {
            self.next_metrics = Instant::now();
        }
        self.pump(engine);
        self.hand_over();
        let deadline = Instant::now() + budget;
        let (done_tx, done_rx) = mpsc::channel();
        if self.tx.send(Msg::Flush(deadline, done_tx)).is_err() {
            return;
        }
        match done_rx.recv_timeout(budget) {
            Ok(()) => tracing::info!("telemetry flushed"),
            Err(_) => tracing::warn!("telemetry flush did not finish within the shutdown budget"),
        }
    }
}

/// The exporter thread.
struct Worker {
    settings: Settings,
    queued: Arc<AtomicUsize>,
    spans: spans::Table,
    metrics_start: u64,
    fail_log: RateLimit,
    failures: u64,
    /// After a failed export, spans finished before this are discarded
    /// unsent (a dead collector costs no encoding or connecting per batch).
    backoff_until: Option<Instant>,
    backoff: Duration,
    discarded: u64,
}

/// Facts that make the engine thread hand a batch over at once…
const SEND_FACTS: usize = 1024;
/// …and the longest a fact waits on the engine thread.
const SEND_AFTER: Duration = Duration::from_millis(20);

/// Spans per export request.
const MAX_BATCH: usize = 512;
/// The first and the longest pause after a failed export.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

impl Worker {
    fn new(settings: Settings, queued: Arc<AtomicUsize>) -> Worker {
        let spans = spans::Table::new(&settings);
        Worker {
            spans,
            settings,
            queued,
            metrics_start: unix_nanos(),
            fail_log: RateLimit::default(),
            failures: 0,
            backoff_until: None,
            backoff: BACKOFF_MIN,
            discarded: 0,
        }
    }

    fn run(mut self, mut transport: transport::Transport, rx: mpsc::Receiver<Msg>) {
        let mut next_flush = Instant::now() + self.settings.batch_delay;
        loop {
            let wait = next_flush.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(Msg::Facts(facts, marks)) => {
                    self.queued.fetch_sub(facts.len(), Ordering::Relaxed);
                    self.spans.apply(facts, &marks);
                    if self.spans.finished() >= MAX_BATCH {
                        self.export_spans(&mut transport, None);
                    }
                }
                Ok(Msg::Metrics(at, instruments)) => {
                    if self.backing_off() {
                        continue;
                    }
                    let req =
                        metrics::request(&self.settings, self.metrics_start, at, &instruments);
                    let result = transport.metrics(req, self.settings.timeout);
                    self.outcome("metrics", result);
                }
                Ok(Msg::Flush(deadline, done)) => {
                    self.spans.end_all(unix_nanos());
                    self.export_spans(&mut transport, Some(deadline));
                    let _ = done.send(());
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.export_spans(&mut transport, None);
                    next_flush = Instant::now() + self.settings.batch_delay;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn export_spans(&mut self, transport: &mut transport::Transport, deadline: Option<Instant>) {
        // The shutdown flush tries once more whatever the backoff says.
        if deadline.is_none() && self.backing_off() {
            self.discarded += self.spans.discard() as u64;
            return;
        }
        while self.spans.finished() > 0 {
            let timeout = match deadline {
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .min(self.settings.timeout),
                None => self.settings.timeout,
            };
            if timeout.is_zero() {
                return;
            }
            let req = self.spans.take_request(MAX_BATCH);
            let result = transport.traces(req, timeout);
            if !self.outcome("traces", result) {
                // What is left of this flush goes the same way: drop it.
                self.discarded += self.spans.discard() as u64;
                return;
            }
        }
    }

    fn backing_off(&self) -> bool {
        self.backoff_until.is_some_and(|t| Instant::now() < t)
    }

    /// Logs a failure (rate-limited) and arms the backoff; `true` on success.
    fn outcome(&mut self, signal: &'static str, result: Result<(), String>) -> bool {
        match result {
            Ok(()) => {
                self.backoff_until = None;
                self.backoff = BACKOFF_MIN;
                true
            }
            Err(error) => {
                self.failures += 1;
                self.backoff_until = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                if self.fail_log.ready() {
                    tracing::warn!(
                        signal,
                        %error,
                        failures_total = self.failures,
                        spans_discarded_total = self.discarded,
                        "OTLP export failed"
                    );
                }
                false
            }
        }
    }
}

/// Lets a repeated warning through at most once per period.
#[derive(Default)]
struct RateLimit {
    last: Option<Instant>,
}

impl RateLimit {
    const PERIOD: Duration = Duration::from_secs(10);

    fn ready(&mut self) -> bool {
        let now = Instant::now();
        match self.last {
            Some(t) if now.duration_since(t) < Self::PERIOD => false,
            _ => {
                self.last = Some(now);
                true
            }
        }
    }
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
