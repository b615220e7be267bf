//! A small `find` on `std::fs`.
//!
//! Supports start paths (default `.`), `-L`/`-P`, the tests `-name`, `-iname`,
//! `-path`, `-ipath`, `-wholename`, `-regex`, `-iregex`, `-type`, `-size`,
//! `-newer`, `-empty`, `-mtime`, `-mmin`, `-true`, `-false`, the options
//! `-maxdepth`, `-mindepth`, `-depth`, `-xdev`, the actions `-print`, `-print0`,
//! `-printf` (common directives), `-delete`, `-prune`, `-quit`, and the
//! operators `!`/`-not`, `-a`/`-and`, `-o`/`-or`, `,` and parentheses.
//! Directory children are visited sorted by name for determinism. `-exec` and
//! friends are refused: there are no subprocesses inside the sandbox module.

use std::ffi::OsString;
use std::fs::{self, Metadata};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use regex::Regex;

use crate::fnmatch::fnmatch;

/// Comparison of a numeric test argument (`+N`, `-N`, `N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Greater(u64),
    Less(u64),
    Equal(u64),
}

impl Cmp {
    fn parse(s: &str) -> Option<(Cmp, &str)> {
        let (ctor, rest): (fn(u64) -> Cmp, &str) = if let Some(r) = s.strip_prefix('+') {
            (Cmp::Greater, r)
        } else if let Some(r) = s.strip_prefix('-') {
            (Cmp::Less, r)
        } else {
            (Cmp::Equal, s)
        };
        let digits_end = rest
            .char_indices()
            .find(|(_, c)| !c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        let n = rest[..digits_end].parse().ok()?;
        Some((ctor(n), &rest[digits_end..]))
    }

    fn test(self, v: u64) -> bool {
        match self {
            Cmp::Greater(n) => v > n,
            Cmp::Less(n) => v < n,
            Cmp::Equal(n) => v == n,
        }
    }
}

/// Parsed find expression.
#[derive(Debug)]
pub enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    /// `a , b`: evaluate both, value of `b`.
    Comma(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    True,
    False,
    Name(String, bool),
    Path(String, bool),
    Regex(Regex),
    Type(Vec<char>),
    Size(Cmp, u64),
    Newer(SystemTime),
    Empty,
    Mtime(Cmp, u64),
    Print,
    Print0,
    Printf(String),
    Delete,
    Prune,
    Quit,
}

/// Parsed command line.
#[derive(Debug)]
pub struct Command {
    pub follow: bool,
    pub starts: Vec<String>,
    pub expr: Expr,
    pub maxdepth: Option<usize>,
    pub mindepth: usize,
    pub depth_first: bool,
}

struct Parser<'a> {
    toks: &'a [String],
    pos: usize,
    maxdepth: Option<usize>,
    mindepth: usize,
    depth_first: bool,
    has_action: bool,
    follow: bool,
}

fn is_primary_start(t: &str) -> bool {
    t == "(" || t == "!" || (t.starts_with('-') && t.len() > 1)
}

