//! The backend trait: what every place computers live (Docker/Podman, WASM, Fly, E2B,
//! Modal) does, with neutral types (`spec`) and one neutral error. `backend::Backend`
//! picks one per server; the controller above never asks which: it reads the backend's
//! [`BackendKind`] (its name) and [`Capabilities`], and calls the lifecycle hooks
//! ([`Place::reserved`], [`Place::fresh_slug`], [`Place::background`], [`Place::close`],
//! [`Place::sweep`]) that a backend with a warm pool or host state implements.
//!
//! Each backend keeps its own error enum for its own logic, and classifies it once, in
//! its module, into a [`BackendError`] of one [`Failure`] kind: the only thing callers
//! above the backends decide on (retry a stopped computer, forget a vanished one, answer
//! 404 or 409).

use shared::capabilities::{BackendKind, Capabilities, Capability, Unsupported};
use shared::egress::Policy;
use shared::files::over_exec::{OverExec, PathInfo, no_file_api};
use shared::jobs::{JobInfo, JobOutput};
use shared::result::ExecOutcome;

use crate::progress::Progress;
use crate::spec::{
    ContainerRecord, ExecSpec, FileChunks, FilePutSpec, FileSlice, FileWriteSpec, FileWritten,
    ForkSource, JobPoll, JobStart, SnapshotMeta, SnapshotRecord, UploadStream,
};

pub mod over_exec;

/// What kind of failure a backend's error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No such computer.
    NotFound,
    /// It exists but is stopped (start it and try again).
    NotRunning,
    /// The name is held by something that is not ours, or the state forbids it.
    Conflict,
    /// The engine, provider or module cannot be reached or used now.
    Unavailable,
    /// Anything else the backend refused or failed at.
    Failed,
    /// The computer has no such job (never started, or ended and read).
    NoSuchJob,
    /// The computer has no such job here, and the backend knows why: it ended with the
    /// server process that ran it, or runs in another one (a WebAssembly computer's jobs
    /// live in the server process); the message says which.
    JobGone,
    /// The computer has no such file or directory (the computer itself exists).
    NoSuchFile,
    /// A file operation was refused, changing nothing: a directory, an existing file
    /// with `create_only`, a read-only path, a full disk, a slice past the end.
    File,
    /// This backend or computer cannot do what was asked (e.g. keep a job).
    Unsupported,
}

/// A backend's error: its kind, in its own words (the message is the backend's).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    pub failure: Failure,
    message: String,
}

impl BackendError {
    pub fn new(failure: Failure, error: impl std::fmt::Display) -> Self {
        Self {
            failure,
            message: error.to_string(),
        }
    }
}

/// Refuses `network` on a backend whose computers `reach` the network as `reach` says
/// (`"all"`: they always have it, e.g. Fly; `"none"`: never, WASM) and which has no
/// egress gate: only the policy it has anyway is accepted (SPEC §3.11: never silently
/// unenforced).
pub fn unenforced(backend: &str, network: &Policy, reach: &Policy) -> Result<(), BackendError> {
    if network == reach || (*network == Policy::All && *reach == Policy::None) {
        return Ok(());
    }
    Err(BackendError::new(
        Failure::Unsupported,
        format!(
            "network {network}: {backend} computers cannot be confined to it (only Docker/Podman computers can, through the server's egress gate); leave `network` out"
        ),
    ))
}

