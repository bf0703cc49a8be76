//! The OTLP/gRPC client (`io-smol/src/otel/grpc/`) over real sockets:
//! against the grpcio receiver (testkit/fixtures/otlp/otlp_receiver.py)
//! serving TLS with a throwaway CA made by the `openssl` CLI, and against
//! sockets that refuse, hang, or speak HTTP/1.1. The binary's own
//! `https://` path (Mozilla roots) is checked too: it refuses that CA, as
//! an export failure logged while the server runs on.
#![cfg(feature = "otel")]

mod live_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use io_smol::otel::grpc::{Client, METRICS, TRACES};
use live_support::*;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::Value;
use testkit::fixtures::provider_toml;
use testkit::{MockProvider, Server, TestDir};

/// A CA and a leaf for 127.0.0.1 and localhost, made with `openssl`;
/// `None` (the test is skipped, and says so) where the CLI is missing.
struct Pki {
    dir: TestDir,
    ca_der: Vec<u8>,
}

impl Pki {
    fn make() -> Option<Pki> {
        let dir = TestDir::new("otlp-pki").unwrap();
        let run = |args: &[&str]| {
            Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        std::fs::write(
            dir.path().join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        const EC: &str = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
        let made = [
            format!(
                "req -x509 {EC} -keyout ca.key -out ca.pem -days 2 -subj /CN=bae-test-ca \
                 -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign"
            ),
            format!("req {EC} -keyout leaf.key -out leaf.csr -subj /CN=localhost"),
            "x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem \
             -days 2 -extfile ext.cnf"
                .into(),
            "x509 -in ca.pem -outform DER -out ca.der".into(),
        ]
        .iter()
        .all(|cmd| run(&cmd.split_whitespace().collect::<Vec<_>>()));
        if !made {
            eprintln!("skipped: the openssl CLI is missing or failed");
            return None;
        }
        let ca_der = std::fs::read(dir.path().join("ca.der")).unwrap();
        Some(Pki { dir, ca_der })
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone().into()).unwrap();
        roots
    }
}

/// The receiver serving gRPC over TLS; killed on drop.
struct Receiver {
    child: Child,
    _stdin: ChildStdin,
    port: u16,
    out: TestDir,
}

impl Receiver {
    fn start_tls(pki: &Pki) -> Receiver {
        let out = TestDir::new("otlp-tls").unwrap();
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testkit/fixtures/otlp/otlp_receiver.py"
        );
        let mut child = Command::new("python3")
            .arg(script)
            .arg("--out")
            .arg(out.path())
            .arg("--tls-cert")
            .arg(pki.file("leaf.pem"))
            .arg("--tls-key")
            .arg(pki.file("leaf.key"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 must be on PATH (testkit/scripts/install-test-deps.sh)");
        let stdin = child.stdin.take().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ports: Value = serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("the OTLP receiver did not start: {line:?}"));
        Receiver {
            child,
            _stdin: stdin,
            port: ports["grpc"].as_u64().unwrap() as u16,
            out,
        }
    }

