//! Snapshots, forks and restores of WASM computers as directory copies (issue 39): exact
//! files, modes and symlinks back, sizes, records that survive a new server, and ids that
//! are no snapshot ids never reaching the filesystem. No command runs: the trees are
//! written and read on the host, in the computers' `fs/`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::super::engine::{Limits, Runtime};
use super::super::{Flavor, Source, Wasm, WasmError};
use crate::progress::Progress;
use crate::spec::{ForkSource, SnapshotMeta};
use shared::egress::Policy;

fn state_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("msc-wasm-snap-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A server over `state`; its module (an empty one) is never loaded: nothing runs.
fn server(state: &Path) -> Wasm {
    let runtime = Runtime::new(
        Limits {
            max_memory: 16 << 20,
            fuel: None,
        },
        state.join("cache"),
    )
    .unwrap();
    Wasm::new(
        Flavor::Custom("empty".into()),
        runtime,
        Source::Owned(Arc::new(b"\0asm\x01\0\0\0".to_vec())),
        state,
        crate::instance::current(),
        "test-host".into(),
    )
    .unwrap()
}

fn fs_of(state: &Path, key: &str) -> PathBuf {
    state.join("wasm").join(key).join("fs")
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

fn text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// When the test tree's `data/f` was last written.
fn written_at() -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000)
}

