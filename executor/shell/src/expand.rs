//! Word expansion: brace, tilde, parameter, command substitution, arithmetic, field
//! splitting on IFS, pathname expansion and quote removal.

use std::sync::{Arc, Mutex};

use brush_parser::word::{
    self, BraceExpressionMember, BraceExpressionOrText, Parameter, ParameterExpr,
    ParameterTestType, ParameterTransformOp, SpecialParameter, SubstringMatchKind, TildeExpr,
    WordPiece, WordPieceWithSource,
};

use super::arith;
use super::glob::{self, Pattern};
use super::io::{CaptureSink, Fd, SharedWriter};
use super::parse::{self, guarded};
use super::state::{BoxFut, CAPTURE_CAP, Ctl, Shell};

/// A piece of an expanded word.
#[derive(Debug, Clone)]
pub(crate) enum Piece {
    Seg {
        s: String,
        quoted: bool,
        split: bool,
    },
    /// Field boundary (between the elements of `"$@"`).
    Break,
}

fn seg(s: String, quoted: bool, split: bool) -> Piece {
    Piece::Seg { s, quoted, split }
}

/// The value of a parameter before operators apply.
enum Val {
    Unset,
    Str(String),
    List(Vec<String>, bool),
}

#[derive(Default, Debug)]
struct Field {
    chunks: Vec<(String, bool)>,
    keep: bool,
}

impl Field {
    fn is_empty(&self) -> bool {
        self.chunks.iter().all(|(s, _)| s.is_empty())
    }
    fn text(&self) -> String {
        self.chunks.iter().map(|(s, _)| s.as_str()).collect()
    }
    fn pattern(&self) -> String {
        self.chunks
            .iter()
            .map(|(s, q)| if *q { glob::escape(s) } else { s.clone() })
            .collect()
    }
    fn push(&mut self, s: &str, quoted: bool) {
        match self.chunks.last_mut() {
            Some((last, q)) if *q == quoted => last.push_str(s),
            _ => self.chunks.push((s.to_owned(), quoted)),
        }
    }
}

const MAX_BRACE_WORDS: usize = 10_000;

/// Brace expansion of a raw word (returns the word itself if it has none).
fn brace_expand(raw: &str) -> Vec<String> {
    if !(raw.contains('{') && raw.contains('}')) {
        return vec![raw.to_owned()];
    }
    let opts = parse::options();
    let parsed = guarded(|| word::parse_brace_expansions(raw, &opts));
    match parsed {
        Some(Ok(Some(items))) => {
            let mut budget = MAX_BRACE_WORDS;
            match brace_items(&items, &mut budget) {
                Some(v) if !v.is_empty() => v,
                _ => vec![raw.to_owned()],
            }
        }
        _ => vec![raw.to_owned()],
    }
}

fn brace_items(items: &[BraceExpressionOrText], budget: &mut usize) -> Option<Vec<String>> {
    let mut results = vec![String::new()];
    for item in items {
        match item {
            BraceExpressionOrText::Text(t) => {
                for r in &mut results {
                    r.push_str(t);
                }
            }
            BraceExpressionOrText::Expr(members) => {
                let mut alts = Vec::new();
                for m in members {
                    alts.extend(brace_member(m, budget)?);
                }
                if results.len().saturating_mul(alts.len()) > *budget {
                    return None;
                }
                let mut next = Vec::with_capacity(results.len() * alts.len());
                for r in &results {
                    for a in &alts {
                        next.push(format!("{r}{a}"));
                    }
                }
                results = next;
            }
        }
    }
    *budget = budget.saturating_sub(results.len());
    Some(results)
}

fn seq_count(start: i64, end: i64, inc: i64) -> Option<(i64, usize)> {
    let step = inc.checked_abs()?.max(1);
    let span = (i128::from(end) - i128::from(start)).unsigned_abs();
    let n = span / step.unsigned_abs() as u128 + 1;
    let n = usize::try_from(n).ok()?;
    Some((if end >= start { step } else { -step }, n))
}

