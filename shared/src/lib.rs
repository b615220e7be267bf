//! `shared`: what the local server and the edge gateway have in common.
//!
//! The tool catalogue ([`catalogue`]), input validation ([`validate`]), computer ids and
//! slugs ([`ids`]), the lifecycle policy ([`lifecycle`]) and the registry that applies it ([`registry`]), result shaping ([`result`]), command
//! history ([`history`]) and the
//! MCP JSON-RPC dispatcher ([`mcp`]). No runtime, no clocks, no I/O: it builds and is tested
//! natively and on `wasm32-unknown-unknown`.

/// `From<String>` and `From<&str>` for errors that are one message (`struct E(pub String)`),
/// so `?` and `.into()` turn a message into them.
#[macro_export]
macro_rules! message_error_from {
    ($($t:ty),+ $(,)?) => { $(
        impl From<String> for $t {
            fn from(message: String) -> Self {
                Self(message)
            }
        }
        impl From<&str> for $t {
            fn from(message: &str) -> Self {
                Self(message.to_owned())
            }
        }
    )+ };
}

pub mod answer;
pub mod capabilities;
pub mod catalogue;
pub mod dashboard;
pub mod egress;
pub mod executor_api;
pub mod files;
pub mod history;
pub mod ids;
pub mod jobs;
pub mod json;
pub mod jsonrpc;
pub mod lifecycle;
pub mod maybe_send;
pub mod mcp;
pub mod op;
pub mod providers;
pub mod registry;
pub mod result;
pub mod snapshots;
pub mod tasks;
pub mod teams;
pub mod transport;
pub mod validate;

pub use rmcp::model::CallToolResult;
