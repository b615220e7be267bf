//! `grep` (and `egrep`/`fgrep`) on the pure-Rust `regex` crate.
//!
//! Basic (`-G`, default) and extended (`-E`) POSIX regular expressions are
//! translated into `regex` syntax (see [`translate`]); `-F` patterns are
//! escaped. Back-references are not supported. Exit status: 0 if a line was
//! selected, 1 if none, 2 on error (unless `-q` and something matched).

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;

use regex::bytes::{Regex, RegexBuilder};

use crate::fnmatch::fnmatch;

/// Regular-expression dialect of the patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    /// POSIX basic regular expressions (`-G`).
    Basic,
    /// POSIX extended regular expressions (`-E`, also `-P`).
    Extended,
    /// Fixed strings (`-F`).
    Fixed,
}

/// Parsed command line.
#[derive(Debug, Clone)]
pub struct Options {
    pub syntax: Syntax,
    pub patterns: Vec<String>,
    pub ignore_case: bool,
    pub invert: bool,
    pub line_number: bool,
    pub count: bool,
    pub files_with_matches: bool,
    pub files_without_match: bool,
    pub only_matching: bool,
    pub word: bool,
    pub line: bool,
    pub quiet: bool,
    pub no_messages: bool,
    /// `Some(true)` for `-H`, `Some(false)` for `-h`, `None` for automatic.
    pub with_filename: Option<bool>,
    pub recursive: bool,
    pub follow_links: bool,
    pub after: usize,
    pub before: usize,
    pub max_count: Option<u64>,
    pub text: bool,
    pub skip_binary: bool,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub exclude_dir: Vec<String>,
    pub files: Vec<String>,
}

impl Options {
    fn new(syntax: Syntax) -> Self {
        Options {
            syntax,
            patterns: Vec::new(),
            ignore_case: false,
            invert: false,
            line_number: false,
            count: false,
            files_with_matches: false,
            files_without_match: false,
            only_matching: false,
            word: false,
            line: false,
            quiet: false,
            no_messages: false,
            with_filename: None,
            recursive: false,
            follow_links: false,
            after: 0,
            before: 0,
            max_count: None,
            text: false,
            skip_binary: false,
            include: Vec::new(),
            exclude: Vec::new(),
            exclude_dir: Vec::new(),
            files: Vec::new(),
        }
    }
}

fn parse_num(opt: &str, value: &str) -> Result<usize, String> {
    value
        .parse::<usize>()
        .map_err(|_| format!("invalid {opt} argument: '{value}'"))
}

fn read_pattern_file(path: &str) -> Result<Vec<String>, String> {
    let data = if path == "-" {
        let mut buf = Vec::new();
        io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| format!("-: {e}"))?;
        buf
    } else {
        fs::read(path).map_err(|e| format!("{path}: {}", describe(&e)))?
    };
    let text = String::from_utf8_lossy(&data);
    let mut pats: Vec<String> = text.split('\n').map(str::to_string).collect();
    if text.ends_with('\n') || text.is_empty() {
        pats.pop();
    }
    Ok(pats)
}

