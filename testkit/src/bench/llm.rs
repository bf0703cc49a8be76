//! A zero-latency mock LLM provider (Anthropic Messages) for the benches:
//! it answers from a precomputed body, or with a `tool_use` of `get_time`
//! when tools are advertised and the last message holds no `tool_result`.
//! One thread per provider connection, keep-alive.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use serde_json::{json, Value};

use super::client::{err, Res};

/// Starts the mock on `bind` (`127.0.0.1:0` for an ephemeral port).
pub fn start(bind: &str) -> Res<SocketAddr> {
    let listener = TcpListener::bind(bind).map_err(err("bind mock"))?;
    let addr = listener.local_addr().map_err(err("mock addr"))?;
    thread::spawn(move || {
        let next_id = Arc::new(AtomicU64::new(0));
        for conn in listener.incoming().flatten() {
            let next_id = next_id.clone();
            thread::spawn(move || {
                let _ = serve_mock(conn, &next_id);
            });
        }
    });
    Ok(addr)
}

const TEXT_BODY: &str = r#"{"id":"msg_bench","type":"message","role":"assistant","model":"bench","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}}"#;

/// Answers `tool_use` (tool `get_time`) when tools are advertised and the
/// last message carries no `tool_result`; text otherwise.
fn mock_answer(body: &[u8], next_id: &AtomicU64) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let has_tools = v["tools"].as_array().is_some_and(|t| !t.is_empty());
    let last_has_result = v["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"));
    if has_tools && !last_has_result {
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        json!({"id": "msg_bench", "type": "message", "role": "assistant", "model": "bench",
               "content": [{"type": "tool_use", "id": format!("tu_{id}"), "name": "get_time", "input": {}}],
               "stop_reason": "tool_use", "stop_sequence": null,
               "usage": {"input_tokens": 10, "output_tokens": 5}})
        .to_string()
    } else {
        TEXT_BODY.to_string()
    }
}

fn serve_mock(conn: TcpStream, next_id: &AtomicU64) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut writer = conn.try_clone()?;
    let mut reader = BufReader::with_capacity(64 * 1024, conn);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut len = 0usize;
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; len];
        reader.read_exact(&mut body)?;
        let answer = mock_answer(&body, next_id);
        let resp = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        writer.write_all(resp.as_bytes())?;
    }
}
