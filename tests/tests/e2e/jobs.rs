//! Issue 14: long-running commands as jobs (`yield_ms`, `terminal_job`) on Docker, and
//! per-call `env` (SPEC §3.8, §3.10).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::jobs::{drain, fill_to_the_cap, job_basics, job_error, slow_reader};
use tests::*;

fn jobs_opts() -> ServerOpts {
    ServerOpts::default().arg("--tools=jobs,lifecycle")
}

#[tokio::test]
async fn issue_14_the_jobs_group_is_listed_only_when_asked() -> anyhow::Result<()> {
    let t = tag("jobsoff");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let tools = c.list_all_tools().await?;
    assert_eq!(tools.len(), 1);
    assert!(tools[0].input_schema.get("properties").unwrap()["yield_ms"].is_null());
    let r = call(
        &c,
        "terminal_execute",
        json!({"command": "true", "yield_ms": 10}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true));
    assert!(
        text(&r).contains("unknown argument \"yield_ms\""),
        "{}",
        text(&r)
    );
    c.cancel().await?;
    let c = stdio_client(&t, &state_dir(&t), &jobs_opts()).await?;
    let names = tool_names(&c).await?;
    assert_eq!(&names[..2], ["terminal_execute", "terminal_job"]);
    assert_eq!(names.len(), 8);
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

#[tokio::test]
async fn issue_14_jobs_on_docker() -> anyhow::Result<()> {
    let t = tag("jobs");
    let c = stdio_client(&t, &state_dir(&t), &jobs_opts()).await?;
    let id = format!("{t}-a");
    let sleeping = job_basics(&c, &id, true).await?;
    // Restart ends the computer's jobs.
    call(&c, "computer_restart", json!({"computer_id": id})).await?;
    let e = job_error(&c, json!({"job_id": sleeping, "computer_id": id})).await?;
    assert!(e.contains("no job"), "{e}");
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

#[tokio::test]
async fn issue_14_jobs_outlive_their_session_and_server() -> anyhow::Result<()> {
    let t = tag("jobslive");
    let id = format!("{t}-p");
    let a = stdio_client(&t, &state_dir(&t), &jobs_opts()).await?;
    let r = exec(
        &a,
        json!({"command": "echo early; sleep 2; echo late", "yield_ms": 200, "computer_id": id, "temporary": false}),
    )
    .await?;
    assert_eq!(r["stdout"], "early\n");
    let j = r["job_id"].as_str().unwrap().to_owned();
    // Another session's temporary computer and its jobs stay out of reach.
    let r = exec(&a, json!({"command": "sleep 30", "yield_ms": 0})).await?;
    let (private_job, private_id) = (
        r["job_id"].as_str().unwrap().to_owned(),
        r["computer_id"].as_str().unwrap().to_owned(),
    );
    let b = stdio_client(&t, &state_dir(&t), &jobs_opts()).await?;
    for args in [
        json!({"job_id": private_job}),
        json!({"job_id": private_job, "computer_id": private_id}),
    ] {
        let e = job_error(&b, args.clone()).await?;
        assert!(e.contains("no job"), "{args}: {e}");
    }
    b.cancel().await?;
    // The server that started the job goes away; a new server process reads the rest.
    a.cancel().await?;
    let c = stdio_client(&t, &state_dir(&t), &jobs_opts()).await?;
    let (out, last) = drain(&c, &j, &id).await?;
    assert_eq!(out, "late\n");
    assert_eq!(last["exit_code"], 0);
    c.cancel().await?;
    remove_all(&t).await
}

#[tokio::test]
async fn issue_14_a_computer_keeps_at_most_64_jobs() -> anyhow::Result<()> {
    let t = tag("jobscap");
    let c = stdio_client(&t, &state_dir(&t), &jobs_opts()).await?;
    let id = format!("{t}-a");
    fill_to_the_cap(&c, &id, 64).await?;
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

#[tokio::test]
async fn issue_14_per_call_env_on_both_docker_paths() -> anyhow::Result<()> {
    for plain in [false, true] {
        let t = tag(if plain { "envplain" } else { "envsup" });
        let c = stdio_client(&t, &state_dir(&t), &jobs_opts().plain_if(plain)).await?;
        let r = exec(
            &c,
            json!({"command": "echo \"$GREETING $EMPTY|$HOME\"", "env": {"GREETING": "hi there", "EMPTY": "", "HOME": "/elsewhere"}}),
        )
        .await?;
        assert_eq!(r["stdout"], "hi there |/elsewhere\n", "plain={plain}");
        // The schema's list form reads the same.
        let r = exec(
            &c,
            json!({"command": "echo \"$GREETING|$HOME\"", "env": [{"name": "GREETING", "value": "hi"}, {"name": "HOME", "value": "/x"}]}),
        )
        .await?;
        assert_eq!(r["stdout"], "hi|/x\n", "plain={plain}");
        // Only for that command.
        let r = exec(&c, json!({"command": "echo \"[$GREETING]\""})).await?;
        assert_eq!(r["stdout"], "[]\n");
        for (env, needle) in [
            (json!({"1BAD": "x"}), "not a variable name"),
            (json!({"A-B": "x"}), "not a variable name"),
            (json!({"A": 1}), "must be a string"),
            (json!(["A=1"]), "`env[0]` must be"),
            (json!("A=1"), "must be a list like"),
        ] {
            let r = call(
                &c,
                "terminal_execute",
                json!({"command": "true", "env": env}),
            )
            .await?;
            assert_eq!(r.is_error, Some(true));
            assert!(text(&r).contains(needle), "{env}: {}", text(&r));
        }
        if plain {
            // Without the supervisor a command cannot outlive its call: said clearly.
            let r = call(
                &c,
                "terminal_execute",
                json!({"command": "sleep 5", "yield_ms": 0}),
            )
            .await?;
            assert_eq!(r.is_error, Some(true));
            assert!(text(&r).contains("supervisor"), "{}", text(&r));
        } else {
            let r = exec(
                &c,
                json!({"command": "sleep 0.3; echo $X", "env": {"X": "in a job"}, "yield_ms": 0}),
            )
            .await?;
            let id = r["computer_id"].as_str().unwrap().to_owned();
            let (out, _) = drain(&c, r["job_id"].as_str().unwrap(), &id).await?;
            assert_eq!(out, "in a job\n");
        }
        c.cancel().await?;
        wait_for_count(&t, 0, Duration::from_secs(15)).await?;
    }
    Ok(())
}

/// Issue 14: a foreground call with a progress token gets its newest output line as
/// `notifications/progress`, at most one per 250 ms, on both Docker exec paths and on WASM
/// (issue 45).
#[tokio::test]
async fn issue_14_live_output_as_progress() -> anyhow::Result<()> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let backends = [
        ("livesup", ServerOpts::default()),
        ("liveplain", ServerOpts::default().plain()),
        ("livewasm", wasm_opts()),
    ];
    for (name, opts) in backends {
        let t = tag(name);
        let mut cmd = command(&t, &state_dir(&t), &opts);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::from(log_file(&t)));
        let mut child = cmd.spawn()?;
        let mut stdin = child.stdin.take().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        let id = format!("{t}-a");
        let msgs = [
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
                "capabilities": {}, "clientInfo": {"name": "p", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "terminal_execute",
                "arguments": {"command": "true", "computer_id": id}}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "terminal_execute",
                "arguments": {"command": "for i in 1 2 3 4 5 6 7 8; do echo line$i; echo err$i >&2; sleep 0.2; done", "computer_id": id},
                "_meta": {"progressToken": "live"}}}),
        ];
        // The computer exists before the watched call, so its progress is output only.
        for m in &msgs[..2] {
            stdin.write_all(format!("{m}\n").as_bytes()).await?;
        }
        loop {
            let line = tokio::time::timeout(Duration::from_secs(60), out.next_line())
                .await??
                .unwrap_or_default();
            if serde_json::from_str::<Value>(&line)?["id"] == 1 {
                break;
            }
        }
        stdin.write_all(format!("{}\n", msgs[2]).as_bytes()).await?;
        let (mut lines, mut at) = (Vec::new(), Vec::new());
        loop {
            let line = tokio::time::timeout(Duration::from_secs(60), out.next_line())
                .await??
                .unwrap_or_default();
            let v: Value = serde_json::from_str(&line)?;
            if v["method"] == "notifications/progress" && v["params"]["progressToken"] == "live" {
                lines.push(
                    v["params"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                );
                at.push(Instant::now());
            } else if v["id"] == 2 {
                assert_eq!(v["result"]["structuredContent"]["exit_code"], 0);
                break;
            }
        }
        assert!(lines.len() >= 3, "{name}: {lines:?}");
        assert!(
            lines
                .iter()
                .all(|l| l.starts_with("line") || l.starts_with("err")),
            "{lines:?}"
        );
        for w in at.windows(2) {
            assert!(
                w[1] - w[0] >= Duration::from_millis(200),
                "more than one per 250 ms"
            );
        }
        drop(stdin);
        child.wait().await?;
        remove_all(&t).await?;
    }
    Ok(())
}

