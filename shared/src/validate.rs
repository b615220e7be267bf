//! Input validation: raw tool arguments in, typed requests out (the operation they make
//! up is `crate::op::Op`, parsed by `crate::op::parse_tool_call`).
//!
//! Owns every rule about what an agent may pass (SPEC §3.2, §3.3): exactly one of
//! `command`/`args`, explicit `null` and empty values mean "absent", unknown arguments are
//! refused, limits on stdin and timeouts. A refused call never reaches a backend, so bad
//! input changes nothing. Messages say what to fix.

use serde_json::{Map, Value};

pub use crate::catalogue::{
    MAX_ARGS, MAX_ARGS_BYTES, MAX_COMMAND_BYTES, MAX_ENV_BYTES, MAX_ENV_ENTRIES, MAX_STDIN_BYTES,
    MAX_TIMEOUT_SECS, ToolKind,
};
use crate::ids::validate_computer_id;
use crate::jobs::{DEFAULT_WAIT_MS, JobCall, JobPoll, MAX_WAIT_MS, parse_signal, validate_job_id};

mod files;
mod snapshots;
pub use files::parse_file;
pub use snapshots::{checked_id, checked_label, fork_from, parse_snapshot};

/// What the agent asked a computer to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// A command line for the configured shell (`shell -c command`).
    Shell(String),
    /// An argv, executed directly.
    Argv(Vec<String>),
}

/// A validated `terminal_execute` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    pub program: Program,
    pub stdin: Option<String>,
    pub working_directory: Option<String>,
    /// `None`: the server's default (`--timeout`).
    pub timeout_secs: Option<u64>,
    pub computer_id: Option<String>,
    /// `None`: not given (the default, temporary, applies).
    pub temporary: Option<bool>,
    /// Added to the computer's environment for this command only (SPEC §3.10), in the
    /// order given.
    pub env: Vec<(String, String)>,
    /// `jobs` group: wait at most this long, then leave the command running as a job.
    pub yield_ms: Option<u64>,
    /// `network` (SPEC §3.11): the policy asked for the computer if this call makes it
    /// (`None`: not given, the server's).
    pub network: Option<crate::egress::Policy>,
}

/// Why a call was refused before anything ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// The tool does not exist (a protocol error, not a tool result).
    #[error("unknown tool {0:?}; call tools/list to see the available tools")]
    UnknownTool(String),
    /// The arguments are wrong (a tool result with `isError: true`).
    #[error("{0}")]
    Invalid(String),
}

fn invalid(message: impl Into<String>) -> ValidationError {
    ValidationError::Invalid(message.into())
}

/// Arguments with explicit nulls and empty strings/arrays removed.
pub(crate) struct Args {
    map: Map<String, Value>,
}

impl Args {
    pub(crate) fn new(
        raw: Option<&Value>,
        allowed: &[&str],
        tool: &str,
    ) -> Result<Self, ValidationError> {
        let map = match raw {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map.clone(),
            Some(other) => {
                return Err(invalid(format!(
                    "arguments of {tool} must be a JSON object, got {}",
                    json_type(other)
                )));
            }
        };
        let mut unknown: Vec<&str> = map
            .keys()
            .map(String::as_str)
            .filter(|k| !allowed.contains(k))
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            let list = if allowed.is_empty() {
                "it takes no arguments".to_owned()
            } else {
                format!("accepted arguments: {}", allowed.join(", "))
            };
            return Err(invalid(format!(
                "unknown argument{} {} for {tool}; {list}",
                if unknown.len() == 1 { "" } else { "s" },
                unknown
                    .iter()
                    .map(|k| format!("{k:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            )));
        }
        // An empty array is absent only where an array belongs (`args`): elsewhere it is
        // the wrong type, refused below, never a silent "absent" (`computer_id: []` would
        // otherwise make a new computer; issue 46).
        let map = map
            .into_iter()
            .filter(|(k, v)| match v {
                Value::Null => false,
                Value::String(s) => !s.is_empty(),
                Value::Array(a) => !a.is_empty() || !ARRAY_ARGS.contains(&k.as_str()),
                _ => true,
            })
            .collect();
        Ok(Self { map })
    }

    pub(crate) fn string(&self, key: &str) -> Result<Option<String>, ValidationError> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => {
                if s.contains('\0') {
                    Err(invalid(format!("`{key}` must not contain NUL characters")))
                } else {
                    Ok(Some(s.clone()))
                }
            }
            Some(other) => Err(invalid(format!(
                "`{key}` must be a string, got {}",
                json_type(other)
            ))),
        }
    }

    pub(crate) fn boolean(&self, key: &str) -> Result<Option<bool>, ValidationError> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(invalid(format!(
                "`{key}` must be true or false, got {}",
                json_type(other)
            ))),
        }
    }

