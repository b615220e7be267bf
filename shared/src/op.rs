//! Typed operations: the one currency between the tools, the edge and the places
//! computers live.
//!
//! A tool call parses into an [`Op`] ([`parse_tool_call`]); a controller picks its target
//! and hands it on. The gateway's tool host hands it to an [`OpHandler`]: an executor (over its `/v1` REST API, [`Op::encode`] on one side and
//! [`Op::decode`] on the other) or a provider reached from the Worker itself. Every handler
//! answers with the `structuredContent` of the matching tool, or an [`ApiError`] whose
//! code is stable end to end. Ids in an `Op` are the caller's (1–63 characters); the team
//! travels beside the op (the executor's token), and each handler maps it to backend names
//! itself ([`crate::teams`]).

use std::future::Future;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::answer::{Answer, AnswerKind};
use crate::capabilities::Capability;
use crate::catalogue::{ToolKind, ToolNames, tool_kind};
use crate::egress::Policy;
use crate::executor_api::{ApiError, ErrorCode, Scope};
use crate::files::{EDIT_TOOL, FileCall, READ_TOOL, WRITE_TOOL};
use crate::jobs::{JobCall, JobPoll};
use crate::maybe_send::{MaybeSend, MaybeSync};
use crate::snapshots::SnapshotCall;
use crate::validate::{
    Args, ExecRequest, Program, ValidationError, parse_exec, parse_file, parse_job,
};

#[cfg(test)]
mod tool_tests;

/// One operation on computers: a validated tool call ([`parse_tool_call`]) and an executor
/// API request ([`Op::decode`]) are the same value. In the tool form the target may be left
/// to the controller (`None`: the caller's default computer, or a new one); the executor
/// API always names it, and the gateway names it before forwarding ([`Op::on`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// The caller's computers (`computer_list`; the executor's or provider's view of them).
    List,
    /// `computer_dashboard`: the list, shown as the dashboard (tool form only).
    Dashboard,
    /// Create the computer, or attach to it if it exists. `computer_id` `None`: a new id;
    /// `temporary` `None`: attach as it is, or create a temporary one. `network`: the
    /// policy asked for it if this call makes it (SPEC §3.11; `None`: the server's).
    Create {
        computer_id: Option<String>,
        temporary: Option<bool>,
        network: Option<Policy>,
    },
    /// Run a command. Creates the computer on first use, with `temporary` (default true).
    Exec(ExecRequest),
    Restart {
        computer_id: String,
    },
    FactoryReset {
        computer_id: String,
    },
    Delete {
        computer_id: String,
    },
    /// `terminal_job` on one job.
    Job(JobPoll),
    /// [`Op::Job`] answered as bytes: the read's [`crate::jobs::JobOutput`] itself (its
    /// serde form, output in base64), not the tool's view of it. How a Tasks host keeps a
    /// task's whole output exactly ([`crate::tasks::Task::absorb`]). Not a tool.
    JobRead(JobPoll),
    /// `terminal_job` with `list: true`: the jobs the computer keeps.
    Jobs {
        computer_id: Option<String>,
    },
    /// A file tool. Creates the computer on first use, like an exec.
    File(FileCall),
    /// A snapshot tool (SPEC §3.12).
    Snapshot(SnapshotCall),
}

/// Validates a `tools/call` for one of the tools in `names` (SPEC §3.2, §3.3): the
/// operation, or why not (nothing has run).
pub fn parse_tool_call(
    names: &ToolNames,
    name: &str,
    arguments: Option<&Value>,
) -> Result<Op, ValidationError> {
    let kind = tool_kind(names, name).ok_or_else(|| ValidationError::UnknownTool(name.into()))?;
    match kind {
        ToolKind::Exec => parse_exec(name, arguments, names.jobs).map(Op::Exec),
        ToolKind::Job => parse_job(name, arguments).map(Op::from),
        ToolKind::File => parse_file(name, arguments).map(Op::File),
        ToolKind::Snapshot => crate::validate::parse_snapshot(name, arguments).map(Op::Snapshot),
        ToolKind::List => Args::new(arguments, &[], name).map(|_| Op::List),
        ToolKind::Dashboard => Args::new(arguments, &[], name).map(|_| Op::Dashboard),
        ToolKind::Create => {
            let args = Args::new(arguments, &["computer_id", "temporary", "network"], name)?;
            Ok(Op::Create {
                computer_id: args.computer_id()?,
                temporary: args.boolean("temporary")?,
                network: args.network()?,
            })
        }
        ToolKind::Restart | ToolKind::FactoryReset | ToolKind::Delete => {
            let args = Args::new(arguments, &["computer_id"], name)?;
            let computer_id = args.required_computer_id(name)?;
            Ok(match kind {
                ToolKind::Restart => Op::Restart { computer_id },
                ToolKind::FactoryReset => Op::FactoryReset { computer_id },
                _ => Op::Delete { computer_id },
            })
        }
    }
}

