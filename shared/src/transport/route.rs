//! The Streamable HTTP state machine of `/mcp`, sans I/O, for both HTTP servers: which
//! era a request is, what it asks of the server's sessions, and every answer that does not
//! need the dispatcher. Driven with plain request data ([`Headers`] and the body); the
//! local server (axum) and the Worker only keep their sessions and write the answers.
//!
//! - POST with `initialize` (and no 2026-07-28 version header) opens a legacy session.
//! - POST with `Mcp-Session-Id` is a message inside that session.
//! - Any other POST is stateless 2026-07-28 and must carry its version and headers.
//! - DELETE with `Mcp-Session-Id` ends the session; other methods are refused with 405.

use super::{Refused, check_modern_headers, check_stateless_version};
use crate::mcp::{
    Incoming, MODERN_VERSION, Params, RequestId, Response, check_modern_meta, codes, negotiate,
    parse_message,
};

/// The request headers the state machine reads (values as sent).
#[derive(Debug, Clone, Copy, Default)]
pub struct Headers<'a> {
    pub session_id: Option<&'a str>,
    pub protocol_version: Option<&'a str>,
    pub mcp_method: Option<&'a str>,
    pub mcp_name: Option<&'a str>,
    pub accept: Option<&'a str>,
}

impl<'a> Headers<'a> {
    /// The headers from a lookup by lower-case name.
    pub fn from_lookup(get: impl Fn(&'static str) -> Option<&'a str>) -> Self {
        Self {
            session_id: get("mcp-session-id"),
            protocol_version: get("mcp-protocol-version"),
            mcp_method: get("mcp-method"),
            mcp_name: get("mcp-name"),
            accept: get("accept"),
        }
    }

    /// The header names the state machine reads, for servers that copy them out first.
    pub const NAMES: [&'static str; 5] = [
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "accept",
    ];
}

/// A request to run: its id, method and params.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: RequestId,
    pub method: String,
    pub params: Params,
    /// The client reads event streams and asked for progress: answer with SSE.
    pub stream: bool,
}

/// What a message inside a legacy session asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum InSession {
    /// Run it in the session (answer 200).
    Call(Box<Call>),
    /// `notifications/cancelled`: stop that request if it runs (answer 202).
    Cancel { request_id: RequestId },
    /// Another notification, or a response: nothing to do (answer 202).
    Accept,
}

/// What a POST to `/mcp` asks of the server.
#[derive(Debug, Clone, PartialEq)]
pub enum Post {
    /// Answer with this status and JSON-RPC body; nothing else happens.
    Refuse(Refused),
    /// Nothing to run (a stateless notification or response): 202, empty.
    Accept,
    /// Open a legacy session at `version`, answer `initialize` (200, with the new
    /// `Mcp-Session-Id`).
    Initialize {
        id: RequestId,
        version: &'static str,
    },
    /// A message of the session `sid`; an unknown `sid` gets [`unknown_session`].
    Session { sid: String, message: InSession },
    /// A JSON-RPC batch inside the session `sid`: each message, or the error response of
    /// one that is not a message. Only a 2025-03-26 session takes batches (the server
    /// checks its revision with [`batch_refused`]); they are answered as one JSON array
    /// of the requests' responses (202 when there is none).
    SessionBatch {
        sid: String,
        messages: Vec<Result<InSession, Response>>,
    },
    /// A stateless 2026-07-28 request: run it, answer with [`super::modern_status`].
    Stateless(Box<Call>),
}

/// Does the client read event streams, and ask for progress?
fn wants_stream(headers: &Headers<'_>, params: &Params) -> bool {
    let accepts = headers
        .accept
        .is_some_and(|a| a.contains("text/event-stream"));
    accepts && params.progress_token().is_some()
}

fn call(headers: &Headers<'_>, id: RequestId, method: String, params: Params) -> Call {
    let stream = wants_stream(headers, &params);
    Call {
        id,
        method,
        params,
        stream,
    }
}

/// The one revision whose sessions take JSON-RPC batches.
pub const BATCH_VERSION: &str = "2025-03-26";

/// The refusal of a batch in a session of `version`, unless that revision takes batches.
pub fn batch_refused(version: &str) -> Option<Refused> {
    (version != BATCH_VERSION).then(|| {
        (
            400,
            Response::error(
                None,
                codes::INVALID_REQUEST,
                format!(
                    "batches belong to protocol {BATCH_VERSION}; this session speaks {version}: send one JSON-RPC message per request"
                ),
            ),
        )
    })
}

/// A session's message as the session acts on it.
fn in_session(headers: &Headers<'_>, msg: Incoming, stream: bool) -> InSession {
    match msg {
        Incoming::Request { id, method, params } => {
            let mut c = call(headers, id, method, params);
            c.stream &= stream;
            InSession::Call(Box::new(c))
        }
        Incoming::Notification { method, params } if method == "notifications/cancelled" => {
            match params.request_id {
                crate::mcp::Field::Is(request_id) => InSession::Cancel { request_id },
                _ => InSession::Accept,
            }
        }
        Incoming::Notification { .. } | Incoming::Response => InSession::Accept,
    }
}