fn brace_member(m: &BraceExpressionMember, budget: &mut usize) -> Option<Vec<String>> {
    match m {
        BraceExpressionMember::NumberSequence {
            start,
            end,
            increment,
        } => {
            let (step, n) = seq_count(*start, *end, *increment)?;
            if n > *budget {
                return None;
            }
            Some(
                (0..n)
                    .map(|i| (start + step * i as i64).to_string())
                    .collect(),
            )
        }
        BraceExpressionMember::CharSequence {
            start,
            end,
            increment,
        } => {
            let (step, n) = seq_count(
                i64::from(u32::from(*start)),
                i64::from(u32::from(*end)),
                *increment,
            )?;
            if n > *budget {
                return None;
            }
            Some(
                (0..n)
                    .filter_map(|i| {
                        u32::try_from(i64::from(u32::from(*start)) + step * i as i64)
                            .ok()
                            .and_then(char::from_u32)
                            .map(String::from)
                    })
                    .collect(),
            )
        }
        BraceExpressionMember::Child(items) => brace_items(items, budget),
    }
}

/// Processes the escapes of `$'...'` text.
pub(crate) fn ansi_c(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('a') => out.push('\x07'),
            Some('b') => out.push('\x08'),
            Some('e') | Some('E') => out.push('\x1b'),
            Some('f') => out.push('\x0c'),
            Some('v') => out.push('\x0b'),
            Some('\\') => out.push('\\'),
            Some('\'') => out.push('\''),
            Some('"') => out.push('"'),
            Some('?') => out.push('?'),
            Some('x') => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 && it.peek().is_some_and(char::is_ascii_hexdigit) {
                    v = v * 16 + it.next().and_then(|d| d.to_digit(16)).unwrap_or(0);
                    n += 1;
                }
                if n == 0 {
                    out.push_str("\\x");
                } else if let Some(ch) = char::from_u32(v) {
                    out.push(ch);
                }
            }
            Some(d @ '0'..='7') => {
                let mut v = d.to_digit(8).unwrap_or(0);
                let mut n = 1;
                while n < 3 && it.peek().is_some_and(|c| ('0'..='7').contains(c)) {
                    v = v * 8 + it.next().and_then(|d| d.to_digit(8)).unwrap_or(0);
                    n += 1;
                }
                if let Some(ch) = char::from_u32(v) {
                    out.push(ch);
                }
            }
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}

fn split_fields(pieces: Vec<Piece>, ifs: &str) -> Vec<Field> {
    let mut fields = Vec::new();
    let mut cur = Field::default();
    for p in pieces {
        match p {
            Piece::Break => {
                if cur.keep || !cur.is_empty() {
                    fields.push(std::mem::take(&mut cur));
                } else {
                    cur = Field::default();
                }
            }
            Piece::Seg { s, quoted, split } => {
                if !split || ifs.is_empty() {
                    cur.push(&s, quoted);
                    if quoted {
                        cur.keep = true;
                    }
                    continue;
                }
                let mut buf = [0u8; 4];
                for c in s.chars() {
                    if ifs.contains(c) {
                        if c.is_whitespace() {
                            if cur.keep || !cur.is_empty() {
                                fields.push(std::mem::take(&mut cur));
                            }
                        } else {
                            fields.push(std::mem::take(&mut cur));
                        }
                    } else {
                        cur.push(c.encode_utf8(&mut buf), false);
                    }
                }
            }
        }
    }
    if cur.keep || !cur.is_empty() {
        fields.push(cur);
    }
    fields
}

fn pieces_text(pieces: &[Piece]) -> String {
    let mut out = String::new();
    let mut first = true;
    for p in pieces {
        match p {
            Piece::Seg { s, .. } => out.push_str(s),
            Piece::Break => {
                if !first {
                    out.push(' ');
                }
            }
        }
        first = false;
    }
    out
}

fn to_quoted(pieces: Vec<Piece>) -> Vec<Piece> {
    pieces
        .into_iter()
        .map(|p| match p {
            Piece::Seg { s, .. } => seg(s, true, false),
            Piece::Break => Piece::Break,
        })
        .collect()
}

fn case_map(s: &str, upper: bool, first_only: bool) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if first_only && i > 0 {
            out.push(c);
        } else if upper {
            out.extend(c.to_uppercase());
        } else {
            out.extend(c.to_lowercase());
        }
    }
    out
}

