//! Issue 3: exec through the in-computer supervisor, and the fallback to Engine API exec.

use std::time::{Duration, Instant};

use serde_json::json;
use tests::*;

async fn pid1(c: &Client, id: &str) -> anyhow::Result<String> {
    let r = exec(
        c,
        json!({"command": "tr '\\0' ' ' < /proc/1/cmdline", "computer_id": id}),
    )
    .await?;
    Ok(r["stdout"].as_str().unwrap_or_default().to_owned())
}

/// The behaviours that must be identical on both exec paths.
pub(crate) async fn same_results(c: &Client, id: &str) -> anyhow::Result<()> {
    let r = exec(
        c,
        json!({"command": "echo out; echo err >&2; exit 3", "computer_id": id}),
    )
    .await?;
    assert_eq!(
        (
            r["stdout"].as_str(),
            r["stderr"].as_str(),
            r["exit_code"].as_i64()
        ),
        (Some("out\n"), Some("err\n"), Some(3))
    );
    assert_eq!(
        exec(c, json!({"args": ["nope"], "computer_id": id})).await?["exit_code"],
        127
    );
    assert_eq!(
        exec(
            c,
            json!({"command": "pwd", "working_directory": "/nope", "computer_id": id})
        )
        .await?["exit_code"],
        126
    );
    assert_eq!(
        exec(c, json!({"command": "kill -TERM $$", "computer_id": id})).await?["exit_code"],
        143
    );
    let r = exec(c, json!({"command": "printf 'a\\377'", "computer_id": id})).await?;
    assert_eq!(r["stdout_base64"], "Yf8=");
    let r = exec(
        c,
        json!({"args": ["wc", "-c"], "stdin": "x".repeat(300_000), "computer_id": id}),
    )
    .await?;
    assert_eq!(r["stdout"], "300000\n");
    let r = exec(
        c,
        json!({"command": "true", "stdin": "y".repeat(2 * 1024 * 1024), "computer_id": id}),
    )
    .await?;
    assert_eq!(r["exit_code"], 0);
    let r = exec(
        c,
        json!({"command": "echo before; sleep 1000 & sleep 1000", "timeout": 1, "computer_id": id}),
    )
    .await?;
    assert_eq!(
        (
            r["exit_code"].as_i64(),
            r["timed_out"].as_bool(),
            r["stdout"].as_str()
        ),
        (Some(124), Some(true), Some("before\n"))
    );
    // A process that ignores SIGTERM (and INT, HUP) is stopped on time all the same.
    let r = exec(
        c,
        json!({"command": "trap '' TERM INT HUP; echo t; sleep 1000", "timeout": 1, "computer_id": id}),
    )
    .await?;
    assert_eq!(
        (r["exit_code"].as_i64(), r["stdout"].as_str()),
        (Some(124), Some("t\n"))
    );
    let r = exec(
        c,
        // Printable bytes: 2 MiB of NULs would make a 26 MB JSON line (each NUL is escaped
        // twice), over rmcp's 16 MiB client line limit.
        json!({"command": "yes | head -c 1000000000", "computer_id": id}),
    )
    .await?;
    assert_eq!(r["truncated"], true);
    let mut left = json!(null);
    for _ in 0..20 {
        left = exec(c, json!({"command": COUNT_SLEEP_1000, "computer_id": id})).await?;
        if left["stdout"] == "0\n" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left["stdout"], "0\n");
    Ok(())
}

#[tokio::test]
async fn issue_3_exec_through_the_supervisor() -> anyhow::Result<()> {
    let t = tag("sup");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::lifecycle()).await?;
    let id = format!("{t}-a");
    exec(&c, json!({"command": "true", "computer_id": id})).await?;
    assert!(
        pid1(&c, &id)
            .await?
            .starts_with("/.msc/msc-supervisor init"),
        "PID 1 is the supervisor"
    );
    same_results(&c, &id).await?;
    // Many quick execs: each costs frames, not an Engine API exec.
    let started = Instant::now();
    for _ in 0..30 {
        exec(&c, json!({"args": ["true"], "computer_id": id})).await?;
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?} for 30 execs",
        started.elapsed()
    );
    // Restart is immediate with the supervisor as PID 1, and the relay reconnects after it.
    let r = call(&c, "computer_restart", json!({"computer_id": id})).await?;
    assert_eq!(r.is_error, Some(false));
    assert_eq!(
        exec(&c, json!({"command": "echo back", "computer_id": id})).await?["stdout"],
        "back\n"
    );
    // Code in the computer stops the supervisor: the computer stops, and the next call
    // starts it again with a fresh channel.
    let _ = call(
        &c,
        "terminal_execute",
        json!({"command": "kill -TERM 1; sleep 5", "computer_id": id}),
    )
    .await?;
    assert_eq!(
        exec(&c, json!({"command": "echo again", "computer_id": id})).await?["stdout"],
        "again\n"
    );
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

