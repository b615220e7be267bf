//! Builtins, run on the host (never through `Programs`): `: true false echo printf pwd cd
//! test [ export unset set shift local declare typeset readonly return exit break continue
//! read eval source . sh bash dash command type which xargs env kill wait sleep trap exec
//! umask hash ulimit let shopt alias unalias jobs builtin disown getopts id whoami hostname
//! uname nproc chmod timeout ls`.
//!
//! This module holds the dispatcher (`builtin`) with the small builtins inline (`:`, the
//! no-ops, `pwd`, `test`/`[`, `shift`, `return`, `exit`, `break`, `continue`, `eval`,
//! `which`, `jobs`, `sleep`, `exec`, `umask`, `ulimit`, `let`, `builtin`), `cd`, and
//! `dispatch_no_functions`; the others live in child modules by kind: [`text`] (echo,
//! printf, read), [`vars`] (export, readonly, unset, set, local/declare/typeset, getopts),
//! [`commands`] (source, sh/bash/dash, command, type, env), [`xargs`], [`jobs`] (kill, wait,
//! trap, signals), [`system`] (id whoami hostname uname nproc chmod timeout: what WASI
//! cannot answer), [`ls`] (real modes, owner root).

mod commands;
mod jobs;
mod ls;
mod system;
mod text;
mod vars;
mod xargs;

use std::time::Duration;

use super::budget::Params;
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
    "alias", "unalias", "jobs", "builtin", "disown", "getopts", "id", "whoami", "hostname",
    "uname", "nproc", "chmod", "timeout", "ls",
];

/// Builtins that are programs in a Linux `/bin` too: the host lists them in the base
/// layer's `/bin` and `/usr/bin` beside the toolbox's utilities.
pub const IN_BIN: &[&str] = &[
    "sh", "bash", "dash", "echo", "printf", "pwd", "test", "[", "true", "false", "kill", "sleep",
    "env", "xargs", "which", "timeout", "id", "whoami", "hostname", "uname", "nproc", "chmod",
    "ls",
];

pub(crate) fn is_builtin(name: &str) -> bool {
    BUILTINS.contains(&name)
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
                let rest = self.params.get(n..).unwrap_or(&[]).to_vec();
                self.params = Params::new(&self.ctx.budget, rest)?;
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
                    if self.ctx.programs.has(a) || IN_BIN.contains(&a.as_str()) {
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
            "jobs" => self.bi_jobs(&args).await,
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
            "id" | "whoami" | "hostname" | "uname" | "nproc" | "chmod" | "timeout" => {
                self.bi_system(name, &args).await
            }
            "ls" => self.bi_ls(&args).await,
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
}
