//! The WASM backend across servers (issue 46): what a later server says of a job whose
//! server stopped, `/proc` showing the computer's running jobs, and hostnames without the
//! team's key. Unit builds have no toolbox, so the jobs run a tiny hand-made WASI module
//! ([`READS_STDIN`]); the guest's view is read through the file tools, which mount what
//! the shell mounts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::engine::{Limits, Runtime};
use super::{Flavor, Source, Wasm, WasmError};
use crate::spec::{ExecSpec, JobPoll, JobStart};

/// A WASI command that reads its stdin once and exits 0: a job that runs until its stdin
/// is written or closed.
///
/// ```wat
/// (module
///   (import "wasi_snapshot_preview1" "fd_read"
///     (func $read (param i32 i32 i32 i32) (result i32)))
///   (memory (export "memory") 1)
///   (func (export "_start")
///     (i32.store (i32.const 0) (i32.const 16))  ;; iov.buf
///     (i32.store (i32.const 4) (i32.const 16))  ;; iov.len
///     (drop (call $read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))))
/// ```
const READS_STDIN: &[u8] = &[
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
    // types: (i32 i32 i32 i32) -> i32, () -> ()
    0x01, 0x0c, 0x02, 0x60, 0x04, 0x7f, 0x7f, 0x7f, 0x7f, 0x01, 0x7f, 0x60, 0x00, 0x00,
    // import wasi_snapshot_preview1.fd_read, type 0
    0x02, 0x22, 0x01, 0x16, b'w', b'a', b's', b'i', b'_', b's', b'n', b'a', b'p', b's', b'h', b'o',
    b't', b'_', b'p', b'r', b'e', b'v', b'i', b'e', b'w', b'1', 0x07, b'f', b'd', b'_', b'r', b'e',
    b'a', b'd', 0x00, 0x00, // function 1: type 1
    0x03, 0x02, 0x01, 0x01, // memory: min 1 page
    0x05, 0x03, 0x01, 0x00, 0x01, // exports: memory 0, _start = function 1
    0x07, 0x13, 0x02, 0x06, b'm', b'e', b'm', b'o', b'r', b'y', 0x02, 0x00, 0x06, b'_', b's', b't',
    b'a', b'r', b't', 0x00, 0x01, // code
    0x0a, 0x1d, 0x01, 0x1b, 0x00, 0x41, 0x00, 0x41, 0x10, 0x36, 0x02, 0x00, 0x41, 0x04, 0x41, 0x10,
    0x36, 0x02, 0x00, 0x41, 0x00, 0x41, 0x00, 0x41, 0x01, 0x41, 0x08, 0x10, 0x00, 0x1a, 0x0b,
];

/// An instance id no system hands out: a server that stopped.
const STOPPED: &str = "4194304999-1";

