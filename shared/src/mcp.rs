//! The one MCP JSON-RPC dispatcher, as a pure async function over a [`ToolHost`].
//!
//! Owns method routing for both protocol eras (SPEC §3.1): the stateless 2026-07-28
//! revision (`server/discover`, per-request `_meta`, `resultType`, `ttlMs`/`cacheScope`) and
//! the session revisions (`initialize` and friends). Transports (stdio, HTTP, the Worker)
//! frame messages, decide the era and own sessions; they all call [`Dispatcher::request`].
//! No runtime, no I/O: tool calls go to the host.

use std::future::Future;

use rmcp::model::CallToolResult;
use serde_json::{Map, Value, json};

use crate::catalogue::{DASHBOARD_URI, MCP_APP_MIME, ToolNames, UI_EXTENSION, tools};
use crate::maybe_send::{MaybeSend, MaybeSync};
use crate::result::validation_error;
use crate::validate::{ToolCall, ValidationError, parse_tool_call};

/// `_meta` key of inventory results naming the exec tool (configurable with --tool-name),
/// for the dashboard.
pub const EXEC_TOOL_META: &str = "mcp-sandbox/execTool";

/// The stateless revision.
pub const MODERN_VERSION: &str = "2026-07-28";
/// Session revisions accepted by `initialize`, oldest first.
pub const LEGACY_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// The newest session revision.
pub const LATEST_LEGACY: &str = "2025-11-25";
/// `_meta` key carrying the protocol version of a modern request.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key carrying the server identity on modern results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// JSON-RPC and MCP error codes.
pub mod codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const RESOURCE_NOT_FOUND_LEGACY: i64 = -32002;
    pub const HEADER_MISMATCH: i64 = -32020;
    pub const MISSING_CAPABILITY: i64 = -32021;
    pub const UNSUPPORTED_VERSION: i64 = -32022;
}

/// Every revision this server speaks, oldest first.
pub fn supported_versions() -> Vec<&'static str> {
    let mut v = LEGACY_VERSIONS.to_vec();
    v.push(MODERN_VERSION);
    v
}

/// The protocol era of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Era {
    /// A session revision, negotiated by `initialize`.
    Legacy(String),
    /// The stateless revision.
    Modern,
}

/// The version `initialize` answers with: the client's if we know it, else our newest.
pub fn negotiate(requested: Option<&str>) -> &'static str {
    requested
        .and_then(|r| LEGACY_VERSIONS.iter().copied().find(|v| *v == r))
        .unwrap_or(LATEST_LEGACY)
}

/// A parsed incoming JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// A response from the client (we send no requests, so these are ignored).
    Response,
}

/// Parses one JSON-RPC message. `Err` holds the error response to send back.
pub fn parse_message(bytes: &[u8]) -> Result<Incoming, Value> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        error_response(
            Value::Null,
            codes::PARSE_ERROR,
            &format!("parse error: {e}"),
            None,
        )
    })?;
    parse_value(value)
}

/// Parses an already-decoded JSON-RPC message.
pub fn parse_value(value: Value) -> Result<Incoming, Value> {
    let Value::Object(mut obj) = value else {
        let msg = if value.is_array() {
            "batches are not supported: send one JSON-RPC message per request"
        } else {
            "a JSON-RPC message must be an object"
        };
        return Err(error_response(
            Value::Null,
            codes::INVALID_REQUEST,
            msg,
            None,
        ));
    };
    let id = obj.remove("id");
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(error_response(
            id.unwrap_or(Value::Null),
            codes::INVALID_REQUEST,
            "`jsonrpc` must be \"2.0\"",
            None,
        ));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => {
            return Err(error_response(
                id.unwrap_or(Value::Null),
                codes::INVALID_REQUEST,
                "`method` must be a string",
                None,
            ));
        }
        None if obj.contains_key("result") || obj.contains_key("error") => {
            return Ok(Incoming::Response);
        }
        None => {
            return Err(error_response(
                id.unwrap_or(Value::Null),
                codes::INVALID_REQUEST,
                "missing `method`",
                None,
            ));
        }
    };
    let params = obj.remove("params");
    if let Some(p) = &params
        && !p.is_object()
    {
        return Err(error_response(
            id.unwrap_or(Value::Null),
            codes::INVALID_REQUEST,
            "`params` must be an object",
            None,
        ));
    }
    match id {
        None => Ok(Incoming::Notification { method, params }),
        Some(id @ (Value::String(_) | Value::Number(_))) => {
            Ok(Incoming::Request { id, method, params })
        }
        Some(_) => Err(error_response(
            Value::Null,
            codes::INVALID_REQUEST,
            "`id` must be a string or a number",
            None,
        )),
    }
}

