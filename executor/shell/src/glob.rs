//! Shell pattern matching (`*`, `?`, `[...]`, backslash escapes) for `case`, `[[ == ]]`,
//! `${x#pattern}` and friends, and pathname expansion against the computer's directory.
//!
//! Patterns are strings in which a backslash escapes the next character; the expansion code
//! escapes every quoted character so that quoting disables pattern characters.

use std::sync::Arc;

use super::budget::Budget;
use super::fs;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Lit(char),
    Any,
    Star,
    Class { neg: bool, items: Vec<ClassItem> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ClassItem {
    Ch(char),
    Range(char, char),
    Named(String),
}

/// A compiled pattern. With a budget, the matching loops give up (no match) once the run
/// must stop, so a quadratic match on a long value cannot outlive its deadline.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    toks: Vec<Tok>,
    budget: Option<Arc<Budget>>,
}

/// Does the pattern contain unescaped pattern characters?
pub(crate) fn has_meta(p: &str) -> bool {
    let chars: Vec<char> = p.chars().collect();
    // No bracket expression can start after the last `]`.
    let last_close = chars.iter().rposition(|c| *c == ']').unwrap_or(0);
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        match c {
            '\\' => i += 1,
            '*' | '?' => return true,
            // Only a complete bracket expression counts.
            '[' if i < last_close && parse_class(&chars, i + 1).is_some() => return true,
            _ => {}
        }
        i += 1;
    }
    false
}

