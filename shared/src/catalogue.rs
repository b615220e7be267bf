//! The tool catalogue: names, descriptions, input and output schemas, `_meta`.
//!
//! Defined once, on `rmcp::model::Tool`, and served unchanged by the local server and the
//! Worker. Owns the description assembly rules of SPEC §3.2 (backend description, override,
//! extension). Must not know which backend runs a call.

use std::sync::Arc;

use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

/// Largest `stdin` accepted, in bytes.
pub const MAX_STDIN_BYTES: usize = 2 * 1024 * 1024;
/// Longest `timeout` accepted, in seconds (one day).
pub const MAX_TIMEOUT_SECS: u64 = 86_400;

/// Which tool a name refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    Exec,
    Dashboard,
    List,
    Create,
    Restart,
    FactoryReset,
    Delete,
}

/// The exec tool's default name.
pub const EXEC_TOOL: &str = "terminal_execute";
/// The name the older project used (`--tool-name sandbox_exec`).
pub const LEGACY_EXEC_TOOL: &str = "sandbox_exec";
/// The dashboard resource URI (kept for compatibility).
pub const DASHBOARD_URI: &str = "ui://kilntainers/computers";
/// The MCP Apps mime type.
pub const MCP_APP_MIME: &str = "text/html;profile=mcp-app";
/// The MCP Apps extension id.
pub const UI_EXTENSION: &str = "io.modelcontextprotocol/ui";

/// The lifecycle tools, in listing order.
pub const LIFECYCLE_TOOLS: &[(&str, ToolKind)] = &[
    ("computer_dashboard", ToolKind::Dashboard),
    ("computer_list", ToolKind::List),
    ("computer_create", ToolKind::Create),
    ("computer_restart", ToolKind::Restart),
    ("computer_factory_reset", ToolKind::FactoryReset),
    ("computer_delete", ToolKind::Delete),
];

/// Which tools are exposed and under which names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolNames {
    pub exec: String,
    pub lifecycle: bool,
}

impl ToolNames {
    pub fn new(exec: impl Into<String>, lifecycle: bool) -> Self {
        Self {
            exec: exec.into(),
            lifecycle,
        }
    }
}

/// Maps a tool name to its kind, if that tool is exposed.
pub fn tool_kind(names: &ToolNames, name: &str) -> Option<ToolKind> {
    if name == names.exec {
        return Some(ToolKind::Exec);
    }
    if !names.lifecycle {
        return None;
    }
    LIFECYCLE_TOOLS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, k)| *k)
}

/// Why the tool description could not be assembled (a start-up error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptionError {
    #[error(
        "--tool-instruction-override and --extended-tool-instruction cannot be used together: the override replaces the whole description, so put the extra text into it"
    )]
    BothGiven,
    #[error(
        "the image {0:?} is not the default, so the built-in tool description would be wrong: pass --tool-instruction-override \"…\" describing what the image offers (OS, shell, tools)"
    )]
    CustomImageNeedsOverride(String),
}

/// Assembles the exec tool description from the backend's own text and the two flags.
/// `custom_image` names a non-default image that the backend cannot describe.
pub fn assemble_description(
    backend_description: &str,
    custom_image: Option<&str>,
    override_text: Option<&str>,
    extension: Option<&str>,
) -> Result<String, DescriptionError> {
    let override_text = override_text.filter(|s| !s.trim().is_empty());
    let extension = extension.filter(|s| !s.trim().is_empty());
    match (override_text, extension) {
        (Some(_), Some(_)) => Err(DescriptionError::BothGiven),
        (Some(text), None) => Ok(text.to_owned()),
        (None, extension) => {
            if let Some(image) = custom_image {
                return Err(DescriptionError::CustomImageNeedsOverride(image.to_owned()));
            }
            Ok(match extension {
                Some(extra) => format!("{backend_description}\n\n{extra}"),
                None => backend_description.to_owned(),
            })
        }
    }
}

