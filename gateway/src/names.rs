//! Teams have their own id space. On an executor a team's computer `build-box` is
//! `g<10 hex of sha256(team)>-build-box`, so two teams may both have a `build-box` and
//! neither can name the other's. Gateway ids are therefore at most [`MAX_ID`] characters.

use sha2::{Digest, Sha256};

/// Longest computer id at the gateway (63 minus the 12-character team prefix).
pub const MAX_ID: usize = 51;

/// The team's prefix on executors (`g` + 10 hex digits + `-`).
pub fn prefix(team: &str) -> String {
    let digest = Sha256::digest(team.as_bytes());
    let hex: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    format!("g{hex}-")
}

/// The executor's id for a team's computer.
pub fn to_executor(team: &str, id: &str) -> String {
    format!("{}{id}", prefix(team))
}

/// The team's id for an executor id, if it belongs to the team.
pub fn from_executor(team: &str, executor_id: &str) -> Option<String> {
    executor_id.strip_prefix(&prefix(team)).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn teams_have_their_own_id_space() {
        let a = to_executor("team-a", "build-box");
        let b = to_executor("team-b", "build-box");
        assert_ne!(a, b);
        assert_eq!(a.len(), 12 + "build-box".len());
        assert_eq!(from_executor("team-a", &a).as_deref(), Some("build-box"));
        assert_eq!(from_executor("team-b", &a), None);
        assert!(shared::ids::validate_computer_id(&to_executor("t", &"x".repeat(MAX_ID))).is_ok());
    }
}
