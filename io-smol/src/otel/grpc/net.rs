//! Where the connection's bytes go: the endpoint's parts, name
//! resolution, TCP, and TLS (rustls with ALPN `h2`) for `https://`.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use url::{Host, Url};

use super::status::Error;

/// The parts of an `http://` or `https://` endpoint a gRPC client uses;
/// the path, like tonic, is ignored (the method path replaces it).
#[derive(Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub tls: bool,
    /// Without brackets for an IPv6 literal.
    pub host: String,
    pub port: u16,
    /// `host[:port]` for `:authority` (userinfo dropped, RFC 9113 §8.3.1).
    pub authority: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let invalid = || "not a valid http:// or https:// URL".to_string();
        let url = Url::parse(url).map_err(|_| invalid())?;
        let tls = match url.scheme() {
            "http" => false,
            "https" => true,
            _ => return Err(invalid()),
        };
        let host = match url.host() {
            Some(Host::Domain(d)) if !d.is_empty() => d.to_string(),
            Some(Host::Ipv4(ip)) => ip.to_string(),
            Some(Host::Ipv6(ip)) => ip.to_string(),
            _ => return Err(invalid()),
        };
        let port = url.port_or_known_default().ok_or_else(invalid)?;
        // `host_str` keeps an IPv6 literal's brackets; `port` is the one
        // written, unless it is the scheme's default.
        let mut authority = url.host_str().ok_or_else(invalid)?.to_string();
        if let Some(p) = url.port() {
            authority = format!("{authority}:{p}");
        }
        Ok(Endpoint {
            tls,
            host,
            port,
            authority,
        })
    }

    /// The name the collector's certificate must carry.
    fn server_name(&self) -> Result<ServerName<'static>, Error> {
        match self.host.parse::<IpAddr>() {
            Ok(ip) => Ok(ServerName::IpAddress(ip.into())),
            Err(_) => ServerName::try_from(self.host.clone())
                .map_err(|_| Error::Transport("TLS: invalid server name".into())),
        }
    }
}

/// TLS settings for `https://` collectors: the webpki (Mozilla) roots,
/// the ring provider, ALPN `h2` only.
pub fn tls_config(roots: RootCertStore) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(cfg))
}

pub fn webpki_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

/// A connection's byte stream: TCP, or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}
pub type Stream = Box<dyn Io>;

type Lookup = mpsc::Receiver<io::Result<Vec<SocketAddr>>>;

/// Opens connections to one endpoint.
pub struct Dialer {
    endpoint: Endpoint,
    tls: Option<tokio_rustls::TlsConnector>,
    /// A name lookup that outlived its deadline: the next connect waits
    /// for it rather than starting another (at most one resolver thread).
    pending: Option<Lookup>,
}

impl Dialer {
    pub fn new(endpoint: Endpoint, tls: Option<Arc<ClientConfig>>) -> Dialer {
        Dialer {
            endpoint,
            tls: tls.map(tokio_rustls::TlsConnector::from),
            pending: None,
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The collector's addresses, blocking until `deadline` at most.
    pub fn resolve(&mut self, deadline: Instant) -> Result<Vec<SocketAddr>, Error> {
        let port = self.endpoint.port;
        if let Ok(ip) = self.endpoint.host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        // getaddrinfo has no timeout of its own: it runs on a helper thread
        // and is waited for only until the deadline.
        let rx = match self.pending.take() {
            Some(rx) => rx,
            None => {
                let (tx, rx) = mpsc::channel();
                let host = self.endpoint.host.clone();
                std::thread::Builder::new()
                    .name("bae-otel-dns".into())
                    .spawn(move || {
                        let r = (host.as_str(), port).to_socket_addrs();
                        let _ = tx.send(r.map(Iterator::collect));
                    })
                    .map_err(|e| Error::Transport(format!("resolve: {e}")))?;
                rx
            }
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Ok(addrs)) => Ok(addrs),
            Ok(Err(e)) => Err(Error::Transport(format!("resolve: {e}"))),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.pending = Some(rx);
                Err(Error::Timeout)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(Error::Transport("resolve: lookup failed".into()))
            }
        }
    }

    /// TCP to the first address that answers, then TLS for `https://`,
    /// checking that the collector agreed to HTTP/2 (gRPC over TLS
    /// requires ALPN `h2`). The caller bounds it in time.
    pub async fn connect(&self, addrs: Vec<SocketAddr>) -> Result<Stream, Error> {
        let mut last = None;
        let mut tcp = None;
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = match (tcp, last) {
            (Some(s), _) => s,
            (None, Some(e)) if e.kind() == io::ErrorKind::TimedOut => return Err(Error::Timeout),
            (None, Some(e)) => return Err(Error::Transport(format!("connect: {e}"))),
            (None, None) => return Err(Error::Transport("resolve: no address".into())),
        };
        // Frames are written whole; waiting to coalesce them only adds delay.
        tcp.set_nodelay(true).map_err(|e| Error::io(&e))?;
        let Some(tls) = &self.tls else {
            return Ok(Box::new(tcp));
        };
        let name = self.endpoint.server_name()?;
        let stream = tls.connect(name, tcp).await.map_err(|e| Error::io(&e))?;
        match stream.get_ref().1.alpn_protocol() {
            Some(b"h2") => Ok(Box::new(stream)),
            _ => Err(Error::Transport(
                "TLS: the collector did not agree to HTTP/2 (ALPN h2)".into(),
            )),
        }
    }
}
