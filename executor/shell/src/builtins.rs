//! Builtins, run on the host (never through `Programs`): `: true false echo printf pwd cd
//! test [ export unset set shift local declare typeset readonly return exit break continue
//! read eval source . sh bash dash command type which xargs env kill wait sleep trap exec
//! umask hash ulimit let shopt alias unalias jobs builtin disown getopts`.

use std::time::Duration;

use super::exec::{Target, status_of};
use super::fs;
use super::io::{Fd, memory_reader};
use super::printf;
use super::state::{BoxFut, Ctl, R, Shell, quote, valid_name};

const BUILTINS: &[&str] = &[
    ":", "true", "false", "echo", "printf", "pwd", "cd", "test", "[", "export", "unset", "set",
    "shift", "local", "declare", "typeset", "readonly", "return", "exit", "break", "continue",
    "read", "eval", "source", ".", "sh", "bash", "dash", "command", "type", "which", "xargs",
    "env", "kill", "wait", "sleep", "trap", "exec", "umask", "hash", "ulimit", "let", "shopt",
    "alias", "unalias", "jobs", "builtin", "disown", "getopts",
];

const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "while", "until", "do", "done",
    "in", "function", "{", "}", "!", "[[", "]]", "time",
];

const SIGNALS: &[&str] = &[
    "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
    "PIPE", "ALRM", "TERM",
];

pub(crate) fn is_builtin(name: &str) -> bool {
    BUILTINS.contains(&name)
}

fn signal_number(s: &str) -> Option<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return Some(n);
    }
    let u = s.to_uppercase();
    let u = u.strip_prefix("SIG").unwrap_or(&u);
    SIGNALS.iter().position(|x| *x == u).map(|i| i as i32 + 1)
}

fn parse_duration(s: &str) -> Option<f64> {
    if matches!(s, "inf" | "infinity") {
        return Some(f64::INFINITY);
    }
    let (num, mult) = match s.chars().last()? {
        's' => (s.get(..s.len() - 1)?, 1.0),
        'm' => (s.get(..s.len() - 1)?, 60.0),
        'h' => (s.get(..s.len() - 1)?, 3600.0),
        'd' => (s.get(..s.len() - 1)?, 86400.0),
        _ => (s, 1.0),
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v * mult)
}

