//! An in-memory backend for the controller's tests: computers, files and jobs in maps,
//! no engine, no clock of its own. Built for tests only (`Backend::Fake`).
//!
//! Commands are a tiny language, enough to see which computer ran what:
//! - `echo WORDS` prints WORDS and a newline;
//! - `exit N` ends with code N;
//! - `hostname` prints the computer's key;
//! - `fail` is a backend failure (the engine refused);
//! - `note MS` sends a progress notification, then takes MS milliseconds;
//! - anything else, and any argv, prints itself joined by spaces.
//!
//! Jobs end at once with their command's output. Files are bytes by path.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use shared::capabilities::{BackendKind, Capabilities};
use shared::files::sha256_hex;
use shared::jobs::{JobInfo, JobOutput};
use shared::lifecycle::ComputerState;
use shared::result::ExecOutcome;

use crate::place::{BackendError, Failure, Place};
use crate::progress::Progress;
use crate::spec::{
    ContainerRecord, ExecSpec, FilePutSpec, FileSlice, FileWriteSpec, FileWritten, ForkSource,
    JobPoll, JobStart, SnapshotMeta, SnapshotRecord, UploadStream,
};

/// One computer of the fake.
#[derive(Debug, Clone)]
struct Machine {
    record: ContainerRecord,
    files: BTreeMap<String, Vec<u8>>,
    /// Ended jobs not read yet: id, command, output.
    jobs: BTreeMap<String, (String, ExecOutcome)>,
}

#[derive(Debug, Default)]
struct State {
    machines: BTreeMap<String, Machine>,
    /// Snapshots by id: the record and the files.
    snapshots: BTreeMap<String, (SnapshotRecord, BTreeMap<String, Vec<u8>>)>,
    /// Every call made, as `op key` (`create box`, `exec box`, …), in order.
    calls: Vec<String>,
    made: u64,
}

/// The fake backend: cheap to clone, one state shared by the clones.
#[derive(Debug, Clone)]
pub struct Fake {
    kind: BackendKind,
    capabilities: Capabilities,
    instance: String,
    state: Arc<Mutex<State>>,
}

impl Default for Fake {
    fn default() -> Self {
        Self::new(BackendKind::Toolbox.capabilities())
    }
}

