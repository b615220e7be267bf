//! This server's identity and liveness, for reaping temporaries of servers that died.
//!
//! Temporary containers carry the creating server's instance id (`<pid>-<start time>`, read
//! from `/proc`) and host identity (name + PID namespace). At start-up a server removes the
//! temporaries of instances on this host that are no longer running: the PID is gone, or
//! now belongs to a process that started at another time. This needs no shared directory,
//! so servers with different `--state-dir`s or users never reap each other's live
//! computers. Where `/proc` is missing, nothing is judged dead (no reaping rather than a
//! wrong one).

/// The start time of process `pid`, while it runs: a zombie (killed, not yet reaped by its
/// parent) has none.
fn start_time(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may itself hold spaces and parentheses.
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    // `rest` starts at field 3 (state); start time is field 22.
    if matches!(rest.next(), Some("Z" | "X" | "x")) {
        return None;
    }
    rest.nth(18).map(str::to_owned)
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

/// Where instance ids can be judged: the machine's name and this process's PID namespace.
/// Only servers in the same PID namespace can see each other's processes, so a server in a
/// container (even with the host's network and name, sharing the host's engine) never
/// judges the host's servers dead, nor they it.
pub fn host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    match std::fs::read_link("/proc/self/ns/pid") {
        // "pid:[4026531836]" -> "hostname/pid:4026531836"
        Ok(ns) => {
            let ns = ns.to_string_lossy().replace(['[', ']'], "");
            format!("{name}/{ns}")
        }
        Err(_) => name,
    }
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

    /// A server killed but not yet reaped by its parent (a zombie) is dead: the next
    /// start reaps what it left (issue 46's flaky reap of a killed server's directories).
    #[test]
    fn a_zombie_is_dead() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id().to_string();
        let id = format!("{pid}-{}", start_time(&pid).unwrap());
        assert!(is_alive(&id), "{id}");
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status();
        let stat = || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !stat()
            .rsplit_once(')')
            .unwrap()
            .1
            .trim_start()
            .starts_with('Z')
        {
            assert!(std::time::Instant::now() < deadline, "{}", stat());
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!is_alive(&id), "a zombie");
        child.wait().unwrap();
    }
}
