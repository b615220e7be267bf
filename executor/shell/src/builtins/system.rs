//! Utilities the host answers for the whole computer, because WASI cannot: `id`,
//! `whoami`, `hostname` (from `/etc/hostname`), `uname`, `nproc`, `chmod` (the modes of the
//! writable layer's host files, so `ls -l` and `test -x` see them) and `timeout`.
//!
//! What they report is the computer as the agent sees it: one user, root (uid 0), one
//! processor (a command is one single-threaded WebAssembly instance), a Linux-flavoured
//! `uname` whose machine is `wasm32`.

use super::*;

/// `uname` fields: -s -n -r -v -m -p -i -o.
const SYSNAME: &str = "Linux";
const RELEASE: &str = "6.0.0-wasi";
const VERSION: &str = "#1 MCP Sandbox Computer (WebAssembly, WASI preview 1)";
const MACHINE: &str = "wasm32";
const OS: &str = "WASI";

impl Shell {
    pub(super) async fn bi_system(&mut self, name: &str, args: &[String]) -> R {
        match name {
            "id" => self.bi_id(args).await,
            "whoami" => {
                self.out("root\n").await?;
                Ok(0)
            }
            "hostname" => {
                if let Some(a) = args.iter().find(|a| !a.starts_with('-')) {
                    self.err(&format!(
                        "hostname: cannot set the name to {a}: the name is the computer's id"
                    ))
                    .await;
                    return Ok(1);
                }
                let h = self.hostname();
                self.out(&format!("{h}\n")).await?;
                Ok(0)
            }
            "nproc" => {
                self.out("1\n").await?;
                Ok(0)
            }
            "uname" => self.bi_uname(args).await,
            "chmod" => self.bi_chmod(args).await,
            _ => self.bi_timeout(args).await,
        }
    }

