//! `msc-supervisor init --socket PATH` (PID 1 in a computer) or
//! `msc-supervisor relay --socket PATH` (pipes stdio to the socket).

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: msc-supervisor (init|relay) --socket PATH";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, socket) = match args.as_slice() {
        [mode, flag, path] if flag == "--socket" => (mode.as_str(), PathBuf::from(path)),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match mode {
        "init" => supervisor::server::run(&socket),
        "relay" => supervisor::server::relay(&socket),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("msc-supervisor: {e}");
            ExitCode::from(1)
        }
    }
}
