//! Input validation: raw tool arguments in, typed [`ToolCall`]s out.
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
use crate::catalogue::{ToolNames, tool_kind};
use crate::ids::validate_computer_id;
use crate::jobs::{DEFAULT_WAIT_MS, JobCall, JobPoll, MAX_WAIT_MS, parse_signal, validate_job_id};

mod files;
pub use files::parse_file;

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
}

/// A validated tool call, ready for a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolCall {
    Exec(ExecRequest),
    List,
    Dashboard,
    Create {
        computer_id: Option<String>,
        /// `None`: attach to an existing computer as it is, or create a temporary one.
        temporary: Option<bool>,
    },
    Restart {
        computer_id: String,
    },
    FactoryReset {
        computer_id: String,
    },
    Delete {
        computer_id: String,
    },
    /// `terminal_job` (group `jobs`).
    Job(crate::jobs::JobCall),
    /// `computer_file_*` (group `files`).
    File(crate::files::FileCall),
}

impl ToolCall {
    /// What the computer's backend must be able to do for it (`None`: any backend).
    pub fn needs(&self) -> Option<crate::capabilities::Capability> {
        use crate::capabilities::Capability;
        match self {
            ToolCall::Exec(r) if r.yield_ms.is_some() => Some(Capability::Jobs),
            ToolCall::Job(_) => Some(Capability::Jobs),
            ToolCall::File(_) => Some(Capability::Files),
            ToolCall::Exec(_)
            | ToolCall::List
            | ToolCall::Dashboard
            | ToolCall::Create { .. }
            | ToolCall::Restart { .. }
            | ToolCall::FactoryReset { .. }
            | ToolCall::Delete { .. } => None,
        }
    }
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
struct Args {
    map: Map<String, Value>,
}

impl Args {
    fn new(raw: Option<&Value>, allowed: &[&str], tool: &str) -> Result<Self, ValidationError> {
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

    fn string(&self, key: &str) -> Result<Option<String>, ValidationError> {
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

    fn boolean(&self, key: &str) -> Result<Option<bool>, ValidationError> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(invalid(format!(
                "`{key}` must be true or false, got {}",
                json_type(other)
            ))),
        }
    }

    fn computer_id(&self) -> Result<Option<String>, ValidationError> {
        let Some(id) = self.string("computer_id")? else {
            return Ok(None);
        };
        validate_computer_id(&id).map_err(|e| invalid(e.to_string()))?;
        Ok(Some(id))
    }

