//! The supervisor's file requests (SPEC §3.9), driven over its socket.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{connect, start};

use sha2::{Digest, Sha256};
use supervisor::frame::{
    FILE_CHUNK, FileAnswer, FileControl, FileErrorKind, FileFailure, FileRead, FileStored, Frame,
    Kind, PONG_FILES,
};

fn control(s: &mut UnixStream, job: u32, c: &FileControl) {
    Frame::new(Kind::File, job, serde_json::to_vec(c).unwrap())
        .write_to(s)
        .unwrap();
}

fn done<T: serde::de::DeserializeOwned>(s: &mut UnixStream, job: u32) -> (Vec<u8>, FileAnswer<T>) {
    let mut data = Vec::new();
    loop {
        let f = Frame::read_from(s).unwrap();
        assert_eq!(f.job, job);
        match f.kind {
            Kind::Data => {
                assert!(f.payload.len() <= FILE_CHUNK);
                data.extend(f.payload);
            }
            Kind::Done => return (data, serde_json::from_slice(&f.payload).unwrap()),
            other => panic!("unexpected {other:?}"),
        }
    }
}

fn read(
    s: &mut UnixStream,
    job: u32,
    path: &Path,
    offset: u64,
    length: u64,
) -> Result<(Vec<u8>, FileRead), FileFailure> {
    let c = FileControl::Read {
        path: path.to_str().unwrap().into(),
        offset,
        length,
    };
    control(s, job, &c);
    match done::<FileRead>(s, job) {
        (data, FileAnswer::Ok(meta)) => {
            assert_eq!(meta.read, data.len() as u64);
            Ok((data, meta))
        }
        (_, FileAnswer::Error(f)) => Err(f),
    }
}

#[derive(Default, Clone, Copy)]
struct Opts {
    append: bool,
    create_only: bool,
    mode: Option<u32>,
    make_dirs: bool,
}

/// Begins, sends every chunk without waiting, ends; then reads the one answer.
fn write(
    s: &mut UnixStream,
    job: u32,
    path: &Path,
    bytes: &[u8],
    o: Opts,
) -> Result<FileStored, FileFailure> {
    begin(s, job, path, o);
    for chunk in bytes.chunks(FILE_CHUNK) {
        Frame::new(Kind::FileData, job, chunk.to_vec())
            .write_to(s)
            .unwrap();
    }
    control(s, job, &FileControl::WriteEnd {});
    match done::<FileStored>(s, job) {
        (d, FileAnswer::Ok(st)) => {
            assert!(d.is_empty());
            Ok(st)
        }
        (_, FileAnswer::Error(f)) => Err(f),
    }
}

fn begin(s: &mut UnixStream, job: u32, path: &Path, o: Opts) {
    let c = FileControl::WriteBegin {
        path: path.to_str().unwrap().into(),
        append: o.append,
        create_only: o.create_only,
        mode: o.mode,
        make_dirs: o.make_dirs,
    };
    control(s, job, &c);
}

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn mode_of(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn issue_15_every_byte_value_round_trips() {
    let sup = start();
    let mut s = connect(&sup.socket);
    Frame::new(Kind::Ping, 1, b"p".to_vec())
        .write_to(&mut s)
        .unwrap();
    assert_eq!(Frame::read_from(&mut s).unwrap().payload, PONG_FILES);
    let mut bytes: Vec<u8> = (0..=255u8).collect();
    bytes.extend([0u8; 1000]);
    bytes.extend([
        0xff, 0xfe, 0xc3, 0x28, 0xa0, 0xa1, 0xf0, 0x28, 0x8c, 0xbc, 0,
    ]);
    let path = sup.dir.join("bin.dat");
    let st = write(&mut s, 2, &path, &bytes, Opts::default()).unwrap();
    assert_eq!((st.size, st.sha256), (bytes.len() as u64, sha(&bytes)));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    let (back, meta) = read(&mut s, 3, &path, 0, 1 << 20).unwrap();
    assert_eq!(back, bytes);
    assert_eq!(
        (meta.size, meta.offset, meta.mode),
        (bytes.len() as u64, 0, 0o644)
    );
    assert!(meta.mtime > 1_600_000_000);
    // A slice from the middle.
    let (mid, _) = read(&mut s, 4, &path, 250, 10).unwrap();
    assert_eq!(mid, &bytes[250..260]);
    // Past the end: nothing, not an error.
    let (none, meta) = read(&mut s, 5, &path, 10_000, 10).unwrap();
    assert!(none.is_empty());
    assert_eq!(meta.size, bytes.len() as u64);
    assert_eq!(names(&sup.dir), ["bin.dat"]);
}

#[test]
fn issue_15_six_mib_in_appended_slices() {
    let sup = start();
    let mut s = connect(&sup.socket);
    let mut x: u32 = 0x9e37_79b9;
    let bytes: Vec<u8> = (0..6 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 3) as u8
        })
        .collect();
    let path = sup.dir.join("big.bin");
    let mut last = None;
    for (i, slice) in bytes.chunks(1_500_000).enumerate() {
        let o = Opts {
            append: i > 0,
            ..Opts::default()
        };
        last = Some(write(&mut s, 10 + i as u32, &path, slice, o).unwrap());
    }
    let last = last.unwrap();
    assert_eq!((last.size, last.sha256), (bytes.len() as u64, sha(&bytes)));
    let mut back = Vec::new();
    let mut job = 100;
    loop {
        let (d, meta) = read(&mut s, job, &path, back.len() as u64, 1 << 20).unwrap();
        job += 1;
        assert_eq!(meta.size, bytes.len() as u64);
        if d.is_empty() {
            break;
        }
        back.extend(d);
    }
    assert_eq!(sha(&back), sha(&bytes));
}

