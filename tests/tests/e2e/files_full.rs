//! Issue 15: a full disk on Docker, through the supervisor and through the Engine's
//! archive API, over the tools and `/v1/files`: a clear error that says what to do, and
//! the old file exactly as it was, with no temporary left behind. The disk is a 1 MiB
//! tmpfs on the host, bind-mounted into the computer (the archive API does not see a
//! tmpfs mounted inside a container, so a HostConfig tmpfs would test nothing there).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tests::*;

/// A 1 MiB tmpfs at a directory of the test's own, unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(at: &Path) -> anyhow::Result<SmallDisk> {
        std::fs::create_dir_all(at)?;
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m,mode=0777", "msc-test-full"])
            .arg(at)
            .status()?;
        anyhow::ensure!(st.success(), "mount -t tmpfs {} (needs root)", at.display());
        Ok(SmallDisk(at.to_owned()))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// The old file's content, then how many names `/small` holds (`.`, `..`, the file).
async fn kept(c: &Client, id: &str) -> anyhow::Result<String> {
    let r = exec(
        c,
        json!({"computer_id": id, "command": "cat /small/keep.txt; ls -a /small | wc -l"}),
    )
    .await?;
    Ok(r["stdout"].as_str().unwrap_or_default().to_owned())
}

fn says_full(e: &str) -> bool {
    e.contains("full") && e.contains("free space")
}

#[tokio::test]
async fn issue_15_a_full_disk_is_said_and_keeps_the_old_file() -> anyhow::Result<()> {
    for plain in [false, true] {
        let t = tag(if plain { "fullp" } else { "full" });
        let state = state_dir(&t);
        let disk = SmallDisk::mount(&state.join("small"))?;
        let opts = ServerOpts::default()
            .arg("--tools=files")
            .arg(&format!("--docker-run-flag=-v={}:/small", disk.0.display()))
            .plain_if(plain);
        let server = HttpServer::start(&t, &state, &opts).await?;
        let c = server.modern_client(None).await?;
        let id = "fullbox";
        let old = "the old content\n";
        let r = call(
            &c,
            "computer_file_write",
            json!({"computer_id": id, "path": "/small/keep.txt", "content": old}),
        )
        .await?;
        anyhow::ensure!(r.is_error != Some(true), "plain={plain}: {}", text(&r));
        let big = "x".repeat(2 << 20);
        // The tools: a replace and an append that do not fit.
        for append in [false, true] {
            let e = call_error(
                &c,
                "computer_file_write",
                json!({"computer_id": id, "path": "/small/keep.txt", "content": big, "append": append}),
            )
            .await?;
            assert!(says_full(&e), "plain={plain} append={append}: {e}");
            assert_eq!(
                kept(&c, id).await?,
                format!("{old}3\n"),
                "plain={plain} append={append}"
            );
        }
        // /v1/files: below and above the size from which the archive API streams, and
        // a body without a Content-Length.
        let http = reqwest::Client::new();
        let url = format!("{}/v1/files/{id}/small/keep.txt", server.base);
        for (n, sized) in [(2usize << 20, true), (9 << 20, true), (3 << 20, false)] {
            let body = if sized {
                reqwest::Body::from(vec![b'y'; n])
            } else {
                reqwest::Body::wrap_stream(pattern_stream(n as u64))
            };
            let r = http.put(&url).body(body).send().await?;
            let status = r.status();
            let e: Value = r.json().await.unwrap_or_default();
            assert!(!status.is_success(), "plain={plain} n={n}: {status} {e}");
            let e = e["error"].as_str().unwrap_or_default();
            assert!(
                says_full(e),
                "plain={plain} n={n} sized={sized}: {status} {e}"
            );
            assert_eq!(
                kept(&c, id).await?,
                format!("{old}3\n"),
                "plain={plain} n={n}"
            );
        }
        // Space freed, the same write goes through.
        let r = http.put(&url).body(vec![b'z'; 300 << 10]).send().await?;
        assert_eq!(r.status(), 201, "plain={plain}: {:?}", r.text().await);
        c.cancel().await?;
        server.terminate().await?;
        wait_for_count(&t, 0, Duration::from_secs(20)).await?;
        drop(disk);
    }
    Ok(())
}