#[tokio::test]
async fn issue_3_two_servers_share_a_supervised_computer() -> anyhow::Result<()> {
    let t = tag("suptwo");
    let a = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    // The same supervisor from a file instead of the embedded copy: the same volume.
    let path = supervisor_binary();
    let from_file = ServerOpts::default().arg(&format!("--supervisor={}", path.display()));
    let b = stdio_client(&t, &state_dir(&t), &from_file).await?;
    let id = format!("{t}-p");
    exec(
        &a,
        json!({"command": "true", "computer_id": id, "temporary": false}),
    )
    .await?;
    let calls = (0..10).map(|i| {
        let (c, id) = (if i % 2 == 0 { &a } else { &b }, id.clone());
        async move {
            exec(
                c,
                json!({"command": format!("echo {i}"), "computer_id": id}),
            )
            .await
        }
    });
    for (i, r) in futures_util::future::try_join_all(calls)
        .await?
        .into_iter()
        .enumerate()
    {
        assert_eq!(r["stdout"], format!("{i}\n"));
    }
    a.cancel().await?;
    b.cancel().await?;
    remove_all(&t).await
}

#[tokio::test]
async fn issue_3_fallback_to_engine_api_exec() -> anyhow::Result<()> {
    // No supervisor binary at all.
    let t = tag("nosup");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default().plain()).await?;
    let id = format!("{t}-a");
    exec(&c, json!({"command": "true", "computer_id": id})).await?;
    assert!(
        pid1(&c, &id).await?.starts_with("/sbin/docker-init"),
        "plain computers keep docker-init"
    );
    same_results(&c, &id).await?;
    c.cancel().await?;
    // A flag that forbids the supervisor (read-only root) falls back too.
    let t2 = tag("rosup");
    let opts = ServerOpts::default()
        .arg("--docker-run-flag=--read-only")
        .arg("--docker-run-flag=--tmpfs=/tmp");
    let c = stdio_client(&t2, &state_dir(&t2), &opts).await?;
    let r = exec(
        &c,
        json!({"command": "tr '\\0' ' ' < /proc/1/cmdline; echo; echo x > /tmp/ok && cat /tmp/ok"}),
    )
    .await?;
    assert!(
        r["stdout"]
            .as_str()
            .unwrap()
            .starts_with("/sbin/docker-init"),
        "{r}"
    );
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await?;
    wait_for_count(&t2, 0, Duration::from_secs(15)).await
}

