//! Brace expansion of a raw word (`{a,b}`, `{1..10..2}`, `{a..e}`), capped at
//! `MAX_BRACE_WORDS` words.

use super::*;

const MAX_BRACE_WORDS: usize = 10_000;

/// Brace expansion of a raw word (returns the word itself if it has none).
pub(super) fn brace_expand(raw: &str) -> Vec<String> {
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
