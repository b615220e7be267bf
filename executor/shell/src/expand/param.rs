//! Parameter expansion: the value of `$x`, `$1`, `$@`, `$?`... (with `set -u`), and the
//! operators of `${...}`: defaults, assignments, errors, alternatives, length, prefix and
//! suffix removal, substitution, substrings, case changes and transformations.

use super::*;
use crate::budget::Budget;

/// The value of a parameter before operators apply.
enum Val {
    Unset,
    Str(String),
    List(Vec<String>, bool),
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
    fn param_value(&self, p: &Parameter) -> Val {
        match p {
            Parameter::Positional(0) => Val::Str(self.arg0.clone()),
            Parameter::Positional(n) => match self.params.get(*n as usize - 1) {
                Some(v) => Val::Str(v.clone()),
                None => Val::Unset,
            },
            Parameter::Special(s) => match s {
                SpecialParameter::AllPositionalParameters { concatenate } => {
                    Val::List(self.params.to_vec(), *concatenate)
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
            // A copy that would not fit stops the run (the next check unwinds it).
            Some(v) if self.ctx.budget.fits(v.len()).is_err() => Val::Str(String::new()),
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
        if let Err(e) = self.ctx.budget.check() {
            return e;
        }
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

    /// Fails (and stops the run) unless the `Vec<char>` copy of a value fits the budget.
    fn fits_chars(&self, v: &Val) -> Result<(), Ctl> {
        let n = match v {
            Val::Unset => 0,
            Val::Str(s) => s.len(),
            Val::List(items, _) => items.iter().map(String::len).max().unwrap_or(0),
        };
        self.ctx
            .budget
            .fits(n.saturating_mul(std::mem::size_of::<char>()))
    }

    fn map_val(v: Val, f: impl Fn(&str) -> String) -> Val {
        match v {
            Val::Unset => Val::Unset,
            Val::Str(s) => Val::Str(f(&s)),
            Val::List(items, c) => Val::List(items.iter().map(|s| f(s)).collect(), c),
        }
    }

    pub(super) fn param_expr<'a>(
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
                    let pat = Pattern::new(&pat).with_budget(&self.ctx.budget);
                    self.fits_chars(&v)?;
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
                    self.fits_chars(&v)?;
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
                        ParameterTransformOp::Quoted => crate::state::quote(s),
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
                    let pat = Pattern::new(&self.expand_pattern(pattern).await?)
                        .with_budget(&self.ctx.budget);
                    let rep = match replacement {
                        Some(r) => self.expand_one(r).await?,
                        None => String::new(),
                    };
                    self.fits_chars(&v)?;
                    let budget = self.ctx.budget.clone();
                    let v = Self::map_val(v, |s| replace(s, &pat, &rep, match_kind, &budget));
                    // A stopped replacement returns early: unwind.
                    self.ctx.budget.fits(0)?;
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

/// `${x/p/r}` and friends. Stops early (with a partial result) when the run's budget says
/// so: the deadline passed, or the result would not fit.
fn replace(
    s: &str,
    pat: &Pattern,
    rep: &str,
    kind: &SubstringMatchKind,
    budget: &Budget,
) -> String {
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
                if budget.halted(st) {
                    break;
                }
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
            let mut turns = 0usize;
            while i < chars.len() {
                turns += 1;
                if budget.halted(turns) {
                    break;
                }
                if !done
                    && let Some((a, b)) = pat.find(&chars, i, true, false).filter(|(a, b)| b > a)
                {
                    if budget.fits(out.len() + rep.len()).is_err() {
                        break;
                    }
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
