//! Issue 6: the `Dockerfile` builds an image FROM scratch around the static musl binary
//! (no registry involved), and that image runs as an executor that drives the host's
//! Docker through the mounted socket.

use std::time::{Duration, Instant};

use serde_json::json;
use tests::*;

const SECRET: &str = "image-test-secret-0123456789abcdef0123456789";

/// The static binary (debug profile, supervisor embedded, Docker only: without the `wasm`
/// feature, so CI does not build wasmtime a second time for musl), built once.
fn static_binary() -> std::path::PathBuf {
    let supervisor = supervisor_binary();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let ok = std::process::Command::new(cargo)
        .args([
            "build",
            "-q",
            "-p",
            "executor",
            "--bin",
            "mcp-sandbox-computer-vm-for-ai",
            "--no-default-features",
        ])
        .args(["--target", "x86_64-unknown-linux-musl"])
        .env("MSC_EMBED_SUPERVISOR", &supervisor)
        .current_dir(workspace())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "building the static binary failed");
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
        .join("x86_64-unknown-linux-musl/debug/mcp-sandbox-computer-vm-for-ai")
}

fn run(cmd: &mut std::process::Command) -> anyhow::Result<String> {
    let out = cmd.output()?;
    anyhow::ensure!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
async fn issue_6_container_image_from_scratch() -> anyhow::Result<()> {
    let t = tag("image");
    let image = format!("msc-test/server:{t}");
    // A build context of the Dockerfile and the binary only.
    let ctx = state_dir(&t).join("context");
    std::fs::create_dir_all(ctx.join("bin"))?;
    std::fs::copy(workspace().join("Dockerfile"), ctx.join("Dockerfile"))?;
    std::fs::copy(static_binary(), ctx.join("bin/server"))?;
    run(std::process::Command::new("docker")
        .args([
            "build",
            "-q",
            "--build-arg",
            "BINARY=bin/server",
            "-t",
            &image,
        ])
        .arg(&ctx))?;
    let history = run(std::process::Command::new("docker").args([
        "image",
        "inspect",
        "--format",
        "{{len .RootFS.Layers}}",
        &image,
    ]))?;
    assert_eq!(history.trim(), "1", "FROM scratch: one layer, the binary");
    let help = run(std::process::Command::new("docker").args(["run", "--rm", &image, "--help"]))?;
    assert!(help.contains("executor"), "{help}");

    // A server on the host holds a temporary computer: the containerized executor, with the
    // host's network (hence its name) and engine, must not judge it orphaned (regression: it
    // used to, since host PIDs are invisible from its PID namespace).
    let host_tag = tag("imagehost");
    let host = stdio_client(&host_tag, &state_dir(&host_tag), &ServerOpts::default()).await?;
    exec(&host, json!({"command": "true"})).await?;
    assert_eq!(containers(&host_tag).await?.len(), 1);

    // As an executor on the host network, with the host's Docker socket.
    let port = free_port()?;
    let name = format!("msc-image-{t}");
    run(std::process::Command::new("docker")
        .args(["run", "-d", "--rm", "--name", &name, "--network", "host"])
        .args(["-v", "/var/run/docker.sock:/var/run/docker.sock"])
        .args(["-e", &format!("MSC_EXECUTOR_SECRET={SECRET}")])
        .arg(&image)
        .args(["executor", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--executor-name", EXECUTOR_NAME])
        .arg(format!("--docker-run-flag=--label=msc-test={t}")))?;
    let base = format!("http://127.0.0.1:{port}/v1");
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while http.get(format!("{base}/health")).send().await.is_err() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the executor image did not start"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        containers(&host_tag).await?.len(),
        1,
        "the containerized executor reaped the host server's live temporary"
    );
    let token = executor_token(SECRET, "team")?;
    let r: serde_json::Value = http
        .post(format!("{base}/computers/{t}-c/exec"))
        .bearer_auth(&token)
        .json(&json!({"command": "echo from-the-image; cat /proc/1/cmdline | tr '\\0' ' '"}))
        .send()
        .await?
        .json()
        .await?;
    let out = r["stdout"].as_str().unwrap_or_default().to_owned();
    assert!(
        out.starts_with("from-the-image\n/.msc/msc-supervisor init"),
        "{r}"
    );
    run(std::process::Command::new("docker").args(["stop", &name]))?;
    wait_for_count(&t, 0, Duration::from_secs(30)).await?;
    run(std::process::Command::new("docker").args(["rmi", "-f", &image]))?;
    host.cancel().await?;
    wait_for_count(&host_tag, 0, Duration::from_secs(15)).await
}
