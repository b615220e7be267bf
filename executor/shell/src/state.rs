//! The interpreter state: variables, functions, options, descriptors, background jobs, and
//! the control-flow signals (`break`, `return`, `exit`...) that unwind the executor.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use brush_parser::ast;
use tokio::io::AsyncWriteExt;

use super::Programs;
use super::budget::{Budget, Counted, Limits, Params, Stop, Text};
use super::io::{Fds, OutHandle};

/// Maximum depth of functions, `eval`, `source`, `sh -c`, `$(...)` and subshells.
pub(crate) const MAX_DEPTH: usize = 100;

/// A function body, counted against the memory budget while defined.
pub(crate) type Func = Arc<Counted<ast::FunctionBody>>;

/// Longest script text kept in the parse cache (longer ones are parsed every time).
const CACHE_TEXT_MAX: usize = 4096;

pub(crate) use super::ctl::{Ctl, R};

/// A shell variable.
#[derive(Debug, Clone, Default)]
pub(crate) struct Var {
    pub(crate) value: Text,
    pub(crate) exported: bool,
    pub(crate) readonly: bool,
}

/// `set` options.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Opts {
    pub(crate) errexit: bool,
    pub(crate) nounset: bool,
    pub(crate) xtrace: bool,
    pub(crate) pipefail: bool,
    pub(crate) noglob: bool,
    pub(crate) noclobber: bool,
    pub(crate) allexport: bool,
}

/// Shared, immutable-ish context of one `run`.
pub(crate) struct Ctx {
    pub(crate) root: super::fs::Root,
    /// Background jobs outlive the run (a job table was given: `kept.rs`).
    pub(crate) keeps_jobs: bool,
    pub(crate) programs: Arc<dyn Programs>,
    /// The deadline and memory budget of the run.
    pub(crate) budget: Arc<Budget>,
    next_pid: AtomicU32,
    /// Set when the nesting limit was hit: the whole run unwinds with status 2.
    aborted: std::sync::atomic::AtomicBool,
    parse_cache: Mutex<HashMap<String, Arc<ast::Program>>>,
}

impl Ctx {
    pub(crate) fn new(
        root: super::fs::Root,
        programs: Arc<dyn Programs>,
        limits: Limits,
        keeps_jobs: bool,
    ) -> Self {
        Self {
            keeps_jobs,
            root,
            programs,
            budget: Budget::new(limits),
            next_pid: AtomicU32::new(1000),
            aborted: std::sync::atomic::AtomicBool::new(false),
            parse_cache: Mutex::new(HashMap::new()),
        }
    }

    /// Continues the process ids of an earlier run (kept jobs).
    pub(crate) fn set_next_pid(&self, pid: u32) {
        self.next_pid.store(pid, Ordering::Relaxed);
    }

    pub(crate) fn peek_pid(&self) -> u32 {
        self.next_pid.load(Ordering::Relaxed)
    }

    pub(crate) fn new_pid(&self) -> u32 {
        self.next_pid.fetch_add(1, Ordering::Relaxed)
    }

    /// Is the run unwinding (nesting limit hit, or a budget tripped)?
    pub(crate) fn aborted(&self) -> bool {
        self.aborted.load(Ordering::Relaxed) || self.budget.stopped().is_some()
    }

    /// Why a budget stopped the run, if one did.
    pub(crate) fn stopped(&self) -> Option<Stop> {
        self.budget.stopped()
    }

    pub(crate) fn abort(&self) {
        self.aborted.store(true, Ordering::Relaxed);
    }

    pub(crate) fn cached(&self, s: &str) -> Option<Arc<ast::Program>> {
        self.parse_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(s)
            .cloned()
    }

    pub(crate) fn cache(&self, s: &str, p: Arc<ast::Program>) {
        if s.len() > CACHE_TEXT_MAX {
            return;
        }
        let mut c = self
            .parse_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if c.len() >= 256 {
            c.clear();
        }
        c.insert(s.to_owned(), p);
    }
}

/// A background job: aborted when dropped (so nothing outlives the shell that started it,
/// or the computer's job table that kept it: `kept.rs`).
pub(crate) struct Job {
    pub(crate) id: usize,
    pub(crate) pid: u32,
    pub(crate) cmd: String,
    pub(crate) handle: Option<tokio::task::JoinHandle<i32>>,
    pub(crate) status: Option<i32>,
}

/// A job as `jobs` shows it: what a subshell (a pipeline stage, `$(jobs)`) sees of the
/// jobs of the shell it was copied from, as they were then.
#[derive(Debug, Clone)]
pub(crate) struct JobLine {
    pub(crate) id: usize,
    pub(crate) pid: u32,
    pub(crate) cmd: String,
    pub(crate) running: bool,
}

