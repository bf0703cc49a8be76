//! The `Server` harness against a fake `baesrv`: this very test executable
//! re-executed with `FAKE_BAESRV=1`, running only `fake_baesrv_main`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::Duration;

use testkit::server::{Server, ServerOptions};

fn fake_opts() -> ServerOptions {
    ServerOptions::new()
        .bin(std::env::current_exe().unwrap())
        .arg("fake_baesrv_main")
        .arg("--exact")
        .arg("--nocapture")
        .arg("--test-threads=1")
        .env("FAKE_BAESRV", "1")
}

fn serve(listener: TcpListener, admin: bool) {
    for conn in listener.incoming() {
        let Ok(mut s) = conn else { continue };
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut byte = [0u8; 1];
            while !buf.ends_with(b"\r\n\r\n") {
                match s.read(&mut byte) {
                    Ok(1) => buf.push(byte[0]),
                    _ => return,
                }
            }
            let head = String::from_utf8_lossy(&buf).to_string();
            let path = head.split(' ').nth(1).unwrap_or("").to_string();
            let auth = head
                .lines()
                .find_map(|l| l.strip_prefix("authorization: "))
                .unwrap_or("")
                .to_string();
            let (status, body) = if !admin && path == "/healthz" {
                ("200 OK", String::new())
            } else if admin {
                (
                    "200 OK",
                    serde_json::json!({"auth": auth, "path": path}).to_string(),
                )
            } else {
                ("404 Not Found", "{}".to_string())
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        });
    }
}

/// Entry point of the fake server; a no-op in a normal test run.
#[test]
fn fake_baesrv_main() {
    if std::env::var("FAKE_BAESRV").as_deref() != Ok("1") {
        return;
    }
    if let Ok(code) = std::env::var("FAKE_EXIT") {
        eprintln!("baesrv: configuration error: fake failure");
        std::process::exit(code.parse().unwrap());
    }
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let key_file = PathBuf::from(env("BAE_ADMIN_KEY_FILE"));
    if !key_file.exists() {
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        std::fs::write(&key_file, format!("bae_admin_{n:x}\n")).unwrap();
    }
    eprintln!(
        "fake baesrv up db={} log={} config={} inherited={}",
        env("BAE_DB_PATH"),
        env("BAE_LOG"),
        std::env::var("BAE_CONFIG").unwrap_or_default(),
        std::env::var("BAE_SHOULD_NOT_LEAK").is_ok(),
    );
    let client = TcpListener::bind(env("BAE_ADDR")).unwrap_or_else(|e| {
        eprintln!("bind client: {e}");
        std::process::exit(1)
    });
    let admin = TcpListener::bind(env("BAE_ADMIN_ADDR")).unwrap_or_else(|e| {
        eprintln!("bind admin: {e}");
        std::process::exit(1)
    });
    std::thread::spawn(move || serve(admin, true));
    serve(client, false);
}

#[test]
fn start_wires_env_files_and_clients() {
    let server = Server::start(fake_opts().config("[providers]\n").env("BAE_LOG", "debug"));
    assert!(
        server.admin_key.starts_with("bae_admin_"),
        "{:?}",
        server.admin_key
    );
    assert_ne!(server.client_addr, server.admin_addr);
    assert!(server.client_addr.ip().is_loopback());
    assert_eq!(server.client().get("/healthz").status, 200);
    let who = server.admin().get("/admin/v1/profiles").json();
    assert_eq!(who["auth"], format!("Bearer {}", server.admin_key));
    assert_eq!(
        std::fs::read_to_string(server.config_path()).unwrap(),
        "[providers]\n"
    );
    let log = server.stderr_log();
    assert!(log.contains("log=debug"), "{log}");
    assert!(
        log.contains(&format!("db={}", server.db_path().display())),
        "{log}"
    );
    assert!(log.contains("bae-config.toml"), "{log}");
    assert!(server.stdout_log().contains("running"));
}

#[test]
fn kill9_restart_and_stop() {
    let mut server = Server::start(fake_opts());
    let key = server.admin_key.clone();
    let dir = server.dir.path().to_path_buf();
    let pid = server.pid().unwrap();

    server.kill9();
    assert!(!server.is_running());
    assert!(server
        .client()
        .try_request("GET", "/healthz", &[], b"")
        .is_err());

    server.restart();
    assert_ne!(server.pid().unwrap(), pid);
    assert_eq!(server.admin_key, key, "key file survives restarts");
    assert_eq!(server.dir.path(), dir);
    assert_eq!(server.client().get("/healthz").status, 200);
    assert_eq!(server.stderr_log().matches("fake baesrv up").count(), 2);

    // The fake has no SIGTERM handler, so it dies of the signal.
    let status = server.stop();
    assert_eq!(status.signal(), Some(15));
    assert!(!server.is_running());

    server.restart_with(|o| o.env.push(("BAE_LOG".into(), "trace".into())));
    assert!(server.stderr_log().contains("log=trace"));
    drop(server);
    assert!(!dir.exists(), "temp dir removed on drop");
}

#[test]
fn db_dir_is_reused_and_kept() {
    let keep = testkit::TestDir::new("testkit-dbdir").unwrap();
    let key = {
        let s = Server::start(fake_opts().db_dir(keep.path()));
        s.admin_key.clone()
    };
    assert!(keep.path().join("admin-key.pem").exists());
    let s = Server::start(fake_opts().db_dir(keep.path()));
    assert_eq!(s.admin_key, key);
    drop(s);
    assert!(keep.path().exists());
}

#[test]
fn startup_failure_is_reported() {
    let err = Server::try_start(fake_opts().env("FAKE_EXIT", "2")).unwrap_err();
    assert_eq!(err.status.and_then(|s| s.code()), Some(2));
    assert!(err.stderr.contains("configuration error"), "{err}");

    let out = Server::run(fake_opts().env("FAKE_EXIT", "2"), Duration::from_secs(20));
    assert_eq!(out.code(), Some(2));
    assert!(out.stderr.contains("fake failure"));

    // A still-running process is killed at the timeout.
    let out = Server::run(fake_opts(), Duration::from_millis(500));
    assert!(out.status.is_none());
}

#[test]
fn inherited_bae_vars_do_not_leak() {
    // Only the child's environment is inspected; the parent's is not
    // modified (set_var is unsafe to use in a multi-threaded test binary).
    let server = Server::start(fake_opts());
    assert!(server.stderr_log().contains("inherited=false"));
    // Port is really ours: connecting works while the server runs.
    assert!(TcpStream::connect(server.admin_addr).is_ok());
}