impl From<JobCall> for Op {
    fn from(call: JobCall) -> Op {
        match call {
            JobCall::List { computer_id } => Op::Jobs { computer_id },
            JobCall::Poll(poll) => Op::Job(poll),
        }
    }
}

/// An operation as an HTTP request of the executor API (the path is below
/// [`crate::executor_api::PREFIX`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiRequest {
    pub method: &'static str,
    pub path: String,
    /// The JSON body, encoded.
    pub body: Option<String>,
}

/// `POST /v1/computers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    computer_id: String,
    #[serde(default = "yes")]
    temporary: bool,
    /// SPEC §3.11: `"none"`, `{"allow": [...]}` (or `"all"`); absent: the executor's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    network: Option<Policy>,
}

fn yes() -> bool {
    true
}

/// `POST /v1/computers/{id}/snapshots`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TakeBody {
    #[serde(default)]
    label: String,
}

/// `POST /v1/computers/{id}/restore`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RestoreBody {
    snapshot_id: String,
}

/// `POST /v1/computers/{new id}/fork`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    from: String,
    #[serde(default = "yes")]
    temporary: bool,
}

/// `POST /v1/computers/{id}/exec`: `terminal_execute`'s arguments without the id.
#[derive(Serialize)]
struct ExecBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stdin: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    working_directory: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temporary: Option<bool>,
    #[serde(skip_serializing_if = "EnvBody::is_empty")]
    env: EnvBody<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    yield_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    network: Option<&'a Policy>,
}

/// `env` as an object, in the order given.
struct EnvBody<'a>(&'a [(String, String)]);

impl EnvBody<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for EnvBody<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// The body of a job poll ([`Op::Job`], [`Op::JobRead`]): `terminal_job`'s arguments
/// without the ids, which are in the path. A peek waits for nothing.
#[derive(Serialize)]
struct PollBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    stdin_base64: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    close_stdin: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<i32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    peek: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait_ms: Option<u64>,
}

impl PollBody {
    fn of(p: &JobPoll) -> Self {
        Self {
            stdin_base64: p.stdin.as_deref().map(base64_of),
            close_stdin: p.close_stdin,
            signal: p.signal,
            peek: p.peek,
            wait_ms: (!p.peek).then_some(p.wait_ms),
        }
    }
}

/// The body of a file route: the file tool's arguments without the id.
#[derive(Serialize)]
struct FileBody<'a> {
    path: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    temporary: Option<bool>,
    #[serde(flatten)]
    verb: FileVerb<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum FileVerb<'a> {
    Read {
        offset: u64,
        length: u64,
    },
    Write {
        content_base64: String,
        append: bool,
        create_only: bool,
        make_dirs: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        mode: Option<String>,
    },
    Edit {
        old_text: &'a str,
        new_text: &'a str,
        expected_replacements: u64,
    },
}

impl<'a> FileBody<'a> {
    /// The route's verb and its body.
    fn of(f: &'a FileCall) -> (&'static str, Self) {
        let (verb, body) = match f {
            FileCall::Read(r) => (
                "read",
                FileVerb::Read {
                    offset: r.offset,
                    length: r.length,
                },
            ),
            FileCall::Write(w) => (
                "write",
                FileVerb::Write {
                    content_base64: base64_of(&w.content),
                    append: w.append,
                    create_only: w.create_only,
                    make_dirs: w.make_dirs,
                    mode: w.mode.map(crate::files::mode_string),
                },
            ),
            FileCall::Edit(e) => (
                "edit",
                FileVerb::Edit {
                    old_text: &e.old_text,
                    new_text: &e.new_text,
                    expected_replacements: e.expected_replacements,
                },
            ),
        };
        let path = f.path();
        let temporary = f.temporary();
        (
            verb,
            FileBody {
                path,
                temporary,
                verb: body,
            },
        )
    }
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A body's JSON text: these bodies are plain data, so encoding cannot fail.
fn to_json<T: Serialize>(body: &T) -> String {
    serde_json::to_string(body).unwrap_or_else(|_| "{}".to_owned())
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::BadRequest, message)
}

impl Op {
    /// The same operation on computer `computer_id`, which replaces any id it names (how
    /// a controller hands on a call after picking its target). [`Op::List`] and
    /// [`Op::Dashboard`] name no computer and stay as they are.
    pub fn on(self, computer_id: &str) -> Op {
        let id = Some(computer_id.to_owned());
        match self {
            Op::List => Op::List,
            Op::Dashboard => Op::Dashboard,
            Op::Create {
                temporary, network, ..
            } => Op::Create {
                computer_id: id,
                temporary,
                network,
            },
            Op::Exec(mut r) => {
                r.computer_id = id;
                Op::Exec(r)
            }
            Op::Job(mut p) => {
                p.computer_id = id;
                Op::Job(p)
            }
            Op::JobRead(mut p) => {
                p.computer_id = id;
                Op::JobRead(p)
            }
            Op::Jobs { .. } => Op::Jobs { computer_id: id },
            Op::File(f) => {
                let temporary = f.temporary();
                Op::File(f.on(computer_id, temporary))
            }
            Op::Restart { .. } => Op::Restart {
                computer_id: computer_id.to_owned(),
            },
            Op::FactoryReset { .. } => Op::FactoryReset {
                computer_id: computer_id.to_owned(),
            },
            Op::Delete { .. } => Op::Delete {
                computer_id: computer_id.to_owned(),
            },
            Op::Snapshot(call) => Op::Snapshot(call.on(computer_id)),
        }
    }

