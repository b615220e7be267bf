//! `diff` and `cmp` over the uutils `diffutils` library (its own CLI lives
//! in a binary target, so the driver is re-done here).
//!
//! `diff` supports the normal, unified (`-u`, `-U n`), context (`-c`), ed
//! (`-e`) and side-by-side (`-y`) formats and `-q`/`-s`; it compares two
//! files (no directory recursion). Exit status: 0 same, 1 different, 2 trouble.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};

use diffutilslib::cmp::{self, Cmp};
use diffutilslib::params::{Format, parse_params};
use diffutilslib::{context_diff, ed_diff, normal_diff, side_by_side_diff, unified_diff};

fn read_contents(path: &OsString) -> io::Result<Vec<u8>> {
    if path == "-" {
        let mut buf = Vec::new();
        io::stdin().read_to_end(&mut buf)?;
        Ok(buf)
    } else {
        fs::read(path)
    }
}

fn describe(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "No such file or directory".into(),
        io::ErrorKind::PermissionDenied => "Permission denied".into(),
        io::ErrorKind::IsADirectory => "Is a directory".into(),
        _ => e.to_string(),
    }
}

/// Entry point of `diff`.
pub fn main(args: Vec<OsString>) -> i32 {
    let params = match parse_params(args.into_iter().peekable()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let mut trouble = false;
    let mut load = |path: &OsString| match read_contents(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("diff: {}: {}", path.to_string_lossy(), describe(&e));
            trouble = true;
            Vec::new()
        }
    };
    let from = load(&params.from);
    let to = load(&params.to);
    if trouble {
        return 2;
    }
    let mut out = io::stdout().lock();
    let result = match params.format {
        Format::Normal => normal_diff(&from, &to, &params),
        Format::Unified => unified_diff(&from, &to, &params),
        Format::Context => context_diff(&from, &to, &params),
        Format::Ed => match ed_diff(&from, &to, &params) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("diff: {e}");
                return 2;
            }
        },
        Format::SideBySide => {
            // Output goes straight to stdout; only "differs" is returned.
            side_by_side_diff(&from, &to, &mut out, &params);
            if from == to { Vec::new() } else { vec![b'\n'] }
        }
    };
    let written = if result.is_empty() {
        if params.report_identical_files {
            writeln!(
                out,
                "Files {} and {} are identical",
                params.from.to_string_lossy(),
                params.to.to_string_lossy()
            )
        } else {
            Ok(())
        }
    } else if params.brief {
        writeln!(
            out,
            "Files {} and {} differ",
            params.from.to_string_lossy(),
            params.to.to_string_lossy()
        )
    } else if matches!(params.format, Format::SideBySide) {
        Ok(())
    } else {
        out.write_all(&result)
    };
    if written.and_then(|()| out.flush()).is_err() {
        return 2;
    }
    i32::from(!result.is_empty())
}

/// Entry point of `cmp`.
pub fn main_cmp(args: Vec<OsString>) -> i32 {
    let quiet = args
        .iter()
        .skip(1)
        .any(|a| a == "-s" || a == "--quiet" || a == "--silent");
    let params = match cmp::parse_params(args.into_iter().peekable()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    match cmp::cmp(&params) {
        Ok(Cmp::Equal) => 0,
        Ok(Cmp::Different) => 1,
        Err(e) => {
            if !quiet {
                eprintln!("{e}");
            }
            2
        }
    }
}
