//! WASM computers (issue 4): the toolbox with the host as the shell, custom WASI modules,
//! and the embedded default, through the real binary and rmcp's client.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::*;

/// Runs `command` and returns the result.
/// The computers' directory of a WASM server.
fn computers(state: &Path) -> PathBuf {
    state.join("wasm")
}

#[tokio::test]
async fn issue_4_toolbox_shell_semantics() -> anyhow::Result<()> {
    let t = tag("wasm-shell");
    let c = stdio_client(&t, &state_dir(&t), &wasm_opts()).await?;
    let tools = c.list_all_tools().await?;
    let description = tools[0].description.clone().unwrap_or_default();
    assert!(description.contains("WebAssembly"), "{description}");
    expect(&c, "echo hi", "hi\n", 0).await?;
    // The issue's example, both ways.
    sh(&c, "mkdir -p /srv && touch /srv/x1 /srv/y2").await?;
    expect(
        &c,
        "cd /srv && ls | grep x1 > out.txt && cat out.txt || echo no",
        "x1\n",
        0,
    )
    .await?;
    expect(
        &c,
        "cd /srv && ls | grep zz > out.txt && cat out.txt || echo no",
        "no\n",
        0,
    )
    .await?;
    // Pipelines, sorting, counting, awk.
    expect(
        &c,
        "printf 'b\\na\\nb\\n' | sort | uniq -c | awk '{print $2\":\"$1}'",
        "a:1\nb:2\n",
        0,
    )
    .await?;
    // Redirections and stream order.
    let r = sh(&c, "echo out; echo err >&2; exit 3").await?;
    assert_eq!(
        (r["stdout"].as_str(), r["stderr"].as_str()),
        (Some("out\n"), Some("err\n"))
    );
    assert_eq!(r["exit_code"], 3);
    expect(&c, "ls /nonexistent 2>&1 | grep -c nonexistent", "1\n", 0).await?;
    expect(
        &c,
        "echo a > /tmp/f; echo b >> /tmp/f; wc -l < /tmp/f",
        "2\n",
        0,
    )
    .await?;
    expect(&c, "cat <<EOF\nx=$((6*7))\nEOF", "x=42\n", 0).await?;
    expect(&c, "cat <<'EOF'\n$HOME\nEOF", "$HOME\n", 0).await?;
    // Exit codes, quoting, variables, globs, functions, loops.
    expect(&c, "false || true; echo $?", "0\n", 0).await?;
    expect(&c, "nosuchprogram", "", 127).await?;
    expect(&c, "x='a  b'; echo \"$x\" $x", "a  b a b\n", 0).await?;
    expect(&c, "cd /srv && echo *", "out.txt x1 y2\n", 0).await?;
    expect(&c, "cd /srv && echo *.none", "*.none\n", 0).await?;
    expect(
        &c,
        "f() { echo \"[$1]\"; return 4; }; f 'a b'; echo $?",
        "[a b]\n4\n",
        0,
    )
    .await?;
    expect(&c, "for i in 1 2 3; do echo $i; done | tail -1", "3\n", 0).await?;
    expect(
        &c,
        "i=0; while [ $i -lt 3 ]; do i=$((i+1)); done; echo $i",
        "3\n",
        0,
    )
    .await?;
    expect(&c, "export A=1; env | grep '^A='", "A=1\n", 0).await?;
    expect(&c, "echo $(echo $(echo nested))", "nested\n", 0).await?;
    expect(
        &c,
        "case abc in a*) echo yes;; *) echo no;; esac",
        "yes\n",
        0,
    )
    .await?;
    expect(&c, "sh -c 'echo $0 $1' a b", "a b\n", 0).await?;
    // The utilities agents use daily.
    expect(&c, "echo '{\"a\":[1,2]}' | jq -c .a", "[1,2]\n", 0).await?;
    expect(&c, "echo hello | sed 's/l/L/g'", "heLLo\n", 0).await?;
    expect(&c, "printf 'a\\nb\\n' | grep -n b", "2:b\n", 0).await?;
    expect(&c, "cd /srv && find . -name 'x*'", "./x1\n", 0).await?;
    expect(&c, "seq 3 | xargs echo", "1 2 3\n", 0).await?;
    expect(&c, "printf hi | base64", "aGk=\n", 0).await?;
    expect(
        &c,
        "printf hi | sha256sum",
        "8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4  -\n",
        0,
    )
    .await?;
    expect(&c, "echo a,b,c | cut -d, -f2 | tr a-z A-Z", "B\n", 0).await?;
    expect(&c, "[ -d /tmp ] && test -f /tmp/f && echo ok", "ok\n", 0).await?;
    expect(&c, "head -c 5 < /dev/zero | wc -c", "5\n", 0).await?;
    expect(&c, "cat /dev/null; echo gone > /dev/null", "", 0).await?;
    let r = sh(&c, "date +%Y").await?;
    assert_eq!(r["exit_code"], 0, "{r}");
    // `yes | head` ends: the reader going away stops the writer, silently, as SIGPIPE does.
    let r = sh(&c, "yes | head -n 2").await?;
    assert_eq!(
        (r["stdout"].as_str(), r["stderr"].as_str()),
        (Some("y\ny\n"), Some("")),
        "{r}"
    );
    expect(
        &c,
        "set -o pipefail; seq 100000 | head -n 1; echo $?",
        "1\n141\n",
        0,
    )
    .await?;
    // A syntax error is the shell's status 2.
    let r = sh(&c, "echo 'unterminated").await?;
    assert_eq!(r["exit_code"], 2, "{r}");
    // args mode: one instance directly, or the shell for builtins.
    let r = exec(&c, json!({"args": ["ls", "-a", "/srv"]})).await?;
    assert!(r["stdout"].as_str().unwrap().contains("x1"), "{r}");
    let r = exec(&c, json!({"args": ["sh", "-c", "echo $((1+2))"]})).await?;
    assert_eq!(r["stdout"], "3\n");
    let r = exec(&c, json!({"args": ["echo", "a b", "$HOME"]})).await?;
    assert_eq!(r["stdout"], "a b $HOME\n");
    // stdin reaches the program.
    let r = exec(&c, json!({"command": "tr a-z A-Z", "stdin": "shout\n"})).await?;
    assert_eq!(r["stdout"], "SHOUT\n");
    // working_directory, also for pwd; a missing one is 126.
    let r = exec(
        &c,
        json!({"command": "pwd; ls", "working_directory": "/srv"}),
    )
    .await?;
    assert_eq!(r["stdout"], "/srv\nout.txt\nx1\ny2\n");
    let r = exec(&c, json!({"command": "pwd", "working_directory": "/nope"})).await?;
    assert_eq!(r["exit_code"], 126, "{r}");
    assert!(r["stderr"].as_str().unwrap().contains("/nope"), "{r}");
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_4_limits_timeouts_and_output() -> anyhow::Result<()> {
    let t = tag("wasm-limits");
    let opts = wasm_opts().arg("--output-limit").arg("100000");
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    // A busy shell loop and a busy program are stopped on time, output so far kept.
    for cmd in [
        "echo before; while true; do :; done",
        "echo before; yes > /dev/null",
        "echo before; sleep 100",
    ] {
        let started = Instant::now();
        let r = exec(&c, json!({"command": cmd, "timeout": 1})).await?;
        let took = started.elapsed();
        assert_eq!(r["exit_code"], 124, "{cmd}: {r}");
        assert_eq!(r["timed_out"], true, "{cmd}: {r}");
        assert_eq!(r["stdout"], "before\n", "{cmd}: {r}");
        assert!(took < Duration::from_secs(3), "{cmd} took {took:?}");
    }
    // 1 GB of output: cut at the limit at once, the head kept.
    let started = Instant::now();
    let r = sh(&c, "yes abcdefghij | head -c 1000000000").await?;
    assert_eq!(r["truncated"], true, "{r}");
    assert_eq!(r["stdout"].as_str().unwrap().len(), 100000);
    assert!(r["stdout"].as_str().unwrap().starts_with("abcdefghij\n"));
    assert!(started.elapsed() < Duration::from_secs(10));
    // 1 GB through a pipe is counted, not kept.
    let r = exec(
        &c,
        json!({"command": "head -c 1000000000 < /dev/zero | wc -c", "timeout": 60}),
    )
    .await?;
    assert_eq!(r["stdout"], "1000000000\n", "{r}");
    // Cancelling a call stops the command (and its background job) at once.
    let slow = call(
        &c,
        "terminal_execute",
        json!({"command": "(sleep 2; echo bg > /tmp/bg) & sleep 2; echo late > /tmp/late"}),
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(500), slow)
            .await
            .is_err()
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    expect(&c, "ls /tmp", "", 0).await?;
    // The server is fine afterwards.
    expect(&c, "echo alive", "alive\n", 0).await?;
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_4_no_escape_from_the_computer() -> anyhow::Result<()> {
    let t = tag("wasm-escape");
    let state = state_dir(&t);
    let c = stdio_client(&t, &state, &wasm_opts().arg("--output-limit").arg("100000")).await?;
    let id = sh(&c, "echo x > /f").await?["computer_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let fs = computers(&state).join(&id).join("fs");
    assert!(fs.join("f").is_file());
    // A host symlink planted in the computer that points outside.
    std::os::unix::fs::symlink("/etc", fs.join("etc-link"))?;
    let outside = state.join("outside.txt");
    std::fs::write(&outside, "secret")?;
    for cmd in [
        // The base layer has its own /etc (issue 16): the host's files stay out of reach.
        "cat /../../../../etc/shadow",
        "cat ../../../../../etc/debian_version",
        "cd / && cat ../outside.txt",
        "cat < ../../outside.txt",
        "cat /etc-link/passwd",
        "cat < /etc-link/passwd",
        "ls /etc-link/",
        "grep -r root /etc-link",
        "find /etc-link/ -name passwd",
    ] {
        let r = sh(&c, cmd).await?;
        let out = r["stdout"].as_str().unwrap();
        if cmd.starts_with("cat") {
            assert_ne!(r["exit_code"], 0, "{cmd}: {r}");
        }
        for leak in ["root:", "secret", "passwd", "hostname", "os-release"] {
            assert!(!out.contains(leak), "{cmd}: {r}");
        }
    }
    // Writes cannot leave either.
    for cmd in [
        "echo pwned > ../../../escape1",
        "echo pwned > /etc-link/escape2",
        "cp /f /../../escape3",
        "ln -s /f /etc-link/escape4",
    ] {
        sh(&c, cmd).await?;
    }
    for name in ["escape1", "escape3"] {
        assert!(!state.join(name).exists(), "{name}");
        assert!(!computers(&state).join(name).exists(), "{name}");
    }
    assert!(!Path::new("/etc/escape2").exists());
    assert!(!Path::new("/etc/escape4").exists());
    // Relative guest symlinks work; absolute ones are refused by WASI (they could point out).
    expect(&c, "ln -s f /g && cat /g", "x\n", 0).await?;
    let r = sh(&c, "ln -s /f /h").await?;
    assert_ne!(r["exit_code"], 0, "{r}");
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_4_server_secrets_stay_out() -> anyhow::Result<()> {
    let t = tag("wasm-secret");
    let mut opts = wasm_opts();
    opts.env
        .push(("MSC_TEST_SECRET".into(), "s3cr3t-value".into()));
    opts.env
        .push(("KILNTAINERS_AUTH_TOKEN".into(), "tok-value-123".into()));
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let r = sh(&c, "env; echo $MSC_TEST_SECRET $KILNTAINERS_AUTH_TOKEN").await?;
    let out = r["stdout"].as_str().unwrap();
    assert!(!out.contains("s3cr3t"), "{out}");
    assert!(!out.contains("tok-value"), "{out}");
    assert!(out.contains("HOME=/root"), "{out}");
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_4_lifecycle_and_persistence() -> anyhow::Result<()> {
    let t = tag("wasm-life");
    let state = state_dir(&t);
    let mut opts = wasm_opts();
    opts.lifecycle = true;
    let c = stdio_client(&t, &state, &opts).await?;
    let r = call(
        &c,
        "computer_create",
        json!({"computer_id": "keep-me", "temporary": false}),
    )
    .await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = exec(
        &c,
        json!({"computer_id": "keep-me", "command": "echo kept > /root/note"}),
    )
    .await?;
    assert_eq!(r["exit_code"], 0, "{r}");
    // The default computer is temporary.
    let tmp = sh(&c, "echo t > /tmp/t").await?["computer_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let list: Value = serde_json::from_str(&text(&call(&c, "computer_list", json!({})).await?))?;
    assert_eq!(list["count"], 2, "{list}");
    let items = list["computers"].as_array().unwrap();
    assert!(items.iter().all(|i| i["backend"] == "go_busybox"), "{list}");
    // Restart keeps files and the server; factory reset empties the computer.
    let r = call(&c, "computer_restart", json!({"computer_id": "keep-me"})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = exec(
        &c,
        json!({"computer_id": "keep-me", "command": "cat /root/note"}),
    )
    .await?;
    assert_eq!(r["stdout"], "kept\n");
    let r = call(&c, "computer_factory_reset", json!({"computer_id": tmp})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = sh(&c, "ls /tmp; ls / | sort").await?;
    assert_eq!(
        r["stdout"], "bin\ndev\netc\nhome\nproc\nroot\ntmp\nusr\n",
        "{r}"
    );
    c.cancel().await?;
    // The temporary is gone with its session; the permanent one stays on disk...
    let deadline = Instant::now() + Duration::from_secs(10);
    while computers(&state).join(&tmp).exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!computers(&state).join(&tmp).exists());
    assert!(computers(&state).join("keep-me").is_dir());
    // ...and is found again by the next server.
    let c = stdio_client(&t, &state, &opts).await?;
    let r = exec(
        &c,
        json!({"computer_id": "keep-me", "command": "cat /root/note"}),
    )
    .await?;
    assert_eq!(r["stdout"], "kept\n", "{r}");
    let r = call(&c, "computer_delete", json!({"computer_id": "keep-me"})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert!(!computers(&state).join("keep-me").exists());
    let r = exec(
        &c,
        json!({"computer_id": "keep-me", "temporary": false, "command": "ls /root"}),
    )
    .await?;
    assert_eq!(r["stdout"], "", "a deleted computer comes back empty: {r}");
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_4_temporaries_of_a_killed_server_are_reaped() -> anyhow::Result<()> {
    let t = tag("wasm-reap");
    let state = state_dir(&t);
    let mut cmd = command(&t, &state, &wasm_opts());
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn()?;
    {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let mut stdin = child.stdin.take().unwrap();
        let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        for l in [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"terminal_execute","arguments":{"command":"echo x"}}}"#,
        ] {
            stdin.write_all(format!("{l}\n").as_bytes()).await?;
        }
        while let Some(line) = out.next_line().await? {
            if line.contains(r#""id":2"#) {
                break;
            }
        }
        child.kill().await?;
    }
    let left: Vec<_> = std::fs::read_dir(computers(&state))?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert_eq!(
        left.len(),
        1,
        "the killed server's temporary is still there"
    );
    // The next server reaps it.
    let c = stdio_client(&t, &state, &wasm_opts()).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while left[0].path().exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!left[0].path().exists());
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_4_embedded_default_without_docker() -> anyhow::Result<()> {
    let t = tag("wasm-default");
    let state = state_dir(&t);
    // No --backend and no engine: the toolbox, said once on stderr.
    let opts = ServerOpts::default()
        .arg("--docker-host")
        .arg("unix:///nonexistent.sock");
    wasm_opts();
    let server = HttpServer::start(&t, &state, &opts).await?;
    let c = server.legacy_client(None).await?;
    let r = sh(&c, "echo $((20+22)) | tr 4 X").await?;
    assert_eq!(r["stdout"], "X2\n", "{r}");
    let tools = c.list_all_tools().await?;
    assert!(
        tools[0]
            .description
            .as_deref()
            .unwrap_or_default()
            .contains("WebAssembly")
    );
    c.cancel().await?;
    server.terminate().await?;
    let log = std::fs::read_dir(workspace().join("target/test-logs"))?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&t))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    assert_eq!(
        log.matches("using the embedded WebAssembly toolbox")
            .count(),
        1,
        "{log}"
    );
    Ok(())
}

/// Compiles the `.wat` fixture `name` (tests/fixtures/wasm) into `dir` and returns the path.
fn fixture(name: &str, dir: &Path) -> PathBuf {
    let src = workspace()
        .join("tests/fixtures/wasm")
        .join(format!("{name}.wat"));
    let bytes = wat::parse_file(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let out = dir.join(format!("{name}.wasm"));
    std::fs::write(&out, bytes).unwrap();
    out
}

fn custom(module: &Path) -> ServerOpts {
    wasm_opts()
        .arg("--backend")
        .arg("wasm")
        .arg("--wasm-path")
        .arg(module.to_str().unwrap())
}

/// `custom(module)` without the toolbox's `--backend go_busybox` in front.
fn custom_only(module: &Path) -> ServerOpts {
    let mut o = custom(module);
    o.args.drain(..2);
    o
}

#[tokio::test]
async fn issue_4_custom_module_runs_argv_stdin_and_files() -> anyhow::Result<()> {
    let t = tag("wasm-custom");
    let state = state_dir(&t);
    for (name, check) in [
        ("hello", 0),
        ("args", 1),
        ("cat", 2),
        ("env", 3),
        ("files", 4),
    ] {
        let module = fixture(name, &state);
        let mut opts = custom_only(&module);
        opts.env
            .push(("MSC_TEST_SECRET".into(), "s3cr3t-value".into()));
        let c = stdio_client(&t, &state, &opts).await?;
        match check {
            0 => {
                let r = exec(&c, json!({"args": ["hello"]})).await?;
                assert_eq!(r["stdout"], "hello from wasm\n", "{r}");
                assert_eq!(r["exit_code"], 3);
            }
            1 => {
                let r = exec(&c, json!({"args": ["whatever", "a b", "c"]})).await?;
                assert_eq!(r["stdout"], "args\na b\nc\n", "{r}");
                let r = sh(&c, "echo x | y").await?;
                assert_eq!(r["stdout"], "args\n-c\necho x | y\n", "{r}");
            }
            2 => {
                let r = exec(&c, json!({"args": ["cat"], "stdin": "piped in\n"})).await?;
                assert_eq!(r["stdout"], "piped in\n", "{r}");
            }
            3 => {
                let r = exec(&c, json!({"args": ["env"], "working_directory": "/tmp"})).await?;
                let out = r["stdout"].as_str().unwrap();
                assert!(out.contains("HOME=/root\n"), "{out}");
                assert!(out.contains("PWD=/tmp\n"), "{out}");
                assert!(!out.contains("s3cr3t"), "{out}");
                for missing in ["/nope", "/../../etc"] {
                    let r =
                        exec(&c, json!({"args": ["env"], "working_directory": missing})).await?;
                    assert_eq!(r["exit_code"], 126, "{missing}: {r}");
                }
            }
            _ => {
                let r = exec(&c, json!({"args": ["files"]})).await?;
                assert_eq!(r["exit_code"], 0, "{r}");
                let id = r["computer_id"].as_str().unwrap();
                let probe = computers(&state).join(id).join("fs/probe.txt");
                assert_eq!(std::fs::read_to_string(probe)?, "ok\n");
            }
        }
        c.cancel().await?;
    }
    Ok(())
}

#[tokio::test]
async fn issue_4_custom_module_limits() -> anyhow::Result<()> {
    let t = tag("wasm-custom-limits");
    let state = state_dir(&t);
    // A busy loop and a blocking sleep stop at the timeout.
    for name in ["busy", "sleep"] {
        let c = stdio_client(&t, &state, &custom_only(&fixture(name, &state))).await?;
        let started = Instant::now();
        let r = exec(&c, json!({"args": [name], "timeout": 1})).await?;
        assert_eq!(r["exit_code"], 124, "{name}: {r}");
        assert_eq!(r["timed_out"], true, "{name}: {r}");
        assert!(started.elapsed() < Duration::from_secs(3), "{name}");
        c.cancel().await?;
    }
    // Fuel runs out.
    let opts = custom_only(&fixture("busy", &state))
        .arg("--wasm-fuel")
        .arg("10000000");
    let c = stdio_client(&t, &state, &opts).await?;
    let r = exec(&c, json!({"args": ["busy"], "timeout": 30})).await?;
    assert_eq!(r["exit_code"], 137, "{r}");
    assert!(r["stderr"].as_str().unwrap().contains("fuel"), "{r}");
    c.cancel().await?;
    // A memory hog meets --wasm-max-memory.
    let opts = custom_only(&fixture("memhog", &state))
        .arg("--wasm-max-memory")
        .arg("16");
    let c = stdio_client(&t, &state, &opts).await?;
    let r = exec(&c, json!({"args": ["memhog"]})).await?;
    assert_eq!(r["exit_code"], 137, "{r}");
    assert!(
        r["stderr"].as_str().unwrap().contains("memory limit"),
        "{r}"
    );
    c.cancel().await?;
    // 1 GiB to stdout: cut at the output limit, at once.
    let opts = custom_only(&fixture("flood", &state))
        .arg("--output-limit")
        .arg("65536");
    let c = stdio_client(&t, &state, &opts).await?;
    let started = Instant::now();
    let r = exec(&c, json!({"args": ["flood"]})).await?;
    assert_eq!(r["truncated"], true, "{r}");
    assert_eq!(r["stdout"].as_str().unwrap().len(), 65536);
    assert!(started.elapsed() < Duration::from_secs(10));
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_4_bad_modules_are_refused_at_start() -> anyhow::Result<()> {
    let t = tag("wasm-refuse");
    let state = state_dir(&t);
    let not_wasm = workspace().join("tests/fixtures/wasm/not_wasm.wasm");
    for (module, expected) in [
        (fixture("not_wasi", &state), "not a WASI command module"),
        (fixture("no_start", &state), "no exported _start"),
        (not_wasm, "magic bytes"),
        (state.join("missing.wasm"), "cannot read"),
    ] {
        let out = command(&t, &state, &custom_only(&module))
            .stdin(std::process::Stdio::null())
            .output()
            .await?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{module:?}: {stderr}");
        assert!(stderr.contains(expected), "{module:?}: {stderr}");
    }
    // --backend wasm needs a module; --wasm-path needs --backend wasm.
    let out = command(
        &t,
        &state,
        &ServerOpts::default().arg("--backend").arg("wasm"),
    )
    .stdin(std::process::Stdio::null())
    .output()
    .await?;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--wasm-path"));
    Ok(())
}

/// Issue 14: per-call `env` on WASM computers (the shell and the toolbox's programs see
/// it), and jobs refused clearly until this backend keeps them.
#[tokio::test]
async fn issue_14_env_on_wasm_and_jobs_refused() -> anyhow::Result<()> {
    let t = tag("wenv");
    let c = stdio_client(&t, &state_dir(&t), &wasm_opts().arg("--tools=jobs")).await?;
    let r = exec(
        &c,
        json!({"command": "echo \"$GREETING|$HOME\"; env | grep -c '^GREETING=hi there$'", "env": {"GREETING": "hi there", "HOME": "/elsewhere"}}),
    )
    .await?;
    assert_eq!(r["stdout"], "hi there|/elsewhere\n1\n", "{r}");
    let r = exec(&c, json!({"command": "echo \"[$GREETING]\""})).await?;
    assert_eq!(r["stdout"], "[]\n");
    // A job's command gets the call's `env` too (jobs on WASM: issue 14).
    let r = exec(
        &c,
        json!({"command": "echo \"$GREETING\"; sleep 5", "yield_ms": 500, "env": {"GREETING": "job"}}),
    )
    .await?;
    assert_eq!(
        (r["running"].as_bool(), r["stdout"].as_str()),
        (Some(true), Some("job\n")),
        "{r}"
    );
    let j = job(
        &c,
        json!({"job_id": r["job_id"], "signal": "KILL", "wait_ms": 5000}),
    )
    .await?;
    assert_eq!(j["exit_code"], 137, "{j}");
    c.cancel().await?;
    Ok(())
}

/// Issue 46: a WASM computer's running kept jobs show in its own `/proc` (as `ps`-style
/// checks count them, through `/proc/*/cmdline`), and a job ended by its server's exit is
/// named so by a later server, not "never existed".
#[tokio::test]
async fn issue_46_wasm_jobs_show_in_proc_and_a_later_server_says_they_ended() -> anyhow::Result<()>
{
    let t = tag("wasm-gone");
    let state = state_dir(&t);
    let opts = wasm_opts().arg("--tools=exec,jobs");
    let c = stdio_client(&t, &state, &opts).await?;
    let start = |command: &str| json!({"computer_id": "jobs-box", "temporary": false, "command": command, "yield_ms": 300});
    let r = exec(&c, start("sleep 600")).await?;
    let running = r["job_id"].as_str().unwrap_or_default().to_owned();
    assert!(running.starts_with("job-"), "{r}");
    let r = exec(&c, start("sleep 1; echo done")).await?;
    let exited = r["job_id"].as_str().unwrap_or_default().to_owned();
    assert!(exited.starts_with("job-"), "{r}");
    let on = |id: &str, command: &str| json!({"computer_id": id, "temporary": false, "command": command});
    let r = exec(
        &c,
        on("jobs-box", "for f in /proc/*/cmdline; do echo \"$f\"; done; tr '\\0' ' ' < /proc/2/cmdline; echo; grep -c '^Pid:' /proc/2/status"),
    )
    .await?;
    assert_eq!(
        r["stdout"], "/proc/2/cmdline\n/proc/3/cmdline\nsh -c sleep 600 \n1\n",
        "{r}"
    );
    // Another computer of the same server shows none of them.
    let r = exec(&c, on("quiet-box", "ls /proc")).await?;
    assert_eq!(r["stdout"], "cpuinfo\nmeminfo\nself\nversion\n", "{r}");
    // The second command ends, unread; /proc no longer shows it.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let r = exec(&c, on("jobs-box", "ls /proc | grep -c '^[0-9]'")).await?;
    assert_eq!(r["stdout"], "1\n", "{r}");
    c.cancel().await?;

    // Wait until that server's process is gone (its markers name it).
    let marks = computers(&state).join("jobs-box/jobs");
    let mark: Value = serde_json::from_slice(&std::fs::read(
        std::fs::read_dir(&marks)?
            .flatten()
            .next()
            .map(|e| e.path())
            .unwrap_or_default(),
    )?)?;
    let pid = mark["instance"]
        .as_str()
        .and_then(|i| i.split_once('-'))
        .map(|(p, _)| p.to_owned())
        .unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(15);
    while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!pid.is_empty() && !Path::new(&format!("/proc/{pid}")).exists());

    let c = stdio_client(&t, &state, &opts).await?;
    let read = |job_id: &str| json!({"job_id": job_id, "computer_id": "jobs-box"});
    let r = call(&c, "terminal_job", read(&running)).await?;
    let m = text(&r);
    assert!(
        r.is_error == Some(true)
            && m.contains("ended when the server process that ran it stopped")
            && m.contains("sleep 600")
            && !m.contains("never existed"),
        "{m}"
    );
    let r = call(&c, "terminal_job", read(&exited)).await?;
    let m = text(&r);
    assert!(
        r.is_error == Some(true) && m.contains("exited with status 0"),
        "{m}"
    );
    // Told once; then it is an unknown job like any read one.
    let r = call(&c, "terminal_job", read(&running)).await?;
    assert!(text(&r).contains("never existed"), "{}", text(&r));
    // The stopped server's job is no longer in /proc.
    let r = exec(&c, on("jobs-box", "ls /proc")).await?;
    assert_eq!(r["stdout"], "cpuinfo\nmeminfo\nself\nversion\n", "{r}");
    c.cancel().await?;
    Ok(())
}
