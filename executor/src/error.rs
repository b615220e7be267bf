//! What a tool call or executor operation can end in: the registry's errors and each
//! backend's, with the one place that says which of them mean "not found" or "conflict".

use crate::docker::DockerError;

/// Errors a tool call can end in (each becomes an `isError` result).
#[derive(Debug, thiserror::Error)]
pub enum ComputerError {
    #[error(transparent)]
    Docker(#[from] DockerError),
    #[error(transparent)]
    Wasm(#[from] crate::wasm::WasmError),
    /// Fly Machines or E2B.
    #[error(transparent)]
    Cloud(#[from] shared::providers::computers::ComputersError),
    #[error(transparent)]
    Modal(#[from] crate::modal::ModalBackendError),
    #[error(transparent)]
    Policy(#[from] shared::lifecycle::LifecycleError),
    #[error(
        "computer {0:?} does not exist (or is another session's temporary computer); see computer_list"
    )]
    Unknown(String),
    /// The name is held by a computer of another team (or, on a local server, one an
    /// executor made for the gateway).
    #[error(
        "computer_id {0:?} is taken by a computer that is not yours; choose another computer_id"
    )]
    Taken(String),
}

impl ComputerError {
    /// Is it "no such computer", whatever the backend?
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            ComputerError::Unknown(_)
                | ComputerError::Docker(DockerError::NotFound(_))
                | ComputerError::Wasm(crate::wasm::WasmError::NotFound(_))
                | ComputerError::Cloud(shared::providers::computers::ComputersError::NotFound(_))
                | ComputerError::Modal(crate::modal::ModalBackendError::NotFound(_))
        )
    }

    /// Does it contradict the computer's state or ownership (the other `temporary`
    /// value, a name that is not ours)?
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            ComputerError::Policy(_)
                | ComputerError::Taken(_)
                | ComputerError::Docker(DockerError::NotOurs { .. })
        )
    }
}
