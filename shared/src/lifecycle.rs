//! Provider-neutral lifecycle policy: who may reach a computer, temporary vs permanent, TTL.
//!
//! Owns the rules of SPEC §3.4 and §3.6 as pure decisions over plain records, so the local
//! server, the executor and the Worker decide identically. Clocks come in as parameters.

/// What a computer is doing, as `computer_list` shows it (`state`). Each backend maps its
/// own words once (Docker's `exited`, Fly's `started`, E2B's `paused`); a word no mapping
/// knows is kept as it is, so nothing the provider says is lost.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ComputerState {
    /// Commands run now.
    Running,
    /// Made, not started yet (or starting).
    Created,
    /// Stopped: files kept, memory gone; the next call starts it.
    Stopped,
    /// Processes frozen, memory kept (Docker pause, E2B pause).
    Paused,
    /// Suspended by the provider (Fly's suspend), memory kept.
    Suspended,
    /// Its place does not answer (an executor that is down).
    Unreachable,
    /// The backend's own word for anything else (`exited`, `restarting`, `dead`, …).
    Other(String),
}

impl ComputerState {
    /// The state named `word` (`running`, `paused`, …; anything else is [`Self::Other`]).
    pub fn parse(word: &str) -> ComputerState {
        match word {
            "running" => ComputerState::Running,
            "created" => ComputerState::Created,
            "stopped" => ComputerState::Stopped,
            "paused" => ComputerState::Paused,
            "suspended" => ComputerState::Suspended,
            "unreachable" => ComputerState::Unreachable,
            other => ComputerState::Other(other.to_owned()),
        }
    }

    /// Its word in lists.
    pub fn as_str(&self) -> &str {
        match self {
            ComputerState::Running => "running",
            ComputerState::Created => "created",
            ComputerState::Stopped => "stopped",
            ComputerState::Paused => "paused",
            ComputerState::Suspended => "suspended",
            ComputerState::Unreachable => "unreachable",
            ComputerState::Other(word) => word,
        }
    }

    pub fn is_running(&self) -> bool {
        *self == ComputerState::Running
    }
}

impl Default for ComputerState {
    fn default() -> Self {
        ComputerState::Other(String::new())
    }
}

impl std::fmt::Display for ComputerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for ComputerState {
    fn from(word: &str) -> Self {
        ComputerState::parse(word)
    }
}

impl serde::Serialize for ComputerState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for ComputerState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|w| ComputerState::parse(&w))
    }
}

/// Who owns a temporary computer: a legacy MCP session, or a principal (stdio process,
/// static token, JWT subject within a team). Compared as opaque strings.
pub type OwnerKey = str;

/// What the policy needs to know about an existing computer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing<'a> {
    pub computer_id: &'a str,
    pub temporary: bool,
    /// Owner of a temporary computer; `None` for permanent ones (shared by id).
    pub owner: Option<&'a str>,
}

/// Why an attach was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LifecycleError {
    #[error(
        "computer {id:?} exists and is {actual}; you asked for temporary={requested}. Omit `temporary` (or pass temporary={actual_flag}) to attach to it, or choose another computer_id"
    )]
    TemporaryMismatch {
        id: String,
        actual: &'static str,
        actual_flag: bool,
        requested: bool,
    },
    #[error(
        "computer_id {id:?} is taken by a temporary computer of another session; choose another computer_id (temporary computers are private to the session that made them)"
    )]
    NotYours { id: String },
}

fn describe(temporary: bool) -> &'static str {
    if temporary {
        "temporary (removed when its session ends)"
    } else {
        "permanent (temporary=false)"
    }
}

/// May `caller` attach to `existing`, asking for `requested` (None: whatever it is)?
pub fn check_attach(
    existing: &Existing<'_>,
    requested: Option<bool>,
    caller: &OwnerKey,
) -> Result<(), LifecycleError> {
    if existing.temporary && existing.owner != Some(caller) {
        return Err(LifecycleError::NotYours {
            id: existing.computer_id.to_owned(),
        });
    }
    if let Some(requested) = requested
        && requested != existing.temporary
    {
        return Err(LifecycleError::TemporaryMismatch {
            id: existing.computer_id.to_owned(),
            actual: describe(existing.temporary),
            actual_flag: existing.temporary,
            requested,
        });
    }
    Ok(())
}

/// May `caller` see (list, restart, reset, delete) `existing`?
pub fn visible_to(existing: &Existing<'_>, caller: &OwnerKey) -> bool {
    !existing.temporary || existing.owner == Some(caller)
}

