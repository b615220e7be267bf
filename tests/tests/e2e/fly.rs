//! Fly Machines computers (issue 7) through the local binary, against the local simulator
//! of the Machines API (`tests::sim::fly`), which validates every request our client sends
//! against `specs/fly-machines-openapi.json` and backs each machine with a real container.

use std::time::Duration;

use serde_json::{Value, json};
use tests::sim::fly::{FlySim, FlySimOptions};
use tests::*;

const TOKEN: &str = "fm2_test-token-for-the-simulator";

async fn start_sim(tag: &str, tweak: impl FnOnce(&mut FlySimOptions)) -> anyhow::Result<FlySim> {
    let mut o = FlySimOptions::debian(TOKEN, tag);
    tweak(&mut o);
    FlySim::start(o).await
}

fn fly_opts(sim: &FlySim) -> ServerOpts {
    let mut o = ServerOpts::default()
        .arg("--backend")
        .arg("fly")
        .arg("--fly-token")
        .arg(TOKEN);
    o.env.push(("FLY_API_URL".into(), sim.url.clone()));
    o.env.push(("MSC_FLY_SYNC_EXEC_SECS".into(), "3".into()));
    o
}

fn assert_no_violations(sim: &FlySim) {
    let v = sim.violations();
    assert!(
        v.is_empty(),
        "requests that do not match the Fly API description: {v:#?}"
    );
}

#[tokio::test]
async fn issue_7_fly_exec_lifecycle_and_reattach() -> anyhow::Result<()> {
    let t = tag("fly");
    let state = state_dir(&t);
    let sim = start_sim(&t, |_| {}).await?;
    let mut opts = fly_opts(&sim);
    opts.lifecycle = true;
    let opts = opts.arg("--tools=files");
    let c = stdio_client(&t, &state, &opts).await?;
    // The first start created an app and remembered it.
    let remembered: Value = serde_json::from_slice(&std::fs::read(state.join("fly.json"))?)?;
    assert!(
        remembered["app"]
            .as_str()
            .unwrap()
            .starts_with("msc-computers-")
    );
    cloud_basics(&c, "fly", "fly-keep", TOKEN).await?;
    cloud_files(&c, "fly-keep").await?;
    // A command past one exec request's window runs in the background and is polled, also
    // to its timeout.
    let r = exec(
        &c,
        json!({"command": "sleep 4; echo done-late", "timeout": 30}),
    )
    .await?;
    assert_eq!(r["stdout"], "done-late\n", "{r}");
    let r = exec(
        &c,
        json!({"command": "echo before; sleep 60", "timeout": 5}),
    )
    .await?;
    assert_eq!(r["exit_code"], 124, "{r}");
    assert_eq!(r["stdout"], "before\n", "{r}");
    c.cancel().await?;
    // The temporary went away with the session; the permanent one is found again.
    let c = stdio_client(&t, &state, &opts).await?;
    cloud_reattach(&c, "fly-keep").await?;
    c.cancel().await?;
    assert_no_violations(&sim);
    sim.stop().await;
    Ok(())
}

#[tokio::test]
async fn issue_14_jobs_on_fly() -> anyhow::Result<()> {
    let t = tag("fly-jobs");
    let state = state_dir(&t);
    let sim = start_sim(&t, |_| {}).await?;
    let mut opts = fly_opts(&sim);
    opts.lifecycle = true;
    let opts = opts.arg("--tools=jobs");
    tests::jobs::cloud_jobs(&t, &state, &opts, "fly-jobs").await?;
    assert_no_violations(&sim);
    sim.stop().await;
    wait_for_count(&t, 0, Duration::from_secs(30)).await
}

#[tokio::test]
async fn issue_7_fly_retries_rate_limits_and_server_errors() -> anyhow::Result<()> {
    let t = tag("fly-faults");
    let state = state_dir(&t);
    // 429s and a capacity error are retried: every call succeeds.
    let sim = start_sim(&t, |o| {
        o.rate_limit_every = Some(3);
        o.capacity_errors = 1;
        o.latency_ms = 5;
    })
    .await?;
    let c = stdio_client(&t, &state, &fly_opts(&sim)).await?;
    for i in 0..5 {
        let r = exec(&c, json!({"command": format!("echo {i}")})).await?;
        assert_eq!(r["stdout"], format!("{i}\n"), "{r}");
    }
    c.cancel().await?;
    let counts = sim.request_counts();
    assert!(counts.values().sum::<u32>() > 10, "{counts:?}");
    assert_no_violations(&sim);
    sim.stop().await;
    // 5xx: safe requests are retried; an exec is not (it may have run), so it fails with
    // an actionable error, and running it again works.
    let sim = start_sim(&t, |o| o.error_5xx_every = Some(4)).await?;
    let c = stdio_client(&t, &state, &fly_opts(&sim)).await?;
    let (mut ok, mut failed) = (0, Vec::new());
    for i in 0..8 {
        let r = call(
            &c,
            "terminal_execute",
            json!({"command": format!("echo {i}")}),
        )
        .await?;
        if r.is_error == Some(true) {
            let msg = text(&r);
            assert!(msg.contains("503") && msg.contains("again"), "{msg}");
            failed.push(msg);
        } else {
            assert_eq!(r.structured_content.unwrap()["stdout"], format!("{i}\n"));
            ok += 1;
        }
    }
    // Exact (issue 46): each call sent its exec once (a retried exec would be a second
    // request, and could run the command twice), and the calls that failed are exactly
    // the execs the simulator answered 503; the rest succeeded.
    const EXEC: &str = "POST /v1/apps/{app_name}/machines/{machine_id}/exec";
    let sent = sim.request_counts().get(EXEC).copied().unwrap_or(0);
    let refused = sim.fault_counts().get(EXEC).copied().unwrap_or(0);
    assert_eq!(sent, 8, "execs sent: {:?}", sim.request_counts());
    assert!(refused >= 1, "no exec met a 503: {:?}", sim.fault_counts());
    assert_eq!(
        (ok, failed.len()),
        (8 - refused as usize, refused as usize),
        "{failed:#?}"
    );
    c.cancel().await?;
    assert_no_violations(&sim);
    sim.stop().await;
    Ok(())
}

#[tokio::test]
async fn issue_7_fly_needs_a_token() -> anyhow::Result<()> {
    let t = tag("fly-token");
    let state = state_dir(&t);
    let out = command(
        &t,
        &state,
        &ServerOpts::default().arg("--backend").arg("fly"),
    )
    .env_remove("FLY_API_TOKEN")
    .env_remove("FLY_TOKEN")
    .env("HOME", &state)
    .stdin(std::process::Stdio::null())
    .output();
    let out = tokio::time::timeout(Duration::from_secs(10), out).await??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("fly auth login"), "{stderr}");
    // A wrong token is refused at start-up, with the same advice.
    let sim = start_sim(&t, |_| {}).await?;
    let mut opts = fly_opts(&sim);
    opts.args[3] = "wrong-token".into();
    let out = command(&t, &state, &opts)
        .stdin(std::process::Stdio::null())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(20), out).await??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.to_lowercase().contains("token"), "{stderr}");
    sim.stop().await;
    Ok(())
}