    /// `temporary` as the call asked it (`None`: not given), for the calls that may create
    /// their computer (create, exec, files); `None` for the rest.
    pub fn temporary(&self) -> Option<bool> {
        match self {
            Op::Create { temporary, .. } => *temporary,
            Op::Exec(r) => r.temporary,
            Op::File(f) => f.temporary(),
            Op::Snapshot(SnapshotCall::Fork { temporary, .. }) => *temporary,
            _ => None,
        }
    }

    /// The network policy the call asks for the computer it may create (SPEC §3.11;
    /// `None`: not asked, the server's applies).
    pub fn network(&self) -> Option<&Policy> {
        match self {
            Op::Create { network, .. } => network.as_ref(),
            Op::Exec(r) => r.network.as_ref(),
            _ => None,
        }
    }

    /// The scope a caller needs for it (SPEC §5): commands, jobs, files and the list need
    /// `exec` (a command or file call may create its computer, as the tools do: a
    /// temporary one; a new permanent one needs `manage` too, checked where it would be
    /// made, [`crate::executor_api::Scope::may_create`]); creating, restarting, resetting
    /// and deleting need `manage`.
    pub fn scope(&self) -> Scope {
        match self {
            Op::List
            | Op::Dashboard
            | Op::Exec(_)
            | Op::Job(_)
            | Op::JobRead(_)
            | Op::Jobs { .. }
            | Op::File(_)
            | Op::Snapshot(SnapshotCall::List { .. }) => Scope::Exec,
            Op::Create { .. }
            | Op::Restart { .. }
            | Op::FactoryReset { .. }
            | Op::Delete { .. }
            | Op::Snapshot(_) => Scope::Manage,
        }
    }

    /// What the computer's backend must be able to do for it (`None`: any backend).
    pub fn needs(&self) -> Option<Capability> {
        match self {
            Op::Exec(r) if r.yield_ms.is_some() => Some(Capability::Jobs),
            Op::Job(_) | Op::JobRead(_) | Op::Jobs { .. } => Some(Capability::Jobs),
            Op::File(_) => Some(Capability::Files),
            Op::Snapshot(SnapshotCall::Fork { .. }) => Some(Capability::Fork),
            Op::Snapshot(_) => Some(Capability::Snapshots),
            Op::List
            | Op::Dashboard
            | Op::Create { .. }
            | Op::Exec(_)
            | Op::Restart { .. }
            | Op::FactoryReset { .. }
            | Op::Delete { .. } => None,
        }
    }

    /// The computer the operation names (`None`: the list, or a target left to the
    /// controller).
    pub fn computer_id(&self) -> Option<&str> {
        match self {
            Op::List | Op::Dashboard => None,
            Op::Exec(r) => r.computer_id.as_deref(),
            Op::Job(p) | Op::JobRead(p) => p.computer_id.as_deref(),
            Op::File(f) => f.computer_id(),
            Op::Create { computer_id, .. } | Op::Jobs { computer_id } => computer_id.as_deref(),
            Op::Restart { computer_id }
            | Op::FactoryReset { computer_id }
            | Op::Delete { computer_id } => Some(computer_id),
            Op::Snapshot(call) => call.computer_id(),
        }
    }

    /// Refuses an operation that leaves its target to a controller: every operation but
    /// the list must name its computer where it is handed to a place (the executor API's
    /// paths always do; [`Op::on`] names it).
    pub fn named(&self) -> Result<(), ApiError> {
        match (self, self.computer_id()) {
            (Op::List | Op::Dashboard, _)
            | (Op::Snapshot(SnapshotCall::Delete { .. }), _)
            | (_, Some(_)) => Ok(()),
            (op, None) => Err(bad(format!("{} needs a computer_id", op.name()))),
        }
    }

    /// The kind of answer it gets (how an executor's body for it is read back).
    pub fn answer_kind(&self) -> AnswerKind {
        match self {
            Op::List | Op::Dashboard => AnswerKind::Listed,
            Op::Create { .. } | Op::Restart { .. } | Op::FactoryReset { .. } => AnswerKind::Created,
            Op::Delete { .. } => AnswerKind::Deleted,
            Op::Exec(_) | Op::Job(_) => AnswerKind::Exec,
            Op::JobRead(_) => AnswerKind::JobRead,
            Op::Jobs { .. } => AnswerKind::Jobs,
            Op::File(FileCall::Read(_)) => AnswerKind::Read,
            Op::File(FileCall::Write(_)) => AnswerKind::Written,
            Op::File(FileCall::Edit(_)) => AnswerKind::Edited,
            Op::Snapshot(SnapshotCall::Take { .. }) => AnswerKind::Snapshot,
            Op::Snapshot(SnapshotCall::List { .. }) => AnswerKind::Snapshots,
            Op::Snapshot(SnapshotCall::Delete { .. }) => AnswerKind::SnapshotDeleted,
            Op::Snapshot(SnapshotCall::Fork { .. } | SnapshotCall::Restore { .. }) => {
                AnswerKind::Created
            }
        }
    }

