//! Issue 15: files as bytes (SPEC §3.9) on Docker, through the in-computer supervisor and
//! through the Engine's archive API (computers without the supervisor).

use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use tests::*;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn files_opts(plain: bool) -> ServerOpts {
    ServerOpts::default()
        .arg("--tools=files,lifecycle")
        .plain_if(plain)
}

fn sha(bytes: &[u8]) -> String {
    shared::files::sha256_hex(bytes)
}

/// Calls a file tool; its structured content, or the failure's error text.
async fn file(c: &Client, tool: &str, arguments: Value) -> anyhow::Result<Result<Value, String>> {
    let r = call(c, tool, arguments).await?;
    let s = r.structured_content.clone().unwrap_or(Value::Null);
    if r.is_error == Some(true) {
        let e = s["error"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| text(&r));
        return Ok(Err(e));
    }
    Ok(Ok(s))
}

async fn ok(c: &Client, tool: &str, arguments: Value) -> anyhow::Result<Value> {
    match file(c, tool, arguments.clone()).await? {
        Ok(v) => Ok(v),
        Err(e) => anyhow::bail!("{tool} {arguments} failed: {e}"),
    }
}

async fn refused(c: &Client, tool: &str, arguments: Value) -> anyhow::Result<String> {
    match file(c, tool, arguments.clone()).await? {
        Ok(v) => anyhow::bail!("{tool} {arguments} should fail: {v}"),
        Err(e) => Ok(e),
    }
}

/// The bytes of a read slice.
fn bytes_of(r: &Value) -> Vec<u8> {
    match (r["content"].as_str(), r["content_base64"].as_str()) {
        (Some(t), _) => t.as_bytes().to_vec(),
        (None, Some(b)) => B64.decode(b).unwrap(),
        _ => panic!("no content in {r}"),
    }
}

async fn sh(c: &Client, id: &str, command: &str) -> anyhow::Result<String> {
    let r = exec(c, json!({"command": command, "computer_id": id})).await?;
    anyhow::ensure!(r["exit_code"] == 0, "{command}: {r}");
    Ok(r["stdout"].as_str().unwrap_or_default().to_owned())
}

