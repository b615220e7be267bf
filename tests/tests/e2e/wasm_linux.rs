//! Issue 16: WASM computers that feel like Linux: the read-only base layer (`/etc`, `/bin`,
//! `/usr/bin`, `/dev`, `/proc`), restored by a factory reset and impossible to escape;
//! byte-exact output; the everyday utilities (host-answered `id uname chmod ls ...` and the
//! toolbox's `tar gzip tac ...`); scripts with shebangs.

use serde_json::json;
use tests::*;

async fn client(name: &str) -> anyhow::Result<Client> {
    let t = tag(name);
    stdio_client(&t, &state_dir(&t), &wasm_opts()).await
}

#[tokio::test]
async fn issue_16_base_layer_etc_bin_and_proc() -> anyhow::Result<()> {
    let c = client("wasm-base").await?;
    let r = sh(&c, "cat /etc/os-release").await?;
    let os = r["stdout"].as_str().unwrap_or_default();
    assert!(os.contains("NAME=\"MCP Sandbox Computer\""), "{r}");
    assert!(os.contains("ID=mcp-sandbox-computer"), "{r}");
    let id = r["computer_id"].as_str().unwrap_or_default().to_owned();
    expect(&c, "cat /etc/hostname", &format!("{id}\n"), 0).await?;
    expect(&c, "hostname", &format!("{id}\n"), 0).await?;
    expect(
        &c,
        "grep ^root: /etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\n",
        0,
    )
    .await?;
    expect(&c, "grep -c ^root: /etc/group", "1\n", 0).await?;
    for p in [
        "/bin/sh",
        "/bin/bash",
        "/usr/bin/env",
        "/bin/ls",
        "/usr/bin/tar",
        "/bin/[",
    ] {
        expect(&c, &format!("test -x {p} && echo yes"), "yes\n", 0).await?;
    }
    expect(&c, "which sh tar", "/usr/bin/sh\n/usr/bin/tar\n", 0).await?;
    expect(&c, "command -v gzip", "gzip\n", 0).await?;
    expect(&c, "ls /bin | grep -cx sh", "1\n", 0).await?;
    expect(&c, "sh /bin/echo via-stub", "via-stub\n", 0).await?;
    // The base is read-only, for the shell and for the programs.
    let r = sh(&c, "echo x > /etc/passwd").await?;
    assert_eq!(r["exit_code"], 1, "{r}");
    assert!(
        r["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("Read-only file system"),
        "{r}"
    );
    let r = sh(&c, "rm /bin/ls; touch /usr/bin/new; test -w /etc/hostname").await?;
    assert_ne!(r["exit_code"], 0, "{r}");
    expect(
        &c,
        "test -x /bin/ls && test ! -e /usr/bin/new && echo intact",
        "intact\n",
        0,
    )
    .await?;
    // /proc basics.
    expect(&c, "grep -c ^processor /proc/cpuinfo", "1\n", 0).await?;
    expect(&c, "grep -c MemTotal /proc/meminfo", "1\n", 0).await?;
    expect(&c, "head -c 5 /proc/version", "Linux", 0).await?;
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_16_devices() -> anyhow::Result<()> {
    let c = client("wasm-dev").await?;
    expect(&c, "head -c 16 /dev/urandom | wc -c", "16\n", 0).await?;
    expect(&c, "head -c 16 < /dev/random | wc -c", "16\n", 0).await?;
    // Two reads of the random source differ.
    expect(
        &c,
        "a=$(head -c 16 /dev/urandom | od -An -tx1); b=$(head -c 16 /dev/urandom | od -An -tx1); test \"$a\" != \"$b\" && echo differ",
        "differ\n",
        0,
    )
    .await?;
    expect(&c, "head -c 100 /dev/zero | tr '\\0' z | wc -c", "100\n", 0).await?;
    expect(&c, "head -c 3 /dev/zero | od -An -tx1", " 00 00 00\n", 0).await?;
    expect(&c, "cat /dev/null; wc -c < /dev/null", "0\n", 0).await?;
    let r = sh(&c, "echo x > /dev/full").await?;
    assert_eq!(r["exit_code"], 1, "{r}");
    assert!(
        r["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("No space left on device"),
        "{r}"
    );
    expect(&c, "echo piped | cat /dev/stdin", "piped\n", 0).await?;
    let r = sh(&c, "echo to-err > /dev/stderr; echo to-out > /dev/stdout").await?;
    assert_eq!(
        (r["stdout"].as_str(), r["stderr"].as_str()),
        (Some("to-out\n"), Some("to-err\n")),
        "{r}"
    );
    expect(
        &c,
        "ls /dev",
        "full\nnull\nrandom\nstderr\nstdin\nstdout\nurandom\nzero\n",
        0,
    )
    .await?;
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_16_system_utilities() -> anyhow::Result<()> {
    let c = client("wasm-sys").await?;
    let r = sh(&c, "uname -a").await?;
    let id = r["computer_id"].as_str().unwrap_or_default().to_owned();
    let line = r["stdout"].as_str().unwrap_or_default();
    assert!(line.starts_with(&format!("Linux {id} ")), "{r}");
    assert!(line.trim_end().ends_with("wasm32 WASI"), "{r}");
    expect(&c, "uname", "Linux\n", 0).await?;
    expect(&c, "uname -m", "wasm32\n", 0).await?;
    expect(&c, "id", "uid=0(root) gid=0(root) groups=0(root)\n", 0).await?;
    expect(&c, "id -u; id -un; id -g", "0\nroot\n0\n", 0).await?;
    expect(&c, "whoami", "root\n", 0).await?;
    expect(&c, "nproc", "1\n", 0).await?;
    expect(&c, "timeout 0.2 sleep 5; echo $?", "124\n", 0).await?;
    expect(&c, "timeout 5 echo quick", "quick\n", 0).await?;
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_16_chmod_ls_and_shebang_scripts() -> anyhow::Result<()> {
    let c = client("wasm-chmod").await?;
    sh(&c, "printf '#!/bin/sh\\necho \"hi $1\"\\n' > /root/s.sh").await?;
    let r = sh(&c, "cd /root && ./s.sh x").await?;
    assert_eq!(r["exit_code"], 126, "not executable yet: {r}");
    assert!(
        r["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("Permission denied"),
        "{r}"
    );
    expect(&c, "test -x /root/s.sh || echo no", "no\n", 0).await?;
    expect(&c, "cd /root && chmod +x s.sh && ./s.sh x", "hi x\n", 0).await?;
    expect(&c, "/root/s.sh y", "hi y\n", 0).await?;
    let r = sh(&c, "ls -l /root/s.sh").await?;
    let l = r["stdout"].as_str().unwrap_or_default();
    assert!(l.starts_with("-rwxr-xr-x 1 root root 23 "), "{r}");
    assert!(l.ends_with(" /root/s.sh\n"), "{r}");
    sh(
        &c,
        "printf '#!/usr/bin/env sh\\necho env-$0\\n' > /root/e && chmod 700 /root/e",
    )
    .await?;
    expect(&c, "/root/e", "env-/root/e\n", 0).await?;
    let r = sh(
        &c,
        "ls -l /root/e; chmod go-r,u-x /root/s.sh; ls -l /root/s.sh",
    )
    .await?;
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(out.starts_with("-rwx------ 1 root root"), "{r}");
    assert!(out.contains("\n-rw---x--x 1 root root"), "{r}");
    // ls -la shows modes, owners and sizes as Linux would.
    let r = sh(&c, "mkdir /d && echo abc > /d/f && ls -la /tmp /d").await?;
    let out = r["stdout"].as_str().unwrap_or_default();
    assert!(out.starts_with("/d:\ntotal "), "{r}");
    assert!(out.contains("\ndrwxr-xr-x "), "{r}");
    // Columns are aligned as GNU ls aligns them (`..` has 11 links here, so `f`'s link
    // count is padded to two characters): compare the fields.
    assert!(
        out.lines().any(|l| l.split_whitespace().take(5).eq([
            "-rw-r--r--",
            "1",
            "root",
            "root",
            "4"
        ]) && l.ends_with(" f")),
        "{r}"
    );
    assert!(out.contains("\n/tmp:\ntotal "), "{r}");
    assert!(out.contains("\ndrwxrwxrwt "), "{r}");
    assert!(!out.contains("somebody"), "{r}");
    expect(&c, "ls -ld /bin | cut -c1-10", "drwxr-xr-x\n", 0).await?;
    expect(&c, "ls -l /dev/null | cut -c1-10", "crw-rw-rw-\n", 0).await?;
    let r = sh(&c, "chmod +x /bin/ls").await?;
    assert_eq!(r["exit_code"], 1, "{r}");
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_16_archives_and_text_utilities() -> anyhow::Result<()> {
    let c = client("wasm-utils").await?;
    expect(
        &c,
        "mkdir -p /w/a/b && echo hello > /w/a/x && echo deep > /w/a/b/y && cd /w && tar czf a.tgz a && rm -r a && tar tzf a.tgz | sort && tar xzf a.tgz && cat a/x a/b/y",
        "a/\na/b/\na/b/y\na/x\nhello\ndeep\n",
        0,
    )
    .await?;
    expect(
        &c,
        "cd /w && tar cf - a | tar tf - | wc -l && mkdir out && tar -xf a.tgz -C out && cat out/a/x",
        "4\nhello\n",
        0,
    )
    .await?;
    expect(
        &c,
        "cd /w && seq 1000 > n && gzip n && test ! -e n && file n.gz && zcat n.gz | tail -1 && gunzip n.gz && wc -l < n",
        "n.gz: gzip compressed data\n1000\n1000\n",
        0,
    )
    .await?;
    expect(&c, "echo round | gzip -9 | gunzip", "round\n", 0).await?;
    expect(&c, "printf 'a\\nb\\nc\\n' | tac", "c\nb\na\n", 0).await?;
    expect(&c, "echo héllo | rev", "olléh\n", 0).await?;
    expect(&c, "printf 'ab\\ncd' | rev", "ba\ndc", 0).await?;
    let r = sh(&c, "printf 'a\\377b\\n' | rev | od -An -tx1").await?;
    assert_eq!(r["stdout"], " 62 ff 61 0a\n", "{r}");
    expect(&c, "seq 20 | shuf | sort -n | tail -1", "20\n", 0).await?;
    expect(&c, "echo hi | base32", "NBUQU===\n", 0).await?;
    expect(&c, "echo NBUQU=== | base32 -d", "hi\n", 0).await?;
    expect(
        &c,
        "f=$(mktemp) && test -f \"$f\" && dirname \"$f\"",
        "/tmp\n",
        0,
    )
    .await?;
    expect(
        &c,
        "cd /w && seq 10 | split -l 4 && cat xab && ls x* | wc -l",
        "5\n6\n7\n8\n3\n",
        0,
    )
    .await?;
    expect(&c, "printf 'a b\\nc\\n' | xargs -n1 echo", "a\nb\nc\n", 0).await?;
    expect(
        &c,
        "file /etc/passwd /w",
        "/etc/passwd: ASCII text\n/w: directory\n",
        0,
    )
    .await?;
    c.cancel().await?;
    Ok(())
}

/// `printf` format text writing every byte value once, as octal escapes.
fn all_octal() -> String {
    (0..=255u32).map(|b| format!("\\{b:03o}")).collect()
}

#[tokio::test]
async fn issue_16_printf_is_byte_exact() -> anyhow::Result<()> {
    let c = client("wasm-bytes").await?;
    expect(&c, r"printf 'h\303\251 \360\237\214\215'", "hé 🌍", 0).await?;
    expect(&c, r"printf 'h\303\251' | od -An -tx1", " 68 c3 a9\n", 0).await?;
    expect(&c, r"printf '\xff\xfe' | od -An -tx1", " ff fe\n", 0).await?;
    expect(&c, r"echo -n $'\xc3\xa9' | wc -c", "2\n", 0).await?;
    // All 256 byte values, straight and through a file, a variable and read.
    let hex: String = (0..=255u8).map(|b| format!("{b:02x}")).collect();
    let r = sh(
        &c,
        &format!("printf '{}' | od -An -v -tx1 | tr -d ' \\n'", all_octal()),
    )
    .await?;
    assert_eq!(r["stdout"], hex, "{r}");
    let r = sh(
        &c,
        &format!(
            "printf '{}' > /tmp/all; od -An -v -tx1 /tmp/all | tr -d ' \\n'; wc -c < /tmp/all",
            all_octal()
        ),
    )
    .await?;
    assert_eq!(r["stdout"], format!("{hex}256\n"), "{r}");
    let no_nul: String = (1..=255u8).map(|b| format!("{b:02x}")).collect();
    let r = sh(
        &c,
        "x=$(cat /tmp/all); printf %s \"$x\" | od -An -v -tx1 | tr -d ' \\n'",
    )
    .await?;
    assert_eq!(r["stdout"], no_nul, "a value keeps every byte but NUL: {r}");
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_16_no_escape_from_base_or_writable_layer() -> anyhow::Result<()> {
    let t = tag("wasm-esc16");
    let state = state_dir(&t);
    let c = stdio_client(&t, &state, &wasm_opts()).await?;
    std::fs::write(state.join("outside.txt"), "secret")?;
    expect(&c, "cd /bin/../../../.. && pwd", "/\n", 0).await?;
    expect(&c, "cd /usr/bin && cd ../../.. && pwd", "/\n", 0).await?;
    for cmd in [
        "cat /etc/../../../outside.txt",
        "cat /bin/../../../../outside.txt",
        "cat /proc/../../../outside.txt",
        "cd /etc && cat ../../../../outside.txt",
        "ln -s ../../../../../../outside.txt /tmp/up && cat /tmp/up",
        "ln -s ../../../../../../ /tmp/top && ls /tmp/top/",
        "ln -s ../../../../../../ /tmp/top2; cat /tmp/top2/outside.txt",
        "cat < /usr/bin/../../../../outside.txt",
        "ls /etc/../../..",
        "tar cf - /etc/../../../outside.txt | tar tf -",
    ] {
        let r = sh(&c, cmd).await?;
        let out = r["stdout"].as_str().unwrap_or_default();
        assert!(
            !out.contains("secret") && !out.contains("outside.txt") && !out.contains("wasm-base"),
            "{cmd}: {r}"
        );
    }
    // Writes cannot reach the base's host directories or beyond.
    for cmd in [
        "echo x > /bin/../../../../escape1",
        "ln -s /bin /tmp/b; echo x > /tmp/b/escape2",
        "cd /usr/bin && echo x > ../../../../../escape3",
    ] {
        sh(&c, cmd).await?;
    }
    for name in ["escape1", "escape3"] {
        assert!(!state.join(name).exists(), "{name}");
    }
    for entry in std::fs::read_dir(state.join("wasm-base"))? {
        let dir = entry?.path();
        assert!(
            !dir.join("bin/escape2").exists(),
            "the shared base was written"
        );
    }
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_16_factory_reset_restores_the_base() -> anyhow::Result<()> {
    let t = tag("wasm-reset16");
    let mut opts = wasm_opts();
    opts.lifecycle = true;
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let r = call(
        &c,
        "computer_create",
        json!({"computer_id": "base-reset", "temporary": false}),
    )
    .await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let run = |cmd: &str| exec(&c, json!({"computer_id": "base-reset", "command": cmd}));
    let r = run(
        "echo note > /root/note; rm -r /usr/local; chmod 000 /tmp; test -x /bin/sh && echo base",
    )
    .await?;
    assert_eq!(r["stdout"], "base\n", "{r}");
    let r = call(
        &c,
        "computer_factory_reset",
        json!({"computer_id": "base-reset"}),
    )
    .await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = run(
        "test -x /bin/sh && cat /etc/hostname && ls /root && ls -ld /tmp /usr/local | cut -c1-10",
    )
    .await?;
    assert_eq!(r["stdout"], "base-reset\ndrwxrwxrwt\ndrwxr-xr-x\n", "{r}");
    let r = call(&c, "computer_delete", json!({"computer_id": "base-reset"})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_16_background_jobs_live_between_calls() -> anyhow::Result<()> {
    let t = tag("wasm-bg");
    let mut opts = wasm_opts();
    opts.lifecycle = true;
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let r = call(
        &c,
        "computer_create",
        json!({"computer_id": "bg-jobs", "temporary": false}),
    )
    .await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let run = |cmd: &str| exec(&c, json!({"computer_id": "bg-jobs", "command": cmd}));
    let started = std::time::Instant::now();
    let r = run("sleep 100 & echo started $!").await?;
    assert!(
        r["stdout"]
            .as_str()
            .unwrap_or_default()
            .starts_with("started "),
        "{r}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the call waited for its job"
    );
    let r = run("jobs").await?;
    assert_eq!(r["stdout"], "[1]  Running  sleep 100\n", "{r}");
    let r = run("sleep 0.1 & jobs | wc -l").await?;
    assert_eq!(r["stdout"], "2\n", "{r}");
    let r = run("kill %1; wait %1; echo status $?; wait; jobs").await?;
    assert_eq!(r["stdout"], "status 143\n", "{r}");
    let r = run("jobs").await?;
    assert_eq!(r["stdout"], "", "ended jobs are dropped once seen: {r}");
    // Restart, factory reset and delete end the jobs.
    run("sleep 100 &").await?;
    let r = call(&c, "computer_restart", json!({"computer_id": "bg-jobs"})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(run("jobs").await?["stdout"], "");
    run("sleep 100 &").await?;
    let r = call(
        &c,
        "computer_factory_reset",
        json!({"computer_id": "bg-jobs"}),
    )
    .await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = run("jobs; test -x /bin/sh && echo base").await?;
    assert_eq!(r["stdout"], "base\n", "{r}");
    let r = call(&c, "computer_delete", json!({"computer_id": "bg-jobs"})).await?;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    c.cancel().await?;
    Ok(())
}