impl Parser<'_> {
    fn peek(&self) -> Option<&str> {
        self.toks.get(self.pos).map(String::as_str)
    }

    fn next_arg(&mut self, pred: &str) -> Result<String, String> {
        let v = self
            .toks
            .get(self.pos)
            .ok_or_else(|| format!("missing argument to `{pred}'"))?;
        self.pos += 1;
        Ok(v.clone())
    }

    fn parse_comma(&mut self) -> Result<Expr, String> {
        let mut left = self.parse_or()?;
        while self.peek() == Some(",") {
            self.pos += 1;
            let right = self.parse_or()?;
            left = Expr::Comma(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn parse_or(&mut self) -> Result<Expr, String> {
        let mut left = self.parse_and()?;
        while matches!(self.peek(), Some("-o" | "-or")) {
            self.pos += 1;
            let right = self.parse_and()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn parse_and(&mut self) -> Result<Expr, String> {
        let mut left = self.parse_not()?;
        loop {
            match self.peek() {
                Some("-a" | "-and") => {
                    self.pos += 1;
                }
                Some(t) if is_primary_start(t) && !matches!(t, "-o" | "-or") => {}
                _ => break,
            }
            let right = self.parse_not()?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn parse_not(&mut self) -> Result<Expr, String> {
        if matches!(self.peek(), Some("!" | "-not")) {
            self.pos += 1;
            return Ok(Expr::Not(Box::new(self.parse_not()?)));
        }
        self.parse_primary()
    }

    fn parse_primary(&mut self) -> Result<Expr, String> {
        let tok = self
            .peek()
            .ok_or_else(|| "expected an expression".to_string())?
            .to_string();
        self.pos += 1;
        let expr = match tok.as_str() {
            "(" => {
                let inner = self.parse_comma()?;
                if self.peek() != Some(")") {
                    return Err("invalid expression; I was expecting to find a ')' somewhere but did not see one.".into());
                }
                self.pos += 1;
                inner
            }
            "-name" | "-iname" => Expr::Name(self.next_arg(&tok)?, tok == "-iname"),
            "-path" | "-wholename" | "-ipath" | "-iwholename" => {
                Expr::Path(self.next_arg(&tok)?, tok.starts_with("-i"))
            }
            "-regex" | "-iregex" => {
                let pat = self.next_arg(&tok)?;
                let body = crate::grep::translate(&pat, false)?;
                let re = regex::RegexBuilder::new(&format!("^(?:{body})$"))
                    .case_insensitive(tok == "-iregex")
                    .build()
                    .map_err(|e| format!("invalid regular expression `{pat}': {e}"))?;
                Expr::Regex(re)
            }
            "-type" | "-xtype" => {
                let arg = self.next_arg(&tok)?;
                let mut kinds = Vec::new();
                for part in arg.split(',') {
                    let mut chars = part.chars();
                    match (chars.next(), chars.next()) {
                        (Some(c), None) if "fdlbcps".contains(c) => kinds.push(c),
                        _ => return Err(format!("Unknown argument to {tok}: {part}")),
                    }
                }
                Expr::Type(kinds)
            }
            "-size" => {
                let arg = self.next_arg(&tok)?;
                let (cmp, unit) = Cmp::parse(&arg)
                    .ok_or_else(|| format!("invalid argument `{arg}' to `-size'"))?;
                let unit = match unit {
                    "" | "b" => 512,
                    "c" => 1,
                    "w" => 2,
                    "k" => 1024,
                    "M" => 1024 * 1024,
                    "G" => 1024 * 1024 * 1024,
                    _ => return Err(format!("invalid -size type `{unit}'")),
                };
                Expr::Size(cmp, unit)
            }
            "-newer" => {
                let f = self.next_arg(&tok)?;
                let t = fs::metadata(&f)
                    .and_then(|m| m.modified())
                    .map_err(|e| format!("'{f}': {}", describe(&e)))?;
                Expr::Newer(t)
            }
            "-mtime" | "-mmin" => {
                let arg = self.next_arg(&tok)?;
                let (cmp, rest) = Cmp::parse(&arg)
                    .filter(|(_, r)| r.is_empty())
                    .ok_or_else(|| format!("invalid argument `{arg}' to `{tok}'"))?;
                debug_assert!(rest.is_empty());
                Expr::Mtime(cmp, if tok == "-mtime" { 86400 } else { 60 })
            }
            "-empty" => Expr::Empty,
            "-true" => Expr::True,
            "-false" => Expr::False,
            "-print" => {
                self.has_action = true;
                Expr::Print
            }
            "-print0" => {
                self.has_action = true;
                Expr::Print0
            }
            "-printf" => {
                self.has_action = true;
                Expr::Printf(self.next_arg(&tok)?)
            }
            "-delete" => {
                self.has_action = true;
                self.depth_first = true;
                Expr::Delete
            }
            "-prune" => Expr::Prune,
            "-quit" => Expr::Quit,
            "-maxdepth" | "-mindepth" => {
                let arg = self.next_arg(&tok)?;
                let n: usize = arg
                    .parse()
                    .map_err(|_| format!("invalid argument `{arg}' to `{tok}'"))?;
                if tok == "-maxdepth" {
                    self.maxdepth = Some(n);
                } else {
                    self.mindepth = n;
                }
                Expr::True
            }
            "-depth" | "-d" => {
                self.depth_first = true;
                Expr::True
            }
            "-follow" => {
                self.follow = true;
                Expr::True
            }
            "-xdev" | "-mount" | "-noleaf" | "-ignore_readdir_race" => Expr::True,
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                return Err("__exec".into());
            }
            ")" => return Err("invalid expression; you have too many ')'".into()),
            other if other.starts_with('-') => {
                return Err(format!("unknown predicate `{other}'"));
            }
            other => return Err(format!("paths must precede expression: `{other}'")),
        };
        Ok(expr)
    }
}

/// Parse find's arguments (without argv\[0\]).
pub fn parse_args(args: &[String]) -> Result<Command, String> {
    let mut i = 0;
    let mut follow = false;
    while i < args.len() {
        match args[i].as_str() {
            "-L" => follow = true,
            "-P" | "-H" => follow = false,
            "--" => {
                i += 1;
                break;
            }
            _ => break,
        }
        i += 1;
    }
    let mut starts = Vec::new();
    while i < args.len() && !is_primary_start(&args[i]) {
        starts.push(args[i].clone());
        i += 1;
    }
    if starts.is_empty() {
        starts.push(".".into());
    }
    let toks = &args[i..];
    let mut p = Parser {
        toks,
        pos: 0,
        maxdepth: None,
        mindepth: 0,
        depth_first: false,
        has_action: false,
        follow,
    };
    let expr = if toks.is_empty() {
        Expr::True
    } else {
        let e = p.parse_comma()?;
        if let Some(t) = p.peek() {
            return Err(match t {
                ")" => "invalid expression; you have too many ')'".into(),
                _ => format!("paths must precede expression: `{t}'"),
            });
        }
        e
    };
    let expr = if p.has_action {
        expr
    } else {
        Expr::And(Box::new(expr), Box::new(Expr::Print))
    };
    Ok(Command {
        follow: p.follow,
        starts,
        expr,
        maxdepth: p.maxdepth,
        mindepth: p.mindepth,
        depth_first: p.depth_first,
    })
}

fn describe(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "No such file or directory".into(),
        io::ErrorKind::PermissionDenied => "Permission denied".into(),
        io::ErrorKind::DirectoryNotEmpty => "Directory not empty".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(idx) => s[..idx].to_string(),
                None => s,
            }
        }
    }
}

/// One visited file.
struct Entry<'a> {
    /// Path as printed.
    shown: &'a str,
    /// Path relative to the start point (for `%P`).
    start: &'a str,
    fs_path: &'a Path,
    depth: usize,
    meta: &'a Metadata,
}

struct Walker<'a, W: Write> {
    cmd: &'a Command,
    out: W,
    now: SystemTime,
    status: i32,
    quit: bool,
}

