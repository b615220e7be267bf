//! Start-up refusals (exit status 2 with an actionable message) and renaming flags.

use serde_json::json;
use tests::*;

async fn refused(args: &[&str], env: &[(&str, &str)], needle: &str) -> anyhow::Result<()> {
    let t = tag("refuse");
    let opts = ServerOpts {
        args: args.iter().map(|s| s.to_string()).collect(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        lifecycle: false,
    };
    let out = command(&t, &state_dir(&t), &opts)
        .stdin(std::process::Stdio::null())
        .output()
        .await?;
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(needle), "{args:?}: {err}");
    Ok(())
}

#[tokio::test]
async fn issue_2_start_up_refusals() -> anyhow::Result<()> {
    refused(
        &[
            "--tool-instruction-override",
            "a",
            "--extended-tool-instruction",
            "b",
        ],
        &[],
        "cannot be used together",
    )
    .await?;
    refused(&["--image", "alpine:3"], &[], "--tool-instruction-override").await?;
    refused(
        &["--transport", "http", "--host", "0.0.0.0"],
        &[],
        "--allow-unauthenticated-http",
    )
    .await?;
    // No Modal token anywhere (flags, env, ~/.modal.toml): the login command is named.
    refused(
        &["--backend", "modal"],
        &[("HOME", "/nonexistent"), ("MODAL_TOKEN_ID", "")],
        "modal token new",
    )
    .await?;
    refused(
        &[
            "--backend",
            "modal",
            "--modal-token-id",
            "ak-x",
            "--modal-token-secret",
            "as-x",
            "--modal-cpu",
            "0",
        ],
        &[],
        "--modal-cpu",
    )
    .await?;
    refused(&["--backend", "wasm"], &[], "--wasm-path").await?;
    refused(
        &["--wasm-path", "/x.wasm"],
        &[],
        "only used with --backend wasm",
    )
    .await?;
    refused(
        &["--backend", "go_busybox", "--wasm-max-memory", "0"],
        &[],
        "between 1 and 4096",
    )
    .await?;
    refused(&["--docker-run-flag=--rm"], &[], "not supported").await?;
    refused(&["--docker-host", "ssh://me@example"], &[], "ssh -NL").await?;
    refused(&["--supervisor", "/nonexistent/msc"], &[], "`none`").await?;
    refused(&[], &[("MSC_SUPERVISOR", "/nonexistent/msc")], "not a file").await?;
    refused(
        &["--transport", "http"],
        &[("KILNTAINERS_AUTH_TOKEN", " ")],
        "must not be empty",
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn issue_2_tool_name_and_description_flags() -> anyhow::Result<()> {
    let t = tag("toolname");
    let opts = ServerOpts::default()
        .arg("--tool-name")
        .arg("sandbox_exec")
        .arg("--extended-tool-instruction")
        .arg("Project lives in /srv.");
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let tools = c.list_all_tools().await?;
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "sandbox_exec");
    let d = tools[0].description.clone().unwrap_or_default();
    assert!(
        d.contains("Debian") && d.ends_with("Project lives in /srv."),
        "{d}"
    );
    let r = call(&c, "sandbox_exec", json!({"command": "echo renamed"})).await?;
    assert_eq!(r.structured_content.unwrap()["stdout"], "renamed\n");
    assert!(
        call(&c, "terminal_execute", json!({"command": "true"}))
            .await
            .is_err()
    );
    c.cancel().await?;
    let t = tag("override");
    let opts = ServerOpts::default()
        .arg("--image")
        .arg("debian:bookworm-slim")
        .arg("--tool-instruction-override")
        .arg("Only this.");
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    assert_eq!(
        c.list_all_tools().await?[0].description.as_deref(),
        Some("Only this.")
    );
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_2_modern_stdio_client() -> anyhow::Result<()> {
    let t = tag("stdiomodern");
    let c = stdio_client_modern(&t, &state_dir(&t), &ServerOpts::default()).await?;
    let r = exec(&c, json!({"command": "echo modern"})).await?;
    assert_eq!(r["stdout"], "modern\n");
    c.cancel().await?;
    Ok(())
}
