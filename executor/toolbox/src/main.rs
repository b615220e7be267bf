//! `msc-toolbox`: one multicall WASI command module bundling the POSIX-ish
//! utilities of the MCP Sandbox Computer.
//!
//! The host instantiates the module fresh for every simple command with
//! `argv[0]` set to the utility name (`["ls", "-la"]`). The module can also be
//! called as `msc-toolbox <util> args...` (argv\[0\] `msc-toolbox`, `toolbox`,
//! or a `*.wasm` file name) and `msc-toolbox --list` prints every utility, one
//! per line, sorted.
//!
//! Conventions the host must know:
//!
//! * `PWD` from the environment becomes the current directory (wasi-libc has
//!   no other notion of a cwd); failure to enter it is ignored.
//! * Exit codes are **clamped to `0..=125`**, because WASI `proc_exit` with a
//!   code `>= 126` traps in wasmtime-wasi. Codes above 125 become 125.
//! * An unknown utility prints `<name>: command not found` and exits with
//!   **125**; the host maps that to the shell's 127.
//! * `env` with a command is the shell's job: it prints a message and exits 125.
//! * stdout is flushed before exit; a failed flush (e.g. broken pipe) turns a
//!   zero status into 1 without printing anything.

mod awk;
mod diff;
mod du;
mod env;
mod find;
mod fnmatch;
mod grep;
mod gzip;
mod jq;
mod registry;
mod small;
mod stat;
mod tac;
mod tar;

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::Path;

/// A shell-style message for an I/O error ("No such file or directory", ...).
pub fn io_message(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "No such file or directory".into(),
        io::ErrorKind::PermissionDenied => "Permission denied".into(),
        io::ErrorKind::IsADirectory => "Is a directory".into(),
        io::ErrorKind::AlreadyExists => "File exists".into(),
        io::ErrorKind::ReadOnlyFilesystem => "Read-only file system".into(),
        _ => e.to_string(),
    }
}

/// Highest exit status that WASI `proc_exit` accepts without trapping.
pub const MAX_EXIT: i32 = 125;

/// Status used when the requested utility does not exist.
pub const NOT_FOUND_EXIT: i32 = 125;

/// Clamp an exit status into the range accepted by WASI `proc_exit`.
pub fn clamp_exit(code: i32) -> i32 {
    code.clamp(0, MAX_EXIT)
}

/// Return the utility name for an `argv[0]`: its basename without `.wasm`.
fn program_name(arg0: &OsString) -> String {
    let base = Path::new(arg0)
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| arg0.to_string_lossy().into_owned());
    match base.strip_suffix(".wasm") {
        Some(stripped) => stripped.to_string(),
        None => base,
    }
}

/// True when `name` designates the multicall binary itself.
fn is_multicall_name(name: &str) -> bool {
    matches!(name, "msc-toolbox" | "toolbox")
}

fn print_list() -> i32 {
    let mut out = io::stdout().lock();
    for name in registry::names() {
        if writeln!(out, "{name}").is_err() {
            return 1;
        }
    }
    0
}

fn run(mut args: Vec<OsString>) -> i32 {
    let Some(arg0) = args.first() else {
        eprintln!("msc-toolbox: missing utility name");
        return 1;
    };
    let mut name = program_name(arg0);
    if is_multicall_name(&name) {
        uucore::set_utility_is_second_arg();
        args.remove(0);
        let Some(util) = args.first() else {
            eprintln!("usage: msc-toolbox <utility> [args...] | msc-toolbox --list");
            return 1;
        };
        name = util.to_string_lossy().into_owned();
        if name == "--list" {
            return print_list();
        }
    }
    match registry::lookup(&name) {
        Some(util) => registry::invoke(util, args),
        None => {
            eprintln!("{name}: command not found");
            NOT_FOUND_EXIT
        }
    }
}

/// A utility's arguments after its name, as (lossy) UTF-8 strings.
pub(crate) fn string_args(args: &[OsString]) -> Vec<String> {
    args.iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

fn main() {
    uucore::panic::mute_sigpipe_panic();
    if let Some(pwd) = std::env::var_os("PWD") {
        // The host reports missing directories itself; ignore failures here.
        let _ = std::env::set_current_dir(pwd);
    }
    let mut code = run(std::env::args_os().collect());
    if io::stdout().flush().is_err() && code == 0 {
        code = 1;
    }
    std::process::exit(clamp_exit(code));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_exit_codes() {
        assert_eq!(clamp_exit(0), 0);
        assert_eq!(clamp_exit(2), 2);
        assert_eq!(clamp_exit(126), 125);
        assert_eq!(clamp_exit(255), 125);
        assert_eq!(clamp_exit(-1), 0);
    }

    #[test]
    fn program_name_strips_dirs_and_wasm() {
        assert_eq!(program_name(&OsString::from("/bin/ls")), "ls");
        assert_eq!(
            program_name(&OsString::from("msc-toolbox.wasm")),
            "msc-toolbox"
        );
        assert_eq!(program_name(&OsString::from("[")), "[");
        assert!(is_multicall_name("toolbox"));
        assert!(!is_multicall_name("ls"));
    }
}
