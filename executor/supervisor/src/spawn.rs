//! Starting a job's first process the way `posix_spawn` does, with one step of ours
//! between the clone and the exec: opening the job's audit session
//! ([`open_session`], the tree kill no process can shed).
//!
//! Rust's `Command` forks whenever it is given a `pre_exec`, and a fork copies our page
//! tables and then pays a fault for each page either side writes: on a 2-core cloud VM
//! that is about 0.5 ms per job, half a warm exec. `clone(CLONE_VM | CLONE_VFORK)` is
//! what `posix_spawn` uses: the child borrows our memory and our suspended thread's
//! place until it execs, so nothing is copied.
//!
//! Because the child shares our memory, it runs only raw system calls on values prepared
//! here ([`Plan`]): no allocation, no lock. All signals are blocked around the clone, so
//! no handler of ours ever runs in the child; the child sets every signal with a handler,
//! and `SIGPIPE` (which Rust's runtime ignores), back to its default before it unblocks
//! them all, as `Command` does.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use nix::libc;
use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, SigmaskHow};

use crate::proc::open_session;

/// The child's stack until it execs (it makes a few calls into libc, no more).
const STACK_BYTES: usize = 64 * 1024;

/// A job's first process, as [`spawn`] started it.
#[derive(Debug)]
pub(crate) struct Child {
    pub(crate) pid: i32,
    /// Its stdin's write end, when it was given a pipe (else it reads `/dev/null`).
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
}

/// What to start: `path` (resolved already) with `argv`, in `cwd`, with our environment
/// and `env` over it.
#[derive(Debug)]
pub(crate) struct Command<'a> {
    pub(crate) path: &'a Path,
    pub(crate) argv: Vec<&'a str>,
    pub(crate) cwd: Option<&'a str>,
    pub(crate) env: Vec<(&'a str, &'a str)>,
    pub(crate) stdin: bool,
}

/// What the child reads and writes, all of it prepared before the clone.
struct Plan<'a> {
    path: &'a CStr,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: Option<&'a CStr>,
    /// Its stdin, stdout and stderr, in that order.
    stdio: [RawFd; 3],
    /// The errno of the step that failed, when the child could not exec.
    err: i32,
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        )
    })
}

/// Our environment with `overrides` over it, as `KEY=VALUE` strings.
fn environment(overrides: &[(&str, &str)]) -> io::Result<Vec<CString>> {
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    for (key, value) in overrides {
        let key = OsStr::new(key);
        match vars.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = OsString::from(value),
            None => vars.push((key.to_owned(), OsString::from(value))),
        }
    }
    vars.into_iter()
        .map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            c_string(&kv)
        })
        .collect()
}

/// Starts `cmd` in a process group of its own (its pid), with piped stdout and stderr.
/// An exec that fails is an error here (the child has exited with 127; the reaper takes
/// it).
pub(crate) fn spawn(cmd: &Command<'_>) -> io::Result<Child> {
    let path = c_string(cmd.path.as_os_str().as_bytes())?;
    let argv = cmd
        .argv
        .iter()
        .map(|a| c_string(a.as_bytes()))
        .collect::<io::Result<Vec<_>>>()?;
    let env = environment(&cmd.env)?;
    let cwd = cmd.cwd.map(|c| c_string(c.as_bytes())).transpose()?;
    let argv_ptrs: Vec<*const libc::c_char> = argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let env_ptrs: Vec<*const libc::c_char> = env
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();

    let (stdin_theirs, stdin_ours): (OwnedFd, Option<OwnedFd>) = if cmd.stdin {
        let (r, w) = io::pipe()?;
        (r.into(), Some(w.into()))
    } else {
        (std::fs::File::open("/dev/null")?.into(), None)
    };
    let (stdout_ours, stdout_theirs) = io::pipe()?;
    let (stderr_ours, stderr_theirs) = io::pipe()?;
    // The child moves them onto 0, 1 and 2 in that order: none may sit below 3 already
    // (where this process had closed its own stdio), or one move would clobber another.
    let above_stdio = |fd: OwnedFd| -> io::Result<OwnedFd> {
        match fd.as_raw_fd() < 3 {
            true => Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?),
            false => Ok(fd),
        }
    };
    let stdin_theirs = above_stdio(stdin_theirs)?;
    let stdout_theirs = above_stdio(stdout_theirs.into())?;
    let stderr_theirs = above_stdio(stderr_theirs.into())?;

    let mut plan = Plan {
        path: &path,
        argv: argv_ptrs.as_ptr(),
        envp: env_ptrs.as_ptr(),
        cwd: cwd.as_deref(),
        stdio: [
            stdin_theirs.as_raw_fd(),
            stdout_theirs.as_raw_fd(),
            stderr_theirs.as_raw_fd(),
        ],
        err: 0,
    };
    let mut stack = vec![0u8; STACK_BYTES];
    let blocked = SigSet::all().thread_swap_mask(SigmaskHow::SIG_SETMASK)?;
    // SAFETY: CLONE_VM | CLONE_VFORK suspends this thread until the child execs or exits,
    // so `plan`, the strings it points into and `stack` outlive the child's use of them;
    // the child makes raw system calls only ([`child`]), with every signal blocked until
    // it has reset their handlers.
    #[allow(unsafe_code)]
    let pid = unsafe {
        nix::sched::clone(
            Box::new(|| child(&mut plan)),
            &mut stack,
            CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK,
            Some(libc::SIGCHLD),
        )
    };
    let _ = blocked.thread_set_mask();
    let pid = pid?;
    if plan.err != 0 {
        return Err(io::Error::from_raw_os_error(plan.err));
    }
    Ok(Child {
        pid: pid.as_raw(),
        stdin: stdin_ours,
        stdout: stdout_ours.into(),
        stderr: stderr_ours.into(),
    })
}

