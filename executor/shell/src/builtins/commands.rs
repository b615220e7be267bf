//! The builtins that run scripts or look commands up: `source`/`.`, `sh`/`bash`/`dash`,
//! `command`, `type`, `env`.

use super::*;

const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "while", "until", "do", "done",
    "in", "function", "{", "}", "!", "[[", "]]", "time",
];

impl Shell {
    pub(super) async fn bi_source(&mut self, name: &str, args: &[String]) -> R {
        let Some(path) = args.first() else {
            self.err(&format!("{name}: filename argument required"))
                .await;
            return Ok(2);
        };
        let abs = fs::resolve(&self.cwd, path);
        let content = match fs::read_file(&self.ctx.root, &abs, 16 * 1024 * 1024) {
            Ok(c) => crate::bytes::decode(&c),
            Err(e) => {
                self.err(&format!("{name}: {path}: {}", fs::err_msg(&e)))
                    .await;
                return Ok(1);
            }
        };
        self.enter().await?;
        self.func_depth += 1;
        let saved = if args.len() > 1 {
            let params = Params::new(&self.ctx.budget, args.get(1..).unwrap_or(&[]).to_vec())?;
            Some(std::mem::replace(&mut self.params, params))
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

    pub(super) async fn bi_sh(&mut self, name: &str, args: &[String]) -> R {
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
                    crate::bytes::decode(&c),
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
            (crate::bytes::decode(&data), name.to_owned(), Vec::new())
        };
        let params = Params::new(&self.ctx.budget, params)?;
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

    pub(super) async fn bi_command(&mut self, args: &[String]) -> R {
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

    pub(super) async fn bi_type(&mut self, args: &[String]) -> R {
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

    pub(super) async fn bi_env(&mut self, args: &[String]) -> R {
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
}
