//! Containers a previous run left behind (beyond the reference, which leaks
//! them when it is killed). Every container the server starts carries
//! `bae.db=<label of this database>` and `bae.run=<this process>`; at start
//! the containers of the same database but another run are stopped, off the
//! request path. The event catalogue has no reason for this (a stop's
//! `reason` is `explicit` or `session_close`), so it is logged, not recorded.

use std::path::Path;
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::config::SandboxDriver;

/// A stable label for the database at `path` (first 16 hex digits of the
/// SHA-256 of its absolute path).
pub fn db_label(path: &Path) -> String {
    let abs = std::fs::canonicalize(path)
        .or_else(|_| std::env::current_dir().map(|d| d.join(path)))
        .unwrap_or_else(|_| path.to_path_buf());
    let digest = Sha256::digest(abs.to_string_lossy().as_bytes());
    proto::wire::hex::encode(&digest[..8])
}

/// A fresh label for this process's containers.
pub fn run_label() -> String {
    let mut b = [0u8; 8];
    if getrandom::getrandom(&mut b).is_err() {
        return format!("{}", std::process::id());
    }
    proto::wire::hex::encode(&b)
}

/// Stops, in the background, every container labelled with `db` whose run
/// label is not `run`.
pub fn stop_leftovers(driver: SandboxDriver, db: String, run: String) {
    if driver != SandboxDriver::Docker {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("bae-sandbox-cleanup".into())
        .spawn(move || {
            let filter = format!("label=bae.db={db}");
            let listed = Command::new("docker")
                .args([
                    "ps",
                    "-q",
                    "--filter",
                    &filter,
                    "--format",
                    "{{.ID}} {{.Label \"bae.run\"}}",
                ])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output();
            let Ok(out) = listed else {
                return; // No container engine CLI: nothing can be left over.
            };
            let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| {
                    let mut parts = l.split_whitespace();
                    let id = parts.next()?;
                    (parts.next() != Some(run.as_str())).then(|| id.to_string())
                })
                .collect();
            if ids.is_empty() {
                return;
            }
            let stopped = Command::new("docker")
                .arg("stop")
                .args(&ids)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            tracing::warn!(
                containers = ids.len(),
                stopped,
                "stopped remote sandbox containers left by a previous run of this database"
            );
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the sandbox cleanup thread");
    }
}
