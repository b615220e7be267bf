//! This server's identity and liveness, for reaping temporaries of servers that died.
//!
//! Temporary containers carry the creating server's instance id (`<pid>-<start time>`,
//! read from `/proc`) and host name. At start-up a server removes the temporaries of
//! instances on this host that are no longer running: the PID is gone, or now belongs to a
//! process that started at another time. This needs no shared directory, so servers with
//! different `--state-dir`s or users never reap each other's live computers. Where `/proc`
//! is missing, nothing is judged dead (no reaping rather than a wrong one).

fn start_time(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may itself hold spaces and parentheses.
    let rest = stat.rsplit_once(')')?.1;
    // `rest` starts at field 3 (state); start time is field 22.
    rest.split_whitespace().nth(19).map(str::to_owned)
}

/// This process's instance id.
pub fn current() -> String {
    let pid = std::process::id().to_string();
    match start_time(&pid) {
        Some(t) => format!("{pid}-{t}"),
        None => format!("{pid}-x{:016x}", rand::random::<u64>()),
    }
}

/// Is the instance `id` (from this host) still running?
pub fn is_alive(id: &str) -> bool {
    let Some((pid, start)) = id.split_once('-') else {
        return true;
    };
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) || start.starts_with('x') {
        // Not an id we can judge: leave it alone.
        return true;
    }
    if !std::path::Path::new("/proc/self/stat").exists() {
        return true;
    }
    start_time(pid).as_deref() == Some(start)
}

/// This machine's name, to tell our instances from other machines' on a shared engine.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness() {
        let me = current();
        assert!(is_alive(&me), "{me}");
        let (pid, start) = me.split_once('-').unwrap();
        assert!(
            !is_alive(&format!("{pid}-{}0", start)),
            "same pid, other start time"
        );
        assert!(!is_alive("4194304999-1"), "no such pid");
        assert!(is_alive("garbage"));
        assert!(is_alive("../etc-1"));
    }
}
