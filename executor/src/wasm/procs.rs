//! A WASM computer's `/proc` (issue 46): `<state>/wasm/<key>/proc/`, mounted read-only at
//! `/proc` for this computer only ([`super::base::mounts`]).
//!
//! It holds the static files (`version`, `cpuinfo`, `meminfo` with the memory limit of
//! one program, `self/status` naming the shell), written when a server first uses the
//! computer ([`refresh`]), and one directory a running kept job ([`super::jobs`]),
//! `<n>/` with `cmdline` (`sh`, `-c`, the command, each ended by a NUL), `status` (`Name`,
//! `State`, `Pid`...) and `stat`, written when the job starts and removed when it ends
//! ([`add`], [`remove`]), so `ls /proc` and `cat /proc/*/cmdline` see the computer's
//! background commands, as a `ps` does. Numbers start at 2 (1 would be an init) and are
//! the smallest free one. The directory is the computer's: no other computer's jobs show.
//!
//! What it does not show: the foreground command (that would cost a write a command on
//! the warm path), and `&` jobs inside a command (they live only as long as its shell, or
//! in the computer's table between calls, without a command line of their own).

use std::path::Path;

/// The first number a job gets.
const FIRST_PID: u32 = 2;

/// Writes the static files (replacing older ones) and removes the entries of jobs that
/// no longer run (`live` says which numbers still do: a server that stopped left them).
pub(super) fn refresh(
    proc_dir: &Path,
    max_memory: u64,
    live: &dyn Fn(u32) -> bool,
) -> std::io::Result<()> {
    std::fs::create_dir_all(proc_dir.join("self"))?;
    let kib = max_memory / 1024;
    let files = [
        (
            "version",
            "Linux version 6.0.0-wasi (MCP Sandbox Computer: WebAssembly, WASI preview 1) #1\n"
                .to_owned(),
        ),
        (
            "cpuinfo",
            "processor\t: 0\nvendor_id\t: WebAssembly\nmodel name\t: wasm32 (one WASI instance a command)\n\n".to_owned(),
        ),
        (
            "meminfo",
            format!("MemTotal:       {kib:>8} kB\nMemFree:        {kib:>8} kB\nMemAvailable:   {kib:>8} kB\n"),
        ),
        ("self/status", "Name:\tsh\nState:\tR (running)\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n".to_owned()),
    ];
    for (name, text) in files {
        let path = proc_dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            let tmp = proc_dir.join(format!(".{:08x}", rand::random::<u32>()));
            std::fs::write(&tmp, text)?;
            std::fs::rename(&tmp, &path)?;
        }
    }
    for entry in std::fs::read_dir(proc_dir)?.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Ok(pid) = name.parse::<u32>()
            && !live(pid)
        {
            std::fs::remove_dir_all(entry.path())?;
        } else if name.starts_with('.') {
            // A write cut short.
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

/// Shows a job running `command` as the smallest free `/proc/<n>`; returns `n`.
pub(super) fn add(proc_dir: &Path, command: &str) -> std::io::Result<u32> {
    let mut pid = FIRST_PID;
    loop {
        match std::fs::create_dir(proc_dir.join(pid.to_string())) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => pid += 1,
            Err(e) => return Err(e),
        }
        if pid > FIRST_PID + 4 * shared::jobs::MAX_JOBS as u32 {
            return Err(std::io::Error::other("no free /proc number"));
        }
    }
    let dir = proc_dir.join(pid.to_string());
    match write_entry(&dir, pid, command) {
        Ok(()) => Ok(pid),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

fn write_entry(dir: &Path, pid: u32, command: &str) -> std::io::Result<()> {
    std::fs::write(dir.join("cmdline"), cmdline(command))?;
    std::fs::write(dir.join("status"), status(pid))?;
    std::fs::write(dir.join("stat"), stat(pid))
}

/// Takes job `pid` off `/proc` (it ended).
pub(super) fn remove(proc_dir: &Path, pid: u32) {
    let _ = std::fs::remove_dir_all(proc_dir.join(pid.to_string()));
}

/// `/proc/<n>/cmdline`: the argv of `sh -c <command>`, each word ended by a NUL.
fn cmdline(command: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(command.len() + 8);
    for word in ["sh", "-c", command] {
        out.extend_from_slice(word.as_bytes());
        out.push(0);
    }
    out
}

/// `/proc/<n>/status`: a sleeping `sh` of root's.
fn status(pid: u32) -> String {
    format!(
        "Name:\tsh\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t1\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nThreads:\t1\n"
    )
}

/// `/proc/<n>/stat`: the 52 fields of Linux's, the ones a computer has no value for 0.
fn stat(pid: u32) -> String {
    let mut fields: Vec<String> = vec![
        pid.to_string(),
        "(sh)".into(),
        "S".into(),
        "1".into(),
        pid.to_string(),
        pid.to_string(),
        "0".into(),
        "-1".into(),
    ];
    fields.resize(52, "0".into());
    fields[17] = "20".into(); // priority
    fields[19] = "1".into(); // num_threads
    format!("{}\n", fields.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_46_jobs_show_in_proc_with_linux_formats() {
        let d = std::env::temp_dir().join(format!("msc-proc-{:016x}", rand::random::<u64>()));
        refresh(&d, 256 << 20, &|_| false).unwrap();
        assert!(
            std::fs::read_to_string(d.join("meminfo"))
                .unwrap()
                .contains("262144 kB")
        );
        let a = add(&d, "sleep 30 && echo 'a b'").unwrap();
        let b = add(&d, "tail -f /tmp/log").unwrap();
        assert_eq!((a, b), (2, 3));
        assert_eq!(
            std::fs::read(d.join("2/cmdline")).unwrap(),
            b"sh\0-c\0sleep 30 && echo 'a b'\0"
        );
        let status = std::fs::read_to_string(d.join("3/status")).unwrap();
        assert!(
            status.starts_with("Name:\tsh\nState:\tS (sleeping)\n")
                && status.contains("\nPid:\t3\n")
        );
        let stat = std::fs::read_to_string(d.join("3/stat")).unwrap();
        assert_eq!(stat.split_whitespace().count(), 52);
        assert!(stat.starts_with("3 (sh) S 1 3 3 0 -1 "), "{stat}");
        remove(&d, a);
        assert_eq!(add(&d, "x").unwrap(), 2, "the smallest free number");
        // A later server keeps live entries and sweeps the rest.
        refresh(&d, 256 << 20, &|pid| pid == 3).unwrap();
        assert!(!d.join("2").exists() && d.join("3/cmdline").is_file());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
