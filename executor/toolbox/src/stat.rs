//! `stat`: display file status.
//!
//! Supports `-L`, `-c/--format FMT` and `--printf FMT` with the directives
//! `%n %N %s %b %B %o %F %a %A %h %u %g %U %G %i %d %x %y %z %w %X %Y %Z %W %%`,
//! plus a default multi-line report. WASI exposes neither owners, inodes nor
//! POSIX modes: owners print as 0/`root`, inode/device as 0, and modes are
//! synthesised (`644` for files, `755` for directories) except on Unix
//! hosts. Times are shown in UTC.

use std::ffi::OsString;
use std::fs::{self, Metadata};
use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

fn mode_bits(meta: &Metadata) -> u32 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o7777
    }
    #[cfg(not(unix))]
    {
        // WASI has no POSIX modes (and its read-only flag is unreliable).
        if meta.is_dir() { 0o755 } else { 0o644 }
    }
}

fn type_name(meta: &Metadata) -> &'static str {
    let ft = meta.file_type();
    if ft.is_symlink() {
        "symbolic link"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_file() {
        if meta.len() == 0 {
            "regular empty file"
        } else {
            "regular file"
        }
    } else {
        "unknown"
    }
}

/// `ls -l` style permission string, e.g. `-rw-r--r--`.
pub fn symbolic_mode(kind: char, mode: u32) -> String {
    let mut s = String::from(kind);
    for shift in [6u32, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

fn kind_char(meta: &Metadata) -> char {
    let ft = meta.file_type();
    if ft.is_symlink() {
        'l'
    } else if ft.is_dir() {
        'd'
    } else {
        '-'
    }
}

/// Convert days since 1970-01-01 to a (year, month, day) civil date.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Format a time as `YYYY-MM-DD HH:MM:SS.NNNNNNNNN +0000`.
pub fn format_time(t: Option<SystemTime>) -> String {
    let Some(t) = t else {
        return "-".into();
    };
    let (secs, nanos) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => (-(e.duration().as_secs() as i64), 0),
    };
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02}.{nanos:09} +0000",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

fn epoch(t: Option<SystemTime>) -> String {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or_else(|| "0".into(), |d| d.as_secs().to_string())
}

fn expand(fmt: &str, name: &str, meta: &Metadata, escapes: bool) -> String {
    let mtime = meta.modified().ok();
    let atime = meta.accessed().ok().or(mtime);
    let btime = meta.created().ok();
    let mode = mode_bits(meta);
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c == '\\' && escapes {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('\\') => out.push('\\'),
                Some(o) => {
                    out.push('\\');
                    out.push(o);
                }
                None => out.push('\\'),
            }
            continue;
        }
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push_str(name),
            Some('N') => {
                out.push('\'');
                out.push_str(name);
                out.push('\'');
                if meta.file_type().is_symlink()
                    && let Ok(target) = fs::read_link(name)
                {
                    out.push_str(&format!(" -> '{}'", target.to_string_lossy()));
                }
            }
            Some('s') => out.push_str(&meta.len().to_string()),
            Some('b') => out.push_str(&meta.len().div_ceil(512).to_string()),
            Some('B') => out.push_str("512"),
            Some('o') => out.push_str("4096"),
            Some('F') => out.push_str(type_name(meta)),
            Some('a') => out.push_str(&format!("{mode:o}")),
            Some('A') => out.push_str(&symbolic_mode(kind_char(meta), mode)),
            Some('h') => out.push('1'),
            Some('u' | 'g' | 'i' | 'd') => out.push('0'),
            Some('U' | 'G') => out.push_str("root"),
            Some('x') => out.push_str(&format_time(atime)),
            Some('y' | 'z') => out.push_str(&format_time(mtime)),
            Some('w') => out.push_str(&format_time(btime)),
            Some('X') => out.push_str(&epoch(atime)),
            Some('Y' | 'Z') => out.push_str(&epoch(mtime)),
            Some('W') => out.push_str(&epoch(btime)),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('?');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

const DEFAULT_FORMAT: &str = "  File: %N\n  Size: %s\tBlocks: %b\tIO Block: %o\t%F\n\
Access: (0%a/%A)  Uid: (%u/%U)   Gid: (%g/%G)\n\
Access: %x\nModify: %y\nChange: %z\n Birth: %w\n";

/// Run stat, writing to `out`.
pub fn run<W: Write>(args: &[String], mut out: W) -> i32 {
    let mut follow = false;
    let mut format: Option<(String, bool)> = None;
    let mut files = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        match a.as_str() {
            "-L" | "--dereference" => follow = true,
            "-c" | "--format" | "--printf" => {
                let Some(v) = args.get(i) else {
                    eprintln!("stat: option requires an argument -- '{a}'");
                    return 1;
                };
                i += 1;
                format = Some(if a == "--printf" {
                    (v.clone(), true)
                } else {
                    (format!("{v}\n"), false)
                });
            }
            _ if a.starts_with("--format=") => format = Some((format!("{}\n", &a[9..]), false)),
            _ if a.starts_with("--printf=") => format = Some((a[9..].to_string(), true)),
            _ if a.starts_with("-c") && a.len() > 2 => {
                format = Some((format!("{}\n", &a[2..]), false))
            }
            _ if a.starts_with('-') && a.len() > 1 => {
                eprintln!("stat: invalid option -- '{a}'");
                return 1;
            }
            _ => files.push(a.clone()),
        }
    }
    if files.is_empty() {
        eprintln!("stat: missing operand");
        return 1;
    }
    let (fmt, escapes) = format.unwrap_or((DEFAULT_FORMAT.to_string(), true));
    let mut status = 0;
    for f in &files {
        let meta = if follow {
            fs::metadata(f)
        } else {
            fs::symlink_metadata(f)
        };
        match meta {
            Ok(m) => {
                if out
                    .write_all(expand(&fmt, f, &m, escapes).as_bytes())
                    .is_err()
                {
                    return 1;
                }
            }
            Err(e) => {
                let why = match e.kind() {
                    io::ErrorKind::NotFound => "No such file or directory".to_string(),
                    _ => e.to_string(),
                };
                eprintln!("stat: cannot statx '{f}': {why}");
                status = 1;
            }
        }
    }
    if out.flush().is_err() {
        return 1;
    }
    status
}

/// Entry point of `stat`.
pub fn main(args: Vec<OsString>) -> i32 {
    let args: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    run(&args, io::stdout().lock())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(symbolic_mode('-', 0o644), "-rw-r--r--");
        assert_eq!(symbolic_mode('d', 0o755), "drwxr-xr-x");
    }

    #[test]
    fn formats_file() {
        let d = std::env::temp_dir().join(format!("tbstat-{}", std::process::id()));
        fs::create_dir_all(&d).expect("mkdir");
        let f = d.join("x.txt");
        fs::write(&f, "hello").expect("write");
        let name = f.to_string_lossy().into_owned();
        let mut out = Vec::new();
        let args = vec!["-c".to_string(), "%n|%s|%F".to_string(), name.clone()];
        assert_eq!(run(&args, &mut out), 0);
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            format!("{name}|5|regular file\n")
        );
        let mut out = Vec::new();
        assert_eq!(run(&["nope-missing".to_string()], &mut out), 1);
        let _ = fs::remove_dir_all(&d);
    }
}
