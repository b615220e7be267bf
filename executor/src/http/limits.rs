//! The limits of `/mcp` beyond the connection's (those are `crate::serve`'s): how many
//! legacy sessions may live, in all and per principal, and the words of a refused body.
//!
//! A session's principal is the caller behind it, as for stateless calls
//! (`super::principal`: one static token is one principal, no token is the anonymous
//! one). Past a cap, `initialize` gets 503 with `Retry-After` (when the first idle session
//! of that group expires) and a message naming the limit and its flag.

use std::collections::HashMap;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{Session, json_response};
use crate::serve::body::BodyError;

/// `--http-max-sessions` and `--http-max-sessions-per-principal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionCaps {
    pub total: usize,
    pub per_principal: usize,
}

impl Default for SessionCaps {
    fn default() -> Self {
        Self {
            total: 1024,
            per_principal: 256,
        }
    }
}

/// Why `initialize` may not open one more session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SessionsFull {
    #[error(
        "too many live MCP sessions: this principal has {limit}, the limit of --http-max-sessions-per-principal. Idle sessions end after --session-timeout ({idle_secs} s) and a client ends its own with DELETE /mcp (with its Mcp-Session-Id); retry in {retry_after} s, end unused sessions, or start the server with a higher --http-max-sessions-per-principal"
    )]
    Principal {
        limit: usize,
        idle_secs: u64,
        retry_after: u64,
    },
    #[error(
        "too many live MCP sessions: this server has {limit}, the limit of --http-max-sessions. Idle sessions end after --session-timeout ({idle_secs} s) and a client ends its own with DELETE /mcp (with its Mcp-Session-Id); retry in {retry_after} s, or start the server with a higher --http-max-sessions"
    )]
    Server {
        limit: usize,
        idle_secs: u64,
        retry_after: u64,
    },
}

impl SessionsFull {
    fn retry_after(&self) -> u64 {
        match self {
            SessionsFull::Principal { retry_after, .. }
            | SessionsFull::Server { retry_after, .. } => *retry_after,
        }
    }
}

impl IntoResponse for SessionsFull {
    fn into_response(self) -> Response {
        tracing::warn!(error = %self, "session refused");
        let mut r = json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": self.to_string()}),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(self.retry_after()));
        r
    }
}

impl SessionCaps {
    /// Whether `principal` may open one more session beside `sessions`.
    pub(super) fn admit(
        &self,
        sessions: &HashMap<String, Session>,
        principal: &str,
        idle: Duration,
    ) -> Result<(), SessionsFull> {
        let idle_secs = idle.as_secs();
        // The server's cap first: raising the principal's would not help past it.
        if sessions.len() >= self.total {
            return Err(SessionsFull::Server {
                limit: self.total,
                idle_secs,
                retry_after: retry_after(sessions.values(), idle),
            });
        }
        let mine = || sessions.values().filter(|s| s.principal == principal);
        if mine().count() >= self.per_principal {
            return Err(SessionsFull::Principal {
                limit: self.per_principal,
                idle_secs,
                retry_after: retry_after(mine(), idle),
            });
        }
        Ok(())
    }
}

/// Seconds until the first of `sessions` that is idle now expires (the reaper runs at
/// least every 5 s, so a little more); the whole timeout when every one is busy.
fn retry_after<'a>(sessions: impl Iterator<Item = &'a Session>, idle: Duration) -> u64 {
    let first = sessions
        .filter(|s| s.inflight.values().all(|h| h.is_finished()))
        .map(|s| idle.saturating_sub(s.last_seen.elapsed()))
        .min()
        .unwrap_or(idle);
    first.as_secs() + 1 + idle.as_secs().div_ceil(4).min(5)
}

/// A refused `/mcp` body, in the shape of the other refusals: `{"error": "..."}`.
pub(crate) fn body_refused(e: &BodyError) -> Response {
    json_response(e.status(), json!({"error": e.to_string()}))
}
