//! Real MCP servers for end-to-end tests: the fixtures in
//! `testkit/fixtures/mcp` (Python's official MCP SDK and two stdlib
//! misbehaving servers) and the npm reference server. They are installed by
//! `testkit/scripts/install-test-deps.sh`; a missing one fails the test
//! loudly instead of skipping it.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::fixtures::toml_string;

/// `testkit/fixtures/mcp/<name>`.
pub fn fixture(name: &str) -> String {
    let p: PathBuf = [env!("CARGO_MANIFEST_DIR"), "fixtures", "mcp", name]
        .iter()
        .collect();
    p.to_string_lossy().into_owned()
}

/// Panics with the fix when the Python MCP SDK is missing.
pub fn require_python_sdk() {
    static OK: OnceLock<bool> = OnceLock::new();
    let ok = *OK.get_or_init(|| {
        Command::new("python3")
            .args(["-c", "import mcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    assert!(
        ok,
        "python3 cannot import the MCP SDK (PyPI `mcp`): run testkit/scripts/install-test-deps.sh"
    );
}

/// Panics with the fix when the npm reference server is missing.
pub fn require_everything() {
    let ok = Command::new("sh")
        .args(["-c", "command -v mcp-server-everything"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "mcp-server-everything is not on PATH: run testkit/scripts/install-test-deps.sh"
    );
}

/// One `[[mcp.servers]]` stdio entry.
pub fn stdio_toml(name: &str, command: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| toml_string(a)).collect();
    format!(
        "[[mcp.servers]]\nname = {}\ntransport = \"stdio\"\ncommand = {}\nargs = [{}]\n\n",
        toml_string(name),
        toml_string(command),
        args.join(", ")
    )
}

/// The SDK fixture over stdio, tagging its answers with `name`.
pub fn sdk_stdio_toml(name: &str, extra: &[&str]) -> String {
    require_python_sdk();
    let script = fixture("fixture_server.py");
    let mut args = vec![script.as_str(), "--name", name];
    args.extend_from_slice(extra);
    args.push("stdio");
    stdio_toml(name, "python3", &args)
}

/// One `[[mcp.servers]]` HTTP entry (`transport` is `"http"` or `"sse"`).
pub fn http_toml(name: &str, transport: &str, url: &str, headers: &[(&str, &str)]) -> String {
    let mut out = format!(
        "[[mcp.servers]]\nname = {}\ntransport = {}\nurl = {}\n",
        toml_string(name),
        toml_string(transport),
        toml_string(url)
    );
    if !headers.is_empty() {
        let h: Vec<String> = headers
            .iter()
            .map(|(k, v)| format!("{} = {}", toml_string(k), toml_string(v)))
            .collect();
        out.push_str(&format!("headers = {{ {} }}\n", h.join(", ")));
    }
    out.push('\n');
    out
}

/// An HTTP MCP server process, killed on drop.
pub struct HttpServer {
    child: Child,
    pub port: u16,
}

impl HttpServer {
    /// `python3 <script> <args…>`, waiting for its `READY <port>` line.
    pub fn python(script: &str, args: &[&str]) -> HttpServer {
        let mut child = Command::new("python3")
            .arg(fixture(script))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn python3");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read READY line");
        let port = line
            .trim()
            .strip_prefix("READY ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{script} did not print READY <port>: {line:?}"));
        HttpServer { child, port }
    }

    /// The SDK fixture in streamable-HTTP mode (`--json` for JSON answers).
    pub fn sdk(name: &str, extra: &[&str]) -> HttpServer {
        require_python_sdk();
        let mut args = vec!["--name", name, "http", "--port", "0"];
        args.extend_from_slice(extra);
        HttpServer::python("fixture_server.py", &args)
    }

    /// `raw_http_server.py` in `mode`.
    pub fn raw(mode: &[&str]) -> HttpServer {
        let mut args = vec!["--port", "0"];
        args.extend_from_slice(mode);
        HttpServer::python("raw_http_server.py", &args)
    }

    /// `mcp-server-everything streamableHttp` on a free port.
    pub fn everything() -> HttpServer {
        require_everything();
        let port = free_port();
        let child = Command::new("mcp-server-everything")
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn mcp-server-everything");
        let until = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < until,
                "mcp-server-everything did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        HttpServer { child, port }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Live (non-zombie) and zombie children of `pid`, from `/proc`, leaving
/// out the container CLI that every server start runs in the background to
/// stop a crashed run's sandboxes (`io-smol/src/sandbox_cleanup.rs`): it
/// may still be running when a test counts MCP servers.
pub fn children_of(pid: u32) -> (Vec<u32>, Vec<u32>) {
    let mut live = Vec::new();
    let mut zombies = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return (live, zombies);
    };
    for entry in dir.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may contain spaces and parens.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("");
        let ppid: u32 = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if ppid == pid && !is_leftover_cleanup(child) {
            if state == "Z" {
                zombies.push(child);
            } else {
                live.push(child);
            }
        }
    }
    (live, zombies)
}

/// The boot-time `docker ps`/`docker stop`, or its fork before `exec`
/// (which still bears the forking thread's name).
fn is_leftover_cleanup(pid: u32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let comm = comm.trim_end();
    // The kernel keeps 15 bytes of a thread's name.
    comm == "docker" || comm == "bae-sandbox-cle"
}

/// Processes whose command line contains `needle` (orphans included).
pub fn processes_matching(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                out.push(pid);
            }
        }
    }
    out
}

/// Open file descriptors of `pid`.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Polls `f` until it holds or `timeout` passes; returns whether it held.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
