//! `bench`: a loopback load generator for `baesrv` (never run by tests).
//!
//! ```text
//! cargo build --release -p io-smol -p testkit
//! target/release/bench [--bin target/release/baesrv] [--sessions 10000]
//!                      [--conns 64] [--get-conns 8] [--secs 5]
//! target/release/bench --addr 127.0.0.1:8080 --admin-addr 127.0.0.1:8081 \
//!                      --admin-key "$(cat admin-key.pem)" [--pid <baesrv pid>]
//! ```
//!
//! By default it boots the `baesrv` next to its own executable on
//! ephemeral loopback ports with a fresh temporary database, and measures:
//! session opens (p50 at 1 connection, throughput and p50/p99 at `--conns`),
//! authenticated GETs (p50 at 1, req/s at `--get-conns`), event paging
//! (events/s at `--conns`), `/healthz` latency under that load, RSS (idle,
//! after the open sessions, peak), cold start (first boot and restart) and
//! the binary size. Clients are plain threads with keep-alive
//! `std::net::TcpStream`s; every request loop is bounded in count or time.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto::http::peer::{ResponseDecoder, ResponseEvent};
use serde_json::{json, Value};
use testkit::http::next_event;

type Res<T> = Result<T, String>;
/// `(session_id, session_key)` pairs.
type SessionKeys = Vec<(String, String)>;

struct Opts {
    bin: Option<PathBuf>,
    addr: Option<SocketAddr>,
    admin_addr: Option<SocketAddr>,
    admin_key: Option<String>,
    pid: Option<u32>,
    sessions: usize,
    conns: usize,
    get_conns: usize,
    secs: u64,
}

