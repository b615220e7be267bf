//! `tar -c`: walks the named files and writes one header each, built here rather than by
//! the `tar` crate's `append_path` (whose header filling is unimplemented on wasm32 and
//! panics). Entries are regular files, directories (with a trailing `/`, children in name
//! order) and symbolic links (stored, not followed); owner `root`, the file's mtime.
//! WASI shows no permission bits, so on WASI files are stored 0644 and directories 0755
//! (natively, their real modes). Member names lose a leading `/` and anything up to a
//! last `..`, as GNU tar does, so an archive never points outside where it is unpacked.

use std::fs::{self, File, Metadata};
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use std::time::UNIX_EPOCH;

use flate2::Compression;
use flate2::write::GzEncoder;
use tar::{Builder, EntryType, Header};

use super::{Opts, msg};

/// Writes the archive of `o.names` (to `o.file` or stdout). `Err` is the message of the
/// first failure that stops it; unreadable members are reported and make the status 2.
pub(super) fn create(o: &Opts) -> Result<(), String> {
    let to_stdout = matches!(o.file.as_deref(), None | Some("-"));
    let raw: Box<dyn Write> = match o.file.as_deref() {
        None | Some("-") => Box::new(io::stdout().lock()),
        Some(f) => Box::new(File::create(f).map_err(|e| msg(f, &e))?),
    };
    let out: Box<dyn Write> = if o.gzip {
        Box::new(GzEncoder::new(raw, Compression::default()))
    } else {
        raw
    };
    let mut p = Packer {
        b: Builder::new(out),
        verbose: o.verbose,
        // GNU tar lists to stderr when the archive itself goes to stdout.
        list_to_stderr: to_stdout,
        archive: o.file.as_deref().filter(|_| !to_stdout).map(lexical),
        failed: false,
    };
    for n in &o.names {
        let name = member_name(n);
        p.add(Path::new(n), &name)?;
    }
    let out = p.b.into_inner().map_err(|e| msg("write", &e))?;
    drop(out);
    if p.failed {
        return Err("Exiting with failure status due to previous errors".into());
    }
    Ok(())
}

struct Packer {
    b: Builder<Box<dyn Write>>,
    verbose: bool,
    list_to_stderr: bool,
    /// The archive's own path (lexical), never archived into itself.
    archive: Option<PathBuf>,
    failed: bool,
}

impl Packer {
    /// Adds `path` as member `name` (a directory with everything under it).
    fn add(&mut self, path: &Path, name: &str) -> Result<(), String> {
        let shown = path.display().to_string();
        let m = match fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("tar: {}", msg(&shown, &e));
                self.failed = true;
                return Ok(());
            }
        };
        if self.archive.as_deref() == Some(lexical(&shown).as_path()) {
            eprintln!("tar: {shown}: file is the archive; not dumped");
            return Ok(());
        }
        let ft = m.file_type();
        let member = if ft.is_dir() && !name.ends_with('/') {
            format!("{name}/")
        } else {
            name.to_owned()
        };
        if self.verbose {
            if self.list_to_stderr {
                eprintln!("{member}");
            } else {
                println!("{member}");
            }
        }
        let write = |e: io::Error| msg("write", &e);
        if ft.is_symlink() {
            let target = fs::read_link(path).map_err(|e| msg(&shown, &e))?;
            let mut h = header(&m, EntryType::Symlink, 0o777, 0);
            self.b.append_link(&mut h, &member, target).map_err(write)?;
        } else if ft.is_dir() {
            let mut h = header(&m, EntryType::Directory, mode(&m, 0o755), 0);
            self.b
                .append_data(&mut h, &member, io::empty())
                .map_err(write)?;
            let mut children: Vec<_> = match fs::read_dir(path) {
                Ok(rd) => rd.filter_map(Result::ok).map(|e| e.file_name()).collect(),
                Err(e) => {
                    eprintln!("tar: {}", msg(&shown, &e));
                    self.failed = true;
                    return Ok(());
                }
            };
            children.sort();
            for c in children {
                let c = c.to_string_lossy().into_owned();
                self.add(&path.join(&c), &format!("{member}{c}"))?;
            }
        } else if ft.is_file() {
            let f = match File::open(path) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("tar: {}", msg(&shown, &e));
                    self.failed = true;
                    return Ok(());
                }
            };
            let mut h = header(&m, EntryType::Regular, mode(&m, 0o644), m.len());
            self.b.append_data(&mut h, &member, f).map_err(write)?;
        } else {
            eprintln!("tar: {shown}: file type not archived; ignored");
        }
        Ok(())
    }
}

/// A GNU header for a member with these metadata (owner root).
fn header(m: &Metadata, kind: EntryType, mode: u32, size: u64) -> Header {
    let mut h = Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_uid(0);
    h.set_gid(0);
    // Both names fit a GNU header: these cannot fail.
    let _ = h.set_username("root");
    let _ = h.set_groupname("root");
    let mtime = m
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    h.set_mtime(mtime);
    h
}

/// The permission bits to store: the file's own where the platform shows them.
#[cfg(unix)]
fn mode(m: &Metadata, _default: u32) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    m.permissions().mode() & 0o7777
}

#[cfg(not(unix))]
fn mode(_m: &Metadata, default: u32) -> u32 {
    default
}

/// The member name for operand `n`: without a leading `/` or anything up to the last
/// `..` (said on stderr, as GNU tar does); `.` when nothing is left.
pub(super) fn member_name(n: &str) -> String {
    let parts: Vec<Component<'_>> = Path::new(n).components().collect();
    let start = parts
        .iter()
        .rposition(|c| matches!(c, Component::ParentDir))
        .map_or(0, |i| i + 1);
    let kept: Vec<String> = parts
        .iter()
        .skip(start)
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if !kept.is_empty() {
        match n.rfind("../") {
            Some(i) if start > 0 => {
                let prefix = n.get(..i + 3).unwrap_or_default();
                eprintln!("tar: Removing leading `{prefix}' from member names");
            }
            _ if n.starts_with('/') => eprintln!("tar: Removing leading `/' from member names"),
            _ => {}
        }
    }
    if kept.is_empty() {
        ".".into()
    } else {
        kept.join("/")
    }
}

/// `path` normalised lexically (`.` and `..` resolved as written), for comparing names.
fn lexical(path: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for c in Path::new(path).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::member_name;

    #[test]
    fn member_names_never_climb() {
        assert_eq!(member_name("a"), "a");
        assert_eq!(member_name("a/b/"), "a/b");
        assert_eq!(member_name("/etc/passwd"), "etc/passwd");
        assert_eq!(member_name("/etc/../../x.txt"), "x.txt");
        assert_eq!(member_name("./a"), "a");
        assert_eq!(member_name("/"), ".");
        assert_eq!(member_name(".."), ".");
    }
}