    fn lines(&self, file: &str) -> Vec<Value> {
        std::fs::read_to_string(self.out.path().join(file))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn one_span(name: &str) -> Vec<u8> {
    let span = Span {
        trace_id: vec![0x4b; 16],
        span_id: vec![0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7],
        name: name.into(),
        start_time_unix_nano: 1,
        end_time_unix_nano: 2,
        ..Span::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![span],
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
    .encode_to_vec()
}

const SECOND: Duration = Duration::from_secs(1);
const TOKEN: &str = "tls-header-secret-51f0a";

#[test]
fn tls_exports_reach_grpcio_on_one_connection_with_the_metadata() {
    let Some(pki) = Pki::make() else { return };
    let receiver = Receiver::start_tls(&pki);
    let meta = vec![("X-Otel-Token".to_string(), TOKEN.to_string())];
    for host in ["127.0.0.1", "localhost"] {
        let url = format!("https://{host}:{}", receiver.port);
        let mut client = Client::with_roots(&url, &meta, pki.roots()).unwrap();
        for name in ["tls-span-1", "tls-span-2"] {
            let span = format!("{name}-{host}");
            client.call(TRACES, &one_span(&span), 5 * SECOND).unwrap();
        }
        let empty = ExportMetricsServiceRequest::default().encode_to_vec();
        client.call(METRICS, &empty, 5 * SECOND).unwrap();
    }
    let names: Vec<String> = receiver
        .lines("traces.jsonl")
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "tls-span-1-127.0.0.1",
            "tls-span-2-127.0.0.1",
            "tls-span-1-localhost",
            "tls-span-2-localhost"
        ]
    );
    let headers = receiver.lines("headers.jsonl");
    assert!(
        headers.iter().all(|h| h["x-otel-token"] == TOKEN),
        "{headers:?}"
    );
}

#[test]
fn the_mozilla_roots_refuse_a_private_ca() {
    let Some(pki) = Pki::make() else { return };
    let receiver = Receiver::start_tls(&pki);
    let url = format!("https://127.0.0.1:{}", receiver.port);
    let mut client = Client::new(&url, &[]).unwrap();
    let e = client.call(TRACES, &one_span("x"), 5 * SECOND).unwrap_err();
    assert!(
        e.starts_with("gRPC Unavailable: TLS: invalid peer certificate"),
        "{e}"
    );
    assert!(receiver.lines("traces.jsonl").is_empty());

    // The binary: the same refusal is a logged export failure; it starts,
    // serves and stops as usual.
    let mock = MockProvider::start();
    let config = provider_toml(&[("main", "anthropic", &mock.base_url, "m", "t")])
        + &format!(
            "[telemetry]\nenabled = true\notlp_endpoint = \"{url}\"\n\
             otlp_headers = {{ \"x-otel-token\" = \"${{OTLP_TLS_TOKEN}}\" }}\n"
        );
    let mut server = Server::start(
        opts(&config)
            .env("OTLP_TLS_TOKEN", TOKEN)
            .env("OTEL_METRIC_EXPORT_INTERVAL", "100"),
    );
    server.client().get("/healthz").assert_status(200);
    assert!(
        wait_until(WAIT, || server.stderr_log().contains("OTLP export failed")),
        "{}",
        server.stderr_log()
    );
    assert!(server.stop().success());
    let log = server.stderr_log();
    assert!(log.contains("invalid peer certificate"), "{log}");
    assert!(!log.contains(TOKEN), "{log}");
}

/// A listener whose connections are each handed to `serve`.
fn listener(serve: fn(std::net::TcpStream)) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || serve(c));
        }
    });
    addr
}

fn call_within(url: &str, timeout: Duration) -> (String, Duration) {
    let mut client = Client::new(url, &[]).unwrap();
    let start = Instant::now();
    let e = client.call(TRACES, &one_span("x"), timeout).unwrap_err();
    (e, start.elapsed())
}

#[test]
fn refusing_hanging_and_http1_peers_fail_within_the_timeout() {
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (e, _) = call_within(&format!("http://{dead}"), 5 * SECOND);
    assert!(e.starts_with("gRPC Unavailable: connect: "), "{e}");

    // Accepts, reads, never answers: over h2c and over TLS alike.
    let hang = listener(|mut c| {
        let mut sink = [0; 4096];
        while c.read(&mut sink).is_ok_and(|n| n > 0) {}
    });
    for scheme in ["http", "https"] {
        let t = Duration::from_millis(300);
        let (e, took) = call_within(&format!("{scheme}://{hang}"), t);
        assert_eq!(e, "no answer within 300 ms");
        assert!(took >= t && took < 3 * SECOND, "{scheme}: {took:?}");
    }

    // An HTTP/1.1 server: its status line is no HTTP/2 frame.
    let http1 = listener(|mut c| {
        let mut buf = [0; 1024];
        let _ = c.read(&mut buf);
        let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
    });
    let (e, _) = call_within(&format!("http://{http1}"), 5 * SECOND);
    assert_eq!(
        e,
        "gRPC Internal: HTTP/2 FRAME_SIZE_ERROR: frame longer than our SETTINGS_MAX_FRAME_SIZE"
    );
}
