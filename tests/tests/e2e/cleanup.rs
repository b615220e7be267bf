//! Temporary computers go away when their owner does, in every way an owner can go.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tests::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Starts a raw stdio server, creates `n` temporaries (and one permanent), returns the child.
async fn raw_server_with_temporaries(t: &str, n: usize) -> anyhow::Result<tokio::process::Child> {
    let mut cmd = command(t, &state_dir(t), &ServerOpts::default());
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file(t)));
    let mut child = cmd.spawn()?;
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = vec![json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})];
    for i in 0..n {
        send.push(json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
            "params": {"name": "terminal_execute", "arguments": {"command": "true", "computer_id": format!("{t}-{i}")}}}));
    }
    send.push(json!({"jsonrpc": "2.0", "id": n + 1, "method": "tools/call",
        "params": {"name": "terminal_execute", "arguments": {"command": "true", "computer_id": format!("{t}-perm"), "temporary": false}}}));
    for m in &send {
        stdin.write_all(format!("{m}\n").as_bytes()).await?;
    }
    for _ in 0..send.len() {
        let line = tokio::time::timeout(Duration::from_secs(60), out.next_line())
            .await??
            .unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&line)?;
        assert!(v.get("result").is_some(), "{v}");
        assert_ne!(v["result"]["isError"], true, "{v}");
    }
    // Keep stdin open by leaking it into a task that holds it until the child ends.
    tokio::spawn(async move {
        let _keep = stdin;
        std::future::pending::<()>().await;
    });
    Ok(child)
}

#[tokio::test]
async fn issue_2_stdio_eof_removes_temporaries() -> anyhow::Result<()> {
    let t = tag("eof");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    for i in 0..3 {
        exec(
            &c,
            json!({"command": "true", "computer_id": format!("{t}-{i}")}),
        )
        .await?;
    }
    exec(
        &c,
        json!({"command": "true", "computer_id": format!("{t}-p"), "temporary": false}),
    )
    .await?;
    assert_eq!(containers(&t).await?.len(), 4);
    c.cancel().await?; // closes stdin
    wait_for_count(&t, 1, Duration::from_secs(10)).await?;
    remove_all(&t).await
}

/// A minimal MCP client in Python: it starts the server, creates three temporaries, then
/// waits forever; the test SIGKILLs it, as when an MCP host crashes.
const PY_CLIENT: &str = r#"
import json, subprocess, sys, time
server = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
def send(m):
    server.stdin.write((json.dumps(m) + "\n").encode()); server.stdin.flush()
send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "py", "version": "1"}}})
server.stdout.readline()
for i in range(3):
    send({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": "terminal_execute", "arguments": {"command": "true", "computer_id": "%s-%d" % (sys.argv[-1].split("=")[-1], i)}}})
for i in range(3):
    server.stdout.readline()
print("ready", flush=True)
time.sleep(1000)
"#;

#[tokio::test]
async fn issue_2_client_killed_removes_temporaries() -> anyhow::Result<()> {
    let t = tag("clientkill");
    let state = state_dir(&t);
    let mut client = tokio::process::Command::new("python3")
        .arg("-c")
        .arg(PY_CLIENT)
        .arg(binary())
        .arg("--state-dir")
        .arg(&state)
        .arg(format!("--docker-run-flag=--label=msc-test={t}"))
        .env_remove("ENABLE_LIFECYCLE_TOOLS")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut out = BufReader::new(client.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), out.next_line()).await??;
    assert_eq!(ready.as_deref(), Some("ready"));
    assert_eq!(containers(&t).await?.len(), 3);
    client.kill().await?; // SIGKILL the client; the server lives on and sees EOF
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

/// Sends `sig` to a server holding five temporaries and a permanent computer.
async fn signal_shuts_down_cleanly(sig: &str) -> anyhow::Result<()> {
    let t = tag(&format!("sig{}", sig.to_lowercase()));
    let mut child = raw_server_with_temporaries(&t, 5).await?;
    assert_eq!(containers(&t).await?.len(), 6);
    signal(child.id().unwrap(), sig);
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait()).await??;
    assert!(status.success(), "{sig}: {status}");
    assert_eq!(
        containers(&t).await?.len(),
        1,
        "only the permanent computer stays"
    );
    remove_all(&t).await
}

#[tokio::test]
async fn issue_2_sigterm_removes_temporaries_and_exits_cleanly() -> anyhow::Result<()> {
    signal_shuts_down_cleanly("TERM").await
}

#[tokio::test]
async fn issue_2_sigint_removes_temporaries_and_exits_cleanly() -> anyhow::Result<()> {
    signal_shuts_down_cleanly("INT").await
}

#[tokio::test]
async fn issue_2_temporaries_of_a_killed_server_are_reaped_by_the_next_start() -> anyhow::Result<()>
{
    let t = tag("sigkill");
    let mut child = raw_server_with_temporaries(&t, 3).await?;
    child.kill().await?; // SIGKILL: no cleanup possible
    child.wait().await?;
    assert_eq!(containers(&t).await?.len(), 4);
    // A concurrently running server's temporaries must not be touched by the reaper.
    let live_tag = tag("sigkill-live");
    let live = stdio_client(&live_tag, &state_dir(&t), &ServerOpts::default()).await?;
    exec(&live, json!({"command": "true"})).await?;
    let next = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    wait_for_count(&t, 1, Duration::from_secs(15)).await?;
    assert_eq!(
        containers(&live_tag).await?.len(),
        1,
        "a live server's temporary was reaped"
    );
    live.cancel().await?;
    next.cancel().await?;
    wait_for_count(&live_tag, 0, Duration::from_secs(15)).await?;
    remove_all(&t).await
}