/// Everything but the cross-session check, on one computer.
pub(crate) async fn files_on(c: &Client, id: &str) -> anyhow::Result<()> {
    // Every byte value, NUL runs and invalid UTF-8, through base64.
    let mut bytes: Vec<u8> = (0..=255u8).collect();
    bytes.extend([0u8; 300]);
    bytes.extend([0xc3, 0x28, 0xff, 0xfe]);
    let w = ok(
        c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/bin.dat", "content_base64": B64.encode(&bytes)}),
    )
    .await?;
    assert_eq!(
        (w["size"].as_u64(), w["sha256"].as_str()),
        (Some(bytes.len() as u64), Some(sha(&bytes).as_str())),
        "{w}"
    );
    let r = ok(
        c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/tmp/bin.dat"}),
    )
    .await?;
    assert!(r["content"].is_null(), "{r}");
    assert_eq!(bytes_of(&r), bytes);
    assert_eq!(
        (r["eof"].as_bool(), r["mode"].as_str()),
        (Some(true), Some("0644")),
        "{r}"
    );
    assert_eq!(r["size"], bytes.len());
    let seen = sh(c, id, "sha256sum /tmp/bin.dat | cut -d' ' -f1").await?;
    assert_eq!(seen.trim(), sha(&bytes));

    // Written by the tool, seen by the shell; and the other way round.
    ok(
        c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/run.sh", "content": "#!/bin/sh\necho ran\n", "mode": "0755"}),
    )
    .await?;
    assert_eq!(
        sh(c, id, "/tmp/run.sh; stat -c %a /tmp/run.sh").await?,
        "ran\n755\n"
    );
    sh(
        c,
        id,
        "printf 'from shell\\n' > /tmp/s.txt; chmod 600 /tmp/s.txt",
    )
    .await?;
    let r = ok(
        c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/tmp/s.txt"}),
    )
    .await?;
    assert_eq!(
        (r["content"].as_str(), r["mode"].as_str()),
        (Some("from shell\n"), Some("0600")),
        "{r}"
    );
    assert!(r["mtime"].as_str().is_some_and(|m| m.ends_with('Z')), "{r}");
    // A slice, and past the end.
    let r = ok(
        c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/tmp/s.txt", "offset": 5, "length": 3}),
    )
    .await?;
    assert_eq!(
        (r["content"].as_str(), r.get("eof")),
        (Some("she"), None),
        "{r}"
    );
    let r = ok(
        c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/tmp/s.txt", "offset": 500}),
    )
    .await?;
    assert_eq!(
        (r["content"].as_str(), r["eof"].as_bool()),
        (Some(""), Some(true)),
        "{r}"
    );

    // 6 MiB in appended 4 MiB slices, read back in slices.
    let mut x: u32 = 0x2545_f491;
    let big: Vec<u8> = (0..6 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 7) as u8
        })
        .collect();
    let started = Instant::now();
    let mut last = Value::Null;
    for (i, slice) in big.chunks(4 << 20).enumerate() {
        last = ok(
            c,
            "computer_file_write",
            json!({"computer_id": id, "path": "/tmp/big.bin", "content_base64": B64.encode(slice), "append": i > 0}),
        )
        .await?;
    }
    assert_eq!(last["sha256"], sha(&big));
    assert_eq!(last["size"], big.len());
    let mut back = Vec::new();
    loop {
        let r = ok(
            c,
            "computer_file_read",
            json!({"computer_id": id, "path": "/tmp/big.bin", "offset": back.len()}),
        )
        .await?;
        back.extend(bytes_of(&r));
        if r["eof"] == true {
            break;
        }
        assert!(back.len() < big.len());
    }
    assert_eq!(sha(&back), sha(&big));
    eprintln!("6 MiB written and read back in {:?}", started.elapsed());
    let seen = sh(c, id, "sha256sum /tmp/big.bin | cut -d' ' -f1").await?;
    assert_eq!(seen.trim(), sha(&big));

    // create_only refuses an existing file and keeps it.
    let e = refused(
        c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/s.txt", "content": "new", "create_only": true}),
    )
    .await?;
    assert!(
        e.contains("already exists") && e.contains("create_only"),
        "{e}"
    );
    assert_eq!(sh(c, id, "cat /tmp/s.txt").await?, "from shell\n");

    // Edits: 0 or 2 matches change nothing; 1 works and keeps the mode.
    sh(
        c,
        id,
        "printf 'a = 1\\nb = 2\\nb = 2\\n' > /tmp/e.conf; chmod 640 /tmp/e.conf",
    )
    .await?;
    let e = refused(
        c,
        "computer_file_edit",
        json!({"computer_id": id, "path": "/tmp/e.conf", "old_text": "zzz", "new_text": "y"}),
    )
    .await?;
    assert!(e.contains("not found"), "{e}");
    let e = refused(
        c,
        "computer_file_edit",
        json!({"computer_id": id, "path": "/tmp/e.conf", "old_text": "b = 2", "new_text": "b = 3"}),
    )
    .await?;
    assert!(e.contains("2 times"), "{e}");
    assert_eq!(sh(c, id, "cat /tmp/e.conf").await?, "a = 1\nb = 2\nb = 2\n");
    let r = ok(
        c,
        "computer_file_edit",
        json!({"computer_id": id, "path": "/tmp/e.conf", "old_text": "a = 1", "new_text": "a = 10"}),
    )
    .await?;
    assert_eq!(
        (r["replacements"].as_u64(), r["size"].as_u64()),
        (Some(1), Some(19)),
        "{r}"
    );
    assert_eq!(
        sh(c, id, "cat /tmp/e.conf; stat -c %a /tmp/e.conf").await?,
        "a = 10\nb = 2\nb = 2\n640\n"
    );

    // A directory and a missing path are clear errors.
    let e = refused(
        c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/tmp"}),
    )
    .await?;
    assert!(e.contains("is a directory"), "{e}");
    let e = refused(
        c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/tmp/nope.txt"}),
    )
    .await?;
    assert!(e.contains("does not exist"), "{e}");

    // A missing directory: refused without make_dirs, created with it.
    let e = refused(
        c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/new/deep/f.txt", "content": "x"}),
    )
    .await?;
    assert!(e.contains("make_dirs"), "{e}");
    let gone = sh(c, id, "ls /tmp/new 2>&1 || true").await?;
    assert!(gone.contains("No such"), "{gone}");
    ok(
        c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/new/deep/f.txt", "content": "x", "make_dirs": true}),
    )
    .await?;
    assert_eq!(
        sh(c, id, "cat /tmp/new/deep/f.txt; stat -c %a /tmp/new/deep").await?,
        "x755\n"
    );
    // Nothing but what was written is left in /tmp (no temporary files).
    let listing = sh(c, id, "ls -A /tmp | sort | tr '\\n' ' '").await?;
    assert_eq!(
        listing, "big.bin bin.dat e.conf new run.sh s.txt ",
        "temporary files left behind"
    );
    Ok(())
}

