//! The WebAssembly runtime: one wasmtime engine, modules compiled once per machine and
//! cached, and one fresh instance per program run.
//!
//! Owns the engine configuration (async, epoch interruption, optional fuel), the on-disk
//! cache of compiled modules (`<cache>/<name>-<key>.cwasm`, keyed by the engine's
//! compatibility hash, the fuel setting and the module's bytes), checking that a module is
//! a WASI command, and running one instance with its argv, environment, directories,
//! streams and limits. It does not know about shells or computers.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use msc_shell::{Input, Output};
use wasmtime::{
    Config, Engine, ExternType, InstancePre, Linker, Module, ResourceLimiter, Store, Trap,
};
use wasmtime_wasi::cli::{AsyncStdinStream, AsyncStdoutStream};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

/// How often the engine's epoch advances; a running instance yields to the async runtime
/// at every tick, so timeouts and cancellation stop even a busy loop within one tick.
const TICK: Duration = Duration::from_millis(10);

/// The only import module a command may use.
const WASI_P1: &str = "wasi_snapshot_preview1";

/// Errors of the WASM runtime layer.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot read the WebAssembly module {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{name} is not a valid WebAssembly module: {detail}")]
    Invalid { name: String, detail: String },
    #[error(
        "{name} is not a WASI command module: {detail}; build it for wasm32-wasip1 (a program with a main function)"
    )]
    NotWasi { name: String, detail: String },
    #[error("the WebAssembly engine could not be configured: {0}")]
    Config(String),
}

/// A program that cannot be loaded or started here: what failed (told to the caller as
/// the command's error, or logged once for a module loaded in the background).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotRunnable(pub String);

shared::message_error_from!(NotRunnable);

/// Limits applied to every instance.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Linear memory per instance, in bytes.
    pub max_memory: usize,
    /// Instruction fuel per instance (`None`: unlimited).
    pub fuel: Option<u64>,
}

/// Store data: the WASI context and the resource limiter.
struct Guest {
    wasi: WasiP1Ctx,
    limiter: Limiter,
}

struct Limiter {
    max_memory: usize,
    /// A memory grow was refused (the guest then usually aborts).
    denied: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_memory {
            self.denied = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }

    fn instances(&self) -> usize {
        2
    }

    fn memories(&self) -> usize {
        2
    }

    fn tables(&self) -> usize {
        4
    }
}

/// The engine: shared by every program of this server.
#[derive(Clone)]
pub struct Runtime {
    engine: Engine,
    limits: Limits,
    cache_dir: PathBuf,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("limits", &self.limits)
            .field("cache_dir", &self.cache_dir)
            .finish()
    }
}

/// Starts the epoch ticker of `engine` once per process.
fn start_ticker(engine: &Engine) {
    static TICKER: OnceLock<()> = OnceLock::new();
    TICKER.get_or_init(|| {
        let weak = engine.weak();
        let spawned = std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(TICK);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the WebAssembly epoch ticker; long commands are stopped only by their timeout's cancellation");
        }
    });
}

/// The outcome of one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The program exited with this status (or returned from `_start`: 0).
    Code(i32),
    /// The fuel ran out.
    OutOfFuel,
    /// A memory grow beyond `--wasm-max-memory` was refused and the program then failed.
    OutOfMemory,
    /// Any other trap (the program crashed).
    Trap,
}

impl Runtime {
    /// Builds the engine. `cache_dir` holds compiled modules.
    pub fn new(limits: Limits, cache_dir: PathBuf) -> Result<Self, EngineError> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.consume_fuel(limits.fuel.is_some());
        config.parallel_compilation(true);
        let engine = Engine::new(&config).map_err(|e| EngineError::Config(e.to_string()))?;
        start_ticker(&engine);
        Ok(Self {
            engine,
            limits,
            cache_dir,
        })
    }

    /// The cache file for the module `key` (a hash of its bytes) under `name`.
    fn cache_path(&self, name: &str, key: u64) -> PathBuf {
        let mut h = std::hash::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        self.limits.fuel.is_some().hash(&mut h);
        key.hash(&mut h);
        let stem: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(40)
            .collect();
        self.cache_dir
            .join(format!("{stem}-{:016x}.cwasm", h.finish()))
    }

    /// Loads `bytes` (whose hash is `key`, see [`module_key`]) as a command module: from
    /// the compiled cache when present (without reading `bytes`), else compiled (seconds,
    /// once per machine) and cached.
    pub fn load(&self, name: &str, bytes: &[u8], key: u64) -> Result<Program, EngineError> {
        let cached = self.cache_path(name, key);
        let module = match self.deserialize(&cached) {
            Some(m) => m,
            None => {
                let t0 = std::time::Instant::now();
                let module =
                    Module::from_binary(&self.engine, bytes).map_err(|e| EngineError::Invalid {
                        name: name.to_owned(),
                        detail: format!("{e:#}"),
                    })?;
                tracing::info!(
                    module = name,
                    ms = t0.elapsed().as_millis() as u64,
                    "compiled WebAssembly module"
                );
                self.store_cache(&cached, &module);
                module
            }
        };
        check_command(name, &module)?;
        let mut linker: Linker<Guest> = Linker::new(&self.engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |g: &mut Guest| &mut g.wasi)
            .map_err(|e| EngineError::Config(e.to_string()))?;
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|e| EngineError::NotWasi {
                name: name.to_owned(),
                detail: format!("{e:#}"),
            })?;
        Ok(Program {
            name: name.to_owned(),
            pre: Arc::new(pre),
            limits: self.limits,
        })
    }

    fn deserialize(&self, path: &Path) -> Option<Module> {
        if !path.is_file() {
            return None;
        }
        // SAFETY: the file was written by `store_cache` of this program (a private cache
        // directory, 0700, named by a hash of the engine's compatibility and the module),
        // and wasmtime checks its header and engine compatibility before using it.
        #[allow(unsafe_code)]
        let loaded = unsafe { Module::deserialize_file(&self.engine, path) };
        match loaded {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring an unusable compiled-module cache file");
                None
            }
        }
    }

    fn store_cache(&self, path: &Path, module: &Module) {
        let write = || -> std::io::Result<()> {
            create_private_dir(&self.cache_dir)?;
            let bytes = module.serialize().map_err(std::io::Error::other)?;
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, path)
        };
        if let Err(e) = write() {
            tracing::warn!(path = %path.display(), error = %e, "cannot cache the compiled module; the next start compiles it again");
        }
    }
}

