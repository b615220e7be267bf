//! What a tool call or executor operation can end in: the registry's errors and each
//! backend's, with the one place that says which of them mean "not found" or "conflict".

use std::convert::Infallible;

use shared::registry::RegistryError;

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
    /// The registry's answer: not yours, the other `temporary`, or no such computer.
    #[error(transparent)]
    Registry(#[from] RegistryError<Infallible>),
    /// The name is held by a computer of another team (or, on a local server, one an
    /// executor made for the gateway).
    #[error(
        "computer_id {0:?} is taken by a computer that is not yours; choose another computer_id"
    )]
    Taken(String),
}

impl ComputerError {
    /// "No such computer" (or not the caller's to see), in the registry's words.
    pub fn unknown(id: &str) -> Self {
        ComputerError::Registry(RegistryError::Unknown(id.to_owned()))
    }

    /// Is it "no such computer", whatever the backend?
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            ComputerError::Registry(RegistryError::Unknown(_))
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
            ComputerError::Registry(RegistryError::Policy(_))
                | ComputerError::Taken(_)
                | ComputerError::Docker(DockerError::NotOurs { .. })
        )
    }
}
