//! Snapshots, fork and restore (SPEC §3.12, issue 39) on Docker and Podman: the files of
//! a snapshot come back exactly (a hash of a tree), a fork leaves its source running and
//! untouched (while a job writes in it), snapshots survive a restart of the server and
//! outlive their computer, and nothing of ours is left on the engine once they are gone.

use serde_json::{Value, json};
use tests::*;

/// A tree of files and its hash, printed last.
const WRITE_TREE: &str = "mkdir -p /data/sub && head -c 3145728 /dev/urandom > /data/blob && echo one > /data/f && echo deep > /data/sub/g && chmod 600 /data/sub/g && ln -sf f /data/link && find /data -type f | sort | xargs sha256sum | sha256sum";
const HASH_TREE: &str = "find /data -type f | sort | xargs sha256sum | sha256sum";

async fn engine(podman: bool) -> anyhow::Result<bollard::Docker> {
    Ok(match podman {
        true => {
            bollard::Docker::connect_with_unix(&podman_socket(), 30, bollard::API_DEFAULT_VERSION)?
                .negotiate_version()
                .await?
        }
        false => docker()?,
    })
}

/// Images of this test left on the engine.
async fn images_of(podman: bool, tag: &str) -> anyhow::Result<Vec<String>> {
    let list = images(&engine(podman).await?, tag).await?;
    Ok(list.into_iter().map(|i| i.id).collect())
}

async fn ok(c: &Client, tool: &str, args: Value) -> anyhow::Result<Value> {
    call_ok(c, tool, args).await
}

fn out(r: &Value) -> String {
    r["stdout"].as_str().unwrap_or_default().trim().to_owned()
}

