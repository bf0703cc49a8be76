//! Test support for `baesrv` end-to-end tests: a harness that boots the real
//! binary ([`server`]), a blocking HTTP/1.1 + NDJSON client ([`http`]), a
//! scriptable mock LLM provider ([`mock_provider`]) and admin/session
//! fixtures ([`fixtures`]).
//!
//! Std-only networking and threads; no async. Of the server's crates only
//! `proto` is used, for its sans-IO HTTP/1.1 peer decoder.

pub mod bench;
pub mod containers;
pub mod export_doc;
pub mod fixtures;
pub mod http;
pub mod mcp;
pub mod mock_provider;
pub mod ndjson;
pub mod nginx;
pub mod pg;
pub mod server;
pub mod tempdir;

pub use http::{rpc_request, HttpClient, Response, RpcStream};
pub use mock_provider::{CacheCall, CacheConfig, Endpoint, MockProvider, RecordedRequest, Reply};
pub use server::{RunOutput, Server, ServerOptions, StartError};
pub use tempdir::{TestDir, TestPath};
