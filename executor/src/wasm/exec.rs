//! One command on a WASM computer ([`Wasm::exec`]): the host shell over the toolbox (each
//! simple command a fresh instance, `Toolbox` as the shell's programs) or one instance
//! of a custom module; the timeout and output limit around the whole command, and SIGPIPE
//! emulation (141, silent stderr). Also the toolbox's `--list` at load time.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use msc_shell::{Input, Limits, Output, Programs, ShellConfig, Stdio, Stop};
use shared::result::{ExecOutcome, Stream, TIMEOUT_EXIT_CODE};

use super::capture::Capture;
use super::engine::{Exit, Mount, NotRunnable, Program, Run};
use super::{Flavor, Wasm, WasmError};
use crate::spec::ExecSpec;

impl Wasm {
    /// Runs one command on computer `id`.
    pub async fn exec(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, WasmError> {
        let started = Instant::now();
        let capture = Capture::new(spec.output_limit, spec.progress.clone());
        let stdin: Input = match &spec.stdin {
            Some(s) => Box::new(std::io::Cursor::new(s.clone().into_bytes())),
            None => Box::new(tokio::io::empty()),
        };
        let io = Stdio {
            stdin,
            stdout: Box::new(capture.writer(Stream::Stdout)) as Output,
            stderr: Box::new(capture.writer(Stream::Stderr)) as Output,
        };
        let outcome = tokio::select! {
            code = self.run_command(id, spec, io, started, true) => code?,
            () = capture.limit_hit() => Some(128 + 9),
        };
        let (stdout, stderr, truncated) = capture.take();
        let timed_out = outcome.is_none();
        let exit_code = match outcome {
            None => TIMEOUT_EXIT_CODE,
            Some(_) if truncated => 128 + 9,
            Some(code) => i64::from(code),
        };
        Ok(ExecOutcome {
            stdout,
            stderr,
            exit_code,
            duration_ms: started.elapsed().as_millis() as u64,
            truncated_at: truncated.then_some(spec.output_limit as u64),
            timed_out_after: timed_out.then_some(spec.timeout.as_secs()),
            oom_killed: false,
        })
    }

    /// Runs `spec` on computer `id` with `io` until it ends (its status) or its timeout,
    /// counted from `started`, passes (`None`). With `keep_jobs`, its `&` jobs still
    /// running at the end stay in the computer's table for later calls (a foreground
    /// call); without, they end with it (a kept job: a signal ends its whole tree).
    pub(super) async fn run_command(
        &self,
        id: &str,
        spec: &ExecSpec,
        io: Stdio,
        started: Instant,
        keep_jobs: bool,
    ) -> Result<Option<i32>, WasmError> {
        let loaded = self.program().await?;
        let fs = self.computer_dir(id).join("fs");
        if !fs.is_dir() {
            return Err(WasmError::NotFound(id.to_owned()));
        }
        let cwd = spec
            .working_directory
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "/".into());
        // The first use by this server brings the computer up to date (a lookup after).
        self.prepare(id).await?;
        let base = super::base::mounts(&loaded.base, &self.computer_dir(id));
        let shell_mounts = base
            .iter()
            .map(|m| (m.guest.clone(), m.host.clone()))
            .collect();
        let mut mounts = vec![Mount {
            host: fs.clone(),
            guest: "/".into(),
            writable: true,
        }];
        mounts.extend(base);
        let work = async {
            match &self.flavor {
                Flavor::Toolbox => {
                    let programs = Arc::new(Toolbox {
                        program: loaded.program.clone(),
                        names: loaded.names.clone(),
                        mounts,
                        python: self.python.is_some().then(|| self.clone()),
                        python_mount: super::base::python_mount(&loaded.base),
                    });
                    let script = match &spec.shell_command {
                        Some((_, command)) => command.clone(),
                        None => quote_argv(&spec.argv),
                    };
                    // The shell keeps the deadline itself (issue 19): a busy script stops on
                    // time even where it never waits; the timeout below stays the backstop.
                    let cfg = ShellConfig {
                        root: fs.clone(),
                        cwd: cwd.clone(),
                        env: call_env(&spec.env),
                        programs,
                        mounts: shell_mounts,
                        jobs: keep_jobs.then(|| self.jobs_of(id)),
                        limits: Limits {
                            memory: self.shell_memory,
                            deadline: started.checked_add(spec.timeout),
                            ..Limits::default()
                        },
                    };
                    let ended = msc_shell::run(&script, cfg, io).await;
                    // A deadline the shell noticed is the timeout, as if it had fired here.
                    (ended.stop != Some(Stop::Deadline)).then_some(ended.status)
                }
                Flavor::Custom(name) => {
                    if !guest_dir_exists(&fs, &cwd) {
                        use tokio::io::AsyncWriteExt;
                        let mut err = io.stderr;
                        let msg = format!("cd: {cwd}: No such file or directory\n");
                        let _ = err.write_all(msg.as_bytes()).await;
                        return Some(126);
                    }
                    let argv = match &spec.shell_command {
                        Some((_, command)) => vec![name.clone(), "-c".into(), command.clone()],
                        None => std::iter::once(name.clone())
                            .chain(spec.argv.iter().skip(1).cloned())
                            .collect(),
                    };
                    let mut env = call_env(&spec.env);
                    env.retain(|(k, _)| k != "PWD");
                    env.push(("PWD".into(), cwd.clone()));
                    Some(run_one(&loaded.program, argv, env, mounts, io).await)
                }
            }
        };
        let left = spec.timeout.saturating_sub(started.elapsed());
        Ok(tokio::time::timeout(left, work).await.ok().flatten())
    }
}

