//! Modal computers (issue 7) through the local binary and through the gateway (via an
//! executor, since Workers cannot speak gRPC), against the local simulator of Modal's gRPC
//! API (`tests::sim::modal`), which checks every request against the saved protos and
//! backs each sandbox with a real container.

use std::time::Duration;

use serde_json::json;
use tests::sim::modal::{ModalSim, ModalSimOptions};
use tests::*;

const TOKEN_ID: &str = "ak-modal-test-token";
const TOKEN_SECRET: &str = "as-modal-test-secret-0123456789";

async fn start_sim(
    tag: &str,
    tweak: impl FnOnce(&mut ModalSimOptions),
) -> anyhow::Result<ModalSim> {
    let mut o = ModalSimOptions {
        token_id: TOKEN_ID.into(),
        token_secret: TOKEN_SECRET.into(),
        docker_label: ("msc-test".into(), tag.into()),
        image_map: vec![(
            "registry.example.com/debian:bookworm-slim".into(),
            "debian:bookworm-slim".into(),
        )],
        ..Default::default()
    };
    tweak(&mut o);
    ModalSim::start(o).await
}

fn modal_opts(sim: &ModalSim) -> ServerOpts {
    let mut o = ServerOpts::default()
        .arg("--backend")
        .arg("modal")
        .arg("--image")
        .arg("registry.example.com/debian:bookworm-slim")
        .arg("--modal-app-name")
        .arg("msc-test")
        .arg("--modal-cpu")
        .arg("0.5");
    o.env.push(("MODAL_SERVER_URL".into(), sim.url.clone()));
    o.env.push(("MODAL_TOKEN_ID".into(), TOKEN_ID.into()));
    o.env
        .push(("MODAL_TOKEN_SECRET".into(), TOKEN_SECRET.into()));
    o
}

fn assert_no_violations(sim: &ModalSim) {
    let v = sim.violations();
    assert!(v.is_empty(), "requests off Modal's protos: {v:#?}");
}

#[tokio::test]
async fn issue_7_modal_exec_lifecycle_and_reattach() -> anyhow::Result<()> {
    let t = tag("modal");
    let state = state_dir(&t);
    let sim = start_sim(&t, |_| {}).await?;
    let mut opts = modal_opts(&sim);
    opts.lifecycle = true;
    let opts = opts.arg("--tools=files");
    let c = stdio_client(&t, &state, &opts).await?;
    cloud_basics(&c, "modal", "modal-keep", TOKEN_SECRET).await?;
    cloud_files(&c, "modal-keep").await?;
    assert_eq!(sim.live_sandboxes(), 2);
    // A flood is cut at the output limit at once, and stopped.
    let started = std::time::Instant::now();
    let r = exec(&c, json!({"command": "yes"})).await?;
    assert_eq!(r["truncated"], true, "{r}");
    assert!(started.elapsed() < Duration::from_secs(20));
    c.cancel().await?;

    // The temporary went with its session; the permanent one is found again by a new
    // server.
    let c = stdio_client(&t, &state, &opts).await?;
    cloud_reattach(&c, "modal-keep").await?;
    assert_eq!(sim.live_sandboxes(), 0);
    c.cancel().await?;
    assert_no_violations(&sim);
    sim.stop().await;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

/// Starts a server that must give up at start-up with status 1; its stderr.
async fn fails_to_start(
    t: &str,
    state: &std::path::Path,
    opts: &ServerOpts,
) -> anyhow::Result<String> {
    let out = command(t, state, opts)
        .stdin(std::process::Stdio::null())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), out).await??;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    Ok(stderr)
}

#[tokio::test]
async fn issue_14_jobs_on_modal() -> anyhow::Result<()> {
    let t = tag("modal-jobs");
    let state = state_dir(&t);
    let sim = start_sim(&t, |_| {}).await?;
    let mut opts = modal_opts(&sim);
    opts.lifecycle = true;
    let opts = opts.arg("--tools=jobs");
    tests::jobs::cloud_jobs(&t, &state, &opts, "modal-jobs").await?;
    assert_no_violations(&sim);
    sim.stop().await;
    wait_for_count(&t, 0, Duration::from_secs(30)).await
}

#[tokio::test]
async fn issue_7_modal_retries_and_refusals() -> anyhow::Result<()> {
    let t = tag("modal-faults");
    let state = state_dir(&t);
    let sim = start_sim(&t, |o| {
        o.unavailable_every = Some(4);
        o.resource_exhausted_every = Some(7);
        o.lost_create_answers = 1;
        o.latency_ms = 5;
    })
    .await?;
    let c = stdio_client(&t, &state, &modal_opts(&sim)).await?;
    for i in 0..4 {
        let r = exec(&c, json!({"command": format!("echo {i}")})).await?;
        assert_eq!(r["stdout"], format!("{i}\n"), "{r}");
    }
    // A lost create answer did not make a second sandbox.
    assert_eq!(sim.live_sandboxes(), 1);
    c.cancel().await?;
    assert_no_violations(&sim);
    // No token: exit 2 at once, naming the login command; a wrong one: exit 1, unprinted.
    let out = command(
        &t,
        &state,
        &ServerOpts::default().arg("--backend").arg("modal"),
    )
    .env_remove("MODAL_TOKEN_ID")
    .env_remove("MODAL_TOKEN_SECRET")
    .env("HOME", &state)
    .stdin(std::process::Stdio::null())
    .output();
    let out = tokio::time::timeout(Duration::from_secs(10), out).await??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("modal token new"), "{stderr}");
    let mut opts = modal_opts(&sim);
    opts.env.retain(|(k, _)| k != "MODAL_TOKEN_SECRET");
    opts.env
        .push(("MODAL_TOKEN_SECRET".into(), "as-wrong-secret".into()));
    let stderr = fails_to_start(&t, &state, &opts).await?;
    assert!(stderr.contains("modal token new"), "{stderr}");
    assert!(!stderr.contains("as-wrong-secret"), "{stderr}");
    // An image Modal cannot build: exit 1 naming it.
    let mut opts = modal_opts(&sim);
    opts.args
        .retain(|a| !a.starts_with("registry.example.com/"));
    opts.args.retain(|a| a != "--image");
    opts.args.extend([
        "--image".into(),
        "registry.example.com/no-such-image:1".into(),
    ]);
    let stderr = fails_to_start(&t, &state, &opts).await?;
    assert!(stderr.contains("no-such-image"), "{stderr}");
    sim.stop().await;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

