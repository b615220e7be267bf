//! Execution of the AST: lists, and-or lists, pipelines (stages run concurrently in the same
//! future), compound commands, simple commands, redirections, function calls, background
//! jobs, and the dispatch of a command name to a function, a builtin, a script or a program.
//!
//! This module holds the entry points (scripts, nested text, fresh stacks), lists, background
//! jobs, and-or lists, pipelines, and `exec_command` (function definitions and `[[ ]]` here);
//! the rest lives in child modules: [`compound`] (`if`, loops, `case`, `((..))`, groups,
//! subshells), [`simple`] (simple commands: functions, builtins, scripts, programs) and
//! [`redirect`] (redirections on the descriptor table).

mod compound;
mod redirect;
mod simple;

use std::collections::HashMap;
use std::sync::Arc;

use brush_parser::ast::{
    self, AndOr, AndOrList, AssignmentName, AssignmentValue, CaseItemPostAction, Command,
    CommandPrefixOrSuffixItem, CompoundCommand, CompoundList, IoFileRedirectKind,
    IoFileRedirectTarget, IoRedirect, Pipeline, SeparatorOperator, SimpleCommand,
};

use super::budget::{Charge, Counted, Params};
use super::dev::{Device as Special, device as special};
use super::fs::{self, Mode};
use super::glob::Pattern;
use super::io::{Fd, SharedReader, SharedWriter, SyncFile, charged_reader, memory_reader, pipe};
use super::parse::{self, ParseFail};
use super::state::{BoxFut, Ctl, Func, Job, MAX_DEPTH, R, Shell, quote};
use super::{Stdio, builtins};

/// Turns an unwinding signal into the status of a (sub)shell that ends there.
pub(crate) fn status_of(r: R, fallback: i32) -> i32 {
    match r {
        Ok(s) => s,
        Err(Ctl::Exit(s) | Ctl::Return(s) | Ctl::Fail(s)) => s,
        Err(Ctl::Break(_) | Ctl::Continue(_)) => fallback,
    }
}

/// Aborts a spawned task when dropped (cancellation of the outer future reaches it).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Work run by `on_fresh_stack`.
pub(crate) type StackJob = Box<dyn for<'b> FnOnce(&'b mut Shell) -> BoxFut<'b, R> + Send>;

impl Shell {
    /// Runs `f` on this shell in a new task, whose polling starts at the bottom of a worker's
    /// stack: every nesting level (function call, `eval`, `$(...)`, subshell...) hops, so deep
    /// recursion of the interpreter never overflows the native stack. The shell moves into the
    /// task and back; dropping this future aborts the task.
    pub(crate) async fn on_fresh_stack(&mut self, f: StackJob) -> R {
        let placeholder = Shell::new(
            self.ctx.clone(),
            Vec::new(),
            self.cwd.clone(),
            super::io::Fds::default(),
        );
        let mut taken = std::mem::replace(self, placeholder);
        let mut guard = AbortOnDrop(tokio::spawn(async move {
            let r = f(&mut taken).await;
            (taken, r)
        }));
        match (&mut guard.0).await {
            Ok((sh, r)) => {
                *self = sh;
                r
            }
            Err(_) => {
                self.ctx.abort();
                Err(Ctl::Exit(2))
            }
        }
    }

    /// Runs a script text one nesting level deeper, on a fresh stack.
    pub(crate) async fn run_text_fresh(&mut self, text: String) -> R {
        self.on_fresh_stack(Box::new(move |sh| {
            Box::pin(async move { sh.run_text(&text).await })
        }))
        .await
    }

    /// Runs the top-level script; returns the exit status.
    pub(crate) async fn run_script_top(&mut self, script: &str) -> i32 {
        let r = self.run_text(script).await;
        let mut st = status_of(r, self.status);
        if let Some(trap) = self.exit_trap.take() {
            self.status = st;
            let saved = st;
            let r = self.run_nested(&trap).await;
            if let Err(Ctl::Exit(s)) = r {
                st = s;
            } else {
                st = saved;
            }
        }
        // Without a job table (`kept.rs`), nothing outlives the run: cancel background jobs.
        // With one, `run` hands the jobs still running to it.
        if !self.ctx.keeps_jobs {
            self.jobs.clear();
        }
        if self.ctx.aborted() { 2 } else { st & 0xff }
    }