/// Code in a computer replaces the supervisor's socket with its own server that answers
/// garbage: a server that opens a new relay to it falls back to Engine API exec (no hang, no
/// crash), and a server whose relay was opened before keeps working.
#[tokio::test]
async fn issue_3_hostile_socket_in_the_computer() -> anyhow::Result<()> {
    let t = tag("suphostile");
    let a = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let id = format!("{t}-p");
    exec(
        &a,
        json!({"command": "true", "computer_id": id, "temporary": false}),
    )
    .await?;
    let plant = r#"setsid perl -MIO::Socket::UNIX -e '
        unlink "/run/msc/sup.sock";
        my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Local => "/run/msc/sup.sock", Listen => 5) or die;
        my @keep;
        while (my $c = $s->accept) { sysread($c, my $b, 64); syswrite($c, "\xff\xff\xff\xffgarbage"); push @keep, $c; }
    ' </dev/null >/dev/null 2>&1 &
    for i in 1 2 3 4 5 6 7 8 9 10; do [ -S /run/msc/sup.sock ] && sleep 0.2 && break; sleep 0.1; done; echo planted"#;
    let r = exec(&a, json!({"command": plant, "computer_id": id})).await?;
    assert_eq!(r["stdout"], "planted\n", "{r}");
    let b = stdio_client(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let started = Instant::now();
    let r = exec(
        &b,
        json!({"command": "echo via-b; exit 4", "computer_id": id}),
    )
    .await?;
    assert_eq!(
        (r["stdout"].as_str(), r["exit_code"].as_i64()),
        (Some("via-b\n"), Some(4))
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // Server A's relay was opened before the socket was replaced: still the supervisor.
    let r = exec(&a, json!({"command": "echo via-a", "computer_id": id})).await?;
    assert_eq!(r["stdout"], "via-a\n");
    a.cancel().await?;
    b.cancel().await?;
    remove_all(&t).await
}

/// Issue 19, finding 1: a child that leaves the process group with `setsid` is killed at
/// the timeout all the same, and one that keeps stdout open does not hold the answer.
#[tokio::test]
async fn issue_19_setsid_escapes_the_timeout_kill() -> anyhow::Result<()> {
    setsid_is_killed(false).await
}

/// The same guarantee on the Engine API path (computers without the supervisor).
#[tokio::test]
async fn issue_19_setsid_escapes_the_timeout_kill_engine_api() -> anyhow::Result<()> {
    setsid_is_killed(true).await
}

async fn setsid_is_killed(plain: bool) -> anyhow::Result<()> {
    let t = tag(if plain { "setsid-plain" } else { "setsid" });
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::default().plain_if(plain)).await?;
    let id = format!("{t}-a");
    exec(&c, json!({"command": "true", "computer_id": id})).await?;
    for (command, secs) in [
        ("setsid sleep 1001 >/dev/null 2>&1 & sleep 1000", "1001"),
        ("echo before; setsid sleep 1002 & sleep 1000", "1002"),
    ] {
        let started = Instant::now();
        let r = exec(
            &c,
            json!({"command": command, "timeout": 2, "computer_id": id}),
        )
        .await?;
        assert_eq!(
            (r["exit_code"].as_i64(), r["timed_out"].as_bool()),
            (Some(124), Some(true)),
            "{command}: {r}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{command}: {:?}",
            started.elapsed()
        );
        let left = exec(
            &c,
            json!({"command": format!("sleep 0.5; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep {secs} $'"), "computer_id": id}),
        )
        .await?;
        assert_eq!(left["stdout"], "0\n", "{command}: survivors");
    }
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

/// How many `sleep <secs>` run in computer `id`, once they had `wait` to start or end.
async fn sleeps(c: &Client, id: &str, secs: &str, wait: &str) -> anyhow::Result<String> {
    let count = format!(
        "sleep {wait}; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep {secs} $'"
    );
    let r = exec(c, json!({"command": count, "computer_id": id})).await?;
    Ok(r["stdout"].as_str().unwrap_or_default().trim().to_owned())
}

/// Issue 46, item 1: a job's tree dies at its timeout, on a cancelled call and on a job's
/// KILL, however it sheds its environment tag and process group (the job's audit session
/// follows it), and a kill spares a neighbouring job's tree on the same computer.
#[tokio::test]
async fn issue_46_a_tree_that_sheds_its_tag_dies_every_way() -> anyhow::Result<()> {
    tree_dies(false).await
}

/// The same on the Engine API path (its wrapper opens the session; no jobs there).
#[tokio::test]
async fn issue_46_a_tree_that_sheds_its_tag_dies_every_way_engine_api() -> anyhow::Result<()> {
    tree_dies(true).await
}

async fn tree_dies(plain: bool) -> anyhow::Result<()> {
    let t = tag(if plain { "shed-plain" } else { "shed" });
    let opts = ServerOpts::default()
        .arg("--tools")
        .arg("exec,jobs")
        .plain_if(plain);
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let id = format!("{t}-a");
    exec(&c, json!({"command": "true", "computer_id": id})).await?;
    for command in supervisor::escapes::escapes("4611.5") {
        let r = exec(
            &c,
            json!({"command": command, "timeout": 2, "computer_id": id}),
        )
        .await?;
        assert_eq!(r["timed_out"], true, "{command}: {r}");
        assert_eq!(
            sleeps(&c, &id, "4611.5", "0.5").await?,
            "0",
            "timeout: {command}"
        );
    }
    for command in supervisor::escapes::escapes("4612.5") {
        // Dropping the call makes rmcp send notifications/cancelled.
        let slow = call(
            &c,
            "terminal_execute",
            json!({"command": command, "computer_id": id}),
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(1500), slow)
                .await
                .is_err()
        );
        let mut left = String::new();
        for _ in 0..20 {
            left = sleeps(&c, &id, "4612.5", "0.1").await?;
            if left == "0" {
                break;
            }
        }
        assert_eq!(left, "0", "cancelled: {command}");
    }
    if !plain {
        for command in supervisor::escapes::escapes("4613.5") {
            let neighbour = command.replace("4613.5", "4614.5");
            let start = |command: String| {
                let c = &c;
                let id = &id;
                async move {
                    let r = exec(
                        c,
                        json!({"command": command, "yield_ms": 0, "computer_id": id}),
                    )
                    .await?;
                    anyhow::Ok(r["job_id"].as_str().unwrap_or_default().to_owned())
                }
            };
            let b = start(neighbour.clone()).await?;
            let a = start(command.clone()).await?;
            assert_eq!(sleeps(&c, &id, "4613.5", "0.5").await?, "1", "{command}");
            let r = job(&c, json!({"job_id": a, "signal": "KILL", "wait_ms": 5000})).await?;
            assert_eq!(r["running"], false, "{r}");
            assert_eq!(
                sleeps(&c, &id, "4613.5", "0.3").await?,
                "0",
                "KILL: {command}"
            );
            assert_eq!(
                sleeps(&c, &id, "4614.5", "0").await?,
                "1",
                "a KILL reached the neighbour's tree: {neighbour}"
            );
            job(&c, json!({"job_id": b, "signal": "KILL", "wait_ms": 5000})).await?;
            assert_eq!(sleeps(&c, &id, "4614.5", "0.3").await?, "0", "{neighbour}");
        }
    }
    c.cancel().await?;
    remove_all(&t).await
}