fn parse_opts() -> Res<Opts> {
    let mut o = Opts {
        bin: None,
        addr: None,
        admin_addr: None,
        admin_key: None,
        pid: None,
        sessions: 10_000,
        conns: 64,
        get_conns: 8,
        secs: 5,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--bin" => o.bin = Some(PathBuf::from(val()?)),
            "--addr" => o.addr = Some(val()?.parse().map_err(|e| format!("--addr: {e}"))?),
            "--admin-addr" => {
                o.admin_addr = Some(val()?.parse().map_err(|e| format!("--admin-addr: {e}"))?)
            }
            "--admin-key" => o.admin_key = Some(val()?.trim().to_string()),
            "--pid" => o.pid = Some(val()?.parse().map_err(|e| format!("--pid: {e}"))?),
            "--sessions" => o.sessions = val()?.parse().map_err(|e| format!("--sessions: {e}"))?,
            "--conns" => o.conns = val()?.parse().map_err(|e| format!("--conns: {e}"))?,
            "--get-conns" => {
                o.get_conns = val()?.parse().map_err(|e| format!("--get-conns: {e}"))?
            }
            "--secs" => o.secs = val()?.parse().map_err(|e| format!("--secs: {e}"))?,
            "-h" | "--help" => {
                eprintln!("{}", USAGE);
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if o.conns == 0 || o.get_conns == 0 || o.sessions == 0 {
        return Err("--sessions, --conns and --get-conns must be positive".into());
    }
    Ok(o)
}

const USAGE: &str =
    "usage: bench [--bin PATH | --addr IP:PORT --admin-addr IP:PORT --admin-key KEY [--pid PID]] \
[--sessions N] [--conns C] [--get-conns G] [--secs S]";

// ------------------------------------------------------------ HTTP client

/// One keep-alive HTTP/1.1 connection; responses are read with proto's
/// strict decoder.
struct Conn {
    addr: SocketAddr,
    sock: TcpStream,
    decoder: ResponseDecoder,
    buf: Vec<u8>,
}

impl Conn {
    fn open(addr: SocketAddr) -> Res<Conn> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        Ok(Conn {
            addr,
            sock: s,
            decoder: ResponseDecoder::new(),
            buf: vec![0; 64 * 1024],
        })
    }

    /// Sends one request and reads the whole response; reconnects once if
    /// the server closed an idle connection.
    fn request(
        &mut self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        body: Option<&[u8]>,
    ) -> Res<(u16, Vec<u8>)> {
        match self.try_request(method, path, bearer, body) {
            Ok(r) => Ok(r),
            Err(_) => {
                *self = Conn::open(self.addr)?;
                self.try_request(method, path, bearer, body)
            }
        }
    }

    fn try_request(
        &mut self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        body: Option<&[u8]>,
    ) -> Res<(u16, Vec<u8>)> {
        let mut req = format!("{method} {path} HTTP/1.1\r\nhost: bench\r\n");
        if let Some(b) = bearer {
            req.push_str("authorization: Bearer ");
            req.push_str(b);
            req.push_str("\r\n");
        }
        if let Some(b) = body {
            req.push_str("content-type: application/json\r\n");
            req.push_str(&format!("content-length: {}\r\n", b.len()));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        if let Some(b) = body {
            bytes.extend_from_slice(b);
        }
        self.sock.write_all(&bytes).map_err(|e| e.to_string())?;
        let (mut status, mut close, mut body) = (0, false, Vec::new());
        loop {
            match next_event(&mut self.sock, &mut self.decoder, &mut self.buf) {
                Ok(Some(ResponseEvent::Head(h))) => {
                    status = h.status;
                    close = h
                        .header("connection")
                        .is_some_and(|v| v.eq_ignore_ascii_case("close"));
                }
                Ok(Some(ResponseEvent::Data(d))) => body.extend(d),
                Ok(Some(ResponseEvent::End { .. })) => break,
                Ok(None) => return Err("connection closed".into()),
                Err(e) => return Err(e.to_string()),
            }
        }
        if close {
            *self = Conn::open(self.addr)?;
        }
        Ok((status, body))
    }
}

fn json_of(status: u16, body: &[u8], want: u16) -> Res<Value> {
    if status != want {
        return Err(format!(
            "expected {want}, got {status}: {}",
            String::from_utf8_lossy(body)
        ));
    }
    serde_json::from_slice(body).map_err(|e| format!("bad JSON: {e}"))
}

// ------------------------------------------------------------ the server

struct Target {
    client: SocketAddr,
    admin: SocketAddr,
    admin_key: String,
    pid: Option<u32>,
    child: Option<Child>,
    dir: Option<PathBuf>,
    bin: Option<PathBuf>,
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn free_port() -> Res<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    l.local_addr().map_err(|e| e.to_string())
}

fn healthy(addr: SocketAddr) -> bool {
    Conn::open(addr)
        .and_then(|mut c| c.request("GET", "/healthz", None, None))
        .map(|(s, _)| s == 200)
        .unwrap_or(false)
}

impl Target {
    fn boot(bin: &Path) -> Res<Target> {
        let dir = std::env::temp_dir().join(format!("baesrv-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        // A provider must resolve for sessions to open; nothing calls it.
        std::fs::write(
            dir.join("bae-config.toml"),
            "[[providers.entries]]\nname = \"bench\"\nprovider = \"anthropic\"\n\
             base_url = \"http://127.0.0.1:9\"\nmodel = \"m\"\nauth_token = \"t\"\n",
        )
        .map_err(|e| e.to_string())?;
        let mut t = Target {
            client: free_port()?,
            admin: free_port()?,
            admin_key: String::new(),
            pid: None,
            child: None,
            dir: Some(dir),
            bin: Some(bin.to_path_buf()),
        };
        t.spawn()?;
        Ok(t)
    }

    /// Spawns the child and waits for `/healthz`; returns time to ready.
    fn spawn(&mut self) -> Res<Duration> {
        let dir = self.dir.clone().ok_or("no server dir")?;
        let bin = self.bin.clone().ok_or("no binary")?;
        let mut cmd = Command::new(&bin);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("BAE_") {
                cmd.env_remove(&k);
            }
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("baesrv.log"))
            .map_err(|e| e.to_string())?;
        let start = Instant::now();
        let child = cmd
            .env("BAE_ADDR", self.client.to_string())
            .env("BAE_ADMIN_ADDR", self.admin.to_string())
            .env("BAE_DB_PATH", dir.join("bae.db"))
            .env("BAE_ADMIN_KEY_FILE", dir.join("admin-key.pem"))
            .env("BAE_ADMIN_KEY_HASH_FILE", dir.join("admin-key-hash.pem"))
            .env("BAE_CONFIG", dir.join("bae-config.toml"))
            .env("BAE_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        self.pid = Some(child.id());
        self.child = Some(child);
        let deadline = start + Duration::from_secs(20);
        loop {
            if healthy(self.client) && TcpStream::connect(self.admin).is_ok() {
                break;
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    return Err(format!("baesrv exited during startup: {st}"));
                }
            }
            if Instant::now() > deadline {
                return Err("baesrv not ready within 20 s".into());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let ready = start.elapsed();
        self.admin_key = std::fs::read_to_string(dir.join("admin-key.pem"))
            .map_err(|e| format!("admin key file: {e}"))?
            .trim()
            .to_string();
        Ok(ready)
    }

    /// SIGTERM and wait.
    fn stop(&mut self) -> Res<()> {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    return Err("baesrv did not stop within 30 s".into());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }

    fn admin(&self) -> Res<Conn> {
        Conn::open(self.admin)
    }
}

/// `(VmRSS, VmHWM)` in KiB from /proc.
fn rss_kib(pid: Option<u32>) -> Option<(u64, u64)> {
    testkit::bench::rss_kib(pid?)
}

fn mb(kib: u64) -> String {
    format!("{:.1} MB", kib as f64 / 1024.0)
}

// ------------------------------------------------------------ measuring

#[derive(Default)]
struct Lat(Vec<Duration>);

impl Lat {
    fn pct(&mut self, p: f64) -> Duration {
        self.0.sort_unstable();
        testkit::bench::percentile(&self.0, p)
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// Opens `n` sessions over `conns` connections; returns (keys, wall time,
/// latencies).
fn open_sessions(
    addr: SocketAddr,
    client_key: &str,
    n: usize,
    conns: usize,
) -> Res<(SessionKeys, Duration, Lat)> {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..conns {
        let next = next.clone();
        let key = client_key.to_string();
        handles.push(std::thread::spawn(
            move || -> Res<(SessionKeys, Vec<Duration>)> {
                let mut c = Conn::open(addr)?;
                let mut out = Vec::new();
                let mut lat = Vec::new();
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    let t = Instant::now();
                    let (st, body) =
                        c.request("POST", "/api/v1/sessions", Some(&key), Some(b"{}"))?;
                    lat.push(t.elapsed());
                    let v = json_of(st, &body, 201)?;
                    out.push((
                        v["session_id"].as_str().unwrap_or_default().to_string(),
                        v["session_key"].as_str().unwrap_or_default().to_string(),
                    ));
                }
                Ok((out, lat))
            },
        ));
    }
    let mut all = Vec::new();
    let mut lat = Lat::default();
    for h in handles {
        let (s, l) = h.join().map_err(|_| "client thread panicked")??;
        all.extend(s);
        lat.0.extend(l);
    }
    Ok((all, start.elapsed(), lat))
}

/// Runs `conns` threads for `secs`, each doing `op` on its own connection
/// (with the thread index); returns (ops, units, wall time, latencies).
fn timed<F>(addr: SocketAddr, conns: usize, secs: u64, op: F) -> Res<(usize, usize, Duration, Lat)>
where
    F: Fn(&mut Conn, usize) -> Res<usize> + Send + Sync + 'static,
{
    let op = Arc::new(op);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut handles = Vec::new();
    for i in 0..conns {
        let op = op.clone();
        let stop = stop.clone();
        handles.push(std::thread::spawn(
            move || -> Res<(usize, usize, Vec<Duration>)> {
                let mut c = Conn::open(addr)?;
                let (mut ops, mut units, mut lat) = (0, 0, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    units += op(&mut c, i)?;
                    lat.push(t.elapsed());
                    ops += 1;
                }
                Ok((ops, units, lat))
            },
        ));
    }
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    let (mut ops, mut units, mut lat) = (0, 0, Lat::default());
    for h in handles {
        let (o, u, l) = h.join().map_err(|_| "client thread panicked")??;
        ops += o;
        units += u;
        lat.0.extend(l);
    }
    Ok((ops, units, start.elapsed(), lat))
}

fn get_events_page(c: &mut Conn, sid: &str, skey: &str, limit: usize) -> Res<usize> {
    let path = format!("/api/v1/sessions/{sid}/events?limit={limit}");
    let (st, _) = c.request("GET", &path, Some(skey), None)?;
    if st != 200 {
        return Err(format!("events page: {st}"));
    }
    Ok(1)
}

/// Pages through all events of a session; returns the number of items.
fn page_all(c: &mut Conn, sid: &str, skey: &str) -> Res<usize> {
    let mut cursor = String::new();
    let mut n = 0;
    loop {
        let path = format!("/api/v1/sessions/{sid}/events?limit=200&cursor={cursor}");
        let (st, body) = c.request("GET", &path, Some(skey), None)?;
        let v = json_of(st, &body, 200)?;
        n += v["items"].as_array().map_or(0, Vec::len);
        match v["next_cursor"].as_str() {
            Some(next) => cursor = next.to_string(),
            None => return Ok(n),
        }
    }
}

fn run(o: Opts) -> Res<()> {
    let mut target = match (&o.addr, &o.admin_addr, &o.admin_key) {
        (Some(a), Some(adm), Some(k)) => Target {
            client: *a,
            admin: *adm,
            admin_key: k.clone(),
            pid: o.pid,
            child: None,
            dir: None,
            bin: None,
        },
        (None, None, None) => {
            let bin = match &o.bin {
                Some(b) => b.clone(),
                None => std::env::current_exe()
                    .map_err(|e| e.to_string())?
                    .with_file_name("baesrv"),
            };
            println!("booting {}", bin.display());
            Target::boot(&bin)?
        }
        _ => return Err("--addr, --admin-addr and --admin-key go together".into()),
    };
    let booted = target.child.is_some();
    println!(
        "target client {} admin {} pid {:?}; {} sessions, {} conns, {} GET conns, {} s per timed phase",
        target.client, target.admin, target.pid, o.sessions, o.conns, o.get_conns, o.secs
    );
    if let Some(bin) = &target.bin {
        let size = std::fs::metadata(bin).map(|m| m.len()).unwrap_or(0);
        println!("binary size: {:.2} MB ({size} bytes)", size as f64 / 1e6);
    }
    let first_boot = if booted {
        // Measure a first boot on a fresh database separately.
        target.stop()?;
        if let Some(d) = &target.dir {
            for f in ["bae.db", "bae.db-wal", "bae.db-shm", "admin-key.pem"] {
                let _ = std::fs::remove_file(d.join(f));
            }
        }
        let first = target.spawn()?;
        // And a restart on that (nearly empty) database.
        target.stop()?;
        let again = target.spawn()?;
        Some((first, again))
    } else {
        None
    };
    std::thread::sleep(Duration::from_millis(300));
    let idle = rss_kib(target.pid);
    if let Some((rss, _)) = idle {
        println!("RSS idle: {}", mb(rss));
    }

    // Fixtures: a profile and a client key.
    let mut admin = target.admin()?;
    let ak = target.admin_key.clone();
    let name = format!("bench-{}", std::process::id());
    let body = json!({"name": name, "primary_provider": "bench"}).to_string();
    let (st, b) = admin.request(
        "POST",
        "/admin/v1/profiles",
        Some(&ak),
        Some(body.as_bytes()),
    )?;
    let pid = json_of(st, &b, 201)?["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let body = json!({"name": "bench", "profile_id": pid}).to_string();
    let (st, b) = admin.request("POST", "/admin/v1/keys", Some(&ak), Some(body.as_bytes()))?;
    let ck = json_of(st, &b, 201)?["key"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    // 1. Session opens: latency at 1 connection, then throughput at C.
    let warm = 500.min(o.sessions / 2);
    let (mut sessions, _, mut lat1) = open_sessions(target.client, &ck, warm, 1)?;
    println!(
        "session open @1 conn: p50 {} p99 {} ({warm} opens)",
        ms(lat1.pct(0.5)),
        ms(lat1.pct(0.99))
    );
    let (bulk, wall, mut lat) = open_sessions(target.client, &ck, o.sessions - warm, o.conns)?;
    println!(
        "session opens @{}: {:.0}/s ({} in {:.2} s), p50 {} p99 {}",
        o.conns,
        bulk.len() as f64 / wall.as_secs_f64(),
        bulk.len(),
        wall.as_secs_f64(),
        ms(lat.pct(0.5)),
        ms(lat.pct(0.99))
    );
    sessions.extend(bulk);
    std::thread::sleep(Duration::from_millis(500));
    if let Some((rss, _)) = rss_kib(target.pid) {
        println!("RSS after {} open sessions: {}", sessions.len(), mb(rss));
    }
    if target.pid.is_some() {
        std::thread::sleep(Duration::from_secs(2));
        if let Some((rss, _)) = rss_kib(target.pid) {
            println!(
                "RSS after {} open sessions, 2 s quiet: {}",
                sessions.len(),
                mb(rss)
            );
        }
    }

    // 2. Authenticated GETs (events?limit=1 and participants).
    let sess = Arc::new(sessions);
    {
        let s = sess.clone();
        let (_, _, _, mut l1) = timed(target.client, 1, o.secs.min(2), move |c, _| {
            let (sid, key) = &s[0];
            get_events_page(c, sid, key, 1)
        })?;
        println!(
            "authenticated GET events?limit=1 @1 conn: p50 {} p99 {}",
            ms(l1.pct(0.5)),
            ms(l1.pct(0.99))
        );
    }
    for (label, path_of) in [
        ("events?limit=1", "events?limit=1"),
        ("participants", "participants"),
    ] {
        let s = sess.clone();
        let (ops, _, wall, mut l) = timed(target.client, o.get_conns, o.secs, move |c, i| {
            let (sid, key) = &s[i % s.len()];
            let (st, _) = c.request(
                "GET",
                &format!("/api/v1/sessions/{sid}/{path_of}"),
                Some(key),
                None,
            )?;
            if st != 200 {
                return Err(format!("GET {path_of}: {st}"));
            }
            Ok(1)
        })?;
        println!(
            "authenticated GET {label} @{}: {:.0} req/s, p50 {} p99 {}",
            o.get_conns,
            ops as f64 / wall.as_secs_f64(),
            ms(l.pct(0.5)),
            ms(l.pct(0.99))
        );
    }

    // 3. Event paging: 64 sessions with 200 events each (joins), paged by
    // C connections, with a /healthz prober alongside.
    let paged: Vec<(String, String)> = sess.iter().take(o.conns).cloned().collect();
    {
        let next = Arc::new(AtomicUsize::new(0));
        let mut hs = Vec::new();
        let paged = Arc::new(paged.clone());
        for _ in 0..o.conns.min(16) {
            let (next, paged, ck) = (next.clone(), paged.clone(), ck.clone());
            let addr = target.client;
            hs.push(std::thread::spawn(move || -> Res<()> {
                let mut c = Conn::open(addr)?;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= paged.len() * 199 {
                        return Ok(());
                    }
                    let sid = &paged[i % paged.len()].0;
                    let (st, b) = c.request(
                        "POST",
                        &format!("/api/v1/sessions/{sid}/join"),
                        Some(&ck),
                        Some(b"{}"),
                    )?;
                    json_of(st, &b, 201)?;
                }
            }));
        }
        for h in hs {
            h.join().map_err(|_| "join thread panicked")??;
        }
    }
    let paged = Arc::new(paged);
    let probe_stop = Arc::new(AtomicBool::new(false));
    let probe_lat = Arc::new(Mutex::new(Lat::default()));
    let prober = {
        let (stop, lat, addr) = (probe_stop.clone(), probe_lat.clone(), target.client);
        std::thread::spawn(move || -> Res<()> {
            let mut c = Conn::open(addr)?;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                c.request("GET", "/healthz", None, None)?;
                if let Ok(mut l) = lat.lock() {
                    l.0.push(t.elapsed());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(())
        })
    };
    let p = paged.clone();
    let (_, items, wall, mut l) = timed(target.client, o.conns, o.secs, move |c, i| {
        let (sid, key) = &p[i % p.len()];
        page_all(c, sid, key)
    })?;
    probe_stop.store(true, Ordering::Relaxed);
    prober.join().map_err(|_| "prober panicked")??;
    println!(
        "event paging @{}: {:.0} events/s (200-event sessions, limit=200), per-session walk p50 {} p99 {}",
        o.conns,
        items as f64 / wall.as_secs_f64(),
        ms(l.pct(0.5)),
        ms(l.pct(0.99))
    );
    if let Ok(mut pl) = probe_lat.lock() {
        println!(
            "/healthz while {} clients page: p50 {} p99 {} max {} ({} probes)",
            o.conns,
            ms(pl.pct(0.5)),
            ms(pl.pct(0.99)),
            ms(pl.pct(1.0)),
            pl.0.len()
        );
    }
    if let Some((rss, hwm)) = rss_kib(target.pid) {
        println!("RSS after the benchmark: {} (peak {})", mb(rss), mb(hwm));
    }
    // The longest engine step bounds every request's latency (baesrv
    // exports a histogram of them on /metrics).
    if let Ok((200, body)) = target
        .admin()
        .and_then(|mut c| c.request("GET", "/metrics", Some(&target.admin_key), None))
    {
        if let Some(line) = testkit::bench::engine_steps_summary(&String::from_utf8_lossy(&body)) {
            println!("{line}");
        }
    }
    // A server may hand freed memory back once it is quiet (baesrv trims
    // its heap after one idle second): read again after two.
    if target.pid.is_some() {
        std::thread::sleep(Duration::from_secs(2));
        if let Some((rss, _)) = rss_kib(target.pid) {
            println!("RSS 2 s after the benchmark: {}", mb(rss));
        }
    }

    // 4. Cold start of a restart on the now-populated database.
    if let Some((first, again)) = first_boot {
        target.stop()?;
        let restart = target.spawn()?;
        println!(
            "cold start to ready: first boot {} / restart (empty DB) {} / restart with {} sessions {}",
            ms(first),
            ms(again),
            sess.len(),
            ms(restart)
        );
        target.stop()?;
    }
    Ok(())
}

fn main() {
    let code = match parse_opts().and_then(run) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("bench: {e}");
            1
        }
    };
    std::process::exit(code);
}