/// The gateway reaches Modal computers through an executor started with `--backend
/// modal` (`PLACEMENT=modal` picks the executor offering it).
#[tokio::test]
async fn issue_7_gateway_reaches_modal_through_an_executor() -> anyhow::Result<()> {
    const SECRET: &str = "exec-secret-for-the-modal-gateway-test-0123";
    const JWT: &str = "jwt-secret-for-the-modal-gateway-test-0123456";
    let t = tag("gwmodal");
    let sim = start_sim(&t, |_| {}).await?;
    let x = HttpServer::start_named_executor(
        &t,
        &state_dir(&t),
        &modal_opts(&sim),
        SECRET,
        "modal-runner",
        &[],
    )
    .await?;
    let claims = |team: &str| {
        json!({"iss": "https://issuer.test", "aud": "gw", "sub": "u1", "team": team,
               "iat": unix_now(), "exp": unix_now() + 600})
    };
    let vars = vec![
        (
            "EXECUTORS",
            json!([{"name": "modal-runner", "url": x.base, "backends": ["modal"]}]).to_string(),
        ),
        ("PLACEMENT", "modal".to_owned()),
        ("EXECUTOR_SECRET", SECRET.to_owned()),
        ("JWT_HS256_SECRET", JWT.to_owned()),
        ("JWT_ISSUER", "https://issuer.test".to_owned()),
        ("JWT_AUDIENCE", "gw".to_owned()),
    ];
    let gw = Gateway::start(&t, &state_dir(&t).join("wrangler"), &vars).await?;
    let a = gw.modern_client(&hs256(&claims("team-a"), JWT)?).await?;
    let b = gw.modern_client(&hs256(&claims("team-b"), JWT)?).await?;
    let r = exec(
        &a,
        json!({"computer_id": "box", "command": "echo a > /root/mark; cat /root/mark"}),
    )
    .await?;
    assert_eq!(r["stdout"], "a\n", "{r}");
    let r = exec(
        &b,
        json!({"computer_id": "box", "command": "cat /root/mark 2>&1; true"}),
    )
    .await?;
    assert!(
        r["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("No such file"),
        "team b's box is its own: {r}"
    );
    let list = call(&a, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap_or_default();
    assert_eq!(list["count"], 1, "{list}");
    assert_eq!(list["computers"][0]["backend"], "modal", "{list}");
    for c in [&a, &b] {
        let r = call(c, "computer_delete", json!({"computer_id": "box"})).await?;
        assert_eq!(r.is_error, Some(false), "{}", text(&r));
    }
    assert_eq!(sim.live_sandboxes(), 0);
    assert_no_violations(&sim);
    gw.stop().await?;
    x.terminate().await?;
    sim.stop().await;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

#[tokio::test]
async fn issue_38_modal_holds_the_network_policy_in_its_own_rules() -> anyhow::Result<()> {
    let t = tag("modal-net");
    let state = state_dir(&t);
    let sim = start_sim(&t, |_| {}).await?;
    let mut opts = modal_opts(&sim).arg("--egress-allow=pypi.org,*.npmjs.org,10.0.0.0/8");
    opts.lifecycle = true;
    let c = stdio_client(&t, &state, &opts).await?;
    // The server's allow list: ALLOWLIST with its names and networks.
    let r = exec(&c, json!({"computer_id": "listed", "command": "true"})).await?;
    assert_eq!(r["exit_code"], 0, "{r}");
    let want = Some((
        "ALLOWLIST".to_owned(),
        vec!["10.0.0.0/8".to_owned()],
        vec!["pypi.org".to_owned(), "*.npmjs.org".to_owned()],
    ));
    assert_eq!(sim.network_of("listed"), Some(want.clone()));
    // A restart (a snapshot and a new sandbox) keeps it.
    call_ok(&c, "computer_restart", json!({"computer_id": "listed"})).await?;
    assert_eq!(sim.network_of("listed"), Some(want));
    // An agent narrows to none: BLOCKED (the simulator enforces that one).
    let allow = ["pypi.org", "*.npmjs.org", "10.0.0.0/8"];
    narrowed_to_none_and_listed(&c, &allow, || {
        let blocked = Some(Some(("BLOCKED".to_owned(), vec![], vec![])));
        assert_eq!(sim.network_of("offline"), blocked);
    })
    .await?;
    c.cancel().await?;
    assert_no_violations(&sim);
    sim.stop().await;
    remove_all(&t).await
}
