//! The Worker itself (wasm32 only): routes, MCP over Streamable HTTP for both eras with the
//! shared dispatcher, the tool host that forwards typed operations to executors or
//! providers, and the per-team Durable Object (`Team`) holding the inventory, placement,
//! sessions and the reaping alarm. Pure rules live in the native modules of the crate.

mod config;
mod files;
mod host;
mod log;
mod place;
mod routes;
mod store;
mod tasks;
mod team;
mod transport;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use shared::CallToolResult;
use shared::answer::Answer;
use shared::catalogue::{DASHBOARD_URI, EXEC_TOOL, ToolNames, usage_text};
use shared::executor_api::{ApiError, ErrorCode};
use shared::files::WriteAnswer;
use shared::ids::slug_from_random;
use shared::mcp::{CallContext, Dispatcher, Era, ServerConfig, ToolHost, codes};
use shared::op::{Op, OpHandler};
use shared::providers::{HttpRequest, HttpResponse, HttpTransport, TransportError};
use shared::result::operation_error;
use shared::transport::modern_status;
use worker::{
    Context, Date, DurableObject, Env, Fetch, Headers, Method, Request, RequestInit, Response,
    Result, SqlStorageValue, State, durable_object, event,
};

use crate::auth::{Auth, Caller, Settings};
use crate::cloud::{self, Cloud, EdgePlace};
use crate::error::GatewayError;
use crate::exec_token;
use crate::inventory::{self, Record};
use shared::providers::computers::e2b::E2bComputers;
use shared::providers::computers::fly::FlyComputers;

pub(crate) use config::*;
pub(crate) use host::*;
pub(crate) use transport::*;

pub(crate) fn var(env: &Env, name: &str) -> Option<String> {
    env.var(name)
        .ok()
        .map(|v| v.to_string())
        .or_else(|| env.secret(name).ok().map(|v| v.to_string()))
        .filter(|v| !v.trim().is_empty())
}

pub(crate) fn now_ms() -> u64 {
    Date::now().as_millis()
}

pub(crate) fn random_hex() -> String {
    let mut buf = [0u8; 16];
    let _ = getrandom::fill(&mut buf);
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    let _ = getrandom::fill(&mut buf);
    u64::from_le_bytes(buf)
}

/// A JSON answer, written by `shared::json`.
pub(crate) fn json_response(status: u16, body: &Value) -> Result<Response> {
    bytes_response(status, shared::json::to_vec(body))
}

/// A JSON-RPC answer (its id echoed exactly as sent).
pub(crate) fn rpc_response(status: u16, body: &shared::mcp::Response) -> Result<Response> {
    bytes_response(status, body.to_vec())
}

/// A JSON-RPC error answer with no id (the request's could not be read, or never mattered).
pub(crate) fn rpc_error(status: u16, message: String) -> Result<Response> {
    rpc_response(
        status,
        &shared::mcp::Response::error(None, codes::INTERNAL_ERROR, message),
    )
}

/// A JSON answer of a typed body, encoded once.
pub(crate) fn typed_response<T: Serialize>(status: u16, body: &T) -> Result<Response> {
    let bytes = serde_json::to_vec(body).map_err(|e| worker::Error::RustError(e.to_string()))?;
    bytes_response(status, bytes)
}

pub(crate) fn bytes_response(status: u16, bytes: Vec<u8>) -> Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    Ok(Response::from_bytes(bytes)?
        .with_status(status)
        .with_headers(headers))
}

/// `{"error": message}`, the body of every refusal outside JSON-RPC.
#[derive(Serialize)]
pub(crate) struct ErrorBody<'a> {
    pub(crate) error: &'a str,
    /// What the caller may be told of why (a 401's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<&'a str>,
}

/// A refusal with `status` and `{"error": message}`.
pub(crate) fn refusal(status: u16, message: &str) -> Result<Response> {
    let body = ErrorBody {
        error: message,
        detail: None,
    };
    typed_response(status, &body)
}
