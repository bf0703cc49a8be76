//! `bae-mock-provider`: testkit's mock LLM provider as a standalone process,
//! for trying baesrv without a provider account (docs/quickstart.md).
//!
//! It serves Anthropic Messages (`POST /v1/messages`) and OpenAI Chat
//! Completions (`POST /v1/chat/completions`) on a loopback address and
//! answers every request with one canned assistant text, in the wire format
//! of the endpoint hit. Each request is logged on stderr. It runs until it
//! is killed.
//!
//! ```text
//! bae-mock-provider [--addr 127.0.0.1:9090] [--reply TEXT]
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use testkit::{MockProvider, Reply};

/// Default listen address.
const DEFAULT_ADDR: &str = "127.0.0.1:9090";
/// Default canned assistant reply.
const DEFAULT_REPLY: &str = "Hello from the BAE mock provider!";

const USAGE: &str = "\
Usage: bae-mock-provider [--addr HOST:PORT] [--reply TEXT]

Serves a mock LLM provider (Anthropic POST /v1/messages and OpenAI
POST /v1/chat/completions) on a loopback address and answers every request
with TEXT. Runs until killed.

Options:
  --addr HOST:PORT   loopback address to listen on (default 127.0.0.1:9090)
  --reply TEXT       the assistant reply (default \"Hello from the BAE mock provider!\")
  -h, --help         print this help
";

#[derive(Debug)]
struct Args {
    addr: SocketAddr,
    reply: String,
}

fn parse_args(args: &[String]) -> Result<Option<Args>, String> {
    let mut addr = DEFAULT_ADDR.to_string();
    let mut reply = DEFAULT_REPLY.to_string();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match name {
            "-h" | "--help" => return Ok(None),
            "--addr" => addr = value()?,
            "--reply" => reply = value()?,
            other => return Err(format!("unknown argument \"{other}\"")),
        }
    }
    let addr: SocketAddr = addr
        .parse()
        .map_err(|e| format!("--addr: \"{addr}\" is not an IP:port address ({e})"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "--addr: {addr} is not a loopback address; the mock only listens on this machine"
        ));
    }
    Ok(Some(Args { addr, reply }))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse_args(&args) {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("bae-mock-provider: {e}");
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mock = match MockProvider::bind(args.addr) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("bae-mock-provider: cannot listen on {}: {e}", args.addr);
            return ExitCode::from(1);
        }
    };
    mock.set_default(Reply::text(args.reply.clone()));
    eprintln!(
        "bae-mock-provider: listening on {} (POST /v1/messages, POST /v1/chat/completions); \
         every reply is {:?}",
        mock.base_url, args.reply
    );
    let mut seen = 0;
    loop {
        let requests = mock.wait_requests(seen + 1, Duration::from_secs(3600));
        for r in &requests[seen..] {
            let model = r.body.get("model").and_then(|m| m.as_str()).unwrap_or("?");
            eprintln!(
                "bae-mock-provider: {} {} (model {model:?})",
                r.method, r.path
            );
        }
        seen = requests.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Option<Args>, String> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse_args(&v)
    }

    #[test]
    fn defaults_and_flags() {
        let a = p(&[]).unwrap().unwrap();
        assert_eq!(a.addr.to_string(), DEFAULT_ADDR);
        assert_eq!(a.reply, DEFAULT_REPLY);
        let a = p(&["--addr", "127.0.0.1:1234", "--reply=hi there"])
            .unwrap()
            .unwrap();
        assert_eq!(a.addr.to_string(), "127.0.0.1:1234");
        assert_eq!(a.reply, "hi there");
        assert!(p(&["--help"]).unwrap().is_none());
    }

    #[test]
    fn rejects_bad_input() {
        assert!(p(&["--addr", "0.0.0.0:9090"])
            .unwrap_err()
            .contains("loopback"));
        assert!(p(&["--addr", "localhost:9090"]).is_err());
        assert!(p(&["--addr"]).unwrap_err().contains("needs a value"));
        assert!(p(&["--frob"]).unwrap_err().contains("unknown argument"));
    }
}
