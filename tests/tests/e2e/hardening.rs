//! Issue 19, finding 5: input edges. Request ids are echoed exactly (over stdio and HTTP),
//! and oversized `command` and `args` get a prompt validation error that says the limit
//! (they used to break the supervisor's pipe, or get no answer).

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A raw stdio session: lines in, lines out.
struct Raw {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Raw {
    async fn start(t: &str) -> anyhow::Result<Self> {
        let mut cmd = command(t, &state_dir(t), &wasm_opts());
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file(t));
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take().expect("stdin");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Ok(Self {
            child,
            stdin,
            lines,
        })
    }

    /// Sends `line` and returns the next line that is not a notification.
    async fn ask(&mut self, line: &str) -> anyhow::Result<String> {
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.write_all(b"\n").await?;
        self.stdin.flush().await?;
        loop {
            let next = tokio::time::timeout(Duration::from_secs(20), self.lines.next_line())
                .await??
                .ok_or_else(|| anyhow::anyhow!("the server closed stdout"))?;
            if !next.contains("\"method\":\"notifications/") {
                return Ok(next);
            }
        }
    }
}

fn initialize(id: &str) -> String {
    initialize_as(id, "2025-06-18")
}

fn initialize_as(id: &str, version: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"raw","version":"1"}}}}}}"#
    )
}

#[tokio::test]
async fn issue_19_request_ids_are_echoed_exactly() -> anyhow::Result<()> {
    let t = tag("rawids");
    let mut s = Raw::start(&t).await?;
    let big = "18446744073709551617";
    let answer = s.ask(&initialize(big)).await?;
    assert!(
        answer.starts_with(&format!("{{\"jsonrpc\":\"2.0\",\"id\":{big},\"result\"")),
        "{answer}"
    );
    for id in ["-98765432109876543210", "1.50", "2e3", "7", "\"x\""] {
        let answer = s
            .ask(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#))
            .await?;
        assert_eq!(
            answer,
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{}}}}"),
            "{id}"
        );
    }
    // An error answer keeps the id too.
    let answer = s
        .ask(&format!(
            r#"{{"jsonrpc":"2.0","id":{big},"method":"nope"}}"#
        ))
        .await?;
    assert!(
        answer.starts_with(&format!("{{\"jsonrpc\":\"2.0\",\"id\":{big},\"error\"")),
        "{answer}"
    );
    drop(s.stdin);
    let _ = tokio::time::timeout(Duration::from_secs(10), s.child.wait()).await;

    // Over Streamable HTTP as well.
    let h = HttpServer::start(&format!("{t}-h"), &state_dir(&t), &wasm_opts()).await?;
    let resp = reqwest::Client::new()
        .post(&h.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(initialize(big))
        .send()
        .await?;
    let body = resp.text().await?;
    assert!(body.contains(&format!("\"id\":{big},")), "{body}");
    h.terminate().await?;
    Ok(())
}

#[tokio::test]
async fn issue_19_oversized_commands_get_a_prompt_validation_error() -> anyhow::Result<()> {
    let t = tag("bigcmd");
    let mut s = Raw::start(&t).await?;
    s.ask(&initialize("0")).await?;
    s.stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .await?;
    let call = |id: u32, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "terminal_execute", "arguments": arguments}})
        .to_string()
    };
    let cases = [
        (
            json!({"command": format!("echo {}", "x".repeat(10_000_000))}),
            "at most 131071 bytes",
        ),
        (
            json!({"args": vec!["echo"; 500_000]}),
            "at most 32768 are accepted",
        ),
        (
            json!({"args": ["echo", "y".repeat(200_000)]}),
            "`args[1]` is 200000 bytes",
        ),
    ];
    for (i, (arguments, said)) in cases.into_iter().enumerate() {
        let started = Instant::now();
        let answer: Value = serde_json::from_str(&s.ask(&call(i as u32 + 1, arguments)).await?)?;
        let r = &answer["result"];
        assert_eq!(r["isError"], true, "{said}: {answer:.300}");
        let text = r["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains(said), "{said}: {text:.300}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{said}: {:?}",
            started.elapsed()
        );
    }
    // The server is fine afterwards.
    let answer: Value =
        serde_json::from_str(&s.ask(&call(9, json!({"command": "echo ok"}))).await?)?;
    assert_eq!(
        answer["result"]["structuredContent"]["stdout"], "ok\n",
        "{answer}"
    );
    drop(s.stdin);
    let _ = tokio::time::timeout(Duration::from_secs(10), s.child.wait()).await;
    Ok(())
}

/// Issue 45, item 6: over stdio too, a 2025-03-26 session takes JSON-RPC batches: one array
/// of the requests' answers, in order (a malformed element and `initialize` answered with
/// their errors in place, notifications with nothing); other revisions refuse a batch.
#[tokio::test]
async fn issue_45_stdio_batches_in_2025_03_26_sessions() -> anyhow::Result<()> {
    let t = tag("rawbatch");
    let mut s = Raw::start(&t).await?;
    let answer: Value = serde_json::from_str(&s.ask(&initialize_as("0", "2025-03-26")).await?)?;
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-03-26",
        "{answer}"
    );
    let mut batch = batch_fixture();
    batch.extend([
        json!(5),
        json!({"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {}}),
    ]);
    let answer: Value = serde_json::from_str(&s.ask(&Value::from(batch).to_string()).await?)?;
    let summary = batch_summary(&answer).expect("an array");
    assert_eq!(
        summary,
        [
            json!(["b1", null, null]),
            json!([2, "batched\n", null]),
            json!([3, null, -32601]),
            json!([null, null, -32600]),
            json!([4, null, -32600]),
        ],
        "{answer}"
    );
    assert!(answer[0]["result"]["tools"].is_array(), "{answer}");
    // Notifications alone get no answer: the next line is the ping's.
    let next = s
        .ask(&format!(
            "{}\n{}",
            json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]),
            json!({"jsonrpc": "2.0", "id": 9, "method": "ping"})
        ))
        .await?;
    assert_eq!(next, r#"{"jsonrpc":"2.0","id":9,"result":{}}"#);
    let empty: Value = serde_json::from_str(&s.ask("[]").await?)?;
    assert_eq!(empty["error"]["code"], -32600, "{empty}");
    drop(s.stdin);
    let _ = tokio::time::timeout(Duration::from_secs(10), s.child.wait()).await;

    // A later revision's session refuses a batch, and runs nothing.
    let mut s = Raw::start(&t).await?;
    s.ask(&initialize("0")).await?;
    let refused: Value = serde_json::from_str(
        &s.ask(
            &json!([{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "terminal_execute", "arguments": {"command": "echo no"}}}])
            .to_string(),
        )
        .await?,
    )?;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("2025-03-26")),
        "{refused}"
    );
    drop(s.stdin);
    let _ = tokio::time::timeout(Duration::from_secs(10), s.child.wait()).await;
    Ok(())
}