/// One place computers live. Ids are backend keys (`shared::teams::key`).
#[allow(async_fn_in_trait)] // called on concrete types only (`Backend`), so Send is inferred
pub trait Place {
    /// Which kind of backend this is.
    fn kind(&self) -> BackendKind;
    /// The name shown in `computer_list` items.
    fn name(&self) -> &'static str {
        self.kind().name()
    }
    /// What this backend can do here: its kind's capabilities, less what this server's
    /// configuration leaves out.
    fn capabilities(&self) -> Capabilities {
        self.kind().capabilities()
    }
    /// `Ok` when this backend can do `cap` here; else the refusal, naming the backends
    /// that can (or, when its kind can elsewhere, why this one cannot).
    fn require(&self, cap: Capability) -> Result<(), Unsupported> {
        self.capabilities().require(self.name(), cap)
    }
    /// What computer `id`'s network policy refused since `t` (SPEC §3.11: a call's
    /// `network_blocked`). A backend without the egress gate refuses nothing itself.
    fn blocked_since(&self, id: &str, t: std::time::Instant) -> Vec<shared::egress::Blocked> {
        let _ = (id, t);
        Vec::new()
    }
    /// Does `id` name no computer yet for sure (a slug reserved for a warm-pool member),
    /// so attaching to it need not look it up?
    fn reserved(&self, id: &str) -> bool {
        let _ = id;
        false
    }
    /// A ready id for a new computer of kind `temporary` (a warm-pool member's), or
    /// `None`: the controller makes a fresh slug.
    fn fresh_slug(&self, temporary: bool) -> Option<String> {
        let _ = temporary;
        None
    }
    /// Starts the backend's background work once the server runs (a pool's filler).
    fn background(&self) {}
    /// Stops the backend's own resources at shutdown (a pool's members).
    async fn close(&self) {}
    /// Removes what servers that are gone left behind besides their computers (pool
    /// members, host directories), logging what it did.
    async fn sweep(&self) {}
    /// This server's instance label (owner of its temporaries).
    fn instance(&self) -> &str;
    async fn find(&self, id: &str) -> Result<Option<ContainerRecord>, BackendError>;
    async fn list(&self) -> Result<Vec<ContainerRecord>, BackendError>;
    /// Creates computer `id` with network policy `network` (its effective one, SPEC
    /// §3.11: a backend that cannot enforce it refuses, [`unenforced`]). Backends that
    /// keep labels record `team` (the cloud ones keep teams apart by the key alone).
    async fn create(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, BackendError>;
    /// Makes sure computer `id` runs.
    async fn start(&self, id: &str) -> Result<(), BackendError>;
    async fn restart(&self, id: &str) -> Result<(), BackendError>;
    async fn remove(&self, id: &str) -> Result<(), BackendError>;
    /// A fresh computer under the same id, files gone; its network policy stays
    /// `network`.
    async fn factory_reset(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, BackendError>;
    async fn exec(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, BackendError>;
    /// Starts `spec` on computer `id` as a job (SPEC §3.8) that outlives this call; its
    /// stdin stays open until closed. By default through the computer's exec
    /// (`shared::jobs::over_exec`, the job runner kept on the computer).
    async fn job_start(&self, id: &str, spec: &ExecSpec, job: &JobStart) -> Result<(), BackendError>
    where
        Self: Sized + Sync,
    {
        over_exec::job_start(self, id, spec, job).await
    }
    /// Writes, closes, signals, then waits and reads job `job_id`, as `poll` says.
    async fn job_poll(
        &self,
        id: &str,
        job_id: &str,
        poll: &JobPoll,
    ) -> Result<JobOutput, BackendError>
    where
        Self: Sized + Sync,
    {
        over_exec::job_poll(self, id, job_id, poll).await
    }
    /// The jobs computer `id` keeps, oldest first.
    async fn job_list(&self, id: &str) -> Result<Vec<JobInfo>, BackendError>
    where
        Self: Sized + Sync,
    {
        over_exec::job_list(self, id).await
    }
    /// Reads at most `length` bytes of regular file `path` from `offset` (an offset at or
    /// past the end gives an empty slice). Paths resolve inside the computer.
    /// By default through the computer's exec (`crate::over_exec`).
    async fn file_read(
        &self,
        id: &str,
        path: &str,
        offset: u64,
        length: u64,
    ) -> Result<FileSlice, BackendError>
    where
        Self: Sized + Sync,
    {
        over_exec::read(self, id, path, offset, length).await
    }
    /// Writes one slice as `spec` says: an atomic replace (a temporary name, fsync,
    /// rename) or an append; a failure leaves the old file as it was.
    async fn file_write(
        &self,
        id: &str,
        spec: &FileWriteSpec<'_>,
    ) -> Result<FileWritten, BackendError>
    where
        Self: Sized + Sync,
    {
        over_exec::write(self, id, spec).await
    }
    /// Bytes `from..to` of `path` as one stream, where the backend has a faster path
    /// than slices (Docker: the archive API); `None`: read in slices.
    async fn file_stream(
        &self,
        id: &str,
        path: &str,
        from: u64,
        to: u64,
    ) -> Result<Option<FileChunks>, BackendError> {
        let _ = (id, path, from, to);
        Ok(None)
    }
    /// Whether the provider has a file API that the exec-based file path uses for big
    /// slices (the `file_api_*` methods; E2B's envd).
    fn moves_files(&self) -> bool {
        false
    }
    /// What `path` is (`None`: missing), through the provider's file API.
    async fn file_api_stat(
        &self,
        id: &str,
        path: &str,
    ) -> Result<Option<PathInfo>, OverExec<BackendError>> {
        let _ = (id, path);
        Err(no_file_api())
    }
    /// File `path`, whole, through the provider's file API.
    async fn file_api_download(
        &self,
        id: &str,
        path: &str,
    ) -> Result<Vec<u8>, OverExec<BackendError>> {
        let _ = (id, path);
        Err(no_file_api())
    }
    /// Writes `bytes` to `path` whole (missing parents made), through the file API.
    async fn file_api_upload(
        &self,
        id: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<(), OverExec<BackendError>> {
        let _ = (id, path, bytes);
        Err(no_file_api())
    }
    /// Streams `body` into `spec.path` without holding it in memory: a temporary file,
    /// renamed over the old one once the body ended well (HTTP `PUT /v1/files`).
    async fn file_put(
        &self,
        id: &str,
        spec: &FilePutSpec<'_>,
        body: UploadStream<'_>,
    ) -> Result<FileWritten, BackendError>
    where
        Self: Sized + Sync,
    {
        over_exec::put(self, id, spec, body).await
    }
    /// Keeps computer `id`'s filesystem as snapshot `meta.snapshot_id`, its processes
    /// frozen for the copy (SPEC §3.12). Only where [`Capability::Snapshots`] is declared.
    async fn snapshot_take(
        &self,
        id: &str,
        meta: &SnapshotMeta<'_>,
    ) -> Result<SnapshotRecord, BackendError> {
        let _ = (id, meta);
        Err(cannot(self.name(), Capability::Snapshots))
    }
    /// Every snapshot this backend keeps, of any computer (the controller picks the
    /// caller's).
    async fn snapshot_list(&self) -> Result<Vec<SnapshotRecord>, BackendError> {
        Ok(Vec::new())
    }
    /// Removes snapshot `snapshot_id` (computers made from it keep their files); `false`:
    /// there was none.
    async fn snapshot_delete(&self, snapshot_id: &str) -> Result<bool, BackendError> {
        let _ = snapshot_id;
        Err(cannot(self.name(), Capability::Snapshots))
    }
    /// Makes computer `id` as [`Place::create`] would, but with the files of `from`,
    /// which is left as it was. Only where [`Capability::Fork`] is declared.
    async fn fork(
        &self,
        from: ForkSource<'_>,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        let _ = (from, id, temporary, team, network, progress);
        Err(cannot(self.name(), Capability::Fork))
    }
    /// Computer `id` starts again from snapshot `snapshot_id`, as a factory reset does from
    /// the image (its processes and jobs end).
    async fn restore(
        &self,
        id: &str,
        snapshot_id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        let _ = (id, snapshot_id, temporary, team, network, progress);
        Err(cannot(self.name(), Capability::Snapshots))
    }
}

/// The refusal of a backend named `backend` asked for `cap`, which it does not declare.
pub fn cannot(backend: &str, cap: Capability) -> BackendError {
    let refused = Unsupported {
        capability: cap,
        backend: backend.to_owned(),
        reason: None,
    };
    BackendError::new(Failure::Unsupported, refused)
}
