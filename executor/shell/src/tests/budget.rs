//! Issue 19, finding 2: the budgets of a run (memory, argument list, deadline, nesting),
//! with the native fixture programs of the parent module.

#![allow(clippy::await_holding_lock)] // `serial()`: one test thread each, on purpose

use std::time::{Duration, Instant};

use super::*;
use crate::{Ended, Stop};

const MIB: usize = 1 << 20;

/// The tests of this file run one at a time: they are CPU-heavy, and the deadline checks
/// measure wall-clock time on a machine of two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `script` with `limits`; returns how it ended, stdout and stderr.
async fn run_with(script: &str, limits: Limits) -> (Ended, String, String) {
    let root = new_root();
    let out = Collect::default();
    let err = Collect::default();
    let io = Stdio {
        stdin: Box::new(tokio::io::empty()),
        stdout: Box::new(out.clone()),
        stderr: Box::new(err.clone()),
    };
    let mut c = cfg(&root, "/srv");
    c.limits = limits;
    let ended = run(script, c, io).await;
    (ended, out.text(), err.text())
}

fn memory(mib: usize) -> Limits {
    Limits {
        memory: mib * MIB,
        ..Limits::default()
    }
}

/// Runs `script` under a `mib` MiB budget and checks that the budget stopped it.
async fn out_of_memory(script: &str, mib: usize) -> String {
    let started = Instant::now();
    let (ended, out, err) = run_with(script, memory(mib)).await;
    assert_eq!(
        ended.stop,
        Some(Stop::Memory { limit: mib * MIB }),
        "{script}: {err}"
    );
    assert_eq!(ended.status, 137, "{script}");
    assert_eq!(
        err.lines().last(),
        Some(
            format!(
                "msc-shell: out of memory: the shell's values would exceed {mib} MiB \
                 (--wasm-shell-memory); write large data to a file instead"
            )
            .as_str()
        ),
        "{script}: {err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{script}");
    out
}

#[tokio::test]
async fn issue_19_doubling_a_variable_stops_at_the_budget() {
    let _serial = serial();
    let out = out_of_memory(
        "echo start; x=a; while true; do x=$x$x; done; echo never",
        8,
    )
    .await;
    assert_eq!(out, "start\n");
    // `+=` and `printf -v` grow through the same counter.
    out_of_memory("x=aaaaaaaa; while :; do x+=$x; done", 8).await;
    out_of_memory(
        "x=aaaaaaaa; while :; do printf -v x '%s%s' \"$x\" \"$x\"; done",
        8,
    )
    .await;
    // Below the budget nothing changes: 2 MiB doubled into 4 MiB fits in 8.
    let (ended, out, _) = run_with(
        "x=aaaaaaaa; for ((i=0; i<18; i++)); do x=$x$x; done; echo ${#x}",
        memory(8),
    )
    .await;
    assert_eq!(
        (ended.status, ended.stop, out.as_str()),
        (0, None, "2097152\n")
    );
}

#[tokio::test]
async fn issue_19_a_word_built_without_assignment_is_bounded() {
    let _serial = serial();
    // 1 MiB held; the word `$x` * 16 would be 16 MiB, built for `echo` only.
    let x = "x=aaaaaaaaaaaaaaaa; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do x=$x$x; done";
    let many = "$x".repeat(16);
    out_of_memory(&format!("{x}; echo {many} | wc-l"), 8).await;
    out_of_memory(&format!("{x}; echo \"{many}\" > /tmp/f"), 8).await;
    // Substitutions and here-documents count too.
    out_of_memory(&format!("{x}; y=${{x//a/$x}}"), 8).await;
    out_of_memory(&format!("{x}; cat <<EOF\n{many}\nEOF"), 8).await;
}

#[tokio::test]
async fn issue_19_a_large_capture_is_bounded() {
    let _serial = serial();
    // `yes` never ends: only the budget stops the capture.
    out_of_memory("x=$(yes)", 1).await;
    out_of_memory("x=\"$(yes | head -n 1000000)\"; echo no", 1).await;
    // A capture that fits is whole.
    let (ended, out, _) = run_with("x=$(yes | head -n 100000); echo ${#x}", memory(1)).await;
    assert_eq!((ended.status, out.as_str()), (0, "199999\n"));
}

