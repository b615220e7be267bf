//! `--engine podman`: the same Engine API calls against Podman's Docker-compatible socket.
//!
//! Needs `podman system service` on `/run/podman/podman.sock` (or `MSC_PODMAN_SOCKET`) and
//! the image `debian:bookworm-slim` imported into Podman; `.ci/run` prepares both.

use std::time::Duration;

use serde_json::json;
use tests::*;

#[tokio::test]
async fn issue_2_podman_engine() -> anyhow::Result<()> {
    let t = tag("podman");
    let opts = ServerOpts::lifecycle().podman();
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let r = exec(&c, json!({"command": "echo on-podman; exit 3"})).await?;
    assert_eq!(r["stdout"], "on-podman\n");
    assert_eq!(r["exit_code"], 3);
    let id = r["computer_id"].as_str().unwrap().to_owned();
    // The supervisor runs on Podman too (its volume is filled through Podman's archive API).
    let r = exec(&c, json!({"command": "tr '\\0' ' ' < /proc/1/cmdline"})).await?;
    assert!(
        r["stdout"]
            .as_str()
            .unwrap()
            .starts_with("/.msc/msc-supervisor init"),
        "{r}"
    );
    let r = exec(
        &c,
        json!({"command": "echo before; sleep 1000 & sleep 1000", "timeout": 1}),
    )
    .await?;
    assert_eq!(r["exit_code"], 124);
    assert_eq!(r["stdout"], "before\n");
    let left = exec(&c, json!({"command": COUNT_SLEEP_1000})).await?;
    assert_eq!(left["stdout"], "0\n");
    let list = call(&c, "computer_list", json!({}))
        .await?
        .structured_content
        .unwrap();
    assert!(ids(&list).contains(&id), "{list}");
    let r = call(&c, "computer_restart", json!({"computer_id": id})).await?;
    assert_eq!(r.is_error, Some(false), "{:?}", r.content);
    let r = exec(&c, json!({"command": "echo back"})).await?;
    assert_eq!(r["stdout"], "back\n");
    c.cancel().await?;
    // Cleanup happened on Podman: nothing of this test is left there.
    let podman =
        bollard::Docker::connect_with_unix(&podman_socket(), 30, bollard::API_DEFAULT_VERSION)?
            .negotiate_version()
            .await?;
    let mut filters = std::collections::HashMap::new();
    filters.insert("label".to_owned(), vec![format!("msc-test={t}")]);
    let opts = bollard::query_parameters::ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    let mut left = usize::MAX;
    for _ in 0..100 {
        left = podman.list_containers(Some(opts.clone())).await?.len();
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 0, "temporaries left on Podman");
    Ok(())
}
