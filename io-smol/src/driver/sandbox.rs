//! The container engine's CLI for remote sandboxes (spec 04 §5.2): `docker`
//! (or Apple's `container`, same verbs) run with argv, never through a host
//! shell, for the engine's [`SandboxCommand`]s. Failure details are the
//! trimmed stderr (or stdout), at most 1024 bytes plus `…`.

use std::collections::HashMap;
use std::io;
use std::process::Stdio;

use engine::sandbox::{DriverError, ExecOutput, OpId, SandboxCommand, SandboxReply};
use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use smol::channel::{self, Sender};
use smol::process::Command;

use super::reports::Reports;
use crate::config::SandboxDriver;

/// Longest failure detail kept from the CLI's output.
const DETAIL_BYTES: usize = 1024;

pub struct Sandboxes<R: Reports> {
    driver: SandboxDriver,
    /// Resource-limit flags for `run` (`--memory`, `--cpus`, `--network`).
    run_args: Vec<String>,
    events: R,
    /// Kill switches of running execs, by op.
    kills: HashMap<OpId, Sender<()>>,
}

impl<R: Reports> Sandboxes<R> {
    pub fn new(driver: SandboxDriver, run_args: Vec<String>, events: R) -> Self {
        Sandboxes {
            driver,
            run_args,
            events,
            kills: HashMap::new(),
        }
    }

    fn cli(&self) -> Result<&'static str, DriverError> {
        match self.driver {
            SandboxDriver::Docker => Ok("docker"),
            SandboxDriver::AppleContainer if cfg!(target_os = "macos") => Ok("container"),
            SandboxDriver::AppleContainer => Err(DriverError::Unsupported(
                "apple-container is only available on macOS".into(),
            )),
        }
    }

    pub fn perform(&mut self, cmd: SandboxCommand) {
        let (op, work) = match cmd {
            SandboxCommand::Kill { op } => {
                if let Some(kill) = self.kills.remove(&op) {
                    let _ = kill.try_send(());
                }
                return;
            }
            SandboxCommand::EnsureImage { op, image } => (op, Work::Ensure(image)),
            SandboxCommand::Start { op, image, labels } => {
                (op, Work::Start(image, labels, self.run_args.clone()))
            }
            SandboxCommand::Exec {
                op,
                container,
                command,
                stdin,
                max_output,
            } => (op, Work::Exec(container, command, stdin, max_output)),
            SandboxCommand::Stop { op, container } => (op, Work::Stop(container)),
        };
        let tx = self.events.clone();
        let cli = match self.cli() {
            Ok(c) => c,
            Err(e) => {
                let reply = work.fail(e);
                smol::spawn(async move {
                    let _ = tx.sandbox(op, reply).await;
                })
                .detach();
                return;
            }
        };
        let apple = self.driver == SandboxDriver::AppleContainer;
        let (kill_tx, kill_rx) = channel::bounded(1);
        if matches!(work, Work::Exec(..)) {
            self.kills.insert(op, kill_tx);
        }
        smol::spawn(async move {
            let reply = work.run(cli, apple, kill_rx).await;
            let _ = tx.sandbox(op, reply).await;
        })
        .detach();
    }

    /// The engine's reply for `op` arrived: its kill switch is not needed.
    pub fn finished(&mut self, op: OpId) {
        self.kills.remove(&op);
    }
}

enum Work {
    Ensure(String),
    Start(String, Vec<(String, String)>, Vec<String>),
    Exec(String, String, Option<Vec<u8>>, usize),
    Stop(String),
}

impl Work {
    fn fail(&self, e: DriverError) -> SandboxReply {
        match self {
            Work::Ensure(_) => SandboxReply::Ensured(Err(e)),
            Work::Start(..) => SandboxReply::Started(Err(e)),
            Work::Exec(..) => SandboxReply::Exec(Err(e)),
            Work::Stop(_) => SandboxReply::Stopped(Err(e)),
        }
    }

    async fn run(self, cli: &str, apple: bool, kill: channel::Receiver<()>) -> SandboxReply {
        match self {
            Work::Ensure(image) => {
                let images = if apple { "images" } else { "image" };
                let inspect = run(
                    cli,
                    &[images, "inspect", &image],
                    None,
                    DETAIL_BYTES * 4,
                    None,
                )
                .await;
                if matches!(&inspect, Ok(o) if o.exit_code == 0) {
                    return SandboxReply::Ensured(Ok(()));
                }
                let pull = if apple {
                    run(
                        cli,
                        &["images", "pull", &image],
                        None,
                        DETAIL_BYTES * 4,
                        None,
                    )
                    .await
                } else {
                    run(cli, &["pull", &image], None, DETAIL_BYTES * 4, None).await
                };
                SandboxReply::Ensured(match pull {
                    Ok(o) if o.exit_code == 0 => Ok(()),
                    Ok(o) => Err(DriverError::Image(detail(&o))),
                    Err(e) => Err(DriverError::Image(e)),
                })
            }
            Work::Start(image, labels, limits) => {
                let mut args: Vec<String> = vec!["run".into(), "-d".into(), "--rm".into()];
                for (k, v) in &labels {
                    args.push("--label".into());
                    args.push(format!("{k}={v}"));
                }
                args.extend(limits);
                args.extend([image, "sleep".into(), "infinity".into()]);
                let argv: Vec<&str> = args.iter().map(String::as_str).collect();
                SandboxReply::Started(match run(cli, &argv, None, DETAIL_BYTES * 4, None).await {
                    Ok(o) if o.exit_code == 0 && !o.stdout.trim().is_empty() => {
                        Ok(o.stdout.trim().to_string())
                    }
                    Ok(o) => Err(DriverError::Runtime(detail(&o))),
                    Err(e) => Err(DriverError::Runtime(e)),
                })
            }
            Work::Exec(container, command, stdin, max) => {
                let mut argv = vec!["exec"];
                if stdin.is_some() {
                    argv.push("-i");
                }
                argv.extend([container.as_str(), "sh", "-c", command.as_str()]);
                SandboxReply::Exec(match run(cli, &argv, stdin, max, Some(kill)).await {
                    Ok(o) if is_engine_failure(&o) => Err(DriverError::Runtime(detail(&o))),
                    // A non-zero exit may be the container going away under
                    // the exec (137, or 1 when it is removed first): that is
                    // a driver error, not the command's result.
                    Ok(o)
                        if o.exit_code != 0 && !apple && !still_running(cli, &container).await =>
                    {
                        Err(DriverError::Runtime(format!(
                            "container {container} stopped during the exec"
                        )))
                    }
                    Ok(o) => Ok(o),
                    Err(e) => Err(DriverError::Runtime(e)),
                })
            }
            Work::Stop(container) => SandboxReply::Stopped(
                match run(cli, &["stop", &container], None, DETAIL_BYTES * 4, None).await {
                    Ok(o) if o.exit_code == 0 => Ok(()),
                    Ok(o)
                        if detail(&o)
                            .to_ascii_lowercase()
                            .contains("no such container") =>
                    {
                        Ok(())
                    }
                    Ok(o) => Err(DriverError::Runtime(detail(&o))),
                    Err(e) => Err(DriverError::Runtime(e)),
                },
            ),
        }
    }
}

