//! `tac [-b] [-r] [-s SEP] [FILE...]`: the records of each file in reverse order.
//!
//! Our own rather than uutils': `uu_tac` spools stdin to a temporary file and maps it
//! into memory, and WASI has neither a temporary directory (`std::env::temp_dir` panics)
//! nor `mmap`. This one reads each input into memory. A record ends with the separator
//! (`\n` by default), or starts with it with `-b`; `-r` reads the separator as a regular
//! expression. Bytes are kept exactly.

use std::ffi::OsString;
use std::io::{self, Read, Write};

struct Opts {
    before: bool,
    regex: bool,
    separator: Vec<u8>,
    files: Vec<String>,
}

fn parse(args: Vec<OsString>) -> Result<Opts, String> {
    let mut o = Opts {
        before: false,
        regex: false,
        separator: b"\n".to_vec(),
        files: Vec::new(),
    };
    let mut it = args
        .into_iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned());
    let mut only_files = false;
    while let Some(a) = it.next() {
        if only_files || a == "-" || !a.starts_with('-') {
            o.files.push(a);
            continue;
        }
        match a.as_str() {
            "--" => only_files = true,
            "-b" | "--before" => o.before = true,
            "-r" | "--regex" => o.regex = true,
            "-s" | "--separator" => {
                o.separator = it
                    .next()
                    .ok_or("option requires an argument -- 's'")?
                    .into_bytes();
            }
            _ => {
                if let Some(v) = a
                    .strip_prefix("--separator=")
                    .or_else(|| a.strip_prefix("-s"))
                {
                    o.separator = v.as_bytes().to_vec();
                } else if a.len() > 2 && a[1..].chars().all(|c| "br".contains(c)) {
                    o.before |= a.contains('b');
                    o.regex |= a.contains('r');
                } else {
                    return Err(format!("invalid option -- '{}'", a.trim_start_matches('-')));
                }
            }
        }
    }
    if o.separator.is_empty() {
        return Err("separator cannot be empty".into());
    }
    if o.files.is_empty() {
        o.files.push("-".into());
    }
    Ok(o)
}

pub fn main(args: Vec<OsString>) -> i32 {
    let o = match parse(args) {
        Ok(o) => o,
        Err(m) => {
            eprintln!("tac: {m}");
            eprintln!("Try 'tac [-b] [-r] [-s SEP] [FILE...]'");
            return 1;
        }
    };
    let pattern = if o.regex {
        let text = String::from_utf8_lossy(&o.separator).into_owned();
        match regex::bytes::RegexBuilder::new(&text)
            .multi_line(true)
            .build()
        {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("tac: invalid regular expression: {e}");
                return 1;
            }
        }
    } else {
        None
    };
    let mut out = io::stdout().lock();
    let mut status = 0;
    for f in &o.files {
        let mut data = Vec::new();
        let read = if f == "-" {
            io::stdin().lock().read_to_end(&mut data)
        } else {
            std::fs::File::open(f).and_then(|mut h| h.read_to_end(&mut data))
        };
        if let Err(e) = read {
            eprintln!(
                "tac: failed to open '{f}' for reading: {}",
                crate::io_message(&e)
            );
            status = 1;
            continue;
        }
        let seps: Vec<(usize, usize)> = match &pattern {
            Some(p) => p
                .find_iter(&data)
                .filter(|m| !m.is_empty())
                .map(|m| (m.start(), m.end()))
                .collect(),
            None => find_all(&data, &o.separator),
        };
        for r in records(data.len(), &seps, o.before).iter().rev() {
            if out
                .write_all(data.get(r.0..r.1).unwrap_or_default())
                .is_err()
            {
                return 1;
            }
        }
    }
    status
}

/// Where `sep` occurs in `data`, without overlaps: (start, end).
fn find_all(data: &[u8], sep: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = data
        .get(i..)
        .and_then(|rest| rest.windows(sep.len()).position(|w| w == sep))
    {
        out.push((i + at, i + at + sep.len()));
        i += at + sep.len();
    }
    out
}

/// The records of a text of `len` bytes with separators at `seps`: each ends with its
/// separator, or (`before`) starts with it. Empty records are left out.
fn records(len: usize, seps: &[(usize, usize)], before: bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for &(s, e) in seps {
        let end = if before { s } else { e };
        if end > start {
            out.push((start, end));
        }
        start = end;
    }
    if len > start {
        out.push((start, len));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{find_all, records};

    fn tac(data: &[u8], sep: &[u8], before: bool) -> Vec<u8> {
        let seps = find_all(data, sep);
        records(data.len(), &seps, before)
            .iter()
            .rev()
            .flat_map(|r| data[r.0..r.1].to_vec())
            .collect()
    }

    #[test]
    fn records_come_back_reversed() {
        assert_eq!(tac(b"a\nb\nc\n", b"\n", false), b"c\nb\na\n");
        assert_eq!(tac(b"a\nb", b"\n", false), b"ba\n");
        assert_eq!(tac(b"a\nb\n", b"\n", true), b"\n\nba");
        assert_eq!(tac(b"1,2,3", b",", false), b"32,1,");
        assert_eq!(tac(b"\xff\n\xfe\n", b"\n", false), b"\xfe\n\xff\n");
        assert_eq!(tac(b"", b"\n", false), b"");
    }
}