fn type_char(meta: &Metadata) -> char {
    let ft = meta.file_type();
    if ft.is_symlink() {
        'l'
    } else if ft.is_dir() {
        'd'
    } else if ft.is_file() {
        'f'
    } else {
        'p'
    }
}

fn base_name(shown: &str) -> &str {
    let trimmed = shown.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/";
    }
    match trimmed.rfind('/') {
        Some(i) => &trimmed[i + 1..],
        None => trimmed,
    }
}

impl<W: Write> Walker<'_, W> {
    fn warn(&mut self, msg: &str) {
        eprintln!("find: {msg}");
        self.status = 1;
    }

    /// Evaluate `e`; the second value is false when `-prune` fired.
    fn eval(&mut self, e: &Expr, en: &Entry, prune: &mut bool) -> io::Result<bool> {
        if self.quit {
            return Ok(false);
        }
        Ok(match e {
            Expr::And(a, b) => self.eval(a, en, prune)? && self.eval(b, en, prune)?,
            Expr::Or(a, b) => self.eval(a, en, prune)? || self.eval(b, en, prune)?,
            Expr::Comma(a, b) => {
                self.eval(a, en, prune)?;
                self.eval(b, en, prune)?
            }
            Expr::Not(a) => !self.eval(a, en, prune)?,
            Expr::True => true,
            Expr::False => false,
            Expr::Name(p, fold) => fnmatch(p, base_name(en.shown), *fold),
            Expr::Path(p, fold) => fnmatch(p, en.shown, *fold),
            Expr::Regex(re) => re.is_match(en.shown),
            Expr::Type(kinds) => kinds.contains(&type_char(en.meta)),
            Expr::Size(cmp, unit) => {
                let len = en.meta.len();
                cmp.test(len.div_ceil(*unit))
            }
            Expr::Newer(t) => en.meta.modified().is_ok_and(|m| m > *t),
            Expr::Empty => {
                if en.meta.is_dir() {
                    fs::read_dir(en.fs_path).is_ok_and(|mut rd| rd.next().is_none())
                } else {
                    en.meta.is_file() && en.meta.len() == 0
                }
            }
            Expr::Mtime(cmp, unit) => {
                let age = en
                    .meta
                    .modified()
                    .ok()
                    .and_then(|m| self.now.duration_since(m).ok())
                    .map_or(0, |d| d.as_secs());
                cmp.test(age / unit)
            }
            Expr::Print => {
                self.out.write_all(en.shown.as_bytes())?;
                self.out.write_all(b"\n")?;
                true
            }
            Expr::Print0 => {
                self.out.write_all(en.shown.as_bytes())?;
                self.out.write_all(b"\0")?;
                true
            }
            Expr::Printf(fmt) => {
                let text = printf(fmt, en);
                self.out.write_all(text.as_bytes())?;
                true
            }
            Expr::Delete => {
                let res = if en.meta.is_dir() {
                    fs::remove_dir(en.fs_path)
                } else {
                    fs::remove_file(en.fs_path)
                };
                match res {
                    Ok(()) => true,
                    Err(e) => {
                        self.warn(&format!("cannot delete '{}': {}", en.shown, describe(&e)));
                        false
                    }
                }
            }
            Expr::Prune => {
                *prune = true;
                true
            }
            Expr::Quit => {
                self.quit = true;
                true
            }
        })
    }

    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        // Like GNU -P, symlinks (even on the command line) are not followed
        // unless -L was given.
        if self.cmd.follow {
            fs::metadata(path).or_else(|_| fs::symlink_metadata(path))
        } else {
            fs::symlink_metadata(path)
        }
    }

    fn visit(&mut self, fs_path: &Path, shown: &str, start: &str, depth: usize) -> io::Result<()> {
        if self.quit {
            return Ok(());
        }
        let meta = match self.metadata(fs_path) {
            Ok(m) => m,
            Err(e) => {
                self.warn(&format!("'{shown}': {}", describe(&e)));
                return Ok(());
            }
        };
        let entry = Entry {
            shown,
            start,
            fs_path,
            depth,
            meta: &meta,
        };
        let in_range = depth >= self.cmd.mindepth;
        let mut prune = false;
        if in_range && !self.cmd.depth_first {
            self.eval(&self.cmd.expr, &entry, &mut prune)?;
        }
        let descend = meta.is_dir()
            && (!prune || self.cmd.depth_first)
            && self.cmd.maxdepth.is_none_or(|m| depth < m);
        if descend {
            match fs::read_dir(fs_path) {
                Ok(rd) => {
                    let mut names: Vec<OsString> =
                        rd.filter_map(Result::ok).map(|e| e.file_name()).collect();
                    names.sort();
                    for name in names {
                        let name_s = name.to_string_lossy();
                        let child_shown = if shown.ends_with('/') {
                            format!("{shown}{name_s}")
                        } else {
                            format!("{shown}/{name_s}")
                        };
                        let child_start = if start.is_empty() {
                            name_s.to_string()
                        } else {
                            format!("{start}/{name_s}")
                        };
                        self.visit(&fs_path.join(&name), &child_shown, &child_start, depth + 1)?;
                        if self.quit {
                            return Ok(());
                        }
                    }
                }
                Err(e) => self.warn(&format!("'{shown}': {}", describe(&e))),
            }
        }
        if in_range && self.cmd.depth_first {
            self.eval(&self.cmd.expr, &entry, &mut prune)?;
        }
        Ok(())
    }
}