#[test]
fn issue_15_create_only_refuses_and_keeps_the_old_file() {
    let sup = start();
    let mut s = connect(&sup.socket);
    let path = sup.dir.join("keep.txt");
    std::fs::write(&path, b"old").unwrap();
    for append in [false, true] {
        let o = Opts {
            create_only: true,
            append,
            ..Opts::default()
        };
        let e = write(&mut s, 1, &path, b"new", o).unwrap_err();
        assert_eq!(e.kind, FileErrorKind::Exists, "{e:?}");
        assert!(e.message.contains("create_only"));
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
    }
    // A new name is created.
    let fresh = sup.dir.join("fresh.txt");
    let o = Opts {
        create_only: true,
        ..Opts::default()
    };
    write(&mut s, 2, &fresh, b"hi", o).unwrap();
    assert_eq!(std::fs::read(&fresh).unwrap(), b"hi");
    assert_eq!(names(&sup.dir), ["fresh.txt", "keep.txt"]);
}

#[test]
fn issue_15_failed_replaces_leave_nothing_behind() {
    let sup = start();
    let mut s = connect(&sup.socket);
    // A missing directory: refused with advice, unless make_dirs.
    let deep = sup.dir.join("a/b/c.txt");
    let e = write(&mut s, 1, &deep, b"x", Opts::default()).unwrap_err();
    assert_eq!(e.kind, FileErrorKind::NotFound);
    assert!(e.message.contains("make_dirs"), "{}", e.message);
    assert!(!sup.dir.join("a").exists());
    let o = Opts {
        make_dirs: true,
        ..Opts::default()
    };
    write(&mut s, 2, &deep, b"x", o).unwrap();
    assert_eq!(std::fs::read(&deep).unwrap(), b"x");
    assert_eq!(mode_of(&sup.dir.join("a/b")) & 0o700, 0o700);
    // A parent that is a file.
    let e = write(&mut s, 3, &deep.join("d"), b"x", Opts::default()).unwrap_err();
    assert_eq!(e.kind, FileErrorKind::NotDir, "{e:?}");
    let e = write(&mut s, 13, &deep.join("d/e"), b"x", o).unwrap_err();
    assert_eq!(e.kind, FileErrorKind::NotDir, "{e:?}");
    let e = write(&mut s, 14, &deep.join("d"), b"x", o).unwrap_err();
    assert_eq!(e.kind, FileErrorKind::NotDir, "{e:?}");
    // A read-only directory (root ignores permissions, so only when we are not root).
    let ro = sup.dir.join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::write(ro.join("f"), b"old").unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let root = rustix_is_root();
    let r = write(&mut s, 4, &ro.join("f"), b"new", Opts::default());
    if root {
        r.unwrap();
        std::fs::write(ro.join("f"), b"old").unwrap();
    } else {
        assert_eq!(r.unwrap_err().kind, FileErrorKind::Permission);
    }
    assert_eq!(names(&ro), ["f"]);
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Virtual file systems take no new files: refused, and not as a missing directory.
    for (job, p) in [(5, "/proc/version"), (15, "/sys/msc-test")] {
        for append in [false, true] {
            let o = Opts {
                append,
                ..Opts::default()
            };
            let e = write(&mut s, job, Path::new(p), b"x", o).unwrap_err();
            assert_ne!(e.kind, FileErrorKind::NotFound, "{p}: {e:?}");
        }
    }
    // The target is a directory.
    let e = write(&mut s, 6, &sup.dir.join("a"), b"x", Opts::default()).unwrap_err();
    assert_eq!(e.kind, FileErrorKind::IsDir);
    assert_eq!(names(&sup.dir), ["a", "ro"]);
    assert_eq!(names(&sup.dir.join("a/b")), ["c.txt"]);
}

