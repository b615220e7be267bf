//! The tool catalogue: names, descriptions, input and output schemas, `_meta`.
//!
//! Defined once, on `rmcp::model::Tool`, and served unchanged by the local server and the
//! Worker. Owns the description assembly rules of SPEC §3.2 (backend description, override,
//! extension). Must not know which backend runs a call.

use std::sync::Arc;

use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

mod files;
mod snapshots;

/// Largest `stdin` accepted, in bytes.
pub const MAX_STDIN_BYTES: usize = 2 * 1024 * 1024;
/// Longest `command` accepted, in bytes: Linux's limit for one argument
/// (`MAX_ARG_STRLEN`, 128 KiB with its NUL), since the shell gets it as `-c`'s argument.
pub const MAX_COMMAND_BYTES: usize = 128 * 1024 - 1;
/// Most `args` entries accepted.
pub const MAX_ARGS: usize = 32 * 1024;
/// Largest `args` accepted, all entries together, in bytes (half of Linux's usual
/// `ARG_MAX`, leaving the other half to the environment); each entry is also at most
/// [`MAX_COMMAND_BYTES`].
pub const MAX_ARGS_BYTES: usize = 1024 * 1024;
/// Longest `timeout` accepted, in seconds (one day).
pub const MAX_TIMEOUT_SECS: u64 = 86_400;

/// Which tool a name refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    Exec,
    Job,
    /// One of the `computer_file_*` tools (group `files`).
    File,
    /// One of the snapshot tools (group `snapshots`).
    Snapshot,
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

/// The tool groups of SPEC §3.7 beyond `exec` (which is always on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Groups {
    /// `terminal_job`, and `yield_ms` on the exec tool.
    pub jobs: bool,
    /// `computer_file_read`, `_write` and `_edit`.
    pub files: bool,
    /// The `computer_*` tools and the dashboard.
    pub lifecycle: bool,
    /// `computer_snapshot`, `_fork`, `_restore`, `computer_snapshots` and
    /// `computer_snapshot_delete` (SPEC §3.12).
    pub snapshots: bool,
}

/// Every group name, in listing order.
pub const GROUP_NAMES: &[&str] = &["exec", "jobs", "files", "lifecycle", "snapshots"];

/// A tool group name (in `--tools`, or the gateway's `TOOLS`) that names no group.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool group {0:?}; the groups are {groups} (or all)", groups = GROUP_NAMES.join(", "))]
pub struct UnknownGroup(pub String);

impl Groups {
    /// Every group this build serves.
    pub const ALL: Groups = Groups {
        jobs: true,
        files: true,
        lifecycle: true,
        snapshots: true,
    };

    /// Parses `--tools`: group names separated by commas (`exec,jobs,lifecycle`), or `all`.
    pub fn parse(list: &str) -> Result<Groups, UnknownGroup> {
        let mut groups = Groups::default();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name.to_ascii_lowercase().as_str() {
                "exec" => {}
                "jobs" => groups.jobs = true,
                "lifecycle" => groups.lifecycle = true,
                "files" => groups.files = true,
                "snapshots" => groups.snapshots = true,
                "all" => groups = Groups::ALL,
                other => return Err(UnknownGroup(other.to_owned())),
            }
        }
        Ok(groups)
    }

    /// The names of the groups that are on (`exec` first).
    pub fn names(&self) -> Vec<&'static str> {
        let mut out = vec!["exec"];
        if self.jobs {
            out.push("jobs");
        }
        if self.files {
            out.push("files");
        }
        if self.lifecycle {
            out.push("lifecycle");
        }
        if self.snapshots {
            out.push("snapshots");
        }
        out
    }
}

/// Which tools are exposed and under which names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolNames {
    pub exec: String,
    pub lifecycle: bool,
    pub jobs: bool,
    pub files: bool,
    pub snapshots: bool,
}

impl ToolNames {
    pub fn new(exec: impl Into<String>, lifecycle: bool) -> Self {
        Self {
            exec: exec.into(),
            lifecycle,
            jobs: false,
            files: false,
            snapshots: false,
        }
    }

    /// The exec tool under `exec`, and the tools of `groups`.
    pub fn with_groups(exec: impl Into<String>, groups: Groups) -> Self {
        Self {
            exec: exec.into(),
            lifecycle: groups.lifecycle,
            jobs: groups.jobs,
            files: groups.files,
            snapshots: groups.snapshots,
        }
    }

    pub fn groups(&self) -> Groups {
        Groups {
            jobs: self.jobs,
            files: self.files,
            lifecycle: self.lifecycle,
            snapshots: self.snapshots,
        }
    }
}

