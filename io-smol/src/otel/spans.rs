//! The exporter thread's span table: engine facts in, finished OTLP spans
//! out. Trace and span ids are drawn here (the engine has opaque keys
//! only); `sample_ratio` decides for traces this server starts, an inbound
//! `traceparent`'s sampled flag for the others, and children follow their
//! parent.

use std::collections::HashMap;

use engine::telemetry::{AttrValue, Fact, Link, Parent, SpanKey, SpanKind, SpanName, Status};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, status, ResourceSpans, ScopeSpans, Span};

use super::Settings;

#[derive(Debug, Clone, Copy)]
struct Ctx {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    sampled: bool,
}

struct Open {
    ctx: Ctx,
    name: SpanName,
    parent: Option<[u8; 8]>,
    start: u64,
    attrs: Vec<KeyValue>,
    links: Vec<span::Link>,
}

pub struct Table {
    open: HashMap<SpanKey, Open>,
    /// Ended spans a later span links to (until released).
    kept: HashMap<SpanKey, Ctx>,
    finished: Vec<Span>,
    /// Bound on `open` + `kept` (facts lost to a full queue may leave
    /// entries nobody ends): beyond it new spans are not tracked.
    cap: usize,
    ratio: f64,
    filter: tracing_subscriber::filter::Targets,
    rng: SplitMix,
    resource: Resource,
    /// Spans not tracked because of `cap`.
    untracked: u64,
}

impl Table {
    pub fn new(settings: &Settings) -> Table {
        Table {
            open: HashMap::new(),
            kept: HashMap::new(),
            finished: Vec::new(),
            cap: settings.max_queue.saturating_mul(2).max(1024),
            ratio: settings.sample_ratio,
            filter: settings.filter.clone(),
            rng: SplitMix::seeded(),
            resource: resource(&settings.service_name),
            untracked: 0,
        }
    }

    pub fn finished(&self) -> usize {
        self.finished.len()
    }

    /// Applies facts in order; `marks` (index, instant) says when each run
    /// of them was drained from the engine.
    pub fn apply(&mut self, facts: Vec<Fact>, marks: &[(usize, u64)]) {
        let mut marks = marks.iter().peekable();
        let mut at = 0;
        for (i, fact) in facts.into_iter().enumerate() {
            while let Some(&&(from, t)) = marks.peek() {
                if from > i {
                    break;
                }
                at = t;
                marks.next();
            }
            match fact {
                Fact::Opened {
                    key,
                    name,
                    parent,
                    links,
                    attrs,
                } => self.opened(at, key, name, parent, &links, attrs),
                Fact::Annotated { key, attrs } => {
                    if let Some(o) = self.open.get_mut(&key) {
                        o.attrs
                            .extend(attrs.into_iter().map(|(k, v)| kv(k.as_str(), v)));
                    }
                }
                Fact::Ended { key, status, keep } => self.ended(at, key, status, keep),
                Fact::Released { key } => {
                    self.kept.remove(&key);
                }
            }
        }
    }

    fn ctx_of(&self, key: SpanKey) -> Option<Ctx> {
        self.open
            .get(&key)
            .map(|o| o.ctx)
            .or_else(|| self.kept.get(&key).copied())
    }

    fn opened(
        &mut self,
        at: u64,
        key: SpanKey,
        name: SpanName,
        parent: Parent,
        links: &[Link],
        attrs: Vec<(engine::telemetry::AttrKey, AttrValue)>,
    ) {
        if self.open.len() + self.kept.len() >= self.cap {
            self.untracked += 1;
            if self.untracked.is_power_of_two() {
                tracing::warn!(
                    untracked = self.untracked,
                    "telemetry span table full; spans not exported"
                );
            }
            return;
        }
        let span_id = self.rng.span_id();
        let local = match parent {
            Parent::Span(p) => self.ctx_of(p),
            _ => None,
        };
        let (trace_id, parent_id, sampled) = match (parent, local) {
            (Parent::Remote(tp), _) => (tp.trace_id, Some(tp.parent_id), tp.sampled()),
            (Parent::Span(_), Some(p)) => (p.trace_id, Some(p.span_id), p.sampled),
            // A root, or a parent nobody tracks any more: a new trace.
            _ => {
                let trace_id = self.rng.trace_id();
                (trace_id, None, sample(self.ratio, &trace_id))
            }
        };
        let links = links
            .iter()
            .filter_map(|l| {
                let c = self.ctx_of(l.to)?;
                Some(span::Link {
                    trace_id: c.trace_id.to_vec(),
                    span_id: c.span_id.to_vec(),
                    attributes: vec![kv("bae.link.kind", AttrValue::Static(l.kind.as_str()))],
                    flags: u32::from(c.sampled),
                    ..Default::default()
                })
            })
            .collect();
        let open = Open {
            ctx: Ctx {
                trace_id,
                span_id,
                sampled,
            },
            name,
            parent: parent_id,
            start: at,
            attrs: attrs.into_iter().map(|(k, v)| kv(k.as_str(), v)).collect(),
            links,
        };
        self.open.insert(key, open);
    }