#[tokio::test]
async fn issue_19_arrays_parameters_and_functions_are_counted() {
    let _serial = serial();
    let x = "x=aaaaaaaaaaaaaaaa; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do x=$x$x; done";
    // Arrays are flattened to one value here; their words count all the same.
    out_of_memory(&format!("{x}; a=($x $x $x $x $x $x $x $x $x $x)"), 8).await;
    // Positional parameters held by nested calls.
    out_of_memory(&format!("{x}; f() {{ f \"$@\" \"$1\"; }}; f $x"), 8).await;
    // Many variables.
    out_of_memory(
        &format!("{x}; i=0; while :; do i=$((i+1)); eval v$i='$x'; done"),
        8,
    )
    .await;
    // Many functions with big bodies.
    out_of_memory(
        &format!("{x}; i=0; while :; do i=$((i+1)); eval \"f$i() {{ echo '$x'; }}\"; done"),
        16,
    )
    .await;
}

#[tokio::test]
async fn issue_19_argument_lists_of_programs_are_bounded() {
    let _serial = serial();
    let x =
        "x=aaaaaaaaaaaaaaaa; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17; do x=$x$x; done";
    let (ended, _, err) = run_with(&format!("{x}; args $x; echo $?"), Limits::default()).await;
    assert_eq!(ended.status, 0, "{err}");
    assert!(
        err.starts_with("sh: args: argument list too long (2097")
            && err.contains("the limit is 2 MiB); pass large data through a file or stdin"),
        "{err}"
    );
    // An exported value counts as the environment of every program.
    let (_, out, err) = run_with(
        &format!("{x}; export x; args 1; echo $?"),
        Limits::default(),
    )
    .await;
    assert_eq!(out, "126\n", "{err}");
    // Builtins take the value whatever its size (bounded by the memory budget).
    let (ended, out, _) = run_with(&format!("{x}; echo \"$x\" | wc-l"), Limits::default()).await;
    assert_eq!((ended.status, out.trim()), (0, "1"));
}

#[tokio::test]
async fn issue_19_deep_recursion_is_a_clear_error() {
    let _serial = serial();
    let (ended, _, err) = run_with("f() { f; }; f; echo after", Limits::default()).await;
    assert_eq!((ended.status, ended.stop), (2, None));
    assert_eq!(err, "sh: maximum nesting depth exceeded\n");
    let (ended, _, err) = run_with("f() { echo $(f); }; f", Limits::default()).await;
    assert_eq!(ended.status, 2, "{err}");
    assert!(err.contains("maximum nesting depth exceeded"), "{err}");
}

/// Runs `script` with a deadline `ms` from now and checks it ends there.
async fn stops_at_deadline(script: &str, ms: u64) -> String {
    let started = Instant::now();
    let limits = Limits {
        deadline: Some(started + Duration::from_millis(ms)),
        ..Limits::default()
    };
    let (ended, out, err) = run_with(script, limits).await;
    let took = started.elapsed();
    assert_eq!(ended.stop, Some(Stop::Deadline), "{script}: {err}");
    assert_eq!(ended.status, 124, "{script}");
    assert!(took >= Duration::from_millis(ms), "{script}: {took:?}");
    assert!(
        took < Duration::from_millis(ms + 100),
        "{script} took {took:?}"
    );
    out
}

#[tokio::test]
async fn issue_19_busy_loops_stop_at_the_deadline() {
    let _serial = serial();
    let out = stops_at_deadline("echo before; while :; do :; done; echo never", 300).await;
    assert_eq!(out, "before\n");
    stops_at_deadline("until false; do true; done", 200).await;
    stops_at_deadline("for ((i=0; 1; i++)); do :; done", 200).await;
    stops_at_deadline(
        "for i in {1..9999}; do for j in {1..9999}; do :; done; done",
        300,
    )
    .await;
    stops_at_deadline(
        "f() { if [ $1 -gt 0 ]; then f $(($1 - 1)); fi; }; while :; do f 50; done",
        200,
    )
    .await;
    stops_at_deadline("while :; do x=$(echo a); done", 200).await;
    // A single quadratic expansion on a long value.
    stops_at_deadline(
        "x=ab; for ((i=0; i<17; i++)); do x=$x$x; done; y=${x//a*c/d}",
        300,
    )
    .await;
    // Background jobs stop too.
    stops_at_deadline("while :; do :; done & wait", 200).await;
}