impl Job {
    pub(crate) fn line(&self) -> JobLine {
        JobLine {
            id: self.id,
            pid: self.pid,
            cmd: self.cmd.clone(),
            running: self.handle.as_ref().is_some_and(|h| !h.is_finished()),
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.abort();
        }
    }
}

/// The state of one shell (the top-level script, a subshell, a pipeline stage...).
pub(crate) struct Shell {
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) vars: HashMap<String, Var>,
    pub(crate) funcs: HashMap<String, Func>,
    pub(crate) params: Params,
    pub(crate) arg0: String,
    pub(crate) cwd: String,
    pub(crate) status: i32,
    pub(crate) opts: Opts,
    pub(crate) fds: Fds,
    /// Saved values for `local`, one frame per active function call.
    pub(crate) locals: Vec<HashMap<String, Option<Var>>>,
    pub(crate) depth: usize,
    pub(crate) loop_depth: usize,
    /// >0 while running a condition (`if`, `while`, `&&` left side, `!`): no `set -e` there.
    pub(crate) cond_depth: usize,
    /// >0 inside a function or a sourced file (`return` allowed).
    pub(crate) func_depth: usize,
    pub(crate) last_bg: Option<u32>,
    pub(crate) jobs: Vec<Job>,
    /// The jobs of the shells this one was copied from (`jobs | wc -l` counts them).
    pub(crate) outer_jobs: Arc<Vec<JobLine>>,
    pub(crate) next_job_id: usize,
    pub(crate) exit_trap: Option<String>,
    /// Status of the last command substitution of the current command.
    pub(crate) cmdsub_status: Option<i32>,
}

impl Shell {
    pub(crate) fn new(ctx: Arc<Ctx>, env: Vec<(String, String)>, cwd: String, fds: Fds) -> Self {
        let mut vars = HashMap::new();
        for (k, v) in env {
            if valid_name(&k) {
                vars.insert(
                    k,
                    Var {
                        value: Text::new(&ctx.budget, v).unwrap_or_default(),
                        exported: true,
                        readonly: false,
                    },
                );
            }
        }
        vars.entry("IFS".to_owned()).or_insert_with(|| Var {
            value: Text::new(&ctx.budget, " \t\n".to_owned()).unwrap_or_default(),
            exported: false,
            readonly: false,
        });
        let mut sh = Self {
            ctx,
            vars,
            funcs: HashMap::new(),
            params: Params::default(),
            arg0: "sh".to_owned(),
            cwd: cwd.clone(),
            status: 0,
            opts: Opts::default(),
            fds,
            locals: Vec::new(),
            depth: 0,
            loop_depth: 0,
            cond_depth: 0,
            func_depth: 0,
            last_bg: None,
            jobs: Vec::new(),
            outer_jobs: Arc::default(),
            next_job_id: 1,
            exit_trap: None,
            cmdsub_status: None,
        };
        sh.set_exported("PWD", &cwd);
        sh
    }

    /// A copy of this shell for a subshell / pipeline stage / substitution / background job:
    /// everything is copied except background jobs (it only sees them) and traps.
    pub(crate) fn subshell(&self) -> Self {
        let outer_jobs = if self.jobs.is_empty() {
            self.outer_jobs.clone()
        } else {
            Arc::new(self.job_lines())
        };
        Self {
            ctx: self.ctx.clone(),
            vars: self.vars.clone(),
            funcs: self.funcs.clone(),
            params: self.params.clone(),
            arg0: self.arg0.clone(),
            cwd: self.cwd.clone(),
            status: self.status,
            opts: self.opts,
            fds: self.fds.clone(),
            locals: self.locals.clone(),
            depth: self.depth,
            loop_depth: self.loop_depth,
            cond_depth: self.cond_depth,
            func_depth: self.func_depth,
            last_bg: self.last_bg,
            jobs: Vec::new(),
            outer_jobs,
            next_job_id: 1,
            exit_trap: None,
            cmdsub_status: None,
        }
    }

    /// The jobs `jobs` lists: those seen from the outer shells, then this shell's own.
    pub(crate) fn job_lines(&self) -> Vec<JobLine> {
        self.outer_jobs
            .iter()
            .cloned()
            .chain(self.jobs.iter().map(Job::line))
            .collect()
    }