/// The common part of every exec tool description: how to call it.
pub fn usage_text(default_timeout_secs: u64, output_limit: u64) -> String {
    format!(
        "Pass exactly one of `command` (a shell command line) or `args` (an argv array run without a shell). \
Optional: `stdin`, `working_directory` (absolute path), `timeout` (seconds, default {default_timeout_secs}; on timeout the whole process tree is killed, exit code 124, output so far kept), \
`computer_id` (reattach to a named computer; omitted: this session's default computer, created on first use) and `temporary` (default true: removed when the session ends; false: kept until deleted and shareable by id). \
Output is capped at {output_limit} bytes of stdout+stderr combined: past that the command is stopped and the result has `truncated: true`. \
Bytes that are not UTF-8 are returned exactly in `stdout_base64`/`stderr_base64`. A non-zero exit code is a normal result."
    )
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn ui_meta(resource: bool) -> MetaObject {
    let mut ui = json!({ "visibility": ["model", "app"] });
    if resource {
        ui["resourceUri"] = json!(DASHBOARD_URI);
    }
    let mut meta = JsonObject::new();
    meta.insert("ui".into(), ui);
    MetaObject(meta)
}

fn annotations(
    title: &str,
    read_only: bool,
    destructive: bool,
    idempotent: bool,
) -> ToolAnnotations {
    let mut a = ToolAnnotations::default();
    a.title = Some(title.to_owned());
    a.read_only_hint = Some(read_only);
    a.destructive_hint = Some(destructive);
    a.idempotent_hint = Some(idempotent);
    a.open_world_hint = Some(false);
    a
}

const ID_PATTERN: &str = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$";

fn computer_id_schema(what: &str) -> Value {
    json!({
        "type": "string",
        "pattern": ID_PATTERN,
        "maxLength": 63,
        "description": what,
    })
}

/// The exec tool's input schema.
pub fn exec_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "Shell command line, run with the configured shell's -c."},
            "args": {"type": "array", "items": {"type": "string"}, "description": "Argv executed directly, without a shell. Use instead of command."},
            "stdin": {"type": "string", "maxLength": MAX_STDIN_BYTES, "description": "Text written to the command's standard input (at most 2 MiB)."},
            "working_directory": {"type": "string", "description": "Absolute directory to run in."},
            "timeout": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_SECS, "description": "Seconds before the command and its children are killed."},
            "computer_id": computer_id_schema("Computer to run on (1-63 lowercase letters, digits, hyphens). Omit to use this session's default computer."),
            "temporary": {"type": "boolean", "default": true, "description": "true: removed when the session ends. false: kept until deleted, reattachable by id."},
        },
        "additionalProperties": false,
    })
}

/// The exec tool's output schema (SPEC §3.5).
pub fn exec_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "computer_id": {"type": "string"},
            "temporary": {"type": "boolean"},
            "stdout": {"type": "string"},
            "stderr": {"type": "string"},
            "exit_code": {"type": "integer"},
            "exec_duration_ms": {"type": "integer", "minimum": 0},
            "truncated": {"type": "boolean", "description": "Output was cut at the output limit and the command stopped."},
            "timed_out": {"type": "boolean", "description": "The command hit its timeout and was killed (exit code 124)."},
            "stdout_base64": {"type": "string", "description": "Exact stdout bytes when they are not valid UTF-8."},
            "stderr_base64": {"type": "string", "description": "Exact stderr bytes when they are not valid UTF-8."},
        },
        "required": ["computer_id", "temporary", "stdout", "stderr", "exit_code", "exec_duration_ms"],
    })
}

fn computer_item_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "computer_id": {"type": "string"},
            "sandbox_id": {"type": "string"},
            "backend": {"type": "string"},
            "state": {"type": "string"},
            "temporary": {"type": "boolean"},
            "image": {"type": "string"},
            "created_at": {"type": "string"},
            "history": {
                "type": "array",
                "description": "The last 50 commands run on this computer through this server, oldest first (no output).",
                "items": {
                    "type": "object",
                    "properties": {
                        "command": {"type": "string"},
                        "started_at": {"type": "string"},
                        "exit_code": {"type": "integer"},
                        "duration_ms": {"type": "integer", "minimum": 0},
                        "timed_out": {"type": "boolean"},
                        "truncated": {"type": "boolean"},
                    },
                    "required": ["command", "started_at", "exit_code", "duration_ms"],
                },
            },
        },
        "required": ["computer_id", "sandbox_id", "backend", "state", "temporary", "image", "created_at"],
    })
}

fn inventory_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "computers": {"type": "array", "items": computer_item_schema()},
            "count": {"type": "integer", "minimum": 0},
            "error": {"type": "string"},
        },
    })
}

fn lifecycle_output_schema(deleted: bool) -> Value {
    let mut props = json!({
        "ok": {"type": "boolean"},
        "computer_id": {"type": "string"},
        "error": {"type": "string"},
    });
    if deleted {
        props["deleted"] = json!({"type": "boolean"});
    } else {
        props["sandbox_id"] = json!({"type": "string"});
        props["temporary"] = json!({"type": "boolean"});
    }
    json!({"type": "object", "properties": props})
}