/// Does a call without `computer_id` create a computer that becomes the session default?
/// Only temporary ones do: `temporary=false` without an id makes a fresh permanent computer
/// that is not the default (SPEC §3.6).
pub fn becomes_default(requested_temporary: Option<bool>) -> bool {
    requested_temporary.unwrap_or(true)
}

/// Has an owner-less (stateless) temporary computer been unused for longer than the timeout?
pub fn idle_expired(last_used_ms: u64, now_ms: u64, timeout_secs: u64) -> bool {
    now_ms.saturating_sub(last_used_ms) >= timeout_secs.saturating_mul(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_keep_their_words() {
        for word in [
            "running",
            "created",
            "stopped",
            "paused",
            "suspended",
            "unreachable",
            "exited",
            "",
        ] {
            let state = ComputerState::parse(word);
            assert_eq!(state.as_str(), word);
            let wire = serde_json::to_value(&state).unwrap();
            assert_eq!(wire, word);
            assert_eq!(
                serde_json::from_value::<ComputerState>(wire).unwrap(),
                state
            );
        }
        assert!(ComputerState::parse("running").is_running());
        assert!(!ComputerState::parse("exited").is_running());
        assert_eq!(
            ComputerState::parse("exited"),
            ComputerState::Other("exited".into())
        );
    }

    fn rec(temporary: bool, owner: Option<&str>) -> Existing<'_> {
        Existing {
            computer_id: "box",
            temporary,
            owner,
        }
    }

    #[test]
    fn permanent_is_shared() {
        let p = rec(false, None);
        assert_eq!(check_attach(&p, None, "a"), Ok(()));
        assert_eq!(check_attach(&p, Some(false), "b"), Ok(()));
        assert!(matches!(
            check_attach(&p, Some(true), "a"),
            Err(LifecycleError::TemporaryMismatch { .. })
        ));
        assert!(visible_to(&p, "anyone"));
    }

    #[test]
    fn temporary_is_private() {
        let t = rec(true, Some("s1"));
        assert_eq!(check_attach(&t, Some(true), "s1"), Ok(()));
        assert_eq!(check_attach(&t, None, "s1"), Ok(()));
        assert!(matches!(
            check_attach(&t, None, "s2"),
            Err(LifecycleError::NotYours { .. })
        ));
        // Another session learns nothing about lifecycle, only that the id is taken.
        assert!(matches!(
            check_attach(&t, Some(false), "s2"),
            Err(LifecycleError::NotYours { .. })
        ));
        let msg = check_attach(&t, Some(false), "s1").unwrap_err().to_string();
        assert!(msg.contains("temporary=false"), "{msg}");
        assert!(!visible_to(&t, "s2"));
    }

    #[test]
    fn a_temporary_mismatch_says_what_the_computer_is_and_what_to_pass() {
        let m = check_attach(&rec(false, None), Some(true), "a")
            .unwrap_err()
            .to_string();
        assert!(
            m.contains("computer \"box\" exists and is permanent"),
            "{m}"
        );
        assert!(m.contains("you asked for temporary=true"), "{m}");
        assert!(m.contains("pass temporary=false"), "{m}");
        let m = check_attach(&rec(true, Some("s1")), Some(false), "s1")
            .unwrap_err()
            .to_string();
        assert!(
            m.contains("is temporary (removed when its session ends)"),
            "{m}"
        );
        assert!(m.contains("pass temporary=true"), "{m}");
        // A temporary without a recorded owner is nobody's to attach to or see.
        let orphan = rec(true, None);
        assert!(matches!(
            check_attach(&orphan, None, ""),
            Err(LifecycleError::NotYours { .. })
        ));
        assert!(!visible_to(&orphan, ""));
    }

    #[test]
    fn idle_expiry_never_overflows() {
        assert!(!idle_expired(1, u64::MAX, u64::MAX));
        assert!(idle_expired(0, u64::MAX, u64::MAX / 1000));
        assert!(idle_expired(7, 7, 0), "a zero timeout expires at once");
    }

    #[test]
    fn defaults_and_ttl() {
        assert!(becomes_default(None));
        assert!(becomes_default(Some(true)));
        assert!(!becomes_default(Some(false)));
        assert!(!idle_expired(1_000, 300_999, 300));
        assert!(idle_expired(1_000, 301_000, 300));
        assert!(!idle_expired(5_000, 1_000, 1));
    }
}
