//! `env` and `printenv`: print the environment.
//!
//! Running a command under a modified environment (`env VAR=x cmd`) is done
//! by the host shell, so `env` here only prints the environment, sorted by
//! name, one `NAME=value` per line (`-0` ends lines with NUL instead).

use std::ffi::OsString;
use std::io::{self, Write};

use crate::NOT_FOUND_EXIT;

fn sorted_vars() -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    vars.sort();
    vars
}

fn write_lines<I: IntoIterator<Item = String>>(lines: I, terminator: u8) -> i32 {
    let mut out = io::stdout().lock();
    for line in lines {
        if out.write_all(line.as_bytes()).is_err() || out.write_all(&[terminator]).is_err() {
            return 1;
        }
    }
    0
}

/// Entry point of `env`.
pub fn main_env(args: Vec<OsString>) -> i32 {
    let mut terminator = b'\n';
    for arg in args.iter().skip(1) {
        match arg.to_str() {
            Some("-0" | "--null") => terminator = 0,
            Some("--help") => {
                println!("Usage: env [-0]\nPrint the environment, sorted by name.");
                return 0;
            }
            _ => {
                eprintln!("env: running commands is done by the shell");
                return NOT_FOUND_EXIT;
            }
        }
    }
    write_lines(
        sorted_vars().into_iter().map(|(k, v)| format!("{k}={v}")),
        terminator,
    )
}

/// Entry point of `printenv`: all variables, or the values of the named ones
/// (exit 1 if any is unset).
pub fn main_printenv(args: Vec<OsString>) -> i32 {
    let mut terminator = b'\n';
    let mut names = Vec::new();
    for arg in args.iter().skip(1) {
        match arg.to_str() {
            Some("-0" | "--null") => terminator = 0,
            _ => names.push(arg.clone()),
        }
    }
    if names.is_empty() {
        return write_lines(
            sorted_vars().into_iter().map(|(k, v)| format!("{k}={v}")),
            terminator,
        );
    }
    let mut status = 0;
    let mut values = Vec::new();
    for name in names {
        match std::env::var_os(&name) {
            Some(v) => values.push(v.to_string_lossy().into_owned()),
            None => status = 1,
        }
    }
    let written = write_lines(values, terminator);
    if written != 0 { written } else { status }
}