/// The child, until it execs: raw system calls on `plan` only (see the module docs).
#[allow(unsafe_code)]
fn child(plan: &mut Plan<'_>) -> isize {
    // SAFETY: each call is a plain libc system call wrapper on values `plan` holds alive.
    unsafe {
        let fail = |plan: &mut Plan<'_>| -> isize {
            plan.err = io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL);
            libc::_exit(127)
        };
        if libc::setpgid(0, 0) != 0 {
            return fail(plan);
        }
        for (target, fd) in plan.stdio.into_iter().enumerate() {
            let target = target as RawFd;
            let done = if fd == target {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, target)
            };
            if done < 0 {
                return fail(plan);
            }
        }
        if let Some(cwd) = plan.cwd
            && libc::chdir(cwd.as_ptr()) != 0
        {
            return fail(plan);
        }
        for sig in 1..=libc::SIGRTMAX() {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            let handled = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
            if handled || (sig == libc::SIGPIPE && old.sa_sigaction == libc::SIG_IGN) {
                let dfl: libc::sigaction = std::mem::zeroed();
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        let _ = open_session();
        libc::execve(plan.path.as_ptr(), plan.argv, plan.envp);
        fail(plan)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// Runs `argv` (its program found in /bin) to its end; its stdout, exit status and pid.
    fn run(argv: Vec<&str>, cwd: Option<&str>, env: Vec<(&str, &str)>) -> (String, i32, i32) {
        let path = Path::new("/bin").join(argv[0]);
        let child = spawn(&Command {
            path: &path,
            argv,
            cwd,
            env,
            stdin: false,
        })
        .unwrap();
        let mut out = String::new();
        std::fs::File::from(child.stdout)
            .read_to_string(&mut out)
            .unwrap();
        let pid = nix::unistd::Pid::from_raw(child.pid);
        let code = match nix::sys::wait::waitpid(pid, None).unwrap() {
            nix::sys::wait::WaitStatus::Exited(_, code) => code,
            other => panic!("{other:?}"),
        };
        (out, code, child.pid)
    }

    #[test]
    fn the_child_gets_its_argv_cwd_environment_group_and_default_signals() {
        let script = "echo \"$0 $1|$(pwd)|$A|$HOME_SET\"; echo \"$$ $(cut -d' ' -f5 /proc/$$/stat)\"; exit 7";
        let (out, code, pid) = run(
            vec!["sh", "-c", script, "zero", "one"],
            Some("/tmp"),
            vec![("A", "one=two"), ("HOME_SET", "x"), ("A", "three")],
        );
        assert_eq!(code, 7, "{out}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "zero one|/tmp|three|x", "{out}");
        assert_eq!(lines[1], format!("{pid} {pid}"), "its own process group");
        // Nothing blocked (a shell would clear its mask itself: grep does not), and
        // SIGPIPE (bit 13), which Rust's runtime ignores, is back to its default.
        let (out, code, _) = run(
            vec!["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"],
            None,
            Vec::new(),
        );
        assert_eq!(code, 0, "{out}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "SigBlk:\t0000000000000000", "{out}");
        let ignored = u64::from_str_radix(lines[1].trim_start_matches("SigIgn:\t"), 16).unwrap();
        assert_eq!(ignored & (1 << (libc::SIGPIPE - 1)), 0, "{out}");
    }

    /// Why starting `path` with `argv` in `cwd` failed.
    fn refusal(path: &Path, argv: Vec<&str>, cwd: Option<&str>) -> io::Error {
        spawn(&Command {
            path,
            argv,
            cwd,
            env: Vec::new(),
            stdin: false,
        })
        .unwrap_err()
    }

    #[test]
    fn an_exec_that_fails_is_an_error_and_nul_bytes_are_refused() {
        let dir = std::env::temp_dir().join(format!("msc-spawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("not-executable");
        std::fs::write(&file, "#!/bin/sh\necho hi\n").unwrap();
        let e = refusal(&file, vec!["x"], None);
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        let sh = Path::new("/bin/sh");
        let e = refusal(sh, vec!["sh", "-c", "true"], Some("/no/such/dir"));
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        let e = refusal(sh, vec!["sh", "-c", "echo \0"], None);
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
