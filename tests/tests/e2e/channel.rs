//! Issue 18: the direct channel to the supervisor (a unix socket in a per-computer host
//! directory) and the relay give the same results; a computer sees only its own directory,
//! and what it plants there never leads the server to another computer. Issue 46: the
//! computer cannot write there at all, deleting one never stalls other callers, and the
//! next start reaps what a killed server left.

use std::time::{Duration, Instant};

use serde_json::json;
use tests::*;

/// The uid this test (and so the server it starts) runs as.
fn my_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0)
}

async fn sh(c: &Client, id: &str, command: &str) -> anyhow::Result<String> {
    let r = exec(c, json!({"command": command, "computer_id": id})).await?;
    Ok(r["stdout"].as_str().unwrap_or_default().to_owned())
}

/// The computer's host directory, as its label names it.
async fn channel_dir(id: &str) -> anyhow::Result<Option<String>> {
    let c = docker()?
        .inspect_container(&format!("kilntainer-{id}"), None)
        .await?;
    Ok(c.config
        .and_then(|c| c.labels)
        .and_then(|l| l.get("mcp-sandbox.channel").cloned()))
}

/// What a failed wait saw: the test's containers (name, state, labels) and its servers'
/// log tails.
async fn situation(tag: &str) -> String {
    let list = containers(tag).await.unwrap_or_default();
    let mut out = String::from("\ncontainers:");
    for c in list {
        out.push_str(&format!(
            "\n  {:?} {:?} {:?}",
            c.names.unwrap_or_default(),
            c.state,
            c.labels.unwrap_or_default()
        ));
    }
    out + &log_tail(tag, 40)
}

/// Processes in the computer that are a supervisor relay.
async fn relays(c: &Client, id: &str) -> anyhow::Result<usize> {
    let out = sh(
        c,
        id,
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^/.msc/msc-supervisor relay' || true",
    )
    .await?;
    Ok(out.trim().parse()?)
}

/// A job started, fed, and read to its end: the job frames on this channel.
async fn a_job(c: &Client, id: &str) -> anyhow::Result<()> {
    let r = exec(
        c,
        json!({"command": "read l; echo \"got $l\"; sleep 0.3; echo done", "yield_ms": 100, "computer_id": id}),
    )
    .await?;
    assert_eq!(r["running"], true, "{r}");
    let job = r["job_id"].as_str().unwrap_or_default().to_owned();
    let mut out = String::new();
    let mut args = json!({"job_id": job, "computer_id": id, "stdin": "x\n", "close_stdin": true});
    for _ in 0..50 {
        let r = call(c, "terminal_job", args).await?;
        assert_eq!(r.is_error, Some(false), "{r:?}");
        let r = r.structured_content.unwrap_or_default();
        args = json!({"job_id": job, "computer_id": id, "wait_ms": 2000});
        out.push_str(r["stdout"].as_str().unwrap_or_default());
        if r["running"] == false {
            assert_eq!(r["exit_code"], 0, "{r}");
            break;
        }
    }
    assert_eq!(out, "got x\ndone\n");
    Ok(())
}

