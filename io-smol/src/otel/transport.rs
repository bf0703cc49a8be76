//! OTLP transports. gRPC runs tonic on a current-thread tokio runtime that
//! lives on the exporter thread only (the engine thread and the smol
//! executor never see it); HTTP/protobuf is a blocking ureq POST. Each
//! export is bounded by a timeout, so a collector that accepts and never
//! answers costs the exporter thread that long, and nothing else.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::Settings;
use crate::config::OtlpProtocol;

pub enum Transport {
    Grpc(Box<Grpc>),
    Http(Http),
}

pub struct Grpc {
    rt: tokio::runtime::Runtime,
    traces: TraceServiceClient<Channel>,
    metrics: MetricsServiceClient<Channel>,
    headers: MetadataMap,
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
            Transport::Grpc(g) => {
                let mut client = g.traces.clone();
                let r = g.request(req);
                g.run(timeout, async move { client.export(r).await.map(|_| ()) })
            }
            Transport::Http(h) => h.post(&h.traces_url, req.encode_to_vec(), timeout),
        }
    }

    pub fn metrics(
        &mut self,
        req: ExportMetricsServiceRequest,
        timeout: Duration,
    ) -> Result<(), String> {
        match self {
            Transport::Grpc(g) => {
                let mut client = g.metrics.clone();
                let r = g.request(req);
                g.run(timeout, async move { client.export(r).await.map(|_| ()) })
            }
            Transport::Http(h) => h.post(&h.metrics_url, req.encode_to_vec(), timeout),
        }
    }
}

impl Grpc {
    fn new(s: &Settings) -> Result<Grpc, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        let mut endpoint = Endpoint::from_shared(s.endpoint.clone())
            .map_err(|e| format!("otlp_endpoint: {e}"))?
            .connect_timeout(s.timeout)
            .timeout(s.timeout);
        if s.endpoint.to_ascii_lowercase().starts_with("https://") {
            endpoint = endpoint
                .tls_config(ClientTlsConfig::new().with_webpki_roots())
                .map_err(|e| format!("TLS: {e}"))?;
        }
        let channel = {
            let _guard = rt.enter();
            endpoint.connect_lazy()
        };
        let mut headers = MetadataMap::new();
        for (name, value) in &s.headers {
            // gRPC metadata keys are lowercase; the value is never echoed.
            let key =
                MetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes()).map_err(|_| {
                    format!("otlp_headers \"{name}\" is not a valid gRPC metadata name")
                })?;
            let value = MetadataValue::try_from(value.as_str())
                .map_err(|_| format!("otlp_headers \"{name}\" has a value gRPC cannot carry"))?;
            headers.insert(key, value);
        }
        Ok(Grpc {
            rt,
            traces: TraceServiceClient::new(channel.clone()),
            metrics: MetricsServiceClient::new(channel),
            headers,
        })
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        *r.metadata_mut() = self.headers.clone();
        r
    }

    fn run<F>(&self, timeout: Duration, f: F) -> Result<(), String>
    where
        F: std::future::Future<Output = Result<(), tonic::Status>>,
    {
        self.rt.block_on(async move {
            match tokio::time::timeout(timeout, f).await {
                Ok(Ok(())) => Ok(()),
                // The status message is the collector's or the transport's
                // text about our request: no span data, no header values.
                Ok(Err(status)) => Err(format!("gRPC {:?}: {}", status.code(), status.message())),
                Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
            }
        })
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
