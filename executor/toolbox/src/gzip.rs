//! `gzip`, `gunzip` and `zcat` over the `flate2` crate.
//!
//! `gzip [-d] [-c] [-k] [-f] [-t] [-1..-9] [FILE...]`: without files (or with `-`) it
//! filters stdin to stdout; with files it writes `FILE.gz` (or, decompressing, the name
//! without `.gz`/`.tgz` -> `.tar`) and removes the original unless `-k` or `-c`.
//! `gunzip` is `gzip -d`, `zcat` is `gzip -dc`. Concatenated members are read whole.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};

use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;

#[derive(Clone, Copy)]
struct Opts {
    decompress: bool,
    stdout: bool,
    keep: bool,
    force: bool,
    test: bool,
    level: u32,
}

pub fn main_gzip(args: Vec<OsString>) -> i32 {
    run("gzip", args, false, false)
}

pub fn main_gunzip(args: Vec<OsString>) -> i32 {
    run("gunzip", args, true, false)
}

pub fn main_zcat(args: Vec<OsString>) -> i32 {
    run("zcat", args, true, true)
}

fn run(name: &str, args: Vec<OsString>, decompress: bool, stdout: bool) -> i32 {
    let mut o = Opts {
        decompress,
        stdout,
        keep: false,
        force: false,
        test: false,
        level: 6,
    };
    let mut files = Vec::new();
    let mut opts_done = false;
    for a in args.into_iter().skip(1) {
        let s = a.to_string_lossy().into_owned();
        if opts_done || s == "-" || !s.starts_with('-') {
            files.push(s);
            continue;
        }
        match s.as_str() {
            "--" => opts_done = true,
            "--decompress" | "--uncompress" => o.decompress = true,
            "--stdout" | "--to-stdout" => o.stdout = true,
            "--keep" => o.keep = true,
            "--force" => o.force = true,
            "--test" => o.test = true,
            "--quiet" | "--verbose" | "--no-name" | "--name" => {}
            "--fast" => o.level = 1,
            "--best" => o.level = 9,
            long if long.starts_with("--") => {
                eprintln!("{name}: unrecognized option '{long}'");
                return 1;
            }
            short => {
                for c in short.chars().skip(1) {
                    match c {
                        'd' => o.decompress = true,
                        'c' => o.stdout = true,
                        'k' => o.keep = true,
                        'f' => o.force = true,
                        't' => o.test = true,
                        'q' | 'v' | 'n' | 'N' => {}
                        '1'..='9' => o.level = c.to_digit(10).unwrap_or(6),
                        c => {
                            eprintln!("{name}: invalid option -- '{c}'");
                            return 1;
                        }
                    }
                }
            }
        }
    }
    if files.is_empty() {
        files.push("-".into());
    }
    let mut status = 0;
    for f in &files {
        if let Err(msg) = one(&o, f) {
            eprintln!("{name}: {msg}");
            status = 1;
        }
    }
    status
}

fn one(o: &Opts, file: &str) -> Result<(), String> {
    let err = |e: io::Error| format!("{file}: {}", crate::io_message(&e));
    let input: Box<dyn Read> = if file == "-" {
        Box::new(io::stdin().lock())
    } else {
        Box::new(File::open(file).map_err(err)?)
    };
    let to_stdout = o.stdout || o.test || file == "-";
    let target = if to_stdout {
        None
    } else if o.decompress {
        let t = if let Some(base) = file.strip_suffix(".tgz") {
            format!("{base}.tar")
        } else if let Some(base) = file.strip_suffix(".gz") {
            base.to_owned()
        } else {
            return Err(format!("{file}: unknown suffix -- ignored"));
        };
        Some(t)
    } else {
        if file.ends_with(".gz") && !o.force {
            return Err(format!("{file} already has .gz suffix -- unchanged"));
        }
        Some(format!("{file}.gz"))
    };
    if let Some(t) = &target
        && !o.force
        && std::path::Path::new(t).exists()
    {
        return Err(format!("{t} already exists; use -f to overwrite"));
    }
    let mut output: Box<dyn Write> = match &target {
        None if o.test => Box::new(io::sink()),
        None => Box::new(io::stdout().lock()),
        Some(t) => {
            Box::new(File::create(t).map_err(|e| format!("{t}: {}", crate::io_message(&e)))?)
        }
    };
    let r = if o.decompress || o.test {
        io::copy(&mut MultiGzDecoder::new(input), &mut output).map(|_| ())
    } else {
        let mut enc = GzEncoder::new(output, Compression::new(o.level));
        let mut input = input;
        io::copy(&mut input, &mut enc)
            .and_then(|_| enc.finish())
            .map(|mut w| {
                let _ = w.flush();
            })
    };
    if let Err(e) = r {
        if let Some(t) = &target {
            let _ = std::fs::remove_file(t);
        }
        return Err(
            if e.kind() == io::ErrorKind::InvalidInput || e.kind() == io::ErrorKind::InvalidData {
                format!("{file}: not in gzip format")
            } else {
                err(e)
            },
        );
    }
    if target.is_some() && !o.keep {
        std::fs::remove_file(file).map_err(err)?;
    }
    Ok(())
}
