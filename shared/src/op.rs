//! Typed operations: the one currency between the edge and the places computers live.
//!
//! The gateway's tool host turns a validated tool call into an [`Op`] and hands it to an
//! [`OpHandler`]: an executor (over its `/v1` REST API, [`Op::encode`] on one side and
//! [`Op::decode`] on the other) or a provider reached from the Worker itself. Every handler
//! answers with the `structuredContent` of the matching tool, or an [`ApiError`] whose
//! code is stable end to end. Ids in an `Op` are the caller's (1–63 characters); the team
//! travels beside the op (the executor's token), and each handler maps it to backend names
//! itself ([`crate::teams`]).

use std::future::Future;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::capabilities::Capability;
use crate::executor_api::{ApiError, ErrorCode, Scope};
use crate::files::{EDIT_TOOL, FileCall, READ_TOOL, WRITE_TOOL};
use crate::jobs::{JobCall, JobPoll};
use crate::maybe_send::{MaybeSend, MaybeSync};
use crate::validate::{ExecRequest, Program, ValidationError, parse_exec, parse_file, parse_job};

/// One operation on a team's computers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// The team's computers (the executor's or provider's view of them).
    List,
    /// Create the computer, or attach to it if it exists with the same `temporary`.
    Create {
        computer_id: String,
        temporary: bool,
    },
    /// Run a command; `computer_id` is always set (see [`Op::exec`]). Creates the computer
    /// on first use, with `temporary` (default true).
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
    /// `terminal_job` on one job; `poll.computer_id` is always set (see [`Op::job`]).
    Job(JobPoll),
    /// [`Op::Job`] answered as bytes: the read's [`crate::jobs::JobOutput`] itself (its
    /// serde form, output in base64), not the tool's view of it. How a Tasks host keeps a
    /// task's whole output exactly ([`crate::tasks::Task::absorb`]).
    JobRead(JobPoll),
    /// The jobs computer `computer_id` keeps.
    Jobs {
        computer_id: String,
    },
    /// A file tool; its `computer_id` is always set (see [`Op::file`]). Creates the
    /// computer on first use, like an exec.
    File(FileCall),
}

/// An operation as an HTTP request of the executor API (the path is below
/// [`crate::executor_api::PREFIX`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiRequest {
    pub method: &'static str,
    pub path: String,
    pub body: Option<Value>,
}

/// `POST /v1/computers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    computer_id: String,
    #[serde(default = "yes")]
    temporary: bool,
}

fn yes() -> bool {
    true
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::BadRequest, message)
}

impl Op {
    /// An exec on `computer_id` (which replaces any id in `request`).
    pub fn exec(computer_id: &str, mut request: ExecRequest) -> Op {
        request.computer_id = Some(computer_id.to_owned());
        Op::Exec(request)
    }

    /// A `terminal_job` call on `computer_id` (which replaces any id in `call`).
    pub fn job(computer_id: &str, call: JobCall) -> Op {
        match call {
            JobCall::List { .. } => Op::Jobs {
                computer_id: computer_id.to_owned(),
            },
            JobCall::Poll(mut poll) => {
                poll.computer_id = Some(computer_id.to_owned());
                Op::Job(poll)
            }
        }
    }

    /// A file tool call on `computer_id` (which replaces any id in `call`).
    pub fn file(computer_id: &str, call: FileCall) -> Op {
        let temporary = call.temporary();
        Op::File(call.on(computer_id, temporary))
    }

    /// The scope a caller needs for it (SPEC §5): commands, jobs, files and the list need
    /// `exec` (a command or file call may create its computer, as the tools do: a
    /// temporary one; a new permanent one needs `manage` too, checked where it would be
    /// made, [`crate::executor_api::Scope::may_create`]); creating, restarting, resetting
    /// and deleting need `manage`.
    pub fn scope(&self) -> Scope {
        match self {
            Op::List
            | Op::Exec(_)
            | Op::Job(_)
            | Op::JobRead(_)
            | Op::Jobs { .. }
            | Op::File(_) => Scope::Exec,
            Op::Create { .. }
            | Op::Restart { .. }
            | Op::FactoryReset { .. }
            | Op::Delete { .. } => Scope::Manage,
        }
    }

