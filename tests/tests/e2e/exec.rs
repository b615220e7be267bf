//! Exec through MCP stdio: shapes, exit codes, process control, limits.

use std::time::{Duration, Instant};

use serde_json::json;
use tests::*;

#[tokio::test]
async fn issue_2_result_shape_and_session_default() -> anyhow::Result<()> {
    let t = tag("shape");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let tools = c.list_all_tools().await?;
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "terminal_execute");
    assert!(tools[0].output_schema.is_some());
    // The first call makes the session's computer and says so (issue 45).
    let first = exec(&c, json!({"command": "true"})).await?;
    assert_eq!(first["created"], true, "{first}");
    let r = exec(&c, json!({"command": "echo hi; echo err >&2; exit 3"})).await?;
    let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "computer_id",
            "temporary",
            "stdout",
            "stderr",
            "exit_code",
            "exec_duration_ms"
        ]
    );
    assert_eq!(r["stdout"], "hi\n");
    assert_eq!(r["stderr"], "err\n");
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["temporary"], true);
    let id = r["computer_id"].as_str().unwrap().to_owned();
    assert_eq!(id.split('-').count(), 3, "readable slug: {id}");
    // The text block mirrors structuredContent.
    let raw = call(
        &c,
        "terminal_execute",
        json!({"args": ["sh", "-c", "echo x > /tmp/f"]}),
    )
    .await?;
    let mirrored: serde_json::Value = serde_json::from_str(&text(&raw))?;
    assert_eq!(Some(mirrored), raw.structured_content);
    // Same default computer, files persist.
    let r = exec(&c, json!({"args": ["cat", "/tmp/f"]})).await?;
    assert_eq!(r["computer_id"], id.as_str());
    assert_eq!(r["stdout"], "x\n");
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

