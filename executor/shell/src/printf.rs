//! `printf` formatting (`%s %d %i %u %x %X %o %c %f %e %g %b %q %%`, flags, width,
//! precision, `*`), reusing the format while arguments remain, and `echo -e` escapes.
//! Octal and `\x` escapes are bytes (held as `bytes.rs` characters until written).

/// Result of formatting.
pub(crate) struct Formatted {
    pub(crate) out: String,
    pub(crate) errors: Vec<String>,
}

/// Expands backslash escapes (`echo -e`, `%b`). Returns the text and whether `\c` was seen.
pub(crate) fn escapes(s: &str, in_format: bool) -> (String, bool) {
    let mut out = String::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        i += 1;
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(&n) = chars.get(i) else {
            out.push('\\');
            break;
        };
        i += 1;
        match n {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            'e' | 'E' => out.push('\x1b'),
            '\\' => out.push('\\'),
            '"' if in_format => out.push('"'),
            '\'' if in_format => out.push('\''),
            'c' if !in_format => return (out, true),
            'x' => {
                let mut v = 0u32;
                let mut k = 0;
                while k < 2 && chars.get(i).is_some_and(char::is_ascii_hexdigit) {
                    v = v * 16 + chars.get(i).and_then(|d| d.to_digit(16)).unwrap_or(0);
                    i += 1;
                    k += 1;
                }
                if k == 0 {
                    out.push_str("\\x");
                } else {
                    super::bytes::push_byte(&mut out, (v & 0xff) as u8);
                }
            }
            '0'..='7' => {
                // Format: \NNN (the first digit counts); echo/%b: \0NNN.
                let first_counts = in_format || n != '0';
                let mut v = if first_counts {
                    n.to_digit(8).unwrap_or(0)
                } else {
                    0
                };
                let mut k = usize::from(first_counts);
                while k < 3 && chars.get(i).is_some_and(|c| ('0'..='7').contains(c)) {
                    v = v * 8 + chars.get(i).and_then(|d| d.to_digit(8)).unwrap_or(0);
                    i += 1;
                    k += 1;
                }
                super::bytes::push_byte(&mut out, (v & 0xff) as u8);
            }
            o => {
                out.push('\\');
                out.push(o);
            }
        }
    }
    (out, false)
}

fn parse_num(s: &str, errors: &mut Vec<String>) -> i64 {
    let t = s.trim();
    if t.is_empty() {
        return 0;
    }
    if let Some(rest) = t.strip_prefix('\'').or_else(|| t.strip_prefix('"')) {
        return rest.chars().next().map_or(0, |c| i64::from(u32::from(c)));
    }
    if let Some(v) = super::arith::parse_int(t) {
        return v;
    }
    // Leading digits, like C's strtol, with an error.
    errors.push(format!("printf: {s}: invalid number"));
    let digits: String = t
        .chars()
        .enumerate()
        .take_while(|(i, c)| c.is_ascii_digit() || (*i == 0 && (*c == '-' || *c == '+')))
        .map(|(_, c)| c)
        .collect();
    digits.parse().unwrap_or(0)
}

fn parse_float(s: &str, errors: &mut Vec<String>) -> f64 {
    let t = s.trim();
    if t.is_empty() {
        return 0.0;
    }
    if let Some(rest) = t.strip_prefix('\'').or_else(|| t.strip_prefix('"')) {
        return rest.chars().next().map_or(0.0, |c| f64::from(u32::from(c)));
    }
    match t.parse::<f64>() {
        Ok(v) => v,
        Err(_) => match super::arith::parse_int(t) {
            Some(v) => v as f64,
            None => {
                errors.push(format!("printf: {s}: invalid number"));
                0.0
            }
        },
    }
}

#[derive(Default, Clone, Copy)]
struct Spec {
    left: bool,
    zero: bool,
    plus: bool,
    space: bool,
    alt: bool,
    width: usize,
    prec: Option<usize>,
}

fn pad(s: String, spec: &Spec, numeric: bool) -> String {
    let len = s.chars().count();
    if len >= spec.width {
        return s;
    }
    let fill = spec.width - len;
    if spec.left {
        format!("{s}{}", " ".repeat(fill))
    } else if spec.zero && numeric {
        // Zeros go after the sign / 0x prefix.
        let (sign, rest) = if s.starts_with(['-', '+', ' ']) {
            s.split_at(1)
        } else {
            ("", s.as_str())
        };
        let (pre, rest) = if rest.starts_with("0x") || rest.starts_with("0X") {
            rest.split_at(2)
        } else {
            ("", rest)
        };
        format!("{sign}{pre}{}{rest}", "0".repeat(fill))
    } else {
        format!("{}{s}", " ".repeat(fill))
    }
}