/// The cache key of a module's bytes (FNV-1a, 64 bits; `executor/build.rs` computes the
/// same for the embedded toolbox at build time).
pub fn module_key(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Creates `dir` (and parents) readable by this user only.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Refuses modules that are not WASI preview-1 commands.
fn check_command(name: &str, module: &Module) -> Result<(), EngineError> {
    let not_wasi = |detail: String| EngineError::NotWasi {
        name: name.to_owned(),
        detail,
    };
    for import in module.imports() {
        if import.module() != WASI_P1 {
            return Err(not_wasi(format!(
                "it imports {}::{}, and only {WASI_P1} is provided",
                import.module(),
                import.name()
            )));
        }
    }
    match module.get_export("_start") {
        Some(ExternType::Func(_)) => Ok(()),
        _ => Err(not_wasi("it has no exported _start function".into())),
    }
}

/// Wraps a stream that is `Send` but not `Sync` so wasmtime's stream adapters take it
/// (they only ever use it from one task at a time).
struct SyncIo<T>(std::sync::Mutex<T>);

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for SyncIo<T> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let inner = self
            .get_mut()
            .0
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        std::pin::Pin::new(inner).poll_read(cx, buf)
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for SyncIo<T> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let inner = self
            .get_mut()
            .0
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        std::pin::Pin::new(inner).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let inner = self
            .get_mut()
            .0
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        std::pin::Pin::new(inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let inner = self
            .get_mut()
            .0
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        std::pin::Pin::new(inner).poll_shutdown(cx)
    }
}

/// A host directory and where the guest sees it.
#[derive(Debug, Clone)]
pub struct Mount {
    pub host: PathBuf,
    pub guest: String,
    pub writable: bool,
}

/// One instance's inputs.
pub struct Run {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
    pub stdin: Input,
    pub stdout: Output,
    pub stderr: Output,
}

/// A loaded command module, ready to instantiate.
#[derive(Clone)]
pub struct Program {
    name: String,
    pre: Arc<InstancePre<Guest>>,
    limits: Limits,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program").field("name", &self.name).finish()
    }
}

impl Program {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs one fresh instance to its end. Dropping the future stops it (it yields at
    /// every epoch tick, so even a busy loop is cancelled within a tick).
    pub async fn run(&self, run: Run) -> Result<Exit, NotRunnable> {
        let mut builder = WasiCtxBuilder::new();
        builder
            .args(&run.argv)
            .envs(&run.env)
            .stdin(AsyncStdinStream::new(SyncIo(std::sync::Mutex::new(
                run.stdin,
            ))))
            .stdout(AsyncStdoutStream::new(
                64 * 1024,
                SyncIo(std::sync::Mutex::new(run.stdout)),
            ))
            .stderr(AsyncStdoutStream::new(
                64 * 1024,
                SyncIo(std::sync::Mutex::new(run.stderr)),
            ));
        for m in &run.mounts {
            let perms = if m.writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            builder
                .preopened_dir(&m.host, &m.guest, perms)
                .map_err(|e| format!("cannot open {}: {e}", m.guest))?;
        }
        let guest = Guest {
            wasi: builder.build_p1(),
            limiter: Limiter {
                max_memory: self.limits.max_memory,
                denied: false,
            },
        };
        let mut store = Store::new(self.pre.module().engine(), guest);
        store.limiter(|g| &mut g.limiter);
        store.epoch_deadline_async_yield_and_update(1);
        if let Some(fuel) = self.limits.fuel {
            store.set_fuel(fuel).map_err(|e| e.to_string())?;
        }
        let outcome = async {
            let instance = self.pre.instantiate_async(&mut store).await?;
            let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
            start.call_async(&mut store, ()).await
        }
        .await;
        let denied = store.data().limiter.denied;
        Ok(classify(outcome, denied))
    }
}

fn classify(outcome: wasmtime::Result<()>, memory_denied: bool) -> Exit {
    let err = match outcome {
        Ok(()) => return Exit::Code(0),
        Err(e) => e,
    };
    if let Some(exit) = err.downcast_ref::<I32Exit>() {
        return Exit::Code(exit.0);
    }
    if matches!(err.downcast_ref::<Trap>(), Some(Trap::OutOfFuel)) {
        return Exit::OutOfFuel;
    }
    if memory_denied {
        return Exit::OutOfMemory;
    }
    tracing::debug!(error = %format!("{err:#}"), "WebAssembly program trapped");
    if err.to_string().contains("invalid exit status") {
        // WASI preview 1 refuses statuses of 126 and above; report the closest we can.
        return Exit::Code(125);
    }
    Exit::Trap
}
