//! Pure wire codecs for the BAE session protocol: HTTP/1.1 framing, JSON-RPC
//! over NDJSON, REST/event wire types and LLM provider translations.
//!
//! Nothing here performs I/O, reads a clock or draws randomness: callers pass
//! bytes, timestamps and entropy in and get bytes and values out.
#![forbid(unsafe_code)]
// No input may panic the server (it runs with `panic = "abort"`): lookups
// that can miss return errors instead. Tests may index freely.
#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]

pub mod http;
pub mod jsonrpc;
pub mod mcp;
pub mod provider;
pub mod trace_context;
pub mod wire;
