//! E2B computers (issue 7) through the local binary, against the local simulator of E2B's
//! control plane and envd (`tests::sim::e2b`), which validates every request against the
//! saved API descriptions (`specs/e2b/`) and backs each sandbox with a real container.

use std::time::Duration;

use serde_json::json;
use tests::sim::e2b::{E2bSim, E2bSimOptions};
use tests::*;

const KEY: &str = "e2b_test-key-for-the-simulator";

async fn start_sim(tag: &str, tweak: impl FnOnce(&mut E2bSimOptions)) -> anyhow::Result<E2bSim> {
    let mut o = E2bSimOptions::debian(KEY, tag);
    tweak(&mut o);
    E2bSim::start(o).await
}

fn e2b_opts(sim: &E2bSim) -> ServerOpts {
    let mut o = ServerOpts::default()
        .arg("--backend")
        .arg("e2b")
        .arg("--e2b-metadata")
        .arg("project=demo");
    o.env.push(("E2B_API_KEY".into(), KEY.into()));
    o.env.push(("E2B_API_URL".into(), sim.api_url.clone()));
    o.env
        .push(("E2B_SANDBOX_URL".into(), sim.sandbox_url.clone()));
    o
}

fn assert_no_violations(sim: &E2bSim) {
    let v = sim.violations();
    assert!(
        v.is_empty(),
        "requests that do not match E2B's API descriptions: {v:#?}"
    );
}

/// Big slices went through envd's file API (issue 15): uploads, downloads and stats.
pub fn assert_envd_files(sim: &E2bSim) {
    let n = sim.request_counts();
    for (key, least) in [
        ("POST /files", 2),
        ("GET /files", 2),
        ("POST /filesystem.Filesystem/Stat", 3),
    ] {
        assert!(
            n.get(key).copied().unwrap_or(0) >= least,
            "{key} fewer than {least} times: {n:?}"
        );
    }
}

#[tokio::test]
async fn issue_7_e2b_exec_lifecycle_and_reattach() -> anyhow::Result<()> {
    let t = tag("e2b");
    let state = state_dir(&t);
    let sim = start_sim(&t, |_| {}).await?;
    let mut opts = e2b_opts(&sim);
    opts.lifecycle = true;
    let opts = opts.arg("--tools=files");
    let c = stdio_client(&t, &state, &opts).await?;
    cloud_basics(&c, "e2b", "e2b-keep", KEY).await?;
    cloud_files(&c, "e2b-keep").await?;
    cloud_big_files(&c, "e2b-keep").await?;
    assert_envd_files(&sim);
    // ...and the timed-out process is killed explicitly (envd may keep it after the deadline).
    let signals = sim.request_counts();
    assert!(
        signals
            .get("POST /process.Process/SendSignal")
            .copied()
            .unwrap_or(0)
            >= 1,
        "{signals:?}"
    );
    c.cancel().await?;
    let c = stdio_client(&t, &state, &opts).await?;
    cloud_reattach(&c, "e2b-keep").await?;
    c.cancel().await?;
    assert_no_violations(&sim);
    sim.stop().await;
    Ok(())
}

#[tokio::test]
async fn issue_14_jobs_on_e2b() -> anyhow::Result<()> {
    let t = tag("e2b-jobs");
    let state = state_dir(&t);
    let sim = start_sim(&t, |_| {}).await?;
    let mut opts = e2b_opts(&sim);
    opts.lifecycle = true;
    let opts = opts.arg("--tools=jobs");
    tests::jobs::cloud_jobs(&t, &state, &opts, "e2b-jobs").await?;
    assert_no_violations(&sim);
    sim.stop().await;
    wait_for_count(&t, 0, Duration::from_secs(30)).await
}

#[tokio::test]
async fn issue_7_e2b_retries_and_refusals() -> anyhow::Result<()> {
    let t = tag("e2b-faults");
    let state = state_dir(&t);
    let sim = start_sim(&t, |o| {
        o.rate_limit_every = Some(3);
        o.capacity_errors = 1;
        o.latency_ms = 5;
    })
    .await?;
    let c = stdio_client(&t, &state, &e2b_opts(&sim)).await?;
    for i in 0..4 {
        let r = exec(&c, json!({"command": format!("echo {i}")})).await?;
        assert_eq!(r["stdout"], format!("{i}\n"), "{r}");
    }
    c.cancel().await?;
    assert_no_violations(&sim);
    // No key: exit 2 at once; a wrong key: exit 1 with the reason.
    let out = command(
        &t,
        &state,
        &ServerOpts::default().arg("--backend").arg("e2b"),
    )
    .env_remove("E2B_API_KEY")
    .stdin(std::process::Stdio::null())
    .output();
    let out = tokio::time::timeout(Duration::from_secs(10), out).await??;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("E2B_API_KEY"));
    let mut opts = e2b_opts(&sim);
    opts.env.retain(|(k, _)| k != "E2B_API_KEY");
    opts.env.push(("E2B_API_KEY".into(), "e2b_wrong".into()));
    let out = command(&t, &state, &opts)
        .stdin(std::process::Stdio::null())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(20), out).await??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        !stderr.contains("e2b_wrong"),
        "the key must not be printed: {stderr}"
    );
    sim.stop().await;
    Ok(())
}

#[tokio::test]
async fn issue_38_e2b_holds_the_network_policy_in_its_own_rules() -> anyhow::Result<()> {
    let t = tag("e2b-net");
    let state = state_dir(&t);
    let sim = start_sim(&t, |_| {}).await?;
    let mut opts = e2b_opts(&sim).arg("--egress-allow=pypi.org,*.npmjs.org,10.0.0.0/8");
    opts.lifecycle = true;
    let c = stdio_client(&t, &state, &opts).await?;
    // The server's allow list: allowOut with everything else denied.
    let r = exec(&c, json!({"computer_id": "listed", "command": "true"})).await?;
    assert_eq!(r["exit_code"], 0, "{r}");
    let (internet, network) = sim.network_of("listed").expect("a sandbox");
    assert_eq!(internet, None);
    assert_eq!(
        network,
        Some(
            json!({"allowOut": ["pypi.org", "*.npmjs.org", "10.0.0.0/8"], "denyOut": ["0.0.0.0/0"]})
        )
    );
    // An agent narrows to none: no network at all (the simulator enforces that one).
    let allow = ["pypi.org", "*.npmjs.org", "10.0.0.0/8"];
    narrowed_to_none_and_listed(&c, &allow, || {
        assert_eq!(sim.network_of("offline").unwrap().0, Some(false));
    })
    .await?;
    // A port is beyond E2B's rules (and outside the server's policy): refused, nothing made.
    let e = call_error(
        &c,
        "computer_create",
        json!({"computer_id": "ported", "network": {"allow": ["pypi.org:8080"]}}),
    )
    .await?;
    assert!(e.contains("pypi.org:8080"), "{e}");
    assert!(sim.network_of("ported").is_none());
    c.cancel().await?;
    // The simulator's own check: a domain in denyOut is refused as E2B refuses it.
    let http = reqwest::Client::new();
    let res = http
        .post(format!("{}/sandboxes", sim.api_url))
        .header("X-API-Key", KEY)
        .json(&json!({"templateID": "base", "network": {"denyOut": ["example.com"]}}))
        .send()
        .await?;
    assert_eq!(res.status(), 400);
    assert!(
        res.text()
            .await?
            .contains("Domain names are not supported for deny rules")
    );
    assert_no_violations(&sim);
    sim.stop().await;
    remove_all(&t).await
}
