//! A host-side POSIX-sh (bash-flavoured) interpreter for the WebAssembly backend.
//!
//! WASI preview 1 has no fork/exec/pipes, so the host is the shell: a command string is
//! parsed with `brush-parser` and executed here; every non-builtin simple command is run
//! through [`Programs`] (one fresh WASM instance per call). Pipelines run their stages
//! concurrently inside the same future, connected by in-memory pipes; all file access of the
//! shell itself (redirections, globs, `cd`, `test -f`, `source`) goes through `cap-std`
//! relative to the computer's root directory.
//!
//! Supported: lists (`;` `&&` `||` `!` `&`), pipelines (`set -o pipefail`), `{ }`, `( )`,
//! `if`/`for`/`while`/`until`/`case`/`((..))`/`for ((..))`/`[[ ]]`, functions with `local`
//! and `return`, parameter expansion (`${x:-d}` `${x:=d}` `${x:+a}` `${x:?m}` `${#x}` `${x#p}`
//! `${x##p}` `${x%p}` `${x%%p}` `${x/p/r}` `${x//p/r}` `${x:o:l}` `${x^^}` `${x,,}`),
//! `$(..)`/backticks, `$((..))`, brace/tilde expansion, field splitting, globbing,
//! redirections (`< > >> >| 2> &> 2>&1 <<EOF <<- <<<`, `exec` redirections), background jobs
//! with `wait`/`kill`, and the builtins listed in `builtins.rs`. Not supported: arrays,
//! process substitution, aliases, job control (`fg`/`bg`), real signals, `select`, coprocesses.
//!
//! Every run has [`Limits`] (issue 19): a deadline the interpreter checks itself (in loops,
//! at every command and in long expansions, so a busy script stops on time even where it
//! never waits), a memory budget for the values it holds (variables, parameters, functions,
//! `$(...)` captures, here-documents, the words being built), and `ARG_MAX` for programs.
//! A run stopped by a budget says so in [`Ended::stop`].

mod arith;
mod budget;
mod builtins;
mod bytes;
mod cond;
mod ctl;
mod dev;
mod exec;
mod expand;
mod fs;
mod glob;
mod io;
mod kept;
mod parse;
mod printf;
mod state;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use tokio::io::AsyncWriteExt;

pub use budget::{DEFAULT_ARGS, DEFAULT_MEMORY, Limits, Stop, size_text};
pub use builtins::IN_BIN;
pub use fs::resolve;
pub use kept::Jobs;

pub type Input = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
pub type Output = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// The standard streams of a script or of a program.
pub struct Stdio {
    pub stdin: Input,
    pub stdout: Output,
    pub stderr: Output,
}

/// Runs external programs: one fresh WASM instance per call (implemented by the lead).
pub trait Programs: Send + Sync {
    /// Is `name` a program of the toolbox (for `command -v`, `type`, `which`, and 127)?
    fn has(&self, name: &str) -> bool;
    /// Runs argv to completion (argv[0] is the program name, never containing '/'),
    /// with exactly `env` as its environment, `cwd` as its current directory
    /// (an absolute guest path such as "/srv"), and these streams. Returns the exit code
    /// (0..=255; 124 never means timeout here). Must not be called for unknown names.
    fn run<'a>(
        &'a self,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: String,
        io: Stdio,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = i32> + Send + 'a>>;
}

/// What a shell run needs.
pub struct ShellConfig {
    /// Host directory that is the computer's `/`.
    pub root: std::path::PathBuf,
    /// Starting directory (absolute guest path). If it does not exist, `run` writes
    /// `sh: cd: <dir>: No such file or directory` to stderr and returns 126 without running anything.
    pub cwd: String,
    /// Initial exported environment (HOME, PATH, ...). The shell sets PWD itself.
    pub env: Vec<(String, String)>,
    pub programs: Arc<dyn Programs>,
    /// Read-only directories over guest paths (the base layer): (guest path such as
    /// "/usr/bin", host directory). Writes under them fail with "Read-only file system".
    pub mounts: Vec<(String, std::path::PathBuf)>,
    /// The deadline, memory budget and argument limit of this run.
    pub limits: Limits,
    /// The computer's background jobs between runs (`None`: jobs end with the run).
    pub jobs: Option<Arc<Jobs>>,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The exit status (0..=255).
    pub status: i32,
    /// Set when a budget stopped the run: [`Stop::Deadline`] (status 124, nothing written:
    /// the caller reports the timeout) or [`Stop::Memory`] (status 137, its message written
    /// to stderr).
    pub stop: Option<Stop>,
}