#[tokio::test]
async fn issue_18_direct_channel_and_relay_give_the_same_results() -> anyhow::Result<()> {
    let t = tag("chan");
    let all = ServerOpts::default().arg("--tools=all");
    let direct = HttpServer::start(&t, &state_dir(&t), &all).await?;
    let relay = HttpServer::start(
        &t,
        &state_dir(&t),
        &all.clone().arg("--supervisor-channel=relay"),
    )
    .await?;
    let (cd, cr) = (
        direct.legacy_client(None).await?,
        relay.legacy_client(None).await?,
    );
    let (d, r) = (format!("{t}-d"), format!("{t}-r"));
    for (c, id) in [(&cd, &d), (&cr, &r)] {
        crate::supervisor::same_results(c, id).await?;
        crate::files::files_on(c, id).await?;
        a_job(c, id).await?;
    }
    // Each took the path it says: no relay process in the direct one's computer, one in
    // the other's, and the counters agree.
    assert_eq!(relays(&cd, &d).await?, 0);
    assert_eq!(relays(&cr, &r).await?, 1);
    let series = |ch: &str| format!("msc_supervisor_connections_total{{channel=\"{ch}\"}}");
    assert!(metric(&direct.base, &series("direct")).await? >= 1.0);
    assert_eq!(metric(&direct.base, &series("relay")).await?, 0.0);
    assert_eq!(metric(&relay.base, &series("direct")).await?, 0.0);
    assert!(metric(&relay.base, &series("relay")).await? >= 1.0);
    // A relay server's computers have no host directory; a direct one's is under the
    // state directory, 0700, and goes with its computer.
    assert_eq!(channel_dir(&r).await?, None);
    let dir = channel_dir(&d).await?.expect("a host directory");
    let run = state_dir(&t).join("run");
    assert!(dir.starts_with(run.to_str().unwrap_or_default()), "{dir}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&dir)?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    // Restarted, the computer is reached directly again (the supervisor binds anew).
    let res = call(&cd, "computer_restart", json!({"computer_id": d})).await?;
    assert_eq!(res.is_error, Some(false));
    assert_eq!(sh(&cd, &d, "echo back").await?, "back\n");
    assert_eq!(relays(&cd, &d).await?, 0);
    let res = call(&cd, "computer_delete", json!({"computer_id": d})).await?;
    assert_eq!(res.is_error, Some(false), "{res:?}");
    assert!(
        !std::path::Path::new(&dir).exists(),
        "{dir} outlived its computer"
    );
    cd.cancel().await?;
    cr.cancel().await?;
    direct.terminate().await?;
    relay.terminate().await?;
    remove_all(&t).await
}

#[tokio::test]
async fn issue_18_a_computer_cannot_reach_another_computers_channel() -> anyhow::Result<()> {
    let t = tag("chansec");
    let opts = ServerOpts::lifecycle();
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let (a, b) = (format!("{t}-a"), format!("{t}-b"));
    for id in [&a, &b] {
        exec(
            &c,
            json!({"command": "true", "computer_id": id, "temporary": false}),
        )
        .await?;
    }
    let dir_b = channel_dir(&b).await?.expect("b's host directory");
    // A sees its own socket only: not B's directory, not the state directory.
    assert_eq!(sh(&c, &a, "ls -A /run/msc-host").await?, "sup.sock\n");
    let probe = format!(
        "test -e {dir_b} && echo B; test -e {run} && echo RUN; echo checked",
        run = state_dir(&t).join("run").display()
    );
    assert_eq!(sh(&c, &a, &probe).await?, "checked\n");
    // Root in A can reach its own supervisor's socket (it could anyway), but the host
    // socket answers no process inside the computer: a ping gets a pong on the one and
    // nothing on the other.
    let ping = |socket: &str| {
        format!(
            "(printf '\\005\\000\\000\\000\\005\\000\\000\\000\\000'; sleep 1) | timeout 5 /.msc/msc-supervisor relay --socket {socket} | wc -c"
        )
    };
    let inside = sh(&c, &a, &ping("/run/msc/sup.sock")).await?;
    assert_ne!(inside.trim(), "0", "no pong from the computer's own socket");
    assert_eq!(sh(&c, &a, &ping("/run/msc-host/sup.sock")).await?, "0\n");
    let mode = sh(&c, &a, "stat -c '%a %u' /run/msc-host/sup.sock").await?;
    assert_eq!(mode, format!("600 {}\n", my_uid()));
    // Root in A plants a symlink to B's socket (a host path) where its own socket was,
    // then a regular file. A new server must still reach A itself: it never follows what
    // the computer put there, and it relays instead.
    c.cancel().await?;
    let plant = [
        format!("rm -f /run/msc-host/sup.sock && ln -s {dir_b}/sup.sock /run/msc-host/sup.sock"),
        "rm -f /run/msc-host/sup.sock && echo x > /run/msc-host/sup.sock".to_owned(),
    ];
    for step in plant {
        let c = stdio_client(&t, &state_dir(&t), &opts).await?;
        sh(&c, &a, &step).await?;
        c.cancel().await?;
        let c = stdio_client(&t, &state_dir(&t), &opts).await?;
        assert_eq!(sh(&c, &a, "hostname").await?, format!("{a}\n"), "{step}");
        assert_eq!(sh(&c, &b, "hostname").await?, format!("{b}\n"));
        c.cancel().await?;
    }
    // Deleted through a server, both directories go (A's held a planted file).
    let dir_a = channel_dir(&a).await?.expect("a's host directory");
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    for id in [&a, &b] {
        let r = call(&c, "computer_delete", json!({"computer_id": id})).await?;
        assert_eq!(r.is_error, Some(false), "{r:?}");
    }
    c.cancel().await?;
    for dir in [dir_a, dir_b] {
        assert!(
            !std::path::Path::new(&dir).exists(),
            "{dir} outlived its computer"
        );
    }
    remove_all(&t).await
}

/// The entries of a host directory, as the host sees them.
fn entries(dir: &str) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<anyhow::Result<_>>()?;
    names.sort();
    Ok(names)
}

