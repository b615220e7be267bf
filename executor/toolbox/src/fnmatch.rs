//! Shell-style wildcard matching (`fnmatch(3)` without `FNM_PATHNAME`):
//! `*`, `?`, bracket expressions `[abc]`, `[a-z]`, `[!x]`/`[^x]`,
//! character classes `[[:digit:]]` and backslash escapes. `*` also matches
//! `/`, as in `find -path`.

/// Match `name` against the wildcard `pattern`; `fold` ignores ASCII case.
pub fn fnmatch(pattern: &str, name: &str, fold: bool) -> bool {
    let pat: Vec<char> = pattern.chars().collect();
    let txt: Vec<char> = name.chars().collect();
    let eq = |a: char, b: char| {
        if fold {
            a.to_lowercase().eq(b.to_lowercase())
        } else {
            a == b
        }
    };
    let (mut p, mut t) = (0usize, 0usize);
    // Position after the last `*` seen in the pattern and the text position it
    // currently absorbs up to, for backtracking.
    let mut star: Option<(usize, usize)> = None;
    while t < txt.len() {
        let step = if p < pat.len() {
            match pat[p] {
                '*' => {
                    star = Some((p + 1, t));
                    p += 1;
                    continue;
                }
                '?' => Some(p + 1),
                '[' => match match_bracket(&pat, p, txt[t], fold) {
                    Some((true, next)) => Some(next),
                    Some((false, _)) => None,
                    // Unterminated bracket: treat `[` literally.
                    None => eq('[', txt[t]).then_some(p + 1),
                },
                '\\' if p + 1 < pat.len() => eq(pat[p + 1], txt[t]).then_some(p + 2),
                c => eq(c, txt[t]).then_some(p + 1),
            }
        } else {
            None
        };
        match step {
            Some(next) => {
                p = next;
                t += 1;
            }
            None => match star {
                Some((sp, st)) => {
                    p = sp;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pat[p..].iter().all(|&c| c == '*')
}

/// Match one character against the bracket expression starting at `pat[start]`
/// (which is `[`). Returns whether it matched and the index after the closing
/// `]`, or `None` if the bracket is not terminated.
fn match_bracket(pat: &[char], start: usize, c: char, fold: bool) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = matches!(pat.get(i), Some('!' | '^'));
    if negate {
        i += 1;
    }
    let cl = if fold { to_lower(c) } else { c };
    let mut matched = false;
    let mut first = true;
    loop {
        let ch = *pat.get(i)?;
        if ch == ']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if ch == '[' && pat.get(i + 1) == Some(&':') {
            let rest: String = pat[i + 2..].iter().collect();
            if let Some(end) = rest.find(":]") {
                let class = &rest[..end];
                if class_matches(class, c) {
                    matched = true;
                }
                i += 2 + rest[..end].chars().count() + 2;
                continue;
            }
        }
        let (lo, next) = if ch == '\\' && i + 1 < pat.len() {
            (pat[i + 1], i + 2)
        } else {
            (ch, i + 1)
        };
        if pat.get(next) == Some(&'-') && pat.get(next + 1).is_some_and(|&h| h != ']') {
            let (hi, after) = match pat.get(next + 1) {
                Some('\\') if next + 2 < pat.len() => (pat[next + 2], next + 3),
                Some(&h) => (h, next + 2),
                None => return None,
            };
            let in_range = |x: char| lo <= x && x <= hi;
            if in_range(c) || (fold && (in_range(cl) || in_range(to_upper(c)))) {
                matched = true;
            }
            i = after;
        } else {
            if lo == c || (fold && to_lower(lo) == cl) {
                matched = true;
            }
            i = next;
        }
    }
}

fn to_lower(c: char) -> char {
    c.to_lowercase().next().unwrap_or(c)
}

fn to_upper(c: char) -> char {
    c.to_uppercase().next().unwrap_or(c)
}

fn class_matches(class: &str, c: char) -> bool {
    match class {
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
    }
}

#[cfg(test)]
mod tests {
    use super::fnmatch;

    #[test]
    fn stars_and_questions() {
        assert!(fnmatch("*.rs", "main.rs", false));
        assert!(!fnmatch("*.rs", "main.rsx", false));
        assert!(fnmatch("a?c", "abc", false));
        assert!(!fnmatch("a?c", "ac", false));
        assert!(fnmatch("*", "", false));
        assert!(fnmatch("a*b*c", "aXXbYYc", false));
        assert!(fnmatch("./src/*", "./src/a/b.rs", false));
    }

    #[test]
    fn brackets() {
        assert!(fnmatch("[abc]x", "bx", false));
        assert!(!fnmatch("[!abc]x", "bx", false));
        assert!(fnmatch("[a-z][0-9]", "q7", false));
        assert!(fnmatch("[[:digit:]]*", "9lives", false));
        assert!(fnmatch("[]]", "]", false));
        assert!(fnmatch("[", "[", false));
    }

    #[test]
    fn case_folding_and_escapes() {
        assert!(fnmatch("*.TXT", "notes.txt", true));
        assert!(!fnmatch("*.TXT", "notes.txt", false));
        assert!(fnmatch("a\\*", "a*", false));
        assert!(!fnmatch("a\\*", "ab", false));
    }
}
