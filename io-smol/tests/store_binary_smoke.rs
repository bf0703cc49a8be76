//! Smoke tests of the built `baesrv` binary: subcommands, exit codes,
//! startup failures and graceful shutdown (C-226–C-230).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use testkit::TestDir;

const BIN: &str = env!("CARGO_BIN_EXE_baesrv");

/// Removed when the test is done (testkit::TestDir).
fn temp_dir(tag: &str) -> TestDir {
    TestDir::new(&format!("baesrv-{tag}")).unwrap()
}

/// A command with a clean `BAE_*` environment rooted in `dir`.
fn baesrv(dir: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("BAE_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("BAE_DB_PATH", dir.join("bae.db"))
        .env("BAE_ADMIN_KEY_FILE", dir.join("admin-key.pem"))
        .env("BAE_ADMIN_KEY_HASH_FILE", dir.join("admin-key-hash.pem"))
        .env("BAE_LOG", "info")
        .stdin(Stdio::null());
    cmd
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("binary runs")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn version_prints_and_exits_0() {
    let dir = temp_dir("bin-version");
    for arg in ["version", "--version", "-V"] {
        let out = run(baesrv(&dir).arg(arg));
        assert_eq!(out.status.code(), Some(0), "{arg}");
        let stdout = text(&out.stdout);
        let mut lines = stdout.lines();
        assert_eq!(
            lines.next(),
            Some(&*format!("baesrv {}", env!("CARGO_PKG_VERSION")))
        );
        assert_eq!(lines.next(), Some("api versions: v1"));
        assert_eq!(lines.next(), None);
    }
}

#[test]
fn help_goes_to_stderr_and_exits_0() {
    let dir = temp_dir("bin-help");
    let out = run(baesrv(&dir).arg("help"));
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("Usage"));
}

#[test]
fn unknown_subcommand_exits_2() {
    let dir = temp_dir("bin-unknown");
    let out = run(baesrv(&dir).arg("frobnicate"));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("baesrv: unknown command \"frobnicate\""));
    assert!(!dir.join("bae.db").exists());
}

#[test]
fn migrate_prints_path_and_is_repeatable() {
    let dir = temp_dir("bin-migrate");
    let db = dir.join("bae.db");
    for _ in 0..2 {
        let out = run(baesrv(&dir).arg("migrate"));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            format!("migrations up to date at {}\n", db.display())
        );
    }
    let conn = sqlite::open(&db).unwrap();
    let mut st = conn
        .prepare("SELECT MAX(version) FROM schema_version")
        .unwrap();
    st.next().unwrap();
    assert_eq!(st.read::<i64, _>(0).unwrap(), 9);
    // migrate never bootstraps an admin key.
    assert!(!dir.join("admin-key.pem").exists());
}

#[test]
fn migrate_with_bad_env_exits_2() {
    let dir = temp_dir("bin-migrate-env");
    let out = run(baesrv(&dir).arg("migrate").env("BAE_TURN_TIMEOUT", "soon"));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("baesrv: configuration error: "));
}

#[test]
fn newer_schema_exits_1() {
    let dir = temp_dir("bin-newer");
    let db = dir.join("bae.db");
    assert_eq!(run(baesrv(&dir).arg("migrate")).status.code(), Some(0));
    sqlite::open(&db)
        .unwrap()
        .execute("INSERT INTO schema_version VALUES (10, datetime('now'))")
        .unwrap();
    for args in [&["migrate"][..], &["serve"][..]] {
        let out = run(baesrv(&dir).args(args));
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            text(&out.stderr).contains("database schema version 10 is newer"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn missing_database_directory_exits_1() {
    let dir = temp_dir("bin-nodir");
    let out = run(baesrv(&dir)
        .arg("migrate")
        .env("BAE_DB_PATH", dir.join("missing").join("bae.db")));
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("must exist and be writable"));
}

#[test]
fn rotate_with_env_disabled_auth_exits_2_before_db() {
    let dir = temp_dir("bin-rotate");
    let out = run(baesrv(&dir)
        .arg("--rotate-admin-key")
        .env("BAE_DANGEROUSLY_DISABLE_ADMIN_AUTH", "true"));
    assert_eq!(out.status.code(), Some(2));
    assert!(!dir.join("bae.db").exists());
}

#[test]
fn bad_hash_file_exits_2() {
    let dir = temp_dir("bin-hash");
    std::fs::write(
        dir.join("admin-key-hash.pem"),
        r#"{"key_hash":"NOT-HEX","prefix":"bae_admin_1a2b"}"#,
    )
    .unwrap();
    let out = run(baesrv(&dir)
        .env("BAE_ADDR", format!("127.0.0.1:{}", free_port()))
        .env("BAE_ADMIN_ADDR", format!("127.0.0.1:{}", free_port())));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("admin-key-hash.pem"));
}

#[test]
fn occupied_admin_port_exits_1() {
    let dir = temp_dir("bin-port");
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let out = run(baesrv(&dir)
        .env("BAE_ADDR", format!("127.0.0.1:{}", free_port()))
        .env("BAE_ADMIN_ADDR", busy.local_addr().unwrap().to_string()));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("admin listener"));
}

fn wait_for_port(port: u16, deadline: Instant) -> bool {
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn serve_writes_admin_key_and_sigterm_exits_0() {
    let dir = temp_dir("bin-serve");
    let client = free_port();
    let admin = free_port();
    let mut child = baesrv(&dir)
        .env("BAE_ADDR", format!("127.0.0.1:{client}"))
        .env("BAE_ADMIN_ADDR", format!("127.0.0.1:{admin}"))
        .env("BAE_SHUTDOWN_TIMEOUT", "5")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let up = wait_for_port(admin, Instant::now() + Duration::from_secs(20));
    if !up {
        let _ = child.kill();
    }
    assert!(up, "server did not start listening");
    assert!(wait_for_port(
        client,
        Instant::now() + Duration::from_secs(5)
    ));

    // C-208: the key file exists with mode 0600.
    use std::os::unix::fs::PermissionsExt;
    let key = std::fs::read_to_string(dir.join("admin-key.pem")).unwrap();
    assert!(key.starts_with("bae_admin_") && key.ends_with('\n') && key.len() == 59);
    let mode = std::fs::metadata(dir.join("admin-key.pem"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // An idle open connection must not keep the server alive past the
    // shutdown budget.
    let mut idle = TcpStream::connect(("127.0.0.1", client)).unwrap();
    idle.set_nodelay(true).unwrap();
    let _ = idle.write_all(b"");

    let started = Instant::now();
    let rc = send_signal(child.id(), "TERM");
    assert!(rc, "kill -TERM failed");
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            panic!("server did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(8), "{stderr}");
    assert!(
        !stderr.contains(key.trim()),
        "the admin key must never be logged"
    );
}

/// Sends a signal with the `kill` utility (keeps the test free of `unsafe`).
fn send_signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}
