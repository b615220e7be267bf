//! Issue 46, item 10: files at their edges. A download of a file written meanwhile fails
//! its stream instead of a clean 200 (WASM and Docker); the WASM file tools see the
//! read-only base layer the shell sees; an upload refused before its body is answered
//! before the body is read (`Expect: 100-continue`, or read and dropped so the client
//! sees the status); `--disk` limits a Docker computer's disk where the storage driver
//! can, and is refused at start-up where it cannot.

use std::io::{Read, Write};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use tests::*;

const BIG: u64 = 48 << 20;

fn url(server: &HttpServer, id: &str, path: &str) -> String {
    format!("{}/v1/files/{id}{path}", server.base)
}

/// Downloads `path` of `id`, calling `change` once the first MiB came (the server is then
/// mid-file: the client reads no further for a while); how the body ended.
async fn download_while_changed(
    server: &HttpServer,
    id: &str,
    path: &str,
    change: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<Result<u64, String>> {
    let r = reqwest::Client::new()
        .get(url(server, id, path))
        .send()
        .await?;
    anyhow::ensure!(r.status() == 200, "{}", r.status());
    let mut body = r.bytes_stream();
    let mut got = 0u64;
    while got < 1 << 20 {
        match body.next().await {
            Some(Ok(b)) => got += b.len() as u64,
            other => anyhow::bail!("the body ended early before the change: {other:?}"),
        }
    }
    change.await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(b) => got += b.len() as u64,
            Err(e) => return Ok(Err(format!("{e:?}"))),
        }
    }
    Ok(Ok(got))
}

#[tokio::test]
async fn issue_46_a_download_of_a_file_written_meanwhile_fails_on_wasm() -> anyhow::Result<()> {
    let t = tag("fchg");
    let state = state_dir(&t);
    let server = HttpServer::start(&t, &state, &wasm_opts().arg("--tools=files")).await?;
    let http = reqwest::Client::new();
    let r = http
        .put(url(&server, "chg", "/data.bin?make_dirs=true"))
        .body(reqwest::Body::wrap_stream(pattern_stream(BIG)))
        .send()
        .await?;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    // A file nobody writes downloads whole.
    let r = http.get(url(&server, "chg", "/data.bin")).send().await?;
    assert_eq!(hash_body(r).await?, pattern_digest(BIG).await);
    // A WASM computer's files are host files: grow it, then write in place, mid-download.
    let host = state.join("wasm/chg/fs/data.bin");
    let grow = async {
        let mut f = std::fs::OpenOptions::new().append(true).open(&host)?;
        f.write_all(b"more")?;
        Ok(())
    };
    let end = download_while_changed(&server, "chg", "/data.bin", grow).await?;
    assert!(
        end.is_err(),
        "a file grown mid-download must not end cleanly: {end:?}"
    );
    let overwrite = async {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&host)?;
        f.write_all_at(b"XXXX", BIG - 8)?;
        Ok(())
    };
    let end = download_while_changed(&server, "chg", "/data.bin", overwrite).await?;
    assert!(
        end.is_err(),
        "a file written in place mid-download: {end:?}"
    );
    // Once nothing writes to it, it downloads whole again.
    let r = http.get(url(&server, "chg", "/data.bin")).send().await?;
    assert_eq!(hash_body(r).await?.1, BIG + 4);
    server.terminate().await?;
    Ok(())
}

#[tokio::test]
async fn issue_46_a_download_of_a_file_written_meanwhile_fails_on_docker() -> anyhow::Result<()> {
    let t = tag("fchgd");
    let server = HttpServer::start(
        &t,
        &state_dir(&t),
        &ServerOpts::default().arg("--tools=files"),
    )
    .await?;
    let http = reqwest::Client::new();
    let r = http
        .put(url(&server, "chgd", "/srv/data.bin?make_dirs=true"))
        .body(reqwest::Body::wrap_stream(pattern_stream(BIG)))
        .send()
        .await?;
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    let c = server.modern_client(None).await?;
    // Written in place near its end (the engine's archive stream has not read that far).
    let seek = BIG - 8;
    let overwrite = async {
        exec(
            &c,
            json!({"computer_id": "chgd", "command": format!("printf XXXX | dd of=/srv/data.bin bs=1 seek={seek} conv=notrunc 2>/dev/null")}),
        )
        .await
        .map(|_| ())
    };
    let end = download_while_changed(&server, "chgd", "/srv/data.bin", overwrite).await?;
    assert!(
        end.is_err(),
        "a file written mid-download must not end cleanly: {end:?}"
    );
    // Grown meanwhile.
    let grow = async {
        exec(
            &c,
            json!({"computer_id": "chgd", "command": "printf more >> /srv/data.bin"}),
        )
        .await
        .map(|_| ())
    };
    let end = download_while_changed(&server, "chgd", "/srv/data.bin", grow).await?;
    assert!(end.is_err(), "a file grown mid-download: {end:?}");
    // Nothing writes it now: whole.
    let r = http
        .get(url(&server, "chgd", "/srv/data.bin"))
        .send()
        .await?;
    assert_eq!(hash_body(r).await?.1, BIG + 4);
    c.cancel().await?;
    server.terminate().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}