    /// `network`: `"none"` or `{"allow": [rules]}` (SPEC §3.11).
    pub(crate) fn network(&self) -> Result<Option<crate::egress::Policy>, ValidationError> {
        self.map
            .get("network")
            .map(|v| crate::egress::Policy::of_argument(v).map_err(|e| invalid(e.to_string())))
            .transpose()
    }

    pub(crate) fn computer_id(&self) -> Result<Option<String>, ValidationError> {
        let Some(id) = self.string("computer_id")? else {
            return Ok(None);
        };
        validate_computer_id(&id).map_err(|e| invalid(e.to_string()))?;
        Ok(Some(id))
    }

    pub(crate) fn required_computer_id(&self, tool: &str) -> Result<String, ValidationError> {
        self.computer_id()?.ok_or_else(|| {
            invalid(format!(
                "{tool} needs `computer_id`: the id of the computer (see computer_list)"
            ))
        })
    }
}

pub(crate) fn json_type(v: &Value) -> String {
    crate::json::kind(v)
}

/// The arguments whose values are arrays (an empty one counts as absent, SPEC §3.2).
const ARRAY_ARGS: &[&str] = &["args"];

pub(crate) const EXEC_ARGS: &[&str] = &[
    "command",
    "args",
    "stdin",
    "working_directory",
    "timeout",
    "env",
    "computer_id",
    "temporary",
    "network",
    "yield_ms",
];

pub(crate) const JOB_ARGS: &[&str] = &[
    "job_id",
    "computer_id",
    "stdin",
    "stdin_base64",
    "close_stdin",
    "signal",
    "wait_ms",
    "list",
    "peek",
];

/// A whole number from `min` to `max` (a float with no fraction counts), or a message.
fn whole(
    args: &Args,
    key: &str,
    min: u64,
    max: u64,
    what: &str,
) -> Result<Option<u64>, ValidationError> {
    let fail = |got: String| {
        invalid(format!(
            "`{key}` must be a whole number of {what} from {min} to {max}, got {got}"
        ))
    };
    match args.map.get(key) {
        None => Ok(None),
        Some(Value::Number(n)) => {
            let v = n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            });
            match v {
                Some(v) if (min..=max).contains(&v) => Ok(Some(v)),
                _ => Err(fail(n.to_string())),
            }
        }
        Some(other) => Err(fail(json_type(other))),
    }
}

/// The `env` argument (SPEC §3.10): an object of names to strings, or (the schema's form,
/// which strict tool-schema converters such as OpenAI's accept) an array of
/// `{"name", "value"}` objects. An empty one is absent.
fn parse_env(args: &Args) -> Result<Vec<(String, String)>, ValidationError> {
    let pairs: Vec<(&str, &Value)> = match args.map.get("env") {
        None => return Ok(Vec::new()),
        Some(Value::Object(map)) => {
            check_env_count(map.len())?;
            map.iter().map(|(k, v)| (k.as_str(), v)).collect()
        }
        Some(Value::Array(items)) => {
            check_env_count(items.len())?;
            let mut pairs = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                pairs.push(env_item(i, item)?);
            }
            pairs
        }
        Some(other) => {
            return Err(invalid(format!(
                "`env` must be a list like [{{\"name\": \"MY_VAR\", \"value\": \"1\"}}] (or an object like {{\"MY_VAR\": \"1\"}}), got {}",
                json_type(other)
            )));
        }
    };
    let mut total = 0;
    let mut env: Vec<(String, String)> = Vec::with_capacity(pairs.len());
    for (name, value) in pairs {
        let mut bytes = name.bytes();
        let good_name = bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !good_name {
            return Err(invalid(format!(
                "`env` name {:?} is not a variable name: use letters, digits and _, not starting with a digit",
                crate::json::cut_for_message(name)
            )));
        }
        let Value::String(value) = value else {
            return Err(invalid(format!(
                "`env.{name}` must be a string, got {}",
                json_type(value)
            )));
        };
        if value.contains('\0') {
            return Err(invalid(format!(
                "`env.{name}` must not contain NUL characters"
            )));
        }
        if env.iter().any(|(n, _)| n == name) {
            return Err(invalid(format!(
                "`env` names {name} twice: give each variable once"
            )));
        }
        total += name.len() + value.len();
        env.push((name.to_owned(), value.clone()));
    }
    if total > MAX_ENV_BYTES {
        return Err(invalid(format!(
            "`env` holds {total} bytes; at most {MAX_ENV_BYTES} (64 KiB) of names and values are accepted"
        )));
    }
    Ok(env)
}

