use serde_json::json;

use super::*;

#[test]
fn ids_are_snap_and_32_hex_digits() {
    let id = new_id(u128::MAX - 5);
    assert_eq!(id.len(), 37);
    assert!(is_id(&id), "{id}");
    assert!(is_id(&new_id(0)));
    for not in [
        "snap-",
        "snap-0123",
        "snap-0123456789abcdef0123456789ABCDEF",
        "snap-0123456789abcdef0123456789abcdeg",
        "snap-0123456789abcdef0123456789abcdef0",
        "box",
        "snap0123456789abcdef0123456789abcdef",
    ] {
        assert!(!is_id(not), "{not}");
    }
}

#[test]
fn from_is_a_snapshot_when_shaped_like_one_else_a_computer() {
    let snap = new_id(7);
    assert_eq!(ForkFrom::parse(&snap), Ok(ForkFrom::Snapshot(snap.clone())));
    assert_eq!(
        ForkFrom::parse("build-box"),
        Ok(ForkFrom::Computer("build-box".into()))
    );
    let e = ForkFrom::parse("Not An Id").unwrap_err().to_string();
    assert!(e.contains("neither a snapshot id"), "{e}");
}

#[test]
fn every_tool_parses_and_refuses_what_it_should() {
    let snap = new_id(42);
    let ok = |tool: &str, args: serde_json::Value| parse(tool, Some(&args)).unwrap();
    let bad =
        |tool: &str, args: serde_json::Value| parse(tool, Some(&args)).unwrap_err().to_string();
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

#[test]
fn a_list_is_newest_first_with_its_count() {
    let at = |t: &str, id: u128| Snapshot {
        computer_id: "box".into(),
        snapshot_id: new_id(id),
        label: String::new(),
        created_at: t.into(),
        size_bytes: 1,
        memory: false,
    };
    let list = SnapshotList::new(vec![
        at("2026-12-07T00:00:01Z", 1),
        at("2026-12-07T00:00:03Z", 2),
        at("2026-12-07T00:00:02Z", 3),
    ]);
    assert_eq!(list.count, 3);
    let order: Vec<&str> = list
        .snapshots
        .iter()
        .map(|s| s.created_at.as_str())
        .collect();
    assert_eq!(
        order,
        [
            "2026-12-07T00:00:03Z",
            "2026-12-07T00:00:02Z",
            "2026-12-07T00:00:01Z"
        ]
    );
    assert_eq!(
        serde_json::to_value(SnapshotDeleted::new("snap-x")).unwrap(),
        json!({"ok": true, "snapshot_id": "snap-x", "deleted": true})
    );
}