impl Shell {
    /// Expands the words of a command into fields (with splitting and globbing).
    pub(crate) async fn expand_args(&mut self, words: &[String]) -> Result<Vec<String>, Ctl> {
        let mut out = Vec::new();
        for w in words {
            for raw in brace_expand(w) {
                let pieces = self.word_pieces(&raw).await?;
                let ifs = self.ifs();
                for f in split_fields(pieces, &ifs) {
                    let pat = f.pattern();
                    if !self.opts.noglob
                        && f.chunks.iter().any(|(s, q)| !q && glob::has_meta(s))
                        && glob::has_meta(&pat)
                    {
                        let root = &self.ctx.root;
                        let matches = glob::expand_path(root, &self.cwd, &pat);
                        if !matches.is_empty() {
                            out.extend(matches);
                            continue;
                        }
                    }
                    out.push(f.text());
                }
            }
        }
        Ok(out)
    }

    /// Expands a word to a single string (no splitting, no globbing): assignments,
    /// redirection targets, `case` words, here-strings.
    pub(crate) async fn expand_one(&mut self, raw: &str) -> Result<String, Ctl> {
        let pieces = self.word_pieces(raw).await?;
        Ok(pieces_text(&pieces))
    }

    /// Expands a word used as a pattern: quoted characters are escaped.
    pub(crate) async fn expand_pattern(&mut self, raw: &str) -> Result<String, Ctl> {
        let pieces = self.word_pieces(raw).await?;
        Ok(pieces
            .iter()
            .map(|p| match p {
                Piece::Seg {
                    s, quoted: true, ..
                } => glob::escape(s),
                Piece::Seg { s, .. } => s.clone(),
                Piece::Break => " ".to_owned(),
            })
            .collect())
    }

    /// Expands the right side of `=~`: quoted characters match literally.
    pub(crate) async fn expand_regex(&mut self, raw: &str) -> Result<String, Ctl> {
        let pieces = self.word_pieces(raw).await?;
        Ok(pieces
            .iter()
            .map(|p| match p {
                Piece::Seg {
                    s, quoted: true, ..
                } => regex::escape(s),
                Piece::Seg { s, .. } => s.clone(),
                Piece::Break => " ".to_owned(),
            })
            .collect())
    }