/// Splits xargs input into items: whitespace-separated with quotes and backslashes.
fn xargs_items(input: &str) -> Result<Vec<String>, String> {
    let mut items = Vec::new();
    let mut cur = String::new();
    let mut has = false;
    let mut it = input.chars();
    while let Some(c) = it.next() {
        match c {
            '\'' | '"' => {
                has = true;
                loop {
                    match it.next() {
                        Some(q) if q == c => break,
                        Some(x) => cur.push(x),
                        None => return Err("xargs: unmatched quote".into()),
                    }
                }
            }
            '\\' => {
                has = true;
                if let Some(x) = it.next() {
                    cur.push(x);
                }
            }
            c if c.is_whitespace() => {
                if has {
                    items.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            c => {
                has = true;
                cur.push(c);
            }
        }
    }
    if has {
        items.push(cur);
    }
    Ok(items)
}

impl Shell {
    /// The status argument of `return`/`exit` (the last status without one; 2 and a
    /// message when it is not a number).
    async fn status_arg(&mut self, name: &str, args: &[String]) -> i32 {
        match args.first() {
            Some(a) => match a.parse::<i64>() {
                Ok(n) => (n & 0xff) as i32,
                Err(_) => {
                    self.err(&format!("{name}: {a}: numeric argument required"))
                        .await;
                    2
                }
            },
            None => self.status,
        }
    }

    fn signal_names(&self) -> String {
        SIGNALS
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{:2}) SIG{s}", i + 1))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    }

    /// Runs a builtin (`argv[0]` is its name).
    pub(crate) fn builtin(&mut self, argv: Vec<String>) -> BoxFut<'_, R> {
        Box::pin(async move {
            let name = argv.first().cloned().unwrap_or_default();
            let args: Vec<String> = argv.get(1..).map(<[String]>::to_vec).unwrap_or_default();
            let r = self.builtin_inner(&name, args).await;
            match r {
                Err(Ctl::Fail(s)) => Ok(s),
                r => r,
            }
        })
    }

    async fn builtin_inner(&mut self, name: &str, args: Vec<String>) -> R {
        match name {
            ":" | "true" | "hash" | "shopt" | "alias" | "unalias" | "disown" => Ok(0),
            "false" => Ok(1),
            "echo" => self.bi_echo(&args).await,
            "printf" => self.bi_printf(&args).await,
            "pwd" => {
                let s = format!("{}\n", self.cwd);
                self.out(&s).await?;
                Ok(0)
            }
            "cd" => self.bi_cd(&args).await,
            "test" => Ok(self.builtin_test("test", &args).await),
            "[" => {
                if args.last().is_none_or(|a| a != "]") {
                    self.err("[: missing `]'").await;
                    return Ok(2);
                }
                let n = args.len() - 1;
                Ok(self.builtin_test("[", args.get(..n).unwrap_or(&[])).await)
            }
            "export" | "readonly" => self.bi_export(name, &args).await,
            "unset" => self.bi_unset(&args).await,
            "set" => self.bi_set(&args).await,
            "shift" => {
                let n = match args.first() {
                    Some(a) => match a.parse::<usize>() {
                        Ok(n) => n,
                        Err(_) => {
                            self.err(&format!("shift: {a}: numeric argument required"))
                                .await;
                            return Ok(1);
                        }
                    },
                    None => 1,
                };
                if n > self.params.len() {
                    return Ok(1);
                }
                self.params.drain(..n);
                Ok(0)
            }
            "local" | "declare" | "typeset" => self.bi_local(name, &args).await,
            "return" => {
                let n = self.status_arg("return", &args).await;
                if self.func_depth == 0 {
                    self.err("return: can only `return' from a function or sourced script")
                        .await;
                    return Ok(1);
                }
                Err(Ctl::Return(n))
            }
            "exit" => {
                let n = self.status_arg("exit", &args).await;
                Err(Ctl::Exit(n))
            }
            "break" | "continue" => {
                let n = match args.first() {
                    Some(a) => match a.parse::<usize>() {
                        Ok(n) if n >= 1 => n,
                        _ => {
                            self.err(&format!("{name}: {a}: loop count out of range"))
                                .await;
                            return Ok(1);
                        }
                    },
                    None => 1,
                };
                if self.loop_depth == 0 {
                    self.err(&format!(
                        "{name}: only meaningful in a `for', `while', or `until' loop"
                    ))
                    .await;
                    return Ok(0);
                }
                let n = n.min(self.loop_depth);
                Err(if name == "break" {
                    Ctl::Break(n)
                } else {
                    Ctl::Continue(n)
                })
            }
            "read" => self.bi_read(&args).await,
            "eval" => {
                let text = args.join(" ");
                match self.run_nested(&text).await {
                    Err(Ctl::Fail(s)) => Ok(s),
                    r => r,
                }
            }
            "source" | "." => self.bi_source(name, &args).await,
            "sh" | "bash" | "dash" => self.bi_sh(name, &args).await,
            "command" => self.bi_command(&args).await,
            "type" => self.bi_type(&args).await,
            "which" => {
                let mut st = 0;
                for a in args.iter().filter(|a| !a.starts_with('-')) {
                    if self.ctx.programs.has(a) {
                        let s = format!("/usr/bin/{a}\n");
                        self.out(&s).await?;
                    } else if a.contains('/')
                        && fs::metadata(&self.ctx.root, &fs::resolve(&self.cwd, a))
                            .is_ok_and(|m| m.is_file())
                    {
                        let s = format!("{a}\n");
                        self.out(&s).await?;
                    } else {
                        st = 1;
                    }
                }
                Ok(st)
            }
            "xargs" => self.bi_xargs(&args).await,
            "env" => self.bi_env(&args).await,
            "kill" => self.bi_kill(&args).await,
            "wait" => self.bi_wait(&args).await,
            "jobs" => {
                let mut s = String::new();
                let pids_only = args.iter().any(|a| a == "-p");
                for j in &self.jobs {
                    let running = j.handle.as_ref().is_some_and(|h| !h.is_finished());
                    if pids_only {
                        s.push_str(&format!("{}\n", j.pid));
                    } else {
                        s.push_str(&format!(
                            "[{}]  {}  {}\n",
                            j.id,
                            if running { "Running" } else { "Done" },
                            j.cmd.trim()
                        ));
                    }
                }
                self.out(&s).await?;
                Ok(0)
            }
            "sleep" => {
                if args.is_empty() {
                    self.err("sleep: missing operand").await;
                    return Ok(1);
                }
                let mut total = 0.0f64;
                for a in &args {
                    match parse_duration(a) {
                        Some(v) => total += v,
                        None => {
                            self.err(&format!("sleep: invalid time interval '{a}'"))
                                .await;
                            return Ok(1);
                        }
                    }
                }
                if total.is_infinite() {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(Duration::from_secs_f64(total.min(1e9))).await;
                Ok(0)
            }
            "trap" => self.bi_trap(&args).await,
            "exec" => {
                if args.is_empty() {
                    return Ok(0);
                }
                let st = self.dispatch_no_functions(args, Vec::new()).await?;
                Err(Ctl::Exit(st))
            }
            "umask" => {
                if args.is_empty() {
                    self.out("0022\n").await?;
                } else if args.first().is_some_and(|a| a == "-S") {
                    self.out("u=rwx,g=rx,o=rx\n").await?;
                }
                Ok(0)
            }
            "ulimit" => {
                if args.iter().all(|a| a.starts_with('-')) {
                    self.out("unlimited\n").await?;
                }
                Ok(0)
            }
            "let" => {
                if args.is_empty() {
                    self.err("let: expression expected").await;
                    return Ok(1);
                }
                let mut last = 0;
                for a in &args {
                    last = self.arith_subst(a).await?;
                }
                Ok(i32::from(last == 0))
            }
            "builtin" => {
                let Some(n) = args.first() else {
                    return Ok(0);
                };
                if !is_builtin(n) {
                    self.err(&format!("builtin: {n}: not a shell builtin"))
                        .await;
                    return Ok(1);
                }
                self.builtin(args).await
            }
            "getopts" => self.bi_getopts(&args).await,
            _ => {
                self.err(&format!("{name}: command not found")).await;
                Ok(127)
            }
        }
    }

    /// Runs a builtin or an external command (not a function): `command`, `exec`, `env`.
    pub(crate) async fn dispatch_no_functions(
        &mut self,
        argv: Vec<String>,
        env: Vec<(String, String)>,
    ) -> R {
        let Some(name) = argv.first() else {
            return Ok(0);
        };
        if is_builtin(name) {
            return self.with_temp_env(env, Target::Builtin, argv).await;
        }
        self.run_external(argv, env).await
    }

    async fn bi_echo(&mut self, args: &[String]) -> R {
        let mut newline = true;
        let mut esc = false;
        let mut i = 0;
        while let Some(a) = args.get(i) {
            if a.len() > 1
                && a.starts_with('-')
                && a.chars().skip(1).all(|c| matches!(c, 'n' | 'e' | 'E'))
            {
                for c in a.chars().skip(1) {
                    match c {
                        'n' => newline = false,
                        'e' => esc = true,
                        _ => esc = false,
                    }
                }
                i += 1;
            } else {
                break;
            }
        }
        let mut s = args.get(i..).unwrap_or(&[]).join(" ");
        if esc {
            let (t, stop) = printf::escapes(&s, false);
            s = t;
            if stop {
                newline = false;
            }
        }
        if newline {
            s.push('\n');
        }
        self.out(&s).await?;
        Ok(0)
    }

    async fn bi_printf(&mut self, args: &[String]) -> R {
        let mut args = args;
        let mut var = None;
        if args.first().is_some_and(|a| a == "-v") {
            var = args.get(1).cloned();
            args = args.get(2..).unwrap_or(&[]);
        }
        if args.first().is_some_and(|a| a == "--") {
            args = args.get(1..).unwrap_or(&[]);
        }
        let Some(fmt) = args.first() else {
            self.err("printf: usage: printf [-v var] format [arguments]")
                .await;
            return Ok(2);
        };
        let f = printf::format(fmt, args.get(1..).unwrap_or(&[]));
        for e in &f.errors {
            self.err(e).await;
        }
        match var {
            Some(v) => {
                if let Err(m) = self.set_var(&v, &f.out) {
                    self.err(&m).await;
                    return Ok(1);
                }
            }
            None => self.out(&f.out).await?,
        }
        Ok(i32::from(!f.errors.is_empty()))
    }

    async fn bi_cd(&mut self, args: &[String]) -> R {
        let args: Vec<&String> = args
            .iter()
            .filter(|a| !matches!(a.as_str(), "-L" | "-P" | "-e" | "--"))
            .collect();
        let mut print = false;
        let target = match args.first() {
            None => match self.get("HOME") {
                Some(h) => h.to_owned(),
                None => {
                    self.err("cd: HOME not set").await;
                    return Ok(1);
                }
            },
            Some(a) if a.as_str() == "-" => match self.get("OLDPWD") {
                Some(h) => {
                    print = true;
                    h.to_owned()
                }
                None => {
                    self.err("cd: OLDPWD not set").await;
                    return Ok(1);
                }
            },
            Some(a) => (*a).clone(),
        };
        if target.is_empty() {
            return Ok(0);
        }
        let abs = fs::resolve(&self.cwd, &target);
        match fs::metadata(&self.ctx.root, &abs) {
            Ok(m) if m.is_dir() => {
                let old = std::mem::replace(&mut self.cwd, abs.clone());
                self.set_exported("OLDPWD", &old);
                self.set_exported("PWD", &abs);
                if print {
                    self.out(&format!("{abs}\n")).await?;
                }
                Ok(0)
            }
            Ok(_) => {
                self.err(&format!("cd: {target}: Not a directory")).await;
                Ok(1)
            }
            Err(e) => {
                self.err(&format!("cd: {target}: {}", fs::err_msg(&e)))
                    .await;
                Ok(1)
            }
        }
    }

    async fn print_vars(&mut self, prefix: &str, filter: impl Fn(&super::state::Var) -> bool) -> R {
        let mut names: Vec<(&String, &super::state::Var)> =
            self.vars.iter().filter(|(_, v)| filter(v)).collect();
        names.sort_by(|a, b| a.0.cmp(b.0));
        let s: String = names
            .iter()
            .map(|(k, v)| format!("{prefix}{k}={}\n", quote(&v.value)))
            .collect();
        self.out(&s).await?;
        Ok(0)
    }

    async fn bi_export(&mut self, name: &str, args: &[String]) -> R {
        let mut unexport = false;
        let mut rest = Vec::new();
        for a in args {
            match a.as_str() {
                "-n" => unexport = true,
                "-p" | "-f" | "--" => {}
                _ => rest.push(a.clone()),
            }
        }
        if rest.is_empty() {
            return if name == "export" {
                self.print_vars("export ", |v| v.exported).await
            } else {
                self.print_vars("readonly ", |v| v.readonly).await
            };
        }
        let mut st = 0;
        for a in rest {
            let (n, v) = match a.split_once('=') {
                Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
                None => (a.clone(), None),
            };
            if !valid_name(&n) {
                self.err(&format!("{name}: `{a}': not a valid identifier"))
                    .await;
                st = 1;
                continue;
            }
            if let Some(v) = v
                && let Err(m) = self.set_var(&n, &v)
            {
                self.err(&m).await;
                st = 1;
                continue;
            }
            if name == "readonly" {
                self.vars.entry(n).or_default().readonly = true;
            } else if let Some(var) = self.vars.get_mut(&n) {
                var.exported = !unexport;
            }
        }
        Ok(st)
    }

    async fn bi_unset(&mut self, args: &[String]) -> R {
        let mut funcs = false;
        let mut vars_only = false;
        let mut st = 0;
        for a in args {
            match a.as_str() {
                "-f" => funcs = true,
                "-v" => vars_only = true,
                "--" => {}
                n => {
                    if funcs {
                        self.funcs.remove(n);
                    } else if self.vars.contains_key(n) || vars_only {
                        if let Err(m) = self.unset_var(n) {
                            self.err(&format!("unset: {m}")).await;
                            st = 1;
                        }
                    } else {
                        self.funcs.remove(n);
                    }
                }
            }
        }
        Ok(st)
    }

    fn set_opt(&mut self, name: &str, on: bool) -> bool {
        match name {
            "errexit" | "e" => self.opts.errexit = on,
            "nounset" | "u" => self.opts.nounset = on,
            "xtrace" | "x" => self.opts.xtrace = on,
            "pipefail" => self.opts.pipefail = on,
            "noglob" | "f" => self.opts.noglob = on,
            "noclobber" | "C" => self.opts.noclobber = on,
            "allexport" | "a" => self.opts.allexport = on,
            "verbose"
            | "v"
            | "hashall"
            | "h"
            | "braceexpand"
            | "B"
            | "monitor"
            | "m"
            | "posix"
            | "emacs"
            | "vi"
            | "notify"
            | "b"
            | "noexec"
            | "n"
            | "interactive-comments"
            | "histexpand"
            | "H"
            | "history"
            | "ignoreeof"
            | "errtrace"
            | "E"
            | "functrace"
            | "T"
            | "physical"
            | "P"
            | "privileged"
            | "p"
            | "keyword"
            | "k"
            | "onecmd"
            | "t"
            | "nolog" => {}
            _ => return false,
        }
        true
    }

    async fn bi_set(&mut self, args: &[String]) -> R {
        if args.is_empty() {
            return self.print_vars("", |_| true).await;
        }
        let mut i = 0;
        while let Some(a) = args.get(i) {
            if a == "--" {
                self.params = args.get(i + 1..).unwrap_or(&[]).to_vec();
                return Ok(0);
            }
            if a == "-" {
                self.opts.xtrace = false;
                i += 1;
                break;
            }
            let on = a.starts_with('-');
            if !(on || a.starts_with('+')) || a.len() < 2 {
                break;
            }
            for c in a.chars().skip(1) {
                if c == 'o' {
                    i += 1;
                    match args.get(i) {
                        Some(n) => {
                            if !self.set_opt(n, on) {
                                self.err(&format!("set: {n}: invalid option name")).await;
                                return Ok(2);
                            }
                        }
                        None => {
                            let o = self.opts;
                            let s = format!(
                                "errexit\t{}\nnoclobber\t{}\nnoglob\t{}\nnounset\t{}\npipefail\t{}\nxtrace\t{}\n",
                                onoff(o.errexit),
                                onoff(o.noclobber),
                                onoff(o.noglob),
                                onoff(o.nounset),
                                onoff(o.pipefail),
                                onoff(o.xtrace)
                            );
                            self.out(&s).await?;
                            return Ok(0);
                        }
                    }
                } else if !self.set_opt(&c.to_string(), on) {
                    self.err(&format!("set: -{c}: invalid option")).await;
                    return Ok(2);
                }
            }
            i += 1;
        }
        if i < args.len() {
            self.params = args.get(i..).unwrap_or(&[]).to_vec();
        }
        Ok(0)
    }

    async fn bi_local(&mut self, name: &str, args: &[String]) -> R {
        let mut export = false;
        let mut readonly = false;
        let mut global = name != "local" && self.locals.is_empty();
        let mut rest = Vec::new();
        for a in args {
            if a.starts_with('-') || a.starts_with('+') {
                for c in a.chars().skip(1) {
                    match c {
                        'x' => export = true,
                        'r' => readonly = true,
                        'g' => global = true,
                        'f' | 'F' => {
                            let mut names: Vec<&String> = self.funcs.keys().collect();
                            names.sort();
                            let s: String =
                                names.iter().map(|n| format!("declare -f {n}\n")).collect();
                            self.out(&s).await?;
                            return Ok(0);
                        }
                        'p' if args.len() == 1 => {
                            return self.print_vars("declare -- ", |_| true).await;
                        }
                        _ => {}
                    }
                }
            } else {
                rest.push(a.clone());
            }
        }
        if name == "local" && self.locals.is_empty() {
            self.err("local: can only be used in a function").await;
            return Ok(1);
        }
        let mut st = 0;
        for a in rest {
            let (n, v) = match a.split_once('=') {
                Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
                None => (a.clone(), None),
            };
            if !valid_name(&n) {
                self.err(&format!("{name}: `{a}': not a valid identifier"))
                    .await;
                st = 1;
                continue;
            }
            if !global {
                self.make_local(&n);
                if v.is_none() {
                    self.vars.remove(&n);
                }
            }
            if let Some(v) = v
                && let Err(m) = self.set_var(&n, &v)
            {
                self.err(&m).await;
                st = 1;
                continue;
            }
            if export || readonly {
                let var = self.vars.entry(n).or_default();
                var.exported |= export;
                var.readonly |= readonly;
            }
        }
        Ok(st)
    }

    async fn bi_read(&mut self, args: &[String]) -> R {
        let mut raw = false;
        let mut delim = b'\n';
        let mut nchars: Option<usize> = None;
        let mut timeout: Option<f64> = None;
        let mut fd = 0usize;
        let mut names = Vec::new();
        let mut i = 0;
        while let Some(a) = args.get(i) {
            if a.starts_with('-') && a.len() > 1 && names.is_empty() {
                let mut chars = a.chars().skip(1);
                while let Some(c) = chars.next() {
                    let rest: String = chars.clone().collect();
                    let mut optarg = || -> Option<String> {
                        if rest.is_empty() {
                            i += 1;
                            args.get(i).cloned()
                        } else {
                            Some(rest.clone())
                        }
                    };
                    match c {
                        'r' => raw = true,
                        's' | 'e' => {}
                        'p' => {
                            let p = optarg().unwrap_or_default();
                            let _ = self.write_fd(2, p.as_bytes()).await;
                            break;
                        }
                        'd' => {
                            delim = optarg().and_then(|d| d.bytes().next()).unwrap_or(0);
                            break;
                        }
                        'n' | 'N' => {
                            nchars = optarg().and_then(|n| n.parse().ok());
                            break;
                        }
                        't' => {
                            timeout = optarg().and_then(|n| n.parse().ok());
                            break;
                        }
                        'u' => {
                            fd = optarg().and_then(|n| n.parse().ok()).unwrap_or(99);
                            break;
                        }
                        'a' => {
                            if let Some(n) = optarg() {
                                names.push(n);
                            }
                            break;
                        }
                        _ => {
                            self.err(&format!("read: -{c}: invalid option")).await;
                            return Ok(2);
                        }
                    }
                }
            } else {
                names.push(a.clone());
            }
            i += 1;
        }
        let Some(reader) = self.fds.reader(fd) else {
            self.err(&format!("read: {fd}: invalid file descriptor"))
                .await;
            return Ok(1);
        };
        let limit = nchars.unwrap_or(16 * 1024 * 1024);
        let mut line: Vec<u8> = Vec::new();
        let fut = async {
            loop {
                let (chunk, f) = reader
                    .read_until(delim, limit.saturating_sub(line.len()).max(1))
                    .await?;
                line.extend_from_slice(&chunk);
                let found = f;
                // A backslash-newline continues the line unless -r.
                if !raw && found && delim == b'\n' && line.last() == Some(&b'\\') {
                    let bs = line.iter().rev().take_while(|b| **b == b'\\').count();
                    if bs % 2 == 1 {
                        line.pop();
                        continue;
                    }
                }
                return Ok::<bool, std::io::Error>(
                    found || nchars.is_some_and(|n| line.len() >= n),
                );
            }
        };
        let got = match timeout {
            Some(t) => {
                match tokio::time::timeout(Duration::from_secs_f64(t.clamp(0.0, 1e9)), fut).await {
                    Ok(r) => r,
                    Err(_) => return Ok(142),
                }
            }
            None => fut.await,
        };
        let found = got.unwrap_or(false);
        let text = String::from_utf8_lossy(&line).into_owned();
        // (char, escaped)
        let mut chars: Vec<(char, bool)> = Vec::new();
        let mut it = text.chars();
        while let Some(c) = it.next() {
            if c == '\\' && !raw {
                if let Some(n) = it.next() {
                    chars.push((n, true));
                }
            } else {
                chars.push((c, false));
            }
        }
        if names.is_empty() {
            let v: String = chars.iter().map(|(c, _)| c).collect();
            let _ = self.set_var("REPLY", &v);
            return Ok(i32::from(!found));
        }
        let ifs = self.ifs();
        let is_ifs = |c: &(char, bool)| !c.1 && ifs.contains(c.0);
        let is_ws = |c: &(char, bool)| is_ifs(c) && c.0.is_whitespace();
        let mut pos = 0;
        while chars.get(pos).is_some_and(is_ws) {
            pos += 1;
        }
        let n = names.len();
        for (k, name) in names.iter().enumerate() {
            let value: String = if k + 1 == n {
                let mut end = chars.len();
                while end > pos && chars.get(end - 1).is_some_and(is_ws) {
                    end -= 1;
                }
                chars
                    .get(pos..end)
                    .unwrap_or(&[])
                    .iter()
                    .map(|(c, _)| c)
                    .collect()
            } else {
                let start = pos;
                while chars.get(pos).is_some_and(|c| !is_ifs(c)) {
                    pos += 1;
                }
                let v: String = chars
                    .get(start..pos)
                    .unwrap_or(&[])
                    .iter()
                    .map(|(c, _)| c)
                    .collect();
                // Skip one delimiter (and surrounding whitespace).
                while chars.get(pos).is_some_and(is_ws) {
                    pos += 1;
                }
                if chars
                    .get(pos)
                    .is_some_and(|c| is_ifs(c) && !c.0.is_whitespace())
                {
                    pos += 1;
                    while chars.get(pos).is_some_and(is_ws) {
                        pos += 1;
                    }
                }
                v
            };
            if let Err(m) = self.set_var(name, &value) {
                self.err(&format!("read: {m}")).await;
                return Ok(1);
            }
        }
        Ok(i32::from(!found))
    }

    async fn bi_source(&mut self, name: &str, args: &[String]) -> R {
        let Some(path) = args.first() else {
            self.err(&format!("{name}: filename argument required"))
                .await;
            return Ok(2);
        };
        let abs = fs::resolve(&self.cwd, path);
        let content = match fs::read_file(&self.ctx.root, &abs, 16 * 1024 * 1024) {
            Ok(c) => String::from_utf8_lossy(&c).into_owned(),
            Err(e) => {
                self.err(&format!("{name}: {path}: {}", fs::err_msg(&e)))
                    .await;
                return Ok(1);
            }
        };
        self.enter().await?;
        self.func_depth += 1;
        let saved = if args.len() > 1 {
            Some(std::mem::replace(
                &mut self.params,
                args.get(1..).unwrap_or(&[]).to_vec(),
            ))
        } else {
            None
        };
        let r = self.run_text_fresh(content).await;
        if let Some(p) = saved {
            self.params = p;
        }
        self.func_depth -= 1;
        self.depth -= 1;
        match r {
            Err(Ctl::Return(s) | Ctl::Fail(s)) => Ok(s),
            r => r,
        }
    }

    async fn bi_sh(&mut self, name: &str, args: &[String]) -> R {
        let mut i = 0;
        let mut cmd_mode = false;
        let mut set_opts: Vec<(String, bool)> = Vec::new();
        while let Some(a) = args.get(i) {
            if a == "--" || a == "-" {
                i += 1;
                break;
            }
            if a == "--version" {
                self.out("sh (mcp-sandbox host shell, bash-compatible subset)\n")
                    .await?;
                return Ok(0);
            }
            if a.starts_with("--") {
                i += 1;
                continue;
            }
            let on = a.starts_with('-');
            if (on || a.starts_with('+')) && a.len() > 1 {
                for c in a.chars().skip(1) {
                    match c {
                        'c' => cmd_mode = true,
                        'o' => {
                            i += 1;
                            if let Some(n) = args.get(i) {
                                set_opts.push((n.clone(), on));
                            }
                        }
                        'l' | 'i' | 's' | 'r' | 'p' => {}
                        c => set_opts.push((c.to_string(), on)),
                    }
                }
                i += 1;
                continue;
            }
            break;
        }
        let (text, arg0, params) = if cmd_mode {
            let Some(t) = args.get(i) else {
                self.err(&format!("{name}: -c: option requires an argument"))
                    .await;
                return Ok(2);
            };
            let arg0 = args.get(i + 1).cloned().unwrap_or_else(|| name.to_owned());
            (t.clone(), arg0, args.get(i + 2..).unwrap_or(&[]).to_vec())
        } else if let Some(path) = args.get(i) {
            let abs = fs::resolve(&self.cwd, path);
            match fs::read_file(&self.ctx.root, &abs, 16 * 1024 * 1024) {
                Ok(c) => (
                    String::from_utf8_lossy(&c).into_owned(),
                    path.clone(),
                    args.get(i + 1..).unwrap_or(&[]).to_vec(),
                ),
                Err(e) => {
                    self.err(&format!("{path}: {}", fs::err_msg(&e))).await;
                    return Ok(127);
                }
            }
        } else {
            let Some(r) = self.fds.reader(0) else {
                return Ok(0);
            };
            let data = r.read_all(16 * 1024 * 1024).await.unwrap_or_default();
            (
                String::from_utf8_lossy(&data).into_owned(),
                name.to_owned(),
                Vec::new(),
            )
        };
        let mut child = self.child(arg0, params);
        for (o, on) in set_opts {
            if !child.set_opt(&o, on) {
                self.err(&format!("{name}: -{o}: invalid option")).await;
                return Ok(2);
            }
        }
        child.enter().await?;
        let r = child.run_text_fresh(text).await;
        let st = status_of(r, child.status);
        drop(child);
        if self.ctx.aborted() {
            return Err(Ctl::Exit(2));
        }
        Ok(st)
    }

    fn kind_of(&self, n: &str) -> Option<&'static str> {
        if self.funcs.contains_key(n) {
            Some("function")
        } else if KEYWORDS.contains(&n) {
            Some("keyword")
        } else if is_builtin(n) {
            Some("builtin")
        } else if self.ctx.programs.has(n) {
            Some("file")
        } else {
            None
        }
    }

    async fn bi_command(&mut self, args: &[String]) -> R {
        let mut i = 0;
        let mut v = false;
        let mut big_v = false;
        while let Some(a) = args.get(i) {
            match a.as_str() {
                "-v" => v = true,
                "-V" => big_v = true,
                "-p" => {}
                "--" => {
                    i += 1;
                    break;
                }
                _ => break,
            }
            i += 1;
        }
        let rest = args.get(i..).unwrap_or(&[]).to_vec();
        if v || big_v {
            let mut st = 0;
            for n in &rest {
                if big_v {
                    st |= self.describe(n, false).await?;
                    continue;
                }
                let found = self.kind_of(n).is_some()
                    || (n.contains('/')
                        && fs::metadata(&self.ctx.root, &fs::resolve(&self.cwd, n)).is_ok());
                if found {
                    self.out(&format!("{n}\n")).await?;
                } else {
                    st = 1;
                }
            }
            return Ok(st);
        }
        self.dispatch_no_functions(rest, Vec::new()).await
    }

    async fn describe(&mut self, n: &str, short: bool) -> R {
        let kind = self.kind_of(n);
        let s = match (kind, short) {
            (Some(k), true) => format!("{k}\n"),
            (Some("function"), false) => format!("{n} is a function\n"),
            (Some("keyword"), false) => format!("{n} is a shell keyword\n"),
            (Some("builtin"), false) => format!("{n} is a shell builtin\n"),
            (Some(_), false) => format!("{n} is /usr/bin/{n}\n"),
            (None, _) => {
                if !short {
                    self.err(&format!("type: {n}: not found")).await;
                }
                return Ok(1);
            }
        };
        self.out(&s).await?;
        Ok(0)
    }

    async fn bi_type(&mut self, args: &[String]) -> R {
        let short = args.iter().any(|a| a == "-t");
        let path_only = args.iter().any(|a| a == "-p" || a == "-P");
        let mut st = 0;
        for n in args.iter().filter(|a| !a.starts_with('-')) {
            if path_only {
                if self.ctx.programs.has(n) {
                    self.out(&format!("/usr/bin/{n}\n")).await?;
                } else {
                    st = 1;
                }
                continue;
            }
            st |= self.describe(n, short).await?;
        }
        Ok(st)
    }

    async fn bi_xargs(&mut self, args: &[String]) -> R {
        let mut max_args: Option<usize> = None;
        let mut replace: Option<String> = None;
        let mut null = false;
        let mut no_empty = false;
        let mut delim: Option<char> = None;
        let mut lines: Option<usize> = None;
        let mut trace = false;
        let mut i = 0;
        while let Some(a) = args.get(i) {
            if !a.starts_with('-') || a == "-" {
                break;
            }
            if a == "--" {
                i += 1;
                break;
            }
            let take = |i: &mut usize, inline: &str| -> Option<String> {
                if inline.is_empty() {
                    *i += 1;
                    args.get(*i).cloned()
                } else {
                    Some(inline.to_owned())
                }
            };
            let flag = a.get(1..2).unwrap_or("");
            let inline = a.get(2..).unwrap_or("");
            match flag {
                "n" => {
                    max_args = take(&mut i, inline)
                        .and_then(|n| n.parse().ok())
                        .filter(|n| *n > 0)
                }
                "L" | "l" => {
                    lines = Some(
                        take(&mut i, inline)
                            .and_then(|n| n.parse().ok())
                            .unwrap_or(1)
                            .max(1),
                    )
                }
                "I" => replace = take(&mut i, inline),
                "i" => {
                    replace = Some(if inline.is_empty() {
                        "{}".to_owned()
                    } else {
                        inline.to_owned()
                    })
                }
                "0" => null = true,
                "r" => no_empty = true,
                "t" => trace = true,
                "d" => {
                    delim = take(&mut i, inline).and_then(|d| {
                        let e = printf::escapes(&d, true).0;
                        e.chars().next()
                    })
                }
                "P" | "s" | "E" | "a" => {
                    let _ = take(&mut i, inline);
                }
                "p" | "x" => {}
                "-" => match a.as_str() {
                    "--null" => null = true,
                    "--no-run-if-empty" => no_empty = true,
                    _ => {}
                },
                _ => {
                    self.err(&format!("xargs: invalid option -- '{flag}'"))
                        .await;
                    return Ok(1);
                }
            }
            i += 1;
        }
        let mut cmd: Vec<String> = args.get(i..).unwrap_or(&[]).to_vec();
        if cmd.is_empty() {
            cmd.push("echo".to_owned());
        }
        let Some(reader) = self.fds.reader(0) else {
            return Ok(0);
        };
        let data = match reader.read_all(64 * 1024 * 1024).await {
            Ok(d) => String::from_utf8_lossy(&d).into_owned(),
            Err(_) => String::new(),
        };
        let items: Vec<String> = if null || delim.is_some() {
            let d = if null { '\0' } else { delim.unwrap_or('\n') };
            let mut v: Vec<String> = data.split(d).map(str::to_owned).collect();
            if v.last().is_some_and(String::is_empty) {
                v.pop();
            }
            v
        } else if replace.is_some() {
            data.lines()
                .map(|l| l.trim_start().to_owned())
                .filter(|l| !l.is_empty())
                .collect()
        } else if let Some(n) = lines {
            // -L: n non-empty lines per command, each split into items.
            let ls: Vec<&str> = data.lines().filter(|l| !l.trim().is_empty()).collect();
            let mut batches = Vec::new();
            for chunk in ls.chunks(n) {
                match xargs_items(&chunk.join("\n")) {
                    Ok(v) => batches.push(v),
                    Err(m) => {
                        self.err(&m).await;
                        return Ok(1);
                    }
                }
            }
            return self.xargs_run(&cmd, batches, no_empty, trace).await;
        } else {
            match xargs_items(&data) {
                Ok(v) => v,
                Err(m) => {
                    self.err(&m).await;
                    return Ok(1);
                }
            }
        };
        let batches: Vec<Vec<String>> = if let Some(r) = &replace {
            let rep = r.clone();
            let batches = items
                .iter()
                .map(|it| cmd.iter().map(|c| c.replace(&rep, it)).collect::<Vec<_>>())
                .collect::<Vec<_>>();
            let mut st = 0;
            if batches.is_empty() {
                return Ok(0);
            }
            for b in batches {
                let s = self.xargs_one(b, trace).await?;
                if s == 255 || s == 126 || s == 127 {
                    return Ok(if s == 255 { 124 } else { s });
                }
                if s != 0 {
                    st = 123;
                }
            }
            return Ok(st);
        } else {
            let per = max_args.unwrap_or(5000);
            items.chunks(per).map(<[String]>::to_vec).collect()
        };
        self.xargs_run(&cmd, batches, no_empty, trace).await
    }

    async fn xargs_run(
        &mut self,
        cmd: &[String],
        batches: Vec<Vec<String>>,
        no_empty: bool,
        trace: bool,
    ) -> R {
        if batches.is_empty() {
            if no_empty {
                return Ok(0);
            }
            return self.xargs_one(cmd.to_vec(), trace).await;
        }
        let mut st = 0;
        for b in batches {
            let mut argv = cmd.to_vec();
            argv.extend(b);
            let s = self.xargs_one(argv, trace).await?;
            if s == 255 || s == 126 || s == 127 {
                return Ok(if s == 255 { 124 } else { s });
            }
            if s != 0 {
                st = 123;
            }
        }
        Ok(st)
    }

    async fn xargs_one(&mut self, argv: Vec<String>, trace: bool) -> R {
        tokio::task::yield_now().await;
        if trace {
            let t = format!("{}\n", argv.join(" "));
            let _ = self.write_fd(2, t.as_bytes()).await;
        }
        let saved = self.fds.clone();
        self.fds.set(0, Some(Fd::In(memory_reader(Vec::new()))));
        let r = self.dispatch(argv, Vec::new()).await;
        self.fds = saved;
        match r {
            Ok(s) => Ok(s),
            Err(Ctl::Exit(s) | Ctl::Return(s) | Ctl::Fail(s)) if !self.ctx.aborted() => Ok(s),
            Err(e) => Err(e),
        }
    }

    async fn bi_env(&mut self, args: &[String]) -> R {
        let mut clear = false;
        let mut unset: Vec<String> = Vec::new();
        let mut sets: Vec<(String, String)> = Vec::new();
        let mut i = 0;
        while let Some(a) = args.get(i) {
            match a.as_str() {
                "-i" | "-" | "--ignore-environment" => clear = true,
                "-u" => {
                    i += 1;
                    if let Some(n) = args.get(i) {
                        unset.push(n.clone());
                    }
                }
                "--" => {
                    i += 1;
                    break;
                }
                "-0" => {}
                s if s.contains('=') && !s.starts_with('=') => {
                    if let Some((k, v)) = s.split_once('=') {
                        sets.push((k.to_owned(), v.to_owned()));
                    }
                }
                s if s.starts_with('-') && s.len() > 1 => {
                    self.err(&format!("env: invalid option -- '{s}'")).await;
                    return Ok(125);
                }
                _ => break,
            }
            i += 1;
        }
        while let Some(s) = args
            .get(i)
            .filter(|s| s.contains('=') && !s.starts_with('='))
        {
            if let Some((k, v)) = s.split_once('=') {
                sets.push((k.to_owned(), v.to_owned()));
            }
            i += 1;
        }
        let mut env: Vec<(String, String)> = if clear {
            Vec::new()
        } else {
            self.exported_env(&[])
        };
        env.retain(|(k, _)| !unset.contains(k));
        for (k, v) in &sets {
            env.retain(|(x, _)| x != k);
            env.push((k.clone(), v.clone()));
        }
        env.sort();
        let cmd: Vec<String> = args.get(i..).unwrap_or(&[]).to_vec();
        let Some(name) = cmd.first().cloned() else {
            let s: String = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            self.out(&s).await?;
            return Ok(0);
        };
        if !name.contains('/') && self.ctx.programs.has(&name) {
            return Ok(self.run_program_env(cmd, env).await);
        }
        if is_builtin(&name) || name.contains('/') {
            let saved_vars = self.vars.clone();
            if clear {
                for v in self.vars.values_mut() {
                    v.exported = false;
                }
            }
            for u in &unset {
                self.vars.remove(u);
            }
            let r = self.dispatch_no_functions(cmd, sets).await;
            self.vars = saved_vars;
            return r;
        }
        self.err(&format!("env: '{name}': No such file or directory"))
            .await;
        Ok(127)
    }

    fn find_job(&self, spec: &str) -> Option<usize> {
        if let Some(j) = spec.strip_prefix('%') {
            if matches!(j, "%" | "+" | "") {
                return self.jobs.len().checked_sub(1);
            }
            if j == "-" {
                return self.jobs.len().checked_sub(2);
            }
            let id: usize = j.parse().ok()?;
            return self.jobs.iter().position(|x| x.id == id);
        }
        let pid: u32 = spec.parse().ok()?;
        self.jobs.iter().position(|x| x.pid == pid)
    }

    async fn bi_kill(&mut self, args: &[String]) -> R {
        let mut sig = 15;
        let mut i = 0;
        while let Some(a) = args.get(i) {
            if a == "-l" || a == "-L" {
                let s = self.signal_names();
                self.out(&s).await?;
                return Ok(0);
            }
            if a == "-s" || a == "-n" {
                i += 1;
                sig = args.get(i).and_then(|s| signal_number(s)).unwrap_or(15);
            } else if a == "--" {
                i += 1;
                break;
            } else if let Some(s) = a.strip_prefix('-') {
                match signal_number(s) {
                    Some(n) => sig = n,
                    None => {
                        self.err(&format!("kill: {s}: invalid signal specification"))
                            .await;
                        return Ok(1);
                    }
                }
            } else {
                break;
            }
            i += 1;
        }
        let targets = args.get(i..).unwrap_or(&[]).to_vec();
        if targets.is_empty() {
            self.err("kill: usage: kill [-s sigspec | -n signum | -sigspec] pid | jobspec ... or kill -l [sigspec]").await;
            return Ok(2);
        }
        let mut st = 0;
        for t in targets {
            if t == "1" || t == "$$" {
                if sig == 0 {
                    continue;
                }
                return Err(Ctl::Exit(128 + sig));
            }
            match self.find_job(&t) {
                Some(idx) => {
                    let Some(job) = self.jobs.get_mut(idx) else {
                        continue;
                    };
                    let running = job.handle.as_ref().is_some_and(|h| !h.is_finished());
                    if sig == 0 {
                        if !running {
                            st = 1;
                        }
                        continue;
                    }
                    if running {
                        if let Some(h) = job.handle.take() {
                            h.abort();
                        }
                        job.status = Some(128 + sig);
                    } else if job.handle.is_none() && job.status.is_some() && !t.starts_with('%') {
                        self.err(&format!("kill: ({t}) - No such process")).await;
                        st = 1;
                    }
                }
                None => {
                    if t.starts_with('%') {
                        self.err(&format!("kill: {t}: no such job")).await;
                    } else {
                        self.err(&format!("kill: ({t}) - No such process")).await;
                    }
                    st = 1;
                }
            }
        }
        Ok(st)
    }

    async fn wait_job(&mut self, idx: usize) -> i32 {
        let Some(job) = self.jobs.get_mut(idx) else {
            return 127;
        };
        if let Some(h) = job.handle.as_mut() {
            let st = match h.await {
                Ok(s) => s,
                Err(e) if e.is_cancelled() => 143,
                Err(_) => 1,
            };
            job.handle = None;
            job.status = Some(st);
        }
        job.status.unwrap_or(0)
    }

    async fn bi_wait(&mut self, args: &[String]) -> R {
        let targets: Vec<&String> = args
            .iter()
            .filter(|a| !a.starts_with('-') || a.len() == 1)
            .collect();
        if targets.is_empty() {
            for idx in 0..self.jobs.len() {
                self.wait_job(idx).await;
            }
            self.jobs.clear();
            return Ok(0);
        }
        let mut st = 0;
        for t in targets {
            match self.find_job(t) {
                Some(idx) => {
                    st = self.wait_job(idx).await;
                }
                None => {
                    self.err(&format!("wait: pid {t} is not a child of this shell"))
                        .await;
                    st = 127;
                }
            }
        }
        Ok(st)
    }

    async fn bi_trap(&mut self, args: &[String]) -> R {
        if args.is_empty() || args.first().is_some_and(|a| a == "-p") {
            if let Some(t) = &self.exit_trap {
                let s = format!("trap -- {} EXIT\n", quote(t));
                self.out(&s).await?;
            }
            return Ok(0);
        }
        if args.first().is_some_and(|a| a == "-l") {
            let s = self.signal_names();
            self.out(&s).await?;
            return Ok(0);
        }
        let args: Vec<&String> = args.iter().filter(|a| a.as_str() != "--").collect();
        let (action, sigs) = if args.len() == 1 {
            (None, &args[..])
        } else {
            (
                args.first().map(|s| s.to_string()),
                args.get(1..).unwrap_or(&[]),
            )
        };
        for s in sigs {
            let u = s.to_uppercase();
            if matches!(u.as_str(), "EXIT" | "0" | "SIGEXIT") {
                self.exit_trap = match &action {
                    Some(a) if a == "-" => None,
                    Some(a) => Some(a.clone()),
                    None => None,
                };
            } else if signal_number(&u).is_none()
                && !matches!(u.as_str(), "ERR" | "DEBUG" | "RETURN")
            {
                self.err(&format!("trap: {s}: invalid signal specification"))
                    .await;
                return Ok(1);
            }
        }
        Ok(0)
    }

    async fn bi_getopts(&mut self, args: &[String]) -> R {
        let (Some(spec), Some(var)) = (args.first().cloned(), args.get(1).cloned()) else {
            self.err("getopts: usage: getopts optstring name [arg ...]")
                .await;
            return Ok(2);
        };
        let list: Vec<String> = if args.len() > 2 {
            args.get(2..).unwrap_or(&[]).to_vec()
        } else {
            self.params.clone()
        };
        let silent = spec.starts_with(':');
        let mut optind: usize = self
            .get("OPTIND")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
            .max(1);
        let mut sub: usize = self
            .get("__GETOPTS_SUB")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let Some(arg) = list.get(optind - 1).cloned() else {
            let _ = self.set_var(&var, "?");
            return Ok(1);
        };
        if sub == 1 && (arg == "--" || !arg.starts_with('-') || arg == "-") {
            if arg == "--" {
                optind += 1;
            }
            let _ = self.set_var("OPTIND", &optind.to_string());
            let _ = self.set_var(&var, "?");
            return Ok(1);
        }
        let chars: Vec<char> = arg.chars().collect();
        let Some(&c) = chars.get(sub) else {
            let _ = self.set_var(&var, "?");
            return Ok(1);
        };
        sub += 1;
        let at_end = sub >= chars.len();
        let pos = spec.chars().position(|x| x == c && x != ':');
        let takes_arg = pos.is_some_and(|p| spec.chars().nth(p + 1) == Some(':'));
        self.vars.remove("OPTARG");
        if pos.is_none() {
            if silent {
                let _ = self.set_var("OPTARG", &c.to_string());
            } else {
                self.err(&format!("illegal option -- {c}")).await;
            }
            let _ = self.set_var(&var, "?");
        } else if takes_arg {
            let optarg = if !at_end {
                let rest: String = chars.get(sub..).unwrap_or(&[]).iter().collect();
                optind += 1;
                sub = 1;
                Some(rest)
            } else {
                optind += 1;
                sub = 1;
                let a = list.get(optind - 1).cloned();
                if a.is_some() {
                    optind += 1;
                }
                a
            };
            match optarg {
                Some(a) => {
                    let _ = self.set_var("OPTARG", &a);
                    let _ = self.set_var(&var, &c.to_string());
                }
                None => {
                    if silent {
                        let _ = self.set_var("OPTARG", &c.to_string());
                        let _ = self.set_var(&var, ":");
                    } else {
                        self.err(&format!("option requires an argument -- {c}"))
                            .await;
                        let _ = self.set_var(&var, "?");
                    }
                }
            }
            let _ = self.set_var("OPTIND", &optind.to_string());
            let _ = self.set_var("__GETOPTS_SUB", &sub.to_string());
            return Ok(0);
        } else {
            let _ = self.set_var(&var, &c.to_string());
        }
        if at_end {
            optind += 1;
            sub = 1;
        }
        let _ = self.set_var("OPTIND", &optind.to_string());
        let _ = self.set_var("__GETOPTS_SUB", &sub.to_string());
        Ok(0)
    }
}

fn onoff(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}