/// The environment every command starts with (no server variables ever reach a guest).
fn base_env() -> Vec<(String, String)> {
    [
        ("HOME", "/root"),
        ("LANG", "C.UTF-8"),
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("SHELL", "/bin/sh"),
        ("USER", "root"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// The base environment with the call's own variables (SPEC §3.10) on top: a name given
/// replaces the base value, in place.
fn call_env(extra: &[(String, String)]) -> Vec<(String, String)> {
    let mut env = base_env();
    for (k, v) in extra {
        match env.iter_mut().find(|(name, _)| name == k) {
            Some(slot) => slot.1 = v.clone(),
            None => env.push((k.clone(), v.clone())),
        }
    }
    env
}

/// Is `dir` (an absolute guest path) a directory inside the computer `fs`? Checked through
/// cap-std, so neither `..` nor a symlink can look outside.
fn guest_dir_exists(fs: &Path, dir: &str) -> bool {
    let rel = dir.trim_start_matches('/');
    let Ok(root) = cap_std::fs::Dir::open_ambient_dir(fs, cap_std::ambient_authority()) else {
        return false;
    };
    rel.is_empty() || root.is_dir(rel)
}

/// `argv` as one shell command line (each word single-quoted when needed).
fn quote_argv(argv: &[String]) -> String {
    argv.iter()
        .enumerate()
        .map(|(i, a)| {
            if !(a.is_empty() || i == 0 && a.contains('='))
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs one instance and turns how it ended into an exit status (with a reason on stderr).
///
/// A write to a closed pipe ends the program like SIGPIPE does in a real shell: status
/// 141, and what it writes to stderr afterwards (its "I/O error" message) is dropped.
async fn run_one(
    program: &Program,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    mounts: Vec<Mount>,
    io: Stdio,
) -> i32 {
    use tokio::io::AsyncWriteExt;
    let Stdio {
        stdin,
        stdout,
        stderr,
    } = io;
    let broken = Arc::new(AtomicBool::new(false));
    // stderr is shared between the program and our notice: keep a handle for the notice.
    let stderr = Arc::new(tokio::sync::Mutex::new(stderr));
    let exit = program
        .run(Run {
            argv,
            env,
            mounts,
            stdin,
            stdout: Box::new(PipeOut {
                inner: stdout,
                broken: broken.clone(),
            }),
            stderr: Box::new(ErrOut {
                inner: stderr.clone(),
                broken: broken.clone(),
            }),
        })
        .await;
    if broken.load(Ordering::Relaxed) {
        return 128 + 13;
    }
    let (code, note) = match exit {
        Ok(Exit::Code(c)) => (c, None),
        Ok(Exit::OutOfFuel) => (
            128 + 9,
            Some("wasm: the program ran out of fuel (--wasm-fuel)".to_owned()),
        ),
        Ok(Exit::OutOfMemory) => (
            128 + 9,
            Some("wasm: the program reached the memory limit (--wasm-max-memory)".to_owned()),
        ),
        Ok(Exit::Trap) => (
            128 + 6,
            Some("wasm: the program crashed (a WebAssembly trap)".to_owned()),
        ),
        Err(e) => (126, Some(format!("wasm: cannot start the program: {e}"))),
    };
    if let Some(note) = note {
        let mut w = stderr.lock().await;
        let _ = w.write_all(format!("{note}\n").as_bytes()).await;
    }
    code
}

/// A program's stdout that notes a closed pipe.
struct PipeOut {
    inner: Output,
    broken: Arc<AtomicBool>,
}

impl tokio::io::AsyncWrite for PipeOut {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Err(e)) = &r
            && e.kind() == std::io::ErrorKind::BrokenPipe
        {
            self.broken.store(true, Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A program's stderr, shared with the host's notice; silent once stdout's pipe closed.
struct ErrOut {
    inner: Arc<tokio::sync::Mutex<Output>>,
    broken: Arc<AtomicBool>,
}

impl tokio::io::AsyncWrite for ErrOut {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.broken.load(Ordering::Relaxed) {
            return std::task::Poll::Ready(Ok(buf.len()));
        }
        match self.inner.try_lock() {
            Ok(mut w) => std::pin::Pin::new(&mut **w).poll_write(cx, buf),
            Err(_) => {
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.inner.try_lock() {
            Ok(mut w) => std::pin::Pin::new(&mut **w).poll_flush(cx),
            Err(_) => {
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// CPython's argv and environment for a `python3` command: [`super::base::PYTHON_HELPER`]
/// first on `PYTHONPATH` (its `sitecustomize` enters `$PWD`), and a relative script path
/// made absolute against `$PWD` (CPython makes it absolute before any Python code runs,
/// and WASI starts every instance in `/`).
fn python_call(
    mut argv: Vec<String>,
    mut env: Vec<(String, String)>,
) -> (Vec<String>, Vec<(String, String)>) {
    let cwd = env
        .iter()
        .find(|(k, _)| k == "PWD")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "/".into());
    if let Some(i) = python_script_index(&argv)
        && !argv[i].starts_with('/')
    {
        let script = argv[i].trim_start_matches("./");
        argv[i] = format!("{}/{script}", cwd.trim_end_matches('/'));
    }
    let helper = super::base::PYTHON_HELPER;
    match env.iter_mut().find(|(k, _)| k == "PYTHONPATH") {
        Some((_, v)) if !v.is_empty() => *v = format!("{helper}:{v}"),
        Some((_, v)) => *v = helper.to_owned(),
        None => env.push(("PYTHONPATH".into(), helper.to_owned())),
    }
    (argv, env)
}

/// The index of the script operand in a `python3` argv, if it runs one (not `-c`, `-m`,
/// `-` or stdin). Options that take a value: `-c -m -W -X --check-hash-based-pycs`.
fn python_script_index(argv: &[String]) -> Option<usize> {
    let mut i = 1;
    while i < argv.len() {
        let a = &argv[i];
        if a == "--" {
            return (i + 1 < argv.len()).then_some(i + 1);
        }
        if a == "-" {
            return None;
        }
        if let Some(long) = a.strip_prefix("--") {
            if long == "check-hash-based-pycs" {
                i += 1;
            }
            i += 1;
            continue;
        }
        let Some(flags) = a.strip_prefix('-') else {
            return Some(i);
        };
        for (k, c) in flags.char_indices() {
            match c {
                'c' | 'm' => return None,
                'W' | 'X' => {
                    if k + 1 == flags.len() {
                        i += 1;
                    }
                    break;
                }
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// Asks the toolbox for its utilities (`msc-toolbox --list`).
pub(super) async fn list_utilities(
    program: &Program,
    dev: &Path,
) -> Result<std::collections::BTreeSet<String>, NotRunnable> {
    let capture = Capture::new(1 << 20, Default::default());
    let exit = program
        .run(Run {
            argv: vec!["msc-toolbox".into(), "--list".into()],
            env: Vec::new(),
            mounts: vec![Mount {
                host: dev.to_path_buf(),
                guest: "/dev".into(),
                writable: false,
            }],
            stdin: Box::new(tokio::io::empty()),
            stdout: Box::new(capture.writer(Stream::Stdout)),
            stderr: Box::new(capture.writer(Stream::Stderr)),
        })
        .await?;
    let (out, err, _) = capture.take();
    if exit != Exit::Code(0) {
        return Err(NotRunnable(format!(
            "the toolbox did not list its utilities ({exit:?}): {}",
            String::from_utf8_lossy(&err)
        )));
    }
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// The toolbox as the shell's external programs (and `python3` when configured).
struct Toolbox {
    program: Program,
    names: Arc<std::collections::BTreeSet<String>>,
    mounts: Vec<Mount>,
    /// The backend, to load `python3`'s module on first use (`None`: no python).
    python: Option<Wasm>,
    /// CPython's extra mount (its `sitecustomize`).
    python_mount: Mount,
}

impl Toolbox {
    fn is_python(&self, name: &str) -> bool {
        self.python.is_some() && super::PYTHON_NAMES.contains(&name)
    }
}

impl Programs for Toolbox {
    fn has(&self, name: &str) -> bool {
        self.names.contains(name) || self.is_python(name)
    }

    fn run<'a>(
        &'a self,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: String,
        io: Stdio,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = i32> + Send + 'a>> {
        Box::pin(async move {
            let mut env = env;
            env.retain(|(k, _)| k != "PWD");
            env.push(("PWD".into(), cwd));
            let python = match &self.python {
                Some(w) if argv.first().is_some_and(|a| self.is_python(a)) => {
                    w.python_program().await
                }
                _ => None,
            };
            match python {
                None => run_one(&self.program, argv, env, self.mounts.clone(), io).await,
                Some(Ok(program)) => {
                    let (argv, env) = python_call(argv, env);
                    let mut mounts = self.mounts.clone();
                    mounts.push(self.python_mount.clone());
                    run_one(&program, argv, env, mounts, io).await
                }
                Some(Err(e)) => {
                    use tokio::io::AsyncWriteExt;
                    let mut err = io.stderr;
                    let msg = format!("python3: the CPython module cannot be loaded: {e}\n");
                    let _ = err.write_all(msg.as_bytes()).await;
                    126
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn python_scripts_are_found_in_argv() {
        for (argv, want) in [
            (v(&["python3", "s.py", "a"]), Some(1)),
            (v(&["python3", "-u", "-B", "s.py"]), Some(3)),
            (v(&["python3", "-uB", "s.py", "-c"]), Some(2)),
            (v(&["python3", "-W", "ignore", "s.py"]), Some(3)),
            (v(&["python3", "-Wignore", "-X", "utf8", "s.py"]), Some(4)),
            (
                v(&["python3", "--check-hash-based-pycs", "never", "s.py"]),
                Some(3),
            ),
            (v(&["python3", "--", "-s.py"]), Some(2)),
            (v(&["python3", "-c", "print(1)", "x.py"]), None),
            (v(&["python3", "-uc", "print(1)"]), None),
            (v(&["python3", "-m", "json.tool", "f"]), None),
            (v(&["python3", "-"]), None),
            (v(&["python3"]), None),
            (v(&["python3", "-W"]), None),
        ] {
            assert_eq!(python_script_index(&argv), want, "{argv:?}");
        }
    }

    #[test]
    fn python_calls_get_the_helper_and_absolute_scripts() {
        let env = vec![("PWD".to_owned(), "/root/d".to_owned())];
        let (argv, env2) = python_call(v(&["python3", "./s.py", "x"]), env.clone());
        assert_eq!(argv, v(&["python3", "/root/d/s.py", "x"]));
        assert!(env2.contains(&("PYTHONPATH".into(), "/usr/lib/msc-python".into())));
        let (argv, _) = python_call(v(&["python3", "/abs.py"]), env.clone());
        assert_eq!(argv, v(&["python3", "/abs.py"]));
        let mut env3 = env;
        env3.push(("PYTHONPATH".into(), "/lib/mine".into()));
        let (_, env3) = python_call(v(&["python3", "-c", "1"]), env3);
        assert!(env3.contains(&("PYTHONPATH".into(), "/usr/lib/msc-python:/lib/mine".into())));
        let (argv, _) = python_call(v(&["python3", "t.py"]), vec![("PWD".into(), "/".into())]);
        assert_eq!(argv, v(&["python3", "/t.py"]));
    }

    #[test]
    fn argv_is_quoted_for_the_shell() {
        let argv: Vec<String> = ["echo", "a b", "it's", "", "x=1"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(quote_argv(&argv), r#"echo 'a b' 'it'\''s' '' x=1"#);
    }
}
