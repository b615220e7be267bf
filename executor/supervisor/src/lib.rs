//! `supervisor`: the process supervisor that runs as PID 1 inside a computer.
//!
//! [`frame`] is the protocol both sides speak (the server uses it as a library);
//! [`server`] is the supervisor itself, `jobs` its table of kept jobs (jobs that outlive
//! their connection) and [`ring`] their bounded output buffer; `files` serves reads and
//! uploads of files (SPEC §3.9). The binary `msc-supervisor` is built static for
//! `x86_64-unknown-linux-musl`, so it needs nothing from the image. Other architectures
//! have no supervisor: the server falls back to plain Engine API exec there.

mod file_errors;
mod files;
pub mod frame;
mod jobs;
mod oom;
pub mod ring;
mod run;
pub mod server;
mod workers;
