//! Boot the real `baesrv` binary for end-to-end tests.
//!
//! Each [`Server`] owns a temp directory holding the database, the admin key
//! files, the optional `bae-config.toml` and the captured stdout/stderr of the
//! child. Inherited `BAE_*` variables are removed from the child's
//! environment so the host cannot leak settings into a test.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::http::HttpClient;
use crate::tempdir::TestDir;

/// How long [`Server::stop`] waits after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);

const STDERR_FILE: &str = "baesrv.stderr.log";
const STDOUT_FILE: &str = "baesrv.stdout.log";
const CONFIG_FILE: &str = "bae-config.toml";
const BIND_ATTEMPTS: usize = 5;

/// Options for [`Server::start`]. `ServerOptions::default()` gives a plain
/// server with no config file in a fresh temp dir.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Extra environment for the child; applied after (and so overriding) the
    /// harness defaults (`BAE_ADDR`, `BAE_ADMIN_ADDR`, `BAE_DB_PATH`,
    /// `BAE_ADMIN_KEY_FILE`, `BAE_ADMIN_KEY_HASH_FILE`, `BAE_LOG=warn`,
    /// `BAE_CONFIG`).
    pub env: Vec<(String, String)>,
    /// Command-line arguments after the binary name (e.g. `["serve"]`).
    pub args: Vec<String>,
    /// Written to `<dir>/bae-config.toml` and passed as `BAE_CONFIG`.
    pub config_toml: Option<String>,
    /// Use this directory instead of a fresh temp dir (never removed) — lets
    /// a second `Server` reuse the database of a first one.
    pub db_dir: Option<PathBuf>,
    /// Binary to run; default [`Server::binary_path`].
    pub bin: Option<PathBuf>,
    /// How long to wait for readiness (default 10 s).
    pub ready_timeout: Duration,
    /// Keep the temp dir after drop (for debugging).
    pub keep_dir: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            env: Vec::new(),
            args: Vec::new(),
            config_toml: None,
            db_dir: None,
            bin: None,
            ready_timeout: Duration::from_secs(10),
            keep_dir: false,
        }
    }
}

impl ServerOptions {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn config(mut self, toml: impl Into<String>) -> Self {
        self.config_toml = Some(toml.into());
        self
    }

    pub fn db_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.db_dir = Some(dir.into());
        self
    }

    pub fn bin(mut self, bin: impl Into<PathBuf>) -> Self {
        self.bin = Some(bin.into());
        self
    }
}

/// Why [`Server::try_start`] failed.
#[derive(Debug)]
pub struct StartError {
    /// Exit status if the child exited before becoming ready.
    pub status: Option<ExitStatus>,
    pub reason: String,
    /// Stderr/stdout of the failed run only.
    pub stderr: String,
    pub stdout: String,
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "baesrv failed to start: {} (status {:?})\n--- stderr ---\n{}\n--- stdout ---\n{}",
            self.reason, self.status, self.stderr, self.stdout
        )
    }
}

impl std::error::Error for StartError {}

/// Output of a one-off run (see [`Server::run`]).
#[derive(Debug)]
pub struct RunOutput {
    /// `None` if the process was still running at the timeout (it was killed).
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    /// The run's directory (kept alive so files can be inspected).
    pub dir: TestDir,
}

impl RunOutput {
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }
}

/// A running `baesrv` child process.
#[derive(Debug)]
pub struct Server {
    pub client_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// Trimmed content of the admin key file ("" if the server wrote none).
    pub admin_key: String,
    pub dir: TestDir,
    opts: ServerOptions,
    bin: PathBuf,
    child: Option<Child>,
    last_status: Option<ExitStatus>,
    /// Offset in the shared log files where this `Server`'s output starts.
    stderr_start: u64,
    stdout_start: u64,
    /// `BAE_TEST_STORE=postgres`: the e2e cluster, this server's database
    /// and its `BAE_DATABASE_URL`; the database is dropped with a fresh
    /// directory (kept with a shared one, like the SQLite file).
    pg: Option<(crate::pg::PgCluster, String, String)>,
}

