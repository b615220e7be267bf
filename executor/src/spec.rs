//! Backend-neutral types: what every backend (Docker, WASM, Fly, E2B, Modal) takes and
//! gives, so no backend imports another and the registry imports none of their modules for
//! its types.

use std::path::PathBuf;
use std::time::Duration;

use shared::files::BrokenStream;

/// One computer as its backend shows it (the shared provider record).
pub type ContainerRecord = shared::providers::computers::Computer;

/// One snapshot as its backend keeps it (SPEC §3.12); the controller decides who reaches
/// it and answers with the caller's ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRecord {
    pub snapshot_id: String,
    /// The backend key of the computer it was taken of.
    pub of: String,
    /// The team whose computer it was (`None`: a local server's).
    pub team: Option<String>,
    /// A temporary computer's owner: only it reaches the snapshot, which goes with it.
    pub owner: Option<String>,
    pub label: String,
    /// When it was taken, in milliseconds since the epoch.
    pub created_ms: u64,
    /// What it holds beyond the base image, in bytes.
    pub size_bytes: u64,
    /// It keeps running processes and memory too.
    pub memory: bool,
    /// The network policy of the computer it was taken of (a fork from it gets it).
    pub network: Option<shared::egress::Policy>,
}

/// What a new snapshot carries besides its files (the backend adds its size).
#[derive(Debug, Clone, Copy)]
pub struct SnapshotMeta<'a> {
    pub snapshot_id: &'a str,
    pub label: &'a str,
    pub team: Option<&'a str>,
    pub owner: Option<&'a str>,
    pub created_ms: u64,
    /// The computer's network policy.
    pub network: &'a shared::egress::Policy,
}

impl SnapshotMeta<'_> {
    /// The record of this snapshot of computer `of`, holding `size_bytes`.
    pub fn record(&self, of: &str, size_bytes: u64, memory: bool) -> SnapshotRecord {
        SnapshotRecord {
            snapshot_id: self.snapshot_id.to_owned(),
            of: of.to_owned(),
            team: self.team.map(str::to_owned),
            owner: self.owner.map(str::to_owned),
            label: self.label.to_owned(),
            created_ms: self.created_ms,
            size_bytes,
            memory,
            network: Some(self.network.clone()),
        }
    }
}