/// A session's version header: absent, or one of the session revisions (else a 400).
fn session_version(headers: &Headers<'_>, id: Option<&RequestId>) -> Result<(), Refused> {
    match headers.protocol_version {
        Some(v) if !crate::mcp::LEGACY_VERSIONS.contains(&v) => {
            Err((400, crate::mcp::unsupported_version(id.cloned(), v)))
        }
        _ => Ok(()),
    }
}

/// Decides a POST to `/mcp` (the caller is already authenticated).
pub fn post(headers: &Headers<'_>, body: &[u8]) -> Post {
    if let Some(sid) = headers.session_id
        && body.trim_ascii_start().starts_with(b"[")
    {
        if let Err(refused) = session_version(headers, None) {
            return Post::Refuse(refused);
        }
        let raws: Vec<Box<serde_json::value::RawValue>> = match serde_json::from_slice(body) {
            Ok(r) => r,
            Err(e) => {
                let resp = Response::error(None, codes::PARSE_ERROR, format!("parse error: {e}"));
                return Post::Refuse((400, resp));
            }
        };
        if raws.is_empty() {
            let resp = Response::error(
                None,
                codes::INVALID_REQUEST,
                "an empty batch: send at least one JSON-RPC message",
            );
            return Post::Refuse((400, resp));
        }
        let messages = raws
            .iter()
            .map(|raw| parse_message(raw.get().as_bytes()).map(|m| in_session(headers, m, false)))
            .collect();
        return Post::SessionBatch {
            sid: sid.to_owned(),
            messages,
        };
    }
    let msg = match parse_message(body) {
        Ok(m) => m,
        Err(resp) => return Post::Refuse((400, resp)),
    };
    let modern = headers.protocol_version == Some(MODERN_VERSION);
    if let Incoming::Request { id, method, params } = &msg
        && method == "initialize"
        && !modern
    {
        let requested = params.protocol_version.as_str();
        return Post::Initialize {
            id: id.clone(),
            version: negotiate(requested),
        };
    }
    if let Some(sid) = headers.session_id {
        // Inside a session the header is optional (absent means 2025-03-26), but one this
        // server does not speak is a 400 (Streamable HTTP; issue 45).
        let id = match &msg {
            Incoming::Request { id, .. } => Some(id),
            _ => None,
        };
        if let Err(refused) = session_version(headers, id) {
            return Post::Refuse(refused);
        }
        return Post::Session {
            sid: sid.to_owned(),
            message: in_session(headers, msg, true),
        };
    }
    let id = match &msg {
        Incoming::Request { id, .. } => Some(id),
        _ => None,
    };
    if let Err(refused) = check_stateless_version(headers.protocol_version, id) {
        return Post::Refuse(refused);
    }
    match msg {
        Incoming::Response | Incoming::Notification { .. } => Post::Accept,
        Incoming::Request { id, method, params } => {
            let lookup = |n: &str| match n {
                "mcp-method" => headers.mcp_method,
                "mcp-name" => headers.mcp_name,
                _ => None,
            };
            if let Err(refused) = check_modern_headers(lookup, &id, &method, &params) {
                return Post::Refuse(refused);
            }
            if let Err(body) = check_modern_meta(&id, &params) {
                return Post::Refuse((400, body));
            }
            Post::Stateless(Box::new(call(headers, id, method, params)))
        }
    }
}

/// The answer to a message naming a session this server does not have (never opened,
/// expired, closed, or another caller's).
pub fn unknown_session() -> Refused {
    (
        404,
        Response::error(
            None,
            codes::INVALID_REQUEST,
            "unknown or expired session: initialize again",
        ),
    )
}

/// Decides a DELETE of `/mcp`: the session to end, or the refusal.
pub fn delete(headers: &Headers<'_>) -> Result<String, Refused> {
    match headers.session_id {
        Some(sid) if !sid.is_empty() => Ok(sid.to_owned()),
        _ => Err((
            400,
            Response::error(
                None,
                codes::INVALID_REQUEST,
                "missing Mcp-Session-Id: DELETE ends a legacy session and needs its id",
            ),
        )),
    }
}

/// The `Allow` header of `/mcp`.
pub const ALLOW: &str = "POST, DELETE";

/// The answer to any other method on `/mcp` (send it with `Allow:` [`ALLOW`]).
pub fn method_not_allowed(method: &str) -> (u16, serde_json::Value) {
    (
        405,
        serde_json::json!({"error": format!(
            "{method} is not supported on /mcp: this server sends no unsolicited messages; use POST (or DELETE to end a session)"
        )}),
    )
}

#[cfg(test)]
mod tests;