/// Removes the escaping backslashes of a pattern (the literal it stands for).
pub(crate) fn unescape(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    let mut it = p.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            if let Some(n) = it.next() {
                out.push(n);
            } else {
                out.push('\\');
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Escapes pattern characters so that `s` matches literally.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Parses a bracket expression starting just after `[` at `chars[start]`.
/// Returns the token and the index just after the closing `]`.
fn parse_class(chars: &[char], start: usize) -> Option<(Tok, usize)> {
    let mut i = start;
    let mut neg = false;
    if matches!(chars.get(i), Some('!') | Some('^')) {
        neg = true;
        i += 1;
    }
    let mut items = Vec::new();
    let mut first = true;
    loop {
        let c = *chars.get(i)?;
        if c == ']' && !first {
            return Some((Tok::Class { neg, items }, i + 1));
        }
        first = false;
        if c == '[' && chars.get(i + 1) == Some(&':') {
            // [:name:]
            let rest = chars.get(i + 2..)?;
            if let Some(end) = rest.windows(2).position(|w| w == [':', ']']) {
                let name: String = rest.get(..end)?.iter().collect();
                items.push(ClassItem::Named(name));
                i += 2 + end + 2;
                continue;
            }
        }
        let lo = if c == '\\' {
            i += 1;
            *chars.get(i)?
        } else {
            c
        };
        i += 1;
        if chars.get(i) == Some(&'-') && chars.get(i + 1).is_some_and(|c| *c != ']') {
            let mut hi = *chars.get(i + 1)?;
            i += 2;
            if hi == '\\' {
                hi = *chars.get(i)?;
                i += 1;
            }
            items.push(ClassItem::Range(lo, hi));
        } else {
            items.push(ClassItem::Ch(lo));
        }
    }
}

impl Pattern {
    pub(crate) fn new(p: &str) -> Self {
        let chars: Vec<char> = p.chars().collect();
        let mut toks = Vec::new();
        let mut i = 0;
        while let Some(&c) = chars.get(i) {
            match c {
                '\\' => {
                    match chars.get(i + 1) {
                        Some(&n) => toks.push(Tok::Lit(n)),
                        None => toks.push(Tok::Lit('\\')),
                    }
                    i += 2;
                }
                '*' => {
                    if toks.last() != Some(&Tok::Star) {
                        toks.push(Tok::Star);
                    }
                    i += 1;
                }
                '?' => {
                    toks.push(Tok::Any);
                    i += 1;
                }
                '[' => match parse_class(&chars, i + 1) {
                    Some((t, next)) => {
                        toks.push(t);
                        i = next;
                    }
                    None => {
                        toks.push(Tok::Lit('['));
                        i += 1;
                    }
                },
                c => {
                    toks.push(Tok::Lit(c));
                    i += 1;
                }
            }
        }
        Self { toks, budget: None }
    }

    /// This pattern, stopping when `budget` says the run must stop.
    pub(crate) fn with_budget(mut self, budget: &Arc<Budget>) -> Self {
        self.budget = Some(budget.clone());
        self
    }

    fn halted(&self, i: usize) -> bool {
        self.budget.as_ref().is_some_and(|b| b.halted(i))
    }

    fn tok_matches(t: &Tok, c: char) -> bool {
        match t {
            Tok::Lit(l) => *l == c,
            Tok::Any => true,
            Tok::Star => true,
            Tok::Class { neg, items } => {
                let hit = items.iter().any(|it| match it {
                    ClassItem::Ch(x) => *x == c,
                    ClassItem::Range(a, b) => *a <= c && c <= *b,
                    ClassItem::Named(n) => match n.as_str() {
                        "alpha" => c.is_alphabetic(),
                        "digit" => c.is_ascii_digit(),
                        "alnum" => c.is_alphanumeric(),
                        "upper" => c.is_uppercase(),
                        "lower" => c.is_lowercase(),
                        "space" => c.is_whitespace(),
                        "blank" => c == ' ' || c == '\t',
                        "punct" => c.is_ascii_punctuation(),
                        "xdigit" => c.is_ascii_hexdigit(),
                        "cntrl" => c.is_control(),
                        "print" => !c.is_control(),
                        "graph" => !c.is_control() && !c.is_whitespace(),
                        _ => false,
                    },
                });
                hit != *neg
            }
        }
    }

    /// Does the whole of `s` match?
    pub(crate) fn matches(&self, s: &str) -> bool {
        let chars: Vec<char> = s.chars().collect();
        self.matches_chars(&chars)
    }

    fn matches_chars(&self, s: &[char]) -> bool {
        let p = &self.toks;
        let (mut pi, mut si) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        let mut steps = 0usize;
        while si < s.len() {
            steps += 1;
            if steps.is_multiple_of(1 << 16) && self.halted(0) {
                return false;
            }
            match p.get(pi) {
                Some(Tok::Star) => {
                    star = Some((pi, si));
                    pi += 1;
                }
                Some(t) if s.get(si).is_some_and(|c| Self::tok_matches(t, *c)) => {
                    pi += 1;
                    si += 1;
                }
                _ => match star {
                    Some((sp, ss)) => {
                        pi = sp + 1;
                        si = ss + 1;
                        star = Some((sp, ss + 1));
                    }
                    None => return false,
                },
            }
        }
        while p.get(pi) == Some(&Tok::Star) {
            pi += 1;
        }
        pi == p.len()
    }

    /// Byte index ranges helpers for `${x#p}` and friends: returns the char count of the
    /// prefix to remove.
    pub(crate) fn strip_prefix(&self, s: &str, longest: bool) -> Option<usize> {
        let chars: Vec<char> = s.chars().collect();
        let range: Box<dyn Iterator<Item = usize>> = if longest {
            Box::new((0..=chars.len()).rev())
        } else {
            Box::new(0..=chars.len())
        };
        for (i, n) in range.enumerate() {
            if self.halted(i + 1) {
                return None;
            }
            if self.matches_chars(chars.get(..n)?) {
                return Some(n);
            }
        }
        None
    }

    /// Char count of the suffix to remove.
    pub(crate) fn strip_suffix(&self, s: &str, longest: bool) -> Option<usize> {
        let chars: Vec<char> = s.chars().collect();
        let len = chars.len();
        let range: Box<dyn Iterator<Item = usize>> = if longest {
            Box::new((0..=len).rev())
        } else {
            Box::new(0..=len)
        };
        for (i, n) in range.enumerate() {
            if self.halted(i + 1) {
                return None;
            }
            if self.matches_chars(chars.get(len - n..)?) {
                return Some(n);
            }
        }
        None
    }

    /// Finds the leftmost-longest match at or after char index `from`: (start, end) in chars.
    pub(crate) fn find(
        &self,
        chars: &[char],
        from: usize,
        anchored_start: bool,
        anchored_end: bool,
    ) -> Option<(usize, usize)> {
        let mut tries = 0usize;
        let starts: Vec<usize> = if anchored_start {
            vec![from]
        } else {
            (from..=chars.len()).collect()
        };
        for st in starts {
            let ends: Vec<usize> = if anchored_end {
                vec![chars.len()]
            } else {
                (st..=chars.len()).rev().collect()
            };
            for en in ends {
                tries += 1;
                if self.halted(tries) {
                    return None;
                }
                if en < st {
                    continue;
                }
                if self.matches_chars(chars.get(st..en)?) {
                    return Some((st, en));
                }
            }
        }
        None
    }
}

/// Pathname expansion of `pattern` (escaped pattern syntax) relative to `cwd`.
/// Returns the sorted matches, or an empty vector if nothing matches.
pub(crate) fn expand_path(root: &fs::Root, cwd: &str, pattern: &str) -> Vec<String> {
    let absolute = pattern.starts_with('/');
    let trailing_slash = pattern.ends_with('/');
    let comps: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    // Each candidate: (display path, guest absolute path).
    let mut cands: Vec<(String, String)> = vec![if absolute {
        ("/".to_owned(), "/".to_owned())
    } else {
        (String::new(), fs::resolve(cwd, "."))
    }];
    let mut budget: usize = 100_000;
    for (idx, comp) in comps.iter().enumerate() {
        let last = idx + 1 == comps.len();
        let mut next = Vec::new();
        if has_meta(comp) {
            let pat = Pattern::new(comp);
            let dot_ok = comp.starts_with('.') || comp.starts_with("\\.");
            for (disp, abs) in &cands {
                let mut names = fs::list_dir(root, abs);
                names.sort();
                for name in names {
                    if budget == 0 {
                        break;
                    }
                    budget -= 1;
                    if name.starts_with('.') && !dot_ok {
                        continue;
                    }
                    if !pat.matches(&name) {
                        continue;
                    }
                    let child_abs = fs::resolve(abs, &name);
                    if (!last || trailing_slash) && !fs::is_dir(root, &child_abs) {
                        continue;
                    }
                    next.push((join_disp(disp, &name), child_abs));
                }
            }
        } else {
            let lit = unescape(comp);
            for (disp, abs) in &cands {
                let child_abs = fs::resolve(abs, &lit);
                if fs::symlink_metadata(root, &child_abs).is_ok() {
                    next.push((join_disp(disp, &lit), child_abs));
                }
            }
        }
        cands = next;
        if cands.is_empty() {
            return Vec::new();
        }
    }
    let mut out: Vec<String> = cands
        .into_iter()
        .map(|(d, _)| if trailing_slash { format!("{d}/") } else { d })
        .collect();
    out.sort();
    out
}

fn join_disp(disp: &str, name: &str) -> String {
    if disp.is_empty() {
        name.to_owned()
    } else if disp.ends_with('/') {
        format!("{disp}{name}")
    } else {
        format!("{disp}/{name}")
    }
}