fn rustix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

#[test]
fn issue_15_a_dropped_upload_leaves_the_old_file_exactly() {
    let sup = start();
    let path = sup.dir.join("precious.txt");
    std::fs::write(&path, b"precious").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let appended = sup.dir.join("log.txt");
    std::fs::write(&appended, b"line 1\n").unwrap();
    {
        let mut s = connect(&sup.socket);
        begin(&mut s, 1, &path, Opts::default());
        let append = Opts {
            append: true,
            ..Opts::default()
        };
        begin(&mut s, 2, &appended, append);
        for _ in 0..8 {
            for job in [1, 2] {
                Frame::new(Kind::FileData, job, vec![b'z'; FILE_CHUNK])
                    .write_to(&mut s)
                    .unwrap();
            }
        }
        // A round trip proves the data frames were taken before the connection drops.
        let (d, _) = read(&mut s, 3, &path, 0, 100).unwrap();
        assert_eq!(d, b"precious");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while names(&sup.dir).len() > 2 || std::fs::read(&appended).unwrap() != b"line 1\n" {
        assert!(Instant::now() < deadline, "left: {:?}", names(&sup.dir));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    assert_eq!(mode_of(&path), 0o640);
    // An explicit abort answers ok and leaves nothing either.
    let mut s = connect(&sup.socket);
    begin(&mut s, 1, &path, Opts::default());
    Frame::new(Kind::FileData, 1, b"zzz".to_vec())
        .write_to(&mut s)
        .unwrap();
    control(&mut s, 1, &FileControl::WriteAbort {});
    assert!(matches!(
        done::<serde_json::Value>(&mut s, 1).1,
        FileAnswer::Ok(_)
    ));
    assert_eq!(names(&sup.dir), ["log.txt", "precious.txt"]);
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    // Data and an end without a begin: refused, the connection lives on.
    Frame::new(Kind::FileData, 7, b"stray".to_vec())
        .write_to(&mut s)
        .unwrap();
    control(&mut s, 7, &FileControl::WriteEnd {});
    assert!(matches!(
        done::<serde_json::Value>(&mut s, 7).1,
        FileAnswer::Error(_)
    ));
    Frame::new(Kind::File, 8, b"{\"op\":\"nope\"}".to_vec())
        .write_to(&mut s)
        .unwrap();
    assert!(matches!(
        done::<serde_json::Value>(&mut s, 8).1,
        FileAnswer::Error(_)
    ));
    assert!(read(&mut s, 9, &path, 0, 3).is_ok());
}

#[test]
fn issue_15_reads_refuse_directories_and_missing_paths() {
    let sup = start();
    let mut s = connect(&sup.socket);
    let e = read(&mut s, 1, &sup.dir, 0, 10).unwrap_err();
    assert_eq!(e.kind, FileErrorKind::IsDir);
    assert!(e.message.contains("is a directory"), "{}", e.message);
    let e = read(&mut s, 2, &sup.dir.join("nope"), 0, 10).unwrap_err();
    assert_eq!(e.kind, FileErrorKind::NotFound);
    assert!(e.message.contains("does not exist"));
    // A FIFO is refused at once, not waited on.
    let fifo = sup.dir.join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let e = read(&mut s, 3, &fifo, 0, 10).unwrap_err();
    assert!(e.message.contains("not a regular file"), "{}", e.message);
    // Past the end of an empty file: an empty slice.
    let empty = sup.dir.join("empty");
    std::fs::write(&empty, b"").unwrap();
    let (d, meta) = read(&mut s, 4, &empty, 5, 10).unwrap();
    assert!(d.is_empty());
    assert_eq!((meta.size, meta.offset), (0, 5));
}

#[test]
fn issue_15_modes_are_applied_and_kept_on_append() {
    let sup = start();
    let mut s = connect(&sup.socket);
    let path = sup.dir.join("run.sh");
    let o = Opts {
        mode: Some(0o755),
        ..Opts::default()
    };
    write(&mut s, 1, &path, b"#!/bin/sh\n", o).unwrap();
    assert_eq!(mode_of(&path), 0o755);
    let append = Opts {
        append: true,
        ..Opts::default()
    };
    let st = write(&mut s, 2, &path, b"echo hi\n", append).unwrap();
    assert_eq!(mode_of(&path), 0o755);
    assert_eq!(st.sha256, sha(b"#!/bin/sh\necho hi\n"));
    // The default for a new file is 0644, whatever the umask.
    let plain = sup.dir.join("plain");
    write(&mut s, 3, &plain, b"x", append).unwrap();
    assert_eq!(mode_of(&plain), 0o644);
    write(&mut s, 4, &plain, b"y", Opts::default()).unwrap();
    assert_eq!(mode_of(&plain), 0o644);
    // A mode given on append is applied.
    let o = Opts {
        append: true,
        mode: Some(0o600),
        ..Opts::default()
    };
    write(&mut s, 5, &plain, b"z", o).unwrap();
    assert_eq!(mode_of(&plain), 0o600);
    assert_eq!(std::fs::read(&plain).unwrap(), b"yz");
    // Through a symlink the target changes, the link stays.
    let link = sup.dir.join("link");
    std::os::unix::fs::symlink(&plain, &link).unwrap();
    write(&mut s, 6, &link, b"via link", Opts::default()).unwrap();
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(&plain).unwrap(), b"via link");
}

/// A small ext4 file system on a loop device, mounted at `at`; thawed and unmounted
/// when dropped (drop it before the supervisor, whose writer may wait on it).
struct Frozen {
    at: std::path::PathBuf,
}

impl Frozen {
    fn mount(image: &Path, at: &Path) -> Frozen {
        std::fs::create_dir_all(at).unwrap();
        let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
        ok(Command::new("truncate").arg("-s").arg("16M").arg(image));
        ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(image));
        ok(Command::new("mount")
            .args(["-o", "loop"])
            .arg(image)
            .arg(at));
        Frozen { at: at.to_owned() }
    }

    fn freeze(&self, yes: bool) {
        let flag = if yes { "--freeze" } else { "--unfreeze" };
        let st = Command::new("fsfreeze").arg(flag).arg(&self.at).status();
        assert!(st.unwrap().success(), "fsfreeze {flag}");
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = Command::new("fsfreeze")
            .arg("--unfreeze")
            .arg(&self.at)
            .stderr(std::process::Stdio::null())
            .status();
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

/// An upload to a disk that does not take writes (a frozen file system: every write
/// waits until it thaws) holds up its own writer only: the same connection still
/// answers a ping and runs a command meanwhile, and the upload completes once the disk
/// thaws. Needs root (a loop mount and fsfreeze), as the e2e suite does.
#[test]
fn issue_15_a_slow_disk_does_not_hold_up_other_frames() {
    let sup = start();
    let disk = Frozen::mount(&sup.dir.join("disk.img"), &sup.dir.join("disk"));
    let mut s = connect(&sup.socket);
    // Bounded both ways: a connection held up by the upload fails the test, never hangs it.
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    disk.freeze(true);
    let bytes: Vec<u8> = (0..2 * FILE_CHUNK + 7).map(|i| (i % 251) as u8).collect();
    let path = disk.at.join("slow.bin");
    begin(&mut s, 2, &path, Opts::default());
    for chunk in bytes.chunks(FILE_CHUNK) {
        Frame::new(Kind::FileData, 2, chunk.to_vec())
            .write_to(&mut s)
            .unwrap();
    }
    control(&mut s, 2, &FileControl::WriteEnd {});
    // The writer waits on the frozen disk; the connection does not.
    let asked = Instant::now();
    Frame::new(Kind::Ping, 3, b"p".to_vec())
        .write_to(&mut s)
        .unwrap();
    let f = Frame::read_from(&mut s).expect("a ping answered during the upload");
    assert_eq!((f.kind, f.job), (Kind::Pong, 3));
    let start = supervisor::frame::StartSpec {
        argv: vec!["echo".into(), "served".into()],
        cwd: None,
        env: vec![],
        stdin: false,
        timeout_ms: 10_000,
        output_limit: 1 << 20,
        quiet: false,
    };
    Frame::new(Kind::Start, 4, serde_json::to_vec(&start).unwrap())
        .write_to(&mut s)
        .unwrap();
    let mut out = Vec::new();
    loop {
        let f = Frame::read_from(&mut s).expect("the command's frames during the upload");
        assert_eq!(f.job, 4, "{:?}", f.kind);
        match f.kind {
            Kind::Stdout => out.extend(f.payload),
            Kind::Exit => break,
            _ => {}
        }
    }
    assert_eq!(out, b"served\n");
    assert!(asked.elapsed() < Duration::from_secs(5));
    // Still not answered: the disk is frozen.
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        Frame::read_from(&mut s).is_err(),
        "answered on a frozen disk"
    );
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    disk.freeze(false);
    match done::<FileStored>(&mut s, 2) {
        (_, FileAnswer::Ok(st)) => {
            assert_eq!((st.size, st.sha256), (bytes.len() as u64, sha(&bytes)))
        }
        (_, FileAnswer::Error(f)) => panic!("{f:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    drop(disk);
}
