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
