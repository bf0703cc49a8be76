//! `bench_probe`: `/healthz` latency while `--clients` clients page one long
//! session, measured by a prober that shares the load generator's event
//! loop (never run by tests; docs/performance.md, "The liveness probe").
//!
//! `bench_kit` probes from a thread of its own, beside 64 blocking pager
//! threads. Here every pager and the prober are tasks of one
//! single-threaded event loop (smol's `LocalExecutor`), as in a load
//! generator built on an async runtime: a probe's time then also counts
//! the loop's own turns. Pagers find each page's `next_cursor` by a byte
//! search and keep only its length, so a turn of the loop is short; the
//! generator's CPU is printed so a saturated one shows.
//!
//! ```text
//! cargo build --release -p io-smol -p testkit
//! target/release/bench_probe [--clients 64] [--history-turns 250] [--page-limit 100] \
//!     [--secs 10] [--rate PAGES_PER_SEC] [--bin PATH]
//!
//! Without `--rate` the pagers run a closed loop: a faster server then
//! fetches more pages, and the loop the prober shares spends more of each
//! turn reading them, so the probe measures the generator as much as the
//! server. `--rate` fixes the offered load (spread evenly over the pagers)
//! so two builds compare at equal work.
//! ```

use std::cell::RefCell;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use proto::http::peer::{ResponseDecoder, ResponseEvent};
use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::net::TcpStream;
use testkit::bench::boot::Baesrv;
use testkit::bench::turns::{self, Kind};
use testkit::bench::{self, llm, ms, open_session_on, percentile, Conn, Meter, Res, Session};

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One keep-alive connection of the event loop.
struct AsyncConn {
    sock: TcpStream,
    decoder: ResponseDecoder,
    buf: Vec<u8>,
}

impl AsyncConn {
    async fn open(addr: SocketAddr) -> Res<AsyncConn> {
        let sock = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        sock.set_nodelay(true)
            .map_err(|e| format!("nodelay: {e}"))?;
        Ok(AsyncConn {
            sock,
            decoder: ResponseDecoder::new(),
            buf: vec![0; 64 * 1024],
        })
    }

    /// One GET; the status and the body.
    async fn get(&mut self, path: &str, bearer: Option<&str>) -> Res<(u16, Vec<u8>)> {
        let mut req = format!("GET {path} HTTP/1.1\r\nhost: bench\r\n");
        if let Some(b) = bearer {
            req.push_str(&format!("authorization: Bearer {b}\r\n"));
        }
        req.push_str("\r\n");
        (self.sock.write_all(req.as_bytes()).await).map_err(|e| format!("write: {e}"))?;
        let (mut status, mut body) = (0, Vec::new());
        loop {
            match self.decoder.poll().map_err(|e| format!("decode: {e}"))? {
                Some(ResponseEvent::Head(h)) => status = h.status,
                Some(ResponseEvent::Data(d)) => body.extend_from_slice(&d),
                Some(ResponseEvent::End { .. }) => return Ok((status, body)),
                None => {
                    let n =
                        (self.sock.read(&mut self.buf).await).map_err(|e| format!("read: {e}"))?;
                    if n == 0 {
                        return Err("connection closed".into());
                    }
                    self.decoder.feed(&self.buf[..n]);
                }
            }
        }
    }
}

/// Walks the session's pages until `stop`; the pages and bytes read.
async fn pager(
    addr: SocketAddr,
    s: Rc<Session>,
    limit: usize,
    gap: Option<Duration>,
    stop: Rc<RefCell<bool>>,
) -> Res<(usize, usize)> {
    let mut c = AsyncConn::open(addr).await?;
    let (mut pages, mut bytes) = (0, 0);
    let mut next = Instant::now();
    while !*stop.borrow() {
        let mut cursor: Option<String> = None;
        loop {
            let mut path = format!("/api/v1/sessions/{}/events?limit={limit}", s.id);
            if let Some(c) = &cursor {
                path.push_str("&cursor=");
                path.push_str(c);
            }
            if let Some(gap) = gap {
                // Paced: a slow answer does not earn a burst afterwards.
                let floor = Instant::now().checked_sub(gap).unwrap_or(next);
                next = next.max(floor) + gap;
                smol::Timer::at(next).await;
                if *stop.borrow() {
                    break;
                }
            }
            let (status, body) = c.get(&path, Some(&s.key)).await?;
            if status != 200 {
                return Err(format!("GET {path}: {status}"));
            }
            pages += 1;
            bytes += body.len();
            match bench::scan_cursor(&body)? {
                Some(next) if cursor.as_deref() != Some(next.as_str()) => cursor = Some(next),
                _ => break,
            }
        }
    }
    Ok((pages, bytes))
}

