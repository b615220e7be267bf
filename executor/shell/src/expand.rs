//! Word expansion: brace, tilde, parameter, command substitution, arithmetic, field
//! splitting on IFS, pathname expansion and quote removal.
//!
//! This module holds the pieces of an expanded word, field splitting, `$'...'`, and the
//! expansion of words, patterns, regexes and here-documents, with command and arithmetic
//! substitution; [`brace`] holds brace expansion and [`param`] parameter expansion
//! (`$x`, `${x...}` and their operators).

mod brace;
mod param;

use std::sync::{Arc, Mutex};

use brush_parser::word::{
    self, BraceExpressionMember, BraceExpressionOrText, Parameter, ParameterExpr,
    ParameterTestType, ParameterTransformOp, SpecialParameter, SubstringMatchKind, TildeExpr,
    WordPiece, WordPieceWithSource,
};

use super::arith;
use super::budget::Charge;
use super::glob::{self, Pattern};
use super::io::{CaptureSink, Fd, SharedWriter};
use super::parse::{self, guarded};
use super::state::{BoxFut, Ctl, Shell};
use brace::brace_expand;

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
                } else {
                    super::bytes::push_byte(&mut out, (v & 0xff) as u8);
                }
            }
            Some(d @ '0'..='7') => {
                let mut v = d.to_digit(8).unwrap_or(0);
                let mut n = 1;
                while n < 3 && it.peek().is_some_and(|c| ('0'..='7').contains(c)) {
                    v = v * 8 + it.next().and_then(|d| d.to_digit(8)).unwrap_or(0);
                    n += 1;
                }
                super::bytes::push_byte(&mut out, (v & 0xff) as u8);
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

/// Bytes held by pieces (what they count against the memory budget).
fn pieces_len(pieces: &[Piece]) -> usize {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Seg { s, .. } => s.len() + 8,
            Piece::Break => 8,
        })
        .sum()
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
            // The pieces built so far stay counted while later ones run `$(...)`.
            let mut held = Charge::new(&self.ctx.budget);
            for p in pieces {
                let before = out.len();
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
                held.grow(pieces_len(out.get(before..).unwrap_or(&[])))?;
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
            let room = self.ctx.budget.available() as u64 + 1;
            return match super::fs::read_file(&self.ctx.root, &abs, room) {
                Ok(mut data) => {
                    self.ctx.budget.fits(data.len())?;
                    while data.last() == Some(&b'\n') {
                        data.pop();
                    }
                    self.cmdsub_status = Some(0);
                    Ok(super::bytes::decode(&data))
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
                charge: Charge::new(&self.ctx.budget),
            })))),
        );
        let st = sub.run_nested(cmd).await;
        drop(sub);
        let st = match st {
            Ok(s) => s,
            Err(e @ Ctl::Exit(_)) if self.ctx.aborted() => return Err(e),
            Err(Ctl::Exit(s) | Ctl::Return(s) | Ctl::Fail(s)) => s,
            Err(Ctl::Break(_) | Ctl::Continue(_)) => 0,
        };
        self.ctx.budget.check()?;
        self.cmdsub_status = Some(st);
        self.status = st;
        let mut out = CaptureSink::take(&buf);
        while out.last() == Some(&b'\n') {
            out.pop();
        }
        out.retain(|b| *b != 0);
        Ok(super::bytes::decode(&out))
    }
}
