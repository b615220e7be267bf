//! WebAssembly computers: no daemon, a directory per computer, commands as WASI instances.
//!
//! Two kinds share this backend:
//! - the toolbox (`--backend go_busybox`, and the embedded default without Docker): our
//!   multicall WASI module (`executor/toolbox`), with the host as the shell ([`msc_shell`]):
//!   every simple command of a `command` is a fresh instance, pipelines are connected by
//!   the host;
//! - a custom module (`--backend wasm --wasm-path X.wasm`): any WASI command module, run
//!   with argv from `args`, or `[module, "-c", command]`.
//!
//! A computer is `<state-dir>/wasm/<id>/`: `computer.json` (its record), `fs/`, the
//! writable layer the guest sees as `/` (with `/tmp`, `/home`, `/root`), `etc/` and
//! `proc/`, its read-only `/etc` and `/proc` ([`procs`]: its running kept jobs show
//! there), and `jobs/`, a marker a kept job ([`marks`]); the rest of the read-only base
//! (`/bin`, `/usr/bin`, `/dev`) is shared ([`base`]). Permanent computers are found again after a restart; temporaries
//! are removed by their server, or reaped by the next start when that server died.
//! Background jobs (`&`) live in a per-computer table between calls; restart ends them,
//! factory reset ends them, empties `fs/` and writes the base's `/etc` again. Kept jobs'
//! unread output lives in this server, bounded in all by `--wasm-job-output-budget`
//! ([`budget`]); when this server stops, they end with it, and a later server says so
//! of their ids ([`marks`]).
//!
//! With a CPython WASI module (`--wasm-python`, or `<state-dir>/python.wasm`), the toolbox
//! shell also runs `python3` and `python` ([`Python`]): one instance of that module a
//! command, compiled once per machine and cached like the toolbox, loaded in the
//! background after it.

mod base;
pub mod budget;
pub mod capture;
pub mod engine;
mod exec;
mod files;
mod jobs;
mod layers;
mod marks;
mod place;
mod procs;
mod snapshots;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

use crate::spec::ContainerRecord;
use engine::{NotRunnable, Program, Runtime};
use exec::list_utilities;

/// The toolbox module built into this binary (empty when built without it).
pub const EMBEDDED_TOOLBOX: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/msc-toolbox.wasm"));

/// [`engine::module_key`] of [`EMBEDDED_TOOLBOX`], computed at build time (so a start with
/// a warm cache never touches the embedded bytes).
const EMBEDDED_TOOLBOX_KEY: &str = include_str!(concat!(env!("OUT_DIR"), "/msc-toolbox.key"));

/// A module's bytes: the embedded toolbox, or read from a file.
#[derive(Debug, Clone)]
enum Source {
    Static(&'static [u8]),
    Owned(Arc<Vec<u8>>),
}

impl Source {
    fn bytes(&self) -> &[u8] {
        match self {
            Source::Static(b) => b,
            Source::Owned(b) => b,
        }
    }

    fn key(&self) -> u64 {
        match self {
            Source::Static(_) => u64::from_str_radix(EMBEDDED_TOOLBOX_KEY.trim(), 16)
                .unwrap_or_else(|_| engine::module_key(self.bytes())),
            Source::Owned(b) => engine::module_key(b),
        }
    }
}

/// Errors of the WASM backend. Messages are for the agent: no host paths.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    #[error(
        "computer {0:?} does not exist; create it with computer_create or pass it to the exec tool"
    )]
    NotFound(String),
    #[error("the WebAssembly module is not available: {0}")]
    Module(String),
    #[error("the computer's storage failed: {0}")]
    Storage(String),
    #[error(
        "this build has no WebAssembly toolbox: build it with scripts/build, or put msc-toolbox.wasm beside the binary"
    )]
    NoToolbox,
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
    /// A file tool's path does not exist (the message says what to do).
    #[error("{0}")]
    NoSuchFile(String),
    /// A file tool was refused, changing nothing (the message says why).
    #[error("{0}")]
    File(String),
    /// No such kept job on the computer (the message names it).
    #[error("{0}")]
    NoSuchJob(String),
    /// No such kept job in this server, and what became of it ([`marks`]: it ended with
    /// the server process that ran it, or runs in another).
    #[error("{0}")]
    JobGone(String),
    /// A job request was refused (the message says why).
    #[error("{0}")]
    Job(String),
    /// No such snapshot (SPEC §3.12).
    #[error("snapshot {0:?} does not exist; computer_snapshots lists a computer's snapshots")]
    NoSnapshot(String),
    /// A fork's new computer exists already.
    #[error("computer {0:?} exists already; fork into a new computer_id")]
    Exists(String),
}