/// Parse grep's command line (without argv\[0\]).
pub fn parse_args(args: &[String], syntax: Syntax) -> Result<Options, String> {
    let mut o = Options::new(syntax);
    let mut have_pattern = false;
    let mut operands = Vec::new();
    let mut i = 0;
    // Options taking an argument, applied by both the short and long forms.
    let mut apply = |o: &mut Options, key: &str, val: &str| -> Result<(), String> {
        match key {
            "e" => {
                o.patterns.extend(val.split('\n').map(str::to_string));
                have_pattern = true;
            }
            "f" => {
                o.patterns.extend(read_pattern_file(val)?);
                have_pattern = true;
            }
            "A" => o.after = parse_num("context length", val)?,
            "B" => o.before = parse_num("context length", val)?,
            "C" => {
                let n = parse_num("context length", val)?;
                o.after = n;
                o.before = n;
            }
            "m" => o.max_count = Some(parse_num("max count", val)? as u64),
            "include" => o.include.push(val.to_string()),
            "exclude" => o.exclude.push(val.to_string()),
            "exclude-dir" => o.exclude_dir.push(val.to_string()),
            _ => return Err(format!("unknown option '{key}'")),
        }
        Ok(())
    };
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            operands.extend(args[i..].iter().cloned());
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let with_arg = |key: &str| match key {
                "regexp" => Some("e"),
                "file" => Some("f"),
                "after-context" => Some("A"),
                "before-context" => Some("B"),
                "context" => Some("C"),
                "max-count" => Some("m"),
                "include" => Some("include"),
                "exclude" => Some("exclude"),
                "exclude-dir" => Some("exclude-dir"),
                _ => None,
            };
            if let Some(key) = with_arg(name) {
                let val = match inline {
                    Some(v) => v,
                    None => {
                        let v = args
                            .get(i)
                            .ok_or_else(|| format!("option '--{name}' requires an argument"))?;
                        i += 1;
                        v.clone()
                    }
                };
                apply(&mut o, key, &val)?;
                continue;
            }
            match name {
                "extended-regexp" => o.syntax = Syntax::Extended,
                "fixed-strings" => o.syntax = Syntax::Fixed,
                "basic-regexp" => o.syntax = Syntax::Basic,
                "perl-regexp" => o.syntax = Syntax::Extended,
                "ignore-case" => o.ignore_case = true,
                "no-ignore-case" => o.ignore_case = false,
                "invert-match" => o.invert = true,
                "line-number" => o.line_number = true,
                "count" => o.count = true,
                "files-with-matches" => o.files_with_matches = true,
                "files-without-match" => o.files_without_match = true,
                "only-matching" => o.only_matching = true,
                "word-regexp" => o.word = true,
                "line-regexp" => o.line = true,
                "quiet" | "silent" => o.quiet = true,
                "no-messages" => o.no_messages = true,
                "no-filename" => o.with_filename = Some(false),
                "with-filename" => o.with_filename = Some(true),
                "recursive" => o.recursive = true,
                "dereference-recursive" => {
                    o.recursive = true;
                    o.follow_links = true;
                }
                "text" => o.text = true,
                "color" | "colour" | "line-buffered" => {}
                "help" => return Err("__help".into()),
                _ => return Err(format!("unrecognized option '--{name}'")),
            }
            continue;
        }
        if arg.len() > 1 && arg.starts_with('-') {
            let chars: Vec<char> = arg[1..].chars().collect();
            let mut j = 0;
            while j < chars.len() {
                let c = chars[j];
                j += 1;
                match c {
                    'e' | 'f' | 'A' | 'B' | 'C' | 'm' => {
                        let rest: String = chars[j..].iter().collect();
                        let val = if rest.is_empty() {
                            let v = args
                                .get(i)
                                .ok_or_else(|| format!("option requires an argument -- '{c}'"))?;
                            i += 1;
                            v.clone()
                        } else {
                            rest
                        };
                        apply(&mut o, &c.to_string(), &val)?;
                        j = chars.len();
                    }
                    '0'..='9' => {
                        // -NUM is -C NUM.
                        let mut num = String::from(c);
                        while j < chars.len() && chars[j].is_ascii_digit() {
                            num.push(chars[j]);
                            j += 1;
                        }
                        apply(&mut o, "C", &num)?;
                    }
                    'E' => o.syntax = Syntax::Extended,
                    'F' => o.syntax = Syntax::Fixed,
                    'G' => o.syntax = Syntax::Basic,
                    'P' => o.syntax = Syntax::Extended,
                    'i' | 'y' => o.ignore_case = true,
                    'v' => o.invert = true,
                    'n' => o.line_number = true,
                    'c' => o.count = true,
                    'l' => o.files_with_matches = true,
                    'L' => o.files_without_match = true,
                    'o' => o.only_matching = true,
                    'w' => o.word = true,
                    'x' => o.line = true,
                    'q' => o.quiet = true,
                    's' => o.no_messages = true,
                    'h' => o.with_filename = Some(false),
                    'H' => o.with_filename = Some(true),
                    'r' => o.recursive = true,
                    'R' => {
                        o.recursive = true;
                        o.follow_links = true;
                    }
                    'a' => o.text = true,
                    'I' => o.skip_binary = true,
                    'U' => {}
                    _ => return Err(format!("invalid option -- '{c}'")),
                }
            }
            continue;
        }
        operands.push(arg.clone());
    }
    let mut operands = operands.into_iter();
    if !have_pattern {
        let pat = operands.next().ok_or_else(|| "__usage".to_string())?;
        o.patterns.extend(pat.split('\n').map(str::to_string));
    }
    o.files = operands.collect();
    Ok(o)
}

