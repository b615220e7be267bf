//! Provider-neutral lifecycle policy: who may reach a computer, temporary vs permanent, TTL.
//!
//! Owns the rules of SPEC §3.4 and §3.6 as pure decisions over plain records, so the local
//! server, the executor and the Worker decide identically. Clocks come in as parameters.

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
    fn defaults_and_ttl() {
        assert!(becomes_default(None));
        assert!(becomes_default(Some(true)));
        assert!(!becomes_default(Some(false)));
        assert!(!idle_expired(1_000, 300_999, 300));
        assert!(idle_expired(1_000, 301_000, 300));
        assert!(!idle_expired(5_000, 1_000, 1));
    }
}
