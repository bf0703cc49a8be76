//! The server's configuration as an operator writes it: a
//! `bae-config.toml` text (before the first NUL of the input) parsed as
//! `serve` parses it, and `KEY=value` lines (after it) as the environment
//! `parse_env` reads. A bad file or variable is a configuration error with
//! a message, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (file, env) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(file);
    let path = std::path::Path::new("bae-config.toml");
    if let Err(e) = io_smol::config::parse_file_str(&text, path) {
        let _ = (e.exit_code(), e.stderr_line());
    }
    let env = String::from_utf8_lossy(env);
    let vars: Vec<(&str, &str)> = env.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |k: &str| {
        vars.iter()
            .rev()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    };
    if let Err(e) = io_smol::config::parse_env(get) {
        let _ = (e.exit_code(), e.stderr_line());
    }
});
