//! Snapshots, fork and restore of WebAssembly computers (SPEC §3.12, issue 39), through
//! the real binary: the files of a snapshot come back exactly (a hash of a tree, a mode,
//! a symlink), a fork leaves its source untouched, snapshots survive a restart of the
//! server and outlive their computer, and nothing is left in the state directory once
//! they are deleted.

use std::path::Path;

use serde_json::{Value, json};
use tests::*;

/// A tree of files and its hash, printed last.
const WRITE_TREE: &str = "mkdir -p /data/sub && head -c 1048576 /dev/urandom > /data/blob && echo one > /data/f && echo deep > /data/sub/g && chmod 600 /data/sub/g && ln -sf f /data/link && find /data -type f | sort | xargs sha256sum | sha256sum";
const HASH_TREE: &str = "find /data -type f | sort | xargs sha256sum | sha256sum";
/// The regular files' bytes of [`WRITE_TREE`].
const TREE_BYTES: u64 = (1 << 20) + 4 + 5;

fn opts() -> ServerOpts {
    wasm_opts().arg("--tools=lifecycle,snapshots")
}

fn out(r: &Value) -> String {
    r["stdout"].as_str().unwrap_or_default().trim().to_owned()
}

/// What `command` prints on computer `id` (trimmed).
async fn run(c: &Client, id: &str, command: &str) -> anyhow::Result<String> {
    let r = exec(c, json!({"computer_id": id, "command": command})).await?;
    anyhow::ensure!(r["exit_code"] == 0, "{command}: {r}");
    Ok(out(&r))
}

/// The entries of the state directory's snapshot store.
fn stored(state: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(state.join("wasm/.snapshots"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test]
async fn issue_39_snapshots_fork_and_restore_on_wasm() -> anyhow::Result<()> {
    let t = tag("snap-wasm");
    let state = state_dir(&t);
    let c = stdio_client(&t, &state, &opts()).await?;
    call_ok(
        &c,
        "computer_create",
        json!({"computer_id": "src", "temporary": false}),
    )
    .await?;
    let h1 = run(&c, "src", WRITE_TREE).await?;
    assert_eq!(h1.len(), 67, "{h1}");
    let s = call_ok(
        &c,
        "computer_snapshot",
        json!({"computer_id": "src", "label": "before"}),
    )
    .await?;
    let s1 = s["snapshot_id"].as_str().unwrap().to_owned();
    assert!(s1.starts_with("snap-") && s1.len() == 37, "{s}");
    assert_eq!(
        (s["label"].as_str(), s["memory"].as_bool()),
        (Some("before"), Some(false))
    );
    let size = s["size_bytes"].as_u64().unwrap();
    assert!((TREE_BYTES..TREE_BYTES + 4096).contains(&size), "{s}");
    assert_eq!(stored(&state), std::slice::from_ref(&s1));

    // Changes after it; a fork of the computer has today's files, the source keeps them.
    run(&c, "src", "echo two > /data/f; rm /data/blob").await?;
    let f = call_ok(
        &c,
        "computer_fork",
        json!({"from": "src", "computer_id": "live"}),
    )
    .await?;
    assert_eq!(
        (f["computer_id"].as_str(), f["temporary"].as_bool()),
        (Some("live"), Some(true)),
        "{f}"
    );
    let probe = "cat /data/f; test -e /data/blob || echo no-blob; hostname";
    assert_eq!(run(&c, "live", probe).await?, "two\nno-blob\nlive");
    run(&c, "live", "echo mine > /data/f").await?;
    assert_eq!(run(&c, "src", probe).await?, "two\nno-blob\nsrc");

    // A fork of the snapshot: exactly its files.
    call_ok(
        &c,
        "computer_fork",
        json!({"from": s1, "computer_id": "back", "temporary": false}),
    )
    .await?;
    assert_eq!(run(&c, "back", HASH_TREE).await?, h1);
    assert_eq!(
        run(
            &c,
            "back",
            "ls -l /data/sub/g | cut -c1-10; readlink /data/link; cat /data/link"
        )
        .await?,
        "-rw-------\nf\none"
    );

    // Restore: the source's files return.
    let r = call_ok(
        &c,
        "computer_restore",
        json!({"computer_id": "src", "snapshot_id": s1}),
    )
    .await?;
    assert_eq!(
        (r["ok"].as_bool(), r["temporary"].as_bool()),
        (Some(true), Some(false)),
        "{r}"
    );
    assert_eq!(run(&c, "src", HASH_TREE).await?, h1);
    assert_eq!(
        run(&c, "src", "ls -l /data/sub/g | cut -c1-10").await?,
        "-rw-------"
    );
    c.cancel().await?;

    // A new server: the snapshot and the permanent computers; the temporary fork gone.
    let c = stdio_client(&t, &state, &opts()).await?;
    let list = call_ok(&c, "computer_snapshots", json!({"computer_id": "src"})).await?;
    assert_eq!(list["count"], 1, "{list}");
    assert_eq!(list["snapshots"][0]["snapshot_id"], s1.as_str());
    assert_eq!(list["snapshots"][0]["size_bytes"], size);
    let listed = call_ok(&c, "computer_list", json!({})).await?;
    let mut names: Vec<&str> = listed["computers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["computer_id"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["back", "src"], "{listed}");

    // It outlives its computer; deleted, its fork keeps its files and nothing is left.
    call_ok(&c, "computer_delete", json!({"computer_id": "src"})).await?;
    let list = call_ok(&c, "computer_snapshots", json!({"computer_id": "src"})).await?;
    assert_eq!(list["count"], 1, "{list}");
    call_ok(&c, "computer_snapshot_delete", json!({"snapshot_id": s1})).await?;
    let e = call_error(&c, "computer_fork", json!({"from": s1})).await?;
    assert!(e.contains("does not exist"), "{e}");
    assert_eq!(run(&c, "back", HASH_TREE).await?, h1);
    call_ok(&c, "computer_delete", json!({"computer_id": "back"})).await?;
    c.cancel().await?;
    assert_eq!(stored(&state), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&state);
    Ok(())
}