fn sign(v: String, negative: bool, spec: &Spec) -> String {
    if negative {
        format!("-{v}")
    } else if spec.plus {
        format!("+{v}")
    } else if spec.space {
        format!(" {v}")
    } else {
        v
    }
}

fn fmt_exp(v: f64, prec: usize, upper: bool) -> String {
    let s = format!("{:.*e}", prec, v.abs());
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = exp.parse().unwrap_or(0);
    let r = format!("{mant}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    if upper { r.to_uppercase() } else { r }
}

fn fmt_float(conv: char, v: f64, spec: &Spec) -> String {
    let prec = spec.prec.unwrap_or(6);
    if !v.is_finite() {
        let s = if v.is_nan() { "nan" } else { "inf" };
        let s = if conv.is_uppercase() {
            s.to_uppercase()
        } else {
            s.to_owned()
        };
        return sign(s, v.is_sign_negative() && !v.is_nan(), spec);
    }
    let body = match conv {
        'f' | 'F' => format!("{:.*}", prec, v.abs()),
        'e' | 'E' => fmt_exp(v, prec, conv == 'E'),
        _ => {
            let p = if prec == 0 { 1 } else { prec };
            let x = if v == 0.0 {
                0
            } else {
                v.abs().log10().floor() as i64
            };
            let mut s = if x < -4 || x >= p as i64 {
                fmt_exp(v, p - 1, conv == 'G')
            } else {
                format!("{:.*}", (p as i64 - 1 - x).max(0) as usize, v.abs())
            };
            if !spec.alt {
                if let Some(epos) = s.find(['e', 'E']) {
                    let (m, e) = s.split_at(epos);
                    let m = if m.contains('.') {
                        m.trim_end_matches('0').trim_end_matches('.')
                    } else {
                        m
                    };
                    s = format!("{m}{e}");
                } else if s.contains('.') {
                    s = s.trim_end_matches('0').trim_end_matches('.').to_owned();
                }
            }
            s
        }
    };
    sign(body, v.is_sign_negative() && v != 0.0, spec)
}

/// Formats like printf(1).
pub(crate) fn format(fmt: &str, args: &[String]) -> Formatted {
    let mut out = String::new();
    let mut errors = Vec::new();
    let chars: Vec<char> = fmt.chars().collect();
    let mut ai = 0usize;
    loop {
        let start_ai = ai;
        let mut i = 0;
        let mut stop = false;
        while let Some(&c) = chars.get(i) {
            if c == '\\' {
                // Escape sequences of the format.
                let mut j = i + 1;
                if chars.get(j).is_some_and(|c| ('0'..='7').contains(c)) {
                    let mut k = 0;
                    while k < 3 && chars.get(j).is_some_and(|c| ('0'..='7').contains(c)) {
                        j += 1;
                        k += 1;
                    }
                } else if chars.get(j) == Some(&'x') {
                    j += 1;
                    let mut k = 0;
                    while k < 2 && chars.get(j).is_some_and(char::is_ascii_hexdigit) {
                        j += 1;
                        k += 1;
                    }
                } else {
                    j = (j + 1).min(chars.len());
                }
                let seq: String = chars.get(i..j).unwrap_or(&[]).iter().collect();
                out.push_str(&escapes(&seq, true).0);
                i = j;
                continue;
            }
            if c != '%' {
                out.push(c);
                i += 1;
                continue;
            }
            i += 1;
            if chars.get(i) == Some(&'%') {
                out.push('%');
                i += 1;
                continue;
            }
            let mut spec = Spec::default();
            while let Some(&f) = chars.get(i) {
                match f {
                    '-' => spec.left = true,
                    '0' => spec.zero = true,
                    '+' => spec.plus = true,
                    ' ' => spec.space = true,
                    '#' => spec.alt = true,
                    _ => break,
                }
                i += 1;
            }
            let next_arg = |ai: &mut usize| -> Option<String> {
                let a = args.get(*ai).cloned();
                if a.is_some() {
                    *ai += 1;
                }
                a
            };
            if chars.get(i) == Some(&'*') {
                i += 1;
                let w = parse_num(&next_arg(&mut ai).unwrap_or_default(), &mut errors);
                if w < 0 {
                    spec.left = true;
                }
                spec.width = usize::try_from(w.unsigned_abs()).unwrap_or(0).min(4096);
            } else {
                let mut w = 0usize;
                while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
                    w = w.saturating_mul(10).saturating_add(d as usize);
                    i += 1;
                }
                spec.width = w.min(4096);
            }
            if chars.get(i) == Some(&'.') {
                i += 1;
                if chars.get(i) == Some(&'*') {
                    i += 1;
                    let p = parse_num(&next_arg(&mut ai).unwrap_or_default(), &mut errors);
                    spec.prec = Some(usize::try_from(p.max(0)).unwrap_or(0).min(4096));
                } else {
                    let mut p = 0usize;
                    while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
                        p = p.saturating_mul(10).saturating_add(d as usize);
                        i += 1;
                    }
                    spec.prec = Some(p.min(4096));
                }
            }
            // Length modifiers are accepted and ignored.
            while chars
                .get(i)
                .is_some_and(|c| matches!(c, 'l' | 'h' | 'j' | 'z' | 't' | 'L' | 'q'))
            {
                i += 1;
            }
            let Some(&conv) = chars.get(i) else {
                out.push('%');
                break;
            };
            i += 1;
            match conv {
                's' => {
                    let mut s = next_arg(&mut ai).unwrap_or_default();
                    if let Some(p) = spec.prec {
                        s = s.chars().take(p).collect();
                    }
                    out.push_str(&pad(s, &spec, false));
                }
                'b' => {
                    let (mut s, c) = escapes(&next_arg(&mut ai).unwrap_or_default(), false);
                    if let Some(p) = spec.prec {
                        s = s.chars().take(p).collect();
                    }
                    out.push_str(&pad(s, &spec, false));
                    if c {
                        stop = true;
                        break;
                    }
                }
                'q' => {
                    let s = super::state::quote(&next_arg(&mut ai).unwrap_or_default());
                    out.push_str(&pad(s, &spec, false));
                }
                'c' => {
                    let s: String = next_arg(&mut ai)
                        .unwrap_or_default()
                        .chars()
                        .take(1)
                        .collect();
                    out.push_str(&pad(s, &spec, false));
                }
                'd' | 'i' => {
                    let v = parse_num(&next_arg(&mut ai).unwrap_or_default(), &mut errors);
                    let mut digits = v.unsigned_abs().to_string();
                    if let Some(p) = spec.prec {
                        while digits.len() < p {
                            digits.insert(0, '0');
                        }
                    }
                    let s = sign(digits, v < 0, &spec);
                    out.push_str(&pad(s, &spec, spec.prec.is_none()));
                }
                'u' | 'x' | 'X' | 'o' => {
                    let v = parse_num(&next_arg(&mut ai).unwrap_or_default(), &mut errors) as u64;
                    let mut s = match conv {
                        'u' => v.to_string(),
                        'x' => format!("{v:x}"),
                        'X' => format!("{v:X}"),
                        _ => format!("{v:o}"),
                    };
                    if let Some(p) = spec.prec {
                        while s.len() < p {
                            s.insert(0, '0');
                        }
                    }
                    if spec.alt && v != 0 {
                        s = match conv {
                            'x' => format!("0x{s}"),
                            'X' => format!("0X{s}"),
                            'o' => format!("0{s}"),
                            _ => s,
                        };
                    }
                    out.push_str(&pad(s, &spec, spec.prec.is_none()));
                }
                'f' | 'F' | 'e' | 'E' | 'g' | 'G' | 'a' | 'A' => {
                    let v = parse_float(&next_arg(&mut ai).unwrap_or_default(), &mut errors);
                    let s = fmt_float(conv, v, &spec);
                    out.push_str(&pad(s, &spec, true));
                }
                other => {
                    errors.push(format!("printf: %{other}: invalid directive"));
                    out.push('%');
                    out.push(other);
                }
            }
        }
        if stop || ai >= args.len() || ai == start_ai {
            break;
        }
        if out.len() > 64 * 1024 * 1024 {
            break;
        }
    }
    Formatted { out, errors }
}