fn mode_string(meta: &Metadata) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        format!("{:o}", meta.permissions().mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        if meta.permissions().readonly() {
            "444".into()
        } else if meta.is_dir() {
            "755".into()
        } else {
            "644".into()
        }
    }
}

/// Expand a `-printf` format for one entry.
fn printf(fmt: &str, en: &Entry) -> String {
    let mut out = String::new();
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('0') => out.push('\0'),
                Some('\\') => out.push('\\'),
                Some(o) => {
                    out.push('\\');
                    out.push(o);
                }
                None => out.push('\\'),
            },
            '%' => match chars.next() {
                Some('p') => out.push_str(en.shown),
                Some('P') => out.push_str(en.start),
                Some('f') => out.push_str(base_name(en.shown)),
                Some('h') => {
                    let t = en.shown.trim_end_matches('/');
                    out.push_str(match t.rfind('/') {
                        Some(0) => "/",
                        Some(i) => &t[..i],
                        None => ".",
                    });
                }
                Some('s') => out.push_str(&en.meta.len().to_string()),
                Some('d') => out.push_str(&en.depth.to_string()),
                Some('y') => out.push(type_char(en.meta)),
                Some('m') => out.push_str(&mode_string(en.meta)),
                Some('T') | Some('A') | Some('C') => {
                    // Only the `@` (epoch seconds) variant is supported.
                    if chars.peek() == Some(&'@') {
                        chars.next();
                    }
                    let secs = en
                        .meta
                        .modified()
                        .ok()
                        .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
                        .map_or(0.0, |d| d.as_secs_f64());
                    out.push_str(&format!("{secs:.10}"));
                }
                Some('%') => out.push('%'),
                Some(o) => {
                    out.push('%');
                    out.push(o);
                }
                None => out.push('%'),
            },
            other => out.push(other),
        }
    }
    out
}

