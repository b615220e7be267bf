//! Docker and Podman containers as a [`Place`]; [`DockerError`]s classified once.

use shared::capabilities::{BackendKind, Capabilities, Capability, Unsupported};
use shared::jobs::{JobInfo, JobOutput};
use shared::result::ExecOutcome;

use super::{Docker, DockerError, container_name};
use crate::place::{BackendError, Failure, Place};
use crate::progress::Progress;
use crate::spec::{
    ContainerRecord, ExecSpec, FileChunks, FilePutSpec, FileSlice, FileWriteSpec, FileWritten,
    ForkSource, JobPoll, JobStart, SnapshotMeta, SnapshotRecord, UploadStream,
};

impl From<DockerError> for BackendError {
    fn from(e: DockerError) -> Self {
        let failure = match &e {
            DockerError::NotFound(_) | DockerError::NoSnapshot(_) => Failure::NotFound,
            DockerError::NotRunning(_) => Failure::NotRunning,
            DockerError::NotOurs { .. } => Failure::Conflict,
            DockerError::Unreachable(_)
            | DockerError::ImageUnavailable { .. }
            | DockerError::SupervisorUnavailable(_)
            | DockerError::Egress(_) => Failure::Unavailable,
            DockerError::Engine(_)
            | DockerError::DiskLimit { .. }
            | DockerError::Stream(_)
            | DockerError::Supervisor(_)
            | DockerError::Job(_) => Failure::Failed,
            DockerError::NoSuchJob(_) => Failure::NoSuchJob,
            DockerError::NoJobs(_) => Failure::Unsupported,
            DockerError::NoSuchFile(_) => Failure::NoSuchFile,
            DockerError::File(_) => Failure::File,
        };
        BackendError::new(failure, e)
    }
}

// `Docker::f(self, ..)` below is the inherent method (inherent methods win over the trait's).
impl Place for Docker {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    /// Without the supervisor a computer runs Engine API execs only, and keeps no job.
    fn capabilities(&self) -> Capabilities {
        let all = self.kind().capabilities();
        match self.places_supervisor() {
            true => all,
            false => all.without(Capability::Jobs),
        }
    }

    fn require(&self, cap: Capability) -> Result<(), Unsupported> {
        self.capabilities().require(self.name(), cap).map_err(|e| {
            e.because(
                "this server places no supervisor in its computers (--supervisor none, or none found beside the binary), so they run Engine API execs only; run the command in the foreground, or start the server with the built-in supervisor",
            )
        })
    }

    fn reserved(&self, id: &str) -> bool {
        self.pool_reserved(id)
    }

    fn fresh_slug(&self, temporary: bool) -> Option<String> {
        self.pool_slug(temporary)
    }

    fn background(&self) {
        self.start_pool();
    }

    async fn close(&self) {
        self.close_pool().await;
    }

    async fn sweep(&self) {
        if let Err(e) = self.reap_pool_leftovers().await {
            tracing::warn!(error = %e, "could not look for warm-pool computers of dead servers");
        }
        match self.sweep_channels().await {
            Ok(0) => {}
            Ok(swept) => tracing::info!(
                count = swept,
                "removed direct-channel directories of computers that are gone"
            ),
            Err(e) => tracing::warn!(error = %e, "could not sweep direct-channel directories"),
        }
        self.sweep_images().await;
    }

    fn instance(&self) -> &str {
        Docker::instance(self)
    }

    fn blocked_since(&self, id: &str, t: std::time::Instant) -> Vec<shared::egress::Blocked> {
        Docker::blocked_since(self, &container_name(id), t)
    }

    async fn find(&self, id: &str) -> Result<Option<ContainerRecord>, BackendError> {
        Ok(Docker::find(self, id).await?)
    }

    async fn list(&self) -> Result<Vec<ContainerRecord>, BackendError> {
        Ok(Docker::list(self).await?)
    }

