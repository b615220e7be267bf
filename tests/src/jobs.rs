//! Jobs (issue 14) as every backend must serve them: the checks the Docker, cloud and
//! gateway tests share.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use anyhow::Context;

use crate::{Client, call, exec, job, listed, text};

/// Field `key` of a result as text (an error when it is not there).
fn str_of<'a>(v: &'a Value, key: &str) -> anyhow::Result<&'a str> {
    v[key].as_str().with_context(|| format!("no {key} in {v}"))
}

/// The error text of a `terminal_job` call that must fail.
pub async fn job_error(c: &Client, arguments: Value) -> anyhow::Result<String> {
    crate::call_error(c, "terminal_job", arguments).await
}

/// Polls until the job ends; returns all its stdout and the last result.
pub async fn drain(c: &Client, job_id: &str, computer_id: &str) -> anyhow::Result<(String, Value)> {
    let mut out = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = job(
            c,
            json!({"job_id": job_id, "computer_id": computer_id, "wait_ms": 5000}),
        )
        .await?;
        out.push_str(r["stdout"].as_str().unwrap_or_default());
        if r["running"] == false {
            return Ok((out, r));
        }
        anyhow::ensure!(Instant::now() < deadline, "job {job_id} never ended");
    }
}

/// A job writing 20 MB read only every few seconds: the oldest bytes are dropped and
/// counted (read + dropped = all), the newest kept. Returns the last read.
pub async fn slow_reader(c: &Client, id: &str, timeout: u64) -> anyhow::Result<Value> {
    let r = exec(
        c,
        json!({"command": "head -c 20000000 /dev/zero | tr '\\0' x; echo END", "yield_ms": 0,
            "computer_id": id, "timeout": timeout}),
    )
    .await?;
    let j = str_of(&r, "job_id")?.to_owned();
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The first answer counts too: a job that wrote more than the buffer before it was
    // first read has lost its oldest bytes already.
    let (mut got, mut dropped) = (
        r["stdout"].as_str().unwrap_or_default().len() as u64,
        r["dropped_bytes"].as_u64().unwrap_or(0),
    );
    let mut tail = String::new();
    let last = loop {
        let r = job(c, json!({"job_id": j, "wait_ms": 5000})).await?;
        let s = r["stdout"].as_str().unwrap_or_default();
        got += s.len() as u64;
        dropped += r["dropped_bytes"].as_u64().unwrap_or(0);
        tail = format!("{tail}{s}");
        tail = tail[tail.len().saturating_sub(10)..].to_owned();
        if r["running"] == false {
            break r;
        }
    };
    assert!(dropped > 0, "nothing was dropped");
    assert_eq!(got + dropped, 20_000_004, "every byte read or counted");
    assert!(
        tail.ends_with("xxEND\n"),
        "the newest bytes are kept: {tail:?}"
    );
    Ok(last)
}

/// How many processes in computer `id` run exactly `sleep 1000`.
pub async fn sleepers(c: &Client, id: &str) -> anyhow::Result<String> {
    let r = exec(
        c,
        json!({"command": "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < \"$f\" 2>/dev/null; echo; done | grep -c '^sleep 1000 $'", "computer_id": id}),
    )
    .await?;
    Ok(r["stdout"].as_str().unwrap_or_default().trim().to_owned())
}