    /// A fresh shell as a child process would see it (`sh -c`, `./script.sh`): only the
    /// exported variables, no functions, new positional parameters.
    pub(crate) fn child(&self, arg0: String, params: Params) -> Self {
        let env = self.exported_env(&[]);
        let mut sh = Self::new(self.ctx.clone(), env, self.cwd.clone(), self.fds.clone());
        sh.arg0 = arg0;
        sh.params = params;
        sh.depth = self.depth;
        sh
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(|v| v.value.as_str())
    }

    pub(crate) fn ifs(&self) -> String {
        self.get("IFS")
            .map_or_else(|| " \t\n".to_owned(), str::to_owned)
    }

    /// Sets a variable (keeps its export flag). Fails on a readonly variable. A value over
    /// the memory budget stops the run (the variable keeps its old value meanwhile).
    pub(crate) fn set_var(&mut self, name: &str, value: &str) -> Result<(), String> {
        self.set_var_owned(name, value.to_owned())
    }

    /// [`Shell::set_var`] taking the value.
    pub(crate) fn set_var_owned(&mut self, name: &str, value: String) -> Result<(), String> {
        let allexport = self.opts.allexport;
        let budget = self.ctx.budget.clone();
        let v = self.vars.entry(name.to_owned()).or_default();
        if v.readonly {
            return Err(format!("{name}: readonly variable"));
        }
        if let Ok(t) = Text::new(&budget, value) {
            v.value = t;
        }
        if allexport {
            v.exported = true;
        }
        Ok(())
    }

    pub(crate) fn set_exported(&mut self, name: &str, value: &str) {
        let budget = self.ctx.budget.clone();
        let v = self.vars.entry(name.to_owned()).or_default();
        if let Ok(t) = Text::new(&budget, value.to_owned()) {
            v.value = t;
        }
        v.exported = true;
    }

    pub(crate) fn unset_var(&mut self, name: &str) -> Result<(), String> {
        if self.vars.get(name).is_some_and(|v| v.readonly) {
            return Err(format!("{name}: cannot unset: readonly variable"));
        }
        self.vars.remove(name);
        Ok(())
    }

    /// Declares `name` local to the current function (saving its previous value).
    pub(crate) fn make_local(&mut self, name: &str) {
        let prev = self.vars.get(name).cloned();
        if let Some(frame) = self.locals.last_mut() {
            frame.entry(name.to_owned()).or_insert(prev);
        }
    }

    /// The environment of a program: exported variables plus `extra`, sorted by name.
    pub(crate) fn exported_env(&self, extra: &[(String, String)]) -> Vec<(String, String)> {
        let mut m: BTreeMap<String, String> = self
            .vars
            .iter()
            .filter(|(_, v)| v.exported)
            .map(|(k, v)| (k.clone(), v.value.as_str().to_owned()))
            .collect();
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
        m.into_iter().collect()
    }

    /// Writes to a descriptor; a broken pipe ends this (sub)shell like SIGPIPE (status 141).
    pub(crate) async fn write_fd(&mut self, fd: usize, data: &[u8]) -> Result<(), Ctl> {
        let Some(w) = self.fds.writer(fd) else {
            return Err(Ctl::Fail(1));
        };
        match OutHandle(w).write_all(data).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Ctl::Exit(141)),
            Err(e) => {
                if fd != 2 {
                    self.err(&format!("write error: {}", super::fs::err_msg(&e)))
                        .await;
                }
                Err(Ctl::Fail(1))
            }
        }
    }

    pub(crate) async fn out(&mut self, s: &str) -> Result<(), Ctl> {
        self.write_fd(1, &super::bytes::encode(s)).await
    }

    /// Prints `sh: msg` on stderr (errors writing it are ignored).
    pub(crate) async fn err(&mut self, msg: &str) {
        if let Some(w) = self.fds.writer(2) {
            let line = format!("sh: {msg}\n");
            let _ = OutHandle(w).write_all(line.as_bytes()).await;
        }
    }
}

impl super::arith::ArithVars for Shell {
    fn get_var(&self, name: &str) -> Option<String> {
        self.get(name).map(str::to_owned)
    }

    fn set_var(&mut self, name: &str, value: String) -> Result<(), String> {
        Shell::set_var(self, name, &value)
    }
}

/// Is `s` a valid variable name?
pub(crate) fn valid_name(s: &str) -> bool {
    let mut it = s.chars();
    match it.next() {
        Some(c) if c == '_' || c.is_ascii_alphabetic() => {}
        _ => return false,
    }
    it.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Quotes a string for re-use as shell input (`set`, `export -p`, `set -x`).
pub(crate) fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A boxed, `Send` future (for the recursive async functions of the interpreter).
pub(crate) type BoxFut<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