    /// A short name for logs and spans.
    pub fn name(&self) -> &'static str {
        match self {
            Op::List => "list",
            Op::Dashboard => "dashboard",
            Op::Create { .. } => "create",
            Op::Exec(_) => "exec",
            Op::Restart { .. } => "restart",
            Op::FactoryReset { .. } => "factory_reset",
            Op::Delete { .. } => "delete",
            Op::Job(_) => "job",
            Op::JobRead(_) => "job_read",
            Op::Jobs { .. } => "jobs",
            Op::File(FileCall::Read(_)) => "file_read",
            Op::File(FileCall::Write(_)) => "file_write",
            Op::File(FileCall::Edit(_)) => "file_edit",
            Op::Snapshot(SnapshotCall::Take { .. }) => "snapshot",
            Op::Snapshot(SnapshotCall::Fork { .. }) => "fork",
            Op::Snapshot(SnapshotCall::Restore { .. }) => "restore",
            Op::Snapshot(SnapshotCall::List { .. }) => "snapshots",
            Op::Snapshot(SnapshotCall::Delete { .. }) => "snapshot_delete",
        }
    }

    /// The executor API request for this operation, which must name its computer ([`Op::on`]);
    /// [`Op::Dashboard`] asks for the list.
    pub fn encode(&self) -> ApiRequest {
        let id = self.computer_id().unwrap_or_default();
        let (method, path, body) = match self {
            Op::List | Op::Dashboard => ("GET", "/computers".to_owned(), None),
            Op::Create {
                temporary, network, ..
            } => {
                let body = CreateBody {
                    computer_id: id.to_owned(),
                    temporary: temporary.unwrap_or(true),
                    network: network.clone(),
                };
                ("POST", "/computers".to_owned(), Some(to_json(&body)))
            }
            Op::Exec(r) => {
                let (command, args) = match &r.program {
                    Program::Shell(c) => (Some(c.as_str()), None),
                    Program::Argv(a) => (None, Some(a.as_slice())),
                };
                let body = ExecBody {
                    command,
                    args,
                    stdin: r.stdin.as_deref(),
                    working_directory: r.working_directory.as_deref(),
                    timeout: r.timeout_secs,
                    temporary: r.temporary,
                    env: EnvBody(&r.env),
                    yield_ms: r.yield_ms,
                    network: r.network.as_ref(),
                };
                let path = format!("/computers/{id}/exec");
                ("POST", path, Some(to_json(&body)))
            }
            Op::Restart { .. } => ("POST", format!("/computers/{id}/restart"), None),
            Op::FactoryReset { .. } => ("POST", format!("/computers/{id}/factory-reset"), None),
            Op::Delete { .. } => ("DELETE", format!("/computers/{id}"), None),
            Op::Job(p) => {
                let path = format!("/computers/{id}/jobs/{}", p.job_id);
                ("POST", path, Some(to_json(&PollBody::of(p))))
            }
            Op::JobRead(p) => {
                let path = format!("/computers/{id}/jobs/{}/read", p.job_id);
                ("POST", path, Some(to_json(&PollBody::of(p))))
            }
            Op::Jobs { .. } => ("GET", format!("/computers/{id}/jobs"), None),
            Op::File(f) => {
                let (verb, body) = FileBody::of(f);
                let path = format!("/computers/{id}/files/{verb}");
                ("POST", path, Some(to_json(&body)))
            }
            Op::Snapshot(SnapshotCall::Take { label, .. }) => {
                let body = TakeBody {
                    label: label.clone(),
                };
                let path = format!("/computers/{id}/snapshots");
                ("POST", path, Some(to_json(&body)))
            }
            Op::Snapshot(SnapshotCall::List { .. }) => {
                ("GET", format!("/computers/{id}/snapshots"), None)
            }
            Op::Snapshot(SnapshotCall::Restore { snapshot_id, .. }) => {
                let body = RestoreBody {
                    snapshot_id: snapshot_id.clone(),
                };
                let path = format!("/computers/{id}/restore");
                ("POST", path, Some(to_json(&body)))
            }
            Op::Snapshot(SnapshotCall::Fork {
                from, temporary, ..
            }) => {
                let body = ForkBody {
                    from: from.as_str().to_owned(),
                    temporary: temporary.unwrap_or(true),
                };
                let path = format!("/computers/{id}/fork");
                ("POST", path, Some(to_json(&body)))
            }
            Op::Snapshot(SnapshotCall::Delete { snapshot_id }) => {
                ("DELETE", format!("/snapshots/{snapshot_id}"), None)
            }
        };
        ApiRequest { method, path, body }
    }

    /// The operation of an executor API request: `path` is below the version prefix, `body`
    /// the raw request body. Validated by the same rules as the MCP tools, so a bad request
    /// is refused here, before anything runs.
    pub fn decode(method: &str, path: &str, body: &[u8]) -> Result<Op, ApiError> {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let id = |raw: &str| -> Result<String, ApiError> {
            crate::ids::validate_computer_id(raw).map_err(|e| bad(e.to_string()))?;
            Ok(raw.to_owned())
        };
        let no_body = || -> Result<(), ApiError> {
            if body.iter().all(u8::is_ascii_whitespace) || body == b"{}" || body == b"null" {
                Ok(())
            } else {
                Err(bad("this request takes no body"))
            }
        };
        match (method, segments.as_slice()) {
            ("GET", ["computers"]) => Ok(Op::List),
            ("POST", ["computers"]) => {
                let b: CreateBody =
                    serde_json::from_slice(body).map_err(|e| bad(format!("request body: {e}")))?;
                Ok(Op::Create {
                    computer_id: Some(id(&b.computer_id)?),
                    temporary: Some(b.temporary),
                    network: b.network,
                })
            }
            ("POST", ["computers", raw, "exec"]) => {
                let computer_id = id(raw)?;
                let args: Value =
                    serde_json::from_slice(body).map_err(|e| bad(format!("request body: {e}")))?;
                let Value::Object(map) = &args else {
                    return Err(bad(
                        "request body: the exec arguments must be a JSON object",
                    ));
                };
                if map.contains_key("computer_id") {
                    return Err(bad(
                        "request body: `computer_id` belongs in the path, not the body",
                    ));
                }
                let request = parse_exec("terminal_execute", Some(&args), true).map_err(invalid)?;
                Ok(Op::Exec(request).on(&computer_id))
            }
            ("POST", ["computers", raw, "restart"]) => {
                no_body()?;
                Ok(Op::Restart {
                    computer_id: id(raw)?,
                })
            }
            ("POST", ["computers", raw, "factory-reset"]) => {
                no_body()?;
                Ok(Op::FactoryReset {
                    computer_id: id(raw)?,
                })
            }
            ("GET", ["computers", raw, "jobs"]) => {
                no_body()?;
                Ok(Op::Jobs {
                    computer_id: Some(id(raw)?),
                })
            }
            ("POST", ["computers", raw, "jobs", job_id]) => {
                Ok(Op::Job(decode_poll(&id(raw)?, job_id, body)?))
            }
            ("POST", ["computers", raw, "jobs", job_id, "read"]) => {
                Ok(Op::JobRead(decode_poll(&id(raw)?, job_id, body)?))
            }
            ("POST", ["computers", raw, "files", verb]) => {
                let computer_id = id(raw)?;
                let tool = match *verb {
                    "read" => READ_TOOL,
                    "write" => WRITE_TOOL,
                    "edit" => EDIT_TOOL,
                    _ => {
                        return Err(ApiError::new(
                            ErrorCode::NotFound,
                            "no such file route: use files/read, files/write or files/edit",
                        ));
                    }
                };
                let args: Value =
                    serde_json::from_slice(body).map_err(|e| bad(format!("request body: {e}")))?;
                if args.get("computer_id").is_some() {
                    return Err(bad(
                        "request body: `computer_id` belongs in the path, not the body",
                    ));
                }
                let call = parse_file(tool, Some(&args)).map_err(invalid)?;
                Ok(Op::File(call).on(&computer_id))
            }
            ("DELETE", ["computers", raw]) => {
                no_body()?;
                Ok(Op::Delete {
                    computer_id: id(raw)?,
                })
            }
            ("POST", ["computers", raw, "snapshots"]) => {
                let b: TakeBody = body_of(body)?;
                Ok(Op::Snapshot(SnapshotCall::Take {
                    computer_id: id(raw)?,
                    label: crate::validate::checked_label(b.label).map_err(invalid)?,
                }))
            }
            ("GET", ["computers", raw, "snapshots"]) => {
                no_body()?;
                Ok(Op::Snapshot(SnapshotCall::List {
                    computer_id: id(raw)?,
                }))
            }
            ("POST", ["computers", raw, "restore"]) => {
                let b: RestoreBody = body_of(body)?;
                Ok(Op::Snapshot(SnapshotCall::Restore {
                    computer_id: id(raw)?,
                    snapshot_id: crate::validate::checked_id(b.snapshot_id).map_err(invalid)?,
                }))
            }
            ("POST", ["computers", raw, "fork"]) => {
                let b: ForkBody = body_of(body)?;
                let from = crate::validate::fork_from(&b.from).map_err(invalid)?;
                Ok(Op::Snapshot(SnapshotCall::Fork {
                    from,
                    computer_id: Some(id(raw)?),
                    temporary: Some(b.temporary),
                }))
            }
            ("DELETE", ["snapshots", raw]) => {
                no_body()?;
                Ok(Op::Snapshot(SnapshotCall::Delete {
                    snapshot_id: crate::validate::checked_id((*raw).to_owned()).map_err(invalid)?,
                }))
            }
            _ => Err(ApiError::new(
                ErrorCode::NotFound,
                "no such route; see shared::executor_api for the /v1 routes",
            )),
        }
    }
}

