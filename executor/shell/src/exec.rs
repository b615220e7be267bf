//! Execution of the AST: lists, and-or lists, pipelines (stages run concurrently in the same
//! future), compound commands, simple commands, redirections, function calls, background
//! jobs, and the dispatch of a command name to a function, a builtin, a script or a program.

use std::collections::HashMap;
use std::sync::Arc;

use brush_parser::ast::{
    self, AndOr, AndOrList, AssignmentName, AssignmentValue, CaseItemPostAction, Command,
    CommandPrefixOrSuffixItem, CompoundCommand, CompoundList, IoFileRedirectKind,
    IoFileRedirectTarget, IoRedirect, Pipeline, SeparatorOperator, SimpleCommand,
};

use super::fs::{self, Mode, Special};
use super::glob::Pattern;
use super::io::{Fd, SharedReader, SharedWriter, SyncFile, memory_reader, pipe};
use super::parse::{self, ParseFail};
use super::state::{BoxFut, Ctl, Job, MAX_DEPTH, R, Shell, quote};
use super::{Stdio, builtins};

/// Directories whose programs are the toolbox's (`/bin/ls` runs `ls`).
const BIN_DIRS: [&str; 5] = [
    "/bin/",
    "/usr/bin/",
    "/usr/local/bin/",
    "/sbin/",
    "/usr/sbin/",
];

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
        // A WASM computer has no processes after the call returns: cancel background jobs.
        self.jobs.clear();
        if self.ctx.aborted() { 2 } else { st & 0xff }
    }

    /// Enters one nesting level (function, eval, source, substitution, subshell).
    pub(crate) async fn enter(&mut self) -> Result<(), Ctl> {
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
        let handle = tokio::spawn(async move {
            let r = sub.exec_and_or(&ao).await;
            let st = status_of(r, sub.status);
            drop(sub);
            st
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
                    self.funcs
                        .insert(fd.fname.value.clone(), Arc::new(fd.body.clone()));
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

    async fn run_loop_body(&mut self, body: &CompoundList, st: &mut i32) -> Result<bool, Ctl> {
        match self.exec_list(body).await {
            Ok(s) => {
                *st = s;
                Ok(true)
            }
            Err(Ctl::Break(n)) => {
                if n > 1 {
                    Err(Ctl::Break(n - 1))
                } else {
                    Ok(false)
                }
            }
            Err(Ctl::Continue(n)) => {
                if n > 1 {
                    Err(Ctl::Continue(n - 1))
                } else {
                    Ok(true)
                }
            }
            Err(e) => Err(e),
        }
    }

    async fn cond(&mut self, list: &CompoundList) -> R {
        self.cond_depth += 1;
        let r = self.exec_list(list).await;
        self.cond_depth -= 1;
        r
    }

    fn exec_compound<'a>(&'a mut self, cc: &'a CompoundCommand) -> BoxFut<'a, R> {
        Box::pin(async move {
            match cc {
                CompoundCommand::Arithmetic(ac) => {
                    if self.opts.xtrace {
                        let t = format!("+ (( {} ))\n", ac.expr.value);
                        let _ = self.write_fd(2, t.as_bytes()).await;
                    }
                    let v = self.arith_subst(&ac.expr.value).await?;
                    Ok(i32::from(v == 0))
                }
                CompoundCommand::ArithmeticForClause(fc) => {
                    if let Some(init) = &fc.initializer {
                        self.arith_subst(&init.value).await?;
                    }
                    self.loop_depth += 1;
                    let r = async {
                        let mut st = 0;
                        loop {
                            tokio::task::yield_now().await;
                            if let Some(c) = &fc.condition
                                && self.arith_subst(&c.value).await? == 0
                            {
                                break;
                            }
                            if !self.run_loop_body(&fc.body.list, &mut st).await? {
                                break;
                            }
                            if let Some(u) = &fc.updater {
                                self.arith_subst(&u.value).await?;
                            }
                        }
                        Ok(st)
                    }
                    .await;
                    self.loop_depth -= 1;
                    r
                }
                CompoundCommand::BraceGroup(bg) => self.exec_list(&bg.list).await,
                CompoundCommand::Subshell(sc) => {
                    let mut sub = self.subshell();
                    sub.enter().await?;
                    let list = sc.list.clone();
                    let r = sub
                        .on_fresh_stack(Box::new(move |sh| {
                            Box::pin(async move { sh.exec_list(&list).await })
                        }))
                        .await;
                    let st = status_of(r, sub.status);
                    drop(sub);
                    if self.ctx.aborted() {
                        return Err(Ctl::Exit(2));
                    }
                    Ok(st)
                }
                CompoundCommand::ForClause(fc) => {
                    let values = match &fc.values {
                        Some(words) => {
                            let raw: Vec<String> = words.iter().map(|w| w.value.clone()).collect();
                            self.expand_args(&raw).await?
                        }
                        None => self.params.clone(),
                    };
                    self.loop_depth += 1;
                    let r = async {
                        let mut st = 0;
                        for v in values {
                            tokio::task::yield_now().await;
                            if let Err(m) = self.set_var(&fc.variable_name, &v) {
                                self.err(&m).await;
                                return Err(Ctl::Fail(1));
                            }
                            if !self.run_loop_body(&fc.body.list, &mut st).await? {
                                break;
                            }
                        }
                        Ok(st)
                    }
                    .await;
                    self.loop_depth -= 1;
                    r
                }
                CompoundCommand::CaseClause(cc) => {
                    let value = self.expand_one(&cc.value.value).await?;
                    let mut st = 0;
                    let mut i = 0;
                    let mut fall = false;
                    while let Some(item) = cc.cases.get(i) {
                        let mut hit = fall;
                        if !hit {
                            for p in &item.patterns {
                                let pat = self.expand_pattern(&p.value).await?;
                                if Pattern::new(&pat).matches(&value) {
                                    hit = true;
                                    break;
                                }
                            }
                        }
                        fall = false;
                        if hit {
                            st = match &item.cmd {
                                Some(c) => self.exec_list(c).await?,
                                None => 0,
                            };
                            match item.post_action {
                                CaseItemPostAction::ExitCase => break,
                                CaseItemPostAction::UnconditionallyExecuteNextCaseItem => {
                                    fall = true
                                }
                                CaseItemPostAction::ContinueEvaluatingCases => {}
                            }
                        }
                        i += 1;
                    }
                    Ok(st)
                }
                CompoundCommand::IfClause(ic) => {
                    if self.cond(&ic.condition).await? == 0 {
                        return self.exec_list(&ic.then).await;
                    }
                    if let Some(elses) = &ic.elses {
                        for e in elses {
                            match &e.condition {
                                Some(c) => {
                                    if self.cond(c).await? == 0 {
                                        return self.exec_list(&e.body).await;
                                    }
                                }
                                None => return self.exec_list(&e.body).await,
                            }
                        }
                    }
                    Ok(0)
                }
                CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
                    let until = matches!(cc, CompoundCommand::UntilClause(_));
                    self.loop_depth += 1;
                    let r = async {
                        let mut st = 0;
                        loop {
                            tokio::task::yield_now().await;
                            let c = self.cond(&w.0).await?;
                            if (c == 0) == until {
                                break;
                            }
                            if !self.run_loop_body(&w.1.list, &mut st).await? {
                                break;
                            }
                        }
                        Ok(st)
                    }
                    .await;
                    self.loop_depth -= 1;
                    r
                }
                CompoundCommand::Coprocess(_) => {
                    self.err("coproc: not supported").await;
                    Ok(2)
                }
            }
        })
    }

    async fn exec_simple(&mut self, sc: &SimpleCommand) -> R {
        tokio::task::yield_now().await;
        if self.ctx.aborted() {
            return Err(Ctl::Exit(2));
        }
        self.cmdsub_status = None;
        let mut assigns = Vec::new();
        let mut words: Vec<(&str, bool)> = Vec::new();
        let mut redirs: Vec<&IoRedirect> = Vec::new();
        let decl = sc.word_or_name.as_ref().is_some_and(|w| {
            matches!(
                w.value.as_str(),
                "export" | "local" | "declare" | "typeset" | "readonly"
            )
        });
        if let Some(p) = &sc.prefix {
            for it in &p.0 {
                match it {
                    CommandPrefixOrSuffixItem::IoRedirect(r) => redirs.push(r),
                    CommandPrefixOrSuffixItem::AssignmentWord(a, _) => assigns.push(a),
                    CommandPrefixOrSuffixItem::Word(w) => words.push((&w.value, false)),
                    CommandPrefixOrSuffixItem::ProcessSubstitution(..) => {
                        self.err("process substitution is not supported").await;
                        return Ok(1);
                    }
                }
            }
        }
        if let Some(w) = &sc.word_or_name {
            words.push((&w.value, false));
        }
        if let Some(s) = &sc.suffix {
            for it in &s.0 {
                match it {
                    CommandPrefixOrSuffixItem::IoRedirect(r) => redirs.push(r),
                    CommandPrefixOrSuffixItem::AssignmentWord(_, w) => words.push((&w.value, decl)),
                    CommandPrefixOrSuffixItem::Word(w) => words.push((&w.value, false)),
                    CommandPrefixOrSuffixItem::ProcessSubstitution(..) => {
                        self.err("process substitution is not supported").await;
                        return Ok(1);
                    }
                }
            }
        }
        // Expand the words.
        let mut argv = Vec::new();
        for (w, nosplit) in words {
            if nosplit {
                argv.push(self.expand_one(w).await?);
            } else {
                argv.extend(self.expand_args(&[w.to_owned()]).await?);
            }
        }
        // Expand the assignments.
        let mut env: Vec<(String, String)> = Vec::new();
        for a in assigns {
            let name = match &a.name {
                AssignmentName::VariableName(n) | AssignmentName::ArrayElementName(n, _) => {
                    n.clone()
                }
            };
            let mut value = match &a.value {
                AssignmentValue::Scalar(w) => self.expand_one(&w.value).await?,
                AssignmentValue::Array(items) => {
                    let raw: Vec<String> = items.iter().map(|(_, w)| w.value.clone()).collect();
                    self.expand_args(&raw).await?.join(" ")
                }
            };
            if a.append {
                value = format!("{}{value}", self.get(&name).unwrap_or(""));
            }
            env.push((name, value));
        }
        if self.opts.xtrace {
            let mut parts: Vec<String> = env
                .iter()
                .map(|(k, v)| format!("{k}={}", quote(v)))
                .collect();
            parts.extend(argv.iter().map(|a| quote(a)));
            if !parts.is_empty() {
                let t = format!("+ {}\n", parts.join(" "));
                let _ = self.write_fd(2, t.as_bytes()).await;
            }
        }
        if argv.is_empty() {
            let st = self.cmdsub_status.unwrap_or(0);
            for (k, v) in &env {
                if let Err(m) = self.set_var(k, v) {
                    // Like bash, a failed assignment ends a non-interactive shell.
                    self.err(&m).await;
                    return Err(Ctl::Exit(1));
                }
            }
            let saved = self.fds.clone();
            let r = self.apply_redirects_refs(&redirs).await;
            self.fds = saved;
            r?;
            return Ok(st);
        }
        if argv.len() == 1
            && argv.first().is_some_and(|a| a == "exec")
            && !self.funcs.contains_key("exec")
        {
            // `exec` with only redirections: they apply to the rest of the script.
            self.apply_redirects_refs(&redirs).await?;
            return Ok(0);
        }
        let saved = self.fds.clone();
        let r = match self.apply_redirects_refs(&redirs).await {
            Ok(()) => self.dispatch(argv, env).await,
            Err(e) => Err(e),
        };
        self.fds = saved;
        r
    }

    /// Runs a command by name: function, builtin, script or program.
    pub(crate) fn dispatch(
        &mut self,
        argv: Vec<String>,
        env: Vec<(String, String)>,
    ) -> BoxFut<'_, R> {
        Box::pin(async move {
            let Some(name) = argv.first().cloned() else {
                return Ok(0);
            };
            if let Some(f) = self.funcs.get(&name).cloned() {
                return self.with_temp_env(env, Target::Function(f), argv).await;
            }
            if builtins::is_builtin(&name) {
                return self.with_temp_env(env, Target::Builtin, argv).await;
            }
            self.run_external(argv, env).await
        })
    }

    /// Runs a function or a builtin with `env` assigned (and exported) for its duration only.
    pub(crate) async fn with_temp_env(
        &mut self,
        env: Vec<(String, String)>,
        target: Target,
        argv: Vec<String>,
    ) -> R {
        let mut saved = Vec::new();
        for (k, v) in &env {
            if self.vars.get(k).is_some_and(|v| v.readonly) {
                continue;
            }
            saved.push((k.clone(), self.vars.get(k).cloned()));
            self.set_exported(k, v);
        }
        let r = match target {
            Target::Function(f) => self.call_function(f, argv).await,
            Target::Builtin => self.builtin(argv).await,
        };
        for (k, prev) in saved.into_iter().rev() {
            match prev {
                Some(v) => {
                    self.vars.insert(k, v);
                }
                None => {
                    self.vars.remove(&k);
                }
            }
        }
        r
    }

    /// Calls a shell function with `argv[1..]` as positional parameters.
    pub(crate) fn call_function(
        &mut self,
        body: Arc<ast::FunctionBody>,
        argv: Vec<String>,
    ) -> BoxFut<'_, R> {
        Box::pin(async move {
            self.on_fresh_stack(Box::new(move |sh| sh.call_function_inner(body, argv)))
                .await
        })
    }

    fn call_function_inner(
        &mut self,
        body: Arc<ast::FunctionBody>,
        argv: Vec<String>,
    ) -> BoxFut<'_, R> {
        Box::pin(async move {
            self.enter().await?;
            let params = argv.get(1..).map(<[String]>::to_vec).unwrap_or_default();
            let saved_params = std::mem::replace(&mut self.params, params);
            let saved_loop = std::mem::replace(&mut self.loop_depth, 0);
            self.locals.push(HashMap::new());
            self.func_depth += 1;
            let saved_fds = self.fds.clone();
            let r = match self
                .apply_redirects(body.1.as_ref().map_or(&[][..], |r| &r.0[..]))
                .await
            {
                Ok(()) => self.exec_compound(&body.0).await,
                Err(e) => Err(e),
            };
            self.fds = saved_fds;
            self.func_depth -= 1;
            if let Some(frame) = self.locals.pop() {
                for (name, prev) in frame {
                    match prev {
                        Some(v) => {
                            self.vars.insert(name, v);
                        }
                        None => {
                            self.vars.remove(&name);
                        }
                    }
                }
            }
            self.loop_depth = saved_loop;
            self.params = saved_params;
            self.depth -= 1;
            match r {
                Err(Ctl::Return(s)) => Ok(s),
                Err(Ctl::Fail(s)) => Ok(s),
                r => r,
            }
        })
    }

    /// Runs a non-builtin, non-function command.
    pub(crate) async fn run_external(
        &mut self,
        argv: Vec<String>,
        env: Vec<(String, String)>,
    ) -> R {
        let Some(name) = argv.first().cloned() else {
            return Ok(0);
        };
        if !name.contains('/') {
            if self.ctx.programs.has(&name) {
                return Ok(self.run_program(argv, env).await);
            }
            self.err(&format!("{name}: command not found")).await;
            return Ok(127);
        }
        let base = name.rsplit('/').next().unwrap_or("").to_owned();
        if !base.is_empty()
            && BIN_DIRS
                .iter()
                .any(|d| name.starts_with(d) && !name[d.len()..].contains('/'))
        {
            let mut argv = argv.clone();
            if let Some(a0) = argv.first_mut() {
                a0.clone_from(&base);
            }
            if self.ctx.programs.has(&base) {
                return Ok(self.run_program(argv, env).await);
            }
            if builtins::is_builtin(&base) {
                return self.with_temp_env(env, Target::Builtin, argv).await;
            }
        }
        let abs = fs::resolve(&self.cwd, &name);
        match fs::metadata(&self.ctx.root, &abs) {
            Err(e) => {
                self.err(&format!("{name}: {}", fs::err_msg(&e))).await;
                Ok(127)
            }
            Ok(m) if m.is_dir() => {
                self.err(&format!("{name}: Is a directory")).await;
                Ok(126)
            }
            Ok(_) => {
                let content = match fs::read_file(&self.ctx.root, &abs, 16 * 1024 * 1024) {
                    Ok(c) => String::from_utf8_lossy(&c).into_owned(),
                    Err(e) => {
                        self.err(&format!("{name}: {}", fs::err_msg(&e))).await;
                        return Ok(126);
                    }
                };
                self.run_script_file(&name, &content, argv, env).await
            }
        }
    }

    async fn run_script_file(
        &mut self,
        name: &str,
        content: &str,
        argv: Vec<String>,
        env: Vec<(String, String)>,
    ) -> R {
        if let Some(first) = content.lines().next()
            && let Some(sb) = first.strip_prefix("#!")
        {
            let mut toks = sb.split_whitespace();
            let mut interp = toks
                .next()
                .unwrap_or("")
                .rsplit('/')
                .next()
                .unwrap_or("")
                .to_owned();
            let mut extra: Vec<String> = toks.map(str::to_owned).collect();
            if interp == "env" {
                if extra.first().is_some_and(|s| s == "-S") {
                    extra.remove(0);
                }
                if extra.is_empty() {
                    interp = String::new();
                } else {
                    interp = extra.remove(0);
                }
            }
            if !matches!(
                interp.as_str(),
                "sh" | "bash" | "dash" | "ash" | "ksh" | "zsh" | ""
            ) {
                if self.ctx.programs.has(&interp) {
                    let mut args = vec![interp];
                    args.extend(extra);
                    args.push(name.to_owned());
                    args.extend(argv.into_iter().skip(1));
                    return Ok(self.run_program(args, env).await);
                }
                self.err(&format!(
                    "{name}: {}: bad interpreter: No such file or directory",
                    sb.trim()
                ))
                .await;
                return Ok(126);
            }
        }
        let params = argv.get(1..).map(<[String]>::to_vec).unwrap_or_default();
        let mut child = self.child(name.to_owned(), params);
        for (k, v) in env {
            child.set_exported(&k, &v);
        }
        child.enter().await?;
        let r = child.run_text_fresh(content.to_owned()).await;
        let st = status_of(r, child.status);
        drop(child);
        if self.ctx.aborted() {
            return Err(Ctl::Exit(2));
        }
        Ok(st)
    }

    /// Runs a toolbox program with the current descriptors and environment.
    pub(crate) async fn run_program(
        &mut self,
        argv: Vec<String>,
        extra_env: Vec<(String, String)>,
    ) -> i32 {
        let env = self.exported_env(&extra_env);
        self.run_program_env(argv, env).await
    }

    pub(crate) async fn run_program_env(
        &mut self,
        argv: Vec<String>,
        env: Vec<(String, String)>,
    ) -> i32 {
        let io = Stdio {
            stdin: self.fds.boxed_in(),
            stdout: self.fds.boxed_out(1),
            stderr: self.fds.boxed_out(2),
        };
        let progs = self.ctx.programs.clone();
        let st = progs.run(argv, env, self.cwd.clone(), io).await;
        st.clamp(0, 255)
    }

    async fn apply_redirects_refs(&mut self, redirs: &[&IoRedirect]) -> Result<(), Ctl> {
        for r in redirs {
            self.apply_redirect(r).await?;
        }
        Ok(())
    }

    /// Applies redirections to the descriptor table (the caller saves and restores it).
    pub(crate) async fn apply_redirects(&mut self, redirs: &[IoRedirect]) -> Result<(), Ctl> {
        for r in redirs {
            self.apply_redirect(r).await?;
        }
        Ok(())
    }

    async fn redirect_fail(&mut self, msg: &str) -> Ctl {
        self.err(msg).await;
        Ctl::Fail(1)
    }

    async fn apply_redirect(&mut self, r: &IoRedirect) -> Result<(), Ctl> {
        match r {
            IoRedirect::File(fd, kind, target) => {
                let default = match kind {
                    IoFileRedirectKind::Read
                    | IoFileRedirectKind::ReadAndWrite
                    | IoFileRedirectKind::DuplicateInput => 0,
                    _ => 1,
                };
                let n = usize::try_from(fd.unwrap_or(default)).unwrap_or(usize::MAX);
                if n > 9 {
                    return Err(self
                        .redirect_fail(&format!("{}: Bad file descriptor", fd.unwrap_or(default)))
                        .await);
                }
                match target {
                    IoFileRedirectTarget::Filename(w) => {
                        let path = self.expand_one(&w.value).await?;
                        let mode = match kind {
                            IoFileRedirectKind::Read | IoFileRedirectKind::DuplicateInput => {
                                Mode::Read
                            }
                            IoFileRedirectKind::Append => Mode::Append,
                            IoFileRedirectKind::ReadAndWrite => Mode::ReadWrite,
                            IoFileRedirectKind::Write if self.opts.noclobber => {
                                let abs = fs::resolve(&self.cwd, &path);
                                if fs::special(&abs).is_none()
                                    && fs::metadata(&self.ctx.root, &abs).is_ok_and(|m| m.is_file())
                                {
                                    return Err(self
                                        .redirect_fail(&format!(
                                            "{path}: cannot overwrite existing file"
                                        ))
                                        .await);
                                }
                                Mode::Write
                            }
                            _ => Mode::Write,
                        };
                        let f = self.open_redirect(&path, mode).await?;
                        self.fds.set(n, Some(f));
                    }
                    IoFileRedirectTarget::Fd(m) => self.dup_fd(n, *m).await?,
                    IoFileRedirectTarget::Duplicate(w) => {
                        let s = self.expand_one(&w.value).await?;
                        if s == "-" {
                            self.fds.set(n, None);
                        } else if let Some(num) = s.strip_suffix('-')
                            && let Ok(m) = num.parse::<i32>()
                        {
                            self.dup_fd(n, m).await?;
                            if let Ok(m) = usize::try_from(m)
                                && m != n
                            {
                                self.fds.set(m, None);
                            }
                        } else if let Ok(m) = s.parse::<i32>() {
                            self.dup_fd(n, m).await?;
                        } else if matches!(kind, IoFileRedirectKind::DuplicateOutput) {
                            // `>&file` is `&>file`.
                            let f = self.open_redirect(&s, Mode::Write).await?;
                            if fd.is_none() {
                                self.fds.set(2, Some(f.clone()));
                            }
                            self.fds.set(n, Some(f));
                        } else {
                            return Err(self
                                .redirect_fail(&format!("{s}: ambiguous redirect"))
                                .await);
                        }
                    }
                    IoFileRedirectTarget::ProcessSubstitution(..) => {
                        return Err(self
                            .redirect_fail("process substitution is not supported")
                            .await);
                    }
                }
            }
            IoRedirect::HereDocument(fd, doc) => {
                let mut body = if doc.requires_expansion {
                    self.expand_heredoc(&doc.doc.value).await?
                } else {
                    doc.doc.value.clone()
                };
                if doc.remove_tabs {
                    body = body
                        .split_inclusive('\n')
                        .map(|l| l.trim_start_matches('\t'))
                        .collect();
                }
                let n = usize::try_from(fd.unwrap_or(0)).unwrap_or(usize::MAX);
                if n > 9 {
                    return Err(self.redirect_fail("Bad file descriptor").await);
                }
                self.fds
                    .set(n, Some(Fd::In(memory_reader(body.into_bytes()))));
            }
            IoRedirect::HereString(fd, w) => {
                let mut s = self.expand_one(&w.value).await?;
                s.push('\n');
                let n = usize::try_from(fd.unwrap_or(0)).unwrap_or(usize::MAX);
                if n > 9 {
                    return Err(self.redirect_fail("Bad file descriptor").await);
                }
                self.fds.set(n, Some(Fd::In(memory_reader(s.into_bytes()))));
            }
            IoRedirect::OutputAndError(w, append) => {
                let path = self.expand_one(&w.value).await?;
                let f = self
                    .open_redirect(&path, if *append { Mode::Append } else { Mode::Write })
                    .await?;
                self.fds.set(1, Some(f.clone()));
                self.fds.set(2, Some(f));
            }
        }
        Ok(())
    }

    async fn dup_fd(&mut self, n: usize, m: i32) -> Result<(), Ctl> {
        let src = usize::try_from(m)
            .ok()
            .and_then(|m| self.fds.get(m).cloned());
        match src {
            Some(f) => {
                self.fds.set(n, Some(f));
                Ok(())
            }
            None => Err(self
                .redirect_fail(&format!("{m}: Bad file descriptor"))
                .await),
        }
    }

    /// Opens a redirection target (special device or a file inside the root).
    pub(crate) async fn open_redirect(&mut self, path: &str, mode: Mode) -> Result<Fd, Ctl> {
        if path.is_empty() {
            return Err(self.redirect_fail(": No such file or directory").await);
        }
        let abs = fs::resolve(&self.cwd, path);
        let reading = matches!(mode, Mode::Read | Mode::ReadWrite);
        match fs::special(&abs) {
            Some(Special::Null) => {
                return Ok(if reading {
                    Fd::In(memory_reader(Vec::new()))
                } else {
                    Fd::Out(SharedWriter::new(Box::new(tokio::io::sink())))
                });
            }
            Some(Special::Zero) => {
                return Ok(if reading {
                    Fd::In(SharedReader::new(Box::new(tokio::io::repeat(0))))
                } else {
                    Fd::Out(SharedWriter::new(Box::new(tokio::io::sink())))
                });
            }
            Some(Special::Fd(k)) => {
                return match self.fds.get(k).cloned() {
                    Some(f) => Ok(f),
                    None => Err(self
                        .redirect_fail(&format!("{path}: Bad file descriptor"))
                        .await),
                };
            }
            None => {}
        }
        match fs::open(&self.ctx.root, &abs, mode) {
            Ok(f) => Ok(if reading {
                Fd::In(SharedReader::new(Box::new(SyncFile(f))))
            } else {
                Fd::Out(SharedWriter::new(Box::new(SyncFile(f))))
            }),
            Err(e) => Err(self
                .redirect_fail(&format!("{path}: {}", fs::err_msg(&e)))
                .await),
        }
    }
}

/// What `with_temp_env` runs.
pub(crate) enum Target {
    Function(Arc<ast::FunctionBody>),
    Builtin,
}
