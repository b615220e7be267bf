//! Simple commands: assignments, expansion, xtrace, redirections around the command, and
//! running it as a function, a builtin, a script file or a program of the toolbox
//! (through `Programs`), with temporary environment assignments.

use cap_std::fs::PermissionsExt;

use super::*;

/// Directories whose programs are the toolbox's (`/bin/ls` runs `ls`).
const BIN_DIRS: [&str; 5] = [
    "/bin/",
    "/usr/bin/",
    "/usr/local/bin/",
    "/sbin/",
    "/usr/sbin/",
];

impl Shell {
    pub(super) async fn exec_simple(&mut self, sc: &SimpleCommand) -> R {
        tokio::task::yield_now().await;
        self.ctx.budget.check()?;
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
        // Expand the words: what is built is counted until the command is over.
        let mut held = Charge::new(&self.ctx.budget);
        let mut argv = Vec::new();
        for (w, nosplit) in words {
            let before = argv.len();
            if nosplit {
                argv.push(self.expand_one(w).await?);
            } else {
                argv.extend(self.expand_args(&[w.to_owned()]).await?);
            }
            held.grow(
                argv.get(before..)
                    .unwrap_or(&[])
                    .iter()
                    .map(|a| a.len() + 8)
                    .sum(),
            )?;
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
                let old = self.get(&name).unwrap_or("");
                self.ctx.budget.fits(old.len() + value.len())?;
                value = format!("{old}{value}");
            }
            held.grow(value.len())?;
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
            for (k, v) in env {
                // The value moves into the variable, which counts it from now on.
                held.shrink(v.len());
                if let Err(m) = self.set_var_owned(&k, v) {
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
    pub(crate) fn call_function(&mut self, body: Func, argv: Vec<String>) -> BoxFut<'_, R> {
        Box::pin(async move {
            self.on_fresh_stack(Box::new(move |sh| sh.call_function_inner(body, argv)))
                .await
        })
    }

    fn call_function_inner(&mut self, body: Func, argv: Vec<String>) -> BoxFut<'_, R> {
        Box::pin(async move {
            let params = Params::new(&self.ctx.budget, argv.into_iter().skip(1).collect())?;
            self.enter().await?;
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
            Ok(m) if m.permissions().mode() & 0o111 == 0 => {
                // As on Linux: a script runs only once it is executable (`chmod +x`).
                self.err(&format!("{name}: Permission denied")).await;
                Ok(126)
            }
            Ok(_) => {
                let content = match fs::read_file(&self.ctx.root, &abs, 16 * 1024 * 1024) {
                    Ok(c) => crate::bytes::decode(&c),
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
        let params = Params::new(&self.ctx.budget, argv.into_iter().skip(1).collect())?;
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
        // Measured before the environment is copied: a big exported value is refused, not
        // copied for every program.
        let env_size: usize = self
            .vars
            .iter()
            .filter(|(_, v)| v.exported)
            .map(|(k, v)| k.len() + v.value.as_str().len() + 2)
            .chain(extra_env.iter().map(|(k, v)| k.len() + v.len() + 2))
            .sum();
        if let Some(st) = self.too_long(&argv, env_size).await {
            return st;
        }
        let env = self.exported_env(&extra_env);
        self.run_program_env(argv, env).await
    }

    /// E2BIG: argv and environment over the argument limit (`ARG_MAX`) refuse to run, with
    /// status 126 as a real shell reports a failed exec.
    pub(crate) async fn too_long(&mut self, argv: &[String], env_size: usize) -> Option<i32> {
        let limit = self.ctx.budget.limits().args;
        let size = argv.iter().map(|a| a.len() + 1).sum::<usize>() + env_size;
        if size <= limit {
            return None;
        }
        let name = argv.first().map_or("", String::as_str).to_owned();
        self.err(&format!(
            "{name}: argument list too long ({} of arguments and environment, the limit is {}); \
             pass large data through a file or stdin",
            crate::size_text(size),
            crate::size_text(limit)
        ))
        .await;
        Some(126)
    }

    pub(crate) async fn run_program_env(
        &mut self,
        argv: Vec<String>,
        env: Vec<(String, String)>,
    ) -> i32 {
        let env_size = env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        if let Some(st) = self.too_long(&argv, env_size).await {
            return st;
        }
        let mut argv = argv;
        let stdin: crate::Input = match crate::dev::device_operand(&mut argv, &self.cwd) {
            Some(crate::dev::Device::Zero) => Box::new(tokio::io::repeat(0)),
            Some(crate::dev::Device::Random) => Box::new(crate::dev::Random),
            Some(crate::dev::Device::Null) => Box::new(tokio::io::empty()),
            _ => self.fds.boxed_in(),
        };
        let io = Stdio {
            stdin,
            stdout: self.fds.boxed_out(1),
            stderr: self.fds.boxed_out(2),
        };
        let progs = self.ctx.programs.clone();
        // WASI takes UTF-8 only: bytes held in the shell's text become what they stand for.
        let argv = argv.into_iter().map(crate::bytes::to_utf8).collect();
        let env = env
            .into_iter()
            .map(|(k, v)| (k, crate::bytes::to_utf8(v)))
            .collect();
        let st = progs.run(argv, env, self.cwd.clone(), io).await;
        st.clamp(0, 255)
    }
}