/// A request body of type `T` (JSON).
fn body_of<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| bad(format!("request body: {e}")))
}

/// A validation error as the executor API answers it (400).
fn invalid(e: ValidationError) -> ApiError {
    match e {
        ValidationError::Invalid(m) => bad(m),
        other => ApiError::new(ErrorCode::Internal, other.to_string()),
    }
}

/// A job poll from its path's ids and its body, by `terminal_job`'s rules.
fn decode_poll(computer_id: &str, job_id: &str, body: &[u8]) -> Result<JobPoll, ApiError> {
    let args: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(body).map_err(|e| bad(format!("request body: {e}")))?
    };
    let Value::Object(mut map) = args else {
        return Err(bad("request body: the job arguments must be a JSON object"));
    };
    for key in ["computer_id", "job_id", "list"] {
        if map.contains_key(key) {
            return Err(bad(format!(
                "request body: `{key}` belongs in the path, not the body"
            )));
        }
    }
    map.insert("job_id".into(), json!(job_id));
    let call = parse_job("terminal_job", Some(&Value::Object(map))).map_err(invalid)?;
    match Op::from(call).on(computer_id) {
        Op::Job(poll) => Ok(poll),
        _ => Err(bad("request body: a job poll names one job")),
    }
}

/// Something that carries out operations for a team: an executor's registry, the Worker's
/// client of an executor, or a provider the Worker reaches itself.
pub trait OpHandler: MaybeSync {
    /// Does `op` for `team`: its answer, or a coded error.
    fn handle(
        &self,
        team: &str,
        op: Op,
    ) -> impl Future<Output = Result<Answer, ApiError>> + MaybeSend;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshots::ForkFrom;