#[tokio::test]
async fn issue_46_wasm_file_tools_see_the_base_layer_the_shell_sees() -> anyhow::Result<()> {
    let t = tag("wbase");
    let state = state_dir(&t);
    let c = stdio_client(&t, &state, &wasm_opts().arg("--tools=all")).await?;
    let id = "wb";
    for path in [
        "/etc/os-release",
        "/etc/hostname",
        "/proc/version",
        "/bin/ls",
        "/etc/passwd",
    ] {
        let shell = exec(
            &c,
            json!({"computer_id": id, "command": format!("cat {path}")}),
        )
        .await?;
        assert_eq!(shell["exit_code"], 0, "cat {path}: {shell}");
        let tool = call_ok(
            &c,
            "computer_file_read",
            json!({"computer_id": id, "path": path}),
        )
        .await?;
        assert_eq!(tool["content"], shell["stdout"], "{path}: {tool}");
    }
    // Writes there are refused as the shell's are, changing nothing.
    let shell = exec(
        &c,
        json!({"computer_id": id, "command": "echo x > /etc/os-release"}),
    )
    .await?;
    assert!(
        shell["stderr"].as_str().unwrap_or("").contains("Read-only"),
        "{shell}"
    );
    let before = call_ok(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/etc/os-release"}),
    )
    .await?;
    for (tool, args) in [
        (
            "computer_file_write",
            json!({"computer_id": id, "path": "/etc/os-release", "content": "x"}),
        ),
        (
            "computer_file_write",
            json!({"computer_id": id, "path": "/etc/new.conf", "content": "x"}),
        ),
        (
            "computer_file_write",
            json!({"computer_id": id, "path": "/usr/bin/tool", "content": "x", "append": true}),
        ),
        (
            "computer_file_write",
            json!({"computer_id": id, "path": "/etc/sub/x", "content": "x", "make_dirs": true}),
        ),
        (
            "computer_file_edit",
            json!({"computer_id": id, "path": "/etc/os-release", "old_text": "MCP", "new_text": "XYZ", "expected_replacements": 2}),
        ),
    ] {
        let e = call_error(&c, tool, args.clone()).await?;
        assert!(e.contains("read-only base layer"), "{tool} {args}: {e}");
    }
    let after = call_ok(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/etc/os-release"}),
    )
    .await?;
    assert_eq!(before["content"], after["content"]);
    let shell = exec(
        &c,
        json!({"computer_id": id, "command": "ls /etc; ls /usr/bin | grep -c '^tool$'"}),
    )
    .await?;
    let listing = shell["stdout"].as_str().unwrap_or("");
    assert!(
        !listing.contains("new.conf") && !listing.contains("sub"),
        "{shell}"
    );
    // Nothing landed in the writable layer under the mount points either.
    let fs = state.join(format!("wasm/{id}/fs"));
    for hidden in ["etc/os-release", "etc/new.conf", "usr/bin/tool", "etc/sub"] {
        assert!(
            !fs.join(hidden).exists(),
            "{hidden} was written under the mount"
        );
    }
    // Devices are the shell's, not files.
    let e = call_error(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/dev/null"}),
    )
    .await?;
    assert!(e.contains("device"), "{e}");
    // The writable layer is as before.
    call_ok(
        &c,
        "computer_file_write",
        json!({"computer_id": id, "path": "/tmp/mine", "content": "mine"}),
    )
    .await?;
    let r = call_ok(
        &c,
        "computer_file_read",
        json!({"computer_id": id, "path": "/tmp/mine"}),
    )
    .await?;
    assert_eq!(r["content"], "mine");
    c.cancel().await?;
    Ok(())
}

