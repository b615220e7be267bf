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
use crate::op::{Op, parse_tool_call};
use crate::result::{operation_error, validation_error};
use crate::tasks::{self, TaskMethod};
use crate::validate::ValidationError;

pub use crate::jsonrpc::{
    AnObject, ClientCapabilities, Field, Incoming, Meta, Outcome, Params, ProgressNote,
    ProgressToken, RequestId, Response, RpcError, batch_to_vec, codes, parse_message,
};

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

/// The error for a modern request naming a version we do not speak.
pub fn unsupported_version(id: Option<RequestId>, requested: &str) -> Response {
    Response::error(
        id,
        codes::UNSUPPORTED_VERSION,
        format!("unsupported protocol version {requested:?}"),
    )
    .with_data(json!({ "supported": supported_versions(), "requested": requested }))
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
pub fn check_modern_meta(id: &RequestId, params: &Params) -> Result<(), Response> {
    let invalid = |message: &str| {
        Err(Response::error(
            Some(id.clone()),
            codes::INVALID_PARAMS,
            message,
        ))
    };
    let Some(meta) = params.meta() else {
        return invalid(
            "a 2026-07-28 request needs `params._meta` with `io.modelcontextprotocol/protocolVersion` and `io.modelcontextprotocol/clientCapabilities`",
        );
    };
    match &meta.protocol_version {
        Field::Is(v) if v == MODERN_VERSION => {}
        Field::Is(v) => return Err(unsupported_version(Some(id.clone()), v)),
        Field::Other => {
            return invalid("`_meta.io.modelcontextprotocol/protocolVersion` must be a string");
        }
        Field::Absent => {
            return invalid("`_meta.io.modelcontextprotocol/protocolVersion` is required");
        }
    }
    if meta.client_capabilities.get().is_none() {
        return invalid(
            "`_meta.io.modelcontextprotocol/clientCapabilities` (an object) is required",
        );
    }
    Ok(())
}

/// Per-call context handed to the host.
#[derive(Debug, Clone, PartialEq)]
pub struct CallContext {
    pub request_id: RequestId,
    pub progress_token: Option<ProgressToken>,
    pub era: Era,
}

/// What a `tools/call` from a client that declared the Tasks extension answered.
#[derive(Debug)]
pub enum TaskAnswer {
    /// The call's own result.
    Complete(CallToolResult),
    /// A `CreateTaskResult` ([`tasks::Task::created`]).
    Task(tasks::TaskView),
}

/// Runs validated tool calls. Implemented by the local server and the Worker.
pub trait ToolHost: MaybeSync {
    fn call_tool(
        &self,
        call: Op,
        ctx: &CallContext,
    ) -> impl Future<Output = CallToolResult> + MaybeSend;

    /// A `terminal_execute` whose client declared the Tasks extension: the host may answer
    /// with a task. Asked only where [`ServerConfig::tasks`] is set.
    fn call_tool_as_task(
        &self,
        call: Op,
        ctx: &CallContext,
    ) -> impl Future<Output = TaskAnswer> + MaybeSend {
        async move { TaskAnswer::Complete(self.call_tool(call, ctx).await) }
    }

    /// `tasks/get` (the `DetailedTask`), `tasks/update` and `tasks/cancel` (`{}`); `Err`
    /// becomes a JSON-RPC error (an unknown task).
    fn task(
        &self,
        method: TaskMethod,
        task_id: &str,
        ctx: &CallContext,
    ) -> impl Future<Output = Result<tasks::TaskReply, tasks::TaskError>> + MaybeSend {
        let _ = (method, ctx);
        let unknown = tasks::unknown_task(task_id);
        async move { Err(unknown) }
    }
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
    /// The Tasks extension is served (over jobs: needs the `jobs` group and a host that
    /// keeps tasks).
    pub tasks: bool,
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

    fn serves_tasks(&self) -> bool {
        self.config.tasks && self.config.names.jobs
    }

    /// Adds the server identity to a `CreateTaskResult` (its `resultType` stays `task`).
    fn finish_task(&self, created: tasks::TaskView) -> Value {
        let mut created = created.to_value();
        created["_meta"] = json!({ META_SERVER_INFO: self.server_info() });
        created
    }

    /// Answers `tasks/get`, `tasks/update` and `tasks/cancel` (2026-07-28 only).
    async fn task_request<H: ToolHost>(
        &self,
        host: &H,
        era: &Era,
        id: RequestId,
        method: TaskMethod,
        params: &Params,
    ) -> Response {
        let task_id = match tasks::task_id_param(params) {
            Ok(t) => t,
            Err(e) => return Response::error(Some(id), codes::INVALID_PARAMS, e.to_string()),
        };
        let ctx = CallContext {
            request_id: id.clone(),
            progress_token: None,
            era: era.clone(),
        };
        match host.task(method, task_id, &ctx).await {
            Ok(reply) => Response::success(id, self.finish(era, reply.to_value())),
            Err(e) => Response::error(Some(id), codes::INVALID_PARAMS, e.to_string())
                .with_data(json!({ "taskId": task_id })),
        }
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

    fn resource_missing(&self, era: &Era, id: RequestId, uri: &str) -> Response {
        let code = match era {
            Era::Legacy(_) => codes::RESOURCE_NOT_FOUND_LEGACY,
            Era::Modern => codes::INVALID_PARAMS,
        };
        Response::error(Some(id), code, format!("resource not found: {uri}"))
            .with_data(json!({ "uri": uri }))
    }

    /// Handles one request and returns the full JSON-RPC response.
    pub async fn request<H: ToolHost>(
        &self,
        host: &H,
        era: &Era,
        id: RequestId,
        method: &str,
        params: &Params,
    ) -> Response {
        if *era == Era::Modern {
            if let Err(e) = check_modern_meta(&id, params) {
                return e;
            }
            if REMOVED_IN_MODERN.contains(&method) {
                return Response::error(
                    Some(id),
                    codes::METHOD_NOT_FOUND,
                    format!(
                        "method not found: {method} does not exist in protocol {MODERN_VERSION}"
                    ),
                );
            }
        }
        if let Some(task_method) = TaskMethod::from_method(method)
            && *era == Era::Modern
            && self.serves_tasks()
        {
            return self.task_request(host, era, id, task_method, params).await;
        }
        let result = match method {
            "initialize" => {
                let requested = params.protocol_version.as_str();
                return Response::success(id, self.initialize_result(negotiate(requested)));
            }
            "ping" => json!({}),
            "logging/setLevel" => {
                let level = params.level.as_str();
                if !level.is_some_and(|l| LOG_LEVELS.contains(&l)) {
                    return Response::error(
                        Some(id),
                        codes::INVALID_PARAMS,
                        format!("`level` must be one of {}", LOG_LEVELS.join(", ")),
                    );
                }
                // This server sends no log notifications, so every level is honoured.
                json!({})
            }
            "prompts/list" => self.cacheable(era, json!({ "prompts": [] })),
            "prompts/get" => {
                let name = params.name.as_str().unwrap_or("");
                return Response::error(
                    Some(id),
                    codes::INVALID_PARAMS,
                    format!("unknown prompt {name:?}: this server offers no prompts"),
                );
            }
            "server/discover" => {
                let mut caps = self.capabilities();
                // Tasks are a 2026-07-28 extension: never offered to a session revision.
                if self.serves_tasks() {
                    caps["extensions"][tasks::EXTENSION] = json!({});
                }
                let mut r = json!({
                    "supportedVersions": supported_versions(),
                    "capabilities": caps,
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
                let uri = params.uri.as_str().unwrap_or("");
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
                let Some(name) = params.name.as_str() else {
                    return Response::error(
                        Some(id),
                        codes::INVALID_PARAMS,
                        "tools/call needs `name` (a string)",
                    );
                };
                let arguments = params.arguments.as_ref();
                let result = match parse_tool_call(&self.config.names, name, arguments) {
                    Err(ValidationError::UnknownTool(n)) => {
                        return Response::error(
                            Some(id),
                            codes::INVALID_PARAMS,
                            format!(
                                "unknown tool {n:?}; call tools/list to see the available tools"
                            ),
                        );
                    }
                    // A `computer_*` tool fails in one shape, validation included (SPEC
                    // §3.5): `{"error"}` as structured content and text.
                    Err(ValidationError::Invalid(message)) if name.starts_with("computer_") => {
                        operation_error(&message)
                    }
                    Err(ValidationError::Invalid(message)) => validation_error(&message),
                    Ok(call) => {
                        let inventory = matches!(call, Op::List | Op::Dashboard);
                        let progress_token = params.progress_token().cloned();
                        let ctx = CallContext {
                            request_id: id.clone(),
                            progress_token,
                            era: era.clone(),
                        };
                        let as_task = *era == Era::Modern
                            && self.serves_tasks()
                            && matches!(call, Op::Exec(_))
                            && tasks::declared(params);
                        let mut result = if as_task {
                            match host.call_tool_as_task(call, &ctx).await {
                                TaskAnswer::Task(created) => {
                                    return Response::success(id, self.finish_task(created));
                                }
                                TaskAnswer::Complete(result) => result,
                            }
                        } else {
                            host.call_tool(call, &ctx).await
                        };
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
                return Response::error(
                    Some(id),
                    codes::METHOD_NOT_FOUND,
                    format!("method not found: {other}"),
                );
            }
        };
        Response::success(id, self.finish(era, result))
    }
}

#[cfg(test)]
mod tests;
