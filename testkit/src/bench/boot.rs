//! Boots the `baesrv` under test for a bench: ephemeral loopback ports, a
//! fresh temporary database, and one provider entry named `mock`.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::client::{err, Conn, Res};

pub struct Baesrv {
    pub child: Child,
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub admin_key: String,
    dir: PathBuf,
}

impl Drop for Baesrv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn free_addr() -> Res<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(err("bind probe"))?;
    l.local_addr().map_err(err("probe addr"))
}

/// `--otlp URL [--otlp-protocol P]`: the server exports telemetry there.
pub struct Otlp {
    pub endpoint: String,
    pub protocol: String,
}

impl Baesrv {
    /// Boots `bin` on ephemeral loopback ports with a fresh temporary database
    /// and one provider entry, `mock`, at `mock`; returns once `/healthz` answers.
    pub fn start(
        bin: &Path,
        mock: SocketAddr,
        otlp: Option<&Otlp>,
        database_url: Option<&str>,
    ) -> Res<Baesrv> {
        let dir = std::env::temp_dir().join(format!("baesrv-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(err("temp dir"))?;
        let config = format!(
        "[[providers.entries]]\nname = \"mock\"\nprovider = \"anthropic\"\nbase_url = \"http://{mock}\"\nmodel = \"bench\"\nauth_token = \"t\"\n"
    );
        let telemetry = otlp.map_or(String::new(), |o| {
            format!(
                "\n[telemetry]\nenabled = true\notlp_endpoint = \"{}\"\notlp_protocol = \"{}\"\n",
                o.endpoint, o.protocol
            )
        });
        std::fs::write(dir.join("bae-config.toml"), config + &telemetry).map_err(err("config"))?;
        let (addr, admin_addr) = (free_addr()?, free_addr()?);
        let mut cmd = Command::new(bin);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("BAE_") {
                cmd.env_remove(k);
            }
        }
        let child = cmd
            .env("BAE_ADDR", addr.to_string())
            .env("BAE_ADMIN_ADDR", admin_addr.to_string())
            .env("BAE_DB_PATH", dir.join("bae.db"))
            .env("BAE_ADMIN_KEY_FILE", dir.join("admin-key"))
            .env("BAE_ADMIN_KEY_HASH_FILE", dir.join("admin-key-hash"))
            .env("BAE_CONFIG", dir.join("bae-config.toml"))
            .env("BAE_LOG", "warn")
            // Metrics are exported during a run too.
            .env("OTEL_METRIC_EXPORT_INTERVAL", "1000")
            .env("BAE_DATABASE_URL", database_url.unwrap_or(""))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", bin.display()))?;
        let mut srv = Baesrv {
            child,
            addr,
            admin_addr,
            admin_key: String::new(),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ok = Conn::open(addr)
                .and_then(|mut c| c.request("GET", "/healthz", None, b""))
                .is_ok_and(|r| r.status == 200);
            if ok {
                break;
            }
            if Instant::now() > deadline {
                return Err("baesrv did not become ready".into());
            }
            thread::sleep(Duration::from_millis(20));
        }
        srv.admin_key = std::fs::read_to_string(srv.dir.join("admin-key"))
            .map_err(err("admin key file"))?
            .trim()
            .to_string();
        Ok(srv)
    }
}