/// A peek (the dashboard's Tail) on computer `id`: the newest output of each stream, read
/// or not, taking nothing; with a signal it ends the job, whose end waits for a read.
pub async fn peeks(c: &Client, id: &str) -> anyhow::Result<()> {
    let r = exec(
        c,
        json!({"command": "seq 1 3000; echo err >&2; read x; echo \"after $x\"", "yield_ms": 0,
            "computer_id": id}),
    )
    .await?;
    let j = str_of(&r, "job_id")?.to_owned();
    let mut got = r["stdout"].as_str().unwrap_or_default().to_owned();
    let peek = |signal: Option<&str>| {
        let mut args = json!({"job_id": j, "computer_id": id, "peek": true});
        if let Some(s) = signal {
            args["signal"] = json!(s);
        }
        job(c, args)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = peek(None).await?;
    while seen["stderr"] != "err\n" {
        anyhow::ensure!(
            Instant::now() < deadline,
            "a peek never showed stderr: {seen}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = peek(None).await?;
    }
    assert_eq!(
        (&seen["peek"], &seen["running"]),
        (&json!(true), &json!(true)),
        "{seen}"
    );
    let tail = str_of(&seen, "stdout")?;
    assert!(
        tail.ends_with("2999\n3000\n") && tail.len() <= 16 * 1024,
        "{seen}"
    );
    // It took nothing: reads get all of it, from the start.
    let want: String = (1..=3000).map(|i| format!("{i}\n")).collect();
    while got.len() < want.len() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "reads never got all the output: {got:?}"
        );
        let r = job(c, json!({"job_id": j, "computer_id": id, "wait_ms": 5000})).await?;
        got.push_str(r["stdout"].as_str().unwrap_or_default());
    }
    assert_eq!(got, want);
    // Read or not, a peek shows it; with TERM it ends the job, which waits for a read.
    let mut seen = peek(Some("TERM")).await?;
    while seen["running"] != false {
        anyhow::ensure!(Instant::now() < deadline, "TERM never ended it: {seen}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = peek(None).await?;
    }
    assert_eq!(
        (&seen["exit_code"], &seen["peek"]),
        (&json!(143), &json!(true)),
        "{seen}"
    );
    assert!(str_of(&seen, "stdout")?.ends_with("3000\n"), "{seen}");
    let (_, last) = drain(c, &j, id).await?;
    assert_eq!(last["exit_code"], 143, "{last}");
    let e = job_error(c, json!({"job_id": j, "computer_id": id, "peek": true})).await?;
    assert!(e.contains("no job"), "{e}");
    Ok(())
}

/// What every backend's jobs do, on computer `id` (the session's, with the `jobs` and
/// `lifecycle` groups): a command that ends within its wait, given stdin, polling to the
/// end, `yield_ms: 0`, a job found without its `computer_id`, a REPL, TERM and KILL
/// ending the whole tree, the timeout, per-call `env`, lists, refusals. `full` adds a
/// 20 MB slow reader and the jobs in `computer_list` items. Returns a job left running.
pub async fn job_basics(c: &Client, id: &str, full: bool) -> anyhow::Result<String> {
    // Ends within the wait: the plain exec result, no job.
    let r = exec(
        c,
        json!({"command": "echo quick; exit 4", "yield_ms": 10000, "computer_id": id}),
    )
    .await?;
    assert_eq!(
        (r["stdout"].as_str(), r["exit_code"].as_i64()),
        (Some("quick\n"), Some(4))
    );
    assert!(
        r.get("job_id").is_none() && r.get("running").is_none(),
        "{r}"
    );
    // Given stdin is the whole input, as in the foreground.
    let r = exec(
        c,
        json!({"args": ["wc", "-c"], "stdin": "abc", "yield_ms": 10000, "computer_id": id}),
    )
    .await?;
    assert_eq!(r["stdout"], "3\n");
    // Still running: the output so far and a job id; the rest comes by polling.
    let r = exec(
        c,
        json!({"command": "echo start; sleep 2; echo end; exit 3", "yield_ms": 300, "computer_id": id}),
    )
    .await?;
    assert_eq!(
        (r["running"].as_bool(), r["stdout"].as_str()),
        (Some(true), Some("start\n")),
        "{r}"
    );
    assert!(r.get("exit_code").is_none());
    let job_id = str_of(&r, "job_id")?.to_owned();
    assert!(job_id.len() >= 28, "{job_id}");
    let (out, last) = drain(c, &job_id, id).await?;
    assert_eq!(last["exit_code"], 3, "{last}");
    assert_eq!(out, "end\n");
    assert!(last["exec_duration_ms"].as_u64().unwrap_or_default() >= 2000);
    // Read to the end, it is gone.
    let e = job_error(c, json!({"job_id": job_id})).await?;
    assert!(e.contains("no job"), "{e}");
    // yield_ms 0 answers at once.
    let r = exec(
        c,
        json!({"command": "sleep 0.5; echo z", "yield_ms": 0, "computer_id": id}),
    )
    .await?;
    assert_eq!(r["running"], true);
    // Without computer_id the session finds the job's computer itself.
    let j = str_of(&r, "job_id")?;
    let r = job(c, json!({"job_id": j, "wait_ms": 10000})).await?;
    assert_eq!(r["computer_id"], id);
    let out = if r["running"] == false {
        String::new()
    } else {
        drain(c, j, id).await?.0
    };
    assert!(format!("{}{out}", r["stdout"].as_str().unwrap_or_default()).contains('z'));

    // A REPL answers two writes; closing stdin ends it.
    let r = exec(
        c,
        json!({"command": "while read l; do echo \"got $l\"; done; echo bye", "yield_ms": 200, "computer_id": id}),
    )
    .await?;
    let repl = str_of(&r, "job_id")?.to_owned();
    let r = job(c, json!({"job_id": repl, "stdin": "a\n", "wait_ms": 5000})).await?;
    assert_eq!(
        (r["stdout"].as_str(), r["running"].as_bool()),
        (Some("got a\n"), Some(true))
    );
    let r = job(
        c,
        json!({"job_id": repl, "stdin_base64": "Ygo=", "wait_ms": 5000}),
    )
    .await?;
    assert_eq!(r["stdout"], "got b\n");
    let r = job(
        c,
        json!({"job_id": repl, "close_stdin": true, "wait_ms": 5000}),
    )
    .await?;
    // The close may already end it: then that answer is the last.
    let (rest, last) = if r["running"] == false {
        (String::new(), r.clone())
    } else {
        drain(c, &repl, id).await?
    };
    assert_eq!(
        format!("{}{rest}", r["stdout"].as_str().unwrap_or_default()),
        "bye\n"
    );
    assert_eq!(last["exit_code"], 0);

    peeks(c, id).await?;

    // TERM and KILL end the whole tree: nothing survives, checked inside the computer.
    for (signal, code) in [("TERM", 143), ("KILL", 137)] {
        let r = exec(
            c,
            json!({"command": "sleep 1000 & sleep 1000 & echo ready; wait", "yield_ms": 500, "computer_id": id}),
        )
        .await?;
        assert_eq!(r["stdout"], "ready\n");
        assert_eq!(sleepers(c, id).await?, "2");
        let j = str_of(&r, "job_id")?.to_owned();
        let r = job(c, json!({"job_id": j, "signal": signal, "wait_ms": 5000})).await?;
        let last = if r["running"] == false {
            r
        } else {
            drain(c, &j, id).await?.1
        };
        assert_eq!(last["exit_code"], code, "{signal}: {last}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while sleepers(c, id).await? != "0" {
            assert!(Instant::now() < deadline, "a child survived {signal}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // The job's timeout bounds its whole life.
    let r = exec(
        c,
        json!({"command": "echo t; sleep 100", "timeout": 1, "yield_ms": 100, "computer_id": id}),
    )
    .await?;
    // Over a provider's exec, starting the job and its first read can take longer than the
    // timeout on a loaded machine: then the call itself answers how it ended.
    let last = if r["running"] == true {
        drain(c, str_of(&r, "job_id")?, id).await?.1
    } else {
        r
    };
    assert_eq!(
        (last["exit_code"].as_i64(), last["timed_out"].as_bool()),
        (Some(124), Some(true)),
        "{last}"
    );

    // Per-call env reaches the job, not the computer.
    let r = exec(
        c,
        json!({"command": "echo \"$MSC_JOB_VAR\"", "env": {"MSC_JOB_VAR": "from-call"},
            "yield_ms": 10000, "computer_id": id}),
    )
    .await?;
    assert_eq!(r["stdout"], "from-call\n", "{r}");

    // A reader that falls behind loses the oldest bytes, and is told how many.
    if full {
        slow_reader(c, id, 120).await?;
    }

    // Lists: terminal_job's and computer_list's.
    let r = exec(
        c,
        json!({"command": "sleep 30", "yield_ms": 0, "computer_id": id}),
    )
    .await?;
    let sleeping = str_of(&r, "job_id")?.to_owned();
    let l = job(c, json!({"list": true, "computer_id": id})).await?;
    assert_eq!(l["count"], 1, "{l}");
    assert_eq!(
        (
            l["jobs"][0]["job_id"].as_str(),
            l["jobs"][0]["command"].as_str()
        ),
        (Some(sleeping.as_str()), Some("sleep 30"))
    );
    if full {
        let inv = call(c, "computer_list", json!({}))
            .await?
            .structured_content
            .context("no structuredContent")?;
        let item = listed(&inv, id).context("not listed")?;
        assert_eq!(item["jobs"][0]["job_id"], sleeping.as_str(), "{item}");
        assert_eq!(item["jobs"][0]["running"], true);
    }

    // Bad and unknown ids are refused, changing nothing.
    for (args, needle) in [
        (json!({"job_id": "job-000000000000000000000000"}), "no job"),
        (json!({"job_id": "a b"}), "`job_id`"),
        (json!({}), "needs `job_id`"),
        (json!({"job_id": sleeping, "signal": "BOOM"}), "`signal`"),
        (json!({"job_id": sleeping, "wait_ms": 60001}), "`wait_ms`"),
        (
            json!({"job_id": sleeping, "stdin": "a", "stdin_base64": "YQ=="}),
            "not both",
        ),
        (
            json!({"list": true, "job_id": sleeping}),
            "`list` takes only",
        ),
        (
            json!({"job_id": sleeping, "peek": true, "wait_ms": 5}),
            "`peek` only looks",
        ),
    ] {
        let e = job_error(c, args.clone()).await?;
        assert!(e.contains(needle), "{args}: {e}");
    }
    Ok(sleeping)
}

/// Jobs on a cloud backend through the local binary (`opts` with the `jobs` group and the
/// lifecycle tools): [`job_basics`] on permanent computer `keep`, a job that outlives its
/// server (a new server process reads it by id), the 64-job cap, and a restart that ends
/// the computer's jobs.
pub async fn cloud_jobs(
    t: &str,
    state: &std::path::Path,
    opts: &crate::ServerOpts,
    keep: &str,
) -> anyhow::Result<()> {
    let c = crate::stdio_client(t, state, opts).await?;
    let r = call(
        &c,
        "computer_create",
        json!({"computer_id": keep, "temporary": false}),
    )
    .await?;
    anyhow::ensure!(r.is_error == Some(false), "{}", text(&r));
    let sleeping = job_basics(&c, keep, true).await?;
    let r = exec(
        &c,
        json!({"command": "sleep 1; echo later", "yield_ms": 0, "computer_id": keep}),
    )
    .await?;
    let later = str_of(&r, "job_id")?.to_owned();
    c.cancel().await?;

    let c = crate::stdio_client(t, state, opts).await?;
    let (out, last) = drain(&c, &later, keep).await?;
    assert_eq!(
        (out.as_str(), last["exit_code"].as_i64()),
        ("later\n", Some(0))
    );
    // The cap counts what the computer keeps (the sleeping job is one).
    fill_to_the_cap(&c, keep, 63).await?;
    // A restart ends them all.
    let r = call(&c, "computer_restart", json!({"computer_id": keep})).await?;
    anyhow::ensure!(r.is_error == Some(false), "{}", text(&r));
    let e = job_error(&c, json!({"job_id": sleeping, "computer_id": keep})).await?;
    assert!(e.contains("no job"), "{e}");
    let l = job(&c, json!({"list": true, "computer_id": keep})).await?;
    assert_eq!(l["count"], 0, "{l}");
    let r = call(&c, "computer_delete", json!({"computer_id": keep})).await?;
    anyhow::ensure!(r.is_error == Some(false), "{}", text(&r));
    c.cancel().await?;
    Ok(())
}

/// Starts `n` more jobs on computer `id`, which then keeps 64: a 65th is refused with a
/// clear error, and a foreground command still runs.
pub async fn fill_to_the_cap(c: &Client, id: &str, n: usize) -> anyhow::Result<()> {
    for _ in 0..n {
        let r = exec(
            c,
            json!({"args": ["sleep", "100"], "yield_ms": 0, "computer_id": id}),
        )
        .await?;
        assert_eq!(r["running"], true, "{r}");
    }
    let r = call(
        c,
        "terminal_execute",
        json!({"args": ["true"], "yield_ms": 0, "computer_id": id}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("64 jobs"), "{}", text(&r));
    assert_eq!(
        exec(c, json!({"command": "echo ok", "computer_id": id})).await?["stdout"],
        "ok\n"
    );
    Ok(())
}