    fn ended(&mut self, at: u64, key: SpanKey, status: Status, keep: bool) {
        let Some(o) = self.open.remove(&key) else {
            return;
        };
        if keep {
            self.kept.insert(key, o.ctx);
        }
        let exported = o.ctx.sampled
            && self
                .filter
                .would_enable(o.name.target(), &tracing::Level::INFO);
        if !exported {
            return;
        }
        let (code, message) = match status {
            Status::Unset => (status::StatusCode::Unset, ""),
            Status::Ok => (status::StatusCode::Ok, ""),
            Status::Error(m) => (status::StatusCode::Error, m),
        };
        self.finished.push(Span {
            trace_id: o.ctx.trace_id.to_vec(),
            span_id: o.ctx.span_id.to_vec(),
            parent_span_id: o.parent.map(|p| p.to_vec()).unwrap_or_default(),
            flags: 1,
            name: o.name.as_str().to_string(),
            kind: match o.name.kind() {
                SpanKind::Server => span::SpanKind::Server,
                SpanKind::Client => span::SpanKind::Client,
                SpanKind::Internal => span::SpanKind::Internal,
            } as i32,
            start_time_unix_nano: o.start,
            end_time_unix_nano: at.max(o.start),
            attributes: o.attrs,
            links: o.links,
            status: Some(opentelemetry_proto::tonic::trace::v1::Status {
                message: message.to_string(),
                code: code as i32,
            }),
            ..Default::default()
        });
    }

    /// Ends every span still open (shutdown: the session anchors and
    /// whatever was in flight).
    pub fn end_all(&mut self, at: u64) {
        let mut keys: Vec<SpanKey> = self.open.keys().copied().collect();
        keys.sort();
        for key in keys.into_iter().rev() {
            self.ended(at, key, Status::Unset, false);
        }
    }

    /// Drops every finished span unsent; returns how many.
    pub fn discard(&mut self) -> usize {
        let n = self.finished.len();
        self.finished.clear();
        n
    }

    /// Up to `max` finished spans as one export request.
    pub fn take_request(&mut self, max: usize) -> ExportTraceServiceRequest {
        let n = self.finished.len().min(max);
        let spans: Vec<Span> = self.finished.drain(..n).collect();
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(scope()),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }
}

pub fn resource(service_name: &str) -> Resource {
    Resource {
        attributes: vec![
            kv("service.name", AttrValue::Text(service_name.to_string())),
            kv(
                "service.version",
                AttrValue::Static(env!("CARGO_PKG_VERSION")),
            ),
        ],
        ..Default::default()
    }
}

pub fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: "baesrv".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    }
}

pub fn kv(key: &str, value: AttrValue) -> KeyValue {
    let value = match value {
        AttrValue::Static(s) => any_value::Value::StringValue(s.to_string()),
        AttrValue::Text(s) => any_value::Value::StringValue(s),
        AttrValue::Int(n) => any_value::Value::IntValue(n),
        AttrValue::Bool(b) => any_value::Value::BoolValue(b),
    };
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// The trace-id ratio rule: the lower 8 bytes of the id against the ratio,
/// so every service that samples by ratio agrees on a trace.
fn sample(ratio: f64, trace_id: &[u8; 16]) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    let x = u64::from_be_bytes(low) >> 1;
    (x as f64) < ratio * (1u64 << 63) as f64
}

/// Ids need uniqueness, not secrecy: a SplitMix64 stream seeded from the OS.
struct SplitMix(u64);

impl SplitMix {
    fn seeded() -> SplitMix {
        let mut seed = [0u8; 8];
        let _ = getrandom::getrandom(&mut seed);
        SplitMix(u64::from_le_bytes(seed))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn nonzero(&mut self) -> u64 {
        loop {
            let v = self.next();
            if v != 0 {
                return v;
            }
        }
    }

    fn span_id(&mut self) -> [u8; 8] {
        self.nonzero().to_be_bytes()
    }

    fn trace_id(&mut self) -> [u8; 16] {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.next().to_be_bytes());
        id[8..].copy_from_slice(&self.nonzero().to_be_bytes());
        id
    }
}

#[cfg(test)]
mod tests {
    use super::sample;

    #[test]
    fn ratio_sampling_keeps_about_the_ratio() {
        let mut rng = super::SplitMix(7);
        let kept = (0..10_000)
            .filter(|_| sample(0.25, &rng.trace_id()))
            .count();
        assert!((2_000..3_000).contains(&kept), "{kept}");
        assert!(!sample(0.0, &rng.trace_id()));
        assert!(sample(1.0, &rng.trace_id()));
    }
}