    fn round_trip(op: Op) {
        let r = op.encode();
        let body = r.body.clone().unwrap_or_default();
        assert_eq!(
            Op::decode(r.method, &r.path, body.as_bytes()),
            Ok(op.clone()),
            "{r:?}"
        );
    }

    fn exec_on(id: &str, r: ExecRequest) -> Op {
        Op::Exec(r).on(id)
    }

    fn job_on(id: &str, call: JobCall) -> Op {
        Op::from(call).on(id)
    }

    fn file_on(id: &str, call: FileCall) -> Op {
        Op::File(call).on(id)
    }

    fn exec(program: Program) -> ExecRequest {
        ExecRequest {
            program,
            stdin: None,
            working_directory: None,
            timeout_secs: None,
            computer_id: None,
            temporary: None,
            env: Vec::new(),
            yield_ms: None,
            network: None,
        }
    }

    #[test]
    fn a_tool_call_handed_on_names_its_computer_and_keeps_the_rest() {
        let n = crate::catalogue::ToolNames::with_groups(
            "terminal_execute",
            crate::catalogue::Groups::ALL,
        );
        let parse = |tool: &str, args: Value| parse_tool_call(&n, tool, Some(&args)).unwrap();
        let calls = [
            parse(
                "terminal_execute",
                json!({"command": "ls", "temporary": false}),
            ),
            parse("computer_create", json!({"temporary": true})),
            parse("terminal_job", json!({"job_id": "j1", "wait_ms": 5})),
            parse("terminal_job", json!({"list": true})),
            parse("computer_file_read", json!({"path": "/a"})),
            parse("computer_restart", json!({"computer_id": "old"})),
        ];
        for call in calls {
            // Left to the controller in the tool form: refused where handed to a place.
            if !matches!(call, Op::Restart { .. }) {
                assert_eq!(call.computer_id(), None, "{call:?}");
                let e = call.named().unwrap_err();
                assert!(e.error.message.contains("needs a computer_id"), "{e:?}");
            }
            let temporary = call.temporary();
            let on = call.clone().on("box");
            assert_eq!(on.computer_id(), Some("box"));
            assert_eq!(on.temporary(), temporary, "{call:?}");
            assert_eq!(
                (on.name(), on.scope(), on.needs()),
                (call.name(), call.scope(), call.needs())
            );
            assert!(on.named().is_ok());
        }
        assert!(Op::List.named().is_ok() && Op::Dashboard.on("x") == Op::Dashboard);
        assert_eq!(Op::Dashboard.encode(), Op::List.encode());
    }

