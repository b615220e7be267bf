//! The WASM backend in a build without the `wasm` feature: the same interface, and a clear
//! start-up error when a WebAssembly backend is asked for (no value of [`Wasm`] can exist).

use std::path::Path;

use shared::result::ExecOutcome;

use crate::place::{BackendError, Failure, Place};
use crate::progress::Progress;
use crate::spec::{ContainerRecord, ExecSpec};

/// Errors of the WASM backend.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    #[error("computer {0:?} does not exist")]
    NotFound(String),
    #[error(
        "this build has no WebAssembly support (built without the `wasm` feature); use --backend docker"
    )]
    NotBuilt,
}

/// No WASM backend in this build.
#[derive(Debug, Clone)]
pub enum Wasm {}

/// Always refuses: this build has no WebAssembly support.
pub async fn open(
    _custom: Option<&Path>,
    _cfg: &crate::spec::WasmConfig,
    _state_dir: &Path,
    _instance: String,
    _host: String,
) -> Result<Wasm, WasmError> {
    Err(WasmError::NotBuilt)
}

impl Wasm {
    /// Never called: no value exists.
    pub fn job_output(&self) -> (u64, u64) {
        match *self {}
    }
}

impl From<WasmError> for BackendError {
    fn from(e: WasmError) -> Self {
        let failure = match &e {
            WasmError::NotFound(_) => Failure::NotFound,
            WasmError::NotBuilt => Failure::Unavailable,
        };
        BackendError::new(failure, e)
    }
}

impl Place for Wasm {
    fn kind(&self) -> shared::capabilities::BackendKind {
        match *self {}
    }
    fn instance(&self) -> &str {
        match *self {}
    }
    async fn find(&self, _id: &str) -> Result<Option<ContainerRecord>, BackendError> {
        match *self {}
    }
    async fn list(&self) -> Result<Vec<ContainerRecord>, BackendError> {
        match *self {}
    }
    async fn create(
        &self,
        _id: &str,
        _temporary: bool,
        _team: Option<&str>,
        _network: &shared::egress::Policy,
        _progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        match *self {}
    }
    async fn start(&self, _id: &str) -> Result<(), BackendError> {
        match *self {}
    }
    async fn remove(&self, _id: &str) -> Result<(), BackendError> {
        match *self {}
    }
    async fn restart(&self, _id: &str) -> Result<(), BackendError> {
        match *self {}
    }
    async fn factory_reset(
        &self,
        _id: &str,
        _temporary: bool,
        _team: Option<&str>,
        _network: &shared::egress::Policy,
        _progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        match *self {}
    }
    async fn exec(&self, _id: &str, _spec: &ExecSpec) -> Result<ExecOutcome, BackendError> {
        match *self {}
    }
}
