//! The budgets of the WASM toolbox's host shell (issue 19, finding 2): the shell's values
//! live in the server, so a script that grows them is stopped at `--wasm-shell-memory`
//! (the server's memory stays bounded and it keeps serving), and the timeout holds in busy
//! shell loops.

use std::time::{Duration, Instant};

use serde_json::json;
use tests::*;

/// `VmHWM` (peak resident set) of process `pid`, in bytes.
fn peak_rss(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmHWM in /proc/{pid}/status"))?;
    Ok(kib << 10)
}

#[tokio::test]
async fn issue_19_wasm_shell_memory_is_bounded() -> anyhow::Result<()> {
    const BUDGET: u64 = 64 << 20;
    let t = tag("wasm-shell-memory");
    let (c, pid) = stdio_client_pid(&t, &state_dir(&t), &wasm_opts()).await?;
    let r = exec(&c, json!({"command": "echo warm"})).await?;
    assert_eq!(r["stdout"], "warm\n", "{r}");
    let before = peak_rss(pid)?;
    let started = Instant::now();
    let r = exec(
        &c,
        json!({"command": "x=a; while true; do x=$x$x; done", "timeout": 10}),
    )
    .await?;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(11), "took {took:?}: {r}");
    assert_eq!(r["exit_code"], 137, "{r}");
    assert!(
        r["stderr"].as_str().unwrap_or("").contains(
            "msc-shell: out of memory: the shell's values would exceed 64 MiB \
             (--wasm-shell-memory); write large data to a file instead"
        ),
        "{r}"
    );
    assert!(r.get("timed_out").is_none(), "{r}");
    let peak = peak_rss(pid)?;
    assert!(
        peak < before.max(1) + BUDGET + (128 << 20),
        "peak RSS {} MiB after {} MiB before",
        peak >> 20,
        before >> 20
    );
    // The server is fine, and the next command on it runs.
    let r = exec(&c, json!({"command": "x=ok; echo $x$x"})).await?;
    assert_eq!(
        (r["stdout"].as_str(), r["exit_code"].as_i64()),
        (Some("okok\n"), Some(0)),
        "{r}"
    );
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_19_wasm_timeout_is_kept_in_busy_loops() -> anyhow::Result<()> {
    let t = tag("wasm-busy-loop");
    let c = stdio_client(&t, &state_dir(&t), &wasm_opts()).await?;
    for cmd in [
        "while :; do :; done",
        "i=0; while :; do i=$((i+1)); done",
        "f() { g; }; g() { :; }; until false; do f; done",
    ] {
        let started = Instant::now();
        let r = exec(&c, json!({"command": cmd, "timeout": 2})).await?;
        let took = started.elapsed();
        assert_eq!(r["exit_code"], 124, "{cmd}: {r}");
        assert_eq!(r["timed_out"], true, "{cmd}: {r}");
        assert!(took < Duration::from_secs(3), "{cmd} took {took:?}");
    }
    let r = exec(&c, json!({"command": "echo alive"})).await?;
    assert_eq!(r["stdout"], "alive\n", "{r}");
    c.cancel().await?;
    Ok(())
}

