//! Bad input: an actionable `isError` result, and no computer is touched.

use std::time::Duration;

use serde_json::json;
use tests::*;

#[tokio::test]
async fn issue_2_every_validation_error_is_actionable_and_harmless() -> anyhow::Result<()> {
    let t = tag("validation");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::lifecycle()).await?;
    let cases = [
        ("terminal_execute", json!({}), "pass `command`"),
        (
            "terminal_execute",
            json!({"command": "ls", "args": ["ls"]}),
            "not both",
        ),
        (
            "terminal_execute",
            json!({"command": "ls", "shell": "zsh"}),
            "unknown argument \"shell\"",
        ),
        (
            "terminal_execute",
            json!({"command": ["ls"]}),
            "`command` must be a string",
        ),
        (
            "terminal_execute",
            json!({"args": "ls -la"}),
            "`args` must be an array",
        ),
        (
            "terminal_execute",
            json!({"command": "ls", "timeout": 0}),
            "`timeout`",
        ),
        (
            "terminal_execute",
            json!({"command": "ls", "timeout": "5"}),
            "`timeout`",
        ),
        (
            "terminal_execute",
            json!({"command": "ls", "working_directory": "relative"}),
            "absolute path",
        ),
        (
            "terminal_execute",
            json!({"command": "ls", "computer_id": "Not_Valid"}),
            "lowercase letters",
        ),
        (
            "terminal_execute",
            json!({"command": "ls", "computer_id": "-edge"}),
            "start and end",
        ),
        (
            "terminal_execute",
            json!({"command": "ls", "computer_id": "a".repeat(64)}),
            "at most 63",
        ),
        (
            "terminal_execute",
            json!({"command": "ls", "temporary": "no"}),
            "true or false",
        ),
        (
            "terminal_execute",
            json!({"command": "cat", "stdin": "x".repeat(2 * 1024 * 1024 + 1)}),
            "2 MiB",
        ),
        ("computer_restart", json!({}), "needs `computer_id`"),
        (
            "computer_delete",
            json!({"computer_id": "UPPER"}),
            "lowercase",
        ),
        (
            "computer_create",
            json!({"computer_id": "ok", "temporary": 1}),
            "true or false",
        ),
        ("computer_list", json!({"all": true}), "takes no arguments"),
    ];
    for (tool, arguments, needle) in cases {
        let r = call(&c, tool, arguments.clone()).await?;
        assert_eq!(r.is_error, Some(true), "{tool} {arguments}");
        // SPEC §3.5: the exec tool's validation errors carry no structured content; a
        // `computer_*` tool fails in the lifecycle shape, validation included.
        if tool.starts_with("computer_") {
            let s = r.structured_content.clone().unwrap_or_default();
            assert!(
                s["error"].as_str().is_some_and(|m| m.contains(needle)),
                "{tool} {arguments}: {s}"
            );
        } else {
            assert!(r.structured_content.is_none(), "{tool} {arguments}");
        }
        let msg = text(&r);
        assert!(msg.contains(needle), "{tool} {arguments}: {msg}");
    }
    assert_eq!(
        containers(&t).await?.len(),
        0,
        "validation errors must not create computers"
    );
    // Explicit nulls mean absent; a non-reading command with stdin is fine.
    let r = exec(
        &c,
        json!({"command": "echo ok", "args": null, "stdin": null, "timeout": null,
        "working_directory": null, "computer_id": null, "temporary": null}),
    )
    .await?;
    assert_eq!(r["stdout"], "ok\n");
    // An unknown tool is a protocol error.
    assert!(call(&c, "no_such_tool", json!({})).await.is_err());
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}
