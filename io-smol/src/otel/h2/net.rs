//! Where the connection's bytes go: the endpoint's parts, name
//! resolution, TCP, and TLS (rustls with ALPN `h2`) for `https://`.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use super::conn::{transport, Io};
use super::Error;

/// The parts of an `http://` or `https://` endpoint a gRPC client uses;
/// the path, like tonic, is ignored (the method path replaces it).
#[derive(Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub tls: bool,
    /// Without brackets for an IPv6 literal.
    pub host: String,
    pub port: u16,
    /// `host[:port]` as written, for `:authority` (userinfo dropped, RFC
    /// 9113 §8.3.1).
    pub authority: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let invalid = || "not a valid http:// or https:// URL".to_string();
        let (scheme, rest) = url.split_once("://").ok_or_else(invalid)?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            _ => return Err(invalid()),
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let (host, after) = v6.split_once(']').ok_or_else(invalid)?;
                host.parse::<std::net::Ipv6Addr>().map_err(|_| invalid())?;
                (host, after.strip_prefix(':'))
            }
            None => match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            },
        };
        let port = match port {
            Some(p) => p.parse::<u16>().map_err(|_| invalid())?,
            None if tls => 443,
            None => 80,
        };
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid());
        }
        Ok(Endpoint {
            tls,
            host: host.to_string(),
            port,
            authority: authority.to_string(),
        })
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

pub enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

impl Io for Stream {
    fn set_timeout(&mut self, t: Duration) -> io::Result<()> {
        let sock = match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        };
        let t = Some(t.max(Duration::from_millis(1)));
        sock.set_read_timeout(t)?;
        sock.set_write_timeout(t)
    }
}

type Lookup = mpsc::Receiver<io::Result<Vec<SocketAddr>>>;

/// Opens connections to one endpoint, each within a deadline.
pub struct Dialer {
    endpoint: Endpoint,
    tls: Option<Arc<ClientConfig>>,
    /// A name lookup that outlived its deadline: the next connect waits
    /// for it rather than starting another (at most one resolver thread).
    pending: Option<Lookup>,
}

impl Dialer {
    pub fn new(endpoint: Endpoint, tls: Option<Arc<ClientConfig>>) -> Dialer {
        Dialer {
            endpoint,
            tls,
            pending: None,
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub fn connect(&mut self, deadline: Instant) -> Result<Stream, Error> {
        let addrs = self.resolve(deadline)?;
        let mut last = None;
        let mut tcp = None;
        for addr in addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout);
            }
            match TcpStream::connect_timeout(&addr, left) {
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
        tcp.set_nodelay(true).map_err(transport)?;
        let mut stream = Stream::Plain(tcp);
        let Some(cfg) = &self.tls else {
            return Ok(stream);
        };
        let name = ServerName::try_from(self.endpoint.host.clone())
            .map_err(|_| Error::Transport("TLS: invalid server name".into()))?;
        let conn = ClientConnection::new(cfg.clone(), name)
            .map_err(|e| Error::Transport(format!("TLS: {e}")))?;
        if let Stream::Plain(tcp) = stream {
            stream = Stream::Tls(Box::new(StreamOwned::new(conn, tcp)));
        }
        if let Stream::Tls(tls) = &mut stream {
            handshake(tls, deadline)?;
        }
        Ok(stream)
    }

    fn resolve(&mut self, deadline: Instant) -> Result<Vec<SocketAddr>, Error> {
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
}

/// Completes the TLS handshake within the deadline and checks that the
/// server agreed to HTTP/2 (gRPC over TLS requires ALPN `h2`).
fn handshake(
    tls: &mut StreamOwned<ClientConnection, TcpStream>,
    deadline: Instant,
) -> Result<(), Error> {
    while tls.conn.is_handshaking() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout);
        }
        let t = Some(left.max(Duration::from_millis(1)));
        tls.sock.set_read_timeout(t).map_err(transport)?;
        tls.sock.set_write_timeout(t).map_err(transport)?;
        match tls.conn.complete_io(&mut tls.sock) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Error::Timeout)
            }
            Err(e) => return Err(transport(e)),
        }
    }
    match tls.conn.alpn_protocol() {
        Some(b"h2") => Ok(()),
        _ => Err(Error::Transport(
            "TLS: the collector did not agree to HTTP/2 (ALPN h2)".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(tls: bool, host: &str, port: u16, authority: &str) -> Endpoint {
        Endpoint {
            tls,
            host: host.into(),
            port,
            authority: authority.into(),
        }
    }

    #[test]
    fn endpoints() {
        let ok = [
            (
                "http://127.0.0.1:4317",
                ep(false, "127.0.0.1", 4317, "127.0.0.1:4317"),
            ),
            (
                "HTTPS://otel.example",
                ep(true, "otel.example", 443, "otel.example"),
            ),
            ("http://collector/", ep(false, "collector", 80, "collector")),
            ("https://u:p@h:9/x?y", ep(true, "h", 9, "h:9")),
            ("http://[::1]:4317/v1", ep(false, "::1", 4317, "[::1]:4317")),
            (
                "https://[2001:db8::1]",
                ep(true, "2001:db8::1", 443, "[2001:db8::1]"),
            ),
        ];
        for (url, want) in ok {
            assert_eq!(Endpoint::parse(url).unwrap(), want, "{url}");
        }
        for bad in [
            "ftp://h",
            "http//h",
            "http://",
            "http://:80",
            "http://h:port",
            "http://h:70000",
            "http://[::1",
            "http://[zz]:1",
            "http://a b",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_tls_config_offers_h2_only() {
        let cfg = tls_config(webpki_roots()).unwrap();
        assert_eq!(cfg.alpn_protocols, vec![b"h2".to_vec()]);
        assert!(!webpki_roots().is_empty());
    }
}
