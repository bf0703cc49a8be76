//! OTLP transports, both blocking on the exporter thread: gRPC is the
//! unary call of [`super::grpc`] (h2), HTTP/protobuf a ureq POST. Each
//! export is bounded by a timeout, so a collector that accepts and never
//! answers costs the exporter thread that long, and nothing else.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

use super::{grpc, Settings};
use crate::config::OtlpProtocol;

pub enum Transport {
    Grpc(Box<Grpc>),
    Http(Http),
}

pub struct Grpc {
    client: grpc::Client,
}

pub struct Http {
    agent: ureq::Agent,
    traces_url: String,
    metrics_url: String,
    headers: Vec<(String, String)>,
}

impl Transport {
    /// Builds the client; errors are initialisation failures (exit 2). No
    /// connection is made yet: a collector that is down at startup is an
    /// export failure later, not a startup error.
    pub fn new(s: &Settings) -> Result<Transport, String> {
        match s.protocol {
            OtlpProtocol::Grpc => Grpc::new(s).map(|g| Transport::Grpc(Box::new(g))),
            OtlpProtocol::HttpProtobuf => Ok(Transport::Http(Http::new(s))),
        }
    }

    pub fn traces(
        &mut self,
        req: ExportTraceServiceRequest,
        timeout: Duration,
    ) -> Result<(), String> {
        match self {
            Transport::Grpc(g) => g.export(grpc::TRACES, req.encode_to_vec(), timeout),
            Transport::Http(h) => h.post(&h.traces_url, req.encode_to_vec(), timeout),
        }
    }

    pub fn metrics(
        &mut self,
        req: ExportMetricsServiceRequest,
        timeout: Duration,
    ) -> Result<(), String> {
        match self {
            Transport::Grpc(g) => g.export(grpc::METRICS, req.encode_to_vec(), timeout),
            Transport::Http(h) => h.post(&h.metrics_url, req.encode_to_vec(), timeout),
        }
    }
}

impl Grpc {
    fn new(s: &Settings) -> Result<Grpc, String> {
        Ok(Grpc {
            client: grpc::Client::new(&s.endpoint, &s.headers)?,
        })
    }

    fn export(&mut self, path: &str, body: Vec<u8>, timeout: Duration) -> Result<(), String> {
        // The response message (an optional partial-success report) is
        // not needed: success is the gRPC status.
        self.client.call(path, &body, timeout).map(|_| ())
    }
}

impl Http {
    fn new(s: &Settings) -> Http {
        // OTLP/HTTP convention: the configured endpoint is the base URL.
        let base = s.endpoint.trim_end_matches('/');
        Http {
            agent: ureq::AgentBuilder::new().timeout(s.timeout).build(),
            traces_url: format!("{base}/v1/traces"),
            metrics_url: format!("{base}/v1/metrics"),
            headers: s.headers.clone(),
        }
    }

    fn post(&self, url: &str, body: Vec<u8>, timeout: Duration) -> Result<(), String> {
        let mut req = self
            .agent
            .post(url)
            .timeout(timeout)
            .set("content-type", "application/x-protobuf");
        for (k, v) in &self.headers {
            req = req.set(k, v);
        }
        match req.send_bytes(&body) {
            Ok(_) => Ok(()),
            Err(ureq::Error::Status(code, _)) => Err(format!("HTTP status {code}")),
            Err(ureq::Error::Transport(t)) => Err(format!("transport: {}", t.kind())),
        }
    }
}
