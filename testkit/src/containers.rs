//! The local container engine for remote-sandbox tests: podman serving the
//! Docker API on a fixed socket, driven by the real `docker` CLI, with test
//! images built locally (`testkit/container-engine.sh`; see
//! `testkit/fixtures/containers/README.md`).
//!
//! In CI a missing engine fails the test loudly; elsewhere the test is
//! skipped with a message (a developer may not have run the script).

use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// `DOCKER_HOST` of the engine `container-engine.sh` starts.
pub const DOCKER_HOST: &str = "unix:///run/bae-podman/podman.sock";
/// A busybox rootfs: `sh`, `sleep`, `cat`, `echo`, …
pub const BUSYBOX: &str = "bae-test/busybox:latest";
/// busybox plus the fake subagent CLIs `claude` and `codex`.
pub const SUBAGENT: &str = "bae-test/subagent:latest";
/// An image that exists nowhere (no registry is reachable).
pub const MISSING: &str = "bae-test/missing:latest";

fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        Command::new("docker")
            .args(["image", "inspect", BUSYBOX])
            .env("DOCKER_HOST", DOCKER_HOST)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Whether the engine is up. In CI (`CI` set) a missing engine panics;
/// elsewhere the caller should return (the test is skipped, with a note).
#[track_caller]
pub fn require_engine() -> bool {
    if available() {
        return true;
    }
    let msg =
        "no container engine: run testkit/container-engine.sh (podman serving the Docker API)";
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("skipped: {msg}");
    false
}

/// `docker <args>` against the test engine.
pub fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .env("DOCKER_HOST", DOCKER_HOST)
        .stdin(Stdio::null())
        .output()
        .expect("run docker")
}

/// Ids of the running containers carrying `label` (`key=value`).
pub fn running_with_label(label: &str) -> Vec<String> {
    let filter = format!("label={label}");
    let out = docker(&["ps", "-q", "--filter", &filter]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether a container with this id is running.
pub fn is_running(id: &str) -> bool {
    let out = docker(&["ps", "-q", "--no-trunc"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == id || (id.len() >= 12 && l.trim().starts_with(id)))
}

/// baesrv's `bae.db` label for the database at `path` (the first 16 hex
/// digits of the SHA-256 of its absolute path; `io-smol`'s
/// `sandbox_cleanup::db_label`).
pub fn db_label(path: &std::path::Path) -> String {
    use sha2::{Digest, Sha256};
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let digest = Sha256::digest(abs.to_string_lossy().as_bytes());
    proto::wire::hex::encode(&digest[..8])
}

/// Stops every container labelled `bae.db=<db>` on the engine at `host`.
pub fn stop_labelled(host: &str, db: &str) {
    let filter = format!("label=bae.db={db}");
    let Ok(out) = Command::new("docker")
        .args(["ps", "-q", "--filter", &filter])
        .env("DOCKER_HOST", host)
        .stderr(Stdio::null())
        .output()
    else {
        return;
    };
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if ids.is_empty() {
        return;
    }
    let _ = Command::new("docker")
        .args(["stop", "-t", "1"])
        .args(&ids)
        .env("DOCKER_HOST", host)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
