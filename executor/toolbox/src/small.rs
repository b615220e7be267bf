//! Small utilities of our own where no crate fits: `rev` (util-linux's: each line's
//! characters reversed) and `file` (the type of a file from its first bytes: a few magic
//! numbers, text or data).

use std::ffi::OsString;
use std::io::{self, BufRead, Read, Write};

/// `rev [FILE...]`.
pub fn main_rev(args: Vec<OsString>) -> i32 {
    let files: Vec<String> = args
        .into_iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let files = if files.is_empty() {
        vec!["-".to_owned()]
    } else {
        files
    };
    let mut out = io::stdout().lock();
    let mut status = 0;
    for f in &files {
        let input: Box<dyn BufRead> = if f == "-" {
            Box::new(io::stdin().lock())
        } else {
            match std::fs::File::open(f) {
                Ok(h) => Box::new(io::BufReader::new(h)),
                Err(e) => {
                    eprintln!("rev: cannot open {f}: {}", crate::io_message(&e));
                    status = 1;
                    continue;
                }
            }
        };
        let mut input = input;
        let mut line = Vec::new();
        loop {
            line.clear();
            match input.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => {
                    status = 1;
                    break;
                }
            }
            let newline = line.last() == Some(&b'\n');
            if newline {
                line.pop();
            }
            let mut out_line = reverse_chars(&line);
            if newline {
                out_line.push(b'\n');
            }
            if out.write_all(&out_line).is_err() {
                return 1;
            }
        }
    }
    status
}

/// `line`'s characters in reverse order; a byte that is not part of a valid UTF-8
/// character is one unit of its own and kept as it is.
fn reverse_chars(line: &[u8]) -> Vec<u8> {
    let mut units: Vec<&[u8]> = Vec::with_capacity(line.len());
    for chunk in line.utf8_chunks() {
        let valid = chunk.valid();
        let mut rest = valid.as_bytes();
        for c in valid.chars() {
            let (unit, tail) = rest.split_at(c.len_utf8());
            units.push(unit);
            rest = tail;
        }
        let invalid = chunk.invalid();
        for i in 0..invalid.len() {
            units.push(&invalid[i..=i]);
        }
    }
    units.into_iter().rev().flatten().copied().collect()
}

/// Known magic numbers: (prefix, description).
const MAGIC: &[(&[u8], &str)] = &[
    (b"\x1f\x8b", "gzip compressed data"),
    (b"PK\x03\x04", "Zip archive data"),
    (b"\x7fELF", "ELF executable"),
    (b"\0asm", "WebAssembly (wasm) binary module"),
    (b"\x89PNG\r\n\x1a\n", "PNG image data"),
    (b"\xff\xd8\xff", "JPEG image data"),
    (b"GIF8", "GIF image data"),
    (b"%PDF-", "PDF document"),
    (b"BZh", "bzip2 compressed data"),
    (b"\xfd7zXZ\0", "XZ compressed data"),
    (b"\x28\xb5\x2f\xfd", "Zstandard compressed data"),
    (b"SQLite format 3\0", "SQLite 3.x database"),
];

fn describe(data: &[u8], is_dir: bool) -> String {
    if is_dir {
        return "directory".into();
    }
    if data.is_empty() {
        return "empty".into();
    }
    if data.len() > 262 && data.get(257..262) == Some(&b"ustar"[..]) {
        return "POSIX tar archive".into();
    }
    if let Some((_, d)) = MAGIC.iter().find(|(m, _)| data.starts_with(m)) {
        return (*d).into();
    }
    if let Some(line) = data.strip_prefix(b"#!") {
        let interp = String::from_utf8_lossy(line.split(|b| *b == b'\n').next().unwrap_or(b""));
        let name = interp
            .split_whitespace()
            .map(|w| w.rsplit('/').next().unwrap_or(w))
            .find(|w| *w != "env")
            .unwrap_or("sh")
            .to_owned();
        return format!("{name} script, ASCII text executable");
    }
    match std::str::from_utf8(data) {
        Ok(s) if s.is_ascii() => "ASCII text".into(),
        Ok(_) => "Unicode text, UTF-8 text".into(),
        // A character cut at the end of the sample is still text.
        Err(e) if e.error_len().is_none() => "Unicode text, UTF-8 text".into(),
        Err(_) => "data".into(),
    }
}

/// `file [-b] FILE...`.
pub fn main_file(args: Vec<OsString>) -> i32 {
    let mut brief = false;
    let mut files = Vec::new();
    for a in args.into_iter().skip(1) {
        let s = a.to_string_lossy().into_owned();
        match s.as_str() {
            "-b" | "--brief" => brief = true,
            _ => files.push(s),
        }
    }
    if files.is_empty() {
        eprintln!("Usage: file [-b] FILE...");
        return 1;
    }
    let mut out = io::stdout().lock();
    for f in &files {
        let d = match std::fs::metadata(f) {
            Err(e) => format!("cannot open `{f}' ({})", crate::io_message(&e)),
            Ok(m) if m.is_dir() => describe(&[], true),
            Ok(_) => {
                let mut buf = Vec::new();
                match std::fs::File::open(f).and_then(|h| h.take(4096).read_to_end(&mut buf)) {
                    Ok(_) => describe(&buf, false),
                    Err(e) => format!("cannot open `{f}' ({})", crate::io_message(&e)),
                }
            }
        };
        let line = if brief { d } else { format!("{f}: {d}") };
        if writeln!(out, "{line}").is_err() {
            return 1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::{describe, reverse_chars};

    #[test]
    fn rev_keeps_invalid_bytes_and_whole_characters() {
        assert_eq!(reverse_chars(b"abc"), b"cba");
        assert_eq!(
            reverse_chars("h\u{e9}\u{1f30d}".as_bytes()),
            "\u{1f30d}\u{e9}h".as_bytes()
        );
        assert_eq!(reverse_chars(b"a\xffb\xc3"), b"\xc3b\xffa");
        assert_eq!(reverse_chars(b""), b"");
    }

    #[test]
    fn file_types() {
        assert_eq!(describe(b"\x1f\x8b\x08", false), "gzip compressed data");
        assert_eq!(
            describe(b"#!/usr/bin/env python3\n", false),
            "python3 script, ASCII text executable"
        );
        assert_eq!(describe(b"hello\n", false), "ASCII text");
        assert_eq!(
            describe("h\u{e9}".as_bytes(), false),
            "Unicode text, UTF-8 text"
        );
        assert_eq!(describe(b"\xff\xfe\x00", false), "data");
        assert_eq!(describe(b"", false), "empty");
    }
}