/// Maps a tool name to its kind, if that tool is exposed.
pub fn tool_kind(names: &ToolNames, name: &str) -> Option<ToolKind> {
    if name == names.exec {
        return Some(ToolKind::Exec);
    }
    if names.jobs && name == crate::jobs::JOB_TOOL {
        return Some(ToolKind::Job);
    }
    if names.files && files::TOOLS.contains(&name) {
        return Some(ToolKind::File);
    }
    if names.snapshots && crate::snapshots::TOOLS.contains(&name) {
        return Some(ToolKind::Snapshot);
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
`computer_id` (reattach to a named computer; omitted: your default computer, which is this MCP session's or, for a client without sessions (protocol 2026-07-28), your user's; created on first use) and `temporary` (default true: removed when the session ends, or after an idle time without sessions; false: kept until deleted and shareable by id). \
A result says `created: true` when that call made its computer: files from earlier calls are not there. A client that opens a new session for every call should pass `temporary: false` with its own `computer_id`. \
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

/// `network` (SPEC §3.11): `"none"` or `{"allow": [rules]}`, narrowing the server's
/// policy for a computer when the call makes it.
pub fn network_schema(what: &str) -> Value {
    json!({
        "anyOf": [
            {"type": "string", "enum": ["none"]},
            {
                "type": "object",
                "properties": {
                    "allow": {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "maxItems": crate::egress::MAX_RULES,
                    },
                },
                "required": ["allow"],
                "additionalProperties": false,
            },
        ],
        "description": what,
    })
}

/// What `network` means, for the tools that take it.
const NETWORK_ARG: &str = "Where a computer made by this call may connect: \"none\", or {\"allow\": [rules]} (host names such as pypi.org, *.npmjs.org for any subdomain, name:port, IPs, CIDRs). Only narrows the server's policy; applies only when the computer is made.";

/// The exec tool's input schema; `yield_ms` only with the `jobs` group.
pub fn exec_input_schema(jobs: bool) -> Value {
    let mut schema = json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "maxLength": MAX_COMMAND_BYTES, "description": "Shell command line, run with the configured shell's -c (at most 128 KiB; write longer scripts to a file)."},
            "args": {"type": "array", "items": {"type": "string", "maxLength": MAX_COMMAND_BYTES}, "maxItems": MAX_ARGS, "description": "Argv executed directly, without a shell. Use instead of command (at most 32768 entries and 1 MiB in all)."},
            "stdin": {"type": "string", "maxLength": MAX_STDIN_BYTES, "description": "Text written to the command's standard input (at most 2 MiB)."},
            "working_directory": {"type": "string", "description": "Absolute directory to run in."},
            "timeout": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_SECS, "description": "Seconds before the command and its children are killed."},
            // A list of closed objects, not a map: strict tool-schema converters (OpenAI's)
            // refuse any object open to undeclared names. The map form is accepted too.
            "env": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "pattern": ENV_NAME_PATTERN},
                        "value": {"type": "string"},
                    },
                    "required": ["name", "value"],
                    "additionalProperties": false,
                },
                "maxItems": MAX_ENV_ENTRIES,
                "description": "Environment variables added for this command only, e.g. [{\"name\": \"MY_VAR\", \"value\": \"1\"}] (an object {\"MY_VAR\": \"1\"} works too; at most 256, 64 KiB in all).",
            },
            "computer_id": computer_id_schema("Computer to run on (1-63 lowercase letters, digits, hyphens). Omit to use your default computer (this session's; without sessions, your user's)."),
            "temporary": {"type": "boolean", "default": true, "description": "true: removed when the session ends. false: kept until deleted, reattachable by id."},
            "network": network_schema(NETWORK_ARG),
        },
        "additionalProperties": false,
    });
    if jobs {
        schema["properties"]["yield_ms"] = json!({
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_TIMEOUT_SECS * 1000,
            "description": "Wait at most this many milliseconds. If the command still runs then, return its output so far with `running: true` and a `job_id`; it keeps running (its whole life still bounded by `timeout`) and terminal_job reads the rest, writes its stdin and signals it. Its stdin stays open until closed with terminal_job.",
        });
    }
    schema
}

/// The `created` field of results (SPEC §3.2).
pub const CREATED: &str =
    "This call made the computer (it did not exist before): nothing an earlier call left is there.";