/// Translate a POSIX regular expression (basic when `basic`, else extended)
/// into the syntax of the `regex` crate.
pub fn translate(pat: &str, basic: bool) -> Result<String, String> {
    let chars: Vec<char> = pat.chars().collect();
    let mut out = String::with_capacity(pat.len() * 2);
    let mut i = 0;
    // True where a following `*` would be literal (start of an expression).
    let mut at_start = true;
    while i < chars.len() {
        let c = chars[i];
        let was_start = at_start;
        at_start = false;
        match c {
            '\\' => {
                let Some(&n) = chars.get(i + 1) else {
                    return Err("trailing backslash (\\)".into());
                };
                i += 2;
                match n {
                    '(' if basic => {
                        out.push('(');
                        at_start = true;
                    }
                    ')' if basic => out.push(')'),
                    '|' if basic => {
                        out.push('|');
                        at_start = true;
                    }
                    '{' if basic => {
                        let (text, next) = interval(&chars, i, true)?;
                        out.push_str(&text);
                        i = next;
                    }
                    '}' if basic => out.push_str("\\}"),
                    '+' | '?' if basic => out.push(n),
                    '<' => out.push_str("\\b{start}"),
                    '>' => out.push_str("\\b{end}"),
                    'w' | 'W' | 's' | 'S' | 'b' | 'B' => {
                        out.push('\\');
                        out.push(n);
                    }
                    '`' => out.push_str("\\A"),
                    '\'' => out.push_str("\\z"),
                    '1'..='9' => return Err("back-references are not supported".into()),
                    other => push_literal(&mut out, other),
                }
                continue;
            }
            '[' => {
                let (text, next) = bracket(&chars, i)?;
                out.push_str(&text);
                i = next;
                continue;
            }
            '*' if was_start => out.push_str("\\*"),
            '*' => out.push('*'),
            '^' if basic && !was_start => out.push_str("\\^"),
            '^' => {
                out.push('^');
                at_start = true;
            }
            '$' if basic => {
                let next_ends = i + 1 == chars.len()
                    || (chars[i + 1] == '\\' && matches!(chars.get(i + 2), Some(')' | '|')));
                out.push_str(if next_ends { "$" } else { "\\$" });
            }
            '$' => out.push('$'),
            '.' => out.push('.'),
            '(' | ')' | '|' | '+' | '?' | '{' | '}' if basic => push_literal(&mut out, c),
            '(' | '|' => {
                out.push(c);
                at_start = true;
            }
            '+' | '?' if was_start => push_literal(&mut out, c),
            '{' => {
                if valid_interval(&chars, i + 1, false) {
                    let (text, next) = interval(&chars, i + 1, false)?;
                    out.push_str(&text);
                    i = next;
                    continue;
                }
                out.push_str("\\{");
            }
            '}' => out.push_str("\\}"),
            ')' | '+' | '?' => out.push(c),
            other => push_literal(&mut out, other),
        }
        i += 1;
    }
    Ok(out)
}

fn push_literal(out: &mut String, c: char) {
    let mut buf = [0u8; 4];
    out.push_str(&regex::escape(c.encode_utf8(&mut buf)));
}

/// Whether `chars[start..]` holds `m}`, `m,}`, `m,n}` (with `\}` when basic).
fn valid_interval(chars: &[char], start: usize, basic: bool) -> bool {
    interval(chars, start, basic).is_ok()
}

/// Parse an interval body starting after the opening brace; returns the
/// `regex` text `{m,n}` and the index after the closing brace.
fn interval(chars: &[char], start: usize, basic: bool) -> Result<(String, usize), String> {
    let mut i = start;
    let mut body = String::new();
    while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == ',') {
        body.push(chars[i]);
        i += 1;
    }
    let closed = if basic {
        chars.get(i) == Some(&'\\') && chars.get(i + 1) == Some(&'}')
    } else {
        chars.get(i) == Some(&'}')
    };
    let well_formed = !body.is_empty()
        && body.matches(',').count() <= 1
        && !body.starts_with(',')
        && body
            .split(',')
            .all(|p| p.is_empty() || p.parse::<u32>().is_ok());
    if !closed || !well_formed {
        return Err("invalid content of \\{\\}".into());
    }
    Ok((format!("{{{body}}}"), i + if basic { 2 } else { 1 }))
}