    /// Expands a here-document body (or an arithmetic text): parameters, substitutions,
    /// arithmetic; quotes are literal.
    pub(crate) fn expand_heredoc<'a>(
        &'a mut self,
        body: &'a str,
    ) -> BoxFut<'a, Result<String, Ctl>> {
        Box::pin(async move {
            if !body.contains('$') && !body.contains('`') && !body.contains('\\') {
                return Ok(body.to_owned());
            }
            let opts = parse::options();
            let parsed = guarded(|| word::parse_heredoc(body, &opts));
            let pieces = match parsed {
                Some(Ok(p)) => p,
                _ => return Ok(body.to_owned()),
            };
            let out = self.expand_pieces(&pieces, true).await?;
            Ok(pieces_text(&out))
        })
    }

    /// Parses and expands a raw word into pieces (before splitting).
    pub(crate) fn word_pieces<'a>(
        &'a mut self,
        raw: &'a str,
    ) -> BoxFut<'a, Result<Vec<Piece>, Ctl>> {
        Box::pin(async move {
            // Fast path: plain text.
            if raw
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./,:=+@%^".contains(c))
            {
                return Ok(vec![seg(raw.to_owned(), false, false)]);
            }
            let opts = parse::options();
            let parsed = guarded(|| word::parse(raw, &opts));
            let pieces = match parsed {
                Some(Ok(p)) => p,
                _ => {
                    self.err(&format!("{raw}: bad substitution")).await;
                    return Err(Ctl::Fail(1));
                }
            };
            self.expand_pieces(&pieces, false).await
        })
    }

    fn expand_pieces<'a>(
        &'a mut self,
        pieces: &'a [WordPieceWithSource],
        in_dq: bool,
    ) -> BoxFut<'a, Result<Vec<Piece>, Ctl>> {
        Box::pin(async move {
            let mut out = Vec::new();
            for p in pieces {
                match &p.piece {
                    WordPiece::Text(s) => out.push(seg(s.clone(), in_dq, false)),
                    WordPiece::SingleQuotedText(s) => out.push(seg(s.clone(), true, false)),
                    WordPiece::AnsiCQuotedText(s) => out.push(seg(ansi_c(s), true, false)),
                    WordPiece::DoubleQuotedSequence(inner)
                    | WordPiece::GettextDoubleQuotedSequence(inner) => {
                        let has_at = inner.iter().any(|p| {
                            matches!(
                                &p.piece,
                                WordPiece::ParameterExpansion(ParameterExpr::Parameter {
                                    parameter: Parameter::Special(
                                        SpecialParameter::AllPositionalParameters {
                                            concatenate: false
                                        }
                                    ),
                                    ..
                                })
                            )
                        });
                        if !has_at {
                            out.push(seg(String::new(), true, false));
                        }
                        out.extend(self.expand_pieces(inner, true).await?);
                    }
                    WordPiece::TildeExpansion(t) => {
                        let v = match t {
                            TildeExpr::Home => self.get("HOME").unwrap_or("/").to_owned(),
                            TildeExpr::WorkingDir => self.cwd.clone(),
                            TildeExpr::OldWorkingDir => {
                                self.get("OLDPWD").unwrap_or("~-").to_owned()
                            }
                            TildeExpr::UserHome(u) if u == "root" => "/root".to_owned(),
                            TildeExpr::UserHome(u) => format!("~{u}"),
                            TildeExpr::NthDirFromTopOfDirStack { n, plus_used } => {
                                format!("~{}{n}", if *plus_used { "+" } else { "" })
                            }
                            TildeExpr::NthDirFromBottomOfDirStack { n } => format!("~-{n}"),
                        };
                        out.push(seg(v, true, false));
                    }
                    WordPiece::ParameterExpansion(e) => {
                        out.extend(self.param_expr(e, in_dq).await?);
                    }
                    WordPiece::CommandSubstitution(c)
                    | WordPiece::BackquotedCommandSubstitution(c) => {
                        let s = self.command_subst(c).await?;
                        out.push(seg(s, in_dq, !in_dq));
                    }
                    WordPiece::EscapeSequence(s) => {
                        let c: String = s.chars().skip(1).collect();
                        if c != "\n" {
                            out.push(seg(c, true, false));
                        }
                    }
                    WordPiece::ArithmeticExpression(e) => {
                        let v = self.arith_subst(&e.value).await?;
                        out.push(seg(v.to_string(), in_dq, !in_dq));
                    }
                }
            }
            Ok(out)
        })
    }

    /// Evaluates an arithmetic text (expanding `$x`, `$(...)` in it first).
    pub(crate) async fn arith_subst(&mut self, text: &str) -> Result<i64, Ctl> {
        let expanded = self.expand_heredoc(text).await?;
        match arith::eval_str(self, &expanded) {
            Ok(v) => Ok(v),
            Err(msg) => {
                self.err(&msg).await;
                Err(Ctl::Fail(1))
            }
        }
    }

    /// Runs `$(cmd)` in a subshell and returns its output without trailing newlines.
    pub(crate) async fn command_subst(&mut self, cmd: &str) -> Result<String, Ctl> {
        // `$(< file)` reads the file.
        if let Some(rest) = cmd.trim().strip_prefix('<')
            && !rest.trim().is_empty()
            && !rest.contains(['<', '>', '|', ';', '&', '\n'])
        {
            let path = self.expand_one(rest.trim()).await?;
            let abs = super::fs::resolve(&self.cwd, &path);
            return match super::fs::read_file(&self.ctx.root, &abs, CAPTURE_CAP as u64) {
                Ok(mut data) => {
                    while data.last() == Some(&b'\n') {
                        data.pop();
                    }
                    self.cmdsub_status = Some(0);
                    Ok(String::from_utf8_lossy(&data).into_owned())
                }
                Err(e) => {
                    self.err(&format!("{path}: {}", super::fs::err_msg(&e)))
                        .await;
                    self.cmdsub_status = Some(1);
                    self.status = 1;
                    Ok(String::new())
                }
            };
        }
        let buf = Arc::new(Mutex::new(Vec::new()));
        let mut sub = self.subshell();
        sub.fds.set(
            1,
            Some(Fd::Out(SharedWriter::new(Box::new(CaptureSink {
                buf: buf.clone(),
                cap: CAPTURE_CAP,
            })))),
        );
        let st = sub.run_nested(cmd).await;
        drop(sub);
        let st = match st {
            Ok(s) => s,
            Err(Ctl::Exit(2)) if self.ctx.aborted() => return Err(Ctl::Exit(2)),
            Err(Ctl::Exit(s) | Ctl::Return(s) | Ctl::Fail(s)) => s,
            Err(Ctl::Break(_) | Ctl::Continue(_)) => 0,
        };
        self.cmdsub_status = Some(st);
        self.status = st;
        let mut out = CaptureSink::take(&buf);
        while out.last() == Some(&b'\n') {
            out.pop();
        }
        out.retain(|b| *b != 0);
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    fn param_value(&self, p: &Parameter) -> Val {
        match p {
            Parameter::Positional(0) => Val::Str(self.arg0.clone()),
            Parameter::Positional(n) => match self.params.get(*n as usize - 1) {
                Some(v) => Val::Str(v.clone()),
                None => Val::Unset,
            },
            Parameter::Special(s) => match s {
                SpecialParameter::AllPositionalParameters { concatenate } => {
                    Val::List(self.params.clone(), *concatenate)
                }
                SpecialParameter::PositionalParameterCount => {
                    Val::Str(self.params.len().to_string())
                }
                SpecialParameter::LastExitStatus => Val::Str(self.status.to_string()),
                SpecialParameter::CurrentOptionFlags => {
                    let mut f = String::new();
                    if self.opts.errexit {
                        f.push('e');
                    }
                    if self.opts.noglob {
                        f.push('f');
                    }
                    if self.opts.nounset {
                        f.push('u');
                    }
                    if self.opts.xtrace {
                        f.push('x');
                    }
                    f.push_str("hBc");
                    Val::Str(f)
                }
                SpecialParameter::ProcessId => Val::Str("1".to_owned()),
                SpecialParameter::LastBackgroundProcessId => match self.last_bg {
                    Some(p) => Val::Str(p.to_string()),
                    None => Val::Unset,
                },
                SpecialParameter::ShellName => Val::Str(self.arg0.clone()),
            },
            Parameter::Named(n) => self.named_value(n),
            Parameter::NamedWithIndex { name, index } => {
                if matches!(index.trim(), "0" | "") {
                    self.named_value(name)
                } else {
                    Val::Unset
                }
            }
            Parameter::NamedWithAllIndices { name, concatenate } => match self.named_value(name) {
                Val::Str(s) => Val::List(vec![s], *concatenate),
                _ => Val::List(Vec::new(), *concatenate),
            },
        }
    }

    fn named_value(&self, n: &str) -> Val {
        match self.get(n) {
            Some(v) => Val::Str(v.to_owned()),
            None => match n {
                "RANDOM" => {
                    let t = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.subsec_nanos())
                        .unwrap_or(0);
                    Val::Str((t % 32768).to_string())
                }
                "LINENO" => Val::Str("0".into()),
                "PPID" => Val::Str("0".into()),
                "UID" | "EUID" => Val::Str("0".into()),
                "SHLVL" => Val::Str("1".into()),
                _ => Val::Unset,
            },
        }
    }

    fn param_name(p: &Parameter) -> String {
        match p {
            Parameter::Positional(n) => n.to_string(),
            Parameter::Special(s) => s.to_string(),
            Parameter::Named(n) => n.clone(),
            Parameter::NamedWithIndex { name, .. }
            | Parameter::NamedWithAllIndices { name, .. } => name.clone(),
        }
    }

    fn lookup(&self, p: &Parameter, indirect: bool) -> Val {
        let v = self.param_value(p);
        if !indirect {
            return v;
        }
        match v {
            Val::Str(name) => {
                let opts = parse::options();
                match guarded(|| word::parse_parameter(&name, &opts)) {
                    Some(Ok(p2)) => self.param_value(&p2),
                    _ => Val::Unset,
                }
            }
            _ => Val::Unset,
        }
    }

    async fn unbound(&mut self, p: &Parameter) -> Ctl {
        let n = Self::param_name(p);
        self.err(&format!("{n}: unbound variable")).await;
        Ctl::Exit(1)
    }

    /// Pieces for a value in the current quoting context.
    fn val_pieces(&self, v: Val, in_dq: bool) -> Vec<Piece> {
        match v {
            Val::Unset => vec![],
            Val::Str(s) => vec![seg(s, in_dq, !in_dq)],
            Val::List(items, concat) => {
                if in_dq && concat {
                    let sep: String = self
                        .ifs()
                        .chars()
                        .next()
                        .map(String::from)
                        .unwrap_or_default();
                    vec![seg(items.join(&sep), true, false)]
                } else {
                    let mut out = Vec::new();
                    for (i, it) in items.into_iter().enumerate() {
                        if i > 0 {
                            out.push(Piece::Break);
                        }
                        out.push(seg(it, in_dq, !in_dq));
                    }
                    out
                }
            }
        }
    }

    async fn sub_word(&mut self, w: &Option<String>, in_dq: bool) -> Result<Vec<Piece>, Ctl> {
        let Some(w) = w else {
            return Ok(vec![]);
        };
        let p = self.word_pieces(w).await?;
        Ok(if in_dq { to_quoted(p) } else { p })
    }

    fn map_val(v: Val, f: impl Fn(&str) -> String) -> Val {
        match v {
            Val::Unset => Val::Unset,
            Val::Str(s) => Val::Str(f(&s)),
            Val::List(items, c) => Val::List(items.iter().map(|s| f(s)).collect(), c),
        }
    }

    fn param_expr<'a>(
        &'a mut self,
        e: &'a ParameterExpr,
        in_dq: bool,
    ) -> BoxFut<'a, Result<Vec<Piece>, Ctl>> {
        Box::pin(async move {
            match e {
                ParameterExpr::Parameter {
                    parameter,
                    indirect,
                } => {
                    let v = self.lookup(parameter, *indirect);
                    if matches!(v, Val::Unset) && self.opts.nounset {
                        return Err(self.unbound(parameter).await);
                    }
                    Ok(self.val_pieces(v, in_dq))
                }
                ParameterExpr::UseDefaultValues {
                    parameter,
                    indirect,
                    test_type,
                    default_value,
                } => {
                    let v = self.lookup(parameter, *indirect);
                    if is_missing(&v, test_type) {
                        self.sub_word(default_value, in_dq).await
                    } else {
                        Ok(self.val_pieces(v, in_dq))
                    }
                }
                ParameterExpr::AssignDefaultValues {
                    parameter,
                    indirect,
                    test_type,
                    default_value,
                } => {
                    let v = self.lookup(parameter, *indirect);
                    if is_missing(&v, test_type) {
                        let val = match default_value {
                            Some(w) => self.expand_one(w).await?,
                            None => String::new(),
                        };
                        match parameter {
                            Parameter::Named(n) | Parameter::NamedWithIndex { name: n, .. } => {
                                if let Err(m) = self.set_var(n, &val) {
                                    self.err(&m).await;
                                    return Err(Ctl::Fail(1));
                                }
                            }
                            _ => {
                                self.err(&format!(
                                    "${}: cannot assign in this way",
                                    Self::param_name(parameter)
                                ))
                                .await;
                                return Err(Ctl::Fail(1));
                            }
                        }
                        Ok(vec![seg(val, in_dq, !in_dq)])
                    } else {
                        Ok(self.val_pieces(v, in_dq))
                    }
                }
                ParameterExpr::IndicateErrorIfNullOrUnset {
                    parameter,
                    indirect,
                    test_type,
                    error_message,
                } => {
                    let v = self.lookup(parameter, *indirect);
                    if is_missing(&v, test_type) {
                        let msg = match error_message {
                            Some(m) => self.expand_one(m).await?,
                            None => "parameter null or not set".to_owned(),
                        };
                        let n = Self::param_name(parameter);
                        self.err(&format!("{n}: {msg}")).await;
                        Err(Ctl::Exit(1))
                    } else {
                        Ok(self.val_pieces(v, in_dq))
                    }
                }
                ParameterExpr::UseAlternativeValue {
                    parameter,
                    indirect,
                    test_type,
                    alternative_value,
                } => {
                    let v = self.lookup(parameter, *indirect);
                    if is_missing(&v, test_type) {
                        Ok(vec![])
                    } else {
                        self.sub_word(alternative_value, in_dq).await
                    }
                }
                ParameterExpr::ParameterLength {
                    parameter,
                    indirect,
                } => {
                    let v = self.lookup(parameter, *indirect);
                    let n = match v {
                        Val::Unset => {
                            if self.opts.nounset {
                                return Err(self.unbound(parameter).await);
                            }
                            0
                        }
                        Val::Str(s) => s.chars().count(),
                        Val::List(items, _) => items.len(),
                    };
                    Ok(vec![seg(n.to_string(), in_dq, false)])
                }
                ParameterExpr::RemoveSmallestSuffixPattern {
                    parameter,
                    indirect,
                    pattern,
                }
                | ParameterExpr::RemoveLargestSuffixPattern {
                    parameter,
                    indirect,
                    pattern,
                }
                | ParameterExpr::RemoveSmallestPrefixPattern {
                    parameter,
                    indirect,
                    pattern,
                }
                | ParameterExpr::RemoveLargestPrefixPattern {
                    parameter,
                    indirect,
                    pattern,
                } => {
                    let (suffix, longest) = match e {
                        ParameterExpr::RemoveSmallestSuffixPattern { .. } => (true, false),
                        ParameterExpr::RemoveLargestSuffixPattern { .. } => (true, true),
                        ParameterExpr::RemoveSmallestPrefixPattern { .. } => (false, false),
                        _ => (false, true),
                    };
                    let v = self.lookup(parameter, *indirect);
                    if matches!(v, Val::Unset) && self.opts.nounset {
                        return Err(self.unbound(parameter).await);
                    }
                    let pat = match pattern {
                        Some(p) => self.expand_pattern(p).await?,
                        None => String::new(),
                    };
                    let pat = Pattern::new(&pat);
                    let v = Self::map_val(v, |s| {
                        if suffix {
                            match pat.strip_suffix(s, longest) {
                                Some(n) => s.chars().take(s.chars().count() - n).collect(),
                                None => s.to_owned(),
                            }
                        } else {
                            match pat.strip_prefix(s, longest) {
                                Some(n) => s.chars().skip(n).collect(),
                                None => s.to_owned(),
                            }
                        }
                    });
                    Ok(self.val_pieces(v, in_dq))
                }
                ParameterExpr::Substring {
                    parameter,
                    indirect,
                    offset,
                    length,
                } => {
                    let v = self.lookup(parameter, *indirect);
                    let off = self.arith_subst(&offset.value).await?;
                    let len = match length {
                        Some(l) => Some(self.arith_subst(&l.value).await?),
                        None => None,
                    };
                    let v = match v {
                        Val::Unset => Val::Unset,
                        Val::Str(s) => {
                            let chars: Vec<char> = s.chars().collect();
                            Val::Str(slice(&chars, off, len).iter().collect())
                        }
                        Val::List(items, c) => {
                            // Offsets count $0 first.
                            let mut all = vec![self.arg0.clone()];
                            all.extend(items);
                            let sl = if off == 0 {
                                slice(&all, 0, len)
                            } else {
                                slice(&all, off, len)
                            };
                            Val::List(sl.to_vec(), c)
                        }
                    };
                    Ok(self.val_pieces(v, in_dq))
                }
                ParameterExpr::Transform {
                    parameter,
                    indirect,
                    op,
                } => {
                    let v = self.lookup(parameter, *indirect);
                    let v = Self::map_val(v, |s| match op {
                        ParameterTransformOp::ToUpperCase => s.to_uppercase(),
                        ParameterTransformOp::ToLowerCase => s.to_lowercase(),
                        ParameterTransformOp::CapitalizeInitial => case_map(s, true, true),
                        ParameterTransformOp::Quoted => super::state::quote(s),
                        ParameterTransformOp::ExpandEscapeSequences => ansi_c(s),
                        _ => s.to_owned(),
                    });
                    Ok(self.val_pieces(v, in_dq))
                }
                ParameterExpr::UppercaseFirstChar {
                    parameter,
                    indirect,
                    ..
                }
                | ParameterExpr::UppercasePattern {
                    parameter,
                    indirect,
                    ..
                }
                | ParameterExpr::LowercaseFirstChar {
                    parameter,
                    indirect,
                    ..
                }
                | ParameterExpr::LowercasePattern {
                    parameter,
                    indirect,
                    ..
                } => {
                    let (upper, first_only) = match e {
                        ParameterExpr::UppercaseFirstChar { .. } => (true, true),
                        ParameterExpr::UppercasePattern { .. } => (true, false),
                        ParameterExpr::LowercaseFirstChar { .. } => (false, true),
                        _ => (false, false),
                    };
                    let v = Self::map_val(self.lookup(parameter, *indirect), |s| {
                        case_map(s, upper, first_only)
                    });
                    Ok(self.val_pieces(v, in_dq))
                }
                ParameterExpr::ReplaceSubstring {
                    parameter,
                    indirect,
                    pattern,
                    replacement,
                    match_kind,
                } => {
                    let v = self.lookup(parameter, *indirect);
                    let pat = Pattern::new(&self.expand_pattern(pattern).await?);
                    let rep = match replacement {
                        Some(r) => self.expand_one(r).await?,
                        None => String::new(),
                    };
                    let v = Self::map_val(v, |s| replace(s, &pat, &rep, match_kind));
                    Ok(self.val_pieces(v, in_dq))
                }
                ParameterExpr::VariableNames {
                    prefix,
                    concatenate,
                } => {
                    let mut names: Vec<String> = self
                        .vars
                        .keys()
                        .filter(|k| k.starts_with(prefix.as_str()))
                        .cloned()
                        .collect();
                    names.sort();
                    Ok(self.val_pieces(Val::List(names, *concatenate), in_dq))
                }
                ParameterExpr::MemberKeys {
                    variable_name,
                    concatenate,
                } => {
                    let keys = if self.get(variable_name).is_some() {
                        vec!["0".to_owned()]
                    } else {
                        vec![]
                    };
                    Ok(self.val_pieces(Val::List(keys, *concatenate), in_dq))
                }
            }
        })
    }
}

