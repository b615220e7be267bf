//! The snapshot tools' definitions (group `snapshots`, SPEC §3.12).

use rmcp::model::Tool;
use serde_json::json;

use super::{annotations, computer_id_schema, lifecycle_output_schema, object, ui_meta};
use crate::snapshots::{DELETE_TOOL, FORK_TOOL, LIST_TOOL, MAX_LABEL, RESTORE_TOOL, SNAPSHOT_TOOL};

const SNAPSHOT_ID: &str = "^snap-[0-9a-f]{32}$";

/// The five snapshot tools.
pub fn tools() -> Vec<Tool> {
    let sid = json!({"type": "string", "pattern": SNAPSHOT_ID, "description": "A snapshot, as computer_snapshot returned it."});
    let snapshot = json!({
        "computer_id": {"type": "string"},
        "snapshot_id": {"type": "string"},
        "label": {"type": "string"},
        "created_at": {"type": "string"},
        "size_bytes": {"type": "integer", "minimum": 0, "description": "What it holds beyond the base image."},
        "memory": {"type": "boolean", "description": "It keeps running processes and memory too (false: files only)."},
        "error": {"type": "string"},
    });
    // (name, title, description, input, output, read-only, destructive, idempotent)
    let defs = [
        (
            SNAPSHOT_TOOL,
            "Snapshot a computer",
            "Keep a computer's files as they are now (its processes are paused for the copy, a moment) to go back to with computer_restore or to start new computers from with computer_fork. Snapshots outlive their computer until computer_snapshot_delete; a computer keeps a limited number.",
            json!({
                "type": "object",
                "properties": {
                    "computer_id": computer_id_schema("Computer to snapshot."),
                    "label": {"type": "string", "maxLength": MAX_LABEL, "description": "A note of your own to find it by (\"before upgrade\")."},
                },
                "required": ["computer_id"],
                "additionalProperties": false,
            }),
            json!({"type": "object", "properties": snapshot.clone()}),
            false,
            false,
            false,
        ),
        (
            FORK_TOOL,
            "Fork a computer",
            "Start a new computer from another computer's files as they are now, or from a snapshot. The source is unchanged and keeps running. Only files carry over, not processes. The new computer is temporary unless `temporary: false`.",
            json!({
                "type": "object",
                "properties": {
                    "from": {"type": "string", "description": "A computer id (its files as they are now), or a snapshot id (snap-…)."},
                    "computer_id": computer_id_schema("Id of the new computer; omit for a fresh slug."),
                    "temporary": {"type": "boolean", "default": true, "description": "true: the new computer is removed when the session ends. false: kept until deleted, reattachable by id."},
                },
                "required": ["from"],
                "additionalProperties": false,
            }),
            lifecycle_output_schema(false),
            false,
            false,
            false,
        ),
        (
            RESTORE_TOOL,
            "Restore a computer",
            "Return a computer's files to a snapshot of it. Everything written since is lost and its running commands and jobs end, as with a factory reset.",
            json!({
                "type": "object",
                "properties": {
                    "computer_id": computer_id_schema("Computer to restore."),
                    "snapshot_id": sid.clone(),
                },
                "required": ["computer_id", "snapshot_id"],
                "additionalProperties": false,
            }),
            lifecycle_output_schema(false),
            false,
            true,
            true,
        ),
        (
            LIST_TOOL,
            "List a computer's snapshots",
            "List the snapshots of a computer, newest first: id, label, time and size.",
            json!({
                "type": "object",
                "properties": {"computer_id": computer_id_schema("Computer whose snapshots to list.")},
                "required": ["computer_id"],
                "additionalProperties": false,
            }),
            json!({
                "type": "object",
                "properties": {
                    "snapshots": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": snapshot,
                            "required": ["computer_id", "snapshot_id", "label", "created_at", "size_bytes", "memory"],
                        },
                    },
                    "count": {"type": "integer", "minimum": 0},
                    "error": {"type": "string"},
                },
            }),
            true,
            false,
            true,
        ),
        (
            DELETE_TOOL,
            "Delete a snapshot",
            "Delete a snapshot. Computers forked from it keep their files.",
            json!({
                "type": "object",
                "properties": {"snapshot_id": sid},
                "required": ["snapshot_id"],
                "additionalProperties": false,
            }),
            json!({
                "type": "object",
                "properties": {
                    "ok": {"type": "boolean"},
                    "snapshot_id": {"type": "string"},
                    "deleted": {"type": "boolean"},
                    "error": {"type": "string"},
                },
            }),
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
