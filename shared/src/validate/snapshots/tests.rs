use serde_json::json;

use super::*;
use crate::snapshots::{DELETE_TOOL, new_id};

#[test]
fn from_is_a_snapshot_when_shaped_like_one_else_a_computer() {
    let snap = new_id(7);
    assert_eq!(fork_from(&snap), Ok(ForkFrom::Snapshot(snap.clone())));
    assert_eq!(
        fork_from("build-box"),
        Ok(ForkFrom::Computer("build-box".into()))
    );
    let e = fork_from("Not An Id").unwrap_err().to_string();
    assert!(e.contains("neither a snapshot id"), "{e}");
}

#[test]
fn every_tool_parses_and_refuses_what_it_should() {
    let snap = new_id(42);
    let ok = |tool: &str, args: serde_json::Value| parse_snapshot(tool, Some(&args)).unwrap();
    let bad = |tool: &str, args: serde_json::Value| {
        parse_snapshot(tool, Some(&args)).unwrap_err().to_string()
    };
    assert_eq!(
        ok(
            SNAPSHOT_TOOL,
            json!({"computer_id": "box", "label": "before upgrade"})
        ),
        SnapshotCall::Take {
            computer_id: "box".into(),
            label: "before upgrade".into()
        }
    );
    assert_eq!(
        ok(SNAPSHOT_TOOL, json!({"computer_id": "box"})),
        SnapshotCall::Take {
            computer_id: "box".into(),
            label: String::new()
        }
    );
    assert!(bad(SNAPSHOT_TOOL, json!({})).contains("needs `computer_id`"));
    assert!(
        bad(
            SNAPSHOT_TOOL,
            json!({"computer_id": "box", "label": "a\nb"})
        )
        .contains("label")
    );
    let long = "x".repeat(MAX_LABEL + 1);
    assert!(bad(SNAPSHOT_TOOL, json!({"computer_id": "box", "label": long})).contains("label"));
    assert_eq!(
        ok(
            FORK_TOOL,
            json!({"from": snap, "temporary": false, "computer_id": "b2"})
        ),
        SnapshotCall::Fork {
            from: ForkFrom::Snapshot(snap.clone()),
            computer_id: Some("b2".into()),
            temporary: Some(false)
        }
    );
    assert_eq!(
        ok(FORK_TOOL, json!({"from": "box"})),
        SnapshotCall::Fork {
            from: ForkFrom::Computer("box".into()),
            computer_id: None,
            temporary: None
        }
    );
    assert!(bad(FORK_TOOL, json!({})).contains("needs `from`"));
    assert!(bad(FORK_TOOL, json!({"from": "box", "label": "x"})).contains("unknown argument"));
    assert_eq!(
        ok(
            RESTORE_TOOL,
            json!({"computer_id": "box", "snapshot_id": snap})
        ),
        SnapshotCall::Restore {
            computer_id: "box".into(),
            snapshot_id: snap.clone()
        }
    );
    assert!(
        bad(
            RESTORE_TOOL,
            json!({"computer_id": "box", "snapshot_id": "box"})
        )
        .contains("not a snapshot id")
    );
    assert!(bad(RESTORE_TOOL, json!({"computer_id": "box"})).contains("needs `snapshot_id`"));
    assert_eq!(
        ok(LIST_TOOL, json!({"computer_id": "box"})),
        SnapshotCall::List {
            computer_id: "box".into()
        }
    );
    assert_eq!(
        ok(DELETE_TOOL, json!({"snapshot_id": snap})),
        SnapshotCall::Delete { snapshot_id: snap }
    );
    assert!(bad(DELETE_TOOL, json!({"snapshot_id": 3})).contains("must be a string"));
}
