//! Snapshots, fork and restore through the controller (SPEC §3.12), over the fake with
//! the Docker backend's capabilities.

use serde_json::json;
use shared::capabilities::{BackendKind, Capabilities, Capability};

use super::{EXEC, Fake, World};

fn docker_like() -> World {
    World::with(Fake::new(BackendKind::Docker.capabilities()))
}

fn write(id: &str, text: &str) -> (String, serde_json::Value) {
    (
        "computer_file_write".into(),
        json!({"computer_id": id, "path": "/f", "content": text}),
    )
}

#[tokio::test]
async fn issue_39_snapshot_fork_restore_and_delete_keep_files_and_owners_apart() {
    let mut w = docker_like();
    let (wt, one) = write("box", "one");
    let (_, two) = write("box", "two");
    w.run(&[
        (
            "a",
            "computer_create",
            json!({"computer_id": "box", "temporary": false}),
            json!({"ok": true}),
        ),
        ("a", &wt, one, json!({"size": 3})),
        (
            "a",
            "computer_snapshot",
            json!({"computer_id": "box", "label": "one"}),
            json!({"computer_id": "box", "snapshot_id": "$s1", "label": "one", "size_bytes": 3, "memory": false, "created_at": "*"}),
        ),
        ("a", &wt, two, json!({"size": 3})),
        // A fork from the snapshot has its files; one from the computer, today's.
        (
            "a",
            "computer_fork",
            json!({"from": "$s1", "computer_id": "f1"}),
            json!({"ok": true, "computer_id": "f1", "temporary": true, "sandbox_id": "*"}),
        ),
        (
            "a",
            "computer_file_read",
            json!({"computer_id": "f1", "path": "/f"}),
            json!({"content": "one"}),
        ),
        (
            "a",
            "computer_fork",
            json!({"from": "box", "computer_id": "f2", "temporary": false}),
            json!({"computer_id": "f2", "temporary": false}),
        ),
        (
            "a",
            "computer_file_read",
            json!({"computer_id": "f2", "path": "/f"}),
            json!({"content": "two"}),
        ),
        // A fork makes a new computer, never over one.
        (
            "a",
            "computer_fork",
            json!({"from": "$s1", "computer_id": "box"}),
            json!({"error": "~already exists; computer_fork makes a new computer"}),
        ),
        // Without an id: a fresh slug.
        (
            "a",
            "computer_fork",
            json!({"from": "box"}),
            json!({"computer_id": "*", "temporary": true}),
        ),
        // Restore: the files go back; only to the computer it was taken of.
        (
            "a",
            "computer_restore",
            json!({"computer_id": "box", "snapshot_id": "$s1"}),
            json!({"ok": true, "computer_id": "box", "temporary": false}),
        ),
        (
            "a",
            "computer_file_read",
            json!({"computer_id": "box", "path": "/f"}),
            json!({"content": "one"}),
        ),
        (
            "a",
            "computer_restore",
            json!({"computer_id": "f2", "snapshot_id": "$s1"}),
            json!({"error": "~was taken of computer \"box\", not \"f2\""}),
        ),
        // A permanent computer's snapshots are everyone's who reaches it...
        (
            "b",
            "computer_snapshots",
            json!({"computer_id": "box"}),
            json!({"count": 1}),
        ),
        // ...and no other team's.
        (
            "t1:x",
            "computer_snapshot_delete",
            json!({"snapshot_id": "$s1"}),
            json!({"error": "~does not exist (or is not yours)"}),
        ),
        (
            "t1:x",
            "computer_fork",
            json!({"from": "$s1"}),
            json!({"error": "~does not exist (or is not yours)"}),
        ),
        (
            "t1:x",
            "computer_snapshots",
            json!({"computer_id": "box"}),
            json!({"error": "~does not exist"}),
        ),
        // A snapshot outlives its computer.
        (
            "a",
            "computer_delete",
            json!({"computer_id": "box"}),
            json!({"deleted": true}),
        ),
        (
            "a",
            "computer_snapshots",
            json!({"computer_id": "box"}),
            json!({"count": 1}),
        ),
        (
            "a",
            "computer_fork",
            json!({"from": "$s1", "computer_id": "again", "temporary": false}),
            json!({"computer_id": "again"}),
        ),
        (
            "a",
            "computer_snapshot_delete",
            json!({"snapshot_id": "$s1"}),
            json!({"ok": true, "snapshot_id": "$s1", "deleted": true}),
        ),
        (
            "a",
            "computer_snapshot_delete",
            json!({"snapshot_id": "$s1"}),
            json!({"error": "~does not exist"}),
        ),
        (
            "a",
            "computer_snapshots",
            json!({"computer_id": "box"}),
            json!({"error": "~does not exist"}),
        ),
    ])
    .await;
}

#[tokio::test]
async fn issue_39_a_temporarys_snapshots_are_its_owners_and_go_with_it() {
    let mut w = docker_like();
    w.run(&[
        (
            "a",
            EXEC,
            json!({"command": "echo"}),
            json!({"computer_id": "$t"}),
        ),
        (
            "a",
            "computer_snapshot",
            json!({"computer_id": "$t"}),
            json!({"snapshot_id": "$s", "label": ""}),
        ),
        (
            "b",
            "computer_snapshots",
            json!({"computer_id": "$t"}),
            json!({"error": "~does not exist"}),
        ),
        (
            "b",
            "computer_fork",
            json!({"from": "$s"}),
            json!({"error": "~does not exist (or is not yours)"}),
        ),
        (
            "b",
            "computer_snapshot_delete",
            json!({"snapshot_id": "$s"}),
            json!({"error": "~does not exist (or is not yours)"}),
        ),
        (
            "a",
            "computer_snapshots",
            json!({"computer_id": "$t"}),
            json!({"count": 1}),
        ),
    ])
    .await;
    w.host("a").close().await;
    assert!(w.fake.keys().is_empty());
    let left = crate::place::Place::snapshot_list(&w.fake).await.unwrap();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn issue_39_the_snapshot_limit_holds_and_a_backend_without_snapshots_says_who_can() {
    let mut w = docker_like();
    w.run(&[(
        "a",
        "computer_create",
        json!({"computer_id": "box", "temporary": false}),
        json!({"ok": true}),
    )])
    .await;
    for _ in 0..shared::snapshots::DEFAULT_LIMIT {
        w.run(&[(
            "a",
            "computer_snapshot",
            json!({"computer_id": "box"}),
            json!({"snapshot_id": "*"}),
        )])
        .await;
    }
    w.run(&[
        (
            "a",
            "computer_snapshot",
            json!({"computer_id": "box"}),
            json!({"error": "~already keeps 20 snapshots, the most --snapshot-limit allows"}),
        ),
        (
            "a",
            "computer_snapshots",
            json!({"computer_id": "box"}),
            json!({"count": 20}),
        ),
    ])
    .await;
    let mut w = World::with(Fake::new(
        Capabilities::NONE
            .with(Capability::Jobs)
            .with(Capability::Files),
    ));
    w.run(&[
        (
            "a",
            "computer_snapshot",
            json!({"computer_id": "box"}),
            json!({"error": "~the go_busybox backend cannot take snapshots of a computer; backends that can: docker, wasm"}),
        ),
        (
            "a",
            "computer_fork",
            json!({"from": "box"}),
            json!({"error": "~cannot fork a computer; backends that can: docker, wasm"}),
        ),
    ])
    .await;
    assert!(w.fake.take_calls().is_empty());
}