fn pick_ports() -> (SocketAddr, SocketAddr) {
    // Hold both listeners at once so the two ports differ.
    let a = TcpListener::bind("127.0.0.1:0").expect("bind probe port");
    let b = TcpListener::bind("127.0.0.1:0").expect("bind probe port");
    (
        a.local_addr().expect("probe addr"),
        b.local_addr().expect("probe addr"),
    )
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn read_from(path: &Path, offset: u64) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    if f.seek(SeekFrom::Start(offset)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = f.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

fn append_file(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// Value of `--flag <v>` / `--flag=<v>` in `args`.
fn flag_value(args: &[String], flag: &str) -> Option<String> {
    let prefix = format!("{flag}=");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == flag {
            return it.next().cloned();
        }
        if let Some(v) = a.strip_prefix(&prefix) {
            return Some(v.to_string());
        }
    }
    None
}

fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn send_signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if let Err(e) = status {
        panic!("running `kill -{sig} {pid}` failed: {e}");
    }
}

impl Server {
    /// The `baesrv` binary: `BAESRV_BIN` if set, else `baesrv` next to the
    /// running test executable's profile dir (`target/<profile>/`), else
    /// `$CARGO_TARGET_DIR` or the workspace `target/` (`debug` preferred).
    /// From io-smol tests prefer `ServerOptions::bin(env!("CARGO_BIN_EXE_baesrv"))`.
    #[track_caller]
    pub fn binary_path() -> PathBuf {
        if let Some(p) = std::env::var_os("BAESRV_BIN") {
            return PathBuf::from(p);
        }
        let name = format!("baesrv{}", std::env::consts::EXE_SUFFIX);
        let mut candidates = Vec::new();
        if let Ok(exe) = std::env::current_exe() {
            // target/<profile>/deps/<test> → target/<profile>/baesrv
            for dir in exe.ancestors().skip(1).take(3) {
                candidates.push(dir.join(&name));
            }
        }
        let mut targets = Vec::new();
        if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
            targets.push(PathBuf::from(t));
        }
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        if let Some(ws) = manifest.parent() {
            targets.push(ws.join("target"));
        }
        for t in targets {
            candidates.push(t.join("debug").join(&name));
            candidates.push(t.join("release").join(&name));
        }
        candidates
            .into_iter()
            .find(|p| p.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "baesrv binary not found; build it (cargo build -p io-smol) or set BAESRV_BIN"
                )
            })
    }

    /// Start the server and wait until it is ready; panics on failure with
    /// the child's stderr.
    #[track_caller]
    pub fn start(opts: ServerOptions) -> Server {
        match Server::try_start(opts) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    /// Start the server; `Err` carries the exit status and output if the
    /// child exited (e.g. exit 2 on a configuration error) or never became
    /// ready.
    pub fn try_start(opts: ServerOptions) -> Result<Server, StartError> {
        let mut server = Server::prepare(opts);
        server.launch()?;
        Ok(server)
    }

    fn prepare(opts: ServerOptions) -> Server {
        let mut dir = match &opts.db_dir {
            Some(p) => TestDir::existing(p),
            None => TestDir::new("baesrv-test"),
        }
        .unwrap_or_else(|e| panic!("creating server dir: {e}"));
        if opts.keep_dir {
            dir.keep();
        }
        if let Some(toml) = &opts.config_toml {
            std::fs::write(dir.join(CONFIG_FILE), toml)
                .unwrap_or_else(|e| panic!("writing config: {e}"));
        }
        let bin = opts.bin.clone().unwrap_or_else(Server::binary_path);
        let (client_addr, admin_addr) = pick_ports();
        let pg = crate::pg::e2e_cluster().map(|cluster| {
            let db = if opts.db_dir.is_some() {
                // Servers on one directory share one database.
                use sha2::{Digest, Sha256};
                let d = Sha256::digest(dir.path().to_string_lossy().as_bytes());
                let name = proto::wire::hex::encode(&d[..8]);
                let name = format!("bae_d{name}");
                cluster.ensure_database(&name);
                name
            } else {
                cluster.create_database()
            };
            let url = cluster.app_url(&db);
            (cluster, db, url)
        });
        Server {
            pg,
            client_addr,
            admin_addr,
            admin_key: String::new(),
            stderr_start: file_len(&dir.join(STDERR_FILE)),
            stdout_start: file_len(&dir.join(STDOUT_FILE)),
            dir,
            opts,
            bin,
            child: None,
            last_status: None,
        }
    }

    /// The environment given to the child (defaults, then `opts.env`).
    fn child_env(&self) -> Vec<(String, String)> {
        let d = self.dir.path();
        let mut env = vec![
            ("BAE_ADDR".to_string(), self.client_addr.to_string()),
            ("BAE_ADMIN_ADDR".to_string(), self.admin_addr.to_string()),
            (
                "BAE_DB_PATH".to_string(),
                d.join("bae.db").display().to_string(),
            ),
            (
                "BAE_ADMIN_KEY_FILE".to_string(),
                d.join("admin-key.pem").display().to_string(),
            ),
            (
                "BAE_ADMIN_KEY_HASH_FILE".to_string(),
                d.join("admin-key-hash.pem").display().to_string(),
            ),
            ("BAE_LOG".to_string(), "warn".to_string()),
        ];
        if let Some((_, _, url)) = &self.pg {
            env.push(("BAE_DATABASE_URL".to_string(), url.clone()));
        }
        // The pass of test-all.sh that keeps no idle session in memory.
        if let Ok(n) = std::env::var("BAE_TEST_RESIDENT_SESSIONS") {
            env.push(("BAE_RESIDENT_SESSIONS".to_string(), n));
        }
        if self.opts.config_toml.is_some() {
            env.push((
                "BAE_CONFIG".to_string(),
                d.join(CONFIG_FILE).display().to_string(),
            ));
        }
        env.extend(self.opts.env.iter().cloned());
        env
    }

    fn env_value(&self, key: &str) -> Option<String> {
        self.child_env()
            .into_iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args(&self.opts.args).current_dir(self.dir.path());
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("BAE_") {
                cmd.env_remove(&k);
            }
        }
        for (k, v) in self.child_env() {
            cmd.env(k, v);
        }
        cmd
    }

    /// Spawn and wait for readiness, retrying with new ports on a bind race.
    fn launch(&mut self) -> Result<(), StartError> {
        let fixed_ports = self
            .opts
            .env
            .iter()
            .any(|(k, _)| k == "BAE_ADDR" || k == "BAE_ADMIN_ADDR");
        let mut last_err = None;
        for attempt in 0..BIND_ATTEMPTS {
            // First attempt: the ports picked at prepare time (or the previous
            // run's ports on restart); later attempts: fresh ones.
            if attempt > 0 {
                let (c, a) = pick_ports();
                self.client_addr = c;
                self.admin_addr = a;
            }
            if let Some(v) = self.opts.env.iter().rev().find(|(k, _)| k == "BAE_ADDR") {
                if let Ok(a) = v.1.parse() {
                    self.client_addr = a;
                }
            }
            if let Some(v) = self
                .opts
                .env
                .iter()
                .rev()
                .find(|(k, _)| k == "BAE_ADMIN_ADDR")
            {
                if let Ok(a) = v.1.parse() {
                    self.admin_addr = a;
                }
            }
            match self.spawn_once() {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let lower = e.stderr.to_ascii_lowercase();
                    let bind_race = e.status.and_then(|s| s.code()) == Some(1)
                        && (lower.contains("in use") || lower.contains("bind"));
                    if !bind_race || fixed_ports {
                        return Err(e);
                    }
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.expect("at least one attempt"))
    }

    fn spawn_once(&mut self) -> Result<(), StartError> {
        let err_path = self.dir.join(STDERR_FILE);
        let out_path = self.dir.join(STDOUT_FILE);
        let err_off = file_len(&err_path);
        let out_off = file_len(&out_path);
        let mut cmd = self.command();
        cmd.stdin(Stdio::null())
            .stdout(append_file(&out_path))
            .stderr(append_file(&err_path));
        let mut child = cmd.spawn().map_err(|e| StartError {
            status: None,
            reason: format!("spawning {}: {e}", self.bin.display()),
            stderr: String::new(),
            stdout: String::new(),
        })?;
        let fail = |reason: String, status: Option<ExitStatus>| StartError {
            status,
            reason,
            stderr: read_from(&err_path, err_off),
            stdout: read_from(&out_path, out_off),
        };
        let deadline = Instant::now() + self.opts.ready_timeout;
        let probe = HttpClient::new(self.client_addr).timeout(Duration::from_secs(2));
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.last_status = Some(status);
                return Err(fail("exited before becoming ready".into(), Some(status)));
            }
            let healthy =
                matches!(probe.try_request("GET", "/healthz", &[], b""), Ok(r) if r.status == 200);
            if healthy
                && TcpStream::connect_timeout(&self.admin_addr, Duration::from_secs(1)).is_ok()
            {
                if let Ok(Some(status)) = child.try_wait() {
                    self.last_status = Some(status);
                    return Err(fail("exited right after readiness".into(), Some(status)));
                }
                break;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let status = child.wait().ok();
                return Err(fail(
                    format!("not ready within {:?}", self.opts.ready_timeout),
                    status,
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        self.child = Some(child);
        self.last_status = None;
        self.admin_key = self.read_admin_key();
        Ok(())
    }

    fn read_admin_key(&self) -> String {
        let path = flag_value(&self.opts.args, "--admin-key-file")
            .or_else(|| self.env_value("BAE_ADMIN_KEY_FILE"))
            .map(PathBuf::from)
            .map(|p| if p.is_relative() { self.dir.join(p) } else { p });
        path.and_then(|p| std::fs::read_to_string(p).ok())
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }

    /// Run the binary once with the same default environment as
    /// [`Server::start`] (fresh ports, temp dir, config) and collect its
    /// output, killing it after `timeout`. For `version`, `migrate`, and
    /// startup-failure (exit 2) tests.
    pub fn run(opts: ServerOptions, timeout: Duration) -> RunOutput {
        let mut server = Server::prepare(opts);
        let err_path = server.dir.join(STDERR_FILE);
        let out_path = server.dir.join(STDOUT_FILE);
        let err_off = file_len(&err_path);
        let out_off = file_len(&out_path);
        let mut cmd = server.command();
        cmd.stdin(Stdio::null())
            .stdout(append_file(&out_path))
            .stderr(append_file(&err_path));
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", server.bin.display()));
        let status = wait_exit(&mut child, timeout);
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let dir = std::mem::replace(
            &mut server.dir,
            TestDir::existing(std::env::temp_dir()).expect("temp dir"),
        );
        RunOutput {
            status,
            stdout: read_from(&out_path, out_off),
            stderr: read_from(&err_path, err_off),
            dir,
        }
    }

    /// Process id of the running child.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the child has not exited.
    pub fn is_running(&mut self) -> bool {
        self.try_wait().is_none() && self.child.is_some()
    }

    /// Non-blocking check for exit; returns the exit status once exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if let Some(child) = self.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                self.last_status = Some(status);
            }
        }
        if self.child.is_some() {
            None
        } else {
            self.last_status
        }
    }

    /// Wait up to `timeout` for the child to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if let Some(child) = self.child.as_mut() {
            let status = wait_exit(child, timeout)?;
            self.child = None;
            self.last_status = Some(status);
        }
        self.last_status
    }

    /// Send a signal by name (`"TERM"`, `"INT"`, `"KILL"`, …) via `kill`.
    pub fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            send_signal(pid, sig);
        }
    }

    /// SIGKILL the child and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            self.last_status = child.wait().ok();
        }
    }

    /// SIGTERM and wait up to [`STOP_TIMEOUT`]; panics (after SIGKILL) if the
    /// child does not exit in time.
    #[track_caller]
    pub fn stop(&mut self) -> ExitStatus {
        self.stop_timeout(STOP_TIMEOUT)
    }

    #[track_caller]
    pub fn stop_timeout(&mut self, timeout: Duration) -> ExitStatus {
        let Some(mut child) = self.child.take() else {
            return self
                .last_status
                .expect("server was never started or already reaped");
        };
        send_signal(child.id(), "TERM");
        match wait_exit(&mut child, timeout) {
            Some(status) => {
                self.last_status = Some(status);
                status
            }
            None => {
                let _ = child.kill();
                self.last_status = child.wait().ok();
                panic!(
                    "baesrv did not exit within {timeout:?} after SIGTERM\n--- stderr ---\n{}",
                    self.stderr_log()
                );
            }
        }
    }

    /// Start again on the same directory (database, key files, config),
    /// reusing the same ports if they are free. Stops a running child first.
    #[track_caller]
    pub fn restart(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        if let Err(e) = self.launch() {
            panic!("restart: {e}");
        }
    }

    /// Change options (env, args, config…) and restart. A changed
    /// `config_toml` is rewritten to the config file.
    #[track_caller]
    pub fn restart_with(&mut self, f: impl FnOnce(&mut ServerOptions)) {
        if self.child.is_some() {
            self.stop();
        }
        f(&mut self.opts);
        if let Some(toml) = &self.opts.config_toml {
            std::fs::write(self.dir.join(CONFIG_FILE), toml)
                .unwrap_or_else(|e| panic!("writing config: {e}"));
        }
        if let Err(e) = self.launch() {
            panic!("restart: {e}");
        }
    }

    pub fn options(&self) -> &ServerOptions {
        &self.opts
    }

    /// Client-port HTTP client (no auth preset).
    pub fn client(&self) -> HttpClient {
        HttpClient::new(self.client_addr)
    }

    /// Admin-port HTTP client with the admin bearer preset (none if the
    /// server wrote no key file, e.g. admin auth disabled).
    pub fn admin(&self) -> HttpClient {
        let c = HttpClient::new(self.admin_addr);
        if self.admin_key.is_empty() {
            c
        } else {
            c.bearer(self.admin_key.clone())
        }
    }

    /// Everything the child(ren) of this `Server` wrote to stderr so far
    /// (all restarts included).
    pub fn stderr_log(&self) -> String {
        read_from(&self.dir.join(STDERR_FILE), self.stderr_start)
    }

    /// Everything written to stdout so far (all restarts included).
    pub fn stdout_log(&self) -> String {
        read_from(&self.dir.join(STDOUT_FILE), self.stdout_start)
    }

    pub fn db_path(&self) -> PathBuf {
        self.env_value("BAE_DB_PATH")
            .map(PathBuf::from)
            .unwrap_or_else(|| self.dir.join("bae.db"))
    }

    /// `BAE_DATABASE_URL` of this server when it runs on PostgreSQL.
    pub fn database_url(&self) -> Option<String> {
        self.env_value("BAE_DATABASE_URL").filter(|v| !v.is_empty())
    }

    pub fn admin_key_file(&self) -> PathBuf {
        self.dir.join("admin-key.pem")
    }

    pub fn admin_key_hash_file(&self) -> PathBuf {
        self.dir.join("admin-key-hash.pem")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join(CONFIG_FILE)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // A killed server leaves its remote sandbox containers running (as
        // the reference does); the suite must not leak them.
        if let Some(host) = self.env_value("DOCKER_HOST") {
            crate::containers::stop_labelled(&host, &crate::containers::db_label(&self.db_path()));
        }
        if let Some((cluster, db, _)) = &self.pg {
            if self.dir.will_remove() {
                cluster.drop_database(db);
            }
        }
        if std::thread::panicking() {
            let log = self.stderr_log();
            let tail_start = log.len().saturating_sub(8192);
            let tail_start = (tail_start..log.len())
                .find(|&i| log.is_char_boundary(i))
                .unwrap_or(log.len());
            eprintln!(
                "--- baesrv stderr ({}; last {} bytes) ---\n{}\n--- end baesrv stderr ---",
                self.dir.path().display(),
                log.len() - tail_start,
                &log[tail_start..]
            );
        }
    }
}
