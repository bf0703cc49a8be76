//! Streamed provider calls on a blocking thread (`stream = true`): every
//! streamed call of `baesrv-threads`, and `baesrv`'s streamed calls to
//! HTTPS endpoints (plain-HTTP ones stream on the driver thread,
//! `provider_http`).
//!
//! Not ureq: a streamed call must be closable from another thread the
//! moment the engine gives up on it (a cancel, a stream fault), so the
//! provider stops generating, and ureq 2 gives no handle on a call's
//! socket. This client owns its socket (std TCP, rustls for `https://`, the
//! ring provider and Mozilla roots ureq itself uses), keeps a clone in the
//! call's [`Abort`], and reads the response with proto's HTTP decoder.
//! Behaviour otherwise matches the other clients: one attempt bounded by
//! the call's timeout, no redirects, any status returned as a response (an
//! error status's body read whole, at most
//! [`provider::MAX_RESPONSE_BYTES`]), transport failures as text without
//! URLs. A 2xx body goes out in chunks as it arrives; its size is the
//! engine's to bound.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use engine::{ProviderCall, ProviderReply};
use proto::http::response::{Mode, ResponseDecoder, ResponseEvent};
use proto::provider::retry::RetryAdvice;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use super::provider::{self, strip_urls};
use super::provider_http::{encode, HttpTarget};
use crate::config::{process_env, substitute};

/// Closes a streamed call's connection from any thread.
#[derive(Clone, Default)]
pub struct Abort(Arc<Mutex<AbortState>>);

#[derive(Default)]
struct AbortState {
    aborted: bool,
    socket: Option<TcpStream>,
}

impl Abort {
    /// Shuts the call's socket down now (or refuses the connect to come):
    /// the provider sees the connection close.
    pub fn abort(&self) {
        let mut st = self.0.lock().unwrap_or_else(|p| p.into_inner());
        st.aborted = true;
        if let Some(s) = st.socket.take() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Registers the call's socket; `false` when the call was aborted.
    fn hold(&self, socket: &TcpStream) -> bool {
        let mut st = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if st.aborted {
            return false;
        }
        st.socket = socket.try_clone().ok();
        true
    }
}

/// Where a URL points: plain HTTP or TLS.
fn target(url: &str) -> Option<(HttpTarget, bool)> {
    if let Some(t) = HttpTarget::parse(url) {
        return Some((t, false));
    }
    if url.strip_prefix("https://")?.starts_with('/') {
        return None;
    }
    let u = url::Url::parse(url).ok()?;
    Some((HttpTarget::of_url(&u)?, true))
}

fn tls_config() -> Option<Arc<ClientConfig>> {
    static CONFIG: OnceLock<Option<Arc<ClientConfig>>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let roots = RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            let mut cfg = ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .ok()?
                .with_root_certificates(roots)
                .with_no_client_auth();
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some(Arc::new(cfg))
        })
        .clone()
}