/// The toolbox module: embedded, or `msc-toolbox.wasm` beside the binary.
fn toolbox_source() -> Result<Source, WasmError> {
    if !EMBEDDED_TOOLBOX.is_empty() {
        return Ok(Source::Static(EMBEDDED_TOOLBOX));
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("msc-toolbox.wasm")))
        .and_then(|p| std::fs::read(p).ok())
        .filter(|b| b.starts_with(b"\0asm"))
        .map(|b| Source::Owned(Arc::new(b)))
        .ok_or(WasmError::NoToolbox)
}

/// Opens the WASM backend: the toolbox (`custom` = None), loaded in the background, or the
/// user's module, checked before this returns (a bad module stops the start).
pub async fn open(
    custom: Option<&Path>,
    cfg: &crate::spec::WasmConfig,
    state_dir: &Path,
    instance: String,
    host: String,
) -> Result<Wasm, WasmError> {
    let runtime = Runtime::new(
        engine::Limits {
            max_memory: cfg.max_memory_bytes,
            fuel: cfg.fuel,
        },
        cfg.cache_dir.clone(),
    )?;
    let (flavor, source) = match custom {
        None => (Flavor::Toolbox, toolbox_source()?),
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|source| engine::EngineError::Read {
                path: path.display().to_string(),
                source,
            })?;
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "module".into());
            if !bytes.starts_with(b"\0asm") {
                return Err(engine::EngineError::Invalid {
                    name: path.display().to_string(),
                    detail: "the file does not start with the WebAssembly magic bytes \\0asm"
                        .into(),
                }
                .into());
            }
            (Flavor::Custom(name), Source::Owned(Arc::new(bytes)))
        }
    };
    let mut wasm = Wasm::new(flavor, runtime, source, state_dir, instance, host)?;
    if matches!(wasm.flavor, Flavor::Toolbox) {
        wasm.python = cfg.python.clone().map(Python::new);
    }
    wasm.shell_memory = cfg.shell_memory_bytes;
    wasm.max_memory = cfg.max_memory_bytes as u64;
    wasm.kept = Arc::new(jobs::KeptJobs::new(cfg.job_output_budget_bytes));
    if custom.is_some() {
        // Refuse a module that is not a WASI command before serving anything.
        wasm.ready().await?;
    } else {
        // Compile (first start on this machine) or load the toolbox in the background.
        let w = wasm.clone();
        tokio::spawn(async move {
            if let Err(e) = w.ready().await {
                tracing::error!(error = %e, "the WebAssembly toolbox cannot be loaded");
            }
            // Then python3's module, so its first command does not wait for a compile.
            if let Some(Err(e)) = w.python_program().await {
                tracing::error!(error = %e, "the CPython module for python3 cannot be loaded");
            }
        });
    }
    Ok(wasm)
}

fn storage(e: impl std::fmt::Display) -> WasmError {
    WasmError::Storage(e.to_string())
}

/// Which program runs the commands.
#[derive(Debug, Clone)]
pub enum Flavor {
    /// The toolbox, with the host as the shell.
    Toolbox,
    /// A user's module and its display name (the file stem).
    Custom(String),
}

/// A computer's record on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Meta {
    computer_id: String,
    sandbox_id: String,
    temporary: bool,
    instance: Option<String>,
    host: Option<String>,
    image: String,
    created_at: String,
    /// The gateway's team, on an executor (absent in older files and on local servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    team: Option<String>,
}

impl Meta {
    /// The caller's id of this computer (its hostname): the key without the team's
    /// prefix, as Docker names its containers' hosts.
    fn caller_id(&self) -> &str {
        shared::teams::id_of(self.team.as_deref(), &self.computer_id).unwrap_or(&self.computer_id)
    }
}

/// The program, loaded once (compiling it the first time on this machine).
type Loaded = Arc<OnceCell<Result<Loaded1, NotRunnable>>>;

