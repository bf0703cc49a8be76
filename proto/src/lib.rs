//! Pure wire codecs for the BAE session protocol: HTTP/1.1 framing, JSON-RPC
//! over NDJSON, REST/event wire types and LLM provider translations.
//!
//! Nothing here performs I/O, reads a clock or draws randomness: callers pass
//! bytes, timestamps and entropy in and get bytes and values out.
#![forbid(unsafe_code)]

pub mod http;
pub mod jsonrpc;
pub mod mcp;
pub mod provider;
pub mod wire;