    /// What the computer's backend must be able to do for it (`None`: any backend).
    pub fn needs(&self) -> Option<Capability> {
        match self {
            Op::Exec(r) if r.yield_ms.is_some() => Some(Capability::Jobs),
            Op::Job(_) | Op::JobRead(_) | Op::Jobs { .. } => Some(Capability::Jobs),
            Op::File(_) => Some(Capability::Files),
            Op::List
            | Op::Create { .. }
            | Op::Exec(_)
            | Op::Restart { .. }
            | Op::FactoryReset { .. }
            | Op::Delete { .. } => None,
        }
    }

    /// The computer the operation is about (`None` for [`Op::List`]).
    pub fn computer_id(&self) -> Option<&str> {
        match self {
            Op::List => None,
            Op::Exec(r) => r.computer_id.as_deref(),
            Op::Job(p) | Op::JobRead(p) => p.computer_id.as_deref(),
            Op::File(f) => f.computer_id(),
            Op::Create { computer_id, .. }
            | Op::Restart { computer_id }
            | Op::FactoryReset { computer_id }
            | Op::Delete { computer_id }
            | Op::Jobs { computer_id } => Some(computer_id),
        }
    }

    /// A short name for logs and spans.
    pub fn name(&self) -> &'static str {
        match self {
            Op::List => "list",
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
        }
    }

    /// The executor API request for this operation.
    pub fn encode(&self) -> ApiRequest {
        let id = self.computer_id().unwrap_or_default();
        let (method, path, body) = match self {
            Op::List => ("GET", "/computers".to_owned(), None),
            Op::Create {
                computer_id,
                temporary,
            } => (
                "POST",
                "/computers".to_owned(),
                Some(json!({"computer_id": computer_id, "temporary": temporary})),
            ),
            Op::Exec(r) => {
                let mut b = Map::new();
                match &r.program {
                    Program::Shell(c) => b.insert("command".into(), json!(c)),
                    Program::Argv(a) => b.insert("args".into(), json!(a)),
                };
                if let Some(s) = &r.stdin {
                    b.insert("stdin".into(), json!(s));
                }
                if let Some(d) = &r.working_directory {
                    b.insert("working_directory".into(), json!(d));
                }
                if let Some(t) = r.timeout_secs {
                    b.insert("timeout".into(), json!(t));
                }
                if let Some(t) = r.temporary {
                    b.insert("temporary".into(), json!(t));
                }
                if !r.env.is_empty() {
                    let env: Map<String, Value> =
                        r.env.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
                    b.insert("env".into(), Value::Object(env));
                }
                if let Some(y) = r.yield_ms {
                    b.insert("yield_ms".into(), json!(y));
                }
                (
                    "POST",
                    format!("/computers/{id}/exec"),
                    Some(Value::Object(b)),
                )
            }
            Op::Restart { .. } => ("POST", format!("/computers/{id}/restart"), None),
            Op::FactoryReset { .. } => ("POST", format!("/computers/{id}/factory-reset"), None),
            Op::Delete { .. } => ("DELETE", format!("/computers/{id}"), None),
            Op::Job(p) => (
                "POST",
                format!("/computers/{id}/jobs/{}", p.job_id),
                Some(poll_body(p)),
            ),
            Op::JobRead(p) => (
                "POST",
                format!("/computers/{id}/jobs/{}/read", p.job_id),
                Some(poll_body(p)),
            ),
            Op::Jobs { .. } => ("GET", format!("/computers/{id}/jobs"), None),
            Op::File(f) => {
                let mut b = Map::new();
                b.insert("path".into(), json!(f.path()));
                if let Some(t) = f.temporary() {
                    b.insert("temporary".into(), json!(t));
                }
                let verb = match f {
                    FileCall::Read(r) => {
                        b.insert("offset".into(), json!(r.offset));
                        b.insert("length".into(), json!(r.length));
                        "read"
                    }
                    FileCall::Write(w) => {
                        use base64::Engine;
                        let b64 = base64::engine::general_purpose::STANDARD.encode(&w.content);
                        b.insert("content_base64".into(), json!(b64));
                        b.insert("append".into(), json!(w.append));
                        b.insert("create_only".into(), json!(w.create_only));
                        b.insert("make_dirs".into(), json!(w.make_dirs));
                        if let Some(m) = w.mode {
                            b.insert("mode".into(), json!(crate::files::mode_string(m)));
                        }
                        "write"
                    }
                    FileCall::Edit(e) => {
                        b.insert("old_text".into(), json!(e.old_text));
                        b.insert("new_text".into(), json!(e.new_text));
                        b.insert(
                            "expected_replacements".into(),
                            json!(e.expected_replacements),
                        );
                        "edit"
                    }
                };
                (
                    "POST",
                    format!("/computers/{id}/files/{verb}"),
                    Some(Value::Object(b)),
                )
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
                    computer_id: id(&b.computer_id)?,
                    temporary: b.temporary,
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
                let request =
                    parse_exec("terminal_execute", Some(&args), true).map_err(|e| match e {
                        ValidationError::Invalid(m) => bad(m),
                        other => ApiError::new(ErrorCode::Internal, other.to_string()),
                    })?;
                Ok(Op::exec(&computer_id, request))
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
                    computer_id: id(raw)?,
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
                let call = parse_file(tool, Some(&args)).map_err(|e| match e {
                    ValidationError::Invalid(m) => bad(m),
                    other => ApiError::new(ErrorCode::Internal, other.to_string()),
                })?;
                Ok(Op::file(&computer_id, call))
            }
            ("DELETE", ["computers", raw]) => {
                no_body()?;
                Ok(Op::Delete {
                    computer_id: id(raw)?,
                })
            }
            _ => Err(ApiError::new(
                ErrorCode::NotFound,
                "no such route; see shared::executor_api for the /v1 routes",
            )),
        }
    }
}

