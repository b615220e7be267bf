//! `du`: estimate file space usage.
//!
//! WASI exposes no block counts, so usage is estimated as the file size
//! rounded up to 4 KiB blocks (directories count one block); `-b` /
//! `--apparent-size` use byte sizes instead. Supports `-a`, `-s`, `-c`, `-h`,
//! `-k`, `-m`, `-b`, `-d N`/`--max-depth=N`, `--apparent-size`. Children are
//! visited sorted by name; hard links are not deduplicated.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::path::Path;

const BLOCK: u64 = 4096;

/// Output unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Kib,
    Mib,
    Human,
}

/// Parsed command line.
#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    pub all: bool,
    pub summarize: bool,
    pub total: bool,
    pub apparent: bool,
    pub unit: Unit,
    pub max_depth: Option<usize>,
    pub paths: Vec<String>,
}

/// Parse du's arguments (without argv\[0\]).
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        all: false,
        summarize: false,
        total: false,
        apparent: false,
        unit: Unit::Kib,
        max_depth: None,
        paths: Vec::new(),
    };
    let mut i = 0;
    let depth = |v: &str| {
        v.parse::<usize>()
            .map_err(|_| format!("invalid maximum depth '{v}'"))
    };
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            o.paths.extend(args[i..].iter().cloned());
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            match long.split_once('=') {
                Some(("max-depth", v)) => o.max_depth = Some(depth(v)?),
                _ => match long {
                    "all" => o.all = true,
                    "summarize" => o.summarize = true,
                    "total" => o.total = true,
                    "human-readable" => o.unit = Unit::Human,
                    "apparent-size" => o.apparent = true,
                    "bytes" => {
                        o.apparent = true;
                        o.unit = Unit::Bytes;
                    }
                    "max-depth" => {
                        let v = args
                            .get(i)
                            .ok_or("option '--max-depth' requires an argument")?;
                        i += 1;
                        o.max_depth = Some(depth(v)?);
                    }
                    _ => return Err(format!("unrecognized option '{a}'")),
                },
            }
            continue;
        }
        if a.len() > 1 && a.starts_with('-') {
            let chars: Vec<char> = a[1..].chars().collect();
            for (k, c) in chars.iter().enumerate() {
                match c {
                    'a' => o.all = true,
                    's' => o.summarize = true,
                    'c' => o.total = true,
                    'h' => o.unit = Unit::Human,
                    'k' => o.unit = Unit::Kib,
                    'm' => o.unit = Unit::Mib,
                    'b' => {
                        o.apparent = true;
                        o.unit = Unit::Bytes;
                    }
                    'x' | 'l' | 'L' | 'P' | 'H' => {}
                    'd' => {
                        let rest: String = chars[k + 1..].iter().collect();
                        let v = if rest.is_empty() {
                            let v = args.get(i).ok_or("option requires an argument -- 'd'")?;
                            i += 1;
                            v.clone()
                        } else {
                            rest
                        };
                        o.max_depth = Some(depth(&v)?);
                        break;
                    }
                    _ => return Err(format!("invalid option -- '{c}'")),
                }
            }
            continue;
        }
        o.paths.push(a.clone());
    }
    if o.paths.is_empty() {
        o.paths.push(".".into());
    }
    if o.summarize {
        o.max_depth = Some(0);
    }
    Ok(o)
}

/// Format a byte count in the chosen unit (GNU rounds up).
pub fn format_size(bytes: u64, unit: Unit) -> String {
    match unit {
        Unit::Bytes => bytes.to_string(),
        Unit::Kib => bytes.div_ceil(1024).to_string(),
        Unit::Mib => bytes.div_ceil(1024 * 1024).to_string(),
        Unit::Human => {
            if bytes < 1024 {
                return bytes.to_string();
            }
            let units = ["K", "M", "G", "T", "P"];
            let mut value = bytes as f64 / 1024.0;
            let mut idx = 0;
            while value >= 1024.0 && idx + 1 < units.len() {
                value /= 1024.0;
                idx += 1;
            }
            if value < 10.0 {
                let rounded = (value * 10.0).ceil() / 10.0;
                if rounded >= 10.0 {
                    format!("{}{}", rounded.ceil() as u64, units[idx])
                } else {
                    format!("{rounded:.1}{}", units[idx])
                }
            } else {
                format!("{}{}", value.ceil() as u64, units[idx])
            }
        }
    }
}