/// The CLI itself failed (no such container, engine down), as opposed to
/// the command inside the container exiting non-zero: exit 125, or a
/// daemon error with nothing on stdout.
fn is_engine_failure(o: &ExecOutput) -> bool {
    o.exit_code == 125
        || (o.exit_code != 0
            && o.stdout.is_empty()
            && (o.stderr.starts_with("Error response from daemon")
                || o.stderr.starts_with("Error: ")))
}

/// Whether the container is still running (`container inspect`).
async fn still_running(cli: &str, container: &str) -> bool {
    let args = [
        "container",
        "inspect",
        "--format",
        "{{.State.Running}}",
        container,
    ];
    matches!(run(cli, &args, None, 64, None).await, Ok(o) if o.exit_code == 0 && o.stdout.trim() == "true")
}

/// Trimmed stderr, or stdout when stderr is empty, cut to 1024 bytes + `…`.
fn detail(o: &ExecOutput) -> String {
    let text = if o.stderr.trim().is_empty() {
        o.stdout.trim()
    } else {
        o.stderr.trim()
    };
    if text.len() <= DETAIL_BYTES {
        return text.to_string();
    }
    let mut end = DETAIL_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Runs `cli args…`, writing `stdin` (then closing it) if given, capturing
/// each stream up to `max` bytes (the rest is drained and dropped). A
/// message on `kill` kills the process; it then reports exit code -1.
async fn run(
    cli: &str,
    args: &[&str],
    stdin: Option<Vec<u8>>,
    max: usize,
    kill: Option<channel::Receiver<()>>,
) -> Result<ExecOutput, String> {
    let mut child = Command::new(cli)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run {cli}: {e}"))?;
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        smol::spawn(async move {
            let _ = pipe.write_all(&bytes).await;
            let _ = pipe.close().await;
        })
        .detach();
    }
    let out = child.stdout.take().map(|s| smol::spawn(capture(s, max)));
    let err = child.stderr.take().map(|s| smol::spawn(capture(s, max)));
    let status = match kill {
        Some(kill) => {
            let exited = child.status();
            futures_lite::pin!(exited);
            let killed = future::or(
                async {
                    match kill.recv().await {
                        Ok(()) => None,
                        // No kill switch any more: only the exit counts.
                        Err(_) => future::pending().await,
                    }
                },
                async { Some((&mut exited).await) },
            )
            .await;
            match killed {
                Some(status) => status,
                None => {
                    let _ = child.kill();
                    exited.await
                }
            }
        }
        None => child.status().await,
    }
    .map_err(|e| format!("waiting for {cli}: {e}"))?;
    let (stdout, stdout_truncated) = match out {
        Some(t) => t.await,
        None => (String::new(), false),
    };
    let (stderr, stderr_truncated) = match err {
        Some(t) => t.await,
        None => (String::new(), false),
    };
    Ok(ExecOutput {
        stdout,
        stderr,
        exit_code: status.code().map_or(-1, i64::from),
        stdout_truncated,
        stderr_truncated,
    })
}

/// Reads a stream to its end, keeping at most `max` bytes (cut on a UTF-8
/// boundary); whether anything was dropped.
async fn capture(mut r: impl AsyncRead + Unpin, max: usize) -> (String, bool) {
    let mut kept = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut dropped = false;
    loop {
        match r.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                let room = max.saturating_sub(kept.len());
                let take = room.min(n);
                kept.extend_from_slice(&buf[..take]);
                dropped |= take < n;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let text = match String::from_utf8(kept) {
        Ok(s) => s,
        Err(e) => {
            // Cut mid-character by the limit, or not UTF-8 at all.
            let valid = e.utf8_error().valid_up_to();
            let bytes = e.into_bytes();
            if dropped && bytes.len() - valid < 4 {
                String::from_utf8_lossy(&bytes[..valid]).into_owned()
            } else {
                String::from_utf8_lossy(&bytes).into_owned()
            }
        }
    };
    (text, dropped)
}
