//! The computer's out-of-memory kill count, from its memory cgroup: `oom_kill` in
//! `memory.events` (cgroup v2) or `memory.oom_control` (cgroup v1, kernel 4.13+). A job
//! that ends by SIGKILL while the count rose was killed by the out-of-memory killer.

/// Where the count is, in the order tried.
const FILES: [&str; 2] = [
    "/sys/fs/cgroup/memory.events",
    "/sys/fs/cgroup/memory/memory.oom_control",
];

/// The count's file, opened once: a read from offset 0 makes the kernel write it anew, so
/// each look is one `pread` instead of an open, reads and a close.
static FILE: std::sync::LazyLock<Option<std::fs::File>> = std::sync::LazyLock::new(|| {
    FILES.iter().find_map(|f| {
        let file = std::fs::File::open(f).ok()?;
        read(&file).is_some().then_some(file)
    })
});

/// The `oom_kill` value in `file`, read from its start.
fn read(file: &std::fs::File) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 1024];
    let n = file.read_at(&mut buf, 0).ok()?;
    parse(std::str::from_utf8(buf.get(..n)?).ok()?)
}

/// The number of processes the out-of-memory killer ended in this computer's cgroup, or
/// `None` where no memory cgroup is visible.
pub fn kills() -> Option<u64> {
    FILE.as_ref().and_then(read)
}

/// The `oom_kill` value of a `memory.events` or `memory.oom_control` text.
fn parse(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// Whether a job that exited with `code` (128+N for signal N) after the count went from
/// `before` to `after` was ended by the out-of-memory killer.
pub fn killed(code: i32, before: Option<u64>, after: Option<u64>) -> bool {
    code == 128 + 9 && matches!((before, after), (Some(b), Some(a)) if a > b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_from_both_cgroup_versions() {
        assert_eq!(parse("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n"), Some(2));
        assert_eq!(
            parse("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"),
            Some(7)
        );
        assert_eq!(parse("oom_kill_disable 0\nunder_oom 0\n"), None);
        assert_eq!(parse(""), None);
    }

    #[test]
    fn only_a_sigkill_while_the_count_rose_is_an_oom_kill() {
        assert!(killed(137, Some(0), Some(1)));
        assert!(!killed(137, Some(1), Some(1)));
        assert!(!killed(1, Some(0), Some(1)));
        assert!(!killed(137, None, None));
    }
}
