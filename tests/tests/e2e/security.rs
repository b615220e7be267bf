//! No server secret reaches a computer; isolation flags work.

use std::time::Duration;

use serde_json::json;
use tests::*;

#[tokio::test]
async fn issue_2_server_secrets_never_enter_a_computer() -> anyhow::Result<()> {
    let t = tag("secrets");
    let mut opts = ServerOpts::default();
    opts.env
        .push(("KILNTAINERS_AUTH_TOKEN".into(), "tok-9f8e7d6c5b4a".into()));
    opts.env
        .push(("FLY_API_TOKEN".into(), "fly-1a2b3c4d5e6f".into()));
    opts.env
        .push(("E2B_API_KEY".into(), "e2b-0f1e2d3c4b5a".into()));
    let s = HttpServer::start(&t, &state_dir(&t), &opts).await?;
    let c = s.legacy_client(Some("tok-9f8e7d6c5b4a")).await?;
    let r = exec(&c, json!({"command": "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '; grep -rs -e tok-9f8e -e fly-1a2b -e e2b-0f1e /etc /root /tmp /run 2>/dev/null"})).await?;
    let all = format!("{}{}", r["stdout"], r["stderr"]);
    for secret in ["tok-9f8e7d6c5b4a", "fly-1a2b3c4d5e6f", "e2b-0f1e2d3c4b5a"] {
        assert!(
            !all.contains(secret),
            "{secret} visible inside the computer"
        );
    }
    assert!(all.contains("PATH="), "env ran: {all}");
    c.cancel().await?;
    s.terminate().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}

#[tokio::test]
async fn issue_2_no_network_and_default_limits() -> anyhow::Result<()> {
    let t = tag("isolation");
    let c = stdio_client(
        &t,
        &state_dir(&t),
        &ServerOpts::default()
            .arg("--no-network")
            .arg("--memory=256m")
            .arg("--cpu=0.5"),
    )
    .await?;
    let r = exec(&c, json!({"command": "ls /sys/class/net"})).await?;
    assert_eq!(r["stdout"], "lo\n");
    let id = r["computer_id"].as_str().unwrap().to_owned();
    let info = docker()?
        .inspect_container(&format!("kilntainer-{id}"), None)
        .await?;
    let hc = info.host_config.unwrap();
    assert_eq!(hc.pids_limit, Some(4096));
    assert_eq!(hc.memory, Some(256 * 1024 * 1024));
    assert_eq!(hc.nano_cpus, Some(500_000_000));
    let labels = info.config.unwrap().labels.unwrap();
    // PID 1 reaps zombies: the supervisor when placed (the harness places it), else docker-init.
    assert_eq!(labels["mcp-sandbox.supervisor"], "1");
    assert_eq!(hc.init, Some(false));
    assert_eq!(labels["kilntainers"], "true");
    assert_eq!(labels["kilntainers.computer-id"], id);
    assert_eq!(labels["kilntainers.temporary"], "true");
    assert_eq!(labels["kilntainers.image"], "debian:bookworm-slim");
    c.cancel().await?;
    Ok(())
}

/// Forwards a loopback TCP port to the local Docker socket, so `--docker-host tcp://…` is
/// tested against the real engine without reconfiguring the daemon.
async fn tcp_to_docker_socket() -> anyhow::Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut unix) = tokio::net::UnixStream::connect("/var/run/docker.sock").await
                {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
            });
        }
    });
    Ok(port)
}

#[tokio::test]
async fn issue_2_docker_host_over_tcp() -> anyhow::Result<()> {
    let t = tag("tcphost");
    let port = tcp_to_docker_socket().await?;
    let opts = ServerOpts::default()
        .arg("--docker-host")
        .arg(&format!("tcp://127.0.0.1:{port}"));
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let r = exec(&c, json!({"command": "echo via-tcp"})).await?;
    assert_eq!(r["stdout"], "via-tcp\n");
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await?;
    // An engine that is not there is a clear start-up error when Docker was asked for.
    let out = command(
        &t,
        &state_dir(&t),
        &ServerOpts::default()
            .arg("--backend")
            .arg("docker")
            .arg("--docker-host")
            .arg("unix:///nonexistent.sock"),
    )
    .stdin(std::process::Stdio::null())
    .output()
    .await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the container engine"));
    Ok(())
}
