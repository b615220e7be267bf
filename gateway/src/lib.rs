//! `gateway`: the Cloudflare Worker (wasm32 only).
//!
//! The edge-gateway issue fills this crate (Streamable HTTP MCP, JWT auth, Durable Objects,
//! forwarding to Fly, E2B and executors). Today it only proves that the shared catalogue and
//! dispatcher build for the Worker's target, so the two sides cannot drift.

use shared::catalogue::{EXEC_TOOL, ToolNames, tools};

/// Names of the tools the Worker will serve with lifecycle tools on.
pub fn tool_names() -> Vec<String> {
    tools(&ToolNames::new(EXEC_TOOL, true), "")
        .into_iter()
        .map(|t| t.name.into_owned())
        .collect()
}
