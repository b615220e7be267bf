//! The WASM backend in a build without the `wasm` feature: the same interface, and a clear
//! start-up error when a WebAssembly backend is asked for (no value of [`Wasm`] can exist).

use std::path::Path;

use shared::result::ExecOutcome;

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
    pub fn name(&self) -> &'static str {
        match *self {}
    }
    pub fn instance(&self) -> &str {
        match *self {}
    }
    pub async fn find(&self, _id: &str) -> Result<Option<ContainerRecord>, WasmError> {
        match *self {}
    }
    pub async fn list(&self) -> Result<Vec<ContainerRecord>, WasmError> {
        match *self {}
    }
    pub async fn create(
        &self,
        _id: &str,
        _temporary: bool,
        _team: Option<&str>,
    ) -> Result<ContainerRecord, WasmError> {
        match *self {}
    }
    pub async fn remove(&self, _id: &str) -> Result<(), WasmError> {
        match *self {}
    }
    pub async fn restart(&self, _id: &str) -> Result<(), WasmError> {
        match *self {}
    }
    pub async fn factory_reset(&self, _id: &str) -> Result<ContainerRecord, WasmError> {
        match *self {}
    }
    pub async fn exec(&self, _id: &str, _spec: &ExecSpec) -> Result<ExecOutcome, WasmError> {
        match *self {}
    }
}