#[tokio::test]
async fn issue_46_a_computer_cannot_put_anything_in_its_host_directory() -> anyhow::Result<()> {
    let t = tag("hostdir");
    let c = stdio_client(&t, &state_dir(&t), &ServerOpts::lifecycle()).await?;
    let id = format!("{t}-a");
    exec(
        &c,
        json!({"command": "true", "computer_id": id, "temporary": false}),
    )
    .await?;
    let dir = channel_dir(&id).await?.expect("a host directory");
    // Root in the computer tries what the red team planted on the host through it.
    let attempts = [
        (
            "a block device (the host's first disk)",
            "mknod /run/msc-host/disk b 8 0",
        ),
        ("kmem", "mknod /run/msc-host/kmem c 1 2"),
        (
            "a setuid-root shell",
            "cp /bin/sh /run/msc-host/sh && chmod 4755 /run/msc-host/sh",
        ),
        (
            "many files",
            "for i in $(seq 1 2000); do : > /run/msc-host/f$i || exit 1; done",
        ),
        (
            "big data",
            "dd if=/dev/zero of=/run/msc-host/big bs=1M count=64 2>/dev/null",
        ),
        ("a directory", "mkdir /run/msc-host/d"),
        (
            "a replaced socket",
            "rm -f /run/msc-host/sup.sock && : > /run/msc-host/sup.sock",
        ),
        ("a writable remount", "mount -o remount,rw /run/msc-host"),
    ];
    for (what, command) in attempts {
        let r = exec(&c, json!({"command": command, "computer_id": id})).await?;
        assert_ne!(r["exit_code"], 0, "{what} was allowed: {r}");
    }
    // Nothing landed on the host: the socket the server bound, and nothing else.
    assert_eq!(entries(&dir)?, ["sup.sock"], "in {dir}");
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(format!("{dir}/sup.sock"))?
            .file_type()
            .is_socket()
    );
    let mount = sh(&c, &id, "grep ' /run/msc-host ' /proc/self/mountinfo").await?;
    assert!(mount.contains(" ro,"), "not mounted read-only: {mount}");
    // And the channel still serves, directly.
    assert_eq!(sh(&c, &id, "echo direct").await?, "direct\n");
    assert_eq!(relays(&c, &id).await?, 0);
    let r = call(&c, "computer_delete", json!({"computer_id": id})).await?;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert!(
        !std::path::Path::new(&dir).exists(),
        "{dir} outlived its computer"
    );
    c.cancel().await?;
    remove_all(&t).await
}