/// Builds the tool list: the exec tool, then the lifecycle tools when enabled.
pub fn tools(names: &ToolNames, exec_description: &str) -> Vec<Tool> {
    let mut exec = Tool::new(
        names.exec.clone(),
        exec_description.to_owned(),
        object(exec_input_schema()),
    );
    exec.title = Some("Run a command on a sandbox computer".into());
    exec.output_schema = Some(object(exec_output_schema()));
    exec.annotations = Some(annotations("Run a command", false, true, false));
    exec.meta = Some(ui_meta(false));
    let mut list = vec![exec];
    if !names.lifecycle {
        return list;
    }
    let no_args =
        || object(json!({"type": "object", "properties": {}, "additionalProperties": false}));
    let id_only = |what: &str| {
        object(json!({
            "type": "object",
            "properties": {"computer_id": computer_id_schema(what)},
            "required": ["computer_id"],
            "additionalProperties": false,
        }))
    };
    for (name, kind) in LIFECYCLE_TOOLS {
        let (title, description, input, output, ro, destructive, idem) = match kind {
            ToolKind::Dashboard => (
                "Sandbox Computer Dashboard",
                "Open the computer dashboard (an MCP App) and return the current inventory of computers.",
                no_args(),
                inventory_output_schema(),
                true,
                false,
                true,
            ),
            ToolKind::List => (
                "List computers",
                "List the computers you can reach: id, provider id, backend, state, image, created time and whether each is temporary.",
                no_args(),
                inventory_output_schema(),
                true,
                false,
                true,
            ),
            ToolKind::Create => (
                "Create or attach a computer",
                "Create a computer, or attach to an existing one by `computer_id`. Omit `computer_id` to always get a new computer with a fresh readable id. `temporary` (default true) computers are removed when the session ends; `temporary: false` ones persist and can be reattached by id.",
                object(json!({
                    "type": "object",
                    "properties": {
                        "computer_id": computer_id_schema("Id to create or attach; omit for a fresh slug."),
                        "temporary": {"type": "boolean", "default": true},
                    },
                    "additionalProperties": false,
                })),
                lifecycle_output_schema(false),
                false,
                false,
                true,
            ),
            ToolKind::Restart => (
                "Restart a computer",
                "Restart a computer. Running processes end; the writable filesystem is kept.",
                id_only("Computer to restart."),
                lifecycle_output_schema(false),
                false,
                true,
                false,
            ),
            ToolKind::FactoryReset => (
                "Factory-reset a computer",
                "Erase a computer's writable filesystem and recreate it from its base image, keeping its id and lifecycle.",
                id_only("Computer to reset."),
                lifecycle_output_schema(false),
                false,
                true,
                false,
            ),
            ToolKind::Delete => (
                "Delete a computer",
                "Delete a computer and everything on it.",
                id_only("Computer to delete."),
                lifecycle_output_schema(true),
                false,
                true,
                true,
            ),
            ToolKind::Exec => continue,
        };
        let mut tool = Tool::new(*name, description, input);
        tool.title = Some(title.into());
        tool.output_schema = Some(object(output));
        tool.annotations = Some(annotations(title, ro, destructive, idem));
        tool.meta = Some(ui_meta(*kind == ToolKind::Dashboard));
        list.push(tool);
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_only_by_default() {
        let t = tools(&ToolNames::new(EXEC_TOOL, false), "d");
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].name, EXEC_TOOL);
    }

    #[test]
    fn lifecycle_tools_listed_with_meta() {
        let t = tools(&ToolNames::new(LEGACY_EXEC_TOOL, true), "d");
        let names: Vec<_> = t.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(
            names,
            [
                "sandbox_exec",
                "computer_dashboard",
                "computer_list",
                "computer_create",
                "computer_restart",
                "computer_factory_reset",
                "computer_delete"
            ]
        );
        for tool in &t {
            let v = serde_json::to_value(tool).unwrap();
            assert_eq!(
                v["_meta"]["ui"]["visibility"],
                json!(["model", "app"]),
                "{}",
                tool.name
            );
            assert!(v["outputSchema"].is_object());
        }
        let dash = serde_json::to_value(&t[1]).unwrap();
        assert_eq!(dash["title"], "Sandbox Computer Dashboard");
        assert_eq!(dash["_meta"]["ui"]["resourceUri"], DASHBOARD_URI);
    }

    #[test]
    fn description_assembly() {
        assert_eq!(
            assemble_description("base", None, None, None).unwrap(),
            "base"
        );
        assert_eq!(
            assemble_description("base", None, None, Some("more")).unwrap(),
            "base\n\nmore"
        );
        assert_eq!(
            assemble_description("base", Some("alpine"), Some("mine"), None).unwrap(),
            "mine"
        );
        assert_eq!(
            assemble_description("base", None, Some("a"), Some("b")),
            Err(DescriptionError::BothGiven)
        );
        let err = assemble_description("base", Some("alpine"), None, Some("b")).unwrap_err();
        assert!(err.to_string().contains("--tool-instruction-override"));
    }
}