enum Conn {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Conn {
    fn socket(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => s.get_ref(),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// A provider call on the calling (blocking) thread, as both runtimes make
/// it off their engine thread: a streamed one (`abort` given) here, with
/// its 2xx body to `chunk`; an unstreamed one on ureq
/// ([`provider::perform`]).
pub fn perform_blocking(
    call: &ProviderCall,
    abort: Option<&Abort>,
    chunk: impl FnMut(Vec<u8>),
) -> ProviderReply {
    match abort {
        Some(abort) => perform(call, abort, chunk),
        None => provider::perform(call),
    }
}

/// Performs the streamed `call`: a 2xx body goes to `chunk` as it arrives,
/// then [`ProviderReply::Streamed`]; anything else as the other clients
/// report it.
pub fn perform(call: &ProviderCall, abort: &Abort, chunk: impl FnMut(Vec<u8>)) -> ProviderReply {
    perform_with_env(call, abort, process_env, chunk)
}

/// [`perform`] with an injectable environment (tests).
pub fn perform_with_env(
    call: &ProviderCall,
    abort: &Abort,
    get_env: impl Fn(&str) -> Option<String>,
    chunk: impl FnMut(Vec<u8>),
) -> ProviderReply {
    let token = match substitute(&call.auth_template, get_env) {
        Ok(t) => t,
        Err(e) => return ProviderReply::Credential(e.to_string()),
    };
    if token.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return ProviderReply::Credential(
            "the provider credential contains a line break or NUL".to_string(),
        );
    }
    let Some((target, tls)) = target(&call.url) else {
        return ProviderReply::Transport("Bad URL: the provider URL cannot be used".to_string());
    };
    let request = encode(call, &target, &token);
    drop(token);
    let deadline = Instant::now() + Duration::from_millis(call.timeout_ms.max(1));
    match exchange(&target, tls, &request, abort, deadline, chunk) {
        Ok(reply) => reply,
        Err(e) => ProviderReply::Transport(strip_urls(&e)),
    }
}

fn exchange(
    target: &HttpTarget,
    tls: bool,
    request: &[u8],
    abort: &Abort,
    deadline: Instant,
    mut chunk: impl FnMut(Vec<u8>),
) -> Result<ProviderReply, String> {
    let left = || deadline.saturating_duration_since(Instant::now());
    let addr = (target.connect.as_str())
        .to_socket_addrs()
        .map_err(|e| format!("Dns Failed: {e}"))?
        .next()
        .ok_or_else(|| "Dns Failed: no address".to_string())?;
    let socket = TcpStream::connect_timeout(&addr, left().max(Duration::from_millis(1)))
        .map_err(|e| format!("Connection Failed: Connect error: {e}"))?;
    let _ = socket.set_nodelay(true);
    if !abort.hold(&socket) {
        return Err("Network Error: the call was abandoned".to_string());
    }
    let mut conn = if tls {
        let config = tls_config().ok_or("Connection Failed: no TLS configuration")?;
        let host = target.connect.rsplit_once(':').map_or("", |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("Connection Failed: invalid host name: {e}"))?;
        let c = ClientConnection::new(config, name)
            .map_err(|e| format!("Connection Failed: TLS: {e}"))?;
        Conn::Tls(Box::new(StreamOwned::new(c, socket)))
    } else {
        Conn::Plain(socket)
    };
    let timed_out = || "Network Error: timed out after the call's timeout".to_string();
    let io = |what: &str, e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => timed_out(),
        _ => format!("Network Error: error {what}: {e}"),
    };
    let _ = conn
        .socket()
        .set_write_timeout(Some(left().max(Duration::from_millis(1))));
    conn.write_all(request)
        .map_err(|e| io("sending the request", e))?;
    conn.flush().map_err(|e| io("sending the request", e))?;
    let mut decoder = ResponseDecoder::with_mode(Mode::Lenient);
    let mut buf = vec![0u8; 16 * 1024];
    let mut status = None;
    let mut advice = RetryAdvice::None;
    let mut body = Vec::new();
    loop {
        loop {
            match decoder.poll() {
                Ok(Some(ResponseEvent::Head(head))) => {
                    status = Some(head.status);
                    // A retry policy reads what an error status advised.
                    if !(200..300).contains(&head.status) {
                        let headers = head.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
                        advice = RetryAdvice::from_headers(headers);
                    }
                }
                Ok(Some(ResponseEvent::Data(d))) => match status {
                    Some(s) if (200..300).contains(&s) => chunk(d.to_vec()),
                    _ => {
                        if (body.len() + d.len()) as u64 > provider::MAX_RESPONSE_BYTES {
                            return Err(format!(
                                "Network Error: response body larger than {} bytes",
                                provider::MAX_RESPONSE_BYTES
                            ));
                        }
                        body.extend_from_slice(&d);
                    }
                },
                Ok(Some(ResponseEvent::End { .. })) => {
                    let status = status.unwrap_or(0);
                    return Ok(match (200..300).contains(&status) {
                        true => ProviderReply::Streamed,
                        false => ProviderReply::Http {
                            status,
                            body,
                            advice,
                        },
                    });
                }
                Ok(None) => break,
                Err(e) => return Err(format!("Network Error: {e}")),
            }
        }
        let wait = left();
        if wait.is_zero() {
            return Err(timed_out());
        }
        let _ = conn.socket().set_read_timeout(Some(wait));
        match conn.read(&mut buf) {
            Ok(0) if status.is_none() && decoder.buffered().is_empty() => {
                return Err(
                    "Network Error: the provider closed the connection without responding".into(),
                )
            }
            Ok(0) => decoder.finish(),
            Ok(n) => decoder.feed(buf.get(..n).unwrap_or_default()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io("reading the response", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_urls_default_to_port_443() {
        let (t, tls) = target("https://api.anthropic.com/v1/messages").unwrap();
        assert!(tls);
        assert_eq!(
            (t.connect.as_str(), t.authority.as_str()),
            ("api.anthropic.com:443", "api.anthropic.com")
        );
        let (t, tls) = target("https://h:8443/v1/x").unwrap();
        assert_eq!((t.connect.as_str(), tls), ("h:8443", true));
        let (t, tls) = target("https://h:80/v1/x").unwrap();
        assert_eq!((t.connect.as_str(), tls), ("h:80", true));
        let (t, tls) = target("http://h/v1/x").unwrap();
        assert_eq!((t.connect.as_str(), tls), ("h:80", false));
        assert!(target("ftp://h/x").is_none());
        assert!(tls_config().is_some());
    }

    /// An abort before the connect refuses it; one after closes the socket.
    #[test]
    fn an_abort_closes_the_socket_at_once() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/messages", listener.local_addr().unwrap());
        let call = ProviderCall {
            id: engine::CallId(1),
            url,
            headers: vec![],
            auth_template: "t".into(),
            auth: engine::AuthPlacement::XApiKey,
            body: b"{}".to_vec(),
            timeout_ms: 30_000,
            stream: true,
        };
        let abort = Abort::default();
        let a = abort.clone();
        let started = Instant::now();
        let t = std::thread::spawn(move || perform_with_env(&call, &a, |_| None, |_| {}));
        let (mut peer, _) = listener.accept().unwrap();
        let mut req = [0u8; 512];
        let _ = peer.read(&mut req).unwrap();
        abort.abort();
        // The provider side sees the close.
        let mut rest = Vec::new();
        let _ = peer.read_to_end(&mut rest);
        let reply = t.join().unwrap();
        assert!(matches!(reply, ProviderReply::Transport(_)), "{reply:?}");
        assert!(started.elapsed() < Duration::from_secs(10));

        let aborted = Abort::default();
        aborted.abort();
        let call = ProviderCall {
            id: engine::CallId(2),
            url: format!("http://{}/v1/messages", listener.local_addr().unwrap()),
            headers: vec![],
            auth_template: "t".into(),
            auth: engine::AuthPlacement::XApiKey,
            body: b"{}".to_vec(),
            timeout_ms: 30_000,
            stream: true,
        };
        let reply = perform_with_env(&call, &aborted, |_| None, |_| {});
        assert!(matches!(reply, ProviderReply::Transport(_)), "{reply:?}");
    }
}