/// The exec tool's output schema (SPEC §3.5); with the `jobs` group a result may be a
/// running job's (no exit code yet).
pub fn exec_output_schema(jobs: bool) -> Value {
    let mut schema = json!({
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
            "created": {"type": "boolean", "description": CREATED},
            "network_blocked": {
                "type": "array",
                "maxItems": crate::egress::BLOCKED_MAX,
                "description": "Connections and names the computer's network policy refused during this call (each once).",
                "items": {
                    "type": "object",
                    "properties": {
                        "host": {"type": "string"},
                        "port": {"type": "integer", "minimum": 0, "maximum": 65535},
                        "reason": {"type": "string"},
                    },
                    "required": ["host", "port", "reason"],
                },
            },
        },
        "required": ["computer_id", "temporary", "stdout", "stderr", "exit_code", "exec_duration_ms"],
    });
    if jobs {
        schema["properties"]["running"] = json!({"type": "boolean", "description": "Still running after `yield_ms`: read the rest with terminal_job."});
        schema["properties"]["job_id"] = json!({"type": "string", "description": "The running command's job, for terminal_job."});
        schema["properties"]["dropped_bytes"] = json!({"type": "integer", "minimum": 0, "description": "Oldest output dropped because the job's buffer was full."});
        schema["required"] = json!([
            "computer_id",
            "temporary",
            "stdout",
            "stderr",
            "exec_duration_ms"
        ]);
    }
    schema
}

fn job_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "job_id": {"type": "string", "description": "The job terminal_execute returned (required unless `list`)."},
            "computer_id": computer_id_schema("The computer the job runs on. Omit for the one this session started it on, else this session's default computer."),
            "stdin": {"type": "string", "description": "Text written to the job's stdin (before any wait)."},
            "stdin_base64": {"type": "string", "description": "Bytes written to the job's stdin, base64 (instead of `stdin`)."},
            "close_stdin": {"type": "boolean", "description": "Close the job's stdin (end of input) after writing."},
            "signal": {"oneOf": [{"type": "string", "enum": ["INT", "TERM", "KILL", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT"]}, {"type": "integer", "minimum": 1, "maximum": 64}], "description": "Signal sent to the job's whole process group."},
            "wait_ms": {"type": "integer", "minimum": 0, "maximum": crate::jobs::MAX_WAIT_MS, "default": crate::jobs::DEFAULT_WAIT_MS, "description": "Wait up to this long for new output or the exit."},
            "list": {"type": "boolean", "description": "List the computer's jobs (running and recently ended) instead."},
            "peek": {"type": "boolean", "description": "Only look: the newest output (up to 16 KiB of each stream, already read or not), taking nothing and answering at once; `signal` may come with it, `stdin`, `close_stdin` and `wait_ms` may not."},
        },
        "additionalProperties": false,
    })
}

fn job_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "computer_id": {"type": "string"},
            "job_id": {"type": "string"},
            "running": {"type": "boolean", "description": "False once the job ended and this read took the last of its output."},
            "stdout": {"type": "string", "description": "Output since the previous read."},
            "stderr": {"type": "string"},
            "exit_code": {"type": "integer"},
            "exec_duration_ms": {"type": "integer", "minimum": 0},
            "dropped_bytes": {"type": "integer", "minimum": 0, "description": "Oldest output dropped since the previous read (the job's buffer was full)."},
            "timed_out": {"type": "boolean"},
            "stdout_base64": {"type": "string"},
            "stderr_base64": {"type": "string"},
            "peek": {"type": "boolean", "description": "A peek: stdout/stderr are the newest output, nothing was taken; `running: false` means the program ended, and its output waits for a read."},
            "jobs": {
                "type": "array",
                "description": "With `list`: the computer's jobs.",
                "items": {
                    "type": "object",
                    "properties": {
                        "job_id": {"type": "string"},
                        "command": {"type": "string"},
                        "running": {"type": "boolean"},
                        "started_at": {"type": "string"},
                        "exit_code": {"type": "integer"},
                    },
                    "required": ["job_id", "command", "running", "started_at"],
                },
            },
            "count": {"type": "integer", "minimum": 0},
            "error": {"type": "string"},
        },
        "required": ["computer_id"],
    })
}