/// Translate a bracket expression starting at `chars[start] == '['`.
fn bracket(chars: &[char], start: usize) -> Result<(String, usize), String> {
    let mut out = String::from("[");
    let mut i = start + 1;
    if chars.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
    }
    let mut first = true;
    loop {
        let Some(&c) = chars.get(i) else {
            return Err("unmatched [, [^, [:, [., or [=".into());
        };
        if c == ']' && !first {
            out.push(']');
            return Ok((out, i + 1));
        }
        first = false;
        if c == '[' && matches!(chars.get(i + 1), Some(':' | '.' | '=')) {
            let kind = chars[i + 1];
            let rest: String = chars[i + 2..].iter().collect();
            let close = format!("{kind}]");
            let Some(end) = rest.find(&close) else {
                return Err("unmatched [, [^, [:, [., or [=".into());
            };
            let name = &rest[..end];
            if kind == ':' {
                out.push_str(&format!("[:{name}:]"));
            } else {
                for ch in name.chars() {
                    push_class_literal(&mut out, ch);
                }
            }
            i += 2 + name.chars().count() + 2;
            continue;
        }
        if c == '-' {
            // A range dash stays a dash; at the edges it is a literal.
            let at_edge =
                out.ends_with('[') || out.ends_with('^') || chars.get(i + 1) == Some(&']');
            out.push_str(if at_edge { "\\-" } else { "-" });
            i += 1;
            continue;
        }
        push_class_literal(&mut out, c);
        i += 1;
    }
}

fn push_class_literal(out: &mut String, c: char) {
    if matches!(c, '\\' | '[' | ']' | '&' | '~' | '-' | '^') {
        out.push('\\');
    }
    out.push(c);
}

/// Compiled set of patterns.
pub struct Matcher {
    re: Regex,
    word: bool,
    /// Matches everything (an empty pattern is present).
    match_all: bool,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

impl Matcher {
    /// Build the matcher for the given options.
    pub fn new(o: &Options) -> Result<Matcher, String> {
        let mut alts = Vec::new();
        for p in &o.patterns {
            let body = match o.syntax {
                Syntax::Fixed => regex::escape(p),
                Syntax::Basic => translate(p, true)?,
                Syntax::Extended => translate(p, false)?,
            };
            alts.push(format!("(?:{body})"));
        }
        let joined = if alts.is_empty() {
            // No patterns at all (e.g. empty -f file): match nothing.
            "[^\\s\\S]".to_string()
        } else {
            alts.join("|")
        };
        let full = if o.line {
            format!("^(?:{joined})$")
        } else {
            joined
        };
        let re = RegexBuilder::new(&full)
            .case_insensitive(o.ignore_case)
            .unicode(true)
            .build()
            .map_err(|e| format!("invalid regular expression: {}", first_line(&e.to_string())))?;
        let match_all = !o.line && !o.word && o.patterns.iter().any(String::is_empty);
        Ok(Matcher {
            re,
            word: o.word && !o.line,
            match_all,
        })
    }

    /// First acceptable match in `line` starting at or after `pos`.
    pub fn find_at(&self, line: &[u8], mut pos: usize) -> Option<(usize, usize)> {
        while pos <= line.len() {
            let m = self.re.find_at(line, pos)?;
            if !self.word {
                return Some((m.start(), m.end()));
            }
            let before_ok = m.start() == 0 || !is_word_byte(line[m.start() - 1]);
            let after_ok = m.end() == line.len() || !is_word_byte(line[m.end()]);
            if before_ok && after_ok && m.end() > m.start() {
                return Some((m.start(), m.end()));
            }
            pos = m.start() + 1;
        }
        None
    }

    /// Whether `line` contains a match.
    pub fn is_match(&self, line: &[u8]) -> bool {
        if self.match_all {
            return true;
        }
        if self.word {
            self.find_at(line, 0).is_some()
        } else {
            self.re.is_match(line)
        }
    }
}

fn first_line(s: &str) -> String {
    s.lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim()
        .to_string()
}

fn describe(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "No such file or directory".into(),
        io::ErrorKind::PermissionDenied => "Permission denied".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(idx) => s[..idx].to_string(),
                None => s,
            }
        }
    }
}