    /// Enters one nesting level (function, eval, source, substitution, subshell).
    pub(crate) async fn enter(&mut self) -> Result<(), Ctl> {
        self.ctx.budget.check()?;
        if self.ctx.aborted() {
            return Err(Ctl::Exit(2));
        }
        if self.depth >= MAX_DEPTH {
            self.err("maximum nesting depth exceeded").await;
            self.ctx.abort();
            return Err(Ctl::Exit(2));
        }
        self.depth += 1;
        Ok(())
    }

    /// Parses and runs `text` one nesting level deeper (eval, `$(...)`, traps).
    pub(crate) async fn run_nested(&mut self, text: &str) -> R {
        self.enter().await?;
        let r = self.run_text_fresh(text.to_owned()).await;
        self.depth -= 1;
        r
    }

    pub(crate) fn parse_cached(&self, text: &str) -> Result<Arc<ast::Program>, ParseFail> {
        if let Some(p) = self.ctx.cached(text) {
            return Ok(p);
        }
        let p = Arc::new(parse::parse_program(text)?);
        self.ctx.cache(text, p.clone());
        Ok(p)
    }

    /// Parses and runs `text` in this shell.
    pub(crate) async fn run_text(&mut self, text: &str) -> R {
        let prog = match self.parse_cached(text) {
            Ok(p) => p,
            Err(ParseFail::TooDeep) => {
                self.err("maximum nesting depth exceeded").await;
                return Err(Ctl::Fail(2));
            }
            Err(ParseFail::Syntax(m)) => {
                self.err(&m).await;
                return Err(Ctl::Fail(2));
            }
        };
        let mut st = 0;
        for cc in &prog.complete_commands {
            st = self.exec_list(cc).await?;
        }
        Ok(st)
    }

    pub(crate) fn exec_list<'a>(&'a mut self, list: &'a CompoundList) -> BoxFut<'a, R> {
        Box::pin(async move {
            let mut st = 0;
            for item in &list.0 {
                if self.ctx.aborted() {
                    return Err(Ctl::Exit(2));
                }
                match item.1 {
                    SeparatorOperator::Async => {
                        self.spawn_job(&item.0);
                        st = 0;
                        self.status = 0;
                    }
                    SeparatorOperator::Sequence => {
                        st = self.exec_and_or(&item.0).await?;
                    }
                }
            }
            Ok(st)
        })
    }

    fn spawn_job(&mut self, ao: &AndOrList) {
        let ao = ao.clone();
        let mut sub = self.subshell();
        // Without job control, the stdin of an asynchronous list is /dev/null.
        sub.fds.set(0, Some(Fd::In(memory_reader(Vec::new()))));
        let pid = self.ctx.new_pid();
        let cmd = ao.to_string();
        let deadline = self.ctx.budget.limits().deadline;
        let handle = tokio::spawn(async move {
            let work = async {
                let r = sub.exec_and_or(&ao).await;
                status_of(r, sub.status)
            };
            // A job ends at the deadline of its run, even when it outlives the run.
            match deadline {
                Some(d) => tokio::time::timeout_at(d.into(), work).await.unwrap_or(124),
                None => work.await,
            }
        });
        self.jobs.push(Job {
            id: self.next_job_id,
            pid,
            cmd,
            handle: Some(handle),
            status: None,
        });
        self.next_job_id += 1;
        self.last_bg = Some(pid);
    }

    pub(crate) async fn exec_and_or(&mut self, ao: &AndOrList) -> R {
        let n = ao.additional.len();
        let mut st = self.exec_pipeline_cond(&ao.first, n > 0).await?;
        let mut eligible = n == 0 && !ao.first.bang;
        for (i, item) in ao.additional.iter().enumerate() {
            let last = i + 1 == n;
            let (run, p) = match item {
                AndOr::And(p) => (st == 0, p),
                AndOr::Or(p) => (st != 0, p),
            };
            if run {
                st = self.exec_pipeline_cond(p, !last).await?;
                eligible = last && !p.bang;
            }
        }
        self.status = st;
        if st != 0 && eligible && self.opts.errexit && self.cond_depth == 0 {
            return Err(Ctl::Exit(st));
        }
        Ok(st)
    }

