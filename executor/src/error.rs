//! What a tool call or executor operation can end in: the registry's errors, a backend's
//! (classified by `place::Failure`), and the one place that says which of them mean "not
//! found" or "conflict".

use std::convert::Infallible;

use shared::registry::RegistryError;

use crate::place::{BackendError, Failure};

/// Errors a tool call can end in (each becomes an `isError` result).
#[derive(Debug, thiserror::Error)]
pub enum ComputerError {
    /// The backend's (Docker, WASM, Fly, E2B, Modal), in its words.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The registry's answer: not yours, the other `temporary`, no such computer, or a
    /// new permanent computer for a token without `manage`.
    #[error(transparent)]
    Registry(#[from] RegistryError<Infallible>),
    /// The name is held by a computer of another team (or, on a local server, one an
    /// executor made for the gateway).
    #[error(
        "computer_id {0:?} is taken by a computer that is not yours; choose another computer_id"
    )]
    Taken(String),
    /// A new computer would pass `--max-computers-per-principal` (`computers::quota`);
    /// nothing was changed.
    #[error(
        "this {} already has {limit} computers, the quota of --max-computers-per-principal; delete computers it no longer needs (computer_delete; computer_list shows them), or start the server with a higher --max-computers-per-principal",
        if *team { "team" } else { "principal" }
    )]
    Quota { limit: usize, team: bool },
    /// The backend cannot do this here (`shared::capabilities`); nothing was changed.
    #[error(transparent)]
    Unsupported(#[from] shared::capabilities::Unsupported),
    /// `network` asks for more than the server's policy (SPEC §3.11); nothing was made.
    #[error(transparent)]
    Widening(#[from] shared::egress::Widening),
    /// `network` on a call to a computer that exists with another policy: it applies only
    /// when a computer is made.
    #[error(
        "computer {id:?} already exists with network {has}; `network` applies only when a computer is made (this call asked for {asked}): leave `network` out to use it, or pass another computer_id for a new computer"
    )]
    NetworkMismatch {
        id: String,
        has: String,
        asked: String,
    },
    /// No snapshot of that id that the caller may reach (SPEC §3.12).
    #[error(
        "snapshot {0:?} does not exist (or is not yours); computer_snapshots lists a computer's snapshots"
    )]
    NoSnapshot(String),
    /// The computer keeps as many snapshots as `--snapshot-limit` allows; nothing was taken.
    #[error(
        "computer {id:?} already keeps {limit} snapshots, the most --snapshot-limit allows; delete one it no longer needs with computer_snapshot_delete (computer_snapshots lists them), then snapshot again"
    )]
    SnapshotLimit { id: String, limit: usize },
    /// A fork names a computer that exists: a fork always makes a new one.
    #[error(
        "computer {0:?} already exists; computer_fork makes a new computer: pass another computer_id, or leave it out for a fresh one"
    )]
    ForkExists(String),
    /// A restore of a snapshot taken of another computer.
    #[error(
        "snapshot {snapshot:?} was taken of computer {of:?}, not {id:?}: restore it to {of:?}, or start a new computer from it with computer_fork"
    )]
    OtherComputer {
        snapshot: String,
        of: String,
        id: String,
    },
}

impl ComputerError {
    /// "No such computer" (or not the caller's to see), in the registry's words.
    pub fn unknown(id: &str) -> Self {
        ComputerError::Registry(RegistryError::Unknown(id.to_owned()))
    }

    /// The backend's kind of failure, if the backend failed.
    pub fn failure(&self) -> Option<Failure> {
        match self {
            ComputerError::Backend(e) => Some(e.failure),
            _ => None,
        }
    }

    /// Is it "no such computer", whatever the backend?
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            ComputerError::Registry(RegistryError::Unknown(_)) | ComputerError::NoSnapshot(_)
        ) || matches!(
            self.failure(),
            Some(Failure::NotFound | Failure::NoSuchJob | Failure::JobGone)
        )
    }

    /// Does it contradict the computer's state or ownership (the other `temporary`
    /// value, a name that is not ours)?
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            ComputerError::Registry(RegistryError::Policy(_))
                | ComputerError::Taken(_)
                | ComputerError::SnapshotLimit { .. }
                | ComputerError::ForkExists(_)
                | ComputerError::OtherComputer { .. }
        ) || self.failure() == Some(Failure::Conflict)
    }

    /// The one mapping of these errors to API codes (the executor API and `/v1/files`).
    pub fn api_code(&self) -> shared::executor_api::ErrorCode {
        use shared::executor_api::ErrorCode;
        match self.failure() {
            Some(Failure::NoSuchFile) => ErrorCode::NotFound,
            Some(Failure::File) => ErrorCode::BadRequest,
            Some(Failure::Unsupported) => ErrorCode::Unsupported,
            None if matches!(self, ComputerError::Unsupported(_)) => ErrorCode::Unsupported,
            None if matches!(self, ComputerError::Quota { .. }) => ErrorCode::Conflict,
            None if matches!(self, ComputerError::Widening(_)) => ErrorCode::Forbidden,
            None if matches!(self, ComputerError::NetworkMismatch { .. }) => ErrorCode::Conflict,
            None if matches!(self, ComputerError::Registry(RegistryError::Forbidden(_))) => {
                ErrorCode::Forbidden
            }
            _ if self.is_not_found() => ErrorCode::NotFound,
            _ if self.is_conflict() => ErrorCode::Conflict,
            _ => ErrorCode::Engine,
        }
    }
}