/// Size in bytes of `path` on computer `id` (0 when missing).
async fn size_of(c: &Client, id: &str, path: &str) -> anyhow::Result<u64> {
    let r = exec(
        c,
        json!({"command": format!("wc -c < {path} 2>/dev/null || echo 0"), "computer_id": id}),
    )
    .await?;
    Ok(r["stdout"].as_str().unwrap_or("0").trim().parse()?)
}

#[tokio::test]
async fn issue_14_jobs_on_wasm() -> anyhow::Result<()> {
    let t = tag("wasm-jobs");
    let c = stdio_client(
        &t,
        &state_dir(&t),
        &wasm_opts().arg("--tools=jobs,lifecycle"),
    )
    .await?;
    let id = format!("{t}-w");
    // Ends within the wait: the plain result; given stdin is the whole input.
    let r = exec(
        &c,
        json!({"command": "echo quick; exit 4", "yield_ms": 10000, "computer_id": id}),
    )
    .await?;
    assert_eq!(
        (r["stdout"].as_str(), r["exit_code"].as_i64()),
        (Some("quick\n"), Some(4)),
        "{r}"
    );
    assert!(r.get("job_id").is_none(), "{r}");
    let r = exec(
        &c,
        json!({"args": ["wc", "-c"], "stdin": "abc", "yield_ms": 10000, "computer_id": id}),
    )
    .await?;
    assert_eq!(r["stdout"], "3\n", "{r}");
    // Still running: the output so far and a job id; the rest by polling.
    let r = exec(
        &c,
        json!({"command": "echo start; sleep 1; echo end; exit 3", "yield_ms": 300, "computer_id": id}),
    )
    .await?;
    assert_eq!(
        (r["running"].as_bool(), r["stdout"].as_str()),
        (Some(true), Some("start\n")),
        "{r}"
    );
    let job_id = r["job_id"].as_str().unwrap().to_owned();
    let (out, last) = drain(&c, &job_id, &id).await?;
    assert_eq!(out, "end\n");
    assert_eq!(last["exit_code"], 3, "{last}");
    assert!(last["exec_duration_ms"].as_u64().unwrap() >= 1000, "{last}");
    let e = job_error(&c, json!({"job_id": job_id, "computer_id": id})).await?;
    assert!(e.contains("no job"), "{e}");
    // A peek (the dashboard's Tail) takes nothing, as on every backend.
    tests::jobs::peeks(&c, &id).await?;
    // A REPL in the host shell answers two writes; closing stdin ends it.
    let r = exec(
        &c,
        json!({"command": "while read l; do echo \"got $l\"; done; echo bye", "yield_ms": 200, "computer_id": id}),
    )
    .await?;
    let repl = r["job_id"].as_str().unwrap().to_owned();
    let r = job(&c, json!({"job_id": repl, "stdin": "a\n", "wait_ms": 5000})).await?;
    assert_eq!(
        (r["stdout"].as_str(), r["running"].as_bool()),
        (Some("got a\n"), Some(true)),
        "{r}"
    );
    let r = job(
        &c,
        json!({"job_id": repl, "stdin_base64": "Ygo=", "wait_ms": 5000}),
    )
    .await?;
    assert_eq!(r["stdout"], "got b\n", "{r}");
    let r = job(
        &c,
        json!({"job_id": repl, "close_stdin": true, "wait_ms": 5000}),
    )
    .await?;
    let (rest, last) = if r["running"] == false {
        (String::new(), r.clone())
    } else {
        drain(&c, &repl, &id).await?
    };
    assert_eq!(format!("{}{rest}", r["stdout"].as_str().unwrap()), "bye\n");
    assert_eq!(last["exit_code"], 0, "{last}");
    // A signal ends the job and its own `&` commands (the writer stops writing).
    for (signal, code) in [("TERM", 143), ("KILL", 137), ("INT", 130)] {
        let r = exec(
            &c,
            json!({"command": "rm -f /tmp/bg; while true; do echo x >> /tmp/bg; sleep 0.05; done & echo ready; wait",
                "yield_ms": 500, "computer_id": id}),
        )
        .await?;
        assert_eq!(r["stdout"], "ready\n", "{r}");
        let j = r["job_id"].as_str().unwrap().to_owned();
        let r = job(&c, json!({"job_id": j, "signal": signal, "wait_ms": 5000})).await?;
        assert_eq!(
            (r["running"].as_bool(), r["exit_code"].as_i64()),
            (Some(false), Some(code)),
            "{signal}: {r}"
        );
        let before = size_of(&c, &id, "/tmp/bg").await?;
        assert!(before > 0, "the background writer never wrote");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            size_of(&c, &id, "/tmp/bg").await?,
            before,
            "a background command outlived {signal}"
        );
    }
    // The job's timeout bounds its whole life.
    let r = exec(
        &c,
        json!({"command": "echo t; sleep 100", "timeout": 1, "yield_ms": 100, "computer_id": id}),
    )
    .await?;
    let (out, last) = drain(&c, r["job_id"].as_str().unwrap(), &id).await?;
    assert_eq!(format!("{}{out}", r["stdout"].as_str().unwrap()), "t\n");
    assert_eq!(
        (last["exit_code"].as_i64(), last["timed_out"].as_bool()),
        (Some(124), Some(true)),
        "{last}"
    );
    // A reader that falls behind loses the oldest bytes, and is told how many.
    let last = slow_reader(&c, &id, 120).await?;
    assert_eq!(last["exit_code"], 0, "{last}");
    // Lists: terminal_job's and computer_list's.
    let r = exec(
        &c,
        json!({"command": "sleep 30", "yield_ms": 0, "computer_id": id}),
    )
    .await?;
    let sleeping = r["job_id"].as_str().unwrap().to_owned();
    let l = job(&c, json!({"list": true, "computer_id": id})).await?;
    assert_eq!(l["count"], 1, "{l}");
    assert_eq!(l["jobs"][0]["job_id"], sleeping.as_str(), "{l}");
    assert_eq!(l["jobs"][0]["command"], "sleep 30", "{l}");
    let inv = call(&c, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    let item = listed(&inv, &id).unwrap();
    assert_eq!(item["jobs"][0]["running"], true, "{item}");
    // Another computer does not see it; restart ends it.
    let e = job_error(
        &c,
        json!({"job_id": sleeping, "computer_id": format!("{t}-other")}),
    )
    .await?;
    assert!(e.contains("no job"), "{e}");
    call(&c, "computer_restart", json!({"computer_id": id})).await?;
    let e = job_error(&c, json!({"job_id": sleeping, "computer_id": id})).await?;
    assert!(e.contains("no job"), "{e}");
    c.cancel().await?;
    Ok(())
}