/// A `/healthz` every 5 ms on one keep-alive connection, on the same loop.
async fn prober(addr: SocketAddr, stop: Rc<RefCell<bool>>) -> Res<Vec<Duration>> {
    let mut c = AsyncConn::open(addr).await?;
    let mut lat = Vec::new();
    while !*stop.borrow() {
        let t0 = Instant::now();
        let (status, _) = c.get("/healthz", None).await?;
        if status != 200 {
            return Err(format!("/healthz: {status}"));
        }
        lat.push(t0.elapsed());
        smol::Timer::after(Duration::from_millis(5)).await;
    }
    Ok(lat)
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let clients: usize = arg(&args, "--clients", 64);
    let history: usize = arg(&args, "--history-turns", 250);
    let limit: usize = arg(&args, "--page-limit", 100);
    let secs: f64 = arg(&args, "--secs", 10.0);
    let rate: f64 = arg(&args, "--rate", 0.0);
    // Each pager's share of the offered load, as the gap between its pages.
    let gap = (rate > 0.0).then(|| Duration::from_secs_f64(clients as f64 / rate));
    let bin: PathBuf = args
        .iter()
        .position(|a| a == "--bin")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let exe = std::env::current_exe().unwrap_or_default();
            exe.with_file_name("baesrv")
        });
    let mock = llm::start("127.0.0.1:0")?;
    let srv = Baesrv::start(&bin, mock, None, None)?;
    let key = bench::client_key(srv.admin_addr, &srv.admin_key, "mock")?;
    let mut driver = Conn::open(srv.addr)?;
    let long = open_session_on(&mut driver, &key, false)?;
    for i in 0..history {
        turns::unit(&mut driver, &long, Kind::Text, i as u64)?;
    }
    let s = Rc::new(long);
    let stop = Rc::new(RefCell::new(false));
    let ex = smol::LocalExecutor::new();
    let meter = Meter::start(Some(srv.child.id()));
    let pagers: Vec<_> = (0..clients)
        .map(|_| ex.spawn(pager(srv.addr, s.clone(), limit, gap, stop.clone())))
        .collect();
    let probe = ex.spawn(prober(srv.addr, stop.clone()));
    let t0 = Instant::now();
    let result = smol::block_on(ex.run(async {
        smol::Timer::after(Duration::from_secs_f64(secs)).await;
        *stop.borrow_mut() = true;
        let mut lat = probe.await?;
        let (mut pages, mut bytes) = (0, 0);
        for p in pagers {
            let (pg, b) = p.await?;
            (pages, bytes) = (pages + pg, bytes + b);
        }
        lat.sort();
        Ok::<_, String>((lat, pages, bytes))
    }));
    let usage = meter.finish();
    let (lat, pages, bytes) = result?;
    let wall = t0.elapsed().as_secs_f64();
    let offered = match gap {
        Some(_) => format!(" (offered {rate:.0} pages/s)"),
        None => String::new(),
    };
    println!(
        "paging @{clients} on one event loop{offered}, {history}-turn session, limit {limit}: {:.0} pages/s, \
         {:.0} MB/s; /healthz from the same loop: p50 {} p99 {} max {} ({} probes); {usage}",
        pages as f64 / wall,
        bytes as f64 / wall / 1e6,
        ms(percentile(&lat, 0.50)),
        ms(percentile(&lat, 0.99)),
        ms(lat.last().copied().unwrap_or_default()),
        lat.len()
    );
    if let Ok(m) = Conn::open(srv.admin_addr)
        .and_then(|mut c| c.request("GET", "/metrics", Some(&srv.admin_key), b""))
    {
        if let Some(steps) = bench::engine_steps_summary(&String::from_utf8_lossy(&m.body)) {
            println!("{steps}");
        }
    }
    Ok(())
}
