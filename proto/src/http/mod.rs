//! HTTP/1.1 server codec.