    #[test]
    fn every_op_round_trips() {
        let long = "x".repeat(63);
        round_trip(Op::List);
        round_trip(Op::Create {
            computer_id: Some(long.clone()),
            temporary: Some(false),
            network: None,
        });
        round_trip(Op::Create {
            computer_id: Some("n".into()),
            temporary: Some(true),
            network: Some(crate::egress::Policy::None),
        });
        round_trip(Op::Create {
            computer_id: Some("n".into()),
            temporary: Some(true),
            network: Some(crate::egress::Policy::allow(["pypi.org", "*.npmjs.org:8443"]).unwrap()),
        });
        let mut narrowed = exec(Program::Shell("echo hi".into()));
        narrowed.network = Some(crate::egress::Policy::allow(["10.0.0.0/8"]).unwrap());
        round_trip(exec_on("n", narrowed));
        round_trip(exec_on(&long, exec(Program::Shell("echo hi".into()))));
        let mut full = exec(Program::Argv(vec!["ls".into(), "-l".into()]));
        full.stdin = Some("in\0put".replace('\0', ""));
        full.working_directory = Some("/tmp".into());
        full.timeout_secs = Some(7);
        full.temporary = Some(false);
        full.env = vec![("B".into(), "2".into()), ("A".into(), "1".into())];
        full.yield_ms = Some(0);
        round_trip(exec_on("box", full));
        round_trip(Op::Jobs {
            computer_id: Some("box".into()),
        });
        round_trip(job_on(
            "box",
            JobCall::Poll(JobPoll {
                job_id: "job-1".into(),
                computer_id: None,
                stdin: Some(vec![0, 255, 10]),
                close_stdin: true,
                signal: Some(15),
                wait_ms: 0,
                peek: false,
            }),
        ));
        round_trip(job_on(
            "box",
            JobCall::Poll(JobPoll {
                job_id: "job-4".into(),
                computer_id: None,
                stdin: None,
                close_stdin: false,
                signal: Some(15),
                wait_ms: 0,
                peek: true,
            }),
        ));
        round_trip(Op::JobRead(JobPoll {
            job_id: "job-3".into(),
            computer_id: Some("box".into()),
            stdin: Some(b"a\n".to_vec()),
            close_stdin: false,
            signal: Some(9),
            wait_ms: 2000,
            peek: false,
        }));
        round_trip(job_on(
            "box",
            JobCall::Poll(JobPoll {
                job_id: "job-2".into(),
                computer_id: None,
                stdin: None,
                close_stdin: false,
                signal: None,
                wait_ms: 1000,
                peek: false,
            }),
        ));
        round_trip(file_on(
            "box",
            FileCall::Read(crate::files::FileRead {
                computer_id: None,
                temporary: Some(false),
                path: "/a b/ü".into(),
                offset: 7,
                length: 9,
            }),
        ));
        round_trip(file_on(
            "box",
            FileCall::Write(crate::files::FileWrite {
                computer_id: None,
                temporary: None,
                path: "/x".into(),
                content: vec![0, 255, 10],
                append: true,
                create_only: true,
                mode: Some(0o4755),
                make_dirs: true,
            }),
        ));
        round_trip(file_on(
            "box",
            FileCall::Write(crate::files::FileWrite {
                computer_id: None,
                temporary: None,
                path: "/x".into(),
                content: Vec::new(),
                append: false,
                create_only: false,
                mode: None,
                make_dirs: false,
            }),
        ));
        round_trip(file_on(
            "box",
            FileCall::Edit(crate::files::FileEdit {
                computer_id: None,
                temporary: None,
                path: "/x".into(),
                old_text: "a\0".into(),
                new_text: String::new(),
                expected_replacements: 3,
            }),
        ));
        for computer_id in ["box".to_owned(), long] {
            round_trip(Op::Restart {
                computer_id: computer_id.clone(),
            });
            round_trip(Op::FactoryReset {
                computer_id: computer_id.clone(),
            });
            round_trip(Op::Delete { computer_id });
        }
        let snap = crate::snapshots::new_id(u128::MAX);
        for call in [
            SnapshotCall::Take {
                computer_id: "box".into(),
                label: "before upgrade".into(),
            },
            SnapshotCall::List {
                computer_id: "box".into(),
            },
            SnapshotCall::Restore {
                computer_id: "box".into(),
                snapshot_id: snap.clone(),
            },
            SnapshotCall::Fork {
                from: ForkFrom::Snapshot(snap.clone()),
                computer_id: Some("b2".into()),
                temporary: Some(false),
            },
            SnapshotCall::Fork {
                from: ForkFrom::Computer("box".into()),
                computer_id: Some("b3".into()),
                temporary: Some(true),
            },
            SnapshotCall::Delete {
                snapshot_id: snap.clone(),
            },
        ] {
            round_trip(Op::Snapshot(call));
        }
    }

