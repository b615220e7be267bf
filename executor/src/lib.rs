//! `executor`: the `mcp-sandbox-computer-vm-for-ai` server.
//!
//! Code map: [`cli`] parses flags, [`config`] checks them, [`docker`] is the Docker/Podman
//! backend, [`wasm`] the WebAssembly one (the toolbox's host-side shell is the crate
//! [`msc_shell`], `executor/shell`), [`fly`] and [`e2b`] open cloud accounts whose
//! computers [`cloud`] drives, [`modal`] is Modal over gRPC, [`backend`] puts them behind
//! one interface, [`computers`] tracks computers and owners and implements the shared
//! dispatcher's `ToolHost`, [`stdio`] and [`http`] are the MCP transports, [`api`] the
//! executor API, [`serve`] serves both HTTP routers with their limits, [`instance`] lets a
//! server tell live peers from dead ones, [`progress`] sends progress notifications, and
//! [`run`] wires it all together.

pub mod api;
pub mod backend;
pub mod cli;
pub mod cloud;
pub mod computers;
pub mod config;
pub mod docker;
pub mod e2b;
pub mod egress;
pub mod error;
#[cfg(test)]
pub mod fake;
pub mod fly;
pub mod http;
pub mod instance;
pub mod metrics;
pub mod modal;
pub mod place;
pub mod progress;
pub mod run;
pub mod serve;
pub mod spec;
pub mod stdio;
#[cfg(feature = "wasm")]
pub mod wasm;
#[cfg(not(feature = "wasm"))]
#[path = "wasm_off.rs"]
pub mod wasm;
