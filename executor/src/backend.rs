//! The place this server's computers live, chosen once at start: Docker/Podman
//! containers, WebAssembly computers, Fly Machines, E2B or Modal sandboxes. Each
//! implements [`Place`]; `computers` applies the registry on top and never asks which one
//! it talks to: it reads the kind's name and capabilities and calls the hooks.

use shared::capabilities::{BackendKind, Capabilities, Capability, Unsupported};
use shared::files::over_exec::{OverExec, PathInfo};
use shared::jobs::{JobInfo, JobOutput};
use shared::result::ExecOutcome;

use crate::docker::Docker;
use crate::e2b::E2b;
use crate::fly::Fly;
use crate::modal::Modal;
use crate::place::{BackendError, Place};
use crate::progress::Progress;
use crate::spec::{
    ContainerRecord, ExecSpec, FileChunks, FilePutSpec, FileSlice, FileWriteSpec, FileWritten,
    ForkSource, JobPoll, JobStart, SnapshotMeta, SnapshotRecord, UploadStream,
};
use crate::wasm::Wasm;

/// Where this server's computers live.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one per server
pub enum Backend {
    Docker(Docker),
    Wasm(Wasm),
    Fly(Fly),
    E2b(E2b),
    Modal(Modal),
    /// The in-memory backend of the controller's tests.
    #[cfg(test)]
    Fake(crate::fake::Fake),
}

/// `$body` with `$p` bound to the chosen backend, whatever it is.
macro_rules! each {
    ($self:ident, $p:ident => $body:expr) => {
        match $self {
            Backend::Docker($p) => $body,
            Backend::Wasm($p) => $body,
            Backend::Fly($p) => $body,
            Backend::E2b($p) => $body,
            Backend::Modal($p) => $body,
            #[cfg(test)]
            Backend::Fake($p) => $body,
        }
    };
}

impl Place for Backend {
    fn kind(&self) -> BackendKind {
        each!(self, p => p.kind())
    }

