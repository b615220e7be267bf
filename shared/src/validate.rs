//! Input validation: raw tool arguments in, typed [`ToolCall`]s out.
//!
//! Owns every rule about what an agent may pass (SPEC §3.2, §3.3): exactly one of
//! `command`/`args`, explicit `null` and empty values mean "absent", unknown arguments are
//! refused, limits on stdin and timeouts. A refused call never reaches a backend, so bad
//! input changes nothing. Messages say what to fix.

use serde_json::{Map, Value};

pub use crate::catalogue::{MAX_STDIN_BYTES, MAX_TIMEOUT_SECS, ToolKind};
use crate::catalogue::{ToolNames, tool_kind};
use crate::ids::validate_computer_id;

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
        let map = map
            .into_iter()
            .filter(|(_, v)| match v {
                Value::Null => false,
                Value::String(s) => !s.is_empty(),
                Value::Array(a) => !a.is_empty(),
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

const EXEC_ARGS: &[&str] = &[
    "command",
    "args",
    "stdin",
    "working_directory",
    "timeout",
    "computer_id",
    "temporary",
];

/// Validates a `tools/call` for one of the tools in `names`.
pub fn parse_tool_call(
    names: &ToolNames,
    name: &str,
    arguments: Option<&Value>,
) -> Result<ToolCall, ValidationError> {
    let kind = tool_kind(names, name).ok_or_else(|| ValidationError::UnknownTool(name.into()))?;
    match kind {
        ToolKind::Exec => parse_exec(name, arguments).map(ToolCall::Exec),
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

/// Validates the arguments of the exec tool (named `tool` in messages).
pub fn parse_exec(tool: &str, arguments: Option<&Value>) -> Result<ExecRequest, ValidationError> {
    let args = Args::new(arguments, EXEC_ARGS, tool)?;
    let command = args.string("command")?;
    let argv = match args.map.get("args") {
        None => None,
        Some(Value::Array(items)) => {
            let mut argv = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) if s.contains('\0') => {
                        return Err(invalid(format!(
                            "`args[{i}]` must not contain NUL characters"
                        )));
                    }
                    Value::String(s) => argv.push(s.clone()),
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
    let timeout_secs = match args.map.get("timeout") {
        None => None,
        Some(Value::Number(n)) => {
            let secs = n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            });
            match secs {
                Some(s) if (1..=MAX_TIMEOUT_SECS).contains(&s) => Some(s),
                _ => {
                    return Err(invalid(format!(
                        "`timeout` must be a whole number of seconds from 1 to {MAX_TIMEOUT_SECS}, got {n}"
                    )));
                }
            }
        }
        Some(other) => {
            return Err(invalid(format!(
                "`timeout` must be a whole number of seconds from 1 to {MAX_TIMEOUT_SECS}, got {}",
                json_type(other)
            )));
        }
    };
    Ok(ExecRequest {
        program,
        stdin,
        working_directory,
        timeout_secs,
        computer_id: args.computer_id()?,
        temporary: args.boolean("temporary")?,
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
