//! `gateway`: the Cloudflare Worker that serves the global MCP URL.
//!
//! It authenticates callers ([`auth`]: static token or JWTs with teams and scopes), keeps
//! each team's computers in a Durable Object (`Team`, SQLite storage: placement, owner,
//! temporary flag, last use, legacy sessions, an alarm that reaps idle temporaries), gives
//! each team its own id space on executors (`shared::teams`), and forwards every command to the
//! executor holding the computer with short-lived HS256 tokens ([`exec_token`]). MCP itself
//! is the shared dispatcher and transport rules, the same code as the local server. The
//! Worker glue (`edge`) builds only for wasm32; everything else is tested natively.

pub mod auth;
pub mod cloud;
pub mod error;
pub mod exec_token;
pub mod inventory;
pub mod networks;
pub mod origins;
pub mod placement;
pub mod schema;

#[cfg(target_arch = "wasm32")]
mod edge;
