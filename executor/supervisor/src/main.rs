//! `msc-supervisor init --socket PATH [--host-door PATH]` (PID 1 in a
//! computer) or
//! `msc-supervisor relay --socket PATH` (pipes stdio to the socket), or
//! `msc-supervisor spawn-floor N` (the benchmark's floor: N spawns of `true`, timed here).

use std::path::PathBuf;

/// dlmalloc keeps freed memory for the next request, where musl's allocator gives small
/// blocks back to the kernel at once: three `mmap`/`munmap` calls per command (each
/// `munmap` a TLB shootdown across the supervisor's threads), about 60 µs of a warm exec.
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;
use std::process::ExitCode;

const USAGE: &str = "usage: msc-supervisor init --socket PATH [--host-door PATH] | relay --socket PATH | spawn-floor N";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["init", "--socket", path] => supervisor::server::run(&PathBuf::from(path), None),
        ["init", "--socket", path, "--host-door", door] => {
            supervisor::server::run(&PathBuf::from(path), Some(&PathBuf::from(door)))
        }
        ["relay", "--socket", path] => supervisor::server::relay(&PathBuf::from(path)),
        ["spawn-floor", n] => match n.parse::<usize>() {
            Ok(n) if (1..=100_000).contains(&n) => supervisor::server::spawn_floor(n),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        },
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