    /// The computer's name: the first line of `/etc/hostname` ("localhost" without one).
    pub(crate) fn hostname(&self) -> String {
        fs::read_file(&self.ctx.root, "/etc/hostname", 256)
            .ok()
            .and_then(|b| {
                String::from_utf8_lossy(&b)
                    .lines()
                    .next()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "localhost".into())
    }

    async fn bi_id(&mut self, args: &[String]) -> R {
        let mut flags = String::new();
        for a in args {
            match a.strip_prefix('-') {
                Some(f) if !f.is_empty() && f.chars().all(|c| "ugGnr".contains(c)) => {
                    flags.push_str(f);
                }
                _ if a == "root" => {}
                _ => {
                    self.err(&format!("id: '{a}': no such user")).await;
                    return Ok(1);
                }
            }
        }
        let name = flags.contains('n');
        let one = ['u', 'g', 'G'].iter().any(|c| flags.contains(*c));
        let s = if one {
            if name { "root\n" } else { "0\n" }
        } else if name {
            self.err("id: cannot print only names or real IDs in default format")
                .await;
            return Ok(1);
        } else {
            "uid=0(root) gid=0(root) groups=0(root)\n"
        };
        self.out(s).await?;
        Ok(0)
    }

    async fn bi_uname(&mut self, args: &[String]) -> R {
        let host = self.hostname();
        let mut want: Vec<char> = Vec::new();
        for a in args {
            let flags: Vec<char> = match a.as_str() {
                "--all" => vec!['a'],
                "--kernel-name" => vec!['s'],
                "--nodename" => vec!['n'],
                "--kernel-release" => vec!['r'],
                "--kernel-version" => vec!['v'],
                "--machine" => vec!['m'],
                "--processor" => vec!['p'],
                "--hardware-platform" => vec!['i'],
                "--operating-system" => vec!['o'],
                a if a.starts_with('-') && a.len() > 1 => a.chars().skip(1).collect(),
                _ => {
                    self.err(&format!("uname: extra operand '{a}'")).await;
                    return Ok(1);
                }
            };
            for f in flags {
                if !"asnrvmpio".contains(f) {
                    self.err(&format!("uname: invalid option -- '{f}'")).await;
                    return Ok(1);
                }
                want.push(f);
            }
        }
        if want.is_empty() {
            want.push('s');
        }
        let all = want.contains(&'a');
        let fields = [
            ('s', SYSNAME),
            ('n', host.as_str()),
            ('r', RELEASE),
            ('v', VERSION),
            ('m', MACHINE),
            ('p', MACHINE),
            ('i', MACHINE),
            ('o', OS),
        ];
        let line: Vec<&str> = fields
            .iter()
            .filter(|(c, _)| want.contains(c) || all && !matches!(c, 'p' | 'i'))
            .map(|(_, v)| *v)
            .collect();
        self.out(&format!("{}\n", line.join(" "))).await?;
        Ok(0)
    }

    async fn bi_chmod(&mut self, args: &[String]) -> R {
        let mut recursive = false;
        let mut rest: Vec<&String> = Vec::new();
        for a in args {
            match a.as_str() {
                "-R" | "--recursive" => recursive = true,
                "-v" | "-c" | "-f" | "--verbose" | "--changes" | "--silent" | "--quiet" => {}
                _ => rest.push(a),
            }
        }
        let Some((mode, files)) = rest.split_first() else {
            self.err("chmod: missing operand").await;
            return Ok(1);
        };
        if files.is_empty() {
            self.err(&format!("chmod: missing operand after '{mode}'"))
                .await;
            return Ok(1);
        }
        let Some(change) = ModeChange::parse(mode) else {
            self.err(&format!("chmod: invalid mode: '{mode}'")).await;
            return Ok(1);
        };
        let mut st = 0;
        for f in files {
            let abs = fs::resolve(&self.cwd, f);
            let mut todo = vec![abs];
            while let Some(p) = todo.pop() {
                if let Err(e) = self.chmod_one(&p, &change, recursive, &mut todo) {
                    self.err(&format!("chmod: cannot change '{f}': {}", fs::err_msg(&e)))
                        .await;
                    st = 1;
                }
            }
        }
        Ok(st)
    }

    fn chmod_one(
        &self,
        abs: &str,
        change: &ModeChange,
        recursive: bool,
        todo: &mut Vec<String>,
    ) -> std::io::Result<()> {
        use cap_std::fs::PermissionsExt;
        let root = &self.ctx.root;
        let m = fs::symlink_metadata(root, abs)?;
        if m.file_type().is_symlink() {
            // chmod follows a link named on the command line, and skips links in -R.
            return Ok(());
        }
        let is_dir = m.is_dir();
        let mode = change.apply(m.permissions().mode() & 0o7777, is_dir);
        // A directory stays open to the server (owner rwx), so factory reset and the
        // file tools can always clean up after it.
        let host_mode = if is_dir { mode | 0o700 } else { mode };
        fs::set_mode(root, abs, host_mode & 0o777)?;
        if recursive && is_dir {
            for n in fs::list_dir(root, abs) {
                todo.push(fs::resolve(abs, &n));
            }
        }
        Ok(())
    }

    async fn bi_timeout(&mut self, args: &[String]) -> R {
        let mut i = 0;
        while let Some(a) = args.get(i) {
            match a.as_str() {
                "-s" | "-k" | "--signal" | "--kill-after" => i += 2,
                "--preserve-status" | "--foreground" | "-v" | "--verbose" => i += 1,
                a if a.starts_with("--signal=") || a.starts_with("--kill-after=") => i += 1,
                _ => break,
            }
        }
        let Some(d) = args.get(i) else {
            self.err("timeout: missing operand").await;
            return Ok(125);
        };
        let Some(secs) = parse_duration(d) else {
            self.err(&format!("timeout: invalid time interval '{d}'"))
                .await;
            return Ok(125);
        };
        let cmd: Vec<String> = args.get(i + 1..).unwrap_or(&[]).to_vec();
        if cmd.is_empty() {
            self.err("timeout: missing operand").await;
            return Ok(125);
        }
        let run = self.dispatch_no_functions(cmd, Vec::new());
        if secs.is_infinite() || secs == 0.0 {
            return run.await;
        }
        match tokio::time::timeout(Duration::from_secs_f64(secs.min(1e9)), run).await {
            Ok(r) => r,
            Err(_) => Ok(124),
        }
    }
}

/// A `chmod` mode: octal, or symbolic clauses such as `u+x,go-w` or `a=rX`.
enum ModeChange {
    Octal(u32),
    Symbolic(Vec<(u32, char, String)>),
}

impl ModeChange {
    fn parse(s: &str) -> Option<Self> {
        if !s.is_empty() && s.len() <= 4 && s.chars().all(|c| ('0'..='7').contains(&c)) {
            return u32::from_str_radix(s, 8).ok().map(ModeChange::Octal);
        }
        let mut clauses = Vec::new();
        for clause in s.split(',') {
            let who_end = clause.find(['+', '-', '='])?;
            let (who, mut rest) = clause.split_at(who_end);
            let mut mask = 0;
            for c in who.chars() {
                mask |= match c {
                    'u' => 0o4700,
                    'g' => 0o2070,
                    'o' => 0o1007,
                    'a' => 0o7777,
                    _ => return None,
                };
            }
            if who.is_empty() {
                // No who: all, less the umask (022) for + and =.
                mask = 0;
            }
            while let Some(op) = rest.chars().next() {
                let body = &rest[1..];
                let end = body.find(['+', '-', '=']).unwrap_or(body.len());
                let perms = &body[..end];
                if !perms.chars().all(|c| "rwxXst".contains(c)) {
                    return None;
                }
                clauses.push((mask, op, perms.to_owned()));
                rest = &body[end..];
            }
        }
        Some(ModeChange::Symbolic(clauses))
    }

    fn apply(&self, mode: u32, is_dir: bool) -> u32 {
        let clauses = match self {
            ModeChange::Octal(m) => return *m,
            ModeChange::Symbolic(c) => c,
        };
        let mut mode = mode;
        for (mask, op, perms) in clauses {
            let (mask, umask) = if *mask == 0 {
                (0o7777, 0o022)
            } else {
                (*mask, 0)
            };
            let mut bits = 0;
            for c in perms.chars() {
                bits |= match c {
                    'r' => 0o444,
                    'w' => 0o222,
                    'x' => 0o111,
                    'X' if is_dir || mode & 0o111 != 0 => 0o111,
                    's' => 0o6000,
                    't' => 0o1000,
                    _ => 0,
                };
            }
            let bits = bits & mask & !umask;
            mode = match op {
                '+' => mode | bits,
                '-' => mode & !bits,
                _ => (mode & !(mask & 0o777)) | bits,
            };
        }
        mode
    }
}

#[cfg(test)]
mod tests {
    use super::ModeChange;

    #[test]
    fn chmod_modes() {
        let m = |s: &str, from: u32| ModeChange::parse(s).map(|c| c.apply(from, false));
        assert_eq!(m("755", 0o644), Some(0o755));
        assert_eq!(m("+x", 0o644), Some(0o755));
        assert_eq!(m("u+x", 0o644), Some(0o744));
        assert_eq!(m("go-r", 0o644), Some(0o600));
        assert_eq!(m("a=r", 0o755), Some(0o444));
        assert_eq!(m("u=rwx,g=rx,o=", 0o600), Some(0o750));
        assert_eq!(m("+w", 0o444), Some(0o644));
        assert_eq!(m("u+z", 0o644), None);
        assert_eq!(m("9", 0o644), None);
    }
}