fn check_env_count(n: usize) -> Result<(), ValidationError> {
    if n > MAX_ENV_ENTRIES {
        return Err(invalid(format!(
            "`env` has {n} entries; at most {MAX_ENV_ENTRIES} are accepted"
        )));
    }
    Ok(())
}

/// Item `i` of the list form of `env`: exactly `{"name": …, "value": …}`.
fn env_item(i: usize, item: &Value) -> Result<(&str, &Value), ValidationError> {
    let shape = || {
        invalid(format!(
            "`env[{i}]` must be {{\"name\": \"MY_VAR\", \"value\": \"1\"}}, got {}",
            crate::json::cut_for_message(&item.to_string())
        ))
    };
    let Value::Object(map) = item else {
        return Err(shape());
    };
    if map.len() != 2 {
        return Err(shape());
    }
    match (map.get("name"), map.get("value")) {
        (Some(Value::String(name)), Some(value)) => Ok((name.as_str(), value)),
        _ => Err(shape()),
    }
}

/// Validates the arguments of `terminal_job`.
pub fn parse_job(tool: &str, arguments: Option<&Value>) -> Result<JobCall, ValidationError> {
    let args = Args::new(arguments, JOB_ARGS, tool)?;
    let computer_id = args.computer_id()?;
    let job_id = args.string("job_id")?;
    if args.boolean("list")? == Some(true) {
        let extra: Vec<&str> = JOB_ARGS
            .iter()
            .copied()
            .filter(|k| *k != "list" && *k != "computer_id" && args.map.contains_key(*k))
            .collect();
        if !extra.is_empty() {
            return Err(invalid(format!(
                "`list` takes only `computer_id`; drop {}",
                extra.join(", ")
            )));
        }
        return Ok(JobCall::List { computer_id });
    }
    let job_id = job_id.ok_or_else(|| {
        invalid(format!(
            "{tool} needs `job_id` (the id terminal_execute returned with `running: true`), or `list: true` to see the computer's jobs"
        ))
    })?;
    validate_job_id(&job_id).map_err(|e| invalid(e.to_string()))?;
    let stdin = match (args.string("stdin")?, args.string("stdin_base64")?) {
        (Some(_), Some(_)) => {
            return Err(invalid("pass `stdin` or `stdin_base64`, not both"));
        }
        (Some(text), None) => Some(text.into_bytes()),
        (None, Some(b64)) => {
            use base64::Engine;
            Some(
                base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .map_err(|e| invalid(format!("`stdin_base64` is not base64: {e}")))?,
            )
        }
        (None, None) => None,
    };
    if let Some(bytes) = &stdin
        && bytes.len() > MAX_STDIN_BYTES
    {
        return Err(invalid(format!(
            "`stdin` is {} bytes; at most {MAX_STDIN_BYTES} bytes (2 MiB) per call are accepted: write it in several calls",
            bytes.len()
        )));
    }
    let signal = match args.map.get("signal") {
        None => None,
        Some(raw) => Some(parse_signal(raw).map_err(|e| invalid(e.to_string()))?),
    };
    let peek = args.boolean("peek")?.unwrap_or(false);
    if peek {
        let extra: Vec<&str> = ["stdin", "stdin_base64", "close_stdin", "wait_ms"]
            .into_iter()
            .filter(|k| args.map.contains_key(*k))
            .collect();
        if !extra.is_empty() {
            return Err(invalid(format!(
                "`peek` only looks (it answers at once and takes no output; a `signal` may come with it): drop {}",
                extra.join(", ")
            )));
        }
    }
    Ok(JobCall::Poll(JobPoll {
        job_id,
        computer_id,
        stdin,
        close_stdin: args.boolean("close_stdin")?.unwrap_or(false),
        signal,
        wait_ms: if peek {
            0
        } else {
            whole(&args, "wait_ms", 0, MAX_WAIT_MS, "milliseconds")?.unwrap_or(DEFAULT_WAIT_MS)
        },
        peek,
    }))
}

