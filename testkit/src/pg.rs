//! Throwaway PostgreSQL clusters for the tests (Debian's `postgresql`
//! package, installed by testkit/scripts/install-test-deps.sh).
//!
//! [`PgCluster::start`] runs `initdb` into a fresh temporary directory and
//! `pg_ctl start` on a free loopback port (its unix socket in the same
//! directory); dropping it stops the server (`-m immediate`) and removes the
//! directory. `initdb` refuses to run as root, so as root both run as the
//! unprivileged `postgres` user (via `runuser`), which owns the directory.
//!
//! Two roles: the superuser `postgres` (the harness's own connections) and
//! `bae`, an ordinary role with a password that owns each database the
//! tests hand to a server ([`PgCluster::create_database`]).
//!
//! The end-to-end pass against PostgreSQL (`BAE_TEST_STORE=postgres`)
//! shares one cluster started by `pg_cluster start` (see
//! testkit/scripts/test-all.sh) and named by `BAE_TEST_PG_ADMIN_URL`; every
//! test server gets a database of its own on it ([`shared_database`]).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::tempdir::TestDir;

/// Password of the superuser `postgres` of a test cluster.
pub const ADMIN_PASSWORD: &str = "pg-admin-test-pw";
/// The application role and its password (tests check it never leaks).
pub const APP_ROLE: &str = "bae";
pub const APP_PASSWORD: &str = "bae-db-secret-4e1c9d";

static DB_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Directory of the newest installed PostgreSQL server binaries.
pub fn bin_dir() -> PathBuf {
    let base = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(base)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL server binaries not found under /usr/lib/postgresql/<version>/bin; \
             run testkit/scripts/install-test-deps.sh (Debian package `postgresql`)"
        ),
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `program args…`, as the `postgres` user when running as root.
fn pg_command(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.arg("-u").arg("postgres").arg("--").arg(program);
        c
    } else {
        Command::new(program)
    }
}

