//! Runtime library of the `baesrv` binary.

pub mod config;
