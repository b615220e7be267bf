//! `supervisor`: the process supervisor that runs as PID 1 inside a computer.
//!
//! [`frame`] is the protocol both sides speak (the server uses it as a library); [`server`]
//! serves the connections; `proc` holds the process primitives (locks, exit codes, job
//! marks and tree kills, a connection's writer), `spawn` a job's first process (a
//! vfork-style clone that opens the job's audit session before it execs), `state` the
//! shared state and the reaper, `run` a job's start and run, `sink` where its output goes,
//! `kept` the table of kept jobs (jobs that outlive their connection; `jobs` serves their
//! frames) and [`ring`] their bounded output buffer; `files` serves reads and uploads of
//! files (SPEC §3.9). [`escapes`] holds the escape commands the tests share. Each module
//! imports only those listed before it (the layout test checks: no cycles). The binary
//! `msc-supervisor` is built static for `x86_64-unknown-linux-musl`, so it needs nothing
//! from the image. Other architectures have no supervisor: the server falls back to plain
//! Engine API exec there.

pub mod escapes;
mod file_errors;
mod files;
pub mod frame;
mod jobs;
mod kept;
mod oom;
mod proc;
pub mod ring;
mod run;
pub mod server;
mod sink;
mod spawn;
mod state;
mod workers;
