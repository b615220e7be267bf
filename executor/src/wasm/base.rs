//! The read-only base layer under every WASM computer's writable `fs/`.
//!
//! Shared by all computers of a state directory, built once per set of utilities in
//! `<state>/wasm-base/<key>/` (written to a temporary directory and renamed into place, so
//! servers sharing the directory never see half of it):
//! - `bin/` and `usr/bin/`: one entry per toolbox utility and per shell builtin that is a
//!   program on Linux (`sh`, `test`, `ls`...), mode 0755, each a two-line script
//!   (`exec NAME "$@"`), so `test -x /bin/sh`, `ls /usr/bin` and `sh /bin/ls` work (the
//!   shell itself runs `/bin/NAME` as the utility without reading the file);
//! - `dev/`: the device names, as empty files the shell serves (see msc-shell's `dev.rs`);
//! - `python/`, with `python3` configured: `sitecustomize.py`, mounted for CPython only at
//!   [`PYTHON_HELPER`] (see [`PYTHON_SITE`]).
//!
//! Per computer, `<state>/wasm/<key>/etc/` holds `os-release`, `passwd`, `group`,
//! `hostname` (the caller's computer id, never the team's key prefix: as on Docker),
//! `hosts` and `shells`; it is written at creation and again by a factory reset. Its
//! `proc/` is its own too ([`super::procs`]: the static files and its running jobs). All
//! are mounted read-only (`/bin`, `/usr/bin`, `/proc`, `/dev`, `/etc`): for the guest as
//! WASI preopens, for the host shell as its read-only mounts.

use std::path::{Path, PathBuf};

use super::engine::Mount;

/// Bump when the layout or the content of the shared base changes.
const BASE_VERSION: u32 = 3;

/// Where CPython sees the base's `python/` (on its `PYTHONPATH`). Not under `/usr` of the
/// writable layer: the CPython module's embedded standard library owns `/usr` for it, and
/// a preopen this deep wins over that one.
pub(super) const PYTHON_HELPER: &str = "/usr/lib/msc-python";

/// CPython's `sitecustomize`: WASI has no working directory of its own (every instance
/// starts in `/`), so CPython enters the shell's `$PWD` before it runs anything, and then
/// takes its own entry off `sys.path` and `PYTHONPATH` again, so the program sees the
/// environment the shell gave it.
const PYTHON_SITE: &str = r#"# MCP Sandbox Computer: CPython on WASI starts in /; enter the shell's directory.
import os as _os
import sys as _sys

try:
    _os.chdir(_os.environ.get("PWD") or "/")
except OSError:
    pass
_rest = [p for p in _os.environ.get("PYTHONPATH", "").split(":") if p and p != "/usr/lib/msc-python"]
if _rest:
    _os.environ["PYTHONPATH"] = ":".join(_rest)
else:
    _os.environ.pop("PYTHONPATH", None)
while "/usr/lib/msc-python" in _sys.path:
    _sys.path.remove("/usr/lib/msc-python")
del _os, _sys, _rest
"#;

/// The device names of `/dev`.
pub(super) const DEVICES: &[&str] = &[
    "null", "zero", "full", "random", "urandom", "stdin", "stdout", "stderr",
];

/// Directories of the writable layer that read-only mounts cover (created as mount points).
const MOUNT_POINTS: &[&str] = &["etc", "bin", "usr/bin", "proc", "dev"];