/// Issue 46: a computer whose host directory is big (its computer can no longer fill it,
/// so the test fills it from the host, as an older server's computer could) is deleted
/// while another caller lists tools: the removal runs off the runtime's workers, so the
/// other caller never waits for it.
#[tokio::test]
async fn issue_46_deleting_a_big_host_directory_does_not_stall_other_callers() -> anyhow::Result<()>
{
    const FILES: usize = 200_000;
    const BOUND: Duration = Duration::from_millis(300);
    let t = tag("bigdir");
    // One runtime worker, as on a one-CPU host: blocking work on it stalls every caller
    // (with more workers only some do, depending on where tasks land).
    let mut opts = ServerOpts::lifecycle();
    opts.env
        .push(("TOKIO_WORKER_THREADS".to_owned(), "1".to_owned()));
    let server = HttpServer::start(&t, &state_dir(&t), &opts).await?;
    let (a, b) = (
        server.legacy_client(None).await?,
        server.legacy_client(None).await?,
    );
    let id = format!("{t}-a");
    exec(
        &a,
        json!({"command": "true", "computer_id": id, "temporary": false}),
    )
    .await?;
    let dir = channel_dir(&id).await?.expect("a host directory");
    let fill = std::path::PathBuf::from(&dir).join("fill");
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        std::fs::create_dir(&fill)?;
        for i in 0..FILES {
            std::fs::File::create(fill.join(i.to_string()))?;
        }
        Ok(())
    })
    .await??;
    tool_names(&b).await?;
    let started = Instant::now();
    let id2 = id.clone();
    let delete = tokio::spawn(async move {
        let r = call(&a, "computer_delete", json!({"computer_id": id2})).await;
        (r, a)
    });
    let (mut worst, mut samples) = (Duration::ZERO, 0);
    while !delete.is_finished() {
        let s = Instant::now();
        tool_names(&b).await?;
        worst = worst.max(s.elapsed());
        samples += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed();
    let (r, a) = delete.await?;
    let r = r?;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert!(
        !std::path::Path::new(&dir).exists(),
        "{dir} outlived its computer"
    );
    eprintln!("delete took {took:?}; {samples} tools/list, the slowest {worst:?}");
    assert!(
        samples >= 3,
        "the delete ({took:?}) was too quick to measure"
    );
    assert!(
        worst < BOUND,
        "tools/list took {worst:?} while a computer was deleted ({took:?})"
    );
    a.cancel().await?;
    b.cancel().await?;
    server.terminate().await?;
    remove_all(&t).await
}

/// Issue 46: a server killed with SIGKILL leaves the host directories of its temporaries
/// and its warm pool; the next start reaps them at once (no two-minute wait), and keeps the
/// permanent computer's, which is still reached directly even after its container
/// restarted behind the servers' backs (the new supervisor gets a new listener).
#[tokio::test]
async fn issue_46_the_next_start_reaps_the_host_directories_of_a_killed_server()
-> anyhow::Result<()> {
    let t = tag("reapdirs");
    let state = state_dir(&t);
    let run = state.join("run");
    let pooled = ServerOpts::lifecycle().arg("--warm-pool").arg("2");
    let (c, pid) = stdio_client_pid(&t, &state, &pooled).await?;
    let keep = format!("{t}-keep");
    exec(
        &c,
        json!({"command": "true", "computer_id": keep, "temporary": false}),
    )
    .await?;
    for i in 0..3 {
        exec(
            &c,
            json!({"command": "true", "computer_id": format!("{t}-tmp{i}")}),
        )
        .await?;
    }
    let keep_dir = channel_dir(&keep).await?.expect("a host directory");
    // The pool refills in the background: wait for its two members' directories.
    // Deadlines are generous: CI runs this beside a browser test and the Worker's build.
    let deadline = Instant::now() + Duration::from_secs(120);
    while entries(run.to_str().unwrap_or_default())?.len() < 6 {
        if Instant::now() > deadline {
            anyhow::bail!("the warm pool did not fill{}", situation(&t).await);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    signal(pid, "KILL");
    drop(c);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(entries(run.to_str().unwrap_or_default())?.len() >= 6);
    // The permanent computer restarts while no server watches.
    docker()?
        .restart_container(&format!("kilntainer-{keep}"), None)
        .await?;
    let next = stdio_client(&t, &state, &ServerOpts::lifecycle()).await?;
    let keep_name = std::path::Path::new(&keep_dir)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let left = entries(run.to_str().unwrap_or_default())?;
        if left == [keep_name.clone()] {
            break;
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "the next start left {left:?} (only {keep_name} is in use){}",
                situation(&t).await
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(sh(&next, &keep, "echo kept").await?, "kept\n");
    let relayed = relays(&next, &keep).await?;
    if relayed != 0 {
        anyhow::bail!(
            "the permanent computer is relayed ({relayed}){}",
            situation(&t).await
        );
    }
    assert_eq!(entries(&keep_dir)?, ["sup.sock"]);
    next.cancel().await?;
    remove_all(&t).await
}
