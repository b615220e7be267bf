//! Issue 15: files as bytes on WASM computers (SPEC §3.9), through the real binary:
//! exact bytes, slices, `create_only`, atomic replace, the counted edit, clear errors,
//! symlinks and `..` that must not leave the computer, and another session refused.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::json;
use tests::*;

fn opts() -> ServerOpts {
    wasm_opts().arg("--tools=files,lifecycle")
}

fn hex_sha(bytes: &[u8]) -> String {
    shared::files::sha256_hex(bytes)
}

/// Reads a whole file in slices of `slice` bytes.
async fn read_all(c: &Client, id: &str, path: &str, slice: u64) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let r = call_ok(
            c,
            "computer_file_read",
            json!({"computer_id": id, "path": path, "offset": out.len(), "length": slice}),
        )
        .await?;
        match (r["content"].as_str(), r["content_base64"].as_str()) {
            (Some(t), _) => out.extend_from_slice(t.as_bytes()),
            (None, Some(b)) => out.extend(B64.decode(b)?),
            _ => anyhow::bail!("no content: {r}"),
        }
        if r["eof"] == true {
            return Ok(out);
        }
    }
}

#[tokio::test]
async fn issue_15_wasm_bytes_slices_and_edits() -> anyhow::Result<()> {
    let t = tag("wfiles");
    let c = stdio_client(&t, &state_dir(&t), &opts()).await?;
    let names = tool_names(&c).await?;
    for tool in [
        "computer_file_read",
        "computer_file_write",
        "computer_file_edit",
    ] {
        assert!(names.iter().any(|n| n == tool), "{names:?}");
    }
    let id = "wf";
    // Every byte value, NUL runs and invalid UTF-8, exactly; the first call creates it.
    let mut bytes: Vec<u8> = (0..=255u8).collect();
    bytes.extend_from_slice(&[0; 64]);
    bytes.extend_from_slice(b"\xc3\x28\xff\xfe");
    let w = call_ok(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/data/bin", "content_base64": B64.encode(&bytes), "make_dirs": true}),
    )
    .await?;
    assert_eq!(w["size"], bytes.len());
    assert_eq!(w["sha256"], hex_sha(&bytes));
    let r = call_ok(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/data/bin"}),
    )
    .await?;
    assert_eq!(
        B64.decode(r["content_base64"].as_str().unwrap_or(""))?,
        bytes
    );
    assert!(r.get("content").is_none());
    assert_eq!(r["eof"], true);
    assert_eq!(r["mode"], "0644");
    // Text both ways with the shell.
    call_ok(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/data/t.txt", "content": "héllo\n", "mode": "0600"}),
    )
    .await?;
    let r = exec(&c, json!({"computer_id": id, "command": "cat /data/t.txt"})).await?;
    assert_eq!(r["stdout"], "héllo\n");
    exec(
        &c,
        json!({"computer_id": id, "command": "echo from-shell > /data/s.txt"}),
    )
    .await?;
    let r = call_ok(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/data/s.txt"}),
    )
    .await?;
    assert_eq!(r["content"], "from-shell\n");
    // 6 MiB in appended slices, back in slices.
    let big: Vec<u8> = (0..6 << 20).map(|i: u32| (i * 7 % 251) as u8).collect();
    for (i, chunk) in big.chunks(4 << 20).enumerate() {
        call_ok(
            &c,
            "computer_file_write",
            json!({"computer_id": id, "path": "/data/big", "content_base64": B64.encode(chunk), "append": i > 0}),
        )
        .await?;
    }
    let w = call_ok(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/data/big", "content": "", "append": true}),
    )
    .await?;
    assert_eq!(w["size"], big.len());
    assert_eq!(w["sha256"], hex_sha(&big));
    assert_eq!(read_all(&c, id, "/data/big", 1 << 20).await?, big);
    let r = call_ok(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/data/big", "offset": 100 << 20}),
    )
    .await?;
    assert_eq!((r["content"].as_str(), &r["eof"]), (Some(""), &json!(true)));
    // create_only against an existing file changes nothing.
    let e = call_error(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/data/t.txt", "content": "x", "create_only": true}),
    )
    .await?;
    assert!(e.contains("already exists"), "{e}");
    let r = call_ok(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/data/t.txt"}),
    )
    .await?;
    assert_eq!(
        (r["content"].as_str(), r["mode"].as_str()),
        (Some("héllo\n"), Some("0600"))
    );
    // Edits: 0 or 2 matches change nothing; 1 replaces and keeps the mode.
    call_ok(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/data/c.ini", "content": "a=1\nb=1\n", "mode": "0755"}),
    )
    .await?;
    let e = call_error(
        &c,
        "computer_file_edit",
        json!({"computer_id": id, "path": "/data/c.ini", "old_text": "=1", "new_text": "=2"}),
    )
    .await?;
    assert!(
        e.contains("2 times") && e.contains("expected_replacements"),
        "{e}"
    );
    let e = call_error(
        &c,
        "computer_file_edit",
        json!({"computer_id": id, "path": "/data/c.ini", "old_text": "zz", "new_text": ""}),
    )
    .await?;
    assert!(e.contains("not found"), "{e}");
    let r = call_ok(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/data/c.ini"}),
    )
    .await?;
    assert_eq!(r["content"], "a=1\nb=1\n");
    let r = call_ok(
        &c,
        "computer_file_edit",
        json!({"computer_id": id, "path": "/data/c.ini", "old_text": "b=1", "new_text": "b=22"}),
    )
    .await?;
    assert_eq!(
        (r["replacements"].as_u64(), r["size"].as_u64()),
        (Some(1), Some(9))
    );
    let r = call_ok(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/data/c.ini"}),
    )
    .await?;
    assert_eq!(
        (r["content"].as_str(), r["mode"].as_str()),
        (Some("a=1\nb=22\n"), Some("0755"))
    );
    let r = call_ok(
        &c,
        "computer_file_edit",
        json!({"computer_id": id, "path": "/data/c.ini", "old_text": "=", "new_text": ": ", "expected_replacements": 2}),
    )
    .await?;
    assert_eq!(r["replacements"], 2);
    // Clear errors, nothing changed.
    let e = call_error(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/data"}),
    )
    .await?;
    assert!(e.contains("is a directory"), "{e}");
    let e = call_error(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/nope.txt"}),
    )
    .await?;
    assert!(e.contains("does not exist"), "{e}");
    let e = call_error(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/x/y/z.txt", "content": "z"}),
    )
    .await?;
    assert!(e.contains("make_dirs"), "{e}");
    let e = call_error(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/data", "content": "z"}),
    )
    .await?;
    assert!(e.contains("is a directory"), "{e}");
    let e = call_error(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "data/t.txt"}),
    )
    .await?;
    assert!(e.contains("absolute"), "{e}");
    // No temporary files were left by any of it.
    let r = exec(&c, json!({"computer_id": id, "command": "ls -a /data"})).await?;
    assert!(!r["stdout"].as_str().unwrap_or("").contains(".msc-"), "{r}");
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_15_wasm_files_stay_inside_the_computer() -> anyhow::Result<()> {
    let t = tag("wfesc");
    let state = state_dir(&t);
    let c = stdio_client(&t, &state, &opts()).await?;
    let id = "esc";
    call_ok(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/in.txt", "content": "inside"}),
    )
    .await?;
    // A host file next to the computer, and symlinks inside it pointing out.
    let secret = state.join("host-secret.txt");
    std::fs::write(&secret, "host only")?;
    let fs = state.join("wasm").join(id).join("fs");
    anyhow::ensure!(fs.is_dir(), "no computer dir at {}", fs.display());
    std::os::unix::fs::symlink(&secret, fs.join("abs-link"))?;
    std::os::unix::fs::symlink("../../host-secret.txt", fs.join("rel-link"))?;
    std::os::unix::fs::symlink(state.as_os_str(), fs.join("dir-link"))?;
    for path in [
        "/abs-link",
        "/rel-link",
        "/../../host-secret.txt",
        "/dir-link/host-secret.txt",
    ] {
        let e = call_error(
            &c,
            "computer_file_read",
            json!({"computer_id": id, "path": path}),
        )
        .await?;
        assert!(!e.contains("host only"), "{path}: {e}");
        // A write is refused too (it used to replace a final link with a file).
        let e = call_error(
            &c,
            "computer_file_write",
            json!({"computer_id": id, "path": path, "content": "pwned"}),
        )
        .await?;
        if path.ends_with("-link") {
            assert!(e.contains("outside this computer"), "{path}: {e}");
        }
        let e = call_error(
            &c,
            "computer_file_write",
            json!({"computer_id": id, "path": path, "content": "pwned", "append": true}),
        )
        .await?;
        assert!(!e.is_empty(), "{path}");
        let r = call(
            &c,
            "computer_file_edit",
            json!({"computer_id": id, "path": path, "old_text": "host", "new_text": "pwned"}),
        )
        .await?;
        assert_eq!(r.is_error, Some(true), "{path}");
        assert_eq!(std::fs::read_to_string(&secret)?, "host only", "{path}");
    }
    assert!(!state.join("pwned").exists());
    // Nothing changed: the links are still the links they were.
    for (link, to) in [
        ("abs-link", secret.clone()),
        ("rel-link", "../../host-secret.txt".into()),
    ] {
        assert_eq!(std::fs::read_link(fs.join(link))?, to, "{link}");
    }
    // A link inside the computer is followed, for reads and writes (like a shell's `>`).
    std::os::unix::fs::symlink("in.txt", fs.join("ok-link"))?;
    let r = call_ok(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/ok-link"}),
    )
    .await?;
    assert_eq!(r["content"], "inside");
    call_ok(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/ok-link", "content": "through", "mode": "0600"}),
    )
    .await?;
    call_ok(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/ok-link", "content": " and on", "append": true}),
    )
    .await?;
    assert!(std::fs::symlink_metadata(fs.join("ok-link"))?.is_symlink());
    assert_eq!(
        std::fs::read_to_string(fs.join("in.txt"))?,
        "through and on"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(fs.join("in.txt"))?.permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // A chain of links with `..` that stays inside, ending at a file not there yet.
    std::fs::create_dir_all(fs.join("sub/deeper"))?;
    std::os::unix::fs::symlink("../../made.txt", fs.join("sub/deeper/up-link"))?;
    std::os::unix::fs::symlink("deeper/up-link", fs.join("sub/chain"))?;
    call_ok(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/sub/chain", "content": "made"}),
    )
    .await?;
    assert_eq!(std::fs::read_to_string(fs.join("made.txt"))?, "made");
    assert!(std::fs::symlink_metadata(fs.join("sub/chain"))?.is_symlink());
    // create_only does not follow: the link is a name that exists.
    let e = call_error(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/ok-link", "content": "x", "create_only": true}),
    )
    .await?;
    assert!(e.contains("already exists"), "{e}");
    // A loop is refused, changing nothing.
    std::os::unix::fs::symlink("loop-b", fs.join("loop-a"))?;
    std::os::unix::fs::symlink("loop-a", fs.join("loop-b"))?;
    let e = call_error(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/loop-a", "content": "x"}),
    )
    .await?;
    assert!(e.contains("symbolic links"), "{e}");
    assert_eq!(
        std::fs::read_link(fs.join("loop-a"))?,
        std::path::Path::new("loop-b")
    );
    c.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn issue_15_wasm_another_session_is_refused() -> anyhow::Result<()> {
    let t = tag("wfown");
    let server = HttpServer::start(&t, &state_dir(&t), &opts()).await?;
    let a = server.legacy_client(None).await?;
    let b = server.legacy_client(None).await?;
    call_ok(
        &a,
        "computer_file_write",
        json!({"computer_id": "mine", "path": "/s.txt", "content": "a's"}),
    )
    .await?;
    for (tool, args) in [
        (
            "computer_file_read",
            json!({"computer_id": "mine", "path": "/s.txt"}),
        ),
        (
            "computer_file_write",
            json!({"computer_id": "mine", "path": "/s.txt", "content": "b's"}),
        ),
        (
            "computer_file_edit",
            json!({"computer_id": "mine", "path": "/s.txt", "old_text": "a", "new_text": "b"}),
        ),
    ] {
        let e = call_error(&b, tool, args).await?;
        assert!(!e.contains("a's"), "{tool}: {e}");
    }
    let r = call_ok(
        &a,
        "computer_file_read",
        json!({"computer_id": "mine", "path": "/s.txt"}),
    )
    .await?;
    assert_eq!(r["content"], "a's");
    a.cancel().await?;
    b.cancel().await?;
    server.terminate().await?;
    Ok(())
}
