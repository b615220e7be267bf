//! Issue 16: the read-only mounts of the base layer, the host-answered utilities (`ls`,
//! `chmod`, `id`, `uname`...), the devices and background jobs kept between runs.

use super::*;
use crate::Jobs;

/// A root with a read-only `/etc` mount holding `hostname`, and a `/bin` mount.
fn with_base() -> (PathBuf, ShellConfig) {
    let root = new_root();
    let base = root.parent().unwrap().join("base");
    std::fs::create_dir_all(base.join("etc")).unwrap();
    std::fs::create_dir_all(base.join("bin")).unwrap();
    std::fs::write(base.join("etc/hostname"), "box-1\n").unwrap();
    std::fs::write(base.join("bin/sh"), "#!/bin/sh\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(base.join("bin/sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::create_dir_all(root.join("bin")).unwrap();
    let mut c = cfg(&root, "/srv");
    c.mounts = vec![
        ("/etc".into(), base.join("etc")),
        ("/bin".into(), base.join("bin")),
    ];
    (root, c)
}

async fn run_cfg(script: &str, c: ShellConfig) -> (i32, String, String) {
    let out = Collect::default();
    let err = Collect::default();
    let io = Stdio {
        stdin: Box::new(tokio::io::empty()),
        stdout: Box::new(out.clone()),
        stderr: Box::new(err.clone()),
    };
    let st = run(script, c, io).await.status;
    (st, out.text(), err.text())
}

#[tokio::test]
async fn issue_16_read_only_mounts() {
    let (_root, c) = with_base();
    let (st, o, e) = run_cfg(
        "hostname; test -x /bin/sh && echo x; test -w /etc/hostname || echo ro; echo no > /etc/hostname",
        c,
    )
    .await;
    assert_eq!(o, "box-1\nx\nro\n");
    assert_eq!(st, 1);
    assert!(e.contains("Read-only file system"), "{e}");
    let (_root, c) = with_base();
    let (_, o, _) = run_cfg(
        "cd /etc/../../..; pwd; ls /etc; chmod 777 /etc/hostname; echo $?",
        c,
    )
    .await;
    assert_eq!(o, "/\nhostname\n1\n");
}

#[tokio::test]
async fn issue_16_ls_and_chmod() {
    let root = new_root();
    let (st, o, e) = sh_in(
        &root,
        "/",
        "chmod 750 /srv; echo abc > /tmp/f; chmod u+x,g+w /tmp/f; ls -ld /srv; ls -l /tmp",
        "",
    )
    .await;
    assert_eq!(st, 0, "{e}");
    let lines: Vec<&str> = o.lines().collect();
    assert!(lines[0].starts_with("drwxr-x--- 2 root root "), "{o}");
    assert!(lines[0].ends_with(" /srv"), "{o}");
    assert!(lines[1].starts_with("total "), "{o}");
    let f: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(lines.len(), 3, "{o}");
    assert_eq!(f[..5], ["-rwxrw-r--", "1", "root", "root", "4"], "{o}");
    assert_eq!(f.last(), Some(&"f"), "{o}");
    assert_eq!(
        out("echo x > .h; echo y > v; ls; ls -a; ls -A; ls -d .").await,
        "v\n.\n..\n.h\nv\n.h\nv\n.\n"
    );
    let (st, _, e) = sh("ls nope; ls -z").await;
    assert_eq!(st, 2);
    assert_eq!(
        e,
        "ls: cannot access 'nope': No such file or directory\nls: invalid option -- 'z'\n"
    );
}

#[tokio::test]
async fn issue_16_identity_utilities() {
    assert_eq!(
        out("id; whoami; nproc; id -un").await,
        "uid=0(root) gid=0(root) groups=0(root)\nroot\n1\nroot\n"
    );
    assert_eq!(
        out("uname; uname -sm; hostname").await,
        "Linux\nLinux wasm32\nlocalhost\n"
    );
    assert_eq!(
        out("timeout 0.05 sleep 5; echo $?; timeout 5 echo ok").await,
        "124\nok\n"
    );
    assert_eq!(sh("uname -z").await.0, 1);
}

#[tokio::test]
async fn issue_16_devices_in_redirections() {
    assert_eq!(
        out("echo x > /dev/null; echo $?; wc-l < /dev/null").await,
        "0\n0\n"
    );
    let (st, _, e) = sh("echo x > /dev/full").await;
    assert_eq!(st, 1);
    assert!(e.contains("No space left on device"), "{e}");
    assert_eq!(
        out("read -r -n 8 x < /dev/urandom; echo got").await,
        "got\n"
    );
}

#[test]
fn issue_16_device_operands_become_stdin() {
    use crate::dev::{Device, device_operand};
    let mut argv: Vec<String> = ["head", "-c", "16", "/dev/urandom"]
        .map(String::from)
        .to_vec();
    assert_eq!(device_operand(&mut argv, "/"), Some(Device::Random));
    assert_eq!(argv, ["head", "-c", "16", "-"]);
    let mut argv: Vec<String> = ["od", "zero"].map(String::from).to_vec();
    assert_eq!(device_operand(&mut argv, "/dev"), Some(Device::Zero));
    // Two devices, or a utility that does not read its operands: left alone.
    let mut argv: Vec<String> = ["cat", "/dev/zero", "/dev/stdin"]
        .map(String::from)
        .to_vec();
    assert_eq!(device_operand(&mut argv, "/"), None);
    let mut argv: Vec<String> = ["stat", "/dev/zero"].map(String::from).to_vec();
    assert_eq!(device_operand(&mut argv, "/"), None);
}

#[tokio::test]
async fn issue_16_jobs_are_kept_between_runs() {
    let root = new_root();
    let jobs = Arc::new(Jobs::new());
    let with = |jobs: &Arc<Jobs>| {
        let mut c = cfg(&root, "/srv");
        c.jobs = Some(jobs.clone());
        c
    };
    let (_, o, _) = run_cfg("sleep 100 & echo $!", with(&jobs)).await;
    assert_eq!(o, "1000\n");
    assert_eq!(jobs.len(), 1);
    let (_, o, _) = run_cfg("jobs; sleep 100 & echo $!", with(&jobs)).await;
    assert_eq!(o, "[1]  Running  sleep 100\n1001\n");
    let (_, o, _) = run_cfg("kill %1; wait %1; echo $?; jobs", with(&jobs)).await;
    assert_eq!(o, "143\n[1]  Done  sleep 100\n[2]  Running  sleep 100\n");
    assert_eq!(jobs.len(), 1);
    jobs.clear();
    assert!(jobs.is_empty());
    let (_, o, _) = run_cfg("jobs", with(&jobs)).await;
    assert_eq!(o, "");
    // Without a table, jobs end with the run as before.
    let (_, o, _) = run_cfg("sleep 100 & jobs", cfg(&root, "/srv")).await;
    assert_eq!(o, "[1]  Running  sleep 100\n");
    assert!(jobs.is_empty());
}

#[tokio::test]
async fn issue_16_subshells_see_the_jobs_around_them() {
    let root = new_root();
    let jobs = Arc::new(Jobs::new());
    let mut c = cfg(&root, "/srv");
    c.jobs = Some(jobs.clone());
    run_cfg("sleep 100 &", c).await;
    let mut c = cfg(&root, "/srv");
    c.jobs = Some(jobs.clone());
    let (_, o, _) = run_cfg(
        "sleep 100 & jobs | sort; echo $(jobs -p); (jobs -p | head -n 1)",
        c,
    )
    .await;
    assert_eq!(
        o,
        "[1]  Running  sleep 100\n[2]  Running  sleep 100\n1000 1001\n1000\n"
    );
    jobs.clear();
    let (_, o, _) = run_cfg("sleep 100 & sleep 100 & jobs -p | sort", cfg(&root, "/srv")).await;
    assert_eq!(o, "1000\n1001\n");
}
