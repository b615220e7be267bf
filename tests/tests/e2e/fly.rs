//! Fly Machines computers (issue 7) through the local binary, against the local simulator
//! of the Machines API (`tests::sim::fly`), which validates every request our client sends
//! against `specs/fly-machines-openapi.json` and backs each machine with a real container.

use std::time::Duration;

use serde_json::{Value, json};
use tests::sim::fly::{FlySim, FlySimOptions};
use tests::*;

const TOKEN: &str = "fm2_test-token-for-the-simulator";

async fn start_sim(tag: &str, tweak: impl FnOnce(&mut FlySimOptions)) -> anyhow::Result<FlySim> {
    let mut o = FlySimOptions {
        token: TOKEN.into(),
        docker_label: ("msc-test".into(), tag.into()),
        image_map: vec![(
            "docker.io/library/debian:bookworm-slim".into(),
            "debian:bookworm-slim".into(),
        )],
        ..Default::default()
    };
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
    let c = stdio_client(&t, &state, &opts).await?;
    // The first start created an app and remembered it.
    let remembered: Value = serde_json::from_slice(&std::fs::read(state.join("fly.json"))?)?;
    assert!(
        remembered["app"]
            .as_str()
            .unwrap()
            .starts_with("msc-computers-")
    );
    // Exec: results, exit codes, stdin, working_directory, 126/127.
    let r = exec(&c, json!({"command": "echo hi; echo err >&2; exit 3"})).await?;
    assert_eq!(
        (r["stdout"].as_str(), r["stderr"].as_str()),
        (Some("hi\n"), Some("err\n"))
    );
    assert_eq!(r["exit_code"], 3);
    let tmp = r["computer_id"].as_str().unwrap().to_owned();
    let r = exec(&c, json!({"args": ["cat"], "stdin": "piped\n"})).await?;
    assert_eq!(r["stdout"], "piped\n");
    let r = exec(&c, json!({"command": "pwd", "working_directory": "/usr"})).await?;
    assert_eq!(r["stdout"], "/usr\n");
    let r = exec(&c, json!({"command": "pwd", "working_directory": "/nope"})).await?;
    assert_eq!(r["exit_code"], 126, "{r}");
    let r = exec(&c, json!({"args": ["no-such-program"]})).await?;
    assert_eq!(r["exit_code"], 127, "{r}");
    // A timeout inside the synchronous window, and one past it (background + poll).
    let r = exec(
        &c,
        json!({"command": "echo before; sleep 30", "timeout": 2}),
    )
    .await?;
    assert_eq!(
        (r["exit_code"].as_i64(), r["timed_out"].as_bool()),
        (Some(124), Some(true)),
        "{r}"
    );
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
    // A permanent computer keeps its files across restart and across servers.
    let r = call(
        &c,
        "computer_create",
        json!({"computer_id": "fly-keep", "temporary": false}),
    )
    .await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    exec(
        &c,
        json!({"computer_id": "fly-keep", "command": "echo kept > /root/note"}),
    )
    .await?;
    let r = call(&c, "computer_restart", json!({"computer_id": "fly-keep"})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = exec(
        &c,
        json!({"computer_id": "fly-keep", "command": "cat /root/note"}),
    )
    .await?;
    assert_eq!(r["stdout"], "kept\n", "{r}");
    let list: Value = serde_json::from_str(&text(&call(&c, "computer_list", json!({})).await?))?;
    assert_eq!(list["count"], 2, "{list}");
    assert!(
        list["computers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["backend"] == "fly")
    );
    // Factory reset empties it.
    exec(&c, json!({"computer_id": tmp, "command": "touch /root/x"})).await?;
    let r = call(&c, "computer_factory_reset", json!({"computer_id": tmp})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = exec(&c, json!({"computer_id": tmp, "command": "ls /root"})).await?;
    assert_eq!(r["stdout"], "", "{r}");
    c.cancel().await?;
    // The temporary went away with the session; the permanent one is found again.
    let c = stdio_client(&t, &state, &opts).await?;
    let list: Value = serde_json::from_str(&text(&call(&c, "computer_list", json!({})).await?))?;
    let ids: Vec<&str> = list["computers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["computer_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["fly-keep"], "{list}");
    let r = exec(
        &c,
        json!({"computer_id": "fly-keep", "command": "cat /root/note"}),
    )
    .await?;
    assert_eq!(r["stdout"], "kept\n", "{r}");
    let r = call(&c, "computer_delete", json!({"computer_id": "fly-keep"})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    c.cancel().await?;
    assert_no_violations(&sim);
    sim.stop().await;
    Ok(())
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
    assert!(ok >= 4, "ok {ok}, failed {failed:#?}");
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
