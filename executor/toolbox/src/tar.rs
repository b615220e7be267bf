//! `tar` over the `tar` crate (and `flate2` for `-z`): create (`-c`), list (`-t`) and
//! extract (`-x`) archives, with `-f FILE` (default: stdin/stdout), `-z`, `-v`, `-C DIR`,
//! `-O` (extract to stdout) and old-style bundled flags (`tar czf a.tgz dir`, `tar xf a`).
//! The crate reads and writes the format (GNU headers, long names, PAX); walking the
//! files and making them is done here ([`pack`], [`unpack`]), because the crate's
//! filesystem side is unimplemented on wasm32.

mod pack;
mod unpack;

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};

use flate2::read::MultiGzDecoder;

#[derive(Default)]
struct Opts {
    mode: Option<char>,
    file: Option<String>,
    gzip: bool,
    verbose: bool,
    dir: Option<String>,
    to_stdout: bool,
    names: Vec<String>,
}

pub fn main(args: Vec<OsString>) -> i32 {
    let args: Vec<String> = args
        .into_iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(m) => {
            eprintln!("tar: {m}");
            eprintln!("Try 'tar -c|-t|-x [-z] [-v] [-f FILE] [-C DIR] [FILE...]'");
            return 2;
        }
    };
    if let Some(d) = &o.dir
        && o.mode != Some('x')
        && let Err(e) = std::env::set_current_dir(d)
    {
        eprintln!("tar: {d}: Cannot open: {}", crate::io_message(&e));
        return 2;
    }
    let r = match o.mode {
        Some('c') => pack::create(&o),
        Some('t') => list(&o),
        _ => reader(&o).and_then(|input| unpack::extract(&o, input)),
    };
    match r {
        Ok(()) => 0,
        Err(m) => {
            eprintln!("tar: {m}");
            2
        }
    }
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts::default();
    let mut it = args.iter().enumerate().peekable();
    let mut pending: Vec<char> = Vec::new();
    while let Some((i, a)) = it.next() {
        let flags: Vec<char> = if i == 0 && !a.starts_with('-') {
            a.chars().collect()
        } else if let Some(long) = a.strip_prefix("--") {
            match long.split_once('=') {
                Some(("file", v)) => {
                    o.file = Some(v.to_owned());
                    continue;
                }
                Some(("directory", v)) => {
                    o.dir = Some(v.to_owned());
                    continue;
                }
                _ => {}
            }
            match long {
                "create" => vec!['c'],
                "extract" | "get" => vec!['x'],
                "list" => vec!['t'],
                "gzip" | "gunzip" => vec!['z'],
                "verbose" => vec!['v'],
                "file" => vec!['f'],
                "directory" => vec!['C'],
                "to-stdout" => vec!['O'],
                _ => return Err(format!("unrecognized option '--{long}'")),
            }
        } else if a.starts_with('-') && a.len() > 1 {
            a.chars().skip(1).collect()
        } else {
            o.names.push(a.clone());
            continue;
        };
        for c in flags {
            match c {
                'c' | 'x' | 't' => {
                    if o.mode.is_some_and(|m| m != c) {
                        return Err("You may not specify more than one '-Acdtrux' option".into());
                    }
                    o.mode = Some(c);
                }
                'z' => o.gzip = true,
                'v' => o.verbose = true,
                'O' => o.to_stdout = true,
                'f' | 'C' => pending.push(c),
                'p' | 'o' | 'm' => {}
                c => return Err(format!("invalid option -- '{c}'")),
            }
        }
        for c in pending.drain(..) {
            let Some((_, v)) = it.next() else {
                return Err(format!("option requires an argument -- '{c}'"));
            };
            if c == 'f' {
                o.file = Some(v.clone());
            } else {
                o.dir = Some(v.clone());
            }
        }
    }
    if o.mode.is_none() {
        return Err("You must specify one of the '-Acdtrux' options".into());
    }
    if o.mode == Some('c') && o.names.is_empty() {
        return Err("Cowardly refusing to create an empty archive".into());
    }
    Ok(o)
}

fn msg(what: &str, e: &io::Error) -> String {
    format!("{what}: {}", crate::io_message(e))
}

fn reader(o: &Opts) -> Result<Box<dyn Read>, String> {
    let raw: Box<dyn Read> = match o.file.as_deref() {
        None | Some("-") => Box::new(io::stdin().lock()),
        Some(f) => Box::new(File::open(f).map_err(|e| msg(f, &e))?),
    };
    let gz = o.gzip
        || o.file
            .as_deref()
            .is_some_and(|f| f.ends_with(".gz") || f.ends_with(".tgz"));
    Ok(if gz {
        Box::new(MultiGzDecoder::new(raw))
    } else {
        raw
    })
}

fn list(o: &Opts) -> Result<(), String> {
    let mut a = tar::Archive::new(reader(o)?);
    let mut out = io::stdout().lock();
    for e in a.entries().map_err(|e| msg("read", &e))? {
        let e = e.map_err(|e| msg("read", &e))?;
        let mut path = e
            .path()
            .map_err(|e| msg("read", &e))?
            .to_string_lossy()
            .into_owned();
        if e.header().entry_type().is_dir() && !path.ends_with('/') {
            path.push('/');
        }
        let line = if o.verbose {
            let h = e.header();
            let kind = if h.entry_type().is_dir() {
                'd'
            } else if h.entry_type().is_symlink() {
                'l'
            } else {
                '-'
            };
            let mode = h.mode().unwrap_or(0o644);
            format!(
                "{kind}{} root/root {:>8} {path}",
                perms(mode),
                h.size().unwrap_or(0)
            )
        } else {
            path
        };
        if writeln!(out, "{line}").is_err() {
            return Ok(());
        }
    }
    Ok(())
}

fn perms(mode: u32) -> String {
    let mut s = String::new();
    for shift in [6, 3, 0] {
        let b = (mode >> shift) & 7;
        s.push(if b & 4 != 0 { 'r' } else { '-' });
        s.push(if b & 2 != 0 { 'w' } else { '-' });
        s.push(if b & 1 != 0 { 'x' } else { '-' });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_round_trips_files_dirs_and_links() {
        let root = std::env::temp_dir().join(format!("msc-tar-{}", std::process::id()));
        let src = root.join("src");
        std::fs::create_dir_all(src.join("a/b")).unwrap();
        std::fs::write(src.join("a/x"), "hello\n").unwrap();
        std::fs::write(src.join("a/b/y"), "deep\n").unwrap();
        std::os::unix::fs::symlink("x", src.join("a/l")).unwrap();
        let archive = root.join("a.tgz").display().to_string();
        let from = src.join("a").display().to_string();
        let o = Opts {
            mode: Some('c'),
            file: Some(archive.clone()),
            gzip: true,
            names: vec![from],
            ..Opts::default()
        };
        pack::create(&o).unwrap();
        let out = root.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let o = Opts {
            mode: Some('x'),
            file: Some(archive),
            dir: Some(out.display().to_string()),
            ..Opts::default()
        };
        unpack::extract(&o, reader(&o).unwrap()).unwrap();
        let a = out.join(pack::member_name(&src.join("a").display().to_string()));
        assert_eq!(std::fs::read_to_string(a.join("x")).unwrap(), "hello\n");
        assert_eq!(std::fs::read_to_string(a.join("b/y")).unwrap(), "deep\n");
        assert_eq!(std::fs::read_link(a.join("l")).unwrap().to_str(), Some("x"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
