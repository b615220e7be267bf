//! End-to-end tests: the real binary, real Docker containers, rmcp's client.
//!
//! Table of contents:
//! - `exec`: results, exit codes, timeouts, cancellation, output limits, binary output, stdin, concurrency
//! - `validation`: every bad input gets an actionable `isError` and touches nothing
//! - `lifecycle`: temporary/permanent, defaults, ownership, lifecycle tools, restarts of the server
//! - `cleanup`: temporaries go away on EOF, SIGTERM, SIGKILL of the server, HTTP session end and idleness
//! - `http`: both protocol eras over Streamable HTTP, auth, Host/Origin checks, service routes
//! - `http_limits`: both HTTP servers' limits (issue 19): 413 for big bodies, slow heads and
//!   bodies cut, idle connections closed, the MCP session cap, long calls never cut
//! - `metrics`: `/metrics` (Prometheus text) on the HTTP server and in executor mode, behind their auth (issue 17)
//! - `parity`: one table of HTTP cases against the local server and the gateway (issue 13)
//! - `hardening`: issue 19's input edges (exact JSON-RPC ids, bounded `command` and `args`), issue 45's stdio batches
//! - `security`: server secrets never reach a computer; isolation flags
//! - `egress`: the egress gate (issue 38): an allow list enforced below the programs, real clients against real upstreams, a real DNS server behind `--egress-dns`
//! - `egress_secrets`: secrets computers use without holding them (issue 38): substitution at the secret's hosts only, the value found nowhere inside; Docker and Podman
//! - `startup`: start-up refusals and flags
//! - `images`: a BusyBox image (ash, no bash)
//! - `files`: the file tools (read, write, edit) through the supervisor and the archive API
//! - `jobs`: long-running commands as jobs (`yield_ms`, `terminal_job`) and per-call `env`
//! - `tasks`: the MCP Tasks extension over jobs (raw 2026-07-28 HTTP)
//! - `supervisor`: exec through the in-computer supervisor, and the fallback
//! - `channel`: the direct channel to the supervisor and the relay give the same results; a computer reaches no other's (issue 18)
//! - `podman`: the same over Podman's Docker-compatible API
//! - `placement`: the gateway over three executors: spread by load, failover when one dies (none lost, clear errors), draining, metrics (issue 18)
//! - `pool`: the warm pool (issue 18): hand-out, refill, kinds, out of sight, shutdown, a killed server's reaped, another image never handed out
//! - `e2b`: E2B sandboxes against the local simulator of E2B's control plane and envd
//! - `files_full`: a full disk on Docker (both paths, tools and /v1/files): a clear error, the old file kept
//! - `files_http`: GET/PUT /v1/files streams (1 GiB each way), ranges, limits, auth, ownership
//! - `files_edges`: a file written during its download, the WASM base layer in the file tools, uploads refused before their body, `--disk` (issue 46)
//! - `files_wasm`: files as bytes on WASM computers (read, write, edit; escapes refused)
//! - `fly`: Fly Machines computers against the local simulator of the Machines API
//! - `wasm`: WebAssembly computers: the toolbox and its host shell, custom modules, the embedded default
//! - `wasm_budget`: the host shell's own budgets: memory and the deadline in busy loops (issue 19); all WASM jobs' unread output within a server budget, computers per principal capped (issue 46)
//! - `wasm_linux`: WASM computers that feel like Linux: base layer, devices, utilities, bytes (issue 16)
//! - `wasm_python`: `python3` on WASM computers from a CPython WASI module (issue 16)
//! - `dashboard`: the dashboard in headless chromium, as the web page and as an MCP App (issue 5)
//! - `executor_api`: the executor's `/v1` REST API on Docker: results as the tools', codes, teams, auth attacks (issue 6)
//! - `gateway`: the Worker under `wrangler dev` in front of an executor: teams, sessions, scopes, auth, inventory, alarms (issue 6)
//! - `gateway_cloud`: the Worker placing computers directly on the Fly and E2B simulators (issue 7)
//! - `gateway_network`: a network policy per team at the gateway (`TEAM_NETWORK`), enforced by a Docker executor's gate (issue 38)
//! - `image`: the FROM scratch image of the static binary, run as an executor (issue 6)
//! - `modal`: Modal computers against the gRPC simulator, from the binary and through the gateway (issue 7)
//! - `snapshots`: snapshots, fork and restore on Docker and Podman (issue 39): exact files back, a fork beside a writing job, a restart of the server, nothing left behind
//! - `snapshots_wasm`: snapshots, fork and restore of WebAssembly computers (issue 39): directory copies, reflinks where the filesystem has them
//! - `registry`: `shared::registry`'s rules end to end on WASM computers behind the HTTP server (issue 13)

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod channel;
mod cleanup;
mod dashboard;
mod e2b;
mod egress;
mod egress_secrets;
mod exec;
mod executor_api;
mod files;
mod files_edges;
mod files_full;
mod files_http;
mod files_wasm;
mod fly;
mod gateway;
mod gateway_cloud;
mod gateway_network;
mod hardening;
mod http;
mod http_limits;
mod image;
mod images;
mod jobs;
mod lifecycle;
mod metrics;
mod modal;
mod parity;
mod placement;
mod podman;
mod pool;
mod registry;
mod security;
mod snapshots;
mod snapshots_wasm;
mod startup;
mod supervisor;
mod tasks;
mod validation;
mod wasm;
mod wasm_budget;
mod wasm_linux;
mod wasm_python;