/// Running state across all searched files.
struct Searcher<'a, W: Write> {
    o: &'a Options,
    m: Matcher,
    out: W,
    show_name: bool,
    matched: bool,
    error: bool,
    /// Whether a context group was already printed (for `--` separators).
    printed_group: bool,
}

enum Flow {
    Continue,
    /// `-q` found a match: stop everything.
    Stop,
}

impl<W: Write> Searcher<'_, W> {
    fn warn(&mut self, msg: &str) {
        self.error = true;
        if !self.o.no_messages {
            eprintln!("grep: {msg}");
        }
    }

    fn prefix(&mut self, name: &str, lineno: usize, sep: u8) -> io::Result<()> {
        if self.show_name {
            self.out.write_all(name.as_bytes())?;
            self.out.write_all(&[sep])?;
        }
        if self.o.line_number {
            write!(self.out, "{lineno}")?;
            self.out.write_all(&[sep])?;
        }
        Ok(())
    }

    fn search_data(&mut self, name: &str, data: &[u8]) -> io::Result<Flow> {
        let o = self.o;
        let binary = !o.text && data.contains(&0);
        if binary && o.skip_binary {
            return Ok(Flow::Continue);
        }
        let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
        if data.ends_with(b"\n") || data.is_empty() {
            lines.pop();
        }
        let context = (o.after > 0 || o.before > 0)
            && !o.count
            && !o.files_with_matches
            && !o.files_without_match
            && !o.quiet
            && !binary;
        let mut count: u64 = 0;
        let mut last_printed: Option<usize> = None;
        let mut after_left = 0usize;
        for (idx, line) in lines.iter().enumerate() {
            if o.max_count.is_some_and(|max| count >= max) {
                // Trailing context after the last allowed match still prints.
                if after_left > 0 && !o.only_matching {
                    self.prefix(name, idx + 1, b'-')?;
                    self.out.write_all(line)?;
                    self.out.write_all(b"\n")?;
                    after_left -= 1;
                    last_printed = Some(idx);
                    continue;
                }
                break;
            }
            let selected = self.m.is_match(line) != o.invert;
            if !selected {
                if context && after_left > 0 {
                    if !o.only_matching {
                        self.prefix(name, idx + 1, b'-')?;
                        self.out.write_all(line)?;
                        self.out.write_all(b"\n")?;
                    }
                    last_printed = Some(idx);
                    after_left -= 1;
                }
                continue;
            }
            count += 1;
            self.matched = true;
            if o.quiet {
                return Ok(Flow::Stop);
            }
            if o.files_with_matches || o.files_without_match {
                break;
            }
            if o.count {
                continue;
            }
            if binary {
                writeln!(self.out, "Binary file {name} matches")?;
                break;
            }
            if context {
                let from = idx.saturating_sub(o.before);
                let from = match last_printed {
                    Some(lp) => from.max(lp + 1),
                    None => from,
                };
                let gap = match last_printed {
                    Some(lp) => from > lp + 1,
                    None => self.printed_group,
                };
                if gap {
                    self.out.write_all(b"--\n")?;
                }
                if !o.only_matching {
                    for (k, ctx_line) in lines.iter().enumerate().take(idx).skip(from) {
                        self.prefix(name, k + 1, b'-')?;
                        self.out.write_all(ctx_line)?;
                        self.out.write_all(b"\n")?;
                    }
                }
                self.printed_group = true;
                last_printed = Some(idx);
                after_left = o.after;
            }
            if o.only_matching {
                if o.invert {
                    continue;
                }
                let mut pos = 0;
                while let Some((s, e)) = self.m.find_at(line, pos) {
                    if e > s {
                        self.prefix(name, idx + 1, b':')?;
                        self.out.write_all(&line[s..e])?;
                        self.out.write_all(b"\n")?;
                        pos = e;
                    } else {
                        pos = e + 1;
                    }
                    if pos > line.len() {
                        break;
                    }
                }
            } else {
                self.prefix(name, idx + 1, b':')?;
                self.out.write_all(line)?;
                self.out.write_all(b"\n")?;
            }
        }
        if o.count {
            if self.show_name {
                write!(self.out, "{name}:")?;
            }
            writeln!(self.out, "{count}")?;
        }
        if o.files_with_matches && count > 0 {
            writeln!(self.out, "{name}")?;
        }
        if o.files_without_match && count == 0 {
            writeln!(self.out, "{name}")?;
        }
        Ok(Flow::Continue)
    }

    fn search_path(&mut self, path: &Path, name: &str, top: bool) -> io::Result<Flow> {
        let meta = if self.o.follow_links || top {
            fs::metadata(path)
        } else {
            fs::symlink_metadata(path)
        };
        let meta = match meta {
            Ok(m) => m,
            Err(e) => {
                self.warn(&format!("{name}: {}", describe(&e)));
                return Ok(Flow::Continue);
            }
        };
        if meta.file_type().is_symlink() {
            // Symlinks met while recursing are skipped under -r.
            return Ok(Flow::Continue);
        }
        if meta.is_dir() {
            if !self.o.recursive {
                self.warn(&format!("{name}: Is a directory"));
                return Ok(Flow::Continue);
            }
            let base = path
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !top && self.o.exclude_dir.iter().any(|g| fnmatch(g, &base, false)) {
                return Ok(Flow::Continue);
            }
            let mut entries: Vec<String> = match fs::read_dir(path) {
                Ok(rd) => rd
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect(),
                Err(e) => {
                    self.warn(&format!("{name}: {}", describe(&e)));
                    return Ok(Flow::Continue);
                }
            };
            entries.sort();
            for entry in entries {
                let child_name = if name.is_empty() {
                    entry.clone()
                } else if name.ends_with('/') {
                    format!("{name}{entry}")
                } else {
                    format!("{name}/{entry}")
                };
                if let Flow::Stop = self.search_path(&path.join(&entry), &child_name, false)? {
                    return Ok(Flow::Stop);
                }
            }
            return Ok(Flow::Continue);
        }
        if !top || self.o.recursive {
            let base = path
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !self.o.include.is_empty()
                && !self.o.include.iter().any(|g| fnmatch(g, &base, false))
            {
                return Ok(Flow::Continue);
            }
            if self.o.exclude.iter().any(|g| fnmatch(g, &base, false)) {
                return Ok(Flow::Continue);
            }
        }
        match fs::read(path) {
            Ok(data) => self.search_data(name, &data),
            Err(e) => {
                self.warn(&format!("{name}: {}", describe(&e)));
                Ok(Flow::Continue)
            }
        }
    }
}