/// Issue 46, item 2: the unread output of every WASM job of a server together stays
/// within `--wasm-job-output-budget` (the repro: many computers, each with many jobs that
/// print megabytes nobody reads), the jobs lose their oldest bytes with `dropped_bytes`
/// and keep their newest, `/metrics` shows the budget and its use, deleting the
/// computers gives the memory back, and `--max-computers-per-principal` caps the
/// computers a caller makes through the exec tool on new ids.
#[tokio::test]
async fn issue_46_wasm_job_output_stays_within_the_server_budget() -> anyhow::Result<()> {
    const BUDGET: f64 = (8 << 20) as f64;
    const JOBS: usize = 12;
    const BYTES: usize = 4_000_000;
    let t = tag("wasm-job-budget");
    let opts = wasm_opts()
        .arg("--tools=exec,jobs,lifecycle")
        .arg("--wasm-job-output-budget=8m")
        .arg("--max-computers-per-principal=3");
    let s = HttpServer::start(&t, &state_dir(&t), &opts).await?;
    let c = s.legacy_client(None).await?;
    let buffered = "msc_job_output_buffered_bytes";
    assert_eq!(
        metric(&s.base, "msc_job_output_budget_bytes").await?,
        BUDGET
    );
    assert_eq!(metric(&s.base, buffered).await?, 0.0);

    // 3 computers × 12 jobs × 4 MB nobody reads: 144 MB, 18 times the budget (each job
    // alone is under its own 8 MiB cap, so only the server's budget can drop anything).
    let ids: Vec<String> = (0..3).map(|i| format!("{t}-{i}")).collect();
    let mut jobs = Vec::new();
    for id in &ids {
        for n in 0..JOBS {
            let r = exec(
                &c,
                json!({"command": format!("head -c {BYTES} /dev/zero; printf 'end of {n}'; echo > /tmp/done-{n}; sleep 600"),
                       "yield_ms": 0, "timeout": 900, "computer_id": id, "temporary": false}),
            )
            .await?;
            assert_eq!(r["running"], true, "{r}");
            jobs.push((
                id.clone(),
                r["job_id"].as_str().unwrap_or_default().to_owned(),
            ));
        }
    }
    // Every job wrote all of its output (each marks it in its computer's /tmp).
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in &ids {
        loop {
            let r = exec(
                &c,
                json!({"command": "ls /tmp | grep -c done-", "computer_id": id}),
            )
            .await?;
            if r["stdout"] == format!("{JOBS}\n") {
                break;
            }
            assert!(Instant::now() < deadline, "{id}: {r}{}", log_tail(&t, 20));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let held = metric(&s.base, buffered).await?;
    assert!(
        held <= BUDGET,
        "{held} bytes held, over the budget of {BUDGET}"
    );
    assert!(
        held >= (JOBS * 3 * 16 * 1024) as f64,
        "each job keeps its newest bytes: {held}"
    );
    let rss = metric(&s.base, "msc_process_resident_memory_bytes").await?;
    assert!(rss > 0.0, "resident memory is reported");

    // A job's reader learns what it missed, and gets the newest bytes.
    let (id, job_id) = &jobs[JOBS + 5];
    let (mut got, mut dropped, mut tail) = (0usize, 0u64, String::new());
    loop {
        let r = job(
            &c,
            json!({"job_id": job_id, "computer_id": id, "wait_ms": 0}),
        )
        .await?;
        let out = r["stdout"].as_str().unwrap_or_default();
        dropped += r["dropped_bytes"].as_u64().unwrap_or(0);
        got += out.len();
        if out.is_empty() {
            break;
        }
        tail = out.to_owned();
    }
    assert!(
        dropped > 0,
        "the budget dropped the oldest bytes, and says so"
    );
    assert_eq!(got as u64 + dropped, (BYTES + "end of 5".len()) as u64);
    assert!(
        tail.ends_with("end of 5"),
        "the newest bytes stay: {:?}",
        &tail[tail.len().saturating_sub(20)..]
    );

    // The cap: a fourth computer, on a new id, is refused with what to do.
    let r = call(
        &c,
        "terminal_execute",
        json!({"command": "true", "computer_id": format!("{t}-x")}),
    )
    .await?;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(
        text(&r).contains("already has 3 computers, the quota of --max-computers-per-principal"),
        "{}",
        text(&r)
    );

    // Deleting the computers ends their jobs and gives their buffers back.
    for id in &ids {
        let r = call(&c, "computer_delete", json!({"computer_id": id})).await?;
        assert_ne!(r.is_error, Some(true), "{}", text(&r));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&s.base, buffered).await? != 0.0 {
        assert!(Instant::now() < deadline, "buffers kept after delete");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And room for a new computer.
    let r = exec(
        &c,
        json!({"command": "echo room", "computer_id": format!("{t}-x")}),
    )
    .await?;
    assert_eq!(r["stdout"], "room\n", "{r}");
    eprintln!(
        "resident: {:.0} MiB with the jobs' output held, {:.0} MiB after their computers were deleted",
        rss / 1048576.0,
        metric(&s.base, "msc_process_resident_memory_bytes").await? / 1048576.0
    );
    c.cancel().await?;
    s.terminate().await?;
    Ok(())
}
