//! Tool calls in, operations out: the validation rules of SPEC §3.2, §3.3 as
//! [`super::parse_tool_call`] applies them.

use super::*;
use crate::jobs::DEFAULT_WAIT_MS;
use crate::validate::*;
use serde_json::Map;
use serde_json::json;

fn names() -> ToolNames {
    ToolNames::new("terminal_execute", true)
}

fn exec(args: Value) -> Result<ExecRequest, String> {
    match parse_tool_call(&names(), "terminal_execute", Some(&args)) {
        Ok(Op::Exec(r)) => Ok(r),
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
            ..Default::default()
        },
    );
    let parse = |args: Value| match parse_tool_call(&jobs, "terminal_execute", Some(&args)) {
        Ok(Op::Exec(r)) => Ok(r),
        Ok(other) => Err(format!("unexpected {other:?}")),
        Err(e) => Err(e.to_string()),
    };
    let r = parse(json!({"command": "x", "env": {"B": "2", "A_1": ""}, "yield_ms": 0})).unwrap();
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
    let r = parse(
        json!({"command": "x", "env": [{"name": "B", "value": "2"}, {"value": "", "name": "A_1"}]}),
    )
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
    let JobCall::Poll(p) = ok(
        json!({"job_id": "job-1", "stdin_base64": "AAE=", "signal": "TERM", "close_stdin": true}),
    )
    .unwrap() else {
        panic!("a poll");
    };
    assert_eq!(
        (p.stdin, p.signal, p.close_stdin, p.wait_ms, p.peek),
        (Some(vec![0, 1]), Some(15), true, DEFAULT_WAIT_MS, false)
    );
    // A peek looks at once; a signal may come with it (the dashboard's Stop).
    let JobCall::Poll(p) = ok(json!({"job_id": "job-1", "peek": true, "signal": "TERM"})).unwrap()
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
        Op::Create {
            computer_id: None,
            temporary: None,
            network: None
        }
    );
    assert_eq!(
        parse_tool_call(&n, "computer_delete", Some(&json!({"computer_id": "a1"}))).unwrap(),
        Op::Delete {
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
    let Ok(Op::Exec(r)) = parse(json!({"command": "x", "yield_ms": most})) else {
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
    let needs = |tool: &str, args: Value| parse_tool_call(&n, tool, Some(&args)).unwrap().needs();
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
        Op::FactoryReset {
            computer_id: "b1".into()
        }
    );
    assert_eq!(
        parse_tool_call(&n, "computer_restart", Some(&json!({"computer_id": "b1"}))).unwrap(),
        Op::Restart {
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

#[test]
fn issue_38_network_is_none_or_an_allow_list_on_exec_and_create() {
    use crate::egress::Policy;
    let r = exec(json!({"command": "ls", "network": "none"})).unwrap();
    assert_eq!(r.network, Some(Policy::None));
    let r = exec(
        json!({"command": "ls", "network": {"allow": ["PyPI.org", "*.npmjs.org", "10.0.0.0/8"]}}),
    )
    .unwrap();
    assert_eq!(
        r.network,
        Some(Policy::allow(["pypi.org", "*.npmjs.org", "10.0.0.0/8"]).unwrap())
    );
    // Absent, null and "" are absent: the server's policy.
    for absent in [
        json!({"command": "ls"}),
        json!({"command": "ls", "network": null}),
        json!({"command": "ls", "network": ""}),
    ] {
        assert_eq!(exec(absent).unwrap().network, None);
    }
    for (bad, why) in [
        (
            json!("all"),
            "`network` must be \"none\" or {\"allow\": [rules]}",
        ),
        (json!(true), "`network` must be"),
        (json!([]), "`network` must be"),
        (json!({"allow": "pypi.org"}), "`network` must be"),
        (
            json!({"allow": ["pypi.org"], "deny": []}),
            "`network` must be",
        ),
        (json!({"allow": [1]}), "`network` must be"),
        (json!({"allow": []}), "needs at least one rule"),
        (json!({"allow": ["https://pypi.org"]}), "is not a host name"),
        (json!({"allow": ["10.0.0.1:80"]}), "allows every port"),
        (
            json!({"allow": vec!["a.test"; crate::egress::MAX_RULES + 1]}),
            "at most 256 rules",
        ),
    ] {
        let e = exec(json!({"command": "ls", "network": bad})).unwrap_err();
        assert!(e.contains(why), "{bad}: {e}");
    }
    match parse_tool_call(
        &ToolNames::with_groups("terminal_execute", crate::catalogue::Groups::ALL),
        "computer_create",
        Some(&json!({"network": "none"})),
    ) {
        Ok(Op::Create { network, .. }) => assert_eq!(network, Some(Policy::None)),
        other => panic!("{other:?}"),
    }
    let e = parse_tool_call(
        &ToolNames::with_groups("terminal_execute", crate::catalogue::Groups::ALL),
        "computer_create",
        Some(&json!({"network": {"allow": []}})),
    )
    .unwrap_err();
    assert!(e.to_string().contains("needs at least one rule"), "{e}");
}
