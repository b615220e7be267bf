//! The builtins that print and read text: `echo`, `printf` (formatting in `printf.rs`)
//! and `read`.

use super::*;

impl Shell {
    pub(super) async fn bi_echo(&mut self, args: &[String]) -> R {
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

    pub(super) async fn bi_printf(&mut self, args: &[String]) -> R {
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

    pub(super) async fn bi_read(&mut self, args: &[String]) -> R {
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
        // The line is held in memory: at most what the budget has left (then it stops the run).
        let room = self.ctx.budget.available().saturating_add(1);
        let limit = nchars.unwrap_or(16 * 1024 * 1024).min(room);
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
        // Its text, the (char, escaped) list (8 bytes a char) and the values.
        self.ctx.budget.fits(line.len().saturating_mul(10))?;
        let text = crate::bytes::decode(&line);
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
}
