//! The engine's §7.2 instruments as one OTLP metrics request: gauges as
//! gauges, counters as cumulative monotonic sums, latencies as cumulative
//! explicit-bucket histograms (the engine keeps totals since start).

use engine::metrics::{Instrument, Labels, Points};
use engine::telemetry::AttrValue;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};

use super::spans::{kv, resource, scope};
use super::Settings;

pub fn request(
    settings: &Settings,
    start: u64,
    now: u64,
    instruments: &[Instrument],
) -> ExportMetricsServiceRequest {
    let metrics = instruments
        .iter()
        .map(|i| Metric {
            name: i.name.to_string(),
            description: i.description.to_string(),
            unit: i.unit.to_string(),
            data: Some(data(&i.points, start, now)),
            ..Default::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource(&settings.service_name)),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(scope()),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn labels(l: &Labels) -> Vec<KeyValue> {
    l.iter()
        .map(|(k, v)| match v {
            std::borrow::Cow::Borrowed(s) => kv(k, AttrValue::Static(s)),
            std::borrow::Cow::Owned(s) => kv(k, AttrValue::Text(s.clone())),
        })
        .collect()
}

fn number(attrs: Vec<KeyValue>, start: u64, now: u64, v: u64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        start_time_unix_nano: start,
        time_unix_nano: now,
        value: Some(number_data_point::Value::AsInt(
            i64::try_from(v).unwrap_or(i64::MAX),
        )),
        ..Default::default()
    }
}

fn data(points: &Points, start: u64, now: u64) -> metric::Data {
    let cumulative = AggregationTemporality::Cumulative as i32;
    match points {
        Points::Gauge(v) => metric::Data::Gauge(Gauge {
            data_points: vec![number(Vec::new(), 0, now, *v)],
        }),
        Points::Sum(series) => metric::Data::Sum(Sum {
            data_points: series
                .iter()
                .map(|(l, v)| number(labels(l), start, now, *v))
                .collect(),
            aggregation_temporality: cumulative,
            is_monotonic: true,
        }),
        Points::Histogram { bounds, series } => metric::Data::Histogram(Histogram {
            data_points: series
                .iter()
                .map(|(l, h)| {
                    let mut counts: Vec<u64> = (0..bounds.len())
                        .map(|i| h.buckets.get(i).copied().unwrap_or(0))
                        .collect();
                    let below: u64 = counts.iter().sum();
                    counts.push(h.count.saturating_sub(below));
                    HistogramDataPoint {
                        attributes: labels(l),
                        start_time_unix_nano: start,
                        time_unix_nano: now,
                        count: h.count,
                        sum: Some(h.sum as f64),
                        bucket_counts: counts,
                        explicit_bounds: bounds.iter().map(|b| *b as f64).collect(),
                        ..Default::default()
                    }
                })
                .collect(),
            aggregation_temporality: cumulative,
        }),
    }
}
