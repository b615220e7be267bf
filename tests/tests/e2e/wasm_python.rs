//! Issue 16: `python3` on WASM toolbox computers (`--wasm-python`, the CPython 3.12 WASI
//! module scripts/setup takes from PyPI): the standard library, stdin and pipes, files in
//! the computer's filesystem, the working directory, `env`, exit statuses, shebang
//! scripts, `/usr/bin/python3`, the timeout; refused start-up with a bad module; without
//! one, `python3` is not found and the description says so.

use std::time::{Duration, Instant};

use serde_json::json;
use tests::*;

async fn client(name: &str) -> anyhow::Result<Client> {
    let t = tag(name);
    stdio_client(&t, &state_dir(&t), &python_opts()).await
}

#[tokio::test]
async fn issue_16_python3_runs_with_the_standard_library() -> anyhow::Result<()> {
    let c = client("py-std").await?;
    expect(&c, "python3 -c 'print(1)'", "1\n", 0).await?;
    expect(
        &c,
        "python3 -c 'import sys; print(sys.version_info[:2], sys.platform)'",
        "(3, 12) wasi\n",
        0,
    )
    .await?;
    expect(&c, "python -c 'print(\"also python\")'", "also python\n", 0).await?;
    let script = r##"
import json, re, hashlib, sqlite3, base64, datetime, collections
db = sqlite3.connect(":memory:")
db.execute("create table t (x)")
db.executemany("insert into t values (?)", [(1,), (2,), (3,)])
total = db.execute("select sum(x) from t").fetchone()[0]
print(json.dumps({"sum": total, "re": re.sub(r"\d", "#", "a1b2"),
    "sha": hashlib.sha256(b"abc").hexdigest()[:8], "b64": base64.b64encode(b"hi").decode()}))
"##;
    let r = exec(&c, json!({"command": "python3", "stdin": script})).await?;
    assert_eq!(
        r["stdout"], "{\"sum\": 6, \"re\": \"a#b#\", \"sha\": \"ba7816bf\", \"b64\": \"aGk=\"}\n",
        "{r}"
    );
    assert_eq!(r["exit_code"], 0, "{r}");
    // Exit statuses and errors as CPython gives them.
    expect(&c, "python3 -c 'import sys; sys.exit(3)'", "", 3).await?;
    let r = sh(&c, "python3 -c 'raise ValueError(\"boom\")'").await?;
    assert_eq!(r["exit_code"], 1, "{r}");
    assert!(
        r["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("ValueError: boom"),
        "{r}"
    );
    // It is in /usr/bin like any program.
    expect(
        &c,
        "test -x /usr/bin/python3 && test -x /bin/python && command -v python3 && which python",
        "python3\n/usr/bin/python\n",
        0,
    )
    .await?;
    expect(&c, "/usr/bin/python3 -c 'print(2)'", "2\n", 0).await?;
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_16_python3_stdin_pipes_files_and_cwd() -> anyhow::Result<()> {
    let c = client("py-io").await?;
    // stdin from a pipe and from the call; output into a pipe.
    expect(
        &c,
        "printf 'b\\na\\nc\\n' | python3 -c 'import sys; print(\",\".join(sorted(sys.stdin.read().split())))' | tr a-z A-Z",
        "A,B,C\n",
        0,
    )
    .await?;
    let r = exec(
        &c,
        json!({"command": "python3 -c 'import sys; print(len(sys.stdin.buffer.read()))'", "stdin": "héllo"}),
    )
    .await?;
    assert_eq!(r["stdout"], "6\n", "{r}");
    // Files written by python are the computer's files, and the other way round.
    expect(
        &c,
        "python3 -c 'open(\"/root/p.txt\", \"w\").write(\"from python é\\n\")' && cat /root/p.txt",
        "from python é\n",
        0,
    )
    .await?;
    expect(
        &c,
        "printf 'x\\0y' > /tmp/b.bin && python3 -c 'print(open(\"/tmp/b.bin\", \"rb\").read())'",
        "b'x\\x00y'\n",
        0,
    )
    .await?;
    expect(
        &c,
        "python3 -c 'import os; os.makedirs(\"/root/d/e\"); print(sorted(os.listdir(\"/root\")))'",
        "['d', 'p.txt']\n",
        0,
    )
    .await?;
    // The working directory: `cd`, `working_directory`, relative paths.
    expect(
        &c,
        "cd /tmp && python3 -c 'import os; print(os.getcwd()); print(open(\"b.bin\", \"rb\").read(1))'",
        "/tmp\nb'x'\n",
        0,
    )
    .await?;
    let r = exec(
        &c,
        json!({"command": "python3 -c 'open(\"rel.txt\", \"w\").write(\"r\")' && cat /root/d/rel.txt",
            "working_directory": "/root/d"}),
    )
    .await?;
    assert_eq!(r["stdout"], "r", "{r}");
    // Variables from the shell and from the call's `env`; no server variable.
    let r = exec(
        &c,
        json!({"command": "X=shell python3 -c 'import os; print(os.environ[\"X\"], os.environ[\"Y\"], os.environ[\"HOME\"])'",
            "env": {"Y": "call"}}),
    )
    .await?;
    assert_eq!(r["stdout"], "shell call /root\n", "{r}");
    let r = sh(&c, "python3 -c 'import os; print(sorted(os.environ))'").await?;
    let names = r["stdout"].as_str().unwrap_or_default();
    for secret in ["MSC_", "CARGO", "RUST_LOG", "KILNTAINERS"] {
        assert!(!names.contains(secret), "{secret} reached python: {names}");
    }
    // No way out of the computer's filesystem.
    let r = sh(
        &c,
        "python3 -c 'import os\ntry: os.listdir(\"/../../..\")\nexcept PermissionError: print(\"refused\")'",
    )
    .await?;
    assert_eq!(r["stdout"], "refused\n", "{r}");
    let r = sh(&c, "python3 -c 'open(\"/etc/passwd\", \"a\").write(\"x\")'").await?;
    assert_eq!(r["exit_code"], 1, "the read-only base was written: {r}");
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_16_python3_scripts_and_timeouts() -> anyhow::Result<()> {
    let c = client("py-script").await?;
    sh(
        &c,
        "printf '#!/usr/bin/env python3\\nimport sys\\nprint(\"args\", sys.argv[1:])\\n' > /root/s.py",
    )
    .await?;
    expect(&c, "/root/s.py a", "", 126).await?;
    expect(
        &c,
        "chmod +x /root/s.py && /root/s.py a 'b c'",
        "args ['a', 'b c']\n",
        0,
    )
    .await?;
    expect(&c, "cd /root && ./s.py x", "args ['x']\n", 0).await?;
    expect(&c, "python3 /root/s.py y", "args ['y']\n", 0).await?;
    sh(
        &c,
        "printf '#!/usr/bin/python3\\nprint(\"direct\")\\n' > /root/t.py; chmod +x /root/t.py",
    )
    .await?;
    expect(&c, "/root/t.py", "direct\n", 0).await?;
    // A busy loop in python stops at the call's timeout, output so far kept.
    let started = Instant::now();
    let r = exec(
        &c,
        json!({"command": "python3 -u -c 'print(\"before\")\nwhile True: pass'", "timeout": 2}),
    )
    .await?;
    assert_eq!(r["timed_out"], true, "{r}");
    assert_eq!(r["exit_code"], 124, "{r}");
    assert_eq!(r["stdout"], "before\n", "{r}");
    assert!(started.elapsed() < Duration::from_secs(6), "{r}");
    // The computer answers at once afterwards.
    expect(&c, "python3 -c 'print(\"next\")'", "next\n", 0).await?;
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_16_python3_configuration() -> anyhow::Result<()> {
    // Configured: the description says so.
    let c = client("py-desc").await?;
    let d = c.list_all_tools().await?[0]
        .description
        .clone()
        .unwrap_or_default();
    assert!(
        d.contains("`python3` (also `python`) is CPython 3.12"),
        "{d}"
    );
    assert!(!d.contains("no interpreters such as python"), "{d}");
    c.cancel().await?;
    // Without a module: not found, and the description says there is no python.
    let t = tag("py-none");
    let c = stdio_client(&t, &state_dir(&t), &wasm_opts()).await?;
    let d = c.list_all_tools().await?[0]
        .description
        .clone()
        .unwrap_or_default();
    assert!(d.contains("no interpreters such as python"), "{d}");
    expect(
        &c,
        "python3 -c 1; test -e /usr/bin/python3; echo $?",
        "1\n",
        0,
    )
    .await?;
    let r = sh(&c, "python3 -c 1").await?;
    assert_eq!(r["exit_code"], 127, "{r}");
    c.cancel().await?;
    // Found in the state directory, without the flag.
    let t = tag("py-state");
    let state = state_dir(&t);
    std::fs::create_dir_all(&state)?;
    std::os::unix::fs::symlink(python_wasm(), state.join("python.wasm"))?;
    let c = stdio_client(&t, &state, &wasm_opts()).await?;
    expect(&c, "python3 -c 'print(3)'", "3\n", 0).await?;
    c.cancel().await?;
    // A bad module is refused at start-up, with what to do.
    let t = tag("py-bad");
    let state = state_dir(&t);
    std::fs::create_dir_all(&state)?;
    let bad = state.join("not.wasm");
    std::fs::write(&bad, b"print(1)\n")?;
    for path in [bad.clone(), state.join("missing.wasm")] {
        let opts = wasm_opts()
            .arg("--wasm-python")
            .arg(&path.to_string_lossy());
        let out = command(&t, &state, &opts)
            .stdin(std::process::Stdio::null())
            .output()
            .await?;
        assert_eq!(out.status.code(), Some(2), "{path:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--wasm-python") && err.contains("CPython WASI module"),
            "{err}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn issue_16_python3_as_a_job_reads_stdin_as_it_comes() -> anyhow::Result<()> {
    let t = tag("py-job");
    let c = stdio_client(&t, &state_dir(&t), &python_opts().arg("--tools=jobs")).await?;
    let r = exec(
        &c,
        json!({"command": "python3 -u -c 'import sys\nprint(\"ready\")\nfor l in sys.stdin: print(\"py\", l.strip().upper())\nprint(\"eof\")'",
            "yield_ms": 3000}),
    )
    .await?;
    assert_eq!(
        (r["running"].as_bool(), r["stdout"].as_str()),
        (Some(true), Some("ready\n")),
        "{r}"
    );
    let j = r["job_id"].as_str().unwrap().to_owned();
    // One line in, one line out (print may write it in two pieces: read to its end).
    let r = job(&c, json!({"job_id": j, "stdin": "abc\n", "wait_ms": 5000})).await?;
    let mut line = r["stdout"].as_str().unwrap_or_default().to_owned();
    while !line.ends_with('\n') {
        let r = job(&c, json!({"job_id": j, "wait_ms": 5000})).await?;
        assert_eq!(r["running"], true, "{r}");
        line.push_str(r["stdout"].as_str().unwrap_or_default());
    }
    assert_eq!(line, "py ABC\n");
    let r = job(
        &c,
        json!({"job_id": j, "close_stdin": true, "wait_ms": 5000}),
    )
    .await?;
    let mut out = r["stdout"].as_str().unwrap_or_default().to_owned();
    let mut last = r;
    while last["running"] == true {
        last = job(&c, json!({"job_id": j, "wait_ms": 5000})).await?;
        out.push_str(last["stdout"].as_str().unwrap_or_default());
    }
    assert_eq!(out, "eof\n");
    assert_eq!(last["exit_code"], 0, "{last}");
    c.cancel().await?;
    Ok(())
}