/// What a fork starts from, in backend names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkSource<'a> {
    /// A running computer's filesystem as it is now (its backend key).
    Computer(&'a str),
    /// A snapshot, by id.
    Snapshot(&'a str),
}

/// What to run, resolved against the server's defaults (timeout, output limit, shell).
#[derive(Debug, Clone)]
pub struct ExecSpec {
    /// The program: argv, or `[shell, "-c", command]` (shell `None`: bash, else /bin/sh).
    pub argv: Vec<String>,
    pub shell_command: Option<(Option<String>, String)>,
    pub stdin: Option<String>,
    pub working_directory: Option<String>,
    pub timeout: Duration,
    pub output_limit: usize,
    /// Added to the computer's environment for this command (validated: SPEC §3.10).
    pub env: Vec<(String, String)>,
    /// Where the newest output line goes while the command runs (a no-op by default).
    pub progress: crate::progress::Progress,
}

impl ExecSpec {
    /// `env` as `NAME=value` strings.
    pub fn env_pairs(&self) -> Vec<String> {
        self.env.iter().map(|(k, v)| format!("{k}={v}")).collect()
    }

    /// The argv a provider's computer runs (Fly, E2B, Modal): the shared cd wrapper for
    /// the working directory, `env` for the call's environment, then the program.
    pub fn provider_argv(&self) -> Vec<String> {
        use shared::providers::computers::{Program, program_argv};
        let program = match &self.shell_command {
            Some((shell, command)) => Program::Shell {
                shell: shell.as_deref(),
                command,
            },
            None => Program::Argv(&self.argv),
        };
        program_argv(self.working_directory.as_deref(), &self.env, program)
    }

    /// The argv to start: `args`, or `[shell, "-c", command]` with `auto_shell` standing
    /// for "bash if the image has it, else /bin/sh".
    pub fn program(&self, auto_shell: &str) -> Vec<String> {
        match &self.shell_command {
            Some((shell, command)) => vec![
                shell.clone().unwrap_or_else(|| auto_shell.to_owned()),
                "-c".to_owned(),
                command.clone(),
            ],
            None => self.argv.clone(),
        }
    }
}

/// Where a command the registry starts as a job (SPEC §3.8) goes.
#[derive(Debug, Clone)]
pub struct JobStart {
    /// The server's unguessable id for it.
    pub job_id: String,
    /// The command line, as lists show it.
    pub command: String,
}

/// What one read of a job does: write, close, signal (in that order), then wait and read.
pub use shared::jobs::over_exec::Poll as JobPoll;

/// WASM backend settings.
#[derive(Debug, Clone)]
pub struct WasmConfig {
    /// The CPython WASI module behind `python3` on toolbox computers (`--wasm-python`).
    pub python: Option<std::path::PathBuf>,
    pub max_memory_bytes: usize,
    /// The memory budget of one run of the toolbox's host shell (`--wasm-shell-memory`).
    pub shell_memory_bytes: usize,
    /// All kept jobs' unread output this server may hold (`--wasm-job-output-budget`).
    pub job_output_budget_bytes: u64,
    pub fuel: Option<u64>,
    pub cache_dir: PathBuf,
}

/// Parses a Docker-style size: bytes, or a number with b/k/m/g (case-insensitive).
pub fn parse_size(s: &str) -> Option<i64> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix('b')
        .filter(|r| !r.is_empty() && r.ends_with(|c: char| c.is_ascii_alphabetic()))
        .unwrap_or(&t);
    let (num, mult) = match t.chars().last()? {
        'k' => (&t[..t.len() - 1], 1i64 << 10),
        'm' => (&t[..t.len() - 1], 1 << 20),
        'g' => (&t[..t.len() - 1], 1 << 30),
        'b' => (&t[..t.len() - 1], 1),
        _ => (t, 1),
    };
    let n: f64 = num.parse().ok()?;
    if !(n.is_finite() && n > 0.0) {
        return None;
    }
    let bytes = n * mult as f64;
    (bytes < i64::MAX as f64).then_some(bytes as i64)
}

/// One slice of a regular file, and its metadata (SPEC §3.9).
pub use shared::files::Slice as FileSlice;
/// A finished write: the file's size and whole-file SHA-256.
pub use shared::files::Written as FileWritten;

/// What to write (validated: an absolute path, at most one slice of bytes).
#[derive(Debug, Clone, Copy)]
pub struct FileWriteSpec<'a> {
    pub path: &'a str,
    pub data: &'a [u8],
    /// Add to the end (creating the file if missing), instead of an atomic replace.
    pub append: bool,
    /// Refuse, changing nothing, if the file exists.
    pub create_only: bool,
    /// `None`: 0644 for a new or replaced file; an appended file keeps its own.
    pub mode: Option<u32>,
    /// Create missing parent directories (0755).
    pub make_dirs: bool,
}

/// The bytes of a streamed upload as they arrive (an HTTP body): a chunk, or why the
/// stream broke (the client went away, `--file-limit` was passed). A backend that sees an
/// error aborts, leaving the old file as it was.
pub type UploadStream<'a> =
    &'a mut (dyn futures_util::Stream<Item = Result<Vec<u8>, BrokenStream>> + Send + Unpin);

/// Where a streamed upload goes: always an atomic replace (or a create, `create_only`).
#[derive(Debug, Clone, Copy)]
pub struct FilePutSpec<'a> {
    pub path: &'a str,
    pub create_only: bool,
    /// `None`: 0644.
    pub mode: Option<u32>,
    pub make_dirs: bool,
    /// The body's length when the client said it (`Content-Length`): a backend may take
    /// a faster path that needs it up front (Docker: the archive API).
    pub size: Option<u64>,
}

/// A range of a file streamed by a backend's fast path: chunks in order, or why the
/// stream broke.
pub type FileChunks = tokio::sync::mpsc::Receiver<Result<Vec<u8>, BrokenStream>>;