    fn required_computer_id(&self, tool: &str) -> Result<String, ValidationError> {
        self.computer_id()?.ok_or_else(|| {
            invalid(format!(
                "{tool} needs `computer_id`: the id of the computer (see computer_list)"
            ))
        })
    }
}

fn json_type(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {:?}", truncate_for_message(s)),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

fn truncate_for_message(s: &str) -> String {
    if s.chars().count() <= 40 {
        s.to_owned()
    } else {
        let head: String = s.chars().take(40).collect();
        format!("{head}…")
    }
}

/// The arguments whose values are arrays (an empty one counts as absent, SPEC §3.2).
const ARRAY_ARGS: &[&str] = &["args"];

const EXEC_ARGS: &[&str] = &[
    "command",
    "args",
    "stdin",
    "working_directory",
    "timeout",
    "env",
    "computer_id",
    "temporary",
    "yield_ms",
];

const JOB_ARGS: &[&str] = &[
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

/// Validates a `tools/call` for one of the tools in `names`.
pub fn parse_tool_call(
    names: &ToolNames,
    name: &str,
    arguments: Option<&Value>,
) -> Result<ToolCall, ValidationError> {
    let kind = tool_kind(names, name).ok_or_else(|| ValidationError::UnknownTool(name.into()))?;
    match kind {
        ToolKind::Exec => parse_exec(name, arguments, names.jobs).map(ToolCall::Exec),
        ToolKind::Job => parse_job(name, arguments).map(ToolCall::Job),
        ToolKind::File => parse_file(name, arguments).map(ToolCall::File),
        ToolKind::List => Args::new(arguments, &[], name).map(|_| ToolCall::List),
        ToolKind::Dashboard => Args::new(arguments, &[], name).map(|_| ToolCall::Dashboard),
        ToolKind::Create => {
            let args = Args::new(arguments, &["computer_id", "temporary"], name)?;
            Ok(ToolCall::Create {
                computer_id: args.computer_id()?,
                temporary: args.boolean("temporary")?,
            })
        }
        ToolKind::Restart | ToolKind::FactoryReset | ToolKind::Delete => {
            let args = Args::new(arguments, &["computer_id"], name)?;
            let computer_id = args.required_computer_id(name)?;
            Ok(match kind {
                ToolKind::Restart => ToolCall::Restart { computer_id },
                ToolKind::FactoryReset => ToolCall::FactoryReset { computer_id },
                _ => ToolCall::Delete { computer_id },
            })
        }
    }
}

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
                truncate_for_message(name)
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
            truncate_for_message(&item.to_string())
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
            truncate_for_message(dir)
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names() -> ToolNames {
        ToolNames::new("terminal_execute", true)
    }

    fn exec(args: Value) -> Result<ExecRequest, String> {
        match parse_tool_call(&names(), "terminal_execute", Some(&args)) {
            Ok(ToolCall::Exec(r)) => Ok(r),
            Ok(other) => Err(format!("unexpected {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn command_and_args() {
        let r = exec(json!({"command": "ls"})).unwrap();
        assert_eq!(r.program, Program::Shell("ls".into()));
        assert_eq!(r.temporary, None);
        let r = exec(json!({"args": ["ls", "-la"], "temporary": false})).unwrap();
        assert_eq!(r.program, Program::Argv(vec!["ls".into(), "-la".into()]));
        assert_eq!(r.temporary, Some(false));
    }

    #[test]
    fn nulls_and_empties_are_absent() {
        let r = exec(
            json!({"command": "ls", "args": null, "stdin": null, "timeout": null,
            "computer_id": "", "working_directory": null, "temporary": null}),
        )
        .unwrap();
        assert_eq!(r.computer_id, None);
        assert_eq!(r.timeout_secs, None);
        let r = exec(json!({"command": "", "args": ["echo"]})).unwrap();
        assert_eq!(r.program, Program::Argv(vec!["echo".into()]));
        let r = exec(json!({"command": "ls", "args": []})).unwrap();
        assert_eq!(r.program, Program::Shell("ls".into()));
    }

    #[test]
    fn issue_46_an_empty_array_where_no_array_belongs_is_refused() {
        for key in [
            "computer_id",
            "stdin",
            "working_directory",
            "temporary",
            "timeout",
        ] {
            let mut args = json!({"command": "ls"});
            args[key] = json!([]);
            let e = exec(args).unwrap_err().to_string();
            assert!(e.contains(&format!("`{key}`")), "{key}: {e}");
        }
        let names = ToolNames::with_groups("terminal_execute", crate::catalogue::Groups::ALL);
        for (tool, args) in [
            (
                "computer_file_read",
                json!({"path": "/f", "computer_id": []}),
            ),
            (
                "terminal_job",
                json!({"job_id": "job-1", "computer_id": []}),
            ),
            ("computer_restart", json!({"computer_id": []})),
            ("computer_create", json!({"computer_id": []})),
        ] {
            assert!(
                parse_tool_call(&names, tool, Some(&args)).is_err(),
                "{tool} took computer_id: []"
            );
        }
    }

    #[test]
    fn refusals_say_what_to_fix() {
        let cases = [
            (json!({}), "pass `command`"),
            (json!({"command": "ls", "args": ["ls"]}), "not both"),
            (
                json!({"command": "ls", "bogus": 1}),
                "unknown argument \"bogus\"",
            ),
            (json!({"command": 5}), "`command` must be a string"),
            (json!({"args": "ls"}), "`args` must be an array"),
            (json!({"args": ["ls", 3]}), "args[1]"),
            (json!({"args": [""]}), "args[0]"),
            (
                json!({"command": "x".repeat(MAX_COMMAND_BYTES + 1)}),
                "at most 131071 bytes",
            ),
            (
                json!({"args": vec!["a"; MAX_ARGS + 1]}),
                "at most 32768 are accepted",
            ),
            (
                json!({"args": ["echo", "y".repeat(MAX_COMMAND_BYTES + 1)]}),
                "`args[1]` is 131072 bytes",
            ),
            (
                json!({"args": vec!["z".repeat(100_000); 11]}),
                "over 1048576 bytes",
            ),
            (json!({"command": "ls", "timeout": 0}), "`timeout`"),
            (json!({"command": "ls", "timeout": -3}), "`timeout`"),
            (json!({"command": "ls", "timeout": 1.5}), "`timeout`"),
            (json!({"command": "ls", "timeout": "10"}), "`timeout`"),
            (json!({"command": "ls", "timeout": 86401}), "`timeout`"),
            (
                json!({"command": "ls", "working_directory": "tmp"}),
                "absolute",
            ),
            (
                json!({"command": "ls", "computer_id": "Bad_Id"}),
                "lowercase",
            ),
            (
                json!({"command": "ls", "temporary": "false"}),
                "true or false",
            ),
            (json!({"command": "a\u{0}b"}), "NUL"),
        ];
        for (args, needle) in cases {
            let err = exec(args.clone()).unwrap_err();
            assert!(err.contains(needle), "{args}: {err}");
        }
        let big = "x".repeat(MAX_STDIN_BYTES + 1);
        assert!(
            exec(json!({"command": "cat", "stdin": big}))
                .unwrap_err()
                .contains("2 MiB")
        );
        assert!(exec(json!({"command": "ls", "timeout": 5.0})).is_ok());
    }

    #[test]
    fn env_and_yield() {
        let jobs = ToolNames::with_groups(
            "terminal_execute",
            crate::catalogue::Groups {
                jobs: true,
                files: false,
                lifecycle: false,
            },
        );
        let parse = |args: Value| match parse_tool_call(&jobs, "terminal_execute", Some(&args)) {
            Ok(ToolCall::Exec(r)) => Ok(r),
            Ok(other) => Err(format!("unexpected {other:?}")),
            Err(e) => Err(e.to_string()),
        };
        let r =
            parse(json!({"command": "x", "env": {"B": "2", "A_1": ""}, "yield_ms": 0})).unwrap();
        assert_eq!(
            r.env,
            [("B".into(), "2".into()), ("A_1".into(), String::new())]
        );
        assert_eq!(r.yield_ms, Some(0));
        assert_eq!(
            parse(json!({"command": "x", "timeout": 2, "yield_ms": 2000}))
                .unwrap()
                .yield_ms,
            Some(2000)
        );
        let many: Map<String, Value> = (0..257).map(|i| (format!("V{i}"), json!("x"))).collect();
        for (args, needle) in [
            (
                json!({"command": "x", "timeout": 2, "yield_ms": 2001}),
                "`yield_ms`",
            ),
            (json!({"command": "x", "yield_ms": -1}), "`yield_ms`"),
            (
                json!({"command": "x", "env": {"9A": "x"}}),
                "not a variable name",
            ),
            (
                json!({"command": "x", "env": {"": "x"}}),
                "not a variable name",
            ),
            (
                json!({"command": "x", "env": {"A": null}}),
                "must be a string",
            ),
            (json!({"command": "x", "env": {"A": "a\u{0}"}}), "NUL"),
            (
                json!({"command": "x", "env": Value::Object(many)}),
                "at most 256",
            ),
            (
                json!({"command": "x", "env": {"BIG": "x".repeat(MAX_ENV_BYTES)}}),
                "64 KiB",
            ),
        ] {
            let e = parse(args.clone()).unwrap_err();
            assert!(e.contains(needle), "{args}: {e}");
        }
        // Without the jobs group, `yield_ms` is not an argument at all.
        assert!(
            exec(json!({"command": "x", "yield_ms": 5}))
                .unwrap_err()
                .contains("unknown argument \"yield_ms\"")
        );
        assert!(exec(json!({"command": "x", "env": {"A": "1"}})).is_ok());
        // The list form (the schema's) reads the same; an empty one is absent.
        let r = parse(json!({"command": "x", "env": [{"name": "B", "value": "2"}, {"value": "", "name": "A_1"}]}))
            .unwrap();
        assert_eq!(
            r.env,
            [("B".into(), "2".into()), ("A_1".into(), String::new())]
        );
        assert!(
            parse(json!({"command": "x", "env": []}))
                .unwrap()
                .env
                .is_empty()
        );
        let many: Vec<Value> = (0..257)
            .map(|i| json!({"name": format!("V{i}"), "value": "x"}))
            .collect();
        for (env, needle) in [
            (json!([{"name": "A"}]), "`env[0]` must be"),
            (
                json!([{"name": "A", "value": "1", "x": 1}]),
                "`env[0]` must be",
            ),
            (json!([{"name": 1, "value": "1"}]), "`env[0]` must be"),
            (json!(["A=1"]), "`env[0]` must be"),
            (json!([{"name": "9A", "value": "1"}]), "not a variable name"),
            (json!([{"name": "A", "value": 1}]), "must be a string"),
            (
                json!([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
                "twice",
            ),
            (Value::Array(many), "at most 256"),
            (json!("A=1"), "must be a list like"),
        ] {
            let e = parse(json!({"command": "x", "env": env.clone()})).unwrap_err();
            assert!(e.contains(needle), "{env}: {e}");
        }
    }

    #[test]
    fn job_calls() {
        let ok = |args: Value| parse_job("terminal_job", Some(&args));
        assert_eq!(
            ok(json!({"list": true, "computer_id": "box"})).unwrap(),
            JobCall::List {
                computer_id: Some("box".into())
            }
        );
        let JobCall::Poll(p) = ok(json!({"job_id": "job-1", "stdin_base64": "AAE=", "signal": "TERM", "close_stdin": true})).unwrap() else {
            panic!("a poll");
        };
        assert_eq!(
            (p.stdin, p.signal, p.close_stdin, p.wait_ms, p.peek),
            (Some(vec![0, 1]), Some(15), true, DEFAULT_WAIT_MS, false)
        );
        // A peek looks at once; a signal may come with it (the dashboard's Stop).
        let JobCall::Poll(p) =
            ok(json!({"job_id": "job-1", "peek": true, "signal": "TERM"})).unwrap()
        else {
            panic!("a poll");
        };
        assert_eq!((p.peek, p.wait_ms, p.signal), (true, 0, Some(15)));
        for (args, needle) in [
            (json!({}), "needs `job_id`"),
            (json!({"job_id": "x", "wait_ms": 60_001}), "`wait_ms`"),
            (json!({"job_id": "x", "stdin_base64": "!!"}), "not base64"),
            (json!({"job_id": "x", "signal": 0}), "`signal`"),
            (json!({"job_id": "x/y"}), "`job_id`"),
            (json!({"list": true, "stdin": "a"}), "`list` takes only"),
            (json!({"list": true, "peek": true}), "`list` takes only"),
            (json!({"job_id": "x", "bogus": 1}), "unknown argument"),
            (json!({"job_id": "x", "peek": 1}), "`peek`"),
            (
                json!({"job_id": "x", "peek": true, "stdin": "a", "wait_ms": 5}),
                "drop stdin, wait_ms",
            ),
            (
                json!({"job_id": "x", "peek": true, "close_stdin": false}),
                "drop close_stdin",
            ),
        ] {
            let e = ok(args.clone()).unwrap_err().to_string();
            assert!(e.contains(needle), "{args}: {e}");
        }
    }

    #[test]
    fn arguments_must_be_an_object() {
        let err = parse_tool_call(&names(), "terminal_execute", Some(&json!([1]))).unwrap_err();
        assert!(err.to_string().contains("JSON object"));
    }

    #[test]
    fn lifecycle_tools() {
        let n = names();
        assert_eq!(
            parse_tool_call(&n, "computer_create", None).unwrap(),
            ToolCall::Create {
                computer_id: None,
                temporary: None
            }
        );
        assert_eq!(
            parse_tool_call(&n, "computer_delete", Some(&json!({"computer_id": "a1"}))).unwrap(),
            ToolCall::Delete {
                computer_id: "a1".into()
            }
        );
        let err = parse_tool_call(&n, "computer_restart", Some(&json!({}))).unwrap_err();
        assert!(err.to_string().contains("needs `computer_id`"));
        let err = parse_tool_call(&n, "computer_list", Some(&json!({"x": 1}))).unwrap_err();
        assert!(err.to_string().contains("takes no arguments"));
        let err = parse_tool_call(&n, "nope", None).unwrap_err();
        assert!(matches!(err, ValidationError::UnknownTool(_)));
        let off = ToolNames::new("terminal_execute", false);
        assert!(parse_tool_call(&off, "computer_list", None).is_err());
    }

    fn all_groups() -> ToolNames {
        ToolNames::with_groups("terminal_execute", crate::catalogue::Groups::ALL)
    }

    #[test]
    fn several_unknown_arguments_are_all_named_with_the_accepted_ones() {
        let e = exec(json!({"command": "ls", "zeta": 1, "alpha": 2})).unwrap_err();
        assert!(
            e.contains("unknown arguments \"alpha\", \"zeta\" for terminal_execute"),
            "{e}"
        );
        assert!(
            e.contains("accepted arguments: command, args, stdin"),
            "{e}"
        );
    }

    #[test]
    fn a_long_value_of_the_wrong_type_is_cut_to_40_characters_in_the_message() {
        let e = exec(json!({"command": "ls", "timeout": "9".repeat(100)})).unwrap_err();
        assert!(
            e.contains(&format!("the string \"{}…\"", "9".repeat(40))),
            "{e}"
        );
        assert!(!e.contains(&"9".repeat(41)), "{e}");
        // Short values are shown whole.
        let e = exec(json!({"command": "ls", "timeout": "soon"})).unwrap_err();
        assert!(e.ends_with("got the string \"soon\""), "{e}");
    }

    #[test]
    fn yield_ms_without_a_timeout_may_be_as_long_as_the_longest_timeout() {
        let parse = |args: Value| parse_tool_call(&all_groups(), "terminal_execute", Some(&args));
        let most = MAX_TIMEOUT_SECS * 1000;
        let Ok(ToolCall::Exec(r)) = parse(json!({"command": "x", "yield_ms": most})) else {
            panic!("yield_ms {most} refused");
        };
        assert_eq!(r.yield_ms, Some(most));
        let e = parse(json!({"command": "x", "yield_ms": most + 1}))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("from 0 to {most}")), "{e}");
    }

    #[test]
    fn args_of_exactly_one_mib_in_all_are_accepted_and_one_byte_more_is_not() {
        // Each entry counts its bytes and its NUL: 8 × (131071 + 1) is exactly 1 MiB.
        let full: Vec<String> = vec!["a".repeat(MAX_COMMAND_BYTES); 8];
        assert_eq!(8 * (MAX_COMMAND_BYTES + 1), MAX_ARGS_BYTES);
        let r = exec(json!({ "args": full })).unwrap();
        assert!(matches!(r.program, Program::Argv(ref a) if a.len() == 8));
        let mut over = full.clone();
        over.push("b".into());
        let e = exec(json!({ "args": over })).unwrap_err();
        assert!(e.contains("`args` is over 1048576 bytes"), "{e}");
    }

    #[test]
    fn env_of_exactly_64_kib_is_accepted_and_one_byte_more_is_not() {
        let fits = "v".repeat(MAX_ENV_BYTES - 1);
        let r = exec(json!({"command": "x", "env": {"A": fits}})).unwrap();
        assert_eq!(r.env[0].1.len(), MAX_ENV_BYTES - 1);
        let e = exec(json!({"command": "x", "env": {"A": format!("{fits}v")}})).unwrap_err();
        assert!(e.contains("`env` holds 65537 bytes"), "{e}");
    }

    #[test]
    fn a_job_takes_stdin_as_text_or_base64_never_both_and_at_most_2_mib() {
        let poll = |args: Value| match parse_job("terminal_job", Some(&args)) {
            Ok(JobCall::Poll(p)) => Ok(p),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.to_string()),
        };
        let e = poll(json!({"job_id": "job-1", "stdin": "a", "stdin_base64": "YQ=="})).unwrap_err();
        assert!(
            e.contains("pass `stdin` or `stdin_base64`, not both"),
            "{e}"
        );
        // Base64 copied with a line break around it still decodes.
        let p = poll(json!({"job_id": "job-1", "stdin_base64": " YQ==\n"})).unwrap();
        assert_eq!(p.stdin.as_deref(), Some(&b"a"[..]));
        let p = poll(json!({"job_id": "job-1", "stdin": "line\n"})).unwrap();
        assert_eq!(p.stdin.as_deref(), Some(&b"line\n"[..]));
        let fits = "s".repeat(MAX_STDIN_BYTES);
        assert!(poll(json!({"job_id": "job-1", "stdin": fits})).is_ok());
        let e = poll(json!({"job_id": "job-1", "stdin": format!("{fits}s")})).unwrap_err();
        assert!(e.contains("2 MiB") && e.contains("several calls"), "{e}");
    }

    #[test]
    fn list_false_is_a_poll_and_list_true_refuses_a_job_id() {
        let e = parse_job("terminal_job", Some(&json!({"list": false})))
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs `job_id`"), "{e}");
        let e = parse_job(
            "terminal_job",
            Some(&json!({"list": true, "job_id": "job-1"})),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("drop job_id"), "{e}");
        let e = parse_job(
            "terminal_job",
            Some(&json!({"list": true, "computer_id": "Box"})),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("lowercase"), "{e}");
        let p = parse_job(
            "terminal_job",
            Some(&json!({"job_id": "job-1", "wait_ms": 2.0})),
        );
        assert!(
            matches!(p, Ok(JobCall::Poll(JobPoll { wait_ms: 2, .. }))),
            "{p:?}"
        );
    }

    #[test]
    fn each_call_says_which_backend_capability_it_needs() {
        use crate::capabilities::Capability;
        let n = all_groups();
        let needs =
            |tool: &str, args: Value| parse_tool_call(&n, tool, Some(&args)).unwrap().needs();
        assert_eq!(needs("terminal_execute", json!({"command": "x"})), None);
        assert_eq!(
            needs("terminal_execute", json!({"command": "x", "yield_ms": 0})),
            Some(Capability::Jobs)
        );
        assert_eq!(
            needs("terminal_job", json!({"job_id": "job-1"})),
            Some(Capability::Jobs)
        );
        assert_eq!(
            needs("computer_file_read", json!({"path": "/f"})),
            Some(Capability::Files)
        );
        assert_eq!(needs("computer_create", json!({})), None);
        assert_eq!(needs("computer_delete", json!({"computer_id": "a"})), None);
    }

    #[test]
    fn every_tool_that_needs_a_computer_id_names_itself_when_it_is_missing() {
        let n = names();
        for tool in [
            "computer_restart",
            "computer_factory_reset",
            "computer_delete",
        ] {
            let e = parse_tool_call(&n, tool, Some(&json!({"computer_id": null})))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(&format!("{tool} needs `computer_id`")), "{e}");
        }
        assert_eq!(
            parse_tool_call(
                &n,
                "computer_factory_reset",
                Some(&json!({"computer_id": "b1"}))
            )
            .unwrap(),
            ToolCall::FactoryReset {
                computer_id: "b1".into()
            }
        );
        assert_eq!(
            parse_tool_call(&n, "computer_restart", Some(&json!({"computer_id": "b1"}))).unwrap(),
            ToolCall::Restart {
                computer_id: "b1".into()
            }
        );
        let e = parse_tool_call(&n, "computer_dashboard", Some(&json!({"x": 1})))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("computer_dashboard; it takes no arguments"),
            "{e}"
        );
    }

    #[test]
    fn never_panics_on_arbitrary_json() {
        // A small structured fuzz: every shape of value in every argument slot.
        let values = [
            json!(null),
            json!(true),
            json!(0),
            json!(-1),
            json!(1e300),
            json!(""),
            json!("x"),
            json!([]),
            json!([null]),
            json!(["a", "b"]),
            json!({}),
            json!({"a": 1}),
            json!(u64::MAX),
            json!("\u{0}"),
        ];
        for key in JOB_ARGS.iter() {
            for v in &values {
                let mut m = Map::new();
                m.insert((*key).to_owned(), v.clone());
                let _ = parse_job("terminal_job", Some(&Value::Object(m.clone())));
                m.insert("job_id".into(), json!("job-1"));
                let _ = parse_job("terminal_job", Some(&Value::Object(m)));
            }
        }
        for key in EXEC_ARGS.iter().chain(["other"].iter()) {
            for v in &values {
                let mut m = Map::new();
                m.insert((*key).to_owned(), v.clone());
                let _ = parse_tool_call(
                    &names(),
                    "terminal_execute",
                    Some(&Value::Object(m.clone())),
                );
                m.insert("command".into(), json!("true"));
                let _ = parse_tool_call(&names(), "terminal_execute", Some(&Value::Object(m)));
            }
        }
    }
}