fn is_missing(v: &Val, t: &ParameterTestType) -> bool {
    match v {
        Val::Unset => true,
        Val::Str(s) => matches!(t, ParameterTestType::UnsetOrNull) && s.is_empty(),
        Val::List(items, _) => {
            items.is_empty()
                || (matches!(t, ParameterTestType::UnsetOrNull)
                    && items.iter().all(String::is_empty))
        }
    }
}

fn slice<T>(items: &[T], off: i64, len: Option<i64>) -> &[T] {
    let n = items.len() as i64;
    let start = if off < 0 {
        (n + off).max(0)
    } else {
        off.min(n)
    };
    let end = match len {
        None => n,
        Some(l) if l < 0 => (n + l).max(start),
        Some(l) => start.saturating_add(l).min(n),
    };
    items.get(start as usize..end as usize).unwrap_or(&[])
}

fn replace(s: &str, pat: &Pattern, rep: &str, kind: &SubstringMatchKind) -> String {
    let chars: Vec<char> = s.chars().collect();
    match kind {
        SubstringMatchKind::Prefix => match pat.find(&chars, 0, true, false) {
            Some((_, b)) => format!(
                "{rep}{}",
                chars.get(b..).unwrap_or(&[]).iter().collect::<String>()
            ),
            None => s.to_owned(),
        },
        SubstringMatchKind::Suffix => {
            for st in 0..=chars.len() {
                if let Some((a, _)) = pat.find(&chars, st, true, true) {
                    let head: String = chars.get(..a).unwrap_or(&[]).iter().collect();
                    return format!("{head}{rep}");
                }
            }
            s.to_owned()
        }
        SubstringMatchKind::FirstOccurrence | SubstringMatchKind::Anywhere => {
            let all = matches!(kind, SubstringMatchKind::Anywhere);
            let mut out = String::new();
            let mut i = 0;
            let mut done = false;
            while i < chars.len() {
                if !done
                    && let Some((a, b)) = pat.find(&chars, i, true, false).filter(|(a, b)| b > a)
                {
                    out.push_str(rep);
                    i = b.max(a + 1);
                    if !all {
                        done = true;
                    }
                    continue;
                }
                if let Some(c) = chars.get(i) {
                    out.push(*c);
                }
                i += 1;
            }
            out
        }
    }
}