    fn name(&self) -> &'static str {
        each!(self, p => p.name())
    }

    fn blocked_since(&self, id: &str, t: std::time::Instant) -> Vec<shared::egress::Blocked> {
        each!(self, p => p.blocked_since(id, t))
    }

    fn capabilities(&self) -> Capabilities {
        each!(self, p => p.capabilities())
    }

    fn require(&self, cap: Capability) -> Result<(), Unsupported> {
        each!(self, p => p.require(cap))
    }

    fn reserved(&self, id: &str) -> bool {
        each!(self, p => p.reserved(id))
    }

    fn fresh_slug(&self, temporary: bool) -> Option<String> {
        each!(self, p => p.fresh_slug(temporary))
    }

    fn background(&self) {
        each!(self, p => p.background())
    }

    async fn close(&self) {
        each!(self, p => Place::close(p).await)
    }

    async fn sweep(&self) {
        each!(self, p => Place::sweep(p).await)
    }

    fn instance(&self) -> &str {
        each!(self, p => p.instance())
    }

    async fn find(&self, id: &str) -> Result<Option<ContainerRecord>, BackendError> {
        each!(self, p => Place::find(p, id).await)
    }

    async fn list(&self) -> Result<Vec<ContainerRecord>, BackendError> {
        each!(self, p => Place::list(p).await)
    }

    async fn create(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        each!(self, p => Place::create(p, id, temporary, team, network, progress).await)
    }

    async fn start(&self, id: &str) -> Result<(), BackendError> {
        each!(self, p => Place::start(p, id).await)
    }

    async fn restart(&self, id: &str) -> Result<(), BackendError> {
        each!(self, p => Place::restart(p, id).await)
    }

    async fn remove(&self, id: &str) -> Result<(), BackendError> {
        each!(self, p => Place::remove(p, id).await)
    }

    async fn factory_reset(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        each!(self, p => Place::factory_reset(p, id, temporary, team, network, progress).await)
    }

    async fn exec(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, BackendError> {
        each!(self, p => Place::exec(p, id, spec).await)
    }

    async fn job_start(
        &self,
        id: &str,
        spec: &ExecSpec,
        job: &JobStart,
    ) -> Result<(), BackendError> {
        each!(self, p => Place::job_start(p, id, spec, job).await)
    }

    async fn job_poll(
        &self,
        id: &str,
        job_id: &str,
        poll: &JobPoll,
    ) -> Result<JobOutput, BackendError> {
        each!(self, p => Place::job_poll(p, id, job_id, poll).await)
    }

    async fn job_list(&self, id: &str) -> Result<Vec<JobInfo>, BackendError> {
        each!(self, p => Place::job_list(p, id).await)
    }

    async fn file_read(
        &self,
        id: &str,
        path: &str,
        offset: u64,
        length: u64,
    ) -> Result<FileSlice, BackendError> {
        each!(self, p => Place::file_read(p, id, path, offset, length).await)
    }

    async fn file_write(
        &self,
        id: &str,
        spec: &FileWriteSpec<'_>,
    ) -> Result<FileWritten, BackendError> {
        each!(self, p => Place::file_write(p, id, spec).await)
    }

    async fn file_stream(
        &self,
        id: &str,
        path: &str,
        from: u64,
        to: u64,
    ) -> Result<Option<FileChunks>, BackendError> {
        each!(self, p => Place::file_stream(p, id, path, from, to).await)
    }

    async fn file_put(
        &self,
        id: &str,
        spec: &FilePutSpec<'_>,
        body: UploadStream<'_>,
    ) -> Result<FileWritten, BackendError> {
        each!(self, p => Place::file_put(p, id, spec, body).await)
    }

    fn moves_files(&self) -> bool {
        each!(self, p => Place::moves_files(p))
    }

    async fn file_api_stat(
        &self,
        id: &str,
        path: &str,
    ) -> Result<Option<PathInfo>, OverExec<BackendError>> {
        each!(self, p => Place::file_api_stat(p, id, path).await)
    }

    async fn file_api_download(
        &self,
        id: &str,
        path: &str,
    ) -> Result<Vec<u8>, OverExec<BackendError>> {
        each!(self, p => Place::file_api_download(p, id, path).await)
    }

    async fn file_api_upload(
        &self,
        id: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<(), OverExec<BackendError>> {
        each!(self, p => Place::file_api_upload(p, id, path, bytes).await)
    }

    async fn snapshot_take(
        &self,
        id: &str,
        meta: &SnapshotMeta<'_>,
    ) -> Result<SnapshotRecord, BackendError> {
        each!(self, p => Place::snapshot_take(p, id, meta).await)
    }

    async fn snapshot_list(&self) -> Result<Vec<SnapshotRecord>, BackendError> {
        each!(self, p => Place::snapshot_list(p).await)
    }

    async fn snapshot_delete(&self, snapshot_id: &str) -> Result<bool, BackendError> {
        each!(self, p => Place::snapshot_delete(p, snapshot_id).await)
    }

    async fn fork(
        &self,
        from: ForkSource<'_>,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        each!(self, p => Place::fork(p, from, id, temporary, team, network, progress).await)
    }

    async fn restore(
        &self,
        id: &str,
        snapshot_id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        each!(self, p => Place::restore(p, id, snapshot_id, temporary, team, network, progress).await)
    }
}

impl Backend {
    /// The unread output of kept jobs held in this server, and its budget, in bytes: the
    /// WASM backend's (`--wasm-job-output-budget`); `None` where jobs' output waits in the
    /// computers (the in-computer supervisor, a cloud sandbox).
    pub fn job_output(&self) -> Option<(u64, u64)> {
        match self {
            Backend::Wasm(w) => Some(w.job_output()),
            _ => None,
        }
    }
}