/// Creates the directories a computer's `fs/` starts with.
pub(super) fn make_skeleton(fs: &Path) -> std::io::Result<()> {
    for d in ["", "tmp", "home", "root", "usr/local/bin"]
        .iter()
        .chain(MOUNT_POINTS)
    {
        std::fs::create_dir_all(fs.join(d))?;
    }
    set_mode(&fs.join("tmp"), 0o1777)
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Writes the computer's `/etc` into `dir` (replacing what was there); `id` is the
/// caller's computer id (its hostname).
pub(super) fn write_etc(dir: &Path, id: &str) -> std::io::Result<()> {
    let tmp = dir.with_extension(format!("tmp-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&tmp)?;
    let version = env!("CARGO_PKG_VERSION");
    let files = [
        (
            "os-release",
            format!(
                "PRETTY_NAME=\"MCP Sandbox Computer {version} (WebAssembly)\"\nNAME=\"MCP Sandbox Computer\"\nVERSION_ID=\"{version}\"\nVERSION=\"{version} (WebAssembly)\"\nID=mcp-sandbox-computer\nVARIANT=\"WebAssembly (WASI preview 1): a host shell and a toolbox of utilities; no network, no package manager\"\nVARIANT_ID=wasm\n"
            ),
        ),
        (
            "passwd",
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".into(),
        ),
        ("group", "root:x:0:\nnogroup:x:65534:\n".into()),
        ("hostname", format!("{id}\n")),
        ("hosts", format!("127.0.0.1\tlocalhost\n127.0.1.1\t{id}\n")),
        ("shells", "/bin/sh\n/bin/bash\n/bin/dash\n".into()),
    ];
    for (name, text) in files {
        std::fs::write(tmp.join(name), text)?;
    }
    if dir.exists() {
        let old = dir.with_extension(format!("old-{:08x}", rand::random::<u32>()));
        std::fs::rename(dir, &old)?;
        std::fs::rename(&tmp, dir)?;
        std::fs::remove_dir_all(old)
    } else {
        std::fs::rename(&tmp, dir)
    }
}

/// Builds (or finds) the shared base for these program names; returns its directory.
pub(super) fn shared_base(
    state_dir: &Path,
    names: &std::collections::BTreeSet<String>,
) -> std::io::Result<PathBuf> {
    let mut all: std::collections::BTreeSet<&str> = names.iter().map(String::as_str).collect();
    all.extend(msc_shell::IN_BIN);
    let key_text = format!(
        "{BASE_VERSION} {}",
        all.iter().copied().collect::<Vec<_>>().join(" ")
    );
    let key = super::engine::module_key(key_text.as_bytes());
    let root = state_dir.join("wasm-base");
    super::engine::create_private_dir(&root)?;
    let dir = root.join(format!("{key:016x}"));
    if dir.join("complete").is_file() {
        return Ok(dir);
    }
    let tmp = root.join(format!(".tmp-{:08x}", rand::random::<u32>()));
    let r = build(&tmp, &all).and_then(|()| std::fs::rename(&tmp, &dir));
    if r.is_err() || tmp.exists() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    match r {
        Ok(()) => Ok(dir),
        // Another server built it meanwhile.
        Err(_) if dir.join("complete").is_file() => Ok(dir),
        Err(e) => Err(e),
    }
}

fn build(tmp: &Path, names: &std::collections::BTreeSet<&str>) -> std::io::Result<()> {
    for d in ["bin", "usr/bin", "dev"] {
        std::fs::create_dir_all(tmp.join(d))?;
    }
    for name in names {
        let text = format!("#!/bin/sh\nexec {} \"$@\"\n", shell_word(name));
        for d in ["bin", "usr/bin"] {
            let p = tmp.join(d).join(name);
            std::fs::write(&p, &text)?;
            set_mode(&p, 0o755)?;
        }
    }
    for d in DEVICES {
        let p = tmp.join("dev").join(d);
        std::fs::write(&p, b"")?;
        set_mode(&p, 0o666)?;
    }
    if names.contains("python3") {
        std::fs::create_dir_all(tmp.join("python"))?;
        std::fs::write(tmp.join("python/sitecustomize.py"), PYTHON_SITE)?;
    }
    std::fs::write(tmp.join("complete"), b"")
}

/// `name` quoted for a script when needed (`[` and the like).
fn shell_word(name: &str) -> String {
    if name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        name.to_owned()
    } else {
        format!("'{}'", name.replace('\'', r"'\''"))
    }
}

/// The read-only mounts of computer `computer_dir` over the shared base `base`.
pub(super) fn mounts(base: &Path, computer_dir: &Path) -> Vec<Mount> {
    let ro = |host: PathBuf, guest: &str| Mount {
        host,
        guest: guest.into(),
        writable: false,
    };
    vec![
        ro(computer_dir.join("etc"), "/etc"),
        ro(base.join("bin"), "/bin"),
        ro(base.join("usr/bin"), "/usr/bin"),
        ro(computer_dir.join("proc"), "/proc"),
        ro(base.join("dev"), "/dev"),
    ]
}

/// The mount CPython gets on top of a computer's ([`PYTHON_HELPER`]).
pub(super) fn python_mount(base: &Path) -> Mount {
    Mount {
        host: base.join("python"),
        guest: PYTHON_HELPER.into(),
        writable: false,
    }
}

/// Brings a computer made by an older version up to this layout (mount points, `/etc`
/// naming the caller's `id`: older versions named the team's key).
pub(super) fn ensure(computer_dir: &Path, id: &str) -> std::io::Result<()> {
    let hostname = std::fs::read_to_string(computer_dir.join("etc/hostname")).ok();
    if hostname.as_deref().is_some_and(|h| h.trim_end() == id) {
        return Ok(());
    }
    if hostname.is_none() {
        make_skeleton(&computer_dir.join("fs"))?;
    }
    write_etc(&computer_dir.join("etc"), id)
}