/// The names `python3` answers to in the shell and in `/bin` and `/usr/bin`.
pub(super) const PYTHON_NAMES: [&str; 2] = ["python3", "python"];

/// `python3` on toolbox computers: the CPython WASI module's path, and its program once
/// loaded (read, hashed and compiled or taken from the cache, once).
#[derive(Debug, Clone)]
pub(super) struct Python {
    path: PathBuf,
    loaded: Arc<OnceCell<Result<Program, NotRunnable>>>,
}

impl Python {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            loaded: Arc::default(),
        }
    }
}

#[derive(Debug, Clone)]
struct Loaded1 {
    program: Program,
    /// The toolbox's utilities (empty for a custom module).
    names: Arc<std::collections::BTreeSet<String>>,
    /// The shared read-only base ([`base`]).
    base: Arc<PathBuf>,
}

/// The WASM backend.
#[derive(Debug, Clone)]
pub struct Wasm {
    flavor: Flavor,
    runtime: Runtime,
    source: Source,
    loaded: Loaded,
    dir: PathBuf,
    dev: PathBuf,
    instance: String,
    host: String,
    /// The memory budget of one run of the host shell (`--wasm-shell-memory`).
    shell_memory: usize,
    /// The memory limit of one instance (`--wasm-max-memory`), shown in `/proc/meminfo`.
    max_memory: u64,
    /// Each computer's background jobs between calls (issue 16), by computer id.
    jobs: JobTables,
    /// `python3`, when a CPython module is configured (toolbox only).
    python: Option<Python>,
    /// The kept jobs (`yield_ms`, SPEC §3.8) of every computer ([`jobs`]).
    kept: Arc<jobs::KeptJobs>,
    /// The computers this server brought up to date since it started ([`Wasm::prepare`]).
    prepared: Arc<tokio::sync::Mutex<std::collections::HashSet<String>>>,
}

/// The background jobs of every computer of this server.
type JobTables = Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<msc_shell::Jobs>>>>;

impl Wasm {
    /// Sets up the backend under `state_dir`. Loading the module starts at once in the
    /// background ([`Wasm::ready`] waits for it).
    fn new(
        flavor: Flavor,
        runtime: Runtime,
        source: Source,
        state_dir: &Path,
        instance: String,
        host: String,
    ) -> Result<Self, WasmError> {
        let dir = state_dir.join("wasm");
        let dev = state_dir.join("wasm-dev");
        engine::create_private_dir(&dir).map_err(storage)?;
        engine::create_private_dir(&dev).map_err(storage)?;
        for d in base::DEVICES {
            let path = dev.join(d);
            if !path.exists() {
                std::fs::write(&path, b"").map_err(storage)?;
            }
        }
        Ok(Self {
            flavor,
            runtime,
            source,
            loaded: Arc::default(),
            dir,
            dev,
            instance,
            host,
            shell_memory: msc_shell::DEFAULT_MEMORY,
            max_memory: 256 << 20,
            jobs: Arc::default(),
            python: None,
            kept: Arc::new(jobs::KeptJobs::new(budget::DEFAULT_BUDGET)),
            prepared: Arc::default(),
        })
    }

    /// The kept jobs' unread output held now, and its budget, in bytes (`/metrics`).
    pub fn job_output(&self) -> (u64, u64) {
        self.kept.buffered()
    }

    /// The backend's name in `computer_list`.
    pub fn kind(&self) -> shared::capabilities::BackendKind {
        match self.flavor {
            Flavor::Toolbox => shared::capabilities::BackendKind::Toolbox,
            Flavor::Custom(_) => shared::capabilities::BackendKind::WasmModule,
        }
    }

    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    fn image(&self) -> String {
        match &self.flavor {
            Flavor::Toolbox => "msc-toolbox".into(),
            Flavor::Custom(name) => format!("{name}.wasm"),
        }
    }

    /// Loads (or waits for) the module: compiled once per machine, then read from the cache.
    pub async fn ready(&self) -> Result<(), WasmError> {
        self.program().await.map(|_| ())
    }