struct Walker<'a, W: Write> {
    o: &'a Options,
    out: W,
    status: i32,
}

impl<W: Write> Walker<'_, W> {
    fn usage_of(&self, meta: &fs::Metadata) -> u64 {
        if self.o.apparent {
            meta.len()
        } else if meta.is_dir() {
            BLOCK
        } else {
            meta.len().div_ceil(BLOCK) * BLOCK
        }
    }

    fn emit(&mut self, size: u64, name: &str) -> io::Result<()> {
        writeln!(self.out, "{}\t{name}", format_size(size, self.o.unit))
    }

    fn walk(&mut self, path: &Path, name: &str, depth: usize) -> io::Result<u64> {
        let meta = match fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("du: cannot access '{name}': {}", describe(&e));
                self.status = 1;
                return Ok(0);
            }
        };
        let mut size = self.usage_of(&meta);
        let shown = self.o.max_depth.is_none_or(|m| depth <= m);
        if meta.is_dir() {
            match fs::read_dir(path) {
                Ok(rd) => {
                    let mut names: Vec<OsString> =
                        rd.filter_map(Result::ok).map(|e| e.file_name()).collect();
                    names.sort();
                    for child in names {
                        let child_s = child.to_string_lossy();
                        let child_name = if name.ends_with('/') {
                            format!("{name}{child_s}")
                        } else {
                            format!("{name}/{child_s}")
                        };
                        size += self.walk(&path.join(&child), &child_name, depth + 1)?;
                    }
                }
                Err(e) => {
                    eprintln!("du: cannot read directory '{name}': {}", describe(&e));
                    self.status = 1;
                }
            }
            if shown {
                self.emit(size, name)?;
            }
        } else if shown && (self.o.all || depth == 0) {
            self.emit(size, name)?;
        }
        Ok(size)
    }
}

fn describe(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "No such file or directory".into(),
        io::ErrorKind::PermissionDenied => "Permission denied".into(),
        _ => e.to_string(),
    }
}

/// Run du, writing to `out`.
pub fn run<W: Write>(args: &[String], out: W) -> i32 {
    let o = match parse_args(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("du: {e}");
            return 1;
        }
    };
    let mut w = Walker {
        o: &o,
        out,
        status: 0,
    };
    let mut grand = 0;
    for p in &o.paths {
        match w.walk(Path::new(p), p, 0) {
            Ok(s) => grand += s,
            Err(_) => return 1,
        }
    }
    if o.total && w.emit(grand, "total").is_err() {
        return 1;
    }
    if w.out.flush().is_err() {
        return 1;
    }
    w.status
}

/// Entry point of `du`.
pub fn main(args: Vec<OsString>) -> i32 {
    let args = crate::string_args(&args);
    run(&args, io::BufWriter::new(io::stdout().lock()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_and_formats() {
        let o = parse_args(&args(&["-sh", "a"])).expect("parse");
        assert_eq!(
            (o.summarize, o.unit, o.max_depth),
            (true, Unit::Human, Some(0))
        );
        let o = parse_args(&args(&["-d1", "--apparent-size"])).expect("parse");
        assert_eq!((o.max_depth, o.apparent), (Some(1), true));
        assert_eq!(o.paths, vec!["."]);
        assert!(parse_args(&args(&["-z"])).is_err());
        assert_eq!(format_size(4096, Unit::Kib), "4");
        assert_eq!(format_size(1536 * 1024, Unit::Human), "1.5M");
        assert_eq!(format_size(20 * 1024, Unit::Human), "20K");
        assert_eq!(format_size(500, Unit::Human), "500");
    }

    #[test]
    fn walks_tree() {
        let d = std::env::temp_dir().join(format!("tbdu-{}", std::process::id()));
        fs::create_dir_all(d.join("sub")).expect("mkdir");
        fs::write(d.join("sub/f"), vec![0u8; 5000]).expect("write");
        let root = d.to_string_lossy().into_owned();
        let mut out = Vec::new();
        assert_eq!(run(&args(&["-b", "-a", &root]), &mut out), 0);
        let text = String::from_utf8(out).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("5000\t") && lines[0].ends_with("/sub/f"));
        assert!(lines[2].ends_with(&root));
        let mut out = Vec::new();
        run(&args(&["-s", &root]), &mut out);
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            format!("16\t{root}\n")
        );
        let _ = fs::remove_dir_all(&d);
    }
}