async fn snapshots_on(podman: bool) -> anyhow::Result<()> {
    let t = tag(if podman { "snap-podman" } else { "snap" });
    let state = state_dir(&t);
    let mut opts = ServerOpts::default().arg("--tools=lifecycle,jobs,snapshots");
    if podman {
        opts = opts.podman();
    }
    let c = stdio_client(&t, &state, &opts).await?;
    ok(
        &c,
        "computer_create",
        json!({"computer_id": "src", "temporary": false}),
    )
    .await?;
    let r = exec(&c, json!({"computer_id": "src", "command": WRITE_TREE})).await?;
    let h1 = out(&r);
    assert_eq!(h1.len(), 67, "{r}");
    let s = ok(
        &c,
        "computer_snapshot",
        json!({"computer_id": "src", "label": "before"}),
    )
    .await?;
    let s1 = s["snapshot_id"].as_str().unwrap().to_owned();
    assert!(s1.starts_with("snap-") && s1.len() == 37, "{s}");
    assert_eq!(s["label"], "before");
    assert_eq!(s["memory"], false);
    let size = s["size_bytes"].as_u64().unwrap();
    assert!((3 << 20..64 << 20).contains(&size), "{s}");

    // Changes after it, and a job writing while a fork is taken.
    exec(
        &c,
        json!({"computer_id": "src", "command": "echo two > /data/f; rm /data/blob"}),
    )
    .await?;
    let job = exec(
        &c,
        json!({"computer_id": "src", "command": "while :; do echo x >> /data/log; sleep 0.01; done", "yield_ms": 200}),
    )
    .await?;
    assert_eq!(job["running"], true, "{job}");
    let f = ok(
        &c,
        "computer_fork",
        json!({"from": "src", "computer_id": "live"}),
    )
    .await?;
    assert_eq!(
        (f["computer_id"].as_str(), f["temporary"].as_bool()),
        (Some("live"), Some(true))
    );
    let r = exec(
        &c,
        json!({"computer_id": "live", "command": "cat /data/f; test -e /data/blob || echo no-blob; test -s /data/log && echo has-log"}),
    )
    .await?;
    assert_eq!(out(&r), "two\nno-blob\nhas-log", "{r}");
    // The source kept running, its job too, and grows its log on.
    let jobs = call_ok(
        &c,
        "terminal_job",
        json!({"computer_id": "src", "list": true}),
    )
    .await?;
    assert_eq!(jobs["jobs"][0]["running"], true, "{jobs}");
    let n = |r: &Value| out(r).parse::<u64>().unwrap_or(0);
    let before = n(&exec(
        &c,
        json!({"computer_id": "src", "command": "wc -l < /data/log"}),
    )
    .await?);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let after = n(&exec(
        &c,
        json!({"computer_id": "src", "command": "wc -l < /data/log"}),
    )
    .await?);
    assert!(after > before, "{before} {after}");
    // The fork's own processes are its own: the source's job is not running there.
    let r = exec(
        &c,
        json!({"computer_id": "live", "command": "a=$(wc -l < /data/log); sleep 0.3; b=$(wc -l < /data/log); test $a = $b && echo still"}),
    )
    .await?;
    assert_eq!(out(&r), "still", "{r}");

    // A fork of the snapshot: exactly its files.
    ok(
        &c,
        "computer_fork",
        json!({"from": s1, "computer_id": "back", "temporary": false}),
    )
    .await?;
    let r = exec(&c, json!({"computer_id": "back", "command": HASH_TREE})).await?;
    assert_eq!(out(&r), h1, "{r}");
    let r = exec(
        &c,
        json!({"computer_id": "back", "command": "stat -c %a /data/sub/g; readlink /data/link"}),
    )
    .await?;
    assert_eq!(out(&r), "600\nf");

    // Restore: the source's files return; its job ended.
    let r = ok(
        &c,
        "computer_restore",
        json!({"computer_id": "src", "snapshot_id": s1}),
    )
    .await?;
    assert_eq!(
        (r["ok"].as_bool(), r["temporary"].as_bool()),
        (Some(true), Some(false))
    );
    let r = exec(&c, json!({"computer_id": "src", "command": HASH_TREE})).await?;
    assert_eq!(out(&r), h1, "{r}");
    let r = exec(
        &c,
        json!({"computer_id": "src", "command": "sleep 0.3; test -e /data/log || echo no-log"}),
    )
    .await?;
    assert_eq!(out(&r), "no-log", "{r}");

    // A fork of a temporary computer into a permanent one survives the server.
    let t1 = exec(&c, json!({"command": "echo temp > /t"})).await?;
    let tid = t1["computer_id"].as_str().unwrap().to_owned();
    ok(
        &c,
        "computer_fork",
        json!({"from": tid, "computer_id": "kept", "temporary": false}),
    )
    .await?;
    c.cancel().await?;

    // A new server: the snapshot, the permanent forks; the temporary (and "live") gone.
    let c = stdio_client(&t, &state, &opts).await?;
    let list = ok(&c, "computer_snapshots", json!({"computer_id": "src"})).await?;
    assert_eq!(list["count"], 1, "{list}");
    assert_eq!(list["snapshots"][0]["snapshot_id"], s1.as_str());
    let r = exec(&c, json!({"computer_id": "kept", "command": "cat /t"})).await?;
    assert_eq!(out(&r), "temp");
    let listed = ok(&c, "computer_list", json!({})).await?;
    let mut names: Vec<String> = listed["computers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["computer_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["back", "kept", "src"], "{listed}");

    // A snapshot outlives its computer; deleted, nothing of ours is left once its last
    // fork is gone.
    ok(&c, "computer_delete", json!({"computer_id": "src"})).await?;
    let list = ok(&c, "computer_snapshots", json!({"computer_id": "src"})).await?;
    assert_eq!(list["count"], 1, "{list}");
    ok(&c, "computer_snapshot_delete", json!({"snapshot_id": s1})).await?;
    let e = call_error(&c, "computer_fork", json!({"from": s1})).await?;
    assert!(e.contains("does not exist"), "{e}");
    let r = exec(&c, json!({"computer_id": "back", "command": HASH_TREE})).await?;
    assert_eq!(
        out(&r),
        h1,
        "a deleted snapshot's fork keeps its files: {r}"
    );
    for id in ["back", "kept"] {
        ok(&c, "computer_delete", json!({"computer_id": id})).await?;
    }
    c.cancel().await?;
    assert_eq!(images_of(podman, &t).await?, Vec::<String>::new());
    remove_all(&t).await
}

#[tokio::test]
async fn issue_39_snapshots_fork_and_restore_on_docker() -> anyhow::Result<()> {
    snapshots_on(false).await
}

#[tokio::test]
async fn issue_39_snapshots_fork_and_restore_on_podman() -> anyhow::Result<()> {
    snapshots_on(true).await
}