fn usage() -> i32 {
    eprintln!("Usage: grep [OPTION]... PATTERNS [FILE]...");
    eprintln!("Try 'grep --help' for more information.");
    2
}

fn help() -> i32 {
    println!(
        "Usage: grep [OPTION]... PATTERNS [FILE]...\n\
         Search for PATTERNS in each FILE.\n\
         \n  -E, -F, -G         extended / fixed-string / basic (default) patterns\n\
         \x20 -e PATTERNS, -f FILE, -i, -v, -w, -x\n\
         \x20 -n, -c, -l, -L, -o, -q, -s, -h, -H, -m NUM\n\
         \x20 -r, -R, --include=GLOB, --exclude=GLOB, --exclude-dir=GLOB\n\
         \x20 -A NUM, -B NUM, -C NUM\n\
         Back-references are not supported."
    );
    0
}

/// Run grep with already-split arguments (without argv\[0\]), writing to `out`.
pub fn run<W: Write>(args: &[String], syntax: Syntax, out: W) -> i32 {
    let o = match parse_args(args, syntax) {
        Ok(o) => o,
        Err(e) if e == "__usage" => return usage(),
        Err(e) if e == "__help" => return help(),
        Err(e) => {
            eprintln!("grep: {e}");
            return usage();
        }
    };
    let m = match Matcher::new(&o) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("grep: {e}");
            return 2;
        }
    };
    let mut files = o.files.clone();
    let implicit_dot = files.is_empty() && o.recursive;
    if files.is_empty() && !o.recursive {
        files.push("-".into());
    }
    let show_name = o
        .with_filename
        .unwrap_or(o.recursive || files.len() > 1 || implicit_dot);
    let mut s = Searcher {
        o: &o,
        m,
        out,
        show_name,
        matched: false,
        error: false,
        printed_group: false,
    };
    let result = (|| -> io::Result<()> {
        if implicit_dot {
            s.search_path(Path::new("."), "", true)?;
            return Ok(());
        }
        for f in &files {
            let flow = if f == "-" {
                let mut data = Vec::new();
                match io::stdin().read_to_end(&mut data) {
                    Ok(_) => s.search_data("(standard input)", &data)?,
                    Err(e) => {
                        s.warn(&format!("(standard input): {}", describe(&e)));
                        Flow::Continue
                    }
                }
            } else {
                s.search_path(Path::new(f), f, true)?
            };
            if let Flow::Stop = flow {
                break;
            }
        }
        s.out.flush()
    })();
    if result.is_err() {
        return 2;
    }
    if s.error && !(o.quiet && s.matched) {
        2
    } else if s.matched {
        0
    } else {
        1
    }
}