#[tokio::test]
async fn issue_2_exit_codes_follow_the_shell() -> anyhow::Result<()> {
    let t = tag("codes");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let r = exec(&c, json!({"command": "pwd", "working_directory": "/nope"})).await?;
    assert_eq!(r["exit_code"], 126);
    assert!(r["stderr"].as_str().unwrap().contains("/nope"), "{r}");
    let r = exec(&c, json!({"command": "pwd", "working_directory": "/usr"})).await?;
    assert_eq!(r["stdout"], "/usr\n");
    let r = exec(&c, json!({"args": ["no-such-program"]})).await?;
    assert_eq!(r["exit_code"], 127);
    let r = exec(&c, json!({"command": "no-such-program"})).await?;
    assert_eq!(r["exit_code"], 127);
    let r = exec(&c, json!({"command": "kill -TERM $$"})).await?;
    assert_eq!(r["exit_code"], 143);
    let r = exec(&c, json!({"args": ["sh", "-c", "kill -KILL $$"]})).await?;
    assert_eq!(r["exit_code"], 137);
    // Output written after the program ended (a background child) and look-alike
    // trailers never change the exit code the program really had.
    let r = exec(
        &c,
        json!({"command": "(sleep 0.3; echo late >&2) & exit 5"}),
    )
    .await?;
    assert_eq!(r["exit_code"], 5);
    assert_eq!(r["stderr"], "late\n");
    let r = exec(
        &c,
        json!({"command": "printf '\\036msc-exit-0 9\\036' >&2; exit 4"}),
    )
    .await?;
    assert_eq!(r["exit_code"], 4);
    assert_eq!(r["stderr"], "\u{1e}msc-exit-0 9\u{1e}");
    let r = exec(&c, json!({"args": ["echo", "-e", "a\\tb"]})).await?;
    assert_eq!(
        r["stdout"], "a\tb\n",
        "args run the program, not a shell builtin"
    );
    // bash is the default shell.
    let r = exec(&c, json!({"command": "echo $BASH_VERSION | cut -c1"})).await?;
    assert_eq!(r["stdout"], "5\n");
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_2_timeout_kills_the_tree_and_keeps_output() -> anyhow::Result<()> {
    let t = tag("timeout");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let started = Instant::now();
    let r = exec(
        &c,
        json!({"command": "echo before; sleep 1000 & sleep 1000; echo never", "timeout": 1}),
    )
    .await?;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(r["exit_code"], 124);
    assert_eq!(r["timed_out"], true);
    assert_eq!(r["stdout"], "before\n");
    assert!(
        r["stderr"]
            .as_str()
            .unwrap()
            .contains("timed out after 1 s"),
        "{r}"
    );
    let left = exec(&c, json!({"command": COUNT_SLEEP_1000})).await?;
    assert_eq!(
        left["stdout"], "0\n",
        "sleep processes survived the timeout"
    );
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_2_fork_bomb_is_contained_and_killed() -> anyhow::Result<()> {
    fork_bomb(false).await
}

#[tokio::test]
async fn issue_3_fork_bomb_is_contained_and_killed_without_supervisor() -> anyhow::Result<()> {
    fork_bomb(true).await
}

async fn fork_bomb(plain: bool) -> anyhow::Result<()> {
    let t = tag("forkbomb");
    let opts = ServerOpts::default()
        .arg("--docker-run-flag=--pids-limit=300")
        .plain_if(plain);
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let r = exec(
        &c,
        json!({"command": "bomb() { bomb | bomb & }; bomb; sleep 1000", "timeout": 3}),
    )
    .await?;
    assert_eq!(r["exit_code"], 124);
    // The computer still works and nothing of the bomb is left.
    let mut alive = String::new();
    for _ in 0..20 {
        let r = exec(&c, json!({"command": "ls -d /proc/[0-9]* | wc -l"})).await?;
        alive = r["stdout"].as_str().unwrap_or("").trim().to_owned();
        if alive.parse::<u32>().unwrap_or(999) < 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        alive.parse::<u32>().unwrap_or(999) < 10,
        "{alive} processes left"
    );
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_2_cancel_kills_the_command() -> anyhow::Result<()> {
    cancel_kills(false).await
}

#[tokio::test]
async fn issue_3_cancel_kills_the_command_without_supervisor() -> anyhow::Result<()> {
    cancel_kills(true).await
}

async fn cancel_kills(plain: bool) -> anyhow::Result<()> {
    let t = tag("cancel");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default().plain_if(plain)).await?;
    let first = exec(&c, json!({"command": "true"})).await?;
    let id = first["computer_id"].as_str().unwrap().to_owned();
    // Dropping the call makes rmcp send notifications/cancelled.
    let slow = call(
        &c,
        "terminal_execute",
        json!({"command": "sleep 1000 & sleep 1000", "computer_id": id}),
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), slow)
            .await
            .is_err()
    );
    let mut left = json!(null);
    for _ in 0..40 {
        left = exec(&c, json!({"command": COUNT_SLEEP_1000})).await?;
        if left["stdout"] == "0\n" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left["stdout"], "0\n", "cancelled command still running");
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_2_output_limit_keeps_the_head_and_stops() -> anyhow::Result<()> {
    let t = tag("limit");
    let opts = ServerOpts::default().arg("--output-limit=100000");
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let started = Instant::now();
    let r = exec(
        &c,
        json!({"command": "echo start; yes line", "timeout": 60}),
    )
    .await?;
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(r["truncated"], true);
    let out = r["stdout"].as_str().unwrap();
    assert!(out.starts_with("start\nline\n"));
    assert!(out.len() <= 100_000, "{}", out.len());
    assert!(out.len() > 90_000);
    assert!(
        r["stderr"]
            .as_str()
            .unwrap()
            .contains("truncated at 100000 bytes")
    );
    // 1 GB of output is stopped at the source, not buffered.
    let r = exec(
        &c,
        json!({"command": "head -c 1000000000 /dev/zero", "timeout": 60}),
    )
    .await?;
    assert_eq!(r["truncated"], true);
    assert!(r.get("stdout_base64").is_none(), "NULs are valid UTF-8");
    let left = exec(&c, json!({"command": "for p in /proc/[0-9]*; do cat $p/comm; done | grep -c -e '^yes$' -e '^head$' || true"})).await?;
    assert_eq!(left["stdout"], "0\n");
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_2_binary_output_is_lossless() -> anyhow::Result<()> {
    let t = tag("binary");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let r = exec(
        &c,
        json!({"command": "printf 'a\\377\\000b'; printf '\\376' >&2"}),
    )
    .await?;
    assert_eq!(r["stdout_base64"], "Yf8AYg==");
    assert_eq!(r["stderr_base64"], "/g==");
    assert_eq!(r["stdout"], "a\u{fffd}\u{0}b");
    let r = exec(&c, json!({"command": "printf 'é'"})).await?;
    assert!(r.get("stdout_base64").is_none());
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_2_stdin_in_and_unread() -> anyhow::Result<()> {
    let t = tag("stdin");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let r = exec(&c, json!({"args": ["wc", "-c"], "stdin": "hello"})).await?;
    assert_eq!(r["stdout"], "5\n");
    let big = "x".repeat(2 * 1024 * 1024);
    let r = exec(&c, json!({"command": "true", "stdin": big})).await?;
    assert_eq!(r["exit_code"], 0);
    let r = exec(&c, json!({"command": "wc -c", "stdin": big})).await?;
    assert_eq!(r["stdout"], "2097152\n");
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_2_concurrent_execs_on_one_computer() -> anyhow::Result<()> {
    let t = tag("concurrent");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let id = exec(&c, json!({"command": "true"})).await?["computer_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let other = exec(
        &c,
        json!({"command": "true", "computer_id": format!("{id}-b")}),
    )
    .await?;
    assert_eq!(other["computer_id"], format!("{id}-b"));
    let started = Instant::now();
    let calls = (0..6).map(|i| {
        let target = if i % 2 == 0 {
            id.clone()
        } else {
            format!("{id}-b")
        };
        let c = &c;
        async move {
            let r = exec(
                c,
                json!({"command": format!("sleep 1; echo {i}"), "computer_id": target}),
            )
            .await?;
            anyhow::Ok((i, target, r))
        }
    });
    let results = futures_util::future::try_join_all(calls).await?;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "execs ran one after another: {:?}",
        started.elapsed()
    );
    for (i, target, r) in results {
        assert_eq!(r["computer_id"], target.as_str());
        assert_eq!(r["stdout"], format!("{i}\n"));
    }
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

#[tokio::test]
async fn issue_2_progress_while_a_computer_starts_and_missing_image() -> anyhow::Result<()> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let t = tag("progress");
    let mut cmd = command(&t, &state_dir(&t), &ServerOpts::default());
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::from(log_file(&t)));
    let mut child = cmd.spawn()?;
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let msgs = [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
            "capabilities": {}, "clientInfo": {"name": "p", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "terminal_execute",
            "arguments": {"command": "echo ready"}, "_meta": {"progressToken": "tok-1"}}}),
    ];
    for m in &msgs {
        stdin.write_all(format!("{m}\n").as_bytes()).await?;
    }
    let mut progress = Vec::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), out.next_line())
            .await??
            .unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&line)?;
        if v["method"] == "notifications/progress" {
            assert_eq!(v["params"]["progressToken"], "tok-1");
            progress.push(v["params"]["progress"].as_u64().unwrap());
        } else if v["id"] == 1 {
            assert_eq!(v["result"]["structuredContent"]["stdout"], "ready\n");
            break;
        }
    }
    assert!(progress.len() >= 2, "{progress:?}");
    assert!(progress.windows(2).all(|w| w[0] < w[1]), "{progress:?}");
    drop(stdin);
    child.wait().await?;

    // An image that is neither local nor pullable (no registry here) is a clear error.
    let opts = ServerOpts::default()
        .arg("--image")
        .arg("msc-test/no-such-image:1")
        .arg("--tool-instruction-override")
        .arg("x");
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let r = call(&c, "terminal_execute", json!({"command": "true"})).await?;
    assert_eq!(r.is_error, Some(true));
    let msg = text(&r);
    assert!(
        msg.contains("msc-test/no-such-image:1") && msg.contains("could not be pulled"),
        "{msg}"
    );
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

