//! Debian's `nginx` as a round-robin load balancer in front of several
//! servers (the replica tests, docs/scaling.md): the configuration is
//! written into a directory of its own, the master runs in the foreground
//! on a loopback port and is killed on drop.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::TestDir;

/// The `nginx` binary; panics (loudly, also outside CI) when it is missing.
pub fn binary() -> PathBuf {
    for p in ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"] {
        if std::path::Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!(
        "nginx is not installed (the replica tests run it as their load balancer): \
         run testkit/scripts/install-test-deps.sh or apt-get install nginx"
    );
}

/// The `nginx.conf` of a round-robin balancer on `listen` over `upstreams`:
/// HTTP/1.1 to the servers, no response buffering (NDJSON streams pass
/// frame by frame), a server that refuses connections is skipped. One
/// process (`master_process off`), so killing it leaves nothing behind.
pub fn config(dir: &std::path::Path, listen: SocketAddr, upstreams: &[SocketAddr]) -> String {
    let d = dir.display();
    let servers: String = upstreams
        .iter()
        .map(|a| format!("    server {a} max_fails=1 fail_timeout=1s;\n"))
        .collect();
    let user = if is_root() { "user root;\n" } else { "" };
    format!(
        "{user}master_process off;\n\
         worker_processes 1;\n\
         error_log {d}/error.log warn;\n\
         pid {d}/nginx.pid;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n\
         access_log off;\n\
         client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         upstream bae {{\n{servers}}}\n\
         server {{\n\
         listen {listen};\n\
         location / {{\n\
         proxy_pass http://bae;\n\
         proxy_http_version 1.1;\n\
         proxy_set_header Connection \"\";\n\
         proxy_buffering off;\n\
         proxy_request_buffering off;\n\
         proxy_read_timeout 300s;\n\
         proxy_next_upstream error timeout;\n\
         }}\n}}\n}}\n"
    )
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A running balancer.
pub struct Nginx {
    child: Child,
    pub addr: SocketAddr,
    dir: TestDir,
}

impl Nginx {
    /// Starts a balancer over `upstreams` on a free loopback port and waits
    /// until it accepts connections.
    #[track_caller]
    pub fn start(upstreams: &[SocketAddr]) -> Nginx {
        let bin = binary();
        let dir = TestDir::new("baesrv-nginx").expect("creating the nginx directory");
        let addr = {
            let probe = TcpListener::bind("127.0.0.1:0").expect("binding a probe port");
            probe.local_addr().expect("probe address")
        };
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, config(dir.path(), addr, upstreams)).expect("writing nginx.conf");
        let child = Command::new(&bin)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf)
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut n = Nginx { child, addr, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = n.child.try_wait() {
                panic!("nginx exited ({status}): {}", n.error_log());
            }
            assert!(
                Instant::now() < deadline,
                "nginx not listening: {}",
                n.error_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        n
    }

    /// What nginx logged.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
