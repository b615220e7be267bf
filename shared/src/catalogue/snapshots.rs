//! The snapshot tools' definitions (group `snapshots`, SPEC §3.12).

use rmcp::model::Tool;
use serde_json::{Value, json};

use super::{annotations, computer_id_schema, lifecycle_output_schema, object, ui_meta};
use crate::snapshots::{DELETE_TOOL, FORK_TOOL, LIST_TOOL, MAX_LABEL, RESTORE_TOOL, SNAPSHOT_TOOL};

const SNAPSHOT_ID: &str = "^snap-[0-9a-f]{32}$";

/// The input schemas, the snapshot schema and the list's.
fn schemas() -> Value {
    json!({
        "snapshot_id": {"type": "string", "pattern": SNAPSHOT_ID, "description": "A snapshot, as computer_snapshot returned it."},
        "label": {"type": "string", "maxLength": MAX_LABEL, "description": "A note of your own to find it by (\"before upgrade\")."},
        "from": {"type": "string", "description": "A computer id (its filesystem as it is now), or a snapshot id (snap-…)."},
        "temporary": {"type": "boolean", "default": true, "description": "true: the new computer is removed when the session ends. false: kept until deleted, reattachable by id."},
        "snapshot": {
            "type": "object",
            "properties": {
                "computer_id": {"type": "string"},
                "snapshot_id": {"type": "string"},
                "label": {"type": "string"},
                "created_at": {"type": "string"},
                "size_bytes": {"type": "integer", "minimum": 0, "description": "What it holds beyond the base image."},
                "memory": {"type": "boolean", "description": "It keeps running processes and memory too (false: files only)."},
                "error": {"type": "string"},
            },
            "required": ["computer_id", "snapshot_id", "label", "created_at", "size_bytes", "memory"],
        },
    })
}

fn input(properties: Value, required: &[&str]) -> Value {
    let mut schema = Value::Object(serde_json::Map::new());
    schema["type"] = "object".into();
    schema["properties"] = properties;
    schema["required"] = required.iter().map(|r| Value::from(*r)).collect();
    schema["additionalProperties"] = false.into();
    schema
}

/// The five snapshot tools.
pub fn tools() -> Vec<Tool> {
    let s = schemas();
    let id = |what: &str| computer_id_schema(what);
    let mut snapshot_item = s["snapshot"].clone();
    if let Some(required) = snapshot_item.get_mut("required") {
        *required = Value::Array(Vec::new());
    }
    let list_output = json!({
        "type": "object",
        "properties": {
            "snapshots": {"type": "array", "items": s["snapshot"].clone()},
            "count": {"type": "integer", "minimum": 0},
            "error": {"type": "string"},
        },
    });
    let deleted_output = json!({
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "snapshot_id": {"type": "string"},
            "deleted": {"type": "boolean"},
            "error": {"type": "string"},
        },
    });
    let mut take_props = serde_json::Map::new();
    take_props.insert("computer_id".into(), id("Computer to snapshot."));
    take_props.insert("label".into(), s["label"].clone());
    let mut fork_props = serde_json::Map::new();
    fork_props.insert("from".into(), s["from"].clone());
    fork_props.insert(
        "computer_id".into(),
        id("Id of the new computer; omit for a fresh slug."),
    );
    fork_props.insert("temporary".into(), s["temporary"].clone());
    let mut restore_props = serde_json::Map::new();
    restore_props.insert("computer_id".into(), id("Computer to restore."));
    restore_props.insert("snapshot_id".into(), s["snapshot_id"].clone());
    let mut list_props = serde_json::Map::new();
    list_props.insert(
        "computer_id".into(),
        id("Computer whose snapshots to list."),
    );
    let mut delete_props = serde_json::Map::new();
    delete_props.insert("snapshot_id".into(), s["snapshot_id"].clone());
    // (name, title, description, input, output, read-only, destructive, idempotent)
    let defs = [
        (
            SNAPSHOT_TOOL,
            "Snapshot a computer",
            "Keep a computer's files as they are now (its processes are frozen for the copy, a moment) to go back to with computer_restore or to start new computers from with computer_fork. Snapshots outlive their computer until computer_snapshot_delete; a computer keeps a limited number.",
            input(Value::Object(take_props), &["computer_id"]),
            snapshot_item,
            false,
            false,
            false,
        ),
        (
            FORK_TOOL,
            "Fork a computer",
            "Start a new computer from another computer's files as they are now, or from a snapshot. The source is unchanged and keeps running. Processes do not carry over, only files. The new computer is temporary unless `temporary: false`.",
            input(Value::Object(fork_props), &["from"]),
            lifecycle_output_schema(false),
            false,
            false,
            false,
        ),
        (
            RESTORE_TOOL,
            "Restore a computer",
            "Return a computer's files to a snapshot of it. Everything written since is lost and its running commands and jobs end, as with a factory reset.",
            input(
                Value::Object(restore_props),
                &["computer_id", "snapshot_id"],
            ),
            lifecycle_output_schema(false),
            false,
            true,
            true,
        ),
        (
            LIST_TOOL,
            "List a computer's snapshots",
            "List the snapshots of a computer, newest first: id, label, time and size.",
            input(Value::Object(list_props), &["computer_id"]),
            list_output,
            true,
            false,
            true,
        ),
        (
            DELETE_TOOL,
            "Delete a snapshot",
            "Delete a snapshot. Computers forked from it are not affected.",
            input(Value::Object(delete_props), &["snapshot_id"]),
            deleted_output,
            false,
            true,
            true,
        ),
    ];
    defs.into_iter()
        .map(
            |(name, title, description, input, output, ro, destructive, idem)| {
                let mut tool = Tool::new(name, description, object(input));
                tool.title = Some(title.into());
                tool.output_schema = Some(object(output));
                tool.annotations = Some(annotations(title, ro, destructive, idem));
                tool.meta = Some(ui_meta(false));
                tool
            },
        )
        .collect()
}