/// A JSON-RPC error response.
pub fn error_response(id: Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({ "code": code, "message": message });
    if let Some(data) = data {
        error["data"] = data;
    }
    json!({ "jsonrpc": "2.0", "id": id, "error": error })
}

/// A JSON-RPC success response.
pub fn success_response(id: Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// The error for a modern request naming a version we do not speak.
pub fn unsupported_version(id: Value, requested: &str) -> Value {
    error_response(
        id,
        codes::UNSUPPORTED_VERSION,
        &format!("unsupported protocol version {requested:?}"),
        Some(json!({ "supported": supported_versions(), "requested": requested })),
    )
}

/// Methods of the session revisions that 2026-07-28 removed.
const REMOVED_IN_MODERN: &[&str] = &[
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// Log levels of `logging/setLevel`.
const LOG_LEVELS: &[&str] = &[
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// `_meta` key carrying a modern request's client capabilities.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// Checks the per-request `_meta` a 2026-07-28 request must carry: the protocol version
/// (a supported one) and the client capabilities. `Err` holds the error response; over
/// HTTP it goes out with status 400.
pub fn check_modern_meta(id: &Value, params: Option<&Value>) -> Result<(), Value> {
    let invalid = |message: &str| {
        Err(error_response(
            id.clone(),
            codes::INVALID_PARAMS,
            message,
            None,
        ))
    };
    let Some(meta) = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
    else {
        return invalid(
            "a 2026-07-28 request needs `params._meta` with `io.modelcontextprotocol/protocolVersion` and `io.modelcontextprotocol/clientCapabilities`",
        );
    };
    match meta.get(META_PROTOCOL_VERSION) {
        Some(Value::String(v)) if v == MODERN_VERSION => {}
        Some(Value::String(v)) => return Err(unsupported_version(id.clone(), v)),
        Some(_) => {
            return invalid("`_meta.io.modelcontextprotocol/protocolVersion` must be a string");
        }
        None => return invalid("`_meta.io.modelcontextprotocol/protocolVersion` is required"),
    }
    if !meta
        .get(META_CLIENT_CAPABILITIES)
        .is_some_and(Value::is_object)
    {
        return invalid(
            "`_meta.io.modelcontextprotocol/clientCapabilities` (an object) is required",
        );
    }
    Ok(())
}

/// Per-call context handed to the host.
#[derive(Debug, Clone, PartialEq)]
pub struct CallContext {
    pub request_id: Value,
    pub progress_token: Option<Value>,
    pub era: Era,
}

/// Runs validated tool calls. Implemented by the local server and the Worker.
pub trait ToolHost: MaybeSync {
    fn call_tool(
        &self,
        call: ToolCall,
        ctx: &CallContext,
    ) -> impl Future<Output = CallToolResult> + MaybeSend;
}

/// Static server configuration for the dispatcher.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub name: String,
    pub version: String,
    pub names: ToolNames,
    pub exec_description: String,
    pub instructions: Option<String>,
    /// The dashboard page served as the MCP App resource, when lifecycle tools are on.
    pub dashboard_html: Option<String>,
}

/// Routes requests to results. Cheap to share; holds the serialized catalogue.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    config: ServerConfig,
    tools: Value,
}

const LIST_TTL_MS: u64 = 300_000;

impl Dispatcher {
    pub fn new(config: ServerConfig) -> Self {
        let tools = serde_json::to_value(tools(&config.names, &config.exec_description))
            .unwrap_or_else(|_| json!([]));
        Self { config, tools }
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The tool list as served by `tools/list`.
    pub fn tool_list(&self) -> &Value {
        &self.tools
    }

    fn server_info(&self) -> Value {
        json!({ "name": self.config.name, "version": self.config.version })
    }

    fn capabilities(&self) -> Value {
        // No prompts are offered; declaring the (empty) capability keeps `prompts/list`
        // honest for clients that call it anyway.
        let mut caps =
            json!({ "tools": { "listChanged": false }, "prompts": { "listChanged": false } });
        if self.config.names.lifecycle {
            caps["resources"] = json!({ "listChanged": false, "subscribe": false });
            caps["extensions"] = json!({ UI_EXTENSION: { "mimeTypes": [MCP_APP_MIME] } });
        }
        caps
    }

    /// The result of `initialize` for the negotiated version.
    pub fn initialize_result(&self, version: &str) -> Value {
        let mut r = json!({
            "protocolVersion": version,
            "capabilities": self.capabilities(),
            "serverInfo": self.server_info(),
        });
        if let Some(i) = &self.config.instructions {
            r["instructions"] = json!(i);
        }
        r
    }

    fn finish(&self, era: &Era, mut result: Value) -> Value {
        if let Value::Object(obj) = &mut result {
            match era {
                Era::Legacy(_) => {
                    obj.remove("resultType");
                }
                Era::Modern => {
                    obj.insert("resultType".into(), json!("complete"));
                    let meta = obj
                        .entry("_meta")
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(meta) = meta {
                        meta.insert(META_SERVER_INFO.into(), self.server_info());
                    }
                }
            }
        }
        result
    }

    /// Adds the 2026-07-28 caching hints to a list result.
    fn cacheable(&self, era: &Era, mut result: Value) -> Value {
        if *era == Era::Modern {
            result["ttlMs"] = json!(LIST_TTL_MS);
            result["cacheScope"] = json!("public");
        }
        result
    }

    fn resource_missing(&self, era: &Era, id: Value, uri: &str) -> Value {
        let code = match era {
            Era::Legacy(_) => codes::RESOURCE_NOT_FOUND_LEGACY,
            Era::Modern => codes::INVALID_PARAMS,
        };
        error_response(
            id,
            code,
            &format!("resource not found: {uri}"),
            Some(json!({ "uri": uri })),
        )
    }

    /// Handles one request and returns the full JSON-RPC response.
    pub async fn request<H: ToolHost>(
        &self,
        host: &H,
        era: &Era,
        id: Value,
        method: &str,
        params: Option<&Value>,
    ) -> Value {
        if *era == Era::Modern {
            if let Err(e) = check_modern_meta(&id, params) {
                return e;
            }
            if REMOVED_IN_MODERN.contains(&method) {
                return error_response(
                    id,
                    codes::METHOD_NOT_FOUND,
                    &format!(
                        "method not found: {method} does not exist in protocol {MODERN_VERSION}"
                    ),
                    None,
                );
            }
        }
        let result = match method {
            "initialize" => {
                let requested = params
                    .and_then(|p| p.get("protocolVersion"))
                    .and_then(Value::as_str);
                return success_response(id, self.initialize_result(negotiate(requested)));
            }
            "ping" => json!({}),
            "logging/setLevel" => {
                let level = params.and_then(|p| p.get("level")).and_then(Value::as_str);
                if !level.is_some_and(|l| LOG_LEVELS.contains(&l)) {
                    return error_response(
                        id,
                        codes::INVALID_PARAMS,
                        &format!("`level` must be one of {}", LOG_LEVELS.join(", ")),
                        None,
                    );
                }
                // This server sends no log notifications, so every level is honoured.
                json!({})
            }
            "prompts/list" => self.cacheable(era, json!({ "prompts": [] })),
            "prompts/get" => {
                let name = params
                    .and_then(|p| p.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                return error_response(
                    id,
                    codes::INVALID_PARAMS,
                    &format!("unknown prompt {name:?}: this server offers no prompts"),
                    None,
                );
            }
            "server/discover" => {
                let mut r = json!({
                    "supportedVersions": supported_versions(),
                    "capabilities": self.capabilities(),
                    "ttlMs": LIST_TTL_MS,
                    "cacheScope": "public",
                });
                if let Some(i) = &self.config.instructions {
                    r["instructions"] = json!(i);
                }
                r
            }
            "tools/list" => {
                let mut r = json!({ "tools": self.tools });
                if *era == Era::Modern {
                    r["ttlMs"] = json!(LIST_TTL_MS);
                    r["cacheScope"] = json!("public");
                }
                r
            }
            "resources/list" => {
                let mut resources = Vec::new();
                if self.config.names.lifecycle && self.config.dashboard_html.is_some() {
                    resources.push(json!({
                        "uri": DASHBOARD_URI,
                        "name": "computers",
                        "title": "Sandbox Computer Dashboard",
                        "mimeType": MCP_APP_MIME,
                        "_meta": { "ui": { "csp": {}, "prefersBorder": true } },
                    }));
                }
                let mut r = json!({ "resources": resources });
                if *era == Era::Modern {
                    r["ttlMs"] = json!(LIST_TTL_MS);
                    r["cacheScope"] = json!("public");
                }
                r
            }
            "resources/templates/list" => self.cacheable(era, json!({ "resourceTemplates": [] })),
            "resources/read" => {
                let uri = params
                    .and_then(|p| p.get("uri"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                match (&self.config.dashboard_html, self.config.names.lifecycle) {
                    (Some(html), true) if uri == DASHBOARD_URI => {
                        let mut r = json!({ "contents": [{
                            "uri": DASHBOARD_URI,
                            "mimeType": MCP_APP_MIME,
                            "text": html,
                            "_meta": { "ui": { "csp": {}, "prefersBorder": true } },
                        }]});
                        if *era == Era::Modern {
                            r["ttlMs"] = json!(0);
                            r["cacheScope"] = json!("public");
                        }
                        r
                    }
                    _ => return self.resource_missing(era, id, uri),
                }
            }
            "tools/call" => {
                let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
                    return error_response(
                        id,
                        codes::INVALID_PARAMS,
                        "tools/call needs `name` (a string)",
                        None,
                    );
                };
                let arguments = params.and_then(|p| p.get("arguments"));
                let result = match parse_tool_call(&self.config.names, name, arguments) {
                    Err(ValidationError::UnknownTool(n)) => {
                        return error_response(
                            id,
                            codes::INVALID_PARAMS,
                            &format!(
                                "unknown tool {n:?}; call tools/list to see the available tools"
                            ),
                            None,
                        );
                    }
                    Err(ValidationError::Invalid(message)) => validation_error(&message),
                    Ok(call) => {
                        let inventory = matches!(call, ToolCall::List | ToolCall::Dashboard);
                        let progress_token = params
                            .and_then(|p| p.get("_meta"))
                            .and_then(|m| m.get("progressToken"))
                            .cloned();
                        let ctx = CallContext {
                            request_id: id.clone(),
                            progress_token,
                            era: era.clone(),
                        };
                        let mut result = host.call_tool(call, &ctx).await;
                        if inventory && result.is_error != Some(true) {
                            // The dashboard runs commands with the exec tool, whose name is
                            // configurable (--tool-name); an MCP App cannot list tools.
                            let mut meta = result.meta.take().unwrap_or_default();
                            meta.0
                                .insert(EXEC_TOOL_META.into(), json!(self.config.names.exec));
                            result.meta = Some(meta);
                        }
                        result
                    }
                };
                serde_json::to_value(result).unwrap_or_else(|_| json!({}))
            }
            other => {
                return error_response(
                    id,
                    codes::METHOD_NOT_FOUND,
                    &format!("method not found: {other}"),
                    None,
                );
            }
        };
        success_response(id, self.finish(era, result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::structured_result;

    struct Echo;
    impl ToolHost for Echo {
        async fn call_tool(&self, call: ToolCall, ctx: &CallContext) -> CallToolResult {
            structured_result(json!({ "call": format!("{call:?}"), "id": ctx.request_id }))
        }
    }

    fn dispatcher(lifecycle: bool) -> Dispatcher {
        Dispatcher::new(ServerConfig {
            name: "t".into(),
            version: "0".into(),
            names: ToolNames::new("terminal_execute", lifecycle),
            exec_description: "d".into(),
            instructions: None,
            dashboard_html: Some("<html></html>".into()),
        })
    }

    /// Runs one request; modern requests get the `_meta` every 2026-07-28 request carries.
    fn run(d: &Dispatcher, era: Era, method: &str, mut params: Value) -> Value {
        if era == Era::Modern && params.get("_meta").is_none() {
            params["_meta"] =
                json!({META_PROTOCOL_VERSION: MODERN_VERSION, META_CLIENT_CAPABILITIES: {}});
        }
        futures_executor::block_on(d.request(&Echo, &era, json!(1), method, Some(&params)))
    }

    #[test]
    fn modern_requests_need_their_meta() {
        let d = dispatcher(false);
        for params in [
            json!({}),
            json!({"_meta": {}}),
            json!({"_meta": {META_PROTOCOL_VERSION: MODERN_VERSION}}),
            json!({"_meta": {META_CLIENT_CAPABILITIES: {}}}),
            json!({"_meta": {META_PROTOCOL_VERSION: 5, META_CLIENT_CAPABILITIES: {}}}),
        ] {
            let r = futures_executor::block_on(d.request(
                &Echo,
                &Era::Modern,
                json!(1),
                "tools/list",
                Some(&params),
            ));
            assert_eq!(r["error"]["code"], codes::INVALID_PARAMS, "{params}");
        }
        for removed in ["initialize", "ping", "logging/setLevel"] {
            let r = run(&d, Era::Modern, removed, json!({}));
            assert_eq!(r["error"]["code"], codes::METHOD_NOT_FOUND, "{removed}");
        }
        let r = run(
            &d,
            Era::Legacy(LATEST_LEGACY.into()),
            "logging/setLevel",
            json!({"level": "debug"}),
        );
        assert_eq!(r["result"], json!({}));
        let r = run(
            &d,
            Era::Legacy(LATEST_LEGACY.into()),
            "logging/setLevel",
            json!({"level": "loud"}),
        );
        assert_eq!(r["error"]["code"], codes::INVALID_PARAMS);
        let r = run(&d, Era::Modern, "resources/templates/list", json!({}));
        assert_eq!(r["result"]["cacheScope"], "public");
    }

    #[test]
    fn parse_rejects_garbage() {
        for raw in [
            &b"{"[..],
            b"[]",
            b"3",
            b"{\"jsonrpc\":\"1.0\",\"method\":\"x\",\"id\":1}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1}",
            b"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"id\":{}}",
            b"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":[1],\"id\":1}",
        ] {
            let err = parse_message(raw).unwrap_err();
            assert!(err["error"]["code"].as_i64().unwrap() <= -32600, "{err}");
        }
        assert_eq!(
            parse_message(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}")
                .unwrap(),
            Incoming::Notification {
                method: "notifications/initialized".into(),
                params: None
            }
        );
        assert_eq!(
            parse_message(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}").unwrap(),
            Incoming::Response
        );
    }

    #[test]
    fn initialize_echoes_known_versions() {
        let d = dispatcher(true);
        for v in LEGACY_VERSIONS {
            let r = run(
                &d,
                Era::Legacy((*v).into()),
                "initialize",
                json!({"protocolVersion": v}),
            );
            assert_eq!(r["result"]["protocolVersion"], *v);
        }
        let r = run(
            &d,
            Era::Legacy(LATEST_LEGACY.into()),
            "initialize",
            json!({"protocolVersion": "1999-01-01"}),
        );
        assert_eq!(r["result"]["protocolVersion"], LATEST_LEGACY);
        assert_eq!(
            r["result"]["capabilities"]["extensions"][UI_EXTENSION]["mimeTypes"][0],
            MCP_APP_MIME
        );
        let r = run(
            &dispatcher(false),
            Era::Legacy(LATEST_LEGACY.into()),
            "initialize",
            json!({}),
        );
        assert!(r["result"]["capabilities"].get("extensions").is_none());
    }

    #[test]
    fn modern_results_carry_result_type_and_cache_fields() {
        let d = dispatcher(false);
        let r = run(&d, Era::Modern, "server/discover", json!({}));
        assert_eq!(r["result"]["resultType"], "complete");
        assert!(
            r["result"]["supportedVersions"]
                .as_array()
                .unwrap()
                .contains(&json!(MODERN_VERSION))
        );
        assert_eq!(r["result"]["_meta"][META_SERVER_INFO]["name"], "t");
        let r = run(&d, Era::Modern, "tools/list", json!({}));
        assert_eq!(r["result"]["cacheScope"], "public");
        assert!(r["result"]["ttlMs"].is_u64());
        let r = run(
            &d,
            Era::Legacy(LATEST_LEGACY.into()),
            "tools/list",
            json!({}),
        );
        assert!(r["result"].get("resultType").is_none());
        assert!(r["result"].get("ttlMs").is_none());
    }

    #[test]
    fn modern_version_mismatch_is_refused() {
        let d = dispatcher(false);
        let r = run(
            &d,
            Era::Modern,
            "tools/list",
            json!({"_meta": {META_PROTOCOL_VERSION: "2030-01-01"}}),
        );
        assert_eq!(r["error"]["code"], codes::UNSUPPORTED_VERSION);
        assert_eq!(r["error"]["data"]["requested"], "2030-01-01");
    }

    #[test]
    fn tool_calls_validate_before_the_host() {
        let d = dispatcher(false);
        let r = run(
            &d,
            Era::Modern,
            "tools/call",
            json!({"name": "terminal_execute", "arguments": {}}),
        );
        assert_eq!(r["result"]["isError"], true);
        assert!(r["result"].get("structuredContent").is_none());
        let r = run(
            &d,
            Era::Modern,
            "tools/call",
            json!({"name": "terminal_execute", "arguments": {"command": "ls"}}),
        );
        assert_eq!(r["result"]["isError"], false);
        assert_eq!(r["result"]["resultType"], "complete");
        let r = run(
            &d,
            Era::Modern,
            "tools/call",
            json!({"name": "computer_list"}),
        );
        assert_eq!(r["error"]["code"], codes::INVALID_PARAMS);
        let r = run(&d, Era::Modern, "tools/call", json!({}));
        assert_eq!(r["error"]["code"], codes::INVALID_PARAMS);
        let r = run(&d, Era::Modern, "nope/nope", json!({}));
        assert_eq!(r["error"]["code"], codes::METHOD_NOT_FOUND);
    }

    #[test]
    fn dashboard_resource() {
        let d = dispatcher(true);
        let r = run(
            &d,
            Era::Legacy(LATEST_LEGACY.into()),
            "resources/read",
            json!({"uri": DASHBOARD_URI}),
        );
        assert_eq!(r["result"]["contents"][0]["mimeType"], MCP_APP_MIME);
        assert_eq!(
            r["result"]["contents"][0]["_meta"],
            json!({"ui": {"csp": {}, "prefersBorder": true}})
        );
        let r = run(
            &d,
            Era::Legacy(LATEST_LEGACY.into()),
            "resources/read",
            json!({"uri": "ui://x"}),
        );
        assert_eq!(r["error"]["code"], codes::RESOURCE_NOT_FOUND_LEGACY);
        let r = run(&d, Era::Modern, "resources/read", json!({"uri": "ui://x"}));
        assert_eq!(r["error"]["code"], codes::INVALID_PARAMS);
    }

    /// Structured fuzzing: random bytes and byte-level mutations of valid messages never
    /// panic the parser or the dispatcher, and every request gets exactly one response.
    #[test]
    fn fuzz_parser_and_dispatcher() {
        let seeds: Vec<Vec<u8>> = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}),
            json!({"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "terminal_execute",
                "arguments": {"command": "ls", "timeout": 5, "computer_id": "a-b", "stdin": "x"}}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "computer_create",
                "arguments": {"computer_id": "x", "temporary": false}, "_meta": {META_PROTOCOL_VERSION: MODERN_VERSION}}}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": DASHBOARD_URI}}),
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}),
        ]
        .iter()
        .map(|v| v.to_string().into_bytes())
        .collect();
        let d = dispatcher(true);
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let alphabet = b"{}[]\":,0123456789-.eE+truefalsnl \\u\x00\xff\xc3\xa9abc";
        for i in 0..3000 {
            let mut msg = if i % 4 == 0 {
                (0..(next() % 64))
                    .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                    .collect()
            } else {
                seeds[(next() % seeds.len() as u64) as usize].clone()
            };
            for _ in 0..(next() % 4) {
                if msg.is_empty() {
                    break;
                }
                let at = (next() % msg.len() as u64) as usize;
                match next() % 3 {
                    0 => msg[at] = alphabet[(next() % alphabet.len() as u64) as usize],
                    1 => {
                        msg.remove(at);
                    }
                    _ => msg.insert(at, alphabet[(next() % alphabet.len() as u64) as usize]),
                }
            }
            match parse_message(&msg) {
                Err(resp) => assert!(resp["error"]["code"].is_i64()),
                Ok(Incoming::Request { id, method, params }) => {
                    for era in [Era::Modern, Era::Legacy(LATEST_LEGACY.into())] {
                        let r = futures_executor::block_on(d.request(
                            &Echo,
                            &era,
                            id.clone(),
                            &method,
                            params.as_ref(),
                        ));
                        assert!(r.get("result").is_some() ^ r.get("error").is_some(), "{r}");
                        assert_eq!(r["id"], id);
                    }
                }
                Ok(_) => {}
            }
        }
    }
}
