//! Snapshots, fork and restore (SPEC §3.12, group `snapshots`): the tool calls, snapshot
//! ids, and the answers, each built here only.
//!
//! Their arguments are validated in `crate::validate::snapshots`.
//!
//! A snapshot is a computer's writable filesystem at one instant, kept by the backend
//! (Docker/Podman: an image committed with the computer's processes frozen). Its id is
//! `snap-` and 32 hex digits of randomness: unguessable, and never a computer id a caller
//! would pick by chance (a `from` of that shape is read as a snapshot).

use serde::{Deserialize, Serialize};

/// How every snapshot id starts.
pub const PREFIX: &str = "snap-";
/// Snapshots kept per computer unless `--snapshot-limit` says otherwise.
pub const DEFAULT_LIMIT: usize = 20;
/// Longest label, in bytes.
pub const MAX_LABEL: usize = 200;

/// The tool names, in listing order.
pub const SNAPSHOT_TOOL: &str = "computer_snapshot";
pub const FORK_TOOL: &str = "computer_fork";
pub const RESTORE_TOOL: &str = "computer_restore";
pub const LIST_TOOL: &str = "computer_snapshots";
pub const DELETE_TOOL: &str = "computer_snapshot_delete";
pub const TOOLS: &[&str] = &[
    SNAPSHOT_TOOL,
    FORK_TOOL,
    RESTORE_TOOL,
    LIST_TOOL,
    DELETE_TOOL,
];

/// A new snapshot id from 128 bits of the caller's randomness.
pub fn new_id(random: u128) -> String {
    format!("{PREFIX}{random:032x}")
}

/// Is `s` a snapshot id (`snap-` and 32 lowercase hex digits)?
pub fn is_id(s: &str) -> bool {
    s.strip_prefix(PREFIX).is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// What a fork starts from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForkFrom {
    /// A computer's filesystem as it is now (the caller's id).
    Computer(String),
    /// A snapshot.
    Snapshot(String),
}

impl ForkFrom {
    /// Its wire form (the id itself).
    pub fn as_str(&self) -> &str {
        match self {
            ForkFrom::Computer(id) | ForkFrom::Snapshot(id) => id,
        }
    }
}

/// A snapshot tool call, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotCall {
    /// `computer_snapshot`.
    Take { computer_id: String, label: String },
    /// `computer_fork`: a new computer (`None`: a fresh slug), temporary unless told.
    Fork {
        from: ForkFrom,
        computer_id: Option<String>,
        temporary: Option<bool>,
    },
    /// `computer_restore`.
    Restore {
        computer_id: String,
        snapshot_id: String,
    },
    /// `computer_snapshots`.
    List { computer_id: String },
    /// `computer_snapshot_delete`.
    Delete { snapshot_id: String },
}

impl SnapshotCall {
    /// The computer it names: the snapshot's, or a fork's new one (`None`: a snapshot
    /// delete, or a fork that leaves the new id to the controller).
    pub fn computer_id(&self) -> Option<&str> {
        match self {
            SnapshotCall::Take { computer_id, .. }
            | SnapshotCall::Restore { computer_id, .. }
            | SnapshotCall::List { computer_id } => Some(computer_id),
            SnapshotCall::Fork { computer_id, .. } => computer_id.as_deref(),
            SnapshotCall::Delete { .. } => None,
        }
    }

    /// The same call on computer `id` (a fork: the new computer); a delete names none.
    pub fn on(self, id: &str) -> SnapshotCall {
        let id = id.to_owned();
        match self {
            SnapshotCall::Take { label, .. } => SnapshotCall::Take {
                computer_id: id,
                label,
            },
            SnapshotCall::Restore { snapshot_id, .. } => SnapshotCall::Restore {
                computer_id: id,
                snapshot_id,
            },
            SnapshotCall::List { .. } => SnapshotCall::List { computer_id: id },
            SnapshotCall::Fork {
                from, temporary, ..
            } => SnapshotCall::Fork {
                from,
                computer_id: Some(id),
                temporary,
            },
            delete @ SnapshotCall::Delete { .. } => delete,
        }
    }
}

/// One snapshot: `computer_snapshot`'s answer and an item of `computer_snapshots`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The computer it was taken of (the caller's id).
    pub computer_id: String,
    pub snapshot_id: String,
    pub label: String,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// What it holds beyond the base image, in bytes.
    pub size_bytes: u64,
    /// It keeps running processes and memory too.
    pub memory: bool,
}

/// `computer_snapshots`: `{"snapshots": [...], "count": n}`, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotList {
    pub snapshots: Vec<Snapshot>,
    pub count: usize,
}

impl SnapshotList {
    /// The list of `snapshots`, newest first.
    pub fn new(mut snapshots: Vec<Snapshot>) -> Self {
        snapshots
            .sort_by(|a, b| (&b.created_at, &b.snapshot_id).cmp(&(&a.created_at, &a.snapshot_id)));
        let count = snapshots.len();
        Self { snapshots, count }
    }
}

/// `computer_snapshot_delete`: `{"ok": true, "snapshot_id": …, "deleted": true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotDeleted {
    pub ok: bool,
    pub snapshot_id: String,
    pub deleted: bool,
}

impl SnapshotDeleted {
    pub fn new(snapshot_id: &str) -> Self {
        Self {
            ok: true,
            snapshot_id: snapshot_id.to_owned(),
            deleted: true,
        }
    }
}

#[cfg(test)]
mod tests;