#[track_caller]
fn run(mut cmd: Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A running test cluster (see the module docs).
#[derive(Debug)]
pub struct PgCluster {
    dir: Option<TestDir>,
    data: PathBuf,
    port: u16,
    bin: PathBuf,
    /// Started by someone else (`BAE_TEST_PG_ADMIN_URL`): never stopped here.
    external: bool,
    /// `fsync` on (benchmarks); tests run with it off (throwaway data).
    durable: bool,
}

impl PgCluster {
    /// initdb + start on a free loopback port; panics with the tools'
    /// output when anything fails.
    #[track_caller]
    pub fn start() -> PgCluster {
        PgCluster::start_with(false)
    }

    /// [`PgCluster::start`] with `fsync` on, as a production server runs
    /// (for benchmarks).
    #[track_caller]
    pub fn start_durable() -> PgCluster {
        PgCluster::start_with(true)
    }

    #[track_caller]
    fn start_with(durable: bool) -> PgCluster {
        let dir = TestDir::new("baesrv-pg").expect("creating the cluster directory");
        let mut c = PgCluster::init(dir.path(), durable);
        c.dir = Some(dir);
        c
    }

    /// initdb + start with the cluster in `dir` (created if missing; kept).
    #[track_caller]
    pub fn init_in(dir: &Path) -> PgCluster {
        PgCluster::init(dir, false)
    }

    /// [`PgCluster::init_in`] with `fsync` on (benchmarks).
    #[track_caller]
    pub fn init_durable_in(dir: &Path) -> PgCluster {
        PgCluster::init(dir, true)
    }

    #[track_caller]
    fn init(dir: &Path, durable: bool) -> PgCluster {
        let bin = bin_dir();
        std::fs::create_dir_all(dir).expect("creating the cluster directory");
        let data = dir.join("data");
        let pwfile = dir.join("pwfile");
        std::fs::write(&pwfile, format!("{ADMIN_PASSWORD}\n")).expect("writing pwfile");
        if is_root() {
            let mut chown = Command::new("chown");
            chown.arg("-R").arg("postgres:postgres").arg(dir);
            run(chown, "chown of the cluster directory to postgres");
        }
        let mut init = pg_command(&bin.join("initdb"));
        init.arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=scram-sha-256", "--no-sync"])
            .args(["-E", "UTF8", "--locale=C.UTF-8"])
            .arg(format!("--pwfile={}", pwfile.display()));
        run(init, "initdb");
        let port = free_port();
        let mut c = PgCluster {
            dir: None,
            data,
            port,
            bin,
            external: false,
            durable,
        };
        c.start_server();
        c.admin_execute(
            "postgres",
            &format!("CREATE ROLE {APP_ROLE} LOGIN PASSWORD '{APP_PASSWORD}'"),
        );
        c
    }

    /// The cluster that `BAE_TEST_PG_ADMIN_URL` names (started by
    /// `pg_cluster start`), if set.
    pub fn from_env() -> Option<PgCluster> {
        let url = std::env::var("BAE_TEST_PG_ADMIN_URL").ok()?;
        let port = url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("BAE_TEST_PG_ADMIN_URL without a port: {url}"));
        Some(PgCluster {
            dir: None,
            data: PathBuf::new(),
            port,
            bin: PathBuf::new(),
            external: true,
            durable: false,
        })
    }

    fn start_server(&mut self) {
        let socket_dir = self.data.parent().expect("data has a parent").to_path_buf();
        let mut start = pg_command(&self.bin.join("pg_ctl"));
        start
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(socket_dir.join("server.log"))
            .arg("-w")
            .arg("-o")
            .arg(format!(
                "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} \
                 -c fsync={} -c max_connections=300",
                self.port,
                socket_dir.display(),
                if self.durable { "on" } else { "off" }
            ))
            .arg("start");
        run(start, "pg_ctl start");
    }

    /// The loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A superuser URL of database `db`.
    pub fn admin_url(&self, db: &str) -> String {
        format!(
            "postgres://postgres:{ADMIN_PASSWORD}@127.0.0.1:{}/{db}",
            self.port
        )
    }

    /// The application role's URL of database `db`.
    pub fn app_url(&self, db: &str) -> String {
        format!(
            "postgres://{APP_ROLE}:{APP_PASSWORD}@127.0.0.1:{}/{db}",
            self.port
        )
    }

    /// A superuser connection to database `db`.
    #[track_caller]
    pub fn admin_client(&self, db: &str) -> postgres::Client {
        postgres::Client::connect(&self.admin_url(db), postgres::NoTls)
            .unwrap_or_else(|e| panic!("connecting to the test cluster: {e}"))
    }

    /// Runs `sql` as the superuser on database `db`.
    #[track_caller]
    pub fn admin_execute(&self, db: &str, sql: &str) {
        self.admin_client(db)
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// A fresh database owned by the application role; returns its name.
    #[track_caller]
    pub fn create_database(&self) -> String {
        let n = DB_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("bae_t{}_{n}", std::process::id());
        self.admin_execute(
            "postgres",
            &format!("CREATE DATABASE {name} OWNER {APP_ROLE}"),
        );
        name
    }

    /// The database named `name`, created (owned by the application role)
    /// unless it exists: servers that share a data directory share it.
    #[track_caller]
    pub fn ensure_database(&self, name: &str) {
        let mut c = self.admin_client("postgres");
        let exists = c
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
            .unwrap_or_else(|e| panic!("looking up database {name}: {e}"))
            .is_some();
        if !exists {
            c.batch_execute(&format!("CREATE DATABASE {name} OWNER {APP_ROLE}"))
                .unwrap_or_else(|e| panic!("creating database {name}: {e}"));
        }
    }

    /// Stops the cluster whose directory is `dir` (see [`PgCluster::init_in`]).
    pub fn stop_dir(dir: &Path) {
        let mut stop = pg_command(&bin_dir().join("pg_ctl"));
        stop.arg("-D")
            .arg(dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"]);
        run(stop, "pg_ctl stop");
    }

    /// Drops `db`, closing its connections.
    pub fn drop_database(&self, db: &str) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin_url("postgres"), postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
        }
    }

    /// Stops the server at once (`-m immediate`: like a crash).
    pub fn kill(&mut self) {
        if self.external {
            return;
        }
        let mut stop = pg_command(&self.bin.join("pg_ctl"));
        stop.arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"]);
        let _ = stop.output();
    }

    /// Starts it again on the same port after [`PgCluster::kill`].
    #[track_caller]
    pub fn restart(&mut self) {
        self.start_server();
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("binding a probe port");
    l.local_addr().expect("probe address").port()
}

/// The cluster of the end-to-end pass against PostgreSQL: `None` unless
/// `BAE_TEST_STORE=postgres`; then `BAE_TEST_PG_ADMIN_URL` must name a
/// running cluster (else a loud panic).
pub fn e2e_cluster() -> Option<PgCluster> {
    match std::env::var("BAE_TEST_STORE").as_deref() {
        Ok("postgres") => Some(PgCluster::from_env().unwrap_or_else(|| {
            panic!(
                "BAE_TEST_STORE=postgres needs a running test cluster named by \
                 BAE_TEST_PG_ADMIN_URL (cargo run -p testkit --bin pg_cluster -- start DIR)"
            )
        })),
        Ok("sqlite") | Err(_) => None,
        Ok(other) => panic!("BAE_TEST_STORE: unknown store {other:?} (sqlite or postgres)"),
    }
}

/// A fresh database on the e2e cluster and its application URL.
pub fn shared_database() -> Option<(PgCluster, String, String)> {
    let cluster = e2e_cluster()?;
    let db = cluster.create_database();
    let url = cluster.app_url(&db);
    Some((cluster, db, url))
}

/// Waits until the cluster accepts connections (after a restart).
pub fn wait_ready(cluster: &PgCluster, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if postgres::Client::connect(&cluster.admin_url("postgres"), postgres::NoTls).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}
