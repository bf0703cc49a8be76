//! JSON-RPC 2.0 envelope decoding and NDJSON frame encoding.
