//! The ways a process tries to shed its job's kill (its environment tag and its process
//! group), each leaving a `sleep <secs>` behind: what the supervisor's tests and the
//! end-to-end tests run to show that a job's end reaches every one (issue 46, item 1).

/// The escape commands, each a shell command line that leaves `sleep <secs>` running.
pub fn escapes(secs: &str) -> [String; 4] {
    [
        format!("setsid env -i sleep {secs} & sleep 1000"),
        format!("unset MSC_JOB; setsid sleep {secs} & sleep 1000"),
        format!(
            "(setsid sh -c 'exec 0<&- 1>&- 2>&-; env -u MSC_JOB sleep {secs} &' &); sleep 1000"
        ),
        format!(
            "perl -e 'use POSIX; fork and exit; POSIX::setsid(); fork and exit; \
             close STDIN; close STDOUT; close STDERR; %ENV = (); exec \"sleep\", \"{secs}\"' & \
             sleep 1000"
        ),
    ]
}