/// Validates the arguments of the exec tool (named `tool` in messages); `jobs`: the
/// `jobs` group is on (`yield_ms` is accepted).
pub fn parse_exec(
    tool: &str,
    arguments: Option<&Value>,
    jobs: bool,
) -> Result<ExecRequest, ValidationError> {
    // `yield_ms` is an argument only where the `jobs` group is listed.
    let allowed: Vec<&str> = EXEC_ARGS
        .iter()
        .copied()
        .filter(|k| jobs || *k != "yield_ms")
        .collect();
    let args = Args::new(arguments, &allowed, tool)?;
    let command = args.string("command")?;
    if let Some(c) = &command
        && c.len() > MAX_COMMAND_BYTES
    {
        return Err(invalid(format!(
            "`command` is {} bytes; at most {MAX_COMMAND_BYTES} bytes (Linux's limit for one argument, 128 KiB) are accepted: write a longer script to a file (computer_file_write or stdin) and run that file",
            c.len()
        )));
    }
    let argv = match args.map.get("args") {
        None => None,
        Some(Value::Array(items)) => {
            if items.len() > MAX_ARGS {
                return Err(invalid(format!(
                    "`args` has {} entries; at most {MAX_ARGS} are accepted: pass long lists in a file or on stdin (e.g. through xargs)",
                    items.len()
                )));
            }
            let mut argv = Vec::with_capacity(items.len());
            let mut total = 0usize;
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) if s.contains('\0') => {
                        return Err(invalid(format!(
                            "`args[{i}]` must not contain NUL characters"
                        )));
                    }
                    Value::String(s) if s.len() > MAX_COMMAND_BYTES => {
                        return Err(invalid(format!(
                            "`args[{i}]` is {} bytes; at most {MAX_COMMAND_BYTES} bytes (Linux's limit for one argument, 128 KiB) are accepted: pass long data in a file or on stdin",
                            s.len()
                        )));
                    }
                    Value::String(s) => {
                        total += s.len() + 1;
                        if total > MAX_ARGS_BYTES {
                            return Err(invalid(format!(
                                "`args` is over {MAX_ARGS_BYTES} bytes (1 MiB) in all: pass long data in a file or on stdin"
                            )));
                        }
                        argv.push(s.clone())
                    }
                    other => {
                        return Err(invalid(format!(
                            "`args` must be an array of strings; args[{i}] is {}",
                            json_type(other)
                        )));
                    }
                }
            }
            if argv[0].is_empty() {
                return Err(invalid("`args[0]` (the program to run) must not be empty"));
            }
            Some(argv)
        }
        Some(other) => {
            return Err(invalid(format!(
                "`args` must be an array of strings such as [\"ls\", \"-la\"], got {}",
                json_type(other)
            )));
        }
    };
    let program = match (command, argv) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "pass either `command` (a shell command line) or `args` (an argv array), not both",
            ));
        }
        (None, None) => {
            return Err(invalid(
                "pass `command` (a shell command line, e.g. \"ls -la /\") or `args` (an argv array, e.g. [\"ls\", \"-la\", \"/\"])",
            ));
        }
        (Some(command), None) => Program::Shell(command),
        (None, Some(argv)) => Program::Argv(argv),
    };
    let stdin = args.string("stdin")?;
    if let Some(stdin) = &stdin
        && stdin.len() > MAX_STDIN_BYTES
    {
        return Err(invalid(format!(
            "`stdin` is {} bytes; at most {MAX_STDIN_BYTES} bytes (2 MiB) are accepted: write large inputs to a file in several calls",
            stdin.len()
        )));
    }
    let working_directory = args.string("working_directory")?;
    if let Some(dir) = &working_directory
        && !dir.starts_with('/')
    {
        return Err(invalid(format!(
            "`working_directory` must be an absolute path such as \"/tmp\", got {:?}",
            crate::json::cut_for_message(dir)
        )));
    }
    let timeout_secs = whole(&args, "timeout", 1, MAX_TIMEOUT_SECS, "seconds")?;
    let limit_ms = timeout_secs.unwrap_or(MAX_TIMEOUT_SECS) * 1000;
    let yield_ms = whole(&args, "yield_ms", 0, limit_ms, "milliseconds")?;
    Ok(ExecRequest {
        program,
        stdin,
        working_directory,
        timeout_secs,
        computer_id: args.computer_id()?,
        temporary: args.boolean("temporary")?,
        env: parse_env(&args)?,
        yield_ms,
        network: args.network()?,
    })
}
