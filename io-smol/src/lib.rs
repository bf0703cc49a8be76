//! Runtime library of the `baesrv` binary.

pub mod app;
pub mod config;
pub mod ctl;
pub mod driver;
pub mod heap_trim;
pub mod log_filter;
#[cfg(feature = "otel")]
pub mod otel;
#[cfg(not(feature = "otel"))]
#[path = "otel_off.rs"]
pub mod otel;
pub mod proc_stats;
pub mod sandbox_cleanup;
pub mod store;
pub mod threads;