    async fn create(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        Ok(Docker::create(self, id, temporary, team, network, progress).await?)
    }

    async fn start(&self, id: &str) -> Result<(), BackendError> {
        Ok(Docker::start(self, id).await?)
    }

    async fn restart(&self, id: &str) -> Result<(), BackendError> {
        Ok(Docker::restart(self, id).await?)
    }

    async fn remove(&self, id: &str) -> Result<(), BackendError> {
        Docker::remove(self, id).await?;
        Ok(())
    }

    async fn factory_reset(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        Ok(Docker::factory_reset(self, id, temporary, team, network, progress).await?)
    }

    async fn exec(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, BackendError> {
        Ok(Docker::exec(self, &container_name(id), spec).await?)
    }

    async fn job_start(
        &self,
        id: &str,
        spec: &ExecSpec,
        job: &JobStart,
    ) -> Result<(), BackendError> {
        Ok(Docker::job_start(self, &container_name(id), spec, job).await?)
    }

    async fn job_poll(
        &self,
        id: &str,
        job_id: &str,
        poll: &JobPoll,
    ) -> Result<JobOutput, BackendError> {
        Ok(Docker::job_poll(self, &container_name(id), job_id, poll).await?)
    }

    async fn job_list(&self, id: &str) -> Result<Vec<JobInfo>, BackendError> {
        Ok(Docker::job_list(self, &container_name(id)).await?)
    }

    async fn file_read(
        &self,
        id: &str,
        path: &str,
        offset: u64,
        length: u64,
    ) -> Result<FileSlice, BackendError> {
        Ok(Docker::file_read(self, &container_name(id), path, offset, length).await?)
    }

    async fn file_write(
        &self,
        id: &str,
        spec: &FileWriteSpec<'_>,
    ) -> Result<FileWritten, BackendError> {
        Ok(Docker::file_write(self, &container_name(id), spec).await?)
    }

    async fn file_stream(
        &self,
        id: &str,
        path: &str,
        from: u64,
        to: u64,
    ) -> Result<Option<FileChunks>, BackendError> {
        Ok(Docker::archive_stream(self, &container_name(id), path, from, to).await)
    }

    async fn file_put(
        &self,
        id: &str,
        spec: &FilePutSpec<'_>,
        body: UploadStream<'_>,
    ) -> Result<FileWritten, BackendError> {
        Ok(Docker::file_put(self, &container_name(id), spec, body).await?)
    }

    async fn snapshot_take(
        &self,
        id: &str,
        meta: &SnapshotMeta<'_>,
    ) -> Result<SnapshotRecord, BackendError> {
        Ok(Docker::snapshot_take(self, id, meta).await?)
    }

    async fn snapshot_list(&self) -> Result<Vec<SnapshotRecord>, BackendError> {
        Ok(Docker::snapshot_list(self).await?)
    }

    async fn snapshot_delete(&self, snapshot_id: &str) -> Result<bool, BackendError> {
        Ok(Docker::snapshot_delete(self, snapshot_id).await?)
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
        Ok(Docker::fork(self, from, id, temporary, team, network, progress).await?)
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
        Ok(Docker::restore(self, id, snapshot_id, temporary, team, network, progress).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_errors_are_classified_in_their_own_words() {
        for (e, want) in [
            (DockerError::NotFound("a".into()), Failure::NotFound),
            (DockerError::NotRunning("a".into()), Failure::NotRunning),
            (DockerError::NotOurs { name: "a".into() }, Failure::Conflict),
            (DockerError::Unreachable("x".into()), Failure::Unavailable),
            (DockerError::Engine("500: x".into()), Failure::Failed),
            (
                DockerError::NoSuchFile("/x does not exist".into()),
                Failure::NoSuchFile,
            ),
            (DockerError::File("/x is a directory".into()), Failure::File),
        ] {
            let words = e.to_string();
            let b = BackendError::from(e);
            assert_eq!((b.failure, b.to_string()), (want, words));
        }
    }
}
