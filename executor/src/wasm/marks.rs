//! What a WASM computer's own directory keeps of its kept jobs (issue 46): a marker a job,
//! `<state>/wasm/<key>/jobs/<job id>.json`, so that a later server asked about a job it
//! does not hold can say what became of it instead of "it never existed".
//!
//! A WASM job lives inside the server process that started it ([`super::jobs`]), so it
//! ends when that process does. Its marker names the job, its command, its start, that
//! process (instance id and host, as [`crate::instance`] judges them), its `/proc` number
//! ([`super::procs`]) and, once it ended, its status. It is written when the job starts,
//! rewritten when the job ends, and removed when its end is read, when it expires unread,
//! when the computer's jobs end (restart, factory reset, delete: the directory goes with
//! the computer), or when a later server told what became of it. The guest never sees
//! it (it is outside `fs/` and every mount); job ids are unguessable and the directory is
//! the computer's, so no other computer or team reaches it. At most [`MAX_JOBS`] are kept
//! a computer: past that, the oldest markers this server does not hold go.
//!
//! Writing one is best effort: a job runs without its marker when the disk refuses it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use shared::jobs::MAX_JOBS;

/// One job's marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Mark {
    pub job_id: String,
    pub command: String,
    pub started_at_ms: u64,
    /// The server process that runs it ([`crate::instance::current`]) and where.
    pub instance: String,
    pub host: String,
    /// Its `/proc/<n>` number.
    pub pid: u32,
    /// Its status once it ended (its output was not read yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

/// What became of a job whose marker a server finds but does not hold.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Fate {
    /// This server started it and forgot it already: a leftover (no such job).
    Forgotten,
    /// The server process that ran it stopped: the job ended with it.
    Stopped,
    /// Another server process that shares the state directory runs it (or one this
    /// process cannot judge: another machine or PID namespace).
    Elsewhere,
}

fn dir(computer_dir: &Path) -> PathBuf {
    computer_dir.join("jobs")
}

/// The marker's path; `None` for an id that is not a plain file name (never a job's).
fn path(computer_dir: &Path, job_id: &str) -> Option<PathBuf> {
    shared::jobs::validate_job_id(job_id).ok()?;
    Some(dir(computer_dir).join(format!("{job_id}.json")))
}

/// Writes (or rewrites) `mark` atomically.
pub(super) fn write(computer_dir: &Path, mark: &Mark) -> std::io::Result<()> {
    let path =
        path(computer_dir, &mark.job_id).ok_or_else(|| std::io::Error::other("not a job id"))?;
    super::engine::create_private_dir(&dir(computer_dir))?;
    let bytes = serde_json::to_vec(mark).map_err(std::io::Error::other)?;
    let tmp = path.with_extension(format!("tmp-{:08x}", rand::random::<u32>()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, &path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The marker of job `job_id`, if there is one.
pub(super) fn read(computer_dir: &Path, job_id: &str) -> Option<Mark> {
    let bytes = std::fs::read(path(computer_dir, job_id)?).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Removes the marker of job `job_id` (none is fine).
pub(super) fn remove(computer_dir: &Path, job_id: &str) {
    if let Some(p) = path(computer_dir, job_id) {
        let _ = std::fs::remove_file(p);
    }
}

/// Every marker of the computer.
pub(super) fn all(computer_dir: &Path) -> Vec<Mark> {
    let Ok(entries) = std::fs::read_dir(dir(computer_dir)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect()
}

/// Keeps at most [`MAX_JOBS`] markers: past that, removes the oldest ones that `held`
/// (this server's jobs of the computer) does not name.
pub(super) fn prune(computer_dir: &Path, held: &dyn Fn(&str) -> bool) {
    let mut marks = all(computer_dir);
    let excess = marks.len().saturating_sub(MAX_JOBS);
    if excess == 0 {
        return;
    }
    marks.retain(|m| !held(&m.job_id));
    marks.sort_by_key(|m| m.started_at_ms);
    for m in marks.iter().take(excess) {
        remove(computer_dir, &m.job_id);
    }
}

/// What became of the job of `mark`, judged by the server process `instance` on `host`.
pub(super) fn fate(mark: &Mark, instance: &str, host: &str) -> Fate {
    if mark.instance == instance {
        Fate::Forgotten
    } else if mark.host == host && !crate::instance::is_alive(&mark.instance) {
        Fate::Stopped
    } else {
        Fate::Elsewhere
    }
}

/// Is the job of `mark` running in a live server process (so its `/proc` entry stays)?
pub(super) fn runs(mark: &Mark, instance: &str, host: &str) -> bool {
    mark.exit_code.is_none() && fate(mark, instance, host) != Fate::Stopped
}

/// What a server says of a job another server process that it cannot reach runs.
pub(super) fn elsewhere(mark: &Mark) -> String {
    format!(
        "job {} (`{}`) was started by another server process that shares this state directory, and runs there: WebAssembly computers run their commands inside the server process that started them; read it through that server",
        mark.job_id,
        shared::history::cut(&mark.command, 80)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(job_id: &str, started: u64, instance: &str) -> Mark {
        Mark {
            job_id: job_id.into(),
            command: "sleep 9".into(),
            started_at_ms: started,
            instance: instance.into(),
            host: "h".into(),
            pid: 2,
            exit_code: None,
        }
    }

    #[test]
    fn issue_46_markers_are_bounded_and_never_leave_their_directory() {
        let d = std::env::temp_dir().join(format!("msc-marks-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&d).unwrap();
        let m = mark("job-1", 1, "1-1");
        write(&d, &m).unwrap();
        assert_eq!(read(&d, "job-1"), Some(m));
        assert!(read(&d, "../computer").is_none() && path(&d, "a/b").is_none());
        assert!(write(&d, &mark("../../x", 1, "1-1")).is_err());
        for i in 0..MAX_JOBS + 5 {
            write(&d, &mark(&format!("job-x{i:03}"), 10 + i as u64, "2-2")).unwrap();
        }
        // This server holds the newest; the oldest of the others go.
        prune(&d, &|id| id == "job-x000");
        let left = all(&d);
        assert_eq!(left.len(), MAX_JOBS);
        let ids: Vec<&str> = left.iter().map(|m| m.job_id.as_str()).collect();
        assert!(
            ids.contains(&"job-x000") && !ids.contains(&"job-1"),
            "{ids:?}"
        );
        remove(&d, "job-x000");
        assert!(read(&d, "job-x000").is_none());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn issue_46_a_dead_server_s_job_is_told_stopped() {
        let me = crate::instance::current();
        // A process id no system hands out: that server is gone.
        let dead = mark("job-1", 1, "4194304999-1");
        assert_eq!(fate(&dead, &me, "h"), Fate::Stopped);
        assert!(!runs(&dead, &me, "h"));
        assert_eq!(fate(&mark("job-2", 1, &me), &me, "h"), Fate::Forgotten);
        // Another live process on this host, or one this process cannot judge.
        let other = mark("job-3", 1, &me);
        assert_eq!(fate(&other, "4194304998-1", "h"), Fate::Elsewhere);
        assert_eq!(fate(&dead, &me, "another-host"), Fate::Elsewhere);
        assert!(runs(&other, "4194304998-1", "h"));
    }
}