/// stdin is read on the runtime's poller when it is a pipe or a socket, and by a thread
/// when it is a file: every kind is served, and the session ends at EOF. (At EOF what still
/// runs is stopped, so a file's requests other than `initialize`, which is answered at
/// once, are not answered: the file's last line, without its newline, is one.)
#[tokio::test]
async fn issue_18_stdin_as_a_file_a_pipe_or_a_socket() -> anyhow::Result<()> {
    use std::io::Write;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let t = tag("stdinkinds");
    let init = |id: u32| {
        json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
            "capabilities": {}, "clientInfo": {"name": "k", "version": "1"}}})
        .to_string()
    };
    let lines = [
        init(1),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string(),
        json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}).to_string(),
    ];
    for kind in ["file", "pipe", "socket"] {
        let mut cmd = command(&t, &state_dir(&t), &ServerOpts::default());
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::from(log_file(&t)));
        let mut socket = None;
        match kind {
            "file" => {
                let path = state_dir(&t).join("requests.jsonl");
                std::fs::write(&path, format!("{}\n{}", init(1), init(3)))?;
                cmd.stdin(std::fs::File::open(&path)?);
            }
            "pipe" => {
                cmd.stdin(std::process::Stdio::piped());
            }
            _ => {
                let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
                cmd.stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
                    theirs,
                )));
                socket = Some(ours);
            }
        }
        let mut child = cmd.spawn()?;
        let mut pipe = child.stdin.take();
        let input = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
        if let Some(p) = &mut pipe {
            p.write_all(input.as_bytes()).await?;
        }
        if let Some(s) = &mut socket {
            s.write_all(input.as_bytes())?;
        }
        let want = if kind == "file" {
            vec![1, 3]
        } else {
            vec![1, 2, 3]
        };
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = Vec::new();
        while seen.len() < want.len() {
            let line = tokio::time::timeout(Duration::from_secs(30), out.next_line())
                .await
                .map_err(|_| anyhow::anyhow!("{kind}: answers {seen:?} of {want:?}"))??
                .ok_or_else(|| anyhow::anyhow!("{kind}: stdout closed after {seen:?}"))?;
            let v: serde_json::Value = serde_json::from_str(&line)?;
            match v["id"].as_u64() {
                Some(2) => assert!(
                    v["result"]["tools"]
                        .as_array()
                        .is_some_and(|t| !t.is_empty()),
                    "{v}"
                ),
                Some(3) if kind != "file" => assert_eq!(v["result"], json!({})),
                Some(1 | 3) => assert!(v["result"]["serverInfo"].is_object(), "{v}"),
                _ => anyhow::bail!("{kind}: unexpected {v}"),
            }
            seen.push(v["id"].as_u64().unwrap_or_default());
        }
        // Requests run concurrently: answers come in any order.
        seen.sort_unstable();
        assert_eq!(seen, want, "{kind}");
        // EOF ends the session.
        drop(pipe);
        if let Some(s) = &socket {
            s.shutdown(std::net::Shutdown::Write)?;
        }
        let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .map_err(|_| anyhow::anyhow!("{kind}: the session did not end at EOF"))??;
        assert!(status.success(), "{kind}: {status}");
    }
    Ok(())
}