/// A computer stopped behind the server's back is started again by a file call.
async fn stopped_then_read(c: &Client, id: &str) -> anyhow::Result<()> {
    ok(
        c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/root/k", "content": "kept"}),
    )
    .await?;
    docker()?
        .stop_container(
            &format!("kilntainer-{id}"),
            None::<bollard::query_parameters::StopContainerOptions>,
        )
        .await?;
    let r = ok(
        c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/root/k"}),
    )
    .await?;
    assert_eq!(r["content"], "kept");
    Ok(())
}

#[tokio::test]
async fn issue_15_files_through_the_supervisor() -> anyhow::Result<()> {
    let t = tag("files");
    let c = stdio_client(&t, &state_dir(&t), &files_opts(false)).await?;
    let id = format!("{t}-a");
    files_on(&c, &id).await?;
    stopped_then_read(&c, &id).await?;
    // A read-only file system is refused, naming it.
    let e = refused(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/sys/msc-test", "content": "x"}),
    )
    .await?;
    assert!(e.contains("/sys/msc-test"), "{e}");
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

#[tokio::test]
async fn issue_15_files_through_the_archive_api() -> anyhow::Result<()> {
    let t = tag("filesplain");
    let c = stdio_client(&t, &state_dir(&t), &files_opts(true)).await?;
    let id = format!("{t}-a");
    files_on(&c, &id).await?;
    stopped_then_read(&c, &id).await?;
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

#[tokio::test]
async fn issue_15_another_sessions_temporary_computer_is_refused() -> anyhow::Result<()> {
    let t = tag("filesown");
    let state = state_dir(&t);
    let a = stdio_client(&t, &state, &files_opts(false)).await?;
    let b = stdio_client(&t, &state, &files_opts(false)).await?;
    let id = format!("{t}-tmp");
    ok(
        &a,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/secret", "content": "s3cret"}),
    )
    .await?;
    for (tool, args) in [
        (
            "computer_file_read",
            json!({"computer_id": id, "path": "/tmp/secret"}),
        ),
        (
            "computer_file_write",
            json!({"computer_id": id, "path": "/tmp/secret", "content": "mine"}),
        ),
        (
            "computer_file_edit",
            json!({"computer_id": id, "path": "/tmp/secret", "old_text": "s3", "new_text": "x"}),
        ),
    ] {
        let e = refused(&b, tool, args).await?;
        assert!(e.contains("another session"), "{tool}: {e}");
    }
    let r = ok(
        &a,
        "computer_file_read",
        json!({"computer_id": id, "path": "/tmp/secret"}),
    )
    .await?;
    assert_eq!(r["content"], "s3cret");
    a.cancel().await?;
    b.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

/// Podman's Docker-compatible API (see `podman.rs` for what it needs): both paths.
#[tokio::test]
async fn issue_15_files_on_podman() -> anyhow::Result<()> {
    for plain in [false, true] {
        let t = tag(if plain { "podfilesplain" } else { "podfiles" });
        let opts = ServerOpts::default()
            .arg("--tools=files,lifecycle")
            .podman()
            .plain_if(plain);
        let c = stdio_client(&t, &state_dir(&t), &opts).await?;
        files_on(&c, &format!("{t}-a")).await?;
        c.cancel().await?;
    }
    Ok(())
}
