//! The `xargs` builtin: splits its input into items and runs the command (a builtin, a
//! function or a program) on batches of them.

use super::*;

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
    pub(super) async fn bi_xargs(&mut self, args: &[String]) -> R {
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
        // Its input is held in memory: at most what the budget has left (then it stops the run).
        let room = self.ctx.budget.available().saturating_add(1);
        let data = match reader.read_all(room).await {
            Ok(d) => {
                self.ctx.budget.fits(d.len().saturating_mul(2))?;
                crate::bytes::decode(&d)
            }
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
}