/// Names of environment variables (SPEC §3.10).
pub const ENV_NAME_PATTERN: &str = "^[A-Za-z_][A-Za-z0-9_]*$";
/// Most `env` entries per call.
pub const MAX_ENV_ENTRIES: usize = 256;
/// Most bytes of `env` (names and values) per call.
pub const MAX_ENV_BYTES: usize = 64 * 1024;

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
            "network": {
                "description": "Where it may connect: \"all\", \"none\" or {\"allow\": [rules]}.",
                "anyOf": [
                    {"type": "string", "enum": ["all", "none"]},
                    {
                        "type": "object",
                        "properties": {"allow": {"type": "array", "items": {"type": "string"}}},
                        "required": ["allow"],
                    },
                ],
            },
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
        object(exec_input_schema(names.jobs)),
    );
    exec.title = Some("Run a command on a sandbox computer".into());
    exec.output_schema = Some(object(exec_output_schema(names.jobs)));
    exec.annotations = Some(annotations("Run a command", false, true, false));
    exec.meta = Some(ui_meta(false));
    let mut list = vec![exec];
    if names.jobs {
        let mut job = Tool::new(
            crate::jobs::JOB_TOOL,
            "Follow a command that terminal_execute left running (it returned `running: true` and a `job_id`): read its new output (waiting up to `wait_ms` for some), write to its stdin (`stdin`, `stdin_base64`, `close_stdin`), or send its whole process group a `signal` (INT, TERM, KILL, HUP or a number). Each call returns only what is new since the previous one; `exit_code` comes with the last output. `list: true` shows the computer's jobs; `peek: true` shows the newest output without taking it. A job ends with its timeout, a signal, or computer_restart/_factory_reset/_delete; an ended job's output is kept 10 minutes or until read, and a computer keeps at most 64 jobs.",
            object(job_input_schema()),
        );
        job.title = Some("Follow a running command".into());
        job.output_schema = Some(object(job_output_schema()));
        job.annotations = Some(annotations("Follow a running command", false, true, false));
        job.meta = Some(ui_meta(false));
        list.push(job);
    }
    if names.files {
        list.extend(files::tools());
    }
    if names.snapshots {
        list.extend(snapshots::tools());
    }
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
                        "network": network_schema(NETWORK_ARG),
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
            ToolKind::Exec | ToolKind::Job | ToolKind::File | ToolKind::Snapshot => continue,
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
    fn groups_choose_the_tools() {
        assert_eq!(Groups::parse(""), Ok(Groups::default()));
        assert_eq!(Groups::parse("exec"), Ok(Groups::default()));
        assert_eq!(
            Groups::parse(" exec, Jobs "),
            Ok(Groups {
                jobs: true,
                ..Groups::default()
            })
        );
        assert_eq!(Groups::parse("all"), Ok(Groups::ALL));
        assert_eq!(
            Groups::ALL.names(),
            ["exec", "jobs", "files", "lifecycle", "snapshots"]
        );
        let names = ToolNames::with_groups(EXEC_TOOL, Groups::parse("snapshots").unwrap());
        let listed: Vec<String> = tools(&names, "d")
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        assert_eq!(
            listed,
            [
                EXEC_TOOL,
                "computer_snapshot",
                "computer_fork",
                "computer_restore",
                "computer_snapshots",
                "computer_snapshot_delete"
            ]
        );
        assert_eq!(tool_kind(&names, "computer_fork"), Some(ToolKind::Snapshot));
        assert_eq!(
            tool_kind(&ToolNames::new(EXEC_TOOL, true), "computer_fork"),
            None
        );
        assert!(
            Groups::parse("exec,bogus")
                .unwrap_err()
                .to_string()
                .contains("unknown tool group")
        );
        assert!(Groups::parse("files").unwrap().files);
        let names = ToolNames::with_groups(EXEC_TOOL, Groups::parse("files").unwrap());
        let listed: Vec<String> = tools(&names, "d")
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        assert_eq!(
            listed,
            [
                EXEC_TOOL,
                "computer_file_read",
                "computer_file_write",
                "computer_file_edit"
            ]
        );
        assert_eq!(
            tool_kind(&names, "computer_file_edit"),
            Some(ToolKind::File)
        );
        assert_eq!(
            tool_kind(&ToolNames::new(EXEC_TOOL, true), "computer_file_read"),
            None
        );
        let plain = tools(&ToolNames::with_groups(EXEC_TOOL, Groups::default()), "d");
        let v = serde_json::to_value(&plain[0]).unwrap();
        assert!(v["inputSchema"]["properties"].get("yield_ms").is_none());
        assert!(v["inputSchema"]["properties"].get("env").is_some());
        let jobs = Groups::parse("jobs").unwrap();
        let t = tools(&ToolNames::with_groups(EXEC_TOOL, jobs), "d");
        let names: Vec<_> = t.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, [EXEC_TOOL, crate::jobs::JOB_TOOL]);
        let v = serde_json::to_value(&t[0]).unwrap();
        assert!(v["inputSchema"]["properties"]["yield_ms"].is_object());
        let all = tools(&ToolNames::with_groups(EXEC_TOOL, Groups::ALL), "d");
        assert_eq!(all.len(), 16);
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
