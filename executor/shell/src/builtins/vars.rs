//! The builtins of variables, options and parameters: `export`, `readonly`, `unset`,
//! `set` (options and positional parameters), `local`/`declare`/`typeset`, `getopts`.

use super::*;

impl Shell {
    async fn print_vars(&mut self, prefix: &str, filter: impl Fn(&crate::state::Var) -> bool) -> R {
        let mut names: Vec<(&String, &crate::state::Var)> =
            self.vars.iter().filter(|(_, v)| filter(v)).collect();
        names.sort_by(|a, b| a.0.cmp(b.0));
        let s: String = names
            .iter()
            .map(|(k, v)| format!("{prefix}{k}={}\n", quote(v.value.as_str())))
            .collect();
        self.out(&s).await?;
        Ok(0)
    }

    pub(super) async fn bi_export(&mut self, name: &str, args: &[String]) -> R {
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

    pub(super) async fn bi_unset(&mut self, args: &[String]) -> R {
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

    pub(super) fn set_opt(&mut self, name: &str, on: bool) -> bool {
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

    pub(super) async fn bi_set(&mut self, args: &[String]) -> R {
        if args.is_empty() {
            return self.print_vars("", |_| true).await;
        }
        let mut i = 0;
        while let Some(a) = args.get(i) {
            if a == "--" {
                self.params =
                    Params::new(&self.ctx.budget, args.get(i + 1..).unwrap_or(&[]).to_vec())?;
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
            self.params = Params::new(&self.ctx.budget, args.get(i..).unwrap_or(&[]).to_vec())?;
        }
        Ok(0)
    }

    pub(super) async fn bi_local(&mut self, name: &str, args: &[String]) -> R {
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

    pub(super) async fn bi_getopts(&mut self, args: &[String]) -> R {
        let (Some(spec), Some(var)) = (args.first().cloned(), args.get(1).cloned()) else {
            self.err("getopts: usage: getopts optstring name [arg ...]")
                .await;
            return Ok(2);
        };
        let list: Vec<String> = if args.len() > 2 {
            args.get(2..).unwrap_or(&[]).to_vec()
        } else {
            self.params.to_vec()
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
