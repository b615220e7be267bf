//! `tar -x`: unpacks each entry itself rather than through the `tar` crate's `unpack_in`
//! (which fails on wasm32: setting permissions is unimplemented there). Directories,
//! regular files (with their mtime), symbolic links and hard links are made; other
//! kinds are skipped with a message. WASI cannot set permission bits, so modes are not
//! restored. An entry is refused, with a message and status 2 at the end, when its name
//! is absolute or climbs with `..`, or when a directory on its way inside the target is a
//! symbolic link (an archive cannot plant a link and then write through it); the WASI
//! filesystem confines everything to the computer anyway.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use tar::{Archive, Entry, EntryType};

use super::{Opts, msg};

/// Extracts (or with `-O` prints) the archive's members, or only those named.
pub(super) fn extract(o: &Opts, input: Box<dyn Read>) -> Result<(), String> {
    let mut a = Archive::new(input);
    let base = PathBuf::from(o.dir.clone().unwrap_or_else(|| ".".into()));
    let mut out = io::stdout().lock();
    let mut failed = false;
    for e in a.entries().map_err(|e| msg("read", &e))? {
        let mut e = e.map_err(|e| msg("read", &e))?;
        let path = e
            .path()
            .map_err(|e| msg("read", &e))?
            .to_string_lossy()
            .into_owned();
        if !wanted(&o.names, &path) {
            continue;
        }
        if o.to_stdout {
            if e.header().entry_type().is_file() {
                io::copy(&mut e, &mut out).map_err(|e| msg(&path, &e))?;
            }
            continue;
        }
        if o.verbose {
            println!("{path}");
        }
        if let Err(m) = unpack(&mut e, &base, &path) {
            eprintln!("tar: {m}");
            failed = true;
        }
    }
    if failed {
        return Err("Exiting with failure status due to previous errors".into());
    }
    Ok(())
}

/// Is member `path` one of `names` (or under one)? Every member is when none is named.
fn wanted(names: &[String], path: &str) -> bool {
    let path = path.trim_end_matches('/');
    names.is_empty()
        || names.iter().any(|n| {
            let n = n.trim_end_matches('/');
            path == n || path.starts_with(&format!("{n}/"))
        })
}

/// A member name as a relative path that stays inside the target (`None`: it does not).
/// An empty path is the target itself.
pub(super) fn inside(name: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in Path::new(name).components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Refuses `rel` when one of its directories inside `base` is a symbolic link.
fn no_link_on_the_way(base: &Path, rel: &Path, name: &str) -> Result<(), String> {
    let mut at = base.to_path_buf();
    let parents: Vec<_> = rel
        .parent()
        .map(|p| p.components().collect())
        .unwrap_or_default();
    for c in parents {
        at.push(c);
        if fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(format!(
                "{name}: Cannot open: a directory on its path is a symbolic link"
            ));
        }
    }
    Ok(())
}

/// Removes what is at `dst` unless it is a directory (tar replaces files and links).
fn make_room(dst: &Path, name: &str) -> Result<(), String> {
    match fs::symlink_metadata(dst) {
        Ok(m) if m.is_dir() => Err(format!("{name}: Cannot open: Is a directory")),
        Ok(_) => fs::remove_file(dst)
            .map_err(|e| format!("{name}: Cannot unlink: {}", crate::io_message(&e))),
        Err(_) => Ok(()),
    }
}

fn unpack<R: Read>(e: &mut Entry<'_, R>, base: &Path, name: &str) -> Result<(), String> {
    let rel = inside(name).ok_or_else(|| {
        format!("{name}: Member name contains '..' or is absolute; not extracted")
    })?;
    if rel.as_os_str().is_empty() {
        return Ok(());
    }
    no_link_on_the_way(base, &rel, name)?;
    let dst = base.join(&rel);
    let open = |e: io::Error| format!("{name}: Cannot open: {}", crate::io_message(&e));
    let kind = e.header().entry_type();
    if kind.is_dir() {
        return fs::create_dir_all(&dst)
            .map_err(|e| format!("{name}: Cannot mkdir: {}", crate::io_message(&e)));
    }
    if let Some(parent) = dst.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| format!("{name}: Cannot mkdir: {}", crate::io_message(&e)))?;
    }
    match kind {
        EntryType::Regular | EntryType::Continuous => {
            make_room(&dst, name)?;
            let mut f = File::create(&dst).map_err(open)?;
            io::copy(e, &mut f).map_err(|e| msg(name, &e))?;
            if let Ok(t) = e.header().mtime() {
                // Not every filesystem keeps times; the content is what matters.
                let _ = f.set_modified(UNIX_EPOCH + Duration::from_secs(t));
            }
            Ok(())
        }
        EntryType::Symlink => {
            let target = link_name(e, name)?;
            make_room(&dst, name)?;
            uu_ln::symlink(&target, &dst).map_err(open)
        }
        EntryType::Link => {
            let target = link_name(e, name)?;
            let src = inside(&target.to_string_lossy())
                .filter(|p| !p.as_os_str().is_empty())
                .ok_or_else(|| {
                    format!("{name}: hard link target leaves the archive; not extracted")
                })?;
            make_room(&dst, name)?;
            fs::hard_link(base.join(src), &dst).map_err(open)
        }
        _ => {
            eprintln!("tar: {name}: unsupported entry type; skipped");
            Ok(())
        }
    }
}

fn link_name<R: Read>(e: &Entry<'_, R>, name: &str) -> Result<PathBuf, String> {
    match e.link_name() {
        Ok(Some(t)) => Ok(t.into_owned()),
        Ok(None) => Err(format!("{name}: link without a target")),
        Err(err) => Err(msg(name, &err)),
    }
}

#[cfg(test)]
mod tests {
    use super::inside;
    use std::path::PathBuf;

    #[test]
    fn names_that_leave_are_refused() {
        assert_eq!(inside("a/b"), Some(PathBuf::from("a/b")));
        assert_eq!(inside("./a/"), Some(PathBuf::from("a")));
        assert_eq!(inside("."), Some(PathBuf::new()));
        assert_eq!(inside("../x"), None);
        assert_eq!(inside("a/../../x"), None);
        assert_eq!(inside("/etc/passwd"), None);
    }
}
