//! WebAssembly computers as a [`Place`]; [`WasmError`]s classified once.

use shared::jobs::{JobInfo, JobOutput};
use shared::result::ExecOutcome;

use super::{Wasm, WasmError};
use crate::place::{BackendError, Failure, Place};
use crate::progress::Progress;
use crate::spec::{
    ContainerRecord, ExecSpec, FilePutSpec, FileSlice, FileWriteSpec, FileWritten, ForkSource,
    JobPoll, JobStart, SnapshotMeta, SnapshotRecord, UploadStream,
};

impl From<WasmError> for BackendError {
    fn from(e: WasmError) -> Self {
        let failure = match &e {
            WasmError::NotFound(_) | WasmError::NoSnapshot(_) => Failure::NotFound,
            WasmError::Exists(_) => Failure::Conflict,
            WasmError::Module(_) | WasmError::NoToolbox => Failure::Unavailable,
            WasmError::Storage(_) | WasmError::Engine(_) => Failure::Failed,
            WasmError::NoSuchFile(_) => Failure::NoSuchFile,
            WasmError::File(_) => Failure::File,
            WasmError::NoSuchJob(_) => Failure::NoSuchJob,
            WasmError::JobGone(_) => Failure::JobGone,
            WasmError::Job(_) => Failure::Failed,
        };
        BackendError::new(failure, e)
    }
}

// `Wasm::f(self, ..)` below is the inherent method (inherent methods win over the trait's).
impl Place for Wasm {
    fn kind(&self) -> shared::capabilities::BackendKind {
        Wasm::kind(self)
    }

    fn instance(&self) -> &str {
        Wasm::instance(self)
    }

    async fn find(&self, id: &str) -> Result<Option<ContainerRecord>, BackendError> {
        Ok(Wasm::find(self, id).await?)
    }

    async fn list(&self) -> Result<Vec<ContainerRecord>, BackendError> {
        Ok(Wasm::list(self).await?)
    }

    /// Nothing to download or boot: `progress` has nothing to report.
    async fn create(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        _progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        // No network at all: `all` and `none` alike mean none here.
        crate::place::unenforced(self.name(), network, &shared::egress::Policy::None)?;
        Ok(Wasm::create(self, id, temporary, team).await?)
    }

    /// A WASM computer runs whenever a command does: there is nothing to start.
    async fn start(&self, _id: &str) -> Result<(), BackendError> {
        Ok(())
    }

    async fn restart(&self, id: &str) -> Result<(), BackendError> {
        Ok(Wasm::restart(self, id).await?)
    }

    async fn remove(&self, id: &str) -> Result<(), BackendError> {
        Ok(Wasm::remove(self, id).await?)
    }

    /// The computer keeps its `temporary` flag and team (stored with it).
    async fn factory_reset(
        &self,
        id: &str,
        _temporary: bool,
        _team: Option<&str>,
        _network: &shared::egress::Policy,
        _progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        Ok(Wasm::factory_reset(self, id).await?)
    }

    async fn exec(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, BackendError> {
        Ok(Wasm::exec(self, id, spec).await?)
    }

    async fn job_start(
        &self,
        id: &str,
        spec: &ExecSpec,
        job: &JobStart,
    ) -> Result<(), BackendError> {
        Ok(Wasm::job_start(self, id, spec, job).await?)
    }

    async fn job_poll(
        &self,
        id: &str,
        job_id: &str,
        poll: &JobPoll,
    ) -> Result<JobOutput, BackendError> {
        Ok(Wasm::job_poll(self, id, job_id, poll).await?)
    }

    async fn job_list(&self, id: &str) -> Result<Vec<JobInfo>, BackendError> {
        Ok(Wasm::job_list(self, id))
    }

    async fn file_read(
        &self,
        id: &str,
        path: &str,
        offset: u64,
        length: u64,
    ) -> Result<FileSlice, BackendError> {
        Ok(Wasm::file_read(self, id, path, offset, length).await?)
    }

    async fn file_write(
        &self,
        id: &str,
        spec: &FileWriteSpec<'_>,
    ) -> Result<FileWritten, BackendError> {
        Ok(Wasm::file_write(self, id, spec).await?)
    }

    async fn file_put(
        &self,
        id: &str,
        spec: &FilePutSpec<'_>,
        body: UploadStream<'_>,
    ) -> Result<FileWritten, BackendError> {
        Ok(Wasm::file_put(self, id, spec, body).await?)
    }

    async fn snapshot_take(
        &self,
        id: &str,
        meta: &SnapshotMeta<'_>,
    ) -> Result<SnapshotRecord, BackendError> {
        Ok(Wasm::snapshot_take(self, id, meta).await?)
    }

    async fn snapshot_list(&self) -> Result<Vec<SnapshotRecord>, BackendError> {
        Ok(Wasm::snapshot_list(self).await?)
    }

    async fn snapshot_delete(&self, snapshot_id: &str) -> Result<bool, BackendError> {
        Ok(Wasm::snapshot_delete(self, snapshot_id).await?)
    }

    /// No network, as [`Place::create`] says.
    async fn fork(
        &self,
        from: ForkSource<'_>,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        crate::place::unenforced(self.name(), network, &shared::egress::Policy::None)?;
        Ok(Wasm::fork(self, from, id, temporary, team, progress).await?)
    }

    /// The computer keeps its `temporary` flag and team (stored with it), as with a
    /// factory reset.
    async fn restore(
        &self,
        id: &str,
        snapshot_id: &str,
        _temporary: bool,
        _team: Option<&str>,
        _network: &shared::egress::Policy,
        _progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        Ok(Wasm::restore(self, id, snapshot_id).await?)
    }
}