/// Sends a PUT head (and with `body_bytes`, that many bytes of body without waiting,
/// from another thread) over a raw connection; the status line of the first answer, the
/// whole first answer, and how many body bytes went out before the sender stopped.
fn raw_put(
    addr: &str,
    target: &str,
    expect: bool,
    length: u64,
    body_bytes: u64,
) -> anyhow::Result<(String, String, Result<u64, String>)> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let head = format!(
        "PUT {target} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {length}\r\n{}\r\n",
        if expect {
            "Expect: 100-continue\r\n"
        } else {
            ""
        }
    );
    s.write_all(head.as_bytes())?;
    let mut w = s.try_clone()?;
    let sender = std::thread::spawn(move || {
        let chunk = vec![b'x'; 64 << 10];
        let mut sent = 0u64;
        while sent < body_bytes {
            let n = (body_bytes - sent).min(chunk.len() as u64) as usize;
            if let Err(e) = w.write_all(&chunk[..n]) {
                return Err(format!("after {sent} bytes: {e}"));
            }
            sent += n as u64;
        }
        Ok(sent)
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // The head and a short JSON body; the server closes after it.
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if answer.is_empty() => anyhow::bail!("no answer: {e}"),
            Err(_) => break,
        }
        let text = String::from_utf8_lossy(&answer);
        if let Some(i) = text.find("\r\n\r\n")
            && text[i..].contains('}')
        {
            break;
        }
    }
    let sent = sender
        .join()
        .map_err(|_| anyhow::anyhow!("the sender panicked"))?;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.lines().next().unwrap_or_default().to_owned();
    Ok((status, text, sent))
}

#[tokio::test]
async fn issue_46_a_refused_upload_is_answered_before_its_body() -> anyhow::Result<()> {
    let t = tag("fearly");
    let server = HttpServer::start(&t, &state_dir(&t), &wasm_opts().arg("--tools=files")).await?;
    let addr = server
        .base
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let r = reqwest::Client::new()
        .put(url(&server, "early", "/ok.txt"))
        .body("here")
        .send()
        .await?;
    assert_eq!(r.status(), 201);
    // Expect: 100-continue: the refusal comes instead of `100 Continue`, nothing sent.
    for (target, status) in [
        ("/v1/files/early/no/such/dir/f.bin", "404"),
        ("/v1/files/Bad_Id/f.bin", "400"),
        ("/v1/files/early/f.bin?mode=rwx", "400"),
        ("/v1/files/early/f.bin?", "413"),
    ] {
        let length = if status == "413" { 4 << 30 } else { 512 << 20 };
        let a = addr.clone();
        let (line, text, _) =
            tokio::task::spawn_blocking(move || raw_put(&a, target, true, length, 0)).await??;
        assert!(
            line.starts_with("HTTP/1.1 ") && line.contains(status),
            "{target}: the first answer must be the refusal, not `100 Continue`: {text}"
        );
    }
    // No Expect: the client sends at once; it still reads the refusal, and the server
    // reads (and drops) what it sends meanwhile instead of resetting the connection.
    for (target, status) in [
        ("/v1/files/early/no/such/dir/f.bin", "404"),
        ("/v1/files/Bad_Id/f.bin", "400"),
    ] {
        let a = addr.clone();
        let n = 32u64 << 20;
        let (line, text, sent) =
            tokio::task::spawn_blocking(move || raw_put(&a, target, false, 512 << 20, n)).await??;
        assert!(line.contains(status), "{target}: {text}");
        assert_eq!(
            sent,
            Ok(n),
            "{target}: the server stopped reading and reset the connection"
        );
    }
    server.terminate().await?;
    Ok(())
}

#[tokio::test]
async fn issue_46_disk_limit_holds_where_the_driver_can_and_is_refused_where_it_cannot()
-> anyhow::Result<()> {
    let info = std::process::Command::new("docker")
        .args(["info", "--format", "{{.Driver}} {{json .DriverStatus}}"])
        .output()?;
    let info = String::from_utf8_lossy(&info.stdout).into_owned();
    let t = tag("disk");
    let opts = ServerOpts::default().arg("--disk").arg("256m");
    if info.starts_with("overlay2") && !info.contains("\"xfs\"") {
        // This machine: overlay2 on a filesystem without project quotas.
        let out = command(&t, &state_dir(&t), &opts)
            .stdin(std::process::Stdio::null())
            .output()
            .await?;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        for needle in [
            "--disk",
            "overlay2 on",
            "pquota",
            "btrfs",
            "zfs",
            "without --disk",
        ] {
            assert!(err.contains(needle), "{needle}: {err}");
        }
        // Not "no container engine" and no fallback to WebAssembly.
        assert!(!err.contains("WebAssembly"), "{err}");
        return wait_for_count(&t, 0, Duration::from_secs(5)).await;
    }
    // A driver that can: the computer's own files stop at the limit.
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let r = exec(
        &c,
        json!({"command": "dd if=/dev/zero of=/fill bs=1M count=512 2>&1; echo rc=$?", "timeout": 120}),
    )
    .await?;
    let out = r["stdout"].as_str().unwrap_or("");
    assert!(
        out.contains("No space left") || out.contains("quota") || !out.contains("rc=0"),
        "{r}"
    );
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(20)).await
}