/// Run find with already-split arguments (without argv\[0\]).
pub fn run<W: Write>(args: &[String], out: W) -> i32 {
    let cmd = match parse_args(args) {
        Ok(c) => c,
        Err(e) if e == "__exec" => {
            eprintln!("find: -exec is not supported in the WASM toolbox; pipe into xargs instead");
            return 1;
        }
        Err(e) => {
            eprintln!("find: {e}");
            return 1;
        }
    };
    let mut w = Walker {
        cmd: &cmd,
        out,
        now: SystemTime::now(),
        status: 0,
        quit: false,
    };
    for start in &cmd.starts {
        let path = PathBuf::from(start);
        if w.visit(&path, start, "", 0).is_err() {
            return 1;
        }
        if w.quit {
            break;
        }
    }
    if w.out.flush().is_err() {
        return 1;
    }
    w.status
}

/// Entry point of `find`.
pub fn main(args: Vec<OsString>) -> i32 {
    let args = crate::string_args(&args);
    run(&args, io::BufWriter::new(io::stdout().lock()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn tree() -> PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let d = std::env::temp_dir().join(format!(
            "tbfind-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        fs::create_dir_all(d.join("src/deep")).expect("mkdir");
        fs::create_dir_all(d.join("empty")).expect("mkdir");
        fs::write(d.join("README.md"), "hello\n").expect("write");
        fs::write(d.join("src/main.rs"), vec![b'x'; 2000]).expect("write");
        fs::write(d.join("src/deep/lib.rs"), "").expect("write");
        d
    }

    fn find_in(dir: &Path, list: &[&str]) -> (i32, String) {
        let root = dir.to_string_lossy().into_owned();
        let mut a = vec![root.clone()];
        a.extend(args(list));
        let mut out = Vec::new();
        let code = run(&a, &mut out);
        let text = String::from_utf8(out).expect("utf8").replace(&root, "R");
        (code, text)
    }

    #[test]
    fn parses_operators_and_implicit_print() {
        let c = parse_args(&args(&["a", "b", "-name", "*.rs", "-o", "!", "-type", "d"]))
            .expect("parse");
        assert_eq!(c.starts, vec!["a", "b"]);
        match c.expr {
            Expr::And(inner, print) => {
                assert!(matches!(*print, Expr::Print));
                assert!(matches!(*inner, Expr::Or(_, _)));
            }
            other => panic!("unexpected {other:?}"),
        }
        let c = parse_args(&args(&["-maxdepth", "2", "-print0"])).expect("parse");
        assert_eq!(c.starts, vec!["."]);
        assert_eq!(c.maxdepth, Some(2));
        assert!(parse_args(&args(&[".", "-bogus"])).is_err());
        assert!(parse_args(&args(&[".", "(", "-name", "x"])).is_err());
        assert_eq!(
            parse_args(&args(&[".", "-exec", "rm", "{}", ";"]))
                .err()
                .as_deref(),
            Some("__exec")
        );
        assert_eq!(Cmp::parse("+5k"), Some((Cmp::Greater(5), "k")));
    }

    #[test]
    fn walks_and_filters() {
        let d = tree();
        let (code, out) = find_in(&d, &[]);
        assert_eq!(code, 0);
        assert_eq!(
            out,
            "R\nR/README.md\nR/empty\nR/src\nR/src/deep\nR/src/deep/lib.rs\nR/src/main.rs\n"
        );
        assert_eq!(
            find_in(&d, &["-name", "*.rs"]).1,
            "R/src/deep/lib.rs\nR/src/main.rs\n"
        );
        assert_eq!(find_in(&d, &["-type", "d", "-empty"]).1, "R/empty\n");
        assert_eq!(
            find_in(&d, &["-type", "f", "-empty"]).1,
            "R/src/deep/lib.rs\n"
        );
        assert_eq!(
            find_in(&d, &["-type", "f", "-size", "+1k"]).1,
            "R/src/main.rs\n"
        );
        assert_eq!(
            find_in(&d, &["-maxdepth", "1", "-type", "f"]).1,
            "R/README.md\n"
        );
        assert_eq!(find_in(&d, &["-mindepth", "3"]).1, "R/src/deep/lib.rs\n");
        assert_eq!(
            find_in(
                &d,
                &["-path", "*/src/*", "-prune", "-o", "-type", "f", "-print"]
            )
            .1,
            "R/README.md\n"
        );
        assert_eq!(
            find_in(
                &d,
                &["(", "-iname", "readme*", "-o", "-name", "main.rs", ")"]
            )
            .1,
            "R/README.md\nR/src/main.rs\n"
        );
        assert_eq!(
            find_in(&d, &["-name", "*.rs", "-printf", "%f %s\\n"]).1,
            "lib.rs 0\nmain.rs 2000\n"
        );
        assert_eq!(find_in(&d, &["-not", "-name", "*.*", "-type", "f"]).1, "");
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn deletes_depth_first() {
        let d = tree();
        let (code, _) = find_in(&d, &["-path", "*/src*", "-delete"]);
        assert_eq!(code, 0);
        assert!(!d.join("src").exists());
        assert!(d.join("README.md").exists());
        let (code, _) = find_in(&d.join("missing"), &[]);
        assert_eq!(code, 1);
        let _ = fs::remove_dir_all(&d);
    }
}