    async fn program(&self) -> Result<Loaded1, WasmError> {
        let this = self.clone();
        let loaded = self
            .loaded
            .get_or_init(|| async move {
                let rt = this.runtime.clone();
                let src = this.source.clone();
                let name = match &this.flavor {
                    Flavor::Toolbox => "msc-toolbox".to_owned(),
                    Flavor::Custom(n) => n.clone(),
                };
                let program =
                    tokio::task::spawn_blocking(move || rt.load(&name, src.bytes(), src.key()))
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| e.to_string())?;
                let names = match this.flavor {
                    Flavor::Toolbox => list_utilities(&program, &this.dev).await?,
                    Flavor::Custom(_) => Default::default(),
                };
                let state_dir = this.dir.parent().map(Path::to_path_buf).unwrap_or_default();
                let mut names2 = names.clone();
                if this.python.is_some() {
                    names2.extend(PYTHON_NAMES.map(str::to_owned));
                }
                let base =
                    tokio::task::spawn_blocking(move || base::shared_base(&state_dir, &names2))
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| format!("the base layer cannot be written: {e}"))?;
                Ok(Loaded1 {
                    program,
                    names: Arc::new(names),
                    base: Arc::new(base),
                })
            })
            .await;
        loaded.clone().map_err(|e| WasmError::Module(e.0))
    }

    /// `python3`'s program: `None` without a CPython module, else loaded on first use.
    pub(super) async fn python_program(&self) -> Option<Result<Program, NotRunnable>> {
        let python = self.python.as_ref()?;
        let rt = self.runtime.clone();
        let path = python.path.clone();
        let loaded = python
            .loaded
            .get_or_init(|| async move {
                tokio::task::spawn_blocking(move || {
                    let bytes = std::fs::read(&path)
                        .map_err(|e| NotRunnable(format!("cannot read the CPython module: {e}")))?;
                    rt.load("python", &bytes, engine::module_key(&bytes))
                        .map_err(|e| NotRunnable(e.to_string()))
                })
                .await
                .map_err(|e| NotRunnable(e.to_string()))?
            })
            .await;
        Some(loaded.clone())
    }

    /// The job table of computer `id` (made on first use).
    fn jobs_of(&self, id: &str) -> Arc<msc_shell::Jobs> {
        let mut t = self
            .jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        t.entry(id.to_owned()).or_default().clone()
    }

    /// Ends the background and kept jobs of computer `id` (restart, factory reset, delete).
    fn end_jobs(&self, id: &str) {
        self.kept.end_all(id);
        let table = self
            .jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
        if let Some(t) = table {
            t.clear();
        }
    }

    /// Brings computer `id` up to date the first time this server uses it: the layout of
    /// an older version, `/etc` naming the caller's id, and its `/proc` (the static files,
    /// without the entries of jobs whose server stopped). Later calls cost a lookup.
    pub(super) async fn prepare(&self, id: &str) -> Result<(), WasmError> {
        let mut done = self.prepared.lock().await;
        if done.contains(id) {
            return Ok(());
        }
        let dir = self.computer_dir(id);
        let (instance, host, max) = (self.instance.clone(), self.host.clone(), self.max_memory);
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let Some(meta) = Self::read_meta(&dir) else {
                return Ok(()); // gone meanwhile: the caller says so
            };
            base::ensure(&dir, meta.caller_id())?;
            let marks = marks::all(&dir);
            procs::refresh(&dir.join("proc"), max, &|pid| {
                marks
                    .iter()
                    .any(|m| m.pid == pid && marks::runs(m, &instance, &host))
            })
        })
        .await
        .map_err(storage)?
        .map_err(storage)?;
        done.insert(id.to_owned());
        Ok(())
    }

    fn computer_dir(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    fn record(&self, m: Meta) -> ContainerRecord {
        ContainerRecord {
            computer_id: m.computer_id,
            provider_id: m.sandbox_id,
            temporary: m.temporary,
            instance: m.instance,
            host: m.host,
            image: m.image,
            state: shared::lifecycle::ComputerState::Running,
            created_at: m.created_at,
            team: m.team,
            // A WebAssembly computer never has a network.
            network: Some(shared::egress::Policy::None),
        }
    }

    fn read_meta(path: &Path) -> Option<Meta> {
        let bytes = std::fs::read(path.join("computer.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The computer `id`, if it exists.
    pub async fn find(&self, id: &str) -> Result<Option<ContainerRecord>, WasmError> {
        let dir = self.computer_dir(id);
        let meta = tokio::task::spawn_blocking(move || Self::read_meta(&dir))
            .await
            .map_err(storage)?;
        Ok(meta.map(|m| self.record(m)))
    }

    /// Every computer in the state directory.
    pub async fn list(&self) -> Result<Vec<ContainerRecord>, WasmError> {
        let dir = self.dir.clone();
        let metas = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<Meta>> {
            let mut out = Vec::new();
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                if entry.file_name().to_string_lossy().starts_with('.') {
                    continue;
                }
                if let Some(m) = Self::read_meta(&entry.path()) {
                    out.push(m);
                }
            }
            Ok(out)
        })
        .await
        .map_err(storage)?
        .map_err(storage)?;
        Ok(metas.into_iter().map(|m| self.record(m)).collect())
    }

    /// Creates computer `id`. If it appeared meanwhile, returns the existing one.
    pub async fn create(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
    ) -> Result<ContainerRecord, WasmError> {
        let meta = Meta {
            team: team.map(str::to_owned),
            computer_id: id.to_owned(),
            sandbox_id: format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff),
            temporary,
            instance: temporary.then(|| self.instance.clone()),
            host: temporary.then(|| self.host.clone()),
            image: self.image(),
            created_at: shared::history::rfc3339_utc(now_ms()),
        };
        let dir = self.computer_dir(id);
        let (m, max) = (meta.clone(), self.max_memory);
        let created = tokio::task::spawn_blocking(move || -> std::io::Result<bool> {
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
                Err(e) => return Err(e),
            }
            base::make_skeleton(&dir.join("fs"))?;
            base::write_etc(&dir.join("etc"), m.caller_id())?;
            procs::refresh(&dir.join("proc"), max, &|_| false)?;
            write_meta(&dir, &m)?;
            Ok(true)
        })
        .await
        .map_err(storage)?
        .map_err(storage)?;
        if created {
            return Ok(self.record(meta));
        }
        self.find(id)
            .await?
            .ok_or_else(|| WasmError::NotFound(id.to_owned()))
    }

    /// Removes computer `id` and its files.
    pub async fn remove(&self, id: &str) -> Result<(), WasmError> {
        self.end_jobs(id);
        self.prepared.lock().await.remove(id);
        let dir = self.computer_dir(id);
        let trash = self
            .dir
            .join(format!(".trash-{id}-{:08x}", rand::random::<u32>()));
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            match std::fs::rename(&dir, &trash) {
                Ok(()) => std::fs::remove_dir_all(&trash),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            }
        })
        .await
        .map_err(storage)?
        .map_err(storage)
    }

    /// A restart ends the computer's background jobs (nothing else runs between calls).
    pub async fn restart(&self, id: &str) -> Result<(), WasmError> {
        self.end_jobs(id);
        self.find(id)
            .await?
            .map(|_| ())
            .ok_or_else(|| WasmError::NotFound(id.to_owned()))
    }

    /// Empties the computer's writable layer and writes its base `/etc` again (a new
    /// sandbox id); its id and temporary flag stay.
    pub async fn factory_reset(&self, id: &str) -> Result<ContainerRecord, WasmError> {
        self.end_jobs(id);
        let dir = self.computer_dir(id);
        let old = self
            .find(id)
            .await?
            .ok_or_else(|| WasmError::NotFound(id.to_owned()))?;
        let meta = Meta {
            computer_id: id.to_owned(),
            sandbox_id: format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff),
            team: old.team,
            temporary: old.temporary,
            instance: old.instance,
            host: old.host,
            image: self.image(),
            created_at: shared::history::rfc3339_utc(now_ms()),
        };
        let m = meta.clone();
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let fs = dir.join("fs");
            let old_fs = dir.join(format!(".old-{:08x}", rand::random::<u32>()));
            std::fs::rename(&fs, &old_fs)?;
            base::make_skeleton(&fs)?;
            base::write_etc(&dir.join("etc"), m.caller_id())?;
            write_meta(&dir, &m)?;
            std::fs::remove_dir_all(&old_fs)
        })
        .await
        .map_err(storage)?
        .map_err(storage)?;
        Ok(self.record(meta))
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

fn write_meta(dir: &Path, m: &Meta) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(m).map_err(std::io::Error::other)?;
    let tmp = dir.join("computer.json.tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, dir.join("computer.json"))
}

#[cfg(test)]
mod tests;
