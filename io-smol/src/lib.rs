//! Runtime library of the `baesrv` binary.

pub mod config;
pub mod store;
pub mod app;
pub mod driver;