fn state_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("msc-wasm-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A server over `state` whose process is `instance`.
fn server(state: &Path, instance: &str) -> Wasm {
    let runtime = Runtime::new(
        Limits {
            max_memory: 16 << 20,
            fuel: None,
        },
        state.join("cache"),
    )
    .unwrap();
    Wasm::new(
        Flavor::Custom("reads-stdin".into()),
        runtime,
        Source::Owned(Arc::new(READS_STDIN.to_vec())),
        state,
        instance.into(),
        "test-host".into(),
    )
    .unwrap()
}

fn spec(command: &str) -> ExecSpec {
    ExecSpec {
        argv: Vec::new(),
        shell_command: Some((None, command.into())),
        stdin: None,
        working_directory: None,
        timeout: Duration::from_secs(120),
        output_limit: 1 << 20,
        env: Vec::new(),
        progress: Default::default(),
    }
}

fn poll() -> JobPoll {
    JobPoll {
        stdin: None,
        close_stdin: false,
        signal: None,
        wait_ms: 0,
        until_exit: false,
        max_bytes: 1 << 20,
        peek: true,
    }
}

async fn start(w: &Wasm, id: &str, job_id: &str, command: &str) {
    let job = JobStart {
        job_id: job_id.into(),
        command: command.into(),
    };
    w.job_start(id, &spec(command), &job).await.unwrap();
}

/// What the computer's guest reads at `path` (`None`: no such file).
async fn guest_read(w: &Wasm, id: &str, path: &str) -> Option<Vec<u8>> {
    w.file_read(id, path, 0, 1 << 20).await.ok().map(|s| s.data)
}

/// The numbered entries of the computer's `/proc`.
fn proc_numbers(state: &Path, id: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(state.join("wasm").join(id).join("proc"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn issue_46_a_job_of_a_server_that_stopped_is_told_so_not_never_existed() {
    let state = state_dir();
    let first = server(&state, STOPPED);
    first.create("box", false, None).await.unwrap();
    start(&first, "box", "job-running", "sleep 600").await;
    start(&first, "box", "job-exited", "make all").await;
    // The second job's command ends (its stdin closes); its output is not read.
    let close = JobPoll {
        close_stdin: true,
        ..poll()
    };
    let mut out = first.job_poll("box", "job-exited", &close).await.unwrap();
    for _ in 0..200 {
        if !out.running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        out = first.job_poll("box", "job-exited", &poll()).await.unwrap();
    }
    assert!(!out.running && out.exit_code == Some(0), "{out:?}");

    // A later server (this live process) over the same state directory.
    let later = server(&state, &crate::instance::current());
    let told = |e: WasmError| match e {
        WasmError::JobGone(m) => m,
        other => panic!("not told what became of the job: {other}"),
    };
    let running = told(
        later
            .job_poll("box", "job-running", &poll())
            .await
            .unwrap_err(),
    );
    assert!(
        running.contains("ended when the server process that ran it stopped")
            && running.contains("sleep 600")
            && !running.contains("never existed"),
        "{running}"
    );
    let exited = told(
        later
            .job_poll("box", "job-exited", &poll())
            .await
            .unwrap_err(),
    );
    assert!(
        exited.contains("exited with status 0") && exited.contains("make all"),
        "{exited}"
    );
    // Told once, like an exit: then the job is unknown.
    let again = later
        .job_poll("box", "job-running", &poll())
        .await
        .unwrap_err();
    assert!(matches!(again, WasmError::NoSuchJob(_)), "{again}");
    // Never told to another computer (its own directory holds the markers).
    later.create("other", false, None).await.unwrap();
    let other = later.job_poll("other", "job-exited", &poll()).await;
    assert!(matches!(other, Err(WasmError::NoSuchJob(_))), "{other:?}");

    // A job of a live server process sharing the directory is not said to have ended.
    start(&later, "box", "job-live", "tail -f /tmp/log").await;
    let third = server(&state, "4194304998-1");
    let live = told(
        third
            .job_poll("box", "job-live", &poll())
            .await
            .unwrap_err(),
    );
    assert!(live.contains("another server process"), "{live}");
    // Reading its end forgets its marker.
    let close = JobPoll {
        close_stdin: true,
        wait_ms: 5_000,
        until_exit: true,
        peek: false,
        ..poll()
    };
    let end = later.job_poll("box", "job-live", &close).await.unwrap();
    assert!(!end.running, "{end:?}");
    assert!(super::marks::all(&state.join("wasm/box")).is_empty());
    std::fs::remove_dir_all(&state).unwrap();
}

#[tokio::test]
async fn issue_46_running_jobs_show_in_the_computers_proc_only() {
    let state = state_dir();
    let w = server(&state, &crate::instance::current());
    w.create("box", false, None).await.unwrap();
    w.create("other", false, None).await.unwrap();
    start(&w, "box", "job-a", "sleep 30 && echo done").await;
    assert_eq!(
        guest_read(&w, "box", "/proc/2/cmdline").await.as_deref(),
        Some(&b"sh\0-c\0sleep 30 && echo done\0"[..])
    );
    let status = guest_read(&w, "box", "/proc/2/status").await.unwrap();
    let status = String::from_utf8(status).unwrap();
    assert!(
        status.contains("Name:\tsh\n") && status.contains("\nPid:\t2\n"),
        "{status}"
    );
    assert!(guest_read(&w, "box", "/proc/2/stat").await.is_some());
    assert!(guest_read(&w, "box", "/proc/meminfo").await.is_some());
    assert_eq!(proc_numbers(&state, "box"), ["2"]);
    // Another computer of the same server shows none of it.
    assert!(guest_read(&w, "other", "/proc/2/cmdline").await.is_none());
    assert!(proc_numbers(&state, "other").is_empty());
    // Read-only to the guest, as on Linux.
    let write = crate::spec::FileWriteSpec {
        path: "/proc/2/cmdline",
        data: b"x",
        append: false,
        create_only: false,
        mode: None,
        make_dirs: false,
    };
    assert!(w.file_write("box", &write).await.is_err());

    // A job that ends leaves /proc.
    let close = JobPoll {
        close_stdin: true,
        wait_ms: 5_000,
        until_exit: true,
        peek: false,
        ..poll()
    };
    assert!(!w.job_poll("box", "job-a", &close).await.unwrap().running);
    assert!(proc_numbers(&state, "box").is_empty());
    // A restart ends the jobs: they leave /proc.
    start(&w, "box", "job-b", "sleep 1").await;
    assert_eq!(proc_numbers(&state, "box"), ["2"]);
    w.restart("box").await.unwrap();
    assert!(proc_numbers(&state, "box").is_empty());

    // The entries a stopped server left are swept by the next one's first use.
    let gone = server(&state, STOPPED);
    start(&gone, "box", "job-c", "sleep 600").await;
    let later = server(&state, &crate::instance::current());
    assert!(guest_read(&later, "box", "/proc/2/cmdline").await.is_none());
    assert!(proc_numbers(&state, "box").is_empty());
    std::fs::remove_dir_all(&state).unwrap();
}

#[tokio::test]
async fn issue_46_a_teams_wasm_hostname_is_the_callers_id_not_its_key() {
    let state = state_dir();
    let w = server(&state, &crate::instance::current());
    let key = shared::teams::key(Some("team-a"), "build-box");
    w.create(&key, false, Some("team-a")).await.unwrap();
    assert_eq!(
        guest_read(&w, &key, "/etc/hostname").await.as_deref(),
        Some(&b"build-box\n"[..])
    );
    assert!(
        !String::from_utf8(guest_read(&w, &key, "/etc/hosts").await.unwrap())
            .unwrap()
            .contains(&shared::teams::prefix("team-a"))
    );
    w.factory_reset(&key).await.unwrap();
    assert_eq!(
        guest_read(&w, &key, "/etc/hostname").await.as_deref(),
        Some(&b"build-box\n"[..])
    );
    // A computer an older version named by its key is renamed by a server's first use.
    std::fs::write(
        state.join("wasm").join(&key).join("etc/hostname"),
        format!("{key}\n"),
    )
    .unwrap();
    let later = server(&state, &crate::instance::current());
    assert_eq!(
        guest_read(&later, &key, "/etc/hostname").await.as_deref(),
        Some(&b"build-box\n"[..])
    );
    std::fs::remove_dir_all(&state).unwrap();
}
