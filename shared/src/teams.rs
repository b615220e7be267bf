//! Team id spaces: where a team's computer lives on a shared executor or provider account.
//!
//! A team's `build-box` is named `g<10 hex of sha256(team)>-build-box` on backends and in
//! provider accounts (the *key*), so two teams may both have a `build-box` and neither can
//! name the other's. The caller always sees and passes its own id (1–63 characters, SPEC
//! §3.4); keys may be up to [`MAX_KEY_LEN`] characters, which Docker names, state
//! directories and Fly machine names accept. The computer's hostname stays the caller's id.

use sha2::{Digest, Sha256};

use crate::ids::MAX_ID_LEN;

/// Length of a team's key prefix (`g` + 10 hex digits + `-`).
pub const PREFIX_LEN: usize = 12;
/// Longest key: a team prefix and the longest computer id.
pub const MAX_KEY_LEN: usize = PREFIX_LEN + MAX_ID_LEN;

/// The team's key prefix on backends.
pub fn prefix(team: &str) -> String {
    let digest = Sha256::digest(team.as_bytes());
    let hex: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    format!("g{hex}-")
}

/// The backend key of `team`'s computer `id`; without a team (a local server), the id.
pub fn key(team: Option<&str>, id: &str) -> String {
    match team {
        Some(t) => format!("{}{id}", prefix(t)),
        None => id.to_owned(),
    }
}

/// The caller's id of a backend key, if the key belongs to `team` (`None`: a local server,
/// whose keys are ids).
pub fn id_of<'a>(team: Option<&str>, key: &'a str) -> Option<&'a str> {
    match team {
        Some(t) => key
            .strip_prefix(prefix(t).as_str())
            .filter(|id| !id.is_empty()),
        None => Some(key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::validate_computer_id;

    #[test]
    fn teams_have_their_own_id_space() {
        let a = key(Some("team-a"), "build-box");
        let b = key(Some("team-b"), "build-box");
        assert_ne!(a, b);
        assert_eq!(a.len(), PREFIX_LEN + "build-box".len());
        assert_eq!(id_of(Some("team-a"), &a), Some("build-box"));
        assert_eq!(id_of(Some("team-b"), &a), None);
        assert_eq!(id_of(Some("team-a"), &prefix("team-a")), None);
        assert_eq!(key(None, "box"), "box");
        assert_eq!(id_of(None, "box"), Some("box"));
    }

    #[test]
    fn the_longest_id_has_a_key() {
        let id = "x".repeat(MAX_ID_LEN);
        assert!(validate_computer_id(&id).is_ok());
        let k = key(Some("t"), &id);
        assert_eq!(k.len(), MAX_KEY_LEN);
        assert_eq!(id_of(Some("t"), &k), Some(id.as_str()));
    }
}