/// Writes the test tree into `fs`: 4 + 5 + 1000 bytes of regular files.
fn write_tree(fs: &Path) {
    let data = fs.join("data");
    std::fs::create_dir_all(data.join("sub")).unwrap();
    std::fs::write(data.join("f"), "one\n").unwrap();
    let f = std::fs::File::options()
        .write(true)
        .open(data.join("f"))
        .unwrap();
    f.set_modified(written_at()).unwrap();
    std::fs::write(data.join("sub/g"), "deep\n").unwrap();
    std::fs::set_permissions(data.join("sub/g"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(data.join("blob"), vec![7u8; 1000]).unwrap();
    std::os::unix::fs::symlink("f", data.join("link")).unwrap();
    // A dangling link stays one; a read-only directory is filled first.
    std::os::unix::fs::symlink("/nowhere", data.join("dangling")).unwrap();
    std::fs::create_dir(data.join("ro")).unwrap();
    std::fs::write(data.join("ro/empty"), "").unwrap();
    std::fs::set_permissions(data.join("ro"), std::fs::Permissions::from_mode(0o555)).unwrap();
    // Bits no copy carries on the host (issue 46).
    std::fs::write(data.join("suid"), "").unwrap();
    std::fs::set_permissions(data.join("suid"), std::fs::Permissions::from_mode(0o6755)).unwrap();
}

/// `fs` holds the test tree exactly as written.
fn assert_tree(fs: &Path) {
    let data = fs.join("data");
    assert_eq!(text(&data.join("f")), "one\n");
    let meta = std::fs::metadata(data.join("f")).unwrap();
    assert_eq!(meta.modified().unwrap(), written_at());
    assert_eq!(text(&data.join("sub/g")), "deep\n");
    assert_eq!(mode(&data.join("sub/g")), 0o600);
    assert_eq!(std::fs::read(data.join("blob")).unwrap(), vec![7u8; 1000]);
    assert_eq!(
        std::fs::read_link(data.join("link")).unwrap(),
        Path::new("f")
    );
    assert_eq!(
        std::fs::read_link(data.join("dangling")).unwrap(),
        Path::new("/nowhere")
    );
    assert_eq!(mode(&data.join("ro")), 0o555);
    assert_eq!(text(&data.join("ro/empty")), "");
    assert_eq!(mode(&fs.join("tmp")), 0o1777);
}

/// `fs` is a copy of the test tree: as written, without setuid and setgid.
fn assert_copy(fs: &Path) {
    assert_tree(fs);
    assert_eq!(mode(&fs.join("data/suid")), 0o755);
}

fn meta<'a>(snapshot_id: &'a str, network: &'a Policy) -> SnapshotMeta<'a> {
    SnapshotMeta {
        snapshot_id,
        label: "before",
        team: None,
        owner: None,
        created_ms: 1_700_000_000_000,
        network,
    }
}

/// Every path under `dir`, sorted (what a refused call must leave as it was).
fn paths(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Lets the test remove what it made (the read-only directories included).
fn cleanup(state: &Path) {
    for p in paths(state) {
        if std::fs::symlink_metadata(&p).unwrap().is_dir() {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    std::fs::remove_dir_all(state).unwrap();
}

#[tokio::test]
async fn issue_39_wasm_snapshot_fork_restore_and_delete_copy_the_tree() {
    let state = state_dir();
    let w = server(&state);
    let p = Progress::default();
    w.create("box", false, None).await.unwrap();
    write_tree(&fs_of(&state, "box"));
    let sid = shared::snapshots::new_id(0xabc);
    let net = Policy::None;
    let taken = w.snapshot_take("box", &meta(&sid, &net)).await.unwrap();
    assert_eq!(taken, meta(&sid, &net).record("box", 1009, false));
    assert_copy(&state.join("wasm/.snapshots").join(&sid).join("fs"));
    // Snapshots are no computers.
    let listed = w.list().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");

    // Changes after it.
    let data = fs_of(&state, "box").join("data");
    std::fs::write(data.join("f"), "two\n").unwrap();
    std::fs::remove_file(data.join("blob")).unwrap();
    std::fs::set_permissions(data.join("sub/g"), std::fs::Permissions::from_mode(0o644)).unwrap();

    // A fork of the snapshot: its files; one of the computer: today's.
    let f1 = w
        .fork(ForkSource::Snapshot(&sid), "f1", true, None, &p)
        .await
        .unwrap();
    assert!(f1.temporary && f1.network == Some(Policy::None), "{f1:?}");
    assert_copy(&fs_of(&state, "f1"));
    assert_eq!(
        text(&state.join("wasm/f1/etc/hostname")),
        "f1\n",
        "its own /etc"
    );
    w.fork(ForkSource::Computer("box"), "f2", false, None, &p)
        .await
        .unwrap();
    let f2 = fs_of(&state, "f2").join("data");
    assert_eq!(text(&f2.join("f")), "two\n");
    assert!(!f2.join("blob").exists());
    assert_eq!(mode(&f2.join("sub/g")), 0o644);
    // The source is as it was.
    assert_eq!(text(&data.join("f")), "two\n");

    // Restore: the snapshot's files, a new sandbox id, the same flags.
    let before = w.find("box").await.unwrap().unwrap();
    let back = w.restore("box", &sid).await.unwrap();
    assert_copy(&fs_of(&state, "box"));
    assert!(!back.temporary);
    assert_ne!(back.provider_id, before.provider_id);
    assert_eq!(text(&state.join("wasm/box/etc/hostname")), "box\n");
    // Nothing is left beside the computers' files.
    let hidden: Vec<_> = std::fs::read_dir(state.join("wasm/box"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "{hidden:?}");

    // A new server on the same state directory finds the snapshot.
    let later = server(&state);
    assert_eq!(later.snapshot_list().await.unwrap(), [taken]);

    // Deleted: gone once; its fork keeps its files.
    assert!(later.snapshot_delete(&sid).await.unwrap());
    assert!(!later.snapshot_delete(&sid).await.unwrap());
    assert!(later.snapshot_list().await.unwrap().is_empty());
    assert_copy(&fs_of(&state, "f1"));
    let left: Vec<_> = std::fs::read_dir(state.join("wasm/.snapshots"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
    cleanup(&state);
}

#[tokio::test]
async fn issue_39_wasm_missing_sources_change_nothing() {
    let state = state_dir();
    let w = server(&state);
    let p = Progress::default();
    w.create("box", false, None).await.unwrap();
    std::fs::write(fs_of(&state, "box").join("f"), "kept").unwrap();
    let gone = shared::snapshots::new_id(1);
    let before = paths(&state);
    let e = w
        .fork(ForkSource::Snapshot(&gone), "f3", true, None, &p)
        .await
        .unwrap_err();
    assert!(matches!(e, WasmError::NoSnapshot(_)), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "snapshot \"{gone}\" does not exist; computer_snapshots lists a computer's snapshots"
        )
    );
    let e = w
        .fork(ForkSource::Computer("nobody"), "f3", true, None, &p)
        .await
        .unwrap_err();
    assert!(matches!(e, WasmError::NotFound(_)), "{e}");
    let e = w.restore("box", &gone).await.unwrap_err();
    assert!(matches!(e, WasmError::NoSnapshot(_)), "{e}");
    let e = w
        .snapshot_take("nobody", &meta(&gone, &Policy::None))
        .await
        .unwrap_err();
    assert!(matches!(e, WasmError::NotFound(_)), "{e}");
    assert_eq!(paths(&state), before);
    // A fork never lands on an existing computer.
    w.create("other", false, None).await.unwrap();
    let e = w
        .fork(ForkSource::Computer("box"), "other", true, None, &p)
        .await
        .unwrap_err();
    assert!(matches!(e, WasmError::Exists(_)), "{e}");
    assert!(!fs_of(&state, "other").join("f").exists());
    cleanup(&state);
}

#[tokio::test]
async fn issue_39_wasm_a_bad_snapshot_id_never_touches_the_filesystem() {
    let state = state_dir();
    let w = server(&state);
    let p = Progress::default();
    w.create("box", false, None).await.unwrap();
    // A decoy a path built from `../box` would reach.
    std::fs::create_dir_all(state.join("wasm/.snapshots")).unwrap();
    let before = paths(&state);
    let upper = format!("snap-{}", "A".repeat(32));
    for bad in [
        "../box",
        "..",
        "",
        "snap-",
        "snap-../../box",
        upper.as_str(),
    ] {
        assert!(!w.snapshot_delete(bad).await.unwrap(), "{bad}");
        let e = w
            .fork(ForkSource::Snapshot(bad), "f", true, None, &p)
            .await
            .unwrap_err();
        assert!(matches!(e, WasmError::NoSnapshot(_)), "{bad}: {e}");
        let e = w.restore("box", bad).await.unwrap_err();
        assert!(matches!(e, WasmError::NoSnapshot(_)), "{bad}: {e}");
        let e = w
            .snapshot_take("box", &meta(bad, &Policy::None))
            .await
            .unwrap_err();
        assert!(matches!(e, WasmError::NoSnapshot(_)), "{bad}: {e}");
        assert_eq!(paths(&state), before, "{bad}");
    }
    cleanup(&state);
}

#[tokio::test]
async fn issue_39_wasm_lists_skip_temporaries_and_unreadable_records() {
    let state = state_dir();
    let w = server(&state);
    w.create("box", false, None).await.unwrap();
    let good = shared::snapshots::new_id(2);
    let net = Policy::None;
    let taken = w.snapshot_take("box", &meta(&good, &net)).await.unwrap();
    let root = state.join("wasm/.snapshots");
    // A copy under way (a whole record in a temporary name), a broken record, a record
    // under another snapshot's name.
    let tmp = root.join(".tmp-0000abcd");
    std::fs::create_dir_all(tmp.join("fs")).unwrap();
    std::fs::copy(
        root.join(&good).join("snapshot.json"),
        tmp.join("snapshot.json"),
    )
    .unwrap();
    let broken = root.join(shared::snapshots::new_id(3));
    std::fs::create_dir_all(broken.join("fs")).unwrap();
    std::fs::write(broken.join("snapshot.json"), "{").unwrap();
    let renamed = root.join(shared::snapshots::new_id(4));
    std::fs::create_dir_all(renamed.join("fs")).unwrap();
    std::fs::copy(
        root.join(&good).join("snapshot.json"),
        renamed.join("snapshot.json"),
    )
    .unwrap();
    assert_eq!(w.snapshot_list().await.unwrap(), [taken]);
    cleanup(&state);
}