    async fn exec_pipeline_cond(&mut self, p: &Pipeline, cond: bool) -> R {
        if cond {
            self.cond_depth += 1;
        }
        let r = self.exec_pipeline(p).await;
        if cond {
            self.cond_depth -= 1;
        }
        r
    }

    async fn exec_pipeline(&mut self, p: &Pipeline) -> R {
        let start = std::time::Instant::now();
        if p.bang {
            self.cond_depth += 1;
        }
        let r = if p.seq.len() == 1 {
            match p.seq.first() {
                Some(c) => self.exec_command(c).await,
                None => Ok(0),
            }
        } else {
            self.exec_multi(&p.seq).await
        };
        if p.bang {
            self.cond_depth -= 1;
        }
        let mut st = r?;
        if p.timed.is_some() {
            let secs = start.elapsed().as_secs_f64();
            let t = format!(
                "\nreal\t{}m{:.3}s\nuser\t0m0.000s\nsys\t0m0.000s\n",
                (secs / 60.0) as u64,
                secs % 60.0
            );
            let _ = self.write_fd(2, t.as_bytes()).await;
        }
        if p.bang {
            st = i32::from(st == 0);
        }
        self.status = st;
        Ok(st)
    }

    /// Runs the stages of a pipeline concurrently, each in a copy of the shell.
    async fn exec_multi(&mut self, seq: &[Command]) -> R {
        let n = seq.len();
        let mut stages = Vec::with_capacity(n);
        let mut prev: Option<Arc<SharedReader>> = None;
        for (i, cmd) in seq.iter().enumerate() {
            let mut sub = self.subshell();
            if let Some(r) = prev.take() {
                sub.fds.set(0, Some(Fd::In(r)));
            }
            if i + 1 < n {
                let (w, r) = pipe();
                sub.fds.set(1, Some(Fd::Out(w)));
                prev = Some(r);
            }
            stages.push(async move {
                let mut sub = sub;
                let r = sub.exec_command(cmd).await;
                let st = status_of(r, sub.status);
                // Dropping the shell closes its end of the pipes.
                drop(sub);
                st
            });
        }
        drop(prev);
        let statuses = futures_util::future::join_all(stages).await;
        if self.ctx.aborted() {
            return Err(Ctl::Exit(2));
        }
        let last = statuses.last().copied().unwrap_or(0);
        if self.opts.pipefail {
            Ok(statuses
                .iter()
                .rev()
                .copied()
                .find(|s| *s != 0)
                .unwrap_or(0))
        } else {
            Ok(last)
        }
    }

    pub(crate) fn exec_command<'a>(&'a mut self, cmd: &'a Command) -> BoxFut<'a, R> {
        Box::pin(async move {
            let r = match cmd {
                Command::Simple(sc) => self.exec_simple(sc).await,
                Command::Compound(cc, redirs) => {
                    let saved = self.fds.clone();
                    let r = match self
                        .apply_redirects(redirs.as_ref().map_or(&[][..], |r| &r.0[..]))
                        .await
                    {
                        Ok(()) => self.exec_compound(cc).await,
                        Err(e) => Err(e),
                    };
                    self.fds = saved;
                    r
                }
                Command::Function(fd) => {
                    // Counted at the length of its text (the parsed tree is of that order).
                    let size = fd.body.to_string().len();
                    let body = Counted::new(&self.ctx.budget, fd.body.clone(), size)?;
                    self.funcs.insert(fd.fname.value.clone(), Arc::new(body));
                    Ok(0)
                }
                Command::ExtendedTest(et, redirs) => {
                    let saved = self.fds.clone();
                    let r = match self
                        .apply_redirects(redirs.as_ref().map_or(&[][..], |r| &r.0[..]))
                        .await
                    {
                        Ok(()) => {
                            if self.opts.xtrace {
                                let t = format!("+ [[ {} ]]\n", et.expr);
                                let _ = self.write_fd(2, t.as_bytes()).await;
                            }
                            self.eval_extended(&et.expr).await.map(|b| i32::from(!b))
                        }
                        Err(e) => Err(e),
                    };
                    self.fds = saved;
                    r
                }
            };
            match r {
                Err(Ctl::Fail(s)) => {
                    self.status = s;
                    Ok(s)
                }
                r => r,
            }
        })
    }
}

/// What `with_temp_env` runs.
pub(crate) enum Target {
    Function(Func),
    Builtin,
}