/// The body of a job poll ([`Op::Job`], [`Op::JobRead`]): `terminal_job`'s arguments
/// without the ids, which are in the path.
fn poll_body(p: &JobPoll) -> Value {
    let mut b = Map::new();
    if let Some(bytes) = &p.stdin {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        b.insert("stdin_base64".into(), json!(b64));
    }
    if p.close_stdin {
        b.insert("close_stdin".into(), json!(true));
    }
    if let Some(sig) = p.signal {
        b.insert("signal".into(), json!(sig));
    }
    if p.peek {
        b.insert("peek".into(), json!(true));
    } else {
        b.insert("wait_ms".into(), json!(p.wait_ms));
    }
    Value::Object(b)
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
    let call = parse_job("terminal_job", Some(&Value::Object(map))).map_err(|e| match e {
        ValidationError::Invalid(m) => bad(m),
        other => ApiError::new(ErrorCode::Internal, other.to_string()),
    })?;
    match Op::job(computer_id, call) {
        Op::Job(poll) => Ok(poll),
        _ => Err(bad("request body: a job poll names one job")),
    }
}

/// Something that carries out operations for a team: an executor's registry, the Worker's
/// client of an executor, or a provider the Worker reaches itself.
pub trait OpHandler: MaybeSync {
    /// Does `op` for `team`: the tool's `structuredContent`, or a coded error.
    fn handle(
        &self,
        team: &str,
        op: Op,
    ) -> impl Future<Output = Result<Value, ApiError>> + MaybeSend;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(op: Op) {
        let r = op.encode();
        let body = r.body.as_ref().map(Value::to_string).unwrap_or_default();
        assert_eq!(
            Op::decode(r.method, &r.path, body.as_bytes()),
            Ok(op.clone()),
            "{r:?}"
        );
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
        }
    }

    #[test]
    fn every_op_round_trips() {
        let long = "x".repeat(63);
        round_trip(Op::List);
        round_trip(Op::Create {
            computer_id: long.clone(),
            temporary: false,
        });
        round_trip(Op::exec(&long, exec(Program::Shell("echo hi".into()))));
        let mut full = exec(Program::Argv(vec!["ls".into(), "-l".into()]));
        full.stdin = Some("in\0put".replace('\0', ""));
        full.working_directory = Some("/tmp".into());
        full.timeout_secs = Some(7);
        full.temporary = Some(false);
        full.env = vec![("B".into(), "2".into()), ("A".into(), "1".into())];
        full.yield_ms = Some(0);
        round_trip(Op::exec("box", full));
        round_trip(Op::Jobs {
            computer_id: "box".into(),
        });
        round_trip(Op::job(
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
        round_trip(Op::job(
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
        round_trip(Op::job(
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
        round_trip(Op::file(
            "box",
            FileCall::Read(crate::files::FileRead {
                computer_id: None,
                temporary: Some(false),
                path: "/a b/ü".into(),
                offset: 7,
                length: 9,
            }),
        ));
        round_trip(Op::file(
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
        round_trip(Op::file(
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
        round_trip(Op::file(
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
                computer_id: "a".into(),
                temporary: true
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