impl Fake {
    /// A fake that declares `capabilities` (as a [`BackendKind::Toolbox`]).
    pub fn new(capabilities: Capabilities) -> Self {
        Self {
            kind: BackendKind::Toolbox,
            capabilities,
            instance: "fake-instance".into(),
            state: Arc::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts a computer at the backend behind the controller's back (made by another
    /// server: `instance` names it for a temporary).
    pub fn plant(&self, key: &str, temporary: bool, instance: Option<&str>, team: Option<&str>) {
        let mut s = self.state();
        s.made += 1;
        let record = ContainerRecord {
            computer_id: key.to_owned(),
            provider_id: format!("fake{:08}", s.made),
            temporary,
            instance: instance.map(str::to_owned),
            host: Some("fake-host".into()),
            image: "fake".into(),
            state: ComputerState::Stopped,
            created_at: String::new(),
            team: team.map(str::to_owned),
            network: None,
        };
        s.machines.insert(
            key.to_owned(),
            Machine {
                record,
                files: BTreeMap::new(),
                jobs: BTreeMap::new(),
            },
        );
    }

    /// The backend keys of the computers it holds, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.state().machines.keys().cloned().collect()
    }

    /// The calls made so far (`op key`), and forgets them.
    pub fn take_calls(&self) -> Vec<String> {
        std::mem::take(&mut self.state().calls)
    }

    fn called(&self, op: &str, key: &str) {
        self.state().calls.push(format!("{op} {key}"));
    }

    fn with<T>(
        &self,
        key: &str,
        f: impl FnOnce(&mut Machine) -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        match self.state().machines.get_mut(key) {
            Some(m) => f(m),
            None => Err(missing(key)),
        }
    }

    fn running(&self, key: &str) -> Result<(), BackendError> {
        self.with(key, |m| match m.record.state.is_running() {
            true => Ok(()),
            false => Err(BackendError::new(
                Failure::NotRunning,
                format!("{key} is stopped"),
            )),
        })
    }

    fn run(&self, key: &str, spec: &ExecSpec) -> Result<ExecOutcome, BackendError> {
        self.running(key)?;
        let words = match &spec.shell_command {
            Some((_, command)) => command.clone(),
            None => spec.argv.join(" "),
        };
        let mut out = ExecOutcome::default();
        match words.split_once(' ').unwrap_or((&words, "")) {
            ("echo", rest) => out.stdout = format!("{rest}\n").into_bytes(),
            ("exit", code) => out.exit_code = code.trim().parse().unwrap_or(2),
            ("hostname", _) => out.stdout = format!("{key}\n").into_bytes(),
            // `note MS BYTES`: after its note and its wait, BYTES bytes of output.
            ("note", rest) => match rest.split_whitespace().nth(1).map(str::parse::<usize>) {
                Some(Ok(n)) => out.stdout = vec![b'a'; n],
                _ => out.stdout = format!("{words}\n").into_bytes(),
            },
            ("fail", _) => return Err(BackendError::new(Failure::Failed, "the engine refused")),
            _ => out.stdout = format!("{words}\n").into_bytes(),
        }
        Ok(out)
    }
}

impl Fake {
    fn snapshot_files(&self, sid: &str) -> Result<BTreeMap<String, Vec<u8>>, BackendError> {
        match self.state().snapshots.get(sid) {
            Some((_, files)) => Ok(files.clone()),
            None => Err(BackendError::new(
                Failure::NotFound,
                format!("no snapshot {sid}"),
            )),
        }
    }
}

fn missing(key: &str) -> BackendError {
    BackendError::new(Failure::NotFound, format!("no computer {key}"))
}

impl Place for Fake {
    fn kind(&self) -> BackendKind {
        self.kind
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn instance(&self) -> &str {
        &self.instance
    }

    async fn find(&self, id: &str) -> Result<Option<ContainerRecord>, BackendError> {
        Ok(self.state().machines.get(id).map(|m| m.record.clone()))
    }

    async fn list(&self) -> Result<Vec<ContainerRecord>, BackendError> {
        Ok(self
            .state()
            .machines
            .values()
            .map(|m| m.record.clone())
            .collect())
    }

    async fn create(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        _progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        self.called("create", id);
        if self.state().machines.contains_key(id) {
            return Err(BackendError::new(Failure::Conflict, format!("{id} exists")));
        }
        self.plant(id, temporary, Some(&self.instance), team);
        self.with(id, |m| {
            m.record.state = ComputerState::Running;
            // Recorded like Docker's label.
            m.record.network = Some(network.clone());
            Ok(m.record.clone())
        })
    }

    async fn start(&self, id: &str) -> Result<(), BackendError> {
        self.called("start", id);
        self.with(id, |m| {
            m.record.state = ComputerState::Running;
            Ok(())
        })
    }

    async fn restart(&self, id: &str) -> Result<(), BackendError> {
        self.called("restart", id);
        self.with(id, |m| {
            m.record.state = ComputerState::Running;
            m.jobs.clear();
            Ok(())
        })
    }

    async fn remove(&self, id: &str) -> Result<(), BackendError> {
        self.called("remove", id);
        match self.state().machines.remove(id) {
            Some(_) => Ok(()),
            None => Err(missing(id)),
        }
    }

    async fn factory_reset(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        self.remove(id).await?;
        self.create(id, temporary, team, network, progress).await
    }

    /// A copy of the files; its size is their bytes.
    async fn snapshot_take(
        &self,
        id: &str,
        meta: &SnapshotMeta<'_>,
    ) -> Result<SnapshotRecord, BackendError> {
        self.called("snapshot", id);
        let files = self.with(id, |m| Ok(m.files.clone()))?;
        let size = files.values().map(|f| f.len() as u64).sum();
        let record = meta.record(id, size, false);
        self.state()
            .snapshots
            .insert(meta.snapshot_id.to_owned(), (record.clone(), files));
        Ok(record)
    }

    async fn snapshot_list(&self) -> Result<Vec<SnapshotRecord>, BackendError> {
        Ok(self
            .state()
            .snapshots
            .values()
            .map(|(r, _)| r.clone())
            .collect())
    }

    async fn snapshot_delete(&self, snapshot_id: &str) -> Result<bool, BackendError> {
        self.called("snapshot_delete", snapshot_id);
        Ok(self.state().snapshots.remove(snapshot_id).is_some())
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
        let files = match from {
            ForkSource::Computer(key) => self.with(key, |m| Ok(m.files.clone()))?,
            ForkSource::Snapshot(sid) => self.snapshot_files(sid)?,
        };
        let made = self.create(id, temporary, team, network, progress).await?;
        self.with(id, |m| {
            m.files = files;
            Ok(made)
        })
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
        let files = self.snapshot_files(snapshot_id)?;
        let made = self
            .factory_reset(id, temporary, team, network, progress)
            .await?;
        self.with(id, |m| {
            m.files = files;
            Ok(made)
        })
    }

    async fn exec(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, BackendError> {
        self.called("exec", id);
        if let Some(ms) = spec
            .shell_command
            .as_ref()
            .and_then(|(_, c)| c.strip_prefix("note "))
        {
            spec.progress.report("working");
            let ms = ms
                .split_whitespace()
                .next()
                .and_then(|ms| ms.parse().ok())
                .unwrap_or(0);
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        self.run(id, spec)
    }

    async fn job_start(
        &self,
        id: &str,
        spec: &ExecSpec,
        job: &JobStart,
    ) -> Result<(), BackendError> {
        self.called("job_start", id);
        let out = self.run(id, spec)?;
        self.with(id, |m| {
            m.jobs
                .insert(job.job_id.clone(), (job.command.clone(), out));
            Ok(())
        })
    }

    async fn job_poll(
        &self,
        id: &str,
        job_id: &str,
        poll: &JobPoll,
    ) -> Result<JobOutput, BackendError> {
        self.called("job_poll", id);
        self.with(id, |m| {
            let (_, out) = match poll.peek {
                true => m.jobs.get(job_id).cloned(),
                false => m.jobs.remove(job_id),
            }
            .ok_or_else(|| BackendError::new(Failure::NoSuchJob, format!("no job {job_id}")))?;
            Ok(JobOutput {
                job_id: job_id.to_owned(),
                stdout: out.stdout,
                stderr: out.stderr,
                running: false,
                exit_code: Some(out.exit_code),
                duration_ms: 0,
                dropped_bytes: 0,
                timed_out_after: None,
                oom_killed: false,
                peek: poll.peek,
            })
        })
    }

    async fn job_list(&self, id: &str) -> Result<Vec<JobInfo>, BackendError> {
        self.with(id, |m| {
            Ok(m.jobs
                .iter()
                .map(|(job_id, (command, out))| {
                    JobInfo::new(
                        job_id.clone(),
                        command.clone(),
                        false,
                        0,
                        Some(out.exit_code),
                    )
                })
                .collect())
        })
    }

    async fn file_read(
        &self,
        id: &str,
        path: &str,
        offset: u64,
        length: u64,
    ) -> Result<FileSlice, BackendError> {
        self.called("file_read", id);
        self.with(id, |m| {
            let bytes = m.files.get(path).ok_or_else(|| {
                BackendError::new(Failure::NoSuchFile, format!("{path}: No such file"))
            })?;
            let from = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            let to = from
                .saturating_add(usize::try_from(length).unwrap_or(usize::MAX))
                .min(bytes.len());
            Ok(FileSlice {
                size: bytes.len() as u64,
                offset,
                data: bytes[from..to].to_vec(),
                mode: 0o644,
                mtime_secs: 0,
                mtime_nanos: 0,
            })
        })
    }

    async fn file_write(
        &self,
        id: &str,
        spec: &FileWriteSpec<'_>,
    ) -> Result<FileWritten, BackendError> {
        self.called("file_write", id);
        self.with(id, |m| {
            if spec.create_only && m.files.contains_key(spec.path) {
                return Err(BackendError::new(
                    Failure::File,
                    format!("{}: File exists", spec.path),
                ));
            }
            let file = m.files.entry(spec.path.to_owned()).or_default();
            if !spec.append {
                file.clear();
            }
            file.extend_from_slice(spec.data);
            Ok(FileWritten {
                size: file.len() as u64,
                sha256: sha256_hex(file),
            })
        })
    }

    async fn file_put(
        &self,
        id: &str,
        spec: &FilePutSpec<'_>,
        body: UploadStream<'_>,
    ) -> Result<FileWritten, BackendError> {
        use futures_util::StreamExt;
        self.called("file_put", id);
        let mut bytes = Vec::new();
        while let Some(chunk) = body.next().await {
            bytes.extend(chunk.map_err(|e| BackendError::new(Failure::Failed, e))?);
        }
        let write = FileWriteSpec {
            path: spec.path,
            data: &bytes,
            append: false,
            create_only: spec.create_only,
            mode: spec.mode,
            make_dirs: spec.make_dirs,
        };
        self.file_write(id, &write).await
    }
}
