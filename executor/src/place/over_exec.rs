//! The file tools and jobs on any backend that can exec (`shared::files::over_exec`,
//! `shared::jobs::over_exec`): what Fly, E2B and Modal computers serve, through their own
//! exec, until a provider API is wired in. The `Place` trait's default file and job
//! methods land here; Docker and WASM override them with their direct paths.

use std::time::Duration;

use shared::files::over_exec::{
    self, OUTPUT_LIMIT, OverExec, PathInfo, Shell, Staged, TIMEOUT_MS, WriteHow,
};
use shared::jobs::over_exec::{self as jobs, JobsOverExec};
use shared::jobs::{JobInfo, JobOutput};
use shared::result::ExecOutcome;

use crate::place::{BackendError, Failure, Place};
use crate::spec::{
    ExecSpec, FilePutSpec, FileSlice, FileWriteSpec, FileWritten, JobPoll, JobStart, UploadStream,
};

/// A backend's exec on one computer, as a [`Shell`].
pub struct PlaceShell<'a, P> {
    pub place: &'a P,
    pub id: &'a str,
}

impl<P: Place + Sync> Shell for PlaceShell<'_, P> {
    type Error = BackendError;

    async fn run(
        &self,
        argv: Vec<String>,
        stdin: Option<String>,
    ) -> Result<ExecOutcome, BackendError> {
        let spec = ExecSpec {
            argv,
            shell_command: None,
            stdin,
            working_directory: None,
            timeout: Duration::from_millis(TIMEOUT_MS),
            output_limit: OUTPUT_LIMIT,
            env: Vec::new(),
            progress: crate::progress::Progress::default(),
        };
        self.place.exec(self.id, &spec).await
    }

    fn moves_files(&self) -> bool {
        self.place.moves_files()
    }

    async fn stat(&self, path: &str) -> Result<Option<PathInfo>, OverExec<BackendError>> {
        self.place.file_api_stat(self.id, path).await
    }

    async fn download(&self, path: &str) -> Result<Vec<u8>, OverExec<BackendError>> {
        self.place.file_api_download(self.id, path).await
    }

    async fn upload(&self, path: &str, bytes: Vec<u8>) -> Result<(), OverExec<BackendError>> {
        self.place.file_api_upload(self.id, path, bytes).await
    }
}

fn classified(e: OverExec<BackendError>) -> BackendError {
    match e {
        OverExec::Shell(e) => e,
        OverExec::NoSuchFile(m) => BackendError::new(Failure::NoSuchFile, m),
        OverExec::Refused(m) => BackendError::new(Failure::File, m),
    }
}

fn how(
    path: &str,
    append: bool,
    create_only: bool,
    mode: Option<u32>,
    make_dirs: bool,
) -> WriteHow<'_> {
    WriteHow::new(path, append, create_only, mode, make_dirs, rand::random())
}

pub async fn read<P: Place + Sync>(
    place: &P,
    id: &str,
    path: &str,
    offset: u64,
    length: u64,
) -> Result<FileSlice, BackendError> {
    over_exec::read(&PlaceShell { place, id }, path, offset, length)
        .await
        .map_err(classified)
}

pub async fn write<P: Place + Sync>(
    place: &P,
    id: &str,
    spec: &FileWriteSpec<'_>,
) -> Result<FileWritten, BackendError> {
    let how = how(
        spec.path,
        spec.append,
        spec.create_only,
        spec.mode,
        spec.make_dirs,
    );
    over_exec::write(&PlaceShell { place, id }, how, spec.data)
        .await
        .map_err(classified)
}

/// Streams `body` in staged slices of `over_exec::SLICE`; a body that breaks off removes
/// the staged bytes, leaving the old file.
pub async fn put<P: Place + Sync>(
    place: &P,
    id: &str,
    spec: &FilePutSpec<'_>,
    body: UploadStream<'_>,
) -> Result<FileWritten, BackendError> {
    use futures_util::StreamExt;
    let shell = PlaceShell { place, id };
    let mut staged = Staged::new(
        &shell,
        how(
            spec.path,
            false,
            spec.create_only,
            spec.mode,
            spec.make_dirs,
        ),
    );
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(bytes) => staged.add(&bytes).await.map_err(classified)?,
            Err(why) => {
                staged.abort().await;
                return Err(BackendError::new(
                    Failure::File,
                    format!(
                        "{}: the upload broke off ({why}); the old file is unchanged",
                        spec.path
                    ),
                ));
            }
        }
    }
    staged.commit().await.map_err(classified)
}

fn job_classified(e: JobsOverExec<BackendError>) -> BackendError {
    match e {
        JobsOverExec::Shell(e) => e,
        JobsOverExec::NoSuchJob(m) => BackendError::new(Failure::NoSuchJob, m),
        JobsOverExec::Refused(m) | JobsOverExec::Failed(m) => BackendError::new(Failure::Failed, m),
        JobsOverExec::Unreadable(e) => BackendError::new(Failure::Failed, e.to_string()),
    }
}

pub async fn job_start<P: Place + Sync>(
    place: &P,
    id: &str,
    spec: &ExecSpec,
    job: &JobStart,
) -> Result<(), BackendError> {
    let program = spec.provider_argv();
    let start = jobs::Start {
        job_id: &job.job_id,
        command: &job.command,
        program: &program,
        timeout_ms: u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX),
    };
    jobs::start(&PlaceShell { place, id }, &start)
        .await
        .map_err(job_classified)
}

pub async fn job_poll<P: Place + Sync>(
    place: &P,
    id: &str,
    job_id: &str,
    poll: &JobPoll,
) -> Result<JobOutput, BackendError> {
    jobs::poll(&PlaceShell { place, id }, job_id, poll)
        .await
        .map_err(job_classified)
}

pub async fn job_list<P: Place + Sync>(place: &P, id: &str) -> Result<Vec<JobInfo>, BackendError> {
    jobs::list(&PlaceShell { place, id })
        .await
        .map_err(job_classified)
}

/// Ends computer `id`'s jobs before a restart (best effort, at most 10 s: a computer that
/// does not answer loses them with the restart anyway).
pub async fn end_jobs<P: Place + Sync>(place: &P, id: &str) {
    let shell = PlaceShell { place, id };
    let _ = tokio::time::timeout(Duration::from_secs(10), jobs::end_all(&shell)).await;
}
