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