    #[test]
    fn snapshot_routes_refuse_what_their_tools_refuse() {
        let refused = |method: &str, path: &str, body: &str| {
            Op::decode(method, path, body.as_bytes())
                .unwrap_err()
                .error
                .message
        };
        assert!(refused("DELETE", "/snapshots/box", "").contains("not a snapshot id"));
        assert!(
            refused("POST", "/computers/box/restore", r#"{"snapshot_id":"x"}"#)
                .contains("not a snapshot id")
        );
        assert!(
            refused("POST", "/computers/box/snapshots", r#"{"label":"a\nb"}"#).contains("label")
        );
        assert!(refused("POST", "/computers/box/fork", r#"{"from":"Bad Id"}"#).contains("neither"));
        assert!(
            refused(
                "POST",
                "/computers/box/snapshots",
                r#"{"label":"x","more":1}"#
            )
            .contains("unknown field")
        );
        // A delete names a snapshot, not a computer: it is handed on as it is.
        let delete = Op::Snapshot(SnapshotCall::Delete {
            snapshot_id: crate::snapshots::new_id(1),
        });
        assert!(delete.named().is_ok());
        assert_eq!(delete.clone().on("box"), delete);
        assert_eq!(delete.needs(), Some(Capability::Snapshots));
        let fork = Op::Snapshot(SnapshotCall::Fork {
            from: ForkFrom::Computer("a".into()),
            computer_id: None,
            temporary: None,
        });
        assert!(fork.named().is_err());
        assert_eq!(fork.needs(), Some(Capability::Fork));
        assert_eq!(fork.on("b").computer_id(), Some("b"));
    }

    #[test]
    fn bad_requests_are_refused_with_a_code() {
        let code =
            |m: &str, p: &str, b: &str| Op::decode(m, p, b.as_bytes()).map_err(|e| e.error.code);
        use ErrorCode::{BadRequest, NotFound};
        for (m, p, b, want) in [
            (
                "POST",
                "/computers/box/exec",
                r#"{"command":"ls","args":["ls"]}"#,
                BadRequest,
            ),
            (
                "POST",
                "/computers/box/exec",
                r#"{"command":"ls","bogus":1}"#,
                BadRequest,
            ),
            (
                "POST",
                "/computers/box/exec",
                r#"{"command":"ls","timeout":0}"#,
                BadRequest,
            ),
            (
                "POST",
                "/computers/box/exec",
                r#"{"command":"ls","computer_id":"x"}"#,
                BadRequest,
            ),
            ("POST", "/computers/box/exec", "{}", BadRequest),
            ("POST", "/computers/box/exec", "", BadRequest),
            ("POST", "/computers/box/exec", "[1]", BadRequest),
            (
                "POST",
                "/computers/Bad_ID!/exec",
                r#"{"command":"ls"}"#,
                BadRequest,
            ),
            (
                "POST",
                "/computers",
                r#"{"computer_id":"Bad_ID!"}"#,
                BadRequest,
            ),
            (
                "POST",
                "/computers",
                r#"{"computer_id":"a","x":1}"#,
                BadRequest,
            ),
            (
                "POST",
                &format!("/computers/{}/restart", "x".repeat(64)),
                "",
                BadRequest,
            ),
            ("POST", "/computers/box/restart", r#"{"x":1}"#, BadRequest),
            (
                "POST",
                "/computers/box/jobs/job-1",
                r#"{"job_id":"x"}"#,
                BadRequest,
            ),
            ("POST", "/computers/box/jobs/bad%20id", "", BadRequest),
            (
                "POST",
                "/computers/box/jobs/job-1",
                r#"{"wait_ms":-1}"#,
                BadRequest,
            ),
            ("POST", "/computers/box/jobs/job-1", "[]", BadRequest),
            (
                "POST",
                "/computers/box/jobs/job-1/read",
                r#"{"list":true}"#,
                BadRequest,
            ),
            ("POST", "/computers/box/jobs/bad%20id/read", "", BadRequest),
            ("POST", "/computers/box/jobs/job-1/peek", "", NotFound),
            ("GET", "/computers/box/jobs", r#"{"x":1}"#, BadRequest),
            (
                "POST",
                "/computers/box/files/read",
                r#"{"path":"rel"}"#,
                BadRequest,
            ),
            (
                "POST",
                "/computers/box/files/write",
                r#"{"path":"/a","content":"x","computer_id":"y"}"#,
                BadRequest,
            ),
            ("POST", "/computers/box/files/chmod", "{}", NotFound),
            ("GET", "/nope", "", NotFound),
            ("PUT", "/computers", "", NotFound),
            ("POST", "/computers/box/reboot", "", NotFound),
        ] {
            assert_eq!(code(m, p, b), Err(want), "{m} {p} {b}");
        }
        assert_eq!(
            Op::decode("POST", "/computers", br#"{"computer_id":"a"}"#),
            Ok(Op::Create {
                computer_id: Some("a".into()),
                temporary: Some(true),
                network: None
            })
        );
    }

    #[test]
    fn decode_never_panics_on_junk() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let alphabet = b"/{}[]\":,abcxyz-_01 \\\0\xff\xc3computersexecrestart";
        for _ in 0..5_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 40) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|i| alphabet[((seed >> (i % 50)) as usize + i) % alphabet.len()])
                .collect();
            let text = String::from_utf8_lossy(&bytes);
            for m in ["GET", "POST", "DELETE"] {
                let _ = Op::decode(m, &text, &bytes);
                let _ = Op::decode(m, &format!("/computers/{text}/exec"), &bytes);
                let _ = Op::decode(m, &format!("/computers/box/jobs/{text}"), &bytes);
                let _ = Op::decode(m, &format!("/computers/box/jobs/{text}/read"), &bytes);
                let _ = Op::decode(m, &format!("/computers/box/files/{text}"), &bytes);
                let _ = Op::decode(m, "/computers/box/files/write", &bytes);
            }
        }
    }
}