/// Entry point of `grep`.
pub fn main(args: Vec<OsString>) -> i32 {
    run(
        &crate::string_args(&args),
        Syntax::Basic,
        io::BufWriter::new(io::stdout().lock()),
    )
}

/// Entry point of `egrep` (`grep -E`).
pub fn main_egrep(args: Vec<OsString>) -> i32 {
    run(
        &crate::string_args(&args),
        Syntax::Extended,
        io::BufWriter::new(io::stdout().lock()),
    )
}

/// Entry point of `fgrep` (`grep -F`).
pub fn main_fgrep(args: Vec<OsString>) -> i32 {
    run(
        &crate::string_args(&args),
        Syntax::Fixed,
        io::BufWriter::new(io::stdout().lock()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn grep_on(list: &[&str], input: &str) -> (i32, String) {
        let dir = tempdir();
        let file = dir.join("input.txt");
        fs::write(&file, input).expect("write input");
        let mut a = args(list);
        a.push(file.to_string_lossy().into_owned());
        let mut out = Vec::new();
        let code = run(&a, Syntax::Basic, &mut out);
        let _ = fs::remove_dir_all(&dir);
        (code, String::from_utf8(out).expect("utf8"))
    }

    fn tempdir() -> std::path::PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let d = std::env::temp_dir().join(format!(
            "tbgrep-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        fs::create_dir_all(&d).expect("mkdir");
        d
    }

    #[test]
    fn bre_translation() {
        assert_eq!(translate(r"a\(b\)c", true).as_deref(), Ok("a(b)c"));
        assert_eq!(translate("a(b)c", true).as_deref(), Ok(r"a\(b\)c"));
        assert_eq!(translate(r"a\{2,3\}", true).as_deref(), Ok("a{2,3}"));
        assert_eq!(translate("a{2}", true).as_deref(), Ok(r"a\{2\}"));
        assert_eq!(translate(r"a\|b", true).as_deref(), Ok("a|b"));
        assert_eq!(translate("a|b+c?", true).as_deref(), Ok(r"a\|b\+c\?"));
        assert_eq!(translate(r"a\+b\?", true).as_deref(), Ok("a+b?"));
        assert_eq!(translate("*a", true).as_deref(), Ok(r"\*a"));
        assert_eq!(translate("^a*$", true).as_deref(), Ok("^a*$"));
        assert_eq!(translate("a^b$c", true).as_deref(), Ok(r"a\^b\$c"));
        assert_eq!(
            translate("[[:digit:]]x", true).as_deref(),
            Ok("[[:digit:]]x")
        );
        assert_eq!(translate(r"[\]", true).as_deref(), Ok(r"[\\]"));
        assert_eq!(translate("[]a]", true).as_deref(), Ok(r"[\]a]"));
        assert_eq!(translate("[a-z-]", true).as_deref(), Ok(r"[a-z\-]"));
        assert!(translate(r"\(a\)\1", true).is_err());
        assert!(translate("[abc", true).is_err());
    }

    #[test]
    fn ere_translation() {
        assert_eq!(translate("a(b|c)+", false).as_deref(), Ok("a(b|c)+"));
        assert_eq!(translate("a{2}", false).as_deref(), Ok("a{2}"));
        assert_eq!(translate("a{x", false).as_deref(), Ok(r"a\{x"));
        assert_eq!(
            translate(r"\<word\>", false).as_deref(),
            Ok(r"\b{start}word\b{end}")
        );
        assert_eq!(translate("+a", false).as_deref(), Ok(r"\+a"));
    }

    #[test]
    fn parses_combined_flags() {
        let o =
            parse_args(&args(&["-rnE", "-e", "x", "--", "-file"]), Syntax::Basic).expect("parse");
        assert!(o.recursive && o.line_number);
        assert_eq!(o.syntax, Syntax::Extended);
        assert_eq!(o.patterns, vec!["x"]);
        assert_eq!(o.files, vec!["-file"]);
        let o = parse_args(&args(&["-C2", "pat", "f", "-i"]), Syntax::Basic).expect("parse");
        assert_eq!((o.before, o.after), (2, 2));
        assert!(o.ignore_case);
        assert_eq!(o.files, vec!["f"]);
        let o = parse_args(
            &args(&["-A", "1", "--color=never", "-3", "p"]),
            Syntax::Basic,
        )
        .expect("parse");
        assert_eq!((o.before, o.after), (3, 3));
        assert!(parse_args(&args(&[]), Syntax::Basic).is_err());
    }

    #[test]
    fn basic_search_and_flags() {
        let text = "alpha\nBeta\ngamma\nalphabet\n";
        assert_eq!(grep_on(&["alpha"], text), (0, "alpha\nalphabet\n".into()));
        assert_eq!(grep_on(&["-w", "alpha"], text), (0, "alpha\n".into()));
        assert_eq!(grep_on(&["-x", "alpha"], text), (0, "alpha\n".into()));
        assert_eq!(grep_on(&["-in", "beta"], text), (0, "2:Beta\n".into()));
        assert_eq!(grep_on(&["-c", "a"], text), (0, "4\n".into()));
        assert_eq!(grep_on(&["-vc", "alpha"], text), (0, "2\n".into()));
        assert_eq!(grep_on(&["-o", "al"], text), (0, "al\nal\n".into()));
        assert_eq!(grep_on(&["zzz"], text), (1, String::new()));
        assert_eq!(grep_on(&["-q", "gamma"], text), (0, String::new()));
        assert_eq!(
            grep_on(&["-E", "^(Beta|gamma)$"], text),
            (0, "Beta\ngamma\n".into())
        );
        assert_eq!(grep_on(&["-F", "a.b"], "a.b\naxb\n"), (0, "a.b\n".into()));
        assert_eq!(grep_on(&["a.b"], "a.b\naxb\n"), (0, "a.b\naxb\n".into()));
        assert_eq!(
            grep_on(&["-e", "Beta", "-e", "gamma"], text).1,
            "Beta\ngamma\n"
        );
        assert_eq!(grep_on(&["x\\(y\\)*z"], "xz\nxyyz\nq\n").1, "xz\nxyyz\n");
        assert_eq!(
            grep_on(&["-w", "@foo"], "a @foo b\n@foobar\n").1,
            "a @foo b\n"
        );
    }

    #[test]
    fn context_lines() {
        let text = "1\n2\nm\n4\n5\n6\n7\nm\n9\n";
        assert_eq!(grep_on(&["-A1", "m"], text).1, "m\n4\n--\nm\n9\n");
        assert_eq!(grep_on(&["-nB1", "m"], text).1, "2-2\n3:m\n--\n7-7\n8:m\n");
        assert_eq!(grep_on(&["-C5", "m"], text).1, text);
    }

    #[test]
    fn recursive_search() {
        let dir = tempdir();
        fs::create_dir_all(dir.join("sub")).expect("mkdir");
        fs::write(dir.join("a.txt"), "needle\n").expect("write");
        fs::write(dir.join("sub/b.rs"), "hay\nneedle here\n").expect("write");
        let root = dir.to_string_lossy().into_owned();
        let mut out = Vec::new();
        let code = run(&args(&["-rn", "needle", &root]), Syntax::Basic, &mut out);
        assert_eq!(code, 0);
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            format!("{root}/a.txt:1:needle\n{root}/sub/b.rs:2:needle here\n")
        );
        let mut out = Vec::new();
        run(
            &args(&["-rl", "--include=*.rs", "needle", &root]),
            Syntax::Basic,
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            format!("{root}/sub/b.rs\n")
        );
        let mut out = Vec::new();
        let code = run(&args(&["x", &root]), Syntax::Basic, &mut out);
        assert_eq!(code, 2);
        let _ = fs::remove_dir_all(&dir);
    }
}