/// Issue 19, finding 6: a command the out-of-memory killer ends says so (`oom_killed`,
/// and a notice in stderr), in the foreground and as a job; a plain SIGKILL does not.
#[tokio::test]
async fn issue_19_oom_kill_is_reported() -> anyhow::Result<()> {
    oom_is_reported(false).await
}

/// The same on the Engine API path (the wrapper reads the memory cgroup; no jobs there).
#[tokio::test]
async fn issue_19_oom_kill_is_reported_engine_api() -> anyhow::Result<()> {
    oom_is_reported(true).await
}

async fn oom_is_reported(plain: bool) -> anyhow::Result<()> {
    let t = tag(if plain { "oom-plain" } else { "oom" });
    let opts = ServerOpts::default()
        .arg("--memory")
        .arg("64m")
        .arg("--tools")
        .arg("exec,jobs")
        .plain_if(plain);
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let id = format!("{t}-a");
    exec(&c, json!({"command": "true", "computer_id": id})).await?;
    // `tail` holds a 200 MB line in a 64 MB computer.
    let hog = "head -c 200000000 /dev/zero | tail > /dev/null";
    let r = exec(&c, json!({"command": hog, "computer_id": id})).await?;
    assert_eq!(
        (r["exit_code"].as_i64(), r["oom_killed"].as_bool()),
        (Some(137), Some(true)),
        "{r}"
    );
    assert!(
        r["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("out-of-memory killer"),
        "{r}"
    );
    // A job: the read that sees it end says it too.
    if plain {
        let r = exec(&c, json!({"command": "kill -9 $$", "computer_id": id})).await?;
        assert_eq!(
            (r["exit_code"].as_i64(), r.get("oom_killed")),
            (Some(137), None),
            "{r}"
        );
        c.cancel().await?;
        return wait_for_count(&t, 0, Duration::from_secs(15)).await;
    }
    let r = exec(
        &c,
        json!({"command": format!("sleep 0.5; {hog}"), "computer_id": id, "yield_ms": 0}),
    )
    .await?;
    let job_id = r["job_id"].as_str().unwrap_or_default().to_owned();
    assert!(!job_id.is_empty(), "{r}");
    let ended = loop {
        let r = job(&c, json!({"job_id": job_id, "wait_ms": 10_000})).await?;
        if r["running"] == false {
            break r;
        }
    };
    assert_eq!(
        (ended["exit_code"].as_i64(), ended["oom_killed"].as_bool()),
        (Some(137), Some(true)),
        "{ended}"
    );
    // Killed by a signal, not by memory: no such claim.
    let r = exec(&c, json!({"command": "kill -9 $$", "computer_id": id})).await?;
    assert_eq!(
        (r["exit_code"].as_i64(), r.get("oom_killed")),
        (Some(137), None),
        "{r}"
    );
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}
