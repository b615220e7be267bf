//! The snapshot tools' arguments (SPEC §3.12), validated into `crate::snapshots`
//! calls.

use serde_json::Value;

use super::{Args, ValidationError};
use crate::snapshots::{
    FORK_TOOL, ForkFrom, LIST_TOOL, MAX_LABEL, RESTORE_TOOL, SNAPSHOT_TOOL, SnapshotCall, is_id,
};

/// `from` as a fork takes it: a snapshot id, else a computer id.
pub fn fork_from(raw: &str) -> Result<ForkFrom, ValidationError> {
    if is_id(raw) {
        return Ok(ForkFrom::Snapshot(raw.to_owned()));
    }
    crate::ids::validate_computer_id(raw).map_err(|e| {
        ValidationError::Invalid(format!(
            "`from` is neither a snapshot id (snap-…, see computer_snapshots) nor a computer id: {e}"
        ))
    })?;
    Ok(ForkFrom::Computer(raw.to_owned()))
}

fn snapshot_id(args: &Args, tool: &str) -> Result<String, ValidationError> {
    let id = args.string("snapshot_id")?.ok_or_else(|| {
        ValidationError::Invalid(format!(
            "{tool} needs `snapshot_id` (snap-…; see computer_snapshots)"
        ))
    })?;
    checked_id(id)
}

/// `id` if it is a snapshot id, else why not.
pub fn checked_id(id: String) -> Result<String, ValidationError> {
    match is_id(&id) {
        true => Ok(id),
        false => Err(ValidationError::Invalid(format!(
            "`snapshot_id` {id:?} is not a snapshot id: they are snap- and 32 hex digits, as computer_snapshot returned them"
        ))),
    }
}

/// `label` if a snapshot may carry it, else why not.
pub fn checked_label(label: String) -> Result<String, ValidationError> {
    if label.len() > MAX_LABEL || label.chars().any(char::is_control) {
        return Err(ValidationError::Invalid(format!(
            "`label` is at most {MAX_LABEL} bytes of text without control characters"
        )));
    }
    Ok(label)
}

/// Validates the arguments of snapshot tool `tool` (one of `crate::snapshots::TOOLS`).
pub fn parse_snapshot(tool: &str, raw: Option<&Value>) -> Result<SnapshotCall, ValidationError> {
    match tool {
        SNAPSHOT_TOOL => {
            let args = Args::new(raw, &["computer_id", "label"], tool)?;
            let label = checked_label(args.string("label")?.unwrap_or_default())?;
            Ok(SnapshotCall::Take {
                computer_id: args.required_computer_id(tool)?,
                label,
            })
        }
        FORK_TOOL => {
            let args = Args::new(raw, &["from", "computer_id", "temporary"], tool)?;
            let from = args.string("from")?.ok_or_else(|| {
                ValidationError::Invalid(
                    "computer_fork needs `from`: a computer id, or a snapshot id from computer_snapshots".into(),
                )
            })?;
            Ok(SnapshotCall::Fork {
                from: fork_from(&from)?,
                computer_id: args.computer_id()?,
                temporary: args.boolean("temporary")?,
            })
        }
        RESTORE_TOOL => {
            let args = Args::new(raw, &["computer_id", "snapshot_id"], tool)?;
            Ok(SnapshotCall::Restore {
                computer_id: args.required_computer_id(tool)?,
                snapshot_id: snapshot_id(&args, tool)?,
            })
        }
        LIST_TOOL => {
            let args = Args::new(raw, &["computer_id"], tool)?;
            Ok(SnapshotCall::List {
                computer_id: args.required_computer_id(tool)?,
            })
        }
        _ => {
            let args = Args::new(raw, &["snapshot_id"], tool)?;
            Ok(SnapshotCall::Delete {
                snapshot_id: snapshot_id(&args, tool)?,
            })
        }
    }
}

#[cfg(test)]
mod tests;