/// Parses and runs `script` like `sh -c script`.
/// A syntax error prints `sh: syntax error: ...` (with line/col if available) on stderr and returns 2.
pub async fn run(script: &str, cfg: ShellConfig, io: Stdio) -> Ended {
    let Stdio {
        stdin,
        stdout,
        stderr,
    } = io;
    let stdout = io::SharedWriter::new(stdout);
    let stderr = io::SharedWriter::new(stderr);
    let stdin = io::SharedReader::new(stdin);
    let ended = run_inner(script, cfg, stdin, stdout.clone(), stderr.clone()).await;
    if let Some(stop @ Stop::Memory { .. }) = ended.stop {
        let msg = format!("{stop}\n");
        let _ = io::OutHandle(stderr.clone())
            .write_all(msg.as_bytes())
            .await;
    }
    let _ = io::OutHandle(stdout).flush().await;
    let _ = io::OutHandle(stderr).flush().await;
    ended
}

async fn run_inner(
    script: &str,
    cfg: ShellConfig,
    stdin: Arc<io::SharedReader>,
    stdout: Arc<io::SharedWriter>,
    stderr: Arc<io::SharedWriter>,
) -> Ended {
    let early = |status| Ended { status, stop: None };
    let root = match cap_std::fs::Dir::open_ambient_dir(&cfg.root, cap_std::ambient_authority()) {
        Ok(d) => d,
        Err(e) => {
            let msg = format!("sh: cannot open the root directory: {}\n", fs::err_msg(&e));
            let _ = io::OutHandle(stderr).write_all(msg.as_bytes()).await;
            return early(126);
        }
    };
    let mut mounts = Vec::with_capacity(cfg.mounts.len());
    for (guest, host) in &cfg.mounts {
        match cap_std::fs::Dir::open_ambient_dir(host, cap_std::ambient_authority()) {
            Ok(d) => mounts.push((fs::resolve("/", guest), d)),
            Err(e) => {
                let msg = format!("sh: cannot open {guest}: {}\n", fs::err_msg(&e));
                let _ = io::OutHandle(stderr).write_all(msg.as_bytes()).await;
                return early(126);
            }
        }
    }
    let root = fs::Root::new(root, mounts);
    let cwd = fs::resolve("/", &cfg.cwd);
    if !fs::is_dir(&root, &cwd) {
        let msg = format!("sh: cd: {}: No such file or directory\n", cfg.cwd);
        let _ = io::OutHandle(stderr).write_all(msg.as_bytes()).await;
        return early(126);
    }
    let kept = cfg.jobs.as_ref().map(|j| j.take());
    let ctx = Arc::new(state::Ctx::new(
        root,
        cfg.programs,
        cfg.limits,
        cfg.jobs.is_some(),
    ));
    if let Some(k) = &kept {
        ctx.set_next_pid(k.next_pid);
    }
    let mut fds = io::Fds::default();
    fds.set(0, Some(io::Fd::In(stdin)));
    fds.set(1, Some(io::Fd::Out(stdout)));
    fds.set(2, Some(io::Fd::Out(stderr)));
    let mut sh = state::Shell::new(ctx.clone(), cfg.env, cwd, fds);
    if let Some(k) = kept {
        sh.jobs = k.jobs;
        sh.next_job_id = k.next_job_id;
    }
    let status = sh.run_script_top(script).await;
    if let Some(table) = &cfg.jobs {
        let jobs = std::mem::take(&mut sh.jobs);
        table.keep(jobs, sh.next_job_id, ctx.peek_pid());
    }
    drop(sh);
    match ctx.stopped() {
        Some(stop) => Ended {
            status: stop.status(),
            stop: Some(stop),
        },
        None => early(status),
    }
}
